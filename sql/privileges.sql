--
-- Privileges (docs/security.md; docs/architecture.md, rule 15).  Three
-- gates: EXECUTE on the functions, the owner of a stream or consumer, and
-- the 'read' and 'write' privileges of a stream.  Each role may do exactly
-- what its grants say: what it may not is 42501 and changes nothing.
--
--   1. the roles of docs/security.md, with its GRANT lines as written
--   2. owners: every function of a stream or a consumer, for its owner, a
--      member of the owner role, a superuser, and roles that may not
--   3. giving a stream or a consumer away
--   4. 'write' and 'read', for a role, a group and PUBLIC
--   5. handlers: the output stream, and the attacks of the 0.2 audit
--   6. what PUBLIC and pg_monitor may do, the trigger functions
--   7. the update from 0.2, on a database of its own
--
\set VERBOSITY terse

-- Run a query as a role ('superuser': the session's user) and say how it
-- went: "ok", with the one value a SELECT returns, or "<SQLSTATE>:
-- <message>".  A failed query is rolled back, as a statement would be.
CREATE FUNCTION pg_temp.try_as(who text, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', CASE who WHEN 'superuser' THEN session_user ELSE who END);
    IF query ~* '^\s*SELECT' THEN
        EXECUTE query INTO result;
    ELSE
        EXECUTE query;
    END IF;
    RESET ROLE;
    RETURN rtrim('ok ' || coalesce(result, ''));
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END;
$$;

-- Everything the functions below could change, as one digest.
CREATE FUNCTION pg_temp.oe_state() RETURNS text
LANGUAGE sql AS $$
SELECT md5(concat_ws('|',
    (SELECT string_agg(format('%s %s %s %s %s %s %s %s', s.stream, s.gap_policy, s.gap_timeout,
                              s.max_release_batch, s.retention, s.dead_letter_retention, s.owner,
                              s.privileges), ';' ORDER BY s.stream)
       FROM ordered_events.streams s),
    (SELECT string_agg(format('%s %s %s %s %s %s', t.stream, t.range_end, t.pending_count,
                              t.released_count, t.unprocessed_count, t.skipped_count),
                       ';' ORDER BY t.stream)
       FROM ordered_events.stream_stats t),
    (SELECT string_agg(format('%s %s %s %s %s %s %s', c.consumer, c.partition, c.stream, c.delay,
                              c.consumed_count, c.unread_count, c.owner),
                       ';' ORDER BY c.consumer, c.partition, c.stream)
       FROM ordered_events.consumers c),
    (SELECT string_agg(format('%s %s %s %s', d.consumer, d.partitions, d.handler_timeout, d.owner),
                       ';' ORDER BY d.consumer)
       FROM ordered_events.consumer_def d),
    (SELECT string_agg(format('%s %s %s %s', g.stream, g.key, g.gap_start, g.gap_end),
                       ';' ORDER BY g.stream, g.gap_start)
       FROM ordered_events.skipped_gaps g),
    (SELECT string_agg(format('%s %s %s %s', k.consumer, k.key, k.state, k.processed_count),
                       ';' ORDER BY k.consumer, k.key)
       FROM ordered_events.key_state k),
    (SELECT count(*) FROM ordered_events.event_store),
    (SELECT count(*) FROM ordered_events.unprocessed),
    (SELECT count(*) FROM ordered_events.handler_result)))
$$;

-- The query as each role that must not run it, then whether anything changed.
CREATE FUNCTION pg_temp.denied(query text, roles text[] DEFAULT ARRAY[
        'regress_oe_other', 'regress_oe_writer', 'regress_oe_reader', 'regress_oe_noinherit'])
RETURNS TABLE (who text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    before text := pg_temp.oe_state();
BEGIN
    FOREACH who IN ARRAY roles LOOP
        outcome := pg_temp.try_as(who, query);
        RETURN NEXT;
    END LOOP;
    who := 'state';
    outcome := CASE WHEN pg_temp.oe_state() = before THEN 'unchanged' ELSE 'CHANGED' END;
    RETURN NEXT;
END;
$$;

------------------------------------------------------------------------
-- 1. The roles of docs/security.md, granted as written there
------------------------------------------------------------------------
CREATE ROLE operator;
CREATE ROLE producer;
CREATE ROLE consumer;
CREATE ROLE monitor;
CREATE ROLE shopkeeper;
CREATE ROLE processor;
CREATE ROLE reporting;
-- docs/security.md: the grants
GRANT USAGE ON SCHEMA ordered_events
   TO operator, producer, consumer, shopkeeper, processor, reporting;
GRANT EXECUTE ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval),
                          ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean, regrole),
                          ordered_events.drop_stream(text),
                          ordered_events.skip_gap(text, bigint, text, text),
                          ordered_events.grant_stream(text, text, regrole),
                          ordered_events.revoke_stream(text, text, regrole),
                          ordered_events.release(text),
                          ordered_events.compact(text) TO operator;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
                          ordered_events.append(text, text, jsonb, timestamptz) TO producer;
GRANT INSERT, SELECT ON ordered_events.inbox TO producer;   -- SELECT for INSERT ... RETURNING
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.unsubscribe(text, text),
                          ordered_events.drop_consumer(text),
                          ordered_events.read(text, integer, integer, interval),
                          ordered_events.peek(text, integer, integer),
                          ordered_events.seek(text, text, text, timestamptz),
                          ordered_events.reset_consumer(text),
                          ordered_events.join(text, text, interval),
                          ordered_events.leave(text, text),
                          ordered_events.receive(text, integer, integer, interval, interval),
                          ordered_events.ack(text, bigint[]),
                          ordered_events.nack(text, bigint[], interval) TO consumer;
GRANT SELECT ON ordered_events.consumers, ordered_events.members, ordered_events.leases TO consumer;
GRANT pg_monitor TO monitor;
-- handlers: the role whose handler runs, one that calls process(), one that reads the output
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.unsubscribe(text, text),
                          ordered_events.alter_consumer(text, text, integer, interval, interval, regrole),
                          ordered_events.drop_consumer(text),
                          ordered_events.redrive(text, text),
                          ordered_events.skip_held(text, text, text) TO shopkeeper;
GRANT EXECUTE ON FUNCTION ordered_events.process(text, integer, integer) TO processor;
GRANT shopkeeper TO processor;
GRANT SELECT ON ordered_events.key_state, ordered_events.results, ordered_events.released TO reporting;

-- docs/security.md: the operator creates the streams, owns them, and grants
SET ROLE operator;
SELECT ordered_events.create_stream('orders');
SELECT ordered_events.create_stream('order_states', gap_policy => 'fence');
SELECT ordered_events.grant_stream('orders', 'write', 'producer');
SELECT ordered_events.grant_stream('orders', 'read', 'consumer');
SELECT ordered_events.grant_stream('orders', 'read', 'shopkeeper');
SELECT ordered_events.grant_stream('order_states', 'write', 'shopkeeper');
SELECT ordered_events.grant_stream('order_states', 'read', 'reporting');
RESET ROLE;
SELECT stream, owner, privileges FROM ordered_events.streams ORDER BY stream;

-- the producer writes orders by every path, and nothing else
SET ROLE producer;
SELECT ordered_events.ingest('orders', 1, 'o1', '{"status": "new"}');
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
VALUES ('orders', 2, 'o2', '{"status": "new"}'), ('orders', 0, 'o0', NULL)
RETURNING stream, seq, key;
COPY ordered_events.inbox (stream, seq, key, payload) FROM stdin;
orders	3	o1	{"status": "paid"}
\.
SELECT ordered_events.append('order_states', 'o1');
SELECT ordered_events.release('orders');
SELECT count(*) FROM ordered_events.released;
RESET ROLE;
SET ROLE operator;
SELECT ordered_events.release('orders');
SELECT ordered_events.compact('orders');
RESET ROLE;

-- the consumer reads orders through a consumer of its own, not order_states
SET ROLE consumer;
SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'orders');
SELECT ordered_events.subscribe('billing', 'order_states');
SELECT stream, seq, key, payload FROM ordered_events.read('billing', 2);
SELECT stream, seq, key FROM ordered_events.peek('billing');
SELECT ordered_events.ingest('orders', 4, 'o2');
-- docs/troubleshooting.md, "A consumer reads nothing", as the consumer
SELECT count(*) FROM (SELECT * FROM ordered_events.consumers WHERE consumer = 'billing') c;
-- a group of readers, a replay, a lease consumer: each as the consumer
SELECT ordered_events.join('billing', 'w1');
SELECT consumer, member, partitions FROM ordered_events.members;
SELECT ordered_events.leave('billing', 'w1');
SELECT ordered_events.seek('billing', 'orders');
SELECT stream, seq, key FROM ordered_events.read('billing', 10, wait => '1 s');
SELECT ordered_events.reset_consumer('billing');
SELECT ordered_events.create_consumer('mailer', delivery => 'lease');
SELECT ordered_events.subscribe('mailer', 'orders');
SELECT ordered_events.ack('mailer', array_agg(receipt)) FROM ordered_events.receive('mailer', 1);
SELECT ordered_events.nack('mailer', array_agg(receipt)) FROM ordered_events.receive('mailer', 1);
SELECT consumer, stream, seq, attempt FROM ordered_events.leases;
SELECT ordered_events.drop_consumer('mailer');
RESET ROLE;

