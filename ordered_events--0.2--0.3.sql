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
 * 1. Owners and privileges (docs/security.md; docs/architecture.md, rule 15)
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
        CHECK (handler_timeout > interval '0' AND handler_timeout <= interval '24 days'),
    ADD COLUMN on_error text NOT NULL DEFAULT 'dead_letter' CHECK (on_error IN ('dead_letter', 'hold')),
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 1 CHECK (max_attempts BETWEEN 1 AND 100),
    ADD COLUMN retry_delay interval NOT NULL DEFAULT '1 s'
        CHECK (retry_delay >= interval '0' AND retry_delay <= interval '1 day');
COMMENT ON COLUMN ordered_events.consumer_def.handler_timeout IS
    'The limit of one handler call; NULL: the server''s ordered_events.handler_timeout';
COMMENT ON COLUMN ordered_events.consumer_def.on_error IS
    'What becomes of an event whose handler failed max_attempts times: ''dead_letter'' or ''hold''';

/*
 * A stream's owner is the role that created it; its acl holds what the
 * owner granted with grant_stream(): 'write' as INSERT, 'read' as SELECT
 * (src/privileges.c).  Streams of 0.2 belong to the extension's owner and
 * grant both to PUBLIC, so that 0.2's producers and readers go on.
 */
ALTER TABLE ordered_events.stream_def
    ADD COLUMN owner regrole,
    ADD COLUMN acl aclitem[];
UPDATE ordered_events.stream_def d
   SET owner = x.extowner::regrole,
       acl = ARRAY[pg_catalog.makeaclitem(0, x.extowner, 'SELECT', false),
                   pg_catalog.makeaclitem(0, x.extowner, 'INSERT', false)]
  FROM pg_catalog.pg_extension x WHERE x.extname = 'ordered_events';
ALTER TABLE ordered_events.stream_def ALTER COLUMN owner SET NOT NULL;
COMMENT ON COLUMN ordered_events.stream_def.owner IS
    'The role that created the stream (or was given it); it alone may change or drop it';
COMMENT ON COLUMN ordered_events.stream_def.acl IS
    'What the owner granted: INSERT is ''write'', SELECT is ''read''';

CREATE FUNCTION ordered_events.has_stream_privilege(role regrole, stream text, privilege text)
RETURNS boolean
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_has_stream_privilege';
COMMENT ON FUNCTION ordered_events.has_stream_privilege(regrole, text, text) IS
    'Whether a role has the privilege read or write on a stream';
CREATE FUNCTION ordered_events.has_stream_privilege(stream text, privilege text)
RETURNS boolean
LANGUAGE c STABLE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_has_stream_privilege';
COMMENT ON FUNCTION ordered_events.has_stream_privilege(text, text) IS
    'Whether the current role has the privilege read or write on a stream';

-- The views of events call it as their reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.may_read_stream(stream text)
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_may_read_stream';
COMMENT ON FUNCTION ordered_events.may_read_stream(text) IS
    'Internal: whether the current role may read the events of a stream';

