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
CREATE TABLE ordered_events.event_store (
    stream_id integer NOT NULL,
    lane text COLLATE "C" NOT NULL,
    last_event boolean NOT NULL,
    seq bigint NOT NULL,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    arrival bigint NOT NULL,        -- arrival order: see arrival_seq
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    CONSTRAINT event_store_pkey PRIMARY KEY (stream_id, lane, seq)
);
CREATE INDEX event_store_last_event_idx ON ordered_events.event_store (stream_id, lane) WHERE last_event;
COMMENT ON TABLE ordered_events.event_store IS
    'Internal: every accepted event, pending or released, by stream, lane and seq';

/*
 * The order in which the extension accepted events, across the streams of
 * the database: consumers break ties between streams by it.  Each value
 * stands for a block of 1024 arrival numbers (src/arrival.c).
 */
CREATE SEQUENCE ordered_events.arrival_seq AS bigint CACHE 1;
COMMENT ON SEQUENCE ordered_events.arrival_seq IS
    'Internal: the arrival order of accepted events';

-- 0.1 kept no arrival order: its events arrived in received_at order.
INSERT INTO ordered_events.event_store
    (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, arrival, key, payload)
SELECT a.stream_id, a.lane, a.last_event, a.seq, a.event_ts, a.alignment_ts, a.received_at,
       pg_catalog.row_number() OVER (ORDER BY a.received_at, a.stream_id, a.lane, a.seq),
       a.key, a.payload
  FROM (SELECT e.stream_id, ''::text AS lane, false AS last_event, e.seq, e.event_ts,
               e.alignment_ts, e.received_at, e.key, e.payload
          FROM ordered_events.events e
        UNION ALL
        SELECT e.stream_id, e.key, e.last_event, e.seq, e.event_ts, e.alignment_ts,
               e.received_at, e.key, e.payload
          FROM ordered_events.key_events e) a;
SELECT pg_catalog.setval('ordered_events.arrival_seq',
                         coalesce((SELECT pg_catalog.max(e.arrival) FROM ordered_events.event_store e), 0)
                         / 1024 + 1, false);

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

-- The highest released seq of each lane: below range_end, not a late event
-- in a skipped run (0.1 kept none, so no run is settled yet that matters).
UPDATE ordered_events.progress p
   SET last_released_seq = (
       SELECT e.seq FROM ordered_events.event_store e
        WHERE e.stream_id = p.stream_id AND e.lane = p.lane AND e.seq < p.range_end
          AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                           WHERE g.stream_id = e.stream_id
                             AND coalesce(g.key, '') = e.lane AND NOT g.settled
                             AND e.seq BETWEEN g.gap_start AND g.gap_end)
        ORDER BY e.seq DESC LIMIT 1);

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

-- 0.1 logged no steps: its log rows are delivered in the order of their time.
INSERT INTO ordered_events.lane_release_log
    (stream_id, lane, seq_start, seq_end, released_at, delivery)
SELECT l.stream_id, l.lane, l.seq_start, l.seq_end, l.released_at,
       pg_catalog.row_number() OVER (PARTITION BY l.stream_id
                                     ORDER BY l.released_at, l.lane, l.seq_start)
  FROM (SELECT r.stream_id, ''::text AS lane, r.seq_start, r.seq_end, r.released_at
          FROM ordered_events.release_log r
        UNION ALL
        SELECT r.stream_id, r.key, r.seq_start, r.seq_end, r.released_at
          FROM ordered_events.key_release_log r) l;

-- The skip ledger by lane ('' for a global stream) instead of a nullable key.
-- Dead letters of handlers name their consumer (NULL: rejected at ingest or
-- by a release step), so that two handlers' letters for one event stay apart.
ALTER TABLE ordered_events.unprocessed ADD COLUMN consumer text;

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

SELECT pg_catalog.pg_extension_config_dump('ordered_events.event_store', '');
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
          JOIN ordered_events.event_store e ON e.stream_id = d.stream_id AND e.lane = ''
         WHERE d.sequencing_enum = 'global'
        UNION ALL
        SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.lane, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event_store e ON e.stream_id = d.stream_id
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
 * stream_stats leaves the 0.1 tables, so that they can be dropped: a
 * placeholder of the same columns, replaced by its real form at the end of
 * this script (CREATE OR REPLACE keeps its grants; nobody sees it between).
 */
CREATE OR REPLACE VIEW ordered_events.stream_stats AS
SELECT d.stream, NULL::bigint AS range_end, NULL::bigint AS max_seen_seq,
       NULL::bigint AS pending_count, NULL::bigint AS released_count,
       NULL::bigint AS unprocessed_count, NULL::timestamptz AS oldest_pending_at,
       NULL::bigint AS first_gap_start, NULL::timestamptz AS first_gap_since,
       NULL::bigint AS skipped_count
  FROM ordered_events.stream_def d;

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
 * Retention (README.md, "Retention"): how long released events and dead
 * letters are kept, NULL for ever.  retains_events stays true once a
 * stream had a retention: its released events may be gone, so ingest
 * finds a retried old seq by the lane's range_end (src/ingest.c).
 */
ALTER TABLE ordered_events.stream_def
    ADD COLUMN retention interval,
    ADD COLUMN dead_letter_retention interval,
    ADD COLUMN retains_events boolean NOT NULL DEFAULT false;

-- A shard's part of a global stream spread over several servers: a router
-- sets its range (src/shard.c, README.md "Sharding").
ALTER TABLE ordered_events.stream_def
    ADD COLUMN sharded boolean NOT NULL DEFAULT false;

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

-- What each stream's retentions deleted (metrics counts it).
CREATE TABLE ordered_events.deleted_totals (
    stream_id integer PRIMARY KEY
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    events bigint NOT NULL DEFAULT 0,
    dead_letters bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE ordered_events.deleted_totals IS
    'Internal: how many released events and dead letters of each stream its retentions deleted';

-- Dead letters by age, for their retention.
CREATE INDEX unprocessed_stream_received_idx
    ON ordered_events.unprocessed (stream, received_at) WHERE consumer IS NULL;

SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_counters', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.deleted_totals', '');

/*
 * Functions.  Changes to stream_def or the skip ledger reach every
 * backend's stream cache through this trigger, which now invalidates the
 * table it fires on.
 */

-- The stream's id, or the one error for an unknown stream (src/catalog.c).
CREATE FUNCTION ordered_events.stream_id(stream text)
RETURNS integer
LANGUAGE c STABLE PARALLEL RESTRICTED    -- reads with the latest snapshot
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

