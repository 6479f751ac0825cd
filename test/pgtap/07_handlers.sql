-- The handler API of version 0.2 (docs/reference.md, "Handlers"; issue 12):
-- process() and create_consumer with exactly their argument names, types,
-- defaults, results and volatility; the composite types event and step;
-- the views key_state and results; the outcome exception_thrown and the
-- column unprocessed.consumer; the setting ordered_events.handler_timeout;
-- what PUBLIC may do; the SQLSTATE of each kind of bad input, with a
-- lower-case message and a hint; and a small processing run (states,
-- results, a dead letter, derived events, exactly once).
BEGIN;
SELECT plan(74);

------------------------------------------------------------------------
-- Signatures: 2 functions x 7 tests = 14
------------------------------------------------------------------------
\ir shared/function_contract.sql
INSERT INTO contract_function VALUES
(1, 'process', '{text,integer,integer}', 'bigint', 'volatile',
    'consumer text, max_events integer DEFAULT 1000, partition integer DEFAULT 0', 'bigint'),
(2, 'create_consumer', '{text,integer,regprocedure,text,text,interval,text,integer,interval,text}', 'void', 'volatile',
    'consumer text, partitions integer DEFAULT 1, handler regprocedure DEFAULT NULL::regprocedure, '
    'output_stream text DEFAULT NULL::text, alignment text DEFAULT ''inherit''::text, '
    'handler_timeout interval DEFAULT NULL::interval, on_error text DEFAULT ''dead_letter''::text, '
    'max_attempts integer DEFAULT NULL::integer, retry_delay interval DEFAULT ''00:00:01''::interval, '
    'delivery text DEFAULT ''transaction''::text', 'void');

SELECT * FROM pg_temp.function_contract_tests();

------------------------------------------------------------------------
-- Types, views and columns: 2 + 2 + 2 + 2 + 1 + 2 = 11
------------------------------------------------------------------------
-- The columns of a relation or composite type, "name type, ...", in order.
CREATE FUNCTION pg_temp.columns_of(rel regclass)
RETURNS text
LANGUAGE sql AS $$
    SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
$$;

SELECT has_composite('ordered_events', t, format('composite type ordered_events.%s exists', t))
  FROM unnest('{event,step}'::name[]) WITH ORDINALITY AS x(t, n) ORDER BY n;
SELECT is(pg_temp.columns_of('ordered_events.event'),
    'stream text, seq bigint, key text, payload jsonb, event_ts timestamp with time zone, '
    'alignment_ts timestamp with time zone, last_event boolean',
    'event: columns in contract order with contract types');
SELECT is(pg_temp.columns_of('ordered_events.step'), 'state jsonb, result jsonb',
    'step: columns in contract order with contract types');

SELECT has_view('ordered_events', v, format('view ordered_events.%s exists', v))
  FROM unnest('{key_state,results}'::name[]) WITH ORDINALITY AS x(v, n) ORDER BY n;
SELECT is(pg_temp.columns_of('ordered_events.key_state'),
    'consumer text, key text, state jsonb, last_stream text, last_seq bigint, '
    'processed_count bigint, error_count bigint, updated_at timestamp with time zone, '
    'attempts integer, next_attempt_at timestamp with time zone, held boolean',
    'key_state: columns in contract order with contract types');
SELECT is(pg_temp.columns_of('ordered_events.results'),
    'consumer text, position bigint, stream text, seq bigint, key text, result jsonb, '
    'produced_at timestamp with time zone',
    'results: columns in contract order with contract types');

SELECT ok('exception_thrown' = ANY (enum_range(NULL::ordered_events.outcome)::text[]),
    'outcome has the label exception_thrown');
SELECT has_column('ordered_events', 'unprocessed', 'consumer', 'unprocessed has column consumer');
SELECT col_type_is('ordered_events', 'unprocessed', 'consumer', 'text', 'unprocessed.consumer is text');

------------------------------------------------------------------------
-- handler_timeout and privileges: 2 + 1 + 2 = 5
------------------------------------------------------------------------
SELECT is((SELECT format('%s %s %s', boot_val, unit, context) FROM pg_settings
            WHERE name = 'ordered_events.handler_timeout'),
    '10000 ms superuser',
    'ordered_events.handler_timeout: 10000 ms by default, a superuser setting (the server''s ceiling)');