-- the shopkeeper's handler reads orders and appends to order_states
CREATE SCHEMA shop AUTHORIZATION shopkeeper;
SET ROLE shopkeeper;
CREATE FUNCTION shop.order_fsm(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(e.payload, jsonb_build_object('status', e.payload ->> 'status',
                                             'by', current_user::text))::ordered_events.step
$$;
REVOKE EXECUTE ON FUNCTION shop.order_fsm(jsonb, ordered_events.event) FROM PUBLIC;
SELECT ordered_events.create_consumer('order_fsm', handler => 'shop.order_fsm(jsonb, ordered_events.event)',
                                      output_stream => 'order_states');
SELECT ordered_events.subscribe('order_fsm', 'orders');
RESET ROLE;

-- the processor applies its events (as the shopkeeper: the handler says so)
SET ROLE processor;
SELECT ordered_events.process('order_fsm');
RESET ROLE;
SET ROLE operator;
SELECT ordered_events.release('order_states');
RESET ROLE;

-- reporting reads states, results and the derived events
SET ROLE reporting;
SELECT consumer, key, state FROM ordered_events.key_state ORDER BY key;
SELECT stream, seq, key, payload FROM ordered_events.released ORDER BY stream, seq;
SELECT ordered_events.process('order_fsm');
RESET ROLE;

-- the monitor sees every stream's statistics, and no event
SET ROLE monitor;
SELECT stream, owner, range_end, released_count
  FROM ordered_events.stream_stats JOIN ordered_events.streams USING (stream) ORDER BY stream;
SELECT consumer, stream, owner, unread_count FROM ordered_events.consumers ORDER BY consumer, stream;
SELECT count(*) FROM ordered_events.released;
RESET ROLE;
-- the consumers view shows a role its own consumers (the consumer role
-- billing, not the shopkeeper's order_fsm), as members and leases do
SET ROLE consumer;
SELECT DISTINCT consumer, owner FROM ordered_events.consumers ORDER BY consumer;
RESET ROLE;

------------------------------------------------------------------------
-- 2. Owners
------------------------------------------------------------------------
-- regress_oe_api may execute every function of the API and select the
-- views of events: what the owner-only functions check is the owner, and
-- the views show only the streams a role may read.
CREATE ROLE regress_oe_api NOLOGIN;
CREATE ROLE regress_oe_owner IN ROLE regress_oe_api;
CREATE ROLE regress_oe_member IN ROLE regress_oe_owner;
-- a member that does not inherit the owner's privileges: not the owner
-- until it sets the role
CREATE ROLE regress_oe_noinherit NOINHERIT IN ROLE regress_oe_owner;
CREATE ROLE regress_oe_other IN ROLE regress_oe_api;
CREATE ROLE regress_oe_writer IN ROLE regress_oe_api;
CREATE ROLE regress_oe_reader IN ROLE regress_oe_api;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_api, regress_oe_noinherit;
GRANT EXECUTE ON FUNCTION
    ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval),
    ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean, regrole),
    ordered_events.drop_stream(text),
    ordered_events.skip_gap(text, bigint, text, text),
    ordered_events.grant_stream(text, text, regrole),
    ordered_events.revoke_stream(text, text, regrole),
    ordered_events.release(text),
    ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
    ordered_events.append(text, text, jsonb, timestamptz),
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.alter_consumer(text, text, integer, interval, interval, regrole),
    ordered_events.drop_consumer(text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.unsubscribe(text, text),
    ordered_events.read(text, integer, integer, interval),
    ordered_events.peek(text, integer, integer),
    ordered_events.process(text, integer, integer)
  TO regress_oe_api, regress_oe_noinherit;
GRANT INSERT ON ordered_events.inbox TO regress_oe_api, regress_oe_noinherit;
GRANT SELECT ON ordered_events.released, ordered_events.pending, ordered_events.unprocessed,
                ordered_events.key_state, ordered_events.results
   TO regress_oe_api, regress_oe_noinherit;

CREATE FUNCTION public.priv_count(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1),
               jsonb_build_object('seq', e.seq, 'by', current_user::text))::ordered_events.step
