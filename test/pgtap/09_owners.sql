-- Owners and stream privileges of version 0.3 (docs/architecture.md, rule 15;
-- docs/security.md): grant_stream, revoke_stream, has_stream_privilege and
-- alter_consumer with exactly their argument names, types, defaults,
-- results, volatility and PUBLIC's EXECUTE; the row-level security of
-- unprocessed; the owner of what a role creates; each owner-only function
-- refused to another role (42501, with its message) and allowed to a member
-- of the owner role; 'write' for ingest, inbox and append; 'read' for
-- subscribe and the views of events; output streams; giving away; the
-- SQLSTATE of each kind of bad input.  sql/privileges.sql runs the same
-- rules for every kind of role, with the grants of docs/security.md.
BEGIN;
SELECT plan(93);

------------------------------------------------------------------------
-- Signatures: 5 functions x 5 tests = 25
------------------------------------------------------------------------
CREATE TEMP TABLE contract_function (
    ord int PRIMARY KEY,
    name name NOT NULL,
    argtypes name[] NOT NULL,
    returns text NOT NULL,
    volatility text NOT NULL,
    arguments text NOT NULL,        -- pg_get_function_arguments()
    public_privs text[] NOT NULL
) ON COMMIT DROP;
INSERT INTO contract_function VALUES
(1, 'grant_stream', '{text,text,regrole}', 'void', 'volatile',
    'stream text, privilege text, role regrole', '{}'),
(2, 'revoke_stream', '{text,text,regrole}', 'void', 'volatile',
    'stream text, privilege text, role regrole', '{}'),
(3, 'has_stream_privilege', '{regrole,text,text}', 'boolean', 'stable',
    'role regrole, stream text, privilege text', '{EXECUTE}'),
(4, 'has_stream_privilege', '{text,text}', 'boolean', 'stable',
    'stream text, privilege text', '{EXECUTE}'),
(5, 'alter_consumer', '{text,text,integer,interval,interval,regrole}', 'void', 'volatile',
    'consumer text, on_error text DEFAULT NULL::text, max_attempts integer DEFAULT NULL::integer, '
    'retry_delay interval DEFAULT NULL::interval, handler_timeout interval DEFAULT NULL::interval, '
    'owner regrole DEFAULT NULL::regrole',
    '{}');

SELECT has_function('ordered_events', f.name, f.argtypes,
           format('function %s(%s) exists', f.name, array_to_string(f.argtypes, ', ')))
  FROM contract_function f ORDER BY f.ord;
SELECT function_returns('ordered_events', f.name, f.argtypes, f.returns,
           format('%s(%s) returns %s', f.name, array_to_string(f.argtypes, ', '), f.returns))
  FROM contract_function f ORDER BY f.ord;
SELECT is(pg_get_function_arguments(
              format('ordered_events.%I(%s)', f.name, array_to_string(f.argtypes, ', '))::regprocedure),
          f.arguments,
          format('%s(%s): argument names, types and defaults', f.name, array_to_string(f.argtypes, ', ')))
  FROM contract_function f ORDER BY f.ord;
SELECT volatility_is('ordered_events', f.name, f.argtypes, f.volatility,
           format('%s(%s) is %s', f.name, array_to_string(f.argtypes, ', '), f.volatility))
  FROM contract_function f ORDER BY f.ord;
SELECT function_privs_are('ordered_events', f.name, f.argtypes, 'public', f.public_privs,
           format('PUBLIC %s execute %s(%s)', CASE WHEN f.public_privs = '{}' THEN 'may not' ELSE 'may' END,
                  f.name, array_to_string(f.argtypes, ', ')))
  FROM contract_function f ORDER BY f.ord;

------------------------------------------------------------------------
-- unprocessed shows the rows of the streams a role may read: 2
------------------------------------------------------------------------
SELECT is((SELECT relrowsecurity FROM pg_class WHERE oid = 'ordered_events.unprocessed'::regclass),
          true, 'unprocessed has row-level security');
SELECT policies_are('ordered_events', 'unprocessed', ARRAY['readable_streams'],
          'unprocessed has the one policy readable_streams');

