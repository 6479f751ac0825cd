/* ordered_events--0.1--0.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ordered_events UPDATE TO '0.2'" to load this file. \quit

/*
 * 0.2: one lane model.  A lane is one sequence: a global stream has one
 * (lane ''), a per-key stream one per key (lane = the key).  Every event is
 * in one table, every lane's progress in one table, every release step in
 * one log, all keyed by (stream_id, lane, ...).  The data of 0.1 moves into
 * them; the views read the same as before.
 */

CREATE TYPE ordered_events.sequencing AS ENUM ('global', 'per_key');
COMMENT ON TYPE ordered_events.sequencing IS
    'How a stream counts its seqs: one sequence (global) or one per key (per_key)';
CREATE TYPE ordered_events.gap_policy AS ENUM ('wait', 'timeout', 'fence');
COMMENT ON TYPE ordered_events.gap_policy IS
    'What a stream does with a gap: wait, skip after gap_timeout, or skip once proven dead (fence)';

/*
 * Events.  lane sits in the padding before seq: '' costs no byte for a
 * global stream's row, and neither does last_event.  An event is released
 * exactly when its seq is below its lane's range_end (see progress).
 */
CREATE TABLE ordered_events.event (
    stream_id integer NOT NULL,
    lane text COLLATE "C" NOT NULL,
    last_event boolean NOT NULL,
    seq bigint NOT NULL,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    CONSTRAINT event_pkey PRIMARY KEY (stream_id, lane, seq)
);
CREATE INDEX event_last_event_idx ON ordered_events.event (stream_id, lane) WHERE last_event;
COMMENT ON TABLE ordered_events.event IS
    'Internal: every accepted event, pending or released, by stream, lane and seq';

INSERT INTO ordered_events.event
    (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key, payload)
SELECT e.stream_id, '', false, e.seq, e.event_ts, e.alignment_ts, e.received_at, e.key, e.payload
  FROM ordered_events.events e
UNION ALL
SELECT e.stream_id, e.key, e.last_event, e.seq, e.event_ts, e.alignment_ts, e.received_at,
       e.key, e.payload
  FROM ordered_events.key_events e;

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
    max_event_ts timestamptz,       -- largest event_ts released
    last_event_seq bigint,          -- the lane is complete: its last event
    gap_start bigint,               -- first missing seq a release step saw,
    gap_end bigint,                 -- the run gap_start..gap_end was missing
    gap_first_seen timestamptz,     -- when a step first saw that run
    fence_seq bigint,               -- fence: the last seq allocated when read
    fence_xid xid8,                 -- fence: the next xid, read after fence_seq
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (stream_id, lane)
);
-- The lanes whose gap a timeout may skip, without visiting idle ones.
CREATE INDEX progress_gap_idx ON ordered_events.progress (stream_id, gap_first_seen)
    WHERE gap_start IS NOT NULL;
COMMENT ON TABLE ordered_events.progress IS
    'Internal: the contiguous range and counters of each lane';

INSERT INTO ordered_events.progress
    (stream_id, lane, range_end, released_count, max_event_ts, gap_start, gap_end,
     gap_first_seen, fence_seq, fence_xid, updated_at)
SELECT p.stream_id, '', p.range_end, p.released_count, p.max_event_ts, p.gap_start, p.gap_end,
       p.gap_first_seen, p.fence_seq, p.fence_xid, p.updated_at
  FROM ordered_events.stream_progress p
  JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id
 WHERE d.sequencing = 'global'
UNION ALL
SELECT k.stream_id, k.key, k.range_end, k.released_count, NULL, k.gap_start, k.gap_end,
       k.gap_first_seen, NULL, NULL, k.updated_at
  FROM ordered_events.key_progress k;
UPDATE ordered_events.progress p SET last_event_seq = k.last_event_seq
  FROM ordered_events.key_progress k
 WHERE k.stream_id = p.stream_id AND k.key = p.lane;

-- The release log: one row per release step of a lane.
CREATE TABLE ordered_events.lane_release_log (
    stream_id integer NOT NULL,
    lane text COLLATE "C" NOT NULL,
    seq_start bigint NOT NULL,
    seq_end bigint NOT NULL,
    released_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, lane, seq_end)
);
COMMENT ON TABLE ordered_events.lane_release_log IS
    'Internal: the release steps of each lane, when [seq_start, seq_end) was released';