$$;
ALTER FUNCTION public.priv_count(jsonb, ordered_events.event) OWNER TO regress_oe_owner;
REVOKE EXECUTE ON FUNCTION public.priv_count(jsonb, ordered_events.event) FROM PUBLIC;

-- the creator owns what it creates; others have no privilege on a new stream
SET ROLE regress_oe_owner;
SELECT ordered_events.create_stream('po_s');
SELECT ordered_events.create_stream('po_f', gap_policy => 'fence');
SELECT ordered_events.create_stream('po_t');
SELECT ordered_events.ingest('po_s', s, 'k' || s % 2, jsonb_build_object('n', s))
  FROM generate_series(1, 4) s;
SELECT ordered_events.ingest('po_s', 6, 'k0');
SELECT ordered_events.ingest('po_s', 1, 'k1');
SELECT ordered_events.release('po_s');
SELECT ordered_events.grant_stream('po_s', 'write', 'regress_oe_writer');
SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_reader');
SELECT ordered_events.create_consumer('pc');
SELECT ordered_events.subscribe('pc', 'po_s');
SELECT ordered_events.create_consumer('ph', handler => 'public.priv_count(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('ph', 'po_s');
RESET ROLE;
SELECT stream, owner, privileges FROM ordered_events.streams WHERE stream LIKE 'po_%' ORDER BY stream;
SELECT consumer, stream, owner FROM ordered_events.consumers WHERE consumer LIKE 'p_' ORDER BY consumer;
SELECT r.rolname,
       ordered_events.has_stream_privilege(r.rolname::regrole, 'po_s', 'read') AS may_read,
       ordered_events.has_stream_privilege(r.rolname::regrole, 'po_s', 'write') AS may_write
  FROM pg_roles r WHERE r.rolname LIKE 'regress_oe_%' ORDER BY r.rolname;
SELECT ordered_events.has_stream_privilege(0::regrole, 'po_s', 'read') AS public_may_read,
       ordered_events.has_stream_privilege('po_s', 'read') AS superuser_may_read;

-- alter_stream: the owner, a member and a superuser; nobody else
SELECT * FROM pg_temp.denied($$SELECT ordered_events.alter_stream('po_s', max_release_batch => 7)$$);
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.alter_stream('po_s', max_release_batch => 101)$$),
    (2, 'regress_oe_member', $$SELECT ordered_events.alter_stream('po_s', max_release_batch => 102)$$),
    (3, 'superuser', $$SELECT ordered_events.alter_stream('po_s', max_release_batch => 103)$$)) v(n, who, q)
 ORDER BY n;
SELECT stream, max_release_batch FROM ordered_events.streams WHERE stream = 'po_s';
-- a member that does not inherit is refused; it may once it sets the role
SET ROLE regress_oe_noinherit;
SELECT ordered_events.alter_stream('po_s', max_release_batch => 104);
SET ROLE regress_oe_owner;
SELECT ordered_events.alter_stream('po_s', max_release_batch => 10000);
RESET ROLE;

-- skip_gap (po_s misses 5)
SELECT * FROM pg_temp.denied($$SELECT ordered_events.skip_gap('po_s', 5, 'not yours')$$);
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.skip_gap('po_s', 0, 'nothing to skip')$$),
    (2, 'regress_oe_member', $$SELECT ordered_events.skip_gap('po_s', 0, 'nothing to skip')$$),
    (3, 'superuser', $$SELECT ordered_events.skip_gap('po_s', 0, 'nothing to skip')$$)) v(n, who, q)
 ORDER BY n;

-- grant_stream and revoke_stream; a writer or reader cannot extend its own
SELECT * FROM pg_temp.denied($$SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_other')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.grant_stream('po_s', 'write', 'regress_oe_writer')$$,
                             ARRAY['regress_oe_reader']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_writer')$$,
                             ARRAY['regress_oe_writer']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.revoke_stream('po_s', 'write', 'regress_oe_writer')$$);
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.grant_stream('po_t', 'read', 'regress_oe_other')$$),
    (2, 'regress_oe_member', $$SELECT ordered_events.grant_stream('po_t', 'write', 'regress_oe_other')$$),
    (3, 'superuser', $$SELECT ordered_events.grant_stream('po_t', 'read', 'regress_oe_reader')$$)) v(n, who, q)
 ORDER BY n;
SELECT privileges FROM ordered_events.streams WHERE stream = 'po_t';
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.revoke_stream('po_t', 'read', 'regress_oe_other')$$),
    (2, 'regress_oe_member', $$SELECT ordered_events.revoke_stream('po_t', 'write', 'regress_oe_other')$$),
    (3, 'superuser', $$SELECT ordered_events.revoke_stream('po_t', 'read', 'regress_oe_reader')$$)) v(n, who, q)
 ORDER BY n;
-- nothing left: as a new stream
SELECT privileges IS NULL AS no_privileges FROM ordered_events.streams WHERE stream = 'po_t';

-- drop_stream
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_stream('po_t')$$);
SET ROLE regress_oe_owner;
SELECT ordered_events.create_stream('po_d1');
SELECT ordered_events.create_stream('po_d2');
SELECT ordered_events.create_stream('po_d3');
RESET ROLE;
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.drop_stream('po_d1')$$),
    (2, 'regress_oe_member', $$SELECT ordered_events.drop_stream('po_d2')$$),
    (3, 'superuser', $$SELECT ordered_events.drop_stream('po_d3')$$)) v(n, who, q)
 ORDER BY n;
SELECT count(*) AS left_over FROM ordered_events.streams WHERE stream LIKE 'po_d_';

