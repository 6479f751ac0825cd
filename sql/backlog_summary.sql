--
-- backlog_summary: stream_stats, gaps() and key_status from the summary of
-- each lane's backlog (src/backlog.c), the blocks of 1024 seqs beyond a gap
-- that had all arrived when a release step looked, and of a global lane's
-- keys in them (src/backlog_keys.c).  Each check compares them with what
-- the events say, computed here from ordered_events.event_store, through
-- arrivals in random order with holes, releases in small batches, filled
-- holes, skip_gap(), keys dense, rare and in bursts, a per-key stream and a
-- completed key; then counts the events a stream_stats or key_status read
-- fetches (pg_stat_xact_user_tables: recorded, not timed) with 100,000
-- pending behind one gap, and those a release step fetches as it moves
-- through the summary.
--
-- release() is called by hand (no background worker serves this database).
--
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT setseed(0.23);

-- What the events say: the pending events of each lane (seq >= its
-- range_end), their count, oldest and highest, and the holes between them
-- that no skipped run covers.
CREATE FUNCTION pg_temp.truth_pending(s text)
RETURNS TABLE (pending bigint, oldest timestamptz, max_seq bigint)
LANGUAGE sql AS $$
    SELECT count(*), min(e.received_at), max(e.seq)
      FROM ordered_events.event_store e
      JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id AND d.stream = s
      LEFT JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
     WHERE e.seq >= coalesce(p.range_end, d.initial_sequence)
$$;
CREATE FUNCTION pg_temp.truth_gaps(s text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint)
LANGUAGE sql AS $$
    WITH lanes AS (
        SELECT e.lane, coalesce(p.range_end, d.initial_sequence) AS range_end,
               max(e.seq) AS top, d.stream_id, d.sequencing
          FROM ordered_events.event_store e
          JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id AND d.stream = s
          LEFT JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
         WHERE e.seq >= coalesce(p.range_end, d.initial_sequence)
         GROUP BY e.lane, p.range_end, d.initial_sequence, d.stream_id, d.sequencing),
    missing AS (
        SELECT l.lane, l.sequencing, m.seq
          FROM lanes l CROSS JOIN LATERAL generate_series(l.range_end, l.top) m(seq)
         WHERE NOT EXISTS (SELECT FROM ordered_events.event_store e
                            WHERE e.stream_id = l.stream_id AND e.lane = l.lane AND e.seq = m.seq)
           AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                            WHERE g.stream_id = l.stream_id AND g.lane = l.lane
                              AND m.seq BETWEEN g.gap_start AND g.gap_end))
    SELECT CASE WHEN sequencing = 'per_key' THEN lane END, min(seq), max(seq)
      FROM (SELECT lane, sequencing, seq, seq - row_number() OVER (PARTITION BY lane ORDER BY seq) AS run
              FROM missing) r
     GROUP BY lane, sequencing, run
