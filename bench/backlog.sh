#!/usr/bin/env bash
# Figures 19: what monitoring costs while a stream holds a backlog of
# pending events behind one missing seq (issue 23, DESIGN.md 8.4).  Each
# query with N events pending against the same query with 10,000 pending,
# both measured in this run: ratio <= 2, and <= 10 ms at N.  N: quick
# 1,000,000, full 10,000,000; BACKLOG_EVENTS overrides either.
#
# Not in bench/run's default list (loading and the drain's compaction take
# minutes); run it by name:
#   unshare -m --propagation private bench/private bench/run [--full] bench/backlog.sh
#
# Two databases in the bench cluster hold the same streams, one with N
# events pending (bench_backlog) and one with 10,000 (bench_backlog_base);
# only the pending backlog differs, the queries name the same streams:
#   wide       a global stream: seqs 1..N+5 written, seq 5 missing, so
#              1..4 are released and N events (6..N+5) are pending behind 5; keys
#              'k' || (seq % 1000).
#   wide_keys  a per-key stream of 1,000 keys: k1..k999 have seqs 1..10,
#              all released; k0 has seq 1 and 3..P+2, P = N / 10 (quick
#              100,000, full 1,000,000; BACKLOG_KEY_EVENTS overrides; 1,000
#              on the 10,000 side), so P events are pending behind its
#              missing seq 2.  N / 10 keeps the load time of the full run
#              reasonable; the two sides differ by the same factor as wide.
#   calm       a global stream of 1,000 released events, so that "every
#              stream" is more than the stuck one.
#   mon        a consumer subscribed to wide from the beginning: 4 unread.
#
# Loading, as the worker would do it: INSERT ... SELECT into
# ordered_events.inbox in chunks of 1,000,000 events, and after each chunk
# release steps: release() is called until the backlog's summary caught up
# (progress.backlog_end of the lane is above its highest seq; a step looks
# at no more than 65,536 events beyond its summary, src/backlog.c).  On code
# without the summary (no progress.backlog_end) one release() a chunk.
# Then the per-key counts of wide and calm (compaction, as the worker does
# after releasing), VACUUM ANALYZE and a checkpoint.  The load times are
# printed, the inserts apart from the release steps (BACKLOG_LOAD_ONLY=1:
# only those, the shape check and the drain, no figures).  The worker does
# not serve these databases (bench/run sets ordered_events.databases =
# bench): nothing moves while they are measured.
#
# Timing as bench/monitoring.sh: psql's \timing (from sending to the last
# row received, planning included) with the output to /dev/null, in one
# session per block after one untimed run, jit = off as docs/monitoring.md
# advises for a monitoring role.  A query is first run once at N: if that
# takes at most a second, each side runs 20 times in 4 alternating blocks of
# 10 (N, 10k, N, 10k); if longer, the N side runs as often as fits in 30 s
# (3 to 20 times, the first run included) and the 10k side 20 times.
# Medians; the machine's other work shows in the spread.
#
# After the figures, the drain: seq 5 arrives, and release() runs until all
# of wide is released; its time is printed (not a figure: it has no
# baseline here; compare it with another commit's run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then N=${BACKLOG_EVENTS:-10000000}; else N=${BACKLOG_EVENTS:-1000000}; fi
P=${BACKLOG_KEY_EVENTS:-$((N / 10))}
BASE=10000
BASE_P=$((BASE / 10))
KEYS=1000
CHUNK=1000000
BIG_DB=bench_backlog
BASE_DB=bench_backlog_base
RUNS=20
SLOW_MS=1000
SLOW_BUDGET_MS=30000
tmp=$(mktemp -d)

psql_db() { local db=$1; shift; psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }
seconds_since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a + b}'; }

# catch_up DB STREAM LANE LAST: release steps until the lane's summary
# looked at every seq up to LAST (one step without a summary)
catch_up() {
    local db=$1 stream=$2 lane=$3 last=$4
    if [ "$SUMMARY" = t ]; then
        psql_db "$db" >/dev/null <<SQL
DO \$\$
DECLARE
    steps int := 0;
BEGIN
    LOOP
        PERFORM ordered_events.release('$stream');
        COMMIT;
        steps := steps + 1;
        EXIT WHEN (SELECT p.backlog_end > $last
                     FROM ordered_events.progress p
                    WHERE p.stream_id = ordered_events.stream_id('$stream') AND p.lane = '$lane');
        IF steps > $last / 65536 + 100 THEN
            RAISE EXCEPTION 'the summary of %/% did not catch up with % in % steps', '$stream', '$lane', $last, steps;
        END IF;
    END LOOP;
END \$\$;
SQL
    else
        psql_db "$db" -c "SELECT ordered_events.release('$stream')" >/dev/null
    fi
}

