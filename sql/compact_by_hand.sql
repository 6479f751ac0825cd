--
-- compact_by_hand: one compact() call does every batch of counting and
-- retention that is due (docs/operating.md, "Without the worker"), in
-- batches of 100,000 events (src/compaction.c); 0.2 did one batch of at
-- most 1,000 per call, so the 5,000 events below took five calls.  The
-- loop of batches is also run with smaller ones, by the function behind
-- compact(), compact_due(stream_id, batch).
--
-- No background worker serves this database.  A retention of '0 s' lets
-- compact() delete any release step of an earlier statement; the dead
-- letters' retention is made to have passed by moving their stored clock
-- back.  No timestamp is printed.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

-- What compaction has done to a stream: its released events still kept,
-- its global lane's counting (counted_end reaches range_end), what it
-- counted per key and deleted.
CREATE FUNCTION pg_temp.compaction(s text)
RETURNS TABLE (kept bigint, range_end bigint, counted_end bigint, counted bigint,
               deleted bigint, dead_letters_deleted bigint, runs bigint)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM ordered_events.released r WHERE r.stream = s),
           (SELECT p.range_end FROM ordered_events.progress p
             WHERE p.stream_id = ordered_events.stream_id(s) AND p.lane = ''),
           (SELECT p.counted_end FROM ordered_events.progress p
             WHERE p.stream_id = ordered_events.stream_id(s) AND p.lane = ''),
           (SELECT sum(k.released_count) FROM ordered_events.key_counters k
             WHERE k.stream_id = ordered_events.stream_id(s)),
           (SELECT t.events FROM ordered_events.deleted_totals t
             WHERE t.stream_id = ordered_events.stream_id(s)),
           (SELECT t.dead_letters FROM ordered_events.deleted_totals t
             WHERE t.stream_id = ordered_events.stream_id(s)),
           (SELECT count(*) FROM ordered_events.lane_release_log l
             WHERE l.stream_id = ordered_events.stream_id(s))
$$;

-- The per-key counts of key_status, for comparing with the events.
CREATE FUNCTION pg_temp.keys(s text)
RETURNS TABLE (key text, last_released_seq bigint, received_count bigint,
               released_count bigint, duplicate_count bigint)
LANGUAGE sql AS $$
    SELECT k.key, k.last_released_seq, k.received_count, k.released_count, k.duplicate_count
      FROM ordered_events.key_status k WHERE k.stream = s ORDER BY k.key
$$;

--
-- A global stream: 5,000 events over 7 keys, released in one step.  One
-- compact() counts them all (it deletes nothing: no retention).
--
SELECT ordered_events.create_stream('cbh_g', max_release_batch => 5000);
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_g', g, 'k' || g % 7 FROM generate_series(1, 5000) g;
SELECT ordered_events.release('cbh_g');
SELECT * FROM pg_temp.compaction('cbh_g');
SELECT ordered_events.compact('cbh_g') AS deleted;
-- all counted: counted_end is range_end, 5,000 in key_counters
SELECT * FROM pg_temp.compaction('cbh_g');
SELECT count(*) AS to_compact FROM ordered_events.streams_to_compact() WHERE stream = 'cbh_g';
-- the counters are the events' own counts
SELECT k.key, k.released_count = e.n AND k.last_released_seq = e.last AS counted_right
  FROM ordered_events.key_counters k
  JOIN (SELECT r.key, count(*) AS n, max(r.seq) AS last FROM ordered_events.released r
         WHERE r.stream = 'cbh_g' GROUP BY r.key) e USING (key)
 WHERE k.stream_id = ordered_events.stream_id('cbh_g')
 ORDER BY k.key;
SELECT * FROM pg_temp.keys('cbh_g');

--
-- A retention of '0 s': the next compact() deletes all 5,000, in one call,
-- and returns exactly that; the newest run stays, emptied.  key_status and
-- stream_stats are the same as before.
--
CREATE TEMP TABLE before_keys AS SELECT * FROM pg_temp.keys('cbh_g');
SELECT ordered_events.alter_stream('cbh_g', retention => '0 s');
SELECT ordered_events.compact('cbh_g') AS deleted;
SELECT * FROM pg_temp.compaction('cbh_g');
SELECT count(*) AS to_compact FROM ordered_events.streams_to_compact() WHERE stream = 'cbh_g';
(SELECT * FROM pg_temp.keys('cbh_g') EXCEPT SELECT * FROM before_keys)
UNION ALL
(SELECT * FROM before_keys EXCEPT SELECT * FROM pg_temp.keys('cbh_g'));
SELECT range_end, released_count, pending_count FROM ordered_events.stream_stats
 WHERE stream = 'cbh_g';
SELECT ordered_events.compact('cbh_g') AS deleted;