$$;
-- key_status agrees with the events, and the keys' rows with the stored
-- blocks: every difference, none if right.
CREATE FUNCTION pg_temp.check_keys(s text)
RETURNS TABLE (what text, summary text, events text)
LANGUAGE sql AS $$
    (SELECT 'key_status', array_agg(row(k.key, k.buffered_count, k.earliest_buffered_seq,
                                        k.latest_buffered_seq)::text ORDER BY k.key)::text, NULL
       FROM ordered_events.key_status k WHERE k.stream = s AND k.buffered_count > 0
     EXCEPT ALL
     SELECT 'key_status', array_agg(row(t.key, t.n, t.lo, t.hi)::text ORDER BY t.key)::text, NULL
       FROM (SELECT e.key, count(*) AS n, min(e.seq) AS lo, max(e.seq) AS hi
               FROM ordered_events.event_store e
               JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id AND d.stream = s
               LEFT JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
              WHERE e.seq >= coalesce(p.range_end, d.initial_sequence)
              GROUP BY e.key) t)
    UNION ALL
    -- a key that waits for nothing has no earliest or latest pending seq
    SELECT 'drained key', k.key, row(k.earliest_buffered_seq, k.latest_buffered_seq)::text
      FROM ordered_events.key_status k
     WHERE k.stream = s AND k.buffered_count = 0
       AND (k.earliest_buffered_seq IS NOT NULL OR k.latest_buffered_seq IS NOT NULL)
    UNION ALL
    -- the keys' rows, against the pending events of each key and block
    -- (the seqs here are positive): each row the count, first and last seq
    -- of its key's events in its run of blocks (a run from below the range:
    -- from the first block wholly beyond it) ...
    (WITH kb AS (
         SELECT e.key, e.seq / 1024 AS block, count(*) AS n, min(e.seq) AS lo, max(e.seq) AS hi
           FROM ordered_events.event_store e
           JOIN ordered_events.stream_def d
             ON d.stream_id = e.stream_id AND d.stream = s AND d.sequencing = 'global'
           JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
          WHERE e.seq >= p.range_end
          GROUP BY e.key, e.seq / 1024),
     -- a row that reaches below the first block wholly beyond the range
     -- counts from there, as backlog_keys_passed says
     r AS (
         SELECT r.kept_block, u.*
           FROM ordered_events.backlog_keys_passed r
           JOIN ordered_events.stream_def d ON d.stream_id = r.stream_id AND d.stream = s
          CROSS JOIN LATERAL ROWS FROM (unnest(r.keys), unnest(r.passed), unnest(r.first_seqs))
                AS u(key, passed, first_seq)),
     k AS (
         SELECT k.key, greatest(k.first_block, r.kept_block) AS first_block, k.last_block,
                k.pending_count - coalesce(r.passed, 0) AS pending_count,
                coalesce(r.first_seq, k.first_seq) AS first_seq, k.last_seq,
                k.first_block AS stored_first_block
           FROM ordered_events.backlog_keys k
           JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id AND d.stream = s
           LEFT JOIN r ON r.key = k.key AND r.kept_block > k.first_block),
     b AS (
         SELECT b.block FROM ordered_events.backlog_blocks b
           JOIN ordered_events.stream_def d ON d.stream_id = b.stream_id AND d.stream = s),
     kept AS (
         SELECT (p.range_end + 1023) / 1024 AS block FROM ordered_events.progress p
           JOIN ordered_events.stream_def d
             ON d.stream_id = p.stream_id AND d.stream = s AND p.lane = '')
     (SELECT 'keys', row(k.key, k.first_block, k.last_block, k.pending_count, k.first_seq,
                         k.last_seq)::text, NULL
        FROM k
      EXCEPT
      SELECT 'keys', row(k.key, k.first_block, k.last_block, sum(kb.n), min(kb.lo),
                         max(kb.hi))::text, NULL
        FROM k JOIN kb ON kb.key = k.key AND kb.block BETWEEN k.first_block AND k.last_block
       GROUP BY k.key, k.first_block, k.last_block)
     UNION ALL
     -- ... each block of which is stored and holds an event of the key ...
     SELECT 'keys run', row(k.key, k.first_block, k.last_block)::text, r.block::text
       FROM k CROSS JOIN LATERAL generate_series(k.first_block, k.last_block) r(block)
      WHERE r.block NOT IN (SELECT b.block FROM b)
         OR NOT EXISTS (SELECT FROM kb WHERE kb.key = k.key AND kb.block = r.block)
     UNION ALL
     -- ... each row from below the first block wholly beyond the range
     -- reaches into it and is in backlog_keys_passed, and nothing else is ...
     SELECT 'keys passed', row(k.key, k.stored_first_block, k.last_block)::text, NULL
       FROM k CROSS JOIN kept
      WHERE k.stored_first_block < kept.block
        AND (k.first_block = k.stored_first_block OR k.last_block < kept.block)
     UNION ALL
     SELECT 'keys passed', r.key, r.kept_block::text
       FROM r CROSS JOIN kept
      WHERE r.kept_block <> kept.block
         OR (SELECT count(*) FROM k WHERE k.key = r.key AND k.stored_first_block < k.first_block) <> 1
     UNION ALL
     -- ... its bound is at most the last block of each of those rows ...
     SELECT 'keys passed bound', r.min_last_block::text, min(k.last_block)::text
       FROM ordered_events.backlog_keys_passed r
       JOIN ordered_events.stream_def d ON d.stream_id = r.stream_id AND d.stream = s
       JOIN k ON k.stored_first_block < k.first_block
      GROUP BY r.min_last_block HAVING r.min_last_block > min(k.last_block)
     UNION ALL
     -- ... and every event of a stored block is in one row of its key
     SELECT 'keys cover', row(kb.key, kb.block)::text, count(k.key)::text
       FROM kb
       LEFT JOIN k ON k.key = kb.key AND kb.block BETWEEN k.first_block AND k.last_block
      WHERE kb.block IN (SELECT b.block FROM b)
      GROUP BY kb.key, kb.block HAVING count(k.key) <> 1)
