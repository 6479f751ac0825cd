/*
 * Releasing: each lane's contiguous range, the release log, the skip
 * ledger, and release(), skip_gap(), gaps() (src/release.c, src/lane.c,
 * src/gap_policy.c, src/skip_gap.c, src/gaps.c).
 */

/*
 * Progress: one row per lane that a release step has looked at (a global
 * stream's lane from creation on); a lane without one starts at the
 * stream's initial_sequence.  Release steps of a stream serialise on the
 * stream's stream_def row.  fence_* belong to global lanes only.
 */
CREATE TABLE ordered_events.progress (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    lane text COLLATE "C" NOT NULL,
    range_end bigint NOT NULL,      -- first seq of the lane not released
    released_count bigint NOT NULL DEFAULT 0,
    last_released_seq bigint,       -- the highest seq released (not a skipped one)
    counted_end bigint,             -- global: seqs below are in key_counters
    max_event_ts timestamptz,       -- largest event_ts released
    last_event_seq bigint,          -- the lane is complete: its last event
    gap_start bigint,               -- first missing seq a release step saw,
    gap_end bigint,                 -- the run gap_start..gap_end was missing
    gap_first_seen timestamptz,     -- when a step first saw that run
    fence_seq bigint,               -- fence: the last seq allocated when read
    fence_xid xid8,                 -- fence: the next xid, read after fence_seq
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    backlog_end bigint,             -- backlog_blocks: the first seq not looked at
    PRIMARY KEY (stream_id, lane)
);
-- The lanes whose gap a timeout may skip, without visiting idle ones.
CREATE INDEX progress_gap_idx ON ordered_events.progress (stream_id, gap_first_seen)
    WHERE gap_start IS NOT NULL;
COMMENT ON TABLE ordered_events.progress IS
    'Internal: the contiguous range and counters of each lane';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.progress', '');

/*
 * The summary of each lane's backlog (src/backlog.c): the blocks of 1024
 * seqs beyond a gap that had all arrived when a release step looked, so
 * that monitoring counts them without reading their events.  Derived: a
 * step stores it again, and readers read the events it does not cover.
 */
CREATE TABLE ordered_events.backlog_blocks (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    lane text COLLATE "C" NOT NULL,
    block bigint NOT NULL,          -- seqs block * 1024 .. block * 1024 + 1023
    oldest_received_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, lane, block)
);
-- the oldest event a lane's blocks hold, without reading them all
CREATE INDEX backlog_blocks_oldest_idx
    ON ordered_events.backlog_blocks (stream_id, lane, oldest_received_at);
COMMENT ON TABLE ordered_events.backlog_blocks IS
    'Internal: blocks of 1024 pending seqs that have all arrived, per lane';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.backlog_blocks', '');
-- The runs of consecutive stored blocks (islands), so that a reader reads
-- one row per run, not one per block.
CREATE TABLE ordered_events.backlog_islands (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    lane text COLLATE "C" NOT NULL,
    first_block bigint NOT NULL,
    last_block bigint NOT NULL,
    PRIMARY KEY (stream_id, lane, first_block)
);
COMMENT ON TABLE ordered_events.backlog_islands IS
    'Internal: runs of consecutive backlog_blocks, per lane';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.backlog_islands', '');
/*
 * The keys of a global lane's stored blocks (src/backlog_keys.c): per key,
 * runs of consecutive stored blocks that each hold an event of the key,
 * with the count, first and last seq of its events in them, so that
 * key_status counts them without reading them.
 */
CREATE TABLE ordered_events.backlog_keys (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    first_block bigint NOT NULL,
    last_block bigint NOT NULL,
    pending_count bigint NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    PRIMARY KEY (stream_id, key, first_block)
) WITH (fillfactor = 50);   -- a run grows at its end: HOT updates
-- the rows that begin in the blocks a step's range passed
CREATE INDEX backlog_keys_first_block_idx ON ordered_events.backlog_keys (stream_id, first_block);
COMMENT ON TABLE ordered_events.backlog_keys IS
    'Internal: the keys of the backlog_blocks of global lanes, per run of blocks';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.backlog_keys', '');
