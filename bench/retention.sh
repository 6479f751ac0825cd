#!/usr/bin/env bash
# Figures 12: retention (issue 13).
#
# 12a No bloat.  A global stream with retention => '0 s' and one consumer
# read by a client loop while producers ingest through the inbox; the
# worker releases and compacts (counts and deletes what was read).  The
# figure: the size of the extension's tables with their indexes and toast
# (pg_total_relation_size of every table and sequence of schema
# ordered_events) after 5,000,000 events ingested and consumed against
# the size after 1,000,000 (quick: 250,000 and 50,000), ratio <= 1.5.
# A second line compares the largest size seen while the last million
# went through with the largest while the first did (same target): the
# size at a checkpoint depends on whether a vacuum happened to truncate
# the heap's empty tail just before, the largest size much less.
#   - Producers: one session, INSERT INTO ordered_events.inbox ...
#     SELECT ... generate_series, 5,000 events a statement (a commit each),
#     keys from a fixed set of 1,000, seqs increasing, shuffled within runs
#     of 10 inside a statement.  A statement waits while more than 50,000
#     events are unconsumed, so the backlog stays bounded (a steady load,
#     not a burst).  The size is sampled before each statement.
#   - Consumer: create_consumer('c') and subscribe; pgbench, one client,
#     `SELECT count(*) FROM ordered_events.read('c', 10000)` a transaction,
#     10 ms of sleep when it read nothing.
#   - Settings: a database of its own (bench_ret) added to
#     ordered_events.databases; ordered_events.naptime = 100 ms;
#     autovacuum on with its defaults except autovacuum_naptime = 1s (set
#     for the run by ALTER SYSTEM and reset at the end); no per-table
#     settings.
#   - Every 1,000,000 events (quick: 50,000) the producers stop and wait,
#     by polling, for the steady state: the consumer has read every event,
#     no stream has anything to compact (streams_to_compact()), and no
#     table of the schema is over autovacuum's threshold (n_dead_tup > 50
#     + 0.2 n_live_tup, the defaults), or 60 s went by.  A line of sizes
#     then; at the first and the last, every relation with its
#     statistics, so that a miss shows where the bytes went.
#   - At the end: the events table's live rows (event_store), and the
#     metric ordered_events_deleted_events_total of the stream.
#
# 12b Ingest cost of the retry check.  Once a stream has a retention,
# ingest() reads the lane's range after each insert, to refuse a retried
# seq whose first copy was released and deleted.  Single-row ingest()
# into a stream with a retention (1 day: nothing is deleted here) against
# a stream without, the worker off (the write path alone, as figure 1):
# pgbench, 2 clients, prepared statements, synchronous_commit off, keys
# from 1,000, seqs from a sequence per stream; each round runs N events
# a side (quick 10,000, full 100,000), the sides alternating, in 4
# rounds (full: 10; short rounds, many of them, so that a disturbance
# hits both sides), medians.  Ratio with / without in tps; no target
# (docs/operating.md, "What a retention costs", reports it): the target
# column says >= 0 so the verdict is always PASS.
#
# Not in bench/run's default list (the full run takes several minutes);
# run it by name:
#   unshare -m --propagation private bench/private bench/run [--full] bench/retention.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then
    CHECK1=${RET_CHECK1:-1000000}; CHECK2=${RET_CHECK2:-5000000}; INGEST_N=100000; INGEST_ROUNDS=10
else
    CHECK1=${RET_CHECK1:-50000}; CHECK2=${RET_CHECK2:-250000}; INGEST_N=10000; INGEST_ROUNDS=4
fi
BATCH=5000
KEYS=1000
BACKLOG=50000
RDB=bench_ret
tmp=$(mktemp -d)
chmod 755 "$tmp"
reader=

psql_ret() { psql -X -q -v ON_ERROR_STOP=1 -d "$RDB" "$@"; }
mb() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
seconds_since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}'; }

cleanup() {
    [ -z "$reader" ] || kill "$reader" 2>/dev/null || true
    psql_bench -c "ALTER SYSTEM RESET ordered_events.databases" \
               -c "ALTER SYSTEM RESET ordered_events.naptime" \
               -c "ALTER SYSTEM RESET ordered_events.enabled" \
               -c "ALTER SYSTEM RESET autovacuum_naptime" \
               -c "SELECT pg_reload_conf()" >/dev/null || true
    # the worker of bench_ret leaves once the reload dropped the database
    for _ in $(seq 300); do
        [ "$(psql_bench -Atc "SELECT count(*) FROM pg_stat_activity WHERE datname = '$RDB'")" = 0 ] && break
        sleep 0.1
    done
    dropdb --if-exists --force "$RDB" || true
    rm -rf "$tmp"
}
trap cleanup EXIT

