--
-- streams: create_stream options and the streams view, alter_stream (NULL
-- keeps the value), drop_stream (removes every trace of the stream), a
-- re-created stream starts fresh, release(NULL) releases every stream.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT count(*) AS streams_before FROM ordered_events.streams;

SELECT ordered_events.create_stream('st_a');
SELECT ordered_events.create_stream('st_b', sequencing => 'global', initial_sequence => 100,
                                    gap_policy => 'wait', gap_timeout => NULL,
                                    max_release_batch => 2);
SELECT ordered_events.create_stream(stream => 'st_c', initial_sequence => -5,
                                    max_release_batch => 1000000);
SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
       created_at IS NOT NULL AS has_created_at
  FROM ordered_events.streams WHERE stream LIKE 'st\_%' ORDER BY stream;
-- every global stream has a range, empty at the initial sequence
SELECT stream, range_start, range_end, max_event_ts FROM ordered_events.ranges
 WHERE stream LIKE 'st\_%' ORDER BY stream;
SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at, first_gap_start, first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'st\_%' ORDER BY stream;

--
-- alter_stream: NULL keeps the value.
--
SELECT ordered_events.alter_stream('st_b');
SELECT ordered_events.alter_stream('st_b', NULL, NULL, NULL);
SELECT stream, gap_policy, gap_timeout, max_release_batch FROM ordered_events.streams
 WHERE stream = 'st_b';
SELECT ordered_events.alter_stream('st_b', gap_policy => 'wait');
SELECT stream, gap_policy, gap_timeout, max_release_batch FROM ordered_events.streams
 WHERE stream = 'st_b';
SELECT ordered_events.alter_stream('st_a', max_release_batch => 3);
SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch
  FROM ordered_events.streams WHERE stream LIKE 'st\_%' ORDER BY stream;

-- The batch size applies to the next release step.
SELECT count(*) FILTER (WHERE ordered_events.ingest('st_b', g, 'k') = 'accepted') AS accepted
  FROM generate_series(100, 109) g;
SELECT ordered_events.release('st_b');
SELECT ordered_events.alter_stream('st_b', max_release_batch => 5);
SELECT ordered_events.release('st_b');
-- also inside the transaction that changed it
BEGIN;
SELECT ordered_events.alter_stream('st_b', max_release_batch => 1);
SELECT ordered_events.release('st_b');
ROLLBACK;
SELECT max_release_batch FROM ordered_events.streams WHERE stream = 'st_b';
SELECT ordered_events.release('st_b');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'st_b';

--
-- release(NULL) releases every stream, each within its own batch, and
-- returns the sum.
--
SELECT count(*) FILTER (WHERE ordered_events.ingest('st_a', g, 'k' || g % 2) = 'accepted')
  FROM generate_series(1, 10) g;
SELECT count(*) FILTER (WHERE ordered_events.ingest('st_c', g, 'k') = 'accepted')
  FROM generate_series(-5, 4) g;
SELECT ordered_events.ingest('st_b', 110, 'k'), ordered_events.ingest('st_b', 111, 'k'),
       ordered_events.ingest('st_b', 113, 'k');
SELECT stream, pending_count FROM ordered_events.stream_stats
 WHERE stream LIKE 'st\_%' ORDER BY stream;
-- st_a: 3 (batch 3), st_b: 2 (batch 2, then the gap at 112), st_c: 10
SELECT ordered_events.release(NULL);
SELECT stream, range_start, range_end FROM ordered_events.ranges
 WHERE stream LIKE 'st\_%' ORDER BY stream;
-- st_a: 3, st_b: 0 (gap), st_c: 0
SELECT ordered_events.release();
-- st_a: 3 (7..9)
SELECT ordered_events.release(NULL);
-- st_a: 1 (10)
SELECT ordered_events.release(NULL);
-- only st_b's gap at 112 is left: 0
SELECT ordered_events.release(NULL);
SELECT stream, r.range_start, r.range_end, s.pending_count, s.released_count
  FROM ordered_events.ranges r JOIN ordered_events.stream_stats s USING (stream)
 WHERE stream LIKE 'st\_%' ORDER BY stream;

--
-- drop_stream removes the stream, its events (pending and released), its
-- dead letters and its range; other streams keep theirs.
--
SELECT ordered_events.ingest('st_b', 100, 'k'), ordered_events.ingest('st_b', 50, 'k'),
       ordered_events.ingest('st_a', 1, 'k');