/*
 * create_stream() and alter_stream() take the retention options: a new
 * signature, so the functions are made again, with the grants of the old.
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

-- A retention is an interval of at least 0 (NULL: keep for ever).
CREATE FUNCTION ordered_events.check_retention(option text, retention interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF retention < interval '0' THEN
        PERFORM ordered_events.invalid_option(option, retention::text,
            'Use an interval of at least 0: how long to keep what was released (or rejected); NULL keeps it for ever.');
    END IF;
END;
$$;

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

ALTER FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer)
    RENAME TO create_stream_0_1;
CREATE FUNCTION ordered_events.create_stream(
    stream text,
    sequencing text DEFAULT 'global',
    initial_sequence bigint DEFAULT 1,
    gap_policy text DEFAULT 'wait',
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT 10000,
    retention interval DEFAULT NULL,
    dead_letter_retention interval DEFAULT NULL)
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
    PERFORM ordered_events.check_retention('retention', retention);
    PERFORM ordered_events.check_retention('dead_letter_retention', dead_letter_retention);

    BEGIN
        INSERT INTO ordered_events.stream_def AS d
            (stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
             retention, dead_letter_retention)
        VALUES (create_stream.stream, create_stream.sequencing::ordered_events.sequencing,
                create_stream.initial_sequence,
                create_stream.gap_policy::ordered_events.gap_policy, create_stream.gap_timeout,
                create_stream.max_release_batch, create_stream.retention,
                create_stream.dead_letter_retention)
        RETURNING d.stream_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'stream "%" already exists', stream
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with ordered_events.alter_stream(), or drop it first with ordered_events.drop_stream().';
    END;
    IF create_stream.retention IS NOT NULL THEN
        PERFORM ordered_events.start_retaining(new_id);
    END IF;

    -- What consumers' pools are measured against (src/delivery.c).
    INSERT INTO ordered_events.release_totals (stream_id, partitions, partition)
    VALUES (new_id, 1, 0);

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
COMMENT ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer,
                                                 interval, interval) IS
    'Create a stream: an independent sequence space with its own range, release budget and retention';
SELECT ordered_events.carry_grants(
    'ordered_events.create_stream_0_1(text, text, bigint, text, interval, integer)',
    'ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval)');
DROP FUNCTION ordered_events.create_stream_0_1(text, text, bigint, text, interval, integer);

ALTER FUNCTION ordered_events.alter_stream(text, text, interval, integer)
    RENAME TO alter_stream_0_1;
CREATE FUNCTION ordered_events.alter_stream(
    stream text,
    gap_policy text DEFAULT NULL,
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT NULL,
    retention interval DEFAULT NULL,
    dead_letter_retention interval DEFAULT NULL,
    keep_forever boolean DEFAULT false)
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
    PERFORM ordered_events.check_retention('retention', retention);
    PERFORM ordered_events.check_retention('dead_letter_retention', dead_letter_retention);
    IF keep_forever AND (retention IS NOT NULL OR dead_letter_retention IS NOT NULL) THEN
        PERFORM ordered_events.invalid_option('keep_forever', keep_forever::text,
            'keep_forever => true sets both retentions to NULL (keep everything); do not pass a retention with it.');
    END IF;
    IF d.sharded AND new_policy <> 'wait' THEN
        RAISE EXCEPTION 'stream "%" is sharded', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Its router applies the gap policy to the global range: change it there.';
    END IF;
    IF (new_policy = 'fence') <> (d.gap_policy = 'fence') THEN
        RAISE EXCEPTION 'gap_policy ''fence'' can only be chosen when the stream is created'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A fence stream is fed by append() and other streams by ingest(); create a new stream instead.';
    END IF;
    IF alter_stream.retention IS NOT NULL AND NOT d.retains_events THEN
        PERFORM ordered_events.start_retaining(d.stream_id);
    END IF;
    UPDATE ordered_events.stream_def s
       SET gap_policy = new_policy::ordered_events.gap_policy,
           gap_timeout = new_timeout,
           max_release_batch = new_batch,
           retention = CASE WHEN keep_forever THEN NULL
                            ELSE coalesce(alter_stream.retention, d.retention) END,
           dead_letter_retention = CASE WHEN keep_forever THEN NULL
                                        ELSE coalesce(alter_stream.dead_letter_retention,
                                                      d.dead_letter_retention) END
     WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.alter_stream(text, text, interval, integer, interval,
                                                interval, boolean) IS
    'Change the gap policy, release batch or retentions of a stream; NULL keeps the value';
SELECT ordered_events.carry_grants(
    'ordered_events.alter_stream_0_1(text, text, interval, integer)',
    'ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean)');
DROP FUNCTION ordered_events.alter_stream_0_1(text, text, interval, integer);
DROP FUNCTION ordered_events.carry_grants(regprocedure, regprocedure);

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
    LOCK TABLE ordered_events.event_store IN SHARE ROW EXCLUSIVE MODE;
    d := ordered_events.stream_or_error(stream, true);
    IF EXISTS (SELECT FROM ordered_events.consumer_def c WHERE c.output_stream_id = d.stream_id) THEN
        RAISE EXCEPTION 'stream "%" is the output stream of consumer "%"', stream,
              (SELECT min(c.consumer) FROM ordered_events.consumer_def c
                WHERE c.output_stream_id = d.stream_id)
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Drop the consumer first: its handler appends to this stream.';
    END IF;
    IF d.gap_policy = 'fence' THEN
        EXECUTE format('DROP SEQUENCE ordered_events.%I', format('fence_seq_%s', d.stream_id));
    END IF;
    DELETE FROM ordered_events.event_store e WHERE e.stream_id = d.stream_id;
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
           FROM ordered_events.event_store e
          WHERE d.sequencing = 'global' AND NOT d.sharded
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
                            AND l.relation = 'ordered_events.event_store'::pg_catalog.regclass)
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

/*
 * Consumers: named readers of the released events of their streams, in one
 * merged sequence (README.md, "Consuming"; the read is src/consumer_read.c,
 * what release steps record for it src/delivery.c).
 */

-- An event's lag, event_ts - alignment_ts, in microseconds, exact; an
-- event with an infinite time has none.  src/delivery.c computes the same.
CREATE FUNCTION ordered_events.lag_us(event_ts timestamptz, alignment_ts timestamptz)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN isfinite(event_ts) AND isfinite(alignment_ts)
            THEN (extract(epoch FROM event_ts) - extract(epoch FROM alignment_ts)) * 1000000
            ELSE 0 END
$$;
COMMENT ON FUNCTION ordered_events.lag_us(timestamptz, timestamptz) IS
    'Internal: event_ts - alignment_ts in microseconds (0 if either is infinite)';

CREATE FUNCTION ordered_events.key_partition(key text, partitions integer)
RETURNS integer
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_key_partition';
COMMENT ON FUNCTION ordered_events.key_partition(text, integer) IS
    'The partition, 0 .. partitions - 1, of a key: (hashtextextended(key, 0) & 9223372036854775807) % partitions';

/*
 * What each stream has released, per partition of the partition counts its
 * consumers use (partitions 1 always): a consumer's pool is what is here
 * minus what it took out, so neither a read nor the consumers view counts
 * the pool.  Release steps add to it (src/delivery.c).
 */
CREATE TABLE ordered_events.release_totals (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    partitions integer NOT NULL,
    partition integer NOT NULL,
    released_count bigint NOT NULL DEFAULT 0,
    lag_sum numeric NOT NULL DEFAULT 0,     -- of lag_us()
    PRIMARY KEY (stream_id, partitions, partition)
);
COMMENT ON TABLE ordered_events.release_totals IS
    'Internal: count and summed lag of the released events of each stream, by partition';

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

