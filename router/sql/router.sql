-- The router as an extension of its own (README.md of this folder): it
-- installs at 0.3 fresh and by 0.2 and the update alike, and registers its
-- combine step with the worker of ordered_events, which calls only a hook
-- that still belongs to the extension that registered it.
\set VERBOSITY terse
SET client_min_messages = warning;      -- not the NOTICE installing plproxy
CREATE EXTENSION ordered_events_router CASCADE;
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'ordered_events_router';

-- the worker calls combine_all() every cycle
SELECT hook, extension, call FROM ordered_events.cycle_hooks();
SELECT hook, extension FROM ordered_events.cycle_hook;

-- What the extension's objects are: definitions, columns, constraints,
-- privileges, initial privileges and comments.
CREATE FUNCTION pg_temp.router_objects()
RETURNS TABLE (object text, definition text)
LANGUAGE sql
AS $$
SELECT pg_describe_object(d.classid, d.objid, 0),
       concat_ws(E'\n',
           CASE WHEN d.classid = 'pg_proc'::regclass THEN pg_get_functiondef(d.objid) END,
           CASE WHEN d.classid = 'pg_proc'::regclass
                THEN (SELECT proacl::text FROM pg_proc WHERE oid = d.objid) END,
           CASE WHEN d.classid = 'pg_class'::regclass THEN
               (SELECT c.relkind::text || ' ' || coalesce(c.relacl::text, '-') || ' '
                       || coalesce(pg_get_viewdef(c.oid), '')
                  FROM pg_class c WHERE c.oid = d.objid) END,
           CASE WHEN d.classid = 'pg_class'::regclass THEN
               (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                  || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                                  || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), ''),
                                  ', ' ORDER BY a.attnum)
                  FROM pg_attribute a
                  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                 WHERE a.attrelid = d.objid AND a.attnum > 0 AND NOT a.attisdropped) END,
           CASE WHEN d.classid = 'pg_class'::regclass THEN
               (SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), ', ' ORDER BY conname)
                  FROM pg_constraint WHERE conrelid = d.objid) END,
           (SELECT string_agg(i.privtype::text || ' ' || i.initprivs::text, ', ')
              FROM pg_init_privs i WHERE i.classoid = d.classid AND i.objoid = d.objid),
           obj_description(d.objid, (SELECT relname FROM pg_class WHERE oid = d.classid)))
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ordered_events_router')
$$;
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.router_objects();
SELECT count(*) > 20 AS has_objects FROM fresh;

-- the same objects by the 0.2 script and the update; 0.2 registers
-- nothing (its registration forgotten first: see below), the update does
DROP EXTENSION ordered_events_router;
DELETE FROM ordered_events.cycle_hook;
CREATE EXTENSION ordered_events_router VERSION '0.2';
SELECT count(*) AS hooks FROM ordered_events.cycle_hooks();
ALTER EXTENSION ordered_events_router UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'ordered_events_router';
SELECT 'fresh only' AS side, * FROM (SELECT * FROM fresh EXCEPT SELECT * FROM pg_temp.router_objects()) x
UNION ALL
SELECT 'updated only', * FROM (SELECT * FROM pg_temp.router_objects() EXCEPT SELECT * FROM fresh) y;
SELECT hook, extension FROM ordered_events.cycle_hooks();

-- dropped, the router's hook is not called; its row stays, inert, and
-- holds again for the router made again (the schema stays too)
DROP EXTENSION ordered_events_router;
SELECT count(*) AS hooks FROM ordered_events.cycle_hooks();
SELECT hook, extension FROM ordered_events.cycle_hook;
-- a function of the same name that belongs to no extension is never called
CREATE FUNCTION ordered_events_router.combine_all() RETURNS bigint
LANGUAGE sql AS $$ SELECT 1::bigint $$;
SELECT count(*) AS hooks FROM ordered_events.cycle_hooks();
-- nor can it be registered
SELECT ordered_events.register_cycle_hook('ordered_events_router.combine_all()');
DROP FUNCTION ordered_events_router.combine_all();

-- made again, the router is called again
CREATE EXTENSION ordered_events_router;
SELECT hook, extension FROM ordered_events.cycle_hooks();
SELECT count(*) AS rows FROM ordered_events.cycle_hook;

-- a hook takes nothing and returns bigint
SELECT ordered_events.register_cycle_hook('ordered_events_router.shard_count()');
-- only the extension owner registers, lists or changes hooks
CREATE ROLE regress_router_user;
GRANT USAGE ON SCHEMA ordered_events TO regress_router_user;
SET ROLE regress_router_user;
SELECT ordered_events.register_cycle_hook('ordered_events.cycle_hooks()');
SELECT count(*) FROM ordered_events.cycle_hooks();
INSERT INTO ordered_events.cycle_hook VALUES ('public.f()', 'ordered_events_router');
DELETE FROM ordered_events.cycle_hook;
RESET ROLE;
REVOKE USAGE ON SCHEMA ordered_events FROM regress_router_user;
DROP ROLE regress_router_user;

-- no shards defined: no stream to make, and a combine step has nothing to do
SELECT ordered_events_router.create_stream('r');
SELECT ordered_events_router.combine_all();

DROP EXTENSION ordered_events_router;
