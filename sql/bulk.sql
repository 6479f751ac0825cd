--
-- bulk: the inbox view.  INSERT ... VALUES, INSERT ... SELECT and COPY rows
-- follow the rules of ingest(); a rejected row goes to unprocessed and the
-- statement goes on; the INSERT command tag (ROW_COUNT) counts the accepted
-- rows.  A bad row (NULL stream, seq or key, unknown stream, over-long key)
-- is an error that undoes the whole statement.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT ordered_events.create_stream('bulk_a'),
       ordered_events.create_stream('bulk_b', initial_sequence => 10);

-- Counts of both streams.
CREATE FUNCTION pg_temp.counts()
RETURNS TABLE (stream text, accepted bigint, released bigint, unprocessed bigint)
LANGUAGE sql AS $$
    SELECT d.stream,
           (SELECT count(*) FROM ordered_events.pending p WHERE p.stream = d.stream)
         + (SELECT count(*) FROM ordered_events.released r WHERE r.stream = d.stream),
           (SELECT count(*) FROM ordered_events.released r WHERE r.stream = d.stream),
           (SELECT count(*) FROM ordered_events.unprocessed u WHERE u.stream = d.stream)
      FROM ordered_events.streams d
     WHERE d.stream IN ('bulk_a', 'bulk_b')
     ORDER BY 1
$$;

--
-- Multi-row VALUES, two streams in one statement, rejected rows in the middle:
-- a duplicate inside the statement (seq 2 of bulk_a twice, other key), a seq
-- below bulk_b's initial sequence 10, the largest bigint.
--
INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES
    ('bulk_a', 3, 'k1', '{"v": "a3"}'),
    ('bulk_a', 2, 'k2', '{"v": "a2"}'),
    ('bulk_b', 5, 'k1', '{"v": "b5"}'),
    ('bulk_a', 2, 'k1', '{"v": "a2 again"}'),
    ('bulk_b', 10, 'k1', '{"v": "b10"}'),
    ('bulk_a', 9223372036854775807, 'k1', '{"v": "max"}'),
    ('bulk_a', 1, 'k1', NULL);
\echo accepted rows: :ROW_COUNT
SELECT stream, seq, key, payload FROM ordered_events.pending
 WHERE stream IN ('bulk_a', 'bulk_b');
SELECT stream, seq, key, payload, reason, detail FROM ordered_events.unprocessed
 WHERE stream IN ('bulk_a', 'bulk_b') ORDER BY stream, seq;
SELECT * FROM pg_temp.counts();

-- RETURNING returns the accepted rows only.
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 4, 'k1'), ('bulk_a', 3, 'k1'), ('bulk_a', 0, 'k1'), ('bulk_a', 5, 'k2')
RETURNING stream, seq, key;
\echo accepted rows: :ROW_COUNT

-- One release step releases 1..5.
SELECT ordered_events.release('bulk_a');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'bulk_a';

--
-- INSERT ... SELECT: seqs 1..100 of bulk_a, of which 1..5 are duplicates.
--
INSERT INTO ordered_events.inbox (stream, seq, key, payload)
SELECT 'bulk_a', g, 'k' || (g % 4), jsonb_build_object('g', g)
  FROM generate_series(1, 100) g;
\echo accepted rows: :ROW_COUNT
SELECT reason, count(*), min(seq), max(seq) FROM ordered_events.unprocessed
 WHERE stream = 'bulk_a' GROUP BY reason ORDER BY reason;
SELECT ordered_events.release('bulk_a');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'bulk_a';
SELECT * FROM pg_temp.counts();
-- the first event of a seq wins: seqs 1..5 come from the earlier statements
SELECT seq, key, payload FROM ordered_events.released
 WHERE stream = 'bulk_a' AND seq <= 6;

--
-- COPY: accepted and rejected rows (a duplicate of an earlier row, a
-- duplicate of a row of the same COPY, below the initial sequence, the
-- largest bigint); the COPY goes on past them.  (The COPY command tag is not
-- checked: PostgreSQL counts every row COPY hands to an INSTEAD OF trigger.)
--
COPY ordered_events.inbox (stream, seq, key, payload) FROM stdin;
bulk_b	12	k2	{"v": "b12"}
bulk_b	10	k9	{"v": "b10 dup"}
bulk_b	11	k1	{"v": "b11"}
bulk_b	12	k1	{"v": "b12 dup"}
bulk_b	9	k1	\N
bulk_b	9223372036854775807	k1	\N
bulk_b	13	k2	\N
\.
SELECT stream, seq, key, payload FROM ordered_events.pending WHERE stream = 'bulk_b';
SELECT stream, seq, key, payload, reason, detail FROM ordered_events.unprocessed
 WHERE stream = 'bulk_b' ORDER BY seq, key;
SELECT ordered_events.release('bulk_b');
SELECT stream, seq, key, payload FROM ordered_events.released WHERE stream = 'bulk_b';
SELECT * FROM pg_temp.counts();