-- Fill release_totals for a stream and a partition count, from its released events.
CREATE FUNCTION ordered_events.count_released(stream_id integer, partitions integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO ordered_events.release_totals (stream_id, partitions, partition, released_count, lag_sum)
SELECT count_released.stream_id, count_released.partitions, p.p,
       coalesce(r.released_count, 0), coalesce(r.lag_sum, 0)
  FROM generate_series(0, count_released.partitions - 1) p(p)
  LEFT JOIN ordered_events.kept_released(count_released.stream_id, count_released.partitions) r
    ON r.partition = p.p
$$;
COMMENT ON FUNCTION ordered_events.count_released(integer, integer) IS
    'Internal: fill release_totals for a stream and a partition count';

SELECT ordered_events.count_released(d.stream_id, 1) FROM ordered_events.stream_def d;

CREATE SEQUENCE ordered_events.consumer_id_seq AS integer;
/*
 * A consumer with a handler is read by the extension (src/handler.c): the
 * handler runs as "owner", the role that created the consumer.  The
 * handler is kept as its signature's text and the roles as regroles, so
 * that a dump, a restore and pg_upgrade keep them by name.  The handler
 * function's owner at creation (handler_owner) must still own it when it
 * runs: a function of that signature created by another role, after the
 * first was dropped, never runs with the consumer owner's rights.
 */
CREATE TABLE ordered_events.consumer_def (
    consumer_id integer PRIMARY KEY
        DEFAULT pg_catalog.nextval('ordered_events.consumer_id_seq'),
    consumer text NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    handler text,
    owner regrole,
    handler_owner regrole,
    output_stream_id integer REFERENCES ordered_events.stream_def,
    alignment text NOT NULL DEFAULT 'inherit' CHECK (alignment IN ('inherit', 'processing')),
    CHECK ((handler IS NULL) = (owner IS NULL) AND (handler IS NULL) = (handler_owner IS NULL)),
    CHECK (handler IS NOT NULL OR output_stream_id IS NULL)
);
CREATE INDEX consumer_def_output_idx ON ordered_events.consumer_def (output_stream_id);
ALTER SEQUENCE ordered_events.consumer_id_seq OWNED BY ordered_events.consumer_def.consumer_id;
COMMENT ON TABLE ordered_events.consumer_def IS
    'Internal: one row per consumer';

/*
 * A consumer's position in a stream, per partition.  The position is the
 * last event taken: (read_delivery, read_seq), its release log row and
 * seq; what follows in delivery order is unread.  taken_* is what left
 * the pool (events taken, and for start 'now' those released before).
 * The pool is what committed reads left, so the transaction that read
 * last (read_xid) keeps in base_* the position and taken_* it started
 * from.  Reading locks the rows of its (consumer, partition).
 */
CREATE TABLE ordered_events.subscription (
    consumer_id integer NOT NULL
        REFERENCES ordered_events.consumer_def ON DELETE CASCADE,
    partition integer NOT NULL,
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    delay interval NOT NULL,
    read_delivery bigint NOT NULL,
    read_seq bigint NOT NULL,
    taken_count bigint NOT NULL,
    taken_lag numeric NOT NULL,
    consumed_count bigint NOT NULL DEFAULT 0,
    read_xid xid8,
    base_delivery bigint,
    base_seq bigint,
    base_count bigint,
    base_lag numeric,
    last_read_at timestamptz,
    subscribed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer_id, partition, stream_id)
);
CREATE INDEX subscription_stream_idx ON ordered_events.subscription (stream_id);
COMMENT ON TABLE ordered_events.subscription IS
    'Internal: the delay and position of a consumer in a stream, per partition';

/*
 * Whether this transaction read the subscription row: its read_xid is this
 * transaction and this transaction wrote the row's version (xmin, a
 * subtransaction's too).  The second half keeps a read_xid from another
 * cluster (a restored dump) from ever being taken for this transaction's.
 */
CREATE FUNCTION ordered_events.read_here(read_xid xid8, row_xmin xid)
RETURNS boolean
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'oe_read_here';
COMMENT ON FUNCTION ordered_events.read_here(xid8, xid) IS
    'Internal: whether the current transaction read a subscription row';

-- The position and taken_* as committed reads left them (see subscription).
-- The view consumers calls it as its reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.committed_position(s ordered_events.subscription, row_xmin xid)
RETURNS TABLE (read_delivery bigint, read_seq bigint, taken_count bigint, taken_lag numeric)
LANGUAGE sql VOLATILE
ROWS 1      -- one row; the default 1000 made the consumers view cost enough for JIT
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN mine THEN s.base_delivery ELSE s.read_delivery END,
       CASE WHEN mine THEN s.base_seq ELSE s.read_seq END,
       CASE WHEN mine THEN s.base_count ELSE s.taken_count END,
       CASE WHEN mine THEN s.base_lag ELSE s.taken_lag END
  FROM (SELECT coalesce(ordered_events.read_here(s.read_xid, row_xmin), false) AS mine) x
$$;
COMMENT ON FUNCTION ordered_events.committed_position(ordered_events.subscription, xid) IS
    'Internal: a subscription''s position as committed reads left it';

SELECT pg_catalog.pg_extension_config_dump('ordered_events.arrival_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.release_totals', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.consumer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.consumer_def', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.subscription', '');

-- The consumer's row, or the one error for an unknown consumer.
CREATE FUNCTION ordered_events.consumer_or_error(consumer text)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    SELECT * INTO c FROM ordered_events.consumer_def d WHERE d.consumer = consumer_or_error.consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" does not exist', consumer
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with ordered_events.create_consumer(); the view ordered_events.consumers lists the consumers.';
    END IF;
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.consumer_or_error(text) IS
    'Internal: a consumer''s row, or the error for an unknown consumer';

