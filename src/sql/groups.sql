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