/*
 * What the range of a global lane passed of the keys' rows that reach into
 * kept_block, the first block wholly beyond it: of each key, the row's
 * events below kept_block and the key's first seq in it.
 */
CREATE TABLE ordered_events.backlog_keys_passed (
    stream_id integer PRIMARY KEY
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    kept_block bigint NOT NULL,
    keys text[] COLLATE "C" NOT NULL,
    passed bigint[] NOT NULL,
    first_seqs bigint[] NOT NULL,
    min_last_block bigint NOT NULL  -- at most the least last_block of those rows
);
-- rewritten by each step that moves the range: not worth compressing
ALTER TABLE ordered_events.backlog_keys_passed
    ALTER COLUMN keys SET STORAGE EXTERNAL, ALTER COLUMN passed SET STORAGE EXTERNAL,
    ALTER COLUMN first_seqs SET STORAGE EXTERNAL;
COMMENT ON TABLE ordered_events.backlog_keys_passed IS
    'Internal: what a global lane''s range passed of its backlog_keys rows';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.backlog_keys_passed', '');

/*
 * The release log: one row per release step of a lane, numbered in the
 * stream's delivery order (the order consumers read, see src/delivery.c):
 * a global stream's steps in seq order; a per-key stream's steps in turn,
 * and inside a step its lanes by the alignment_ts of their first event
 * released in it, then by lane.
 */
CREATE TABLE ordered_events.lane_release_log (
    stream_id integer NOT NULL,
    lane text COLLATE "C" NOT NULL,
    seq_start bigint NOT NULL,
    seq_end bigint NOT NULL,
    released_at timestamptz NOT NULL,
    delivery bigint NOT NULL,
    PRIMARY KEY (stream_id, lane, seq_end)
);
CREATE UNIQUE INDEX lane_release_log_delivery_key
    ON ordered_events.lane_release_log (stream_id, delivery);
COMMENT ON TABLE ordered_events.lane_release_log IS
    'Internal: the release steps of each lane, when [seq_start, seq_end) was released, in delivery order';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lane_release_log', '');

/*
 * The skip ledger.  A run of seqs of a lane ('' for a global stream)
 * declared lost, inclusive bounds.  An event whose transaction was open
 * when its seq was skipped can still commit into the run; such an event is
 * never released (the views exclude it) and is moved to unprocessed as
 * gap_skipped by a later release step.  The run is settled once no
 * transaction older than settle_xid (the next xid when a step after the
 * skip first looked at it) is running: none can add to it any more.
 */
CREATE TABLE ordered_events.gap_skips (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    gap_start bigint NOT NULL,
    gap_end bigint NOT NULL,
    reason text NOT NULL,
    skipped_at timestamptz NOT NULL,
    settle_xid xid8,
    settled boolean NOT NULL DEFAULT false,
    lane text COLLATE "C" NOT NULL
);
CREATE INDEX gap_skips_unsettled_idx ON ordered_events.gap_skips (stream_id) WHERE NOT settled;
CREATE INDEX gap_skips_lane_idx ON ordered_events.gap_skips (stream_id, lane, gap_end);
COMMENT ON TABLE ordered_events.gap_skips IS
    'Internal: the skip ledger, with what late events still need';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.gap_skips', '');

CREATE TRIGGER gap_skips_changed
    AFTER INSERT OR DELETE OR TRUNCATE ON ordered_events.gap_skips
    FOR EACH STATEMENT EXECUTE FUNCTION ordered_events.stream_def_changed();

-- Lock the streams' release steps, in stream_id order.
CREATE FUNCTION ordered_events.lock_streams(stream_ids integer[])
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT FROM ordered_events.stream_def d
 WHERE d.stream_id = ANY (stream_ids)
 ORDER BY d.stream_id
   FOR NO KEY UPDATE
$$;
COMMENT ON FUNCTION ordered_events.lock_streams(integer[]) IS
    'Internal: take the release locks of streams, in stream_id order';
