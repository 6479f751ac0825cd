-- The contract about the values the functions return and the views show
-- (docs/reference.md; docs/concepts.md, "Streams: global and per-key";
-- docs/architecture.md, "Rules"), as assertions, for global streams with gap_policy 'wait',
-- in one session: the outcomes and their dead letters, timestamps, the
-- edges of what is accepted (keys, stream names, last_event,
-- initial_sequence), max_release_batch, release(NULL), gaps(), the inbox,
-- drop_stream.  The README's example itself, each step with what every view
-- shows, is the worked example sql/seed.sql; concurrency is in
-- test/isolation.
BEGIN;
SELECT plan(47);

-- The events of the README's example, released: key1 1,3,4,6 and key2
-- 2,5,7, range [1,8).  sql/seed.sql shows how they get there.
SELECT ordered_events.create_stream('tap_seed');
SELECT count(ordered_events.ingest('tap_seed', a.seq, a.key, jsonb_build_object('n', a.seq)))
  FROM (VALUES (1, 'key1'), (2, 'key2'), (3, 'key1'), (4, 'key1'),
               (5, 'key2'), (6, 'key1'), (7, 'key2')) AS a(seq, key);
SELECT ordered_events.release('tap_seed');

-- Outcomes other than accepted go to unprocessed with their reason.
SELECT is(ordered_events.ingest('tap_seed', 3, 'key9', '{"again": true}'),
    'duplicate'::ordered_events.outcome, 'a released seq again, under another key: duplicate');
SELECT is(ordered_events.ingest('tap_seed', 0, 'key1'),
    'before_initial_sequence'::ordered_events.outcome, 'seq 0 < initial sequence 1');
SELECT is(ordered_events.ingest('tap_seed', 9223372036854775807, 'key1'),
    'sequence_id_outside_valid_range'::ordered_events.outcome,
    'seq 9223372036854775807 has no successor');
SELECT is(ordered_events.ingest('tap_seed', 10, 'key2'), 'accepted'::ordered_events.outcome,
    'seq 10 is accepted (pending)');
SELECT is(ordered_events.ingest('tap_seed', 10, 'key1'), 'duplicate'::ordered_events.outcome,
    'a pending seq again: duplicate');
SELECT results_eq(
    $$SELECT seq, key COLLATE "default", payload, reason, detail IS NOT NULL, received_at IS NOT NULL
        FROM ordered_events.unprocessed WHERE stream = 'tap_seed' ORDER BY seq$$,
    $$VALUES (0::bigint, 'key1'::text, NULL::jsonb,
              'before_initial_sequence'::ordered_events.outcome, true, true),
             (3, 'key9', '{"again": true}', 'duplicate', true, true),
             (10, 'key1', NULL, 'duplicate', true, true),
             (9223372036854775807, 'key1', NULL, 'sequence_id_outside_valid_range', true, true)$$,
    'unprocessed holds every rejected event with its reason');
SELECT results_eq(
    $$SELECT seq, key COLLATE "default" FROM ordered_events.released WHERE stream = 'tap_seed' AND seq IN (3, 10)$$,
    $$VALUES (3::bigint, 'key1'::text)$$,
    'a duplicate does not replace the released event');
SELECT results_eq(
    $$SELECT key COLLATE "default", received_count, released_count, duplicate_count, buffered_count
        FROM ordered_events.key_status WHERE stream = 'tap_seed' ORDER BY key$$,
    $$VALUES ('key1'::text, 7::bigint, 4::bigint, 1::bigint, 0::bigint),
             ('key2', 4, 3, 0, 1),
             ('key9', 1, 0, 1, 0)$$,
    'key_status counts rejected events as received, duplicates as duplicates');
SELECT results_eq(
    $$SELECT max_seen_seq, unprocessed_count FROM ordered_events.stream_stats
       WHERE stream = 'tap_seed'$$,
    $$VALUES (10::bigint, 4::bigint)$$,
    'max_seen_seq is the highest accepted seq; unprocessed_count counts dead letters');

-- Timestamps: event_ts defaults to now(), alignment_ts to the insert time.
SELECT ordered_events.create_stream('tap_ts');
SELECT ordered_events.ingest('tap_ts', 1, 'k');
SELECT ordered_events.ingest('tap_ts', 2, 'k', NULL, '2020-02-02 02:02:02+00', '2021-01-01 00:00:00+00');
SELECT results_eq(
    $$SELECT seq, event_ts = now(), alignment_ts >= now() AND alignment_ts <= clock_timestamp()
        FROM ordered_events.pending WHERE stream = 'tap_ts' AND seq = 1$$,
    $$VALUES (1::bigint, true, true)$$,
    'default event_ts is now(), default alignment_ts is the time of the insert');
SELECT results_eq(
    $$SELECT event_ts, alignment_ts FROM ordered_events.pending WHERE stream = 'tap_ts' AND seq = 2$$,
    $$VALUES ('2020-02-02 02:02:02+00'::timestamptz, '2021-01-01 00:00:00+00'::timestamptz)$$,
    'given event_ts and alignment_ts are kept');

