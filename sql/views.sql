--
-- views: the reading side.  released (ordered by stream, then seq, with
-- released_at), pending, gaps() with several holes (inclusive bounds;
-- first_seen only for the gap a release step stopped at), ranges,
-- stream_stats, key_status (also for a key that only has rejected events),
-- unprocessed.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Two streams; vw_b is written first, vw_a sorts first.
SELECT ordered_events.create_stream('vw_b', initial_sequence => 10),
       ordered_events.create_stream('vw_a');

SELECT ordered_events.ingest('vw_b', 12, 'x', '{"b": 12}', '2024-03-01 00:00:12+00'),
       ordered_events.ingest('vw_b', 10, 'y', '{"b": 10}', '2024-03-01 00:00:10+00'),
       ordered_events.ingest('vw_b', 11, 'x', '{"b": 11}', '2024-03-01 00:00:11+00');
-- vw_a: 1 2 3 . 5 . . 8 9 . . 12 . . . . . . . 20
SELECT ordered_events.ingest('vw_a', s, 'k' || (s % 3), jsonb_build_object('a', s),
                             timestamptz '2024-03-01 00:00:00+00' + s * interval '1 hour')
  FROM unnest(ARRAY[20, 9, 3, 12, 1, 8, 5, 2]) s;

-- Before any release step: nothing released, everything pending, in
-- stream then seq order; gaps are known but not yet seen.
SELECT count(*) AS released FROM ordered_events.released WHERE stream IN ('vw_a', 'vw_b');
SELECT stream, seq, key, payload, event_ts, alignment_ts IS NOT NULL AS has_alignment_ts,
       received_at IS NOT NULL AS has_received_at
  FROM ordered_events.pending WHERE stream IN ('vw_a', 'vw_b');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_b');

SELECT ordered_events.release(NULL);

-- released: stream, then seq; released_at set.
SELECT stream, seq, key, payload, event_ts, alignment_ts IS NOT NULL AS has_alignment_ts,
       received_at IS NOT NULL AS has_received_at, released_at IS NOT NULL AS has_released_at
  FROM ordered_events.released WHERE stream IN ('vw_a', 'vw_b');
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream IN ('vw_a', 'vw_b');

-- gaps: inclusive bounds; the release step saw only the gap it stopped at.
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');
SELECT * FROM ordered_events.gaps('vw_b');

SELECT stream, range_start, range_end, max_event_ts, updated_at IS NOT NULL AS has_updated_at
  FROM ordered_events.ranges WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream;

SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at IS NOT NULL AS has_oldest_pending, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream;
-- first_seen of the first gap is first_gap_since of stream_stats
SELECT g.first_seen = s.first_gap_since AS same_first_seen
  FROM ordered_events.gaps('vw_a') g, ordered_events.stream_stats s
 WHERE s.stream = 'vw_a' AND g.gap_start = s.first_gap_start;
SELECT first_seen AS gap4_first_seen FROM ordered_events.gaps('vw_a') WHERE gap_start = 4 \gset
SELECT updated_at AS vw_a_updated_at FROM ordered_events.ranges WHERE stream = 'vw_a' \gset

-- A release step that finds the same gap changes neither first_seen nor
-- updated_at.
SELECT ordered_events.release('vw_a');
SELECT gap_start, first_seen = :'gap4_first_seen' AS same_first_seen
  FROM ordered_events.gaps('vw_a') WHERE first_seen IS NOT NULL;
SELECT updated_at = :'vw_a_updated_at' AS same_updated_at
  FROM ordered_events.ranges WHERE stream = 'vw_a';

-- Fill 4: until the next release step the other gaps are still unseen.
SELECT ordered_events.ingest('vw_a', 4, 'k1', '{"a": 4}', '2024-03-01 04:00:00+00');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');
SELECT ordered_events.release('vw_a');
-- now the range stops at 6: the gap 6..7 is seen, the later ones are not
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');
SELECT updated_at > :'vw_a_updated_at' AS updated_at_moved
  FROM ordered_events.ranges WHERE stream = 'vw_a';

-- Fill part of a gap: 13..19 becomes 13..14 and 16..19.
SELECT ordered_events.ingest('vw_a', 15, 'k0', '{"a": 15}', '2024-03-01 15:00:00+00');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');

