#!/usr/bin/env bash
# Figure 18: space under retention with autovacuum's default settings
# (issue 23).
#
# A global stream with retention => '0 s' and no consumer; the worker
# releases and deletes.  Events are written in rounds of 100,000 (quick:
# 10,000), one statement a round: INSERT INTO ordered_events.inbox SELECT
# ... generate_series, keys from a fixed set of 1,000, seqs increasing.
# After each round the script waits, by polling, until the worker has
# released the round and deleted it (the stream's range reached the end of
# the round and deleted_totals counts every event of it), then samples the
# size of the extension's tables with their indexes and toast
# (pg_total_relation_size summed over every table and sequence of schema
# ordered_events).  The figure: the size after 10,000,000 events (quick:
# 1,000,000) against the size after 1,000,000 (quick: 100,000), target
# <= 1.5.  A second line per side compares the largest size seen after a
# round since the first checkpoint with the size at the first.
#
# Autovacuum runs with PostgreSQL's defaults (autovacuum_naptime = 1min,
# autovacuum_vacuum_scale_factor = 0.2, autovacuum_vacuum_cost_delay =
# 2ms), no per-table settings.  Two sides, each in a fresh database of its
# own (bench_space) added to ordered_events.databases, one after the
# other:
#   - "worker vacuums": ordered_events.vacuum_after at its default;
#   - "autovacuum only": ordered_events.vacuum_after = 0, the worker never
#     vacuums (what the code did before issue 23).
# Every 1,000,000 events (quick: 100,000) a line of sizes; at the first and
# the last checkpoint every relation with its statistics.
#
# Not in bench/run's default list (a full run takes about half an hour);
# run it by name:
#   unshare -m --propagation private bench/private bench/run [--full] bench/retention_space.sh
# RETSPACE_SIDES="on off" chooses the sides (default both, "on" first).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then
    ROUND=${RETSPACE_ROUND:-100000}; CHECK1=${RETSPACE_CHECK1:-1000000}; CHECK2=${RETSPACE_CHECK2:-10000000}
else
    ROUND=${RETSPACE_ROUND:-10000}; CHECK1=${RETSPACE_CHECK1:-100000}; CHECK2=${RETSPACE_CHECK2:-1000000}
fi
SIDES=${RETSPACE_SIDES:-on off}
KEYS=1000
RDB=bench_space

psql_sp() { psql -X -q -v ON_ERROR_STOP=1 -d "$RDB" "$@"; }
mb() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
seconds_since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}'; }

databases=$(psql_bench -Atc "SHOW ordered_events.databases")
# empty before issue 23: the worker never vacuumed, both sides are the same
has_setting=$(psql_bench -Atc "SELECT name FROM pg_settings WHERE name = 'ordered_events.vacuum_after'")

# worker_leaves: wait until no session of $RDB is left (its worker stops
# once the reload dropped the database from the list)
worker_leaves() {
    for _ in $(seq 300); do
        [ "$(psql_bench -Atc "SELECT count(*) FROM pg_stat_activity WHERE datname = '$RDB'")" = 0 ] && return
        sleep 0.1
    done
}

cleanup() {
    psql_bench -c "ALTER SYSTEM RESET ordered_events.databases" >/dev/null 2>&1 || true
    [ -z "$has_setting" ] || psql_bench -c "ALTER SYSTEM RESET ordered_events.vacuum_after" >/dev/null 2>&1 || true
    psql_bench -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
    worker_leaves
    dropdb --if-exists --force "$RDB" || true
}
trap cleanup EXIT

size_sql="SELECT sum(pg_total_relation_size(c.oid))
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'ordered_events' AND c.relkind IN ('r', 'm', 'S')"

# relations of the schema: size, live and dead tuples, vacuums
relations() {
    psql_sp -c "SELECT c.relname, pg_size_pretty(pg_total_relation_size(c.oid)) AS total,
                       pg_size_pretty(pg_relation_size(c.oid)) AS heap,
                       pg_size_pretty(pg_indexes_size(c.oid)) AS indexes,
                       s.n_live_tup AS live, s.n_dead_tup AS dead, s.n_tup_del AS del,
                       s.vacuum_count AS vac, s.autovacuum_count AS autovac
                  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
                 WHERE n.nspname = 'ordered_events' AND c.relkind = 'r'
                   AND pg_total_relation_size(c.oid) > 65536
                 ORDER BY pg_total_relation_size(c.oid) DESC, c.relname"
}

