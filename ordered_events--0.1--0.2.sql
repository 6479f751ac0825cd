/* ordered_events--0.1--0.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ordered_events UPDATE TO '0.2'" to load this file. \quit

/*
 * Privileges.  The C functions now run their own queries as the owner of
 * the tables (src/internal_query.c): EXECUTE on ingest() or append() is all
 * a producer needs, and the INSERT on unprocessed that 0.1 told producers to
 * have would let them forge dead letters.  Take it back from every role.
 */
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                             ELSE pg_catalog.quote_ident(r.rolname) END
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
          LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE c.oid = 'ordered_events.unprocessed'::pg_catalog.regclass
           AND a.grantee <> c.relowner
           AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE pg_catalog.format(
            'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ordered_events.unprocessed FROM %s',
            grantee);
    END LOOP;
END;
$$;

-- Trigger functions are for the extension's own triggers; the worker's
-- state is for the roles granted it (see README.md, "Security").
REVOKE EXECUTE ON FUNCTION
    ordered_events.stream_def_changed(),
    ordered_events.inbox_insert(),
    ordered_events.worker_status_internal()
FROM PUBLIC;

/*
 * blockers() showed every session's query text, of every database, to any
 * role: it ran as its owner.  The part that needs the owner's rights (the
 * stream's fence and whether it has gaps) moves to blocking_transactions(),
 * which returns the blocking transactions of this database, pid and xid
 * only (pg_locks shows as much to everyone); blockers() runs as its caller
 * and takes state, start and query from pg_stat_activity, which shows them
 * to the same role and to pg_read_all_stats only.
 */
CREATE FUNCTION ordered_events.blocking_transactions(stream text)
RETURNS TABLE (pid integer, xid xid, xact_start timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream);
    s record;
    here oid := (SELECT b.oid FROM pg_catalog.pg_database b
                  WHERE b.datname = pg_catalog.current_database());
BEGIN
    SELECT d.gap_policy, p.fence_xid INTO s
      FROM ordered_events.stream_progress p WHERE p.stream_id = d.stream_id;
    IF NOT EXISTS (SELECT FROM ordered_events.gaps(blocking_transactions.stream)) THEN
        RETURN;                 -- nothing is missing: nothing blocks
    END IF;

    IF s.gap_policy = 'fence' THEN
        -- The transactions older than the fence: any of them may still
        -- commit a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE s.fence_xid IS NOT NULL AND a.datid = here
           AND a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid()
           AND pg_catalog.age(a.backend_xid) > pg_catalog.age(pg_catalog.xid(s.fence_xid))
         ORDER BY a.xact_start, a.pid;
    ELSE
        -- The open transactions that wrote events: any may hold a missing seq.
        RETURN QUERY
        SELECT a.pid, a.backend_xid, a.xact_start
          FROM pg_catalog.pg_stat_activity a
         WHERE a.datid = here AND a.pid <> pg_catalog.pg_backend_pid()
           AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                          WHERE l.granted AND l.mode = 'RowExclusiveLock' AND l.database = here
                            AND l.relation IN ('ordered_events.events'::pg_catalog.regclass,
                                               'ordered_events.key_events'::pg_catalog.regclass))
         ORDER BY a.xact_start, a.pid;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.blocking_transactions(text) IS
    'Internal: pid and xid of the transactions of this database a blocked stream waits for';

CREATE OR REPLACE FUNCTION ordered_events.blockers(stream text)
RETURNS TABLE (pid integer, xid xid, state text, xact_start timestamptz, query text)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT b.pid, b.xid, a.state, a.xact_start, a.query
  FROM ordered_events.blocking_transactions(stream) WITH ORDINALITY b
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = b.pid
 ORDER BY b.ordinality
$$;
COMMENT ON FUNCTION ordered_events.blockers(text) IS
    'The open transactions of this database a blocked stream is waiting for; state and query as pg_stat_activity shows them to the caller';

/*
 * stream_stats: the skip ledger can hold more than 2^63 seqs (a run from
 * -9223372036854775808, or many keys); skipped_count stops at the largest
 * bigint instead of failing for every stream.
 */
CREATE OR REPLACE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing = 'global' THEN p.range_end END AS range_end,
       mx.max_seen_seq,
       pe.pending_count,
       rel.released_count,
       un.unprocessed_count,
       pe.oldest_pending_at,
       fg.first_gap_start,
       fg.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  JOIN ordered_events.stream_progress p ON p.stream_id = d.stream_id
 CROSS JOIN LATERAL (
        SELECT CASE WHEN d.sequencing = 'global'
                    THEN (SELECT max(e.seq) FROM ordered_events.events e
                           WHERE e.stream_id = d.stream_id)
                    ELSE (SELECT max(e.seq) FROM ordered_events.key_events e
                           WHERE e.stream_id = d.stream_id)
               END AS max_seen_seq) mx
 CROSS JOIN LATERAL (
        SELECT count(*) AS pending_count, min(a.received_at) AS oldest_pending_at
          FROM ordered_events.accepted_events a
         WHERE a.stream_id = d.stream_id AND NOT a.is_released) pe
 CROSS JOIN LATERAL (
        SELECT CASE WHEN d.sequencing = 'global' THEN p.released_count
                    ELSE (SELECT coalesce(sum(k.released_count), 0)::bigint
                            FROM ordered_events.key_progress k
                           WHERE k.stream_id = d.stream_id)
               END AS released_count) rel
 LEFT JOIN LATERAL (
        SELECT g.gap_start AS first_gap_start, g.first_seen AS first_gap_since
          FROM ordered_events.gaps(d.stream) g
         ORDER BY g.first_seen NULLS LAST, g.gap_start
         LIMIT 1) fg ON true
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u WHERE u.stream = d.stream) un
 CROSS JOIN LATERAL (
        SELECT least(coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0),
                     9223372036854775807)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;
COMMENT ON VIEW ordered_events.stream_stats IS
    'One row per stream: range, backlog, dead letters and the first gap';

/*
 * Stream management runs as the owner as well, so that an operator role
 * needs EXECUTE only (see README.md, "Security").  The fence sequence that
 * create_stream() makes is then the owner's too.
 */
ALTER FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer)
    SECURITY DEFINER;
ALTER FUNCTION ordered_events.alter_stream(text, text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION ordered_events.drop_stream(text) SECURITY DEFINER;