$$;
-- stream_stats, gaps() and key_status agree with the events: every difference, none if right.
CREATE FUNCTION pg_temp.check(s text)
RETURNS TABLE (what text, summary text, events text)
LANGUAGE sql AS $$
    SELECT 'pending', row(st.pending_count, st.oldest_pending_at, st.max_seen_seq)::text,
           row(t.pending, t.oldest, greatest(t.max_seq, st_released.last))::text
      FROM ordered_events.stream_stats st
     CROSS JOIN pg_temp.truth_pending(s) t
     CROSS JOIN (SELECT max(p.last_released_seq) AS last FROM ordered_events.progress p
                  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = s) st_released
     WHERE st.stream = s
       AND row(st.pending_count, st.oldest_pending_at, st.max_seen_seq)
           IS DISTINCT FROM row(t.pending, t.oldest, greatest(t.max_seq, st_released.last))
    UNION ALL
    (SELECT 'gaps', array_agg(row(g.key, g.gap_start, g.gap_end)::text ORDER BY g.key, g.gap_start)::text, NULL
       FROM ordered_events.gaps(s) g
     EXCEPT ALL
     SELECT 'gaps', array_agg(row(t.key, t.gap_start, t.gap_end)::text ORDER BY t.key, t.gap_start)::text, NULL
       FROM pg_temp.truth_gaps(s) t)
    UNION ALL
    SELECT * FROM pg_temp.check_keys(s)
    UNION ALL
    -- the islands are the runs of the stored blocks, and those lie beyond the range
    (SELECT 'islands', x.lane || ' ' || x.first_block || '-' || x.last_block, NULL
       FROM (SELECT i.lane, i.first_block, i.last_block
               FROM ordered_events.backlog_islands i
               JOIN ordered_events.stream_def d ON d.stream_id = i.stream_id AND d.stream = s
             EXCEPT
             SELECT b.lane, min(b.block), max(b.block)
               FROM (SELECT k.lane, k.block, k.block - row_number() OVER (PARTITION BY k.lane ORDER BY k.block) AS run
                       FROM ordered_events.backlog_blocks k
                       JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id AND d.stream = s) b
              GROUP BY b.lane, b.run) x)
    UNION ALL
    SELECT 'block below range', k.lane || ' ' || k.block, NULL
      FROM ordered_events.backlog_blocks k
      JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id AND d.stream = s
      JOIN ordered_events.progress p ON p.stream_id = k.stream_id AND p.lane = k.lane
     WHERE k.block * 1024 < p.range_end
    UNION ALL
    SELECT 'first gap', st.first_gap_start::text,
           (SELECT min(t.gap_start) FROM pg_temp.truth_gaps(s) t)::text
      FROM ordered_events.stream_stats st
     WHERE st.stream = s AND st.first_gap_since IS NULL
       AND st.first_gap_start IS DISTINCT FROM (SELECT min(t.gap_start) FROM pg_temp.truth_gaps(s) t)
$$;

