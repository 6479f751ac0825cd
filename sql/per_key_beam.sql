--
-- per_key_beam: the per-key cases of Apache Beam's OrderedEventProcessor tests
-- (OrderedEventProcessorPerKeySequenceTest) on per-key streams with the wait
-- gap policy.  Every case runs on two streams, <case>_0 with
-- initial_sequence 0 and <case>_1 with initial_sequence 1, fed the same seq
-- offsets (seq = initial_sequence + offset) by the helpers of
-- sql/shared/beam_setup.sql (arrive, release, keys) and those below.  Beam
-- runs most cases from seq 0: its final statuses are those of the _0
-- streams; the two batch cases assume 1 as the starting sequence: their
-- statuses are those of the _1 streams.
--
-- Beam's OrderedProcessingStatus(lastProcessedSequence, numberOfBufferedEvents,
-- earliestBufferedSequence, latestBufferedSequence, numberOfReceivedEvents,
-- numberOfResultsOutput, duplicateCount, lastEventReceived) is key_status
-- (last_released_seq, buffered_count, earliest_buffered_seq,
-- latest_buffered_seq, received_count, released_count, duplicate_count,
-- last_event_received).  Beam's output of the StringBuilder handler ("a",
-- "ab", "abc") is the released payloads of a key concatenated in seq order.
-- As Beam processes every event when it arrives, a release step follows
-- every arrival.
--
\i sql/shared/beam_setup.sql

-- Create the two streams of a case.
CREATE FUNCTION pg_temp.create(test text, max_release_batch integer DEFAULT 10000)
RETURNS TABLE (stream text, sequencing text, initial_sequence bigint, max_release_batch integer)
LANGUAGE sql AS $$
    SELECT ordered_events.create_stream(test || '_0', 'per_key', 0,
                                        max_release_batch => max_release_batch);
    SELECT ordered_events.create_stream(test || '_1', 'per_key', 1,
                                        max_release_batch => max_release_batch);
    SELECT s.stream, s.sequencing, s.initial_sequence, s.max_release_batch
      FROM ordered_events.streams s
     WHERE s.stream IN (test || '_0', test || '_1')
     ORDER BY 1
$$;

-- An arrival followed by a release step, as Beam processes each event
-- (plpgsql, so that the ingest surely runs before the release).
CREATE FUNCTION pg_temp.step(test text, seq_offset bigint, key text,
                             payload jsonb DEFAULT NULL, last_event boolean DEFAULT false)
