--
-- keyset_plans: released and pending read by stream (and key) with a
-- lower seq bound and a LIMIT are a Limit over a Merge Append of ordered
-- branches, the stream's branch an index range of event_store_pkey (the
-- stream's id and its range bound are index conditions, see src/keyset.c):
-- no Sort of the stream's events.  And the views return the same rows in
-- the same order as the 0.2 formulation, for global and per-key streams,
-- and nothing of a stream the role may not read.
--
SET TimeZone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- ks_g: global, 1..2000 released but 1000 (skipped), 2002..60000 pending
-- behind the missing 2001 (enough that a sort of them costs more than the
-- range, so the plans do not depend on the planner's taste).  ks_k: per-key, 20 keys of 100
-- seqs, key k3 missing its seq 50 (51..100 pending).
SELECT ordered_events.create_stream('ks_g'),
       ordered_events.create_stream('ks_k', sequencing => 'per_key');
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts)
SELECT 'ks_g', g, 'k' || (g % 7), jsonb_build_object('n', g),
       '2024-03-01'::timestamptz + g * interval '1 s'
  FROM generate_series(1, 60000) g WHERE g NOT IN (1000, 2001);
INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts)
SELECT 'ks_k', s, 'k' || k, jsonb_build_object('k', k, 's', s),
       '2024-03-01'::timestamptz + s * interval '1 s'
  FROM generate_series(0, 19) k, generate_series(1, 100) s
 WHERE NOT (k = 3 AND s = 50);
SELECT ordered_events.release('ks_g'), ordered_events.release('ks_k');
SELECT ordered_events.skip_gap('ks_g', 1000, 'lost') AS skipped;
SELECT ordered_events.release('ks_g');
-- as autovacuum leaves them: the index alone answers (index-only scans)
VACUUM ANALYZE ordered_events.event_store, ordered_events.progress, ordered_events.stream_def,
        ordered_events.gap_skips;
SELECT stream, range_end, pending_count, released_count FROM ordered_events.stream_stats
 WHERE stream LIKE 'ks\_%' ORDER BY stream;

-- The plan's shape: for each scan of event_store, the nodes above it that
-- order or merge (a Sort between the Limit and the stream's range is what
-- this test is about), the scan and its index condition (the branches of
-- the unsettled skipped runs, driven by gap_skips, in short).
CREATE FUNCTION pg_temp.shape(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE plan jsonb;
BEGIN
    EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO plan;
    RETURN QUERY
    WITH RECURSIVE n(node, path) AS (
        SELECT plan -> 0 -> 'Plan', ''
        UNION ALL
        SELECT c, n.path || CASE WHEN n.node ->> 'Node Type' IN
                  ('Limit', 'Merge Append', 'Append', 'Sort', 'Incremental Sort', 'Gather Merge')
                  THEN (n.node ->> 'Node Type') || ' > ' ELSE '' END
          FROM n, jsonb_array_elements(n.node -> 'Plans') c)
    SELECT path || CASE WHEN coalesce(node ->> 'Index Cond', node ->> 'Recheck Cond')
                             LIKE '%read_stream_id%'
                        THEN replace(node ->> 'Node Type', 'Index Only Scan', 'Index Scan')
                             || coalesce(' ' || (node ->> 'Index Name'), '') || ': '
                             || coalesce(node ->> 'Index Cond', node ->> 'Recheck Cond')
                        ELSE 'a skipped run''s events' END
      FROM n WHERE node ->> 'Relation Name' = 'event_store'
     ORDER BY 1;
END $$;

-- The plans.  Each branch is a subquery, and PostgreSQL plans a subquery
-- under an ORDER BY for all its rows, not for the LIMIT: whether the range
-- or a sort of the whole range is cheaper for all rows depends on the
-- heap's order (after other tests, this table's is poor), so enable_sort =
-- off: what is pinned is that the range exists and is what the plan merges
-- (a Sort left in the plan is one without another way); bench/monitoring.sh
-- measures what the planner chooses by itself.
SET enable_sort = off;
-- The stream's branch: the index range, in seq order; the
-- other kind's branch is sorted, empty when it runs (its stream id is NULL).
SELECT * FROM pg_temp.shape($$SELECT seq FROM ordered_events.released WHERE stream = 'ks_g' AND seq > 2 ORDER BY seq LIMIT 100$$);
SELECT * FROM pg_temp.shape($$SELECT seq, payload FROM ordered_events.released
 WHERE stream = 'ks_k' AND key = 'k3' AND seq > 5 ORDER BY seq LIMIT 10$$);
SELECT * FROM pg_temp.shape($$SELECT * FROM ordered_events.pending WHERE stream = 'ks_g' ORDER BY seq LIMIT 10$$);
SELECT * FROM pg_temp.shape($$SELECT * FROM ordered_events.pending
 WHERE stream = 'ks_k' AND key = 'k3' AND seq > 60 ORDER BY seq LIMIT 10$$);
