--
-- handler_join: one handler over two streams (docs/architecture.md, rule 11).  A
-- key's state is shared by all the consumer's streams, so a handler joins
-- streams by key; the handler sees the events in the consumer's merged
-- order, and the results come out in that order: the order peek() gives on
-- a consumer without handler subscribed the same way.
--
-- Every time is explicit: pg_temp.at(s) is s seconds after the epoch of the
-- test, 2026-01-01 00:00:00+00.  process() is called by hand.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE FUNCTION pg_temp.at(s numeric)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT timestamptz '2026-01-01 00:00:00+00' + s * interval '1 s'
$$;

-- One event, written (alignment_ts) at al seconds, happened lag seconds
-- from then.
CREATE FUNCTION pg_temp.ev(stream text, seq bigint, key text, payload jsonb,
                           al numeric, lag numeric DEFAULT 0)
RETURNS ordered_events.outcome
LANGUAGE sql AS $$
    SELECT ordered_events.ingest(stream, seq, key, payload, pg_temp.at(al + lag), pg_temp.at(al))
$$;

CREATE FUNCTION pg_temp.results(c text)
RETURNS TABLE (n bigint, stream text, seq bigint, key text, result jsonb)
LANGUAGE sql AS $$
    SELECT row_number() OVER (ORDER BY r.position), r.stream, r.seq, r.key, r.result
      FROM ordered_events.results r
     WHERE r.consumer = c
     ORDER BY r.position
$$;