RETURNS TABLE (stream text, seq bigint, outcome ordered_events.outcome, released bigint)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 0..1 LOOP
        stream := test || '_' || i;
        seq := i + seq_offset;
        outcome := ordered_events.ingest(stream, seq, key, payload,
                                         timestamptz '2024-01-01 00:00:00+00',
                                         last_event => last_event);
        released := ordered_events.release(stream);
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Beam's output: for every released event, the payloads of its key so far.
CREATE FUNCTION pg_temp.output(test text)
RETURNS TABLE (stream text, key text, seq bigint, output text)
LANGUAGE sql AS $$
    SELECT r.stream, r.key, r.seq,
           string_agg(r.payload #>> '{}', '')
               OVER (PARTITION BY r.stream, r.key ORDER BY r.seq)
      FROM ordered_events.released r
     WHERE r.stream IN (test || '_0', test || '_1')
     ORDER BY 1, 2, 3
$$;

-- The dead letters of both streams of a case, in arrival order.
CREATE FUNCTION pg_temp.unprocessed(test text)
RETURNS TABLE (stream text, key text, seq bigint, payload jsonb, reason ordered_events.outcome,
               detail text)
LANGUAGE sql AS $$
    SELECT u.stream, u.key, u.seq, u.payload, u.reason, u.detail
      FROM ordered_events.unprocessed u
     WHERE u.stream IN (test || '_0', test || '_1')
     ORDER BY u.stream, u.key, u.received_at, u.ctid
$$;

-- Pending events and per-key gaps of both streams of a case.
CREATE FUNCTION pg_temp.pending(test text)
RETURNS TABLE (stream text, key text, seq bigint, payload jsonb)
LANGUAGE sql AS $$
    SELECT p.stream, p.key, p.seq, p.payload
      FROM ordered_events.pending p
     WHERE p.stream IN (test || '_0', test || '_1')
$$;
CREATE FUNCTION pg_temp.gaps(test text)
RETURNS TABLE (stream text, key text, gap_start bigint, gap_end bigint, seen boolean)
LANGUAGE sql AS $$
    SELECT v.s, g.key, g.gap_start, g.gap_end, g.first_seen IS NOT NULL
      FROM (VALUES (test || '_0'), (test || '_1')) v(s),
           LATERAL ordered_events.gaps(v.s) g
     ORDER BY 1, 2, 3
$$;

--
-- Perfect order (testPerfectOrderingProcessing): every arrival is released
-- by the step that follows it.  Final statuses: id-1 (3, 0, null, null, 4,
-- 4, 0, false), id-2 (1, 0, null, null, 2, 2, 0, false).
--
SELECT * FROM pg_temp.create('pk_perfect');
SELECT * FROM pg_temp.step('pk_perfect', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_perfect', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.step('pk_perfect', 2, 'id-1', '"c"');
SELECT * FROM pg_temp.step('pk_perfect', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.step('pk_perfect', 0, 'id-2', '"a"');
SELECT * FROM pg_temp.step('pk_perfect', 1, 'id-2', '"b"');
SELECT * FROM pg_temp.output('pk_perfect');
SELECT * FROM pg_temp.keys('pk_perfect');
SELECT count(*) AS pending FROM pg_temp.pending('pk_perfect');
SELECT count(*) AS unprocessed FROM pg_temp.unprocessed('pk_perfect');
SELECT * FROM pg_temp.release('pk_perfect');

--
-- Out of sequence (testOutOfSequenceProcessing): a key's events wait for
-- its lowest missing seq, then come out in seq order.  Final statuses:
-- id-1 (3, 0, null, null, 4, 4, 0, false), id-2 (4, 0, null, null, 5, 5,
-- 0, false).
--
SELECT * FROM pg_temp.create('pk_ooo');
SELECT * FROM pg_temp.step('pk_ooo', 2, 'id-1', '"c"');
SELECT * FROM pg_temp.step('pk_ooo', 1, 'id-1', '"b"');
-- nothing released yet: seq init+0 of id-1 is missing
SELECT * FROM pg_temp.keys('pk_ooo');
SELECT * FROM pg_temp.gaps('pk_ooo');
SELECT * FROM pg_temp.step('pk_ooo', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_ooo', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.step('pk_ooo', 1, 'id-2', '"b"');
SELECT * FROM pg_temp.step('pk_ooo', 2, 'id-2', '"c"');
SELECT * FROM pg_temp.step('pk_ooo', 4, 'id-2', '"e"');
-- id-1 is complete; id-2 buffers 3 events behind its first seq
SELECT * FROM pg_temp.keys('pk_ooo');
SELECT * FROM pg_temp.step('pk_ooo', 0, 'id-2', '"a"');
-- id-2 released 0..2 and stopped at the gap before 4
SELECT * FROM pg_temp.keys('pk_ooo');
SELECT * FROM pg_temp.gaps('pk_ooo');
SELECT * FROM pg_temp.step('pk_ooo', 3, 'id-2', '"d"');
SELECT * FROM pg_temp.output('pk_ooo');
SELECT * FROM pg_temp.keys('pk_ooo');
SELECT * FROM pg_temp.gaps('pk_ooo');
SELECT count(*) AS pending FROM pg_temp.pending('pk_ooo');

--
-- Unfinished processing (testUnfinishedProcessing): id-1 lacks seq 1, a
-- permanent gap under the wait policy; id-2 completes regardless.  Final
-- statuses: id-1 (0, 2, 2, 3, 3, 1, 0, false), id-2 (1, 0, null, null, 2,
-- 2, 0, false).  Then the gap is filled and id-1 completes too.
--
SELECT * FROM pg_temp.create('pk_unfinished');
SELECT * FROM pg_temp.step('pk_unfinished', 2, 'id-1', '"c"');
SELECT * FROM pg_temp.step('pk_unfinished', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_unfinished', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.step('pk_unfinished', 0, 'id-2', '"a"');
SELECT * FROM pg_temp.step('pk_unfinished', 1, 'id-2', '"b"');
SELECT * FROM pg_temp.output('pk_unfinished');
SELECT * FROM pg_temp.keys('pk_unfinished');
SELECT * FROM pg_temp.pending('pk_unfinished');
-- the gap is id-1's only, seen by a release step
SELECT * FROM pg_temp.gaps('pk_unfinished');
-- further steps change nothing
SELECT * FROM pg_temp.release('pk_unfinished');
SELECT * FROM pg_temp.keys('pk_unfinished');
-- the missing seq arrives: id-1 releases 1, 2, 3 in order
SELECT * FROM pg_temp.step('pk_unfinished', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.output('pk_unfinished');
SELECT * FROM pg_temp.keys('pk_unfinished');
SELECT * FROM pg_temp.gaps('pk_unfinished');

--
-- Duplicates (testHandlingOfDuplicateSequences): 8 events, of which 4 are
-- duplicates of a buffered (pending) or an already released seq of the key.
-- Final status: id-1 (3, 0, null, null, 8, 4, 4, false); the four
-- duplicates (3, 3, 1, 3) are in unprocessed as 'duplicate'.
--
SELECT * FROM pg_temp.create('pk_dup');
SELECT * FROM pg_temp.step('pk_dup', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.step('pk_dup', 2, 'id-1', '"c"');
-- duplicates of a buffered seq
SELECT * FROM pg_temp.step('pk_dup', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.step('pk_dup', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.keys('pk_dup');
SELECT * FROM pg_temp.step('pk_dup', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_dup', 1, 'id-1', '"b"');
-- duplicates of released seqs
SELECT * FROM pg_temp.step('pk_dup', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.step('pk_dup', 3, 'id-1', '"d"');
SELECT * FROM pg_temp.output('pk_dup');
SELECT * FROM pg_temp.keys('pk_dup');
SELECT * FROM pg_temp.unprocessed('pk_dup');

--
-- The largest bigint (testHandlingOfMaxSequenceNumber): 9223372036854775807
-- has no successor and goes to unprocessed as
-- 'sequence_id_outside_valid_range' at once.  Final status: id-1 (1, 0,
-- null, null, 3, 2, 0, false).  The bigint below it is a valid seq (on
-- another key, pending behind a huge gap).
--
SELECT * FROM pg_temp.create('pk_max');
SELECT * FROM pg_temp.step('pk_max', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_max', 1, 'id-1', '"b"');
SELECT v.s AS stream,
       ordered_events.ingest(v.s, 9223372036854775807, 'id-1', '"c"') AS outcome,
       ordered_events.release(v.s) AS released
  FROM (VALUES ('pk_max_0'), ('pk_max_1')) v(s);
SELECT * FROM pg_temp.output('pk_max');
SELECT * FROM pg_temp.keys('pk_max');
SELECT * FROM pg_temp.unprocessed('pk_max');
SELECT v.s AS stream,
       ordered_events.ingest(v.s, 9223372036854775806, 'id-2', '"max - 1"') AS outcome,
       ordered_events.release(v.s) AS released
  FROM (VALUES ('pk_max_0'), ('pk_max_1')) v(s);
SELECT * FROM pg_temp.pending('pk_max');
SELECT * FROM pg_temp.gaps('pk_max');
SELECT * FROM pg_temp.keys('pk_max');
SELECT stream, max_seen_seq FROM ordered_events.stream_stats
 WHERE stream IN ('pk_max_0', 'pk_max_1') ORDER BY stream;

--
-- The last event (testProcessingOfTheLastInput): a key completed by
-- last_event => true.  Final status: id-1 (2, 0, null, null, 3, 3, 0,
-- true).  Beyond Beam's case: a higher seq arriving after the last event is
-- rejected at once ('after_last_event'); a lower or equal one is a
-- duplicate; and higher seqs already pending when the last event is
-- released are moved to unprocessed as 'after_last_event'.
--
SELECT * FROM pg_temp.create('pk_last');
SELECT * FROM pg_temp.step('pk_last', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_last', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.step('pk_last', 2, 'id-1', '"LAST"', true);
SELECT * FROM pg_temp.output('pk_last');
SELECT * FROM pg_temp.keys('pk_last');
-- an event after the last one, and a far higher one: rejected at once
SELECT * FROM pg_temp.step('pk_last', 3, 'id-1', '"after"');
SELECT * FROM pg_temp.step('pk_last', 100, 'id-1', '"far after"', true);
-- the last event and a seq below it again: duplicates
SELECT * FROM pg_temp.step('pk_last', 2, 'id-1', '"LAST"', true);
SELECT * FROM pg_temp.step('pk_last', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.keys('pk_last');
SELECT * FROM pg_temp.unprocessed('pk_last');

-- id-2: seqs above the last event are pending when the last event arrives.
SELECT * FROM pg_temp.step('pk_last', 0, 'id-2', '"a"');
SELECT * FROM pg_temp.step('pk_last', 3, 'id-2', '"d"');
SELECT * FROM pg_temp.step('pk_last', 5, 'id-2', '"f"');
SELECT * FROM pg_temp.step('pk_last', 2, 'id-2', '"C"', true);
-- a higher seq arriving once the last event is known: rejected at once
SELECT * FROM pg_temp.step('pk_last', 4, 'id-2', '"e"');
-- 3 and 5 are still pending: the last event is not released yet
SELECT * FROM pg_temp.pending('pk_last');
SELECT * FROM pg_temp.keys('pk_last');
-- seq 1 fills the gap: 1 and 2 (the last event) are released, 3 and 5 are
-- moved to unprocessed
SELECT * FROM pg_temp.step('pk_last', 1, 'id-2', '"b"');
SELECT * FROM pg_temp.output('pk_last');
SELECT * FROM pg_temp.pending('pk_last');
SELECT * FROM pg_temp.gaps('pk_last');
SELECT * FROM pg_temp.keys('pk_last');
SELECT * FROM pg_temp.unprocessed('pk_last');

-- id-3: the last event is the key's first seq; id-4: a last event below a
-- pending last event completes the key at the lower one.
SELECT * FROM pg_temp.step('pk_last', 0, 'id-3', '"only"', true);
SELECT * FROM pg_temp.step('pk_last', 1, 'id-3', '"after"');
SELECT * FROM pg_temp.step('pk_last', 4, 'id-4', '"E"', true);
SELECT * FROM pg_temp.step('pk_last', 1, 'id-4', '"B"', true);
SELECT * FROM pg_temp.step('pk_last', 0, 'id-4', '"A"');
SELECT * FROM pg_temp.output('pk_last');
SELECT * FROM pg_temp.keys('pk_last');
SELECT * FROM pg_temp.unprocessed('pk_last');
SELECT count(*) AS pending FROM pg_temp.pending('pk_last');

--
-- A large buffered backlog (testLargeBufferedOutputInTimer), max_release_batch
-- 100: seqs 2..300 arrive first (Beam, from seq 1), then 1; the release
-- steps return 100, 100, 100, 0.  Statuses (of the _1 stream): before seq 1
-- (null, 299, 2, 300, 299, 0, 0, false); after each step (100, 200, 101,
-- 300, 300, 100), (200, 100, 201, 300, 300, 200), final (300, 0, null,
-- null, 300, 300, 0, false).
--
SELECT * FROM pg_temp.create('pk_large', 100);
SELECT a.stream, a.outcome, count(*)
  FROM generate_series(1, 299) g,
       LATERAL pg_temp.arrive('pk_large', g, 'id-1', '"."') a
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM pg_temp.release('pk_large');
SELECT * FROM pg_temp.keys('pk_large');
SELECT * FROM pg_temp.gaps('pk_large');
SELECT * FROM pg_temp.arrive('pk_large', 0, 'id-1', '"."');
SELECT * FROM pg_temp.release('pk_large');
SELECT * FROM pg_temp.keys('pk_large');
SELECT * FROM pg_temp.release('pk_large');
SELECT * FROM pg_temp.keys('pk_large');
SELECT * FROM pg_temp.release('pk_large');
SELECT * FROM pg_temp.keys('pk_large');
SELECT * FROM pg_temp.release('pk_large');
SELECT * FROM pg_temp.keys('pk_large');
-- released exactly once each, in seq order, with no hole; Beam's last
-- output is 300 dots
SELECT stream, count(*), count(DISTINCT seq) AS distinct_seqs, min(seq), max(seq),
       bool_and(seq = prev + 1) AS contiguous
  FROM (SELECT stream, seq, lag(seq) OVER (PARTITION BY stream ORDER BY seq) AS prev
          FROM ordered_events.released WHERE stream IN ('pk_large_0', 'pk_large_1')) r
 GROUP BY stream ORDER BY stream;
SELECT stream, key, seq, length(output) FROM pg_temp.output('pk_large')
 WHERE seq IN (100, 101, 300);
-- three release steps of 100 each
SELECT stream, dense_rank() OVER (PARTITION BY stream ORDER BY released_at) AS step,
       count(*), min(seq), max(seq)
  FROM ordered_events.released WHERE stream IN ('pk_large_0', 'pk_large_1')
 GROUP BY stream, released_at ORDER BY 1, 2;
SELECT * FROM pg_temp.gaps('pk_large');

--
-- A gap inside buffered output (testSequenceGapProcessingInBufferedOutput),
-- max_release_batch 3; Beam's seqs from 1: 2 3 7 8 9 10 1 4 5 6, a release
-- step after each.  Beam's statuses (of the _1 stream), after each arrival:
-- (null,1,2,2,1,0) (null,2,2,3,2,0) (null,3,2,7,3,0) (null,4,2,8,4,0)
-- (null,5,2,9,5,0) (null,6,2,10,6,0) | 1: (3,4,7,10,7,3) | 4: (4,4,7,10,8,4)
-- | 5: (5,4,7,10,9,5) | 6: (8,2,9,10,10,8) | a last step: (10,0,null,null,10,10).
--
SELECT * FROM pg_temp.create('pk_gap', 3);
-- a step and the status of the key right after it
CREATE FUNCTION pg_temp.gap_step(seq_offset bigint)
RETURNS TABLE (stream text, seq bigint, outcome ordered_events.outcome, released bigint,
               last_released_seq bigint, buffered_count bigint, earliest_buffered_seq bigint,
               latest_buffered_seq bigint, received_count bigint, released_count bigint)
LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT * FROM pg_temp.step('pk_gap', seq_offset, 'id-1', '"."') LOOP
        RETURN QUERY
        SELECT s.stream, s.seq, s.outcome, s.released, k.last_released_seq, k.buffered_count,
               k.earliest_buffered_seq, k.latest_buffered_seq, k.received_count,
               k.released_count
          FROM ordered_events.key_status k
         WHERE k.stream = s.stream;
    END LOOP;
END;
$$;
SELECT * FROM pg_temp.gap_step(1);
SELECT * FROM pg_temp.gap_step(2);
SELECT * FROM pg_temp.gap_step(6);
SELECT * FROM pg_temp.gap_step(7);
SELECT * FROM pg_temp.gap_step(8);
SELECT * FROM pg_temp.gap_step(9);
-- offset 0 arrives: a batch of 3 is released
SELECT * FROM pg_temp.gap_step(0);
SELECT * FROM pg_temp.gap_step(3);
SELECT * FROM pg_temp.gap_step(4);
-- offset 5 arrives: 5, 6 and 7 are released, 8 and 9 wait for the next step
SELECT * FROM pg_temp.gap_step(5);
SELECT * FROM pg_temp.release('pk_gap');
SELECT * FROM pg_temp.keys('pk_gap');
SELECT * FROM pg_temp.release('pk_gap');
-- the release steps, per stream: 1..3, 4, 5, 6..8, 9..10
SELECT stream, dense_rank() OVER (PARTITION BY stream ORDER BY released_at) AS step,
       min(seq), max(seq)
  FROM ordered_events.released WHERE stream IN ('pk_gap_0', 'pk_gap_1')
 GROUP BY stream, released_at ORDER BY 1, 2;

--
-- Below the initial sequence: before_initial_sequence at once, never
-- pending, never a gap, never a duplicate; the key still has a status.
--
SELECT * FROM pg_temp.create('pk_before');
SELECT * FROM pg_temp.step('pk_before', -1, 'id-1', '"too early"');
SELECT * FROM pg_temp.step('pk_before', -100, 'id-1', '"much too early"');
SELECT * FROM pg_temp.step('pk_before', -1, 'id-1', '"too early again"');
SELECT * FROM pg_temp.keys('pk_before');
SELECT count(*) AS pending FROM pg_temp.pending('pk_before');
SELECT * FROM pg_temp.gaps('pk_before');
SELECT * FROM pg_temp.step('pk_before', 0, 'id-1', '"a"');
SELECT * FROM pg_temp.step('pk_before', 1, 'id-1', '"b"');
SELECT * FROM pg_temp.output('pk_before');
SELECT * FROM pg_temp.keys('pk_before');
SELECT * FROM pg_temp.unprocessed('pk_before');
-- the bottom of the bigint range on a stream that starts there
SELECT ordered_events.create_stream('pk_before_min', 'per_key', -9223372036854775808);
SELECT ordered_events.ingest('pk_before_min', -9223372036854775808, 'k'),
       ordered_events.ingest('pk_before_min', -9223372036854775807, 'k'),
       ordered_events.release('pk_before_min');
SELECT stream, key, seq FROM ordered_events.released WHERE stream = 'pk_before_min';

--
-- The same seq on different keys: both accepted and released (seqs count
-- per key); a gap in one key never holds back another.
--
SELECT * FROM pg_temp.create('pk_same');
SELECT * FROM pg_temp.arrive('pk_same', 0, 'id-1', '"a1"');
SELECT * FROM pg_temp.arrive('pk_same', 0, 'id-2', '"a2"');
SELECT * FROM pg_temp.arrive('pk_same', 0, 'id-3', '"a3"');
SELECT * FROM pg_temp.arrive('pk_same', 1, 'id-2', '"b2"');
SELECT * FROM pg_temp.arrive('pk_same', 2, 'id-1', '"c1"');
SELECT * FROM pg_temp.release('pk_same');
SELECT * FROM pg_temp.output('pk_same');
SELECT * FROM pg_temp.keys('pk_same');
SELECT * FROM pg_temp.gaps('pk_same');
SELECT count(*) AS unprocessed FROM pg_temp.unprocessed('pk_same');

--
-- Clean up.
--
SELECT ordered_events.drop_stream(s)
  FROM unnest(ARRAY['perfect', 'ooo', 'unfinished', 'dup', 'max', 'last', 'large', 'gap',
                    'before', 'same']) c,
       LATERAL (VALUES ('pk_' || c || '_0'), ('pk_' || c || '_1')) v(s);
SELECT ordered_events.drop_stream('pk_before_min');
SELECT count(*) FROM ordered_events.streams WHERE stream LIKE 'pk\_%';
SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'pk\_%';
SELECT count(*) FROM ordered_events.key_status WHERE stream LIKE 'pk\_%';
