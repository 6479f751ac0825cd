--
-- docs_handlers: the SQL examples of docs/handlers.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
SELECT ordered_events.create_stream('orders', sequencing => 'per_key');

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
    RETURN (jsonb_build_object('status', next,                  -- the order's new state
                               'paid', coalesce(e.payload -> 'amount', state -> 'paid')),
            jsonb_build_object('status', next))::ordered_events.step;  -- the result
END;
$$;

SELECT ordered_events.create_consumer('order_fsm',
           handler => 'shop.order_fsm(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('order_fsm', 'orders');

INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES
    ('orders', 2, 'o1', '{"op": "pay", "amount": 30}'),
    ('orders', 1, 'o1', '{"op": "create"}'),
    ('orders', 1, 'o2', '{"op": "create"}'),
    ('orders', 2, 'o2', '{"op": "ship"}'),
    ('orders', 3, 'o2', '{"op": "pay", "amount": 12}'),
    ('orders', 3, 'o1', '{"op": "ship"}');

SELECT ordered_events.release('orders');      -- the worker does both by itself
SELECT ordered_events.process('order_fsm');   -- the events applied
--  6

SELECT key, state, last_seq, processed_count, error_count
  FROM ordered_events.key_state WHERE consumer = 'order_fsm' ORDER BY key;
--  key |               state               | last_seq | processed_count | error_count
-- -----+-----------------------------------+----------+-----------------+-------------
--  o1  | {"paid": 30, "status": "shipped"} |        3 |               3 |           0
--  o2  | {"paid": 12, "status": "paid"}    |        3 |               3 |           1

SELECT position, seq, key, result
  FROM ordered_events.results WHERE consumer = 'order_fsm';
--  position | seq | key |        result
-- ----------+-----+-----+-----------------------
--         1 |   1 | o1  | {"status": "created"}
--         2 |   2 | o1  | {"status": "paid"}
--         3 |   3 | o1  | {"status": "shipped"}
--         4 |   1 | o2  | {"status": "created"}
--         5 |   3 | o2  | {"status": "paid"}

SELECT consumer, seq, key, reason, detail FROM ordered_events.unprocessed;
--  consumer  | seq | key |      reason      |                       detail
-- -----------+-----+-----+------------------+----------------------------------------------------
--  order_fsm |   2 | o2  | exception_thrown | SQLSTATE P0001: order o2: cannot ship when created

SELECT ordered_events.process('order_fsm');   -- nothing left
--  0

-- "Dead letters": the count is printed, not the time
\o /dev/null

SELECT consumer, count(*), max(received_at)
  FROM ordered_events.unprocessed WHERE consumer IS NOT NULL GROUP BY consumer;

\o

SELECT ordered_events.create_stream('order_status', gap_policy => 'fence');
SELECT ordered_events.create_consumer('status_feed',
           handler => 'shop.order_fsm(jsonb, ordered_events.event)',
           output_stream => 'order_status');        -- alignment => 'inherit'
SELECT ordered_events.subscribe('status_feed', 'orders');

SELECT ordered_events.process('status_feed');
--  6
SELECT ordered_events.release('order_status');       -- derived events are released like any
--  5
SELECT seq, key, payload FROM ordered_events.released WHERE stream = 'order_status';
--  seq | key |        payload
-- -----+-----+-----------------------
--    1 | o1  | {"status": "created"}
--    2 | o1  | {"status": "paid"}
--    3 | o1  | {"status": "shipped"}
--    4 | o2  | {"status": "created"}
--    5 | o2  | {"status": "paid"}

SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['order_fsm', 'status_feed']) c;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['orders', 'order_status']) s;
DROP SCHEMA shop CASCADE;