--
-- 2,000 more, released in 200 steps of 10: in batches of 300 events, one
-- call counts and deletes them all (a batch deletes the oldest runs up to
-- 300 events, the last one in part).
--
SELECT ordered_events.alter_stream('cbh_g', max_release_batch => 10);
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_g', g, 'k' || g % 7 FROM generate_series(5001, 7000) g;
DO $$ BEGIN WHILE ordered_events.release('cbh_g') > 0 LOOP END LOOP; END $$;
SELECT * FROM pg_temp.compaction('cbh_g');
SELECT ordered_events.compact_due(ordered_events.stream_id('cbh_g'), 300) AS deleted;
SELECT * FROM pg_temp.compaction('cbh_g');
SELECT count(*) AS to_compact FROM ordered_events.streams_to_compact() WHERE stream = 'cbh_g';
SELECT * FROM pg_temp.keys('cbh_g');

--
-- A per-key stream, retention '0 s': 3 keys of 1,000 seqs, in two release
-- steps (6 runs of 500).  In batches of 700 events (whole runs, up to the
-- one that reaches 700), one call deletes all 3,000; so does compact().
--
SELECT ordered_events.create_stream('cbh_k', sequencing => 'per_key', retention => '0 s',
                                    max_release_batch => 5000);
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_k', s, 'k' || k FROM generate_series(1, 500) s, generate_series(1, 3) k;
SELECT ordered_events.release('cbh_k');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_k', s, 'k' || k FROM generate_series(501, 1000) s, generate_series(1, 3) k;
SELECT ordered_events.release('cbh_k');
SELECT kept, deleted, runs FROM pg_temp.compaction('cbh_k');
SELECT ordered_events.compact_due(ordered_events.stream_id('cbh_k'), 700) AS deleted;
SELECT kept, deleted, runs FROM pg_temp.compaction('cbh_k');
SELECT count(*) AS to_compact FROM ordered_events.streams_to_compact() WHERE stream = 'cbh_k';
SELECT * FROM pg_temp.keys('cbh_k');

--
-- Dead letters, dead_letter_retention '1 hour': 2,500 duplicates received
-- two hours back; one compact() deletes them all (it returns 0: it counts
-- released events deleted), and key_status still counts them.  Then
-- 2,500 more, in batches of 1,000.
--
SELECT ordered_events.create_stream('cbh_d', dead_letter_retention => '1 hour');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_d', g, 'k' FROM generate_series(1, 10) g;
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_d', g % 10 + 1, 'k' FROM generate_series(1, 2500) g;
SELECT ordered_events.release('cbh_d');
UPDATE ordered_events.unprocessed SET received_at = received_at - interval '2 hours'
 WHERE stream = 'cbh_d';
SELECT count(*) AS dead_letters FROM ordered_events.unprocessed WHERE stream = 'cbh_d';
SELECT ordered_events.compact('cbh_d') AS deleted;
SELECT count(*) AS dead_letters FROM ordered_events.unprocessed WHERE stream = 'cbh_d';
SELECT counted, dead_letters_deleted FROM pg_temp.compaction('cbh_d');
SELECT * FROM pg_temp.keys('cbh_d');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_d', g % 10 + 1, 'k' FROM generate_series(1, 2500) g;
UPDATE ordered_events.unprocessed SET received_at = received_at - interval '2 hours'
 WHERE stream = 'cbh_d';
SELECT ordered_events.compact_due(ordered_events.stream_id('cbh_d'), 1000) AS deleted;
SELECT count(*) AS dead_letters FROM ordered_events.unprocessed WHERE stream = 'cbh_d';
SELECT counted, dead_letters_deleted FROM pg_temp.compaction('cbh_d');
SELECT * FROM pg_temp.keys('cbh_d');

--
-- compact() for every stream returns the sum of what it deleted.
--
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_g', g, 'k' || g % 7 FROM generate_series(7001, 8500) g;
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_k', s, 'k' || k FROM generate_series(1001, 1400) s, generate_series(1, 3) k;
SELECT ordered_events.alter_stream('cbh_g', max_release_batch => 5000);
SELECT ordered_events.release('cbh_g'), ordered_events.release('cbh_k');
SELECT ordered_events.compact() AS deleted;
SELECT s, c.kept, c.deleted FROM unnest('{cbh_g,cbh_k}'::text[]) s, pg_temp.compaction(s) c;

-- not in REPEATABLE READ, and then nothing changed
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'cbh_g', g, 'k' FROM generate_series(8501, 8600) g;
SELECT ordered_events.release('cbh_g');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT ordered_events.compact('cbh_g');
ROLLBACK;
SELECT kept, counted, deleted FROM pg_temp.compaction('cbh_g');
SELECT ordered_events.compact('cbh_g') AS deleted;
-- a batch is at least one event
SELECT ordered_events.compact_due(ordered_events.stream_id('cbh_g'), 0);

SELECT ordered_events.drop_stream(s) FROM unnest('{cbh_g,cbh_k,cbh_d}'::text[]) s;
