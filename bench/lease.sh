#!/usr/bin/env bash
# Figures 21: what the lease mode costs (issue 24).  Two consumers of the
# same released events: the baseline, a consumer with delivery
# 'transaction', drains with `SELECT count(*) FROM ordered_events.read(c,
# 1000)`, one transaction per batch (figures 9); ours, a consumer with
# delivery 'lease', drains as a worker does: `receive(c, 1000)` (the
# receipts into a psql variable), then `ack(c, receipts)`, two statements
# and two round trips per batch, each in autocommit.  Each side is one
# long-lived session running prepared statements; in each round both drain
# everything, taking turns every tenth of the drain; a side's rate is N
# over the sum of its statements' times.
#   21a. one global stream, N released events (quick 200,000, full
#        1,000,000), keys k0..k999
#   21b. one per-key stream, N events over 100,000 keys, each key's n-th
#        event released by the n-th release step, so that a batch holds
#        one event of a key: a key's second event in a batch waits behind
#        its first until that is acknowledged (per-key order), and is
#        delivered by the next receive(), which read() does not do
# Target: receive + ack at least half of read()'s rate.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

N=$BULK_ROWS
KEYS=100000         # of the per-key stream
BATCH=1000
BATCHES=$((N / BATCH))
CHUNK=$((BATCHES / 10))
set_worker off
tmp=$(mktemp -d)


echo "21. preparing $N events for each shape"
psql_bench <<SQL >/dev/null
SELECT ordered_events.create_stream('lease_global');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'lease_global', g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;
SELECT ordered_events.create_stream('lease_per_key', sequencing => 'per_key', max_release_batch => 100000);
SQL
release_all lease_global >/dev/null
# Each key's seq s in release step s: a batch has no two events of a key
# (the second would wait behind the first, see the banner).
for s in $(seq 1 $((N / KEYS))); do
    psql_bench -c "INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
                   SELECT 'lease_per_key', $s, 'k' || (g % $KEYS), e.payload, e.event_ts, e.alignment_ts
                     FROM generate_series(($s - 1) * $KEYS + 1, $s * $KEYS) g,
                          LATERAL (SELECT $(events_of)) e" >/dev/null
    release_all lease_per_key >/dev/null
done
psql_bench -c "VACUUM ANALYZE ordered_events.event_store, ordered_events.lane_release_log" -c "CHECKPOINT" >/dev/null

# Fresh consumers lease_r (read) and lease_l (lease) at the beginning of STREAM.
new_consumers() {   # STREAM
    psql_bench -c "DO \$\$ BEGIN PERFORM ordered_events.drop_consumer(c) FROM unnest(ARRAY['lease_r', 'lease_l']) c;
                   EXCEPTION WHEN undefined_object THEN NULL; END \$\$" \
               -c "SELECT ordered_events.create_consumer('lease_r')" \
               -c "SELECT ordered_events.create_consumer('lease_l', delivery => 'lease')" \
               -c "SELECT ordered_events.subscribe(c, '$1') FROM unnest(ARRAY['lease_r', 'lease_l']) c" \
               -c "VACUUM ordered_events.lease, ordered_events.subscription" >/dev/null
}
# One long-lived psql session per side (open_session, bench/lib.sh).
read_chunk=$(for _ in $(seq "$CHUNK"); do echo "EXECUTE batch;"; done)
lease_chunk=$(for _ in $(seq "$CHUNK"); do printf 'EXECUTE recv \\gset\nEXECUTE done(:'"'"'receipts'"'"');\n'; done)
check_drained() {   # WHAT SQL-RETURNING-TRUE
    if [ "$(psql_bench -Atc "$2")" != t ]; then
        echo "$1: not drained exactly" >&2
        exit 1
    fi
}
compare_drain() {   # FIGURE TARGET STREAM
    local figure=$1 target=$2 ours=() base=() ours_ms base_ms
    for _ in $(seq "$ROUNDS"); do
        new_consumers "$3"
        ours_ms=0 base_ms=0
        for _ in $(seq $((BATCHES / CHUNK))); do
            ours_ms=$(awk -v a="$ours_ms" -v b="$(session_sql ours "$lease_chunk")" 'BEGIN {print a + b}')
            base_ms=$(awk -v a="$base_ms" -v b="$(session_sql base "$read_chunk")" 'BEGIN {print a + b}')
        done
        check_drained "read() of $3" "SELECT consumed_count = $N AND unread_count = 0
                                        FROM ordered_events.consumers WHERE consumer = 'lease_r'"
        check_drained "receive() of $3" "SELECT c.consumed_count = $N AND c.unread_count = 0
                                               AND NOT EXISTS (SELECT FROM ordered_events.leases l
                                                                WHERE l.consumer = 'lease_l')
                                           FROM ordered_events.consumers c WHERE c.consumer = 'lease_l'"
        ours+=("$(awk -v n="$N" -v ms="$ours_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
        base+=("$(awk -v n="$N" -v ms="$base_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    done
    report "$figure" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${base[@]}" | median)" \
        events/s ">=" "$target" \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${base[@]}" | spread)"
}

open_session ours "PREPARE recv AS SELECT array_agg(receipt) AS receipts FROM ordered_events.receive('lease_l', $BATCH);
PREPARE done(bigint[]) AS SELECT ordered_events.ack('lease_l', \$1);"
open_session base "PREPARE batch AS SELECT count(*) FROM ordered_events.read('lease_r', $BATCH);"
echo "21a-21b. draining $N events, $BATCH a batch ($ROUNDS rounds)"
compare_drain "21a receive()+ack() vs read(), global stream, $N events" 0.5 lease_global
compare_drain "21b receive()+ack() vs read(), per-key stream, $KEYS keys, $N events" 0.5 lease_per_key
close_session ours
close_session base
wait
psql_bench -c "SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['lease_r', 'lease_l']) c" >/dev/null
rm -rf "$tmp"