--
-- Orders joined with payments.  hj_join keeps, per key, the order and the
-- payment seen so far, and outputs both once both have arrived, whichever
-- came first.
--   hj_orders:   1 o1 @1, 2 o2 @2, 3 o3 @5, 4 o4 @7
--   hj_payments: 1 o2 @3, 2 o1 @4, 3 o4 @6
-- every lag 0: merged order by alignment time
--   orders/1 o1, orders/2 o2, payments/1 o2, payments/2 o1, orders/3 o3,
--   payments/3 o4, orders/4 o4
-- results: o2 at payments/1, o1 at payments/2, o4 at orders/4 (its payment
-- came first); o3 has no payment: no result, its state holds the order.
--
CREATE FUNCTION public.hj_join(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(s, CASE WHEN s ? 'order' AND s ? 'payment'
                       THEN jsonb_build_object('order', s -> 'order', 'payment', s -> 'payment')
                  END)::ordered_events.step
      FROM (SELECT coalesce(state, '{}')
                   || jsonb_build_object(CASE e.stream WHEN 'hj_orders' THEN 'order'
                                                       ELSE 'payment' END,
                                         e.payload) AS s) x
$$;

SELECT ordered_events.create_stream('hj_orders'), ordered_events.create_stream('hj_payments');
SELECT pg_temp.ev('hj_orders', 1, 'o1', '{"amount": 10}', 1),
       pg_temp.ev('hj_orders', 2, 'o2', '{"amount": 20}', 2),
       pg_temp.ev('hj_payments', 1, 'o2', '{"paid": 20}', 3),
       pg_temp.ev('hj_payments', 2, 'o1', '{"paid": 10}', 4),
       pg_temp.ev('hj_orders', 3, 'o3', '{"amount": 30}', 5),
       pg_temp.ev('hj_payments', 3, 'o4', '{"paid": 40}', 6),
       pg_temp.ev('hj_orders', 4, 'o4', '{"amount": 40}', 7);
SELECT ordered_events.release('hj_orders'), ordered_events.release('hj_payments');
SELECT ordered_events.create_consumer('hj_join_c',
           handler => 'public.hj_join(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hj_join_c', 'hj_orders'),
       ordered_events.subscribe('hj_join_c', 'hj_payments');
SELECT ordered_events.process('hj_join_c');
SELECT * FROM pg_temp.results('hj_join_c');
-- one state per key across both streams; o3 waits for its payment
SELECT key, state, last_stream, last_seq, processed_count, error_count
  FROM ordered_events.key_state WHERE consumer = 'hj_join_c' ORDER BY key;
-- o3's payment arrives: the join completes
SELECT pg_temp.ev('hj_payments', 4, 'o3', '{"paid": 30}', 8);
SELECT ordered_events.release('hj_payments');
SELECT ordered_events.process('hj_join_c');
SELECT * FROM pg_temp.results('hj_join_c') WHERE key = 'o3';

--
-- The same join with 2 partitions: key_partition(key, 2) is 1 for o1 and
-- o2, 0 for o3 and o4.  Each partition is processed on its own; a key's
-- events from both streams are in its partition, so each join still
-- completes.  Partition 0: orders/3 o3 @5, payments/3 o4 @6, orders/4 o4
-- @7 (o4 joined), payments/4 o3 @8 (o3 joined); partition 1: the 4 events
-- of o1 and o2 (o2 joined, then o1).
--
SELECT key, ordered_events.key_partition(key, 2) AS partition
  FROM unnest('{o1,o2,o3,o4}'::text[]) key;
SELECT ordered_events.create_consumer('hj_part_c', 2,
           handler => 'public.hj_join(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hj_part_c', 'hj_orders'),
       ordered_events.subscribe('hj_part_c', 'hj_payments');
SELECT ordered_events.process('hj_part_c', partition => 0);
SELECT key, result FROM pg_temp.results('hj_part_c') ORDER BY n;
SELECT ordered_events.process('hj_part_c', partition => 1);
SELECT key, result FROM pg_temp.results('hj_part_c') ORDER BY n;
-- nothing left in either partition
SELECT ordered_events.process('hj_part_c', partition => 0) AS p0,
       ordered_events.process('hj_part_c', partition => 1) AS p1;
SELECT key, state FROM ordered_events.key_state WHERE consumer = 'hj_part_c' ORDER BY key;

--
-- Results order = merged order.  hj_log outputs the event it was given;
-- hj_plain, a consumer without handler, is subscribed to the same streams
-- with the same delays.  The streams (from consumer_order's bias case, with
-- lags that differ, so that the bias moves as the pool shrinks):
--   hj_fast, lag 0:            1 @10, 2 @20, 3 @30, 4 @40
--   hj_slow, lags -60 -50 -70: 1 @65, 2 @75, 3 @85
--   hj_late, lag 0, delay 25 s: 1 @1, 2 @2
-- By raw alignment time hj_late and hj_fast would come first; the bias of
-- hj_slow (-60 s) and the delay of hj_late move them.  Processing in steps
-- of 4 and reading hj_plain in steps of 4 take the same events in the same
-- order, step by step:
--   step 1, stabilized slow 5 15 25, fast 10 20 30 40, late 26 27:
--     slow/1 :05, fast/1 :10, slow/2 :15, fast/2 :20
--   step 2, the bias of slow is now -70 s (slow/3 alone), slow/3 at 15 s:
--     slow/3, late/1 :26, late/2 :27, fast/3 :30, fast/4 :40
--
CREATE FUNCTION public.hj_log(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(NULL, jsonb_build_array(e.stream, e.seq))::ordered_events.step
$$;

SELECT ordered_events.create_stream('hj_fast'), ordered_events.create_stream('hj_slow'),
       ordered_events.create_stream('hj_late');
SELECT pg_temp.ev('hj_fast', s, 'k' || s, NULL, 10 * s) FROM generate_series(1, 4) s;
SELECT pg_temp.ev('hj_slow', 1, 'k1', NULL, 65, -60), pg_temp.ev('hj_slow', 2, 'k2', NULL, 75, -50),
       pg_temp.ev('hj_slow', 3, 'k3', NULL, 85, -70);
SELECT pg_temp.ev('hj_late', s, 'k' || s, NULL, s) FROM generate_series(1, 2) s;
SELECT ordered_events.release(s) FROM unnest('{hj_fast,hj_slow,hj_late}'::text[]) s;
SELECT ordered_events.create_consumer('hj_log_c', handler => 'public.hj_log(jsonb, ordered_events.event)');
SELECT ordered_events.create_consumer('hj_plain');
SELECT ordered_events.subscribe(c, 'hj_fast'), ordered_events.subscribe(c, 'hj_slow'),
       ordered_events.subscribe(c, 'hj_late', '25 s')
  FROM unnest('{hj_log_c,hj_plain}'::text[]) c;

CREATE TEMP TABLE plain_order (n serial, stream text, seq bigint);
-- step 1: what hj_plain would read first
INSERT INTO plain_order (stream, seq)
SELECT r.stream, r.seq FROM ordered_events.peek('hj_plain', 4) WITH ORDINALITY r ORDER BY r.ordinality;
SELECT count(*) AS read FROM ordered_events.read('hj_plain', 4);
SELECT ordered_events.process('hj_log_c', 4);
-- step 2: the rest
INSERT INTO plain_order (stream, seq)
SELECT r.stream, r.seq FROM ordered_events.peek('hj_plain') WITH ORDINALITY r ORDER BY r.ordinality;
SELECT ordered_events.process('hj_log_c');
-- the results in position order
SELECT n, stream, seq, key FROM pg_temp.results('hj_log_c');
-- the same sequence as hj_plain's
SELECT (SELECT array_agg(stream || '/' || seq ORDER BY n) FROM plain_order)
     = (SELECT array_agg(stream || '/' || seq ORDER BY n) FROM pg_temp.results('hj_log_c'))
       AS same_order;
-- and each result is the event it was produced for
SELECT bool_and(result = jsonb_build_array(stream, seq)) AS results_match
  FROM ordered_events.results WHERE consumer = 'hj_log_c';

SELECT ordered_events.drop_consumer(c)
  FROM unnest('{hj_join_c,hj_part_c,hj_log_c,hj_plain}'::text[]) c;
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'hj\_%' ORDER BY stream;
DROP FUNCTION public.hj_join(jsonb, ordered_events.event), public.hj_log(jsonb, ordered_events.event);
