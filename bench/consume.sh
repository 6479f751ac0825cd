#!/usr/bin/env bash
# Figures 9: what consumers cost (issue 11).  The baseline is a bare table
# with the columns of the events (seq bigint primary key, key, payload,
# event_ts, alignment_ts) read by keyset pagination: one statement per
# batch that selects the next 1,000 rows after the position row's seq and
# moves the position, one transaction per batch.  Our side drains with
# `SELECT count(*) FROM ordered_events.read(c, 1000)`, one transaction per
# batch.  Each side is one long-lived session running a prepared
# statement, one round trip a batch.  In each round both drain everything,
# taking turns every tenth of the drain; a side's rate is N over the sum of
# its batches' times.
#   9a. one global stream, N released events (quick 200,000, full 1,000,000)
#   9b. 8 global streams of N/8 events each, one consumer subscribed to all
#       8 (alignment times interleave, so the merge changes streams at
#       every event)
#   9c. one per-key stream, N events over 100,000 keys
#   9d. a read of 1,000 with N unread against one with 1,000 unread (the
#       same stream; reads of the two consumers alternate, each in a
#       transaction that rolls back; psql's \timing, medians)
#   9e. a consumer with 4 partitions: two sessions at once (partitions 0-1
#       and 2-3) against one session reading the 4 partitions in turn
# Ingest with the arrival order recorded is figures 1 and 2
# (bench/ingest.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

N=$BULK_ROWS
KEYS=100000         # of the per-key stream
BATCH=1000
BATCHES=$((N / BATCH))
if [ "${BENCH_MODE:-quick}" = full ]; then READS=100; else READS=40; fi   # 9d, per side and round
set_worker off
tmp=$(mktemp -d)

# The events: events_of (bench/lib.sh), over 1,000 keys.

echo "9. preparing $N events for each shape"
psql_bench <<SQL >/dev/null
CREATE SCHEMA bare_consume;
CREATE TABLE bare_consume.events (
    seq bigint PRIMARY KEY,
    key text NOT NULL,
    payload jsonb,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL
);
CREATE TABLE bare_consume.position (id integer PRIMARY KEY, last_seq bigint NOT NULL);
INSERT INTO bare_consume.position VALUES (1, 0);
INSERT INTO bare_consume.events (seq, key, payload, event_ts, alignment_ts)
SELECT g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;

SELECT ordered_events.create_stream('cons_global');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'cons_global', g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;

SELECT ordered_events.create_stream('cons_merge_' || i)
  FROM generate_series(0, 7) i;
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'cons_merge_' || (g % 8), g / 8 + 1, e.*
  FROM generate_series(0, $N - 1) g, LATERAL (SELECT $(events_of)) e;

-- key k<g % KEYS>, each key's seqs from 1
SELECT ordered_events.create_stream('cons_per_key', sequencing => 'per_key', max_release_batch => 100000);
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'cons_per_key', (g - 1) / $KEYS + 1, 'k' || (g % $KEYS), e.payload, e.event_ts, e.alignment_ts
  FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;
SQL
for s in cons_global cons_merge_{0..7} cons_per_key; do release_all "$s" >/dev/null; done
psql_bench <<SQL >/dev/null
VACUUM ANALYZE bare_consume.events, ordered_events.event_store, ordered_events.lane_release_log;
CHECKPOINT;
SQL
psql_bench -Atc "SELECT 'released: ' || string_agg(stream || ' ' || released_count, ', ' ORDER BY stream)
                   FROM (SELECT d.stream, sum(p.released_count) AS released_count
                           FROM ordered_events.progress p JOIN ordered_events.stream_def d USING (stream_id)
                          WHERE d.stream LIKE 'cons_%' GROUP BY d.stream) s"

cat > "$tmp/bare.sql" <<'SQL'
WITH batch AS (
    SELECT seq, key, payload, event_ts, alignment_ts FROM bare_consume.events
     WHERE seq > (SELECT last_seq FROM bare_consume.position WHERE id = 1)
     ORDER BY seq LIMIT 1000),
moved AS (
    UPDATE bare_consume.position SET last_seq = (SELECT max(seq) FROM batch)
     WHERE id = 1 AND EXISTS (SELECT FROM batch))
SELECT count(*) FROM batch;
SQL