REVOKE EXECUTE ON FUNCTION ordered_events.lock_streams(integer[]) FROM PUBLIC;
CREATE FUNCTION ordered_events.release(stream text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_release';
COMMENT ON FUNCTION ordered_events.release(text) IS
    'Advance the range of one stream (NULL: every stream) over arrived events; returns how many were released';
REVOKE EXECUTE ON FUNCTION ordered_events.release(text) FROM PUBLIC;
CREATE FUNCTION ordered_events.release_through(stream text, through_seq bigint)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_release_through';
COMMENT ON FUNCTION ordered_events.release_through(text, bigint) IS
    'Release a sharded stream''s events below through_seq, the global range''s end that its router combined';
REVOKE EXECUTE ON FUNCTION ordered_events.release_through(text,bigint) FROM PUBLIC;
CREATE FUNCTION ordered_events.skip_gap(
    stream text,
    through_seq bigint,
    reason text,
    key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_skip_gap';
COMMENT ON FUNCTION ordered_events.skip_gap(text, bigint, text, text) IS
    'Declare every missing seq up to through_seq lost, record it, and release what that unblocks';
REVOKE EXECUTE ON FUNCTION ordered_events.skip_gap(text,bigint,text,text) FROM PUBLIC;

/*
 * The gap-timeout test, once: a gap first seen at first_seen has timed out
 * at "at" when first_seen + gap_timeout <= at (timestamptz + interval: a
 * month is a calendar month, a day a calendar day).  The release step
 * calls the same C function (src/gap_policy.c, oe_gap_expired()).
 */
CREATE FUNCTION ordered_events.gap_expired(first_seen timestamptz, gap_timeout interval,
                                           at timestamptz)
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_gap_expired_sql';
COMMENT ON FUNCTION ordered_events.gap_expired(timestamptz, interval, timestamptz) IS
    'Internal: whether a gap first seen at first_seen has been missing for gap_timeout at "at"';
REVOKE EXECUTE ON FUNCTION ordered_events.gap_expired(timestamptz,interval,timestamptz) FROM PUBLIC;

-- The streams a worker cycle should step: something to release, a gap no
-- step has seen, a policy that may skip, or late events to settle.  The
-- stream whose oldest such thing waited longest comes first.  The clock is
-- clock_timestamp(), as in the release step.
CREATE FUNCTION ordered_events.streams_with_work()
RETURNS TABLE (stream text)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT d.stream
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 CROSS JOIN LATERAL (
        -- a global stream: its first event from range_end on, by the primary key
        (SELECT e.seq = p.range_end
                OR p.gap_start IS DISTINCT FROM p.range_end
                OR p.backlog_end IS NULL
                OR d.gap_policy = 'fence'
                OR ordered_events.gap_expired(p.gap_first_seen, d.gap_timeout,
                                              pg_catalog.clock_timestamp()) AS needed,
                e.received_at AS since
           FROM ordered_events.event_store e
          WHERE d.sequencing = 'global' AND NOT d.sharded
            AND e.stream_id = d.stream_id AND e.lane = '' AND e.seq >= p.range_end
          ORDER BY e.seq LIMIT 1)
        UNION ALL
        -- events beyond the gap its backlog's summary has not seen (src/backlog.c)
        (SELECT true, e.received_at
           FROM ordered_events.event_store e
          WHERE d.sequencing = 'global' AND NOT d.sharded
            AND e.stream_id = d.stream_id AND e.lane = '' AND e.seq >= p.backlog_end
          ORDER BY e.seq LIMIT 1)
        UNION ALL
        (SELECT true, a.arrived_at
           FROM ordered_events.key_arrivals a
          WHERE d.sequencing = 'per_key' AND a.stream_id = d.stream_id
          ORDER BY a.arrived_at LIMIT 1)
        UNION ALL
        -- the oldest gap of a per-key stream: if it has not timed out, no
        -- younger one has (src/release.c, PLAN_EXPIRED_LANES)
        (SELECT ordered_events.gap_expired(k.gap_first_seen, d.gap_timeout,
                                           pg_catalog.clock_timestamp()), k.gap_first_seen
           FROM ordered_events.progress k
          WHERE d.gap_policy = 'timeout' AND d.sequencing = 'per_key'
            AND k.stream_id = d.stream_id AND k.gap_start IS NOT NULL
          ORDER BY k.gap_first_seen LIMIT 1)
        UNION ALL
        (SELECT true, g.skipped_at
           FROM ordered_events.gap_skips g
          WHERE g.stream_id = d.stream_id AND NOT g.settled
          ORDER BY g.skipped_at LIMIT 1)) w
 WHERE w.needed
 GROUP BY d.stream
 ORDER BY min(w.since), d.stream
$$;
-- gaps(): the missing runs, found by the same walk as releasing.
CREATE FUNCTION ordered_events.gaps(stream text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint, first_seen timestamptz)
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'oe_gaps';
COMMENT ON FUNCTION ordered_events.gaps(text) IS
    'The missing runs (inclusive bounds) between the released part and the highest arrived seq; per key for per-key streams';
/*
 * blockers() of a fence stream names what the fence waits for
 * (src/gap_policy.c): the transactions older than the fence that hold the
 * stream's fence lock, which append() takes before its seq (an advisory
 * lock: database, classid = stream_id, objid 0, objsubid 20293 = 0x4F45).
 */
CREATE FUNCTION ordered_events.blocking_transactions(stream text)
RETURNS TABLE (pid integer, xid xid, xact_start timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream);
    fence xid8 := (SELECT p.fence_xid FROM ordered_events.progress p
                    WHERE p.stream_id = d.stream_id AND p.lane = '');
    here oid := (SELECT b.oid FROM pg_catalog.pg_database b
                  WHERE b.datname = pg_catalog.current_database());
BEGIN
    IF NOT EXISTS (SELECT FROM ordered_events.gaps(blocking_transactions.stream)) THEN
        RETURN;                 -- nothing is missing: nothing blocks
    END IF;

    IF d.gap_policy = 'fence' THEN
        -- The appenders older than the fence: any of them may still commit
        -- a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE fence IS NOT NULL AND a.datid = here
           AND a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
           AND pg_catalog.age(a.backend_xid) > pg_catalog.age(pg_catalog.xid(fence))
           AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                          WHERE l.locktype = 'advisory' AND l.granted AND l.database = here
                            AND l.classid = d.stream_id::oid AND l.objid = 0
                            AND l.objsubid = 20293)
         ORDER BY a.xact_start, a.pid;
    ELSE
        -- The open transactions that wrote events: any may hold a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE a.datid = here AND a.pid <> pg_catalog.pg_backend_pid()
           AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                          WHERE l.granted AND l.mode = 'RowExclusiveLock' AND l.database = here
                            AND l.relation = 'ordered_events.event_store'::pg_catalog.regclass)
         ORDER BY a.xact_start, a.pid;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.blocking_transactions(text) IS
    'Internal: pid and xid of the transactions of this database a blocked stream waits for';
