/*
 * Monitoring: the views an operator reads (docs/monitoring.md), readable
 * by pg_monitor for every stream.
 */

GRANT USAGE ON SCHEMA ordered_events TO pg_monitor;

/*
 * The state of the workers (src/shmem.c), one row per worker: each served
 * database's release worker (kind 'release') and the processing workers
 * (kind 'process', of one consumer partition): what each works on, how
 * long its last cycle (a processing worker's: step) took, how many events
 * it released and applied per second over the last minute.
 */
CREATE FUNCTION ordered_events.worker_report(
    OUT database text, OUT pid integer, OUT state text,
    OUT started_at timestamptz, OUT last_cycle_at timestamptz,
    OUT cycles bigint, OUT released_total bigint, OUT last_error text,
    OUT processed_total bigint, OUT current_stream text, OUT current_consumer text,
    OUT last_cycle_duration interval, OUT released_per_second double precision,
    OUT processed_per_second double precision, OUT kind text, OUT partition integer)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_status';
COMMENT ON FUNCTION ordered_events.worker_report() IS
    'The state of the background workers (the view worker_status)';
REVOKE EXECUTE ON FUNCTION ordered_events.worker_report() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ordered_events.worker_report() TO pg_monitor;
-- Whether the library is preloaded (then worker_report() may be called).
CREATE FUNCTION ordered_events.worker_loaded()
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_worker_loaded';
COMMENT ON FUNCTION ordered_events.worker_loaded() IS
    'Whether ordered_events is in shared_preload_libraries, so that the background worker can run';
CREATE VIEW ordered_events.worker_status AS
SELECT database, pid, state, started_at, last_cycle_at, cycles, released_total, last_error,
       processed_total, current_stream, current_consumer, last_cycle_duration,
       released_per_second, processed_per_second, kind, partition
  FROM ordered_events.worker_report();
COMMENT ON VIEW ordered_events.worker_status IS
    'One row per background worker: each served database''s release worker, and the processing workers of handler consumer partitions';
GRANT SELECT ON ordered_events.worker_status TO pg_monitor;
/*
 * What waits beyond the ranges of a stream's lanes, from the summary of
 * their backlogs (src/backlog.c): its cost is the gaps and what arrived
 * since the last release step, not the pending events.
 */
CREATE FUNCTION ordered_events.stream_backlog(
    stream text, OUT pending_count bigint, OUT oldest_pending_at timestamptz,
    OUT max_pending_seq bigint, OUT first_gap_start bigint, OUT first_gap_since timestamptz)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_stream_backlog';
COMMENT ON FUNCTION ordered_events.stream_backlog(text) IS
    'Internal: the pending events of a stream beyond its lanes'' ranges, and its first gap (stream_stats)';
/*
 * Late events: those that committed into a skipped run a release step had
 * passed, pending until a step settles them (src/gap_policy.c), of every
 * stream: what stream_stats and key_status add to the backlogs.
 */
CREATE VIEW ordered_events.late_events AS
SELECT g.stream_id, d.stream, e.key, e.seq, e.received_at
  FROM ordered_events.gap_skips g
  JOIN ordered_events.stream_def d ON d.stream_id = g.stream_id
  JOIN ordered_events.progress p ON p.stream_id = g.stream_id AND p.lane = g.lane
  JOIN ordered_events.event_store e
    ON e.stream_id = g.stream_id AND e.lane = g.lane
   AND e.seq BETWEEN g.gap_start AND g.gap_end AND e.seq < p.range_end
 WHERE NOT g.settled;
COMMENT ON VIEW ordered_events.late_events IS
    'Internal: events that committed late into a skipped run, not settled yet';
/*
 * stream_stats from counters, the backlogs' summary and the dead letters:
 * its cost is the stream's gaps, dead letters and skips, the events that
 * arrived since its last release step, and one pass over its lanes'
 * progress rows (the highest released seq), whatever it released or holds
 * pending (bench/monitoring.sh, 11a and 11e).  Late events in skipped runs
 * are pending too, until a release step settles them.  The skip ledger can
 * hold more than 2^63 seqs (a run from -9223372036854775808, or many
 * keys): skipped_count stops at the largest bigint instead of failing.
 */