SELECT throws_ok($$SET LOCAL ordered_events.handler_timeout = -1$$, '22023', NULL,
    'handler_timeout is not negative');
SELECT function_privs_are('ordered_events', 'process', '{text,integer,integer}', 'public', '{}',
    'PUBLIC may not execute process');
SELECT table_privs_are('ordered_events', v, 'public', '{}',
           format('PUBLIC has no privilege on %s', v))
  FROM unnest('{key_state,results}'::name[]) WITH ORDINALITY AS x(v, n) ORDER BY n;

------------------------------------------------------------------------
-- Bad input: 18 kinds x 2 tests = 36, then 2 tests that nothing changed
------------------------------------------------------------------------
CREATE FUNCTION public.tap_h_count(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    IF e.payload = '"boom"' THEN
        RAISE EXCEPTION 'boom at %', e.seq USING ERRCODE = 'data_exception';
    END IF;
    RETURN ROW(to_jsonb(coalesce(state::int, 0) + 1),
               jsonb_build_object('n', coalesce(state::int, 0) + 1, 'p', e.payload))::ordered_events.step;
END;
$$;
CREATE FUNCTION public.tap_h_jsonb(state jsonb, e ordered_events.event) RETURNS jsonb
LANGUAGE sql AS $$ SELECT state $$;
CREATE FUNCTION public.tap_h_args(state jsonb, e jsonb) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.tap_h_setof(state jsonb, e ordered_events.event) RETURNS SETOF ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.tap_h_strict(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql STRICT AS $$ SELECT NULL::ordered_events.step $$;

SELECT ordered_events.create_stream('tap_h_in');
SELECT ordered_events.create_stream('tap_h_out', gap_policy => 'fence');
SELECT ordered_events.create_consumer('tap_h_plain');
SELECT ordered_events.create_consumer('tap_h_c', handler => 'public.tap_h_count(jsonb, ordered_events.event)');
SELECT ordered_events.create_consumer('tap_h_d', handler => 'public.tap_h_count(jsonb, ordered_events.event)',
                                      output_stream => 'tap_h_out');
SELECT ordered_events.subscribe(c, 'tap_h_in') FROM unnest('{tap_h_plain,tap_h_c,tap_h_d}'::text[]) c;

\ir shared/bad_input.sql
INSERT INTO bad_input VALUES
( 1, '42883', 'a handler with the wrong return type',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_jsonb(jsonb, ordered_events.event)')$$),
( 2, '42883', 'a handler with the wrong argument types',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_args(jsonb, jsonb)')$$),
( 3, '42883', 'a SETOF handler',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_setof(jsonb, ordered_events.event)')$$),
( 4, '42P13', 'a STRICT handler',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_strict(jsonb, ordered_events.event)')$$),
( 5, '42809', 'an output stream that is not a fence stream',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_count(jsonb, ordered_events.event)',
                                             output_stream => 'tap_h_in')$$),
( 6, '42704', 'an unknown output stream',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_count(jsonb, ordered_events.event)',
                                             output_stream => 'tap_h_none')$$),
( 7, '22023', 'an output stream without handler',
     $$SELECT ordered_events.create_consumer('tap_h_new', output_stream => 'tap_h_out')$$),
( 8, '22023', 'an unknown alignment',
     $$SELECT ordered_events.create_consumer('tap_h_new', handler => 'public.tap_h_count(jsonb, ordered_events.event)',
                                             alignment => 'event_time')$$),
( 9, '22004', 'process of a NULL consumer',
     $$SELECT ordered_events.process(NULL)$$),
(10, '22004', 'process with NULL max_events',
     $$SELECT ordered_events.process('tap_h_c', NULL)$$),
(11, '22023', 'process with max_events 0',
     $$SELECT ordered_events.process('tap_h_c', 0)$$),
(12, '22023', 'process of partition 1 of a consumer with 1 partition',
     $$SELECT ordered_events.process('tap_h_c', 10, 1)$$),
(13, '42704', 'process of an unknown consumer',
     $$SELECT ordered_events.process('tap_h_none')$$),
(14, '42809', 'process of a consumer without handler',
     $$SELECT ordered_events.process('tap_h_plain')$$),
(15, '42809', 'read of a handler consumer',
     $$SELECT * FROM ordered_events.read('tap_h_c')$$),
(16, '42809', 'peek of a handler consumer',
     $$SELECT * FROM ordered_events.peek('tap_h_c')$$),
(17, '22023', 'subscribe a consumer to its own output stream',
     $$SELECT ordered_events.subscribe('tap_h_d', 'tap_h_out')$$),
(18, '2BP01', 'drop_stream of an output stream',
     $$SELECT ordered_events.drop_stream('tap_h_out')$$);

SELECT * FROM pg_temp.bad_input_tests();
SELECT results_eq(
    $$SELECT c.consumer, c.handler IS NOT NULL, c.output_stream_id IS NOT NULL,
             (SELECT string_agg(v.stream, ',') FROM ordered_events.consumers v WHERE v.consumer = c.consumer)
        FROM ordered_events.consumer_def c WHERE c.consumer LIKE 'tap\_h\_%' ORDER BY c.consumer$$,
    $$VALUES ('tap_h_c'::text, true, false, 'tap_h_in'::text), ('tap_h_d', true, true, 'tap_h_in'),
             ('tap_h_plain', false, false, 'tap_h_in')$$,
    'the failed calls made no consumer, changed none and subscribed none');
SELECT ok(EXISTS (SELECT FROM ordered_events.streams WHERE stream = 'tap_h_out'),
    'the output stream was not dropped');

------------------------------------------------------------------------
-- A processing run: 6 tests
------------------------------------------------------------------------
-- tap_h_in: 1 k1 "a", 2 k2 "b", 3 k1 "boom", 4 k1 "c".  Keys are compared
-- in the C collation by the extension, here in the default one.
SELECT count(*) FROM (SELECT ordered_events.ingest('tap_h_in', v.seq, v.key, v.payload)
  FROM (VALUES (1, 'k1', '"a"'::jsonb), (2, 'k2', '"b"'), (3, 'k1', '"boom"'), (4, 'k1', '"c"')) v(seq, key, payload)
 ORDER BY v.seq) i;
SELECT ordered_events.release('tap_h_in');

SELECT is(ordered_events.process('tap_h_c'), 4::bigint, 'process applies the 4 released events, the failed one included');
SELECT results_eq(
    $$SELECT stream, seq, key COLLATE "default", result FROM ordered_events.results
       WHERE consumer = 'tap_h_c' ORDER BY position$$,
    $$VALUES ('tap_h_in'::text, 1::bigint, 'k1'::text, '{"n": 1, "p": "a"}'::jsonb),
             ('tap_h_in', 2, 'k2', '{"n": 1, "p": "b"}'),
             ('tap_h_in', 4, 'k1', '{"n": 2, "p": "c"}')$$,
    'results: one per event that returned a result, in processing order, the state carried per key');
SELECT results_eq(
    $$SELECT key COLLATE "default", state, last_stream, last_seq, processed_count, error_count
        FROM ordered_events.key_state WHERE consumer = 'tap_h_c' ORDER BY key$$,
    $$VALUES ('k1'::text, '2'::jsonb, 'tap_h_in'::text, 4::bigint, 3::bigint, 1::bigint),
             ('k2', '1', 'tap_h_in', 2, 1, 0)$$,
    'key_state: the failed event left the state, counted as processed and as an error');
SELECT results_eq(
    $$SELECT stream, seq, key COLLATE "default", reason, detail, consumer FROM ordered_events.unprocessed
       WHERE consumer = 'tap_h_c'$$,
    $$VALUES ('tap_h_in'::text, 3::bigint, 'k1'::text, 'exception_thrown'::ordered_events.outcome,
              'SQLSTATE 22000: boom at 3'::text, 'tap_h_c'::text)$$,
    'the failed event is a dead letter of the consumer: exception_thrown, its SQLSTATE and message');
SELECT is(ordered_events.process('tap_h_c'), 0::bigint, 'processing again applies nothing (exactly once)');
SELECT ordered_events.process('tap_h_d');
SELECT results_eq(
    $$SELECT p.seq, p.key COLLATE "default", p.payload FROM ordered_events.pending p WHERE p.stream = 'tap_h_out' ORDER BY p.seq$$,
    $$VALUES (1::bigint, 'k1'::text, '{"n": 1, "p": "a"}'::jsonb), (2, 'k2', '{"n": 1, "p": "b"}'),
             (3, 'k1', '{"n": 2, "p": "c"}')$$,
    'with an output stream, the results are derived events of the parents'' keys, in processing order');

SELECT * FROM finish();
ROLLBACK;
