--
-- beam_global: the global-sequence cases of Apache Beam's OrderedEventProcessor
-- tests, on global streams with wait gap policy.  Every case runs on two
-- streams, <case>_0 with initial_sequence 0 and <case>_1 with
-- initial_sequence 1, fed the same seq offsets by the helpers of
-- sql/shared/beam_setup.sql (arrive, release, keys) and the one below.
--
\i sql/shared/beam_setup.sql

-- Range and counters of both streams of a case.
CREATE FUNCTION pg_temp.state(test text)
RETURNS TABLE (stream text, range_start bigint, range_end bigint, max_event_ts timestamptz,
               released_count bigint, pending_count bigint, unprocessed_count bigint)
LANGUAGE sql AS $$
    SELECT r.stream, r.range_start, r.range_end, r.max_event_ts,
           st.released_count, st.pending_count, st.unprocessed_count
      FROM ordered_events.ranges r
      JOIN ordered_events.stream_stats st USING (stream)
     WHERE r.stream IN (test || '_0', test || '_1')
     ORDER BY 1
$$;

--
-- Perfect order: every arrival is released by the next release step.
--
SELECT ordered_events.create_stream('bg_perfect_0', initial_sequence => 0),
       ordered_events.create_stream('bg_perfect_1', initial_sequence => 1);