CREATE VIEW ordered_events.stream_stats AS
SELECT d.stream,
       CASE WHEN d.sequencing = 'global' THEN p.range_end END AS range_end,
       greatest(b.max_pending_seq, lt.max_late_seq, lr.last_released_seq) AS max_seen_seq,
       b.pending_count + lt.late_count AS pending_count,
       t.released_count,
       un.unprocessed_count,
       least(b.oldest_pending_at, lt.oldest_late_at) AS oldest_pending_at,
       b.first_gap_start,
       b.first_gap_since,
       sk.skipped_count
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
  JOIN ordered_events.release_totals t
    ON t.stream_id = d.stream_id AND t.partitions = 1 AND t.partition = 0
 CROSS JOIN LATERAL ordered_events.stream_backlog(d.stream) b
 CROSS JOIN LATERAL (
        SELECT count(*) AS late_count, min(l.received_at) AS oldest_late_at,
               max(l.seq) AS max_late_seq
          FROM ordered_events.late_events l WHERE l.stream_id = d.stream_id) lt
 CROSS JOIN LATERAL (
        SELECT max(q.last_released_seq) AS last_released_seq
          FROM ordered_events.progress q WHERE q.stream_id = d.stream_id) lr
 CROSS JOIN LATERAL (
        SELECT count(*) AS unprocessed_count
          FROM ordered_events.unprocessed u
         WHERE u.stream = d.stream AND u.consumer IS NULL) un
 CROSS JOIN LATERAL (
        SELECT least(coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0),
                     9223372036854775807)::bigint AS skipped_count
          FROM ordered_events.gap_skips g WHERE g.stream_id = d.stream_id) sk;
COMMENT ON VIEW ordered_events.stream_stats IS
    'One row per stream: range, backlog, dead letters and the first gap';
GRANT SELECT ON ordered_events.stream_stats TO pg_monitor;
-- The pending events of one key of a per-key stream (src/backlog.c).
CREATE FUNCTION ordered_events.lane_backlog(
    stream text, key text, OUT pending_count bigint, OUT earliest_pending_seq bigint,
    OUT latest_pending_seq bigint)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_lane_backlog';
COMMENT ON FUNCTION ordered_events.lane_backlog(text, text) IS
    'Internal: the pending events of a key of a per-key stream (key_status)';
/*
 * key_status, from counters: its cost is the stream's keys and dead
 * letters, a global stream's gaps and the events that arrived since its
 * last release step, and a per-key stream's gaps, whatever it released or
 * holds pending behind them.  Each part gives rows of (stream, key,
 * counts), summed per key:
 * - a global stream's released events are counted in key_counters once
 *   compacted, and from the events until then (the worker compacts after
 *   each release);
 * - a per-key stream's keys are its lanes, with their counters in progress;
 * - pending events (of every stream: key_status, like stream_stats, shows
 *   every stream to whoever may read it), last events not released yet,
 *   and dead letters (those a retention deleted are in key_counters).
 */
