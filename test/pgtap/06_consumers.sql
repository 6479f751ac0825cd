-- The consumer API of version 0.2 (docs/reference.md, "Consumers"; issue 11): the
-- functions create_consumer, drop_consumer, subscribe, unsubscribe, read,
-- peek and key_partition with exactly their argument names, types,
-- defaults, results and volatility, none STRICT; the view consumers with
-- its columns; the SQLSTATE of each kind of bad input, with a lower-case
-- message and a hint, changing nothing; what PUBLIC may execute; and
-- key_partition() = (hashtextextended(key, 0) & 9223372036854775807) % n,
-- the partition read() serves a key's events from.  The handler arguments
-- of create_consumer (docs/handlers.md) are in 07_handlers.sql.  Concurrency is in
-- test/isolation/specs/consumer_*.spec.
BEGIN;
SELECT plan(210);

------------------------------------------------------------------------
-- Signatures: 7 functions x 7 tests = 49
------------------------------------------------------------------------
\ir shared/function_contract.sql

INSERT INTO contract_function VALUES
(1, 'create_consumer', '{text,integer,regprocedure,text,text,interval,text,integer,interval,text}', 'void', 'volatile',
    'consumer text, partitions integer DEFAULT 1, handler regprocedure DEFAULT NULL::regprocedure, '
    'output_stream text DEFAULT NULL::text, alignment text DEFAULT ''inherit''::text, '
    'handler_timeout interval DEFAULT NULL::interval, on_error text DEFAULT ''dead_letter''::text, '
    'max_attempts integer DEFAULT NULL::integer, retry_delay interval DEFAULT ''00:00:01''::interval, '
    'delivery text DEFAULT ''transaction''::text', 'void'),
(2, 'drop_consumer', '{text}', 'void', 'volatile',
    'consumer text', 'void'),
(3, 'subscribe', '{text,text,interval,text}', 'void', 'volatile',
    'consumer text, stream text, delay interval DEFAULT ''00:00:00''::interval, '
    'start text DEFAULT ''beginning''::text',
    'void'),
(4, 'unsubscribe', '{text,text}', 'void', 'volatile',
    'consumer text, stream text', 'void'),
(5, 'read', '{text,integer,integer,interval}', 'setof record', 'volatile',
    'consumer text, max_events integer DEFAULT 1000, partition integer DEFAULT 0, '
    'wait interval DEFAULT ''00:00:00''::interval',
    'TABLE(stream text, seq bigint, key text, payload jsonb, '
    'event_ts timestamp with time zone, alignment_ts timestamp with time zone, '
    'stabilized_ts timestamp with time zone, released_at timestamp with time zone)'),
(6, 'peek', '{text,integer,integer}', 'setof record', 'volatile',
    'consumer text, max_events integer DEFAULT 1000, partition integer DEFAULT 0',
    'TABLE(stream text, seq bigint, key text, payload jsonb, '
    'event_ts timestamp with time zone, alignment_ts timestamp with time zone, '
    'stabilized_ts timestamp with time zone, released_at timestamp with time zone)'),
(7, 'key_partition', '{text,integer}', 'integer', 'immutable',
    'key text, partitions integer', 'integer');

SELECT * FROM pg_temp.function_contract_tests();

-- Functions that run as the owner pin their search_path (1 test).
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc p JOIN contract_function f ON f.name = p.proname
     WHERE p.pronamespace = 'ordered_events'::regnamespace AND p.prosecdef
       AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)$$,
    'every SECURITY DEFINER function of the consumer API pins search_path = pg_catalog, pg_temp');

------------------------------------------------------------------------
-- The view consumers: 3 + 9 = 12 tests
------------------------------------------------------------------------
CREATE TEMP TABLE contract_column (
    pos int PRIMARY KEY,
    col name NOT NULL,
    typ text NOT NULL               -- format_type()
) ON COMMIT DROP;
INSERT INTO contract_column VALUES
    (1, 'consumer', 'text'),
    (2, 'partition', 'integer'),
    (3, 'stream', 'text'),
    (4, 'delay', 'interval'),
    (5, 'consumed_count', 'bigint'),
    (6, 'unread_count', 'bigint'),
    (7, 'bias', 'interval'),
    (8, 'oldest_unread_at', 'timestamp with time zone'),
    (9, 'last_read_at', 'timestamp with time zone'),
    (10, 'owner', 'regrole');                 -- 0.3

