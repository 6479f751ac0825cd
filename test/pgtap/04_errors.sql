-- The error contract for bad arguments (docs/reference.md and
-- docs/architecture.md, rule 5): each kind of bad input, to every function and to the
-- inbox, is an ERROR with the SQLSTATE of docs/reference.md's table, a lower-case
-- message and a hint, and it changes nothing.  The SQLSTATEs are pinned
-- here; sql/errors.sql shows what the user reads (message, detail, hint),
-- one example of each message.  The errors at the edges of bigint,
-- in read-only transactions and of missing privileges have their own files
-- in sql/.
BEGIN;
SELECT plan(192);

SELECT ordered_events.create_stream('tap_err');
SELECT ordered_events.ingest('tap_err', 1, 'k');
-- One stream of each other kind: fence, timeout, per-key.
SELECT ordered_events.create_stream('tap_err_fence', gap_policy => 'fence');
SELECT ordered_events.append('tap_err_fence', 'k');
SELECT ordered_events.create_stream('tap_err_timeout', gap_policy => 'timeout',
                                    gap_timeout => '1 minute');
SELECT ordered_events.create_stream('tap_err_keyed', sequencing => 'per_key');
SELECT ordered_events.ingest('tap_err_keyed', 3, 'k');
-- A stream this backend has cached, then dropped.
SELECT ordered_events.create_stream('tap_err_gone');
SELECT ordered_events.ingest('tap_err_gone', 1, 'k');
SELECT ordered_events.drop_stream('tap_err_gone');

\ir shared/bad_input.sql

INSERT INTO bad_input VALUES
-- unknown stream: undefined_object
( 1, '42704', 'ingest into an unknown stream',
     $$SELECT ordered_events.ingest('tap_no_such', 1, 'k')$$),