# load DB EVENTS KEY_EVENTS: the shapes above
load() {
    local db=$1 n=$2 p=$3 t from to
    dropdb --if-exists "$db"
    createdb "$db"
    psql_db "$db" -c "CREATE EXTENSION ordered_events"
    SUMMARY=$(psql_db "$db" -Atc "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
        WHERE attrelid = 'ordered_events.progress'::regclass AND attname = 'backlog_end' AND NOT attisdropped)")
    psql_db "$db" >/dev/null <<SQL
SELECT ordered_events.create_stream('wide');
SELECT ordered_events.create_stream('wide_keys', sequencing => 'per_key');
SELECT ordered_events.create_stream('calm');
SELECT ordered_events.create_consumer('mon');
SELECT ordered_events.subscribe('mon', 'wide');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'calm', g, 'k' || (g % $KEYS), jsonb_build_object('n', g),
       '2026-01-01'::timestamptz + g * interval '1 ms',
       '2026-01-01'::timestamptz + g * interval '1 ms'
  FROM generate_series(1, 1000) g;
SELECT ordered_events.release('calm');
-- wide_keys: every key's seqs 1..10, but k0 only seq 1
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'wide_keys', s, 'k' || k, jsonb_build_object('n', s),
       '2026-01-01'::timestamptz + (s * $KEYS + k) * interval '1 ms',
       '2026-01-01'::timestamptz + (s * $KEYS + k) * interval '1 ms'
  FROM generate_series(1, 10) s, generate_series(0, $KEYS - 1) k
 WHERE k > 0 OR s = 1;
SELECT ordered_events.release('wide_keys');
SQL
    ins=0; rel=0
    for ((from = 1; from <= n + 5; from += CHUNK)); do
        to=$((from + CHUNK - 1)); [ "$to" -le $((n + 5)) ] || to=$((n + 5))
        t=$(date +%s.%N)
        psql_db "$db" >/dev/null <<SQL
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'wide', g, 'k' || (g % $KEYS), jsonb_build_object('n', g),
       '2026-01-01'::timestamptz + g * interval '1 ms',
       '2026-01-01'::timestamptz + g * interval '1 ms'
  FROM generate_series($from, $to) g
 WHERE g <> 5;
SQL
        ins=$(add "$ins" "$(seconds_since "$t")"); t=$(date +%s.%N)
        catch_up "$db" wide '' "$to"
        rel=$(add "$rel" "$(seconds_since "$t")")
    done
    echo "  $db: wide, $n pending: inserted in $ins s, release steps $rel s (summary: $SUMMARY)"
    ins=0; rel=0
    for ((from = 3; from <= p + 2; from += CHUNK)); do
        to=$((from + CHUNK - 1)); [ "$to" -le $((p + 2)) ] || to=$((p + 2))
        t=$(date +%s.%N)
        psql_db "$db" >/dev/null <<SQL
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'wide_keys', g, 'k0', jsonb_build_object('n', g),
       '2026-01-02'::timestamptz + g * interval '1 ms',
       '2026-01-02'::timestamptz + g * interval '1 ms'
  FROM generate_series($from, $to) g;
SQL
        ins=$(add "$ins" "$(seconds_since "$t")"); t=$(date +%s.%N)
        catch_up "$db" wide_keys k0 "$to"
        rel=$(add "$rel" "$(seconds_since "$t")")
    done
    echo "  $db: wide_keys, $p pending for k0: inserted in $ins s, release steps $rel s"
    t=$(date +%s.%N)
    psql_db "$db" >/dev/null <<SQL
-- what the worker does after releasing: count the released events per key
DO \$\$
DECLARE
    s text;
BEGIN
    FOREACH s IN ARRAY ARRAY['wide', 'calm'] LOOP
        WHILE (SELECT c.more FROM ordered_events.compact_stream(ordered_events.stream_id(s)) c)
        LOOP COMMIT; END LOOP;
    END LOOP;
END \$\$;
SQL
    psql_db "$db" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
    echo "  $db: compaction, VACUUM ANALYZE in $(seconds_since "$t") s," \
         "$(psql_db "$db" -Atc "SELECT pg_size_pretty(pg_database_size(current_database()))")"
}

# The shape is what the comment says, or the figures compare other things.
# The pending counts are counted from the events, not taken from the views
# being measured.
check_shape() {   # DB EVENTS KEY_EVENTS
    local got want
    got=$(psql_db "$1" -At <<'SQL'
SELECT concat_ws(' ',
    (SELECT string_agg(format('%s:%s/%s/%s', stream, released_count, pending_count, skipped_count), ',' ORDER BY stream)
       FROM ordered_events.stream_stats),
    (SELECT string_agg(format('%s:%s', s, (SELECT count(*) FROM ordered_events.pending p WHERE p.stream = s)), ',' ORDER BY s)
       FROM unnest(ARRAY['calm', 'wide', 'wide_keys']) s),
    format('wide:%s,wide_keys:%s', (SELECT count(*) FROM ordered_events.gaps('wide')),
           (SELECT count(*) FROM ordered_events.gaps('wide_keys'))),
    (SELECT count(*) FROM ordered_events.key_status WHERE stream = 'wide_keys' AND buffered_count > 0),
    (SELECT string_agg(format('%s/%s:%s', consumer, stream, unread_count), ',') FROM ordered_events.consumers))
SQL
)
    want="calm:1000/0/0,wide:4/$2/0,wide_keys:9991/$3/0 calm:0,wide:$2,wide_keys:$3 wide:1,wide_keys:1 1 mon/wide:4"
    if [ "$got" != "$want" ]; then
        echo "19: $1 is not the shape measured: got '$got', want '$want'" >&2
        exit 1
    fi
    echo "  $1: shape as intended ($got)"
}

