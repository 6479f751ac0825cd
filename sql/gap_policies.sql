--
-- gap_policies: what a release step does with a gap under each gap policy,
-- the operator override skip_gap(), the skip ledger skipped_gaps, late
-- arrivals into skipped runs, gaps() and stream_stats around gaps, per-key
-- timeouts, append() on fence streams, blockers(), and the errors of bad
-- options (docs/concepts.md, "Gaps"; docs/reference.md).
--
-- release() is called by hand (no background worker serves this database).
-- Nothing waits for a timeout, so no result depends on the machine's speed:
-- timeouts are long ('1 hour', '1 day'), so that no gap expires by itself
-- however slow the machine is, and a gap is made to have been missing for a
-- while by moving its stored clock (the first_seen a release step recorded)
-- back with pg_temp.age_gaps().  No timestamp is printed, only whether it is
-- set.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Range, counters and the first gap of a stream.
CREATE FUNCTION pg_temp.state(s text)
RETURNS TABLE (range_end bigint, max_seen_seq bigint, pending bigint, released bigint,
               unprocessed bigint, first_gap_start bigint, first_gap_seen boolean,
               skipped_count bigint)
LANGUAGE sql AS $$
    SELECT st.range_end, st.max_seen_seq, st.pending_count, st.released_count,
           st.unprocessed_count, st.first_gap_start, st.first_gap_since IS NOT NULL,
           st.skipped_count
      FROM ordered_events.stream_stats st WHERE st.stream = s
$$;

-- gaps() without timestamps.
CREATE FUNCTION pg_temp.gaps(s text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint, seen boolean)
LANGUAGE sql AS $$
    SELECT g.key, g.gap_start, g.gap_end, g.first_seen IS NOT NULL
      FROM ordered_events.gaps(s) g ORDER BY g.key, g.gap_start
$$;

-- The skip ledger of a stream, without skipped_at.
CREATE FUNCTION pg_temp.skips(s text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint, reason text, has_skipped_at boolean)
LANGUAGE sql AS $$
    SELECT g.key, g.gap_start, g.gap_end, g.reason, g.skipped_at IS NOT NULL
      FROM ordered_events.skipped_gaps g WHERE g.stream = s ORDER BY g.key, g.gap_start
$$;

-- The released seqs of a stream, by key for per-key streams.
CREATE FUNCTION pg_temp.released(s text)
RETURNS TABLE (key text, seqs bigint[])
LANGUAGE sql AS $$
    SELECT r.key, array_agg(r.seq ORDER BY r.seq)
      FROM ordered_events.released r WHERE r.stream = s
     GROUP BY r.key ORDER BY r.key
$$;

-- Move the stored first_seen of every gap of a stream back by span, as if
-- the gaps had been missing that much longer (each lane keeps it in
-- progress: a global stream's one lane, a per-key stream's lane per key);
-- returns the number of gaps moved.
CREATE FUNCTION pg_temp.age_gaps(s text, span interval)
RETURNS bigint
LANGUAGE sql AS $$
    WITH aged AS (
        UPDATE ordered_events.progress p
           SET gap_first_seen = p.gap_first_seen - span
          FROM ordered_events.stream_def d
         WHERE d.stream = s AND p.stream_id = d.stream_id AND p.gap_first_seen IS NOT NULL
        RETURNING 1
    )
    SELECT count(*) FROM aged
$$;

-- The dead letters of a stream, without timestamps.
CREATE FUNCTION pg_temp.unprocessed(s text)
RETURNS TABLE (seq bigint, key text, payload jsonb, reason ordered_events.outcome, detail text)
LANGUAGE sql AS $$
    SELECT u.seq, u.key, u.payload, u.reason, u.detail
      FROM ordered_events.unprocessed u WHERE u.stream = s ORDER BY u.key, u.seq
$$;

--
-- 'timeout' on a global stream: a gap is skipped once it has been missing for
-- gap_timeout, counted from first_seen (the first release step that saw it),
-- and not before.  Seqs 1, 2, 5, 6, 9 arrive: the holes are 3..4 and 7..8.
--
SELECT ordered_events.create_stream('gp_timeout', gap_policy => 'timeout',
                                    gap_timeout => '1 hour');
