/* ordered_events--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ordered_events" to load this file. \quit

/*
 * Storage.  One row per event, never moved: an event of a global stream is
 * released exactly when its seq is below the stream's range_end, so "pending"
 * and "released" are views over the same rows.
 */

CREATE TYPE ordered_events.outcome AS ENUM (
    'accepted',
    'duplicate',
    'before_initial_sequence',
    'sequence_id_outside_valid_range',
    'after_last_event',
    'gap_skipped'
);
COMMENT ON TYPE ordered_events.outcome IS
    'What happened to an ingested event: accepted, or the reason it went to unprocessed';

CREATE SEQUENCE ordered_events.stream_id_seq AS integer;

-- Stream configuration.  Changes invalidate every backend's stream cache.
CREATE TABLE ordered_events.stream_def (
    stream_id integer PRIMARY KEY
        DEFAULT pg_catalog.nextval('ordered_events.stream_id_seq'),
    stream text NOT NULL UNIQUE,
    sequencing text NOT NULL,
    initial_sequence bigint NOT NULL,
    gap_policy text NOT NULL,
    gap_timeout interval,
    max_release_batch integer NOT NULL CHECK (max_release_batch > 0),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER SEQUENCE ordered_events.stream_id_seq OWNED BY ordered_events.stream_def.stream_id;
COMMENT ON TABLE ordered_events.stream_def IS
    'Internal: one row per stream, its configuration';

-- Release progress of each stream.  Its row lock serialises release steps.
CREATE TABLE ordered_events.stream_progress (
    stream_id integer PRIMARY KEY
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    range_start bigint NOT NULL,
    range_end bigint NOT NULL,
    max_event_ts timestamptz,
    released_count bigint NOT NULL DEFAULT 0,
    gap_start bigint,               -- first missing seq a release step saw,
    gap_end bigint,                 -- the run gap_start..gap_end was missing
    gap_first_seen timestamptz,     -- when a step first saw that run
    fence_seq bigint,               -- fence: the last seq allocated when read
    fence_xid xid8,                 -- fence: the next xid, read after fence_seq
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE ordered_events.stream_progress IS
    'Internal: contiguous range and release counters of each stream';

-- Accepted events.  Column order keeps the fixed-width part free of padding.
CREATE TABLE ordered_events.events (
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    CONSTRAINT events_pkey PRIMARY KEY (stream_id, seq)
);
COMMENT ON TABLE ordered_events.events IS
    'Internal: every accepted event of a global stream, pending or released';

/*
 * Per-key streams.  The same layout as events (the C code relies on it),
 * plus last_event; each key has its own range_end in key_progress.
 */
CREATE TABLE ordered_events.key_events (
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    last_event boolean NOT NULL,
    CONSTRAINT key_events_pkey PRIMARY KEY (stream_id, key, seq)
);
CREATE INDEX key_events_last_event_idx ON ordered_events.key_events (stream_id, key)
    WHERE last_event;
COMMENT ON TABLE ordered_events.key_events IS
    'Internal: every accepted event of a per-key stream, pending or released';

CREATE TABLE ordered_events.key_progress (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    range_end bigint NOT NULL,      -- first seq of the key not released
    released_count bigint NOT NULL,
    last_event_seq bigint,          -- the key is complete: its last event
    gap_start bigint,
    gap_end bigint,
    gap_first_seen timestamptz,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, key)
);
-- The keys whose gap a timeout may skip, without visiting idle keys.
CREATE INDEX key_progress_gap_idx ON ordered_events.key_progress (stream_id, gap_first_seen)
    WHERE gap_start IS NOT NULL;
COMMENT ON TABLE ordered_events.key_progress IS
    'Internal: release progress of each key of a per-key stream that has had a release step';

/*
 * Keys that received events since their last release step: one row per
 * accepted event, deleted by the step that looks at the key.  A row of an
 * open transaction is invisible until it commits, so no arrival is missed.
 */
CREATE TABLE ordered_events.key_arrivals (
    stream_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    arrived_at timestamptz NOT NULL
);
CREATE INDEX key_arrivals_stream_idx ON ordered_events.key_arrivals (stream_id, arrived_at);
COMMENT ON TABLE ordered_events.key_arrivals IS
    'Internal: keys of per-key streams with events no release step has looked at';

-- One row per release step: when the seqs [seq_start, seq_end) were released.
CREATE TABLE ordered_events.release_log (
    stream_id integer NOT NULL,
    seq_start bigint NOT NULL,
    seq_end bigint NOT NULL,
    released_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, seq_end)
);
COMMENT ON TABLE ordered_events.release_log IS
    'Internal: the release steps of each global stream, for released_at';