dropdb --if-exists --force "$RDB"
createdb "$RDB"
psql_ret -c "CREATE EXTENSION ordered_events"
databases=$(psql_bench -Atc "SHOW ordered_events.databases")
psql_bench >/dev/null <<SQL
ALTER SYSTEM SET ordered_events.databases = '${databases:+$databases,}$RDB';
ALTER SYSTEM SET ordered_events.naptime = 100;
ALTER SYSTEM SET ordered_events.enabled = on;
ALTER SYSTEM SET autovacuum_naptime = '1s';
SELECT pg_reload_conf();
SQL
for _ in $(seq 300); do
    [ -n "$(psql_ret -Atc "SELECT pid FROM ordered_events.worker_status
                            WHERE database = '$RDB' AND pid > 0")" ] && break
    sleep 0.1
done
[ -n "$(psql_ret -Atc "SELECT pid FROM ordered_events.worker_status WHERE database = '$RDB' AND pid > 0")" ] ||
    { echo "the ordered_events worker of database $RDB did not start" >&2; exit 1; }

psql_ret >/dev/null <<'SQL'
SELECT ordered_events.create_stream('ret', retention => '0 s');
SELECT ordered_events.create_consumer('c');
SELECT ordered_events.subscribe('c', 'ret');
SQL

# --- 12a -----------------------------------------------------------------

size_sql="SELECT sum(pg_total_relation_size(c.oid))
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'ordered_events' AND c.relkind IN ('r', 'm', 'S')"

# the statement of batch $1 (0-based): its seqs shuffled within runs of 10
batch_sql() {
    local from=$(($1 * BATCH + 1)) to=$((($1 + 1) * BATCH))
    echo "INSERT INTO ordered_events.inbox (stream, seq, key, payload)
          SELECT 'ret', g, 'k' || (g % $KEYS), jsonb_build_object('n', g)
            FROM generate_series($from, $to) g
           ORDER BY g / 10, random();"
}