( 2, '42704', 'inbox row for an unknown stream',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_no_such', 1, 'k')$$),
( 3, '42704', 'release of an unknown stream',
     $$SELECT ordered_events.release('tap_no_such')$$),
( 4, '42704', 'drop_stream of an unknown stream',
     $$SELECT ordered_events.drop_stream('tap_no_such')$$),
( 5, '42704', 'alter_stream of an unknown stream',
     $$SELECT ordered_events.alter_stream('tap_no_such', max_release_batch => 5)$$),
( 6, '42704', 'gaps of an unknown stream',
     $$SELECT * FROM ordered_events.gaps('tap_no_such')$$),
( 7, '42704', 'ingest into a stream dropped in this transaction (cached before)',
     $$SELECT ordered_events.ingest('tap_err_gone', 2, 'k')$$),
( 8, '42704', 'release of a stream dropped in this transaction',
     $$SELECT ordered_events.release('tap_err_gone')$$),
( 9, '42704', 'ingest into a stream whose name differs in case',
     $$SELECT ordered_events.ingest('TAP_ERR', 2, 'k')$$),
-- NULL stream, seq or key: null_value_not_allowed
(10, '22004', 'ingest with NULL seq',
     $$SELECT ordered_events.ingest('tap_err', NULL, 'k')$$),
(11, '22004', 'ingest with NULL key',
     $$SELECT ordered_events.ingest('tap_err', 2, NULL)$$),
(12, '22004', 'ingest with NULL stream',
     $$SELECT ordered_events.ingest(NULL, 2, 'k')$$),
(13, '22004', 'inbox row with NULL seq',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_err', NULL, 'k')$$),
(14, '22004', 'inbox row with NULL key',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_err', 2, NULL)$$),
(15, '22004', 'inbox row with NULL stream',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES (NULL, 2, 'k')$$),
(49, '22004', 'drop_stream with NULL stream',
     $$SELECT ordered_events.drop_stream(NULL)$$),
(50, '22004', 'alter_stream with NULL stream',
     $$SELECT ordered_events.alter_stream(NULL, max_release_batch => 5)$$),
(51, '22004', 'gaps with NULL stream',
     $$SELECT * FROM ordered_events.gaps(NULL)$$),
-- key over 1024 bytes: string_data_right_truncation
(16, '22001', 'ingest with a key of 1025 bytes',
     $$SELECT ordered_events.ingest('tap_err', 2, repeat('x', 1025))$$),
(17, '22001', 'ingest with a key of 513 characters but 1026 bytes',
     $$SELECT ordered_events.ingest('tap_err', 2, repeat(U&'\00E9', 513))$$),
(18, '22001', 'inbox row with a key of 1025 bytes',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_err', 2, repeat('x', 1025))$$),
(19, '22001', 'over-long key of a seq that is already there (checked first)',
     $$SELECT ordered_events.ingest('tap_err', 1, repeat('x', 1025))$$),
-- invalid stream name: invalid_name
(20, '42602', 'stream name with upper case',
     $$SELECT ordered_events.create_stream('Orders')$$),
(21, '42602', 'stream name starting with a digit',
     $$SELECT ordered_events.create_stream('1orders')$$),
(22, '42602', 'empty stream name',
     $$SELECT ordered_events.create_stream('')$$),
(23, '42602', 'stream name with a hyphen',
     $$SELECT ordered_events.create_stream('a-b')$$),
(24, '42602', 'stream name of 64 characters',
     $$SELECT ordered_events.create_stream(repeat('a', 64))$$),
(25, '42602', 'stream name with a trailing newline',
     $$SELECT ordered_events.create_stream(E'orders\n')$$),
(26, '42602', 'stream name with a non-ASCII letter',
     $$SELECT ordered_events.create_stream(U&'ord\00E9rs')$$),
(27, '42602', 'stream name with a space',
     $$SELECT ordered_events.create_stream('my orders')$$),
-- existing stream: duplicate_object
(28, '42710', 'create_stream of an existing stream',
     $$SELECT ordered_events.create_stream('tap_err')$$),
-- invalid option: invalid_parameter_value
(29, '22023', 'unknown sequencing',
     $$SELECT ordered_events.create_stream('tap_err_opt', sequencing => 'bogus')$$),
(30, '22023', 'NULL sequencing',
     $$SELECT ordered_events.create_stream('tap_err_opt', sequencing => NULL)$$),
(31, '22023', 'unknown gap_policy',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'bogus')$$),
(32, '22023', 'NULL gap_policy',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => NULL)$$),
(33, '22023', 'gap_timeout with gap_policy wait',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_timeout => '1 minute')$$),
(34, '22023', 'max_release_batch 0',
     $$SELECT ordered_events.create_stream('tap_err_opt', max_release_batch => 0)$$),
(35, '22023', 'negative max_release_batch',
     $$SELECT ordered_events.create_stream('tap_err_opt', max_release_batch => -1)$$),
(36, '22023', 'NULL max_release_batch',
     $$SELECT ordered_events.create_stream('tap_err_opt', max_release_batch => NULL)$$),
(37, '22023', 'NULL initial_sequence',
     $$SELECT ordered_events.create_stream('tap_err_opt', initial_sequence => NULL)$$),
(38, '22023', 'initial_sequence without a successor',
     $$SELECT ordered_events.create_stream('tap_err_opt', initial_sequence => 9223372036854775807)$$),
(39, '22023', 'alter_stream to an unknown gap_policy',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'bogus')$$),
(40, '22023', 'alter_stream to max_release_batch 0',
     $$SELECT ordered_events.alter_stream('tap_err', max_release_batch => 0)$$),
(41, '22023', 'alter_stream gap_timeout on a wait stream',
     $$SELECT ordered_events.alter_stream('tap_err', gap_timeout => '1 minute')$$),
(42, '22023', 'last_event on a global stream',
     $$SELECT ordered_events.ingest('tap_err', 2, 'k', last_event => true)$$),
(43, '22023', 'inbox row with last_event on a global stream',
     $$INSERT INTO ordered_events.inbox (stream, seq, key, last_event) VALUES ('tap_err', 2, 'k', true)$$),
-- gap policy options: invalid_parameter_value
(52, '22023', 'gap_policy timeout without gap_timeout',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'timeout')$$),
(53, '22023', 'gap_timeout of zero',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'timeout', gap_timeout => '0')$$),
(54, '22023', 'negative gap_timeout',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'timeout', gap_timeout => '-1 minute')$$),
(55, '22023', 'gap_timeout with gap_policy fence',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'fence', gap_timeout => '1 minute')$$),
(56, '22023', 'gap_policy fence on a per-key stream',
     $$SELECT ordered_events.create_stream('tap_err_opt', sequencing => 'per_key', gap_policy => 'fence')$$),
(57, '22023', 'alter_stream from wait to fence',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'fence')$$),
(58, '22023', 'alter_stream from fence to wait',
     $$SELECT ordered_events.alter_stream('tap_err_fence', gap_policy => 'wait')$$),