# one line of sizes
sizes() {
    psql_sp -Atc "SELECT format('%s total, event_store %s (heap %s), lane_release_log %s, key_counters %s, progress %s; event_store vacuums %s by hand/worker, %s by autovacuum',
                                pg_size_pretty(($size_sql)),
                                pg_size_pretty(pg_total_relation_size('ordered_events.event_store')),
                                pg_size_pretty(pg_relation_size('ordered_events.event_store')),
                                pg_size_pretty(pg_total_relation_size('ordered_events.lane_release_log')),
                                pg_size_pretty(pg_total_relation_size('ordered_events.key_counters')),
                                pg_size_pretty(pg_total_relation_size('ordered_events.progress')),
                                s.vacuum_count, s.autovacuum_count)
                    FROM pg_stat_user_tables s WHERE s.relid = 'ordered_events.event_store'::regclass"
}

# run_side on|off: the whole run in a fresh database
run_side() {
    local side=$1 label setting start n to deadline size size1=0 size2=0 peak=0
    if [ "$side" = on ]; then
        label="worker vacuums"; setting="ALTER SYSTEM RESET ordered_events.vacuum_after"
    else
        label="autovacuum only"; setting="ALTER SYSTEM SET ordered_events.vacuum_after = 0"
    fi
    [ -n "$has_setting" ] || setting="SELECT 'no ordered_events.vacuum_after: the worker does not vacuum'"
    dropdb --if-exists --force "$RDB"
    createdb "$RDB"
    psql_sp -c "CREATE EXTENSION ordered_events"
    psql_bench -c "ALTER SYSTEM SET ordered_events.databases = '${databases:+$databases,}$RDB'" \
               -c "$setting" -c "SELECT pg_reload_conf()" >/dev/null
    for _ in $(seq 300); do
        [ -n "$(psql_sp -Atc "SELECT pid FROM ordered_events.worker_status
                               WHERE database = '$RDB' AND kind = 'release' AND pid > 0")" ] && break
        sleep 0.1
    done
    [ -n "$(psql_sp -Atc "SELECT pid FROM ordered_events.worker_status WHERE database = '$RDB' AND kind = 'release' AND pid > 0")" ] ||
        { echo "the ordered_events worker of database $RDB did not start" >&2; exit 1; }
    psql_sp >/dev/null <<'SQL'
SELECT ordered_events.create_stream('ret');
SELECT ordered_events.alter_stream('ret', retention => '0 s');
SQL

    echo "18 ($label, vacuum_after = ${has_setting:+$(psql_sp -Atc "SHOW ordered_events.vacuum_after")}):" \
         "$CHECK2 events in rounds of $ROUND through retention => '0 s'"
    start=$(date +%s.%N)
    for n in $(seq "$ROUND" "$ROUND" "$CHECK2"); do
        psql_sp -c "INSERT INTO ordered_events.inbox (stream, seq, key, payload)
                    SELECT 'ret', g, 'k' || (g % $KEYS), jsonb_build_object('n', g)
                      FROM generate_series($((n - ROUND + 1)), $n) g"
        deadline=$((SECONDS + 600))
        until [ "$(psql_sp -Atc "SELECT p.range_end > $n AND t.events >= $n
                                   FROM ordered_events.stream_def d
                                   JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
                                   JOIN ordered_events.deleted_totals t ON t.stream_id = d.stream_id
                                  WHERE d.stream = 'ret'")" = t ]; do
            if [ $SECONDS -ge $deadline ]; then
                echo "18: round ending at $n not released and deleted after 600 s" >&2
                psql_sp -c "SELECT * FROM ordered_events.stream_stats" \
                        -c "SELECT * FROM ordered_events.worker_status" >&2
                exit 1
            fi
            sleep 0.05
        done
        size=$(psql_sp -Atc "$size_sql")
        if [ "$n" -gt "$CHECK1" ] && [ "$size" -gt "$peak" ]; then peak=$size; fi
        if [ $((n % CHECK1)) -eq 0 ]; then
            echo "  after $n events ($(seconds_since "$start") s): $(sizes)"
        fi
        if [ "$n" -eq "$CHECK1" ]; then size1=$size; relations | sed 's/^/    /'; fi
        if [ "$n" -eq "$CHECK2" ]; then size2=$size; relations | sed 's/^/    /'; fi
    done
    report "18 $label: size after $CHECK2 vs $CHECK1 events" "$(mb "$size2")" "$(mb "$size1")" MB "<=" 1.5
    report "18 $label: largest size after a round vs at $CHECK1" "$(mb "$peak")" "$(mb "$size1")" MB "<=" 1.5
    psql_bench -c "ALTER SYSTEM RESET ordered_events.databases" -c "SELECT pg_reload_conf()" >/dev/null
    worker_leaves
    dropdb --force "$RDB"
}

for side in $SIDES; do
    run_side "$side"
done