# drain DB EVENTS: seq 5 of wide arrives, and release steps run until all
# of wide is released, one release() (max_release_batch, 10,000 events) a
# transaction, as the worker runs them: what releasing costs when the range
# moves through the backlog's summary; then, timed apart, the compaction
# that the worker runs after each release step
drain() {
    local db=$1 n=$2 t
    psql_db "$db" -c "SELECT ordered_events.ingest('wide', 5, 'k5')" >/dev/null
    t=$(date +%s.%N)
    psql_db "$db" >/dev/null <<SQL
DO \$\$
BEGIN
    LOOP
        PERFORM ordered_events.release('wide');
        COMMIT;
        EXIT WHEN (SELECT p.range_end > $n + 5 FROM ordered_events.progress p
                    WHERE p.stream_id = ordered_events.stream_id('wide') AND p.lane = '');
    END LOOP;
END \$\$;
SQL
    t=$(seconds_since "$t")
    echo "  $db: wide drained, $((n + 1)) events released in $t s" \
         "($(awk -v n="$n" -v t="$t" 'BEGIN {printf "%.0f", (n + 1) / t}') events/s)"
    # what the worker does after each of those steps, timed apart: the
    # released events counted per key
    t=$(date +%s.%N)
    psql_db "$db" >/dev/null <<'SQL'
DO $$
BEGIN
    WHILE (SELECT c.more FROM ordered_events.compact_stream(ordered_events.stream_id('wide')) c)
    LOOP COMMIT; END LOOP;
END $$;
SQL
    echo "  $db: and their compaction in $(seconds_since "$t") s"
}

echo "19. loading the shapes: $N pending in wide and $P for wide_keys' k0, against $BASE and $BASE_P"
load "$BIG_DB" "$N" "$P"
load "$BASE_DB" "$BASE" "$BASE_P"
check_shape "$BIG_DB" "$N" "$P"
check_shape "$BASE_DB" "$BASE" "$BASE_P"
# BACKLOG_LOAD_ONLY=1: the load times, the shape and the drain, no figures
if [ "${BACKLOG_LOAD_ONLY:-0}" = 1 ]; then drain "$BIG_DB" "$N"; dropdb "$BIG_DB"; dropdb "$BASE_DB"; rm -rf "$tmp"; exit 0; fi

echo "19. each query with $N pending vs $BASE pending (wide_keys' k0: $P vs $BASE_P)"
db_figure "19a stream_stats, stream wide" "SELECT * FROM ordered_events.stream_stats WHERE stream = 'wide'"
db_figure "19b stream_stats, whole view (3 streams)" "SELECT * FROM ordered_events.stream_stats"
db_figure "19c gaps('wide')" "SELECT * FROM ordered_events.gaps('wide')"
db_figure "19d key_status, stream wide LIMIT 100" "SELECT * FROM ordered_events.key_status WHERE stream = 'wide' LIMIT 100"
db_figure "19e key_status, wide, key k77" "SELECT * FROM ordered_events.key_status WHERE stream = 'wide' AND key = 'k77'"
db_figure "19f pending, wide ORDER BY seq LIMIT 10" "SELECT * FROM ordered_events.pending WHERE stream = 'wide' ORDER BY seq LIMIT 10"
db_figure "19g released, wide, seq > 2 LIMIT 100" \
    "SELECT seq FROM ordered_events.released WHERE stream = 'wide' AND seq > 2 ORDER BY seq LIMIT 100"
db_figure "19h stream_stats, stream wide_keys" "SELECT * FROM ordered_events.stream_stats WHERE stream = 'wide_keys'"
db_figure "19i gaps('wide_keys')" "SELECT * FROM ordered_events.gaps('wide_keys')"
db_figure "19j key_status, wide_keys, key k0 (blocked)" "SELECT * FROM ordered_events.key_status WHERE stream = 'wide_keys' AND key = 'k0'"
db_figure "19k metrics" "SELECT * FROM ordered_events.metrics"
db_figure "19l consumers (one, on wide)" "SELECT * FROM ordered_events.consumers"

echo "19. draining: seq 5 of wide arrives"
drain "$BIG_DB" "$N"
dropdb "$BIG_DB"
dropdb "$BASE_DB"
rm -rf "$tmp"
