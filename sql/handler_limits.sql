--
-- handler_limits: the limits a handler runs under (docs/architecture.md,
-- rules 17 and 18; docs/handlers.md, "A time limit" and "Security of
-- handlers"), by process() by hand:
--   1. ordered_events.handler_timeout is a server setting: a role that is
--      not a superuser cannot SET it (42501), nor for itself with ALTER
--      ROLE; process() run by such a role uses the server's value, never
--      the session's.
--   2. The limit of a call: the consumer's handler_timeout, capped by the
--      server's, lowered by the function's own setting.  A call past it is
--      its event's error (57014), even when the handler catches the cancel
--      and returns; it is cancelled again while it runs on; it is not
--      called a second time in the step.  The key's state stays, the error
--      counts.
--   3. A handler that calls process() or read() of its own consumer gets
--      55006 for its event; check_not_in_step() says the same for the SQL
--      functions; process() of another consumer works.
--   4. Session state: a session-level advisory lock the handler takes does
--      not outlive its call, and is refused in a session holding advisory
--      locks of its own (42501), whose locks stay; a transaction-level one
--      lasts until commit; PREPARE, a cursor WITH HOLD and LISTEN are
--      refused (42501); set_config(..., false) lasts one call.
-- A handler that never returns, the worker, and pg_cancel_backend() are in
-- test/t/029_handler_limits.pl.
--
SET TimeZone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never
SET jit = off;

CREATE ROLE regress_oe_hl_owner;
CREATE ROLE regress_oe_hl_caller;
CREATE SCHEMA hl AUTHORIZATION regress_oe_hl_owner;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_hl_owner, regress_oe_hl_caller;
GRANT EXECUTE ON FUNCTION
    ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval),
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.process(text, integer, integer),
    ordered_events.read(text, integer, integer, interval)
TO regress_oe_hl_owner;
-- the caller of issue 20: EXECUTE on process(), nothing else
GRANT EXECUTE ON FUNCTION ordered_events.process(text, integer, integer) TO regress_oe_hl_caller;

