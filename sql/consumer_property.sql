--
-- consumer_property: a random workload with a fixed seed, checked against a
-- model of the merged read (docs/architecture.md, rules 6 and 9).
--
-- Five streams (three global, two per-key; two with a small
-- max_release_batch, so that a backlog takes several release steps) get
-- about 3,500 events over 12 rounds, in random arrival order: most events
-- arrive in their seq's round, some rounds later (holes filled later), some
-- twice (duplicates).  Each round ingests (by the inbox or by ingest()),
-- makes a few release steps, and lets every reader read a few times, a
-- random number of events each time, sometimes twice in one transaction.
-- Readers: co_a (every stream, from the start, a delay changed in round
-- 7), co_b (every stream with delays, subscribed in round 4 from the
-- beginning), co_c (three streams, subscribed in round 5 with start 'now')
-- and co_p (every stream, 3 partitions, each read on its own).  At the end
-- everything is released and drained.
--
-- Recorded during the run (pg_temp tables): the release step that released
-- each event (rel_at), every read with what it returned in order (reads,
-- out) and the consumers view just before it (read_subs).  Checked at the
-- end, printing only booleans and counts:
--  (a) each stream's events reach each consumer partition in the stream's
--      delivery order, computed here from the release steps (global: seq;
--      per-key: step, then (alignment_ts, key) of a key's first event in the
--      step, then seq) -- and lane_release_log agrees with it;
--  (b) each consumer receives every released event of its streams (after
--      its subscription) exactly once, in the partition of its key;
--  (c) every read returns the first max_events events of the k-way merge:
--      each row has the smallest (stabilized_ts, arrival) among the heads of
--      the streams at that point, stabilized_ts = alignment_ts + bias +
--      delay with the bias of the pool as committed reads left it, and a read
--      stops early only when every pool is exhausted.
--
SET TimeZone = 'UTC';
-- The checks' row estimates are far off: JIT would compile them for longer
-- than they run.
SET jit = off;
SELECT setseed(0.42);

-- s seconds after the epoch of the test, to the microsecond.
CREATE FUNCTION pg_temp.at(s double precision)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT timestamptz '2026-01-01 00:00:00+00' + round(s * 1000000)::bigint * interval '1 microsecond'
$$;

-- The events to send: stream, key, seq, times, the round of arrival and
-- the order within the round.  Rounds 1..11 in seq order, 15 % of the
-- events 1 to 3 rounds late, round 12 the last.
CREATE TEMP TABLE gen (stream text, key text, seq bigint, event_ts timestamptz,
                       alignment_ts timestamptz, batch integer, ord double precision);
CREATE FUNCTION pg_temp.late(base integer)
RETURNS integer
LANGUAGE sql VOLATILE AS $$
    SELECT least(12, base + CASE WHEN random() < 0.15 THEN 1 + floor(random() * 3)::integer ELSE 0 END)
$$;
-- global streams: co_g1 lags 30..50 s, co_g2 -2..2 s (initial sequence
-- 100), co_g3 0..300 s (max_release_batch 37)
INSERT INTO gen
SELECT 'co_g1', 'k' || floor(random() * 20), s, pg_temp.at(a - 30 - random() * 20), pg_temp.at(a),
       pg_temp.late(1 + (s - 1) * 11 / 1000), random()
  FROM generate_series(1, 1000) s, LATERAL (SELECT s + random() * 5) x(a);
INSERT INTO gen
SELECT 'co_g2', 'k' || floor(random() * 20), 99 + s, pg_temp.at(a + random() * 4 - 2), pg_temp.at(a),
       pg_temp.late(1 + (s - 1) * 11 / 800), random()
  FROM generate_series(1, 800) s, LATERAL (SELECT s * 1.2 + random() * 3) x(a);
INSERT INTO gen
SELECT 'co_g3', 'k' || floor(random() * 20), s, pg_temp.at(a - random() * 300), pg_temp.at(a),
       pg_temp.late(1 + (s - 1) * 11 / 700), random()
  FROM generate_series(1, 700) s, LATERAL (SELECT s * 1.5 + random() * 10) x(a);