-- The error for a NULL argument of a consumer function.
CREATE FUNCTION ordered_events.check_not_null(argument text, is_null boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF is_null THEN
        RAISE EXCEPTION '% must not be null', argument
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass a value, or leave out an argument that has a default.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_not_null(text, boolean) IS
    'Internal: the error for a NULL argument';

/*
 * Drop release_totals of partition counts no consumer of the stream uses
 * any more.  The caller holds the stream's release lock, so that no
 * subscribe() counts them meanwhile.
 */
CREATE FUNCTION ordered_events.forget_unused_totals(stream_id integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DELETE FROM ordered_events.release_totals t
 WHERE t.stream_id = forget_unused_totals.stream_id AND t.partitions > 1
   AND NOT EXISTS (SELECT FROM ordered_events.subscription s
                     JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
                    WHERE s.stream_id = t.stream_id AND c.partitions = t.partitions)
$$;
COMMENT ON FUNCTION ordered_events.forget_unused_totals(integer) IS
    'Internal: drop the release totals of partition counts no consumer of the stream uses';

/*
 * create_consumer() is C (src/handler.c) for one reason: it must know the
 * role that calls it, which becomes the handler's owner, and a SECURITY
 * DEFINER function cannot.  It checks the NULLs and calls
 * define_consumer() as the owner of the extension's tables, passing the
 * calling role.
 */
CREATE FUNCTION ordered_events.create_consumer(
    consumer text,
    partitions integer DEFAULT 1,
    handler regprocedure DEFAULT NULL,
    output_stream text DEFAULT NULL,
    alignment text DEFAULT 'inherit')
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_create_consumer';
COMMENT ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text) IS
    'Create a consumer: a named reader of the released events of the streams it subscribes to, read by the extension through a handler if one is given';

-- The error for a handler that is not fn(jsonb, ordered_events.event)
-- returning ordered_events.step, or that its owner may not execute.
CREATE FUNCTION ordered_events.check_handler(handler regprocedure, owner regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p pg_catalog.pg_proc;
BEGIN
    SELECT * INTO p FROM pg_catalog.pg_proc f WHERE f.oid = handler;
    IF p.prokind <> 'f' OR p.proretset
       OR p.prorettype <> 'ordered_events.step'::pg_catalog.regtype
       OR p.pronargs <> 2 OR p.proargtypes[0] <> 'jsonb'::pg_catalog.regtype
       OR p.proargtypes[1] <> 'ordered_events.event'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'function % is not a handler', handler
            USING ERRCODE = 'undefined_function',
                  DETAIL = pg_catalog.format('It returns %s%s; a handler takes (jsonb, ordered_events.event) and returns one ordered_events.step.',
                               CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END,
                               p.prorettype::pg_catalog.regtype),
                  HINT = 'Declare it as CREATE FUNCTION f(state jsonb, event ordered_events.event) RETURNS ordered_events.step.';
    END IF;
    IF p.proisstrict THEN
        RAISE EXCEPTION 'handler % must not be STRICT', handler
            USING ERRCODE = 'invalid_function_definition',
                  DETAIL = 'The first event of a key comes with a NULL state, which a STRICT function never sees.',
                  HINT = 'Declare it CALLED ON NULL INPUT (the default).';
    END IF;
    IF NOT pg_catalog.has_function_privilege(owner, handler, 'EXECUTE') THEN
        RAISE EXCEPTION 'permission denied for function %', handler
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('The handler runs as the role that creates the consumer, %s, which may not execute it.', owner),
                  HINT = 'Grant EXECUTE on the function to that role, or create the consumer as a role that has it.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_handler(regprocedure, regrole) IS
    'Internal: the error for a handler of the wrong shape or that its owner may not execute';

-- The fence stream a handler consumer appends its results to, or the error.
CREATE FUNCTION ordered_events.output_stream_or_error(output_stream text)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(output_stream);
BEGIN
    IF d.gap_policy <> 'fence' THEN
        RAISE EXCEPTION 'output stream "%" does not have gap_policy ''fence''', output_stream
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = pg_catalog.format('Stream "%s" has gap_policy ''%s''.', output_stream, d.gap_policy),
                  HINT = 'Derived events are appended: create the output stream with gap_policy => ''fence''.';
    END IF;
    RETURN d;
END;
$$;
COMMENT ON FUNCTION ordered_events.output_stream_or_error(text) IS
    'Internal: the fence stream named as a handler''s output, or the error';

CREATE FUNCTION ordered_events.define_consumer(
    consumer text, partitions integer, handler regprocedure, output_stream text,
    alignment text, owner regrole)
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
    IF handler IS NULL THEN
        IF output_stream IS NOT NULL OR alignment <> 'inherit' THEN
            RAISE EXCEPTION 'output_stream and alignment need a handler'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass handler => ''fn(jsonb, ordered_events.event)''::regprocedure, or leave output_stream and alignment out.';
        END IF;
    ELSE
        PERFORM ordered_events.check_handler(handler, owner);
        IF output_stream IS NOT NULL THEN
            output_id := (ordered_events.output_stream_or_error(output_stream)).stream_id;
        END IF;
    END IF;
    INSERT INTO ordered_events.consumer_def
        (consumer, partitions, handler, owner, handler_owner, output_stream_id, alignment)
    VALUES (define_consumer.consumer, define_consumer.partitions, handler::text,
            CASE WHEN handler IS NOT NULL THEN owner END,
            (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = handler),
            output_id, define_consumer.alignment);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'consumer "%" already exists', consumer
        USING ERRCODE = 'duplicate_object',
              HINT = 'Drop it first with ordered_events.drop_consumer(), or choose another name.';
END;
$$;
COMMENT ON FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, regrole) IS
    'Internal: create_consumer() once it knows the calling role';

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

CREATE FUNCTION ordered_events.drop_consumer(consumer text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    streams integer[];
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    c := ordered_events.consumer_or_error(consumer);
    SELECT array_agg(DISTINCT s.stream_id) INTO streams
      FROM ordered_events.subscription s WHERE s.consumer_id = c.consumer_id;
    PERFORM ordered_events.lock_streams(streams);
    -- Waits for a read of the consumer in progress (it locks these rows).
    DELETE FROM ordered_events.consumer_def d WHERE d.consumer_id = c.consumer_id;
    -- its handler's states, results and dead letters go with it, as a
    -- stream's dead letters go with drop_stream()
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    PERFORM ordered_events.forget_unused_totals(id) FROM unnest(streams) id;
END;
$$;
COMMENT ON FUNCTION ordered_events.drop_consumer(text) IS
    'Drop a consumer, its positions, and a handler consumer''s states, results and dead letters';

CREATE FUNCTION ordered_events.subscribe(
    consumer text,
    stream text,
    delay interval DEFAULT '0 s',
    start text DEFAULT 'beginning')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('delay', delay IS NULL);
    PERFORM ordered_events.check_not_null('start', start IS NULL);
    c := ordered_events.consumer_or_error(consumer);
    d := ordered_events.stream_or_error(stream);
    IF d.stream_id = c.output_stream_id THEN
        RAISE EXCEPTION 'stream "%" is the output stream of consumer "%"', stream, consumer
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A handler does not read what it derives: subscribe the consumer to other streams, and another consumer to this one.';
    END IF;
    IF delay < '0 s' OR extract(year FROM delay) <> 0 OR extract(month FROM delay) <> 0
       OR extract(day FROM delay) <> 0 THEN
        PERFORM ordered_events.invalid_option('delay', delay::text,
            'Use an interval of hours, minutes and seconds, at least 0: days and months have no fixed length.');
    END IF;
    IF start NOT IN ('beginning', 'now') THEN
        PERFORM ordered_events.invalid_option('start', start,
            'Use ''beginning'' (every event the stream released or will release) or ''now'' (only events released from now on).');
    END IF;

    -- No release step of the stream runs while its position is set.
    PERFORM ordered_events.lock_streams(ARRAY[d.stream_id]);
    UPDATE ordered_events.subscription s SET delay = subscribe.delay
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id;
    IF FOUND THEN
        RETURN;                 -- subscribed already: a new delay, the same position
    END IF;

    IF NOT EXISTS (SELECT FROM ordered_events.release_totals t
                    WHERE t.stream_id = d.stream_id AND t.partitions = c.partitions) THEN
        PERFORM ordered_events.count_released(d.stream_id, c.partitions);
    END IF;
    INSERT INTO ordered_events.subscription
        (consumer_id, partition, stream_id, delay, read_delivery, read_seq, taken_count, taken_lag)
    SELECT c.consumer_id, t.partition, d.stream_id, subscribe.delay,
           CASE WHEN start = 'now'
                THEN coalesce((SELECT max(l.delivery) FROM ordered_events.lane_release_log l
                                WHERE l.stream_id = d.stream_id), 0)
                ELSE 0 END,
           9223372036854775807,
           -- what a retention deleted is out of the pool from the beginning
           CASE WHEN start = 'now' THEN t.released_count
                WHEN d.retains_events THEN t.released_count - coalesce(k.released_count, 0)
                ELSE 0 END,
           CASE WHEN start = 'now' THEN t.lag_sum
                WHEN d.retains_events THEN t.lag_sum - coalesce(k.lag_sum, 0)
                ELSE 0 END
      FROM ordered_events.release_totals t
      LEFT JOIN LATERAL (
            SELECT * FROM ordered_events.kept_released(d.stream_id, c.partitions)
             WHERE d.retains_events AND start = 'beginning') k
        ON k.partition = t.partition
     WHERE t.stream_id = d.stream_id AND t.partitions = c.partitions;
END;
$$;
COMMENT ON FUNCTION ordered_events.subscribe(text, text, interval, text) IS
    'Subscribe a consumer to a stream (again: change its delay, keep its position)';

CREATE FUNCTION ordered_events.unsubscribe(consumer text, stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    c := ordered_events.consumer_or_error(consumer);
    d := ordered_events.stream_or_error(stream);
    PERFORM ordered_events.lock_streams(ARRAY[d.stream_id]);
    DELETE FROM ordered_events.subscription s
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" is not subscribed to stream "%"', consumer, stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'The view ordered_events.consumers lists the subscriptions.';
    END IF;
    PERFORM ordered_events.forget_unused_totals(d.stream_id);
END;
$$;
COMMENT ON FUNCTION ordered_events.unsubscribe(text, text) IS
    'Unsubscribe a consumer from a stream: its position there is forgotten';

CREATE FUNCTION ordered_events.read(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_read';
COMMENT ON FUNCTION ordered_events.read(text, integer, integer) IS
    'The next events of a consumer (partition) in merged order; consumed when the transaction commits';

CREATE FUNCTION ordered_events.peek(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_peek';
COMMENT ON FUNCTION ordered_events.peek(text, integer, integer) IS
    'What read() would return now, consuming nothing';

/*
 * One row per subscription and partition.  The pool is what release_totals
 * counts beyond what the position took out; its first unread event is the
 * first event after the position in delivery order.  Inside the
 * transaction that read last, the pool is still what it was before its
 * reads (base_*), as for read().
 */
CREATE VIEW ordered_events.consumers AS
SELECT c.consumer, s.partition, d.stream, s.delay,
       s.consumed_count - (s.taken_count - p.taken_count) AS consumed_count,
       t.released_count - p.taken_count AS unread_count,
       CASE WHEN t.released_count > p.taken_count
            THEN round((t.lag_sum - p.taken_lag) / (t.released_count - p.taken_count))::bigint
                 * interval '1 microsecond'
       END AS bias,
       CASE WHEN t.released_count > p.taken_count THEN (
            SELECT l.released_at
              FROM ordered_events.lane_release_log l
             WHERE l.stream_id = s.stream_id AND l.delivery >= p.read_delivery
               AND EXISTS (
                   SELECT FROM ordered_events.event_store e
                    WHERE e.stream_id = l.stream_id AND e.lane = l.lane
                      AND e.seq >= l.seq_start AND e.seq < l.seq_end
                      -- after the position (a bound the primary key takes)
                      AND e.seq > CASE WHEN l.delivery = p.read_delivery THEN p.read_seq
                                       ELSE '-9223372036854775808'::bigint END
                      AND (c.partitions = 1
                           OR ordered_events.key_partition(e.key, c.partitions) = s.partition))
             ORDER BY l.delivery
             LIMIT 1)
       END AS oldest_unread_at,
       s.last_read_at
  FROM ordered_events.subscription s
  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
  JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 CROSS JOIN LATERAL ordered_events.committed_position(s, s.xmin) p
 ORDER BY c.consumer, s.partition, d.stream;
COMMENT ON VIEW ordered_events.consumers IS
    'Each consumer''s subscriptions, per partition: delay, consumed and unread events, bias';

-- Reading consumes, the rest writes: none of it is for PUBLIC (README.md, "Security").
REVOKE EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text),
    ordered_events.drop_consumer(text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.unsubscribe(text, text),
    ordered_events.read(text, integer, integer),
    ordered_events.peek(text, integer, integer),
    ordered_events.count_released(integer, integer),
    ordered_events.kept_released(integer, integer),
    ordered_events.forget_unused_totals(integer),
    ordered_events.lock_streams(integer[])
FROM PUBLIC;

/*
 * Handlers: consumers that the extension reads itself, applying each event
 * in merged order to a per-key state machine (README.md, "Processing with
 * handlers"; the processing is src/handler.c).
 */

ALTER TYPE ordered_events.outcome ADD VALUE 'exception_thrown';

CREATE TYPE ordered_events.event AS (
    stream text,
    seq bigint,
    key text,
    payload jsonb,
    event_ts timestamptz,
    alignment_ts timestamptz,
    last_event boolean
);
COMMENT ON TYPE ordered_events.event IS
    'An event as a handler receives it';

CREATE TYPE ordered_events.step AS (
    state jsonb,
    result jsonb
);
COMMENT ON TYPE ordered_events.step IS
    'What a handler returns: the key''s new state and the result to output (NULL: none)';

/*
 * The state of each key of a handler consumer, across the consumer's
 * streams.  Processing steps write these rows and those of handler_result
 * straight to the table (src/handler.c): no foreign key, drop_consumer()
 * deletes them.  A state row is updated at every step that applies one of
 * its key's events: room on its page keeps the update HOT.
 */
CREATE TABLE ordered_events.handler_state (
    consumer_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    state jsonb,
    last_stream_id integer NOT NULL,
    last_seq bigint NOT NULL,
    processed_count bigint NOT NULL,
    error_count bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, key)
) WITH (fillfactor = 50);
COMMENT ON TABLE ordered_events.handler_state IS
    'Internal: the state of each key of a handler consumer';

-- Results of handlers without an output stream; position is processing order.
CREATE SEQUENCE ordered_events.result_position_seq AS bigint;
COMMENT ON SEQUENCE ordered_events.result_position_seq IS
    'Internal: the processing order of handler results';
CREATE TABLE ordered_events.handler_result (
    consumer_id integer NOT NULL,
    position bigint NOT NULL,
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    key text COLLATE "C" NOT NULL,
    result jsonb NOT NULL,
    produced_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, position)
);
COMMENT ON TABLE ordered_events.handler_result IS
    'Internal: the results of handlers without an output stream';

SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_state', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_result', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.result_position_seq', '');

CREATE FUNCTION ordered_events.process(consumer text, max_events integer DEFAULT 1000,
                                       partition integer DEFAULT 0)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_process';
COMMENT ON FUNCTION ordered_events.process(text, integer, integer) IS
    'Apply the next events of a handler consumer (partition) to its handler; returns how many were applied';

-- The (consumer, partition)s whose handler has events to apply, the one
-- that waited longest first: what a worker cycle processes.
CREATE FUNCTION ordered_events.consumers_with_work()
RETURNS TABLE (consumer text, partition integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT c.consumer, s.partition
  FROM ordered_events.consumer_def c
  JOIN ordered_events.subscription s ON s.consumer_id = c.consumer_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 WHERE c.handler IS NOT NULL AND t.released_count > s.taken_count
 GROUP BY c.consumer, s.partition
 ORDER BY min(s.last_read_at) NULLS FIRST, c.consumer, s.partition
$$;
COMMENT ON FUNCTION ordered_events.consumers_with_work() IS
    'Internal: the handler consumer partitions with events to apply';

CREATE VIEW ordered_events.key_state AS
SELECT c.consumer, k.key, k.state, d.stream AS last_stream, k.last_seq,
       k.processed_count, k.error_count, k.updated_at
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = k.last_stream_id;
COMMENT ON VIEW ordered_events.key_state IS
    'The state of each key of each handler consumer, and how many of its events were applied';

CREATE VIEW ordered_events.results AS
SELECT c.consumer, r.position, d.stream, r.seq, r.key, r.result, r.produced_at
  FROM ordered_events.handler_result r
  JOIN ordered_events.consumer_def c ON c.consumer_id = r.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = r.stream_id
 ORDER BY r.position;
COMMENT ON VIEW ordered_events.results IS
    'The results of handler consumers without an output stream, in processing order';

REVOKE EXECUTE ON FUNCTION
    ordered_events.process(text, integer, integer),
    ordered_events.define_consumer(text, integer, regprocedure, text, text, regrole),
    ordered_events.check_handler(regprocedure, regrole),
    ordered_events.output_stream_or_error(text),
    ordered_events.consumers_with_work()
FROM PUBLIC;

/*
 * worker_status gains what an operator asks first: what the worker works
 * on, how long its last cycle took, how many events it released and
 * applied per second over the last minute.  The function behind it gets a
 * new name (its columns change); the view keeps its grants, and the roles
 * that could execute the old function may execute the new one.
 */
CREATE FUNCTION ordered_events.worker_report(
    OUT database text, OUT pid integer, OUT state text,
    OUT started_at timestamptz, OUT last_cycle_at timestamptz,
    OUT cycles bigint, OUT released_total bigint, OUT last_error text,
    OUT processed_total bigint, OUT current_stream text, OUT current_consumer text,
    OUT last_cycle_duration interval, OUT released_per_second double precision,
    OUT processed_per_second double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_status';
COMMENT ON FUNCTION ordered_events.worker_report() IS
    'The state of the background workers (the view worker_status)';
REVOKE EXECUTE ON FUNCTION ordered_events.worker_report() FROM PUBLIC;

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT pg_catalog.quote_ident(r.rolname)
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
          JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE p.oid = 'ordered_events.worker_status_internal()'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION ordered_events.worker_report() TO %s', grantee);
    END LOOP;
END;
$$;

CREATE OR REPLACE VIEW ordered_events.worker_status AS
SELECT database, pid, state, started_at, last_cycle_at, cycles, released_total, last_error,
       processed_total, current_stream, current_consumer, last_cycle_duration,
       released_per_second, processed_per_second
  FROM ordered_events.worker_report();
DROP FUNCTION ordered_events.worker_status_internal();

-- Whether the library is preloaded (then worker_report() may be called).
CREATE FUNCTION ordered_events.worker_loaded()
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_loaded';
COMMENT ON FUNCTION ordered_events.worker_loaded() IS
    'Whether ordered_events is in shared_preload_libraries, so that the background worker can run';

/*
 * Metrics for Prometheus (contrib/prometheus/): one row per metric and
 * label set, read from counters and indexes only, so that a scrape costs
 * the same at 100M events as at 1k: no pending count (stream_stats has it).
 * Names follow Prometheus: a unit in the name, _total for counters.
 */
CREATE VIEW ordered_events.metrics AS
-- released events, per stream
SELECT 'ordered_events_released_events_total'::text AS metric, 'counter'::text AS type,
       d.stream, NULL::text AS consumer, t.released_count::double precision AS value
  FROM ordered_events.stream_def d
  JOIN ordered_events.release_totals t
    ON t.stream_id = d.stream_id AND t.partitions = 1 AND t.partition = 0
UNION ALL
-- the first seq not released of a global stream
SELECT 'ordered_events_range_end', 'gauge', d.stream, NULL, p.range_end::double precision
  FROM ordered_events.stream_def d
  JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 WHERE d.sequencing = 'global'
UNION ALL
-- how long the stream's oldest gap a release step saw has been missing (0: none)
SELECT 'ordered_events_gap_age_seconds', 'gauge', d.stream, NULL,
       coalesce(extract(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) (
           SELECT p.gap_first_seen FROM ordered_events.progress p
            WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
              AND p.gap_first_seen IS NOT NULL
            ORDER BY p.gap_first_seen LIMIT 1)), 0)::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- dead letters of the stream (rejected at ingest or settled late), deleted ones included
SELECT 'ordered_events_dead_letters_total', 'counter', d.stream, NULL,
       ((SELECT count(*) FROM ordered_events.unprocessed u
          WHERE u.stream = d.stream AND u.consumer IS NULL)
        + coalesce((SELECT t.dead_letters FROM ordered_events.deleted_totals t
                     WHERE t.stream_id = d.stream_id), 0))::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- released events a retention deleted, per stream
SELECT 'ordered_events_deleted_events_total', 'counter', d.stream, NULL,
       coalesce((SELECT t.events FROM ordered_events.deleted_totals t
                  WHERE t.stream_id = d.stream_id), 0)::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- seqs skipped by a gap policy or skip_gap()
SELECT 'ordered_events_skipped_seqs_total', 'counter', d.stream, NULL,
       coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0)::double precision
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.gap_skips g ON g.stream_id = d.stream_id
 GROUP BY d.stream
UNION ALL
-- a consumer's released events not consumed yet, and those consumed, per stream
SELECT m.metric, m.type, d.stream, c.consumer, m.value
  FROM ordered_events.subscription s
  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
  JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 CROSS JOIN LATERAL ordered_events.committed_position(s, s.xmin) p
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_consumer_unread_events', 'gauge',
         (t.released_count - p.taken_count)::double precision),
        ('ordered_events_consumer_consumed_events_total', 'counter',
         (s.consumed_count - (s.taken_count - p.taken_count))::double precision)
       ) m(metric, type, value)
UNION ALL
-- a handler consumer's dead letters
SELECT 'ordered_events_handler_dead_letters_total', 'counter', NULL, c.consumer,
       (SELECT count(*) FROM ordered_events.unprocessed u
         WHERE u.consumer = c.consumer)::double precision
  FROM ordered_events.consumer_def c
 WHERE c.handler IS NOT NULL
UNION ALL
-- the worker of this database
SELECT m.metric, m.type, NULL, NULL, m.value
  FROM (SELECT * FROM ordered_events.worker_report()
         WHERE ordered_events.worker_loaded()) w     -- without it, no worker metrics
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_worker_up', 'gauge', (w.pid IS NOT NULL)::integer::double precision),
        ('ordered_events_worker_failing', 'gauge', (w.last_error IS NOT NULL)::integer::double precision),
        ('ordered_events_worker_cycles_total', 'counter', w.cycles::double precision),
        ('ordered_events_worker_released_events_total', 'counter', w.released_total::double precision),
        ('ordered_events_worker_processed_events_total', 'counter', w.processed_total::double precision),
        ('ordered_events_worker_last_cycle_seconds', 'gauge',
         coalesce(extract(epoch FROM w.last_cycle_duration), 0)::double precision)
       ) m(metric, type, value)
 WHERE w.database = pg_catalog.current_database();