INSERT INTO ordered_events.lane_release_log (stream_id, lane, seq_start, seq_end, released_at)
SELECT l.stream_id, '', l.seq_start, l.seq_end, l.released_at FROM ordered_events.release_log l
UNION ALL
SELECT l.stream_id, l.key, l.seq_start, l.seq_end, l.released_at FROM ordered_events.key_release_log l;

-- The skip ledger by lane ('' for a global stream) instead of a nullable key.
ALTER TABLE ordered_events.gap_skips ADD COLUMN lane text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE ordered_events.gap_skips ALTER COLUMN lane DROP DEFAULT;
UPDATE ordered_events.gap_skips SET lane = key WHERE key IS NOT NULL;
CREATE INDEX gap_skips_lane_idx ON ordered_events.gap_skips (stream_id, lane, gap_end);

-- Enum columns for the stream's kind and policy (added, then swapped in).
ALTER TABLE ordered_events.stream_def
    ADD COLUMN sequencing_enum ordered_events.sequencing,
    ADD COLUMN gap_policy_enum ordered_events.gap_policy;
UPDATE ordered_events.stream_def
   SET sequencing_enum = sequencing::ordered_events.sequencing,
       gap_policy_enum = gap_policy::ordered_events.gap_policy;

SELECT pg_catalog.pg_extension_config_dump('ordered_events.event', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.progress', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lane_release_log', '');

/*
 * Views, over the new tables.  CREATE OR REPLACE keeps their grants; their
 * columns stay as they were.
 */

-- Every accepted event and whether it is released: its seq is below its
-- lane's range_end, and it did not commit late into a skipped run.  The
-- events are read in two shapes, so that a reader's conditions reach the
-- primary key (stream_id, lane, seq): a global stream's lane is '' (a seq
-- window is an index range), a per-key stream's lane is the key (a key's
-- seq window too).
CREATE OR REPLACE VIEW ordered_events.accepted_events AS
SELECT a.stream, a.stream_id, a.lane,
       a.seq < coalesce(p.range_end, a.initial_sequence) AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = a.stream_id AND g.lane = a.lane AND NOT g.settled
              AND a.seq BETWEEN g.gap_start AND g.gap_end) AS is_released,
       a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at, a.last_event
  FROM (SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.key, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event e ON e.stream_id = d.stream_id AND e.lane = ''
         WHERE d.sequencing_enum = 'global'
        UNION ALL
        SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.lane, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event e ON e.stream_id = d.stream_id
         WHERE d.sequencing_enum = 'per_key') a
  LEFT JOIN ordered_events.progress p ON p.stream_id = a.stream_id AND p.lane = a.lane;

CREATE OR REPLACE VIEW ordered_events.released AS
SELECT a.stream, a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at,
       (SELECT l.released_at FROM ordered_events.lane_release_log l
         WHERE l.stream_id = a.stream_id AND l.lane = a.lane AND l.seq_end > a.seq
         ORDER BY l.seq_end LIMIT 1) AS released_at
  FROM ordered_events.accepted_events a
 WHERE a.is_released
 ORDER BY a.stream, a.lane, a.seq;

CREATE OR REPLACE VIEW ordered_events.ranges AS
SELECT d.stream, d.initial_sequence AS range_start, p.range_end, p.max_event_ts, p.updated_at
  FROM ordered_events.stream_def d
  JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 WHERE d.sequencing_enum = 'global';

CREATE OR REPLACE VIEW ordered_events.streams AS
SELECT d.stream, d.sequencing_enum::text AS sequencing, d.initial_sequence,
       d.gap_policy_enum::text AS gap_policy, d.gap_timeout, d.max_release_batch, d.created_at
  FROM ordered_events.stream_def d;

CREATE OR REPLACE VIEW ordered_events.skipped_gaps AS
SELECT d.stream, CASE WHEN d.sequencing_enum = 'per_key' THEN g.lane END AS key,
       g.gap_start, g.gap_end, g.reason, g.skipped_at
  FROM ordered_events.gap_skips g
  JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
 ORDER BY d.stream, 2, g.gap_start;

/*
 * stream_stats: the skip ledger can hold more than 2^63 seqs (a run from
 * -9223372036854775808, or many keys); skipped_count stops at the largest
 * bigint instead of failing for every stream.
 */
