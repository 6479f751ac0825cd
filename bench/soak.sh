#!/usr/bin/env bash
# Figure 7: memory of the background worker over a soak of 5,000,000 events
# (quick: 500,000): its private resident memory may grow by at most 10 MB.
#
# Events go in through the inbox, INSERT ... SELECT, 10,000 per round over
# three streams: two global streams (4,000 each) and a per-key stream (100
# keys x 20).  Each round's body arrives shuffled with one seq in a hundred
# (per key: one in twenty) missing; those gaps are filled in the next round,
# after the next body, so the worker always has pending events behind gaps
# and keeps releasing as they fill.  A round waits until the global streams
# have released the previous round, so the worker keeps up (no backlog).
#
# The worker's RSS comes from /proc/PID/status (pid from worker_status),
# after a warm-up of a tenth of the rounds and at the end, once everything
# is released.  VmRSS also counts the shared buffers the worker has touched
# (RssShmem), which grows towards shared_buffers and is not the worker's
# memory, so the figure is the growth of its private memory, RssAnon +
# RssFile.  The limit is absolute: the "baseline" column holds it (10 MB)
# and the ratio growth / limit must be <= 1, as in figure 5.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if [ "${BENCH_MODE:-quick}" = full ]; then SOAK_ROUNDS=500; else SOAK_ROUNDS=50; fi
G=4000          # seqs per round of each global stream
P=20            # seqs per round of each of the 100 keys of the per-key stream
PER_ROUND=$((2 * G + 100 * P))
WARM=$((SOAK_ROUNDS / 10))

psql_bench -c "ALTER SYSTEM SET ordered_events.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
worker_pid() {
    psql_bench -Atc "SELECT pid FROM ordered_events.worker_status
                      WHERE database = current_database() AND pid > 0 AND kind = 'release'
                        AND state IN ('idle', 'releasing')"
}
pid=
for _ in $(seq 300); do
    pid=$(worker_pid)
    [ -n "$pid" ] && break
    sleep 0.1
done
[ -n "$pid" ] || { echo "the ordered_events worker of database $DB did not start" >&2; exit 1; }

psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream IN ('soak_a', 'soak_b', 'soak_k');
SELECT ordered_events.create_stream('soak_a');
SELECT ordered_events.create_stream('soak_b');
SELECT ordered_events.create_stream('soak_k', sequencing => 'per_key');
SQL

# rows of round $1 into the inbox: "body" (all but the gaps, shuffled) or
# "fill" (the gaps)
insert_round() {
    local r=$1 cond_g cond_k
    if [ "$2" = body ]; then cond_g="g % 100 <> 50"; cond_k="g % 20 <> 10"
    else cond_g="g % 100 = 50"; cond_k="g % 20 = 10"; fi
    echo "INSERT INTO ordered_events.inbox (stream, seq, key, payload)
          SELECT stream, seq, key, '{\"n\": 1}' FROM (
              SELECT s AS stream, g AS seq, 'k' || (g % 1000) AS key
                FROM unnest('{soak_a,soak_b}'::text[]) s,
                     generate_series($((r * G + 1)), $(((r + 1) * G))) g
               WHERE $cond_g
              UNION ALL
              SELECT 'soak_k', g, 'k' || k
                FROM generate_series(0, 99) k,
                     generate_series($((r * P + 1)), $(((r + 1) * P))) g
               WHERE $cond_k) x
          ORDER BY random();"
}

# wait until both global streams have released everything below $1
wait_released() {
    local end=$1 deadline=$((SECONDS + 60))
    while [ "$(psql_bench -Atc "SELECT count(*) FROM ordered_events.ranges
                                 WHERE stream IN ('soak_a', 'soak_b') AND range_end >= $end")" != 2 ]; do
        if [ $SECONDS -ge $deadline ]; then
            echo "the worker did not release seq $((end - 1)) within 60 s" >&2
            psql_bench -c "SELECT * FROM ordered_events.worker_status" -c "SELECT * FROM ordered_events.ranges" >&2
            exit 1
        fi
        sleep 0.02
    done
}

