/* ordered_events--0.2--0.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ordered_events UPDATE TO '0.3'" to load this file. \quit

/*
 * 0.3: owned streams and consumers, handlers that cannot be abused,
 * processing and compaction that hold under other roles, long
 * transactions and other isolation levels.
 */

/*
 * A function whose signature changes is made again with the grants of the
 * old one (dropped at the end of this script).
 */
CREATE FUNCTION ordered_events.carry_grants(old_function regprocedure, new_function regprocedure)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    acl aclitem[] := (SELECT p.proacl FROM pg_catalog.pg_proc p WHERE p.oid = old_function);
    grantee text;
BEGIN
    IF acl IS NULL THEN
        RETURN;                 -- the default: EXECUTE for PUBLIC, as the new one has
    END IF;
    EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', new_function);
    FOR grantee IN
        SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname) END
          FROM pg_catalog.unnest(acl) i
         CROSS JOIN LATERAL pg_catalog.aclexplode(ARRAY[i]) a
          LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', new_function, grantee);
    END LOOP;
END;
$$;

/* ------------------------------------------------------------------------
 * 1. Owners and privileges (DESIGN.md 8.1)
 * ------------------------------------------------------------------------
 */

/*
 * Every consumer has an owner, the role that created it; a handler runs
 * as it.  A consumer made by 0.2 without a handler has none (NULL): who
 * may execute read() may read it, as in 0.2, until alter_consumer() gives
 * it one.
 */
ALTER TABLE ordered_events.consumer_def
    DROP CONSTRAINT consumer_def_check,
    ADD CHECK ((handler IS NULL) = (handler_owner IS NULL)),
    ADD COLUMN handler_timeout interval
        CHECK (handler_timeout > interval '0' AND handler_timeout <= interval '24 days');
COMMENT ON COLUMN ordered_events.consumer_def.handler_timeout IS
    'The limit of one handler call; NULL: the server''s ordered_events.handler_timeout';

/*
 * create_consumer() takes the consumer's own handler_timeout.  It stays C
 * (src/handler.c): it must know the calling role, the consumer's owner.
 */
ALTER FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text)
    RENAME TO create_consumer_0_2;
CREATE FUNCTION ordered_events.create_consumer(
    consumer text,
    partitions integer DEFAULT 1,
    handler regprocedure DEFAULT NULL,
    output_stream text DEFAULT NULL,
    alignment text DEFAULT 'inherit',
    handler_timeout interval DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_create_consumer';
COMMENT ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval) IS
    'Create a consumer owned by the calling role: a named reader of the released events of the streams it subscribes to, read by the extension through a handler if one is given';
SELECT ordered_events.carry_grants(
    'ordered_events.create_consumer_0_2(text, integer, regprocedure, text, text)',
    'ordered_events.create_consumer(text, integer, regprocedure, text, text, interval)');
DROP FUNCTION ordered_events.create_consumer_0_2(text, integer, regprocedure, text, text);

DROP FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, regrole);
CREATE FUNCTION ordered_events.define_consumer(
    consumer text, partitions integer, handler regprocedure, output_stream text,
    alignment text, handler_timeout interval, owner regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    output_id integer;
BEGIN
    IF consumer !~ '^[a-z_][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'invalid consumer name: %', quote_literal(consumer)
            USING ERRCODE = 'invalid_name',
                  HINT = 'A consumer name has 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit.';
    END IF;
    IF partitions NOT BETWEEN 1 AND 1024 THEN
        PERFORM ordered_events.invalid_option('partitions', partitions::text,
            'Use 1 to 1024: the number of sessions that may read the consumer in parallel.');
    END IF;
    IF alignment NOT IN ('inherit', 'processing') THEN
        PERFORM ordered_events.invalid_option('alignment', alignment,
            'Use ''inherit'' (a derived event has its parent''s alignment_ts) or ''processing'' (the time it is derived).');
    END IF;
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    IF handler IS NULL THEN
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL THEN
            RAISE EXCEPTION 'output_stream, alignment and handler_timeout need a handler'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass handler => ''fn(jsonb, ordered_events.event)''::regprocedure, or leave these out.';
        END IF;
    ELSE
        PERFORM ordered_events.check_handler(handler, owner);
        IF output_stream IS NOT NULL THEN
            output_id := (ordered_events.output_stream_or_error(output_stream, owner)).stream_id;
        END IF;
    END IF;
    INSERT INTO ordered_events.consumer_def
        (consumer, partitions, handler, owner, handler_owner, output_stream_id, alignment,
         handler_timeout)
    VALUES (define_consumer.consumer, define_consumer.partitions, handler::text, owner,
            (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = handler),
            output_id, define_consumer.alignment, define_consumer.handler_timeout);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'consumer "%" already exists', consumer
        USING ERRCODE = 'duplicate_object',
              HINT = 'Drop it first with ordered_events.drop_consumer(), or choose another name.';
END;
$$;
COMMENT ON FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, regrole) IS
    'Internal: create_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION
    ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, regrole)