SELECT stream, count(*) FROM ordered_events.unprocessed
 WHERE stream LIKE 'st\_%' GROUP BY stream ORDER BY stream;
-- a rolled-back drop changes nothing
BEGIN;
SELECT ordered_events.drop_stream('st_b');
SELECT count(*) FROM ordered_events.streams WHERE stream = 'st_b';
ROLLBACK;
SELECT stream, range_end, pending_count, released_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream = 'st_b';
SELECT ordered_events.drop_stream('st_b');
SELECT count(*) AS streams FROM ordered_events.streams WHERE stream = 'st_b';
SELECT count(*) AS ranges FROM ordered_events.ranges WHERE stream = 'st_b';
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 'st_b';
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 'st_b';
SELECT count(*) AS unprocessed FROM ordered_events.unprocessed WHERE stream = 'st_b';
SELECT count(*) AS key_status FROM ordered_events.key_status WHERE stream = 'st_b';
SELECT count(*) AS stream_stats FROM ordered_events.stream_stats WHERE stream = 'st_b';
-- the stream is gone for every function
SELECT ordered_events.ingest('st_b', 114, 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.release('st_b');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.gaps('st_b');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_stream('st_b');
\echo SQLSTATE :SQLSTATE
-- the other streams are untouched
SELECT stream, range_end, pending_count, released_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'st\_%' ORDER BY stream;

--
-- A re-created stream starts fresh: new initial sequence, empty range, old
-- seqs are new events (not duplicates), no dead letters.
--
SELECT ordered_events.create_stream('st_b', initial_sequence => 105);
SELECT stream, initial_sequence, max_release_batch FROM ordered_events.streams
 WHERE stream = 'st_b';
SELECT stream, range_start, range_end, max_event_ts FROM ordered_events.ranges
 WHERE stream = 'st_b';
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 'st_b';
SELECT ordered_events.ingest('st_b', 100, 'k'), ordered_events.ingest('st_b', 105, 'k'),
       ordered_events.ingest('st_b', 106, 'k');
SELECT ordered_events.release('st_b');
SELECT stream, seq, key FROM ordered_events.released WHERE stream = 'st_b';
SELECT stream, seq, reason, detail FROM ordered_events.unprocessed WHERE stream = 'st_b';
SELECT stream, key, last_released_seq, received_count, released_count, duplicate_count
  FROM ordered_events.key_status WHERE stream = 'st_b';

-- Dropped and re-created in one transaction.
BEGIN;
SELECT ordered_events.drop_stream('st_b');
SELECT ordered_events.create_stream('st_b', initial_sequence => 7, max_release_batch => 1);
SELECT ordered_events.ingest('st_b', 7, 'k'), ordered_events.ingest('st_b', 8, 'k'),
       ordered_events.ingest('st_b', 105, 'k');
SELECT ordered_events.release('st_b');
COMMIT;
SELECT stream, initial_sequence, max_release_batch FROM ordered_events.streams
 WHERE stream = 'st_b';
SELECT stream, seq FROM ordered_events.released WHERE stream = 'st_b';
SELECT stream, seq FROM ordered_events.pending WHERE stream = 'st_b';

-- A rolled-back create_stream leaves no stream behind.
BEGIN;
SELECT ordered_events.create_stream('st_r');
SELECT ordered_events.ingest('st_r', 1, 'k');
SELECT ordered_events.release('st_r');
ROLLBACK;
SELECT count(*) FROM ordered_events.streams WHERE stream = 'st_r';
SELECT ordered_events.ingest('st_r', 1, 'k');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.release('st_r');
\echo SQLSTATE :SQLSTATE
-- and the name can be used afterwards
SELECT ordered_events.create_stream('st_r', initial_sequence => 3);
SELECT ordered_events.ingest('st_r', 1, 'k'), ordered_events.ingest('st_r', 3, 'k');
SELECT ordered_events.release('st_r');
SELECT stream, range_start, range_end FROM ordered_events.ranges WHERE stream = 'st_r';

SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'st\_%' ORDER BY stream;
SELECT count(*) AS streams_after FROM ordered_events.streams;
SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'st\_%';
-- with no stream left, release(NULL) has nothing to do
SELECT ordered_events.release(NULL);