-- per-key streams: co_k1 40 keys of 5..30 events, lags 100..110 s;
-- co_k2 25 keys of 10..40 events, lags 0..1 s (max_release_batch 25)
INSERT INTO gen
SELECT 'co_k1', 'a' || k, s, pg_temp.at(a - 100 - random() * 10), pg_temp.at(a),
       pg_temp.late(1 + (s - 1) * 11 / n), random()
  FROM generate_series(0, 39) k, LATERAL (SELECT 5 + floor(random() * 26)::integer + 0 * k) kn(n),
       generate_series(1, n) s, LATERAL (SELECT s * 1000.0 / n + random() * 50) x(a);
INSERT INTO gen
SELECT 'co_k2', 'b' || k, s, pg_temp.at(a - random()), pg_temp.at(a),
       pg_temp.late(1 + (s - 1) * 11 / n), random()
  FROM generate_series(0, 24) k, LATERAL (SELECT 10 + floor(random() * 31)::integer + 0 * k) kn(n),
       generate_series(1, n) s, LATERAL (SELECT s * 1000.0 / n + random() * 50) x(a);
-- duplicates: 2 % of the events again, with other times, in the same or a
-- later round (whichever arrives first is the event)
INSERT INTO gen
SELECT stream, key, seq, event_ts - interval '1 s', alignment_ts + interval '1 s',
       least(12, batch + floor(random() * 2)::integer), random()
  FROM gen WHERE random() < 0.02;
SELECT stream, count(*) AS sent, count(DISTINCT (key, seq)) AS events, count(DISTINCT key) AS keys
  FROM gen GROUP BY stream ORDER BY stream;

SELECT ordered_events.create_stream('co_g1'),
       ordered_events.create_stream('co_g2', initial_sequence => 100),
       ordered_events.create_stream('co_g3', max_release_batch => 37),
       ordered_events.create_stream('co_k1', 'per_key'),
       ordered_events.create_stream('co_k2', 'per_key', max_release_batch => 25);
SELECT ordered_events.create_consumer('co_a'), ordered_events.create_consumer('co_b'),
       ordered_events.create_consumer('co_c'), ordered_events.create_consumer('co_p', 3);
SELECT count(*) AS co_a_streams
  FROM (SELECT ordered_events.subscribe('co_a', s)
          FROM unnest('{co_g1,co_g2,co_g3,co_k1,co_k2}'::text[]) s) x;
SELECT count(*) AS co_p_streams
  FROM (SELECT ordered_events.subscribe('co_p', s, d)
          FROM (VALUES ('co_g1', interval '2 s'), ('co_g2', '0 s'), ('co_g3', '0 s'),
                       ('co_k1', '0 s'), ('co_k2', '20 s')) v(s, d)) x;

-- The release step (a counter over release() calls) that released each event.
CREATE TEMP TABLE rel_at (stream text, key text, seq bigint, step integer,
                          PRIMARY KEY (stream, key, seq));
CREATE TEMP TABLE rel_calls (step integer, stream text, released bigint, recorded bigint);
-- Each subscription and the step after which its events count (start 'now').
CREATE TEMP TABLE subs (consumer text, partitions integer, stream text, after_step integer);
INSERT INTO subs
SELECT c, n, s, 0
  FROM (VALUES ('co_a', 1), ('co_p', 3)) v(c, n), unnest('{co_g1,co_g2,co_g3,co_k1,co_k2}'::text[]) s;
-- Each read: consumer partition, max_events, transaction, the last release
-- step before it, the rows returned; the consumers view just before it; its
-- rows (pos: within the read, gpos: over every read).
CREATE TEMP TABLE reads (read_no integer PRIMARY KEY, consumer text, part integer,
                         max_events integer, txn integer, step integer, got integer);
CREATE TEMP TABLE read_subs (read_no integer, stream text, delay interval, bias interval);
CREATE TEMP TABLE out (read_no integer, pos integer, gpos integer, stream text, key text,
                       seq bigint, stabilized_ts timestamptz);

