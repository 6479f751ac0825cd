--
-- errors: every kind of bad input is an ERROR with a SQLSTATE, a lower-case
-- message and a hint, and changes nothing.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT ordered_events.create_stream('err_s');
SELECT ordered_events.ingest('err_s', 1, 'k1'), ordered_events.ingest('err_s', 3, 'k1');
SELECT ordered_events.release('err_s');

-- What the errors must not change: streams and their configuration, events,
-- dead letters, ranges.
CREATE FUNCTION pg_temp.snapshot()
RETURNS TABLE (streams bigint, config text, accepted bigint, released bigint,
               unprocessed bigint, range_end bigint)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM ordered_events.streams WHERE stream LIKE 'err%'),
           (SELECT string_agg(format('%s/%s/%s/%s/%s/%s', stream, sequencing, initial_sequence,
                                     gap_policy, gap_timeout, max_release_batch), ' ')
              FROM ordered_events.streams WHERE stream LIKE 'err%'),
           (SELECT count(*) FROM ordered_events.pending WHERE stream LIKE 'err%')
         + (SELECT count(*) FROM ordered_events.released WHERE stream LIKE 'err%'),
           (SELECT count(*) FROM ordered_events.released WHERE stream LIKE 'err%'),
           (SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'err%'),
           (SELECT range_end FROM ordered_events.ranges WHERE stream = 'err_s')
$$;
SELECT * FROM pg_temp.snapshot();

--
-- Unknown stream: undefined_object (42704).
--
SELECT ordered_events.ingest('err_nope', 1, 'k1');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.release('err_nope');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_nope', max_release_batch => 5);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_stream('err_nope');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.gaps('err_nope');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('err_nope', 5, 'lost');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.append('err_nope', 'k1');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.blockers('err_nope');
\echo SQLSTATE :SQLSTATE
-- names are case-sensitive and never truncated
SELECT ordered_events.ingest('ERR_S', 2, 'k1');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.release(repeat('e', 100));
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