FROM PUBLIC;

-- A handler_timeout is NULL (the server's) or a positive interval of at most 24 days.
CREATE FUNCTION ordered_events.check_handler_timeout(handler_timeout interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF handler_timeout <= interval '0' OR handler_timeout > interval '24 days' THEN
        PERFORM ordered_events.invalid_option('handler_timeout', handler_timeout::text,
            'Use a positive interval of at most 24 days, or NULL for the server''s ordered_events.handler_timeout.');
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_handler_timeout(interval) IS
    'Internal: the error for an invalid handler_timeout';

/* ------------------------------------------------------------------------
 * 2. Handler limits (DESIGN.md 8.2, "Time limit")
 * ------------------------------------------------------------------------
 */

/* ------------------------------------------------------------------------
 * 3. Compaction, locks and the worker
 * ------------------------------------------------------------------------
 */

/*
 * Retentions that compaction can compute.  A retention whose cut-off
 * (the time of a compaction minus the retention) is outside the range of
 * timestamps, such as '10000 years', made every compaction of its stream
 * fail with 22008, so that its per-key counting never ran either.
 * check_retention(), which create_stream() and alter_stream() call, now
 * refuses more than 1000 years; compaction treats a value stored before
 * (a 0.2 installation) as "nothing is old enough".
 */

-- clock - retention, or -infinity where it is out of range (nothing is
-- older); NULL for a NULL retention.
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

-- A retention is an interval from 0 to 1000 years (NULL: keep for ever).
CREATE OR REPLACE FUNCTION ordered_events.check_retention(option text, retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF retention < interval '0' THEN
        PERFORM ordered_events.invalid_option(option, retention::text,
            'Use an interval of at least 0: how long to keep what was released (or rejected); NULL keeps it for ever.');
    END IF;
    IF retention > interval '1000 years'
       OR ordered_events.retention_cutoff(pg_catalog.clock_timestamp(), retention) = '-infinity' THEN
        PERFORM ordered_events.invalid_option(option, retention::text,
            'Use at most 1000 years, so that compaction can compute what is past it; NULL keeps everything for ever.');
    END IF;
END;
$$;

/*
 * Compaction (compact() by hand, the worker in its cycle) as in 0.2, with
 * two changes: it refuses a REPEATABLE READ or SERIALIZABLE transaction,
 * and its cut-offs come from retention_cutoff().
 *
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
CREATE OR REPLACE FUNCTION ordered_events.compact_stream(stream_id integer,
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

CREATE OR REPLACE FUNCTION ordered_events.streams_to_compact()
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

REVOKE EXECUTE ON FUNCTION ordered_events.retention_cutoff(timestamptz, interval) FROM PUBLIC;

/*
 * drop_consumer() and drop_stream() wait for a read in progress without a
 * deadlock.  Both deleted the consumer's or the stream's row (drop_stream()
 * locked it FOR UPDATE first), and the cascade then waited for the
 * subscription rows that a read() holds.  A second read() in that
 * transaction updates those rows again, and updating a row that the
 * transaction itself wrote checks its foreign keys: FOR KEY SHARE on the
 * row being deleted, held by the drop.  40P01.  A drop must first wait for
 * the readers, holding nothing they need: lock the subscription rows, in
 * read()'s order (by consumer, partition, stream: consumer_read.c,
 * PLAN_LOCK), before anything else.
 */
CREATE FUNCTION ordered_events.lock_subscriptions(consumer_id integer, stream_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lock_subscriptions.consumer_id IS NOT NULL THEN
        PERFORM FROM ordered_events.subscription s
         WHERE s.consumer_id = lock_subscriptions.consumer_id
         ORDER BY s.partition, s.stream_id
           FOR UPDATE;
    ELSE
        PERFORM FROM ordered_events.subscription s
         WHERE s.stream_id = lock_subscriptions.stream_id
         ORDER BY s.consumer_id, s.partition
           FOR UPDATE;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.lock_subscriptions(integer, integer) IS
    'Internal: wait for the reads of a consumer (or of a stream, consumer_id NULL) in progress, locking their subscription rows as read() does';
REVOKE EXECUTE ON FUNCTION ordered_events.lock_subscriptions(integer, integer) FROM PUBLIC;

DROP FUNCTION ordered_events.carry_grants(regprocedure, regprocedure);