-- the consumer's functions: read, peek, subscribe, unsubscribe,
-- alter_consumer, process, drop_consumer (the reader may read po_s, but
-- pc is not its consumer)
SELECT * FROM pg_temp.denied($$SELECT string_agg(seq::text, ',') FROM ordered_events.read('pc', 2)$$);
SELECT * FROM pg_temp.denied($$SELECT string_agg(seq::text, ',') FROM ordered_events.peek('pc')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.subscribe('pc', 'po_t')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.subscribe('pc', 'po_s', delay => '1 s')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.unsubscribe('pc', 'po_s')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.alter_consumer('ph', handler_timeout => '1 s')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.process('ph', 1)$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_consumer('pc')$$);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_consumer('ph')$$);
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT string_agg(seq::text, ',') FROM ordered_events.peek('pc')$$),
    (2, 'regress_oe_owner', $$SELECT string_agg(seq::text, ',') FROM ordered_events.read('pc', 1)$$),
    (3, 'regress_oe_member', $$SELECT string_agg(seq::text, ',') FROM ordered_events.read('pc', 1)$$),
    (4, 'superuser', $$SELECT string_agg(seq::text, ',') FROM ordered_events.read('pc', 1)$$),
    (5, 'regress_oe_member', $$SELECT string_agg(seq::text, ',') FROM ordered_events.peek('pc')$$),
    (6, 'regress_oe_owner', $$SELECT ordered_events.subscribe('pc', 'po_t')$$),
    (7, 'regress_oe_member', $$SELECT ordered_events.unsubscribe('pc', 'po_t')$$),
    (8, 'superuser', $$SELECT ordered_events.subscribe('pc', 'po_t', delay => '1 s')$$),
    (9, 'regress_oe_owner', $$SELECT ordered_events.process('ph', 1)$$),
    (10, 'regress_oe_member', $$SELECT ordered_events.process('ph', 1)$$),
    (11, 'superuser', $$SELECT ordered_events.process('ph', 1)$$),
    (12, 'regress_oe_owner', $$SELECT ordered_events.alter_consumer('ph', handler_timeout => '2 s')$$),
    (13, 'regress_oe_member', $$SELECT ordered_events.alter_consumer('ph', handler_timeout => '3 s')$$),
    (14, 'superuser', $$SELECT ordered_events.alter_consumer('ph', handler_timeout => '4 s')$$)) v(n, who, q)
 ORDER BY n;
SELECT consumer, handler_timeout FROM ordered_events.consumer_def WHERE consumer = 'ph';
-- the handler ran as the consumer's owner, whoever called process()
SELECT key, state, processed_count FROM ordered_events.key_state WHERE consumer = 'ph' ORDER BY key;
SELECT seq, result FROM ordered_events.results WHERE consumer = 'ph' ORDER BY position;
SELECT consumer, stream, delay, consumed_count, unread_count
  FROM ordered_events.consumers WHERE consumer IN ('pc', 'ph') ORDER BY consumer, stream;
-- subscribe needs 'read' on the stream for the consumer's owner, whoever calls
SET ROLE regress_oe_other;
SELECT ordered_events.create_stream('po_x');
RESET ROLE;
SELECT ordered_events.subscribe('pc', 'po_x');
SET ROLE regress_oe_other;
SELECT ordered_events.grant_stream('po_x', 'read', 'regress_oe_owner');
RESET ROLE;
SELECT ordered_events.subscribe('pc', 'po_x');
SELECT ordered_events.unsubscribe('pc', 'po_x');
SELECT ordered_events.drop_stream('po_x');
-- a membership takes effect at once, and so does its end
GRANT regress_oe_owner TO regress_oe_other;
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.unsubscribe('pc', 'po_t')$$);
REVOKE regress_oe_owner FROM regress_oe_other;
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.subscribe('pc', 'po_t')$$);
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_owner', $$SELECT ordered_events.create_consumer('pc_d1')$$),
    (2, 'regress_oe_owner', $$SELECT ordered_events.create_consumer('pc_d2')$$),
    (3, 'regress_oe_owner', $$SELECT ordered_events.create_consumer('pc_d3')$$),
    (4, 'regress_oe_owner', $$SELECT ordered_events.drop_consumer('pc_d1')$$),
    (5, 'regress_oe_member', $$SELECT ordered_events.drop_consumer('pc_d2')$$),
    (6, 'superuser', $$SELECT ordered_events.drop_consumer('pc_d3')$$)) v(n, who, q)
 ORDER BY n;
SELECT count(*) AS left_over FROM ordered_events.consumer_def WHERE consumer LIKE 'pc_d_';

------------------------------------------------------------------------
-- 3. Giving a stream or a consumer away (alter_stream, alter_consumer
--    with owner): the giver must be able to act as the new owner
------------------------------------------------------------------------
SET ROLE regress_oe_owner;
SELECT ordered_events.create_stream('po_g');
SELECT ordered_events.create_consumer('pc_g');
SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_other');
SELECT ordered_events.alter_consumer('pc_g', owner => 'regress_oe_other');
SELECT ordered_events.alter_stream('po_g', owner => 0);
SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_owner');
RESET ROLE;
SELECT * FROM pg_temp.denied($$SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_other')$$,
                             ARRAY['regress_oe_other']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.alter_consumer('pc_g', owner => 'regress_oe_other')$$,
                             ARRAY['regress_oe_other']);
-- a member gives to the owner role, a superuser to anyone
SET ROLE regress_oe_member;
SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_member');
SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_owner');
RESET ROLE;
SELECT ordered_events.alter_stream('po_g', owner => 'regress_oe_other');
SELECT ordered_events.alter_consumer('pc_g', owner => 'regress_oe_other');
SELECT stream, owner FROM ordered_events.streams WHERE stream = 'po_g';
SELECT consumer, owner FROM ordered_events.consumer_def WHERE consumer = 'pc_g';
-- ... after which the old owner is anyone else, the new one the owner
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_stream('po_g')$$,
                             ARRAY['regress_oe_owner', 'regress_oe_member']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_consumer('pc_g')$$,
                             ARRAY['regress_oe_owner', 'regress_oe_member']);
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.drop_stream('po_g')$$);
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.drop_consumer('pc_g')$$);
-- DROP ROLE does not know streams and consumers: what a dropped role owned
-- is left to superusers
CREATE ROLE regress_oe_gone IN ROLE regress_oe_api;
SET ROLE regress_oe_gone;
SELECT ordered_events.create_stream('po_gone');
SELECT ordered_events.create_consumer('pc_gone');
RESET ROLE;
DROP ROLE regress_oe_gone;
SELECT stream, owner::text ~ '^[0-9]+$' AS owner_dropped FROM ordered_events.streams
 WHERE stream = 'po_gone';
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_stream('po_gone')$$,
                             ARRAY['regress_oe_owner', 'regress_oe_other']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_consumer('pc_gone')$$,
                             ARRAY['regress_oe_owner', 'regress_oe_other']);
