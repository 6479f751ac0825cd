--
-- consumer_rebuild: reset_consumer() (docs/consuming.md, "Rebuilding a
-- handler's states"; docs/reference.md, "Consumers").  A reset forgets a
-- handler consumer's key states, results, parked and held events and dead
-- letters, and seeks every stream to the beginning: processed again, the
-- consumer has what a consumer created afresh over the same streams has
-- (the key states with the order each key's events were applied in, the
-- held keys, the dead letters, the results in processing order), also
-- after a retention deleted events (both start at the oldest kept).  What
-- it appended to an output stream stays, and is appended again.  A plain
-- consumer is sought to the beginning of every stream.  Then the errors
-- (22004, 42704, 25000, 25006, 55006 from its own handler) and who may
-- reset (the owner, a member of the owner role, a superuser; 42501 for
-- another role and without 'read').
--
-- No background worker serves this database: process() applies the events.
-- A reset concurrent with a processing step is
-- test/isolation/specs/consumer_reset_process.spec, one concurrent with a
-- processing worker test/t/042_reset_worker.pl.  The results take
-- positions from the sequence that all consumers share, which is put back
-- as it was at the end, for the positions the docs' pages print.
--
SELECT last_value AS result_position, is_called::text AS result_position_called
  FROM ordered_events.result_position_seq \gset
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never
SET jit = off;

------------------------------------------------------------------------
-- 1. The worked example of docs/consuming.md, word for word
------------------------------------------------------------------------
SELECT ordered_events.create_stream('account_events', sequencing => 'per_key');
CREATE SCHEMA bank;
CREATE FUNCTION bank.balance(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql
AS $$
SELECT (jsonb_build_object('balance', coalesce((state ->> 'balance')::numeric, 0)
                                      + (e.payload ->> 'amount')::numeric),   -- the bug:
        NULL)::ordered_events.step                                            -- a withdrawal adds
$$;
SELECT ordered_events.create_consumer('balances',
           handler => 'bank.balance(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('balances', 'account_events');

INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES
    ('account_events', 1, 'alice', '{"op": "deposit", "amount": 100}'),
    ('account_events', 2, 'alice', '{"op": "withdraw", "amount": 30}'),
    ('account_events', 1, 'bob',   '{"op": "deposit", "amount": 50}');
SELECT ordered_events.release('account_events');   -- the worker does both by itself
SELECT ordered_events.process('balances');
--  3
SELECT key, state FROM ordered_events.key_state WHERE consumer = 'balances' ORDER BY key;
--  alice | {"balance": 130}                          wrong: 100 - 30 is 70
--  bob   | {"balance": 50}

CREATE OR REPLACE FUNCTION bank.balance(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql
AS $$
SELECT (jsonb_build_object('balance', coalesce((state ->> 'balance')::numeric, 0)
                                      + CASE e.payload ->> 'op' WHEN 'withdraw' THEN -1 ELSE 1 END
                                        * (e.payload ->> 'amount')::numeric),
        NULL)::ordered_events.step
$$;
SELECT ordered_events.reset_consumer('balances');   -- the states go, every stream from the beginning
--  3
SELECT ordered_events.process('balances');          -- the worker does this by itself
--  3
SELECT key, state, processed_count FROM ordered_events.key_state
 WHERE consumer = 'balances' ORDER BY key;
--  alice | {"balance": 70} | 2
--  bob   | {"balance": 50} | 1

SELECT ordered_events.drop_consumer('balances'), ordered_events.drop_stream('account_events');
DROP SCHEMA bank CASCADE;

------------------------------------------------------------------------
-- 2. Reset and rebuild equal a fresh consumer
------------------------------------------------------------------------
-- rb.tally keeps per key the count of its events and the list of them in
-- the order they were applied; its result is the event's seq.  Version 1
-- has a bug: it fails for op 'bad'.  Both versions fail for op 'poison'.
CREATE SCHEMA rb;
CREATE FUNCTION rb.tally(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    IF e.payload ->> 'op' IN ('bad', 'poison') THEN
        RAISE EXCEPTION 'cannot tally % %', e.key, e.payload ->> 'op';
    END IF;
    RETURN (jsonb_build_object('n', coalesce((state ->> 'n')::integer, 0) + 1,
                               'events', coalesce(state -> 'events', '[]')
                                         || to_jsonb(e.stream || ':' || e.seq)),
            jsonb_build_object('seq', e.seq))::ordered_events.step;
END;
$$;
-- Every partition of a consumer processed until nothing is left to apply.
CREATE FUNCTION pg_temp.process_all(c text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    total bigint := 0;
    n bigint;
    partitions integer := (SELECT d.partitions FROM ordered_events.consumer_def d
                            WHERE d.consumer = c);
BEGIN
    FOR round IN 1 .. 100 LOOP
        n := 0;
        FOR p IN 0 .. partitions - 1 LOOP
            n := n + ordered_events.process(c, 1000, p);
        END LOOP;
        total := total + n;
        EXIT WHEN n = 0;
    END LOOP;
    RETURN total;
END;
$$;
-- What a handler consumer has: each key's state row (without times), its
-- held events, its dead letters, its results in processing order.
CREATE FUNCTION pg_temp.has(c text)
RETURNS TABLE (what text, fact text)
LANGUAGE sql AS $$
    SELECT 'key_state', format('%s %s last %s:%s processed %s errors %s attempts %s held %s',
                               k.key, k.state, k.last_stream, k.last_seq, k.processed_count,
                               k.error_count, k.attempts, k.held)
      FROM ordered_events.key_state k WHERE k.consumer = c
    UNION ALL
    SELECT 'held', format('%s %s:%s attempts %s: %s', h.key, h.stream, h.seq, h.attempts,
                          h.last_error)
      FROM ordered_events.held h WHERE h.consumer = c
    UNION ALL
    SELECT 'dead letter', format('%s:%s %s %s', u.stream, u.seq, u.key, u.detail)
      FROM ordered_events.unprocessed u WHERE u.consumer = c
    UNION ALL
    SELECT 'results', string_agg(format('%s:%s %s', r.stream, r.seq, r.key), ' '
                                 ORDER BY r.position)
      FROM ordered_events.results r WHERE r.consumer = c
    ORDER BY 1, 2
$$;
-- What one consumer has and the other has not (none: the same).
CREATE FUNCTION pg_temp.differ(a text, b text)
RETURNS TABLE (side text, what text, fact text)
LANGUAGE sql AS $$
    (SELECT a, x.* FROM pg_temp.has(a) x EXCEPT SELECT a, y.* FROM pg_temp.has(b) y)
    UNION ALL
    (SELECT b, y.* FROM pg_temp.has(b) y EXCEPT SELECT b, x.* FROM pg_temp.has(a) x)
$$;

-- Global stream rb_g: seqs 1..12 of keys k1..k4 (seq 5 'bad', seq 10
-- 'poison'); per-key stream rb_p: keys a, b, c, seqs 1..3 (b:2 'bad');
-- each released in two steps.
SELECT ordered_events.create_stream('rb_g'), ordered_events.create_stream('rb_p', 'per_key');
CREATE FUNCTION pg_temp.ingest_g(first integer, last integer)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM generate_series(first, last) s,
           LATERAL ordered_events.ingest('rb_g', s, 'k' || (s % 4 + 1),
                       jsonb_build_object('op', CASE s WHEN 5 THEN 'bad' WHEN 10 THEN 'poison'
                                                       ELSE 'add' END),
                       timestamptz '2026-01-01 08:00:00+00' + s * interval '1 min',
                       timestamptz '2026-01-01 08:00:00+00' + s * interval '1 min') o
     WHERE o = 'accepted'
$$;
CREATE FUNCTION pg_temp.ingest_p(first integer, last integer)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM unnest(ARRAY['a', 'b', 'c']) k, generate_series(first, last) s,
           LATERAL ordered_events.ingest('rb_p', s, k,
                       jsonb_build_object('op', CASE WHEN k = 'b' AND s = 2 THEN 'bad'
                                                     ELSE 'add' END),
                       timestamptz '2026-01-01 08:00:30+00' + s * interval '2 min',
                       timestamptz '2026-01-01 08:00:30+00' + s * interval '2 min') o
     WHERE o = 'accepted'
$$;
SELECT pg_temp.ingest_g(1, 6) AS g, pg_temp.ingest_p(1, 2) AS p, ordered_events.release() AS released;
SELECT pg_temp.ingest_g(7, 12) AS g, pg_temp.ingest_p(3, 3) AS p, ordered_events.release() AS released;

-- rb_hold (3 partitions) holds a failed event; rb_dead (2 partitions)
-- tries twice, then makes it a dead letter.  Both read rb_g and rb_p with
-- version 1.
SELECT ordered_events.create_consumer('rb_hold', 3, 'rb.tally(jsonb, ordered_events.event)',
                                      on_error => 'hold'),
       ordered_events.create_consumer('rb_dead', 2, 'rb.tally(jsonb, ordered_events.event)',
                                      max_attempts => 2, retry_delay => '0 s');
SELECT ordered_events.subscribe(c, s)
  FROM unnest(ARRAY['rb_hold', 'rb_dead']) c, unnest(ARRAY['rb_g', 'rb_p']) s;
SELECT pg_temp.process_all('rb_hold') > 0 AS hold_processed,
       pg_temp.process_all('rb_dead') > 0 AS dead_processed;
SELECT * FROM pg_temp.has('rb_hold');
SELECT * FROM pg_temp.has('rb_dead');

-- The fix: version 2 tallies 'bad' too.
CREATE OR REPLACE FUNCTION rb.tally(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    IF e.payload ->> 'op' = 'poison' THEN
        RAISE EXCEPTION 'cannot tally % %', e.key, e.payload ->> 'op';
    END IF;
    RETURN (jsonb_build_object('n', coalesce((state ->> 'n')::integer, 0) + 1,
                               'events', coalesce(state -> 'events', '[]')
                                         || to_jsonb(e.stream || ':' || e.seq)),
            jsonb_build_object('seq', e.seq))::ordered_events.step;
END;
$$;

-- The reset: every event unread again (21 events of the two streams), and
-- nothing of what version 1 made is left.
SELECT ordered_events.reset_consumer('rb_hold') AS hold_unread,
       ordered_events.reset_consumer('rb_dead') AS dead_unread;
SELECT * FROM pg_temp.has('rb_hold');
SELECT * FROM pg_temp.has('rb_dead');
SELECT count(*) AS parked FROM ordered_events.handler_parked p
  JOIN ordered_events.consumer_def d ON d.consumer_id = p.consumer_id
 WHERE d.consumer IN ('rb_hold', 'rb_dead');
SELECT consumer, partition, stream, consumed_count > 0 AS consumed_before, unread_count
  FROM ordered_events.consumers WHERE consumer IN ('rb_hold', 'rb_dead')
 ORDER BY consumer, partition, stream;

-- Rebuilt, and created afresh with version 2: the same.
SELECT pg_temp.process_all('rb_hold') AS hold_processed,
       pg_temp.process_all('rb_dead') AS dead_processed;
SELECT ordered_events.create_consumer('rb_hold_fresh', 3, 'rb.tally(jsonb, ordered_events.event)',
                                      on_error => 'hold'),
       ordered_events.create_consumer('rb_dead_fresh', 2, 'rb.tally(jsonb, ordered_events.event)',
                                      max_attempts => 2, retry_delay => '0 s');
SELECT ordered_events.subscribe(c, s)
  FROM unnest(ARRAY['rb_hold_fresh', 'rb_dead_fresh']) c, unnest(ARRAY['rb_g', 'rb_p']) s;
SELECT pg_temp.process_all('rb_hold_fresh') AS hold_fresh_processed,
       pg_temp.process_all('rb_dead_fresh') AS dead_fresh_processed;
SELECT * FROM pg_temp.has('rb_hold');
SELECT * FROM pg_temp.differ('rb_hold', 'rb_hold_fresh');
SELECT * FROM pg_temp.has('rb_dead');
SELECT * FROM pg_temp.differ('rb_dead', 'rb_dead_fresh');

-- A reset rolled back changes nothing.
CREATE TEMP TABLE hold_before AS SELECT * FROM pg_temp.has('rb_hold');
BEGIN;
SELECT ordered_events.reset_consumer('rb_hold');
SELECT count(*) AS states_in_reset FROM ordered_events.key_state WHERE consumer = 'rb_hold';
ROLLBACK;
(SELECT * FROM pg_temp.has('rb_hold') EXCEPT SELECT * FROM hold_before)
UNION ALL
(SELECT * FROM hold_before EXCEPT SELECT * FROM pg_temp.has('rb_hold'));
SELECT sum(unread_count) AS unread FROM ordered_events.consumers WHERE consumer = 'rb_hold';

------------------------------------------------------------------------
-- 3. An output stream keeps what was appended: the rebuild appends again
------------------------------------------------------------------------
SELECT ordered_events.create_stream('rb_o', gap_policy => 'fence');
SELECT ordered_events.create_consumer('rb_out', handler => 'rb.tally(jsonb, ordered_events.event)',
                                      output_stream => 'rb_o');
SELECT ordered_events.subscribe('rb_out', 'rb_p');
SELECT pg_temp.process_all('rb_out') AS processed, ordered_events.release('rb_o') AS derived;
SELECT ordered_events.reset_consumer('rb_out');
SELECT pg_temp.process_all('rb_out') AS processed, ordered_events.release('rb_o') AS derived;
-- the first nine derived events, then the same nine again
SELECT seq, key, payload FROM ordered_events.released WHERE stream = 'rb_o' ORDER BY seq;

------------------------------------------------------------------------
-- 4. A consumer without a handler: every stream from the beginning
------------------------------------------------------------------------
SELECT ordered_events.create_consumer('rb_plain', 2);
SELECT ordered_events.subscribe('rb_plain', 'rb_g'), ordered_events.subscribe('rb_plain', 'rb_p');
SELECT count(*) FROM ordered_events.read('rb_plain', 1000, 0);
SELECT count(*) FROM ordered_events.read('rb_plain', 1000, 1);
SELECT ordered_events.reset_consumer('rb_plain');
SELECT partition, stream, consumed_count, unread_count FROM ordered_events.consumers
 WHERE consumer = 'rb_plain' ORDER BY partition, stream;
SELECT count(*) FROM ordered_events.read('rb_plain', 1000, 0);
SELECT count(*) FROM ordered_events.read('rb_plain', 1000, 1);

------------------------------------------------------------------------
-- 5. After a retention: the rebuild applies what is kept, as a fresh
--    consumer does
------------------------------------------------------------------------
-- rb_r (retention '0 s'): keys k1..k4, seqs 1..4, then 5..8, in two steps.
-- rb_rt (version 2) applied all eight; rb_rh has read five, so compaction
-- deletes the first step.
SELECT ordered_events.create_stream('rb_r', retention => '0 s');
SELECT ordered_events.create_consumer('rb_rt', handler => 'rb.tally(jsonb, ordered_events.event)'),
       ordered_events.create_consumer('rb_rh');
SELECT ordered_events.subscribe('rb_rt', 'rb_r'), ordered_events.subscribe('rb_rh', 'rb_r');
SELECT count(ordered_events.ingest('rb_r', s, 'k' || (s % 4 + 1))) AS ingested,
       ordered_events.release('rb_r') AS released
  FROM generate_series(1, 4) s;
SELECT count(ordered_events.ingest('rb_r', s, 'k' || (s % 4 + 1))) AS ingested,
       ordered_events.release('rb_r') AS released
  FROM generate_series(5, 8) s;
SELECT pg_temp.process_all('rb_rt') AS processed;
SELECT count(*) AS rb_rh_took FROM ordered_events.read('rb_rh', 5);
SELECT ordered_events.compact('rb_r') AS deleted;
SELECT ordered_events.reset_consumer('rb_rt') AS unread;
SELECT pg_temp.process_all('rb_rt') AS processed;
SELECT ordered_events.create_consumer('rb_rt_fresh', handler => 'rb.tally(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('rb_rt_fresh', 'rb_r');
SELECT pg_temp.process_all('rb_rt_fresh') AS processed;
SELECT * FROM pg_temp.has('rb_rt');
SELECT * FROM pg_temp.differ('rb_rt', 'rb_rt_fresh');

------------------------------------------------------------------------
-- 6. Errors
------------------------------------------------------------------------
SELECT ordered_events.reset_consumer(NULL);
SELECT ordered_events.reset_consumer('rb_nobody');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT ordered_events.reset_consumer('rb_hold');
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.reset_consumer('rb_hold');
ROLLBACK;
(SELECT * FROM pg_temp.has('rb_hold') EXCEPT SELECT * FROM hold_before)
UNION ALL
(SELECT * FROM hold_before EXCEPT SELECT * FROM pg_temp.has('rb_hold'));
-- A handler that resets its own consumer: its event fails (55006).
CREATE FUNCTION rb.self_reset(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ordered_events.reset_consumer('rb_self');
    RETURN (state, NULL)::ordered_events.step;
END;
$$;
SELECT ordered_events.create_consumer('rb_self', handler => 'rb.self_reset(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('rb_self', 'rb_p');
SELECT ordered_events.process('rb_self', 1);
SELECT seq, key, detail FROM ordered_events.unprocessed WHERE consumer = 'rb_self';

------------------------------------------------------------------------
-- 7. Who may reset
------------------------------------------------------------------------
-- regress_rb_owner owns the handler consumer rb_oc (version 2 of
-- rb.tally), subscribed to rb_p, applied to the end.
SET client_min_messages = warning;
CREATE ROLE regress_rb_api NOLOGIN;
CREATE ROLE regress_rb_owner IN ROLE regress_rb_api;
CREATE ROLE regress_rb_member IN ROLE regress_rb_owner;
CREATE ROLE regress_rb_other IN ROLE regress_rb_api;
RESET client_min_messages;
GRANT USAGE ON SCHEMA ordered_events, rb TO regress_rb_api;
GRANT EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.process(text, integer, integer),
    ordered_events.reset_consumer(text)
  TO regress_rb_api;
SELECT ordered_events.grant_stream('rb_p', 'read', 'regress_rb_owner');
SET ROLE regress_rb_owner;
SELECT ordered_events.create_consumer('rb_oc', handler => 'rb.tally(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('rb_oc', 'rb_p');
SELECT ordered_events.process('rb_oc');
RESET ROLE;

CREATE FUNCTION pg_temp.as_role(who text, query text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    EXECUTE query INTO result;
    RESET ROLE;
    RETURN result;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END;
$$;
BEGIN;
SELECT who, pg_temp.as_role(who, $$SELECT ordered_events.reset_consumer('rb_oc')$$) AS reset
  FROM unnest(ARRAY['regress_rb_owner', 'regress_rb_member', 'regress_rb_other']) who;
ROLLBACK;
SET ROLE regress_rb_other;
SELECT ordered_events.reset_consumer('rb_oc');
RESET ROLE;
SELECT count(*) AS states_kept FROM ordered_events.key_state WHERE consumer = 'rb_oc';
SELECT ordered_events.reset_consumer('rb_oc') AS superuser_reset;
SELECT ordered_events.revoke_stream('rb_p', 'read', 'regress_rb_owner');
SET ROLE regress_rb_owner;
\set VERBOSITY terse
SELECT ordered_events.reset_consumer('rb_oc');
\set VERBOSITY default
RESET ROLE;

SELECT ordered_events.drop_consumer(c)
  FROM unnest(ARRAY['rb_hold', 'rb_dead', 'rb_hold_fresh', 'rb_dead_fresh', 'rb_out', 'rb_plain',
                    'rb_rt', 'rb_rh', 'rb_rt_fresh', 'rb_self', 'rb_oc']) c;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['rb_g', 'rb_p', 'rb_o', 'rb_r']) s;
DROP SCHEMA rb CASCADE;
REVOKE USAGE ON SCHEMA ordered_events FROM regress_rb_api;
REVOKE EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.process(text, integer, integer),
    ordered_events.reset_consumer(text)
  FROM regress_rb_api;
DROP ROLE regress_rb_member, regress_rb_owner, regress_rb_other, regress_rb_api;
SELECT setval('ordered_events.result_position_seq', :result_position, :'result_position_called')
    AS result_position \gset
