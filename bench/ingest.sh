#!/usr/bin/env bash
# Figures 1 and 2: ingest cost against a plain INSERT / COPY into a bare
# table with the same columns and indexes; 1d, a producer's privilege
# check against the owner's.  The worker is off here: these
# figures measure the write path alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

set_worker off
psql_bench <<'SQL'
SELECT ordered_events.create_stream('bench_single');
SELECT ordered_events.create_stream('bench_single_pk', sequencing => 'per_key');
CREATE SCHEMA bare;
CREATE SEQUENCE bare.s_ours;
CREATE SEQUENCE bare.s_bare;
-- Same columns and indexes as ordered_events.event_store; the defaults do what
-- ingest() does for a global stream's event with no event_ts and
-- alignment_ts, except the arrival number: a constant, so that ours pays
-- for recording the arrival order and the baseline does not.
CREATE TABLE bare.events (LIKE ordered_events.event_store INCLUDING ALL);
ALTER TABLE bare.events
    ALTER lane SET DEFAULT '', ALTER last_event SET DEFAULT false,
    ALTER event_ts SET DEFAULT now(), ALTER alignment_ts SET DEFAULT clock_timestamp(),
    ALTER received_at SET DEFAULT now(), ALTER arrival SET DEFAULT 0;
CREATE TABLE bare.key_events (LIKE bare.events INCLUDING ALL);
SQL

tmp=$(mktemp -d)
cat > "$tmp/ours.sql" <<'SQL'
SELECT ordered_events.ingest('bench_single', nextval('bare.s_ours'), 'k' || :client_id, '{"n": 1}');
SQL
cat > "$tmp/bare.sql" <<'SQL'
INSERT INTO bare.events (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key, payload)
VALUES (1, '', false, nextval('bare.s_bare'), now(), clock_timestamp(), now(), 'k' || :client_id, '{"n": 1}');
SQL
cat > "$tmp/ours_pk.sql" <<'SQL'
SELECT ordered_events.ingest('bench_single_pk', nextval('bare.s_ours'), 'k' || :client_id, '{"n": 1}');
SQL
cat > "$tmp/bare_pk.sql" <<'SQL'
INSERT INTO bare.key_events (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key, payload)
VALUES (1, 'k' || :client_id, false, nextval('bare.s_bare'), now(), clock_timestamp(), now(), 'k' || :client_id, '{"n": 1}');
SQL

tps() {   # tps SCRIPT SYNCHRONOUS_COMMIT [MORE PGOPTIONS]
    PGOPTIONS="-c synchronous_commit=$2 ${3:-}" pgbench -n -M prepared -c 2 -j 2 \
        -T "$PGBENCH_SECONDS" -f "$1" "$DB" 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

# Alternate the two sides, A B A B, and report medians.
compare_tps() {   # FIGURE OURS_SCRIPT BARE_SCRIPT SYNC TARGET
    local ours=() bare=()
    for _ in $(seq "$ROUNDS"); do
        ours+=("$(tps "$2" "$4")")
        bare+=("$(tps "$3" "$4")")
    done
    report "$1" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${bare[@]}" | median)" \
        tps ">=" "$5" \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${bare[@]}" | spread)"
}

echo "1. single-row ingest (pgbench, 2 clients, ${PGBENCH_SECONDS}s x $ROUNDS rounds)"
compare_tps "1a ingest() global, sync commit off" "$tmp/ours.sql" "$tmp/bare.sql" off 0.8
compare_tps "1b ingest() global, sync commit on" "$tmp/ours.sql" "$tmp/bare.sql" on 0.8
compare_tps "1c ingest() per-key, sync commit off" "$tmp/ours_pk.sql" "$tmp/bare_pk.sql" off 0.7

# 1d: the privilege check (0.3).  The owner (the superuser that runs the
# benchmark) against a producer role granted 'write': both pay the check,
# cached per backend and role; the producer's goes through the acl once.
psql_bench <<'SQL'
CREATE ROLE bench_producer;
GRANT USAGE ON SCHEMA ordered_events, bare TO bench_producer;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean)
   TO bench_producer;
GRANT USAGE ON SEQUENCE bare.s_ours TO bench_producer;
SELECT ordered_events.grant_stream('bench_single', 'write', 'bench_producer');
SQL
ours=() owner=()
for _ in $(seq "$ROUNDS"); do
    ours+=("$(tps "$tmp/ours.sql" off "-c role=bench_producer")")
    owner+=("$(tps "$tmp/ours.sql" off)")
done
report "1d ingest() by a producer with 'write' vs by the owner" \
    "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${owner[@]}" | median)" \
    tps ">=" 0.95 \
    "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${owner[@]}" | spread)"

echo "2. bulk ingest of $BULK_ROWS rows ($ROUNDS rounds)"
csv=$tmp/ours.csv
csv_bare=$tmp/bare.csv
psql_bench -c "COPY (SELECT 'bench_bulk', g, 'k' || (g % 1000), '{\"n\": 1}' FROM generate_series(1, $BULK_ROWS) g) TO STDOUT (FORMAT csv)" > "$csv"
psql_bench -c "COPY (SELECT 1, g, 'k' || (g % 1000), '{\"n\": 1}' FROM generate_series(1, $BULK_ROWS) g) TO STDOUT (FORMAT csv)" > "$csv_bare"
chmod 755 "$tmp"; chmod 644 "$csv" "$csv_bare"
reset_bulk() {
    psql_bench <<SQL
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams WHERE stream = 'bench_bulk';
SELECT ordered_events.create_stream('bench_bulk');
TRUNCATE bare.events;
CHECKPOINT;
SQL
}
ins_ours=() ins_bare=() copy_ours=() copy_bare=()
for _ in $(seq "$ROUNDS"); do
    reset_bulk
    ins_ours+=("$(time_sql "INSERT INTO ordered_events.inbox (stream, seq, key, payload) SELECT 'bench_bulk', g, 'k' || (g % 1000), '{\"n\": 1}' FROM generate_series(1, $BULK_ROWS) g")")
    ins_bare+=("$(time_sql "INSERT INTO bare.events (stream_id, seq, key, payload) SELECT 1, g, 'k' || (g % 1000), '{\"n\": 1}' FROM generate_series(1, $BULK_ROWS) g")")
    reset_bulk
    copy_ours+=("$(time_sql "COPY ordered_events.inbox (stream, seq, key, payload) FROM '$csv' (FORMAT csv)")")
    copy_bare+=("$(time_sql "COPY bare.events (stream_id, seq, key, payload) FROM '$csv_bare' (FORMAT csv)")")
done
# rows per second: ratio of speeds = baseline time / our time
rate() { awk -v n="$BULK_ROWS" '{printf "%.0f\n", n / ($1 / 1000)}'; }
report "2a INSERT ... SELECT into inbox" \
    "$(printf '%s\n' "${ins_ours[@]}" | rate | median)" "$(printf '%s\n' "${ins_bare[@]}" | rate | median)" \
    rows/s ">=" 0.7 "$(printf '%s\n' "${ins_ours[@]}" | rate | spread)" "$(printf '%s\n' "${ins_bare[@]}" | rate | spread)"
report "2b COPY into inbox" \
    "$(printf '%s\n' "${copy_ours[@]}" | rate | median)" "$(printf '%s\n' "${copy_bare[@]}" | rate | median)" \
    rows/s ">=" 0.7 "$(printf '%s\n' "${copy_ours[@]}" | rate | spread)" "$(printf '%s\n' "${copy_bare[@]}" | rate | spread)"
rm -rf "$tmp"