SELECT ordered_events.alter_stream('po_gone', owner => 'regress_oe_owner');
SELECT ordered_events.drop_consumer('pc_gone');
SELECT pg_temp.try_as('regress_oe_owner', $$SELECT ordered_events.drop_stream('po_gone')$$);
-- a consumer's new owner must be allowed what the consumer does: 'read' on
-- its streams, EXECUTE on its handler ('write' on its output stream: 5.)
SELECT ordered_events.alter_consumer('pc', owner => 'regress_oe_other');
SELECT ordered_events.alter_consumer('ph', owner => 'regress_oe_reader');
GRANT EXECUTE ON FUNCTION public.priv_count(jsonb, ordered_events.event) TO regress_oe_reader;
SELECT ordered_events.alter_consumer('ph', owner => 'regress_oe_reader');
SELECT pg_temp.try_as('regress_oe_reader', $$SELECT ordered_events.process('ph', 1)$$);
SELECT pg_temp.try_as('regress_oe_owner', $$SELECT ordered_events.process('ph', 1)$$);
SELECT seq, result FROM ordered_events.results WHERE consumer = 'ph' ORDER BY position;
SELECT ordered_events.alter_consumer('ph', owner => 'regress_oe_owner');

------------------------------------------------------------------------
-- 4. 'write' and 'read'
------------------------------------------------------------------------
SELECT ordered_events.grant_stream('po_s', 'execute', 'regress_oe_other');
SELECT ordered_events.grant_stream('po_s', NULL, 'regress_oe_other');
SELECT ordered_events.grant_stream('po_nope', 'read', 'regress_oe_other');
SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_nope');
SELECT ordered_events.has_stream_privilege('po_s', 'execute');
SELECT ordered_events.has_stream_privilege('po_nope', 'read');
SELECT ordered_events.grant_stream('po_f', 'write', 'regress_oe_writer');

-- each path of writing: the owner, a member, a writer and a superuser
-- may; the reader and others may not, and write nothing
SELECT * FROM pg_temp.denied($$SELECT ordered_events.ingest('po_s', 7, 'k1')$$,
                             ARRAY['regress_oe_other', 'regress_oe_reader', 'regress_oe_noinherit']);
SELECT * FROM pg_temp.denied($$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('po_s', 7, 'k1')$$,
                             ARRAY['regress_oe_other', 'regress_oe_reader', 'regress_oe_noinherit']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.append('po_f', 'k1')$$,
                             ARRAY['regress_oe_other', 'regress_oe_reader', 'regress_oe_noinherit']);
SET ROLE regress_oe_reader;
COPY ordered_events.inbox (stream, seq, key) FROM stdin;
po_s	7	k1
\.
SET ROLE regress_oe_other;
COPY ordered_events.inbox (stream, seq, key) FROM stdin;
po_s	7	k1
\.
SET ROLE regress_oe_writer;
COPY ordered_events.inbox (stream, seq, key) FROM stdin;
po_s	7	k1
po_s	7	k1
\.
RESET ROLE;
SELECT who, pg_temp.try_as(who, q) AS outcome FROM (VALUES
    (1, 'regress_oe_writer', $$SELECT ordered_events.ingest('po_s', 8, 'k0')$$),
    (2, 'regress_oe_writer', $$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('po_s', 9, 'k1')$$),
    (3, 'regress_oe_writer', $$SELECT ordered_events.append('po_f', 'k1')$$),
    (4, 'regress_oe_owner', $$SELECT ordered_events.ingest('po_s', 10, 'k0')$$),
    (5, 'regress_oe_owner', $$SELECT ordered_events.append('po_f', 'k1')$$),
    (6, 'regress_oe_member', $$SELECT ordered_events.ingest('po_s', 11, 'k1')$$),
    (7, 'regress_oe_member', $$SELECT ordered_events.append('po_f', 'k1')$$),
    (8, 'superuser', $$SELECT ordered_events.ingest('po_s', 12, 'k0')$$),
    (9, 'superuser', $$SELECT ordered_events.append('po_f', 'k1')$$)) v(n, who, q)
 ORDER BY n;
-- a statement that writes a stream the role may not write writes nothing
SELECT * FROM pg_temp.denied($$INSERT INTO ordered_events.inbox (stream, seq, key)
                              VALUES ('po_s', 20, 'k1'), ('po_t', 1, 'k1')$$, ARRAY['regress_oe_writer']);
-- ... a writer may not read, manage or drop
SET ROLE regress_oe_writer;
SELECT count(*) FROM ordered_events.released WHERE stream = 'po_s';
SELECT count(*) FROM ordered_events.pending WHERE stream = 'po_s';
SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'po_s';
SELECT ordered_events.create_consumer('pc_w');
SELECT ordered_events.subscribe('pc_w', 'po_s');
SELECT ordered_events.drop_stream('po_s');
SELECT ordered_events.drop_consumer('pc_w');
RESET ROLE;

-- the views of events show the streams a role may read: the reader, the
-- owner, a member and a superuser see po_s; the others nothing
SELECT ordered_events.release('po_s');
SELECT who,
       pg_temp.try_as(who, $$SELECT count(*) FROM ordered_events.released WHERE stream = 'po_s'$$) AS released,
       pg_temp.try_as(who, $$SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ordered_events.pending WHERE stream = 'po_s'$$) AS pending,
       pg_temp.try_as(who, $$SELECT string_agg(seq || ' ' || reason, ',' ORDER BY seq) FROM ordered_events.unprocessed WHERE stream = 'po_s'$$) AS unprocessed
  FROM unnest(ARRAY['regress_oe_reader', 'regress_oe_owner', 'regress_oe_member', 'superuser',
                    'regress_oe_writer', 'regress_oe_other', 'regress_oe_noinherit']) WITH ORDINALITY r(who, n)
 ORDER BY n;
-- 'read' lets the reader's own consumer subscribe, and its reads see the events
SET ROLE regress_oe_reader;
SELECT ordered_events.create_consumer('pc_r');
SELECT ordered_events.subscribe('pc_r', 'po_s');
SELECT ordered_events.subscribe('pc_r', 'po_f');
SELECT stream, seq, key, payload FROM ordered_events.read('pc_r', 3);
RESET ROLE;

-- PUBLIC (role 0): granted, everyone may; revoked, no one else
SELECT ordered_events.grant_stream('po_s', 'write', 0);
SELECT ordered_events.grant_stream('po_s', 'read', 0::regrole);
SELECT privileges FROM ordered_events.streams WHERE stream = 'po_s';
SELECT ordered_events.has_stream_privilege(0::regrole, 'po_s', 'write') AS public_may_write,
       ordered_events.has_stream_privilege('regress_oe_other', 'po_s', 'read') AS other_may_read;