mem() {   # FIELD: kB from /proc/$pid/status
    awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"
}
snapshot() {   # prints: VmRSS RssAnon RssFile RssShmem (kB)
    echo "$(mem VmRSS) $(mem RssAnon) $(mem RssFile) $(mem RssShmem)"
}
show() {   # LABEL SNAPSHOT
    local rss anon file shm
    read -r rss anon file shm <<<"$2"
    printf '  %-28s VmRSS %6.1f MB  RssAnon %6.1f MB  RssFile %5.1f MB  RssShmem %6.1f MB\n' \
        "$1" "$(awk -v k="$rss" 'BEGIN {print k/1024}')" "$(awk -v k="$anon" 'BEGIN {print k/1024}')" \
        "$(awk -v k="$file" 'BEGIN {print k/1024}')" "$(awk -v k="$shm" 'BEGIN {print k/1024}')"
}

echo "7. worker memory over a soak of $((SOAK_ROUNDS * PER_ROUND)) events ($SOAK_ROUNDS rounds of $PER_ROUND; worker pid $pid)"
show "start" "$(snapshot)"
worker_released() { psql_bench -Atc "SELECT released_total FROM ordered_events.worker_status WHERE database = current_database()"; }
released0=$(worker_released)
start=$SECONDS
warm=
for r in $(seq 0 $((SOAK_ROUNDS - 1))); do
    sql=$(insert_round "$r" body)
    [ "$r" -eq 0 ] || sql="$sql
$(insert_round $((r - 1)) fill)"
    psql_bench <<<"$sql" >/dev/null   # separate statements: separate commits
    [ "$r" -eq 0 ] || wait_released $((r * G + 1))
    if [ "$((r + 1))" -eq "$WARM" ]; then
        warm=$(snapshot)
        show "after warm-up ($(((r + 1) * PER_ROUND)))" "$warm"
    elif [ $(((r + 1) % (SOAK_ROUNDS / 5))) -eq 0 ]; then
        show "after $(((r + 1) * PER_ROUND)) events" "$(snapshot)"
    fi
done
psql_bench -c "$(insert_round $((SOAK_ROUNDS - 1)) fill)" >/dev/null
wait_released $((SOAK_ROUNDS * G + 1))
# the per-key stream is not throttled: wait for its last events too
deadline=$((SECONDS + 120))
until [ "$(psql_bench -Atc "SELECT sum(pending_count) FROM ordered_events.stream_stats
                             WHERE stream IN ('soak_a', 'soak_b', 'soak_k')")" = 0 ]; do
    [ $SECONDS -lt $deadline ] || { echo "events still pending after 120 s" >&2; exit 1; }
    sleep 0.2
done
sleep 1   # let the worker finish its cycle and go idle
end=$(snapshot)
show "end" "$end"
released=$(psql_bench -Atc "SELECT sum(released_count) FROM ordered_events.stream_stats
                             WHERE stream IN ('soak_a', 'soak_b', 'soak_k')")
echo "  released $released events in $((SECONDS - start)) s, $(($(worker_released) - released0)) of them by the worker"
[ "$released" = $((SOAK_ROUNDS * PER_ROUND)) ] || { echo "expected $((SOAK_ROUNDS * PER_ROUND)) released" >&2; exit 1; }
[ "$(worker_pid)" = "$pid" ] || { echo "the worker restarted during the soak (pid $pid -> $(worker_pid))" >&2; exit 1; }

read -r w_rss w_anon w_file w_shm <<<"$warm"
read -r e_rss e_anon e_file e_shm <<<"$end"
mb() { awk -v k="$1" 'BEGIN {printf "%.2f", k / 1024}'; }
growth=$(mb $(((e_anon + e_file) - (w_anon + w_file))))
report "7 worker private memory growth (anon+file)" "$growth" 10 MB "<=" 1 \
    "RssAnon $(mb "$w_anon")->$(mb "$e_anon"), VmRSS $(mb "$w_rss")->$(mb "$e_rss"), RssShmem $(mb "$w_shm")->$(mb "$e_shm")" \
    "limit 10 MB"

psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream IN ('soak_a', 'soak_b', 'soak_k');
SQL