CREATE OR REPLACE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing_enum = 'global' THEN p.range_end END AS range_end,
       mx.max_seen_seq,
       pe.pending_count,
       rel.released_count,
       un.unprocessed_count,
       pe.oldest_pending_at,
       fg.first_gap_start,
       fg.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 CROSS JOIN LATERAL (
        -- a global stream's highest seq is the end of its one lane
        SELECT CASE WHEN d.sequencing_enum = 'global'
                    THEN (SELECT max(e.seq) FROM ordered_events.event e
                           WHERE e.stream_id = d.stream_id AND e.lane = '')
                    ELSE (SELECT max(e.seq) FROM ordered_events.event e
                           WHERE e.stream_id = d.stream_id)
               END AS max_seen_seq) mx
 CROSS JOIN LATERAL (
        SELECT count(*) AS pending_count, min(a.received_at) AS oldest_pending_at
          FROM ordered_events.accepted_events a
         WHERE a.stream_id = d.stream_id AND NOT a.is_released) pe
 CROSS JOIN LATERAL (
        SELECT coalesce(sum(l.released_count), 0)::bigint AS released_count
          FROM ordered_events.progress l WHERE l.stream_id = d.stream_id) rel
 LEFT JOIN LATERAL (
        SELECT g.gap_start AS first_gap_start, g.first_seen AS first_gap_since
          FROM ordered_events.gaps(d.stream) g
         ORDER BY g.first_seen NULLS LAST, g.gap_start
         LIMIT 1) fg ON true
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u WHERE u.stream = d.stream) un
 CROSS JOIN LATERAL (
        SELECT least(coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0),
                     9223372036854775807)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;

-- Now nothing reads the 0.1 tables and columns: drop them (out of the
-- extension first, which also takes them off its list of dumped tables),
-- and swap the enums in.
ALTER EXTENSION ordered_events DROP TABLE ordered_events.events;
ALTER EXTENSION ordered_events DROP TABLE ordered_events.key_events;
ALTER EXTENSION ordered_events DROP TABLE ordered_events.key_progress;
ALTER EXTENSION ordered_events DROP TABLE ordered_events.release_log;
ALTER EXTENSION ordered_events DROP TABLE ordered_events.key_release_log;
ALTER EXTENSION ordered_events DROP TABLE ordered_events.stream_progress;
DROP TABLE ordered_events.events, ordered_events.key_events, ordered_events.key_progress,
           ordered_events.release_log, ordered_events.key_release_log,
           ordered_events.stream_progress;
DROP INDEX ordered_events.gap_skips_lookup_idx;
ALTER TABLE ordered_events.gap_skips DROP COLUMN key;
ALTER TABLE ordered_events.stream_def DROP COLUMN sequencing, DROP COLUMN gap_policy;
ALTER TABLE ordered_events.stream_def RENAME COLUMN sequencing_enum TO sequencing;
ALTER TABLE ordered_events.stream_def RENAME COLUMN gap_policy_enum TO gap_policy;
ALTER TABLE ordered_events.stream_def
    ALTER COLUMN sequencing SET NOT NULL,
    ALTER COLUMN gap_policy SET NOT NULL;

/*
 * Functions.  Changes to stream_def or the skip ledger reach every
 * backend's stream cache through this trigger, which now invalidates the
 * table it fires on.
 */

-- The stream's id, or the one error for an unknown stream (src/catalog.c).
CREATE FUNCTION ordered_events.stream_id(stream text)
RETURNS integer
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_stream_id';
COMMENT ON FUNCTION ordered_events.stream_id(text) IS
    'Internal: the id of a stream, or the error for an unknown stream';

CREATE OR REPLACE FUNCTION ordered_events.stream_or_error(stream text, for_update boolean DEFAULT false)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
    id integer;
BEGIN
    id := ordered_events.stream_id(stream);     -- or its error, NULL included
    IF for_update THEN
        SELECT * INTO d FROM ordered_events.stream_def s WHERE s.stream_id = id FOR UPDATE;
    ELSE
        SELECT * INTO d FROM ordered_events.stream_def s WHERE s.stream_id = id;
    END IF;
    IF NOT FOUND THEN
        PERFORM ordered_events.stream_id(stream);   -- dropped while we waited: its error
    END IF;
    RETURN d;