SELECT stream, sequencing, gap_policy, gap_timeout FROM ordered_events.streams
 WHERE stream = 'gp_timeout';
SELECT s AS seq, ordered_events.ingest('gp_timeout', s, 'k' || s % 2, to_jsonb(s))
  FROM unnest('{1,2,5,6,9}'::bigint[]) s;
-- no release step has seen a gap yet: first_seen is NULL
SELECT * FROM pg_temp.gaps('gp_timeout');
SELECT * FROM pg_temp.state('gp_timeout');
SELECT ordered_events.release('gp_timeout');
-- the step saw the first gap (3..4); 7..8 lies beyond it
SELECT * FROM pg_temp.gaps('gp_timeout');
SELECT * FROM pg_temp.state('gp_timeout');
-- not before the timeout
SELECT ordered_events.release('gp_timeout');
SELECT * FROM pg_temp.skips('gp_timeout');
-- once 3..4 has been missing for gap_timeout: it is skipped, 5 and 6 are
-- released, the step stops at 7..8 and starts its timeout now
SELECT pg_temp.age_gaps('gp_timeout', '1 hour') AS aged;
SELECT ordered_events.release('gp_timeout');
SELECT * FROM pg_temp.skips('gp_timeout');
SELECT * FROM pg_temp.gaps('gp_timeout');
SELECT * FROM pg_temp.state('gp_timeout');
-- 7..8 has its own first_seen: not skipped yet
SELECT ordered_events.release('gp_timeout');
SELECT * FROM pg_temp.skips('gp_timeout');
-- once it has been missing for gap_timeout, too
SELECT pg_temp.age_gaps('gp_timeout', '1 hour') AS aged;
SELECT ordered_events.release('gp_timeout');
SELECT * FROM pg_temp.skips('gp_timeout');
SELECT * FROM pg_temp.gaps('gp_timeout');
SELECT * FROM pg_temp.state('gp_timeout');
SELECT * FROM pg_temp.released('gp_timeout');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'gp_timeout';

--
-- Late arrivals: an event for a skipped seq is never released; it goes to
-- unprocessed as gap_skipped, with the reason of the skip, by ingest() and by
-- the inbox.  A released seq is still a duplicate, a new seq is accepted.
--
SELECT ordered_events.ingest('gp_timeout', 3, 'k1', '"late"'),
       ordered_events.ingest('gp_timeout', 8, 'k0', '"late"'),
       ordered_events.ingest('gp_timeout', 5, 'k1', '"again"'),
       ordered_events.ingest('gp_timeout', 10, 'k0', '"new"');
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
VALUES ('gp_timeout', 4, 'k0', '"late, bulk"'), ('gp_timeout', 11, 'k1', '"new, bulk"');
SELECT * FROM pg_temp.unprocessed('gp_timeout');
SELECT count(*) AS late_pending FROM ordered_events.pending
 WHERE stream = 'gp_timeout' AND seq IN (3, 4, 7, 8);
SELECT ordered_events.release('gp_timeout');
SELECT * FROM pg_temp.released('gp_timeout');
SELECT * FROM pg_temp.state('gp_timeout');
-- received_count counts the late events; they are neither buffered nor released
SELECT key, last_released_seq, buffered_count, received_count, released_count,
       duplicate_count
  FROM ordered_events.key_status WHERE stream = 'gp_timeout' ORDER BY key;

--
-- The timeout counts from first_seen under the stream's current gap_timeout:
-- with '1 day', a gap missing for an hour is not skipped however often
-- release() runs; shortened to '1 hour', that gap is skipped by the next
-- step.  Back to 'wait', gap_timeout is cleared and nothing is skipped,
-- however long a gap has been missing.
--
SELECT ordered_events.create_stream('gp_timeout_long', gap_policy => 'timeout',
                                    gap_timeout => '1 day');
