#!/usr/bin/env bash
# Figures 17 (issue 23): compaction by hand, one compact() call over a
# stream's released events against 0.2's compact(), one batch a call.
#
# The events: a database of its own (bench_cbh_tpl, not served by the
# worker) with two global streams of N events each over 1,000 keys, seqs
# in order, max_release_batch => 10000, no consumer: "c" without a
# retention (compact() only counts them per key), "g" with retention =>
# '0 s' (it counts and deletes them).  Every event is released (release()
# until it returns 0, a commit each), then VACUUM ANALYZE and CHECKPOINT.
# N: quick 200,000, full 2,000,000 (CBH_EVENTS overrides).
#
# The sides, each on a fresh CREATE DATABASE ... TEMPLATE copy: ours, one
# SELECT ordered_events.compact('<stream>'), one statement, one
# transaction; baseline, what 0.2's compact() did per call, one batch of
# at most 1,000 events: ordered_events.compact_stream() (the worker's
# batch, unchanged), a COMMIT after each, in one DO block until "more" is
# false; that is how many calls a pg_cron job would need, one a minute.
# synchronous_commit off, psql's \timing.  Then the check that every
# event was counted in key_counters (and, for "g", deleted), and that the
# lane's counted_end reached range_end.  Rounds: lib.sh's ROUNDS (quick
# 3, full 5; CBH_ROUNDS overrides), the sides alternating, medians.  The
# figure: ms for all the stream's events; ratio ours / baseline, target
# <= 1.5 (one transaction walks what its earlier batches left; chosen
# before the first run).  CBH_BATCH=n runs ours as compact_due(stream_id,
# n), the function behind compact(), in batches of n events instead of
# 100,000; CBH_STEPS=0 leaves out 17c and 17d.
#
# Not in bench/run's default list; run it by name:
#   unshare -m --propagation private bench/private bench/run [--full] bench/compact_by_hand.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then N=2000000; else N=200000; fi
N=${CBH_EVENTS:-$N}
ROUNDS=${CBH_ROUNDS:-$ROUNDS}
KEYS=1000
TPL=bench_cbh_tpl
RUN=bench_cbh_run

cleanup() {
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists --force "$RUN" || true
    [ -n "${CBH_KEEP_TEMPLATE:-}" ] ||
        PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists --force "$TPL" || true
}
trap cleanup EXIT
set_worker off

if [ -z "${CBH_KEEP_TEMPLATE:-}" ] || ! psql -X -Atq -d "$TPL" -c 'SELECT 1' >/dev/null 2>&1; then
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists --force "$TPL"
    createdb "$TPL"
    psql -X -q -v ON_ERROR_STOP=1 -d "$TPL" >/dev/null <<SQL
CREATE EXTENSION ordered_events;
SELECT ordered_events.create_stream('c', max_release_batch => 10000);
SELECT ordered_events.create_stream('g', retention => '0 s', max_release_batch => 10000);
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT s, g, 'k' || (g % $KEYS), '{"n": 1}' FROM generate_series(1, $N) g, unnest('{c,g}'::text[]) s;
SQL
    psql -X -q -v ON_ERROR_STOP=1 -d "$TPL" >/dev/null <<'SQL'
DO $$
BEGIN
    WHILE ordered_events.release('c') > 0 LOOP COMMIT; END LOOP;
    WHILE ordered_events.release('g') > 0 LOOP COMMIT; END LOOP;
