--
-- retention_limits: a retention that compaction cannot compute is refused
-- (issue 20, finding 12).  '10000 years' was accepted; then every
-- compaction of its stream failed with 22008 (its cut-off, now minus the
-- retention, is before the first timestamp), so its per-key counting never
-- ran either.  create_stream() and alter_stream() now refuse more than
-- 1000 years (22023, with a hint), and compaction treats such a value
-- stored before (by 0.2) as "nothing is old enough".
--
-- No background worker serves this database: release() and compact() are
-- called by hand.  No timestamp is printed.
--
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Refused.
SELECT ordered_events.create_stream('rl', retention => '10000 years');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('rl', dead_letter_retention => '1000 years 1 day');
-- at most 1000 years in all, but its cut-off is still out of range
SELECT ordered_events.create_stream('rl', retention => '7000 years -2500000 days');
SELECT ordered_events.create_stream('rl', retention => '-1 s');
SELECT count(*) AS streams FROM ordered_events.streams WHERE stream = 'rl';

-- The bounds are accepted.
SELECT ordered_events.create_stream('rl', retention => '1000 years',
                                    dead_letter_retention => '0 s');
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'rl';

-- alter_stream() refuses the same, changing nothing.
SELECT ordered_events.alter_stream('rl', retention => '10000 years');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('rl', dead_letter_retention => '2000 years');
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'rl';

-- A value stored before these checks (as by 0.2).
UPDATE ordered_events.stream_def
   SET retention = '10000 years', dead_letter_retention = '292000 years'
 WHERE stream = 'rl';
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'rl';
SELECT count(*) AS accepted
  FROM generate_series(1, 6) g,
       LATERAL ordered_events.ingest('rl', g, 'k' || (g % 2)) o
 WHERE o = 'accepted';
SELECT ordered_events.ingest('rl', 3, 'k1') AS retried;   -- a dead letter
SELECT ordered_events.release('rl') AS released;

-- Compaction works: it counts per key, and deletes nothing.
SELECT stream FROM ordered_events.streams_to_compact() WHERE stream = 'rl';
SELECT ordered_events.compact('rl') AS deleted;
SELECT stream FROM ordered_events.streams_to_compact() WHERE stream = 'rl';
SELECT k.key, k.released_count, k.last_released_seq
  FROM ordered_events.key_counters k
  JOIN ordered_events.stream_def d USING (stream_id)
 WHERE d.stream = 'rl' ORDER BY k.key;
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 'rl';
SELECT count(*) AS dead_letters FROM ordered_events.unprocessed WHERE stream = 'rl';
SELECT key, released_count, received_count, duplicate_count
  FROM ordered_events.key_status WHERE stream = 'rl' ORDER BY key;

-- Setting a valid retention again works, and compaction deletes by it.
SELECT ordered_events.alter_stream('rl', retention => '0 s', dead_letter_retention => '0 s');
SELECT ordered_events.compact('rl') AS deleted;
SELECT count(*) AS released FROM ordered_events.released WHERE stream = 'rl';
SELECT count(*) AS dead_letters FROM ordered_events.unprocessed WHERE stream = 'rl';
SELECT key, released_count, received_count, duplicate_count
  FROM ordered_events.key_status WHERE stream = 'rl' ORDER BY key;

SELECT ordered_events.drop_stream('rl');
