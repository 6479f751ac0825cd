--
-- consumer_errors: every bad input of the consumer functions
-- (docs/reference.md, "Consumers"; docs/architecture.md, rule 5), the
-- message and hint a user reads, its SQLSTATE, and that the refused call
-- changed nothing.
--   unknown consumer 42704, existing consumer 42710, invalid name 42602,
--   NULL argument 22004, invalid option (negative delay, a delay with days
--   or months, bad start, partitions out of 1..1024, max_events <= 0,
--   partition out of range) 22023, unsubscribing a stream not subscribed
--   42704, unknown stream 42704, a function not granted 42501, read() in a
--   read-only transaction 25006.
--
-- pg_temp.unchanged() compares everything a consumer call could change
-- (consumers, subscriptions with their delays and positions, what each
-- partition would read next, streams and their events) with the snapshot
-- taken before the first bad call.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never
-- The checks' row estimates are far off (a set-returning function counts
-- 1000 rows): JIT would compile them for longer than they run.
SET jit = off;

-- Consumer ce_c (2 partitions) reads stream ce_s (3 events, keys k1..k3)
-- with a delay of 5 s, and has taken one event of partition 0.  ce_s2 exists
-- and is not subscribed.
SELECT ordered_events.create_stream('ce_s'), ordered_events.create_stream('ce_s2');
SELECT ordered_events.ingest('ce_s', s, 'k' || s, to_jsonb(s),
                             timestamptz '2026-01-01 00:00:00+00' + s * interval '1 minute',
                             timestamptz '2026-01-01 00:00:00+00' + s * interval '1 minute')
  FROM generate_series(1, 3) s;
SELECT ordered_events.release('ce_s');
SELECT ordered_events.create_consumer('ce_c', 2);
SELECT ordered_events.subscribe('ce_c', 'ce_s', '5 s');
SELECT stream, seq, key FROM ordered_events.read('ce_c', 1, 0);

-- Everything the calls below could change, one text per fact; read_at is
-- a subscription's last_read_at (compared, never printed).
CREATE FUNCTION pg_temp.state()
RETURNS TABLE (fact text, read_at timestamptz)
LANGUAGE sql AS $$
    SELECT format('consumer %s partitions %s', c.consumer, c.partitions), NULL::timestamptz
      FROM ordered_events.consumer_def c
    UNION ALL
    SELECT format('subscription %s/%s %s delay %s consumed %s unread %s bias %s',
                  v.consumer, v.partition, v.stream, v.delay, v.consumed_count,
                  v.unread_count, v.bias), v.last_read_at
      FROM ordered_events.consumers v
    UNION ALL
    SELECT format('next %s/%s: %s', c.consumer, p, string_agg(r.stream || '/' || r.seq, ' ')), NULL
      FROM ordered_events.consumer_def c, generate_series(0, c.partitions - 1) p,
           LATERAL ordered_events.peek(c.consumer, 100, p) r
     GROUP BY c.consumer, p
    UNION ALL
    SELECT format('stream %s released %s pending %s unprocessed %s', s.stream,
                  s.released_count, s.pending_count, s.unprocessed_count), NULL
      FROM ordered_events.stream_stats s
$$;
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.state();
SELECT fact, read_at IS NOT NULL AS was_read FROM before ORDER BY 1;
CREATE FUNCTION pg_temp.unchanged()
RETURNS boolean
LANGUAGE sql AS $$
    SELECT NOT EXISTS (SELECT * FROM pg_temp.state() EXCEPT SELECT * FROM before)
       AND NOT EXISTS (SELECT * FROM before EXCEPT SELECT * FROM pg_temp.state())
$$;

