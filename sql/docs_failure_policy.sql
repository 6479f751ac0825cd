--
-- docs_failure_policy: the SQL examples of docs/handlers.md "When a handler
-- fails", word for word, in the page's order, and the failure-policy
-- queries of docs/monitoring.md and docs/troubleshooting.md
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them: here the retries, which the page waits for, are
-- made due by moving the stored clock (handler_state.next_attempt_at)
-- instead of sleeping.  The results take positions from the sequence that
-- all consumers share, which is put back as it was at the end, for the
-- positions the next pages print.
--
SELECT last_value AS result_position, is_called::text AS result_position_called
  FROM ordered_events.result_position_seq \gset
CREATE SCHEMA store;
CREATE TABLE store.accepted_cards (card text PRIMARY KEY);
INSERT INTO store.accepted_cards VALUES ('visa');

CREATE FUNCTION store.order_step(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql
AS $$
DECLARE
    op     text := e.payload ->> 'op';
    status text := state ->> 'status';
    next   text := CASE
        WHEN status IS NULL     AND op = 'create' THEN 'created'
        WHEN status = 'created' AND op = 'pay'    THEN 'paid'
        WHEN status = 'paid'    AND op = 'ship'   THEN 'shipped'
    END;
BEGIN
    IF op = 'pay' AND NOT EXISTS (SELECT FROM store.accepted_cards c
                                   WHERE c.card = e.payload ->> 'card') THEN
        RAISE EXCEPTION 'order %: card % declined', e.key, e.payload ->> 'card';
    END IF;
    IF next IS NULL THEN
        RAISE EXCEPTION 'order %: cannot % when %', e.key, op, coalesce(status, 'new');
    END IF;
    RETURN (jsonb_build_object('status', next),
            jsonb_build_object('status', next))::ordered_events.step;
END;
$$;

SELECT ordered_events.create_stream('checkout', sequencing => 'per_key');
SELECT ordered_events.create_consumer('fulfilment',
           handler => 'store.order_step(jsonb, ordered_events.event)',
           on_error => 'hold', max_attempts => 3, retry_delay => '1 min');
SELECT ordered_events.subscribe('fulfilment', 'checkout');

INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES
    ('checkout', 1, 'o1', '{"op": "create"}'),
    ('checkout', 2, 'o1', '{"op": "pay", "card": "amex"}'),
    ('checkout', 3, 'o1', '{"op": "ship"}'),
    ('checkout', 1, 'o2', '{"op": "create"}'),
    ('checkout', 2, 'o2', '{"op": "pay", "card": "visa"}'),
    ('checkout', 3, 'o2', '{"op": "ship"}'),
    ('checkout', 1, 'o3', '{"op": "create"}'),
    ('checkout', 2, 'o3', '{"op": "pay", "card": "diners"}');

SELECT ordered_events.release('checkout');
SELECT ordered_events.process('fulfilment');   -- the worker does both by itself
--  8

SELECT key, state, last_seq, attempts,
       ceil(extract(epoch FROM next_attempt_at - now()) / 60) AS retry_in_min, held
  FROM ordered_events.key_state WHERE consumer = 'fulfilment' ORDER BY key;
--  key |         state         | last_seq | attempts | retry_in_min | held
-- -----+-----------------------+----------+----------+--------------+------
--  o1  | {"status": "created"} |        2 |        1 |            1 | f
--  o2  | {"status": "shipped"} |        3 |        0 |              | f
--  o3  | {"status": "created"} |        2 |        1 |            1 | f

-- the retries, a minute and then two minutes later, made due at once
UPDATE ordered_events.handler_state SET next_attempt_at = now() - interval '1 s'
 WHERE next_attempt_at IS NOT NULL;
SELECT ordered_events.process('fulfilment');
SELECT key, attempts, ceil(extract(epoch FROM next_attempt_at - now()) / 60) AS retry_in_min
  FROM ordered_events.key_state WHERE consumer = 'fulfilment' AND attempts > 0 ORDER BY key;
UPDATE ordered_events.handler_state SET next_attempt_at = now() - interval '1 s'
 WHERE next_attempt_at IS NOT NULL;
SELECT ordered_events.process('fulfilment');

SELECT key, stream, seq, attempts, last_error FROM ordered_events.held
 WHERE consumer = 'fulfilment' ORDER BY key;
--  key |  stream  | seq | attempts |                   last_error
-- -----+----------+-----+----------+------------------------------------------------
--  o1  | checkout |   2 |        3 | SQLSTATE P0001: order o1: card amex declined
--  o3  | checkout |   2 |        3 | SQLSTATE P0001: order o3: card diners declined

SELECT key, state, attempts, next_attempt_at, held
  FROM ordered_events.key_state WHERE consumer = 'fulfilment' ORDER BY key;
--  key |         state         | attempts | next_attempt_at | held
-- -----+-----------------------+----------+-----------------+------
--  o1  | {"status": "created"} |        3 |                 | t
--  o2  | {"status": "shipped"} |        0 |                 | f
--  o3  | {"status": "created"} |        3 |                 | t

-- docs/monitoring.md: with o1 and o3 held
-- handler consumers: held keys, and keys waiting for a retry
SELECT consumer, count(*) FILTER (WHERE held) AS held_keys,
       count(*) FILTER (WHERE NOT held) AS retrying_keys,
       min(next_attempt_at) AS next_retry_at
  FROM ordered_events.key_state
 WHERE held OR next_attempt_at IS NOT NULL
 GROUP BY consumer;

-- docs/troubleshooting.md: its output holds times, so it is not printed
\o /dev/null
-- held keys: the event each waits on, and why
SELECT consumer, key, stream, seq, attempts, last_error, held_since
  FROM ordered_events.held ORDER BY held_since;
-- keys waiting for a retry, and when it comes
SELECT consumer, key, attempts, next_attempt_at
  FROM ordered_events.key_state
 WHERE next_attempt_at IS NOT NULL AND NOT held ORDER BY next_attempt_at;
\o

INSERT INTO store.accepted_cards VALUES ('amex');
SELECT ordered_events.redrive('fulfilment', 'o1');
--  1
SELECT ordered_events.process('fulfilment');   -- the worker does it by itself
--  2

SELECT key, seq, result FROM ordered_events.results
 WHERE consumer = 'fulfilment' ORDER BY position;
--  key | seq |        result
-- -----+-----+-----------------------
--  o1  |   1 | {"status": "created"}
--  o2  |   1 | {"status": "created"}
--  o2  |   2 | {"status": "paid"}
--  o2  |   3 | {"status": "shipped"}
--  o3  |   1 | {"status": "created"}
--  o1  |   2 | {"status": "paid"}
--  o1  |   3 | {"status": "shipped"}

SELECT ordered_events.skip_held('fulfilment', 'o3', 'card refused by the bank');
--  1

SELECT key, seq, detail FROM ordered_events.unprocessed WHERE consumer = 'fulfilment';
--  key | seq |                                                           detail
-- -----+-----+-----------------------------------------------------------------------------------------------------------------------------
--  o3  |   2 | Skipped by postgres: card refused by the bank. Its last error, at attempt 3: SQLSTATE P0001: order o3: card diners declined

SELECT key, state, processed_count, error_count, attempts, held
  FROM ordered_events.key_state WHERE consumer = 'fulfilment' ORDER BY key;
--  key |         state         | processed_count | error_count | attempts | held
-- -----+-----------------------+-----------------+-------------+----------+------
--  o1  | {"status": "shipped"} |               3 |           3 |        0 | f
--  o2  | {"status": "shipped"} |               3 |           0 |        0 | f
--  o3  | {"status": "created"} |               2 |           3 |        0 | f

SELECT ordered_events.alter_consumer('fulfilment', max_attempts => 5, retry_delay => '30 s');
SELECT consumer, on_error, max_attempts, retry_delay FROM ordered_events.consumer_def
 WHERE consumer = 'fulfilment';

SELECT ordered_events.drop_consumer('fulfilment');
SELECT ordered_events.drop_stream('checkout');
DROP SCHEMA store CASCADE;
SELECT setval('ordered_events.result_position_seq', :result_position, :'result_position_called')
    AS result_position \gset