-- The error unless the caller may act as the owner of the object.
CREATE FUNCTION ordered_events.check_owner(kind text, name text, owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NULL: a consumer of 0.2 without a handler, which has no owner
    IF owner IS NOT NULL AND NOT pg_catalog.pg_has_role(caller, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of % "%"', kind, name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('It belongs to role %s; role %s does not have its privileges.',
                                             owner, caller),
                  HINT = 'Run this as the owner, or as a member of the owner role.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_owner(text, text, regrole, regrole) IS
    'Internal: the error unless a role may act as the owner of a stream or consumer';

-- The error unless a role has a privilege on a stream.
CREATE FUNCTION ordered_events.check_stream_privilege(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT ordered_events.has_stream_privilege(role, stream, privilege) THEN
        RAISE EXCEPTION 'permission denied for stream "%"', stream
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('Its privilege ''%s'' is not granted to role %s.',
                                             privilege, role),
                  HINT = pg_catalog.format('Its owner, role %s, grants it with ordered_events.grant_stream(%L, %L, role).',
                                           (SELECT d.owner FROM ordered_events.stream_def d
                                             WHERE d.stream = check_stream_privilege.stream),
                                           stream, privilege);
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_stream_privilege(text, text, regrole) IS
    'Internal: the error unless a role has a privilege on a stream';

-- The error unless "caller" may give an object to the role new_owner.
CREATE FUNCTION ordered_events.check_new_owner(kind text, name text, new_owner regrole,
                                               caller regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF new_owner = 0 OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = new_owner) THEN
        PERFORM ordered_events.invalid_option('owner', new_owner::text, 'Name an existing role.');
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, new_owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be able to act as role % to give it % "%"', new_owner, kind, name
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'As for ALTER ... OWNER TO: be a member of the new owner role, or a superuser.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_new_owner(text, text, regrole, regrole) IS
    'Internal: the error unless a role may give an object to another role';

-- An acl with a privilege (INSERT or SELECT) of a grantee added or removed:
-- one item per grantee and privilege; NULL when none is left, as for a new
-- stream ('{}' has no dimension: aclexplode() and aclmask() reject it).
CREATE FUNCTION ordered_events.acl_with(acl aclitem[], owner regrole, grantee regrole,
                                        privilege text, present boolean)
RETURNS aclitem[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.array_agg(pg_catalog.makeaclitem(x.grantee, owner, x.privilege_type, false)
                            ORDER BY x.grantee, x.privilege_type)
  FROM (SELECT a.grantee, a.privilege_type FROM pg_catalog.aclexplode(acl) a
         WHERE NOT (a.grantee = acl_with.grantee AND a.privilege_type = privilege)
        UNION
        SELECT acl_with.grantee, privilege WHERE present) x
$$;
COMMENT ON FUNCTION ordered_events.acl_with(aclitem[], regrole, regrole, text, boolean) IS
    'Internal: the acl of a stream with a privilege granted or revoked';

CREATE FUNCTION ordered_events.grant_stream_as(stream text, privilege text, role regrole,
                                               caller regrole, present boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('privilege', privilege IS NULL);
    PERFORM ordered_events.check_not_null('role', role IS NULL);
    IF privilege NOT IN ('read', 'write') THEN
        PERFORM ordered_events.invalid_option('privilege', privilege,
            'Use ''write'' (ingest, inbox, append) or ''read'' (subscribe a consumer; see its events in released, pending, unprocessed).');
    END IF;
    d := ordered_events.stream_or_error(stream, true);
    PERFORM ordered_events.check_owner('stream', stream, d.owner, caller);
    UPDATE ordered_events.stream_def s
       SET acl = ordered_events.acl_with(d.acl, d.owner, role,
                                         CASE privilege WHEN 'write' THEN 'INSERT' ELSE 'SELECT' END,
                                         present)
     WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.grant_stream_as(text, text, regrole, regrole, boolean) IS
    'Internal: grant_stream() and revoke_stream() once they know the calling role';

CREATE FUNCTION ordered_events.revoke_stream_as(stream text, privilege text, role regrole,
                                                caller regrole)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT ordered_events.grant_stream_as(stream, privilege, role, caller, false)
$$;
COMMENT ON FUNCTION ordered_events.revoke_stream_as(text, text, regrole, regrole) IS
    'Internal: revoke_stream() once it knows the calling role';

CREATE FUNCTION ordered_events.grant_stream(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.grant_stream(text, text, regrole) IS
    'Grant read or write on a stream to a role (0: PUBLIC); for its owner';
CREATE FUNCTION ordered_events.revoke_stream(stream text, privilege text, role regrole)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.revoke_stream(text, text, regrole) IS
    'Revoke read or write on a stream from a role (0: PUBLIC); for its owner';

/*
 * create_stream(), alter_stream(), drop_stream(): as in 0.2, run by
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

CREATE OR REPLACE FUNCTION ordered_events.create_stream(
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

ALTER FUNCTION ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean)
    RENAME TO alter_stream_0_2;
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
SELECT ordered_events.carry_grants(
    'ordered_events.alter_stream_0_2(text, text, interval, integer, interval, interval, boolean)',
    'ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean, regrole)');
DROP FUNCTION ordered_events.alter_stream_0_2(text, text, interval, integer, interval, interval, boolean);

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

CREATE OR REPLACE FUNCTION ordered_events.drop_stream(stream text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';

/*
 * Consumers: drop_consumer(), subscribe(), unsubscribe() for the owner, and
 * alter_consumer() for the owner's handler_timeout and to give a consumer
 * to another role (0.2's consumers without a handler have none).
 */
-- A consumer its owner changes, or the error: unknown, another's, or its
-- own handler's (check_not_in_step() is in section 2).  "for_update" locks
-- its row (FOR NO KEY UPDATE: readers' foreign key checks do not wait).
CREATE FUNCTION ordered_events.consumer_to_change(consumer text, caller regrole,
                                                  for_update boolean DEFAULT false)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    IF for_update THEN
        SELECT * INTO c FROM ordered_events.consumer_def d
         WHERE d.consumer = consumer_to_change.consumer FOR NO KEY UPDATE;
    END IF;
    IF c.consumer_id IS NULL THEN
        c := ordered_events.consumer_or_error(consumer);
    END IF;
    PERFORM ordered_events.check_owner('consumer', consumer, c.owner, caller);
    PERFORM ordered_events.check_not_in_step(c.consumer_id);
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.consumer_to_change(text, regrole, boolean) IS
    'Internal: a consumer its owner changes, or the error';

CREATE FUNCTION ordered_events.drop_consumer_as(consumer text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    streams integer[];
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller);
    -- First wait for its reads, as read() locks: never a deadlock with one.
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    SELECT array_agg(DISTINCT s.stream_id) INTO streams
      FROM ordered_events.subscription s WHERE s.consumer_id = c.consumer_id;
    PERFORM ordered_events.lock_streams(streams);
    -- Waits for a read of the consumer in progress (it locks these rows).
    DELETE FROM ordered_events.consumer_def d WHERE d.consumer_id = c.consumer_id;
    -- its handler's states, results and dead letters go with it, as a
    -- stream's dead letters go with drop_stream()
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_parked p WHERE p.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    PERFORM ordered_events.forget_unused_totals(id) FROM unnest(streams) id;
END;
$$;
COMMENT ON FUNCTION ordered_events.drop_consumer_as(text, regrole) IS
    'Internal: drop_consumer() once it knows the calling role';
CREATE OR REPLACE FUNCTION ordered_events.drop_consumer(consumer text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';

/*
 * The error if subscribing a handler consumer to a stream closes a cycle:
 * its output stream already feeds that stream, through the output streams
 * of the consumers subscribed along the way.
 */
CREATE FUNCTION ordered_events.check_no_cycle(c ordered_events.consumer_def, stream_id integer)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    path text;
BEGIN
    IF c.output_stream_id IS NULL THEN
        RETURN;
    END IF;
    WITH RECURSIVE fed(stream_id, path) AS (
        SELECT c.output_stream_id, ARRAY[c.consumer]
        UNION
        SELECT o.output_stream_id, f.path || o.consumer
          FROM fed f
          JOIN ordered_events.subscription s ON s.stream_id = f.stream_id AND s.partition = 0
          JOIN ordered_events.consumer_def o ON o.consumer_id = s.consumer_id
         WHERE o.output_stream_id IS NOT NULL AND o.consumer <> ALL (f.path)
    )
    SELECT pg_catalog.array_to_string(f.path, ' -> ') INTO path
      FROM fed f WHERE f.stream_id = check_no_cycle.stream_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'subscribing consumer "%" to stream "%" would make a cycle', c.consumer,
              (SELECT d.stream FROM ordered_events.stream_def d
                WHERE d.stream_id = check_no_cycle.stream_id)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The derived events of %s feed that stream.', path),
                  HINT = 'A handler must not read, even through other handlers, what it derives: one event would multiply without end.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_no_cycle(ordered_events.consumer_def, integer) IS
    'Internal: the error if a subscription would feed the output of a handler back to it';

CREATE FUNCTION ordered_events.subscribe_as(
    consumer text, stream text, delay interval, start text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
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
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    -- its owner reads the stream through it (a consumer of 0.2 without one: the caller)
    PERFORM ordered_events.check_stream_privilege(stream, 'read', coalesce(c.owner, caller));
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
    UPDATE ordered_events.subscription s SET delay = subscribe_as.delay
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id;
    IF FOUND THEN
        RETURN;                 -- subscribed already: a new delay, the same position
    END IF;
    PERFORM ordered_events.check_no_cycle(c, d.stream_id);

    IF NOT EXISTS (SELECT FROM ordered_events.release_totals t
                    WHERE t.stream_id = d.stream_id AND t.partitions = c.partitions) THEN
        PERFORM ordered_events.count_released(d.stream_id, c.partitions);
    END IF;
    INSERT INTO ordered_events.subscription
        (consumer_id, partition, stream_id, delay, read_delivery, read_seq, taken_count, taken_lag)
    SELECT c.consumer_id, t.partition, d.stream_id, subscribe_as.delay,
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
COMMENT ON FUNCTION ordered_events.subscribe_as(text, text, interval, text, regrole) IS
    'Internal: subscribe() once it knows the calling role';
CREATE OR REPLACE FUNCTION ordered_events.subscribe(
    consumer text,
    stream text,
    delay interval DEFAULT '0 s',
    start text DEFAULT 'beginning')
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';

CREATE FUNCTION ordered_events.unsubscribe_as(consumer text, stream text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    -- the order of seek() and drop_consumer(): the positions, in read()'s
    -- order, then the stream's release lock (either way round: 40P01)
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
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
COMMENT ON FUNCTION ordered_events.unsubscribe_as(text, text, regrole) IS
    'Internal: unsubscribe() once it knows the calling role';
CREATE OR REPLACE FUNCTION ordered_events.unsubscribe(consumer text, stream text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';

CREATE FUNCTION ordered_events.alter_consumer_as(consumer text, on_error text,
                                                 max_attempts integer, retry_delay interval,
                                                 handler_timeout interval,
                                                 owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    s record;
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller, for_update => true);
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF c.handler IS NULL AND (handler_timeout IS NOT NULL OR on_error IS NOT NULL
                              OR max_attempts IS NOT NULL OR retry_delay IS NOT NULL) THEN
        RAISE EXCEPTION 'consumer "%" has no handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'handler_timeout, on_error, max_attempts and retry_delay rule the calls of a handler; a consumer without one is read by read().';
    END IF;
    IF alter_consumer_as.owner IS NOT NULL THEN
        -- the new owner must be allowed what the consumer does
        PERFORM ordered_events.check_new_owner('consumer', consumer, alter_consumer_as.owner, caller);
        IF c.handler IS NOT NULL THEN
            PERFORM ordered_events.check_handler(c.handler::regprocedure, alter_consumer_as.owner);
        END IF;
        FOR s IN SELECT d.stream, 'write' AS privilege FROM ordered_events.stream_def d
                  WHERE d.stream_id = c.output_stream_id
                 UNION
                 SELECT d.stream, 'read' FROM ordered_events.subscription x
                   JOIN ordered_events.stream_def d ON d.stream_id = x.stream_id
                  WHERE x.consumer_id = c.consumer_id
        LOOP
            PERFORM ordered_events.check_stream_privilege(s.stream, s.privilege,
                                                          alter_consumer_as.owner);
        END LOOP;
    END IF;
    UPDATE ordered_events.consumer_def d
       SET handler_timeout = coalesce(alter_consumer_as.handler_timeout, d.handler_timeout),
           on_error = coalesce(alter_consumer_as.on_error, d.on_error),
           max_attempts = coalesce(alter_consumer_as.max_attempts, d.max_attempts),
           retry_delay = coalesce(alter_consumer_as.retry_delay, d.retry_delay),
           owner = coalesce(alter_consumer_as.owner, d.owner)
     WHERE d.consumer_id = c.consumer_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.alter_consumer_as(text, text, integer, interval, interval, regrole, regrole) IS
    'Internal: alter_consumer() once it knows the calling role';
CREATE FUNCTION ordered_events.alter_consumer(
    consumer text,
    on_error text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    handler_timeout interval DEFAULT NULL,
    owner regrole DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.alter_consumer(text, text, integer, interval, interval, regrole) IS
    'Change the failure policy or handler_timeout of a consumer, or give it to another role; NULL keeps the value; for its owner';

-- A handler given by an OID that is no function is 42883, as a wrong one is.
CREATE OR REPLACE FUNCTION ordered_events.check_handler(handler regprocedure, owner regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p pg_catalog.pg_proc;
BEGIN
    SELECT * INTO p FROM pg_catalog.pg_proc f WHERE f.oid = handler;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'function with OID % does not exist', handler::oid
            USING ERRCODE = 'undefined_function',
                  HINT = 'Name the handler by its signature: ''fn(jsonb, ordered_events.event)''::regprocedure.';
    END IF;
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

-- The fence stream a handler consumer appends its results to, which its owner may write.
CREATE FUNCTION ordered_events.output_stream_or_error(output_stream text, owner regrole)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.output_stream_or_error(output_stream);
BEGIN
    PERFORM ordered_events.check_stream_privilege(output_stream, 'write', owner);
    RETURN d;
END;
$$;
COMMENT ON FUNCTION ordered_events.output_stream_or_error(text, regrole) IS
    'Internal: the fence stream named as the output of a handler, which its owner may write, or the error';

REVOKE EXECUTE ON FUNCTION
    ordered_events.check_owner(text, text, regrole, regrole),
    ordered_events.check_stream_privilege(text, text, regrole),
    ordered_events.check_new_owner(text, text, regrole, regrole),
    ordered_events.acl_with(aclitem[], regrole, regrole, text, boolean),
    ordered_events.grant_stream_as(text, text, regrole, regrole, boolean),
    ordered_events.revoke_stream_as(text, text, regrole, regrole),
    ordered_events.grant_stream(text, text, regrole),
    ordered_events.revoke_stream(text, text, regrole),
    ordered_events.create_stream_as(text, text, bigint, text, interval, integer, interval,
                                    interval, regrole),
    ordered_events.alter_stream_as(text, text, interval, integer, interval, interval, boolean,
                                   regrole, regrole),
    ordered_events.drop_stream_as(text, regrole),
    ordered_events.consumer_to_change(text, regrole, boolean),
    ordered_events.drop_consumer_as(text, regrole),
    ordered_events.check_no_cycle(ordered_events.consumer_def, integer),
    ordered_events.subscribe_as(text, text, interval, text, regrole),
    ordered_events.unsubscribe_as(text, text, regrole),
    ordered_events.alter_consumer_as(text, text, integer, interval, interval, regrole, regrole),
    ordered_events.alter_consumer(text, text, integer, interval, interval, regrole),
    ordered_events.output_stream_or_error(text, regrole)
FROM PUBLIC;

/*
 * What a role sees of events: those of the streams it may read ('read').
 * The monitoring views (stream_stats, key_status, ...) show every stream.
 */
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
         WHERE d.sequencing = 'global' AND ordered_events.may_read_stream(d.stream)
        UNION ALL
        SELECT d.stream, d.stream_id, d.initial_sequence, e.lane, e.seq, e.lane, e.payload,
               e.event_ts, e.alignment_ts, e.received_at, e.last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.event_store e ON e.stream_id = d.stream_id
         WHERE d.sequencing = 'per_key' AND ordered_events.may_read_stream(d.stream)) a
  LEFT JOIN ordered_events.progress p ON p.stream_id = a.stream_id AND p.lane = a.lane;

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
                -- OFFSET 0: planned on its own, an index range per lane (see 0.2)
                SELECT e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at
                  FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = l.lane
                   AND e.seq BETWEEN l.range_end AND 9223372036854775807
                OFFSET 0) e
         WHERE ordered_events.may_read_stream(d.stream)
        UNION ALL
        SELECT d.stream, e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts,
               e.received_at
          FROM ordered_events.gap_skips g
          JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
          JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
          JOIN ordered_events.event_store e
            ON e.stream_id = g.stream_id AND e.lane = g.lane
           AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
         WHERE NOT g.settled AND ordered_events.may_read_stream(d.stream)) w
 ORDER BY w.stream, w.lane, w.seq;

-- A role granted SELECT on unprocessed sees the rejections of the streams it may read.
ALTER TABLE ordered_events.unprocessed ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable_streams ON ordered_events.unprocessed FOR SELECT
    USING (ordered_events.may_read_stream(stream));

CREATE OR REPLACE VIEW ordered_events.streams AS
SELECT d.stream, d.sequencing::text AS sequencing, d.initial_sequence,
       d.gap_policy::text AS gap_policy, d.gap_timeout, d.max_release_batch, d.created_at,
       d.retention, d.dead_letter_retention, d.owner, d.acl AS privileges
  FROM ordered_events.stream_def d;

CREATE OR REPLACE VIEW ordered_events.consumers AS
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
       s.last_read_at,
       c.owner
  FROM ordered_events.subscription s
  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
  JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 CROSS JOIN LATERAL ordered_events.committed_position(s, s.xmin) p
 -- a role sees its own consumers (as members and leases show them); pg_monitor all
 WHERE c.owner IS NULL OR pg_catalog.pg_has_role(c.owner, 'USAGE')
    OR pg_catalog.pg_has_role('pg_monitor', 'USAGE')
 ORDER BY c.consumer, s.partition, d.stream;

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
    handler_timeout interval DEFAULT NULL,
    on_error text DEFAULT 'dead_letter',
    max_attempts integer DEFAULT 1,
    retry_delay interval DEFAULT '1 s')
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_create_consumer';
COMMENT ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval) IS
    'Create a consumer owned by the calling role: a named reader of the released events of the streams it subscribes to, read by the extension through a handler if one is given';
SELECT ordered_events.carry_grants(
    'ordered_events.create_consumer_0_2(text, integer, regprocedure, text, text)',
    'ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval)');
DROP FUNCTION ordered_events.create_consumer_0_2(text, integer, regprocedure, text, text);

DROP FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, regrole);
CREATE FUNCTION ordered_events.define_consumer(
    consumer text, partitions integer, handler regprocedure, output_stream text,
    alignment text, handler_timeout interval, on_error text, max_attempts integer,
    retry_delay interval, owner regrole)
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
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF handler IS NULL THEN
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL
           OR on_error <> 'dead_letter' OR max_attempts <> 1 OR retry_delay <> interval '1 s' THEN
            RAISE EXCEPTION 'output_stream, alignment, handler_timeout, on_error, max_attempts and retry_delay need a handler'
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
         handler_timeout, on_error, max_attempts, retry_delay)
    VALUES (define_consumer.consumer, define_consumer.partitions, handler::text, owner,
            (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = handler),
            output_id, define_consumer.alignment, define_consumer.handler_timeout,
            define_consumer.on_error, define_consumer.max_attempts, define_consumer.retry_delay);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'consumer "%" already exists', consumer
        USING ERRCODE = 'duplicate_object',
              HINT = 'Drop it first with ordered_events.drop_consumer(), or choose another name.';
END;
$$;
COMMENT ON FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, regrole) IS
    'Internal: create_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION
    ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, regrole)
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
 * 2. Handler limits (docs/handlers.md, "A time limit"; docs/architecture.md,
 *    rules 17 and 18)
 * ------------------------------------------------------------------------
 */

/*
 * A handler that calls a function of its own consumer: the functions that
 * change or drop a consumer call this first, and get 55006 while a step of
 * this transaction processes it (process() and read() check it in C).
 */
CREATE FUNCTION ordered_events.check_not_in_step(consumer_id integer)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_check_not_in_step_sql';
COMMENT ON FUNCTION ordered_events.check_not_in_step(integer) IS
    'Internal: the error for a handler that changes, drops or reads its own consumer';

/*
 * ordered_events.handler_timeout is PGC_SUSET since 0.3: a session of
 * another role cannot change it.  A handler function that sets it (0.2's
 * way to lower one handler's limit) would fail at every call by a consumer
 * owner who may not set it, so its value moves to the consumers of the
 * function, as their own handler_timeout (the lower one if they have one),
 * and the function's setting goes, with a warning.
 */
DO $$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS fn, c.setting,
               CASE WHEN v.value ~ '^[0-9]+$' THEN (v.value || ' ms')::interval
                    ELSE v.value::interval END AS timeout
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.unnest(p.proconfig) c(setting)
         CROSS JOIN LATERAL (SELECT pg_catalog.substr(c.setting,
                                 pg_catalog.length('ordered_events.handler_timeout=') + 1)) v(value)
         WHERE c.setting LIKE 'ordered\_events.handler\_timeout=%'
           AND p.oid IN (SELECT pg_catalog.to_regprocedure(d.handler)
                           FROM ordered_events.consumer_def d)
    LOOP
        IF f.timeout > interval '0' THEN
            UPDATE ordered_events.consumer_def d
               SET handler_timeout = LEAST(d.handler_timeout, f.timeout, interval '24 days')
             WHERE pg_catalog.to_regprocedure(d.handler) = f.fn;
        END IF;
        EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET ordered_events.handler_timeout', f.fn);
        RAISE WARNING 'function % no longer sets %', f.fn, f.setting
            USING DETAIL = 'Its consumers have their own handler_timeout instead (the lower one if they had one): since 0.3 only a superuser may set ordered_events.handler_timeout, and a call of the function by another role would fail.';
    END LOOP;
END;
$$;

/*
 * ALTER ROLE / ALTER DATABASE ... SET of it, which any role could make for
 * itself or its database before 0.3, is now the server's value for the
 * sessions it applies to (the worker's too, for a database): say so.
 */
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT coalesce(pg_catalog.quote_ident(d.datname), 'every database') AS db,
               coalesce(pg_catalog.quote_ident(a.rolname), 'every role') AS role, c.setting
          FROM pg_catalog.pg_db_role_setting s
         CROSS JOIN LATERAL pg_catalog.unnest(s.setconfig) c(setting)
          LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase
          LEFT JOIN pg_catalog.pg_roles a ON a.oid = s.setrole
         WHERE c.setting LIKE 'ordered\_events.handler\_timeout=%'
    LOOP
        RAISE WARNING '% is set for % in %', r.setting, r.role, r.db
            USING DETAIL = 'Before 0.3 any role could set it for itself or its database; now it is the server''s limit of handler calls for the sessions it applies to, and only a superuser may set it.',
                  HINT = 'Keep it if a superuser made it; otherwise remove it with ALTER ROLE ... RESET or ALTER DATABASE ... RESET ordered_events.handler_timeout.';
    END LOOP;
END;
$$;

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

/* ------------------------------------------------------------------------
 * 4. The fence (docs/concepts.md, "Gaps"; docs/architecture.md, rule 14)
 * ------------------------------------------------------------------------
 */

/*
 * blockers() of a fence stream names what the fence waits for
 * (src/gap_policy.c): the transactions older than the fence that hold the
 * stream's fence lock, which append() takes before its seq (an advisory
 * lock: database, classid = stream_id, objid 0, objsubid 20293 = 0x4F45).
 */
CREATE OR REPLACE FUNCTION ordered_events.blocking_transactions(stream text)
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

/* ------------------------------------------------------------------------
 * 5. Each rule in one home (issue 21)
 * ------------------------------------------------------------------------
 */

/*
 * The gap-timeout test, once: a gap first seen at first_seen has timed out
 * at "at" when first_seen + gap_timeout <= at (timestamptz + interval: a
 * month is a calendar month, a day a calendar day).  0.2 also wrote
 * first_seen <= at - gap_timeout, which is not the same test for months:
 * from 31 January, one month has passed on 28 February by the first, on
 * 3 March by the second.  The C function is the one the release step
 * calls (src/gap_policy.c, oe_gap_expired()).
 */
CREATE FUNCTION ordered_events.gap_expired(first_seen timestamptz, gap_timeout interval,
                                           at timestamptz)
RETURNS boolean
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_gap_expired_sql';
COMMENT ON FUNCTION ordered_events.gap_expired(timestamptz, interval, timestamptz) IS
    'Internal: whether a gap first seen at first_seen has been missing for gap_timeout at "at"';

/*
 * The end of a lane's released prefix: every event of the lane below it is
 * released.  An event is released when its seq is below the lane's
 * range_end and no skipped run that a late event may still commit into
 * (gap_skips, not settled) holds it, so the prefix ends at range_end or at
 * the first such run.  Compaction counts up to it (src/compaction.c) and
 * streams_to_compact() looks for streams to count by it.  A SQL-standard
 * body: parsed once, here, with this script's search_path.
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

/*
 * compact_stream() in C (src/compaction.c), a step of the engine that the
 * release steps use, so it takes their lock.  Its cut-offs come from
 * retention_cutoff() (section 3), and it refuses a REPEATABLE READ or
 * SERIALIZABLE transaction (25000): it must see, once it holds the lock,
 * every subscription and position committed before; under an older
 * snapshot it would miss a new subscription and delete the events that
 * subscription is shown as unread.  Its EXECUTE stays revoked from PUBLIC.
 */
CREATE OR REPLACE FUNCTION ordered_events.compact_stream(stream_id integer,
                                              OUT deleted bigint, OUT more boolean)
LANGUAGE c VOLATILE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'oe_compact_stream';
COMMENT ON FUNCTION ordered_events.compact_stream(integer) IS
    'Internal: one batch of counting and retention for a stream';

-- The functions that test these rules call them.
CREATE OR REPLACE FUNCTION ordered_events.streams_to_compact()
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
                                     AND s.read_delivery <= l.delivery))
    OR EXISTS (SELECT FROM ordered_events.unprocessed u
                WHERE d.dead_letter_retention IS NOT NULL
                  AND u.stream = d.stream AND u.consumer IS NULL
                  AND u.received_at < ordered_events.retention_cutoff(pg_catalog.clock_timestamp(),
                                                                      d.dead_letter_retention))
 ORDER BY d.stream
$$;

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
                OR ordered_events.gap_expired(p.gap_first_seen, d.gap_timeout,
                                              pg_catalog.clock_timestamp()) AS needed,
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

REVOKE EXECUTE ON FUNCTION
    ordered_events.gap_expired(timestamptz, interval, timestamptz),
    ordered_events.released_end(integer, text, bigint)
FROM PUBLIC;

-- The PL/pgSQL compaction's run type has no user left.
DROP TYPE ordered_events.compacted_run;

/* ------------------------------------------------------------------------
 * 6. One product per folder (issue 21): cycle hooks
 * ------------------------------------------------------------------------
 */

/*
 * Cycle hooks: a function another extension registers, which the worker
 * calls once a cycle, after compaction, in a transaction of its own (the
 * router's combine step of its sharded streams, router/README.md).  This
 * extension names no other: it calls what is registered here.
 *
 * A hook is a function of an extension, with no argument, returning bigint
 * (> 0: it did something and may have more at once).  Only the script of
 * that extension registers it (register_cycle_hook() checks that it
 * belongs to one; it and the table are the extension owner's alone), and
 * the worker calls it, as this extension's owner, only while it still
 * belongs to that extension: after DROP EXTENSION, its row stays and is
 * skipped; one made again under the same name by anyone else is never
 * called.  The table is not dumped: on a restore, the other extension's
 * CREATE EXTENSION registers its hook again.  The hook is stored by name
 * (text, not regprocedure, which pg_upgrade refuses in a table).
 */
CREATE TABLE ordered_events.cycle_hook (
    hook text PRIMARY KEY,              -- the function, as regprocedure prints it
    extension name NOT NULL             -- the extension it belongs to
);
COMMENT ON TABLE ordered_events.cycle_hook IS
    'Functions of other extensions that the worker calls once a cycle';

-- The extension that a function belongs to, or NULL.
CREATE FUNCTION ordered_events.extension_of(func regprocedure)
RETURNS name
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT e.extname
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
 WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = extension_of.func
   AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
$$;
COMMENT ON FUNCTION ordered_events.extension_of(regprocedure) IS
    'Internal: the extension a function belongs to';

CREATE FUNCTION ordered_events.register_cycle_hook(hook regprocedure)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ext name := ordered_events.extension_of(hook);
BEGIN
    IF ext IS NULL THEN
        RAISE EXCEPTION 'function % belongs to no extension', hook
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A cycle hook is registered by the script of the extension it belongs to.';
    END IF;
    IF (SELECT p.pronargs <> 0 OR p.prorettype <> 'pg_catalog.int8'::pg_catalog.regtype
          FROM pg_catalog.pg_proc p WHERE p.oid = hook) THEN
        RAISE EXCEPTION 'function % cannot be a cycle hook', hook
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A cycle hook takes no argument and returns bigint.';
    END IF;
    INSERT INTO ordered_events.cycle_hook (hook, extension)
    VALUES (hook::text, ext)
    ON CONFLICT ON CONSTRAINT cycle_hook_pkey DO UPDATE SET extension = excluded.extension;
END;
$$;
COMMENT ON FUNCTION ordered_events.register_cycle_hook(regprocedure) IS
    'Have the worker call a function of an extension once a cycle; for that extension''s script';

-- The hooks the worker calls, and the query that calls each.
CREATE FUNCTION ordered_events.cycle_hooks()
RETURNS TABLE (hook text, extension name, call text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT h.hook, h.extension, pg_catalog.format('SELECT %I.%I()', n.nspname, p.proname)
  FROM ordered_events.cycle_hook h
  JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure(h.hook)
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE p.prorettype = 'pg_catalog.int8'::pg_catalog.regtype
   AND ordered_events.extension_of(p.oid) = h.extension
 ORDER BY h.hook
$$;
COMMENT ON FUNCTION ordered_events.cycle_hooks() IS
    'Internal: the registered cycle hooks whose function still belongs to its extension';

REVOKE EXECUTE ON FUNCTION
    ordered_events.extension_of(regprocedure),
    ordered_events.register_cycle_hook(regprocedure),
    ordered_events.cycle_hooks()
FROM PUBLIC;

/* ------------------------------------------------------------------------
 * 7. Processing that keeps going (docs/handlers.md, "When a handler
 *    fails"): retries, held keys, re-drives
 * ------------------------------------------------------------------------
 */

ALTER TABLE ordered_events.handler_state
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz,
    ADD COLUMN held_since timestamptz,
    ADD COLUMN last_error text,
    ADD COLUMN parked integer NOT NULL DEFAULT 0;

/*
 * Parked events: events a processing step took from its consumer's
 * positions but did not apply, because their key waits: for the retry of
 * its failed event (handler_state.next_attempt_at), held until redrive()
 * or skip_held() (held_since), or behind the key's earlier parked events.
 * A key's first parked event (lowest position) is the one that failed, or
 * a dead letter redrive() queued.  The key's state row counts them
 * (parked); steps apply them first, in position order, once the key is
 * due (src/handler.c).
 */
CREATE SEQUENCE ordered_events.parked_position_seq AS bigint;
COMMENT ON SEQUENCE ordered_events.parked_position_seq IS
    'Internal: the order of parked events';
CREATE TABLE ordered_events.handler_parked (
    consumer_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    position bigint NOT NULL,
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    arrival bigint NOT NULL,
    payload jsonb,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    last_event boolean NOT NULL,
    received_at timestamptz NOT NULL,
    dead_letter boolean NOT NULL,       -- re-driven: its dead letter goes once it is applied
    parked_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, key, position)
);
COMMENT ON TABLE ordered_events.handler_parked IS
    'Internal: events of handler consumers that wait for a retry, a re-drive or an earlier event of their key';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_parked', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.parked_position_seq', '');