SET ROLE regress_oe_other;
SELECT ordered_events.ingest('po_s', 13, 'k1');
SELECT count(*) FROM ordered_events.released WHERE stream = 'po_s';
SELECT ordered_events.create_consumer('pc_o');
SELECT ordered_events.subscribe('pc_o', 'po_s');
SELECT count(*) FROM ordered_events.peek('pc_o');
RESET ROLE;
SELECT ordered_events.revoke_stream('po_s', 'write', 0);
SELECT ordered_events.revoke_stream('po_s', 'read', 0);
SELECT privileges FROM ordered_events.streams WHERE stream = 'po_s';
SET ROLE regress_oe_other;
SELECT ordered_events.ingest('po_s', 14, 'k1');
SELECT count(*) FROM ordered_events.released WHERE stream = 'po_s';
SELECT ordered_events.subscribe('pc_o', 'po_t');
SELECT has_stream_privilege AS may_read FROM ordered_events.has_stream_privilege('po_s', 'read');
-- 'read' is checked at every read too: the subscription made with it reads no more
SELECT count(*) FROM ordered_events.peek('pc_o');
SELECT ordered_events.drop_consumer('pc_o');
RESET ROLE;

-- a group's privilege is its members', from the membership on
CREATE ROLE regress_oe_group NOLOGIN;
SELECT ordered_events.grant_stream('po_s', 'write', 'regress_oe_group');
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.ingest('po_s', 14, 'k1')$$);
GRANT regress_oe_group TO regress_oe_other;
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.ingest('po_s', 14, 'k1')$$);
REVOKE regress_oe_group FROM regress_oe_other;
SELECT pg_temp.try_as('regress_oe_other', $$SELECT ordered_events.ingest('po_s', 15, 'k1')$$);
-- a revoke takes effect at once, in the session that wrote before
SET ROLE regress_oe_writer;
SELECT ordered_events.ingest('po_s', 15, 'k1');
RESET ROLE;
SELECT ordered_events.revoke_stream('po_s', 'write', 'regress_oe_writer');
SET ROLE regress_oe_writer;
SELECT ordered_events.ingest('po_s', 16, 'k1');
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('po_s', 16, 'k1');
RESET ROLE;
SELECT ordered_events.revoke_stream('po_s', 'write', 'regress_oe_group');
SELECT stream, pending_count, released_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream IN ('po_s', 'po_f') ORDER BY stream;

------------------------------------------------------------------------
-- 5. Handlers: the output stream needs 'write' for the consumer's owner,
--    at creation and at every step; the attacks of the 0.2 audit
------------------------------------------------------------------------
-- regress_oe_other's fence stream, which regress_oe_owner may write at first
SET ROLE regress_oe_other;
SELECT ordered_events.create_stream('po_fence', gap_policy => 'fence');
RESET ROLE;
SET ROLE regress_oe_owner;
SELECT ordered_events.create_consumer('ph_out', handler => 'public.priv_count(jsonb, ordered_events.event)',
                                      output_stream => 'po_fence');
RESET ROLE;
SELECT count(*) FROM ordered_events.consumer_def WHERE consumer = 'ph_out';
SET ROLE regress_oe_other;
SELECT ordered_events.grant_stream('po_fence', 'write', 'regress_oe_owner');
RESET ROLE;
SET ROLE regress_oe_owner;
SELECT ordered_events.create_consumer('ph_out', handler => 'public.priv_count(jsonb, ordered_events.event)',
                                      output_stream => 'po_fence');
SELECT ordered_events.subscribe('ph_out', 'po_s');
SELECT ordered_events.process('ph_out', 2);
RESET ROLE;
SET ROLE regress_oe_other;
SELECT ordered_events.release('po_fence');
SELECT ordered_events.revoke_stream('po_fence', 'write', 'regress_oe_owner');
RESET ROLE;
-- revoked: the step fails, whoever runs it; the events wait, nothing is derived
SELECT pg_temp.oe_state() AS before \gset
SET ROLE regress_oe_owner;
SELECT ordered_events.process('ph_out');
RESET ROLE;
SELECT ordered_events.process('ph_out');
SELECT pg_temp.oe_state() = :'before' AS unchanged;
SELECT consumer, unread_count FROM ordered_events.consumers WHERE consumer = 'ph_out';
SELECT stream, range_end, pending_count, released_count
  FROM ordered_events.stream_stats WHERE stream = 'po_fence';
-- granted again, the events that waited are applied
SET ROLE regress_oe_other;
SELECT ordered_events.grant_stream('po_fence', 'write', 'regress_oe_owner');
RESET ROLE;
SET ROLE regress_oe_owner;
SELECT ordered_events.process('ph_out', 2);
RESET ROLE;
SELECT ordered_events.release('po_fence');
SELECT stream, seq, key, payload FROM ordered_events.released WHERE stream = 'po_fence' ORDER BY seq;
-- giving the consumer to a role that may not write its output stream
GRANT EXECUTE ON FUNCTION public.priv_count(jsonb, ordered_events.event) TO regress_oe_writer;
SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_writer');
SELECT ordered_events.alter_consumer('ph_out', owner => 'regress_oe_writer');
SELECT consumer, owner FROM ordered_events.consumers WHERE consumer = 'ph_out';

-- The attacks of the 0.2 audit.  regress_oe_mallory has what
-- docs/security.md gives a handler owner, and a handler of her own.
CREATE ROLE regress_oe_mallory;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_mallory;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.unsubscribe(text, text),
                          ordered_events.alter_consumer(text, text, integer, interval, interval, regrole),
                          ordered_events.drop_consumer(text) TO regress_oe_mallory;