--
-- create_consumer
--
-- NULL arguments: 22004
SELECT ordered_events.create_consumer(NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('ce_new', NULL);
\echo SQLSTATE :SQLSTATE
-- invalid names: 42602; a name is taken as given, never folded or cut
SELECT ordered_events.create_consumer('CE_upper');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('1ce');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('ce-dash');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer(E'ce_c\n');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer(repeat('c', 64));
\echo SQLSTATE :SQLSTATE
-- partitions out of 1..1024: 22023
SELECT ordered_events.create_consumer('ce_new', 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('ce_new', -1);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('ce_new', 1025);
\echo SQLSTATE :SQLSTATE
-- an existing consumer: 42710, whatever its partitions
SELECT ordered_events.create_consumer('ce_c');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_consumer('ce_c', 2);
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- drop_consumer
--
SELECT ordered_events.drop_consumer(NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_consumer('ce_nope');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_consumer('CE_C');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- subscribe
--
-- NULL arguments: 22004, each named
SELECT ordered_events.subscribe(NULL, 'ce_s2');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '0 s', NULL);
\echo SQLSTATE :SQLSTATE
-- an unknown consumer or stream: 42704
SELECT ordered_events.subscribe('ce_nope', 'ce_s2');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_nope');
\echo SQLSTATE :SQLSTATE
-- a negative delay, a delay with days or months: 22023 (100 hours is
-- fine, see consumer_order)
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '-1 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '-0.000001 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '1 day');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '1 day -23 hours');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '1 mon');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', '1 year');
\echo SQLSTATE :SQLSTATE
-- a bad start: 22023 (the words are taken as given)
SELECT ordered_events.subscribe('ce_c', 'ce_s2', start => 'end');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', start => 'NOW');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2', start => '');
\echo SQLSTATE :SQLSTATE
-- subscribing again with a bad delay or start keeps the delay (5 s) and
-- the position
SELECT ordered_events.subscribe('ce_c', 'ce_s', '-5 s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s', '2 days');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s', '10 s', 'later');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- unsubscribe
--
SELECT ordered_events.unsubscribe(NULL, 'ce_s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.unsubscribe('ce_c', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.unsubscribe('ce_nope', 'ce_s');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.unsubscribe('ce_c', 'ce_nope');
\echo SQLSTATE :SQLSTATE
-- a stream the consumer does not subscribe to: 42704
SELECT ordered_events.unsubscribe('ce_c', 'ce_s2');
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();

--
-- read and peek
--
SELECT * FROM ordered_events.read(NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_c', NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_c', 1, NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_nope');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('CE_C');
\echo SQLSTATE :SQLSTATE
-- max_events <= 0: 22023
SELECT * FROM ordered_events.read('ce_c', 0);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_c', -1);
\echo SQLSTATE :SQLSTATE
-- a partition out of 0 .. partitions - 1: 22023, the detail says how many
SELECT * FROM ordered_events.read('ce_c', 10, -1);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_c', 10, 2);
\echo SQLSTATE :SQLSTATE
-- peek says the same
SELECT * FROM ordered_events.peek(NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_c', NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_c', 1, NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_nope');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_c', 0);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_c', 10, 2);
\echo SQLSTATE :SQLSTATE
SELECT pg_temp.unchanged();
-- read() consumes: not in a read-only transaction (25006); peek() is fine there
BEGIN READ ONLY;
SELECT * FROM ordered_events.read('ce_c');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT stream, seq, key FROM ordered_events.peek('ce_c');
COMMIT;
SELECT pg_temp.unchanged();
-- An error after a read in the same transaction undoes the read: the
-- transaction ends in a rollback, nothing is consumed.
BEGIN;
SELECT stream, seq, key FROM ordered_events.read('ce_c', 1, 0);
SELECT * FROM ordered_events.read('ce_c', 1, 5);
\echo SQLSTATE :SQLSTATE
COMMIT;
SELECT pg_temp.unchanged();

--
-- key_partition
--
SELECT ordered_events.key_partition(NULL, 2);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.key_partition('k', NULL);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.key_partition('k', 0);
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.key_partition('k', -3);
\echo SQLSTATE :SQLSTATE

--
-- Privileges: the functions that write or consume, and the view, are not
-- for PUBLIC (42501); key_partition is.
--
CREATE ROLE regress_oe_ce_public;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_ce_public;
SET ROLE regress_oe_ce_public;
SELECT ordered_events.key_partition('k1', 2) = ordered_events.key_partition('k1', 2) AS callable;
SELECT ordered_events.create_consumer('ce_public');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.drop_consumer('ce_c');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.subscribe('ce_c', 'ce_s2');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.unsubscribe('ce_c', 'ce_s');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('ce_c');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.peek('ce_c');
\echo SQLSTATE :SQLSTATE
SELECT count(*) FROM ordered_events.consumers;
\echo SQLSTATE :SQLSTATE
RESET ROLE;
DROP OWNED BY regress_oe_ce_public;
DROP ROLE regress_oe_ce_public;
SELECT pg_temp.unchanged();

--
-- Unknown stream after drop_stream: the subscription went with the stream,
-- so unsubscribing names the stream as unknown (42704).
--
SELECT ordered_events.subscribe('ce_c', 'ce_s2');
SELECT ordered_events.drop_stream('ce_s2');
SELECT ordered_events.unsubscribe('ce_c', 'ce_s2');
\echo SQLSTATE :SQLSTATE
-- what changed since the snapshot: ce_s2 is gone, nothing else
SELECT 'gone' AS change, d.fact FROM (SELECT * FROM before EXCEPT SELECT * FROM pg_temp.state()) d
UNION ALL
SELECT 'new', d.fact FROM (SELECT * FROM pg_temp.state() EXCEPT SELECT * FROM before) d
ORDER BY 1, 2;

SELECT ordered_events.drop_consumer('ce_c');
SELECT ordered_events.drop_stream('ce_s');