-- A prepared statement's generic plan: the name a Param, the stream's id
-- and bound looked up when it runs.  (Its shape is not pinned: without the
-- name, the planner's estimate of the stream's rows is the table's average
-- per stream, and at this size a Sort above the Append can cost less.)
PREPARE page(text, bigint) AS
SELECT seq FROM ordered_events.released WHERE stream = $1 AND seq > $2 ORDER BY seq LIMIT 3;
SET plan_cache_mode = force_generic_plan;
SELECT count(*) > 0 AS bound_at_run_time
  FROM pg_temp.shape($$EXECUTE page('ks_g', 998)$$) s
 WHERE s LIKE '%read_stream_id($1, ''global''%';
EXECUTE page('ks_g', 998);
EXECUTE page('ks_k', 0);       -- a per-key stream by seq alone: every key's 1s
RESET plan_cache_mode;
RESET enable_sort;

-- key_status of a global stream: its pending events from the keys' rows of
-- its backlog's summary and an index range of the lane before each island
-- of stored blocks and after the last (src/backlog_keys.c), never the range
-- from range_end to the end; with a key, its rows by the primary key.
-- Each scan of event_store, its index and condition (the aliases left out;
-- those of late events in skipped runs in short), and whether backlog_keys
-- is read by key.
CREATE FUNCTION pg_temp.key_shape(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE plan jsonb;
BEGIN
    EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO plan;
    RETURN QUERY
    WITH RECURSIVE n(node) AS (
        SELECT plan -> 0 -> 'Plan'
        UNION ALL
        SELECT c FROM n, jsonb_array_elements(n.node -> 'Plans') c),
    scan(rel, node, cond) AS (
        SELECT node ->> 'Relation Name', node, regexp_replace(
                   coalesce(node ->> 'Index Cond', node ->> 'Recheck Cond', node ->> 'Filter', ''),
                   '("[^"]*"|[a-z_0-9]+)\.', '', 'g')
          FROM n WHERE node ->> 'Relation Name' IN ('event_store', 'backlog_keys'))
    SELECT CASE WHEN rel = 'backlog_keys'
                THEN 'backlog_keys' || CASE WHEN cond LIKE '%key = %' THEN ' by key' ELSE '' END
                WHEN cond LIKE '%gap_start%' OR cond LIKE '%(seq < range_end)%'
                THEN 'event_store: a skipped run''s events'
                ELSE rel || ': ' || (node ->> 'Node Type') || coalesce(' ' || (node ->> 'Index Name'), '')
                     || ': ' || cond END
      FROM scan ORDER BY 1;
END $$;
SELECT * FROM pg_temp.key_shape($$SELECT * FROM ordered_events.key_status WHERE stream = 'ks_g' LIMIT 100$$);
SELECT * FROM pg_temp.key_shape($$SELECT * FROM ordered_events.key_status WHERE stream = 'ks_g' AND key = 'k3'$$);

-- The answers: pages of a global stream over the skipped seq, by key, and
-- the pending ones.
SELECT seq, key, payload FROM ordered_events.released
 WHERE stream = 'ks_g' AND seq > 997 ORDER BY seq LIMIT 4;
SELECT max(seq), count(*) FROM (SELECT seq FROM ordered_events.released
 WHERE stream = 'ks_g' AND seq > 1990 ORDER BY seq LIMIT 100) r;
SELECT seq, payload FROM ordered_events.released
 WHERE stream = 'ks_k' AND key = 'k3' AND seq > 46 ORDER BY seq LIMIT 10;
SELECT seq, key FROM ordered_events.pending WHERE stream = 'ks_g' ORDER BY seq LIMIT 3;
SELECT seq, key FROM ordered_events.pending
 WHERE stream = 'ks_k' AND key = 'k3' AND seq > 97 ORDER BY seq LIMIT 10;
SELECT k.key, k.buffered_count, k.earliest_buffered_seq, k.latest_buffered_seq,
       (p.n, p.lo, p.hi) = (k.buffered_count, k.earliest_buffered_seq, k.latest_buffered_seq)
           AS as_pending
  FROM ordered_events.key_status k
  JOIN (SELECT key, count(*) AS n, min(seq) AS lo, max(seq) AS hi
          FROM ordered_events.pending WHERE stream = 'ks_g' GROUP BY key) p USING (key)
 WHERE k.stream = 'ks_g' ORDER BY k.key;

-- The 0.2 formulation of both views, to compare with.
CREATE TEMP VIEW released_0_2 AS
SELECT a.stream, a.seq, a.key, a.payload, a.event_ts, a.alignment_ts, a.received_at,
       (SELECT l.released_at FROM ordered_events.lane_release_log l
         WHERE l.stream_id = a.stream_id AND l.lane = a.lane AND l.seq_end > a.seq
         ORDER BY l.seq_end LIMIT 1) AS released_at
  FROM ordered_events.accepted_events a
 WHERE a.is_released
 ORDER BY a.stream, a.lane, a.seq;
CREATE TEMP VIEW pending_0_2 AS
SELECT w.stream, w.seq, w.key, w.payload, w.event_ts, w.alignment_ts, w.received_at
  FROM (SELECT d.stream, e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts,
               e.received_at
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT p.lane, p.range_end FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.lane = ''
                UNION
                SELECT p.lane, p.range_end FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
                UNION
                SELECT a.key, coalesce(p.range_end, d.initial_sequence)
                  FROM ordered_events.key_arrivals a
                  LEFT JOIN ordered_events.progress p
                    ON p.stream_id = a.stream_id AND p.lane = a.key
                 WHERE a.stream_id = d.stream_id) l
         CROSS JOIN LATERAL (
                SELECT e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts, e.received_at
                  FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = l.lane
                   AND e.seq BETWEEN l.range_end AND 9223372036854775807
                OFFSET 0) e
         WHERE ordered_events.may_read_stream(d.stream)
        UNION ALL
        SELECT d.stream, e.lane, e.seq, e.key, e.payload, e.event_ts, e.alignment_ts,
               e.received_at
          FROM ordered_events.gap_skips g
          JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
          JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
          JOIN ordered_events.event_store e
            ON e.stream_id = g.stream_id AND e.lane = g.lane
           AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
         WHERE NOT g.settled AND ordered_events.may_read_stream(d.stream)) w
 ORDER BY w.stream, w.lane, w.seq;