--
-- The owner's handler.  By payload "t" it:
--   "nap": sleeps "s" seconds (an uncaught cancel ends it);
--   "catch": sleeps 30 s, catches the cancel and returns;
--   "dodge": sleeps in steps of 50 ms for "s" seconds, catching every
--            cancel (counted in hl.cancels, which no rollback undoes), then
--            returns;
--   "process", "read": process() or read() of consumer "c";
--   "lock", "xact_lock": pg_advisory_lock(7) or pg_advisory_xact_lock(8);
--   "prepare", "hold", "listen": PREPARE, DECLARE ... WITH HOLD, LISTEN;
--   "set_config": work_mem = 7MB for the session.
-- Every call is counted in hl.calls; its result is the key's count and
-- the work_mem it saw.
--
SET ROLE regress_oe_hl_owner;
CREATE SEQUENCE hl.calls;
CREATE SEQUENCE hl.cancels;
CREATE FUNCTION hl.act(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
DECLARE
    t text := e.payload ->> 't';
    n int := coalesce((state ->> 'n')::int, 0) + 1;
    until timestamptz;
BEGIN
    PERFORM pg_catalog.nextval('hl.calls');
    CASE t
    WHEN 'nap' THEN
        PERFORM pg_catalog.pg_sleep((e.payload ->> 's')::float8);
    WHEN 'catch' THEN
        BEGIN
            PERFORM pg_catalog.pg_sleep(30);
        EXCEPTION WHEN query_canceled THEN
            PERFORM pg_catalog.nextval('hl.cancels');
        END;
    WHEN 'dodge' THEN
        until := pg_catalog.clock_timestamp() + (e.payload ->> 's')::float8 * interval '1 s';
        WHILE pg_catalog.clock_timestamp() < until LOOP
            BEGIN
                PERFORM pg_catalog.pg_sleep(0.05);
            EXCEPTION WHEN query_canceled THEN
                PERFORM pg_catalog.nextval('hl.cancels');
            END;
        END LOOP;
    WHEN 'process' THEN
        PERFORM ordered_events.process(e.payload ->> 'c');
    WHEN 'read' THEN
        PERFORM ordered_events.read(e.payload ->> 'c');
    WHEN 'lock' THEN
        PERFORM pg_catalog.pg_advisory_lock(7);
    WHEN 'xact_lock' THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(8);
    WHEN 'prepare' THEN
        EXECUTE 'PREPARE hl_p AS SELECT 1';
    WHEN 'hold' THEN
        EXECUTE 'DECLARE hl_c CURSOR WITH HOLD FOR SELECT 1';
    WHEN 'listen' THEN
        EXECUTE 'LISTEN hl_channel';
    WHEN 'set_config' THEN
        PERFORM pg_catalog.set_config('work_mem', '7MB', false);
    ELSE
        NULL;
    END CASE;
    RETURN ROW(pg_catalog.jsonb_build_object('n', n),
               pg_catalog.jsonb_build_object('n', n, 'work_mem', pg_catalog.current_setting('work_mem')))::ordered_events.step;
END;
$$;
SELECT ordered_events.create_stream(s) FROM unnest('{hl_guc,hl_time,hl_re,hl_state}'::text[]) s;
RESET ROLE;

-- How a consumer did: its dead letters, results and key states.
CREATE FUNCTION pg_temp.outcome(c text)
RETURNS TABLE (seq bigint, key text, what text)
LANGUAGE sql AS $$
    SELECT u.seq, u.key, 'dead letter: ' || u.detail
      FROM ordered_events.unprocessed u WHERE u.consumer = c
    UNION ALL
    SELECT r.seq, r.key, 'result: ' || r.result::text
      FROM ordered_events.results r WHERE r.consumer = c
    UNION ALL
    SELECT NULL, k.key, pg_catalog.format('key: state %s, %s processed, %s errors',
                                          coalesce(k.state::text, 'NULL'), k.processed_count,
                                          k.error_count)
      FROM ordered_events.key_state k WHERE k.consumer = c
    ORDER BY 2, 1 NULLS LAST, 3
$$;

-- Ingest and release events with these payloads, seqs from "first" on, key
-- 'k' || seq.
CREATE FUNCTION pg_temp.events(s text, first bigint, VARIADIC payloads jsonb[])
RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(ordered_events.ingest(s, first + p.n - 1, 'k' || (first + p.n - 1), p.payload))
      FROM unnest(payloads) WITH ORDINALITY p(payload, n);
    SELECT ordered_events.release(s);
$$;

--
-- 1. The setting is the server's.
--
SELECT context FROM pg_settings WHERE name = 'ordered_events.handler_timeout';
SET ROLE regress_oe_hl_caller;
SET ordered_events.handler_timeout = 1;
SELECT pg_catalog.set_config('ordered_events.handler_timeout', '1', false);
ALTER ROLE regress_oe_hl_caller SET ordered_events.handler_timeout = 1;
RESET ROLE;
SET ROLE regress_oe_hl_owner;
ALTER ROLE regress_oe_hl_owner SET ordered_events.handler_timeout = 1;
ALTER FUNCTION hl.act(jsonb, ordered_events.event) SET ordered_events.handler_timeout = 1;
SELECT ordered_events.create_consumer('hl_guc', handler => 'hl.act(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hl_guc', 'hl_guc');
RESET ROLE;
SELECT pg_temp.events('hl_guc', 1, '{"t": "nap", "s": 0.2}', '{"t": "nap", "s": 0.2}');
-- A superuser may SET it, for the calls of its own process() ...
SET ordered_events.handler_timeout = '50ms';
SELECT ordered_events.process('hl_guc', 1);
-- ... but a role it becomes uses the server's 10 s, not the session's 50 ms
SET ROLE regress_oe_hl_owner;
SHOW ordered_events.handler_timeout;
SELECT ordered_events.process('hl_guc', 1);
RESET ROLE;
RESET ordered_events.handler_timeout;
SELECT * FROM pg_temp.outcome('hl_guc');

--
-- 2. The limit holds.  Consumer hl_time has its own limit, 200 ms.
--
SET ROLE regress_oe_hl_owner;
SELECT ordered_events.create_consumer('hl_time', handler => 'hl.act(jsonb, ordered_events.event)',
                                      handler_timeout => '200ms');
SELECT ordered_events.subscribe('hl_time', 'hl_time');
RESET ROLE;
-- k1 and k4 are harmless; k2 catches the cancel and returns; k3 dodges
-- every cancel for 700 ms (within the grace period), then returns.
SELECT pg_temp.events('hl_time', 1, '{"t": "none"}', '{"t": "catch"}', '{"t": "dodge", "s": 0.7}',
                      '{"t": "none"}');
SELECT pg_catalog.setval('hl.calls', 1, false), pg_catalog.setval('hl.cancels', 1, false);
SELECT ordered_events.process('hl_time');
SELECT * FROM pg_temp.outcome('hl_time');
-- 5 calls: k1 again after k2's error rolled its call back, each of the
-- others once; k3 was cancelled again and again
SELECT pg_catalog.nextval('hl.calls') - 1 AS calls,
       pg_catalog.nextval('hl.cancels') - 1 > 2 AS k3_cancelled_again;

-- The consumer's own limit is capped by the server's; the function's own
-- setting lowers it (a superuser set it, for a superuser's consumer).
CREATE FUNCTION public.hl_nap(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_sleep((e.payload ->> 's')::float8);
    RETURN NULL;
END;
$$;
CREATE FUNCTION public.hl_nap_fn(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT public.hl_nap(state, e) $$;
ALTER FUNCTION public.hl_nap_fn(jsonb, ordered_events.event) SET ordered_events.handler_timeout = '100ms';
SELECT ordered_events.create_stream('hl_cap_own');
SELECT ordered_events.create_consumer('hl_cap', handler => 'public.hl_nap(jsonb, ordered_events.event)',
                                      handler_timeout => '1h');
SELECT ordered_events.create_consumer('hl_fn', handler => 'public.hl_nap_fn(jsonb, ordered_events.event)',
                                      handler_timeout => '1h');
SELECT ordered_events.subscribe('hl_cap', 'hl_cap_own'), ordered_events.subscribe('hl_fn', 'hl_cap_own');
SELECT pg_temp.events('hl_cap_own', 1, '{"s": 30}');
SET ordered_events.handler_timeout = '150ms';
SELECT ordered_events.process('hl_cap'), ordered_events.process('hl_fn');
RESET ordered_events.handler_timeout;
SELECT consumer, seq, detail FROM ordered_events.unprocessed
 WHERE consumer IN ('hl_cap', 'hl_fn') ORDER BY consumer;

-- A function that sets the parameter cannot run as a role that may not
-- set it: the step fails, the event waits.
ALTER FUNCTION hl.act(jsonb, ordered_events.event) SET ordered_events.handler_timeout = '1s';
SELECT ordered_events.process('hl_time');
ALTER FUNCTION hl.act(jsonb, ordered_events.event) RESET ordered_events.handler_timeout;

--
-- 3. Re-entrancy: consumer hl_re's handler calls process() and read() of
--    hl_re, then process() of hl_guc (another consumer: that works).
--
SET ROLE regress_oe_hl_owner;
SELECT ordered_events.create_consumer('hl_re', handler => 'hl.act(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hl_re', 'hl_re');
RESET ROLE;
SELECT pg_temp.events('hl_guc', 3, '{"t": "none"}');
SELECT pg_temp.events('hl_re', 1, '{"t": "process", "c": "hl_re"}', '{"t": "read", "c": "hl_re"}',
                      '{"t": "process", "c": "hl_guc"}');
SELECT ordered_events.process('hl_re');
SELECT * FROM pg_temp.outcome('hl_re');
SELECT seq, key, result FROM ordered_events.results WHERE consumer = 'hl_guc' AND seq = 3;
-- check_not_in_step(), for the SQL functions: an error in a step of the
-- consumer, nothing outside
CREATE FUNCTION public.hl_check(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ordered_events.check_not_in_step(d.consumer_id)
      FROM ordered_events.consumer_def d WHERE d.consumer = e.payload ->> 'c';
    SELECT NULL::ordered_events.step
$$;
SELECT ordered_events.create_consumer('hl_check', handler => 'public.hl_check(jsonb, ordered_events.event)');
SELECT ordered_events.create_stream('hl_check');
SELECT ordered_events.subscribe('hl_check', 'hl_check');
SELECT pg_temp.events('hl_check', 1, '{"c": "hl_check"}', '{"c": "hl_re"}');
SELECT ordered_events.process('hl_check');
SELECT seq, detail FROM ordered_events.unprocessed WHERE consumer = 'hl_check';
SELECT ordered_events.check_not_in_step(consumer_id) FROM ordered_events.consumer_def
 WHERE consumer = 'hl_check';

--
-- 4. Session state.
--
SET ROLE regress_oe_hl_owner;
SELECT ordered_events.create_consumer('hl_state', handler => 'hl.act(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hl_state', 'hl_state');
RESET ROLE;
SELECT pg_temp.events('hl_state', 1, '{"t": "lock"}', '{"t": "xact_lock"}', '{"t": "prepare"}',
                      '{"t": "hold"}', '{"t": "listen"}', '{"t": "set_config"}', '{"t": "none"}');
CREATE VIEW pg_temp.my_advisory_locks AS
    SELECT objid, mode FROM pg_locks
     WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY objid;
BEGIN;
SELECT ordered_events.process('hl_state');
-- the session lock is gone; the transaction's stays until commit
SELECT * FROM pg_temp.my_advisory_locks;
COMMIT;
SELECT * FROM pg_temp.my_advisory_locks;
SELECT * FROM pg_temp.outcome('hl_state');
SELECT current_setting('work_mem') AS work_mem;
SELECT count(*) AS prepared FROM pg_prepared_statements;
SELECT count(*) AS cursors FROM pg_cursors;
SELECT count(*) AS channels FROM pg_listening_channels();
-- A session holding an advisory lock of its own: the handler's is refused,
-- the session's stays.
SELECT pg_temp.events('hl_state', 8, '{"t": "lock"}');
SELECT pg_advisory_lock(9);
SELECT ordered_events.process('hl_state');
SELECT * FROM pg_temp.my_advisory_locks;
SELECT pg_advisory_unlock(9);
SELECT seq, detail FROM ordered_events.unprocessed WHERE consumer = 'hl_state' AND seq > 7;

-- Clean up.
SELECT ordered_events.drop_consumer(c)
  FROM unnest('{hl_guc,hl_time,hl_cap,hl_fn,hl_re,hl_check,hl_state}'::text[]) c;
SELECT ordered_events.drop_stream(s)
  FROM unnest('{hl_guc,hl_time,hl_cap_own,hl_re,hl_check,hl_state}'::text[]) s;
DROP FUNCTION public.hl_check(jsonb, ordered_events.event), public.hl_nap_fn(jsonb, ordered_events.event),
    public.hl_nap(jsonb, ordered_events.event);
DROP SCHEMA hl CASCADE;
REVOKE ALL ON SCHEMA ordered_events FROM regress_oe_hl_owner, regress_oe_hl_caller;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ordered_events FROM regress_oe_hl_owner, regress_oe_hl_caller;
DROP ROLE regress_oe_hl_owner, regress_oe_hl_caller;