CREATE VIEW ordered_events.key_status AS
SELECT x.stream, x.key,
       pg_catalog.max(x.last_released) AS last_released_seq,
       pg_catalog.sum(x.buffered)::bigint AS buffered_count,
       pg_catalog.min(x.buffered_seq) AS earliest_buffered_seq,
       pg_catalog.max(x.buffered_seq) AS latest_buffered_seq,
       pg_catalog.sum(x.released + x.buffered + x.rejected)::bigint AS received_count,
       pg_catalog.sum(x.released)::bigint AS released_count,
       pg_catalog.sum(x.duplicates)::bigint AS duplicate_count,
       pg_catalog.bool_or(x.last_event) AS last_event_received
  FROM (-- counted: a global stream's released events, deleted dead letters
        SELECT d.stream, k.key, k.released_count AS released,
               k.last_released_seq AS last_released, 0::bigint AS buffered,
               NULL::bigint AS buffered_seq, k.rejected_count AS rejected,
               k.duplicate_count AS duplicates, false AS last_event
          FROM ordered_events.stream_def d
          JOIN ordered_events.key_counters k ON k.stream_id = d.stream_id
        UNION ALL
        -- a global stream's released events not counted yet (a late event
        -- in a skipped run is pending).  LATERAL ... OFFSET 0: an index
        -- range of each stream's lane, never a scan of every event
        SELECT d.stream, e.key, 1, e.seq, 0, NULL, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
         CROSS JOIN LATERAL (
                SELECT e.key, e.seq FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = ''
                   AND e.seq BETWEEN coalesce(p.counted_end, d.initial_sequence)
                                 AND p.range_end - 1
                   AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                                    WHERE g.stream_id = e.stream_id AND g.lane = e.lane
                                      AND NOT g.settled
                                      AND e.seq BETWEEN g.gap_start AND g.gap_end)
                OFFSET 0) e
        UNION ALL
        -- a per-key stream's lanes
        SELECT d.stream, p.lane, p.released_count, p.last_released_seq, 0, NULL, 0, 0,
               p.last_event_seq IS NOT NULL
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id
         WHERE d.sequencing = 'per_key'
        UNION ALL
        -- a global stream's pending events: those of its backlog's summary
        -- by key (src/backlog_keys.c), one row with the count and the
        -- earliest seq, one with the latest ...
        SELECT d.stream, k.key, 0, NULL, k.pending_count,
               CASE WHEN r.kept_block IS NULL OR k.first_block >= r.kept_block
                    THEN k.first_seq END, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.backlog_keys k ON k.stream_id = d.stream_id
          LEFT JOIN ordered_events.backlog_keys_passed r ON r.stream_id = d.stream_id
         WHERE d.sequencing = 'global'
        UNION ALL
        SELECT d.stream, k.key, 0, NULL, 0, k.last_seq, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.backlog_keys k ON k.stream_id = d.stream_id
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... less what the range passed of the rows that reach into its
        -- first whole block (their earliest seq there) ...
        SELECT d.stream, r.key, 0, NULL, -r.passed, r.first_seq, 0, 0, false
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT u.key, u.passed, u.first_seq
                  FROM ordered_events.backlog_keys_passed r
                 CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(r.keys), pg_catalog.unnest(r.passed),
                                               pg_catalog.unnest(r.first_seqs)) u(key, passed, first_seq)
                 WHERE r.stream_id = d.stream_id) r
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... the others one by one, an index range before each island of
        -- the summary's blocks and one after the last (without a summary:
        -- from range_end on) ...
        SELECT d.stream, e.key, 0, NULL, 1, e.seq, 0, 0, false
          FROM ordered_events.stream_def d
          JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
         CROSS JOIN LATERAL (
                SELECT greatest(coalesce((pg_catalog.lag(i.last_block) OVER w) * 1024 + 1024,
                                         p.range_end), p.range_end) AS lo,
                       CASE WHEN i.first_block > -9007199254740992
                            THEN i.first_block * 1024 - 1 END AS hi
                  FROM ordered_events.backlog_islands i
                 WHERE i.stream_id = d.stream_id AND i.lane = ''
                WINDOW w AS (ORDER BY i.first_block)
                UNION ALL
                SELECT CASE WHEN pg_catalog.max(i.last_block) IS NULL THEN p.range_end
                            WHEN pg_catalog.max(i.last_block) < 9007199254740991
                            THEN greatest(pg_catalog.max(i.last_block) * 1024 + 1024,
                                          p.range_end) END,
                       9223372036854775807
                  FROM ordered_events.backlog_islands i
                 WHERE i.stream_id = d.stream_id AND i.lane = '') s
         CROSS JOIN LATERAL (
                SELECT e.key, e.seq FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.lane = ''
                   AND e.seq BETWEEN s.lo AND s.hi
                OFFSET 0) e
         WHERE d.sequencing = 'global'
        UNION ALL
        -- ... and late events in skipped runs
        SELECT l.stream, l.key, 0, NULL, 1, l.seq, 0, 0, false
          FROM ordered_events.late_events l
        UNION ALL
        -- a per-key stream's lanes that can wait, from their backlogs'
        -- summary (src/backlog.c): one row with the count and the earliest
        -- seq, one with the latest
        SELECT d.stream, l.lane, 0, NULL, v.buffered, v.seq, 0, 0, false
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT p.lane FROM ordered_events.progress p
                 WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
                UNION
                SELECT a.key FROM ordered_events.key_arrivals a
                 WHERE a.stream_id = d.stream_id) l
         CROSS JOIN LATERAL ordered_events.lane_backlog(d.stream, l.lane) b
         CROSS JOIN LATERAL (VALUES (b.pending_count, b.earliest_pending_seq),
                                    (0, b.latest_pending_seq)) v(buffered, seq)
         WHERE d.sequencing = 'per_key' AND b.pending_count > 0
        UNION ALL
        -- last events of per-key streams not released yet (by their index)
        SELECT d.stream, e.lane, 0, NULL, 0, NULL, 0, 0, true
          FROM ordered_events.stream_def d
         CROSS JOIN LATERAL (
                SELECT e.lane FROM ordered_events.event_store e
                 WHERE e.stream_id = d.stream_id AND e.last_event
                OFFSET 0) e
        UNION ALL
        SELECT u.stream, u.key, 0, NULL, 0, NULL, 1, (u.reason = 'duplicate')::integer, false
          FROM ordered_events.unprocessed u
         WHERE u.consumer IS NULL) x
 GROUP BY x.stream, x.key