(59, '22023', 'alter_stream of a per-key stream to fence',
     $$SELECT ordered_events.alter_stream('tap_err_keyed', gap_policy => 'fence')$$),
(60, '22023', 'alter_stream to timeout without gap_timeout',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'timeout')$$),
(61, '22023', 'alter_stream to a negative gap_timeout',
     $$SELECT ordered_events.alter_stream('tap_err_timeout', gap_timeout => '-1 minute')$$),
(62, '22023', 'alter_stream from timeout to wait with a gap_timeout',
     $$SELECT ordered_events.alter_stream('tap_err_timeout', gap_policy => 'wait', gap_timeout => '1 minute')$$),
-- append() only on fence streams, ingest() never on them: wrong_object_type
(63, '42809', 'append to a wait stream',
     $$SELECT ordered_events.append('tap_err', 'k')$$),
(64, '42809', 'append to a per-key stream',
     $$SELECT ordered_events.append('tap_err_keyed', 'k')$$),
(65, '42809', 'append to a timeout stream',
     $$SELECT ordered_events.append('tap_err_timeout', 'k')$$),
(66, '42809', 'ingest into a fence stream',
     $$SELECT ordered_events.ingest('tap_err_fence', 2, 'k')$$),
(67, '42809', 'inbox row for a fence stream',
     $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_err_fence', 2, 'k')$$),
-- append() with a bad argument
(68, '42704', 'append to an unknown stream',
     $$SELECT ordered_events.append('tap_no_such', 'k')$$),
(69, '42704', 'append to a stream dropped in this transaction',
     $$SELECT ordered_events.append('tap_err_gone', 'k')$$),
(70, '22004', 'append with NULL stream',
     $$SELECT ordered_events.append(NULL, 'k')$$),
(71, '22004', 'append with NULL key',
     $$SELECT ordered_events.append('tap_err_fence', NULL)$$),
(72, '22001', 'append with a key of 1025 bytes',
     $$SELECT ordered_events.append('tap_err_fence', repeat('x', 1025))$$),
-- skip_gap() with a bad argument
(73, '22004', 'skip_gap with NULL reason',
     $$SELECT ordered_events.skip_gap('tap_err', 5, NULL)$$),
(74, '22004', 'skip_gap with an empty reason',
     $$SELECT ordered_events.skip_gap('tap_err', 5, '')$$),
(75, '22004', 'skip_gap with NULL through_seq',
     $$SELECT ordered_events.skip_gap('tap_err', NULL, 'lost')$$),
(76, '22004', 'skip_gap with NULL stream',
     $$SELECT ordered_events.skip_gap(NULL, 5, 'lost')$$),
(77, '22023', 'skip_gap with a key on a global stream',
     $$SELECT ordered_events.skip_gap('tap_err', 5, 'lost', 'k')$$),
(78, '22004', 'skip_gap without a key on a per-key stream',
     $$SELECT ordered_events.skip_gap('tap_err_keyed', 5, 'lost')$$),
(79, '22023', 'skip_gap through the largest bigint',
     $$SELECT ordered_events.skip_gap('tap_err', 9223372036854775807, 'lost')$$),
(80, '22023', 'skip_gap of a key through the largest bigint',
     $$SELECT ordered_events.skip_gap('tap_err_keyed', 9223372036854775807, 'lost', 'k')$$),
(81, '42704', 'skip_gap of an unknown stream',
     $$SELECT ordered_events.skip_gap('tap_no_such', 5, 'lost')$$),
(82, '42704', 'skip_gap of a stream dropped in this transaction',
     $$SELECT ordered_events.skip_gap('tap_err_gone', 5, 'lost')$$),
-- blockers() with a bad argument
(83, '42704', 'blockers of an unknown stream',
     $$SELECT * FROM ordered_events.blockers('tap_no_such')$$),
(84, '22004', 'blockers with NULL stream',
     $$SELECT * FROM ordered_events.blockers(NULL)$$),
-- names are matched as given: never truncated (nor folded, 9 above)
(85, '42704', 'release of a stream name of 100 characters (not truncated to a known one)',
     $$SELECT ordered_events.release(repeat('e', 100))$$),
-- the key's length is checked before anything else
(86, '22001', 'ingest with a key of 100000 bytes',
     $$SELECT ordered_events.ingest('tap_err', 2, repeat('x', 100000))$$),
(87, '22001', 'over-long key of a seq below the initial sequence (checked first)',
     $$SELECT ordered_events.ingest('tap_err', 0, repeat('x', 1025))$$),
(88, '22023', 'last_event on a global stream, for a seq that is already there',
     $$SELECT ordered_events.ingest('tap_err', 1, 'k', last_event => true)$$),
-- create_stream(NULL) is refused as an invalid name
(89, '42602', 'NULL stream name',
     $$SELECT ordered_events.create_stream(NULL)$$),
-- option values are matched as given, never folded
(90, '22023', 'sequencing in upper case',
     $$SELECT ordered_events.create_stream('tap_err_opt', sequencing => 'GLOBAL')$$),
(91, '22023', 'gap_policy in upper case',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'WAIT')$$),
(92, '22023', 'gap_timeout of zero with gap_policy wait',
     $$SELECT ordered_events.create_stream('tap_err_opt', gap_policy => 'wait', gap_timeout => '0')$$),