SELECT ordered_events.ingest('gp_timeout_long', s, 'k') FROM unnest('{1,3,5}'::bigint[]) s;
SELECT ordered_events.release('gp_timeout_long');
SELECT pg_temp.age_gaps('gp_timeout_long', '1 hour') AS aged;
SELECT ordered_events.release('gp_timeout_long');
SELECT ordered_events.release('gp_timeout_long');
SELECT * FROM pg_temp.gaps('gp_timeout_long');
SELECT * FROM pg_temp.skips('gp_timeout_long');
SELECT ordered_events.alter_stream('gp_timeout_long', gap_timeout => '1 hour');
SELECT gap_policy, gap_timeout FROM ordered_events.streams WHERE stream = 'gp_timeout_long';
SELECT ordered_events.release('gp_timeout_long');
SELECT * FROM pg_temp.skips('gp_timeout_long');
-- the gap at 4 was first seen by that step
SELECT * FROM pg_temp.gaps('gp_timeout_long');
SELECT ordered_events.alter_stream('gp_timeout_long', gap_policy => 'wait');
SELECT gap_policy, gap_timeout FROM ordered_events.streams WHERE stream = 'gp_timeout_long';
SELECT pg_temp.age_gaps('gp_timeout_long', '10 years') AS aged;
SELECT ordered_events.release('gp_timeout_long');
SELECT * FROM pg_temp.skips('gp_timeout_long');
SELECT * FROM pg_temp.gaps('gp_timeout_long');
SELECT * FROM pg_temp.state('gp_timeout_long');

--
-- 'wait' never skips, however long a gap has been missing.  Holes 2 and 5..6.
--
SELECT ordered_events.create_stream('gp_wait');
SELECT ordered_events.ingest('gp_wait', s, 'k') FROM unnest('{1,3,4,7}'::bigint[]) s;
SELECT * FROM pg_temp.gaps('gp_wait');
SELECT ordered_events.release('gp_wait');
SELECT pg_temp.age_gaps('gp_wait', '10 years') AS aged;
SELECT ordered_events.release('gp_wait');
SELECT ordered_events.release('gp_wait');
SELECT * FROM pg_temp.gaps('gp_wait');
SELECT * FROM pg_temp.skips('gp_wait');
SELECT * FROM pg_temp.state('gp_wait');
-- nothing blocks it: no other transaction writes events
SELECT count(*) AS blockers FROM ordered_events.blockers('gp_wait');
-- the gap fills: the range moves on to the next one, which is seen now
SELECT ordered_events.ingest('gp_wait', 2, 'k');
SELECT ordered_events.release('gp_wait');
SELECT * FROM pg_temp.gaps('gp_wait');
SELECT * FROM pg_temp.state('gp_wait');

--
-- skip_gap(): every missing seq <= through_seq is declared lost, each hole a
-- run of the ledger (inclusive bounds) with the operator's reason; it returns
-- the number of seqs skipped and releases what that unblocks, at most
-- max_release_batch (3 here).  Holes: 3, 9..11, 14..19.
--
SELECT ordered_events.create_stream('gp_skip', max_release_batch => 3);
SELECT ordered_events.ingest('gp_skip', s, 'k' || s % 2, to_jsonb(s))
  FROM unnest('{1,2,4,5,6,7,8,12,13,20}'::bigint[]) s;
SELECT ordered_events.release('gp_skip');
SELECT * FROM pg_temp.gaps('gp_skip');
SELECT ordered_events.skip_gap('gp_skip', 14, 'lost in transit');
SELECT * FROM pg_temp.skips('gp_skip');
-- released 4, 5, 6 only: one batch
SELECT * FROM pg_temp.released('gp_skip');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'gp_skip';
-- release steps pass the skipped runs: 7, 8, (9..11), 12; then 13, (14)
SELECT ordered_events.release('gp_skip');
SELECT range_end FROM ordered_events.ranges WHERE stream = 'gp_skip';
SELECT ordered_events.release('gp_skip');
SELECT ordered_events.release('gp_skip');
SELECT * FROM pg_temp.gaps('gp_skip');
SELECT * FROM pg_temp.state('gp_skip');
-- nothing missing is left at or below 14 (released, skipped or below the
-- initial sequence): nothing is skipped, nothing is recorded
SELECT ordered_events.skip_gap('gp_skip', 14, 'again'),
       ordered_events.skip_gap('gp_skip', 2, 'released'),
       ordered_events.skip_gap('gp_skip', 0, 'before the initial sequence'),
       ordered_events.skip_gap('gp_skip', -9223372036854775808, 'the smallest bigint');