COMMENT ON VIEW ordered_events.metrics IS
    'Metrics for Prometheus: one row per metric and label set (stream, consumer)';

/*
 * Monitoring needs no grant but pg_monitor's: the views that show state,
 * not events (pending and released show payloads, key_state and results a
 * handler's data).
 */
GRANT USAGE ON SCHEMA ordered_events TO pg_monitor;
GRANT SELECT ON ordered_events.streams, ordered_events.ranges, ordered_events.stream_stats,
                ordered_events.key_status, ordered_events.skipped_gaps,
                ordered_events.consumers, ordered_events.worker_status,
                ordered_events.metrics
   TO pg_monitor;
GRANT EXECUTE ON FUNCTION ordered_events.worker_report() TO pg_monitor;

/*
 * pending reads each lane that may hold pending events from its range_end
 * on, by the primary key, and never the released events before it: its
 * cost is the pending events and their lanes, whatever the stream released
 * (bench/monitoring.sh, figure 11e).  Those lanes are a global stream's
 * one lane, the lanes where a release step stopped at a gap, and the keys
 * that received events since a step last looked at them (key_arrivals; a
 * step that runs out of budget puts its key back).  Before range_end only
 * late events in a skipped run that no step settled yet are pending.
 */
CREATE OR REPLACE VIEW ordered_events.pending AS
SELECT w.stream, w.seq, w.key, w.payload, w.event_ts, w.alignment_ts, w.received_at
  FROM (SELECT d.stream, e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts,
               e.received_at
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT p.lane, p.range_end FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.lane = ''
                UNION
                SELECT p.lane, p.range_end FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
                UNION
                SELECT a.key, coalesce(p.range_end, d.initial_sequence)
                  FROM ordered_events.key_arrivals a
                  LEFT JOIN ordered_events.progress p
                    ON p.stream_id = a.stream_id AND p.lane = a.key
                 WHERE a.stream_id = d.stream_id) l
         CROSS JOIN LATERAL (
                -- OFFSET 0: planned on its own, an index range per lane.  The
                -- upper bound makes the planner cost the range as a narrow
                -- one: as a third of the stream, past a few million events
                -- JIT compiled every query (hundreds of ms for 0.2 ms of work).
                SELECT e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at
                  FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = l.lane
                   AND e.seq BETWEEN l.range_end AND 9223372036854775807
                OFFSET 0) e
        UNION ALL
        SELECT d.stream, e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts,
               e.received_at
          FROM ordered_events.gap_skips g
          JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
          JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
          JOIN ordered_events.event_store e
            ON e.stream_id = g.stream_id AND e.lane = g.lane
           AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
         WHERE NOT g.settled) w
 ORDER BY w.stream, w.lane, w.seq;