CREATE FUNCTION pg_temp.do_release(s text, step integer)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    released bigint := ordered_events.release(s);
    recorded bigint;
BEGIN
    INSERT INTO rel_at
    SELECT r.stream, r.key, r.seq, step
      FROM ordered_events.released r
     WHERE r.stream LIKE 'co\_%' AND (s IS NULL OR r.stream = s)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    INSERT INTO rel_calls VALUES (step, s, released, recorded);
    RETURN released;
END;
$$;

CREATE FUNCTION pg_temp.do_read(c text, p integer, n integer, txn integer, step integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    rn integer := (SELECT coalesce(max(read_no), 0) + 1 FROM reads);
    base integer := (SELECT coalesce(max(gpos), 0) FROM out);
    got integer;
BEGIN
    INSERT INTO read_subs
    SELECT rn, v.stream, v.delay, v.bias
      FROM ordered_events.consumers v WHERE v.consumer = c AND v.partition = p;
    INSERT INTO out
    SELECT rn, r.ordinality, base + r.ordinality, r.stream, r.key, r.seq, r.stabilized_ts
      FROM ordered_events.read(c, n, p) WITH ORDINALITY r;
    GET DIAGNOSTICS got = ROW_COUNT;
    INSERT INTO reads VALUES (rn, c, p, n, txn, step, got);
    RETURN got;
END;
$$;

CREATE PROCEDURE pg_temp.workload()
LANGUAGE plpgsql AS $$
DECLARE
    streams text[] := '{co_g1,co_g2,co_g3,co_k1,co_k2}';
    step integer := 0;
    txn integer := 0;
    g record;
    rd record;
    got integer;
    more boolean;
BEGIN
    FOR rnd IN 1..12 LOOP
        -- arrivals of the round, shuffled
        IF rnd % 2 = 1 THEN
            INSERT INTO ordered_events.inbox (stream, seq, key, event_ts, alignment_ts)
            SELECT x.stream, x.seq, x.key, x.event_ts, x.alignment_ts
              FROM gen x WHERE x.batch = rnd ORDER BY x.ord;
        ELSE
            FOR g IN SELECT * FROM gen x WHERE x.batch = rnd ORDER BY x.ord LOOP
                PERFORM ordered_events.ingest(g.stream, g.seq, g.key, NULL, g.event_ts, g.alignment_ts);
            END LOOP;
        END IF;
        COMMIT;

        -- subscriptions and delays that change midway
        IF rnd = 4 THEN
            PERFORM ordered_events.subscribe('co_b', s, d)
               FROM (VALUES ('co_g1', interval '3 s'), ('co_g2', '0 s'), ('co_g3', '0.5 s'),
                            ('co_k1', '1 min'), ('co_k2', '0 s')) v(s, d);
            INSERT INTO subs SELECT 'co_b', 1, s, 0 FROM unnest(streams) s;
        END IF;
        IF rnd = 5 THEN
            PERFORM ordered_events.subscribe('co_c', 'co_g1', start => 'now'),
                    ordered_events.subscribe('co_c', 'co_g2', '10 s', 'now'),
                    ordered_events.subscribe('co_c', 'co_k1', start => 'now');
            INSERT INTO subs SELECT 'co_c', 1, s, step FROM unnest('{co_g1,co_g2,co_k1}'::text[]) s;
        END IF;
        IF rnd = 7 THEN
            PERFORM ordered_events.subscribe('co_a', 'co_g2', '7 s');
        END IF;
        COMMIT;

        -- one to three release steps: of one stream, or of each
        FOR i IN 1..1 + floor(random() * 3)::integer LOOP
            step := step + 1;
            IF random() < 0.25 THEN
                PERFORM pg_temp.do_release(s, step) FROM unnest(streams) s;
            ELSE
                PERFORM pg_temp.do_release(streams[1 + floor(random() * 5)::integer], step);
            END IF;
            COMMIT;
        END LOOP;

        -- every reader reads one to three times, sometimes twice in a transaction
        FOR rd IN SELECT DISTINCT s.consumer, p
                    FROM subs s, generate_series(0, s.partitions - 1) p ORDER BY 1, 2 LOOP
            FOR i IN 1..1 + floor(random() * 3)::integer LOOP
                txn := txn + 1;
                PERFORM pg_temp.do_read(rd.consumer, rd.p, 1 + floor(random() * 80)::integer, txn, step);
                IF random() < 0.3 THEN
                    PERFORM pg_temp.do_read(rd.consumer, rd.p, 1 + floor(random() * 40)::integer, txn, step);
                END IF;
                COMMIT;
            END LOOP;
        END LOOP;
    END LOOP;

    -- release everything
    LOOP
        step := step + 1;
        more := (SELECT sum(pg_temp.do_release(s, step)) FROM unnest(streams) s) > 0;
        COMMIT;
        EXIT WHEN NOT more;
    END LOOP;
    -- drain every reader, and read once more
    FOR rd IN SELECT DISTINCT s.consumer, p
                FROM subs s, generate_series(0, s.partitions - 1) p ORDER BY 1, 2 LOOP
        LOOP
            txn := txn + 1;
            got := pg_temp.do_read(rd.consumer, rd.p, 500, txn, step);
            COMMIT;
            EXIT WHEN got = 0;
        END LOOP;
    END LOOP;
END;
$$;
CALL pg_temp.workload();
ANALYZE gen, rel_at, rel_calls, subs, reads, read_subs, out;

-- What happened: release steps, reads, rows read.
SELECT count(DISTINCT step) AS release_steps, sum(released) AS released,
       bool_and(released = recorded) AS release_counts_match
  FROM rel_calls;
SELECT r.consumer, r.part, count(*) AS reads, count(DISTINCT r.txn) AS transactions,
       sum(r.got) AS rows_read
  FROM reads r GROUP BY 1, 2 ORDER BY 1, 2;

-- Everything sent is released (or a duplicate), and the released view
-- agrees with what the release steps recorded.
SELECT (SELECT count(DISTINCT (stream, key, seq)) FROM gen) AS distinct_sent,
       (SELECT count(*) FROM rel_at) AS released,
       (SELECT count(*) FROM ordered_events.pending WHERE stream LIKE 'co\_%') AS pending,
       (SELECT count(*) FROM ordered_events.unprocessed WHERE stream LIKE 'co\_%') AS unprocessed;
SELECT NOT EXISTS (SELECT stream, key, seq FROM ordered_events.released WHERE stream LIKE 'co\_%'
                   EXCEPT SELECT stream, key, seq FROM rel_at)
   AND NOT EXISTS (SELECT stream, key, seq FROM rel_at
                   EXCEPT SELECT stream, key, seq FROM ordered_events.released) AS released_is_recorded;

-- The events as accepted (times, arrival order, lag in microseconds) with
-- their release step and their rank in the stream's delivery order.
CREATE TEMP TABLE dv AS
WITH e AS (
    SELECT d.stream, e.key, e.seq, e.event_ts, e.alignment_ts, e.arrival,
           (extract(epoch FROM e.event_ts) - extract(epoch FROM e.alignment_ts)) * 1000000 AS lag_us,
           st.sequencing = 'per_key' AS per_key, ra.step
      FROM ordered_events.event_store e
      JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id
      JOIN ordered_events.streams st ON st.stream = d.stream
      JOIN rel_at ra ON ra.stream = d.stream AND ra.key = e.key AND ra.seq = e.seq
     WHERE d.stream LIKE 'co\_%'
), f AS (
    SELECT e.*, first_value(e.alignment_ts) OVER (PARTITION BY e.stream, e.key, e.step ORDER BY e.seq) AS first_al
      FROM e
)
SELECT f.*,
       row_number() OVER (PARTITION BY f.stream
                          ORDER BY CASE WHEN f.per_key THEN f.step END,
                                   CASE WHEN f.per_key THEN f.first_al END,
                                   CASE WHEN f.per_key THEN f.key END COLLATE "C",
                                   f.seq) AS drank
  FROM f;
CREATE UNIQUE INDEX ON dv (stream, key, seq);
ANALYZE dv;
SELECT count(*) AS events, count(*) FILTER (WHERE per_key) AS per_key_events,
       (SELECT count(*) FROM (SELECT FROM dv WHERE per_key GROUP BY stream, step
                              HAVING count(DISTINCT key) > 1) x) AS per_key_steps_of_several_keys
  FROM dv;

-- Global streams release prefixes: the release step never goes down in seq order.
SELECT count(*) AS global_steps_out_of_order
  FROM (SELECT step < max(step) OVER (PARTITION BY stream ORDER BY seq) AS bad
          FROM dv WHERE NOT per_key) x
 WHERE bad;
-- lane_release_log numbers the runs in the same delivery order.
SELECT count(*) AS log_order_differs
  FROM (SELECT dv.drank,
               row_number() OVER (PARTITION BY dv.stream ORDER BY l.delivery, dv.seq) AS log_rank
          FROM dv
          JOIN ordered_events.stream_def d ON d.stream = dv.stream
          JOIN ordered_events.lane_release_log l
            ON l.stream_id = d.stream_id AND l.lane = CASE WHEN dv.per_key THEN dv.key ELSE '' END
           AND dv.seq >= l.seq_start AND dv.seq < l.seq_end) x
 WHERE drank <> log_rank;

-- What each consumer partition may receive from each stream, in delivery
-- order (erank), with the running sum of the lags.
CREATE TEMP TABLE elig AS
SELECT s.consumer, p.p AS part, dv.*,
       row_number() OVER w AS erank, sum(dv.lag_us) OVER w AS cum_lag
  FROM subs s
  CROSS JOIN LATERAL generate_series(0, s.partitions - 1) p(p)
  JOIN dv ON dv.stream = s.stream AND dv.step > s.after_step
         AND (s.partitions = 1 OR ordered_events.key_partition(dv.key, s.partitions) = p.p)
WINDOW w AS (PARTITION BY s.consumer, p.p, s.stream ORDER BY dv.drank);
CREATE UNIQUE INDEX ON elig (consumer, part, stream, erank);
CREATE UNIQUE INDEX ON elig (consumer, part, stream, key, seq);
ANALYZE elig;

-- The rows read, with their reader and their rank among the rows of their
-- stream read by that consumer partition (kis).
CREATE TEMP TABLE o AS
SELECT r.consumer, r.part, r.txn, r.step AS read_step, r.max_events, x.*,
       row_number() OVER (PARTITION BY r.consumer, r.part, x.stream ORDER BY x.gpos) AS kis
  FROM out x JOIN reads r USING (read_no);
CREATE INDEX ON o (consumer, part, stream, read_no);
CREATE INDEX ON o (consumer, part, stream, txn);
ANALYZE o;

-- The streams interleave: how often the stream changes from one row to
-- the next, in the order each consumer partition read.
SELECT consumer, part, count(*) FILTER (WHERE stream <> prev) AS stream_changes
  FROM (SELECT consumer, part, stream, lag(stream) OVER (PARTITION BY consumer, part ORDER BY gpos) AS prev
          FROM o) x
 GROUP BY 1, 2 ORDER BY 1, 2;

--
-- (b) exactly once: every event each consumer may receive was read once,
-- by the partition of its key, and nothing else was read.
--
SELECT count(*) FILTER (WHERE o.seq IS NULL) AS never_read,
       count(*) FILTER (WHERE e.seq IS NULL) AS read_but_not_due
  FROM elig e FULL JOIN o USING (consumer, part, stream, key, seq);
SELECT count(*) AS read_twice
  FROM (SELECT consumer, stream, key, seq FROM o GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) x;
-- The same against the released view: co_a, co_b and co_p read every
-- released event, co_c every event of its three streams released after it
-- subscribed (and none of those released before).
CREATE TEMP TABLE due AS
SELECT s.consumer, r.stream, r.key, r.seq, ra.step > s.after_step AS after_subscribing
  FROM ordered_events.released r
  JOIN subs s ON s.stream = r.stream AND s.consumer IN ('co_a', 'co_b', 'co_c', 'co_p')
  JOIN rel_at ra ON ra.stream = r.stream AND ra.key = r.key AND ra.seq = r.seq
 GROUP BY 1, 2, 3, 4, 5;
SELECT c.consumer,
       NOT EXISTS (SELECT stream, key, seq FROM due WHERE due.consumer = c.consumer AND after_subscribing
                   EXCEPT SELECT stream, key, seq FROM o WHERE o.consumer = c.consumer)
       AND NOT EXISTS (SELECT stream, key, seq FROM o WHERE o.consumer = c.consumer
                       EXCEPT SELECT stream, key, seq FROM due
                        WHERE due.consumer = c.consumer AND after_subscribing)
       AS read_all_due,
       (SELECT count(*) FROM o WHERE o.consumer = c.consumer) AS rows_read,
       (SELECT count(*) FROM due WHERE due.consumer = c.consumer AND NOT after_subscribing)
           AS released_before_subscribing
  FROM unnest('{co_a,co_b,co_c,co_p}'::text[]) c(consumer) ORDER BY 1;
-- The consumers view agrees at the end: all consumed, nothing unread.
SELECT v.consumer, sum(v.consumed_count) AS consumed, sum(v.unread_count) AS unread,
       bool_and(v.bias IS NULL AND v.oldest_unread_at IS NULL) AS empty_pools
  FROM ordered_events.consumers v WHERE v.consumer LIKE 'co\_%' GROUP BY 1 ORDER BY 1;

--
-- (a) each stream's rows, read by a consumer partition, come in the
-- stream's delivery order: the k-th row of a stream is its k-th event due.
--
SELECT count(*) AS rows_checked, count(*) FILTER (WHERE e.erank <> o.kis) AS out_of_delivery_order
  FROM o JOIN elig e USING (consumer, part, stream, key, seq);

--
-- (c) the merge.  For each read and subscribed stream: the rows read
-- before (m_prior), the rows taken by earlier transactions (m_committed),
-- the events released by then (m_released), so the bias of the pool
-- (m_committed, m_released] as the read computes it, and its delay.
--
CREATE TEMP TABLE rb AS
SELECT r.read_no, r.consumer, r.part, rs.stream, r.max_events, r.got, rs.bias AS view_bias,
       (extract(epoch FROM rs.delay) * 1000000)::bigint AS delay_us,
       NOT EXISTS (SELECT FROM reads r2 WHERE r2.txn = r.txn AND r2.read_no < r.read_no)
           AS first_in_txn,
       (SELECT count(*) FROM o WHERE o.consumer = r.consumer AND o.part = r.part
           AND o.stream = rs.stream AND o.read_no < r.read_no) AS m_prior,
       (SELECT count(*) FROM o WHERE o.consumer = r.consumer AND o.part = r.part
           AND o.stream = rs.stream AND o.txn < r.txn) AS m_committed,
       (SELECT coalesce(max(e.erank), 0) FROM elig e WHERE e.consumer = r.consumer
           AND e.part = r.part AND e.stream = rs.stream AND e.step <= r.step) AS m_released
  FROM reads r JOIN read_subs rs USING (read_no);
ALTER TABLE rb ADD COLUMN bias_us bigint;
UPDATE rb SET bias_us = coalesce(
    (SELECT round((hi.cum_lag - coalesce(lo.cum_lag, 0)) / (rb.m_released - rb.m_committed))
       FROM elig hi
       LEFT JOIN elig lo ON lo.consumer = hi.consumer AND lo.part = hi.part
                        AND lo.stream = hi.stream AND lo.erank = rb.m_committed
      WHERE hi.consumer = rb.consumer AND hi.part = rb.part AND hi.stream = rb.stream
        AND hi.erank = rb.m_released AND rb.m_released > rb.m_committed), 0);
CREATE UNIQUE INDEX ON rb (read_no, stream);
ANALYZE rb;
SELECT count(*) AS read_streams, count(DISTINCT read_no) AS reads,
       count(*) FILTER (WHERE m_committed < m_prior) AS with_uncommitted_rows_in_pool,
       count(*) FILTER (WHERE bias_us <> 0) AS with_bias,
       count(*) FILTER (WHERE delay_us <> 0) AS with_delay
  FROM rb;
-- The view showed that bias just before each read (as committed reads
-- left the pool, also inside a transaction that read already).
SELECT count(DISTINCT read_no) FILTER (WHERE NOT first_in_txn) AS second_reads_in_txn,
       count(*) FILTER (WHERE view_bias IS DISTINCT FROM
                        CASE WHEN m_released > m_committed THEN bias_us * interval '1 microsecond' END)
       AS view_bias_differs
  FROM rb;
-- A read returns max_events rows, or every row due if fewer.
SELECT count(*) AS reads_of_wrong_length
  FROM (SELECT read_no, max(max_events) AS max_events, max(got) AS got,
               sum(m_released - m_prior) AS due
          FROM rb GROUP BY read_no) x
 WHERE got <> least(max_events, due);
-- Each row's stabilized_ts is alignment_ts + bias + delay.
SELECT count(*) AS stabilized_differs
  FROM o JOIN dv USING (stream, key, seq) JOIN rb USING (read_no, stream)
 WHERE o.stabilized_ts <> dv.alignment_ts + (rb.bias_us + rb.delay_us) * interval '1 microsecond';
-- At each row, the rows of each stream read before it (by earlier reads
-- and earlier in this read): its own stream's next event due must be the
-- row itself, and the head of every other stream (its next event due, if
-- released by then) must have a larger (stabilized_ts, arrival).
CREATE TEMP TABLE heads AS
SELECT x.read_no, x.pos, x.consumer, x.part, x.stream AS row_stream, x.stabilized_ts,
       x.arrival, x.row_erank, x.s AS stream, x.before,
       e.alignment_ts + (x.bias_us + x.delay_us) * interval '1 microsecond' AS head_st,
       e.arrival AS head_arrival, e.erank AS head_erank
  FROM (SELECT o.read_no, o.pos, o.consumer, o.part, o.stream, o.stabilized_ts, er.arrival,
               er.erank AS row_erank, rb.stream AS s, rb.bias_us, rb.delay_us, rb.m_released,
               rb.m_prior + count(*) FILTER (WHERE o.stream = rb.stream)
                   OVER (PARTITION BY o.read_no, rb.stream ORDER BY o.pos
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
          FROM o
          JOIN elig er USING (consumer, part, stream, key, seq)
          JOIN rb ON rb.read_no = o.read_no) x
  LEFT JOIN elig e ON e.consumer = x.consumer AND e.part = x.part AND e.stream = x.s
                  AND e.erank = x.before + 1 AND e.erank <= x.m_released;
SELECT count(*) FILTER (WHERE stream = row_stream) AS rows_checked,
       count(*) FILTER (WHERE stream = row_stream AND head_erank IS DISTINCT FROM row_erank)
           AS not_own_head,
       count(*) FILTER (WHERE stream <> row_stream AND head_erank IS NOT NULL) AS comparisons,
       count(*) FILTER (WHERE stream <> row_stream AND (stabilized_ts, arrival) >= (head_st, head_arrival))
           AS not_smallest
  FROM heads;

SELECT count(*) AS consumers_dropped
  FROM (SELECT ordered_events.drop_consumer(c) FROM unnest('{co_a,co_b,co_c,co_p}'::text[]) c) d;
SELECT count(*) AS streams_dropped
  FROM (SELECT ordered_events.drop_stream(s) FROM unnest('{co_g1,co_g2,co_g3,co_k1,co_k2}'::text[]) s) d;