SELECT count(*) AS ledger_runs FROM ordered_events.skipped_gaps WHERE stream = 'gp_skip';
-- also seqs above the highest arrived one (20): 15..19 and 21..25
SELECT ordered_events.skip_gap('gp_skip', 25, 'producer reset');
SELECT * FROM pg_temp.skips('gp_skip');
SELECT * FROM pg_temp.gaps('gp_skip');
SELECT * FROM pg_temp.state('gp_skip');
-- late arrivals below and above the old highest seq; 26 is the next seq
SELECT ordered_events.ingest('gp_skip', 3, 'k1', '"late"'),
       ordered_events.ingest('gp_skip', 17, 'k1', '"late"'),
       ordered_events.ingest('gp_skip', 23, 'k1', '"late"'),
       ordered_events.ingest('gp_skip', 26, 'k0', '26');
SELECT ordered_events.release('gp_skip');
SELECT * FROM pg_temp.unprocessed('gp_skip');
SELECT * FROM pg_temp.released('gp_skip');
SELECT * FROM pg_temp.state('gp_skip');
-- docs/architecture.md, rule 4: every seq the range passed is either released
-- or in the ledger, exactly once
SELECT count(*) AS passed, count(r.seq) AS released, count(g.gap_start) AS skipped,
       count(*) FILTER (WHERE r.seq IS NULL = (g.gap_start IS NULL)) AS neither_or_both
  FROM ordered_events.ranges x
 CROSS JOIN LATERAL generate_series(x.range_start, x.range_end - 1) s
  LEFT JOIN ordered_events.released r ON r.stream = x.stream AND r.seq = s
  LEFT JOIN ordered_events.skipped_gaps g
         ON g.stream = x.stream AND s BETWEEN g.gap_start AND g.gap_end
 WHERE x.stream = 'gp_skip';
-- what a skip unblocks is released at most max_release_batch at a time
SELECT ordered_events.ingest('gp_skip', s, 'k0') FROM generate_series(28, 33) s;
SELECT ordered_events.skip_gap('gp_skip', 27, 'lost');
SELECT range_end FROM ordered_events.ranges WHERE stream = 'gp_skip';
SELECT ordered_events.release('gp_skip');
SELECT range_end FROM ordered_events.ranges WHERE stream = 'gp_skip';

--
-- Per-key stream with 'timeout': each key's gap has its own first_seen and
-- is skipped on its own.  k1: 2, 5 (holes 1 and 3..4); k2: 1, 3 (hole 2);
-- k3: 1, 2, 4 (hole 3).  A step visits keys in key order, so the first gap
-- of stream_stats (the one seen first) is k1's.
--
SELECT ordered_events.create_stream('gp_keyed', sequencing => 'per_key',
                                    gap_policy => 'timeout', gap_timeout => '1 hour');
SELECT k AS key, s AS seq, ordered_events.ingest('gp_keyed', s, k)
  FROM (VALUES ('k1', 2), ('k1', 5), ('k2', 1), ('k2', 3), ('k3', 1), ('k3', 2), ('k3', 4)) v(k, s);
SELECT * FROM pg_temp.gaps('gp_keyed');
SELECT * FROM pg_temp.state('gp_keyed');
SELECT ordered_events.release('gp_keyed');
SELECT * FROM pg_temp.gaps('gp_keyed');
SELECT * FROM pg_temp.state('gp_keyed');
-- not before the timeout
SELECT ordered_events.release('gp_keyed');
SELECT * FROM pg_temp.skips('gp_keyed');
-- once they have been missing for gap_timeout, each key's first gap is
-- skipped; k1 stops at 3..4, seen from now on
SELECT pg_temp.age_gaps('gp_keyed', '1 hour') AS aged;
SELECT ordered_events.release('gp_keyed');
SELECT * FROM pg_temp.skips('gp_keyed');
SELECT * FROM pg_temp.gaps('gp_keyed');
SELECT * FROM pg_temp.released('gp_keyed');
-- late arrivals are gap_skipped for their own key only: k0 is a new key
SELECT ordered_events.ingest('gp_keyed', 1, 'k1'), ordered_events.ingest('gp_keyed', 2, 'k2'),
       ordered_events.ingest('gp_keyed', 3, 'k3'), ordered_events.ingest('gp_keyed', 2, 'k0');
