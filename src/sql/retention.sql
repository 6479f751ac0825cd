/*
 * Counting and retention: compaction folds released events into per-key
 * counters and deletes what a stream's retentions no longer keep
 * (docs/operating.md, "Retention").
 */

/*
 * Beam's per-key status of a global stream, kept as counters: the events
 * below its lane's counted_end are counted here (compact_stream() folds
 * them in after release), and the dead letters that a retention deleted,
 * for both kinds of stream.  key_status adds what is not folded yet.
 */
CREATE TABLE ordered_events.key_counters (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    released_count bigint NOT NULL DEFAULT 0,
    last_released_seq bigint,
    rejected_count bigint NOT NULL DEFAULT 0,
    duplicate_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (stream_id, key)
) WITH (fillfactor = 70);
COMMENT ON TABLE ordered_events.key_counters IS
    'Internal: per-key counts of released events of global streams, and of deleted dead letters';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_counters', '');

-- What each stream's retentions deleted (metrics counts it).
CREATE TABLE ordered_events.deleted_totals (
    stream_id integer PRIMARY KEY
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    events bigint NOT NULL DEFAULT 0,
    dead_letters bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE ordered_events.deleted_totals IS
    'Internal: how many released events and dead letters of each stream its retentions deleted';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.deleted_totals', '');

/*
 * Once a stream has a retention, ingest looks for retried old seqs by the
 * range (stream_def.retains_events).  Switching it on waits for every
 * transaction that may be writing events, as drop_stream() does, so that
 * none goes on without the check after events start to be deleted.
 */
CREATE FUNCTION ordered_events.start_retaining(stream_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    LOCK TABLE ordered_events.event_store IN SHARE ROW EXCLUSIVE MODE;
    UPDATE ordered_events.stream_def d SET retains_events = true
     WHERE d.stream_id = start_retaining.stream_id;
END;
$$;
REVOKE EXECUTE ON FUNCTION ordered_events.start_retaining(integer) FROM PUBLIC;
/*
 * A compaction's cut-off: clock - retention, or -infinity where it is out
 * of the range of timestamps (nothing is older); NULL for a NULL
 * retention.  check_retention() refuses more than 1000 years, but 0.2
 * stored any (such as '10000 years', whose cut-off failed with 22008).
 */
CREATE FUNCTION ordered_events.retention_cutoff(clock timestamptz, retention interval)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN clock - retention;
EXCEPTION WHEN datetime_field_overflow THEN
    RETURN '-infinity';
END;
$$;
COMMENT ON FUNCTION ordered_events.retention_cutoff(timestamptz, interval) IS
    'Internal: the time before which what a retention keeps is past it; -infinity when out of range';
REVOKE EXECUTE ON FUNCTION ordered_events.retention_cutoff(timestamp with time zone,interval) FROM PUBLIC;

/*
 * The end of a lane's released prefix: every event of the lane below it is
 * released.  An event is released when its seq is below the lane's
 * range_end and no skipped run that a late event may still commit into
 * (gap_skips, not settled) holds it, so the prefix ends at range_end or at
 * the first such run.  Compaction counts up to it (src/compaction.c) and
 * streams_to_compact() looks for streams to count by it.  A SQL-standard
 * body: parsed once, at install, with the script's search_path.
 */
CREATE FUNCTION ordered_events.released_end(stream_id integer, lane text, range_end bigint)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN LEAST(range_end,
             (SELECT pg_catalog.min(g.gap_start) FROM ordered_events.gap_skips g
               WHERE g.stream_id = released_end.stream_id AND g.lane = released_end.lane
                 AND NOT g.settled));
COMMENT ON FUNCTION ordered_events.released_end(integer, text, bigint) IS
    'Internal: the first seq of a lane from which on not every event is released';
REVOKE EXECUTE ON FUNCTION ordered_events.released_end(integer,text,bigint) FROM PUBLIC;

-- The count and summed lag of a stream's released events still kept, per
-- partition of a partition count.
CREATE FUNCTION ordered_events.kept_released(stream_id integer, partitions integer)
RETURNS TABLE (partition integer, released_count bigint, lag_sum numeric)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT ordered_events.key_partition(a.key, kept_released.partitions), count(*),
       sum(ordered_events.lag_us(a.event_ts, a.alignment_ts))
  FROM ordered_events.accepted_events a
 WHERE a.stream_id = kept_released.stream_id AND a.is_released
 GROUP BY 1
$$;
COMMENT ON FUNCTION ordered_events.kept_released(integer, integer) IS
    'Internal: count and summed lag of the released events a stream keeps, by partition';
REVOKE EXECUTE ON FUNCTION ordered_events.kept_released(integer,integer) FROM PUBLIC;

/*
 * One batch of counting and retention of a stream (src/compaction.c), a
 * step of the engine the release steps use (src/step.c), so it takes
 * their lock.  It refuses REPEATABLE READ and SERIALIZABLE (25000): it
 * must see, once it holds the lock, every subscription and position
 * committed before.
 */
CREATE FUNCTION ordered_events.compact_stream(stream_id integer,
                                              OUT deleted bigint, OUT more boolean)
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'oe_compact_stream';
COMMENT ON FUNCTION ordered_events.compact_stream(integer) IS
    'Internal: one batch of counting and retention for a stream';
REVOKE EXECUTE ON FUNCTION ordered_events.compact_stream(integer) FROM PUBLIC;
/*
 * Every batch of counting and retention that is due for a stream, by hand,
 * in the caller's transaction (src/compaction.c), in batches of "batch"
 * events (NULL: 100,000; tests give fewer): the events deleted.  Refuses
 * REPEATABLE READ and SERIALIZABLE (25000), as compact_stream().
 */
CREATE FUNCTION ordered_events.compact_due(stream_id integer, batch integer DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'oe_compact_due';
COMMENT ON FUNCTION ordered_events.compact_due(integer, integer) IS
    'Internal: every batch of counting and retention due for a stream, in one call';
REVOKE EXECUTE ON FUNCTION ordered_events.compact_due(integer,integer) FROM PUBLIC;
-- compact(): the worker's compaction by hand, every batch that is due.
CREATE FUNCTION ordered_events.compact(stream text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF stream IS NOT NULL THEN
        RETURN ordered_events.compact_due(ordered_events.stream_id(stream));
    END IF;
    -- stream by stream, in the order of their ids
    RETURN (SELECT coalesce(pg_catalog.sum(c.deleted), 0)::bigint
              FROM (SELECT ordered_events.compact_due(d.stream_id) AS deleted
                      FROM ordered_events.stream_def d ORDER BY d.stream_id) c);
END;
$$;
COMMENT ON FUNCTION ordered_events.compact(text) IS
    'Count released events per key and delete what the retentions allow, every batch that is due; returns the events deleted';
REVOKE EXECUTE ON FUNCTION ordered_events.compact(text) FROM PUBLIC;
CREATE FUNCTION ordered_events.streams_to_compact()
RETURNS TABLE (stream text)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT d.stream
  FROM ordered_events.stream_def d
 WHERE EXISTS (SELECT FROM ordered_events.progress p
                WHERE d.sequencing = 'global' AND p.stream_id = d.stream_id AND p.lane = ''
                  AND coalesce(p.counted_end, d.initial_sequence)
                      < ordered_events.released_end(p.stream_id, p.lane, p.range_end))
    OR EXISTS (SELECT FROM (SELECT l.delivery, l.released_at, l.seq_start, l.seq_end
                              FROM ordered_events.lane_release_log l
                             WHERE d.retention IS NOT NULL AND l.stream_id = d.stream_id
                             ORDER BY l.delivery LIMIT 1) l
                WHERE l.released_at < ordered_events.retention_cutoff(pg_catalog.clock_timestamp(),
                                                                        d.retention)
                  -- not the newest run, kept once emptied
                  AND (l.seq_start < l.seq_end
                       OR EXISTS (SELECT FROM ordered_events.lane_release_log n
                                   WHERE n.stream_id = d.stream_id AND n.delivery > l.delivery))
                  AND NOT EXISTS (SELECT FROM ordered_events.subscription s
                                    JOIN ordered_events.consumer_def c
                                      ON c.consumer_id = s.consumer_id
                                    JOIN ordered_events.release_totals t
                                      ON t.stream_id = s.stream_id
                                     AND t.partitions = c.partitions
                                     AND t.partition = s.partition
                                   WHERE s.stream_id = d.stream_id
                                     AND s.taken_count < t.released_count
                                     AND s.read_delivery <= l.delivery)
                  -- nor what lease consumers have out (src/lease.c)
                  AND NOT EXISTS (SELECT FROM ordered_events.lease x
                                   CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(x.streams),
                                                                 pg_catalog.unnest(x.floors))
                                         AS f(stream_id, floor)
                                   WHERE f.stream_id = d.stream_id AND f.floor <= l.delivery))
    OR EXISTS (SELECT FROM ordered_events.unprocessed u
                WHERE d.dead_letter_retention IS NOT NULL
                  AND u.stream = d.stream AND u.consumer IS NULL
                  AND u.received_at < ordered_events.retention_cutoff(pg_catalog.clock_timestamp(),
                                                                      d.dead_letter_retention))
 ORDER BY d.stream
$$;
COMMENT ON FUNCTION ordered_events.streams_to_compact() IS
    'Internal: the streams with released events to count or events and dead letters to delete';
REVOKE EXECUTE ON FUNCTION ordered_events.streams_to_compact() FROM PUBLIC;