------------------------------------------------------------------------
-- Roles, streams and consumers
------------------------------------------------------------------------
-- Run a query as a role; the value a SELECT returns.
CREATE FUNCTION pg_temp.as_role(who name, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    IF query ~* '^\s*SELECT' THEN
        EXECUTE query INTO result;
    ELSE
        EXECUTE query;
    END IF;
    RESET ROLE;
    RETURN result;
END;
$$;

CREATE ROLE tap_oe_api NOLOGIN;
CREATE ROLE tap_oe_owner IN ROLE tap_oe_api;
CREATE ROLE tap_oe_member IN ROLE tap_oe_owner;
CREATE ROLE tap_oe_other IN ROLE tap_oe_api;
CREATE ROLE tap_oe_writer IN ROLE tap_oe_api;
CREATE ROLE tap_oe_reader IN ROLE tap_oe_api;
GRANT USAGE ON SCHEMA ordered_events TO tap_oe_api;
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
    ordered_events.process(text, integer, integer),
    ordered_events.redrive(text, text),
    ordered_events.skip_held(text, text, text)
  TO tap_oe_api;
GRANT INSERT ON ordered_events.inbox TO tap_oe_api;
GRANT SELECT ON ordered_events.released, ordered_events.pending, ordered_events.unprocessed
   TO tap_oe_api;

CREATE FUNCTION public.tap_oe_h(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(NULL, jsonb_build_object('by', current_user::text))::ordered_events.step $$;
ALTER FUNCTION public.tap_oe_h(jsonb, ordered_events.event) OWNER TO tap_oe_owner;
REVOKE EXECUTE ON FUNCTION public.tap_oe_h(jsonb, ordered_events.event) FROM PUBLIC;

SET LOCAL ROLE tap_oe_owner;
SELECT ordered_events.create_stream('tap_oe_s');
SELECT ordered_events.create_stream('tap_oe_t');
SELECT ordered_events.create_stream('tap_oe_t2');
SELECT ordered_events.create_stream('tap_oe_f', gap_policy => 'fence');
SELECT ordered_events.ingest('tap_oe_s', s, 'k') FROM generate_series(1, 3) s;
SELECT ordered_events.ingest('tap_oe_s', 5, 'k');
SELECT ordered_events.ingest('tap_oe_s', 1, 'k');
SELECT ordered_events.release('tap_oe_s');
SELECT ordered_events.create_consumer('tap_oe_c');
SELECT ordered_events.create_consumer('tap_oe_c2');
SELECT ordered_events.subscribe('tap_oe_c', 'tap_oe_s');
SELECT ordered_events.create_consumer('tap_oe_h', handler => 'public.tap_oe_h(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('tap_oe_h', 'tap_oe_s');
RESET ROLE;

------------------------------------------------------------------------
-- Owners: 3 + 1
------------------------------------------------------------------------
SELECT is((SELECT owner FROM ordered_events.streams WHERE stream = 'tap_oe_s'), 'tap_oe_owner'::regrole,
          'streams.owner is the role that created the stream');
SELECT is((SELECT privileges FROM ordered_events.streams WHERE stream = 'tap_oe_s'), NULL,
          'a new stream grants nothing');
SELECT set_eq($$SELECT DISTINCT consumer, owner FROM ordered_events.consumers WHERE consumer LIKE 'tap_oe_%'$$,
              $$VALUES ('tap_oe_c', 'tap_oe_owner'::regrole), ('tap_oe_h', 'tap_oe_owner'::regrole)$$,
              'consumers.owner is the role that created the consumer');
SELECT results_eq(
    $$SELECT r, ordered_events.has_stream_privilege(r::regrole, 'tap_oe_s', 'read'),
             ordered_events.has_stream_privilege(r::regrole, 'tap_oe_s', 'write')
        FROM unnest(ARRAY['tap_oe_owner', 'tap_oe_member', 'tap_oe_other', session_user::text]) r$$,
    $$VALUES ('tap_oe_owner', true, true), ('tap_oe_member', true, true),
             ('tap_oe_other', false, false), (session_user::text, true, true)$$,
    'the owner, its members and superusers have read and write; others nothing');

------------------------------------------------------------------------
-- Each owner-only function: 42501 for another role (14), allowed to a
-- member of the owner role (14)
------------------------------------------------------------------------
CREATE TEMP TABLE owner_only (
    ord int PRIMARY KEY,
    label text NOT NULL,
    sql text NOT NULL,
    message text NOT NULL
) ON COMMIT DROP;
INSERT INTO owner_only VALUES
(1, 'alter_stream', $$SELECT ordered_events.alter_stream('tap_oe_s', max_release_batch => 100)$$,
    'must be owner of stream "tap_oe_s"'),
(2, 'skip_gap', $$SELECT ordered_events.skip_gap('tap_oe_s', 0, 'nothing')$$,
    'must be owner of stream "tap_oe_s"'),
(3, 'grant_stream', $$SELECT ordered_events.grant_stream('tap_oe_t', 'read', 'tap_oe_other')$$,
    'must be owner of stream "tap_oe_t"'),
(4, 'revoke_stream', $$SELECT ordered_events.revoke_stream('tap_oe_t', 'read', 'tap_oe_other')$$,
    'must be owner of stream "tap_oe_t"'),
(5, 'peek', $$SELECT count(*) FROM ordered_events.peek('tap_oe_c')$$,
    'must be owner of consumer "tap_oe_c"'),
(6, 'read', $$SELECT count(*) FROM ordered_events.read('tap_oe_c', 1)$$,
    'must be owner of consumer "tap_oe_c"'),
(7, 'subscribe', $$SELECT ordered_events.subscribe('tap_oe_c', 'tap_oe_t')$$,
    'must be owner of consumer "tap_oe_c"'),
(8, 'unsubscribe', $$SELECT ordered_events.unsubscribe('tap_oe_c', 'tap_oe_t')$$,
    'must be owner of consumer "tap_oe_c"'),
(9, 'alter_consumer', $$SELECT ordered_events.alter_consumer('tap_oe_h', handler_timeout => '5 s')$$,
    'must be owner of consumer "tap_oe_h"'),
(10, 'process', $$SELECT ordered_events.process('tap_oe_h', 1)$$,
    'must be owner of consumer "tap_oe_h"'),
(11, 'drop_consumer', $$SELECT ordered_events.drop_consumer('tap_oe_c2')$$,
    'must be owner of consumer "tap_oe_c2"'),
(12, 'drop_stream', $$SELECT ordered_events.drop_stream('tap_oe_t2')$$,
    'must be owner of stream "tap_oe_t2"'),
(13, 'redrive', $$SELECT ordered_events.redrive('tap_oe_h')$$,
    'must be owner of consumer "tap_oe_h"'),
(14, 'skip_held', $$SELECT ordered_events.skip_held('tap_oe_h', 'k', 'a reason')$$,
    'must be owner of consumer "tap_oe_h"');

SELECT throws_ok(format('SELECT pg_temp.as_role(%L, %L)', 'tap_oe_other', o.sql), '42501', o.message,
                 format('%s: 42501 for a role that is not the owner', o.label))
  FROM owner_only o ORDER BY o.ord;
SELECT lives_ok(format('SELECT pg_temp.as_role(%L, %L)', 'tap_oe_member', o.sql),
                format('%s: allowed to a member of the owner role', o.label))
  FROM owner_only o ORDER BY o.ord;

------------------------------------------------------------------------
-- 'write': 3 refused, 3 allowed
------------------------------------------------------------------------
SELECT ordered_events.grant_stream('tap_oe_s', 'write', 'tap_oe_writer');
SELECT ordered_events.grant_stream('tap_oe_f', 'write', 'tap_oe_writer');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_reader', $q$SELECT ordered_events.ingest('tap_oe_s', 4, 'k')$q$)$$,
                 '42501', 'permission denied for stream "tap_oe_s"', 'ingest() needs write');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_reader', $q$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_oe_s', 4, 'k')$q$)$$,
                 '42501', 'permission denied for stream "tap_oe_s"', 'the inbox needs write');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_reader', $q$SELECT ordered_events.append('tap_oe_f', 'k')$q$)$$,
                 '42501', 'permission denied for stream "tap_oe_f"', 'append() needs write');
