#!/usr/bin/env bash
# Figures 15 (issue 21): compaction in C against the PL/pgSQL compaction of
# 0.2, in the same run.
#
# The events: a database of its own (bench_cmp_tpl, not served by the
# worker) with two streams, retention => '0 s', max_release_batch =>
# 10000, no consumer: "g" global, N events, keys from 1,000, seqs in
# order; "k" per-key, N / 1,000 seqs for each of 1,000 keys.  Every event
# is released (release() until it returns 0), then VACUUM ANALYZE and
# CHECKPOINT.  N: quick 50,000, full 200,000 (COMPACT_EVENTS overrides).
#
# The sides: ours, ordered_events.compact_stream() (src/compaction.c);
# baseline, the compact_stream() of 0.2, made in that database as
# bench.compact_stream() from the text of the released script
# ordered_events--0.1--0.2.sql, with the type it uses (compacted_run,
# dropped by 0.3) as bench.compacted_run: only those two names are
# rewritten, nothing of its logic.
#
# A measurement: CREATE DATABASE ... TEMPLATE bench_cmp_tpl (so both sides
# start from the same events, tables, statistics and visibility map), then
# one DO block calls the side's compact_stream() for the stream until
# "more" is false, one call a transaction (a COMMIT after each, as the
# worker does), synchronous_commit off; psql's \timing of the block; then
# the check that every event of the stream was deleted (and, for "g",
# counted in key_counters), and the database is dropped.  A measurement
# takes a few seconds, so there are more rounds than lib.sh's ROUNDS: 9
# (quick 3; COMPACT_ROUNDS overrides), the sides alternating (and which
# goes first), medians.  The figure:
# events deleted per second (for "g" each was also counted); ratio ours /
# baseline, target >= 1 (the port to C should be no slower), chosen before
# the first run.
#
# Not in bench/run's default list; run it by name:
#   unshare -m --propagation private bench/private bench/run [--full] bench/compaction.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then N=200000; else N=50000; fi
N=${COMPACT_EVENTS:-$N}
if [ "${BENCH_MODE:-quick}" = full ]; then ROUNDS=9; fi
ROUNDS=${COMPACT_ROUNDS:-$ROUNDS}
KEYS=1000
TPL=bench_cmp_tpl
RUN=bench_cmp_run
released_script=$(dirname "$0")/../ordered_events--0.1--0.2.sql

cleanup() {
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists --force "$RUN" || true
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists --force "$TPL" || true
}
trap cleanup EXIT
set_worker off
cleanup

# The 0.2 compaction, from its type's comment line to the function's
# COMMENT, under the names of schema bench.
baseline_sql() {
    sed -n '/^-- A release run that compact_stream() deletes/,/^COMMENT ON FUNCTION ordered_events.compact_stream(integer) IS/{p}' \
        "$released_script" |
        sed -e 's/ordered_events\.compacted_run/bench.compacted_run/g' \
            -e 's/FUNCTION ordered_events\.compact_stream(/FUNCTION bench.compact_stream(/g'
    echo "    'The compact_stream() of 0.2, for bench/compaction.sh';"
}
grep -q 'CREATE FUNCTION bench.compact_stream' <(baseline_sql) ||
    { echo "compaction.sh: no compact_stream() in $released_script" >&2; exit 1; }

createdb "$TPL"
{
    echo "CREATE EXTENSION ordered_events;"
    echo "CREATE SCHEMA bench;"
    baseline_sql
    cat <<SQL
SELECT ordered_events.create_stream('g', retention => '0 s', max_release_batch => 10000);
SELECT ordered_events.create_stream('k', sequencing => 'per_key', retention => '0 s',
                                    max_release_batch => 10000);
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'g', g, 'k' || (g % $KEYS), '{"n": 1}' FROM generate_series(1, $N) g;
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'k', s, 'k' || k, '{"n": 1}'
  FROM generate_series(1, $N / $KEYS) s, generate_series(1, $KEYS) k;
SQL
} | psql -X -q -v ON_ERROR_STOP=1 -d "$TPL" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d "$TPL" >/dev/null <<'SQL'
DO $$
BEGIN
    WHILE ordered_events.release('g') > 0 LOOP COMMIT; END LOOP;
    WHILE ordered_events.release('k') > 0 LOOP COMMIT; END LOOP;
END $$;
VACUUM ANALYZE;
CHECKPOINT;
SQL
released=$(psql -X -Atq -d "$TPL" -c "SELECT string_agg(n::text, ' ' ORDER BY stream)
                                        FROM (SELECT stream, count(*) AS n FROM ordered_events.released
                                               GROUP BY stream) r")
[ "$released" = "$((N)) $((N / KEYS * KEYS))" ] ||
    { echo "compaction.sh: expected $N events released a stream, got $released" >&2; exit 1; }

# compact SIDE STREAM: ms to compact the stream in a copy of the template
compact() {
    local fn=ordered_events.compact_stream ms check want
    [ "$1" = ours ] || fn=bench.compact_stream
    createdb -T "$TPL" "$RUN"
    ms=$(PGOPTIONS="-c synchronous_commit=off" psql -X -q -v ON_ERROR_STOP=1 -d "$RUN" \
             -c '\timing on' -c "DO \$\$
        DECLARE
            id integer := ordered_events.stream_id('$2');
            r record;
        BEGIN
            LOOP
                SELECT * INTO r FROM $fn(id);
                COMMIT;
                EXIT WHEN NOT r.more;
            END LOOP;
        END \$\$" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
    check=$(psql -X -Atq -d "$RUN" -c "
        SELECT (SELECT count(*) FROM ordered_events.event_store e
                  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$2')
               || ' ' || (SELECT coalesce(sum(t.events), 0) FROM ordered_events.deleted_totals t
                            JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$2')
               || ' ' || (SELECT coalesce(sum(k.released_count), 0) FROM ordered_events.key_counters k
                            JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$2')")
    # key_counters counts a global stream's released events (a per-key
    # stream's are its lanes' own progress)
    [ "$2" = g ] && want="0 $N $N" || want="0 $N 0"
    [ "$check" = "$want" ] ||
        { echo "compaction.sh: $1 on $2: left, deleted, counted: $check (expected $want)" >&2; exit 1; }
    dropdb "$RUN"
    echo "$ms"
}

rate() { awk -v n="$N" -v ms="$1" 'BEGIN {printf "%.0f\n", n / ms * 1000}'; }

for stream in g k; do
    ours=() base=()
    for r in $(seq "$ROUNDS"); do
        # the side that goes first alternates
        [ $((r % 2)) -eq 1 ] && sides="ours base" || sides="base ours"
        for side in $sides; do
            ms=$(compact $side $stream)    # a failed check ends the script here
            if [ $side = ours ]; then ours+=("$(rate "$ms")"); else base+=("$(rate "$ms")"); fi
        done
    done
    if [ $stream = g ]; then what="15a compact $N events, global stream"; else what="15b compact $N events, per-key stream"; fi
    report "$what" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${base[@]}" | median)" "events/s" ">=" 1 \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${base[@]}" | spread)"
done