-- Fill 6 and 7: the range moves to 10, the gap 10..11 is seen.
SELECT ordered_events.ingest('vw_a', 7, 'k1', '{"a": 7}', '2024-03-01 07:00:00+00'),
       ordered_events.ingest('vw_a', 6, 'k0', '{"a": 6}', '2024-03-01 06:00:00+00');
SELECT ordered_events.release('vw_a');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_a');
SELECT stream, range_start, range_end, max_event_ts FROM ordered_events.ranges
 WHERE stream = 'vw_a';

-- released_at tells the release steps apart: 1..3, 4..5, 6..9.
SELECT seq, dense_rank() OVER (ORDER BY released_at) AS release_step
  FROM ordered_events.released WHERE stream = 'vw_a' ORDER BY seq;

--
-- key_status, also for keys that only have rejected events.
--
SELECT ordered_events.ingest('vw_a', 2, 'ghost', '"dup"'),           -- duplicate
       ordered_events.ingest('vw_a', 0, 'ghost', '"too early"'),     -- before initial
       ordered_events.ingest('vw_a', 9223372036854775807, 'ghost'),  -- outside range
       ordered_events.ingest('vw_a', 12, 'k0', '"dup of pending"'),  -- duplicate
       ordered_events.ingest('vw_b', 9, 'only_rejected');            -- before initial
SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count,
       last_event_received
  FROM ordered_events.key_status WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream, key;
-- every received event is counted once: accepted + rejected
SELECT stream,
       (SELECT sum(received_count) FROM ordered_events.key_status k
         WHERE k.stream = s.stream) AS received,
       s.released_count + s.pending_count + s.unprocessed_count AS accounted
  FROM ordered_events.stream_stats s WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream;

SELECT stream, seq, key, payload, event_ts IS NOT NULL AS has_event_ts, reason, detail,
       received_at IS NOT NULL AS has_received_at
  FROM ordered_events.unprocessed WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream, seq;

SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at IS NOT NULL AS has_oldest_pending, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream IN ('vw_a', 'vw_b') ORDER BY stream;

--
-- Fill every gap: nothing pending, no gaps, empty stream_stats gap columns.
--
SELECT count(*) FILTER (WHERE ordered_events.ingest('vw_a', s, 'k' || (s % 3)) = 'accepted')
  FROM generate_series(1, 20) s;
SELECT ordered_events.release('vw_a');
SELECT * FROM ordered_events.gaps('vw_a');
SELECT count(*) AS pending FROM ordered_events.pending WHERE stream = 'vw_a';
SELECT stream, range_end, max_seen_seq, pending_count, released_count, unprocessed_count,
       oldest_pending_at, first_gap_start, first_gap_since, skipped_count
  FROM ordered_events.stream_stats WHERE stream = 'vw_a';
SELECT count(*), count(DISTINCT seq), min(seq), max(seq)
  FROM ordered_events.released WHERE stream = 'vw_a';
SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count, duplicate_count
  FROM ordered_events.key_status WHERE stream = 'vw_a' ORDER BY key;

--
-- A stream where the initial sequence itself is missing: the first gap
-- starts at the initial sequence.
--
SELECT ordered_events.create_stream('vw_c', initial_sequence => 100);
SELECT * FROM ordered_events.gaps('vw_c');
SELECT ordered_events.ingest('vw_c', 103, 'k'), ordered_events.ingest('vw_c', 105, 'k');
SELECT ordered_events.release('vw_c');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('vw_c');
SELECT stream, range_end, max_seen_seq, pending_count, released_count, first_gap_start,
       first_gap_since IS NOT NULL AS has_first_gap_since
  FROM ordered_events.stream_stats WHERE stream = 'vw_c';
SELECT stream, key, last_released_seq, buffered_count, earliest_buffered_seq,
       latest_buffered_seq, received_count, released_count
  FROM ordered_events.key_status WHERE stream = 'vw_c';

SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['vw_a', 'vw_b', 'vw_c']) s;
SELECT count(*) FROM ordered_events.key_status WHERE stream LIKE 'vw\_%';
