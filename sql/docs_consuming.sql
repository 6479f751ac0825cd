--
-- docs_consuming: the SQL examples of docs/consuming.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
CREATE TABLE billing_log (stream text, seq bigint, key text, payload jsonb);
SELECT ordered_events.create_stream('payments');
SELECT ordered_events.create_stream('shipments');
SELECT ordered_events.ingest('payments', 1, 'order_1'), ordered_events.ingest('shipments', 1, 'order_0');
SELECT ordered_events.release();

SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'payments');
SELECT ordered_events.subscribe('billing', 'shipments');

BEGIN;
INSERT INTO billing_log (stream, seq, key, payload)
SELECT stream, seq, key, payload FROM ordered_events.read('billing', 100);
COMMIT;

SELECT stream, seq, key FROM billing_log ORDER BY 1, 2;
-- "The merged order: bias and delay" starts afresh
SELECT ordered_events.drop_consumer('billing');
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['payments', 'shipments']) s;
TRUNCATE billing_log;
SET IntervalStyle = postgres;   -- a client's default: bias as -00:00:02

SET timezone = 'UTC';
SELECT ordered_events.create_stream('payments');
SELECT ordered_events.create_stream('shipments');
INSERT INTO ordered_events.inbox (stream, seq, key, event_ts, alignment_ts) VALUES
    ('payments',  1, 'order_1', '2026-11-30 12:00:01', '2026-11-30 12:00:03'),
    ('payments',  2, 'order_2', '2026-11-30 12:00:05', '2026-11-30 12:00:07'),
    ('payments',  3, 'order_3', '2026-11-30 12:00:09', '2026-11-30 12:00:11'),
    ('shipments', 1, 'order_0', '2026-11-30 12:00:00', '2026-11-30 12:00:12'),
    ('shipments', 2, 'order_1', '2026-11-30 12:00:03', '2026-11-30 12:00:13'),
    ('shipments', 3, 'order_2', '2026-11-30 12:00:06', '2026-11-30 12:00:14');
SELECT ordered_events.release();              -- the worker does this by itself

SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'payments');
SELECT ordered_events.subscribe('billing', 'shipments');
SELECT stream, bias FROM ordered_events.consumers WHERE consumer = 'billing';
--  payments  | -00:00:02
--  shipments | -00:00:10
SELECT stream, seq, key, alignment_ts::time, stabilized_ts::time
  FROM ordered_events.peek('billing');        -- what read() would return
--  payments  | 1 | order_1 | 12:00:03 | 12:00:01
--  shipments | 1 | order_0 | 12:00:12 | 12:00:02
--  shipments | 2 | order_1 | 12:00:13 | 12:00:03
--  shipments | 3 | order_2 | 12:00:14 | 12:00:04
--  payments  | 2 | order_2 | 12:00:07 | 12:00:05
--  payments  | 3 | order_3 | 12:00:11 | 12:00:09

SELECT ordered_events.create_consumer('audit');
SELECT ordered_events.subscribe('audit', 'payments');
SELECT ordered_events.subscribe('audit', 'shipments', delay => '5 s');
SELECT stream, seq, key, alignment_ts::time, stabilized_ts::time
  FROM ordered_events.read('audit');
--  payments  | 1 | order_1 | 12:00:03 | 12:00:01
--  payments  | 2 | order_2 | 12:00:07 | 12:00:05
--  shipments | 1 | order_0 | 12:00:12 | 12:00:07
--  shipments | 2 | order_1 | 12:00:13 | 12:00:08
--  payments  | 3 | order_3 | 12:00:11 | 12:00:09
--  shipments | 3 | order_2 | 12:00:14 | 12:00:09

SELECT stream, seq, key, stabilized_ts::time FROM ordered_events.read('billing', 2);
--  payments  | 1 | order_1 | 12:00:01
--  shipments | 1 | order_0 | 12:00:02
SELECT stream, seq, key, stabilized_ts::time FROM ordered_events.read('billing');
--  shipments | 2 | order_1 | 12:00:04
--  payments  | 2 | order_2 | 12:00:05
--  shipments | 3 | order_2 | 12:00:05
--  payments  | 3 | order_3 | 12:00:09

-- "Exactly once, in SQL": billing has read everything

BEGIN;
INSERT INTO billing_log (stream, seq, key, payload)
SELECT stream, seq, key, payload FROM ordered_events.read('billing', 100);
COMMIT;

SELECT count(*) FROM billing_log;
-- "Work outside the database: the lease mode" (receipts from the first batch on)
SELECT setval('ordered_events.lease_batch_seq', 1, false);
SELECT ordered_events.create_consumer('mailer', delivery => 'lease', max_attempts => 5);
SELECT ordered_events.subscribe('mailer', 'payments');

-- a worker leases up to 10 events for a minute
SELECT seq, key, receipt, attempt
  FROM ordered_events.receive('mailer', 10, visibility => '1 min');
--  seq |   key   | receipt | attempt
--    1 | order_1 |   65536 |       1
--    2 | order_2 |   65537 |       1
--    3 | order_3 |   65538 |       1

-- orders 1 and 3 mailed; the mail service refused order 2 for now
SELECT ordered_events.ack('mailer', ARRAY[65536, 65538]);
--  2
SELECT ordered_events.nack('mailer', ARRAY[65537], delay => '30 s');
--  1
SELECT seq, key, attempt, visible_until > now() AS away FROM ordered_events.leases
 WHERE consumer = 'mailer';
--  2 | order_2 | 1 | t
SELECT ordered_events.drop_consumer('mailer');
-- "Parallel partitions": partition 0
CREATE TABLE shipping_log (stream text, seq bigint, key text, payload jsonb);
SELECT ordered_events.create_stream('orders');
SELECT count(*) FROM (SELECT ordered_events.ingest('orders', s, 'key' || s) FROM generate_series(1, 16) s) i;
SELECT ordered_events.release('orders');
\set i 0

SELECT ordered_events.create_consumer('shipping', partitions => 4);
SELECT ordered_events.subscribe('shipping', 'orders');

-- session i, for i = 0 .. 3, in its own loop:
BEGIN;
INSERT INTO shipping_log (stream, seq, key, payload)
SELECT stream, seq, key, payload FROM ordered_events.read('shipping', 100, partition => :i);
COMMIT;

SELECT seq, key, ordered_events.key_partition(key, 4) AS partition FROM shipping_log ORDER BY seq;
SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['billing', 'audit', 'shipping']) c;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['payments', 'shipments', 'orders']) s;
DROP TABLE billing_log, shipping_log;
RESET timezone;
RESET IntervalStyle;