/*
 * stream_stats from counters, the pending events and the dead letters: its
 * cost is the stream's pending events, gaps, dead letters and skips, and
 * one pass over its lanes' progress rows (the highest released seq),
 * whatever it released (bench/monitoring.sh, 11a).  The skip ledger can
 * hold more than 2^63 seqs (a run from -9223372036854775808, or many
 * keys): skipped_count stops at the largest bigint instead of failing.
 */
CREATE OR REPLACE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing = 'global' THEN p.range_end END AS range_end,
       greatest(pe.max_pending_seq, lr.last_released_seq) AS max_seen_seq,
       pe.pending_count,
       t.released_count,
       un.unprocessed_count,
       pe.oldest_pending_at,
       fg.first_gap_start,
       fg.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
  JOIN ordered_events.release_totals t
    ON t.stream_id = d.stream_id AND t.partitions = 1 AND t.partition = 0
 CROSS JOIN LATERAL (
        SELECT count(*) AS pending_count, min(w.received_at) AS oldest_pending_at,
               max(w.seq) AS max_pending_seq
          FROM ordered_events.pending w WHERE w.stream = d.stream) pe
 CROSS JOIN LATERAL (
        SELECT max(q.last_released_seq) AS last_released_seq
          FROM ordered_events.progress q WHERE q.stream_id = d.stream_id) lr
 LEFT JOIN LATERAL (
        SELECT g.gap_start AS first_gap_start, g.first_seen AS first_gap_since
          FROM ordered_events.gaps(d.stream) g
         ORDER BY g.first_seen NULLS LAST, g.gap_start
         LIMIT 1) fg ON true
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u
         WHERE u.stream = d.stream AND u.consumer IS NULL) un
 CROSS JOIN LATERAL (
        SELECT least(coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0),
                     9223372036854775807)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;