END $$;
VACUUM ANALYZE;
CHECKPOINT;
SQL
fi
released=$(psql -X -Atq -d "$TPL" -c "SELECT string_agg(released_count::text, ' ' ORDER BY stream)
                                        FROM ordered_events.stream_stats")
[ "$released" = "$N $N" ] ||
    { echo "compact_by_hand.sh: expected $N events released in c and g, got $released" >&2; exit 1; }

# compact SIDE STREAM: "ms calls" to compact the stream in a copy of the template
compact() {
    local sql ms check want calls
    if [ "$1" = ours ]; then
        sql="SELECT ordered_events.compact('$2')"
        [ -z "${CBH_BATCH:-}" ] ||
            sql="SELECT ordered_events.compact_due(ordered_events.stream_id('$2'), $CBH_BATCH)"
    else
        sql="DO \$\$
        DECLARE
            id integer := ordered_events.stream_id('$2');
            r record;
            calls integer := 0;
        BEGIN
            LOOP
                SELECT * INTO r FROM ordered_events.compact_stream(id);
                calls := calls + 1;
                COMMIT;
                EXIT WHEN NOT r.more;
            END LOOP;
            RAISE NOTICE 'calls %', calls;
        END \$\$"
    fi
    createdb -T "$TPL" "$RUN"
    out=$(PGOPTIONS="-c synchronous_commit=off" psql -X -q -v ON_ERROR_STOP=1 -d "$RUN" \
              -c '\timing on' -c "$sql" 2>&1)
    ms=$(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | tail -1)
    calls=$(sed -n 's/.*NOTICE:  calls \([0-9]*\).*/\1/p' <<<"$out")
    check=$(psql -X -Atq -d "$RUN" -c "
        SELECT (SELECT count(*) FROM ordered_events.event_store e
                  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$2')
               || ' ' || (SELECT coalesce(sum(k.released_count), 0) FROM ordered_events.key_counters k
                            JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$2')
               || ' ' || (SELECT p.counted_end = p.range_end FROM ordered_events.progress p
                            JOIN ordered_events.stream_def d USING (stream_id)
                           WHERE d.stream = '$2' AND p.lane = '')")
    [ "$2" = g ] && want="0 $N true" || want="$N $N true"
    [ "$check" = "$want" ] ||
        { echo "compact_by_hand.sh: $1 on $2: left, counted, counted_end = range_end: $check (expected $want)" >&2; exit 1; }
    dropdb "$RUN"
    echo "$ms ${calls:-1}"
}

for stream in c g; do
    ours=() base=() calls=1
    for r in $(seq "$ROUNDS"); do
        [ $((r % 2)) -eq 1 ] && sides="ours base" || sides="base ours"
        for side in $sides; do
            res=$(compact $side $stream)    # a failed check ends the script here
            read -r ms n <<<"$res"
            echo "    $stream $side $ms ms, $n calls"
            if [ $side = ours ]; then ours+=("$ms"); else base+=("$ms"); calls=$n; fi
        done
    done
    if [ $stream = c ]; then
        what="17a compact() $N released events, counting"
    else
        what="17b compact() $N released events, retention 0 s"
    fi
    report "$what (0.2: $calls calls)" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${base[@]}" | median)" "ms" "<=" 1.5 \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${base[@]}" | spread)"
done

[ "${CBH_STEPS:-1}" != 0 ] || exit 0

# --- 17c, 17d: or count in the release step itself? ---------------------------
# What per-key counting would add to each release step if the step counted
# what it releases (src/lane.c visits each released event): a release step
# alone, against the same step followed, in its transaction, by the least
# such counting can do, one upsert into key_counters of the step's keys with
# their counts and last seqs (made from the seqs, without reading the
# events back; the step would also keep counted_end in the progress row it
# writes anyway, not counted here).  A global stream over 1,000 keys, each
# step preceded by the ingest of its events (committed, not timed); the
# server's clock around the step and its commit, summed over the steps.
# 17c: 2,000 steps of one event (the worker's steady state under
# single-row ingest); 17d: 20 steps of 10,000 events (a backlog).  Sides
# alternating, ROUNDS rounds, medians.  ratio counting / release alone,
# target <= 1.1 (what we would accept on the release path; chosen before
# the first run).
step_ms() {   # COUNTING(true|false) STEPS SIZE -> ms of the steps
    local s="rc_$RANDOM$RANDOM"
    psql_bench -c "SELECT ordered_events.create_stream('$s', max_release_batch => $3)" >/dev/null
    PGOPTIONS="-c synchronous_commit=off" psql_bench -Atc "DO \$\$
    DECLARE
        id integer := ordered_events.stream_id('$s');
        total interval := '0';
        t0 timestamptz;
        lo bigint;
    BEGIN
        FOR i IN 0 .. $2 - 1 LOOP
            lo := i::bigint * $3 + 1;
            INSERT INTO ordered_events.inbox (stream, seq, key)
            SELECT '$s', g, 'k' || (g % $KEYS) FROM generate_series(lo, lo + $3 - 1) g;
            COMMIT;
            t0 := clock_timestamp();
            PERFORM ordered_events.release('$s');
            IF $1 THEN
                INSERT INTO ordered_events.key_counters AS k
                       (stream_id, key, released_count, last_released_seq)
                SELECT id, 'k' || (g % $KEYS), count(*), max(g)
                  FROM generate_series(lo, lo + $3 - 1) g GROUP BY 2
                ON CONFLICT ON CONSTRAINT key_counters_pkey DO UPDATE
                   SET released_count = k.released_count + excluded.released_count,
                       last_released_seq = greatest(k.last_released_seq, excluded.last_released_seq);
            END IF;
            COMMIT;
            total := total + (clock_timestamp() - t0);
        END LOOP;
        RAISE NOTICE 'ms %', round(extract(epoch FROM total) * 1000, 1);
    END \$\$" 2>&1 | sed -n 's/.*NOTICE:  ms \([0-9.]*\).*/\1/p'
    local released
    released=$(psql_bench -Atc "SELECT released_count FROM ordered_events.stream_stats WHERE stream = '$s'")
    [ "$released" = $(($2 * $3)) ] ||
        { echo "compact_by_hand.sh: $s released $released, expected $(($2 * $3))" >&2; exit 1; }
    psql_bench -c "SELECT ordered_events.drop_stream('$s')" -c "CHECKPOINT" >/dev/null
}

for shape in "2000 1" "20 10000"; do
    read -r steps size <<<"$shape"
    ours=() base=()
    for r in $(seq "$ROUNDS"); do
        [ $((r % 2)) -eq 1 ] && sides="true false" || sides="false true"
        for counting in $sides; do
            ms=$(step_ms $counting $steps $size)
            echo "    steps of $size, counting $counting: $ms ms"
            if [ $counting = true ]; then ours+=("$ms"); else base+=("$ms"); fi
        done
    done
    [ "$size" = 1 ] && fig=17c || fig=17d
    report "$fig $steps release steps of $size, counting in the step vs not" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${base[@]}" | median)" "ms" "<=" 1.1 \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${base[@]}" | spread)"
done
