-- make demo: the seed example, released by the background worker; a consumer;
-- a handler.
\set QUIET on
\pset footer off
CREATE EXTENSION ordered_events;
SELECT ordered_events.create_stream('orders') \gset

-- After each arrival: give the worker (woken by the commit) a moment, then
-- show the contiguous range, what is released and what is pending.
\set show 'SELECT pg_sleep(0.2) \\gset \\\\ SELECT format(''[%s,%s)'', range_start, range_end) AS range, (SELECT string_agg(seq || '':'' || key, '' '' ORDER BY seq) FROM ordered_events.released) AS "released (seq:key)", (SELECT string_agg(seq::text, '' '' ORDER BY seq) FROM ordered_events.pending) AS pending FROM ordered_events.ranges;'

\echo
\echo 'Stream "orders", global sequencing from seq 1.  Events arrive out of order:'
\echo 'seq 1, 3, 2, 7, 5, 4 - and seq 6 is still on its way.'
\echo
\echo '--- seq 1 (key1) arrives'
SELECT ordered_events.ingest('orders', 1, 'key1', '{"op": "create"}') AS outcome;
:show
\echo '--- seq 3 (key1) arrives: 2 is missing, so 3 waits'
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}') AS outcome;
:show
\echo '--- seq 2 (key2) arrives: 2 and 3 are released, in order'
SELECT ordered_events.ingest('orders', 2, 'key2', '{"op": "create"}') AS outcome;
:show
\echo '--- seq 7 (key2) arrives: waits for 4, 5, 6'
SELECT ordered_events.ingest('orders', 7, 'key2', '{"op": "ship"}') AS outcome;
:show
\echo '--- seq 5 (key2) arrives'
SELECT ordered_events.ingest('orders', 5, 'key2', '{"op": "pay"}') AS outcome;
:show
\echo '--- seq 4 (key1) arrives: 4 and 5 are released; 7 still waits for 6'
SELECT ordered_events.ingest('orders', 4, 'key1', '{"op": "ship"}') AS outcome;
:show
\echo '--- a retry delivers seq 3 again: a duplicate, recorded, never released twice'
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}') AS outcome;
SELECT seq, key, reason, detail FROM ordered_events.unprocessed;
\echo '--- the missing seqs, and each key''s status'
SELECT gap_start, gap_end FROM ordered_events.gaps('orders');
SELECT key, last_released_seq, buffered_count, received_count, duplicate_count
  FROM ordered_events.key_status ORDER BY key;

\echo '--- seq 6 (key1) arrives: the gap fills, 6 and 7 are released'
SELECT ordered_events.ingest('orders', 6, 'key1', '{"op": "refund"}') AS outcome;
:show
\echo '--- the ordered view: every key''s events in order (key1: 1,3,4,6; key2: 2,5,7)'
SELECT seq, key, payload FROM ordered_events.released;
\echo '--- nobody called release(): the background worker did'
SELECT database, state, released_total FROM ordered_events.worker_status;

-- Consumers: two streams read as one merged sequence; the worked example of
-- docs/consuming.md.
SET timezone = 'UTC';
\echo
\echo '=== Consuming: two streams, one merged order ==='
\echo 'Stream "payments" is written 2 s after each event happens; "shipments" comes'
\echo 'in one batch, 12 to 8 s late.  lag = event_ts - alignment_ts.'
SELECT ordered_events.create_stream('payments') \gset
SELECT ordered_events.create_stream('shipments') \gset
INSERT INTO ordered_events.inbox (stream, seq, key, event_ts, alignment_ts) VALUES
    ('payments',  1, 'order_1', '2026-11-30 12:00:01', '2026-11-30 12:00:03'),
    ('payments',  2, 'order_2', '2026-11-30 12:00:05', '2026-11-30 12:00:07'),
    ('payments',  3, 'order_3', '2026-11-30 12:00:09', '2026-11-30 12:00:11'),
    ('shipments', 1, 'order_0', '2026-11-30 12:00:00', '2026-11-30 12:00:12'),
    ('shipments', 2, 'order_1', '2026-11-30 12:00:03', '2026-11-30 12:00:13'),
    ('shipments', 3, 'order_2', '2026-11-30 12:00:06', '2026-11-30 12:00:14');
-- Wait (at most 10 s) for the worker to release them.
DO $$
BEGIN
    FOR i IN 1 .. 200 LOOP
        EXIT WHEN (SELECT count(*) FROM ordered_events.released
                    WHERE stream IN ('payments', 'shipments')) = 6;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
SELECT stream, seq, key, event_ts::time, alignment_ts::time, event_ts - alignment_ts AS lag
  FROM ordered_events.released
 WHERE stream IN ('payments', 'shipments')
 ORDER BY alignment_ts;

