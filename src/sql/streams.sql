/*
 * Streams: what a stream is (stream_def), and creating, changing and
 * dropping one.  Who may do which is privileges.sql.
 */

CREATE TYPE ordered_events.sequencing AS ENUM ('global', 'per_key');
COMMENT ON TYPE ordered_events.sequencing IS
    'How a stream counts its seqs: one sequence (global) or one per key (per_key)';

CREATE TYPE ordered_events.gap_policy AS ENUM ('wait', 'timeout', 'fence');
COMMENT ON TYPE ordered_events.gap_policy IS
    'What a stream does with a gap: wait, skip after gap_timeout, or skip once proven dead (fence)';

CREATE SEQUENCE ordered_events.stream_id_seq AS integer;

/*
 * One row per stream.  Its row lock serialises the stream's release steps.
 * Changes invalidate every backend's stream cache (stream_def_changed).
 * The columns are in the order the updates from 0.1 left them, so that a
 * fresh install and an updated one are the same.
 */
CREATE TABLE ordered_events.stream_def (
    stream_id integer PRIMARY KEY
        DEFAULT pg_catalog.nextval('ordered_events.stream_id_seq'),
    stream text NOT NULL UNIQUE,
    initial_sequence bigint NOT NULL,
    gap_timeout interval,
    max_release_batch integer NOT NULL CHECK (max_release_batch > 0),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    sequencing ordered_events.sequencing NOT NULL,
    gap_policy ordered_events.gap_policy NOT NULL,
    retention interval,
    dead_letter_retention interval,
    retains_events boolean NOT NULL DEFAULT false,
    sharded boolean NOT NULL DEFAULT false,
    owner regrole NOT NULL,
    acl aclitem[]
);
ALTER SEQUENCE ordered_events.stream_id_seq OWNED BY ordered_events.stream_def.stream_id;
COMMENT ON TABLE ordered_events.stream_def IS
    'Internal: one row per stream, its configuration';
COMMENT ON COLUMN ordered_events.stream_def.owner IS
    'The role that created the stream (or was given it); it alone may change or drop it';
COMMENT ON COLUMN ordered_events.stream_def.acl IS
    'What the owner granted: INSERT is ''write'', SELECT is ''read''';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.stream_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.stream_def', '');

-- Every change to stream_def or the skip ledger must reach the stream cache
-- of every backend (it holds each stream's highest skipped seq).
CREATE FUNCTION ordered_events.stream_def_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'oe_stream_def_changed';
REVOKE EXECUTE ON FUNCTION ordered_events.stream_def_changed() FROM PUBLIC;

CREATE TRIGGER stream_def_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ordered_events.stream_def
    FOR EACH STATEMENT EXECUTE FUNCTION ordered_events.stream_def_changed();

-- The stream's id, or the one error for an unknown stream (src/catalog.c).
CREATE FUNCTION ordered_events.stream_id(stream text)
RETURNS integer
LANGUAGE c STABLE PARALLEL RESTRICTED    -- reads with the latest snapshot
AS 'MODULE_PATHNAME', 'oe_stream_id';
COMMENT ON FUNCTION ordered_events.stream_id(text) IS
    'Internal: the id of a stream, or the error for an unknown stream';
REVOKE EXECUTE ON FUNCTION ordered_events.stream_id(text) FROM PUBLIC;
CREATE FUNCTION ordered_events.stream_or_error(stream text, for_update boolean DEFAULT false)
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
-- A retention is an interval from 0 to 1000 years (NULL: keep for ever).
CREATE FUNCTION ordered_events.check_retention(option text, retention interval)
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
 * create_stream(), alter_stream(), drop_stream() are run by
 * oe_call_as_caller as "<name>_as" with the calling role, which becomes
 * the owner of a new stream and must be the owner of an existing one.
 */
CREATE FUNCTION ordered_events.create_stream_as(
    stream text, sequencing text, initial_sequence bigint, gap_policy text,
    gap_timeout interval, max_release_batch integer, retention interval,
    dead_letter_retention interval, caller regrole)
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
    PERFORM ordered_events.check_retention('retention', retention);
    PERFORM ordered_events.check_retention('dead_letter_retention', dead_letter_retention);

    BEGIN
        INSERT INTO ordered_events.stream_def AS d
            (stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
             retention, dead_letter_retention, owner)
        VALUES (create_stream_as.stream, create_stream_as.sequencing::ordered_events.sequencing,
                create_stream_as.initial_sequence,
                create_stream_as.gap_policy::ordered_events.gap_policy, create_stream_as.gap_timeout,
                create_stream_as.max_release_batch, create_stream_as.retention,
                create_stream_as.dead_letter_retention, caller)
        RETURNING d.stream_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'stream "%" already exists', stream
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with ordered_events.alter_stream(), or drop it first with ordered_events.drop_stream().';
    END;
    IF create_stream_as.retention IS NOT NULL THEN
        PERFORM ordered_events.start_retaining(new_id);
    END IF;

    -- What consumers' pools are measured against (src/delivery.c).
    INSERT INTO ordered_events.release_totals (stream_id, partitions, partition)
    VALUES (new_id, 1, 0);

    -- A global stream's one lane exists from the start (ranges shows it).
    IF create_stream_as.sequencing = 'global' THEN
        INSERT INTO ordered_events.progress (stream_id, lane, range_end)
        VALUES (new_id, '', create_stream_as.initial_sequence);
    END IF;

    -- append() takes the seqs of a fence stream from here; CACHE 1 so that
    -- the last allocated value is what every backend reads.
    IF create_stream_as.gap_policy = 'fence' THEN
        EXECUTE format('CREATE SEQUENCE ordered_events.%I AS bigint MINVALUE %s START %s CACHE 1',
                       format('fence_seq_%s', new_id), create_stream_as.initial_sequence,
                       create_stream_as.initial_sequence);
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.create_stream_as(text, text, bigint, text, interval, integer,
                                                    interval, interval, regrole) IS
    'Internal: create_stream() once it knows the calling role, the owner';
REVOKE EXECUTE ON FUNCTION ordered_events.create_stream_as(text,text,bigint,text,interval,integer,interval,interval,regrole) FROM PUBLIC;
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
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer,
                                                 interval, interval) IS
    'Create a stream owned by the calling role: an independent sequence space with its own range, release budget and retention';