HAVING pg_catalog.sum(x.released + x.buffered + x.rejected) > 0;
COMMENT ON VIEW ordered_events.key_status IS
    'Processing status of every key (Apache Beam''s OrderedProcessingStatus)';
GRANT SELECT ON ordered_events.key_status TO pg_monitor;
/*
 * Metrics for Prometheus (contrib/prometheus/): one row per metric and
 * label set, read from counters and indexes only, so that a scrape costs
 * the same at 100M events as at 1k: no pending count (stream_stats has it).
 * Names follow Prometheus: a unit in the name, _total for counters.
 */
CREATE VIEW ordered_events.metrics AS
-- released events, per stream
SELECT 'ordered_events_released_events_total'::text AS metric, 'counter'::text AS type,
       d.stream, NULL::text AS consumer, t.released_count::double precision AS value
  FROM ordered_events.stream_def d
  JOIN ordered_events.release_totals t
    ON t.stream_id = d.stream_id AND t.partitions = 1 AND t.partition = 0
UNION ALL
-- the first seq not released of a global stream
SELECT 'ordered_events_range_end', 'gauge', d.stream, NULL, p.range_end::double precision
  FROM ordered_events.stream_def d
  JOIN ordered_events.progress p ON p.stream_id = d.stream_id AND p.lane = ''
 WHERE d.sequencing = 'global'
UNION ALL
-- how long the stream's oldest gap a release step saw has been missing (0: none)
SELECT 'ordered_events_gap_age_seconds', 'gauge', d.stream, NULL,
       coalesce(extract(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) (
           SELECT p.gap_first_seen FROM ordered_events.progress p
            WHERE p.stream_id = d.stream_id AND p.gap_start IS NOT NULL
              AND p.gap_first_seen IS NOT NULL
            ORDER BY p.gap_first_seen LIMIT 1)), 0)::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- dead letters of the stream (rejected at ingest or settled late), deleted ones included
SELECT 'ordered_events_dead_letters_total', 'counter', d.stream, NULL,
       ((SELECT count(*) FROM ordered_events.unprocessed u
          WHERE u.stream = d.stream AND u.consumer IS NULL)
        + coalesce((SELECT t.dead_letters FROM ordered_events.deleted_totals t
                     WHERE t.stream_id = d.stream_id), 0))::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- released events a retention deleted, per stream
