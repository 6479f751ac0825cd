-- Seek and rebuild of version 0.3 (docs/consuming.md, "Replay: seek and
-- rebuild"; docs/reference.md, "Consumers"; issue 24): seek() and
-- reset_consumer() with exactly their argument names, types, defaults,
-- results and volatility, none STRICT, not executable by PUBLIC; the
-- SQLSTATE of each kind of bad input, with a lower-case message and a
-- hint; 42501 for a role that is not the owner, allowed to a member of the
-- owner role; what each returns.  sql/consumer_seek.sql and
-- sql/consumer_rebuild.sql hold the worked cases (retention, partitions,
-- time, the rebuild equal to a fresh consumer, REPEATABLE READ);
-- test/isolation/specs/consumer_seek_read.spec and
-- consumer_reset_process.spec the concurrency.
BEGIN;
SELECT plan(44);

------------------------------------------------------------------------
-- Signatures: 2 functions x 7 tests = 14, PUBLIC's EXECUTE: 2
------------------------------------------------------------------------
\ir shared/function_contract.sql

INSERT INTO contract_function VALUES
(1, 'seek', '{text,text,text,"timestamp with time zone"}', 'bigint', 'volatile',
    'consumer text, stream text, start text DEFAULT ''beginning''::text, '
    'released_at timestamp with time zone DEFAULT NULL::timestamp with time zone',
    'bigint'),
(2, 'reset_consumer', '{text}', 'bigint', 'volatile',
    'consumer text', 'bigint');

SELECT * FROM pg_temp.function_contract_tests();
SELECT function_privs_are('ordered_events', f.name, f.argtypes, 'public', '{}',
           format('PUBLIC may not execute %s', f.name))
  FROM contract_function f ORDER BY f.ord;

------------------------------------------------------------------------
-- Bad input: 10 kinds x 2 tests = 20
------------------------------------------------------------------------
-- tap_rp_c reads tap_rp_s (three events, released); tap_rp_t exists and
-- is not subscribed.
SELECT ordered_events.create_stream('tap_rp_s'), ordered_events.create_stream('tap_rp_t');
SELECT ordered_events.ingest('tap_rp_s', s, 'k' || s) FROM generate_series(1, 3) s;
SELECT ordered_events.release('tap_rp_s');
SELECT ordered_events.create_consumer('tap_rp_c', 2);
SELECT ordered_events.subscribe('tap_rp_c', 'tap_rp_s');

\ir shared/bad_input.sql

INSERT INTO bad_input VALUES
( 1, '22004', 'seek with a NULL consumer',
     $$SELECT ordered_events.seek(NULL, 'tap_rp_s')$$),
( 2, '22004', 'seek with a NULL stream',
     $$SELECT ordered_events.seek('tap_rp_c', NULL)$$),
( 3, '22004', 'seek with a NULL start and no released_at',
     $$SELECT ordered_events.seek('tap_rp_c', 'tap_rp_s', NULL)$$),
( 4, '22023', 'seek with a start neither beginning nor now',
     $$SELECT ordered_events.seek('tap_rp_c', 'tap_rp_s', 'end')$$),
( 5, '22023', 'seek with start now and a released_at',
     $$SELECT ordered_events.seek('tap_rp_c', 'tap_rp_s', 'now', now())$$),
( 6, '42704', 'seek of an unknown consumer',
     $$SELECT ordered_events.seek('tap_rp_none', 'tap_rp_s')$$),
( 7, '42704', 'seek in an unknown stream',
     $$SELECT ordered_events.seek('tap_rp_c', 'tap_rp_none')$$),
( 8, '42704', 'seek in a stream the consumer is not subscribed to',
     $$SELECT ordered_events.seek('tap_rp_c', 'tap_rp_t')$$),
( 9, '22004', 'reset_consumer with a NULL consumer',
     $$SELECT ordered_events.reset_consumer(NULL)$$),
(10, '42704', 'reset_consumer of an unknown consumer',
     $$SELECT ordered_events.reset_consumer('tap_rp_none')$$);

SELECT * FROM pg_temp.bad_input_tests();

------------------------------------------------------------------------
-- What they return: 4
------------------------------------------------------------------------
SELECT is(ordered_events.seek('tap_rp_c', 'tap_rp_s'),
          (SELECT sum(unread_count)::bigint FROM ordered_events.consumers WHERE consumer = 'tap_rp_c'),
          'seek() returns the unread count, summed over the partitions');
SELECT is(ordered_events.seek('tap_rp_c', 'tap_rp_s', 'now'), 0::bigint,
          'seek(..., ''now'') leaves nothing unread');

CREATE FUNCTION public.tap_rp_h(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1), NULL)::ordered_events.step $$;
SELECT ordered_events.create_consumer('tap_rp_h', handler => 'public.tap_rp_h(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('tap_rp_h', 'tap_rp_s');
SELECT ordered_events.process('tap_rp_h');
SELECT is(ordered_events.reset_consumer('tap_rp_h'), 3::bigint,
          'reset_consumer() returns the unread count after it: every event');
SELECT is((SELECT count(*)::int FROM ordered_events.key_state WHERE consumer = 'tap_rp_h'), 0,
          'reset_consumer() forgets the key states');

------------------------------------------------------------------------
-- Owners: 42501 for another role (2), allowed to a member (2)
------------------------------------------------------------------------
CREATE FUNCTION pg_temp.as_role(who name, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    EXECUTE query INTO result;
    RESET ROLE;
    RETURN result;
END;
$$;
CREATE ROLE tap_rp_api NOLOGIN;
CREATE ROLE tap_rp_owner IN ROLE tap_rp_api;
CREATE ROLE tap_rp_member IN ROLE tap_rp_owner;
CREATE ROLE tap_rp_other IN ROLE tap_rp_api;
GRANT USAGE ON SCHEMA ordered_events TO tap_rp_api;
GRANT EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.seek(text, text, text, timestamptz),
    ordered_events.reset_consumer(text)
  TO tap_rp_api;
SELECT ordered_events.grant_stream('tap_rp_s', 'read', 'tap_rp_owner');
SELECT pg_temp.as_role('tap_rp_owner', $$SELECT ordered_events.create_consumer('tap_rp_o')$$),
       pg_temp.as_role('tap_rp_owner', $$SELECT ordered_events.subscribe('tap_rp_o', 'tap_rp_s')$$);

SELECT throws_ok($$SELECT pg_temp.as_role('tap_rp_other', 'SELECT ordered_events.seek(''tap_rp_o'', ''tap_rp_s'')')$$,
                 '42501', 'must be owner of consumer "tap_rp_o"', 'seek: 42501 for a role that is not the owner');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_rp_other', 'SELECT ordered_events.reset_consumer(''tap_rp_o'')')$$,
                 '42501', 'must be owner of consumer "tap_rp_o"', 'reset_consumer: 42501 for a role that is not the owner');
SELECT is(pg_temp.as_role('tap_rp_member', $$SELECT ordered_events.seek('tap_rp_o', 'tap_rp_s')$$), '3',
          'seek: allowed to a member of the owner role');
SELECT is(pg_temp.as_role('tap_rp_member', $$SELECT ordered_events.reset_consumer('tap_rp_o')$$), '3',
          'reset_consumer: allowed to a member of the owner role');

SELECT * FROM finish();
ROLLBACK;