--
-- NULL stream, seq or key in ingest: null_value_not_allowed (22004).
--
SELECT ordered_events.ingest(NULL, 2, 'k1');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.ingest('err_s', NULL, 'k1');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.ingest('err_s', 2, NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

--
-- A key over 1024 bytes: string_data_right_truncation (22001).  Exactly 1024
-- bytes is fine.
--
SELECT ordered_events.ingest('err_s', 2, repeat('k', 1025));
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.ingest('err_s', 2, repeat('k', 100000));
\echo SQLSTATE :SQLSTATE
-- the length is checked before the seq: a rejected seq with a long key fails too
SELECT ordered_events.ingest('err_s', 0, repeat('k', 1025));
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();
SELECT ordered_events.ingest('err_s', 2, repeat('k', 1024));
SELECT seq, length(key) FROM ordered_events.pending WHERE stream = 'err_s' AND seq = 2;

--
-- last_event on a global stream: invalid_parameter_value (22023).
--
SELECT ordered_events.ingest('err_s', 4, 'k1', last_event => true);
\echo SQLSTATE :SQLSTATE
-- also for a seq that would be rejected
SELECT ordered_events.ingest('err_s', 1, 'k1', last_event => true);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.ingest('err_s', 4, 'k1', last_event => false);
SELECT ordered_events.ingest('err_s', 5, 'k1', last_event => NULL);
SELECT * FROM pg_temp.snapshot();

--
-- Invalid stream names: invalid_name (42602).  A name matches
-- ^[a-z_][a-z0-9_]{0,62}$.
--
SELECT ordered_events.create_stream('Err_upper');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('1err');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_' || repeat('x', 60));   -- 64 characters
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream(NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err-dash');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err space');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream(E'err_s\n');
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();
-- the longest name (63 characters) and a leading underscore are fine
SELECT ordered_events.create_stream('err_' || repeat('x', 59));
SELECT ordered_events.create_stream('_err');
SELECT stream, length(stream) FROM ordered_events.streams
 WHERE stream LIKE 'err\_x%' OR stream = '_err' ORDER BY stream;
SELECT ordered_events.ingest('err_' || repeat('x', 59), 1, 'k1');
SELECT ordered_events.release('err_' || repeat('x', 59));
SELECT ordered_events.drop_stream('err_' || repeat('x', 59)),
       ordered_events.drop_stream('_err');

--
-- An existing stream: duplicate_object (42710); the stream is unchanged.
--
SELECT ordered_events.create_stream('err_s', max_release_batch => 7);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

--
-- Invalid options of create_stream.
--
-- sequencing: invalid_parameter_value (22023)
SELECT ordered_events.create_stream('err_t', sequencing => 'bogus');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', sequencing => NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', sequencing => 'GLOBAL');
\echo SQLSTATE :SQLSTATE
-- gap_policy: one of wait, timeout, fence
SELECT ordered_events.create_stream('err_t', gap_policy => 'bogus');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => 'WAIT');
\echo SQLSTATE :SQLSTATE
-- 'timeout' needs a positive gap_timeout
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout', gap_timeout => '0');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout', gap_timeout => '-1 minute');
\echo SQLSTATE :SQLSTATE
-- gap_timeout is only valid with gap_policy 'timeout'
SELECT ordered_events.create_stream('err_t', gap_timeout => '1 minute');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => 'wait', gap_timeout => '0');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', gap_policy => 'fence', gap_timeout => '1 minute');
\echo SQLSTATE :SQLSTATE
-- 'fence' is only valid for global streams
SELECT ordered_events.create_stream('err_t', sequencing => 'per_key', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
-- max_release_batch must be positive
SELECT ordered_events.create_stream('err_t', max_release_batch => 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', max_release_batch => -1);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', max_release_batch => NULL);
\echo SQLSTATE :SQLSTATE
-- initial_sequence: the largest bigint has no successor; NULL is no number
SELECT ordered_events.create_stream('err_t', initial_sequence => 9223372036854775807);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('err_t', initial_sequence => NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();
SELECT count(*) AS err_t FROM ordered_events.ranges WHERE stream = 'err_t';
-- the largest valid initial_sequence and max_release_batch 1 are fine
SELECT ordered_events.create_stream('err_t', initial_sequence => 9223372036854775806,
                                    max_release_batch => 1);
SELECT ordered_events.ingest('err_t', 9223372036854775806, 'k1');
SELECT ordered_events.ingest('err_t', 9223372036854775807, 'k1');
SELECT ordered_events.release('err_t');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'err_t';
SELECT ordered_events.drop_stream('err_t');

--
-- Invalid options of alter_stream: the same checks; nothing changes.
--
SELECT ordered_events.alter_stream('err_s', gap_policy => 'bogus');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', gap_policy => 'timeout');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', gap_policy => 'timeout', gap_timeout => '0');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', gap_timeout => '1 minute');
\echo SQLSTATE :SQLSTATE
-- 'fence' is chosen when a stream is created, never by alter_stream
SELECT ordered_events.alter_stream('err_s', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', max_release_batch => 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', max_release_batch => -5);
\echo SQLSTATE :SQLSTATE
-- a valid option does not go through with an invalid one
SELECT ordered_events.alter_stream('err_s', gap_policy => 'wait', max_release_batch => 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', gap_timeout => '1 minute', max_release_batch => 9);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('err_s', gap_policy => 'timeout', gap_timeout => '-1 s',
                                   max_release_batch => 9);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

-- An error inside a transaction undoes the whole transaction, also the
-- events written before it.
BEGIN;
SELECT ordered_events.ingest('err_s', 6, 'k1');
SELECT ordered_events.ingest('err_s', 7, NULL);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
SELECT * FROM pg_temp.snapshot();

SELECT ordered_events.drop_stream('err_s');
SELECT * FROM pg_temp.snapshot();