SELECT 'ordered_events_deleted_events_total', 'counter', d.stream, NULL,
       coalesce((SELECT t.events FROM ordered_events.deleted_totals t
                  WHERE t.stream_id = d.stream_id), 0)::double precision
  FROM ordered_events.stream_def d
UNION ALL
-- seqs skipped by a gap policy or skip_gap()
SELECT 'ordered_events_skipped_seqs_total', 'counter', d.stream, NULL,
       coalesce(sum(g.gap_end::numeric - g.gap_start + 1), 0)::double precision
  FROM ordered_events.stream_def d
  LEFT JOIN ordered_events.gap_skips g ON g.stream_id = d.stream_id
 GROUP BY d.stream
UNION ALL
-- a consumer's released events not consumed yet, and those consumed, per stream
SELECT m.metric, m.type, d.stream, c.consumer, m.value
  FROM ordered_events.subscription s
  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
  JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 CROSS JOIN LATERAL ordered_events.committed_position(s, s.xmin) p
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_consumer_unread_events', 'gauge',
         (t.released_count - p.taken_count)::double precision),
        ('ordered_events_consumer_consumed_events_total', 'counter',
         (s.consumed_count - (s.taken_count - p.taken_count))::double precision)
       ) m(metric, type, value)
UNION ALL
-- a handler consumer's dead letters
SELECT 'ordered_events_handler_dead_letters_total', 'counter', NULL, c.consumer,
       (SELECT count(*) FROM ordered_events.unprocessed u
         WHERE u.consumer = c.consumer)::double precision
  FROM ordered_events.consumer_def c
 WHERE c.handler IS NOT NULL
UNION ALL
-- a handler consumer's held keys, keys waiting for a retry, and the events
-- parked behind them (by the partial indexes of handler_state)
SELECT m.metric, 'gauge', NULL, c.consumer, m.value
  FROM ordered_events.consumer_def c
 CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE k.held_since IS NOT NULL) AS held,
               count(*) FILTER (WHERE k.held_since IS NULL AND k.next_attempt_at > now()) AS retrying,
               coalesce(sum(k.parked), 0) AS parked
          FROM (SELECT h.held_since, h.next_attempt_at, h.parked
                  FROM ordered_events.handler_state h
                 WHERE h.consumer_id = c.consumer_id AND h.held_since IS NOT NULL
                UNION ALL
                SELECT h.held_since, h.next_attempt_at, h.parked
                  FROM ordered_events.handler_state h
                 WHERE h.consumer_id = c.consumer_id AND h.parked > 0 AND h.held_since IS NULL) k) n
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_handler_held_keys', n.held::double precision),
        ('ordered_events_handler_retrying_keys', n.retrying::double precision),
        ('ordered_events_handler_parked_events', n.parked::double precision)
       ) m(metric, value)
 WHERE c.handler IS NOT NULL
UNION ALL
-- the release worker of this database (its processed_total sums up the
-- database's processing workers)
SELECT m.metric, m.type, NULL, NULL, m.value
  FROM (SELECT * FROM ordered_events.worker_report()
         WHERE ordered_events.worker_loaded()) w     -- without it, no worker metrics
 CROSS JOIN LATERAL (VALUES
        ('ordered_events_worker_up', 'gauge', (w.pid IS NOT NULL)::integer::double precision),
        ('ordered_events_worker_failing', 'gauge', (w.last_error IS NOT NULL)::integer::double precision),
        ('ordered_events_worker_cycles_total', 'counter', w.cycles::double precision),
        ('ordered_events_worker_released_events_total', 'counter', w.released_total::double precision),
        ('ordered_events_worker_processed_events_total', 'counter', w.processed_total::double precision),
        ('ordered_events_worker_last_cycle_seconds', 'gauge',
         coalesce(extract(epoch FROM w.last_cycle_duration), 0)::double precision)
       ) m(metric, type, value)
 WHERE w.database = pg_catalog.current_database() AND w.kind = 'release';
COMMENT ON VIEW ordered_events.metrics IS
    'Metrics for Prometheus: one row per metric and label set (stream, consumer)';
GRANT SELECT ON ordered_events.metrics TO pg_monitor;
