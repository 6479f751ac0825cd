/*
 * The worker's cycle hooks: functions other extensions register, which the
 * worker calls once a cycle (src/worker.c).
 */

/*
 * A cycle hook: a function another extension registers, which the worker
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
REVOKE EXECUTE ON FUNCTION ordered_events.extension_of(regprocedure) FROM PUBLIC;

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
REVOKE EXECUTE ON FUNCTION ordered_events.register_cycle_hook(regprocedure) FROM PUBLIC;

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
REVOKE EXECUTE ON FUNCTION ordered_events.cycle_hooks() FROM PUBLIC;