SELECT is(pg_temp.as_role('tap_oe_writer', $$SELECT ordered_events.ingest('tap_oe_s', 4, 'k')$$),
          'accepted', 'ingest() with write');
SELECT lives_ok($$SELECT pg_temp.as_role('tap_oe_writer', $q$INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('tap_oe_s', 6, 'k')$q$)$$,
                'the inbox with write');
SELECT is(pg_temp.as_role('tap_oe_writer', $$SELECT ordered_events.append('tap_oe_f', 'k')$$),
          '1', 'append() with write');

------------------------------------------------------------------------
-- 'read': the views (6), subscribe (2)
------------------------------------------------------------------------
SELECT ordered_events.grant_stream('tap_oe_s', 'read', 'tap_oe_reader');
SELECT ordered_events.release('tap_oe_s');
SELECT ordered_events.ingest('tap_oe_s', 8, 'k');
SELECT is(pg_temp.as_role('tap_oe_reader', $$SELECT count(*) FROM ordered_events.released WHERE stream = 'tap_oe_s'$$),
          '6', 'released shows the streams a role may read');
SELECT is(pg_temp.as_role('tap_oe_writer', $$SELECT count(*) FROM ordered_events.released WHERE stream = 'tap_oe_s'$$),
          '0', 'released shows nothing of a stream a role may only write');