SELECT has_view('ordered_events', 'consumers', 'view ordered_events.consumers exists');
SELECT columns_are('ordered_events', 'consumers',
    (SELECT array_agg(col ORDER BY pos) FROM contract_column),
    'consumers has exactly the contract columns');
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', '
                             ORDER BY a.attnum)
             FROM pg_attribute a
            WHERE a.attrelid = 'ordered_events.consumers'::regclass
              AND a.attnum > 0 AND NOT a.attisdropped),
          (SELECT string_agg(col || ' ' || typ, ', ' ORDER BY pos) FROM contract_column),
          'consumers: columns in contract order with contract types');
SELECT col_type_is('ordered_events', 'consumers', c.col, c.typ,
           format('consumers.%s is %s', c.col, c.typ))
  FROM contract_column c ORDER BY c.pos;

------------------------------------------------------------------------
-- Bad input: 61 kinds x 2 tests = 122, then 5 tests that nothing changed
------------------------------------------------------------------------
SELECT ordered_events.create_stream('tap_cons_s');
SELECT ordered_events.create_stream('tap_cons_k', 'per_key');
SELECT ordered_events.ingest('tap_cons_s', 1, 'k', NULL, '2024-01-01 10:00:00+00', '2024-01-01 10:00:01+00');
SELECT ordered_events.release('tap_cons_s');
SELECT ordered_events.create_consumer('tap_cons_c');
SELECT ordered_events.create_consumer('tap_cons_p', 4);
SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_s', '5 s');
-- A consumer this backend has read, then dropped.
SELECT ordered_events.create_consumer('tap_cons_gone');
SELECT ordered_events.subscribe('tap_cons_gone', 'tap_cons_s');
SELECT count(*) FROM ordered_events.read('tap_cons_gone');
SELECT ordered_events.drop_consumer('tap_cons_gone');

\ir shared/bad_input.sql

INSERT INTO bad_input VALUES
-- unknown consumer or stream, or no such subscription: undefined_object
( 1, '42704', 'read of an unknown consumer',
     $$SELECT * FROM ordered_events.read('tap_cons_none')$$),
( 2, '42704', 'peek of an unknown consumer',
     $$SELECT * FROM ordered_events.peek('tap_cons_none')$$),
( 3, '42704', 'drop_consumer of an unknown consumer',
     $$SELECT ordered_events.drop_consumer('tap_cons_none')$$),
( 4, '42704', 'subscribe of an unknown consumer',
     $$SELECT ordered_events.subscribe('tap_cons_none', 'tap_cons_s')$$),
( 5, '42704', 'unsubscribe of an unknown consumer',
     $$SELECT ordered_events.unsubscribe('tap_cons_none', 'tap_cons_s')$$),
