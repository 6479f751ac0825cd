#!/usr/bin/env bash
# Figure 20: a waiting read's wake-up after a gap fill (DESIGN.md 8.3,
# "Waiting reads"; bench/latency_client.c, "read" mode): per trial the
# reader sleeps in read(..., wait => '10 s') with nothing unread, and the
# producer commits the seq that fills the gap in front of one pending
# event; measured from that COMMIT's return to the read's rows.  The
# baseline, in the same run on a stream of its own, is figure 5's probe:
# the same gap fill to the worker's NOTIFY at a LISTENing client, which a
# hand-rolled read loop would wait for before it reads.  Target: p50 <= 2 ms
# (absolute, DESIGN); the ratio to the NOTIFY's p50 is shown for the cost
# of the wake-up and the read themselves.  1,000 trials (quick: 200) after
# 20 warm-up trials each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

build_latency_client
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

psql_bench -c "ALTER SYSTEM SET ordered_events.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 300); do
    [ "$(psql_bench -Atc "SELECT count(*) FROM ordered_events.worker_status
                          WHERE database = current_database() AND kind = 'release' AND pid > 0")" = 1 ] && break
    sleep 0.1
done

if [ "${BENCH_MODE:-quick}" = full ]; then TRIALS=1000; else TRIALS=200; fi
WARMUP=20

psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_consumer(consumer) FROM ordered_events.consumer_def WHERE consumer = 'bench_wakeup';
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams WHERE stream IN ('bench_wakeup', 'bench_wakeup_notify');
SELECT ordered_events.create_stream('bench_wakeup'), ordered_events.create_stream('bench_wakeup_notify');
SELECT ordered_events.create_consumer('bench_wakeup');
SELECT ordered_events.subscribe('bench_wakeup', 'bench_wakeup');
SQL

echo "20. gap fill -> waiting read returns, vs gap fill -> NOTIFY ($TRIALS trials each after $WARMUP warm-up)"
ours=$(timeout 600 "$out/latency_client" read bench_wakeup bench_wakeup 1 "$TRIALS" "$WARMUP" "$tmp/read.txt")
base=$(timeout 600 "$out/latency_client" notify bench_wakeup_notify 1 "$TRIALS" "$WARMUP" "$tmp/notify.txt")
echo "  read:   $ours (ms)"
echo "  notify: $base (ms)"
val() { sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
[ "$(val "$ours" timeouts)" = 0 ] || echo "  WARNING: $(val "$ours" timeouts) reads were not woken (counted as 10 s)"
report "20a gap fill -> waiting read, p50" "$(val "$ours" p50)" 2 ms "<=" 1 \
    "p95 $(val "$ours" p95), p99 $(val "$ours" p99), max $(val "$ours" max), n $(val "$ours" n)" "target 2 ms"
report "20b waiting read vs NOTIFY, p50" "$(val "$ours" p50)" "$(val "$base" p50)" ms "<=" 2 \
    "read p99 $(val "$ours" p99)" "NOTIFY p95 $(val "$base" p95), p99 $(val "$base" p99)"

psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_consumer('bench_wakeup');
SELECT ordered_events.drop_stream('bench_wakeup'), ordered_events.drop_stream('bench_wakeup_notify');
SQL
