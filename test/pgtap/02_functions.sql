-- The functions of the contract (docs/reference.md): each exists
-- once, with exactly the contract's argument names, types and defaults, its
-- return type and volatility, and none is STRICT (a NULL argument must give
-- an error or a meaning such as "every stream", never a silent NULL).
-- blockers(stream), the open transactions a blocked stream waits for, came
-- with the gap policies (issue 5); retentions and compact() with issue 13.
BEGIN;
SELECT plan(81);

\ir shared/function_contract.sql

INSERT INTO contract_function VALUES
(1, 'create_stream',
    '{text,text,bigint,text,interval,integer,interval,interval}', 'void', 'volatile',
    'stream text, sequencing text DEFAULT ''global''::text, initial_sequence bigint DEFAULT 1, '
    'gap_policy text DEFAULT ''wait''::text, gap_timeout interval DEFAULT NULL::interval, '
    'max_release_batch integer DEFAULT 10000, retention interval DEFAULT NULL::interval, '
    'dead_letter_retention interval DEFAULT NULL::interval',
    'void'),
(2, 'alter_stream',
    '{text,text,interval,integer,interval,interval,boolean,regrole}', 'void', 'volatile',
    'stream text, gap_policy text DEFAULT NULL::text, gap_timeout interval DEFAULT NULL::interval, '
    'max_release_batch integer DEFAULT NULL::integer, retention interval DEFAULT NULL::interval, '
    'dead_letter_retention interval DEFAULT NULL::interval, keep_forever boolean DEFAULT false, '
    'owner regrole DEFAULT NULL::regrole',
    'void'),
(3, 'drop_stream',
    '{text}', 'void', 'volatile',
    'stream text',
    'void'),
(4, 'ingest',
    '{text,bigint,text,jsonb,"timestamp with time zone","timestamp with time zone",boolean}',
    'ordered_events.outcome', 'volatile',
    'stream text, seq bigint, key text, payload jsonb DEFAULT NULL::jsonb, '
    'event_ts timestamp with time zone DEFAULT NULL::timestamp with time zone, '
    'alignment_ts timestamp with time zone DEFAULT NULL::timestamp with time zone, '
    'last_event boolean DEFAULT false',
    'ordered_events.outcome'),
(5, 'release',
    '{text}', 'bigint', 'volatile',
    'stream text DEFAULT NULL::text',
    'bigint'),
(6, 'gaps',
    '{text}', 'setof record', 'stable',
    'stream text',
    'TABLE(key text, gap_start bigint, gap_end bigint, first_seen timestamp with time zone)'),
(7, 'append',
    '{text,text,jsonb,"timestamp with time zone"}', 'bigint', 'volatile',
    'stream text, key text, payload jsonb DEFAULT NULL::jsonb, '
    'event_ts timestamp with time zone DEFAULT NULL::timestamp with time zone',
    'bigint'),
(8, 'skip_gap',
    '{text,bigint,text,text}', 'bigint', 'volatile',
    'stream text, through_seq bigint, reason text, key text DEFAULT NULL::text',
    'bigint'),
(9, 'blockers',
    '{text}', 'setof record', 'stable',
    'stream text',
    'TABLE(pid integer, xid xid, state text, xact_start timestamp with time zone, query text)'),
(10, 'compact',
    '{text}', 'bigint', 'volatile',
    'stream text DEFAULT NULL::text',
    'bigint');

-- 10 functions x 7 tests
SELECT * FROM pg_temp.function_contract_tests();

-- Calls with named arguments, as the contract documents them (2 + 2 tests).
SELECT lives_ok($$SELECT ordered_events.create_stream(stream => 'tap_fn_named',
        sequencing => 'global', initial_sequence => 10, gap_policy => 'wait',
        gap_timeout => NULL, max_release_batch => 5, retention => NULL,
        dead_letter_retention => NULL)$$,
    'create_stream accepts every argument by name');
SELECT is(ordered_events.ingest(stream => 'tap_fn_named', seq => 10, key => 'k',
        payload => '{"a": 1}', event_ts => '2024-01-01 00:00:00+00',
        alignment_ts => '2024-01-01 00:00:01+00', last_event => false),
    'accepted'::ordered_events.outcome, 'ingest accepts every argument by name');
SELECT is(ordered_events.release(stream => 'tap_fn_named'), 1::bigint,
    'release accepts its argument by name');
SELECT lives_ok($$SELECT ordered_events.alter_stream(stream => 'tap_fn_named',
        gap_policy => 'wait', gap_timeout => NULL, max_release_batch => 7,
        retention => '1 day', dead_letter_retention => '7 days', keep_forever => false)$$,
    'alter_stream accepts every argument by name');
SELECT is(ordered_events.compact(stream => 'tap_fn_named'), 0::bigint,
    'compact accepts its argument by name');

-- append(), skip_gap() and blockers() with named arguments (6 tests).
SELECT lives_ok($$SELECT ordered_events.create_stream(stream => 'tap_fn_fence',
        gap_policy => 'fence', initial_sequence => 5)$$,
    'create_stream makes a fence stream');
SELECT is(ordered_events.append(stream => 'tap_fn_fence', key => 'k', payload => '{"a": 1}',
        event_ts => '2024-01-01 00:00:00+00'),
    5::bigint, 'append accepts every argument by name and returns the seq it allocated');
SELECT is(ordered_events.skip_gap(stream => 'tap_fn_named', through_seq => 12,
        reason => 'test', key => NULL),
    2::bigint, 'skip_gap accepts every argument by name and returns the number skipped');
SELECT lives_ok($$SELECT ordered_events.create_stream(stream => 'tap_fn_keyed',
        sequencing => 'per_key')$$,
    'create_stream makes a per-key stream');
SELECT is(ordered_events.skip_gap(stream => 'tap_fn_keyed', through_seq => 3,
        reason => 'test', key => 'k'),
    3::bigint, 'skip_gap takes the key of a per-key stream by name');
SELECT is_empty($$SELECT * FROM ordered_events.blockers(stream => 'tap_fn_named')$$,
    'blockers accepts its argument by name');

SELECT * FROM finish();
ROLLBACK;
