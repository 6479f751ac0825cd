--
-- per_key_views: per-key streams through the reading and writing interface.
-- released (ordered by stream, key, seq, with released_at), pending,
-- gaps() per key (key column set, inclusive bounds, first_seen only for
-- the gap a release step stopped at in that key), stream_stats (range_end
-- NULL), ranges (global streams only), key_status, the inbox view (INSERT
-- and COPY, with last_event), release(NULL), and max_release_batch as the
-- budget of a whole release step across keys.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Two per-key streams and a global one; pkv_b is written first, pkv_a
-- sorts first.
SELECT ordered_events.create_stream('pkv_b', 'per_key', initial_sequence => 10),
       ordered_events.create_stream('pkv_a', sequencing => 'per_key'),
       ordered_events.create_stream('pkv_g');
SELECT stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
       created_at IS NOT NULL AS has_created_at
  FROM ordered_events.streams WHERE stream LIKE 'pkv\_%' ORDER BY stream;
-- ranges lists global streams only
SELECT stream, range_start, range_end FROM ordered_events.ranges
 WHERE stream LIKE 'pkv\_%' ORDER BY stream;

-- pkv_b: keys 'x' (10 11 12) and 'y' (10), written out of order.
SELECT ordered_events.ingest('pkv_b', 12, 'x', '{"b": "x12"}', '2024-03-01 00:00:12+00'),
       ordered_events.ingest('pkv_b', 10, 'y', '{"b": "y10"}', '2024-03-01 00:00:10+00'),
       ordered_events.ingest('pkv_b', 11, 'x', '{"b": "x11"}', '2024-03-01 00:00:11+00'),
       ordered_events.ingest('pkv_b', 10, 'x', '{"b": "x10"}', '2024-03-01 00:00:13+00');
-- pkv_a, four keys (the key order is that of the C collation: 'B' < 'a' <
-- 'a2' < 'b'), each with its own holes:
--   'b':  1 2 3 . 5 . . 8       'B':  . 2 3        (its first seq is missing)
--   'a':  1 2 3 4               'a2': 1 . 3 . . 6
SELECT count(*) FILTER (WHERE o = 'accepted') AS accepted
  FROM (VALUES ('b', 8), ('a2', 6), ('B', 3), ('b', 5), ('a', 4), ('b', 3), ('a2', 3),
               ('a', 2), ('b', 1), ('B', 2), ('a', 3), ('b', 2), ('a2', 1), ('a', 1)) v(k, s),
       LATERAL ordered_events.ingest('pkv_a', s, k, jsonb_build_object(k, s),
                                     timestamptz '2024-03-01 00:00:00+00' + s * interval '1 hour') o;
-- the global stream: seqs unique across keys, released in seq order
SELECT ordered_events.ingest('pkv_g', 2, 'a', event_ts => '2024-03-01 00:00:02+00'),
       ordered_events.ingest('pkv_g', 1, 'b', event_ts => '2024-03-01 00:00:01+00');

-- Before any release step: nothing released, everything pending in
-- stream, key, seq order; every gap is known but not yet seen.
SELECT count(*) AS released FROM ordered_events.released WHERE stream LIKE 'pkv\_%';
SELECT stream, seq, key, payload, event_ts, alignment_ts IS NOT NULL AS has_alignment_ts,
       received_at IS NOT NULL AS has_received_at
  FROM ordered_events.pending WHERE stream LIKE 'pkv\_%';
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_a');
SELECT * FROM ordered_events.gaps('pkv_b');
SELECT stream, last_released_seq, buffered_count, earliest_buffered_seq, latest_buffered_seq
  FROM ordered_events.key_status WHERE stream LIKE 'pkv\_%' AND key = 'x';

-- release(NULL) serves every stream, per-key ones included: 4 + 3 + 6 + 2.
SELECT ordered_events.release(NULL);

-- released: stream, then key, then seq (a global stream: seq only);
-- released_at is set.
SELECT stream, seq, key, payload, event_ts, alignment_ts IS NOT NULL AS has_alignment_ts,
       received_at IS NOT NULL AS has_received_at, released_at IS NOT NULL AS has_released_at
  FROM ordered_events.released WHERE stream LIKE 'pkv\_%';
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream LIKE 'pkv\_%';

-- gaps: per key, inclusive bounds; in each key the release step saw only the
-- gap it stopped at ('B' at its initial seq, 'a2' at 2, 'b' at 4); the
-- later gaps of a key are not seen yet.
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_a');
SELECT * FROM ordered_events.gaps('pkv_b');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_g');

SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at IS NOT NULL AS has_oldest_pending, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'pkv\_%' ORDER BY stream;
-- first_gap_since of stream_stats is the first_seen of one of the seen gaps
SELECT count(*) AS matching_gaps
  FROM ordered_events.gaps('pkv_a') g, ordered_events.stream_stats s
 WHERE s.stream = 'pkv_a' AND g.gap_start = s.first_gap_start
   AND g.first_seen = s.first_gap_since;
SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count,
       last_event_received
  FROM ordered_events.key_status WHERE stream IN ('pkv_a', 'pkv_b') ORDER BY stream, key;
SELECT first_seen AS b4_first_seen FROM ordered_events.gaps('pkv_a')
 WHERE key = 'b' AND gap_start = 4 \gset

-- A release step with nothing new releases nothing and changes no
-- first_seen.
SELECT ordered_events.release('pkv_a');
SELECT key, gap_start, first_seen = :'b4_first_seen' AS same_first_seen
  FROM ordered_events.gaps('pkv_a') WHERE key = 'b' AND first_seen IS NOT NULL;

-- An arrival above a key's gap does not change the first_seen of the gap.
SELECT ordered_events.ingest('pkv_a', 10, 'b', '{"b": 10}', '2024-03-01 10:00:00+00');
SELECT ordered_events.release('pkv_a');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen,
       first_seen = :'b4_first_seen' AS same_first_seen
  FROM ordered_events.gaps('pkv_a') WHERE key = 'b';

-- Fill the gap at 4 of 'b': until the next release step, 6..7 and 9 are
-- known but unseen; after it 'b' stops at 6 and that gap is seen.  The
-- other keys do not move.
SELECT ordered_events.ingest('pkv_a', 4, 'b', '{"b": 4}', '2024-03-01 04:00:00+00');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_a');
SELECT ordered_events.release('pkv_a');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_a');

-- Fill part of a gap: 'a2' 4..5 becomes 5..5.
SELECT ordered_events.ingest('pkv_a', 4, 'a2', '{"a2": 4}', '2024-03-01 04:00:00+00');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen
  FROM ordered_events.gaps('pkv_a') WHERE key = 'a2';

-- Fill 'B' 1 and 'a2' 2: both keys move in one step, released in order.
SELECT ordered_events.ingest('pkv_a', 2, 'a2', '{"a2": 2}', '2024-03-01 02:00:00+00'),
       ordered_events.ingest('pkv_a', 1, 'B', '{"B": 1}', '2024-03-01 01:00:00+00');
SELECT ordered_events.release('pkv_a');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_a');
SELECT stream, key, seq FROM ordered_events.released WHERE stream = 'pkv_a';

-- released_at tells the release steps of a key apart: 'b' 1..3, 4..5;
-- 'a2' 1, 2..4.
SELECT key, seq, dense_rank() OVER (PARTITION BY key ORDER BY released_at) AS release_step
  FROM ordered_events.released WHERE stream = 'pkv_a' AND key IN ('a2', 'b')
 ORDER BY key, seq;
SELECT count(*) FILTER (WHERE released_at IS NULL) AS without_released_at,
       count(*) FILTER (WHERE released_at < received_at) AS released_before_received
  FROM ordered_events.released WHERE stream LIKE 'pkv\_%';

--
-- key_status of keys that only have rejected events, and rejections of a
-- per-key stream in general.
--
SELECT ordered_events.ingest('pkv_a', 2, 'a', '"dup of released"'),
       ordered_events.ingest('pkv_a', 8, 'b', '"dup of pending"'),
       ordered_events.ingest('pkv_a', 0, 'ghost', '"too early"'),
       ordered_events.ingest('pkv_a', 9223372036854775807, 'ghost'),
       ordered_events.ingest('pkv_b', 9, 'only_rejected');
SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count,
       last_event_received
  FROM ordered_events.key_status WHERE stream IN ('pkv_a', 'pkv_b') ORDER BY stream, key;
-- every received event is counted once: accepted + rejected
SELECT stream,
       (SELECT sum(received_count) FROM ordered_events.key_status k
         WHERE k.stream = s.stream) AS received,
       s.released_count + s.pending_count + s.unprocessed_count AS accounted
  FROM ordered_events.stream_stats s WHERE stream LIKE 'pkv\_%' ORDER BY stream;
SELECT stream, seq, key, payload, event_ts IS NOT NULL AS has_event_ts, reason, detail,
       received_at IS NOT NULL AS has_received_at
  FROM ordered_events.unprocessed WHERE stream LIKE 'pkv\_%' ORDER BY stream, key, seq;
SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at IS NOT NULL AS has_oldest_pending, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'pkv\_%' ORDER BY stream;

--
-- Fill every gap: nothing pending, no gaps, empty gap columns in
-- stream_stats.
--
SELECT count(*) FILTER (WHERE o = 'accepted') AS accepted
  FROM (VALUES ('b', 6), ('b', 7), ('b', 9), ('a2', 5)) v(k, s),
       LATERAL ordered_events.ingest('pkv_a', s, k) o;
SELECT ordered_events.release('pkv_a');
SELECT * FROM ordered_events.gaps('pkv_a');
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 'pkv_a';
SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at, first_gap_start, first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream = 'pkv_a';
SELECT key, count(*), count(DISTINCT seq), min(seq), max(seq)
  FROM ordered_events.released WHERE stream = 'pkv_a' GROUP BY key ORDER BY key COLLATE "C";
SELECT key, last_released_seq, buffered_count, earliest_buffered_seq, latest_buffered_seq,
       received_count, released_count, duplicate_count
  FROM ordered_events.key_status WHERE stream = 'pkv_a' ORDER BY key COLLATE "C";

--
-- The inbox view into a per-key stream: INSERT ... VALUES (RETURNING and
-- the command tag show the accepted rows), INSERT ... SELECT, COPY; the
-- same rules as ingest(): a rejected row goes to unprocessed, the
-- statement goes on.
--
SELECT ordered_events.create_stream('pkv_in', 'per_key', initial_sequence => 0);
INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES
    ('pkv_in', 1, 'k1', '"k1-1"'),
    ('pkv_in', 0, 'k1', '"k1-0"'),
    ('pkv_in', 0, 'k2', '"k2-0"'),      -- the same seq, another key: accepted
    ('pkv_in', 1, 'k1', '"k1-1 dup"'),  -- a duplicate of a row of this statement
    ('pkv_in', -1, 'k2', '"early"'),    -- before the initial sequence
    ('pkv_in', 3, 'k2', '"k2-3"')
RETURNING stream, seq, key, payload;
\echo accepted rows: :ROW_COUNT
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'pkv_in', g, 'k3', to_jsonb(g) FROM generate_series(4, 0, -1) g;
\echo accepted rows: :ROW_COUNT
-- last_event through the inbox: k4 ends at 2; 5 (in the same statement,
-- after the last event) is rejected at once, 4 (before it) waits pending
INSERT INTO ordered_events.inbox (stream, seq, key, last_event) VALUES
    ('pkv_in', 4, 'k4', false),
    ('pkv_in', 2, 'k4', true),
    ('pkv_in', 5, 'k4', DEFAULT),
    ('pkv_in', 0, 'k4', NULL);
\echo accepted rows: :ROW_COUNT
-- COPY: accepted and rejected rows (a duplicate of an earlier row, a
-- duplicate of a row of the same COPY, below the initial sequence, the
-- largest bigint, after a last event of the same COPY).  (The COPY command
-- tag is not checked: PostgreSQL counts every row COPY hands to an INSTEAD
-- OF trigger.)
COPY ordered_events.inbox (stream, seq, key, payload, last_event) FROM stdin;
pkv_in	2	k1	"k1-2"	f
pkv_in	0	k2	"k2-0 dup"	f
pkv_in	1	k4	"k4-1"	\N
pkv_in	2	k1	"k1-2 dup"	f
pkv_in	-5	k1	\N	f
pkv_in	9223372036854775807	k1	\N	f
pkv_in	1	k5	"k5-1"	t
pkv_in	2	k5	"k5-2"	f
pkv_in	0	k5	"k5-0"	f
pkv_in	1	k2	"k2-1"	f
\.
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream = 'pkv_in';
SELECT stream, seq, key, payload, reason, detail FROM ordered_events.unprocessed
 WHERE stream = 'pkv_in' ORDER BY key, seq, payload::text;
SELECT ordered_events.release('pkv_in');
-- k4's 4 waited above its last event: now moved to unprocessed; k2 waits at 2
SELECT stream, seq, key, payload FROM ordered_events.released WHERE stream = 'pkv_in';
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream = 'pkv_in';
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('pkv_in');
SELECT stream, seq, key, reason, detail FROM ordered_events.unprocessed
 WHERE stream = 'pkv_in' AND reason = 'after_last_event' ORDER BY key, seq;