SELECT * FROM pg_temp.arrive('bg_perfect', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.arrive('bg_perfect', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.arrive('bg_perfect', 2, 'id-1', '"c"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.arrive('bg_perfect', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.arrive('bg_perfect', 4, 'id-2', '"a"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.arrive('bg_perfect', 5, 'id-2', '"b"');
SELECT * FROM pg_temp.release('bg_perfect');
SELECT * FROM pg_temp.state('bg_perfect');
SELECT stream, seq, key, payload, event_ts
  FROM ordered_events.released WHERE stream IN ('bg_perfect_0', 'bg_perfect_1');
SELECT * FROM pg_temp.keys('bg_perfect');
SELECT * FROM pg_temp.release('bg_perfect');

--
-- Out of sequence: nothing is released until the lowest seq arrives; then
-- the contiguous prefix is released in seq order.  event_ts is not monotonic
-- in seq: max_event_ts is the largest event_ts in the range, not the last.
--
SELECT ordered_events.create_stream('bg_ooo_0', initial_sequence => 0),
       ordered_events.create_stream('bg_ooo_1', initial_sequence => 1);
SELECT * FROM pg_temp.arrive('bg_ooo', 3, 'id-1', '"d"', 30);
SELECT * FROM pg_temp.release('bg_ooo');
SELECT * FROM pg_temp.arrive('bg_ooo', 2, 'id-1', '"c"', 50);
SELECT * FROM pg_temp.release('bg_ooo');
SELECT * FROM pg_temp.state('bg_ooo');
SELECT * FROM pg_temp.arrive('bg_ooo', 0, 'id-1', '"a"', 10);
SELECT * FROM pg_temp.release('bg_ooo');
-- only the initial seq is out: range [init, init+1)
SELECT * FROM pg_temp.state('bg_ooo');
SELECT * FROM pg_temp.arrive('bg_ooo', 1, 'id-1', '"b"', 20);
SELECT * FROM pg_temp.release('bg_ooo');
-- [init, init+4): max_event_ts is offset 2's 00:50, not offset 3's 00:30
SELECT * FROM pg_temp.state('bg_ooo');
SELECT * FROM pg_temp.arrive('bg_ooo', 5, 'id-2', '"b"', 40);
SELECT * FROM pg_temp.release('bg_ooo');
SELECT * FROM pg_temp.keys('bg_ooo');
SELECT * FROM pg_temp.arrive('bg_ooo', 4, 'id-2', '"a"', 60);
SELECT * FROM pg_temp.release('bg_ooo');
SELECT * FROM pg_temp.state('bg_ooo');
SELECT stream, seq, key, payload, event_ts
  FROM ordered_events.released WHERE stream IN ('bg_ooo_0', 'bg_ooo_1');
SELECT * FROM pg_temp.keys('bg_ooo');

--
-- Duplicates: a seq that was already accepted (pending or released), for the
-- same key or for another key (global seqs are unique across keys), goes to
-- unprocessed as 'duplicate'; the first event is kept.
--
SELECT ordered_events.create_stream('bg_dup_0', initial_sequence => 0),
       ordered_events.create_stream('bg_dup_1', initial_sequence => 1);
SELECT * FROM pg_temp.arrive('bg_dup', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.arrive('bg_dup', 2, 'id-1', '"c"');
SELECT * FROM pg_temp.release('bg_dup');
-- duplicate of a released seq, same key
SELECT * FROM pg_temp.arrive('bg_dup', 0, 'id-1', '"a again"');
-- duplicate of a pending seq, same key
SELECT * FROM pg_temp.arrive('bg_dup', 2, 'id-1', '"c again"');
-- the same seqs for another key
SELECT * FROM pg_temp.arrive('bg_dup', 0, 'id-2', '"x"');
SELECT * FROM pg_temp.arrive('bg_dup', 2, 'id-2', '"y"');
SELECT * FROM pg_temp.arrive('bg_dup', 1, 'id-2', '"b"');
-- a duplicate of a seq accepted before the release step that releases it
SELECT * FROM pg_temp.arrive('bg_dup', 1, 'id-1', '"b again"');
SELECT * FROM pg_temp.release('bg_dup');
SELECT * FROM pg_temp.release('bg_dup');
SELECT * FROM pg_temp.state('bg_dup');
-- the first event of each seq is the one released
SELECT stream, seq, key, payload
  FROM ordered_events.released WHERE stream IN ('bg_dup_0', 'bg_dup_1');
SELECT stream, seq, key, payload, reason, detail,
       event_ts, received_at IS NOT NULL AS has_received_at
  FROM ordered_events.unprocessed WHERE stream IN ('bg_dup_0', 'bg_dup_1')
 ORDER BY stream, key, seq;
-- received_count counts the duplicates too
SELECT * FROM pg_temp.keys('bg_dup');

--
-- Below the initial sequence: before_initial_sequence, never pending, never
-- blocking the range.
--
SELECT ordered_events.create_stream('bg_before_0', initial_sequence => 0),
       ordered_events.create_stream('bg_before_1', initial_sequence => 1);
SELECT * FROM pg_temp.arrive('bg_before', -1, 'id-1', '"too early"');
SELECT * FROM pg_temp.arrive('bg_before', -100, 'id-1', '"much too early"');
SELECT * FROM pg_temp.arrive('bg_before', -1, 'id-2', '"again"');
SELECT * FROM pg_temp.release('bg_before');
SELECT * FROM pg_temp.state('bg_before');
SELECT * FROM pg_temp.arrive('bg_before', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.arrive('bg_before', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.release('bg_before');
SELECT * FROM pg_temp.state('bg_before');
SELECT stream, seq, key, payload, reason, detail
  FROM ordered_events.unprocessed WHERE stream IN ('bg_before_0', 'bg_before_1')
 ORDER BY stream, seq, key;
-- an arrival below the initial sequence is not a duplicate
SELECT * FROM pg_temp.keys('bg_before');

--
-- The largest bigint has no successor: sequence_id_outside_valid_range.  The
-- seq below it is a valid seq (pending behind a huge gap).
--
SELECT ordered_events.create_stream('bg_max_0', initial_sequence => 0),
       ordered_events.create_stream('bg_max_1', initial_sequence => 1);
SELECT * FROM pg_temp.arrive('bg_max', 0, 'id-1', '"a"');
SELECT ordered_events.ingest('bg_max_0', 9223372036854775807, 'id-1', '"max"'),
       ordered_events.ingest('bg_max_1', 9223372036854775807, 'id-1', '"max"');
SELECT ordered_events.ingest('bg_max_0', 9223372036854775806, 'id-1', '"max - 1"'),
       ordered_events.ingest('bg_max_1', 9223372036854775806, 'id-1', '"max - 1"');
SELECT * FROM pg_temp.arrive('bg_max', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.release('bg_max');
SELECT * FROM pg_temp.state('bg_max');
SELECT stream, seq, key, payload FROM ordered_events.pending
 WHERE stream IN ('bg_max_0', 'bg_max_1');
SELECT 'bg_max_0' AS stream, key, gap_start, gap_end FROM ordered_events.gaps('bg_max_0')
UNION ALL
SELECT 'bg_max_1', key, gap_start, gap_end FROM ordered_events.gaps('bg_max_1');
SELECT stream, seq, key, payload, reason, detail
  FROM ordered_events.unprocessed WHERE stream IN ('bg_max_0', 'bg_max_1')
 ORDER BY stream;
SELECT * FROM pg_temp.keys('bg_max');
SELECT stream, max_seen_seq FROM ordered_events.stream_stats
 WHERE stream IN ('bg_max_0', 'bg_max_1') ORDER BY stream;

--
-- A large buffered backlog released in bounded batches: offsets 1..299
-- arrive first (in descending order), then the initial seq; with
-- max_release_batch 100 the release steps return 100, 100, 100, 0.
--
SELECT ordered_events.create_stream('bg_large_0', initial_sequence => 0, max_release_batch => 100),
       ordered_events.create_stream('bg_large_1', initial_sequence => 1, max_release_batch => 100);
SELECT a.stream, a.outcome, count(*)
  FROM generate_series(299, 1, -1) g,
       LATERAL pg_temp.arrive('bg_large', g, 'id-' || (g % 3)) a
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM pg_temp.release('bg_large');
SELECT * FROM pg_temp.state('bg_large');
SELECT 'bg_large_0' AS stream, key, gap_start, gap_end, first_seen IS NOT NULL AS seen
  FROM ordered_events.gaps('bg_large_0')
UNION ALL
SELECT 'bg_large_1', key, gap_start, gap_end, first_seen IS NOT NULL
  FROM ordered_events.gaps('bg_large_1');
SELECT * FROM pg_temp.arrive('bg_large', 0, 'id-0');
SELECT * FROM pg_temp.release('bg_large');
SELECT * FROM pg_temp.state('bg_large');
SELECT * FROM pg_temp.release('bg_large');
SELECT * FROM pg_temp.state('bg_large');
SELECT * FROM pg_temp.release('bg_large');
SELECT * FROM pg_temp.state('bg_large');
SELECT * FROM pg_temp.release('bg_large');
SELECT * FROM pg_temp.state('bg_large');
-- released exactly once each, in seq order, with no hole
SELECT stream, count(*), count(DISTINCT seq) AS distinct_seqs, min(seq), max(seq),
       bool_and(seq = prev + 1) AS contiguous
  FROM (SELECT stream, seq, lag(seq) OVER (PARTITION BY stream ORDER BY seq) AS prev
          FROM ordered_events.released WHERE stream IN ('bg_large_0', 'bg_large_1')) r
 GROUP BY stream ORDER BY stream;
-- three release steps of 100 each
SELECT stream, dense_rank() OVER (PARTITION BY stream ORDER BY released_at) AS step,
       count(*)
  FROM ordered_events.released WHERE stream IN ('bg_large_0', 'bg_large_1')
 GROUP BY stream, released_at ORDER BY 1, 2;
SELECT * FROM pg_temp.keys('bg_large');

--
-- A gap inside buffered output, max_release_batch 3: offsets 0..9 without
-- offset 4 are pending; release steps return 3, 1, 0 and stop at the gap.
-- When offset 4 arrives they return 3, 3, 0.
--
SELECT ordered_events.create_stream('bg_gap_0', initial_sequence => 0, max_release_batch => 3),
       ordered_events.create_stream('bg_gap_1', initial_sequence => 1, max_release_batch => 3);
SELECT a.stream, a.outcome, count(*)
  FROM generate_series(0, 9) g,
       LATERAL pg_temp.arrive('bg_gap', g, 'id-1', to_jsonb(g)) a
 WHERE g <> 4
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM pg_temp.release('bg_gap');
SELECT * FROM pg_temp.state('bg_gap');
SELECT * FROM pg_temp.release('bg_gap');
SELECT * FROM pg_temp.state('bg_gap');
SELECT * FROM pg_temp.release('bg_gap');
SELECT * FROM pg_temp.state('bg_gap');
SELECT 'bg_gap_0' AS stream, key, gap_start, gap_end, first_seen IS NOT NULL AS seen
  FROM ordered_events.gaps('bg_gap_0')
UNION ALL
SELECT 'bg_gap_1', key, gap_start, gap_end, first_seen IS NOT NULL
  FROM ordered_events.gaps('bg_gap_1');
SELECT * FROM pg_temp.keys('bg_gap');
SELECT * FROM pg_temp.arrive('bg_gap', 4, 'id-1', '4');
SELECT * FROM pg_temp.release('bg_gap');
SELECT * FROM pg_temp.state('bg_gap');
SELECT * FROM pg_temp.release('bg_gap');
SELECT * FROM pg_temp.state('bg_gap');
SELECT * FROM pg_temp.release('bg_gap');
SELECT stream, seq, payload FROM ordered_events.released
 WHERE stream IN ('bg_gap_0', 'bg_gap_1');
SELECT * FROM pg_temp.keys('bg_gap');

--
-- Clean up.
--
SELECT ordered_events.drop_stream(s)
  FROM unnest(ARRAY['perfect', 'ooo', 'dup', 'before', 'max', 'large', 'gap']) c,
       LATERAL (VALUES ('bg_' || c || '_0'), ('bg_' || c || '_1')) v(s);
SELECT count(*) FROM ordered_events.streams WHERE stream LIKE 'bg\_%';
SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'bg\_%';