# A fresh consumer cons_c at the beginning of STREAMS.
new_consumer() {   # PARTITIONS STREAM...
    local partitions=$1 streams
    shift
    streams=$(printf ",'%s'" "$@")
    psql_bench -c "DO \$\$ BEGIN PERFORM ordered_events.drop_consumer('cons_c');
                   EXCEPTION WHEN undefined_object THEN NULL; END \$\$" \
               -c "SELECT ordered_events.create_consumer('cons_c', $partitions)" \
               -c "SELECT ordered_events.subscribe('cons_c', s) FROM unnest(ARRAY[${streams#,}]) s" >/dev/null
}
# One long-lived psql session per side, fed through a fifo, each batch a
# prepared statement timed by \timing (from sending to the result, as
# pgbench does).  The two sides take turns every CHUNK batches through one
# drain: the speed of a shared machine drifts over seconds, and alternating
# whole drains measured mostly the drift.
CHUNK=$((BATCHES / 10))
chunk=$(for _ in $(seq "$CHUNK"); do echo "EXECUTE batch;"; done)
check_drained() {   # WHAT SQL-RETURNING-TRUE
    if [ "$(psql_bench -Atc "$2")" != t ]; then
        echo "$1: not drained exactly" >&2
        exit 1
    fi
}
compare_drain() {   # FIGURE TARGET STREAM...
    local figure=$1 target=$2 ours=() bare=() ours_ms bare_ms
    shift 2
    for _ in $(seq "$ROUNDS"); do
        new_consumer 1 "$@"
        psql_bench -c "UPDATE bare_consume.position SET last_seq = 0" -c "VACUUM bare_consume.position" >/dev/null
        session_sql ours "SELECT count(*) FROM ordered_events.peek('cons_c', 1);" >/dev/null   # warm
        ours_ms=0 bare_ms=0
        for _ in $(seq $((BATCHES / CHUNK))); do
            ours_ms=$(awk -v a="$ours_ms" -v b="$(session_sql ours "$chunk")" 'BEGIN {print a + b}')
            bare_ms=$(awk -v a="$bare_ms" -v b="$(session_sql bare "$chunk")" 'BEGIN {print a + b}')
        done
        check_drained "consumer of $*" "SELECT sum(consumed_count) = $N AND sum(unread_count) = 0
                                          FROM ordered_events.consumers WHERE consumer = 'cons_c'"
        check_drained baseline "SELECT last_seq = $N FROM bare_consume.position"
        ours+=("$(awk -v n="$N" -v ms="$ours_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
        bare+=("$(awk -v n="$N" -v ms="$bare_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    done
    report "$figure" \
        "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${bare[@]}" | median)" \
        events/s ">=" "$target" \
        "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${bare[@]}" | spread)"
}

open_session ours "PREPARE batch AS SELECT count(*) FROM ordered_events.read('cons_c', $BATCH);"
open_session bare "PREPARE batch AS $(cat "$tmp/bare.sql")"
echo "9a-9c. draining $N events, $BATCH a transaction ($ROUNDS rounds)"
compare_drain "9a read() one global stream, $N events" 0.5 cons_global
compare_drain "9b read() 8 streams merged, $N events" 0.35 cons_merge_{0..7}
compare_drain "9c read() per-key stream, $KEYS keys, $N events" 0.35 cons_per_key
close_session ours
close_session bare
wait

# --- 9d: the cost of a read against the size of the pool --------------------
echo "9d. a read of $BATCH with $N unread vs $BATCH unread ($ROUNDS x $READS reads each)"
psql_bench <<SQL >/dev/null
SELECT ordered_events.create_consumer('cons_full');
SELECT ordered_events.subscribe('cons_full', 'cons_global');
SELECT ordered_events.create_consumer('cons_tail');
SELECT ordered_events.subscribe('cons_tail', 'cons_global', start => 'now');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'cons_global', g, e.* FROM generate_series($N + 1, $N + $BATCH) g, LATERAL (SELECT $(events_of)) e;
SQL
release_all cons_global >/dev/null
psql_bench -c "VACUUM ANALYZE ordered_events.event_store, ordered_events.lane_release_log" >/dev/null
check_drained "9d pools" "SELECT array_agg(unread_count ORDER BY consumer) = ARRAY[$N + $BATCH, $BATCH]::bigint[]
                            FROM ordered_events.consumers WHERE consumer IN ('cons_full', 'cons_tail')"
# The two consumers' reads alternate, each in a transaction that rolls back.
for _ in $(seq "$READS"); do
    for c in cons_full cons_tail; do
        printf 'BEGIN;\n\\timing on\nSELECT count(*) FROM ordered_events.read(%s, %s);\n\\timing off\nROLLBACK;\n' \
            "'$c'" "$BATCH"
    done
done > "$tmp/reads.sql"
full_ms=() tail_ms=()
for _ in $(seq "$ROUNDS"); do
    out=$(psql_bench -At -f "$tmp/reads.sql")
    if [ "$(grep -v '^Time:' <<<"$out" | grep -c "^$BATCH\$")" -ne $((2 * READS)) ]; then
        echo "9d: a read did not return $BATCH events" >&2
        exit 1
    fi
    mapfile -t -O "${#full_ms[@]}" full_ms < <(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | sed -n 'p;n')
    mapfile -t -O "${#tail_ms[@]}" tail_ms < <(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | sed -n 'n;p')
done
report "9d read() of $BATCH, $N unread vs $BATCH unread" \
    "$(printf '%s\n' "${full_ms[@]}" | median)" "$(printf '%s\n' "${tail_ms[@]}" | median)" ms "<=" 1.5 \
    "$(printf '%s\n' "${full_ms[@]}" | spread)" "$(printf '%s\n' "${tail_ms[@]}" | spread)"
psql_bench -c "SELECT ordered_events.drop_consumer('cons_full')" \
           -c "SELECT ordered_events.drop_consumer('cons_tail')" >/dev/null

# --- 9e: partitions in parallel ------------------------------------------------
# A session reads its partitions in turn: the next one once a read returns
# fewer than BATCH events; so a partition of u events takes floor(u/BATCH)+1
# transactions.
echo "9e. 4 partitions of $N events (cons_global): 2 sessions at once vs 1 ($ROUNDS rounds)"
cat > "$tmp/partitions.sql" <<SQL
SELECT count(*) AS n FROM ordered_events.read('cons_c', $BATCH, :p) \\gset
\\if :n < $BATCH
\\set p :p + 1
\\endif
SQL
transactions() {   # FIRST LAST partition -> transactions to drain them
    psql_bench -Atc "SELECT sum(unread_count / $BATCH + 1) FROM ordered_events.consumers
                      WHERE consumer = 'cons_c' AND partition BETWEEN $1 AND $2"
}
session() {   # FIRST-PARTITION TRANSACTIONS
    pgbench -n -M prepared -c 1 -t "$2" -D p="$1" -f "$tmp/partitions.sql" "$DB" >/dev/null 2>&1
}
partitions_rate() {   # SESSIONS -> events per second of the whole drain
    local start end all first second
    new_consumer 4 cons_global
    all=$(transactions 0 3) first=$(transactions 0 1) second=$(transactions 2 3)
    start=$(date +%s%N)
    if [ "$1" = 1 ]; then
        session 0 "$all"
    else
        session 0 "$first" &
        session 2 "$second" &
        wait
    fi
    end=$(date +%s%N)
    check_drained "9e $1 session(s)" "SELECT sum(consumed_count) = $N + $BATCH AND sum(unread_count) = 0
                                        FROM ordered_events.consumers WHERE consumer = 'cons_c'"
    awk -v n=$((N + BATCH)) -v ns=$((end - start)) 'BEGIN {printf "%.0f\n", n / (ns / 1e9)}'
}
one=() two=()
for _ in $(seq "$ROUNDS"); do
    two+=("$(partitions_rate 2)")
    one+=("$(partitions_rate 1)")
done
report "9e read() 4 partitions, 2 sessions vs 1" \
    "$(printf '%s\n' "${two[@]}" | median)" "$(printf '%s\n' "${one[@]}" | median)" events/s ">=" 1.3 \
    "$(printf '%s\n' "${two[@]}" | spread)" "$(printf '%s\n' "${one[@]}" | spread)"
psql_bench -c "SELECT ordered_events.drop_consumer('cons_c')" >/dev/null
echo "9f. ingest with the arrival order recorded: figures 1 and 2 (bench/ingest.sh)"
rm -rf "$tmp"
