#!/usr/bin/env bash
# Figures 16: processing that keeps going (issue 22, DESIGN.md 8.2).  The
# trivial handler is bench_processing.count_last(state, event), LANGUAGE
# sql: the key's state is its count and last payload, the result its seq.
#   16a. Release latency of an unrelated stream while a handler is slow:
#        a handler consumer (1 partition) whose handler sleeps 10 ms per
#        event works through a backlog of B events (quick 2,000, full
#        10,000: 20 s, 100 s of handler time); meanwhile pgbench ingests
#        single events (one a transaction, Poisson arrivals at 25/s, for P
#        seconds: quick 12, full 80) into another stream, which no consumer
#        reads.  Per event, released_at (lane_release_log, the release
#        step's clock) - received_at (the start of the ingest's
#        transaction).  The baseline is the same probe, the same length, on
#        the idle system in the same run, measured first.  p50 and p99;
#        target p99 ratio <= 2 (p50 reported).  The backlog must still be
#        unfinished when the probe ends (checked: otherwise the slow
#        handler was not running for the whole probe).
#   16b. Handler throughput over 1,000 keys, N events (quick 100,000, full
#        500,000), against the PL/pgSQL loop a user would write with the
#        same function (figure 10a's baseline): a bare table with the event
#        columns walked by keyset pagination 1,000 at a time; per event it
#        reads the key's state, calls the function, upserts the state and
#        inserts the result; it moves a position row and commits every
#        1,000 events.  Events per second, medians of the rounds.
#        (i)  process(c, 1000) by hand on a one-partition consumer until it
#             returns 0, a commit per call, the worker off; both sides take
#             turns every tenth of the drain, as 10a.  Target >= 1.5.
#        (ii) a two-partition consumer drained by the worker(s): N events
#             ingested in one transaction into a new stream the consumer
#             is subscribed to; the time from the first release step of the
#             stream (lane_release_log.released_at) until every event is
#             applied (handler_state counts, polled every 10 ms by one
#             session, its clock_timestamp()); against the whole drain by
#             the same single PL/pgSQL loop.  The sides alternate, and
#             which goes first.  Target >= 2.5.
#   16c. Cost of errors: the same handler, raising for 15 % of the events
#        (those with hashint8(seq) % 100 < 15: deterministic) and counting
#        its calls with nextval() (not transactional: the calls that a
#        rolled-back subtransaction undid count too).  process(c, 1000) by
#        hand until 0 over M events (quick 20,000, full 100,000), 1,000
#        keys.  Handler calls per event; the target is absolute (<= 1.2):
#        as in figures 5 and 10b, the baseline column holds the target and
#        the ratio must be <= 1.
#   16d. Release -> result through the worker(s), as 10b with the sql
#        handler: one session ingests one event a transaction (pgbench,
#        Poisson arrivals at 100/s) into a global stream with a handler
#        consumer; per event lane_release_log.released_at ->
#        handler_result.produced_at.  p50 target <= 1 ms (absolute, the
#        baseline column holds it); p99 reported.
# The consumers use the defaults of the failure policy (0.2's behaviour),
# so the script runs before and after issue 22.  Not in bench/run's default
# list; run it by name:
#   unshare -m --propagation private bench/private bench/run --full bench/processing.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"

KEYS=1000
BATCH=1000
if [ "${BENCH_MODE:-quick}" = full ]; then
    N=500000; M=100000; BACKLOG=10000; PROBE_SECONDS=80; TRIALS=2000
else
    N=100000; M=20000; BACKLOG=2000; PROBE_SECONDS=12; TRIALS=300
fi
PROBE_RATE=25
PROBE_WARMUP=10
WARMUP=50
BATCHES=$((N / BATCH))
CHUNK=$((BATCHES / 10))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

load() { echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }

# report_info FIGURE OURS BASELINE UNIT SPREAD_OURS SPREAD_BASE: a figure
# without a target, in report()'s format (BASELINE "-": no ratio).
report_info() {
    local ratio=-
    [ "$3" = - ] || ratio=$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.3f", (b == 0) ? 0 : a / b}')
    printf '%s\t%s %s\t%s %s\t%s\t%s\t%s\t%s | %s\n' \
        "$1" "$2" "$4" "$3" "$4" "$ratio" "-" "reported" "${5:-}" "${6:-}" >> "$BENCH_OUT"
    printf '  %-46s ours %s %s, baseline %s %s, ratio %s (no target)\n' "$1" "$2" "$4" "$3" "$4" "$ratio"
}

check() {   # WHAT SQL-RETURNING-TRUE
    if [ "$(psql_bench -Atc "$2")" != t ]; then
        echo "$1: check failed: $2" >&2
        exit 1
    fi
}

# What an earlier run in this database left.
psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_consumer(consumer) FROM ordered_events.consumer_def
 WHERE consumer LIKE 'p\_%';
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams WHERE stream LIKE 'p\_%';
SQL
psql_bench >/dev/null <<'SQL'
DROP SCHEMA IF EXISTS bench_processing CASCADE;
CREATE SCHEMA bench_processing;
-- The handler (it runs with search_path pg_catalog, pg_temp: names are qualified).
CREATE FUNCTION bench_processing.count_last(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE sql AS $$
SELECT ROW(jsonb_build_object('count', coalesce((state ->> 'count')::bigint, 0) + 1,
                              'last', e.payload),
           to_jsonb(e.seq))::ordered_events.step
$$;
-- 16a's: the same after 10 ms of sleep.
CREATE FUNCTION bench_processing.slow(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.01);
    RETURN ROW(jsonb_build_object('count', coalesce((state ->> 'count')::bigint, 0) + 1,
                                  'last', e.payload),
               to_jsonb(e.seq))::ordered_events.step;
END
$$;
-- 16c's: the same, raising for 15 % of the seqs; every call counted.
CREATE SEQUENCE bench_processing.calls;
CREATE FUNCTION bench_processing.fails(seq bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT abs(hashint8(seq)::bigint) % 100 < 15 $$;
CREATE FUNCTION bench_processing.count_last_or_fail(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('bench_processing.calls');
    IF bench_processing.fails(e.seq) THEN
        RAISE EXCEPTION 'event % fails', e.seq;
    END IF;
    RETURN ROW(jsonb_build_object('count', coalesce((state ->> 'count')::bigint, 0) + 1,
                                  'last', e.payload),
               to_jsonb(e.seq))::ordered_events.step;
END
$$;
-- Ours by hand: BATCHES calls of process(), each committed; stops at one returning 0.
CREATE PROCEDURE bench_processing.drain(c text, batches integer) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. batches LOOP
        EXIT WHEN ordered_events.process(c, 1000) = 0;
        COMMIT;
    END LOOP;
END
$$;
-- The events a consumer has applied, from its keys' counts (processed_count
-- counts the failed ones too).
CREATE FUNCTION bench_processing.applied(c text) RETURNS bigint LANGUAGE sql STABLE AS $$
SELECT coalesce(sum(k.processed_count), 0)::bigint
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def d ON d.consumer_id = k.consumer_id
 WHERE d.consumer = c
$$;
-- The clock when consumer c has applied total events, polled every 10 ms.
-- A procedure that commits after each poll: one function call would hold
-- its snapshot for the whole drain, and the worker's updates of the same
-- 1,000 state rows could not be pruned (hundreds of versions per key, a
-- drain that slowed down as it went: 500,000 events took 25x as long as
-- 100,000 in a first form of this script).
CREATE PROCEDURE bench_processing.wait_applied(c text, total bigint, timeout_s integer,
                                               INOUT done timestamptz DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + timeout_s * interval '1 s';
BEGIN
    WHILE bench_processing.applied(c) < total LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'consumer % applied % of % events within % s',
                c, bench_processing.applied(c), total, timeout_s;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.01);
    END LOOP;
    done := clock_timestamp();
END
$$;

-- The baseline: the events in a bare table, the states, the results, the position.
CREATE TABLE bench_processing.events (
    seq bigint PRIMARY KEY,
    key text NOT NULL,
    payload jsonb,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL
);
CREATE TABLE bench_processing.state (key text PRIMARY KEY, state jsonb);
CREATE TABLE bench_processing.result (
    position bigserial PRIMARY KEY,
    seq bigint NOT NULL,
    key text NOT NULL,
    result jsonb NOT NULL
);
CREATE TABLE bench_processing.position (id integer PRIMARY KEY, last_seq bigint NOT NULL);
INSERT INTO bench_processing.position VALUES (1, 0);
-- BATCHES batches of 1,000 events after the position, a commit after each.
CREATE PROCEDURE bench_processing.baseline(batches integer) LANGUAGE plpgsql AS $$
DECLARE
    pos bigint;
    e record;
    s jsonb;
    st ordered_events.step;
    n integer;
BEGIN
    SELECT p.last_seq INTO pos FROM bench_processing.position p WHERE id = 1;
    FOR i IN 1 .. batches LOOP
        n := 0;
        FOR e IN SELECT * FROM bench_processing.events WHERE seq > pos ORDER BY seq LIMIT 1000 LOOP
            SELECT t.state INTO s FROM bench_processing.state t WHERE t.key = e.key;
            st := bench_processing.count_last(s, ROW('p_bulk', e.seq, e.key, e.payload, e.event_ts,
                                                     e.alignment_ts, false)::ordered_events.event);
            INSERT INTO bench_processing.state AS t (key, state) VALUES (e.key, st.state)
                ON CONFLICT (key) DO UPDATE SET state = excluded.state;
            IF st.result IS NOT NULL THEN
                INSERT INTO bench_processing.result (seq, key, result) VALUES (e.seq, e.key, st.result);
            END IF;
            pos := e.seq;
            n := n + 1;
        END LOOP;
        EXIT WHEN n = 0;
        UPDATE bench_processing.position SET last_seq = pos WHERE id = 1;
        COMMIT;
    END LOOP;
END
$$;
SQL

events_of() {   # -> the event columns of g, for a LATERAL subquery
    echo "'k' || (g % $KEYS) AS key, jsonb_build_object('n', g) AS payload,
          '2026-01-01'::timestamptz + g * interval '1 ms' - (g % 100) * interval '1 ms' AS event_ts,
          '2026-01-01'::timestamptz + g * interval '1 ms' AS alignment_ts"
}
drop_consumer_if() {   # CONSUMER
    psql_bench -c "DO \$\$ BEGIN PERFORM ordered_events.drop_consumer('$1');
                   EXCEPTION WHEN undefined_object THEN NULL; END \$\$" >/dev/null
}
# Empty baseline tables.  Truncated, not analyzed: a VACUUM of the empty
# state table would record it as empty and make the procedure's cached plan
# of the state lookup a sequential scan (see bench/handlers.sh).
reset_baseline() {
    psql_bench >/dev/null <<'SQL'
TRUNCATE bench_processing.state, bench_processing.result;
UPDATE bench_processing.position SET last_seq = 0;
VACUUM bench_processing.position;
SQL
}
same_states() {   # WHAT CONSUMER: its key states are the baseline's
    check "$1 same states" "SELECT count(*) = $KEYS FROM ordered_events.key_state k
                             JOIN bench_processing.state b USING (key)
                            WHERE k.consumer = '$2' AND k.state = b.state"
}
# The worker off, and no process of it left serving the database.
worker_off() {
    set_worker off
    for _ in $(seq 300); do
        [ "$(psql_bench -Atc "SELECT count(*) FROM ordered_events.worker_status
                               WHERE database = current_database() AND pid > 0")" = 0 ] && return 0
        sleep 0.1
    done
    echo "the ordered_events worker of database $DB did not stop" >&2
    psql_bench -c "SELECT * FROM ordered_events.worker_status" >&2
    exit 1
}
# The worker on and serving the database.
worker_on() {
    set_worker on
    for _ in $(seq 300); do
        [ "$(psql_bench -Atc "SELECT count(*) > 0 FROM ordered_events.worker_status
                               WHERE database = current_database() AND pid > 0")" = t ] && return 0
        sleep 0.1
    done
    echo "the ordered_events worker of database $DB did not start" >&2
    psql_bench -c "SELECT * FROM ordered_events.worker_status" >&2
    exit 1
}
until_released() {   # STREAM LAST_SEQ SECONDS: until the stream's range_end passes LAST_SEQ
    local deadline=$((SECONDS + $3))
    until [ "$(psql_bench -Atc "SELECT coalesce(max(range_end) > $2, false)
                                 FROM ordered_events.ranges WHERE stream = '$1'")" = t ]; do
        if [ $SECONDS -ge $deadline ]; then
            echo "stream $1 did not release seq $2 within $3 s" >&2
            exit 1
        fi
        sleep 0.05
    done
}

# --- 16b (i) and 16c: process() by hand, the worker off ----------------------
worker_off
echo "16b. preparing $N events over $KEYS keys"
load
psql_bench >/dev/null <<SQL
INSERT INTO bench_processing.events (seq, key, payload, event_ts, alignment_ts)
SELECT g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;
SELECT ordered_events.create_stream('p_bulk');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'p_bulk', g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;
SQL
psql_bench -c "DO \$\$ BEGIN WHILE ordered_events.release('p_bulk') > 0 LOOP COMMIT; END LOOP; END \$\$" >/dev/null
psql_bench >/dev/null <<'SQL'
VACUUM ANALYZE bench_processing.events, ordered_events.event_store, ordered_events.lane_release_log;
CHECKPOINT;
SQL

reset_by_hand() {
    drop_consumer_if p_one
    reset_baseline
    psql_bench >/dev/null <<'SQL'
VACUUM ordered_events.handler_state, ordered_events.handler_result;
SELECT ordered_events.create_consumer('p_one',
         handler => 'bench_processing.count_last(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('p_one', 'p_bulk');
SQL
}
# The turns of a round: ours, baseline, ours, ... each CHUNK batches; a last
# turn each for the call that finds nothing.
for _ in $(seq $((BATCHES / CHUNK + 1))); do
    printf "CALL bench_processing.drain('p_one', %s);\nCALL bench_processing.baseline(%s);\n" "$CHUNK" "$CHUNK"
done > "$tmp/round.sql"
echo "16b (i). process() by hand, one partition, $N events, $BATCH a transaction ($ROUNDS rounds)"
ours=() bare=()
for r in $(seq "$ROUNDS"); do
    reset_by_hand
    out=$(psql_bench -At -c '\timing on' -f "$tmp/round.sql")
    ours_ms=$(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | sed -n 'p;n' | awk '{s += $1} END {print s}')
    bare_ms=$(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | sed -n 'n;p' | awk '{s += $1} END {print s}')
    check "16b (i) ours" "SELECT bench_processing.applied('p_one') = $N"
    check "16b (i) results" "SELECT count(*) = $N FROM ordered_events.results WHERE consumer = 'p_one'"
    check "16b (i) baseline" "SELECT last_seq = $N FROM bench_processing.position"
    same_states "16b (i)" p_one
    ours+=("$(awk -v n="$N" -v ms="$ours_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    bare+=("$(awk -v n="$N" -v ms="$bare_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    echo "  round $r: ours ${ours_ms} ms, baseline ${bare_ms} ms"
done
load
report "16b(i) process() by hand, sql handler, $N events" \
    "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${bare[@]}" | median)" \
    events/s ">=" 1.5 \
    "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${bare[@]}" | spread)"
drop_consumer_if p_one
psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_stream('p_bulk');
VACUUM ordered_events.handler_state, ordered_events.handler_result;
SQL

# --- 16c: cost of errors --------------------------------------------------------
echo "16c. handler calls per event, 15 % of $M events raising, process() by hand"
load
psql_bench >/dev/null <<SQL
SELECT ordered_events.create_stream('p_err');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'p_err', g, e.* FROM generate_series(1, $M) g, LATERAL (SELECT $(events_of)) e;
SELECT ordered_events.create_consumer('p_err_c',
         handler => 'bench_processing.count_last_or_fail(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('p_err_c', 'p_err');
SQL
psql_bench -c "DO \$\$ BEGIN WHILE ordered_events.release('p_err') > 0 LOOP COMMIT; END LOOP; END \$\$" >/dev/null
failing=$(psql_bench -Atc "SELECT count(*) FROM generate_series(1, $M) g WHERE bench_processing.fails(g)")
psql_bench -c "SELECT setval('bench_processing.calls', 1, false)" >/dev/null
err_ms=$(time_sql "CALL bench_processing.drain('p_err_c', $((M / BATCH * 3 + 10)))")
calls=$(psql_bench -Atc "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM bench_processing.calls")
check "16c applied" "SELECT bench_processing.applied('p_err_c') = $M"
check "16c results" "SELECT count(*) = $((M - failing)) FROM ordered_events.results WHERE consumer = 'p_err_c'"
check "16c dead letters" "SELECT count(*) = $failing FROM ordered_events.unprocessed
                            WHERE consumer = 'p_err_c' AND reason = 'exception_thrown'"
per_event=$(awk -v c="$calls" -v n="$M" 'BEGIN {printf "%.3f", c / n}')
echo "  $calls calls for $M events ($failing raising, $(awk -v f="$failing" -v n="$M" 'BEGIN {printf "%.1f", 100 * f / n}') %), drained in $err_ms ms"
report "16c handler calls per event, 15 % raising" "$per_event" 1.2 calls "<=" 1 \
    "$calls calls, $M events, $failing raising, ${err_ms%.*} ms" "target 1.2"
drop_consumer_if p_err_c
psql_bench -c "SELECT ordered_events.drop_stream('p_err')" >/dev/null

# --- the worker -------------------------------------------------------------------
worker_on

# --- 16d: release -> result latency ----------------------------------------------
TOTAL=$((TRIALS + WARMUP))
echo "16d. release -> result through the worker ($TRIALS events at 100/s after $WARMUP warm-up)"
load
psql_bench >/dev/null <<'SQL'
SELECT ordered_events.create_stream('p_lat');
SELECT ordered_events.create_consumer('p_lat_c',
         handler => 'bench_processing.count_last(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('p_lat_c', 'p_lat');
CREATE SEQUENCE bench_processing.lat_seq;
SQL
cat > "$tmp/lat.sql" <<'SQL'
\set k random(1, 100)
SELECT ordered_events.ingest('p_lat', nextval('bench_processing.lat_seq'), 'k' || :k, '{"n": 1}');
SQL
pgbench -n -c 1 -R 100 -t "$TOTAL" -f "$tmp/lat.sql" "$DB" >/dev/null
psql_bench -Atc "CALL bench_processing.wait_applied('p_lat_c', $TOTAL, 60)" >/dev/null
psql_bench -At -F ' ' > "$tmp/lat.txt" <<SQL
SELECT round(extract(epoch FROM r.produced_at - l.released_at) * 1000, 3),
       round(extract(epoch FROM l.released_at - e.received_at) * 1000, 3)
  FROM ordered_events.results r
  JOIN ordered_events.stream_def d ON d.stream = r.stream
  JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = '' AND e.seq = r.seq
  JOIN ordered_events.lane_release_log l
    ON l.stream_id = d.stream_id AND l.lane = '' AND r.seq >= l.seq_start AND r.seq < l.seq_end
 WHERE r.consumer = 'p_lat_c' AND r.seq > $WARMUP;
SQL
[ "$(wc -l < "$tmp/lat.txt")" = "$TRIALS" ] || { echo "16d: expected $TRIALS results" >&2; exit 1; }
pct() {   # FILE COLUMN P -> the P-th percentile (nearest rank) of the column
    cut -d' ' -f"$2" "$1" | sort -g |
        awk -v p="$3" '{a[NR] = $1} END {i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; print a[i]}'
}
echo "  ingest start -> release: p50 $(pct "$tmp/lat.txt" 2 50) ms, p99 $(pct "$tmp/lat.txt" 2 99) ms"
spread_ours="p95 $(pct "$tmp/lat.txt" 1 95), max $(pct "$tmp/lat.txt" 1 100), n $TRIALS"
report "16d release -> result p50" "$(pct "$tmp/lat.txt" 1 50)" 1 ms "<=" 1 "$spread_ours" "target 1 ms"
report_info "16d release -> result p99" "$(pct "$tmp/lat.txt" 1 99)" - ms "$spread_ours" "no target"
drop_consumer_if p_lat_c
psql_bench -c "SELECT ordered_events.drop_stream('p_lat')" >/dev/null

# --- 16b (ii): two partitions drained by the worker(s) ------------------------------
echo "16b (ii). two partitions drained by the worker(s) against one PL/pgSQL loop, $N events ($ROUNDS rounds)"
load
ours_side() {   # -> ms from the stream's first release to every event applied
    psql_bench >/dev/null <<'SQL'
-- every round starts from the same tables: the last round's dropped
-- stream left 500,000 dead events (the baseline truncates its own)
VACUUM ordered_events.handler_state, ordered_events.handler_result, ordered_events.event_store,
       ordered_events.lane_release_log, ordered_events.subscription, ordered_events.release_totals,
       ordered_events.progress;
SELECT ordered_events.create_stream('p_par');
SELECT ordered_events.create_consumer('p_par_c', 2,
         handler => 'bench_processing.count_last(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('p_par_c', 'p_par');
SQL
    psql_bench -At >"$tmp/par.txt" <<SQL
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts)
SELECT 'p_par', g, e.* FROM generate_series(1, $N) g, LATERAL (SELECT $(events_of)) e;
CALL bench_processing.wait_applied('p_par_c', $N, 600) \gset
-- a statement of its own: the release log as it is now
SELECT round(extract(epoch FROM :'done'::timestamptz - min(l.released_at)) * 1000, 3)
  FROM ordered_events.lane_release_log l
  JOIN ordered_events.stream_def d USING (stream_id)
 WHERE d.stream = 'p_par';
SQL
    tail -1 "$tmp/par.txt"
}
bare_side() {
    reset_baseline
    time_sql "CALL bench_processing.baseline($((BATCHES + 1)))"
}
ours=() bare=()
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        ours_ms=$(ours_side); bare_ms=$(bare_side)
    else
        bare_ms=$(bare_side); ours_ms=$(ours_side)
    fi
    check "16b (ii) results" "SELECT count(*) = $N FROM ordered_events.results WHERE consumer = 'p_par_c'"
    check "16b (ii) baseline" "SELECT last_seq = $N FROM bench_processing.position"
    same_states "16b (ii)" p_par_c
    drop_consumer_if p_par_c
    psql_bench -c "SELECT ordered_events.drop_stream('p_par')" >/dev/null
    ours+=("$(awk -v n="$N" -v ms="$ours_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    bare+=("$(awk -v n="$N" -v ms="$bare_ms" 'BEGIN {printf "%.0f\n", n / (ms / 1000)}')")
    echo "  round $r: ours ${ours_ms} ms, baseline ${bare_ms} ms"
done
load
report "16b(ii) 2 partitions by the worker(s), $N events" \
    "$(printf '%s\n' "${ours[@]}" | median)" "$(printf '%s\n' "${bare[@]}" | median)" \
    events/s ">=" 2.5 \
    "$(printf '%s\n' "${ours[@]}" | spread)" "$(printf '%s\n' "${bare[@]}" | spread)"
psql_bench >/dev/null <<'SQL'
TRUNCATE bench_processing.events, bench_processing.state, bench_processing.result;
VACUUM ordered_events.handler_state, ordered_events.handler_result;
SQL

# --- 16a: release latency beside a slow handler ------------------------------------
echo "16a. release latency of another stream, idle and beside a 10 ms handler on $BACKLOG events ($PROBE_SECONDS s at $PROBE_RATE/s each)"
psql_bench >/dev/null <<'SQL'
SELECT ordered_events.create_stream('p_idle');
SELECT ordered_events.create_stream('p_busy');
SELECT ordered_events.create_stream('p_slow');
SELECT ordered_events.create_consumer('p_slow_c',
         handler => 'bench_processing.slow(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('p_slow_c', 'p_slow');
CREATE SEQUENCE bench_processing.seq_p_idle;
CREATE SEQUENCE bench_processing.seq_p_busy;
SQL
probe() {   # STREAM: ingest at PROBE_RATE for PROBE_SECONDS -> the number of events
    cat > "$tmp/probe.sql" <<SQL
SELECT ordered_events.ingest('$1', nextval('bench_processing.seq_$1'), 'k', '{"n": 1}');
SQL
    pgbench -n -c 1 -R "$PROBE_RATE" -T "$PROBE_SECONDS" -f "$tmp/probe.sql" "$DB" >/dev/null
    psql_bench -Atc "SELECT max(seq) FROM ordered_events.event_store e
                       JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$1'"
}
probe_latencies() {   # STREAM FILE: released_at - received_at per event after the warm-up, ms
    psql_bench -At > "$2" <<SQL
SELECT round(extract(epoch FROM l.released_at - e.received_at) * 1000, 3)
  FROM ordered_events.event_store e
  JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id
  JOIN ordered_events.lane_release_log l
    ON l.stream_id = e.stream_id AND l.lane = e.lane AND e.seq >= l.seq_start AND e.seq < l.seq_end
 WHERE d.stream = '$1' AND e.seq > $PROBE_WARMUP;
SQL
}
load
n_idle=$(probe p_idle)
until_released p_idle "$n_idle" 60
probe_latencies p_idle "$tmp/idle.txt"
echo "  idle: $n_idle events, p50 $(pct "$tmp/idle.txt" 1 50) ms, p99 $(pct "$tmp/idle.txt" 1 99) ms"

psql_bench >/dev/null <<SQL
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'p_slow', g, 'k' || (g % 100), jsonb_build_object('n', g) FROM generate_series(1, $BACKLOG) g;
SQL
until_released p_slow "$BACKLOG" 120
load
n_busy=$(probe p_busy)
left=$((BACKLOG - $(psql_bench -Atc "SELECT bench_processing.applied('p_slow_c')")))
echo "  busy: $n_busy events; $left of the $BACKLOG slow events were left when the probe ended"
if [ "$left" -le 0 ]; then
    echo "16a: the slow handler finished before the probe: the figure does not measure it" >&2
    exit 1
fi
psql_bench -Atc "CALL bench_processing.wait_applied('p_slow_c', $BACKLOG, $((BACKLOG / 50 + 120)))" >/dev/null
until_released p_busy "$n_busy" 60
probe_latencies p_busy "$tmp/busy.txt"
echo "  busy: p50 $(pct "$tmp/busy.txt" 1 50) ms, p99 $(pct "$tmp/busy.txt" 1 99) ms"
load
spread_of() { echo "p95 $(pct "$1" 1 95), max $(pct "$1" 1 100), n $(wc -l < "$1")"; }
report_info "16a release latency beside a slow handler p50" \
    "$(pct "$tmp/busy.txt" 1 50)" "$(pct "$tmp/idle.txt" 1 50)" ms \
    "$(spread_of "$tmp/busy.txt"), $left left" "$(spread_of "$tmp/idle.txt")"
report "16a release latency beside a slow handler p99" \
    "$(pct "$tmp/busy.txt" 1 99)" "$(pct "$tmp/idle.txt" 1 99)" ms "<=" 2 \
    "$(spread_of "$tmp/busy.txt"), $left left" "$(spread_of "$tmp/idle.txt")"

drop_consumer_if p_slow_c
psql_bench >/dev/null <<'SQL'
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream IN ('p_idle', 'p_busy', 'p_slow');
DROP SCHEMA bench_processing CASCADE;
SQL