SELECT is(pg_temp.as_role('tap_oe_reader', $$SELECT count(*) FROM ordered_events.pending WHERE stream = 'tap_oe_s'$$),
          '1', 'pending shows the streams a role may read');
SELECT is(pg_temp.as_role('tap_oe_other', $$SELECT count(*) FROM ordered_events.pending WHERE stream = 'tap_oe_s'$$),
          '0', 'pending shows nothing of the others');
SELECT is(pg_temp.as_role('tap_oe_reader', $$SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'tap_oe_s'$$),
          '1', 'unprocessed shows the rejections of the streams a role may read');
SELECT is(pg_temp.as_role('tap_oe_other', $$SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'tap_oe_s'$$),
          '0', 'unprocessed shows nothing of the others');
SELECT lives_ok($$SELECT pg_temp.as_role('tap_oe_reader', $q$SELECT ordered_events.create_consumer('tap_oe_rc')$q$),
                         pg_temp.as_role('tap_oe_reader', $q$SELECT ordered_events.subscribe('tap_oe_rc', 'tap_oe_s')$q$)$$,
                'subscribe() with read, for the consumer''s owner');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_writer', $q$SELECT ordered_events.create_consumer('tap_oe_wc')$q$),
                          pg_temp.as_role('tap_oe_writer', $q$SELECT ordered_events.subscribe('tap_oe_wc', 'tap_oe_s')$q$)$$,
                 '42501', 'permission denied for stream "tap_oe_s"', 'subscribe() needs read');

------------------------------------------------------------------------
-- PUBLIC: 4
------------------------------------------------------------------------
SELECT ordered_events.grant_stream('tap_oe_t', 'read', 0);
SELECT is(ordered_events.has_stream_privilege(0::regrole, 'tap_oe_t', 'read'), true,
          'grant_stream(..., 0) grants to PUBLIC');
SELECT is(ordered_events.has_stream_privilege('tap_oe_other', 'tap_oe_t', 'read'), true,
          'what PUBLIC has, every role has');
SELECT is((SELECT privileges FROM ordered_events.streams WHERE stream = 'tap_oe_t'),
          '{=r/tap_oe_owner}'::aclitem[], 'streams.privileges: r is read, granted by the owner');
SELECT ordered_events.revoke_stream('tap_oe_t', 'read', 0);
SELECT is((SELECT privileges FROM ordered_events.streams WHERE stream = 'tap_oe_t'), NULL,
          'revoking the last grant leaves a stream as a new one');

------------------------------------------------------------------------
-- Output streams: 5
------------------------------------------------------------------------
SET LOCAL ROLE tap_oe_other;
SELECT ordered_events.create_stream('tap_oe_of', gap_policy => 'fence');
RESET ROLE;
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_owner', $q$SELECT ordered_events.create_consumer('tap_oe_ho', handler => 'public.tap_oe_h(jsonb, ordered_events.event)', output_stream => 'tap_oe_of')$q$)$$,
                 '42501', 'permission denied for stream "tap_oe_of"',
                 'create_consumer(): the output stream needs write for the consumer''s owner');
