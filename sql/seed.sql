--
-- seed: the example of README.md, "The example", worked step by step, with
-- what every view shows after each step.  This is the worked example; the
-- rules it shows, and the outcomes of repeated and rejected events (the
-- README's retry), are asserted one by one in test/pgtap/05_semantics.sql.
--
-- Stream s (orders in the README), global sequencing, initial sequence 1.
-- Arrivals (1,key1) (2,key2) (3,key1) (4,key1) (5,key2) (7,key2) in a
-- scrambled order.  After release: range [1,6); key1 released 1,3,4; key2
-- released 2,5; 7 is pending because 6 is missing.  When 6 arrives the
-- range becomes [1,8) and 6 and 7 are released, in that order.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';

SELECT ordered_events.create_stream('s');
SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
       created_at IS NOT NULL AS has_created_at
  FROM ordered_events.streams WHERE stream = 's';

-- A fresh stream: empty range [1,1), nothing anywhere.
SELECT stream, range_start, range_end, max_event_ts, updated_at IS NOT NULL AS has_updated_at
  FROM ordered_events.ranges WHERE stream = 's';
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 's';
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 's';
SELECT * FROM ordered_events.gaps('s');

-- Arrivals, out of order.  Every one is accepted.
SELECT ordered_events.ingest('s', 5, 'key2', '{"n": 5}', '2024-01-01 00:00:05+00');
SELECT ordered_events.ingest('s', 1, 'key1', '{"n": 1}', '2024-01-01 00:00:01+00');
SELECT ordered_events.ingest('s', 7, 'key2', '{"n": 7}', '2024-01-01 00:00:07+00');
SELECT ordered_events.ingest('s', 3, 'key1', '{"n": 3}', '2024-01-01 00:00:03+00');
SELECT ordered_events.ingest('s', 2, 'key2', '{"n": 2}', '2024-01-01 00:00:02+00');
SELECT ordered_events.ingest('s', 4, 'key1', '{"n": 4}', '2024-01-01 00:00:04+00');

-- Nothing is released before a release step: all six are pending.
SELECT stream, seq, key, payload, event_ts, received_at IS NOT NULL AS has_received_at
  FROM ordered_events.pending WHERE stream = 's';
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 's';
-- The hole at 6 is visible before any release step, but not yet "seen".
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen
  FROM ordered_events.gaps('s');

-- The release step releases 1..5 and stops at the missing 6.
SELECT ordered_events.release('s');

SELECT stream, range_start, range_end, max_event_ts FROM ordered_events.ranges
 WHERE stream = 's';

-- The ordered view: 1..5 in seq order.
SELECT stream, seq, key, payload, event_ts, released_at IS NOT NULL AS has_released_at
  FROM ordered_events.released WHERE stream = 's';

-- Released per key: key1 1,3,4; key2 2,5.
SELECT key, array_agg(seq ORDER BY seq) AS released_seqs
  FROM ordered_events.released WHERE stream = 's'
 GROUP BY key ORDER BY key;

-- 7 is pending.
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream = 's';

-- The gap 6..6 (inclusive), observed by the release step.
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen
  FROM ordered_events.gaps('s');

SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count,
       last_event_received
  FROM ordered_events.key_status WHERE stream = 's' ORDER BY key;

SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at IS NOT NULL AS has_oldest_pending, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream = 's';

-- Another release step finds nothing new.
SELECT ordered_events.release('s');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 's';

-- 6 arrives: the range becomes [1,8); 6 and 7 are released, in that order.
SELECT ordered_events.ingest('s', 6, 'key1', '{"n": 6}', '2024-01-01 00:00:06+00');
-- Until the next release step, 6 and 7 are pending and there is no gap.
SELECT seq, key FROM ordered_events.pending WHERE stream = 's';
SELECT * FROM ordered_events.gaps('s');
SELECT ordered_events.release('s');

SELECT stream, range_start, range_end, max_event_ts FROM ordered_events.ranges
 WHERE stream = 's';
SELECT stream, seq, key, payload, event_ts, received_at IS NOT NULL AS has_received_at,
       released_at IS NOT NULL AS has_released_at
  FROM ordered_events.released WHERE stream = 's';
-- 1..5 were released by the first step, 6 and 7 by the second: released_at
-- tells the steps apart and never goes down along the seq order.
SELECT seq, dense_rank() OVER (ORDER BY released_at) AS release_step
  FROM ordered_events.released WHERE stream = 's' ORDER BY seq;
SELECT key, array_agg(seq ORDER BY seq) AS released_seqs
  FROM ordered_events.released WHERE stream = 's'
 GROUP BY key ORDER BY key;
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 's';
SELECT * FROM ordered_events.gaps('s');

SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count,
       last_event_received
  FROM ordered_events.key_status WHERE stream = 's' ORDER BY key;

SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at, first_gap_start, first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream = 's';

SELECT count(*) AS unprocessed FROM ordered_events.unprocessed WHERE stream = 's';
SELECT count(*) AS skipped_gaps FROM ordered_events.skipped_gaps WHERE stream = 's';

SELECT ordered_events.drop_stream('s');
SELECT count(*) AS streams FROM ordered_events.streams WHERE stream = 's';