\echo '--- consumer "billing" subscribes to both; bias = the average lag of what it has not read'
SELECT ordered_events.create_consumer('billing') \gset
SELECT ordered_events.subscribe('billing', 'payments') \gset
SELECT ordered_events.subscribe('billing', 'shipments') \gset
SELECT stream, delay, unread_count, bias FROM ordered_events.consumers WHERE consumer = 'billing';

\echo '--- billing reads, and records what it read in the same transaction (exactly once):'
\echo '    merged by stabilized_ts = alignment_ts + bias + delay; each stream stays in order'
CREATE TABLE billing_log (position bigint, stream text, seq bigint, key text,
                          stabilized_ts timestamptz);
BEGIN;
INSERT INTO billing_log
SELECT position, stream, seq, key, stabilized_ts
  FROM ordered_events.read('billing') WITH ORDINALITY AS r(stream, seq, key, payload, event_ts,
                                                           alignment_ts, stabilized_ts, position);
COMMIT;
SELECT stream, seq, key, stabilized_ts::time FROM billing_log ORDER BY position;
\echo '--- reading again: nothing is left'
SELECT count(*) AS unread FROM ordered_events.read('billing');

\echo '--- consumer "audit" gives shipments a delay of 5 s: they come later'
SELECT ordered_events.create_consumer('audit') \gset
SELECT ordered_events.subscribe('audit', 'payments') \gset
SELECT ordered_events.subscribe('audit', 'shipments', delay => '5 s') \gset
\echo '--- a read that rolls back consumes nothing ...'
BEGIN;
SELECT stream, seq, key, stabilized_ts::time FROM ordered_events.read('audit', 2);
ROLLBACK;
\echo '--- ... so the next read starts from the beginning again'
\echo '    (payments 3 and shipments 3 tie at 12:00:09: payments 3 was accepted first)'
SELECT stream, seq, key, alignment_ts::time, stabilized_ts::time FROM ordered_events.read('audit');

\echo '--- the consumers view'
SELECT consumer, stream, delay, consumed_count, unread_count, bias,
       last_read_at IS NOT NULL AS has_read
  FROM ordered_events.consumers;

-- Handlers: the extension applies each key's events to a state machine;
-- docs/handlers.md.
\echo
\echo '=== Processing with handlers: an order state machine ==='
\echo 'shop.order_fsm(state, event) takes an order from created to paid to shipped;'
\echo 'any other step raises an error.  The worker applies the events of "orders"'
\echo 'to it, key by key in seq order, and stores each key''s state and the results.'
CREATE SCHEMA shop;
CREATE FUNCTION shop.order_fsm(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql
AS $$
DECLARE
    op     text := e.payload ->> 'op';
    status text := state ->> 'status';          -- NULL: the order's first event
    next   text := CASE
        WHEN status IS NULL     AND op = 'create' THEN 'created'
        WHEN status = 'created' AND op = 'pay'    THEN 'paid'
        WHEN status = 'paid'    AND op = 'ship'   THEN 'shipped'
    END;
BEGIN
    IF next IS NULL THEN
        RAISE EXCEPTION 'order %: cannot % when %', e.key, op, coalesce(status, 'new');
    END IF;
    RETURN (jsonb_build_object('status', next),         -- the key's new state
            jsonb_build_object('status', next))::ordered_events.step;   -- the result
END;
$$;
SELECT ordered_events.create_consumer('order_fsm',
           handler => 'shop.order_fsm(jsonb, ordered_events.event)') \gset
SELECT ordered_events.subscribe('order_fsm', 'orders') \gset
-- Wait (at most 10 s) for the worker to apply the 7 released events.
DO $$
BEGIN
    FOR i IN 1 .. 200 LOOP
        EXIT WHEN (SELECT sum(processed_count) FROM ordered_events.key_state
                    WHERE consumer = 'order_fsm') = 7;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
\echo '--- each key''s state (key1''s refund raised: an error, its state stays)'
SELECT key, state, last_seq, processed_count, error_count
  FROM ordered_events.key_state WHERE consumer = 'order_fsm' ORDER BY key;
\echo '--- the results, in processing order'
SELECT position, seq, key, result FROM ordered_events.results WHERE consumer = 'order_fsm';
\echo '--- the event whose handler raised: a dead letter of the consumer'
SELECT consumer, seq, key, reason, detail FROM ordered_events.unprocessed
 WHERE consumer IS NOT NULL;
\echo '--- nobody called process(): the background worker did'
SELECT database, state, last_error FROM ordered_events.worker_status;
