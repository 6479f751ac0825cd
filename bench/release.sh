#!/usr/bin/env bash
# Figures 3, 4 and 8: what releasing costs.
#   3. 1,000,000 events (quick: 200,000) buffered behind one missing seq;
#      the seq arrives; time until range_end passes them all, against the
#      time the bulk ingest of those events took.  3a: release() called by
#      hand until it returns 0; 3b: the background worker alone.
#   4. releasing 1,000 events with nothing pending beyond the gap, against
#      the same with 1,000,000 (quick: 200,000) pending beyond a second gap.
#   8. per-key: releasing one key's filled gap (1,000 events) in a stream of
#      1,000,000 (quick: 100,000) idle keys, against a stream of 10 keys.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

N=$BULK_ROWS
set_worker off

# --- 3: release throughput ---------------------------------------------------
ingest_ms=() manual_ms=() worker_ms=()
for r in $(seq "$ROUNDS"); do
    for mode in manual worker; do
        s="rel3_${mode}_$r"
        psql_bench -c "SELECT ordered_events.create_stream('$s')" >/dev/null
        t=$(time_sql "INSERT INTO ordered_events.inbox (stream, seq, key, payload)
                      SELECT '$s', g, 'k' || (g % 1000), '{\"n\": 1}' FROM generate_series(2, $N + 1) g")
        ingest_ms+=("$t")
        if [ "$mode" = manual ]; then
            manual_ms+=("$(time_sql "DO \$\$ BEGIN
                PERFORM ordered_events.ingest('$s', 1, 'k0');
                COMMIT;
                WHILE ordered_events.release('$s') > 0 LOOP COMMIT; END LOOP;
            END \$\$")")
        else
            set_worker on
            psql_bench -c "SELECT ordered_events.ingest('$s', 1, 'k0')" >/dev/null
            until [ "$(psql_bench -Atc "SELECT range_end FROM ordered_events.ranges WHERE stream = '$s'")" = $((N + 2)) ]; do
                sleep 0.05
            done
            # server clocks, no polling in the figure: from the insert of the
            # missing seq to the commit-time stamp of the last release step
            worker_ms+=("$(psql_bench -Atc "
                SELECT round(extract(epoch FROM
                         (SELECT max(l.released_at) FROM ordered_events.lane_release_log l
                           JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$s')
                       - (SELECT alignment_ts FROM ordered_events.released
                           WHERE stream = '$s' AND seq = 1)) * 1000, 1)")")
            set_worker off
        fi
        psql_bench -c "SELECT ordered_events.drop_stream('$s')" -c "CHECKPOINT" >/dev/null
    done
done
ingest=$(printf '%s\n' "${ingest_ms[@]}" | median)
report "3a release $N buffered events, release() loop" \
    "$(printf '%s\n' "${manual_ms[@]}" | median)" "$ingest" ms "<=" 0.15 \
    "$(printf '%s\n' "${manual_ms[@]}" | spread)" "$(printf '%s\n' "${ingest_ms[@]}" | spread)"
report "3b release $N buffered events, worker" \
    "$(printf '%s\n' "${worker_ms[@]}" | median)" "$ingest" ms "<=" 0.15 \
    "$(printf '%s\n' "${worker_ms[@]}" | spread)" "$(printf '%s\n' "${ingest_ms[@]}" | spread)"

# --- 4 and 8: cost of releasing 1,000 events against what else is there -----
# One round: 999 events behind a missing seq, then the seq; time release().
BLOCK=1000
release_block() {   # STREAM KEY-EXPRESSION -> ms of the release of BLOCK events
    local s=$1 key=$2 start
    start=$(psql_bench -Atc "SELECT coalesce((SELECT max(seq) FROM ordered_events.released WHERE stream = '$s' AND key = $key), 0) + 1")
    psql_bench -c "INSERT INTO ordered_events.inbox (stream, seq, key)
                   SELECT '$s', g, $key FROM generate_series($start + 1, $start + $BLOCK - 1) g" >/dev/null
    psql_bench -c "SELECT ordered_events.ingest('$s', $start, $key)" >/dev/null
    time_sql "SELECT ordered_events.release('$s')"
}
compare_blocks() {   # FIGURE OURS_STREAM BASE_STREAM KEY
    local ours=() base=()
    for _ in $(seq $((ROUNDS * 3))); do
        ours+=("$(release_block "$2" "$4")")
        base+=("$(release_block "$3" "$4")")
    done
    report "$1" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${base[@]}" | median)" ms "<=" 2 \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${base[@]}" | spread)"
}

psql_bench <<SQL >/dev/null
SELECT ordered_events.create_stream('rel4_flat');
SELECT ordered_events.create_stream('rel4_backlog');
-- the backlog: far beyond a second gap, never reached
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'rel4_backlog', g, 'k' || (g % 1000), '{"n": 1}'
  FROM generate_series(1000000000, 1000000000 + $N - 1) g;
CHECKPOINT;
SQL
compare_blocks "4 release 1,000 with $N pending beyond vs none" rel4_backlog rel4_flat "'hot'"

psql_bench <<SQL >/dev/null
SELECT ordered_events.create_stream('rel8_few', sequencing => 'per_key', max_release_batch => 1000000);
SELECT ordered_events.create_stream('rel8_many', sequencing => 'per_key', max_release_batch => 1000000);
INSERT INTO ordered_events.inbox (stream, seq, key) SELECT 'rel8_few', 1, 'k' || g FROM generate_series(1, 10) g;
INSERT INTO ordered_events.inbox (stream, seq, key) SELECT 'rel8_many', 1, 'k' || g FROM generate_series(1, $IDLE_KEYS) g;
SELECT ordered_events.release('rel8_few');
SELECT ordered_events.release('rel8_many');
-- idle: their arrivals were taken long ago, and vacuum has been by
VACUUM ANALYZE ordered_events.key_arrivals, ordered_events.progress, ordered_events.event_store;
CHECKPOINT;
SQL
compare_blocks "8 per-key: one key's gap, $IDLE_KEYS idle keys vs 10" rel8_many rel8_few "'hot'"