SELECT pg_temp.as_role('tap_oe_other', $$SELECT ordered_events.grant_stream('tap_oe_of', 'write', 'tap_oe_owner')$$);
SELECT lives_ok($$SELECT pg_temp.as_role('tap_oe_owner', $q$SELECT ordered_events.create_consumer('tap_oe_ho', handler => 'public.tap_oe_h(jsonb, ordered_events.event)', output_stream => 'tap_oe_of')$q$),
                         pg_temp.as_role('tap_oe_owner', $q$SELECT ordered_events.subscribe('tap_oe_ho', 'tap_oe_s')$q$)$$,
                'create_consumer() with write on the output stream');
SELECT pg_temp.as_role('tap_oe_other', $$SELECT ordered_events.revoke_stream('tap_oe_of', 'write', 'tap_oe_owner')$$);
SELECT throws_ok($$SELECT ordered_events.process('tap_oe_ho')$$,
                 '42501', 'permission denied for stream "tap_oe_of"',
                 'process(): write on the output stream, revoked, stops the step');
SELECT is((SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'tap_oe_ho'), 6::bigint,
          '... the events wait');
SELECT is((SELECT pending_count + released_count FROM ordered_events.stream_stats WHERE stream = 'tap_oe_of'),
          0::bigint, '... nothing is derived');

------------------------------------------------------------------------
-- Giving away: 4
------------------------------------------------------------------------
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_owner', $q$SELECT ordered_events.alter_stream('tap_oe_s', owner => 'tap_oe_other')$q$)$$,
                 '42501', 'must be able to act as role tap_oe_other to give it stream "tap_oe_s"',
                 'alter_stream(owner): the giver must be able to act as the new owner');
SELECT throws_ok($$SELECT ordered_events.alter_stream('tap_oe_s', owner => 0)$$,
                 '22023', 'invalid value for owner: -', 'alter_stream(owner): PUBLIC owns nothing');
SELECT ordered_events.alter_stream('tap_oe_s', owner => 'tap_oe_other');
SELECT is((SELECT owner FROM ordered_events.streams WHERE stream = 'tap_oe_s'), 'tap_oe_other'::regrole,
          'alter_stream(owner): a superuser gives a stream to any role');
SELECT throws_ok($$SELECT pg_temp.as_role('tap_oe_owner', $q$SELECT ordered_events.skip_gap('tap_oe_s', 0, 'x')$q$)$$,
                 '42501', 'must be owner of stream "tap_oe_s"', '... and the old owner is anyone else');

------------------------------------------------------------------------
-- Bad input: 7
------------------------------------------------------------------------
SELECT throws_ok($$SELECT ordered_events.grant_stream('tap_oe_t', 'execute', 'tap_oe_other')$$,
                 '22023', 'invalid value for privilege: execute', 'grant_stream: a privilege other than read or write');
SELECT throws_ok($$SELECT ordered_events.grant_stream('tap_oe_t', NULL, 'tap_oe_other')$$,
                 '22004', 'privilege must not be null', 'grant_stream: a NULL privilege');
SELECT throws_ok($$SELECT ordered_events.revoke_stream('tap_oe_nope', 'read', 'tap_oe_other')$$,
                 '42704', 'stream "tap_oe_nope" does not exist', 'revoke_stream: an unknown stream');
SELECT throws_ok($$SELECT ordered_events.has_stream_privilege('tap_oe_t', 'execute')$$,
                 '22023', 'unrecognized privilege type: "execute"', 'has_stream_privilege: a privilege other than read or write');
SELECT throws_ok($$SELECT ordered_events.has_stream_privilege('tap_oe_other', 'tap_oe_nope', 'read')$$,
                 '42704', 'stream "tap_oe_nope" does not exist', 'has_stream_privilege: an unknown stream');
SELECT throws_ok($$SELECT ordered_events.alter_consumer('tap_oe_c', handler_timeout => '1 s')$$,
                 '42809', 'consumer "tap_oe_c" has no handler', 'alter_consumer: handler_timeout without a handler');
SELECT throws_ok($$SELECT ordered_events.alter_consumer('tap_oe_h', owner => 'tap_oe_other')$$,
                 '42501', 'permission denied for function public.tap_oe_h(jsonb,ordered_events.event)',
                 'alter_consumer(owner): the new owner must be allowed to execute the handler');

SELECT * FROM finish();
ROLLBACK;