SELECT * FROM pg_temp.unprocessed('gp_keyed');
-- skip_gap() names the key: k1's 3..4 and 7..10 (6 arrives first); for a
-- key with no event at all, the whole run from the initial sequence
SELECT ordered_events.ingest('gp_keyed', 6, 'k1');
SELECT ordered_events.skip_gap('gp_keyed', 10, 'operator', 'k1');
SELECT ordered_events.skip_gap('gp_keyed', 3, 'operator', 'k9');
SELECT * FROM pg_temp.skips('gp_keyed');
-- k1 released 5 and 6 in skip_gap(); 8 of k1 is late, 8 of k2 is not
SELECT * FROM pg_temp.released('gp_keyed');
SELECT ordered_events.ingest('gp_keyed', 8, 'k1'), ordered_events.ingest('gp_keyed', 11, 'k1'),
       ordered_events.ingest('gp_keyed', 8, 'k2'), ordered_events.ingest('gp_keyed', 4, 'k9');
SELECT ordered_events.release('gp_keyed');
SELECT * FROM pg_temp.released('gp_keyed');
SELECT * FROM pg_temp.gaps('gp_keyed');
SELECT * FROM pg_temp.state('gp_keyed');
SELECT * FROM pg_temp.unprocessed('gp_keyed');
SELECT key, last_released_seq, buffered_count, earliest_buffered_seq, received_count,
       released_count
  FROM ordered_events.key_status WHERE stream = 'gp_keyed' ORDER BY key;
SELECT count(*) AS blockers FROM ordered_events.blockers('gp_keyed');

--
-- 'fence': append() allocates consecutive seqs from initial_sequence (100
-- here) and returns them.  A rolled-back append leaves a gap that the next
-- release step skips, as the transaction that held those seqs has ended.
--
SELECT ordered_events.create_stream('gp_fence', gap_policy => 'fence', initial_sequence => 100);
SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout FROM ordered_events.streams
 WHERE stream = 'gp_fence';
SELECT ordered_events.append('gp_fence', 'a', '"first"'),
       ordered_events.append('gp_fence', 'b', '"second"', '2024-01-01 00:00:00+00');
BEGIN;
SELECT ordered_events.append('gp_fence', 'a', '"rolled back"');
SELECT ordered_events.append('gp_fence', 'b', '"rolled back"');
ROLLBACK;
SELECT ordered_events.append('gp_fence', 'a', '"third"');
BEGIN;
SELECT ordered_events.append('gp_fence', 'b', '"rolled back"');
ROLLBACK;
SELECT ordered_events.append('gp_fence', 'b', '"fourth"');
-- two holes, not seen by any step yet
SELECT * FROM pg_temp.gaps('gp_fence');
SELECT * FROM pg_temp.state('gp_fence');
SELECT count(*) AS blockers FROM ordered_events.blockers('gp_fence');
SELECT ordered_events.release('gp_fence');
SELECT * FROM pg_temp.skips('gp_fence');
SELECT * FROM pg_temp.gaps('gp_fence');
SELECT seq, key, payload, event_ts = '2024-01-01 00:00:00+00' AS given_event_ts
  FROM ordered_events.released WHERE stream = 'gp_fence';
