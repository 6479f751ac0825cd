--
-- handler_errors: every bad input of the handler arguments and of
-- process() (docs/handlers.md; docs/reference.md, "Handlers";
-- docs/architecture.md, rule 5), the message and hint a user reads, its
-- SQLSTATE, and that the refused call changed nothing; then what a handler
-- may not do (its errors are its events' dead letters, never the
-- caller's), and drop_consumer.
--   not a handler (arguments, return type, SETOF, procedure) 42883,
--   STRICT 42P13, no EXECUTE for the creating role 42501, a non-fence
--   output_stream 42809, an unknown one 42704, output_stream or alignment
--   without handler 22023, a bad alignment 22023, NULL argument 22004,
--   max_events <= 0 or a partition out of range 22023, process() on a
--   consumer without handler 42809, read()/peek() on a handler consumer
--   42809, subscribing a consumer to its own output stream 22023,
--   drop_stream of an output stream 2BP01, process() in a read-only
--   transaction 25006.
--
-- pg_temp.unchanged() compares everything these calls could change
-- (consumers and their handlers, subscriptions and positions, key states,
-- results, dead letters, the streams' events) with a snapshot taken before
-- the first bad call.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never
SET jit = off;

-- A valid handler: counts a key's events and outputs the payload.
CREATE FUNCTION public.he_count(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1), e.payload)::ordered_events.step
$$;

-- Streams: he_s (global, 4 events, keys k1 .. k4), he_fence (a fence stream,
-- the output), he_wait (a global stream with the wait policy).
SELECT ordered_events.create_stream('he_s'),
       ordered_events.create_stream('he_fence', gap_policy => 'fence'),
       ordered_events.create_stream('he_wait');
SELECT ordered_events.ingest('he_s', s, 'k' || s, to_jsonb(s), '2026-01-01 00:00:00+00',
                             timestamptz '2026-01-01 00:00:00+00' + s * interval '1 s')
  FROM generate_series(1, 4) s;
SELECT ordered_events.release('he_s');
-- Consumers: he_plain (no handler, has read one event), he_h (handler, 2
-- partitions, has processed partition 0: k1 and k2), he_out (handler with output
-- stream he_fence, has processed its first event).
SELECT ordered_events.create_consumer('he_plain');
SELECT ordered_events.create_consumer('he_h', 2, 'public.he_count(jsonb, ordered_events.event)');
SELECT ordered_events.create_consumer('he_out', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_fence');
SELECT ordered_events.subscribe(c, 'he_s') FROM unnest('{he_plain,he_h,he_out}'::text[]) c;
SELECT stream, seq, key FROM ordered_events.read('he_plain', 1);
SELECT k AS key, ordered_events.key_partition(k, 2) AS partition FROM unnest('{k1,k2,k3,k4}'::text[]) k;
SELECT ordered_events.process('he_h', partition => 0);
SELECT ordered_events.process('he_out', 1);

-- Everything the calls below could change, one text per fact; at is a
-- clock time and pos a result's position (from a sequence shared with the
-- other tests), compared, never printed.
CREATE FUNCTION pg_temp.state()
RETURNS TABLE (fact text, at timestamptz, pos bigint)
LANGUAGE sql AS $$
    SELECT format('consumer %s partitions %s handler %s owner %s output %s alignment %s',
                  c.consumer, c.partitions, c.handler, c.owner,
                  (SELECT d.stream FROM ordered_events.stream_def d WHERE d.stream_id = c.output_stream_id),
                  c.alignment), NULL::timestamptz, NULL::bigint
      FROM ordered_events.consumer_def c
    UNION ALL
    SELECT format('subscription %s/%s %s consumed %s unread %s', v.consumer, v.partition, v.stream,
                  v.consumed_count, v.unread_count), v.last_read_at, NULL
      FROM ordered_events.consumers v
    UNION ALL
    SELECT format('state %s/%s %s last %s/%s processed %s errors %s', k.consumer, k.key, k.state,
                  k.last_stream, k.last_seq, k.processed_count, k.error_count), k.updated_at, NULL
      FROM ordered_events.key_state k
    UNION ALL
    SELECT format('result %s %s/%s %s', r.consumer, r.stream, r.seq, r.result), r.produced_at, r.position
      FROM ordered_events.results r
    UNION ALL
    SELECT format('letter %s %s/%s %s %s', u.consumer, u.stream, u.seq, u.reason, u.detail), u.received_at, NULL
      FROM ordered_events.unprocessed u
    UNION ALL
    SELECT format('next he_plain: %s', string_agg(r.stream || '/' || r.seq, ' ')), NULL, NULL
      FROM ordered_events.peek('he_plain') r
    UNION ALL
    SELECT format('stream %s released %s pending %s', s.stream, s.released_count, s.pending_count), NULL, NULL
      FROM ordered_events.stream_stats s
$$;
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.state();
SELECT fact, at IS NOT NULL AS has_time FROM before ORDER BY 1;
CREATE FUNCTION pg_temp.unchanged()
RETURNS boolean
LANGUAGE sql AS $$
    SELECT NOT EXISTS (SELECT * FROM pg_temp.state() EXCEPT SELECT * FROM before)
       AND NOT EXISTS (SELECT * FROM before EXCEPT SELECT * FROM pg_temp.state())
$$;

--
-- create_consumer: functions that are not handlers
--
CREATE FUNCTION public.he_two_jsonb(state jsonb, e jsonb) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.he_one_arg(state jsonb) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.he_three_args(state jsonb, e ordered_events.event, x int) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.he_swapped(e ordered_events.event, state jsonb) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.he_jsonb(state jsonb, e ordered_events.event) RETURNS jsonb
LANGUAGE sql AS $$ SELECT state $$;
CREATE FUNCTION public.he_setof(state jsonb, e ordered_events.event) RETURNS SETOF ordered_events.step
LANGUAGE sql AS $$ SELECT NULL::ordered_events.step $$;
CREATE FUNCTION public.he_strict(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql STRICT AS $$ SELECT NULL::ordered_events.step $$;
CREATE PROCEDURE public.he_proc(state jsonb, e ordered_events.event)
LANGUAGE sql AS $$ SELECT 1 $$;
-- wrong argument types or count: 42883
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_two_jsonb(jsonb, jsonb)');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_one_arg(jsonb)');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new',
           handler => 'public.he_three_args(jsonb, ordered_events.event, int)');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new',
           handler => 'public.he_swapped(ordered_events.event, jsonb)');