-- A global stream of 20,000 seqs written in random order in four rounds,
-- with seqs 5, 3000, 3001, 9000-9009 and 15000 missing, released in batches
-- of 3,000 after each round.
SELECT ordered_events.create_stream('bk', max_release_batch => 3000);
CREATE TABLE pg_temp.arrivals AS
SELECT s AS seq, (random() * 3)::int AS round, random() AS shuffle
  FROM generate_series(1, 20000) s
 WHERE s NOT IN (5, 3000, 3001, 15000) AND s NOT BETWEEN 9000 AND 9009;
DO $$
BEGIN
    FOR n IN 0..3 LOOP
        INSERT INTO ordered_events.inbox (stream, seq, key)
        SELECT 'bk', a.seq, 'k' || a.seq % 7 FROM pg_temp.arrivals a
         WHERE a.round = n ORDER BY a.shuffle;
        PERFORM ordered_events.release('bk');
        PERFORM ordered_events.release('bk');
    END LOOP;
END $$;
SELECT count(*) > 0 AS blocks_stored FROM ordered_events.backlog_blocks;
SELECT * FROM pg_temp.check('bk');
SELECT range_end, pending_count, first_gap_start, first_gap_since IS NOT NULL AS seen
  FROM ordered_events.stream_stats WHERE stream = 'bk';

-- events that arrived since the last step are counted too
SELECT ordered_events.ingest('bk', 20005, 'k');
SELECT ordered_events.ingest('bk', 9004, 'k');
SELECT * FROM pg_temp.check('bk');

-- filled holes: the range moves in batches, the summary follows
SELECT ordered_events.ingest('bk', 5, 'k');
SELECT ordered_events.release('bk');
SELECT * FROM pg_temp.check('bk');
SELECT ordered_events.ingest('bk', 3000, 'k'), ordered_events.ingest('bk', 3001, 'k');
SELECT ordered_events.release('bk') + ordered_events.release('bk') AS released;
SELECT * FROM pg_temp.check('bk');

-- skipped: 9000-9009 but 9004 is lost; the range passes it, up to 15000
SELECT ordered_events.skip_gap('bk', 9009, 'lost upstream');
SELECT * FROM pg_temp.check('bk');
SELECT ordered_events.release('bk') + ordered_events.release('bk') AS released;
SELECT * FROM pg_temp.check('bk');
SELECT range_end, pending_count, first_gap_start FROM ordered_events.stream_stats WHERE stream = 'bk';

-- a skip above the range while it is still releasing in batches
SELECT ordered_events.skip_gap('bk', 20003, 'lost upstream');
SELECT * FROM pg_temp.check('bk');
SELECT ordered_events.release('bk') + ordered_events.release('bk') + ordered_events.release('bk')
    AS released;
SELECT * FROM pg_temp.check('bk');

-- all released: nothing stored is left
SELECT ordered_events.ingest('bk', 15000, 'k'), ordered_events.ingest('bk', 20004, 'k');
SELECT ordered_events.release('bk') + ordered_events.release('bk') AS released;
SELECT * FROM pg_temp.check('bk');
SELECT range_end, pending_count, first_gap_start FROM ordered_events.stream_stats WHERE stream = 'bk';
SELECT count(*) AS blocks_left FROM ordered_events.backlog_blocks b
  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 'bk';