SELECT * FROM pg_temp.state('gp_fence');
SELECT count(*) AS blockers FROM ordered_events.blockers('gp_fence');
-- a rolled-back append at the end is no gap until a later seq arrives
BEGIN;
SELECT ordered_events.append('gp_fence', 'a', '"rolled back"');
ROLLBACK;
SELECT ordered_events.release('gp_fence');
SELECT * FROM pg_temp.gaps('gp_fence');
SELECT ordered_events.append('gp_fence', 'a', '"fifth"');
SELECT ordered_events.release('gp_fence');
SELECT * FROM pg_temp.skips('gp_fence');
-- skip_gap on a fence stream: append() never hands out a skipped seq
SELECT ordered_events.skip_gap('gp_fence', 110, 'reserved range');
SELECT ordered_events.append('gp_fence', 'b', '"sixth"');
SELECT ordered_events.release('gp_fence');
SELECT * FROM pg_temp.skips('gp_fence');
SELECT * FROM pg_temp.released('gp_fence');
SELECT * FROM pg_temp.state('gp_fence');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'gp_fence';
-- an event of this transaction is visible to its own release step
BEGIN;
SELECT ordered_events.append('gp_fence', 'a', '"seventh"');
SELECT ordered_events.release('gp_fence');
COMMIT;
SELECT * FROM pg_temp.released('gp_fence');
SELECT count(*) AS unprocessed FROM ordered_events.unprocessed WHERE stream = 'gp_fence';

--
-- blockers() of a stream that is not blocked returns nothing, for every
-- policy, with or without gaps.
--
SELECT s.stream, count(b.pid) AS blockers
  FROM ordered_events.streams s
  LEFT JOIN LATERAL ordered_events.blockers(s.stream) b ON true
 WHERE s.stream LIKE 'gp\_%'
 GROUP BY s.stream ORDER BY s.stream;

--
-- Bad options and calls: each an ERROR with a SQLSTATE and a hint that
-- changes nothing.
--
CREATE FUNCTION pg_temp.snapshot()
RETURNS TABLE (streams bigint, config text, accepted bigint, unprocessed bigint,
               ledger_runs bigint, range_ends text)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM ordered_events.streams WHERE stream LIKE 'gp\_%'),
           (SELECT string_agg(format('%s/%s/%s/%s/%s', stream, sequencing, gap_policy,
                                     gap_timeout, max_release_batch), ' ' ORDER BY stream)
              FROM ordered_events.streams WHERE stream LIKE 'gp\_err%'),
           (SELECT count(*) FROM ordered_events.pending WHERE stream LIKE 'gp\_%')
         + (SELECT count(*) FROM ordered_events.released WHERE stream LIKE 'gp\_%'),
           (SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'gp\_%'),
           (SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream LIKE 'gp\_%'),
           (SELECT string_agg(stream || ':' || range_end, ' ' ORDER BY stream)
              FROM ordered_events.ranges WHERE stream LIKE 'gp\_%')
$$;
SELECT ordered_events.create_stream('gp_err_wait'),
       ordered_events.create_stream('gp_err_timeout', gap_policy => 'timeout',
                                    gap_timeout => '1 minute'),
       ordered_events.create_stream('gp_err_fence', gap_policy => 'fence'),
       ordered_events.create_stream('gp_err_keyed', sequencing => 'per_key');
SELECT ordered_events.ingest('gp_err_wait', 3, 'k'),
       ordered_events.ingest('gp_err_keyed', 3, 'k'),
       ordered_events.append('gp_err_fence', 'k');
SELECT * FROM pg_temp.snapshot();

-- create_stream: invalid_parameter_value (22023)
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'timeout');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'timeout', gap_timeout => NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'timeout', gap_timeout => '0');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'timeout', gap_timeout => '-1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'timeout',
                                    gap_timeout => '1 day -24 hours');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', sequencing => 'per_key',
                                    gap_policy => 'timeout', gap_timeout => '-5 minutes');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'wait', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'fence', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', sequencing => 'per_key', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('gp_err_new', gap_policy => 'Fence');
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

-- alter_stream: invalid_parameter_value (22023)
SELECT ordered_events.alter_stream('gp_err_wait', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_timeout', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_keyed', gap_policy => 'fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_fence', gap_policy => 'wait');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_fence', gap_policy => 'timeout', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_fence', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_wait', gap_policy => 'timeout');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_keyed', gap_policy => 'timeout');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_wait', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_timeout', gap_timeout => '0');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_timeout', gap_timeout => '-1 minute');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_timeout', gap_policy => 'wait', gap_timeout => '1 s');
\echo SQLSTATE :SQLSTATE
-- a valid option does not go through with an invalid one
SELECT ordered_events.alter_stream('gp_err_timeout', gap_timeout => '-1 s', max_release_batch => 5);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('gp_err_fence', gap_policy => 'wait', max_release_batch => 5);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