GRANT SELECT ON released_0_2, pending_0_2 TO PUBLIC;

-- Same rows, in the same order, for each stream read whole (the views'
-- order, no ORDER BY) and for every keyset page.
CREATE FUNCTION pg_temp.rows_of(q text) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE r record; rows text[] := '{}';
BEGIN
    FOR r IN EXECUTE q LOOP
        rows := rows || r::text;
    END LOOP;
    RETURN rows;
END $$;
CREATE FUNCTION pg_temp.same(q text) RETURNS text LANGUAGE sql AS $$
SELECT CASE WHEN n = o THEN format('same, %s rows', cardinality(n)) ELSE 'DIFFERENT' END
  FROM pg_temp.rows_of(replace(replace(q, '@released', 'ordered_events.released'),
                               '@pending', 'ordered_events.pending')) n,
       pg_temp.rows_of(replace(replace(q, '@released', 'pg_temp.released_0_2'),
                               '@pending', 'pg_temp.pending_0_2')) o
$$;
CREATE TEMP TABLE reads (q text);
INSERT INTO reads VALUES
    ($$SELECT * FROM @released WHERE stream = 'ks_g'$$),
    ($$SELECT * FROM @released WHERE stream = 'ks_k'$$),
    ($$SELECT * FROM @pending WHERE stream = 'ks_g'$$),
    ($$SELECT * FROM @pending WHERE stream = 'ks_k'$$),
    ($$SELECT * FROM @released WHERE stream = 'ks_g' AND seq > 990 ORDER BY seq LIMIT 20$$),
    ($$SELECT * FROM @released WHERE stream = 'ks_k' AND key = 'k3' AND seq > 40 ORDER BY seq LIMIT 20$$),
    ($$SELECT * FROM @released WHERE stream = 'ks_k' AND seq > 98 ORDER BY seq, key LIMIT 30$$),
    ($$SELECT * FROM @pending WHERE stream = 'ks_g' AND seq > 59990 ORDER BY seq LIMIT 20$$),
    ($$SELECT * FROM @pending WHERE stream = 'ks_k' AND key = 'k3' AND seq > 90 ORDER BY seq LIMIT 20$$);
SELECT q, pg_temp.same(q) FROM reads;
-- Each kind read whole, several streams: ordered by stream within the kind.
SELECT pg_temp.same($$SELECT * FROM @released WHERE stream LIKE 'ks\_g%'$$) AS global_whole,
       pg_temp.same($$SELECT * FROM @released WHERE stream LIKE 'ks\_k%'$$) AS per_key_whole;

-- A role without 'read' on ks_g sees nothing of it, by any read; with
-- 'read' on ks_k only, that stream.
CREATE ROLE regress_oe_keyset_reader;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_keyset_reader;
GRANT SELECT ON ordered_events.released, ordered_events.pending TO regress_oe_keyset_reader;
SELECT ordered_events.grant_stream('ks_k', 'read', 'regress_oe_keyset_reader');
GRANT SELECT ON reads TO regress_oe_keyset_reader;
SET ROLE regress_oe_keyset_reader;
SELECT count(*) FROM ordered_events.released WHERE stream = 'ks_g';
SELECT count(*) FROM (SELECT seq FROM ordered_events.released
 WHERE stream = 'ks_g' AND seq > 2 ORDER BY seq LIMIT 100) r;
SELECT count(*) FROM (SELECT seq FROM ordered_events.pending
 WHERE stream = 'ks_g' ORDER BY seq LIMIT 10) r;
SELECT ordered_events.read_stream_id('ks_g', 'global', NULL) AS id,
       ordered_events.lane_range_end('ks_g', '', NULL) AS range_end;
SELECT q, pg_temp.same(q) FROM reads;
SELECT seq FROM ordered_events.released
 WHERE stream = 'ks_k' AND key = 'k3' AND seq > 46 ORDER BY seq LIMIT 3;
RESET ROLE;

SELECT ordered_events.drop_stream('ks_g'), ordered_events.drop_stream('ks_k');
DROP OWNED BY regress_oe_keyset_reader;
DROP ROLE regress_oe_keyset_reader;