-- A per-key stream: key a waits behind its seq 3 with 5,000 events, key b
-- behind 2,000 with holes, key c has none; then a's gap fills and b ends.
SELECT ordered_events.create_stream('bk_keys', sequencing => 'per_key', max_release_batch => 2500);
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'bk_keys', s, 'a' FROM generate_series(1, 5000) s WHERE s <> 3
UNION ALL
SELECT 'bk_keys', s, 'b' FROM generate_series(1, 4000) s WHERE s <> 2000 AND s % 1500 <> 0
UNION ALL
SELECT 'bk_keys', s, 'c' FROM generate_series(1, 100) s;
SELECT ordered_events.release('bk_keys') + ordered_events.release('bk_keys') AS released;
SELECT * FROM pg_temp.check('bk_keys');
SELECT ordered_events.ingest('bk_keys', 3, 'a');
SELECT ordered_events.ingest('bk_keys', 4001, 'b', last_event => true);
SELECT ordered_events.ingest('bk_keys', 2000, 'b');
SELECT * FROM pg_temp.check('bk_keys');
SELECT ordered_events.release('bk_keys') + ordered_events.release('bk_keys') AS released;
SELECT * FROM pg_temp.check('bk_keys');
SELECT key, gap_start, gap_end FROM ordered_events.gaps('bk_keys') ORDER BY key, gap_start;
SELECT ordered_events.ingest('bk_keys', 1500, 'b'), ordered_events.ingest('bk_keys', 3000, 'b');
SELECT ordered_events.release('bk_keys') + ordered_events.release('bk_keys') AS released;
SELECT * FROM pg_temp.check('bk_keys');
SELECT count(*) AS blocks_left FROM ordered_events.backlog_blocks b
  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 'bk_keys';

-- A global stream of 40,000 seqs whose keys are dense ('d0'..'d4'), rare
-- (one event in 3,000 seqs: a row per event), in two bursts (every fourth
-- seq up to 6,000, then 30,000..31,000), only in a block with a hole
-- ('hole', 6900..6950, beside the missing 7000) and a single event ('once',
-- 20,000); seqs 5, 7000, 12000-12001, 25000 and 33000-33002 missing.
-- Written in random order in three rounds, released after each, in batches
-- of 2,900 (no batch ends at the end of a block).
SELECT ordered_events.create_stream('bk_mix', max_release_batch => 2900);
CREATE TABLE pg_temp.mix AS
SELECT s AS seq, CASE WHEN s % 3000 = 11 THEN 'rare'
                      WHEN s <= 6000 AND s % 4 = 0 OR s BETWEEN 30000 AND 31000 THEN 'burst'
                      WHEN s BETWEEN 6900 AND 6950 THEN 'hole'
                      WHEN s = 20000 THEN 'once'
                      ELSE 'd' || s % 5 END AS key,
       (random() * 2)::int AS round, random() AS shuffle
  FROM generate_series(1, 40000) s
 WHERE s NOT IN (5, 7000, 12000, 12001, 25000) AND s NOT BETWEEN 33000 AND 33002;
DO $$
BEGIN
    FOR n IN 0..2 LOOP
        INSERT INTO ordered_events.inbox (stream, seq, key)
        SELECT 'bk_mix', m.seq, m.key FROM pg_temp.mix m WHERE m.round = n ORDER BY m.shuffle;
        PERFORM ordered_events.release('bk_mix');
    END LOOP;
END $$;
SELECT * FROM pg_temp.check('bk_mix');
CREATE FUNCTION pg_temp.key_rows(s text)
RETURNS TABLE (key text, key_rows bigint, pending bigint, runs text)
LANGUAGE sql AS $$
    SELECT k.key, count(*), sum(k.pending_count),
           string_agg(k.first_block || '-' || k.last_block, ' ' ORDER BY k.first_block)
      FROM ordered_events.backlog_keys k
      JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id AND d.stream = s
     GROUP BY k.key ORDER BY k.key
$$;
-- a row per key and run of stored blocks (blocks 1-5, 7-10, 12-23, 25-31,
-- 33-38): a rare key has one per event; 'hole' has none, its block is not
-- stored
SELECT * FROM pg_temp.key_rows('bk_mix');
SELECT key, buffered_count, earliest_buffered_seq, latest_buffered_seq
  FROM ordered_events.key_status WHERE stream = 'bk_mix' ORDER BY key;

-- events that arrived since the last step count too
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'bk_mix', s, 'd' || s % 5 FROM generate_series(40001, 40100) s;
SELECT * FROM pg_temp.check('bk_mix');