-- Keys: up to 1024 bytes.
SELECT is(ordered_events.ingest('tap_ts', 3, repeat('x', 1024)), 'accepted'::ordered_events.outcome,
    'a key of exactly 1024 bytes is accepted');
SELECT is(ordered_events.ingest('tap_ts', 4, repeat(U&'\00E9', 512)), 'accepted'::ordered_events.outcome,
    'a key of 512 two-byte characters (1024 bytes) is accepted');
SELECT is(ordered_events.ingest('tap_ts', 5, ''), 'accepted'::ordered_events.outcome,
    'an empty key is accepted (any non-NULL text)');
SELECT is(ordered_events.release('tap_ts'), 5::bigint, 'tap_ts releases its 5 events');

-- Stream names.
SELECT lives_ok(format('SELECT ordered_events.create_stream(%L)', 'a' || repeat('b', 62)),
    'a stream name of 63 characters is valid');
SELECT lives_ok($$SELECT ordered_events.create_stream('_x9')$$,
    'a stream name may start with an underscore and hold digits');
SELECT results_eq(
    $$SELECT stream, length(stream) FROM ordered_events.streams
       WHERE stream IN ('_x9', 'a' || repeat('b', 62)) ORDER BY length(stream)$$,
    $$VALUES ('_x9'::text, 3), ('a' || repeat('b', 62), 63)$$,
    'the streams view shows both names whole');
SELECT is(ordered_events.ingest('a' || repeat('b', 62), 1, 'k'), 'accepted'::ordered_events.outcome,
    'the stream of a 63-character name takes events by that name');
SELECT is(ordered_events.release('a' || repeat('b', 62)), 1::bigint,
    'the stream of a 63-character name releases');
SELECT lives_ok(format('SELECT ordered_events.drop_stream(%L)', 'a' || repeat('b', 62)),
    'the stream of a 63-character name is dropped by that name');

-- initial_sequence.
SELECT ordered_events.create_stream('tap_init', initial_sequence => -5);
SELECT is(ordered_events.ingest('tap_init', -6, 'k'), 'before_initial_sequence'::ordered_events.outcome,
    'seq below a negative initial_sequence is rejected');
SELECT is(ordered_events.ingest('tap_init', -5, 'k'), 'accepted'::ordered_events.outcome,
    'seq = initial_sequence is accepted');
SELECT is(ordered_events.release('tap_init'), 1::bigint, 'the range starts at initial_sequence');
SELECT results_eq(
    $$SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'tap_init'$$,
    $$VALUES (-5::bigint, -4::bigint)$$,
    'range [-5,-4)');
-- The largest valid initial_sequence, 9223372036854775806, with the
-- smallest max_release_batch, 1.
SELECT ordered_events.create_stream('tap_init_max', initial_sequence => 9223372036854775806,
                                    max_release_batch => 1);
SELECT is(ordered_events.ingest('tap_init_max', 9223372036854775806, 'k'),
    'accepted'::ordered_events.outcome,
    'initial_sequence 9223372036854775806 is valid: its first seq is accepted');
SELECT is(ordered_events.ingest('tap_init_max', 9223372036854775807, 'k'),
    'sequence_id_outside_valid_range'::ordered_events.outcome,
    'the seq after it has no successor: sequence_id_outside_valid_range');
SELECT is(ordered_events.release('tap_init_max'), 1::bigint,
    'max_release_batch 1 is valid: the step releases the one event');
SELECT results_eq(
    $$SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'tap_init_max'$$,
    $$VALUES (9223372036854775806::bigint, 9223372036854775807::bigint)$$,
    'range [9223372036854775806,9223372036854775807)');

-- max_release_batch bounds one release step; alter_stream changes it and a
-- NULL keeps a value.
SELECT ordered_events.create_stream('tap_batch', max_release_batch => 2);
SELECT count(*) FROM generate_series(1, 7) g, LATERAL ordered_events.ingest('tap_batch', g, 'k');
SELECT is(ARRAY[ordered_events.release('tap_batch'), ordered_events.release('tap_batch')],
    '{2,2}'::bigint[], 'release steps release at most max_release_batch events');
SELECT ordered_events.alter_stream('tap_batch', max_release_batch => 5);
SELECT ordered_events.alter_stream('tap_batch');
SELECT results_eq(
    $$SELECT gap_policy, gap_timeout, max_release_batch FROM ordered_events.streams
       WHERE stream = 'tap_batch'$$,
    $$VALUES ('wait'::text, NULL::interval, 5)$$,
    'alter_stream sets max_release_batch; NULL arguments keep values');
SELECT is(ordered_events.release('tap_batch'), 3::bigint,
    'the new batch size applies at once in this transaction');