-- The keys whose parked events are due, and the held keys: few, found by index.
CREATE INDEX handler_state_due_idx ON ordered_events.handler_state (consumer_id, next_attempt_at)
    WHERE parked > 0 AND held_since IS NULL;
CREATE INDEX handler_state_held_idx ON ordered_events.handler_state (consumer_id, key)
    WHERE held_since IS NOT NULL;

-- A failure policy is on_error 'dead_letter' or 'hold', 1 to 100 attempts, a delay of 0 to 1 day.
CREATE FUNCTION ordered_events.check_failure_policy(on_error text, max_attempts integer,
                                                    retry_delay interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF on_error NOT IN ('dead_letter', 'hold') THEN
        PERFORM ordered_events.invalid_option('on_error', on_error,
            'Use ''dead_letter'' (the event goes to unprocessed, its key goes on) or ''hold'' (its key waits for redrive() or skip_held()).');
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many calls of the handler may fail for one event.');
    END IF;
    IF retry_delay < interval '0' OR retry_delay > interval '1 day' THEN
        PERFORM ordered_events.invalid_option('retry_delay', retry_delay::text,
            'Use an interval from 0 to 1 day: the wait before the first retry, doubled at each one after.');
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_failure_policy(text, integer, interval) IS
    'Internal: the error for an invalid on_error, max_attempts or retry_delay';

/*
 * The (consumer, partition)s whose handler has events to apply, released
 * or parked and due, the one that waited longest first: what the workers
 * process.
 */
CREATE OR REPLACE FUNCTION ordered_events.consumers_with_work()
RETURNS TABLE (consumer text, partition integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT w.consumer, w.partition
  FROM (SELECT c.consumer, s.partition, s.last_read_at AS waited_from
          FROM ordered_events.consumer_def c
          JOIN ordered_events.subscription s ON s.consumer_id = c.consumer_id
          JOIN ordered_events.release_totals t
            ON t.stream_id = s.stream_id AND t.partitions = c.partitions
           AND t.partition = s.partition
         WHERE c.handler IS NOT NULL AND t.released_count > s.taken_count
        UNION ALL
        SELECT c.consumer, ordered_events.key_partition(k.key, c.partitions), k.next_attempt_at
          FROM ordered_events.handler_state k
          JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
         WHERE k.parked > 0 AND k.held_since IS NULL AND k.next_attempt_at <= now()) w
 GROUP BY w.consumer, w.partition
 ORDER BY min(w.waited_from) NULLS FIRST, w.consumer, w.partition
$$;
COMMENT ON FUNCTION ordered_events.consumers_with_work() IS
    'Internal: the handler consumer partitions with events to apply';
REVOKE EXECUTE ON FUNCTION ordered_events.consumers_with_work() FROM PUBLIC;

-- Wake the worker when this transaction commits (redrive(), skip_held()).
CREATE FUNCTION ordered_events.wake_worker()
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_wake_worker';
COMMENT ON FUNCTION ordered_events.wake_worker() IS
    'Internal: have the worker look for work when this transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.wake_worker() FROM PUBLIC;
/*
 * drop_stream(): the parked events of a dropped stream go, and a key left
 * without parked events waits no more.
 */
CREATE FUNCTION ordered_events.forget_parked(stream_id integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
WITH gone AS (
    DELETE FROM ordered_events.handler_parked p
     WHERE p.stream_id = forget_parked.stream_id
    RETURNING p.consumer_id, p.key
), counts AS (
    SELECT g.consumer_id, g.key, count(*)::integer AS n FROM gone g GROUP BY g.consumer_id, g.key
)
UPDATE ordered_events.handler_state k
   SET parked = k.parked - n.n,
       attempts = CASE WHEN k.parked = n.n THEN 0 ELSE k.attempts END,
       last_error = CASE WHEN k.parked = n.n THEN NULL ELSE k.last_error END,
       held_since = CASE WHEN k.parked = n.n THEN NULL ELSE k.held_since END,
       next_attempt_at = CASE WHEN k.parked = n.n THEN NULL ELSE k.next_attempt_at END
  FROM counts n
 WHERE k.consumer_id = n.consumer_id AND k.key = n.key
$$;
COMMENT ON FUNCTION ordered_events.forget_parked(integer) IS
    'Internal: drop the parked events of a stream';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_parked(integer) FROM PUBLIC;
-- The handler consumer its owner changes, or the error; waits for its steps.
CREATE FUNCTION ordered_events.handler_consumer_to_change(consumer text, caller regrole)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.consumer_to_change(consumer, caller);
BEGIN
    IF c.handler IS NULL THEN
        RAISE EXCEPTION 'consumer "%" has no handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Only the events of a handler consumer are held or re-driven.';
    END IF;
    -- a step in progress holds these rows and writes the keys' rows at its end
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.handler_consumer_to_change(text, regrole) IS
    'Internal: the handler consumer that redrive() or skip_held() changes, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.handler_consumer_to_change(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.redrive_as(consumer text, key text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.handler_consumer_to_change(consumer, caller);
    held bigint;
    letters bigint := 0;
    l record;
BEGIN
    -- held keys, and keys waiting for a retry: due now, with their attempts again
    UPDATE ordered_events.handler_state k
       SET held_since = NULL, attempts = 0, next_attempt_at = now()
     WHERE k.consumer_id = c.consumer_id
       AND (k.held_since IS NOT NULL OR (k.parked > 0 AND k.next_attempt_at > now()))
       AND (redrive_as.key IS NULL OR k.key = redrive_as.key);
    GET DIAGNOSTICS held = ROW_COUNT;
    IF c.on_error = 'dead_letter' THEN
        -- oldest first; a key's from one stream in seq order, as they were applied
        FOR l IN
            SELECT u.key, d.stream_id, u.seq, u.payload,
                   coalesce(u.event_ts, u.received_at) AS event_ts, u.received_at
              FROM ordered_events.unprocessed u
              JOIN ordered_events.stream_def d ON d.stream = u.stream
             WHERE u.consumer = c.consumer AND u.reason = 'exception_thrown'
               AND (redrive_as.key IS NULL OR u.key = redrive_as.key)
               AND NOT EXISTS (SELECT FROM ordered_events.handler_parked p
                                WHERE p.consumer_id = c.consumer_id AND p.key = u.key
                                  AND p.stream_id = d.stream_id AND p.seq = u.seq AND p.dead_letter)
             ORDER BY u.received_at, u.stream, u.seq
        LOOP
            INSERT INTO ordered_events.handler_parked
                (consumer_id, key, position, stream_id, seq, arrival, payload, event_ts,
                 alignment_ts, last_event, received_at, dead_letter, parked_at)
            VALUES (c.consumer_id, l.key, nextval('ordered_events.parked_position_seq'),
                    l.stream_id, l.seq, 0, l.payload, l.event_ts, l.event_ts, false,
                    l.received_at, true, now());
            INSERT INTO ordered_events.handler_state AS k
                (consumer_id, key, state, last_stream_id, last_seq, processed_count,
                 error_count, updated_at, parked, next_attempt_at)
            VALUES (c.consumer_id, l.key, NULL, l.stream_id, l.seq, 0, 0, now(), 1, now())
            ON CONFLICT ON CONSTRAINT handler_state_pkey DO UPDATE
               SET parked = k.parked + 1, next_attempt_at = coalesce(k.next_attempt_at, now());
            letters := letters + 1;
        END LOOP;
    END IF;
    PERFORM ordered_events.wake_worker();
    RETURN held + letters;
END;
$$;
COMMENT ON FUNCTION ordered_events.redrive_as(text, text, regrole) IS
    'Internal: redrive() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.redrive_as(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.redrive(consumer text, key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.redrive(text, text) IS
    'Apply a handler consumer''s held events and pending retries (of one key or all) in its next step, and a dead_letter consumer''s dead letters; returns how many were queued; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.redrive(text,text) FROM PUBLIC;
CREATE FUNCTION ordered_events.skip_held_as(consumer text, key text, reason text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    k ordered_events.handler_state;
    e ordered_events.handler_parked;
BEGIN
    PERFORM ordered_events.check_not_null('key', key IS NULL);
    PERFORM ordered_events.check_not_null('reason', reason IS NULL);
    c := ordered_events.handler_consumer_to_change(consumer, caller);
    SELECT * INTO k FROM ordered_events.handler_state s
     WHERE s.consumer_id = c.consumer_id AND s.key = skip_held_as.key AND s.held_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM ordered_events.handler_parked p
     WHERE (p.consumer_id, p.key, p.position) =
           (SELECT q.consumer_id, q.key, q.position FROM ordered_events.handler_parked q
             WHERE q.consumer_id = c.consumer_id AND q.key = skip_held_as.key
             ORDER BY q.position LIMIT 1)
    RETURNING * INTO e;
    IF e.dead_letter THEN
        DELETE FROM ordered_events.unprocessed u
         WHERE u.consumer = c.consumer AND u.key = e.key AND u.seq = e.seq
           AND u.stream = (SELECT d.stream FROM ordered_events.stream_def d WHERE d.stream_id = e.stream_id);
    END IF;
    INSERT INTO ordered_events.unprocessed
        (stream, seq, key, payload, event_ts, reason, detail, received_at, consumer)
    SELECT d.stream, e.seq, e.key, e.payload, e.event_ts, 'exception_thrown',
           format('Skipped by %s: %s. Its last error, at attempt %s: %s', caller, reason,
                  k.attempts, k.last_error),
           e.received_at, c.consumer
      FROM ordered_events.stream_def d WHERE d.stream_id = e.stream_id;
    UPDATE ordered_events.handler_state s
       SET held_since = NULL, attempts = 0, last_error = NULL, parked = s.parked - 1,
           processed_count = s.processed_count + 1,
           next_attempt_at = CASE WHEN s.parked > 1 THEN now() END
     WHERE s.consumer_id = c.consumer_id AND s.key = skip_held_as.key;
    PERFORM ordered_events.wake_worker();
    RETURN 1;
END;
$$;
COMMENT ON FUNCTION ordered_events.skip_held_as(text, text, text, regrole) IS
    'Internal: skip_held() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.skip_held_as(text,text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.skip_held(consumer text, key text, reason text)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.skip_held(text, text, text) IS
    'Make the held event of a key a dead letter, with the reason, so that the key goes on; returns 1, or 0 if the key is not held; for the consumer''s owner';
REVOKE EXECUTE ON FUNCTION ordered_events.skip_held(text,text,text) FROM PUBLIC;

CREATE OR REPLACE VIEW ordered_events.key_state AS
SELECT c.consumer, k.key, k.state, d.stream AS last_stream, k.last_seq,
       k.processed_count, k.error_count, k.updated_at,
       k.attempts, CASE WHEN k.held_since IS NULL THEN k.next_attempt_at END AS next_attempt_at,
       k.held_since IS NOT NULL AS held
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = k.last_stream_id;
COMMENT ON VIEW ordered_events.key_state IS
    'The state of each key of each handler consumer, how many of its events were applied, and whether it waits for a retry or is held';
-- The held keys and the event each waits on: by an index of the held keys.
CREATE VIEW ordered_events.held AS
SELECT c.consumer, k.key, d.stream, p.seq, k.attempts, k.last_error, k.held_since
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
 CROSS JOIN LATERAL (SELECT q.stream_id, q.seq FROM ordered_events.handler_parked q
                      WHERE q.consumer_id = k.consumer_id AND q.key = k.key
                      ORDER BY q.position LIMIT 1) p
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id
 WHERE k.held_since IS NOT NULL;
COMMENT ON VIEW ordered_events.held IS
    'The held events of handler consumers, one per held key: their key''s later events wait until redrive() or skip_held()';

/* ------------------------------------------------------------------------
 * 8. Processing workers (issue 22; docs/operating.md, "Processing workers")
 * ------------------------------------------------------------------------
 */

/*
 * worker_status has one row per worker, the processing workers' too, and
 * gains kind and partition at the end.  A function's and a view's columns
 * cannot change in place: the 0.2 objects are renamed, made again, given
 * the privileges that users granted on the old ones (section 12 then keeps
 * only the extension's own in pg_init_privs), and dropped.  metrics reads
 * worker_report() (its release rows, now), so it is made again too.
 */
ALTER VIEW ordered_events.metrics RENAME TO metrics_0_2;
ALTER VIEW ordered_events.worker_status RENAME TO worker_status_0_2;
ALTER FUNCTION ordered_events.worker_report() RENAME TO worker_report_0_2;
CREATE FUNCTION ordered_events.worker_report(
    OUT database text, OUT pid integer, OUT state text,
    OUT started_at timestamptz, OUT last_cycle_at timestamptz,
    OUT cycles bigint, OUT released_total bigint, OUT last_error text,
    OUT processed_total bigint, OUT current_stream text, OUT current_consumer text,
    OUT last_cycle_duration interval, OUT released_per_second double precision,
    OUT processed_per_second double precision, OUT kind text, OUT partition integer)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_status';
COMMENT ON FUNCTION ordered_events.worker_report() IS
    'The state of the background workers (the view worker_status)';
REVOKE EXECUTE ON FUNCTION ordered_events.worker_report() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ordered_events.worker_report() TO pg_monitor;
CREATE VIEW ordered_events.worker_status AS
SELECT database, pid, state, started_at, last_cycle_at, cycles, released_total, last_error,
       processed_total, current_stream, current_consumer, last_cycle_duration,
       released_per_second, processed_per_second, kind, partition
  FROM ordered_events.worker_report();
COMMENT ON VIEW ordered_events.worker_status IS
    'One row per background worker: each served database''s release worker, and the processing workers of handler consumer partitions';
GRANT SELECT ON ordered_events.worker_status TO pg_monitor;
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
-- a handler consumer's held keys, keys waiting for a retry, and the events
-- parked behind them (by the partial indexes of handler_state)
SELECT m.metric, 'gauge', NULL, c.consumer, m.value
  FROM ordered_events.consumer_def c
 CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE k.held_since IS NOT NULL) AS held,
               count(*) FILTER (WHERE k.held_since IS NULL AND k.next_attempt_at > now()) AS retrying,
               coalesce(sum(k.parked), 0) AS parked
          FROM (SELECT h.held_since, h.next_attempt_at, h.parked
                  FROM ordered_events.handler_state h
                 WHERE h.consumer_id = c.consumer_id AND h.held_since IS NOT NULL
                UNION ALL
                SELECT h.held_since, h.next_attempt_at, h.parked
                  FROM ordered_events.handler_state h
                 WHERE h.consumer_id = c.consumer_id AND h.parked > 0 AND h.held_since IS NULL) k) n
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_handler_held_keys', n.held::double precision),
        ('ordered_events_handler_retrying_keys', n.retrying::double precision),
        ('ordered_events_handler_parked_events', n.parked::double precision)
       ) m(metric, value)
 WHERE c.handler IS NOT NULL
UNION ALL
-- the release worker of this database (its processed_total sums up the
-- database's processing workers)
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
 WHERE w.database = pg_catalog.current_database() AND w.kind = 'release';
COMMENT ON VIEW ordered_events.metrics IS
    'Metrics for Prometheus: one row per metric and label set (stream, consumer)';
GRANT SELECT ON ordered_events.metrics TO pg_monitor;

-- The privileges users granted on the 0.2 objects (columns too), on the new ones.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT o.kind, o.new_name, o.col, a.privilege_type, a.is_grantable,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
          FROM (SELECT 'TABLE' AS kind, n.new_name, NULL::name AS col, c.relacl AS acl,
                       c.relowner AS owner
                  FROM (VALUES ('ordered_events.metrics_0_2', 'ordered_events.metrics'),
                               ('ordered_events.worker_status_0_2', 'ordered_events.worker_status')
                       ) n(old_name, new_name)
                  JOIN pg_catalog.pg_class c ON c.oid = n.old_name::pg_catalog.regclass
                UNION ALL
                SELECT 'TABLE', n.new_name, t.attname, t.attacl, c.relowner
                  FROM (VALUES ('ordered_events.metrics_0_2', 'ordered_events.metrics'),
                               ('ordered_events.worker_status_0_2', 'ordered_events.worker_status')
                       ) n(old_name, new_name)
                  JOIN pg_catalog.pg_class c ON c.oid = n.old_name::pg_catalog.regclass
                  JOIN pg_catalog.pg_attribute t ON t.attrelid = c.oid AND t.attacl IS NOT NULL
                UNION ALL
                SELECT 'FUNCTION', 'ordered_events.worker_report()', NULL, p.proacl, p.proowner
                  FROM pg_catalog.pg_proc p
                 WHERE p.oid = 'ordered_events.worker_report_0_2()'::pg_catalog.regprocedure
               ) o
         CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) a
          LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE a.grantee <> o.owner
    LOOP
        EXECUTE pg_catalog.format('GRANT %s%s ON %s %s TO %s%s', g.privilege_type,
                                  CASE WHEN g.col IS NULL THEN ''
                                       ELSE pg_catalog.format(' (%I)', g.col) END,
                                  g.kind, g.new_name, g.grantee,
                                  CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END;
$$;
DROP VIEW ordered_events.metrics_0_2;
DROP VIEW ordered_events.worker_status_0_2;
DROP FUNCTION ordered_events.worker_report_0_2();

/* ------------------------------------------------------------------------
 * 9. Operating under backlog (issue 23; docs/monitoring.md, "What monitoring
 *    costs")
 * ------------------------------------------------------------------------
 */

/*
 * The release steps summarise each lane's backlog (src/backlog.c); until a
 * step has looked at a lane, readers read its events, as in 0.2, and
 * streams_with_work() asks for that step.
 */
ALTER TABLE ordered_events.progress ADD COLUMN backlog_end bigint;
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
/*
 * What waits beyond the ranges of a stream's lanes, from the summary of
 * their backlogs (src/backlog.c): its cost is the gaps and what arrived
 * since the last release step, not the pending events.
 */
CREATE FUNCTION ordered_events.stream_backlog(
    stream text, OUT pending_count bigint, OUT oldest_pending_at timestamptz,
    OUT max_pending_seq bigint, OUT first_gap_start bigint, OUT first_gap_since timestamptz)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_stream_backlog';
COMMENT ON FUNCTION ordered_events.stream_backlog(text) IS
    'Internal: the pending events of a stream beyond its lanes'' ranges, and its first gap (stream_stats)';
/*
 * Late events: those that committed into a skipped run a release step had
 * passed, pending until a step settles them (src/gap_policy.c), of every
 * stream: what stream_stats and key_status add to the backlogs.
 */
CREATE VIEW ordered_events.late_events AS
SELECT g.stream_id, d.stream, e.key, e.seq, e.received_at
  FROM ordered_events.gap_skips g
  JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
  JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
  JOIN ordered_events.event_store e
    ON e.stream_id = g.stream_id AND e.lane = g.lane
   AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
 WHERE NOT g.settled;
COMMENT ON VIEW ordered_events.late_events IS
    'Internal: events that committed late into a skipped run, not settled yet';
/*
 * stream_stats from counters, the backlogs' summary and the dead letters:
 * its cost is the stream's gaps, dead letters and skips, the events that
 * arrived since its last release step, and one pass over its lanes'
 * progress rows (the highest released seq), whatever it released or holds
 * pending (bench/monitoring.sh, 11a and 11e).  Late events in skipped runs
 * are pending too, until a release step settles them.  The skip ledger can
 * hold more than 2^63 seqs (a run from -9223372036854775808, or many
 * keys): skipped_count stops at the largest bigint instead of failing.
 */
CREATE OR REPLACE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing = 'global' THEN p.range_end END AS range_end,
       greatest(b.max_pending_seq, lt.max_late_seq, lr.last_released_seq) AS max_seen_seq,
       b.pending_count + lt.late_count AS pending_count,
       t.released_count,
       un.unprocessed_count,
       least(b.oldest_pending_at, lt.oldest_late_at) AS oldest_pending_at,
       b.first_gap_start,
       b.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
  JOIN ordered_events.release_totals t
    ON t.stream_id = d.stream_id AND t.partitions = 1 AND t.partition = 0
 CROSS JOIN LATERAL ordered_events.stream_backlog(d.stream) b
 CROSS JOIN LATERAL (
        SELECT count(*) AS late_count, min(l.received_at) AS oldest_late_at,
               max(l.seq) AS max_late_seq
          FROM ordered_events.late_events l WHERE l.stream_id = d.stream_id) lt
 CROSS JOIN LATERAL (
        SELECT max(q.last_released_seq) AS last_released_seq
          FROM ordered_events.progress q WHERE q.stream_id = d.stream_id) lr
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u
         WHERE u.stream = d.stream AND u.consumer IS NULL) un
 CROSS JOIN LATERAL (
        SELECT least(coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0),
                     9223372036854775807)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;

-- The pending events of one key of a per-key stream (src/backlog.c).
CREATE FUNCTION ordered_events.lane_backlog(
    stream text, key text, OUT pending_count bigint, OUT earliest_pending_seq bigint,
    OUT latest_pending_seq bigint)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_lane_backlog';
COMMENT ON FUNCTION ordered_events.lane_backlog(text, text) IS
    'Internal: the pending events of a key of a per-key stream (key_status)';
/*
 * key_status, from counters: its cost is the stream's keys and dead
 * letters, a global stream's pending events, and a per-key stream's gaps,
 * whatever it released or holds pending behind them.  Each part gives
 * rows of (stream, key, counts), summed per key:
 * - a global stream's released events are counted in key_counters once
 *   compacted, and from the events until then (the worker compacts after
 *   each release);
 * - a per-key stream's keys are its lanes, with their counters in progress;
 * - pending events (of every stream: key_status, like stream_stats, shows
 *   every stream to whoever may read it), last events not released yet,
 *   and dead letters (those a retention deleted are in key_counters).
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
        -- a global stream's pending events, one by one (no summary has its
        -- keys), and late events in skipped runs
        SELECT d.stream, e.key, 0, NULL, 1, e.seq, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
         CROSS JOIN LATERAL (
                SELECT e.key, e.seq FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = ''
                   AND e.seq BETWEEN p.range_end AND 9223372036854775807
                OFFSET 0) e
         WHERE d.sequencing = 'global'
        UNION ALL
        SELECT l.stream, l.key, 0, NULL, 1, l.seq, 0, 0, false
          FROM ordered_events.late_events l
        UNION ALL
        -- a per-key stream's lanes that can wait, from their backlogs'
        -- summary (src/backlog.c): one row with the count and the earliest
        -- seq, one with the latest
        SELECT d.stream, l.lane, 0, NULL, v.buffered, v.seq, 0, 0, false
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT p.lane FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
                UNION
                SELECT a.key FROM ordered_events.key_arrivals a
                 WHERE a.stream_id = d.stream_id) l
         CROSS JOIN LATERAL ordered_events.lane_backlog(d.stream, l.lane) b
         CROSS JOIN LATERAL (VALUES (b.pending_count, b.earliest_pending_seq),
                                    (0, b.latest_pending_seq)) v(buffered, seq)
         WHERE d.sequencing = 'per_key' AND b.pending_count > 0
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

/* ------------------------------------------------------------------------
 * 10. Compaction by hand (issue 23; docs/operating.md, "Without the worker")
 *
 * compact() did one batch of at most 1000 events per stream per call, so a
 * pg_cron job once a minute counted 2M released events in 33 hours.  It
 * now does every batch that is due, in the caller's transaction, through
 * compact_due() (src/compaction.c); the worker's compact_stream() is
 * unchanged.
 * ------------------------------------------------------------------------
 */

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
-- compact(): the worker's compaction by hand, every batch that is due
-- (its grants stay: the same function, replaced).
CREATE OR REPLACE FUNCTION ordered_events.compact(stream text DEFAULT NULL)
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

/* ------------------------------------------------------------------------
 * 11. Keyset reads (issue 23; docs/reference.md, "Reading"): released and
 *     pending read by stream (and key) with a lower seq bound and a LIMIT
 *     are index ranges.  Same columns: CREATE OR REPLACE keeps users' grants.
 * ------------------------------------------------------------------------
 */

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
CREATE OR REPLACE VIEW ordered_events.released AS
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
CREATE OR REPLACE VIEW ordered_events.pending AS
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

/* ------------------------------------------------------------------------
 * 12. Waiting reads and per-consumer wake-ups (issue 24; docs/consuming.md,
 *     "Waiting reads"): read() waits up to "wait" for a release; read() and
 *     peek() return released_at.  New functions with the old ones' grants.
 * ------------------------------------------------------------------------
 */
ALTER FUNCTION ordered_events.read(text, integer, integer) RENAME TO read_0_2;
ALTER FUNCTION ordered_events.peek(text, integer, integer) RENAME TO peek_0_2;
CREATE FUNCTION ordered_events.read(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0, wait interval DEFAULT '0 s')
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_read';
COMMENT ON FUNCTION ordered_events.read(text, integer, integer, interval) IS
    'The next events of a consumer (partition) in merged order, waiting up to "wait" for some; consumed when the transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.read(text,integer,integer,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.peek(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_peek';
COMMENT ON FUNCTION ordered_events.peek(text, integer, integer) IS
    'What read() would return now, consuming nothing';
REVOKE EXECUTE ON FUNCTION ordered_events.peek(text,integer,integer) FROM PUBLIC;
SELECT ordered_events.carry_grants('ordered_events.read_0_2(text,integer,integer)',
                                   'ordered_events.read(text,integer,integer,interval)');
SELECT ordered_events.carry_grants('ordered_events.peek_0_2(text,integer,integer)',
                                   'ordered_events.peek(text,integer,integer)');
DROP FUNCTION ordered_events.read_0_2(text, integer, integer);
DROP FUNCTION ordered_events.peek_0_2(text, integer, integer);

/* ------------------------------------------------------------------------
 * 15. Seek and rebuild (issue 24; docs/consuming.md, "Replay: seek and
 *     rebuild"): seek() and reset_consumer(), new functions.
 * ------------------------------------------------------------------------
 */

-- reset_consumer(): the handler is called again for the events of calls stopped past their limit.
CREATE FUNCTION ordered_events.forget_stopped_calls(consumer_id integer, partitions integer)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'oe_forget_stopped_calls';
COMMENT ON FUNCTION ordered_events.forget_stopped_calls(integer, integer) IS
    'Internal: forget the stopped handler calls of a consumer when this transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_stopped_calls(integer,integer) FROM PUBLIC;
/*
 * Move a consumer's positions in streams, in every partition (seek() and
 * reset_consumer()): to 'beginning' or 'now' as subscribe() places them,
 * or with released_at before the first release run (by delivery) released
 * at or after it.  Each partition's taken_* become what is before the new
 * position: the stream's totals minus the events read() finds after it
 * (the release runs after the position, that partition's events in them,
 * none in a skipped run not settled yet), so that unread_count is what
 * read() returns, whatever a retention deleted.  Returns the unread count
 * after it, over the streams and partitions.  consumed_count stays: events
 * read again are counted again.  The position becomes committed for this
 * transaction (read_xid and base_* cleared): a read() after it in the same
 * transaction starts from it.
 *
 * Locks: the subscription rows of the streams, in read()'s order (by
 * partition, then stream), so that a read or processing step of the
 * consumer in progress ends first and the next waits for this transaction;
 * then the streams' release locks, so that no release step or compaction
 * changes what is counted until this transaction ends.  It refuses
 * REPEATABLE READ and SERIALIZABLE (25000), as compaction does: a snapshot
 * taken before the locks could count events a compaction deleted meanwhile.
 */
CREATE FUNCTION ordered_events.seek_streams(c ordered_events.consumer_def, stream_ids integer[],
                                            start text, released_at timestamptz, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
    first_run bigint;
    after_run bigint;
    whole boolean;
    total bigint := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'cannot seek consumer "%" in a % transaction', c.consumer,
                        current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  DETAIL = 'A seek counts the events it makes unread once it holds the streams'' locks; this transaction''s snapshot may predate a compaction that deleted some of them.',
                  HINT = 'Call it in a READ COMMITTED transaction.';
    END IF;
    PERFORM FROM ordered_events.subscription s
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = ANY (stream_ids)
     ORDER BY s.partition, s.stream_id
       FOR UPDATE;
    PERFORM ordered_events.lock_streams(stream_ids);
    FOR d IN SELECT * FROM ordered_events.stream_def x
              WHERE x.stream_id = ANY (stream_ids) ORDER BY x.stream_id
    LOOP
        -- its owner reads the stream through it (a consumer of 0.2 without one: the caller)
        PERFORM ordered_events.check_stream_privilege(d.stream, 'read', coalesce(c.owner, caller));
        first_run := NULL;
        after_run := 0;
        IF seek_streams.released_at IS NOT NULL THEN
            SELECT l.delivery INTO first_run FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id AND l.released_at >= seek_streams.released_at
             ORDER BY l.delivery LIMIT 1;
        END IF;
        IF seek_streams.released_at IS NOT NULL OR start = 'now' THEN
            -- after the last run before it (none: every run is after it)
            SELECT coalesce(max(l.delivery), 0) INTO after_run FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id AND (first_run IS NULL OR l.delivery < first_run);
        END IF;
        -- every event released is still there: nothing is before the position
        whole := after_run = 0 AND NOT d.retains_events;
        WITH kept AS (
            SELECT ordered_events.key_partition(CASE WHEN d.sequencing = 'per_key' THEN e.lane
                                                     ELSE e.key END, c.partitions) AS partition,
                   count(*) AS released_count,
                   sum(ordered_events.lag_us(e.event_ts, e.alignment_ts)) AS lag_sum
              FROM ordered_events.lane_release_log l
              JOIN ordered_events.event_store e
                ON e.stream_id = l.stream_id AND e.lane = l.lane
               AND e.seq >= l.seq_start AND e.seq < l.seq_end
             WHERE NOT whole AND l.stream_id = d.stream_id AND l.delivery > after_run
               AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                                WHERE g.stream_id = e.stream_id AND g.lane = e.lane
                                  AND NOT g.settled AND e.seq BETWEEN g.gap_start AND g.gap_end)
             GROUP BY 1
        ), moved AS (
            UPDATE ordered_events.subscription s
               SET read_delivery = after_run, read_seq = 9223372036854775807,
                   taken_count = CASE WHEN whole THEN 0
                                      ELSE t.released_count - coalesce(u.released_count, 0) END,
                   taken_lag = CASE WHEN whole THEN 0 ELSE t.lag_sum - coalesce(u.lag_sum, 0) END,
                   read_xid = NULL, base_delivery = NULL, base_seq = NULL, base_count = NULL,
                   base_lag = NULL
              FROM ordered_events.release_totals t
              LEFT JOIN kept u ON u.partition = t.partition
             WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id
               AND t.stream_id = d.stream_id AND t.partitions = c.partitions
               AND t.partition = s.partition
            RETURNING t.released_count - s.taken_count AS unread_count
        )
        SELECT total + coalesce(sum(m.unread_count), 0) INTO total FROM moved m;
    END LOOP;
    -- a lease consumer's events of these streams out now are not any more
    IF c.delivery = 'lease' THEN
        PERFORM ordered_events.forget_leases(c.consumer_id, stream_ids);
    END IF;
    IF c.handler IS NOT NULL THEN
        PERFORM ordered_events.wake_worker();
    END IF;
    RETURN total;
END;
$$;
COMMENT ON FUNCTION ordered_events.seek_streams(ordered_events.consumer_def, integer[], text, timestamptz, regrole) IS
    'Internal: move a consumer''s positions in streams, every partition; the unread count after it';
REVOKE EXECUTE ON FUNCTION ordered_events.seek_streams(ordered_events.consumer_def,integer[],text,timestamp with time zone,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.seek_as(consumer text, stream text, start text,
                                       released_at timestamptz, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('start', start IS NULL AND released_at IS NULL);
    IF released_at IS NULL AND start NOT IN ('beginning', 'now') THEN
        PERFORM ordered_events.invalid_option('start', start,
            'Use ''beginning'' (the first event the stream keeps) or ''now'' (only events released from now on), or pass released_at.');
    END IF;
    IF released_at IS NOT NULL AND start <> 'beginning' THEN
        PERFORM ordered_events.invalid_option('start', start,
            'With released_at the seek goes to the first event released at or after it: leave start out, or pass NULL.');
    END IF;
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    IF NOT EXISTS (SELECT FROM ordered_events.subscription s
                    WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id) THEN
        RAISE EXCEPTION 'consumer "%" is not subscribed to stream "%"', consumer, stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'Subscribe it with ordered_events.subscribe(), which takes a start too; the view ordered_events.consumers lists the subscriptions.';
    END IF;
    RETURN ordered_events.seek_streams(c, ARRAY[d.stream_id], coalesce(start, 'beginning'),
                                       released_at, caller);
END;
$$;
COMMENT ON FUNCTION ordered_events.seek_as(text, text, text, timestamptz, regrole) IS
    'Internal: seek() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.seek_as(text,text,text,timestamp with time zone,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.seek(
    consumer text,
    stream text,
    start text DEFAULT 'beginning',
    released_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.seek(text, text, text, timestamptz) IS
    'Move a consumer''s position in a stream, every partition: to ''beginning'', ''now'', or the first event released at or after released_at; returns the unread count; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.seek(text,text,text,timestamp with time zone) FROM PUBLIC;
/*
 * reset_consumer(): a rebuild.  A handler consumer's key states, results,
 * parked events (retries, held keys, re-driven dead letters) and dead
 * letters go, and so do the handler calls recorded as stopped (at commit),
 * so that the handler is called for those events again; then every stream
 * is sought to the beginning, which first waits for a processing step in
 * progress and holds back the next until this transaction ends.  What the
 * handler appended to its output stream stays: the rebuild appends again.
 */
CREATE FUNCTION ordered_events.reset_consumer_as(consumer text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.consumer_to_change(consumer, caller);
    unread bigint;
BEGIN
    unread := ordered_events.seek_streams(c, ARRAY(SELECT DISTINCT s.stream_id
                                                     FROM ordered_events.subscription s
                                                    WHERE s.consumer_id = c.consumer_id),
                                          'beginning', NULL, caller);
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_parked p WHERE p.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    IF c.handler IS NOT NULL THEN
        PERFORM ordered_events.forget_stopped_calls(c.consumer_id, c.partitions);
    END IF;
    RETURN unread;
END;
$$;
COMMENT ON FUNCTION ordered_events.reset_consumer_as(text, regrole) IS
    'Internal: reset_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.reset_consumer_as(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.reset_consumer(consumer text)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.reset_consumer(text) IS
    'Rebuild a consumer: forget a handler''s key states, results and dead letters, and seek every stream to the beginning; returns the unread count; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.reset_consumer(text) FROM PUBLIC;

/* ------------------------------------------------------------------------
 * 14. Consumer groups (issue 24; docs/consuming.md, "Groups of readers"):
 *     join(), leave() and the view members, new objects as in
 *     src/sql/groups.sql.
 * ------------------------------------------------------------------------
 */

/*
 * Groups of readers (docs/consuming.md, "Groups of readers"): the sessions
 * that read one consumer join it as members, and join() spreads its
 * partitions over the live ones.  A member holds its partitions while it
 * renews (join() again) within its lease.  Exactly-once does not depend on
 * this: read() locks the subscription rows of its partition, so two members
 * that both believe they hold a partition still read each event once.
 *
 * Concurrency: join() and leave() lock the consumer's consumer_def row
 * (FOR NO KEY UPDATE, as alter_consumer() does), so that the calls of one
 * consumer run one after the other and each sees the assignment the one
 * before wrote.
 */

/*
 * The members of consumers' groups: the partitions each holds, and until
 * when without a renewal.  Each partition of the consumer is in the
 * partitions of at most one member.
 */
CREATE TABLE ordered_events.group_member (
    consumer_id integer NOT NULL
        REFERENCES ordered_events.consumer_def ON DELETE CASCADE,
    member text NOT NULL,
    partitions integer[] NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, member)
);
COMMENT ON TABLE ordered_events.group_member IS
    'Internal: the members of each consumer''s group, their partitions and leases';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.group_member', '');

/*
 * The consumer a member joins or leaves ("called": which), its row locked,
 * or the error: a read-only transaction, a NULL or bad argument, an
 * unknown consumer, another's, a handler's.
 */
CREATE FUNCTION ordered_events.group_consumer(consumer text, member text, caller regrole,
                                              called text)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    IF current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute %() in a read-only transaction', called
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('member', member IS NULL);
    c := ordered_events.consumer_to_change(consumer, caller, for_update => true);
    IF c.handler IS NOT NULL THEN
        RAISE EXCEPTION 'consumer "%" has a handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'The extension reads a handler consumer itself, one worker per partition: it has no members.';
    END IF;
    IF member = '' OR length(member) > 200 THEN
        PERFORM ordered_events.invalid_option('member',
            CASE WHEN member = '' THEN '''''' ELSE length(member) || ' characters' END,
            'Name a member with 1 to 200 characters, the same at every join(), e.g. the host and process id.');
    END IF;
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.group_consumer(text, text, regrole, text) IS
    'Internal: the consumer a member joins or leaves, locked, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.group_consumer(text,text,regrole,text) FROM PUBLIC;
/*
 * Spread the partitions 0 .. partitions - 1 of a consumer over the members
 * of its group, evenly, moving as few as possible:
 *   1. with n members, each gets partitions / n, and the first
 *      partitions % n get one more, ranked by how many they hold now (most
 *      first), then by name;
 *   2. each member keeps its lowest-numbered current partitions up to that
 *      quota;
 *   3. the partitions nobody kept go, in order, to the members below their
 *      quota, in rank order.
 * The quotas add up to the partitions: every partition has one member and
 * the counts differ by at most one.  A spread that is even already stays
 * as it is (the members that hold one more rank first and keep it all), so
 * partitions move only when a member joined, left or expired, and then
 * only those the even spread needs.
 */
CREATE FUNCTION ordered_events.assign_partitions(consumer_id integer, partitions integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
WITH held AS (
    SELECT g.member, p.p
      FROM ordered_events.group_member g
     CROSS JOIN LATERAL unnest(g.partitions) p(p)
     WHERE g.consumer_id = assign_partitions.consumer_id
       AND p.p >= 0 AND p.p < assign_partitions.partitions
), quota AS (
    SELECT r.member, r.rank,
           assign_partitions.partitions / r.n
           + CASE WHEN r.rank <= assign_partitions.partitions % r.n THEN 1 ELSE 0 END AS quota
      FROM (SELECT g.member, count(*) OVER () AS n,
                   row_number() OVER (ORDER BY (SELECT count(*) FROM held h
                                                 WHERE h.member = g.member) DESC,
                                               g.member) AS rank
              FROM ordered_events.group_member g
             WHERE g.consumer_id = assign_partitions.consumer_id) r
), kept AS (
    SELECT h.member, h.p
      FROM (SELECT h.member, h.p, row_number() OVER (PARTITION BY h.member ORDER BY h.p) AS i
              FROM held h) h
      JOIN quota q ON q.member = h.member
     WHERE h.i <= q.quota
), unkept AS (
    SELECT p.p, row_number() OVER (ORDER BY p.p) AS i
      FROM generate_series(0, assign_partitions.partitions - 1) p(p)
     WHERE NOT EXISTS (SELECT FROM kept k WHERE k.p = p.p)
), places AS (      -- one row per partition a member lacks, in rank order
    SELECT q.member, row_number() OVER (ORDER BY q.rank, s.k) AS i
      FROM quota q
     CROSS JOIN LATERAL generate_series(1, q.quota - (SELECT count(*) FROM kept k
                                                       WHERE k.member = q.member)) s(k)
), spread AS (
    SELECT q.member, coalesce(array_agg(a.p ORDER BY a.p) FILTER (WHERE a.p IS NOT NULL),
                              '{}') AS partitions
      FROM quota q
      LEFT JOIN (SELECT k.member, k.p FROM kept k
                 UNION ALL
                 SELECT x.member, u.p FROM unkept u JOIN places x ON x.i = u.i) a
        ON a.member = q.member
     GROUP BY q.member
)
UPDATE ordered_events.group_member g SET partitions = s.partitions
  FROM spread s
 WHERE g.consumer_id = assign_partitions.consumer_id AND g.member = s.member
   AND g.partitions IS DISTINCT FROM s.partitions
$$;
COMMENT ON FUNCTION ordered_events.assign_partitions(integer, integer) IS
    'Internal: spread a consumer''s partitions evenly over its members, moving as few as possible';
REVOKE EXECUTE ON FUNCTION ordered_events.assign_partitions(integer,integer) FROM PUBLIC;
/*
 * Register or renew a member, drop the members whose lease ran out, spread
 * the partitions again and return the member's.  The lease runs from the
 * call's clock (clock_timestamp()), not from its transaction's start.
 */
CREATE FUNCTION ordered_events.join_as(consumer text, member text, lease interval,
                                       caller regrole)
RETURNS integer[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    clock timestamptz;
    held integer[];
BEGIN
    PERFORM ordered_events.check_not_null('lease', lease IS NULL);
    c := ordered_events.group_consumer(consumer, member, caller, 'join');
    IF lease <= interval '0' OR lease > interval '1 day' THEN
        PERFORM ordered_events.invalid_option('lease', lease::text,
            'Use a positive interval of at most 1 day: how long the member holds its partitions without calling join() again.');
    END IF;
    clock := clock_timestamp();
    INSERT INTO ordered_events.group_member AS g (consumer_id, member, partitions, lease_until)
    VALUES (c.consumer_id, join_as.member, '{}', clock + lease)
    ON CONFLICT ON CONSTRAINT group_member_pkey DO UPDATE SET lease_until = excluded.lease_until;
    DELETE FROM ordered_events.group_member g
     WHERE g.consumer_id = c.consumer_id AND g.member <> join_as.member
       AND g.lease_until < clock;
    PERFORM ordered_events.assign_partitions(c.consumer_id, c.partitions);
    SELECT g.partitions INTO held FROM ordered_events.group_member g
     WHERE g.consumer_id = c.consumer_id AND g.member = join_as.member;
    RETURN held;
END;
$$;
COMMENT ON FUNCTION ordered_events.join_as(text, text, interval, regrole) IS
    'Internal: join() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.join_as(text,text,interval,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.join(consumer text, member text, lease interval DEFAULT '30 s')
RETURNS integer[]
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.join(text, text, interval) IS
    'Join or renew a member of a consumer''s group for lease; returns the partitions it holds now; for the consumer''s owner';
REVOKE EXECUTE ON FUNCTION ordered_events.join(text,text,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.leave_as(consumer text, member text, caller regrole)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    c := ordered_events.group_consumer(consumer, member, caller, 'leave');
    DELETE FROM ordered_events.group_member g
     WHERE g.consumer_id = c.consumer_id AND g.member = leave_as.member;
    RETURN FOUND;
END;
$$;
COMMENT ON FUNCTION ordered_events.leave_as(text, text, regrole) IS
    'Internal: leave() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.leave_as(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.leave(consumer text, member text)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.leave(text, text) IS
    'Leave a consumer''s group: the member''s partitions go to the others at their next join(); false if it was no member; for the consumer''s owner';
REVOKE EXECUTE ON FUNCTION ordered_events.leave(text,text) FROM PUBLIC;
/*
 * The members of the consumers the reader may act as owner of (a consumer
 * of 0.2 without an owner: anyone's), of every consumer for pg_monitor.
 * A security barrier: a reader's own functions in its query see no other
 * row.
 */
CREATE VIEW ordered_events.members WITH (security_barrier) AS
SELECT c.consumer, g.member, g.partitions, g.lease_until
  FROM ordered_events.group_member g
  JOIN ordered_events.consumer_def c ON c.consumer_id = g.consumer_id
 WHERE c.owner IS NULL OR pg_catalog.pg_has_role(c.owner, 'USAGE')
    OR pg_catalog.pg_has_role('pg_monitor', 'USAGE')
 ORDER BY c.consumer, g.member;
COMMENT ON VIEW ordered_events.members IS
    'The members of each consumer''s group, the partitions each holds and its lease';
GRANT SELECT ON ordered_events.members TO pg_monitor;

/* ------------------------------------------------------------------------
 * 16. Sharding (issue 25; docs/sharding.md, "Writing through the router"):
 *     a batch is checked whole before any of it is written, on a shard and
 *     on its router alike.
 * ------------------------------------------------------------------------
 */

/*
 * The checks ingest() makes of each event's arguments, made of a whole
 * batch before any of it is written: by ingest_array(), and by a router
 * before it sends each shard its part.  It reads and writes nothing, so
 * PUBLIC may call it (the role a router connects as runs ingest_array()).
 */
CREATE FUNCTION ordered_events.check_event_batch(stream text, seqs bigint[], keys text[],
                                                 payloads jsonb[])
RETURNS void
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_check_event_batch';
COMMENT ON FUNCTION ordered_events.check_event_batch(text, bigint[], text[], jsonb[]) IS
    'Fail unless every event of a batch passes ingest()''s checks of its arguments: arrays of one length, no NULL seq or key, no key over the limit';

-- ingest_array() checks its batch first: arrays of different lengths were
-- padded with NULLs (a seq NULL in the middle of a batch, or payloads lost).
CREATE OR REPLACE FUNCTION ordered_events.ingest_array(stream text, seqs bigint[], keys text[],
                                            payloads jsonb[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    written bigint;
BEGIN
    -- the whole batch first: a bad event writes nothing (src/shard.c)
    PERFORM ordered_events.check_event_batch(stream, seqs, keys, payloads);
    INSERT INTO ordered_events.inbox (stream, seq, key, payload)
    SELECT ingest_array.stream, u.seq, u.key, u.payload
      FROM unnest(seqs, keys, payloads) u(seq, key, payload);
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END;
$$;

/* ------------------------------------------------------------------------
 * 13. Lease mode (issue 24; docs/consuming.md, "Work outside the database:
 *     the lease mode"): create_consumer(..., delivery), receive(), ack(),
 *     nack(), the view leases
 * ------------------------------------------------------------------------
 */

ALTER TABLE ordered_events.consumer_def
    ADD COLUMN delivery text NOT NULL DEFAULT 'transaction' CHECK (delivery IN ('transaction', 'lease')),
    ADD CONSTRAINT consumer_def_lease_check CHECK (delivery = 'transaction' OR handler IS NULL);
COMMENT ON COLUMN ordered_events.consumer_def.delivery IS
    '''transaction'': read() consumes events in the reading transaction; ''lease'': receive() leases them until ack() (src/lease.c)';

-- A receipt is batch * 65536 + the event's slot in its batch.
CREATE SEQUENCE ordered_events.lease_batch_seq AS bigint MAXVALUE 140737488355327;
/*
 * The events of a lease consumer partition that are out or waiting, one
 * row per batch: 'leased' (what one receive() delivered; due again at
 * visible_until unless acknowledged), 'returned' (given back by nack(), due
 * at visible_until), 'waiting' (taken while an earlier event of their key
 * was out; visible_until NULL).  events holds them, encoded (src/lease.c),
 * written once; bit i of done is set once event i is acknowledged or has
 * moved on (delivered again, returned, a dead letter); the row goes when
 * every bit is set.  floors[i] is the oldest release log row (delivery)
 * of its events of streams[i]: retention keeps it and what follows.
 * drop_consumer() deletes the consumer's rows.
 */
CREATE TABLE ordered_events.lease (
    batch bigint PRIMARY KEY,
    consumer_id integer NOT NULL,
    partition integer NOT NULL,
    state text NOT NULL CHECK (state IN ('leased', 'returned', 'waiting')),
    visible_until timestamptz,
    done bit varying NOT NULL,
    streams integer[] NOT NULL,
    floors bigint[] NOT NULL,
    events bytea NOT NULL,
    CHECK ((state = 'waiting') = (visible_until IS NULL))
);
-- Written once, read whole: not worth compressing at every receive().
ALTER TABLE ordered_events.lease ALTER COLUMN events SET STORAGE EXTERNAL;
CREATE INDEX lease_partition_idx ON ordered_events.lease (consumer_id, partition, batch);
ALTER SEQUENCE ordered_events.lease_batch_seq OWNED BY ordered_events.lease.batch;
COMMENT ON TABLE ordered_events.lease IS
    'Internal: the events of lease consumers that are out or waiting, by batch';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lease_batch_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lease', '');
-- The view leases calls it as its reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.lease_events(events bytea, done bit varying)
RETURNS TABLE (slot integer, stream_id integer, seq bigint, key text, attempt integer)
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_lease_events';
COMMENT ON FUNCTION ordered_events.lease_events(bytea, bit varying) IS
    'Internal: the events of a lease row not acknowledged or moved on yet';
/*
 * What seek() and reset_consumer() do to a lease consumer's leases: its
 * events of the streams sought are delivered again from the new position,
 * or not at all, so they leave the rows (their bits set, as if
 * acknowledged; a row with nothing left goes) and their receipts
 * acknowledge nothing any more.  Events of other streams stay out.  The
 * caller holds the consumer's subscription rows, as receive() takes them.
 */
CREATE FUNCTION ordered_events.forget_leases(consumer_id integer, stream_ids integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x ordered_events.lease;
    left_out bit varying;
    slot integer;
BEGIN
    FOR x IN SELECT * FROM ordered_events.lease l
              WHERE l.consumer_id = forget_leases.consumer_id AND l.streams && stream_ids
              ORDER BY l.batch
                FOR UPDATE LOOP
        left_out := x.done;
        FOR slot IN SELECT e.slot FROM ordered_events.lease_events(x.events, x.done) e
                     WHERE e.stream_id = ANY (stream_ids) LOOP
            left_out := pg_catalog.set_bit(left_out, slot, 1);
        END LOOP;
        IF pg_catalog.bit_count(left_out) = pg_catalog.length(left_out) THEN
            DELETE FROM ordered_events.lease l WHERE l.batch = x.batch;
        ELSE
            UPDATE ordered_events.lease l SET done = left_out WHERE l.batch = x.batch;
        END IF;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION ordered_events.forget_leases(integer, integer[]) IS
    'Internal: take a lease consumer''s events of some streams out of its leases (seek(), reset_consumer())';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_leases(integer, integer[]) FROM PUBLIC;

CREATE FUNCTION ordered_events.receive(consumer text, max_events integer DEFAULT 1000,
                                       partition integer DEFAULT 0,
                                       visibility interval DEFAULT '30 s',
                                       wait interval DEFAULT '0 s')
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz,
               receipt bigint, attempt integer)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_receive';
COMMENT ON FUNCTION ordered_events.receive(text, integer, integer, interval, interval) IS
    'The next events of a lease consumer (partition), leased for visibility: delivered again, attempt + 1, unless acknowledged; the leases commit at once';
REVOKE EXECUTE ON FUNCTION ordered_events.receive(text,integer,integer,interval,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.ack(consumer text, receipts bigint[])
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_ack';
COMMENT ON FUNCTION ordered_events.ack(text, bigint[]) IS
    'Consume the leased events of the receipts, in the caller''s transaction; returns how many';
REVOKE EXECUTE ON FUNCTION ordered_events.ack(text,bigint[]) FROM PUBLIC;
CREATE FUNCTION ordered_events.nack(consumer text, receipts bigint[],
                                    delay interval DEFAULT '0 s')
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_nack';
COMMENT ON FUNCTION ordered_events.nack(text, bigint[], interval) IS
    'Give the leased events of the receipts back, delivered again once delay has passed; returns how many';
REVOKE EXECUTE ON FUNCTION ordered_events.nack(text,bigint[],interval) FROM PUBLIC;
/*
 * The events out or waiting, for the consumers' owners and pg_monitor: a
 * role granted SELECT sees the consumers it may act as the owner of.
 */
CREATE VIEW ordered_events.leases WITH (security_barrier) AS
SELECT c.consumer, l.partition, d.stream, e.seq, e.key, e.attempt, l.visible_until
  FROM ordered_events.lease l
  JOIN ordered_events.consumer_def c ON c.consumer_id = l.consumer_id
 CROSS JOIN LATERAL ordered_events.lease_events(l.events, l.done) e
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id
 WHERE pg_catalog.pg_has_role(c.owner, 'USAGE') OR pg_catalog.pg_has_role('pg_monitor', 'USAGE')
 ORDER BY c.consumer, l.partition, l.batch, e.slot;
COMMENT ON VIEW ordered_events.leases IS
    'The events of lease consumers that are leased (visible_until: when they come back), returned by nack(), or waiting behind an earlier event of their key (visible_until NULL)';
GRANT SELECT ON ordered_events.leases TO pg_monitor;

/*
 * create_consumer() takes the consumer's delivery, and max_attempts NULL
 * (the default of its delivery: 1, or 10 for 'lease').
 */
DROP FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, regrole);
CREATE FUNCTION ordered_events.define_consumer(
    consumer text, partitions integer, handler regprocedure, output_stream text,
    alignment text, handler_timeout interval, on_error text, max_attempts integer,
    retry_delay interval, delivery text, owner regrole)
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
    IF delivery NOT IN ('transaction', 'lease') THEN
        PERFORM ordered_events.invalid_option('delivery', delivery,
            'Use ''transaction'' (read() consumes events in the reading transaction: exactly once) or ''lease'' (receive() leases them until ack(): at least once, for work outside the database).');
    END IF;
    IF delivery = 'lease' AND max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many times an event is delivered before it becomes a dead letter.');
    END IF;
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF delivery = 'lease' THEN
        IF handler IS NOT NULL THEN
            RAISE EXCEPTION 'a consumer with a handler cannot have delivery ''lease'''
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The extension applies a handler''s events itself, exactly once: leave out delivery, or leave out the handler for a consumer whose events receive() leases to an application.';
        END IF;
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL
           OR on_error <> 'dead_letter' OR retry_delay <> interval '1 s' THEN
            RAISE EXCEPTION 'output_stream, alignment, handler_timeout, on_error and retry_delay need a handler'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A lease consumer takes max_attempts: how many times an event is delivered before it becomes a dead letter.';
        END IF;
    ELSIF handler IS NULL THEN
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL
           OR on_error <> 'dead_letter' OR max_attempts <> 1 OR retry_delay <> interval '1 s' THEN
            RAISE EXCEPTION 'output_stream, alignment, handler_timeout, on_error, max_attempts and retry_delay need a handler'
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
         handler_timeout, on_error, max_attempts, retry_delay, delivery)
    VALUES (define_consumer.consumer, define_consumer.partitions, handler::text, owner,
            (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = handler),
            output_id, define_consumer.alignment, define_consumer.handler_timeout,
            define_consumer.on_error,
            -- NULL: 1 (no retry of a handler), 10 deliveries of a leased event
            coalesce(define_consumer.max_attempts,
                     CASE WHEN define_consumer.delivery = 'lease' THEN 10 ELSE 1 END),
            define_consumer.retry_delay, define_consumer.delivery);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'consumer "%" already exists', consumer
        USING ERRCODE = 'duplicate_object',
              HINT = 'Drop it first with ordered_events.drop_consumer(), or choose another name.';
END;
$$;
COMMENT ON FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text, regrole) IS
    'Internal: create_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.define_consumer(text,integer,regprocedure,text,text,interval,text,integer,interval,text,regrole) FROM PUBLIC;
ALTER FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval)
    RENAME TO create_consumer_before_lease;
CREATE FUNCTION ordered_events.create_consumer(
    consumer text,
    partitions integer DEFAULT 1,
    handler regprocedure DEFAULT NULL,
    output_stream text DEFAULT NULL,
    alignment text DEFAULT 'inherit',
    handler_timeout interval DEFAULT NULL,
    on_error text DEFAULT 'dead_letter',
    max_attempts integer DEFAULT NULL,
    retry_delay interval DEFAULT '1 s',
    delivery text DEFAULT 'transaction')
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_create_consumer';
COMMENT ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text) IS
    'Create a consumer owned by the calling role: a named reader of the released events of the streams it subscribes to, read by the extension through a handler if one is given, leased by receive() with delivery ''lease''';
SELECT ordered_events.carry_grants(
    'ordered_events.create_consumer_before_lease(text, integer, regprocedure, text, text, interval, text, integer, interval)',
    'ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text)');
DROP FUNCTION ordered_events.create_consumer_before_lease(text, integer, regprocedure, text, text, interval, text, integer, interval);

-- alter_consumer() changes a lease consumer's max_attempts.
CREATE OR REPLACE FUNCTION ordered_events.alter_consumer_as(consumer text, on_error text,
                                                 max_attempts integer, retry_delay interval,
                                                 handler_timeout interval,
                                                 owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    s record;
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller, for_update => true);
    IF c.delivery = 'lease' AND max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many times an event is delivered before it becomes a dead letter.');
    END IF;
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF c.handler IS NULL AND (handler_timeout IS NOT NULL OR on_error IS NOT NULL
                              OR (max_attempts IS NOT NULL AND c.delivery <> 'lease')
                              OR retry_delay IS NOT NULL) THEN
        RAISE EXCEPTION 'consumer "%" has no handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = CASE WHEN c.delivery = 'lease'
                              THEN 'handler_timeout, on_error and retry_delay rule the calls of a handler; a lease consumer takes max_attempts.'
                              ELSE 'handler_timeout, on_error, max_attempts and retry_delay rule the calls of a handler; a consumer without one is read by read().' END;
    END IF;
    IF alter_consumer_as.owner IS NOT NULL THEN
        -- the new owner must be allowed what the consumer does
        PERFORM ordered_events.check_new_owner('consumer', consumer, alter_consumer_as.owner, caller);
        IF c.handler IS NOT NULL THEN
            PERFORM ordered_events.check_handler(c.handler::regprocedure, alter_consumer_as.owner);
        END IF;
        FOR s IN SELECT d.stream, 'write' AS privilege FROM ordered_events.stream_def d
                  WHERE d.stream_id = c.output_stream_id
                 UNION
                 SELECT d.stream, 'read' FROM ordered_events.subscription x
                   JOIN ordered_events.stream_def d ON d.stream_id = x.stream_id
                  WHERE x.consumer_id = c.consumer_id
        LOOP
            PERFORM ordered_events.check_stream_privilege(s.stream, s.privilege,
                                                          alter_consumer_as.owner);
        END LOOP;
    END IF;
    UPDATE ordered_events.consumer_def d
       SET handler_timeout = coalesce(alter_consumer_as.handler_timeout, d.handler_timeout),
           on_error = coalesce(alter_consumer_as.on_error, d.on_error),
           max_attempts = coalesce(alter_consumer_as.max_attempts, d.max_attempts),
           retry_delay = coalesce(alter_consumer_as.retry_delay, d.retry_delay),
           owner = coalesce(alter_consumer_as.owner, d.owner)
     WHERE d.consumer_id = c.consumer_id;
END;
$$;

-- drop_consumer() drops the consumer's leases.
CREATE OR REPLACE FUNCTION ordered_events.drop_consumer_as(consumer text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    streams integer[];
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller);
    -- First wait for its reads, as read() locks: never a deadlock with one.
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    SELECT array_agg(DISTINCT s.stream_id) INTO streams
      FROM ordered_events.subscription s WHERE s.consumer_id = c.consumer_id;
    PERFORM ordered_events.lock_streams(streams);
    -- Waits for a read of the consumer in progress (it locks these rows).
    DELETE FROM ordered_events.consumer_def d WHERE d.consumer_id = c.consumer_id;
    -- its handler's states, results and dead letters, and its leases go
    -- with it, as a stream's dead letters go with drop_stream()
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_parked p WHERE p.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    DELETE FROM ordered_events.lease x WHERE x.consumer_id = c.consumer_id;
    PERFORM ordered_events.forget_unused_totals(id) FROM unnest(streams) id;
END;
$$;

-- Retention keeps what lease consumers have out.
CREATE OR REPLACE FUNCTION ordered_events.streams_to_compact()
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

/* ------------------------------------------------------------------------
 * 18. Sharding speed (issue 25; docs/sharding.md, "The combine step"): a
 *     shard ships the seqs of a window as a bitmap and its runs as one
 *     multirange, and returns the largest event_ts of its range with a
 *     release; the role that may call shard_runs() and release_through()
 *     may call them.
 * ------------------------------------------------------------------------
 */

/*
 * The seqs a shard holds from from_seq on, among its first max_events
 * committed events there, as one int8multirange built here: what the
 * router's combine step unites (one value a shard, whatever the number of
 * runs).
 */
CREATE FUNCTION ordered_events.shard_run_set(stream text, from_seq bigint, max_events integer)
RETURNS int8multirange
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    IF stream IS NULL OR from_seq IS NULL OR max_events IS NULL THEN
        RAISE EXCEPTION 'stream, from_seq and max_events must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'The router passes its stream, the global range_end and max_release_batch.';
    END IF;
    IF max_events < 1 THEN
        PERFORM ordered_events.invalid_option('max_events', max_events::text,
            'Use a positive number: the most events to look at.');
    END IF;
    d := ordered_events.stream_or_error(stream);
    IF NOT d.sharded THEN
        RAISE EXCEPTION 'stream "%" is not sharded', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a sharded stream is combined by a router.';
    END IF;
    RETURN (SELECT coalesce(pg_catalog.range_agg(int8range(e.seq, e.seq + 1)), '{}')
              FROM (SELECT e.seq FROM ordered_events.event_store e
                     WHERE e.stream_id = d.stream_id
                       AND e.lane = '' AND e.seq >= shard_run_set.from_seq
                     ORDER BY e.seq
                     LIMIT shard_run_set.max_events) e);
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_run_set(text, bigint, integer) IS
    'The seqs a shard holds of a sharded stream from from_seq on, among its first max_events events, as one multirange';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_run_set(text, bigint, integer) FROM PUBLIC;
/*
 * The seqs of a window a shard holds, as a bitmap (src/seq_bits.c): what
 * the router's combine step ORs with the other shards' (seq_bits_runs()).
 */
CREATE FUNCTION ordered_events.shard_seq_bits(stream text, from_seq bigint, span integer,
                                              OUT seqs bytea, OUT next_seq bigint)
RETURNS record
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'oe_shard_seq_bits';
COMMENT ON FUNCTION ordered_events.shard_seq_bits(text, bigint, integer) IS
    'The seqs from_seq .. from_seq + span - 1 a shard holds of a sharded stream, a bit each, and the first it holds past them';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_seq_bits(text, bigint, integer) FROM PUBLIC;
/*
 * The union of the shards' bitmaps of one window, as runs: the router's
 * side of shard_seq_bits().  It reads nothing, so PUBLIC may call it.
 */
CREATE FUNCTION ordered_events.seq_bits_runs(from_seq bigint, seqs bytea[])
RETURNS int8multirange
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_seq_bits_runs';
COMMENT ON FUNCTION ordered_events.seq_bits_runs(bigint, bytea[]) IS
    'The seqs any of the bitmaps shard_seq_bits() returned from from_seq holds, as runs';
/*
 * release_through(), and the largest event_ts of the shard's range after
 * it: what the router needs for the global range's max_event_ts.
 */
CREATE FUNCTION ordered_events.shard_release(stream text, through_seq bigint,
                                             OUT released bigint, OUT max_event_ts timestamptz)
RETURNS record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_shard_release';
COMMENT ON FUNCTION ordered_events.shard_release(text, bigint) IS
    'Release a sharded stream''s events below through_seq; returns how many, and the largest event_ts of its range';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) FROM PUBLIC;
SELECT ordered_events.carry_grants('ordered_events.shard_runs(text, bigint, integer)'::regprocedure,
                                   'ordered_events.shard_run_set(text, bigint, integer)'::regprocedure);
SELECT ordered_events.carry_grants('ordered_events.shard_runs(text, bigint, integer)'::regprocedure,
                                   'ordered_events.shard_seq_bits(text, bigint, integer)'::regprocedure);
SELECT ordered_events.carry_grants('ordered_events.release_through(text, bigint)'::regprocedure,
                                   'ordered_events.shard_release(text, bigint)'::regprocedure);

/* ------------------------------------------------------------------------
 * 17. Pending keys of a global stream (issue 23; docs/monitoring.md, "What
 *     monitoring costs"): key_status counts a global stream's backlog by
 *     key from its summary
 * ------------------------------------------------------------------------
 */

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
 * key_status: a global stream's pending events from the keys of its
 * backlog's summary and the events outside its islands, no longer one by
 * one.  The release steps store the keys with the blocks (src/backlog_keys.c);
 * the update finds no stored block (0.2 had none).
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
        -- a global stream's pending events: those of its backlog's summary
        -- by key (src/backlog_keys.c), one row with the count and the
        -- earliest seq, one with the latest ...
        SELECT d.stream, k.key, 0, NULL, k.pending_count,
               CASE WHEN r.kept_block IS NULL OR k.first_block >= r.kept_block
                    THEN k.first_seq END, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.backlog_keys k ON k.stream_id = d.stream_id
          LEFT JOIN ordered_events.backlog_keys_passed r ON r.stream_id = d.stream_id
         WHERE d.sequencing = 'global'
        UNION ALL
        SELECT d.stream, k.key, 0, NULL, 0, k.last_seq, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.backlog_keys k ON k.stream_id = d.stream_id
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... less what the range passed of the rows that reach into its
        -- first whole block (their earliest seq there) ...
        SELECT d.stream, r.key, 0, NULL, -r.passed, r.first_seq, 0, 0, false
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT u.key, u.passed, u.first_seq
                  FROM ordered_events.backlog_keys_passed r
                 CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(r.keys), pg_catalog.unnest(r.passed),
                                               pg_catalog.unnest(r.first_seqs)) u(key, passed, first_seq)
                 WHERE r.stream_id = d.stream_id) r
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... the others one by one, an index range before each island of
        -- the summary's blocks and one after the last (without a summary:
        -- from range_end on) ...
        SELECT d.stream, e.key, 0, NULL, 1, e.seq, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
         CROSS JOIN LATERAL (
                SELECT greatest(coalesce((pg_catalog.lag(i.last_block) OVER w) * 1024 + 1024,
                                         p.range_end), p.range_end) AS lo,
                       CASE WHEN i.first_block > -9007199254740992
                            THEN i.first_block * 1024 - 1 END AS hi
                  FROM ordered_events.backlog_islands i
                 WHERE i.stream_id = d.stream_id AND i.lane = ''
                WINDOW w AS (ORDER BY i.first_block)
                UNION ALL
                SELECT CASE WHEN pg_catalog.max(i.last_block) IS NULL THEN p.range_end
                            WHEN pg_catalog.max(i.last_block) < 9007199254740991
                            THEN greatest(pg_catalog.max(i.last_block) * 1024 + 1024,
                                          p.range_end) END,
                       9223372036854775807
                  FROM ordered_events.backlog_islands i
                 WHERE i.stream_id = d.stream_id AND i.lane = '') s
         CROSS JOIN LATERAL (
                SELECT e.key, e.seq FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = ''
                   AND e.seq BETWEEN s.lo AND s.hi
                OFFSET 0) e
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... and late events in skipped runs
        SELECT l.stream, l.key, 0, NULL, 1, l.seq, 0, 0, false
          FROM ordered_events.late_events l
        UNION ALL
        -- a per-key stream's lanes that can wait, from their backlogs'
        -- summary (src/backlog.c): one row with the count and the earliest
        -- seq, one with the latest
        SELECT d.stream, l.lane, 0, NULL, v.buffered, v.seq, 0, 0, false
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT p.lane FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
                UNION
                SELECT a.key FROM ordered_events.key_arrivals a
                 WHERE a.stream_id = d.stream_id) l
         CROSS JOIN LATERAL ordered_events.lane_backlog(d.stream, l.lane) b
         CROSS JOIN LATERAL (VALUES (b.pending_count, b.earliest_pending_seq),
                                    (0, b.latest_pending_seq)) v(buffered, seq)
         WHERE d.sequencing = 'per_key' AND b.pending_count > 0
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
COMMENT ON VIEW ordered_events.key_status IS
    'Processing status of every key (Apache Beam''s OrderedProcessingStatus)';