-- holes fill behind stored blocks: block 6 is stored after those beyond it
-- (its keys' runs join those that end at block 5), then block 24
SELECT ordered_events.ingest('bk_mix', 7000, 'hole');
SELECT ordered_events.release('bk_mix');
SELECT * FROM pg_temp.check('bk_mix');
SELECT ordered_events.ingest('bk_mix', 25000, 'd0');
SELECT ordered_events.release('bk_mix');
SELECT * FROM pg_temp.check('bk_mix');
SELECT * FROM pg_temp.key_rows('bk_mix');

-- seq 5 arrives: the range moves through the summary 2,900 events a step,
-- each step leaving the keys' first seqs inside a block; the third step is
-- skip_gap() through 33002 (12000-12001 and 33000-33002, beyond the range);
-- keys run out ('hole', 'once', the first burst) and the rows go.  Checked
-- after each step.
SELECT ordered_events.ingest('bk_mix', 5, 'd0');
CREATE TABLE pg_temp.steps (step integer, range_end bigint, problems bigint, key_rows bigint,
                            keys text);
DO $$
BEGIN
    FOR i IN 1..14 LOOP
        IF i = 3 THEN
            PERFORM ordered_events.skip_gap('bk_mix', 33002, 'lost upstream');
        ELSE
            PERFORM ordered_events.release('bk_mix');
        END IF;
        INSERT INTO pg_temp.steps
        SELECT i, (SELECT r.range_end FROM ordered_events.ranges r WHERE r.stream = 'bk_mix'),
               (SELECT count(*) FROM pg_temp.check_keys('bk_mix')),
               (SELECT sum(k.key_rows) FROM pg_temp.key_rows('bk_mix') k),
               (SELECT string_agg(k.key, ',' ORDER BY k.key) FROM ordered_events.key_status k
                 WHERE k.stream = 'bk_mix' AND k.buffered_count > 0);
    END LOOP;
END $$;
SELECT * FROM pg_temp.steps ORDER BY step;
SELECT * FROM pg_temp.check('bk_mix');
SELECT count(*) AS key_rows_left FROM ordered_events.backlog_keys k
  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 'bk_mix';

-- What a read costs, recorded: with 100,000 events pending behind seq 5, a
-- stream_stats read and gaps() fetch the events of the block with the hole
-- and of the last one, not the backlog.  pg_stat_xact_user_tables counts
-- this backend's fetches not yet reported: the difference is the read's.
SELECT ordered_events.create_stream('bk_wide');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'bk_wide', s, 'k' || s % 100 FROM generate_series(1, 100000) s WHERE s <> 5;
SELECT ordered_events.release('bk_wide') + ordered_events.release('bk_wide') AS released;
SELECT * FROM pg_temp.check('bk_wide');
CREATE FUNCTION pg_temp.fetched(t regclass DEFAULT 'ordered_events.event_store')
RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read FROM pg_stat_xact_user_tables
     WHERE relid = t
$$;
BEGIN;
SELECT pg_temp.fetched() AS before \gset
SELECT pending_count, first_gap_start FROM ordered_events.stream_stats WHERE stream = 'bk_wide';
SELECT pg_temp.fetched() - :before < 2048 AS stream_stats_cheap;
SELECT pg_temp.fetched() AS before \gset
SELECT key, gap_start, gap_end FROM ordered_events.gaps('bk_wide');
SELECT pg_temp.fetched() - :before < 2048 AS gaps_cheap;
-- key_status of the global stream: its keys' rows (one a key, read twice:
-- for the count and earliest seq, for the latest) and the events outside
-- the islands
SELECT pg_temp.fetched() AS before \gset
SELECT pg_temp.fetched('ordered_events.backlog_keys') AS keys_before \gset
SELECT key, buffered_count, earliest_buffered_seq, latest_buffered_seq
  FROM ordered_events.key_status WHERE stream = 'bk_wide' AND key = 'k77';
SELECT pg_temp.fetched() - :before < 2048 AS key_status_key_cheap,
       pg_temp.fetched('ordered_events.backlog_keys') - :keys_before AS key_rows_read;