END;
$$;

CREATE OR REPLACE FUNCTION ordered_events.create_stream(
    stream text,
    sequencing text DEFAULT 'global',
    initial_sequence bigint DEFAULT 1,
    gap_policy text DEFAULT 'wait',
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT 10000)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id integer;
BEGIN
    IF stream IS NULL OR stream !~ '^[a-z_][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'invalid stream name: %', coalesce(quote_literal(stream), 'NULL')
            USING ERRCODE = 'invalid_name',
                  HINT = 'A stream name has 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit.';
    END IF;
    IF sequencing IS NULL OR sequencing NOT IN ('global', 'per_key') THEN
        PERFORM ordered_events.invalid_option('sequencing', sequencing,
            'Use ''global'' (one sequence for the whole stream) or ''per_key'' (a sequence for each key).');
    END IF;
    IF initial_sequence IS NULL OR initial_sequence = 9223372036854775807 THEN
        PERFORM ordered_events.invalid_option('initial_sequence', initial_sequence::text,
            'Use a bigint below 9223372036854775807; the default is 1.');
    END IF;
    PERFORM ordered_events.check_release_options(sequencing, gap_policy, gap_timeout,
                                                 max_release_batch);

    BEGIN
        INSERT INTO ordered_events.stream_def AS d
            (stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch)
        VALUES (create_stream.stream, create_stream.sequencing::ordered_events.sequencing,
                create_stream.initial_sequence,
                create_stream.gap_policy::ordered_events.gap_policy, create_stream.gap_timeout,
                create_stream.max_release_batch)
        RETURNING d.stream_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'stream "%" already exists', stream
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with ordered_events.alter_stream(), or drop it first with ordered_events.drop_stream().';
    END;

    -- A global stream's one lane exists from the start (ranges shows it).
    IF create_stream.sequencing = 'global' THEN
        INSERT INTO ordered_events.progress (stream_id, lane, range_end)
        VALUES (new_id, '', create_stream.initial_sequence);
    END IF;

    -- append() takes the seqs of a fence stream from here; CACHE 1 so that
    -- the last allocated value is what every backend reads.
    IF create_stream.gap_policy = 'fence' THEN
        EXECUTE format('CREATE SEQUENCE ordered_events.%I AS bigint MINVALUE %s START %s CACHE 1',
                       format('fence_seq_%s', new_id), create_stream.initial_sequence,
                       create_stream.initial_sequence);
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION ordered_events.alter_stream(
    stream text,
    gap_policy text DEFAULT NULL,
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
    new_policy text := coalesce(alter_stream.gap_policy, d.gap_policy::text);
    new_timeout interval := CASE WHEN new_policy = 'timeout'
                                 THEN coalesce(alter_stream.gap_timeout, d.gap_timeout)
                                 ELSE alter_stream.gap_timeout END;
    new_batch integer := coalesce(alter_stream.max_release_batch, d.max_release_batch);
BEGIN
    PERFORM ordered_events.check_release_options(d.sequencing::text, new_policy, new_timeout,
                                                 new_batch);
    IF (new_policy = 'fence') <> (d.gap_policy = 'fence') THEN
        RAISE EXCEPTION 'gap_policy ''fence'' can only be chosen when the stream is created'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A fence stream is fed by append() and other streams by ingest(); create a new stream instead.';
    END IF;
    UPDATE ordered_events.stream_def s
       SET gap_policy = new_policy::ordered_events.gap_policy,
           gap_timeout = new_timeout,
           max_release_batch = new_batch
     WHERE s.stream_id = d.stream_id;
END;
$$;

CREATE OR REPLACE FUNCTION ordered_events.drop_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    /*
     * Wait for every transaction that may be writing events, so that none
     * can add an event to the stream after its rows are gone; then for a
     * release step in progress (it holds the stream_def row).
     */
    LOCK TABLE ordered_events.event IN SHARE ROW EXCLUSIVE MODE;
    d := ordered_events.stream_or_error(stream, true);
    IF d.gap_policy = 'fence' THEN
        EXECUTE format('DROP SEQUENCE ordered_events.%I', format('fence_seq_%s', d.stream_id));
    END IF;
    DELETE FROM ordered_events.event e WHERE e.stream_id = d.stream_id;
    DELETE FROM ordered_events.lane_release_log l WHERE l.stream_id = d.stream_id;
    DELETE FROM ordered_events.key_arrivals a WHERE a.stream_id = d.stream_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.stream = d.stream;
    DELETE FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id;
    DELETE FROM ordered_events.stream_def s WHERE s.stream_id = d.stream_id;
END;
$$;

-- gaps(): the missing runs, found by the same walk as releasing.
CREATE OR REPLACE FUNCTION ordered_events.gaps(stream text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint, first_seen timestamptz)
LANGUAGE c STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'oe_gaps';

-- The streams a worker cycle should step: something to release, a gap no
-- step has seen, a policy that may skip, or late events to settle.  The
-- stream whose oldest such thing waited longest comes first.  The clock is
-- clock_timestamp(), as in the release step.
CREATE OR REPLACE FUNCTION ordered_events.streams_with_work()
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
                OR d.gap_policy = 'fence'
                OR p.gap_first_seen + d.gap_timeout <= pg_catalog.clock_timestamp() AS needed,
                e.received_at AS since
           FROM ordered_events.event e
          WHERE d.sequencing = 'global'
            AND e.stream_id = d.stream_id AND e.lane = '' AND e.seq >= p.range_end
          ORDER BY e.seq LIMIT 1)
        UNION ALL
        (SELECT true, a.arrived_at
           FROM ordered_events.key_arrivals a
          WHERE d.sequencing = 'per_key' AND a.stream_id = d.stream_id
          ORDER BY a.arrived_at LIMIT 1)
        UNION ALL
        (SELECT true, k.gap_first_seen
           FROM ordered_events.progress k
          WHERE d.gap_policy = 'timeout' AND d.sequencing = 'per_key'
            AND k.stream_id = d.stream_id AND k.gap_start IS NOT NULL
            AND k.gap_first_seen <= pg_catalog.clock_timestamp() - d.gap_timeout
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

/*
 * Privileges.  The C functions run their own queries as the owner of the
 * tables (src/internal_query.c): EXECUTE on ingest() or append() is all a
 * producer needs, and the INSERT on unprocessed that 0.1 told producers to
 * have would let them forge dead letters.  Take it back from every role.
 * Stream management runs as the owner as well (SECURITY DEFINER above).
 */
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                             ELSE pg_catalog.quote_ident(r.rolname) END
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE c.oid = 'ordered_events.unprocessed'::pg_catalog.regclass
           AND a.grantee <> c.relowner
           AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE pg_catalog.format(
            'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ordered_events.unprocessed FROM %s',
            grantee);
    END LOOP;
END;
$$;

-- Trigger functions are for the extension's own triggers; the worker's
-- state is for the roles granted it (see README.md, "Security").
REVOKE EXECUTE ON FUNCTION
    ordered_events.stream_def_changed(),
    ordered_events.inbox_insert(),
    ordered_events.worker_status_internal(),
    ordered_events.stream_id(text)
FROM PUBLIC;

/*
 * blockers() showed every session's query text, of every database, to any
 * role: it ran as its owner.  The part that needs the owner's rights (the
 * stream's fence and whether it has gaps) moves to blocking_transactions(),
 * which returns the blocking transactions of this database, pid and xid
 * only (pg_locks shows as much to everyone); blockers() runs as its caller
 * and takes state, start and query from pg_stat_activity, which shows them
 * to the same role and to pg_read_all_stats only.
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
        -- The transactions older than the fence: any of them may still
        -- commit a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE fence IS NOT NULL AND a.datid = here
           AND a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
           AND pg_catalog.age(a.backend_xid) > pg_catalog.age(pg_catalog.xid(fence))
         ORDER BY a.xact_start, a.pid;
    ELSE
        -- The open transactions that wrote events: any may hold a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE a.datid = here AND a.pid <> pg_catalog.pg_backend_pid()
           AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                          WHERE l.granted AND l.mode = 'RowExclusiveLock' AND l.database = here
                            AND l.relation = 'ordered_events.event'::pg_catalog.regclass)
         ORDER BY a.xact_start, a.pid;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.blocking_transactions(text) IS
    'Internal: pid and xid of the transactions of this database a blocked stream waits for';

CREATE OR REPLACE FUNCTION ordered_events.blockers(stream text)
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
