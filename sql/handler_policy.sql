--
-- The failure policy of handler consumers (src/handler.c, docs/handlers.md
-- "When a handler fails"): retries with a growing delay, then a dead letter
-- or a held key; redrive() and skip_held().  While an event of a key waits,
-- the key's later events wait behind it and every other key goes on.
-- Retries are due at handler_state.next_attempt_at: the test moves that
-- stored clock instead of sleeping.
--
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CREATE SCHEMA hp;
CREATE SEQUENCE hp.calls;
CREATE TABLE hp.broken (key text PRIMARY KEY);     -- its keys' events raise
CREATE TABLE hp.good_cards (card text PRIMARY KEY);
INSERT INTO hp.good_cards VALUES ('visa');

-- Counts the events of a key; raises for the keys in hp.broken.
CREATE FUNCTION hp.count(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('hp.calls');
    IF EXISTS (SELECT FROM hp.broken b WHERE b.key = e.key) THEN
        RAISE EXCEPTION 'key % is broken', e.key USING ERRCODE = 'data_exception';
    END IF;
    RETURN ROW(jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
               to_jsonb(e.seq))::ordered_events.step;
END $$;

-- An order state machine: created -> paid -> shipped; a payment with a card
-- that hp.good_cards does not know raises.
CREATE FUNCTION hp.order_step(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
DECLARE
    status text := state ->> 'status';
    op text := e.payload ->> 'op';
    next text;
BEGIN
    IF op = 'pay' AND NOT EXISTS (SELECT FROM hp.good_cards c WHERE c.card = e.payload ->> 'card') THEN
        RAISE EXCEPTION 'card % declined', e.payload ->> 'card';
    END IF;
    next := CASE WHEN status IS NULL AND op = 'create' THEN 'created'
                 WHEN status = 'created' AND op = 'pay' THEN 'paid'
                 WHEN status = 'paid' AND op = 'ship' THEN 'shipped' END;
    IF next IS NULL THEN
        RAISE EXCEPTION 'cannot % an order that is %', op, coalesce(status, 'new');
    END IF;
    RETURN ROW(jsonb_build_object('status', next), to_jsonb(next))::ordered_events.step;
END $$;

SELECT ordered_events.create_stream('hp_s');

--
-- Bad options: 22023, a NULL 22004, the policy of a consumer without a
-- handler 22023 (at creation) or 42809 (alter_consumer).
--
SELECT ordered_events.create_consumer('hp_bad', handler => 'hp.count(jsonb, ordered_events.event)',
                                      on_error => 'retry');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('hp_bad', handler => 'hp.count(jsonb, ordered_events.event)',
                                      max_attempts => 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('hp_bad', handler => 'hp.count(jsonb, ordered_events.event)',
                                      retry_delay => '-1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('hp_bad', handler => 'hp.count(jsonb, ordered_events.event)',
                                      on_error => NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('hp_bad', on_error => 'hold');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('hp_plain');
SELECT ordered_events.alter_consumer('hp_plain', max_attempts => 3);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.redrive('hp_plain');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.redrive('hp_nobody');
\echo SQLSTATE :SQLSTATE
SELECT count(*) AS consumers FROM ordered_events.consumer_def WHERE consumer LIKE 'hp\_bad%';

--
-- Retries: 3 attempts, 10 s then 20 s after the failures.  k1's events
-- wait behind its first while k2 goes on.
--
SELECT ordered_events.create_consumer('hp_retry', handler => 'hp.count(jsonb, ordered_events.event)',
                                      max_attempts => 3, retry_delay => '10 s');
SELECT ordered_events.subscribe('hp_retry', 'hp_s');
INSERT INTO hp.broken VALUES ('k1');
SELECT count(*) FROM (
    SELECT ordered_events.ingest('hp_s', g, CASE WHEN g IN (1, 3, 4) THEN 'k1' ELSE 'k2' END)
      FROM generate_series(1, 5) g) i;
SELECT ordered_events.release('hp_s');
BEGIN;
SELECT ordered_events.process('hp_retry');
SELECT key, state, last_seq, processed_count, error_count, attempts, held,
       round(extract(epoch FROM next_attempt_at - now())) AS retry_in_s
  FROM ordered_events.key_state WHERE consumer = 'hp_retry' ORDER BY key;
COMMIT;
SELECT key, seq, dead_letter FROM ordered_events.handler_parked
 WHERE consumer_id = (SELECT consumer_id FROM ordered_events.consumer_def WHERE consumer = 'hp_retry')
 ORDER BY position;
SELECT metric, value FROM ordered_events.metrics
 WHERE consumer = 'hp_retry' AND metric LIKE 'ordered\_events\_handler\_%' ORDER BY metric;
-- not due: nothing to do, and no worker is asked to
SELECT ordered_events.process('hp_retry');
SELECT count(*) AS listed FROM ordered_events.consumers_with_work() WHERE consumer = 'hp_retry';
-- due: the second attempt fails, the next waits 20 s
UPDATE ordered_events.handler_state SET next_attempt_at = now() - interval '1 s'
 WHERE key = 'k1' AND consumer_id = (SELECT consumer_id FROM ordered_events.consumer_def WHERE consumer = 'hp_retry');
SELECT consumer, partition FROM ordered_events.consumers_with_work() WHERE consumer = 'hp_retry';
BEGIN;
SELECT ordered_events.process('hp_retry');
SELECT attempts, round(extract(epoch FROM next_attempt_at - now())) AS retry_in_s
  FROM ordered_events.key_state WHERE consumer = 'hp_retry' AND key = 'k1';
COMMIT;
-- fixed before the third, and re-driven rather than waiting 20 s: k1's
-- three events applied in their order
DELETE FROM hp.broken;
SELECT ordered_events.redrive('hp_retry', 'k1');
SELECT ordered_events.process('hp_retry');
SELECT string_agg(key || ':' || seq, ',' ORDER BY position) AS results
  FROM ordered_events.results WHERE consumer = 'hp_retry';
SELECT key, state, processed_count, error_count, attempts, next_attempt_at, held
  FROM ordered_events.key_state WHERE consumer = 'hp_retry' ORDER BY key;
SELECT count(*) AS parked FROM ordered_events.handler_parked;
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hp_retry';
-- k1's first, k2's two, k1's first again, then k1's three
SELECT nextval('hp.calls') - 1 AS calls;

--
-- Attempts used up under 'dead_letter' (0 s between them): the event is a
-- dead letter after its second failure, and its key goes on.
--
SELECT ordered_events.create_consumer('hp_dl', handler => 'hp.count(jsonb, ordered_events.event)',
                                      max_attempts => 2, retry_delay => '0 s');
SELECT ordered_events.create_stream('hp_d');
SELECT ordered_events.subscribe('hp_dl', 'hp_d');
INSERT INTO hp.broken VALUES ('d1');
SELECT count(*) FROM (SELECT ordered_events.ingest('hp_d', g, 'd1') FROM generate_series(1, 2) g) i;
SELECT ordered_events.release('hp_d');
SELECT ordered_events.process('hp_dl');     -- 1 fails, 2 waits
SELECT ordered_events.process('hp_dl');     -- 1 fails again: a dead letter; 2 fails once
DELETE FROM hp.broken;
SELECT ordered_events.process('hp_dl');     -- 2 applied
SELECT seq, reason, detail FROM ordered_events.unprocessed WHERE consumer = 'hp_dl';
SELECT string_agg(seq::text, ',' ORDER BY position) AS results
  FROM ordered_events.results WHERE consumer = 'hp_dl';
SELECT state, processed_count, error_count, attempts FROM ordered_events.key_state
 WHERE consumer = 'hp_dl';

--
-- Re-drive of dead letters: against the current state, after the key's
-- later events, in their order; a success removes the dead letter.
--
SELECT ordered_events.redrive('hp_dl', 'nobody');
SELECT ordered_events.redrive('hp_dl');
SELECT ordered_events.redrive('hp_dl');     -- queued already: nothing more
SELECT ordered_events.process('hp_dl');
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hp_dl';
SELECT string_agg(seq::text, ',' ORDER BY position) AS results
  FROM ordered_events.results WHERE consumer = 'hp_dl';
SELECT state, processed_count FROM ordered_events.key_state WHERE consumer = 'hp_dl';

-- A re-driven dead letter that fails for good again stays a dead letter,
-- with its new error.
SELECT ordered_events.create_consumer('hp_dl2', handler => 'hp.count(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hp_dl2', 'hp_d');
INSERT INTO hp.broken VALUES ('d1');
SELECT ordered_events.process('hp_dl2');
UPDATE ordered_events.unprocessed SET detail = 'the first failure' WHERE consumer = 'hp_dl2';
SELECT ordered_events.redrive('hp_dl2');
SELECT ordered_events.process('hp_dl2');
SELECT seq, detail FROM ordered_events.unprocessed WHERE consumer = 'hp_dl2' ORDER BY seq;
DELETE FROM hp.broken;

--
-- Hold: the order state machine holds o1 on a declined card; its later
-- events wait, o2 goes on.  The data is fixed, o1 re-driven: applied in
-- order, up to a second ship, which holds it again and is skipped.  o3's
-- payment is skipped: a dead letter with the reason; its ship then fails
-- on an unpaid order and holds o3 again.
--
SELECT ordered_events.create_stream('orders', sequencing => 'per_key');
SELECT ordered_events.create_consumer('order_status',
                                      handler => 'hp.order_step(jsonb, ordered_events.event)',
                                      on_error => 'hold', max_attempts => 1);
SELECT ordered_events.subscribe('order_status', 'orders');
SELECT count(*) FROM (
    SELECT ordered_events.ingest('orders', seq, key, payload::jsonb)
      FROM (VALUES (1, 'o1', '{"op": "create"}'), (2, 'o1', '{"op": "pay", "card": "amex"}'),
                   (3, 'o1', '{"op": "ship"}'),
                   (1, 'o2', '{"op": "create"}'), (2, 'o2', '{"op": "pay", "card": "visa"}'),
                   (3, 'o2', '{"op": "ship"}'),
                   (1, 'o3', '{"op": "create"}'), (2, 'o3', '{"op": "pay", "card": "diners"}'),
                   (3, 'o3', '{"op": "ship"}')) v(seq, key, payload)) i;
SELECT ordered_events.release('orders');
SELECT ordered_events.process('order_status');
SELECT consumer, key, stream, seq, attempts, last_error, held_since IS NOT NULL AS held
  FROM ordered_events.held ORDER BY key;
SELECT key, state, held FROM ordered_events.key_state WHERE consumer = 'order_status' ORDER BY key;
-- a later event of a held key waits too
SELECT ordered_events.ingest('orders', 4, 'o1', '{"op": "ship"}');
SELECT ordered_events.release('orders');
SELECT ordered_events.process('order_status');
SELECT ordered_events.process('order_status');
SELECT key, count(*) AS waiting FROM ordered_events.handler_parked p
  JOIN ordered_events.consumer_def c USING (consumer_id)
 WHERE c.consumer = 'order_status' GROUP BY key ORDER BY key;
SELECT metric, value FROM ordered_events.metrics
 WHERE consumer = 'order_status' AND metric LIKE 'ordered\_events\_handler\_%' ORDER BY metric;
-- the data is fixed and o1 re-driven: pay, ship, then the second ship fails
INSERT INTO hp.good_cards VALUES ('amex');
SELECT ordered_events.redrive('order_status', 'o1');
SELECT ordered_events.process('order_status');
SELECT key, seq, last_error FROM ordered_events.held ORDER BY key;
SELECT ordered_events.skip_held('order_status', 'o1', 'shipped twice');
SELECT ordered_events.skip_held('order_status', 'o3', 'card refused by the bank');
SELECT ordered_events.skip_held('order_status', 'o3', 'again');    -- not held any more: 0
SELECT ordered_events.skip_held('order_status', 'o3', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.process('order_status');
SELECT key, seq, detail FROM ordered_events.unprocessed WHERE consumer = 'order_status'
 ORDER BY key, seq;
SELECT key, seq, result FROM ordered_events.results WHERE consumer = 'order_status'
 ORDER BY position;
SELECT key, state, processed_count, error_count, held FROM ordered_events.key_state
 WHERE consumer = 'order_status' ORDER BY key;
SELECT count(*) AS held FROM ordered_events.held;

--
-- alter_consumer() changes the policy; NULL keeps a value.
--
SELECT ordered_events.alter_consumer('hp_dl', on_error => 'hold', retry_delay => '5 s');
SELECT consumer, on_error, max_attempts, retry_delay FROM ordered_events.consumer_def
 WHERE consumer = 'hp_dl';
SELECT ordered_events.alter_consumer('hp_dl', max_attempts => 101);
\echo SQLSTATE :SQLSTATE

--
-- drop_stream(): its parked events go, and the key waits no more.
--
INSERT INTO hp.broken VALUES ('d1');
SELECT ordered_events.ingest('hp_d', 3, 'd1');
SELECT ordered_events.release('hp_d');
SELECT ordered_events.process('hp_dl');
SELECT held FROM ordered_events.key_state WHERE consumer = 'hp_dl';
SELECT ordered_events.drop_stream('hp_d');
SELECT attempts, next_attempt_at, held FROM ordered_events.key_state WHERE consumer = 'hp_dl';
SELECT count(*) AS parked FROM ordered_events.handler_parked;

SELECT ordered_events.drop_consumer(c)
  FROM unnest('{hp_plain,hp_retry,hp_dl,hp_dl2,order_status}'::text[]) c;
SELECT count(*) AS states FROM ordered_events.handler_state;
SELECT ordered_events.drop_stream(s) FROM unnest('{hp_s,orders}'::text[]) s;
DROP SCHEMA hp CASCADE;