SELECT key, last_released_seq, buffered_count, earliest_buffered_seq, latest_buffered_seq,
       received_count, released_count, duplicate_count, last_event_received
  FROM ordered_events.key_status WHERE stream = 'pkv_in' ORDER BY key;
SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       first_gap_start, skipped_count
  FROM ordered_events.stream_stats WHERE stream = 'pkv_in';

--
-- max_release_batch bounds a whole release step, across keys.  Keys a, b
-- and c have two events each, written one statement at a time in that
-- order; with a batch of 3 the steps release 3 (a 1..2, b 1), 3 (b 2,
-- c 1..2), then 0.
--
SELECT ordered_events.create_stream('pkv_batch', 'per_key', max_release_batch => 3);
SELECT ordered_events.ingest('pkv_batch', 1, 'a');
SELECT ordered_events.ingest('pkv_batch', 2, 'a');
SELECT ordered_events.ingest('pkv_batch', 1, 'b');
SELECT ordered_events.ingest('pkv_batch', 2, 'b');
SELECT ordered_events.ingest('pkv_batch', 1, 'c');
SELECT ordered_events.ingest('pkv_batch', 2, 'c');
SELECT ordered_events.release('pkv_batch');
SELECT clock_timestamp() AS after_step_1 \gset
SELECT key, last_released_seq, buffered_count, released_count
  FROM ordered_events.key_status WHERE stream = 'pkv_batch' ORDER BY key;
SELECT ordered_events.release('pkv_batch');
SELECT clock_timestamp() AS after_step_2 \gset
SELECT key, last_released_seq, buffered_count, released_count
  FROM ordered_events.key_status WHERE stream = 'pkv_batch' ORDER BY key;
SELECT ordered_events.release('pkv_batch');
SELECT key, seq,
       CASE WHEN released_at < :'after_step_1' THEN 1
            WHEN released_at < :'after_step_2' THEN 2
            ELSE 3 END AS release_step
  FROM ordered_events.released WHERE stream = 'pkv_batch' ORDER BY key, seq;
-- A larger backlog over many keys: 10 keys x 5 events, each event
-- committed on its own, seq by seq; batch 7.  Release steps until nothing
-- is pending: no step releases more than 7, together they release all 50
-- events, each once, every key in its seq order.
DO $$
BEGIN
    FOR s IN 1..5 LOOP
        FOR k IN 0..9 LOOP
            PERFORM ordered_events.ingest('pkv_batch', s, 'm' || k);
            COMMIT;
        END LOOP;
    END LOOP;
END;
$$;
SELECT ordered_events.alter_stream('pkv_batch', max_release_batch => 7);
CREATE FUNCTION pg_temp.release_all(stream text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    steps bigint[] := '{}';
BEGIN
    WHILE EXISTS (SELECT FROM ordered_events.pending p WHERE p.stream = release_all.stream)
          AND cardinality(steps) < 100 LOOP
        steps := steps || ordered_events.release(stream);
    END LOOP;
    RETURN steps;
END;
$$;
SELECT pg_temp.release_all('pkv_batch') AS steps \gset
SELECT (SELECT sum(n) FROM unnest(:'steps'::bigint[]) n) AS released,
       (SELECT max(n) FROM unnest(:'steps'::bigint[]) n) AS largest_step,
       cardinality(:'steps'::bigint[]) BETWEEN 8 AND 20 AS steps_8_to_20;
SELECT ordered_events.release('pkv_batch');
SELECT count(*), count(DISTINCT (key, seq)) AS distinct_events
  FROM ordered_events.released WHERE stream = 'pkv_batch';
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 'pkv_batch';
SELECT bool_and(released_count = 5 AND last_released_seq = 5) AS every_m_key_complete
  FROM ordered_events.key_status WHERE stream = 'pkv_batch' AND key LIKE 'm%';
-- each key's events are released in seq order: never a higher seq in an
-- earlier step than a lower one
SELECT count(*) AS out_of_order
  FROM ordered_events.released r1
  JOIN ordered_events.released r2 USING (stream, key)
 WHERE stream = 'pkv_batch' AND r1.seq < r2.seq AND r1.released_at > r2.released_at;

--
-- Clean up.
--
SELECT ordered_events.drop_stream(s)
  FROM unnest(ARRAY['pkv_a', 'pkv_b', 'pkv_g', 'pkv_in', 'pkv_batch']) s;
SELECT count(*) FROM ordered_events.streams WHERE stream LIKE 'pkv\_%';
SELECT count(*) FROM ordered_events.key_status WHERE stream LIKE 'pkv\_%';
SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'pkv\_%';
