-- The lease mode (docs/consuming.md, "Work outside the database: the lease
-- mode"; docs/reference.md, "Consumers"): the functions receive, ack and
-- nack with exactly their argument names, types, defaults and results, the
-- view leases, the SQLSTATE of each bad input, and the grants.  What a
-- receive() delivers is in sql/lease_*.sql and
-- test/isolation/specs/lease_same_partition.spec: inside this test's
-- transaction receive() runs in a background worker, which sees only what
-- is committed (the consumers made here are not).
BEGIN;
SELECT plan(83);

------------------------------------------------------------------------
-- Signatures: 3 functions x 7 tests = 21
------------------------------------------------------------------------
\ir shared/function_contract.sql

INSERT INTO contract_function VALUES
(1, 'receive', '{text,integer,integer,interval,interval}', 'setof record', 'volatile',
    'consumer text, max_events integer DEFAULT 1000, partition integer DEFAULT 0, '
    'visibility interval DEFAULT ''00:00:30''::interval, wait interval DEFAULT ''00:00:00''::interval',
    'TABLE(stream text, seq bigint, key text, payload jsonb, '
    'event_ts timestamp with time zone, alignment_ts timestamp with time zone, '
    'stabilized_ts timestamp with time zone, released_at timestamp with time zone, '
    'receipt bigint, attempt integer)'),
(2, 'ack', '{text,bigint[]}', 'bigint', 'volatile',
    'consumer text, receipts bigint[]', 'bigint'),
(3, 'nack', '{text,bigint[],interval}', 'bigint', 'volatile',
    'consumer text, receipts bigint[], delay interval DEFAULT ''00:00:00''::interval', 'bigint');

SELECT * FROM pg_temp.function_contract_tests();

------------------------------------------------------------------------
-- The view leases and the column consumer_def.delivery: 4 tests
------------------------------------------------------------------------
SELECT has_view('ordered_events', 'leases', 'view ordered_events.leases exists');
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', '
                             ORDER BY a.attnum)
             FROM pg_attribute a
            WHERE a.attrelid = 'ordered_events.leases'::regclass
              AND a.attnum > 0 AND NOT a.attisdropped),
          'consumer text, partition integer, stream text, seq bigint, key text, attempt integer, '
          'visible_until timestamp with time zone',
          'leases: columns in contract order with contract types');
SELECT ok((SELECT 'security_barrier=true' = ANY (c.reloptions) FROM pg_class c
            WHERE c.oid = 'ordered_events.leases'::regclass),
          'leases is a security barrier view (its filter runs before a caller''s functions)');
SELECT col_default_is('ordered_events', 'consumer_def', 'delivery', 'transaction'::text,
    'consumer_def.delivery defaults to ''transaction''');

------------------------------------------------------------------------
-- Bad input: 25 kinds x 2 tests = 50
------------------------------------------------------------------------
CREATE FUNCTION public.tap_lease_h(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
SELECT ordered_events.create_stream('tap_lease_s');
SELECT ordered_events.create_consumer('tap_lease_l', delivery => 'lease');
SELECT ordered_events.create_consumer('tap_lease_t');

\ir shared/bad_input.sql

INSERT INTO bad_input VALUES
( 1, '42704', 'receive of an unknown consumer',
     $$SELECT * FROM ordered_events.receive('tap_lease_none')$$),
( 2, '22004', 'receive with NULL consumer',
     $$SELECT * FROM ordered_events.receive(NULL)$$),
( 3, '22004', 'receive with NULL max_events',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', NULL)$$),
( 4, '22004', 'receive with NULL partition',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 1, NULL)$$),
( 5, '22004', 'receive with NULL visibility',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 1, 0, NULL)$$),
( 6, '22004', 'receive with NULL wait',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 1, 0, '1 s', NULL)$$),
( 7, '22023', 'receive with max_events 0',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 0)$$),
( 8, '22023', 'receive with max_events 65537',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 65537)$$),
( 9, '22023', 'receive with a negative visibility',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 1, 0, '-1 s')$$),
(10, '22023', 'receive with a negative wait',
     $$SELECT * FROM ordered_events.receive('tap_lease_l', 1, 0, '1 s', '-1 s')$$),