-- Sections that change a function's signature carry its grants (above).
DROP FUNCTION ordered_events.carry_grants(regprocedure, regprocedure);

/* ------------------------------------------------------------------------
 * 12. Users' grants: the update to 0.3 repairs pg_init_privs of databases
 *     updated through 0.2.  This section stays last: a GRANT or REVOKE on
 *     an existing object after it would record users' grants again.
 * ------------------------------------------------------------------------
 */

/*
 * A monitor of 0.1 read worker_status with SELECT on the view alone: the
 * function behind it was PUBLIC's.  0.2 revoked worker_report() from
 * PUBLIC and carried over only the EXECUTE grants of the old function, so
 * that monitor got 42501 on worker_report().  Every role that holds SELECT
 * on worker_status may execute worker_report(), as 0.2's notes promised.
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
         WHERE c.oid = 'ordered_events.worker_status'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION ordered_events.worker_report() TO %s', grantee);
    END LOOP;
END;
$$;

/*
 * pg_dump writes of an extension member's ACL only what differs from its
 * initial privileges (pg_init_privs), taken to be the extension's own.
 * But a GRANT or REVOKE in an update script records the object's whole ACL
 * as it stands, the users' grants included: 0.1 -> 0.2 did so on the
 * schema, the views it granted to pg_monitor, unprocessed, and the
 * functions whose grants it carried over (worker_report() among them), and
 * this script on the functions it carries over and on worker_report()
 * above.  A dump of such a database left those users' grants out, and a
 * restore lost them (42501 on the schema and the views).
 *
 * So every record of a member, and of the schema, keeps only what the
 * install scripts grant: entries granted by the object's owner to itself
 * (its default privileges) or to a predefined role (pg_monitor).  The
 * scripts grant nothing to PUBLIC, they only revoke from it, and cannot
 * name any other role (it need not exist); no user can create a role
 * named pg_*.  A record left with the default privileges alone, or none,
 * goes: a fresh install has none such.  The rule needs no list of the
 * objects, so it holds for every section of this script; it must run last.
 * What it cannot tell apart is a user's own grant to a predefined role of
 * an object the scripts recorded: that stays initial (not dumped).
 */