-- append() on a stream that is not 'fence': wrong_object_type (42809)
SELECT ordered_events.append('gp_err_keyed', 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.append('gp_err_wait', 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.append('gp_err_timeout', 'k');
\echo SQLSTATE :SQLSTATE
-- ingest() and the inbox on a 'fence' stream: wrong_object_type (42809)
SELECT ordered_events.ingest('gp_err_fence', 2, 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.ingest('gp_err_fence', 1, 'k');
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('gp_err_fence', 2, 'k');
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key)
VALUES ('gp_err_wait', 4, 'k'), ('gp_err_fence', 2, 'k');
\echo SQLSTATE :SQLSTATE
-- append() with NULL or bad arguments
SELECT ordered_events.append(NULL, 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.append('gp_err_fence', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.append('gp_err_nope', 'k');
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();
-- the failed appends took no seq: the next one is 2
SELECT ordered_events.append('gp_err_fence', 'k');

-- skip_gap(): NULL or empty reason, NULL through_seq or stream:
-- null_value_not_allowed (22004)
SELECT ordered_events.skip_gap('gp_err_wait', 2, NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('gp_err_wait', 2, '');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('gp_err_wait', NULL, 'lost');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap(NULL, 2, 'lost');
\echo SQLSTATE :SQLSTATE
-- a key on a global stream: invalid_parameter_value (22023)
SELECT ordered_events.skip_gap('gp_err_wait', 2, 'lost', 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('gp_err_fence', 2, 'lost', 'k');
\echo SQLSTATE :SQLSTATE
-- no key on a per-key stream: null_value_not_allowed (22004)
SELECT ordered_events.skip_gap('gp_err_keyed', 2, 'lost');
\echo SQLSTATE :SQLSTATE
-- the largest bigint has no successor: invalid_parameter_value (22023)
SELECT ordered_events.skip_gap('gp_err_wait', 9223372036854775807, 'lost');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('gp_err_keyed', 9223372036854775807, 'lost', 'k');
\echo SQLSTATE :SQLSTATE
-- unknown stream: undefined_object (42704)
SELECT ordered_events.skip_gap('gp_err_nope', 2, 'lost');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.skip_gap('GP_ERR_WAIT', 2, 'lost');
\echo SQLSTATE :SQLSTATE
-- blockers() of an unknown or NULL stream
SELECT * FROM ordered_events.blockers('gp_err_nope');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.blockers(NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.snapshot();

-- An error after a successful skip_gap() in the same transaction undoes the
-- skip too.
BEGIN;
SELECT ordered_events.skip_gap('gp_err_wait', 2, 'lost');
SELECT ordered_events.skip_gap('gp_err_wait', 4, NULL);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
SELECT * FROM pg_temp.snapshot();

-- The valid calls still work.
SELECT ordered_events.skip_gap('gp_err_wait', 2, 'lost'),
       ordered_events.skip_gap('gp_err_keyed', 2, 'lost', 'k');
SELECT stream, key, gap_start, gap_end, reason FROM ordered_events.skipped_gaps
 WHERE stream LIKE 'gp\_err%' ORDER BY stream;
SELECT stream, seq, key FROM ordered_events.released WHERE stream LIKE 'gp\_err%';

--
-- Clean up: dropping a stream drops its ledger and dead letters too.
--
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'gp\_%' ORDER BY stream;
SELECT count(*) AS streams FROM ordered_events.streams WHERE stream LIKE 'gp\_%';
SELECT count(*) AS ledger_runs FROM ordered_events.skipped_gaps WHERE stream LIKE 'gp\_%';
SELECT count(*) AS unprocessed FROM ordered_events.unprocessed WHERE stream LIKE 'gp\_%';