# produce FROM_BATCH TO_BATCH: batches [FROM, TO), the backlog bounded;
# samples the size before each batch into $peak (the largest seen)
produce() {
    local b consumed size out
    for b in $(seq "$1" $(($2 - 1))); do
        while :; do
            out=$(psql_ret -AtF ' ' -c "SELECT consumed_count, ($size_sql)
                                          FROM ordered_events.consumers WHERE consumer = 'c'")
            read -r consumed size <<<"$out"
            [ "$size" -le "$peak" ] || peak=$size
            [ $((b * BATCH - consumed)) -gt "$BACKLOG" ] || break
            sleep 0.01
        done
        psql_ret -c "$(batch_sql "$b")"
    done
}

# Wait for the steady state after N events (see the head of the file).
settle() {
    local n=$1 deadline=$((SECONDS + 300)) over
    until [ "$(psql_ret -Atc "SELECT (SELECT consumed_count FROM ordered_events.consumers WHERE consumer = 'c') = $n
                                  AND NOT EXISTS (SELECT FROM ordered_events.streams_to_compact())")" = t ]; do
        if [ $SECONDS -ge $deadline ]; then
            echo "12a: not caught up 300 s after $n events" >&2
            psql_ret -c "SELECT * FROM ordered_events.consumers" -c "SELECT * FROM ordered_events.stream_stats" \
                     -c "SELECT * FROM ordered_events.worker_status" >&2
            exit 1
        fi
        sleep 0.1
    done
    deadline=$((SECONDS + 60))
    while :; do
        over=$(psql_ret -Atc "SELECT string_agg(relname || ' ' || n_dead_tup, ', ')
                                FROM pg_stat_user_tables
                               WHERE schemaname = 'ordered_events' AND n_dead_tup > 50 + 0.2 * n_live_tup")
        [ -z "$over" ] && break
        if [ $SECONDS -ge $deadline ]; then
            echo "  autovacuum still has work after 60 s: $over (dead tuples)"
            break
        fi
        sleep 0.2
    done
}

# relations of the schema: size, live and dead tuples, vacuums
relations() {
    psql_ret -c "SELECT c.relname, c.relkind AS kind, pg_size_pretty(pg_total_relation_size(c.oid)) AS total,
                        pg_size_pretty(pg_relation_size(c.oid)) AS heap,
                        pg_size_pretty(pg_indexes_size(c.oid)) AS indexes,
                        s.n_live_tup AS live, s.n_dead_tup AS dead, s.n_tup_ins AS ins,
                        s.n_tup_upd AS upd, s.n_tup_hot_upd AS hot, s.n_tup_del AS del,
                        s.autovacuum_count AS autovac, s.autoanalyze_count AS autoanalyze
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                  WHERE n.nspname = 'ordered_events' AND c.relkind IN ('r', 'm')
                  ORDER BY pg_total_relation_size(c.oid) DESC, c.relname" \
             -c "SELECT c.relname AS index, pg_size_pretty(pg_relation_size(c.oid)) AS size
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'ordered_events' AND c.relkind = 'i'
                    AND pg_relation_size(c.oid) > 65536
                  ORDER BY pg_relation_size(c.oid) DESC"
}

cat > "$tmp/read.sql" <<'SQL'
SELECT count(*) AS n FROM ordered_events.read('c', 10000) \gset
\if :n = 0
\sleep 10 ms
\endif
SQL
pgbench -n -c 1 -T 86400 -f "$tmp/read.sql" "$RDB" >/dev/null 2>&1 &
reader=$!

# one line of sizes at a checkpoint
sizes() {
    psql_ret -Atc "SELECT format('%s total, event_store heap %s, its indexes %s, lane_release_log %s, key_counters %s',
                                 pg_size_pretty(($size_sql)), pg_size_pretty(pg_relation_size('ordered_events.event_store')),
                                 pg_size_pretty(pg_indexes_size('ordered_events.event_store')),
                                 pg_size_pretty(pg_total_relation_size('ordered_events.lane_release_log')),
                                 pg_size_pretty(pg_total_relation_size('ordered_events.key_counters')))"
}

echo "12a. $CHECK2 events through a stream with retention => '0 s' and one consumer (the figure: sizes at $CHECK1 and $CHECK2)"
start=$(date +%s.%N)
for n in $(seq "$CHECK1" "$CHECK1" "$CHECK2"); do
    peak=0
    produce $(((n - CHECK1) / BATCH)) $((n / BATCH))
    settle "$n"
    size=$(psql_ret -Atc "$size_sql")
    [ "$size" -le "$peak" ] || peak=$size
    if [ "$n" -eq "$CHECK1" ]; then size1=$size; peak1=$peak; fi
    if [ "$n" -eq "$CHECK2" ]; then size2=$size; peak2=$peak; fi
    echo "  after $n events ($(seconds_since "$start") s): $(sizes); the largest total since the last line $(mb "$peak") MB"
    if [ "$n" -eq "$CHECK1" ] || [ "$n" -eq "$CHECK2" ]; then
        relations | sed 's/^/    /'
    fi
done
kill "$reader"; wait "$reader" 2>/dev/null || true; reader=
echo "  event_store live rows: $(psql_ret -Atc "SELECT count(*) FROM ordered_events.event_store")," \
     "ordered_events_deleted_events_total: $(psql_ret -Atc "SELECT value FROM ordered_events.metrics
                                                             WHERE metric = 'ordered_events_deleted_events_total'
                                                               AND stream = 'ret'")"
report "12a tables+indexes after $CHECK2 vs after $CHECK1 events" "$(mb "$size2")" "$(mb "$size1")" MB "<=" 1.5
report "12a largest size, last $CHECK1 events vs first" "$(mb "$peak2")" "$(mb "$peak1")" MB "<=" 1.5

# --- 12b -----------------------------------------------------------------

set_worker off
psql_ret >/dev/null <<'SQL'
SELECT ordered_events.create_stream('ri_on', retention => '1 day');
SELECT ordered_events.create_stream('ri_off');
CREATE SEQUENCE public.s_on;
CREATE SEQUENCE public.s_off;
SQL
for side in on off; do
    cat > "$tmp/ingest_$side.sql" <<SQL
\set k random(1, $KEYS)
SELECT ordered_events.ingest('ri_$side', nextval('public.s_$side'), 'k' || :k, '{"n": 1}');
SQL
done
tps() {   # SIDE
    PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 2 -j 2 \
        -t $((INGEST_N / 2)) -f "$tmp/ingest_$1.sql" "$RDB" 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | xargs printf '%.0f\n'
}
echo "12b. single-row ingest() with and without a retention (pgbench, 2 clients, $INGEST_N events x $INGEST_ROUNDS rounds a side)"
on=() off=()
for _ in $(seq "$INGEST_ROUNDS"); do
    on+=("$(tps on)")
    off+=("$(tps off)")
done
want=$((INGEST_ROUNDS * INGEST_N))
got=$(psql_ret -Atc "SELECT string_agg(received_count::text, ' ' ORDER BY stream)
                       FROM (SELECT stream, sum(received_count) AS received_count FROM ordered_events.key_status
                              WHERE stream IN ('ri_off', 'ri_on') GROUP BY stream) s")
[ "$got" = "$want $want" ] || { echo "12b: expected $want events a stream, got $got" >&2; exit 1; }
report "12b ingest() tps, retention vs none" \
    "$(printf '%s\n' "${on[@]}" | median)" "$(printf '%s\n' "${off[@]}" | median)" tps ">=" 0 \
    "$(printf '%s\n' "${on[@]}" | spread)" "$(printf '%s\n' "${off[@]}" | spread)"
