--
-- The setup of beam_global.sql and per_key_beam.sql, Apache Beam's
-- OrderedEventProcessor cases.  Every case runs on two streams, <case>_0
-- with initial_sequence 0 and <case>_1 with initial_sequence 1; the
-- helpers feed both with the same seq offsets (seq = initial_sequence +
-- offset), so each result shows both streams.  Included with \i from the
-- top directory, where pg_regress runs psql.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';

-- One arrival on both streams of a case.  event_ts is 2024-01-01 00:00 plus
-- event_minute (default: the seq offset) minutes, so max_event_ts is known.
CREATE FUNCTION pg_temp.arrive(test text, seq_offset bigint, key text,
                               payload jsonb DEFAULT NULL, event_minute integer DEFAULT NULL,
                               last_event boolean DEFAULT false)
RETURNS TABLE (stream text, seq bigint, outcome ordered_events.outcome)
LANGUAGE sql AS $$
    SELECT v.s, v.i + seq_offset,
           ordered_events.ingest(v.s, v.i + seq_offset, key, payload,
               timestamptz '2024-01-01 00:00:00+00'
               + coalesce(event_minute, seq_offset) * interval '1 minute',
               last_event => last_event)
      FROM (VALUES (test || '_0', 0), (test || '_1', 1)) v(s, i)
     ORDER BY 1
$$;

-- One release step on both streams of a case.
CREATE FUNCTION pg_temp.release(test text)
RETURNS TABLE (stream text, released bigint)
LANGUAGE sql AS $$
    SELECT v.s, ordered_events.release(v.s)
      FROM (VALUES (test || '_0'), (test || '_1')) v(s)
     ORDER BY 1
$$;

-- key_status (Beam's OrderedProcessingStatus) of both streams of a case.
CREATE FUNCTION pg_temp.keys(test text)
RETURNS TABLE (stream text, key text, last_released_seq bigint, buffered_count bigint,
               earliest_buffered_seq bigint, latest_buffered_seq bigint,
               received_count bigint, released_count bigint, duplicate_count bigint,
               last_event_received boolean)
LANGUAGE sql AS $$
    SELECT k.stream, k.key, k.last_released_seq, k.buffered_count, k.earliest_buffered_seq,
           k.latest_buffered_seq, k.received_count, k.released_count, k.duplicate_count,
           k.last_event_received
      FROM ordered_events.key_status k
     WHERE k.stream IN (test || '_0', test || '_1')
     ORDER BY 1, 2
$$;