CREATE FUNCTION public.priv_forge(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(NULL, '{"forged": true}')::ordered_events.step $$;
ALTER FUNCTION public.priv_forge(jsonb, ordered_events.event) OWNER TO regress_oe_mallory;
SELECT pg_temp.oe_state() AS before \gset
SET ROLE regress_oe_mallory;
-- subscribing another role's handler consumer to a stream of her choice
-- (the consumer's output stream would carry that stream's payloads out),
-- unsubscribing, altering, taking or dropping it
SELECT ordered_events.subscribe('ph', 'orders');
SELECT ordered_events.subscribe('ph', 'po_s', delay => '1 hour');
SELECT ordered_events.unsubscribe('ph', 'po_s');
SELECT ordered_events.alter_consumer('ph', handler_timeout => '1 ms');
SELECT ordered_events.alter_consumer('ph', owner => 'regress_oe_mallory');
SELECT ordered_events.drop_consumer('ph');
SELECT ordered_events.drop_consumer('order_fsm');
-- without EXECUTE on append() nor INSERT on inbox, a consumer whose
-- output stream is someone else's fence stream, to forge its events
SELECT ordered_events.create_consumer('pm_forge', handler => 'public.priv_forge(jsonb, ordered_events.event)',
                                      output_stream => 'order_states');
SELECT ordered_events.create_consumer('pm_forge', handler => 'public.priv_forge(jsonb, ordered_events.event)',
                                      output_stream => 'po_f');
RESET ROLE;
SELECT pg_temp.oe_state() = :'before' AS unchanged;
SELECT consumer, stream, owner FROM ordered_events.consumers
 WHERE consumer IN ('ph', 'order_fsm') ORDER BY consumer, stream;
SELECT count(*) AS forged FROM ordered_events.event_store WHERE payload ? 'forged';
-- a consumer of her own, on a stream she may not read
SET ROLE regress_oe_mallory;
SELECT ordered_events.create_consumer('pm_in', handler => 'public.priv_forge(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('pm_in', 'orders');
SELECT ordered_events.drop_consumer('pm_in');
RESET ROLE;

------------------------------------------------------------------------
-- 6. What PUBLIC and pg_monitor may do; the trigger functions
------------------------------------------------------------------------
-- a role with PUBLIC's rights only (and USAGE) computes partitions and
-- asks about privileges, nothing else
CREATE ROLE regress_oe_nobody;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_nobody;
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_consumer('pc')$$, ARRAY['regress_oe_nobody']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.grant_stream('po_s', 'read', 'regress_oe_nobody')$$, ARRAY['regress_oe_nobody']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.alter_consumer('pc', owner => 'regress_oe_nobody')$$, ARRAY['regress_oe_nobody']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.read('pc')$$, ARRAY['regress_oe_nobody']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.released$$, ARRAY['regress_oe_nobody']);
SET ROLE regress_oe_nobody;
SELECT ordered_events.key_partition('k1', 4) = (hashtextextended('k1', 0) & 9223372036854775807) % 4
    AS key_partition_works;
SELECT ordered_events.has_stream_privilege('po_s', 'read') AS may_read,
       ordered_events.has_stream_privilege('regress_oe_owner', 'po_s', 'write') AS owner_may_write;
RESET ROLE;

-- pg_monitor reads every monitoring view for every stream, and no event,
-- state or result; it neither reads nor processes
SET ROLE monitor;
SELECT count(*) > 0 AS streams FROM ordered_events.streams WHERE stream LIKE 'po_%';
SELECT count(*) > 0 AS ranges FROM ordered_events.ranges WHERE stream LIKE 'po_%';
SELECT count(*) >= 0 AS skipped_gaps FROM ordered_events.skipped_gaps;
SELECT stream, pending_count, released_count FROM ordered_events.stream_stats
 WHERE stream LIKE 'po_%' ORDER BY stream;
SELECT count(*) > 0 AS key_status FROM ordered_events.key_status WHERE stream = 'po_s';
SELECT count(*) > 0 AS consumers FROM ordered_events.consumers WHERE consumer = 'pc';
SELECT count(*) >= 0 AS worker_status FROM ordered_events.worker_status;
SELECT count(*) > 0 AS metrics FROM ordered_events.metrics WHERE stream = 'po_s';
SELECT count(*) > 0 AS gaps FROM ordered_events.gaps('po_s');
RESET ROLE;
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.pending$$, ARRAY['monitor']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.unprocessed$$, ARRAY['monitor']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.key_state$$, ARRAY['monitor']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.results$$, ARRAY['monitor']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.process('ph')$$, ARRAY['monitor']);
SELECT * FROM pg_temp.denied($$SELECT count(*) FROM ordered_events.peek('pc')$$, ARRAY['monitor']);
-- what pg_monitor may read and call: the monitoring views and the
-- function behind worker_status, nothing more
SELECT c.relname AS pg_monitor_may_select
  FROM pg_class c
 WHERE c.relnamespace = 'ordered_events'::regnamespace
   AND has_table_privilege('pg_monitor', c.oid, 'SELECT')
 ORDER BY c.relname;
SELECT p.proname AS pg_monitor_may_execute_beyond_public
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND has_function_privilege('pg_monitor', p.oid, 'EXECUTE')
   AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY p.proname;

-- PUBLIC may not write, manage, read, nor call the internal functions
-- (the "_as" functions take the caller as an argument)
SELECT p.oid::regprocedure AS public_may_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE')
   AND (p.proname IN ('create_stream', 'alter_stream', 'drop_stream', 'ingest', 'append',
                     'release', 'skip_gap', 'compact', 'gaps', 'blockers', 'blocking_transactions',
                     'inbox_insert', 'stream_def_changed', 'worker_report', 'stream_id',
                     'create_consumer', 'drop_consumer', 'subscribe', 'unsubscribe', 'read',
                     'peek', 'process', 'key_partition', 'alter_consumer',
                     'grant_stream', 'revoke_stream', 'has_stream_privilege', 'may_read_stream',
                     'check_owner', 'check_stream_privilege', 'check_new_owner', 'acl_with',
                     'check_handler', 'define_consumer', 'output_stream_or_error',
                     'consumers_with_work', 'check_no_cycle', 'ingest_array',
                     'shard_stream', 'shard_runs', 'shard_skip', 'release_through',
                     'shard_run_set', 'shard_seq_bits', 'shard_release', 'forget_leases',
                     'compact_stream', 'compact_due', 'streams_to_compact', 'retention_cutoff',
                     'released_end', 'gap_expired', 'lock_subscriptions', 'register_cycle_hook',
                     'cycle_hooks', 'extension_of', 'redrive', 'skip_held', 'forget_parked',
                     'handler_consumer_to_change', 'wake_worker', 'seek', 'reset_consumer',
                     'seek_streams', 'forget_stopped_calls', 'receive', 'ack', 'nack')
        OR p.proname LIKE '%\_as')
 ORDER BY 1::text;
SELECT c.relname AS public_may_select
  FROM pg_class c
 WHERE c.relnamespace = 'ordered_events'::regnamespace
   AND has_table_privilege('public', c.oid, 'SELECT')
 ORDER BY c.relname;