/*
 * key_status, from counters: its cost is the stream's keys, pending events
 * and dead letters, whatever it released.  Each part gives rows of (stream,
 * key, counts), summed per key:
 * - a global stream's released events are counted in key_counters once
 *   compacted, and from the events until then (the worker compacts after
 *   each release);
 * - a per-key stream's keys are its lanes, with their counters in progress;
 * - pending events, last events not released yet, and dead letters (those
 *   a retention deleted are in key_counters).
 */
CREATE OR REPLACE VIEW ordered_events.key_status AS
SELECT x.stream, x.key,
       pg_catalog.max(x.last_released) AS last_released_seq,
       pg_catalog.sum(x.buffered)::bigint AS buffered_count,
       pg_catalog.min(x.buffered_seq) AS earliest_buffered_seq,
       pg_catalog.max(x.buffered_seq) AS latest_buffered_seq,
       pg_catalog.sum(x.released + x.buffered + x.rejected)::bigint AS received_count,
       pg_catalog.sum(x.released)::bigint AS released_count,
       pg_catalog.sum(x.duplicates)::bigint AS duplicate_count,
       pg_catalog.bool_or(x.last_event) AS last_event_received
  FROM (-- counted: a global stream's released events, deleted dead letters
        SELECT d.stream, k.key, k.released_count AS released,
               k.last_released_seq AS last_released, 0::bigint AS buffered,
               NULL::bigint AS buffered_seq, k.rejected_count AS rejected,
               k.duplicate_count AS duplicates, false AS last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.key_counters k ON k.stream_id = d.stream_id
        UNION ALL
        -- a global stream's released events not counted yet (a late event
        -- in a skipped run is pending).  LATERAL ... OFFSET 0: an index
        -- range of each stream's lane, never a scan of every event
        SELECT d.stream, e.key, 1, e.seq, 0, NULL, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
         CROSS JOIN LATERAL (
                SELECT e.key, e.seq FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = ''
                   AND e.seq BETWEEN coalesce(p.counted_end, d.initial_sequence)
                                 AND p.range_end - 1
                   AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                                    WHERE g.stream_id = e.stream_id AND g.lane = e.lane
                                      AND NOT g.settled
                                      AND e.seq BETWEEN g.gap_start AND g.gap_end)
                OFFSET 0) e
        UNION ALL
        -- a per-key stream's lanes
        SELECT d.stream, p.lane, p.released_count, p.last_released_seq, 0, NULL, 0, 0,
               p.last_event_seq IS NOT NULL
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id
         WHERE d.sequencing = 'per_key'
        UNION ALL
        SELECT w.stream, w.key, 0, NULL, 1, w.seq, 0, 0, false
          FROM ordered_events.pending w
        UNION ALL
        -- last events of per-key streams not released yet (by their index)
        SELECT d.stream, e.lane, 0, NULL, 0, NULL, 0, 0, true
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT e.lane FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.last_event
                OFFSET 0) e
        UNION ALL
        SELECT u.stream, u.key, 0, NULL, 0, NULL, 1, (u.reason = 'duplicate')::integer, false
          FROM ordered_events.unprocessed u
         WHERE u.consumer IS NULL) x
 GROUP BY x.stream, x.key