REVOKE EXECUTE ON FUNCTION ordered_events.create_stream(text,text,bigint,text,interval,integer,interval,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.alter_stream_as(
    stream text, gap_policy text, gap_timeout interval, max_release_batch integer,
    retention interval, dead_letter_retention interval, keep_forever boolean,
    owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
    new_policy text := coalesce(alter_stream_as.gap_policy, d.gap_policy::text);
    new_timeout interval := CASE WHEN new_policy = 'timeout'
                                 THEN coalesce(alter_stream_as.gap_timeout, d.gap_timeout)
                                 ELSE alter_stream_as.gap_timeout END;
    new_batch integer := coalesce(alter_stream_as.max_release_batch, d.max_release_batch);
BEGIN
    PERFORM ordered_events.check_owner('stream', stream, d.owner, caller);
    PERFORM ordered_events.check_not_null('keep_forever', keep_forever IS NULL);
    IF alter_stream_as.owner IS NOT NULL THEN
        PERFORM ordered_events.check_new_owner('stream', stream, alter_stream_as.owner, caller);
    END IF;
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
    IF alter_stream_as.retention IS NOT NULL AND NOT d.retains_events THEN
        PERFORM ordered_events.start_retaining(d.stream_id);
    END IF;
    UPDATE ordered_events.stream_def s
       SET gap_policy = new_policy::ordered_events.gap_policy,
           gap_timeout = new_timeout,
           max_release_batch = new_batch,
           retention = CASE WHEN keep_forever THEN NULL
                            ELSE coalesce(alter_stream_as.retention, d.retention) END,
           dead_letter_retention = CASE WHEN keep_forever THEN NULL
                                        ELSE coalesce(alter_stream_as.dead_letter_retention,
                                                      d.dead_letter_retention) END,
           owner = coalesce(alter_stream_as.owner, d.owner)
     WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.alter_stream_as(text, text, interval, integer, interval,
                                                   interval, boolean, regrole, regrole) IS
    'Internal: alter_stream() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.alter_stream_as(text,text,interval,integer,interval,interval,boolean,regrole,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.alter_stream(
    stream text,
    gap_policy text DEFAULT NULL,
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT NULL,
    retention interval DEFAULT NULL,
    dead_letter_retention interval DEFAULT NULL,
    keep_forever boolean DEFAULT false,
    owner regrole DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.alter_stream(text, text, interval, integer, interval,
                                                interval, boolean, regrole) IS
    'Change the gap policy, release batch, retentions or owner of a stream; NULL keeps the value; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.alter_stream(text,text,interval,integer,interval,interval,boolean,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.drop_stream_as(stream text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    -- First wait for the reads of its consumers, as read() locks: never a
    -- deadlock with one.
    d := ordered_events.stream_or_error(stream);
    PERFORM ordered_events.check_owner('stream', stream, d.owner, caller);
    PERFORM ordered_events.lock_subscriptions(NULL, d.stream_id);
    /*
     * Wait for every transaction that may be writing events, so that none
     * can add an event to the stream after its rows are gone; then for a
     * release step in progress (it holds the stream_def row).
     */
    LOCK TABLE ordered_events.event_store IN SHARE ROW EXCLUSIVE MODE;
    d := ordered_events.stream_or_error(stream, true);
    PERFORM ordered_events.check_owner('stream', stream, d.owner, caller);
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
    PERFORM ordered_events.forget_parked(d.stream_id);
    DELETE FROM ordered_events.stream_def s WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.drop_stream_as(text, regrole) IS
    'Internal: drop_stream() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.drop_stream_as(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.drop_stream(stream text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.drop_stream(text) IS
    'Remove a stream with all its events, dead letters and history';
REVOKE EXECUTE ON FUNCTION ordered_events.drop_stream(text) FROM PUBLIC;
CREATE VIEW ordered_events.streams AS
SELECT d.stream, d.sequencing::text AS sequencing, d.initial_sequence,
       d.gap_policy::text AS gap_policy, d.gap_timeout, d.max_release_batch, d.created_at,
       d.retention, d.dead_letter_retention, d.owner, d.acl AS privileges
  FROM ordered_events.stream_def d;
COMMENT ON VIEW ordered_events.streams IS 'The streams and their configuration';
GRANT SELECT ON ordered_events.streams TO pg_monitor;
