--
-- consumer_groups: groups of readers (docs/consuming.md, "Groups of
-- readers"; docs/reference.md, "Groups of readers"): join(), leave() and
-- the view members.
--
--   1. the docs' example, as written
--   2. an even spread for 1 to 8 members of 7 partitions, each partition
--      held by one member
--   3. sticky: renewals move nothing; a new member takes partitions from
--      the others, which keep the rest
--   4. a lease that runs out: the member's partitions go to the others at
--      the next join(); renewed before that, it keeps them
--   5. leave()
--   6. more members than partitions
--   7. the lease runs from the call's clock, not the transaction's start
--   8. exactly-once whoever reads: a member that lost its partition still
--      reads only what no one else read
--   9. who may: the owner, a member of the owner role, a superuser, another
--      role, pg_monitor on the view, a consumer of 0.2 without an owner
--  10. every error, and that it changed nothing
--  11. drop_consumer() removes the members
--
-- Leases are never waited for: the tests move the stored clock
-- (group_member.lease_until) back, as a superuser.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
\set VERBOSITY terse

-- A query's value, or "<SQLSTATE>: <message> (<hint>)"; a failed query is
-- rolled back, as a statement would be.  As a role ('superuser': the
-- session's user).
CREATE FUNCTION pg_temp.try_as(who text, query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
    hint text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', CASE who WHEN 'superuser' THEN session_user ELSE who END);
    EXECUTE query INTO result;
    RESET ROLE;
    RETURN coalesce(result, 'NULL');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || SQLERRM || CASE WHEN hint <> '' THEN ' (' || hint || ')' ELSE '' END;
END;
$$;
CREATE FUNCTION pg_temp.try(query text) RETURNS text
LANGUAGE sql AS $$ SELECT pg_temp.try_as('superuser', query) $$;

-- The members of a consumer and their partitions, one line.
CREATE FUNCTION pg_temp.spread(consumer text) RETURNS text
LANGUAGE sql AS $$
SELECT coalesce(string_agg(m.member || '=' || m.partitions::text, ' ' ORDER BY m.member), '(none)')
  FROM ordered_events.members m WHERE m.consumer = spread.consumer
$$;
-- Whether the spread is even: every partition held by exactly one member,
-- the counts differing by at most one.
CREATE FUNCTION pg_temp.even(consumer text) RETURNS text
LANGUAGE sql AS $$
SELECT CASE WHEN (SELECT array_agg(p ORDER BY p)
                    FROM ordered_events.members m, unnest(m.partitions) p
                   WHERE m.consumer = even.consumer)
                 IS DISTINCT FROM (SELECT array_agg(p ORDER BY p)
                                     FROM ordered_events.consumer_def c,
                                          generate_series(0, c.partitions - 1) p
                                    WHERE c.consumer = even.consumer)
            THEN 'not every partition once'
            WHEN (SELECT max(cardinality(m.partitions)) - min(cardinality(m.partitions))
                    FROM ordered_events.members m WHERE m.consumer = even.consumer) > 1
            THEN 'uneven'
            ELSE 'even' END
$$;
-- Make a member's lease run out, as if its time had passed.
CREATE FUNCTION pg_temp.expire(consumer text, member text) RETURNS void
LANGUAGE sql AS $$
UPDATE ordered_events.group_member g SET lease_until = clock_timestamp() - interval '1 s'
 WHERE g.member = expire.member
   AND g.consumer_id = (SELECT c.consumer_id FROM ordered_events.consumer_def c
                         WHERE c.consumer = expire.consumer)
$$;

------------------------------------------------------------------------
-- 1. The docs' example (docs/consuming.md, "Groups of readers")
------------------------------------------------------------------------
SELECT ordered_events.create_stream('orders');
SELECT count(*) FROM (SELECT ordered_events.ingest('orders', s, 'key' || s) FROM generate_series(1, 16) s) i;
SELECT ordered_events.release('orders');
CREATE TABLE packing_log (stream text, seq bigint, key text, payload jsonb);

-- the docs' example, first block
SELECT ordered_events.create_consumer('packing', partitions => 4);
SELECT ordered_events.subscribe('packing', 'orders');

-- the docs' example, second block: worker_1 alone holds every partition
\set worker worker_1
\set p 0
-- every worker, at least once per lease (30 s by default), in its own transaction:
SELECT ordered_events.join('packing', :'worker');
-- then for each partition :p that join() returned:
BEGIN;
INSERT INTO packing_log (stream, seq, key, payload)
SELECT stream, seq, key, payload FROM ordered_events.read('packing', 100, partition => :p);
COMMIT;

-- the second block again: worker_2 joins and takes partitions 2 and 3
\set worker worker_2
\set p 2
-- every worker, at least once per lease (30 s by default), in its own transaction:
SELECT ordered_events.join('packing', :'worker');
-- then for each partition :p that join() returned:
BEGIN;
INSERT INTO packing_log (stream, seq, key, payload)
SELECT stream, seq, key, payload FROM ordered_events.read('packing', 100, partition => :p);
COMMIT;

-- worker_1 renews: it holds 0 and 1 now
SELECT ordered_events.join('packing', 'worker_1');

-- the docs' example, third block
SELECT member, partitions FROM ordered_events.members WHERE consumer = 'packing';
-- worker_2 stops for good: its partitions go to the others at their next join()
SELECT ordered_events.leave('packing', 'worker_2');

-- what the example read (partitions 0 and 2), and worker_1's next join()
SELECT ordered_events.key_partition(key, 4) AS partition, count(*)
  FROM packing_log GROUP BY 1 ORDER BY 1;
SELECT ordered_events.join('packing', 'worker_1');
SELECT ordered_events.drop_consumer('packing');
SELECT ordered_events.drop_stream('orders');
DROP TABLE packing_log;

------------------------------------------------------------------------
-- 2. An even spread for 1 to 8 members of 7 partitions: a new member
-- joins, then every member renews, and each renewal returns what the view
-- shows
------------------------------------------------------------------------
SELECT ordered_events.create_consumer('grp', partitions => 7);
CREATE FUNCTION pg_temp.grow(consumer text, most integer)
RETURNS TABLE (n integer, spread text, even text, as_returned boolean)
LANGUAGE plpgsql AS $$
DECLARE
    returned text[];
BEGIN
    FOR k IN 1 .. most LOOP
        n := k;
        PERFORM ordered_events.join(grow.consumer, 'm' || k);          -- the new one
        returned := ARRAY(SELECT 'm' || i || '=' || ordered_events.join(grow.consumer, 'm' || i)::text
                            FROM generate_series(1, k) i ORDER BY i);  -- every one renews
        spread := pg_temp.spread(grow.consumer);
        even := pg_temp.even(grow.consumer);
        as_returned := array_to_string(returned, ' ') = spread;
        RETURN NEXT;
    END LOOP;
END;
$$;
SELECT * FROM pg_temp.grow('grp', 8);
SELECT ordered_events.drop_consumer('grp');

------------------------------------------------------------------------
-- 3. Sticky: renewals move nothing, in any order; a new member takes from
-- the others what the even spread needs, and they keep the rest
------------------------------------------------------------------------
SELECT ordered_events.create_consumer('grp', partitions => 10);
SELECT ordered_events.join('grp', m) FROM unnest(ARRAY['a', 'b', 'c']) m;
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
SELECT ordered_events.join('grp', m) FROM unnest(ARRAY['c', 'a', 'b', 'b', 'c', 'a']) m;
SELECT pg_temp.spread('grp') AS after_renewals;
-- d joins: it takes 2 partitions, one from each member that had 4 or 3
-- more than the others; each keeps the rest
SELECT ordered_events.join('grp', 'd');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
SELECT ordered_events.join('grp', m) FROM unnest(ARRAY['d', 'c', 'b', 'a']) m;
SELECT pg_temp.spread('grp') AS after_renewals;

------------------------------------------------------------------------
-- 4. A lease that runs out
------------------------------------------------------------------------
-- b's lease runs out: at the next join() of anyone, its partitions go to
-- the others and it is no member any more
SELECT pg_temp.expire('grp', 'b');
SELECT pg_temp.spread('grp') AS b_expired_nobody_joined;
SELECT ordered_events.join('grp', 'a');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
-- b comes back: a new member, it gets partitions from the others
SELECT ordered_events.join('grp', 'b');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
-- c's lease runs out, but c renews before anyone else joins: it keeps all
SELECT pg_temp.expire('grp', 'c');
SELECT ordered_events.join('grp', 'c');
SELECT pg_temp.spread('grp') AS c_renewed_in_time;
-- two leases run out at once
SELECT pg_temp.expire('grp', 'a'), pg_temp.expire('grp', 'd');
SELECT ordered_events.join('grp', 'c');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');

------------------------------------------------------------------------
-- 5. leave(): true for a member, false otherwise; its partitions go to the
-- others at their next join()
------------------------------------------------------------------------
SELECT ordered_events.join('grp', 'a');
SELECT pg_temp.spread('grp');
SELECT ordered_events.leave('grp', 'b');
SELECT pg_temp.spread('grp') AS b_left_nobody_joined;
SELECT ordered_events.leave('grp', 'b'), ordered_events.leave('grp', 'never_joined');
SELECT ordered_events.join('grp', 'c');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
SELECT ordered_events.leave('grp', 'a'), ordered_events.leave('grp', 'c');
SELECT pg_temp.spread('grp') AS nobody;
SELECT ordered_events.drop_consumer('grp');

------------------------------------------------------------------------
-- 6. More members than partitions: some hold none; one leaves, a member
-- without partitions takes its one
------------------------------------------------------------------------
SELECT ordered_events.create_consumer('grp', partitions => 2);
SELECT m, ordered_events.join('grp', m) FROM unnest(ARRAY['a', 'b', 'c', 'd']) m;
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
SELECT ordered_events.leave('grp', 'a');
SELECT ordered_events.join('grp', 'c');
SELECT pg_temp.spread('grp'), pg_temp.even('grp');
-- one partition: one member holds it, and keeps it while others come
SELECT ordered_events.create_consumer('grp1');
SELECT m, ordered_events.join('grp1', m) FROM unnest(ARRAY['z', 'a', 'b']) m;
SELECT ordered_events.drop_consumer('grp1');

------------------------------------------------------------------------
-- 7. The lease runs from the call's clock: in a transaction whose clock
-- moved on since it began, lease_until is the call's time + lease (wait
-- for the clock, no sleep)
------------------------------------------------------------------------
BEGIN;
DO $$ BEGIN WHILE clock_timestamp() < now() + interval '20 ms' LOOP END LOOP; END $$;
SELECT ordered_events.join('grp', 'b', lease => '5 min');
SELECT lease_until >= now() + interval '5 min 20 ms' AS from_the_call,
       lease_until <= clock_timestamp() + interval '5 min' AS not_later
  FROM ordered_events.members WHERE consumer = 'grp' AND member = 'b';
COMMIT;
SELECT ordered_events.drop_consumer('grp');

------------------------------------------------------------------------
-- 8. Exactly-once whoever reads: x held partition 0, its lease ran out and
-- y took it; x still reads partition 0, unaware.  Each event is read once
-- (read() locks the partition's positions; isolation spec
-- consumer_groups shows two sessions at once).
------------------------------------------------------------------------
SELECT ordered_events.create_stream('grp_s');
SELECT ordered_events.create_consumer('grp', partitions => 1);
SELECT ordered_events.subscribe('grp', 'grp_s');
SELECT ordered_events.ingest('grp_s', s, 'k' || s) FROM generate_series(1, 4) s;
SELECT ordered_events.release('grp_s');
SELECT ordered_events.join('grp', 'x');
SELECT seq FROM ordered_events.read('grp', 2, 0);
SELECT pg_temp.expire('grp', 'x');
SELECT ordered_events.join('grp', 'y');
SELECT seq FROM ordered_events.read('grp', 1, 0);     -- y
SELECT seq FROM ordered_events.read('grp', 10, 0);    -- x, unaware
SELECT seq FROM ordered_events.read('grp', 10, 0);    -- y: nothing left
SELECT consumed_count, unread_count FROM ordered_events.consumers WHERE consumer = 'grp';
SELECT ordered_events.join('grp', 'x');              -- x learns it holds nothing
SELECT ordered_events.drop_consumer('grp');
SELECT ordered_events.drop_stream('grp_s');

------------------------------------------------------------------------
-- 9. Who may: join() and leave() are the consumer owner's, as read() is;
-- the view shows the consumers a role may act as owner of, and every
-- consumer to pg_monitor
------------------------------------------------------------------------
CREATE ROLE regress_grp_api NOLOGIN;
CREATE ROLE regress_grp_owner IN ROLE regress_grp_api;
CREATE ROLE regress_grp_member IN ROLE regress_grp_owner;
CREATE ROLE regress_grp_other IN ROLE regress_grp_api;
CREATE ROLE regress_grp_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA ordered_events TO regress_grp_api;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.join(text, text, interval),
                          ordered_events.leave(text, text)
   TO regress_grp_api;
GRANT SELECT ON ordered_events.members TO regress_grp_api;
SELECT pg_temp.try_as('regress_grp_owner', $$SELECT ordered_events.create_consumer('grp_owned', 3)$$);
SELECT pg_temp.try_as('regress_grp_other', $$SELECT ordered_events.create_consumer('grp_other', 3)$$);
SELECT pg_temp.try_as('regress_grp_other', $$SELECT ordered_events.join('grp_other', current_user)$$);
-- a consumer of 0.2 without a handler has no owner
SELECT ordered_events.create_consumer('grp_old', 3);
UPDATE ordered_events.consumer_def SET owner = NULL WHERE consumer = 'grp_old';

SELECT who, pg_temp.try_as(who, $$SELECT ordered_events.join('grp_owned', current_user)$$) AS join_owned,
       pg_temp.try_as(who, $$SELECT ordered_events.join('grp_old', current_user)$$) AS join_old
  FROM unnest(ARRAY['regress_grp_owner', 'regress_grp_member', 'superuser',
                    'regress_grp_other']) who;
SELECT who, pg_temp.try_as(who, $$SELECT ordered_events.leave('grp_owned', 'regress_grp_member')$$) AS leave_owned
  FROM unnest(ARRAY['regress_grp_other', 'regress_grp_member', 'regress_grp_owner']) who;
SELECT who, pg_temp.try_as(who, $$SELECT string_agg(consumer || '/' || member, ' ' ORDER BY consumer, member)
                                    FROM ordered_events.members WHERE consumer LIKE 'grp%'$$) AS sees
  FROM unnest(ARRAY['regress_grp_owner', 'regress_grp_member', 'regress_grp_other',
                    'regress_grp_monitor', 'superuser']) who;
-- a role without EXECUTE or SELECT
SELECT pg_temp.try_as('regress_grp_monitor', $$SELECT ordered_events.join('grp_owned', 'm')$$);
SELECT pg_temp.try_as('regress_grp_monitor', $$SELECT ordered_events.leave('grp_owned', 'm')$$);
-- a security barrier: a role's own cheap function in its query sees no
-- row the role may not see (without the barrier, it would be called on the
-- rows of group_member before the view's filter: "saw hidden_member")
SELECT ordered_events.join('grp_owned', 'hidden_member');
CREATE FUNCTION pg_temp.peek_row(member text) RETURNS boolean
LANGUAGE plpgsql COST 0.0001 AS $$ BEGIN RAISE NOTICE 'saw %', member; RETURN true; END $$;
SELECT pg_temp.try_as('regress_grp_other',
       $$SELECT count(*) FROM ordered_events.members WHERE pg_temp.peek_row(member)$$);
SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['grp_owned', 'grp_other', 'grp_old']) c;

------------------------------------------------------------------------
-- 10. Every error, and that it changed nothing
------------------------------------------------------------------------
CREATE FUNCTION public.grp_handler(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE sql AS $$ SELECT ROW(state, NULL)::ordered_events.step $$;
SELECT ordered_events.create_consumer('grp_h', handler => 'public.grp_handler(jsonb, ordered_events.event)');
SELECT ordered_events.create_consumer('grp', partitions => 3);
SELECT ordered_events.join('grp', 'a');
CREATE TEMP TABLE before AS SELECT * FROM ordered_events.group_member;
SELECT q, pg_temp.try(q) FROM unnest(ARRAY[
    $$SELECT ordered_events.join(NULL, 'a')$$,
    $$SELECT ordered_events.join('grp', NULL)$$,
    $$SELECT ordered_events.join('grp', 'a', NULL)$$,
    $$SELECT ordered_events.join('nope', 'a')$$,
    $$SELECT ordered_events.join('grp', '')$$,
    $$SELECT ordered_events.join('grp', repeat('x', 201))$$,
    $$SELECT ordered_events.join('grp', 'a', '0 s')$$,
    $$SELECT ordered_events.join('grp', 'a', '-1 s')$$,
    $$SELECT ordered_events.join('grp', 'a', '1 day 1 s')$$,
    $$SELECT ordered_events.join('grp', 'a', '1 mon')$$,
    $$SELECT ordered_events.join('grp_h', 'a')$$,
    $$SELECT ordered_events.leave(NULL, 'a')$$,
    $$SELECT ordered_events.leave('grp', NULL)$$,
    $$SELECT ordered_events.leave('nope', 'a')$$,
    $$SELECT ordered_events.leave('grp', '')$$,
    $$SELECT ordered_events.leave('grp', repeat('x', 201))$$,
    $$SELECT ordered_events.leave('grp_h', 'a')$$]) q;
-- the limits themselves are allowed
SELECT cardinality(ordered_events.join('grp', repeat('x', 200), '1 day')),
       cardinality(ordered_events.join('grp', 'b', '1 microsecond'));
SELECT ordered_events.leave('grp', repeat('x', 200)), ordered_events.leave('grp', 'b');
SELECT ordered_events.join('grp', 'a');
SELECT count(*) AS changed
  FROM (SELECT consumer_id, member, partitions FROM before
        EXCEPT SELECT consumer_id, member, partitions FROM ordered_events.group_member) x;
-- read-only
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT ordered_events.join('grp', 'a')$$);
ROLLBACK;

------------------------------------------------------------------------
-- 11. drop_consumer() removes the members
------------------------------------------------------------------------
SELECT ordered_events.drop_consumer('grp');
SELECT ordered_events.drop_consumer('grp_h');
SELECT count(*) AS members_left FROM ordered_events.group_member;
DROP FUNCTION public.grp_handler(jsonb, ordered_events.event);
REVOKE ALL ON ordered_events.members FROM regress_grp_api;
REVOKE ALL ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                       ordered_events.join(text, text, interval),
                       ordered_events.leave(text, text)
  FROM regress_grp_api;
REVOKE USAGE ON SCHEMA ordered_events FROM regress_grp_api;
DROP ROLE regress_grp_member, regress_grp_owner, regress_grp_other, regress_grp_monitor,
          regress_grp_api;