(11, '42704', 'ack of an unknown consumer',
     $$SELECT ordered_events.ack('tap_lease_none', '{1}')$$),
(12, '22004', 'ack with NULL consumer',
     $$SELECT ordered_events.ack(NULL, '{1}')$$),
(13, '22004', 'ack with NULL receipts',
     $$SELECT ordered_events.ack('tap_lease_l', NULL)$$),
(14, '22004', 'ack with a NULL receipt',
     $$SELECT ordered_events.ack('tap_lease_l', '{1,NULL}')$$),
(15, '42809', 'ack of a consumer without delivery lease',
     $$SELECT ordered_events.ack('tap_lease_t', '{1}')$$),
(16, '42809', 'nack of a consumer without delivery lease',
     $$SELECT ordered_events.nack('tap_lease_t', '{1}')$$),
(17, '22004', 'nack with NULL delay',
     $$SELECT ordered_events.nack('tap_lease_l', '{1}', NULL)$$),
(18, '22023', 'nack with a negative delay',
     $$SELECT ordered_events.nack('tap_lease_l', '{1}', '-1 s')$$),
(19, '22023', 'create_consumer with an unknown delivery',
     $$SELECT ordered_events.create_consumer('tap_lease_x', delivery => 'queue')$$),
(20, '22004', 'create_consumer with NULL delivery',
     $$SELECT ordered_events.create_consumer('tap_lease_x', delivery => NULL)$$),
(21, '22023', 'create_consumer with delivery lease and a handler',
     $$SELECT ordered_events.create_consumer('tap_lease_x', handler => 'public.tap_lease_h(jsonb, ordered_events.event)', delivery => 'lease')$$),
(22, '22023', 'create_consumer with delivery lease and on_error',
     $$SELECT ordered_events.create_consumer('tap_lease_x', delivery => 'lease', on_error => 'hold')$$),
(23, '22023', 'create_consumer with delivery lease and max_attempts 0',
     $$SELECT ordered_events.create_consumer('tap_lease_x', delivery => 'lease', max_attempts => 0)$$),
(24, '42809', 'read of a lease consumer',
     $$SELECT * FROM ordered_events.read('tap_lease_l')$$),
(25, '42809', 'alter_consumer of a lease consumer''s on_error',
     $$SELECT ordered_events.alter_consumer('tap_lease_l', on_error => 'hold')$$);

SELECT * FROM pg_temp.bad_input_tests();

------------------------------------------------------------------------
-- Grants: 8 tests
------------------------------------------------------------------------
SELECT function_privs_are('ordered_events', f.name, f.args, 'public', '{}',
           format('PUBLIC may not execute %s', f.name))
  FROM (VALUES (1, 'receive'::name, '{text,integer,integer,interval,interval}'::name[]),
               (2, 'ack', '{text,bigint[]}'),
               (3, 'nack', '{text,bigint[],interval}')) AS f(ord, name, args)
 ORDER BY f.ord;
SELECT table_privs_are('ordered_events', r, 'public', '{}',
           format('PUBLIC has no privilege on %s', r))
  FROM unnest('{leases,lease}'::name[]) WITH ORDINALITY AS t(r, n)
 ORDER BY n;
SELECT sequence_privs_are('ordered_events', 'lease_batch_seq', 'public', '{}',
    'PUBLIC has no privilege on lease_batch_seq');
SELECT table_privs_are('ordered_events', 'leases', 'pg_monitor', '{SELECT}',
    'pg_monitor may read the view leases');
SELECT table_privs_are('ordered_events', 'lease', 'pg_monitor', '{}',
    'pg_monitor has no privilege on the table lease');

SELECT * FROM finish();
ROLLBACK;