--
-- Defaults: event_ts is now() (the transaction start), alignment_ts is
-- clock_timestamp() at the insert of each row, received_at is now().
-- Explicit values are kept.
--
BEGIN;
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_b', 14, 'k1'), ('bulk_b', 15, 'k1'), ('bulk_b', 16, 'k1');
SELECT seq, event_ts = now() AS event_ts_is_now,
       alignment_ts >= now() AND alignment_ts <= clock_timestamp() AS alignment_ts_in_statement,
       received_at = now() AS received_at_is_now
  FROM ordered_events.pending WHERE stream = 'bulk_b' ORDER BY seq;
-- alignment_ts follows the row order of the statement
SELECT bool_and(alignment_ts >= prev) AS alignment_ts_non_decreasing
  FROM (SELECT alignment_ts, lag(alignment_ts) OVER (ORDER BY seq) AS prev
          FROM ordered_events.pending WHERE stream = 'bulk_b') p;
COMMIT;
INSERT INTO ordered_events.inbox (stream, seq, key, event_ts, alignment_ts) VALUES
    ('bulk_b', 17, 'k1', '2024-02-01 10:00:00+00', '2024-02-01 10:00:01+00');
INSERT INTO ordered_events.inbox VALUES
    ('bulk_b', 18, 'k1', '{"all": "columns"}', '2024-02-01 11:00:00+00',
     '2024-02-01 11:00:01+00', false);
\echo accepted rows: :ROW_COUNT
-- COPY with explicit timestamps, and default ones
COPY ordered_events.inbox (stream, seq, key, event_ts, alignment_ts) FROM stdin;
bulk_b	19	k1	2024-02-01 12:00:00+00	2024-02-01 12:00:01+00
bulk_b	20	k1	\N	\N
\.
SELECT seq, event_ts, alignment_ts FROM ordered_events.pending
 WHERE stream = 'bulk_b' AND seq IN (17, 18, 19);
SELECT seq, event_ts IS NOT NULL AS has_event_ts, alignment_ts IS NOT NULL AS has_alignment_ts
  FROM ordered_events.pending WHERE stream = 'bulk_b' AND seq = 20;
-- explicit last_event => false is the default, NULL too
INSERT INTO ordered_events.inbox (stream, seq, key, last_event) VALUES
    ('bulk_b', 21, 'k1', false), ('bulk_b', 22, 'k1', NULL);
\echo accepted rows: :ROW_COUNT
SELECT ordered_events.release('bulk_b');
SELECT range_start, range_end,
       max_event_ts = (SELECT max(event_ts) FROM ordered_events.released
                        WHERE stream = 'bulk_b') AS max_event_ts_is_max
  FROM ordered_events.ranges WHERE stream = 'bulk_b';

-- A rolled-back statement leaves neither accepted nor rejected rows.
BEGIN;
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_b', 23, 'k1'), ('bulk_b', 10, 'k1');
\echo accepted rows: :ROW_COUNT
ROLLBACK;
SELECT * FROM pg_temp.counts();

--
-- Bad rows: the whole statement fails with the error of ingest() and
-- changes nothing, also the good rows before the bad one.
--
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 200, 'k1'), ('bulk_a', 201, NULL);
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 200, 'k1'), ('bulk_a', NULL, 'k1');
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 200, 'k1'), (NULL, 201, 'k1');
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 200, 'k1'), ('bulk_nope', 201, 'k1');
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 200, 'k1'), ('bulk_a', 201, repeat('x', 1025));
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key, last_event) VALUES
    ('bulk_a', 200, 'k1', false), ('bulk_a', 201, 'k1', true);
\echo SQLSTATE :SQLSTATE
-- a rejected row before the bad row is undone too
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('bulk_a', 1, 'k1'), ('bulk_a', 201, NULL);
\echo SQLSTATE :SQLSTATE
INSERT INTO ordered_events.inbox (stream, seq, key)
SELECT 'bulk_a', g, CASE WHEN g < 250 THEN 'k1' END FROM generate_series(200, 300) g;
\echo SQLSTATE :SQLSTATE
COPY ordered_events.inbox (stream, seq, key) FROM stdin;
bulk_a	200	k1
bulk_a	1	k1
bulk_a	201	\N
\.
\echo SQLSTATE :SQLSTATE
SELECT * FROM pg_temp.counts();
SELECT count(*) AS pending_a FROM ordered_events.pending WHERE stream = 'bulk_a';

-- A key of exactly 1024 bytes is fine.
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('bulk_a', 101, repeat('x', 1024));
\echo accepted rows: :ROW_COUNT
SELECT seq, length(key) FROM ordered_events.pending WHERE stream = 'bulk_a';

SELECT ordered_events.drop_stream('bulk_a'), ordered_events.drop_stream('bulk_b');
SELECT count(*) FROM ordered_events.unprocessed WHERE stream IN ('bulk_a', 'bulk_b');