SELECT pg_temp.fetched() AS before \gset
SELECT pg_temp.fetched('ordered_events.backlog_keys') AS keys_before \gset
SELECT count(*), sum(buffered_count)
  FROM (SELECT * FROM ordered_events.key_status WHERE stream = 'bk_wide' LIMIT 100) k;
SELECT pg_temp.fetched() - :before < 2048 AS key_status_cheap,
       pg_temp.fetched('ordered_events.backlog_keys') - :keys_before AS key_rows_read;
COMMIT;

-- A release step that moves the range through the summary (seq 5 arrives:
-- 10,000 events released) reads at most two blocks more than it releases:
-- what the range stopped in, and the first block kept
SELECT ordered_events.ingest('bk_wide', 5, 'k5');
BEGIN;
SELECT pg_temp.fetched() AS before \gset
SELECT ordered_events.release('bk_wide') AS released \gset
SELECT :released AS released, pg_temp.fetched() - :before - :released <= 2 * 1024 + 1
    AS release_step_reads_two_blocks_more;
COMMIT;
SELECT * FROM pg_temp.check('bk_wide');

-- the same for a key of a per-key stream: k0 waits behind its seq 2 with
-- 100,000 events
SELECT ordered_events.create_stream('bk_wide_keys', sequencing => 'per_key');
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'bk_wide_keys', s, 'k0' FROM generate_series(1, 100001) s WHERE s <> 2
UNION ALL
SELECT 'bk_wide_keys', s, 'k1' FROM generate_series(1, 10) s;
SELECT ordered_events.release('bk_wide_keys') + ordered_events.release('bk_wide_keys') AS released;
SELECT * FROM pg_temp.check('bk_wide_keys');
BEGIN;
SELECT pg_temp.fetched() AS before \gset
SELECT key, buffered_count, earliest_buffered_seq, latest_buffered_seq
  FROM ordered_events.key_status WHERE stream = 'bk_wide_keys' AND key = 'k0';
SELECT pg_temp.fetched() - :before < 2048 AS key_status_cheap;
SELECT pg_temp.fetched() AS before \gset
SELECT pending_count, first_gap_start FROM ordered_events.stream_stats WHERE stream = 'bk_wide_keys';
SELECT pg_temp.fetched() - :before < 2048 AS stream_stats_cheap;
COMMIT;

-- The summary shows what stream_stats and key_status show, to whoever may
-- read them: a role without SELECT on them gets 42501, pg_monitor its rows.
CREATE ROLE regress_bk_nobody;
CREATE ROLE regress_bk_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA ordered_events TO regress_bk_nobody;
SET ROLE regress_bk_nobody;
SELECT * FROM ordered_events.stream_backlog('bk_wide');
SELECT * FROM ordered_events.lane_backlog('bk_wide_keys', 'k0');
SET ROLE regress_bk_monitor;
SELECT pending_count, first_gap_start FROM ordered_events.stream_backlog('bk_wide');
SELECT * FROM ordered_events.lane_backlog('bk_wide_keys', 'k0');
SELECT pending_count FROM ordered_events.stream_stats WHERE stream = 'bk_wide';
RESET ROLE;
-- an unknown stream has nothing waiting; a global stream has no key lanes
SELECT * FROM ordered_events.stream_backlog('no_such_stream');
SELECT * FROM ordered_events.lane_backlog('bk_wide', 'k1');
REVOKE USAGE ON SCHEMA ordered_events FROM regress_bk_nobody;
DROP ROLE regress_bk_nobody, regress_bk_monitor;

SELECT ordered_events.drop_stream(s)
  FROM unnest(ARRAY['bk', 'bk_keys', 'bk_mix', 'bk_wide', 'bk_wide_keys']) s;
SELECT (SELECT count(*) FROM ordered_events.backlog_blocks) AS blocks_left,
       (SELECT count(*) FROM ordered_events.backlog_islands) AS islands_left,
       (SELECT count(*) FROM ordered_events.backlog_keys) AS key_rows_left;