\echo SQLSTATE :SQLSTATE
-- a wrong return type, SETOF, a procedure: 42883, the detail says what it returns
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_jsonb(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_setof(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_proc(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
-- STRICT: 42P13 (a STRICT function would never see a key's first event)
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_strict(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
-- a function that does not exist: 42883, from the regprocedure cast
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_nope(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- create_consumer: output_stream and alignment
--
-- a stream that is not a fence stream: 42809
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_wait');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_s');
\echo SQLSTATE :SQLSTATE
-- an unknown stream: 42704
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_nope');
\echo SQLSTATE :SQLSTATE
-- output_stream or a non-default alignment without handler: 22023
SELECT ordered_events.create_consumer('he_new', output_stream => 'he_fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', alignment => 'processing');
\echo SQLSTATE :SQLSTATE
-- an alignment other than inherit or processing: 22023 (taken as given)
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_fence', alignment => 'event');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      output_stream => 'he_fence', alignment => 'Inherit');
\echo SQLSTATE :SQLSTATE
-- a NULL alignment: 22004
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_count(jsonb, ordered_events.event)',
                                      alignment => NULL);
\echo SQLSTATE :SQLSTATE
-- an existing consumer: 42710, even with a handler
SELECT ordered_events.create_consumer('he_h', handler => 'public.he_count(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- create_consumer: the role that creates a handler consumer must be allowed
-- to execute the handler (it runs as that role): 42501.
--
CREATE ROLE regress_oe_he_owner;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_he_owner;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text)
    TO regress_oe_he_owner;
CREATE FUNCTION public.he_private(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(state, NULL)::ordered_events.step $$;
REVOKE EXECUTE ON FUNCTION public.he_private(jsonb, ordered_events.event) FROM PUBLIC;
SET ROLE regress_oe_he_owner;
SELECT ordered_events.create_consumer('he_new', handler => 'public.he_private(jsonb, ordered_events.event)');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SELECT pg_temp.unchanged();

--
-- process()
--
-- NULL arguments: 22004, each named
SELECT ordered_events.process(NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.process('he_h', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.process('he_h', 10, NULL);
\echo SQLSTATE :SQLSTATE
-- an unknown consumer: 42704
SELECT ordered_events.process('he_nope');
\echo SQLSTATE :SQLSTATE
-- max_events <= 0: 22023
SELECT ordered_events.process('he_h', 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.process('he_h', -1);
\echo SQLSTATE :SQLSTATE
-- a partition out of 0 .. partitions - 1: 22023
SELECT ordered_events.process('he_h', 10, 2);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.process('he_h', 10, -1);
\echo SQLSTATE :SQLSTATE
-- a consumer without handler: 42809
SELECT ordered_events.process('he_plain');
\echo SQLSTATE :SQLSTATE
-- read() and peek() of a handler consumer: 42809 (the extension reads it)
SELECT * FROM ordered_events.read('he_h');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('he_h', 10, 1);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('he_out');
\echo SQLSTATE :SQLSTATE
-- process() writes: not in a read-only transaction (25006)
BEGIN READ ONLY;
SELECT ordered_events.process('he_h', partition => 1);
\echo SQLSTATE :SQLSTATE
ROLLBACK;
SELECT pg_temp.unchanged();

--
-- Output streams: a consumer cannot subscribe to its own output stream
-- (22023); an output stream cannot be dropped while a consumer appends to
-- it (2BP01).
--
SELECT ordered_events.subscribe('he_out', 'he_fence');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_stream('he_fence');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- A handler whose function was dropped, or replaced by one that is not a
-- handler, stops process() with an error (42883): its events wait, none
-- goes to the dead letters.
--
CREATE FUNCTION public.he_fragile(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(state, e.payload)::ordered_events.step $$;
SELECT ordered_events.create_consumer('he_fragile', handler => 'public.he_fragile(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('he_fragile', 'he_s');
DROP TABLE before;
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.state();
DROP FUNCTION public.he_fragile(jsonb, ordered_events.event);
SELECT ordered_events.process('he_fragile');
\echo SQLSTATE :SQLSTATE
CREATE FUNCTION public.he_fragile(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql STRICT AS $$ SELECT ROW(state, e.payload)::ordered_events.step $$;
SELECT ordered_events.process('he_fragile');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();
-- repaired, it applies all 4 events
CREATE OR REPLACE FUNCTION public.he_fragile(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql CALLED ON NULL INPUT AS $$ SELECT ROW(state, e.payload)::ordered_events.step $$;
SELECT ordered_events.process('he_fragile');

--
-- What a handler may not do.  he_act runs as regress_oe_he_owner, the
-- non-superuser that created consumer he_act; by payload it:
--   "whoami" outputs the role it runs as and its search_path,
--   "sleep" sleeps 5 s (over the handler_timeout of 100 ms set here),
--   "role" does SET ROLE, "temp" creates a temporary table,
--   "super" makes its role a superuser, "read" reads a table of the
--   superuser, "path" sets search_path to public.
-- Each forbidden act is that event's exception_thrown (42501, or 57014 for
-- the timeout, whose detail names the limit); the other events go on; the
-- handler's SET does not outlive its call, nor reaches the caller.
--
CREATE TABLE public.he_secret (x int);
CREATE FUNCTION public.he_act(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
BEGIN
    CASE e.payload #>> '{}'
    WHEN 'sleep' THEN PERFORM pg_catalog.pg_sleep(5);
    WHEN 'role' THEN SET ROLE postgres;
    WHEN 'temp' THEN CREATE TEMP TABLE he_tmp (x int);
    WHEN 'super' THEN EXECUTE 'ALTER ROLE ' || current_user || ' SUPERUSER';
    WHEN 'read' THEN PERFORM count(*) FROM public.he_secret;
    WHEN 'path' THEN SET search_path = public;
    ELSE NULL;
    END CASE;
    RETURN ROW(NULL, jsonb_build_object('user', current_user,
                                        'path', current_setting('search_path')))::ordered_events.step;
END;
$$;
SELECT ordered_events.create_stream('he_acts');
SELECT ordered_events.grant_stream('he_acts', 'read', 'regress_oe_he_owner');
SELECT ordered_events.ingest('he_acts', a.n, 'k' || a.n, to_jsonb(a.word))
  FROM unnest('{whoami,sleep,role,temp,super,read,path,whoami}'::text[]) WITH ORDINALITY a(word, n)
 ORDER BY a.n;
SELECT ordered_events.release('he_acts');
SET ROLE regress_oe_he_owner;
SELECT ordered_events.create_consumer('he_act', handler => 'public.he_act(jsonb, ordered_events.event)');
RESET ROLE;
SELECT ordered_events.subscribe('he_act', 'he_acts');
SET ordered_events.handler_timeout = '100ms';
SHOW search_path;
-- all 8 applied
SELECT ordered_events.process('he_act');
RESET ordered_events.handler_timeout;
SHOW search_path;
-- the role and search_path it ran with: the same after "path"
SELECT seq, result FROM ordered_events.results WHERE consumer = 'he_act' ORDER BY position;
SELECT seq, payload, reason, detail FROM ordered_events.unprocessed WHERE consumer = 'he_act' ORDER BY seq;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_oe_he_owner';
SELECT count(*) AS he_tmp_tables FROM pg_class WHERE relname = 'he_tmp';

--
-- A handler's own setting (ALTER FUNCTION ... SET) may lower the limit,
-- never raise it.  he_nap_low (own limit 100 ms) runs under the default
-- limit of 10 s; he_nap_high (own limit 1 h) under a session limit of 100
-- ms.  Both sleep 5 s on "sleep": both are stopped at 100 ms, the detail
-- names the limit that applied.
--
CREATE FUNCTION public.he_nap_low(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(NULL, to_jsonb(pg_catalog.pg_sleep(CASE WHEN e.payload = '"sleep"' THEN 5 ELSE 0 END)::text))::ordered_events.step
$$;
CREATE FUNCTION public.he_nap_high(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(NULL, to_jsonb(pg_catalog.pg_sleep(CASE WHEN e.payload = '"sleep"' THEN 5 ELSE 0 END)::text))::ordered_events.step
$$;
ALTER FUNCTION public.he_nap_low(jsonb, ordered_events.event) SET ordered_events.handler_timeout = '100ms';
ALTER FUNCTION public.he_nap_high(jsonb, ordered_events.event) SET ordered_events.handler_timeout = '1h';
SELECT ordered_events.create_stream('he_naps');
SELECT ordered_events.ingest('he_naps', 1, 'k1', '"sleep"'), ordered_events.ingest('he_naps', 2, 'k2', '"wake"');
SELECT ordered_events.release('he_naps');
SELECT ordered_events.create_consumer(c, handler => format('public.%s(jsonb, ordered_events.event)', c)::regprocedure)
  FROM unnest('{he_nap_low,he_nap_high}'::text[]) c;
SELECT ordered_events.subscribe(c, 'he_naps') FROM unnest('{he_nap_low,he_nap_high}'::text[]) c;
SHOW ordered_events.handler_timeout;
SELECT ordered_events.process('he_nap_low');
SET ordered_events.handler_timeout = '100ms';
SELECT ordered_events.process('he_nap_high');
RESET ordered_events.handler_timeout;
SELECT consumer, seq, detail FROM ordered_events.unprocessed WHERE stream = 'he_naps' ORDER BY consumer;
SELECT consumer, seq FROM ordered_events.results WHERE stream = 'he_naps' ORDER BY consumer;

--
-- drop_consumer removes a handler consumer's key states and results.
--
SELECT (SELECT count(*) FROM ordered_events.key_state WHERE consumer = 'he_fragile') AS states,
       (SELECT count(*) FROM ordered_events.results WHERE consumer = 'he_fragile') AS results;
SELECT ordered_events.drop_consumer('he_fragile');
SELECT (SELECT count(*) FROM ordered_events.key_state WHERE consumer = 'he_fragile') AS states,
       (SELECT count(*) FROM ordered_events.results WHERE consumer = 'he_fragile') AS results;
-- and once he_out is dropped, its output stream can be
SELECT ordered_events.drop_consumer(c)
  FROM unnest('{he_plain,he_h,he_out,he_act,he_nap_low,he_nap_high}'::text[]) c;
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'he\_%' ORDER BY stream;
DROP TABLE public.he_secret;
DROP FUNCTION public.he_count(jsonb, ordered_events.event), public.he_two_jsonb(jsonb, jsonb),
    public.he_one_arg(jsonb), public.he_three_args(jsonb, ordered_events.event, int),
    public.he_swapped(ordered_events.event, jsonb), public.he_jsonb(jsonb, ordered_events.event),
    public.he_setof(jsonb, ordered_events.event), public.he_strict(jsonb, ordered_events.event),
    public.he_private(jsonb, ordered_events.event), public.he_fragile(jsonb, ordered_events.event),
    public.he_act(jsonb, ordered_events.event), public.he_nap_low(jsonb, ordered_events.event),
    public.he_nap_high(jsonb, ordered_events.event);
DROP PROCEDURE public.he_proc(jsonb, ordered_events.event);
DROP OWNED BY regress_oe_he_owner;
DROP ROLE regress_oe_he_owner;
