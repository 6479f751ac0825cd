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

-- A release run that compact_stream() deletes, in full or up to seq_end.
CREATE TYPE ordered_events.compacted_run AS (
    lane text COLLATE "C",
    seq_start bigint,
    seq_end bigint,
    delivery bigint,
    emptied boolean
);
COMMENT ON TYPE ordered_events.compacted_run IS
    'Internal: a release run that compaction deletes (emptied) or shortens to start at seq_end';

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
 * One batch of compaction of a stream (compact() by hand, the worker in
 * its cycle).  It refuses a REPEATABLE READ or SERIALIZABLE transaction.
 * Why refuse rather than read the positions with a newer snapshot: a
 * compaction must see, once it holds the stream's lock, every subscription
 * and position committed before (a subscribe() from the beginning waits
 * for the lock, then counts what was deleted as read).  Under a
 * transaction snapshot taken earlier it saw no new subscription and
 * deleted the events that subscription was shown as unread: read() found
 * none and unread_count stayed for good.  Its counting and deleting would
 * also fail with 40001 on rows changed since the snapshot.  READ COMMITTED
 * gives each statement after the lock a snapshot that sees all of it; the
 * worker's own transactions always use it (src/worker.c).
 */
CREATE FUNCTION ordered_events.compact_stream(stream_id integer,
                                              OUT deleted bigint, OUT more boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- each statement planned for its values and the tables' current size: a
-- cached plan made while a table was small would scan it whole
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    d ordered_events.stream_def;
    batch integer;
    counted_end bigint;
    count_to bigint;
    clock timestamptz := pg_catalog.clock_timestamp();
    kept_since timestamptz;     -- released before it: past the retention
    rejected_since timestamptz; -- received before it: past the dead letter retention
    read_from bigint;
    runs ordered_events.compacted_run[];
    delete_from bigint;
    delete_to bigint;
    newest bigint;
    run ordered_events.compacted_run;
    gone bigint;
    rejected bigint;
BEGIN
    /*
     * What every consumer has read is read after the stream's lock, as
     * committed then: a snapshot taken before could miss a subscription
     * made meanwhile and delete the events it is shown as unread.
     */
    IF pg_catalog.current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'compaction cannot run in a % transaction',
              pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  DETAIL = 'Compaction must see the consumers'' positions as committed once it holds the stream''s lock; this transaction''s snapshot may predate a subscription whose unread events it would delete.',
                  HINT = 'Call ordered_events.compact() in a READ COMMITTED transaction, or let the background worker compact: it always uses READ COMMITTED.';
    END IF;
    deleted := 0;
    more := false;
    SELECT * INTO d FROM ordered_events.stream_def s
     WHERE s.stream_id = compact_stream.stream_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    batch := least(d.max_release_batch, 1000);
    kept_since := ordered_events.retention_cutoff(clock, d.retention);
    rejected_since := ordered_events.retention_cutoff(clock, d.dead_letter_retention);

    IF d.sequencing = 'global' THEN
        SELECT coalesce(p.counted_end, d.initial_sequence),
               least(p.range_end,
                     (SELECT pg_catalog.min(g.gap_start) FROM ordered_events.gap_skips g
                       WHERE g.stream_id = d.stream_id AND g.lane = '' AND NOT g.settled))
          INTO counted_end, count_to
          FROM ordered_events.progress p
         WHERE p.stream_id = d.stream_id AND p.lane = '';
        IF count_to > counted_end THEN
            -- at most "batch" events (the seqs between may be skipped ones)
            count_to := coalesce((SELECT e.seq FROM ordered_events.event_store e
                                   WHERE e.stream_id = d.stream_id AND e.lane = ''
                                     AND e.seq >= counted_end AND e.seq < count_to
                                   ORDER BY e.seq OFFSET batch LIMIT 1), count_to);
            INSERT INTO ordered_events.key_counters AS k
                (stream_id, key, released_count, last_released_seq)
            SELECT d.stream_id, e.key, pg_catalog.count(*), pg_catalog.max(e.seq)
              FROM ordered_events.event_store e
             WHERE e.stream_id = d.stream_id AND e.lane = ''
               AND e.seq >= counted_end AND e.seq < count_to
             GROUP BY e.key
            ON CONFLICT ON CONSTRAINT key_counters_pkey DO UPDATE
               SET released_count = k.released_count + excluded.released_count,
                   last_released_seq = pg_catalog.int8larger(k.last_released_seq,
                                                             excluded.last_released_seq);
            UPDATE ordered_events.progress p SET counted_end = count_to
             WHERE p.stream_id = d.stream_id AND p.lane = '';
            more := true;
            counted_end := count_to;
        END IF;
    END IF;

    IF d.retention IS NOT NULL THEN
        -- what every consumer read past: the release runs before its position,
        -- or all of them for a partition with nothing left to read
        SELECT pg_catalog.min(s.read_delivery) INTO read_from
          FROM ordered_events.subscription s
          JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
          JOIN ordered_events.release_totals t
            ON t.stream_id = s.stream_id AND t.partitions = c.partitions
           AND t.partition = s.partition
         WHERE s.stream_id = d.stream_id AND s.taken_count < t.released_count;

        -- the stream's newest run stays, emptied: release steps number the
        -- next one after it (src/delivery.c)
        newest := (SELECT pg_catalog.max(l.delivery) FROM ordered_events.lane_release_log l
                    WHERE l.stream_id = d.stream_id);

        -- the runs to delete, oldest first, and where each deletion stops
        IF d.sequencing = 'global' THEN
            -- from the oldest run to the first that must stay, or that is
            -- not counted, at most "batch" events: the last run in part
            SELECT l.seq_start INTO delete_from FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id ORDER BY l.delivery LIMIT 1;
            delete_to := least(counted_end,
                               (SELECT l.seq_start FROM ordered_events.lane_release_log l
                                 WHERE l.stream_id = d.stream_id
                                   AND (l.delivery >= read_from
                                        OR l.released_at >= kept_since)
                                 ORDER BY l.delivery LIMIT 1));
            delete_to := coalesce((SELECT e.seq FROM ordered_events.event_store e
                                    WHERE e.stream_id = d.stream_id AND e.lane = ''
                                      AND e.seq >= delete_from AND e.seq < delete_to
                                    ORDER BY e.seq OFFSET batch LIMIT 1), delete_to);
            SELECT pg_catalog.array_agg(ROW('', l.seq_start, least(l.seq_end, delete_to),
                                            l.delivery, l.seq_end <= delete_to)
                                        ::ordered_events.compacted_run ORDER BY l.delivery)
              INTO runs
              FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id AND l.lane = ''
               AND l.seq_end <= coalesce(
                       (SELECT l2.seq_end FROM ordered_events.lane_release_log l2
                         WHERE l2.stream_id = d.stream_id AND l2.lane = ''
                           AND l2.seq_end >= delete_to
                         ORDER BY l2.seq_end LIMIT 1), 9223372036854775807)
               AND l.seq_start < delete_to;
        ELSE
            -- whole runs, at most "batch" of them or the one that reaches
            -- "batch" seqs; a lane stops before a skipped run that may
            -- still receive late events
            SELECT pg_catalog.array_agg(ROW(c.lane, c.seq_start, c.seq_end, c.delivery, true)
                                        ::ordered_events.compacted_run ORDER BY c.delivery)
              INTO runs
              FROM (SELECT l.lane, l.seq_start, l.seq_end, l.delivery, l.released_at,
                           coalesce(pg_catalog.sum(l.seq_end::numeric - l.seq_start)
                               OVER (ORDER BY l.delivery ROWS BETWEEN UNBOUNDED PRECEDING
                                                             AND 1 PRECEDING), 0) AS before
                      FROM ordered_events.lane_release_log l
                     WHERE l.stream_id = d.stream_id
                       AND (read_from IS NULL OR l.delivery < read_from)
                     ORDER BY l.delivery
                     LIMIT batch) c
             WHERE c.released_at < kept_since AND c.before < batch
               AND (c.delivery <> newest OR c.seq_start < c.seq_end)
               AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                                WHERE g.stream_id = d.stream_id AND g.lane = c.lane
                                  AND NOT g.settled AND g.gap_start < c.seq_end);
        END IF;

        IF runs IS NOT NULL THEN
            FOREACH run IN ARRAY runs LOOP
                DELETE FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = run.lane
                   AND e.seq >= run.seq_start AND e.seq < run.seq_end;
                GET DIAGNOSTICS gone = ROW_COUNT;
                deleted := deleted + gone;
                IF run.emptied AND run.delivery <> newest THEN
                    DELETE FROM ordered_events.lane_release_log l
                     WHERE l.stream_id = d.stream_id AND l.delivery = run.delivery;
                ELSE
                    UPDATE ordered_events.lane_release_log l SET seq_start = run.seq_end
                     WHERE l.stream_id = d.stream_id AND l.delivery = run.delivery;
                END IF;
            END LOOP;
            INSERT INTO ordered_events.deleted_totals AS t (stream_id, events)
            VALUES (d.stream_id, deleted)
            ON CONFLICT ON CONSTRAINT deleted_totals_pkey
            DO UPDATE SET events = t.events + deleted;
            -- done when the newest run was emptied; else there may be more
            run := runs[pg_catalog.array_upper(runs, 1)];
            more := more OR NOT run.emptied OR run.delivery <> newest;
        END IF;
    END IF;

    IF d.dead_letter_retention IS NOT NULL THEN
        -- the oldest, up to "batch" of them (and those received at the same time)
        WITH gone AS (
                DELETE FROM ordered_events.unprocessed u
                 WHERE u.stream = d.stream AND u.consumer IS NULL
                   AND u.received_at < rejected_since
                   AND u.received_at <= coalesce(
                           (SELECT u2.received_at FROM ordered_events.unprocessed u2
                             WHERE u2.stream = d.stream AND u2.consumer IS NULL
                             ORDER BY u2.received_at OFFSET batch - 1 LIMIT 1),
                           'infinity')
                RETURNING u.key, u.reason),
             per_key AS (
                INSERT INTO ordered_events.key_counters AS k
                    (stream_id, key, rejected_count, duplicate_count)
                SELECT d.stream_id, g.key, pg_catalog.count(*),
                       pg_catalog.count(*) FILTER (WHERE g.reason = 'duplicate')
                  FROM gone g
                 GROUP BY g.key
                ON CONFLICT ON CONSTRAINT key_counters_pkey DO UPDATE
                   SET rejected_count = k.rejected_count + excluded.rejected_count,
                       duplicate_count = k.duplicate_count + excluded.duplicate_count
                RETURNING 1)
        SELECT pg_catalog.count(*) INTO rejected FROM gone;
        IF rejected > 0 THEN
            INSERT INTO ordered_events.deleted_totals AS t (stream_id, dead_letters)
            VALUES (d.stream_id, rejected)
            ON CONFLICT ON CONSTRAINT deleted_totals_pkey
            DO UPDATE SET dead_letters = t.dead_letters + rejected;
        END IF;
        more := more OR rejected >= batch;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.compact_stream(integer) IS
    'Internal: one batch of counting and retention for a stream';
REVOKE EXECUTE ON FUNCTION ordered_events.compact_stream(integer) FROM PUBLIC;
-- compact(): the worker's compaction by hand, one batch per stream.
CREATE FUNCTION ordered_events.compact(stream text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF stream IS NOT NULL THEN
        RETURN (SELECT c.deleted
                  FROM ordered_events.compact_stream(ordered_events.stream_id(stream)) c);
    END IF;
    RETURN (SELECT coalesce(pg_catalog.sum(c.deleted), 0)::bigint
              FROM ordered_events.stream_def d
             CROSS JOIN LATERAL ordered_events.compact_stream(d.stream_id) c);
END;
$$;
COMMENT ON FUNCTION ordered_events.compact(text) IS
    'Count released events per key and delete what the retentions allow, one batch per stream; returns the events deleted';
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
                  AND coalesce(p.counted_end, d.initial_sequence) < least(p.range_end,
                        (SELECT pg_catalog.min(g.gap_start) FROM ordered_events.gap_skips g
                          WHERE g.stream_id = d.stream_id AND g.lane = '' AND NOT g.settled)))
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
                                     AND s.read_delivery <= l.delivery))
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