CREATE FUNCTION ordered_events.blockers(stream text)
RETURNS TABLE (pid integer, xid xid, state text, xact_start timestamptz, query text)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT b.pid, b.xid, a.state, a.xact_start, a.query
  FROM ordered_events.blocking_transactions(stream) WITH ORDINALITY b
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = b.pid
 ORDER BY b.ordinality
$$;
COMMENT ON FUNCTION ordered_events.blockers(text) IS
    'The open transactions of this database a blocked stream is waiting for; state and query as pg_stat_activity shows them to the caller';

/*
 * What a role sees of events: those of the streams it may read ('read').
 * The monitoring views (stream_stats, key_status, ...) show every stream.
 */
CREATE VIEW ordered_events.accepted_events AS
SELECT a.stream, a.stream_id, a.lane,
       a.seq < coalesce(p.range_end, a.initial_sequence) AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = a.stream_id AND g.lane = a.lane AND NOT g.settled
              AND a.seq BETWEEN g.gap_start AND g.gap_end) AS is_released,
       a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at, a.last_event
  FROM (SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.key, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = ''
         WHERE d.sequencing = 'global' AND ordered_events.may_read_stream(d.stream)
        UNION ALL
        SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.lane, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event_store e ON e.stream_id = d.stream_id
         WHERE d.sequencing = 'per_key' AND ordered_events.may_read_stream(d.stream)) a
  LEFT JOIN ordered_events.progress p ON p.stream_id = a.stream_id AND p.lane = a.lane;
COMMENT ON VIEW ordered_events.accepted_events IS
    'Internal: every accepted event and whether it is released';