-- trigger functions belong to the extension's own triggers
CREATE TABLE priv_t (a integer);
CREATE TABLE priv_t2 (a integer);
ALTER TABLE priv_t2 OWNER TO operator;
SET ROLE operator;
CREATE TRIGGER t AFTER INSERT ON priv_t2 FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();
RESET ROLE;
CREATE TRIGGER t AFTER INSERT ON priv_t FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();
INSERT INTO priv_t VALUES (1);
DROP TRIGGER t ON priv_t;
CREATE TRIGGER t BEFORE INSERT ON priv_t FOR EACH ROW EXECUTE FUNCTION ordered_events.stream_def_changed();
INSERT INTO priv_t VALUES (1);
DROP TABLE priv_t, priv_t2;

-- no role needs the internal tables, and none may forge their rows
SELECT * FROM pg_temp.denied($$INSERT INTO ordered_events.unprocessed (stream, seq, key, reason)
                              VALUES ('po_s', 99, 'k', 'duplicate')$$, ARRAY['producer', 'regress_oe_owner']);
SELECT * FROM pg_temp.denied($$INSERT INTO ordered_events.event_store (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key)
                              VALUES (1, '', false, 99, now(), now(), now(), 'k')$$, ARRAY['producer', 'regress_oe_owner']);
SELECT * FROM pg_temp.denied($$UPDATE ordered_events.stream_def SET owner = current_user::regrole$$,
                             ARRAY['regress_oe_other']);
SELECT * FROM pg_temp.denied($$SELECT ordered_events.drop_stream_as('po_s', 'regress_oe_owner')$$,
                             ARRAY['regress_oe_other']);

------------------------------------------------------------------------
-- 7. The update from 0.2 (docs/security.md, "Updating from 0.2"):
--    0.2's streams belong to the extension's owner and grant 'read' and
--    'write' to PUBLIC; 0.2's consumers without a handler have no owner
--    until alter_consumer() gives one; EXECUTE grants are carried over
------------------------------------------------------------------------
SELECT current_database() AS regress_db \gset
CREATE DATABASE regress_oe_priv_update;
\c regress_oe_priv_update
\set VERBOSITY terse
CREATE EXTENSION ordered_events VERSION '0.2';
SELECT ordered_events.create_stream('orders');
-- what 0.2's create_consumer('billing') stored (the 0.3 library does not
-- run 0.2's functions)
INSERT INTO ordered_events.consumer_def (consumer, partitions) VALUES ('billing', 1);
-- the grants of 0.2's README
GRANT USAGE ON SCHEMA ordered_events TO producer, consumer, operator;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean)
   TO producer;
GRANT EXECUTE ON FUNCTION ordered_events.read(text, integer, integer),
                          ordered_events.peek(text, integer, integer) TO consumer;
GRANT EXECUTE ON FUNCTION ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean),
                          ordered_events.create_consumer(text, integer, regprocedure, text, text),
                          ordered_events.drop_consumer(text),
                          ordered_events.subscribe(text, text, interval, text) TO operator;
ALTER EXTENSION ordered_events UPDATE TO '0.3';
SELECT s.stream,
       s.owner = (SELECT x.extowner FROM pg_extension x WHERE x.extname = 'ordered_events')::regrole
           AS owned_by_extension_owner,
       (SELECT array_agg(a.privilege_type ORDER BY a.privilege_type)
          FROM aclexplode(s.privileges) a WHERE a.grantee = 0) AS public_may
  FROM ordered_events.streams s;
SELECT consumer, owner IS NULL AS no_owner FROM ordered_events.consumer_def;
SELECT p.oid::regprocedure AS function, r.rolname AS may_execute
  FROM pg_proc p CROSS JOIN pg_roles r
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND p.proname IN ('ingest', 'read', 'alter_stream', 'create_consumer', 'subscribe')
   AND r.rolname IN ('producer', 'consumer', 'operator')
   AND has_function_privilege(r.oid, p.oid, 'EXECUTE')
 ORDER BY 1::text, 2;
-- 0.2's producers and readers go on; an ownerless consumer is anyone's
SET ROLE producer;
SELECT ordered_events.ingest('orders', 1, 'o1');
RESET ROLE;
SELECT ordered_events.release('orders');
SET ROLE operator;
SELECT ordered_events.subscribe('billing', 'orders');
RESET ROLE;
SET ROLE consumer;
SELECT stream, seq, key FROM ordered_events.peek('billing');
RESET ROLE;
-- docs/security.md, after the update:
-- as the extension's owner, once
GRANT EXECUTE ON FUNCTION ordered_events.grant_stream(text, text, regrole),
                          ordered_events.revoke_stream(text, text, regrole) TO operator;
SELECT ordered_events.alter_stream('orders', owner => 'operator');
SELECT ordered_events.alter_consumer('billing', owner => 'consumer');
-- then as the operator, the stream's owner now
SET ROLE operator;
SELECT ordered_events.grant_stream('orders', 'write', 'producer');
SELECT ordered_events.revoke_stream('orders', 'write', 0);
RESET ROLE;
SELECT stream, owner, privileges FROM ordered_events.streams;
SELECT consumer, stream, owner FROM ordered_events.consumers;
SET ROLE consumer;
SELECT stream, seq, key FROM ordered_events.read('billing');
RESET ROLE;
SET ROLE operator;
SELECT ordered_events.drop_consumer('billing');
RESET ROLE;
\c :regress_db
DROP DATABASE regress_oe_priv_update;

------------------------------------------------------------------------
-- Clean up
------------------------------------------------------------------------
SELECT ordered_events.drop_consumer(consumer) FROM ordered_events.consumer_def ORDER BY consumer;
SELECT ordered_events.drop_stream(stream) FROM ordered_events.stream_def ORDER BY stream;
DROP SCHEMA shop CASCADE;
DROP FUNCTION public.priv_count(jsonb, ordered_events.event), public.priv_forge(jsonb, ordered_events.event);
DROP OWNED BY operator, producer, consumer, monitor, shopkeeper, processor, reporting,
              regress_oe_api, regress_oe_owner, regress_oe_member, regress_oe_noinherit,
              regress_oe_other, regress_oe_writer, regress_oe_reader, regress_oe_group,
              regress_oe_mallory, regress_oe_nobody;
DROP ROLE operator, producer, consumer, monitor, shopkeeper, processor, reporting,
          regress_oe_api, regress_oe_owner, regress_oe_member, regress_oe_noinherit,
          regress_oe_other, regress_oe_writer, regress_oe_reader, regress_oe_group,
          regress_oe_mallory, regress_oe_nobody;
