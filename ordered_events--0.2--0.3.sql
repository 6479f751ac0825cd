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

DROP FUNCTION ordered_events.carry_grants(regprocedure, regprocedure);