/*
 * released and pending: one branch per kind of stream, each ordered as the
 * contract says (global: stream, seq; per-key: stream, key, seq), so that a
 * read of one stream by seq (and key) merges ordered branches rather than
 * sorting the stream: "WHERE stream = 'a' AND seq > :last ORDER BY seq
 * LIMIT 100" is an index range of event_store_pkey.  read_stream_id() and
 * lane_range_end() return their last argument; their support function
 * (src/keyset.c) makes them constants of the stream named in the query, so
 * that the stream's id and the range bound are index conditions.
 */
CREATE FUNCTION ordered_events.keyset_support(internal)
RETURNS internal
LANGUAGE c STRICT
AS 'MODULE_PATHNAME', 'oe_keyset_support';
COMMENT ON FUNCTION ordered_events.keyset_support(internal) IS
    'Internal: planner support of read_stream_id() and lane_range_end()';
CREATE FUNCTION ordered_events.read_stream_id(stream text, sequencing text, known integer)
RETURNS integer
LANGUAGE c STABLE PARALLEL RESTRICTED
SUPPORT ordered_events.keyset_support
AS 'MODULE_PATHNAME', 'oe_read_stream_id';
COMMENT ON FUNCTION ordered_events.read_stream_id(text, text, integer) IS
    'Internal: known, or the id of a stream of that sequencing the role may read (the views'' keyset reads)';
CREATE FUNCTION ordered_events.lane_range_end(stream text, lane text, known bigint)
RETURNS bigint
LANGUAGE c STABLE PARALLEL RESTRICTED
SUPPORT ordered_events.keyset_support
AS 'MODULE_PATHNAME', 'oe_lane_range_end';
COMMENT ON FUNCTION ordered_events.lane_range_end(text, text, bigint) IS
    'Internal: known, or the first seq of a lane not released, of a stream the role may read (the views'' keyset reads)';
CREATE VIEW ordered_events.released AS
SELECT * FROM (
    SELECT d.stream, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at,
           (SELECT l.released_at FROM ordered_events.lane_release_log l
             WHERE l.stream_id = e.stream_id AND l.lane = e.lane AND l.seq_end > e.seq
             ORDER BY l.seq_end LIMIT 1) AS released_at
      FROM ordered_events.stream_def d
      JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = ''
      LEFT JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
     WHERE d.sequencing = 'global' AND ordered_events.may_read_stream(d.stream)
       AND e.stream_id = ordered_events.read_stream_id(d.stream, 'global', d.stream_id)
       AND e.seq < ordered_events.lane_range_end(d.stream, '',
                                                 coalesce(p.range_end, d.initial_sequence))
       AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = e.stream_id AND g.lane = e.lane AND NOT g.settled
              AND e.seq BETWEEN g.gap_start AND g.gap_end)
     ORDER BY d.stream, e.seq) global_streams
UNION ALL
SELECT * FROM (
    SELECT d.stream, e.seq, e.lane, e.payload, e.event_ts, e.alignment_ts, e.received_at,
           (SELECT l.released_at FROM ordered_events.lane_release_log l
             WHERE l.stream_id = e.stream_id AND l.lane = e.lane AND l.seq_end > e.seq
             ORDER BY l.seq_end LIMIT 1)
      FROM ordered_events.stream_def d
      JOIN ordered_events.event_store e ON e.stream_id = d.stream_id
      LEFT JOIN ordered_events.progress p ON p.stream_id = e.stream_id AND p.lane = e.lane
     WHERE d.sequencing = 'per_key' AND ordered_events.may_read_stream(d.stream)
       AND e.stream_id = ordered_events.read_stream_id(d.stream, 'per_key', d.stream_id)
       AND e.seq < ordered_events.lane_range_end(d.stream, e.lane,
                                                 coalesce(p.range_end, d.initial_sequence))
       AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = e.stream_id AND g.lane = e.lane AND NOT g.settled
              AND e.seq BETWEEN g.gap_start AND g.gap_end)
     ORDER BY d.stream, e.lane, e.seq) per_key_streams;