(93, '42710', 'create_stream of an existing stream with other options',
     $$SELECT ordered_events.create_stream('tap_err', max_release_batch => 7)$$),
(94, '22023', 'alter_stream to timeout with a gap_timeout of zero',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'timeout', gap_timeout => '0')$$),
(95, '22023', 'alter_stream to a negative max_release_batch',
     $$SELECT ordered_events.alter_stream('tap_err', max_release_batch => -5)$$),
-- a valid option does not go through with an invalid one
(96, '22023', 'alter_stream to gap_policy wait with max_release_batch 0',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'wait', max_release_batch => 0)$$),
(97, '22023', 'alter_stream to max_release_batch 9 with a gap_timeout on a wait stream',
     $$SELECT ordered_events.alter_stream('tap_err', gap_timeout => '1 minute', max_release_batch => 9)$$),
(98, '22023', 'alter_stream to max_release_batch 9 with gap_policy timeout and a negative gap_timeout',
     $$SELECT ordered_events.alter_stream('tap_err', gap_policy => 'timeout', gap_timeout => '-1 s',
                                          max_release_batch => 9)$$);

-- 93 x 2 tests
SELECT * FROM pg_temp.bad_input_tests();

-- Nothing changed: no stream was created, the streams kept their
-- configuration and their events, nothing went to unprocessed or to the
-- skip ledger.
SELECT results_eq(
    $$SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch
        FROM ordered_events.streams
       WHERE stream LIKE 'tap_err%' OR lower(stream) LIKE '%orders%'
       ORDER BY stream$$,
    $$VALUES ('tap_err'::text, 'global'::text, 1::bigint, 'wait'::text, NULL::interval, 10000),
             ('tap_err_fence', 'global', 1, 'fence', NULL, 10000),
             ('tap_err_keyed', 'per_key', 1, 'wait', NULL, 10000),
             ('tap_err_timeout', 'global', 1, 'timeout', '1 minute', 10000)$$,
    'the failed calls created or changed no stream');
SELECT results_eq(
    $$SELECT stream, range_start, range_end FROM ordered_events.ranges
       WHERE stream LIKE 'tap_err%' ORDER BY stream$$,
    $$VALUES ('tap_err'::text, 1::bigint, 1::bigint), ('tap_err_fence', 1, 1),
             ('tap_err_timeout', 1, 1)$$,
    'the failed calls moved no range');
SELECT results_eq(
    $$SELECT (SELECT count(*) FROM ordered_events.pending WHERE stream LIKE 'tap_err%'),
             (SELECT count(*) FROM ordered_events.released WHERE stream LIKE 'tap_err%'),
             (SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'tap_err%')$$,
    $$VALUES (3::bigint, 0::bigint, 0::bigint)$$,
    'the failed calls wrote no event and no dead letter');
SELECT is_empty(
    $$SELECT * FROM ordered_events.skipped_gaps WHERE stream LIKE 'tap_err%'$$,
    'the failed calls skipped nothing');

-- "Changes nothing" for append() and skip_gap(): an over-long key takes no
-- seq and records no skip.
SELECT is(ordered_events.append('tap_err_fence', 'k'), 2::bigint,
    'the failed append() calls took no seq: the next one is 2');
SELECT throws_ok($$SELECT ordered_events.skip_gap('tap_err_keyed', 5, 'lost', repeat('x', 1025))$$,
    '22001', NULL, '22001: skip_gap with a key of 1025 bytes');

SELECT * FROM finish();
ROLLBACK;