-- release(NULL) serves every stream and returns the total.
SELECT ordered_events.ingest('tap_batch', 8, 'k');
SELECT ordered_events.ingest('tap_init', -4, 'k');
SELECT is(ordered_events.release(), 2::bigint, 'release(NULL) releases in every stream');
SELECT results_eq(
    $$SELECT stream, range_end FROM ordered_events.ranges
       WHERE stream IN ('tap_batch', 'tap_init') ORDER BY stream$$,
    $$VALUES ('tap_batch'::text, 9::bigint), ('tap_init', -3)$$,
    'both ranges moved');

-- last_event is for per-key streams (true on a global stream is an error,
-- 04_errors.sql); false and NULL are no error on a global stream.
SELECT ordered_events.create_stream('tap_last');
SELECT is(ordered_events.ingest('tap_last', 1, 'k', last_event => false),
    'accepted'::ordered_events.outcome, 'last_event => false is accepted on a global stream');
SELECT is(ordered_events.ingest('tap_last', 2, 'k', last_event => NULL),
    'accepted'::ordered_events.outcome, 'last_event => NULL is accepted on a global stream');

-- Several gaps, inclusive bounds.
SELECT ordered_events.create_stream('tap_gaps');
SELECT count(*) FROM unnest('{1,2,5,6,9}'::bigint[]) s, LATERAL ordered_events.ingest('tap_gaps', s, 'k');
SELECT is(ordered_events.release('tap_gaps'), 2::bigint, 'releases 1 and 2');
SELECT results_eq(
    $$SELECT key COLLATE "default", gap_start, gap_end FROM ordered_events.gaps('tap_gaps')$$,
    $$VALUES (NULL::text, 3::bigint, 4::bigint), (NULL, 7, 8)$$,
    'gaps 3..4 and 7..8, inclusive bounds, in order');

-- inbox: multi-row VALUES, INSERT ... SELECT and COPY follow the rules of ingest.
SELECT ordered_events.create_stream('tap_inbox');
SELECT results_eq(
    $$WITH ins AS (
        INSERT INTO ordered_events.inbox (stream, seq, key, payload)
        VALUES ('tap_inbox', 2, 'a', '{"v": 2}'), ('tap_inbox', 1, 'b', NULL),
               ('tap_inbox', 2, 'c', NULL), ('tap_inbox', 0, 'd', NULL)
        RETURNING seq, key)
      SELECT seq, key COLLATE "default" FROM ins ORDER BY seq$$,
    $$VALUES (1::bigint, 'b'::text), (2, 'a')$$,
    'inbox VALUES: accepted rows are returned, the statement goes on past rejected rows');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'tap_inbox', g, 'k' || g FROM generate_series(3, 5) g;
COPY ordered_events.inbox (stream, seq, key, payload) FROM STDIN;
tap_inbox	6	copy	{"c": 6}
tap_inbox	5	copy	\N
\.
SELECT is(ordered_events.release('tap_inbox'), 6::bigint, 'seqs 1..6 arrived through inbox');
SELECT results_eq(
    $$SELECT seq, key COLLATE "default", reason FROM ordered_events.unprocessed WHERE stream = 'tap_inbox' ORDER BY seq$$,
    $$VALUES (0::bigint, 'd'::text, 'before_initial_sequence'::ordered_events.outcome),
             (2, 'c', 'duplicate'), (5, 'copy', 'duplicate')$$,
    'rejected inbox rows are in unprocessed with their reason');
SELECT throws_ok(
    $$INSERT INTO ordered_events.inbox (stream, seq, key)
      VALUES ('tap_inbox', 7, 'ok'), ('tap_inbox', NULL, 'bad')$$,
    '22004', NULL, 'an inbox statement with a NULL seq fails');
SELECT is_empty($$SELECT * FROM ordered_events.pending WHERE stream = 'tap_inbox'$$,
    'the failed inbox statement left none of its rows');

-- drop_stream removes the stream and all its data; the name can be reused.
SELECT ordered_events.drop_stream('tap_seed');
SELECT is((SELECT count(*) FROM ordered_events.streams WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.ranges WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.released WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.pending WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.key_status WHERE stream = 'tap_seed')
        + (SELECT count(*) FROM ordered_events.stream_stats WHERE stream = 'tap_seed'),
    0::bigint, 'drop_stream leaves nothing of the stream in any view');
SELECT ordered_events.create_stream('tap_seed', initial_sequence => 100);
SELECT is(ordered_events.ingest('tap_seed', 3, 'k'), 'before_initial_sequence'::ordered_events.outcome,
    'the re-created stream has its own configuration (initial_sequence 100)');
SELECT is(ordered_events.ingest('tap_seed', 100, 'k'), 'accepted'::ordered_events.outcome,
    'the re-created stream accepts its first seq');
SELECT results_eq(
    $$SELECT range_start, range_end, (SELECT count(*) FROM ordered_events.released r
                                       WHERE r.stream = 'tap_seed')
        FROM ordered_events.ranges WHERE stream = 'tap_seed'$$,
    $$VALUES (100::bigint, 100::bigint, 0::bigint)$$,
    'the re-created stream starts empty');

SELECT * FROM finish();
ROLLBACK;