CREATE TABLE ordered_events.key_release_log (
    stream_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    seq_start bigint NOT NULL,
    seq_end bigint NOT NULL,
    released_at timestamptz NOT NULL,
    PRIMARY KEY (stream_id, key, seq_end)
);
COMMENT ON TABLE ordered_events.key_release_log IS
    'Internal: the release steps of each key of a per-key stream, for released_at';

CREATE TABLE ordered_events.unprocessed (
    stream text NOT NULL,
    seq bigint NOT NULL,
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    event_ts timestamptz,
    reason ordered_events.outcome NOT NULL,
    detail text,
    received_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE INDEX unprocessed_stream_key_idx ON ordered_events.unprocessed (stream, key);
COMMENT ON TABLE ordered_events.unprocessed IS
    'Events received but never to be released, with the reason (dead letters)';

/*
 * The skip ledger.  A run of seqs declared lost, inclusive bounds.  An event
 * whose transaction was open when its seq was skipped can still commit into
 * the run; such an event is never released (the views exclude it) and is
 * moved to unprocessed as gap_skipped by a later release step.  The run is
 * settled once no transaction older than settle_xid (the next xid when a
 * step after the skip first looked at it) is running: none can add to it
 * any more.
 */
CREATE TABLE ordered_events.gap_skips (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    key text COLLATE "C",           -- NULL for global streams
    gap_start bigint NOT NULL,
    gap_end bigint NOT NULL,
    reason text NOT NULL,
    skipped_at timestamptz NOT NULL,
    settle_xid xid8,
    settled boolean NOT NULL DEFAULT false
);
CREATE INDEX gap_skips_lookup_idx ON ordered_events.gap_skips (stream_id, key, gap_end);
CREATE INDEX gap_skips_unsettled_idx ON ordered_events.gap_skips (stream_id) WHERE NOT settled;
COMMENT ON TABLE ordered_events.gap_skips IS
    'Internal: the skip ledger, with what late events still need';

SELECT pg_catalog.pg_extension_config_dump('ordered_events.stream_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.stream_def', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.stream_progress', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.events', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.release_log', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_events', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_progress', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_arrivals', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_release_log', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.unprocessed', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.gap_skips', '');

-- Every change to stream_def or the skip ledger must reach the stream cache
-- of every backend (it holds each stream's highest skipped seq).
CREATE FUNCTION ordered_events.stream_def_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'oe_stream_def_changed';
CREATE TRIGGER stream_def_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ordered_events.stream_def
    FOR EACH STATEMENT EXECUTE FUNCTION ordered_events.stream_def_changed();
CREATE TRIGGER gap_skips_changed
    AFTER INSERT OR DELETE OR TRUNCATE ON ordered_events.gap_skips
    FOR EACH STATEMENT EXECUTE FUNCTION ordered_events.stream_def_changed();

/*
 * Streams
 */

-- Raise the error for an option value that is not allowed.
CREATE FUNCTION ordered_events.invalid_option(option text, value text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'invalid value for %: %', option, coalesce(value, 'NULL')
        USING ERRCODE = 'invalid_parameter_value', HINT = hint;
END;
$$;

-- Check the gap and batch options shared by create_stream and alter_stream.
CREATE FUNCTION ordered_events.check_release_options(
    sequencing text, gap_policy text, gap_timeout interval, max_release_batch integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF gap_policy IS NULL OR gap_policy NOT IN ('wait', 'timeout', 'fence') THEN
        PERFORM ordered_events.invalid_option('gap_policy', gap_policy,
            'Use ''wait'', ''timeout'' or ''fence''.');
    END IF;
    IF gap_policy = 'timeout' AND gap_timeout IS NULL THEN
        RAISE EXCEPTION 'gap_policy ''timeout'' needs a gap_timeout'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass gap_timeout => interval ''5 minutes'', say: how long a gap may be missing before it is skipped.';
    END IF;
    IF gap_timeout IS NOT NULL AND gap_policy <> 'timeout' THEN
        RAISE EXCEPTION 'gap_timeout is only valid with gap_policy ''timeout'''
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Leave gap_timeout NULL, or use gap_policy => ''timeout''.';
    END IF;
    IF gap_timeout <= interval '0' THEN
        PERFORM ordered_events.invalid_option('gap_timeout', gap_timeout::text,
            'Use a positive interval.');
    END IF;
    IF gap_policy = 'fence' AND sequencing <> 'global' THEN
        RAISE EXCEPTION 'gap_policy ''fence'' is only valid for global streams'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Per-key streams take ''wait'' or ''timeout''.';
    END IF;
    IF max_release_batch IS NULL OR max_release_batch < 1 THEN
        PERFORM ordered_events.invalid_option('max_release_batch', max_release_batch::text,
            'max_release_batch is the most events one release step releases; use a positive number.');
    END IF;
END;
$$;

CREATE FUNCTION ordered_events.create_stream(
    stream text,
    sequencing text DEFAULT 'global',
    initial_sequence bigint DEFAULT 1,
    gap_policy text DEFAULT 'wait',
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT 10000)
RETURNS void
LANGUAGE plpgsql VOLATILE
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
        VALUES (create_stream.stream, create_stream.sequencing, create_stream.initial_sequence,
                create_stream.gap_policy, create_stream.gap_timeout,
                create_stream.max_release_batch)
        RETURNING d.stream_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'stream "%" already exists', stream
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with ordered_events.alter_stream(), or drop it first with ordered_events.drop_stream().';
    END;

    INSERT INTO ordered_events.stream_progress (stream_id, range_start, range_end)
    VALUES (new_id, create_stream.initial_sequence, create_stream.initial_sequence);

    -- append() takes the seqs of a fence stream from here; CACHE 1 so that
    -- the last allocated value is what every backend reads.
    IF create_stream.gap_policy = 'fence' THEN
        EXECUTE format('CREATE SEQUENCE ordered_events.%I AS bigint MINVALUE %s START %s CACHE 1',
                       'fence_seq_' || new_id, create_stream.initial_sequence,
                       create_stream.initial_sequence);
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer) IS
    'Create a stream: an independent sequence space with its own range and release budget';

-- The definition of a stream, locked FOR UPDATE if asked; or raise
-- null_value_not_allowed or undefined_object.
CREATE FUNCTION ordered_events.stream_or_error(stream text, for_update boolean DEFAULT false)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    IF stream IS NULL THEN
        RAISE EXCEPTION 'stream must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Name a stream; see ordered_events.streams for the existing ones.';
    END IF;
    IF for_update THEN
        SELECT * INTO d FROM ordered_events.stream_def s
         WHERE s.stream = stream_or_error.stream FOR UPDATE;
    ELSE
        SELECT * INTO d FROM ordered_events.stream_def s
         WHERE s.stream = stream_or_error.stream;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with ordered_events.create_stream(), or see ordered_events.streams for the existing ones.';
    END IF;
    RETURN d;
END;
$$;

CREATE FUNCTION ordered_events.alter_stream(
    stream text,
    gap_policy text DEFAULT NULL,
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
    d ordered_events.stream_def := old;
BEGIN
    d.gap_policy := coalesce(alter_stream.gap_policy, d.gap_policy);
    d.gap_timeout := coalesce(alter_stream.gap_timeout, d.gap_timeout);
    d.max_release_batch := coalesce(alter_stream.max_release_batch, d.max_release_batch);
    IF d.gap_policy <> 'timeout' THEN
        d.gap_timeout := alter_stream.gap_timeout;
    END IF;
    PERFORM ordered_events.check_release_options(d.sequencing, d.gap_policy, d.gap_timeout,
                                                 d.max_release_batch);
    IF (d.gap_policy = 'fence') <> (old.gap_policy = 'fence') THEN
        RAISE EXCEPTION 'gap_policy ''fence'' can only be chosen when the stream is created'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A fence stream is fed by append() and other streams by ingest(); create a new stream instead.';
    END IF;
    UPDATE ordered_events.stream_def s
       SET gap_policy = d.gap_policy,
           gap_timeout = d.gap_timeout,
           max_release_batch = d.max_release_batch
     WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.alter_stream(text, text, interval, integer) IS
    'Change the gap policy or release batch of a stream; NULL keeps the value';

CREATE FUNCTION ordered_events.drop_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    /*
     * Wait for every transaction that may be writing events, so that none
     * can add an event to the stream after its rows are gone.
     */
    LOCK TABLE ordered_events.events IN SHARE ROW EXCLUSIVE MODE;
    d := ordered_events.stream_or_error(stream, true);
    -- ... and for a release step in progress, which would log its release.
    PERFORM FROM ordered_events.stream_progress p WHERE p.stream_id = d.stream_id FOR UPDATE;
    IF d.gap_policy = 'fence' THEN
        EXECUTE format('DROP SEQUENCE ordered_events.%I', 'fence_seq_' || d.stream_id);
    END IF;
    DELETE FROM ordered_events.events e WHERE e.stream_id = d.stream_id;
    DELETE FROM ordered_events.release_log l WHERE l.stream_id = d.stream_id;
    DELETE FROM ordered_events.key_events e WHERE e.stream_id = d.stream_id;
    DELETE FROM ordered_events.key_arrivals a WHERE a.stream_id = d.stream_id;
    DELETE FROM ordered_events.key_release_log l WHERE l.stream_id = d.stream_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.stream = d.stream;
    DELETE FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id;
    DELETE FROM ordered_events.stream_def s WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.drop_stream(text) IS
    'Remove a stream with all its events, dead letters and history';

CREATE VIEW ordered_events.streams AS
SELECT d.stream, d.sequencing, d.initial_sequence, d.gap_policy, d.gap_timeout,
       d.max_release_batch, d.created_at
  FROM ordered_events.stream_def d;
COMMENT ON VIEW ordered_events.streams IS 'The streams and their configuration';

/*
 * Writing
 */

CREATE FUNCTION ordered_events.ingest(
    stream text,
    seq bigint,
    key text,
    payload jsonb DEFAULT NULL,
    event_ts timestamptz DEFAULT NULL,
    alignment_ts timestamptz DEFAULT NULL,
    last_event boolean DEFAULT false)
RETURNS ordered_events.outcome
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_ingest';
COMMENT ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean) IS
    'Write one event; returns accepted or the reason it went to unprocessed';

CREATE VIEW ordered_events.inbox AS
SELECT NULL::text AS stream, NULL::bigint AS seq, NULL::text AS key,
       NULL::jsonb AS payload, NULL::timestamptz AS event_ts,
       NULL::timestamptz AS alignment_ts, false AS last_event
 WHERE false;
ALTER VIEW ordered_events.inbox ALTER COLUMN last_event SET DEFAULT false;
COMMENT ON VIEW ordered_events.inbox IS
    'Bulk ingest: INSERT or COPY rows here; each follows the rules of ingest()';

CREATE FUNCTION ordered_events.inbox_insert() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'oe_inbox_insert';
CREATE TRIGGER inbox_insert
    INSTEAD OF INSERT ON ordered_events.inbox
    FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();

/*
 * Releasing
 */

CREATE FUNCTION ordered_events.release(stream text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_release';
COMMENT ON FUNCTION ordered_events.release(text) IS
    'Advance the range of one stream (NULL: every stream) over arrived events; returns how many were released';

/*
 * Reading
 */

-- Every accepted event and whether it is released: its seq is below its
-- sequence's range_end (the stream's, or its key's: initial_sequence for a
-- key no release step has looked at), and it did not commit late into a
-- skipped run.  lane orders per-key streams by key.
CREATE VIEW ordered_events.accepted_events AS
SELECT d.stream, d.stream_id, NULL::text COLLATE "C" AS lane,
       e.seq < p.range_end AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = e.stream_id AND NOT g.settled AND g.key IS NULL
              AND e.seq BETWEEN g.gap_start AND g.gap_end) AS is_released,
       e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at,
       false AS last_event
  FROM ordered_events.stream_def d
  JOIN ordered_events.stream_progress p ON p.stream_id = d.stream_id
  JOIN ordered_events.events e ON e.stream_id = d.stream_id
UNION ALL
SELECT d.stream, d.stream_id, e.key,
       e.seq < coalesce(k.range_end, d.initial_sequence) AND NOT EXISTS (
           SELECT FROM ordered_events.gap_skips g
            WHERE g.stream_id = e.stream_id AND NOT g.settled AND g.key = e.key
              AND e.seq BETWEEN g.gap_start AND g.gap_end),
       e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at,
       e.last_event
  FROM ordered_events.stream_def d
  JOIN ordered_events.key_events e ON e.stream_id = d.stream_id
  LEFT JOIN ordered_events.key_progress k ON k.stream_id = e.stream_id AND k.key = e.key;
COMMENT ON VIEW ordered_events.accepted_events IS
    'Internal: every accepted event and whether it is released';

CREATE VIEW ordered_events.released AS
SELECT a.stream, a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at,
       CASE WHEN a.lane IS NULL THEN
           (SELECT l.released_at FROM ordered_events.release_log l
             WHERE l.stream_id = a.stream_id AND l.seq_end > a.seq
             ORDER BY l.seq_end LIMIT 1)
       ELSE
           (SELECT l.released_at FROM ordered_events.key_release_log l
             WHERE l.stream_id = a.stream_id AND l.key = a.lane AND l.seq_end > a.seq
             ORDER BY l.seq_end LIMIT 1)
       END AS released_at
  FROM ordered_events.accepted_events a
 WHERE a.is_released
 ORDER BY a.stream, a.lane, a.seq;
COMMENT ON VIEW ordered_events.released IS
    'The ordered view: every released event, by stream and seq (per-key streams: stream, key, seq)';

CREATE VIEW ordered_events.pending AS
SELECT a.stream, a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at
  FROM ordered_events.accepted_events a
 WHERE NOT a.is_released
 ORDER BY a.stream, a.lane, a.seq;
COMMENT ON VIEW ordered_events.pending IS
    'Accepted events that wait for a lower seq';

CREATE VIEW ordered_events.ranges AS
SELECT d.stream, p.range_start, p.range_end, p.max_event_ts, p.updated_at
  FROM ordered_events.stream_def d
  JOIN ordered_events.stream_progress p ON p.stream_id = d.stream_id
 WHERE d.sequencing = 'global';
COMMENT ON VIEW ordered_events.ranges IS
    'The contiguous range [range_start, range_end) of each global stream';

CREATE VIEW ordered_events.key_status AS
WITH accepted AS (
    SELECT a.stream, a.key,
           max(a.seq) FILTER (WHERE a.is_released) AS last_released_seq,
           count(*) FILTER (WHERE NOT a.is_released) AS buffered_count,
           min(a.seq) FILTER (WHERE NOT a.is_released) AS earliest_buffered_seq,
           max(a.seq) FILTER (WHERE NOT a.is_released) AS latest_buffered_seq,
           count(*) AS received_count,
           count(*) FILTER (WHERE a.is_released) AS released_count,
           bool_or(a.last_event) AS last_event_received
      FROM ordered_events.accepted_events a
     GROUP BY a.stream, a.key
), rejected AS (
    SELECT u.stream, u.key,
           count(*) AS received_count,
           count(*) FILTER (WHERE u.reason = 'duplicate') AS duplicate_count
      FROM ordered_events.unprocessed u
     GROUP BY u.stream, u.key
)
SELECT coalesce(a.stream, r.stream) AS stream,
       coalesce(a.key, r.key) AS key,
       a.last_released_seq,
       coalesce(a.buffered_count, 0) AS buffered_count,
       a.earliest_buffered_seq,
       a.latest_buffered_seq,
       coalesce(a.received_count, 0) + coalesce(r.received_count, 0) AS received_count,
       coalesce(a.released_count, 0) AS released_count,
       coalesce(r.duplicate_count, 0) AS duplicate_count,
       coalesce(a.last_event_received, false) AS last_event_received
  FROM accepted a
  FULL JOIN rejected r ON r.stream = a.stream AND r.key = a.key;
COMMENT ON VIEW ordered_events.key_status IS
    'Processing status of every key (Apache Beam''s OrderedProcessingStatus)';

-- gaps() and blockers() run as the owner, so that a role that may read
-- stream_stats (which calls gaps()) needs no rights on the internal tables.
CREATE FUNCTION ordered_events.gaps(stream text)
RETURNS TABLE (key text, gap_start bigint, gap_end bigint, first_seen timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream);
    s record;
    hole record;
    run record;
    next_missing bigint;
BEGIN
    SELECT d.stream_id, d.sequencing, d.initial_sequence, p.range_end,
           p.gap_start, p.gap_first_seen INTO s
      FROM ordered_events.stream_progress p WHERE p.stream_id = d.stream_id;

    /*
     * A hole is missing before each arrived seq that does not follow the
     * previous one (or the released part); written so as never to overflow.
     * Its parts in the skip ledger are not missing any more.
     */
    FOR hole IN
        SELECT NULL::text AS key, a.gap_start, a.seq - 1 AS gap_end,
               s.gap_start AS seen_start, s.gap_first_seen AS seen_at
          FROM (SELECT e.seq,
                       coalesce(lag(e.seq) OVER (ORDER BY e.seq) + 1, s.range_end) AS gap_start
                  FROM ordered_events.events e
                 WHERE s.sequencing = 'global'
                   AND e.stream_id = s.stream_id AND e.seq >= s.range_end) a
         WHERE a.seq > a.gap_start
        UNION ALL
        SELECT a.key, a.gap_start, a.seq - 1, a.seen_start, a.gap_first_seen
          FROM (SELECT e.key, e.seq, k.gap_start AS seen_start, k.gap_first_seen,
                       coalesce(lag(e.seq) OVER (PARTITION BY e.key ORDER BY e.seq) + 1,
                                k.range_end, s.initial_sequence) AS gap_start
                  FROM ordered_events.key_events e
                  LEFT JOIN ordered_events.key_progress k
                         ON k.stream_id = e.stream_id AND k.key = e.key
                 WHERE s.sequencing = 'per_key' AND e.stream_id = s.stream_id
                   AND e.seq >= coalesce(k.range_end, s.initial_sequence)) a
         WHERE a.seq > a.gap_start
         ORDER BY 1, 2
    LOOP
        next_missing := hole.gap_start;
        FOR run IN
            SELECT g.gap_start, g.gap_end FROM ordered_events.gap_skips g
             WHERE g.stream_id = s.stream_id AND g.key IS NOT DISTINCT FROM hole.key
               AND g.gap_end >= hole.gap_start AND g.gap_start <= hole.gap_end
             ORDER BY g.gap_start
        LOOP
            IF run.gap_start > next_missing THEN
                key := hole.key;
                gap_start := next_missing;
                gap_end := run.gap_start - 1;
                first_seen := CASE WHEN next_missing = hole.seen_start THEN hole.seen_at END;
                RETURN NEXT;
            END IF;
            next_missing := run.gap_end + 1;
        END LOOP;
        IF next_missing <= hole.gap_end THEN
            key := hole.key;
            gap_start := next_missing;
            gap_end := hole.gap_end;
            first_seen := CASE WHEN next_missing = hole.seen_start THEN hole.seen_at END;
            RETURN NEXT;
        END IF;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION ordered_events.gaps(text) IS
    'The missing runs (inclusive bounds) between the released part and the highest arrived seq; per key for per-key streams';

CREATE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing = 'global' THEN p.range_end END AS range_end,
       mx.max_seen_seq,
       pe.pending_count,
       rel.released_count,
       un.unprocessed_count,
       pe.oldest_pending_at,
       fg.first_gap_start,
       fg.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  JOIN ordered_events.stream_progress p ON p.stream_id = d.stream_id
 CROSS JOIN LATERAL (
        SELECT CASE WHEN d.sequencing = 'global'
                    THEN (SELECT max(e.seq) FROM ordered_events.events e
                           WHERE e.stream_id = d.stream_id)
                    ELSE (SELECT max(e.seq) FROM ordered_events.key_events e
                           WHERE e.stream_id = d.stream_id)
               END AS max_seen_seq) mx
 CROSS JOIN LATERAL (
        SELECT count(*) AS pending_count, min(a.received_at) AS oldest_pending_at
          FROM ordered_events.accepted_events a
         WHERE a.stream_id = d.stream_id AND NOT a.is_released) pe
 CROSS JOIN LATERAL (
        SELECT CASE WHEN d.sequencing = 'global' THEN p.released_count
                    ELSE (SELECT coalesce(sum(k.released_count), 0)::bigint
                            FROM ordered_events.key_progress k
                           WHERE k.stream_id = d.stream_id)
               END AS released_count) rel
 LEFT JOIN LATERAL (
        SELECT g.gap_start AS first_gap_start, g.first_seen AS first_gap_since
          FROM ordered_events.gaps(d.stream) g
         ORDER BY g.first_seen NULLS LAST, g.gap_start
         LIMIT 1) fg ON true
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u WHERE u.stream = d.stream) un
 CROSS JOIN LATERAL (
        SELECT coalesce(sum(g.gap_end - g.gap_start + 1), 0)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;
COMMENT ON VIEW ordered_events.stream_stats IS
    'One row per stream: range, backlog, dead letters and the first gap';

CREATE VIEW ordered_events.skipped_gaps AS
SELECT d.stream, g.key, g.gap_start, g.gap_end, g.reason, g.skipped_at
  FROM ordered_events.gap_skips g
  JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
 ORDER BY d.stream, g.key, g.gap_start;
COMMENT ON VIEW ordered_events.skipped_gaps IS
    'The skip ledger: every run of seqs (inclusive bounds) a range passed without its events';

CREATE FUNCTION ordered_events.blockers(stream text)
RETURNS TABLE (pid integer, xid xid, state text, xact_start timestamptz, query text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream);
    s record;
BEGIN
    SELECT d.gap_policy, p.fence_xid INTO s
      FROM ordered_events.stream_progress p WHERE p.stream_id = d.stream_id;
    IF NOT EXISTS (SELECT FROM ordered_events.gaps(blockers.stream)) THEN
        RETURN;                 -- nothing is missing: nothing blocks
    END IF;

    IF s.gap_policy = 'fence' THEN
        -- The transactions older than the fence: any of them may still
        -- commit a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.state, a.xact_start, a.query
          FROM pg_catalog.pg_stat_activity a
         WHERE s.fence_xid IS NOT NULL
           AND a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
           AND pg_catalog.age(a.backend_xid) > pg_catalog.age(pg_catalog.xid(s.fence_xid))
         ORDER BY a.xact_start;
    ELSE
        -- The open transactions that wrote events: any may hold a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.state, a.xact_start, a.query
          FROM pg_catalog.pg_stat_activity a
         WHERE a.pid <> pg_catalog.pg_backend_pid()
           AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                          WHERE l.granted AND l.mode = 'RowExclusiveLock'
                            AND l.relation IN ('ordered_events.events'::pg_catalog.regclass,
                                               'ordered_events.key_events'::pg_catalog.regclass))
         ORDER BY a.xact_start;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.blockers(text) IS
    'The open transactions a blocked stream is waiting for';

CREATE FUNCTION ordered_events.append(
    stream text,
    key text,
    payload jsonb DEFAULT NULL,
    event_ts timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_append';
COMMENT ON FUNCTION ordered_events.append(text, text, jsonb, timestamptz) IS
    'Write an event to a fence stream; the stream allocates its seq, which is returned';

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

-- The streams a worker cycle should step: something to release, a gap no
-- step has seen, a policy that may skip, or late events to settle.  The
-- stream whose oldest such thing waited longest comes first.
CREATE FUNCTION ordered_events.streams_with_work()
RETURNS TABLE (stream text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT d.stream
  FROM ordered_events.stream_def d
  JOIN ordered_events.stream_progress p ON p.stream_id = d.stream_id
 CROSS JOIN LATERAL (
        (SELECT e.seq = p.range_end
                OR p.gap_start IS DISTINCT FROM p.range_end
                OR d.gap_policy = 'fence'
                OR p.gap_first_seen + d.gap_timeout <= pg_catalog.now() AS needed,
                e.received_at AS since
           FROM ordered_events.events e
          WHERE d.sequencing = 'global'
            AND e.stream_id = p.stream_id AND e.seq >= p.range_end
          ORDER BY e.seq LIMIT 1)
        UNION ALL
        (SELECT true, a.arrived_at
           FROM ordered_events.key_arrivals a
          WHERE d.sequencing = 'per_key' AND a.stream_id = p.stream_id
          ORDER BY a.arrived_at LIMIT 1)
        UNION ALL
        (SELECT true, k.gap_first_seen
           FROM ordered_events.key_progress k
          WHERE d.gap_policy = 'timeout' AND k.stream_id = p.stream_id
            AND k.gap_start IS NOT NULL
            AND k.gap_first_seen <= pg_catalog.now() - d.gap_timeout
          ORDER BY k.gap_first_seen LIMIT 1)
        UNION ALL
        (SELECT true, g.skipped_at
           FROM ordered_events.gap_skips g
          WHERE g.stream_id = p.stream_id AND NOT g.settled
          ORDER BY g.skipped_at LIMIT 1)) w
 WHERE w.needed
 GROUP BY d.stream
 ORDER BY min(w.since), d.stream
$$;

/*
 * Background worker
 */

CREATE FUNCTION ordered_events.worker_status_internal(
    OUT database text, OUT pid integer, OUT state text,
    OUT started_at timestamptz, OUT last_cycle_at timestamptz,
    OUT cycles bigint, OUT released_total bigint, OUT last_error text)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_status';

CREATE VIEW ordered_events.worker_status AS
SELECT * FROM ordered_events.worker_status_internal();
COMMENT ON VIEW ordered_events.worker_status IS
    'One row per database served by the background worker';

/*
 * Privileges.  Writing goes straight to the tables (see src/table_insert.c),
 * so only roles granted EXECUTE may write or release; see README.md.
 */
REVOKE EXECUTE ON FUNCTION
    ordered_events.create_stream(text, text, bigint, text, interval, integer),
    ordered_events.alter_stream(text, text, interval, integer),
    ordered_events.drop_stream(text),
    ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
    ordered_events.append(text, text, jsonb, timestamptz),
    ordered_events.release(text),
    ordered_events.skip_gap(text, bigint, text, text)
FROM PUBLIC;