( 6, '42704', 'subscribe to an unknown stream',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_nostream')$$),
( 7, '42704', 'unsubscribe from an unknown stream',
     $$SELECT ordered_events.unsubscribe('tap_cons_c', 'tap_cons_nostream')$$),
( 8, '42704', 'unsubscribe from a stream the consumer is not subscribed to',
     $$SELECT ordered_events.unsubscribe('tap_cons_c', 'tap_cons_k')$$),
( 9, '42704', 'read of a consumer dropped in this transaction (read before)',
     $$SELECT * FROM ordered_events.read('tap_cons_gone')$$),
(10, '42704', 'read of a consumer whose name differs in case',
     $$SELECT * FROM ordered_events.read('TAP_CONS_C')$$),
(11, '42704', 'read of a consumer name of 100 characters (not truncated)',
     $$SELECT * FROM ordered_events.read(repeat('c', 100))$$),
(12, '42704', 'unsubscribe of a consumer without any subscription',
     $$SELECT ordered_events.unsubscribe('tap_cons_p', 'tap_cons_s')$$),
-- existing consumer: duplicate_object
(13, '42710', 'create_consumer of an existing consumer',
     $$SELECT ordered_events.create_consumer('tap_cons_c')$$),
(14, '42710', 'create_consumer of an existing consumer with other partitions',
     $$SELECT ordered_events.create_consumer('tap_cons_p', 2)$$),
-- invalid consumer name: invalid_name
(15, '42602', 'consumer name with upper case',
     $$SELECT ordered_events.create_consumer('Billing')$$),
(16, '42602', 'consumer name starting with a digit',
     $$SELECT ordered_events.create_consumer('1billing')$$),
(17, '42602', 'empty consumer name',
     $$SELECT ordered_events.create_consumer('')$$),
(18, '42602', 'consumer name with a hyphen',
     $$SELECT ordered_events.create_consumer('a-b')$$),
(19, '42602', 'consumer name of 64 characters',
     $$SELECT ordered_events.create_consumer(repeat('a', 64))$$),
(20, '42602', 'consumer name with a trailing newline',
     $$SELECT ordered_events.create_consumer(E'billing\n')$$),
(21, '42602', 'consumer name with a non-ASCII letter',
     $$SELECT ordered_events.create_consumer(U&'bill\00E9')$$),
(22, '42602', 'consumer name with a space',
     $$SELECT ordered_events.create_consumer('my billing')$$),
-- NULL argument: null_value_not_allowed
(23, '22004', 'create_consumer with NULL consumer',
     $$SELECT ordered_events.create_consumer(NULL)$$),
(24, '22004', 'create_consumer with NULL partitions',
     $$SELECT ordered_events.create_consumer('tap_cons_opt', NULL)$$),
(25, '22004', 'drop_consumer with NULL consumer',
     $$SELECT ordered_events.drop_consumer(NULL)$$),
(26, '22004', 'subscribe with NULL consumer',
     $$SELECT ordered_events.subscribe(NULL, 'tap_cons_s')$$),
(27, '22004', 'subscribe with NULL stream',
     $$SELECT ordered_events.subscribe('tap_cons_c', NULL)$$),
(28, '22004', 'subscribe with NULL delay',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', NULL)$$),
(29, '22004', 'subscribe with NULL start',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '0 s', NULL)$$),
(30, '22004', 'unsubscribe with NULL consumer',
     $$SELECT ordered_events.unsubscribe(NULL, 'tap_cons_s')$$),
(31, '22004', 'unsubscribe with NULL stream',
     $$SELECT ordered_events.unsubscribe('tap_cons_c', NULL)$$),
(32, '22004', 'read with NULL consumer',
     $$SELECT * FROM ordered_events.read(NULL)$$),
(33, '22004', 'read with NULL max_events',
     $$SELECT * FROM ordered_events.read('tap_cons_c', NULL)$$),
(34, '22004', 'read with NULL partition',
     $$SELECT * FROM ordered_events.read('tap_cons_c', 10, NULL)$$),
(35, '22004', 'peek with NULL consumer',
     $$SELECT * FROM ordered_events.peek(NULL)$$),
(36, '22004', 'peek with NULL max_events',
     $$SELECT * FROM ordered_events.peek('tap_cons_c', NULL)$$),
(37, '22004', 'peek with NULL partition',
     $$SELECT * FROM ordered_events.peek('tap_cons_c', 10, NULL)$$),
(38, '22004', 'key_partition with NULL key',
     $$SELECT ordered_events.key_partition(NULL, 2)$$),
(39, '22004', 'key_partition with NULL partitions',
     $$SELECT ordered_events.key_partition('k', NULL)$$),
-- invalid option: invalid_parameter_value
(40, '22023', 'create_consumer with 0 partitions',
     $$SELECT ordered_events.create_consumer('tap_cons_opt', 0)$$),
(41, '22023', 'create_consumer with -1 partitions',
     $$SELECT ordered_events.create_consumer('tap_cons_opt', -1)$$),
(42, '22023', 'create_consumer with 1025 partitions',
     $$SELECT ordered_events.create_consumer('tap_cons_opt', 1025)$$),
(43, '22023', 'subscribe with a negative delay',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '-1 s')$$),
(44, '22023', 'subscribe with a delay of a day',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '1 day')$$),
(45, '22023', 'subscribe with a delay of a month',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '1 mon')$$),
(46, '22023', 'subscribe with a delay of a year',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '1 year')$$),
(47, '22023', 'subscribe with a delay of 1 day -24 hours (days, although zero in all)',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '1 day -24:00:00')$$),
(48, '22023', 'subscribe with a delay of -1 day',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', '-1 day')$$),
(49, '22023', 'subscribe with an unknown start',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', start => 'later')$$),
(50, '22023', 'subscribe with start in upper case',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', start => 'NOW')$$),
(51, '22023', 'subscribe with an empty start',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_k', start => '')$$),
(52, '22023', 'subscribe again with a negative delay',
     $$SELECT ordered_events.subscribe('tap_cons_c', 'tap_cons_s', '-1 s')$$),
(53, '22023', 'read with max_events 0',
     $$SELECT * FROM ordered_events.read('tap_cons_c', 0)$$),
(54, '22023', 'read with a negative max_events',
     $$SELECT * FROM ordered_events.read('tap_cons_c', -1)$$),
(55, '22023', 'peek with max_events 0',
     $$SELECT * FROM ordered_events.peek('tap_cons_c', 0)$$),
(56, '22023', 'read of partition -1',
     $$SELECT * FROM ordered_events.read('tap_cons_c', 10, -1)$$),
(57, '22023', 'read of partition 1 of a consumer with 1 partition',
     $$SELECT * FROM ordered_events.read('tap_cons_c', 10, 1)$$),
(58, '22023', 'read of partition 4 of a consumer with 4 partitions',
     $$SELECT * FROM ordered_events.read('tap_cons_p', 10, 4)$$),
(59, '22023', 'peek of partition 1 of a consumer with 1 partition',
     $$SELECT * FROM ordered_events.peek('tap_cons_c', 10, 1)$$),
(60, '22023', 'key_partition with 0 partitions',
     $$SELECT ordered_events.key_partition('k', 0)$$),
(61, '22023', 'key_partition with negative partitions',
     $$SELECT ordered_events.key_partition('k', -3)$$);

SELECT * FROM pg_temp.bad_input_tests();

-- Nothing changed: the subscription kept its delay and position, no
-- subscription and no consumer was made.
SELECT results_eq(
    $$SELECT consumer, partition, stream, delay, consumed_count, unread_count, last_read_at IS NULL
        FROM ordered_events.consumers WHERE consumer LIKE 'tap_cons%'$$,
    $$VALUES ('tap_cons_c'::text, 0, 'tap_cons_s'::text, '5 s'::interval, 0::bigint, 1::bigint, true)$$,
    'the failed calls changed no subscription and consumed nothing');
SELECT results_eq(
    $$SELECT stream, seq FROM ordered_events.peek('tap_cons_c')$$,
    $$VALUES ('tap_cons_s'::text, 1::bigint)$$,
    'the failed reads took nothing');
SELECT lives_ok($$SELECT ordered_events.create_consumer('tap_cons_opt')$$,
    'the failed create_consumer calls created no consumer: the name is free');
SELECT lives_ok($$SELECT ordered_events.create_consumer('tap_cons_gone')$$,
    'a dropped consumer''s name is free again');
SELECT throws_ok($$SELECT ordered_events.unsubscribe('tap_cons_gone', 'tap_cons_s')$$,
    '42704', NULL, 'the re-created consumer has none of the dropped one''s subscriptions');

------------------------------------------------------------------------
-- Privileges: 15 tests
------------------------------------------------------------------------
SELECT function_privs_are('ordered_events', f.name, f.args, 'public', f.privs,
           format('PUBLIC %s execute %s', CASE WHEN f.privs = '{}' THEN 'may not' ELSE 'may' END,
                  f.name))
  FROM (VALUES (1, 'create_consumer'::name, '{text,integer,regprocedure,text,text,interval,text,integer,interval,text}'::name[], '{}'::name[]),
               (2, 'drop_consumer', '{text}', '{}'),
               (3, 'subscribe', '{text,text,interval,text}', '{}'),
               (4, 'unsubscribe', '{text,text}', '{}'),
               (5, 'read', '{text,integer,integer,interval}', '{}'),
               (6, 'peek', '{text,integer,integer}', '{}'),
               (7, 'count_released', '{integer,integer}', '{}'),
               (8, 'forget_unused_totals', '{integer}', '{}'),
               (9, 'lock_streams', '{integer[]}', '{}'),
               (10, 'key_partition', '{text,integer}', '{EXECUTE}')) AS f(ord, name, args, privs)
 ORDER BY f.ord;
SELECT table_privs_are('ordered_events', r, 'public', '{}',
           format('PUBLIC has no privilege on %s', r))
  FROM unnest('{consumers,consumer_def,subscription,release_totals}'::name[]) WITH ORDINALITY AS t(r, n)
 ORDER BY n;
SELECT sequence_privs_are('ordered_events', 'consumer_id_seq', 'public', '{}',
    'PUBLIC has no privilege on consumer_id_seq');

------------------------------------------------------------------------
-- key_partition: 5 tests
------------------------------------------------------------------------
CREATE TEMP TABLE sample_key ON COMMIT DROP AS
SELECT k FROM unnest(ARRAY['', 'a', 'b', 'k0', 'k1', 'key with space', U&'\00E9t\00E9',
                           repeat('x', 1024), E'tab\there', 'A', 'a ']) AS u(k)
UNION ALL
SELECT 'key' || g FROM generate_series(1, 200) g;

SELECT results_eq(
    $$SELECT s.k, n.n, ordered_events.key_partition(s.k, n.n)::bigint
        FROM sample_key s, unnest('{1,2,3,7,16,1000,1024,2147483647}'::int[]) n(n)
       ORDER BY 1, 2$$,
    $$SELECT s.k, n.n, (hashtextextended(s.k, 0) & 9223372036854775807) % n.n
        FROM sample_key s, unnest('{1,2,3,7,16,1000,1024,2147483647}'::int[]) n(n)
       ORDER BY 1, 2$$,
    'key_partition(key, n) = (hashtextextended(key, 0) & 9223372036854775807) % n');
SELECT is((SELECT array_agg(DISTINCT ordered_events.key_partition(k, 7)) FROM sample_key),
    '{0,1,2,3,4,5,6}'::int[], 'the partitions of 211 keys among 7 are 0 .. 6, each used');
SELECT is(ordered_events.key_partition('a' COLLATE "C", 16), ordered_events.key_partition('a' COLLATE "default", 16),
    'key_partition does not depend on the collation');

-- read() serves each key's events from the partition key_partition() names.
SELECT ordered_events.create_stream('tap_cons_part');
SELECT ordered_events.create_stream('tap_cons_part_k', 'per_key');
SELECT count(*) FROM (SELECT k, row_number() OVER (ORDER BY k) AS seq FROM sample_key) s,
       LATERAL ordered_events.ingest('tap_cons_part', s.seq, s.k);
SELECT count(*) FROM sample_key s, LATERAL ordered_events.ingest('tap_cons_part_k', 1, s.k);
SELECT ordered_events.release('tap_cons_part') + ordered_events.release('tap_cons_part_k');
SELECT ordered_events.create_consumer('tap_cons_three', 3);
SELECT ordered_events.subscribe('tap_cons_three', 'tap_cons_part'),
       ordered_events.subscribe('tap_cons_three', 'tap_cons_part_k');
SELECT results_eq(
    $$SELECT p.p, r.stream, r.key COLLATE "C" FROM generate_series(0, 2) p(p),
             LATERAL ordered_events.read('tap_cons_three', 1000, p.p) r
       ORDER BY 1, 2, 3$$,
    $$SELECT ordered_events.key_partition(s.k, 3), t.stream, s.k COLLATE "C"
        FROM sample_key s, unnest('{tap_cons_part,tap_cons_part_k}'::text[]) t(stream)
       ORDER BY 1, 2, 3$$,
    'each partition of a consumer reads exactly the events of its keys, of both kinds of stream');
-- This transaction has not committed its reads: they are still in the
-- pools, not consumed.
SELECT results_eq(
    $$SELECT partition, sum(unread_count)::bigint, sum(consumed_count)::bigint
        FROM ordered_events.consumers WHERE consumer = 'tap_cons_three'
       GROUP BY partition ORDER BY partition$$,
    $$SELECT ordered_events.key_partition(k, 3), 2 * count(*), 0::bigint
        FROM sample_key GROUP BY 1 ORDER BY 1$$,
    'the consumers view counts each partition''s pool; reads not committed consumed nothing yet');

SELECT * FROM finish();
ROLLBACK;
