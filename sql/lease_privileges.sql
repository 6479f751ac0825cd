--
-- lease_privileges: who may receive(), ack() and nack() a lease consumer
-- and see its leases (docs/security.md; docs/architecture.md, rule 15):
-- its owner, a member of the owner role, a superuser; anyone else gets
-- 42501 and changes nothing, also inside a transaction block, where
-- receive() runs in a background worker as the calling role.  The view
-- leases shows a role the consumers it may act as the owner of, and
-- pg_monitor every one.
--
\set VERBOSITY terse

-- Run a query as a role ('superuser': the session's user): "ok" with the
-- one value a SELECT returns, or "<SQLSTATE>: <message>".
CREATE FUNCTION pg_temp.try_as(who text, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', CASE who WHEN 'superuser' THEN session_user ELSE who END);
    EXECUTE query INTO result;
    RESET ROLE;
    RETURN rtrim('ok ' || coalesce(result, ''));
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END;
$$;

-- regress_lp_owner (a group, NOLOGIN) owns lp_c; regress_lp_member is its
-- member; regress_lp_other may execute everything but owns nothing;
-- regress_lp_monitor is in pg_monitor.
CREATE ROLE regress_lp_owner;
CREATE ROLE regress_lp_member IN ROLE regress_lp_owner;
CREATE ROLE regress_lp_other;
CREATE ROLE regress_lp_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA ordered_events TO regress_lp_owner, regress_lp_other;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.receive(text, integer, integer, interval, interval),
                          ordered_events.ack(text, bigint[]),
                          ordered_events.nack(text, bigint[], interval)
   TO regress_lp_owner, regress_lp_other;
GRANT SELECT ON ordered_events.leases TO regress_lp_owner, regress_lp_other;

SELECT ordered_events.create_stream('lp_s');
SELECT ordered_events.grant_stream('lp_s', 'read', 'regress_lp_owner');
SELECT ordered_events.ingest('lp_s', s, 'k' || s) FROM generate_series(1, 8) s;
SELECT ordered_events.release('lp_s');
SELECT pg_temp.try_as('regress_lp_owner', $$SELECT ordered_events.create_consumer('lp_c', delivery => 'lease')$$);
SELECT pg_temp.try_as('regress_lp_owner', $$SELECT ordered_events.subscribe('lp_c', 'lp_s')$$);
SELECT consumer, owner FROM ordered_events.consumers WHERE consumer = 'lp_c';

-- receive(): the owner, a member, a superuser; not another role, not a monitor
SELECT who, pg_temp.try_as(who, $$SELECT string_agg(seq::text, ' ' ORDER BY seq) FROM ordered_events.receive('lp_c', 1)$$)
  FROM unnest(ARRAY['regress_lp_owner', 'regress_lp_member', 'superuser', 'regress_lp_other',
                    'regress_lp_monitor']) who;
-- inside a transaction block, in the background worker, as the calling role
BEGIN;
SELECT pg_temp.try_as('regress_lp_member', $$SELECT string_agg(seq::text, ' ' ORDER BY seq) FROM ordered_events.receive('lp_c', 1)$$);
SELECT pg_temp.try_as('regress_lp_other', $$SELECT string_agg(seq::text, ' ' ORDER BY seq) FROM ordered_events.receive('lp_c', 1)$$);
COMMIT;

-- the view leases: the owner's rows for the owner, its member, a superuser
-- and pg_monitor; none for another role
SELECT who, pg_temp.try_as(who, $$SELECT string_agg(seq::text, ' ' ORDER BY seq) FROM ordered_events.leases WHERE consumer = 'lp_c'$$)
  FROM unnest(ARRAY['regress_lp_owner', 'regress_lp_member', 'superuser', 'regress_lp_monitor',
                    'regress_lp_other']) who;

-- ack() and nack(): another role settles nothing, not even a receipt it knows
SELECT array_agg(receipt ORDER BY seq) AS receipts FROM ordered_events.receive('lp_c', 2) \gset
SELECT who, pg_temp.try_as(who, format($$SELECT ordered_events.ack('lp_c', %L)$$, :'receipts')),
       pg_temp.try_as(who, format($$SELECT ordered_events.nack('lp_c', %L)$$, :'receipts'))
  FROM unnest(ARRAY['regress_lp_other', 'regress_lp_monitor']) who;
SELECT string_agg(seq::text, ' ' ORDER BY seq) AS leased FROM ordered_events.leases
 WHERE consumer = 'lp_c' AND attempt = 1;
SELECT pg_temp.try_as('regress_lp_member', format($$SELECT ordered_events.nack('lp_c', %L)$$, :'receipts'));
SELECT array_agg(receipt ORDER BY seq) AS receipts FROM ordered_events.receive('lp_c', 2) \gset
SELECT pg_temp.try_as('regress_lp_owner', format($$SELECT ordered_events.ack('lp_c', %L)$$, :'receipts'));
SELECT string_agg(seq::text, ' ' ORDER BY seq) AS out FROM ordered_events.leases WHERE consumer = 'lp_c';

-- PUBLIC executes none of them
SELECT p.oid::regprocedure AS function, has_function_privilege('public', p.oid, 'EXECUTE') AS public
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace AND p.proname IN ('receive', 'ack', 'nack')
 ORDER BY 1::text;
SELECT has_table_privilege('public', 'ordered_events.leases', 'SELECT') AS public_leases,
       has_table_privilege('pg_monitor', 'ordered_events.leases', 'SELECT') AS monitor_leases;

SELECT ordered_events.drop_consumer('lp_c');
SELECT ordered_events.drop_stream('lp_s');
REVOKE ALL ON SCHEMA ordered_events FROM regress_lp_owner, regress_lp_other;
REVOKE ALL ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                       ordered_events.subscribe(text, text, interval, text),
                       ordered_events.receive(text, integer, integer, interval, interval),
                       ordered_events.ack(text, bigint[]),
                       ordered_events.nack(text, bigint[], interval)
  FROM regress_lp_owner, regress_lp_other;
REVOKE ALL ON ordered_events.leases FROM regress_lp_owner, regress_lp_other;
DROP ROLE regress_lp_owner, regress_lp_member, regress_lp_other, regress_lp_monitor;