DO $$
DECLARE
    r record;
    kept aclitem[];
BEGIN
    FOR r IN
        SELECT i.classoid, i.objoid, i.objsubid, i.initprivs, o.owner,
               CASE WHEN i.objsubid <> 0 THEN 'c' ELSE o.kind END AS kind
          FROM pg_catalog.pg_init_privs i
         CROSS JOIN LATERAL (
                SELECT c.relowner, CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END
                  FROM pg_catalog.pg_class c
                 WHERE i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = i.objoid
                UNION ALL
                SELECT p.proowner, 'f' FROM pg_catalog.pg_proc p
                 WHERE i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = i.objoid
                UNION ALL
                SELECT t.typowner, 'T' FROM pg_catalog.pg_type t
                 WHERE i.classoid = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = i.objoid
                UNION ALL
                SELECT n.nspowner, 'n' FROM pg_catalog.pg_namespace n
                 WHERE i.classoid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND n.oid = i.objoid
               ) o(owner, kind)
         WHERE i.privtype = 'e'
           AND ((i.classoid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                 AND i.objoid = 'ordered_events'::pg_catalog.regnamespace)
                OR EXISTS (SELECT FROM pg_catalog.pg_depend d
                            WHERE d.classid = i.classoid AND d.objid = i.objoid AND d.deptype = 'e'
                              AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                              AND d.refobjid = (SELECT x.oid FROM pg_catalog.pg_extension x
                                                 WHERE x.extname = 'ordered_events')))
    LOOP
        kept := ARRAY(
            SELECT u.item
              FROM pg_catalog.unnest(r.initprivs) WITH ORDINALITY AS u(item, n)
             CROSS JOIN LATERAL pg_catalog.aclexplode(ARRAY[u.item]) a
             WHERE a.grantor = r.owner
               AND (a.grantee = r.owner
                    OR (SELECT g.rolname FROM pg_catalog.pg_roles g WHERE g.oid = a.grantee)
                       OPERATOR(pg_catalog.~) '^pg_')
             GROUP BY u.item, u.n
             ORDER BY u.n);
        IF kept OPERATOR(pg_catalog.=) '{}'::aclitem[]
           OR kept OPERATOR(pg_catalog.=) pg_catalog.acldefault(r.kind::"char", r.owner) THEN
            DELETE FROM pg_catalog.pg_init_privs i
             WHERE i.classoid = r.classoid AND i.objoid = r.objoid AND i.objsubid = r.objsubid;
        ELSIF kept OPERATOR(pg_catalog.<>) r.initprivs THEN
            UPDATE pg_catalog.pg_init_privs i SET initprivs = kept
             WHERE i.classoid = r.classoid AND i.objoid = r.objoid AND i.objsubid = r.objsubid;
        END IF;
    END LOOP;
END;
$$;