HAVING pg_catalog.sum(x.released + x.buffered + x.rejected) > 0;

/*
 * Compaction (README.md, "Retention"): after release, a stream's released
 * events are folded into its counters and, past its retention, deleted,
 * in bounded batches.  The worker compacts in its own transactions
 * (src/worker.c); compact() does it by hand.
 */
CREATE OR REPLACE VIEW ordered_events.streams AS
SELECT d.stream, d.sequencing::text AS sequencing, d.initial_sequence,
       d.gap_policy::text AS gap_policy, d.gap_timeout, d.max_release_batch, d.created_at,
       d.retention, d.dead_letter_retention
  FROM ordered_events.stream_def d;

/*
 * One batch of compaction for a stream, each part at most 1000 events (or
 * max_release_batch if lower), so that the worker soon gets back to
 * releasing:
 * 1. a global stream's released events from its lane's counted_end on are
 *    counted per key in key_counters (up to a skipped run that may still
 *    hold late events: those are not released);
 * 2. with a retention, the oldest released events that every subscribed
 *    consumer has read past (see runs_read_past()), released longer ago
 *    than the retention and counted, are deleted, with the release runs
 *    (log rows) they empty; a global stream's oldest run may be deleted in
 *    parts (its seq_start moves up), counted in deleted_totals;
 * 3. with a dead_letter_retention, the stream's older rejections leave
 *    unprocessed, counted in key_counters and deleted_totals.
 * It holds the stream's release lock (as a release step does), so no two
 * run at once, and no release step runs meanwhile.  "more" is true if a
 * part filled its batch.
 */
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
    read_from bigint;
    runs ordered_events.compacted_run[];
    delete_from bigint;
    delete_to bigint;
    newest bigint;
    run ordered_events.compacted_run;
    gone bigint;
    rejected bigint;
BEGIN
    deleted := 0;
    more := false;
    SELECT * INTO d FROM ordered_events.stream_def s
     WHERE s.stream_id = compact_stream.stream_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    batch := least(d.max_release_batch, 1000);

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
                                        OR l.released_at >= clock - d.retention)
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
             WHERE c.released_at < clock - d.retention AND c.before < batch
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
                   AND u.received_at < clock - d.dead_letter_retention
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

/*
 * The streams a worker cycle should compact: released events not counted
 * yet, a release step past its retention that every consumer read, or a
 * dead letter past its retention.
 */
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
                WHERE l.released_at < pg_catalog.clock_timestamp() - d.retention
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
                  AND u.received_at < pg_catalog.clock_timestamp() - d.dead_letter_retention)
 ORDER BY d.stream
$$;
COMMENT ON FUNCTION ordered_events.streams_to_compact() IS
    'Internal: the streams with released events to count or events and dead letters to delete';

REVOKE EXECUTE ON FUNCTION
    ordered_events.compact_stream(integer),
    ordered_events.compact(text),
    ordered_events.streams_to_compact(),
    ordered_events.start_retaining(integer)
FROM PUBLIC;

/*
 * Sharding (README.md, "Sharding"): a global stream spread over several
 * servers by key.  On each shard the stream is a normal global stream made
 * "sharded": a router reads the runs of seqs each shard holds, combines
 * them into the global range, and releases each shard's events below it.
 */
CREATE FUNCTION ordered_events.shard_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
BEGIN
    IF d.sequencing <> 'global' OR d.gap_policy <> 'wait' THEN
        RAISE EXCEPTION 'stream "%" cannot be sharded', stream
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A sharded stream is a global stream with gap_policy ''wait'': the router applies the gap policy to the global range.';
    END IF;
    IF EXISTS (SELECT FROM ordered_events.progress p
                WHERE p.stream_id = d.stream_id AND p.lane = ''
                  AND p.range_end <> d.initial_sequence) THEN
        RAISE EXCEPTION 'stream "%" has released events', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Shard a stream when it is created, before anything is released.';
    END IF;
    UPDATE ordered_events.stream_def s SET sharded = true WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_stream(text) IS
    'Make a global stream a shard''s part of a stream spread over several servers: a router sets its range';

/*
 * The runs of consecutive seqs a shard holds from from_seq on, among its
 * first max_events committed events there: what the router combines.
 */
CREATE FUNCTION ordered_events.shard_runs(stream text, from_seq bigint, max_events integer)
RETURNS TABLE (run_start bigint, run_end bigint, max_event_ts timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT min(e.seq), max(e.seq), max(e.event_ts)
  FROM (SELECT e.seq, e.event_ts,
               e.seq::numeric - row_number() OVER (ORDER BY e.seq) AS run
          FROM ordered_events.event_store e
         WHERE e.stream_id = ordered_events.stream_id(shard_runs.stream) AND e.lane = ''
           AND e.seq >= shard_runs.from_seq
         ORDER BY e.seq
         LIMIT shard_runs.max_events) e
 GROUP BY e.run
 ORDER BY 1
$$;
COMMENT ON FUNCTION ordered_events.shard_runs(text, bigint, integer) IS
    'The runs of seqs (inclusive bounds) a shard holds of a sharded stream from from_seq on, among its first max_events events';

CREATE FUNCTION ordered_events.release_through(stream text, through_seq bigint)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_release_through';
COMMENT ON FUNCTION ordered_events.release_through(text, bigint) IS
    'Release a sharded stream''s events below through_seq, the global range''s end that its router combined';

-- A run the router skipped on the global range, recorded on a shard: in
-- skipped_gaps, and a late event of the run is gap_skipped.
CREATE FUNCTION ordered_events.shard_skip(stream text, gap_start bigint, gap_end bigint,
                                          reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
BEGIN
    IF NOT d.sharded THEN
        RAISE EXCEPTION 'stream "%" is not sharded', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a sharded stream takes skips from its router.';
    END IF;
    INSERT INTO ordered_events.gap_skips (stream_id, lane, gap_start, gap_end, reason, skipped_at)
    SELECT d.stream_id, '', shard_skip.gap_start, shard_skip.gap_end, shard_skip.reason,
           pg_catalog.clock_timestamp()
     WHERE NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                        WHERE g.stream_id = d.stream_id AND g.lane = ''
                          AND g.gap_start = shard_skip.gap_start);
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_skip(text, bigint, bigint, text) IS
    'Record on a shard a run of seqs its router skipped on the global range';

-- Many events in one call, through the inbox: what a router sends a shard.
CREATE FUNCTION ordered_events.ingest_array(stream text, seqs bigint[], keys text[],
                                            payloads jsonb[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    written bigint;
BEGIN
    INSERT INTO ordered_events.inbox (stream, seq, key, payload)
    SELECT ingest_array.stream, u.seq, u.key, u.payload
      FROM unnest(seqs, keys, payloads) u(seq, key, payload);
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END;
$$;
COMMENT ON FUNCTION ordered_events.ingest_array(text, bigint[], text[], jsonb[]) IS
    'Write many events (arrays of the same length) through the inbox; returns how many were written';

REVOKE EXECUTE ON FUNCTION
    ordered_events.ingest_array(text, bigint[], text[], jsonb[]),
    ordered_events.shard_stream(text),
    ordered_events.shard_runs(text, bigint, integer),
    ordered_events.release_through(text, bigint),
    ordered_events.shard_skip(text, bigint, bigint, text)
FROM PUBLIC;