COMMENT ON VIEW ordered_events.released IS
    'The ordered view: every released event, by stream and seq (per-key streams: stream, key, seq)';
-- Pending: from each lane's range_end on (an index range per lane), and the
-- events of a skipped run not settled yet, below it.
CREATE VIEW ordered_events.pending AS
SELECT * FROM (
    SELECT * FROM (
        (SELECT d.stream, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at
           FROM ordered_events.stream_def d
           JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
           JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = ''
          WHERE d.sequencing = 'global' AND ordered_events.may_read_stream(d.stream)
            AND e.stream_id = ordered_events.read_stream_id(d.stream, 'global', d.stream_id)
            AND e.seq >= ordered_events.lane_range_end(d.stream, '', p.range_end)
          ORDER BY d.stream, e.seq)
        UNION ALL
        (SELECT d.stream, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at
           FROM ordered_events.gap_skips g
           JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
           JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
           JOIN ordered_events.event_store e
             ON e.stream_id = g.stream_id AND e.lane = g.lane
            AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
          WHERE NOT g.settled AND d.sequencing = 'global'
            AND ordered_events.may_read_stream(d.stream)
          ORDER BY d.stream, e.seq)) w
     ORDER BY w.stream, w.seq) global_streams
UNION ALL
SELECT * FROM (
    SELECT * FROM (
        (SELECT d.stream, e.seq, l.lane AS key, e.payload, e.event_ts, e.alignment_ts,
                e.received_at
           FROM ordered_events.stream_def d
           -- the lanes that may hold pending events (see 0.2)
           JOIN (SELECT p.stream_id, p.lane, p.range_end FROM ordered_events.progress p
                  WHERE p.gap_start IS NOT NULL OR p.lane = ''
                 UNION
                 SELECT a.stream_id, a.key, coalesce(p.range_end, s.initial_sequence)
                   FROM ordered_events.key_arrivals a
                   JOIN ordered_events.stream_def s ON s.stream_id = a.stream_id
                   LEFT JOIN ordered_events.progress p
                     ON p.stream_id = a.stream_id AND p.lane = a.key) l
             ON l.stream_id = d.stream_id
           JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = l.lane
          WHERE d.sequencing = 'per_key' AND ordered_events.may_read_stream(d.stream)
            AND e.stream_id = ordered_events.read_stream_id(d.stream, 'per_key', d.stream_id)
            AND e.seq >= ordered_events.lane_range_end(d.stream, l.lane, l.range_end)
          ORDER BY d.stream, l.lane, e.seq)
        UNION ALL
        (SELECT d.stream, e.seq, e.lane, e.payload, e.event_ts, e.alignment_ts, e.received_at
           FROM ordered_events.gap_skips g
           JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
           JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
           JOIN ordered_events.event_store e
             ON e.stream_id = g.stream_id AND e.lane = g.lane
            AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
          WHERE NOT g.settled AND d.sequencing = 'per_key'
            AND ordered_events.may_read_stream(d.stream)
          ORDER BY d.stream, e.lane, e.seq)) w
     ORDER BY w.stream, w.key, w.seq) per_key_streams;
COMMENT ON VIEW ordered_events.pending IS
    'Accepted events that wait for a lower seq';
CREATE VIEW ordered_events.ranges AS
SELECT d.stream, d.initial_sequence AS range_start, p.range_end, p.max_event_ts, p.updated_at
  FROM ordered_events.stream_def d
  JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 WHERE d.sequencing = 'global';
COMMENT ON VIEW ordered_events.ranges IS
    'The contiguous range [range_start, range_end) of each global stream';
GRANT SELECT ON ordered_events.ranges TO pg_monitor;
CREATE VIEW ordered_events.skipped_gaps AS
SELECT d.stream, CASE WHEN d.sequencing = 'per_key' THEN g.lane END AS key,
       g.gap_start, g.gap_end, g.reason, g.skipped_at
  FROM ordered_events.gap_skips g
  JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
 ORDER BY d.stream, 2, g.gap_start;
COMMENT ON VIEW ordered_events.skipped_gaps IS
    'The skip ledger: every run of seqs (inclusive bounds) a range passed without its events';
GRANT SELECT ON ordered_events.skipped_gaps TO pg_monitor;
