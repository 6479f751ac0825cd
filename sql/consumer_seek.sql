--
-- consumer_seek: seek() (docs/consuming.md, "Replay: seek and rebuild";
-- docs/reference.md, "Consumers").  A seek moves a consumer's position in
-- one stream, every partition: to 'beginning' (the first event kept), to
-- 'now', or before the first release step released at or after a time.
-- It returns the unread count, which the consumers view shows per
-- partition and which is what read() then returns, also after a retention
-- deleted events (a seek before them starts at the oldest kept one).  The
-- consumer's other streams stay where they are; consumed_count keeps
-- counting.  Then: a seek and a read in one transaction, the errors
-- (22004, 22023, 42704, 25000, 25006), each changing nothing, and who may
-- seek (the owner, a member of the owner role, a superuser; 42501 for
-- another role, for a member that does not inherit, and without 'read').
--
-- No background worker serves this database.  The release steps' times
-- are stored clocks (lane_release_log.released_at), set here to whole
-- hours: a seek by time depends on nothing but them.  A concurrent read is
-- test/isolation/specs/consumer_seek_read.spec.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never
SET jit = off;

-- Each subscription of a consumer, per partition: consumed_count,
-- unread_count and bias of the consumers view, and what read() would
-- return now (peek(): the seqs of the stream, and their count), which must
-- be unread_count.
CREATE FUNCTION pg_temp.seen(c text)
RETURNS TABLE (part integer, stream text, consumed bigint, unread bigint, bias interval,
               peeked bigint, seqs text)
LANGUAGE sql AS $$
    SELECT v.partition, v.stream, v.consumed_count, v.unread_count, v.bias,
           (SELECT count(*) FROM ordered_events.peek(c, 1000, v.partition) p
             WHERE p.stream = v.stream),
           (SELECT string_agg(p.key || ':' || p.seq, ' ' ORDER BY p.ordinality)
              FROM ordered_events.peek(c, 1000, v.partition) WITH ORDINALITY p
             WHERE p.stream = v.stream)
      FROM ordered_events.consumers v WHERE v.consumer = c
     ORDER BY v.partition, v.stream
$$;
-- Everything read() takes from each partition of a consumer, committed:
-- the keys and seqs, by partition.
CREATE FUNCTION pg_temp.read_all(c text, partitions integer)
RETURNS TABLE (part integer, taken bigint, events text)
LANGUAGE sql AS $$
    SELECT p, count(r.seq), string_agg(r.stream || '/' || r.key || ':' || r.seq, ' '
                                       ORDER BY r.ordinality)
      FROM generate_series(0, partitions - 1) p
      LEFT JOIN LATERAL ordered_events.read(c, 1000, p) WITH ORDINALITY r ON true
     GROUP BY p ORDER BY p
$$;
-- Set the release time of a stream's release steps: the n-th step (by
-- delivery) at base + n hours.
CREATE FUNCTION pg_temp.set_clocks(s text, base timestamptz DEFAULT '2026-01-01 09:00:00+00')
RETURNS TABLE (delivery bigint, released_at timestamptz, seqs text)
LANGUAGE sql AS $$
    UPDATE ordered_events.lane_release_log l
       SET released_at = base
                         + (SELECT count(*) FROM ordered_events.lane_release_log o
                             WHERE o.stream_id = l.stream_id AND o.delivery <= l.delivery)
                           * interval '1 hour'
     WHERE l.stream_id = ordered_events.stream_id(s);
    SELECT l.delivery, l.released_at, l.lane || '[' || l.seq_start || ',' || l.seq_end || ')'
      FROM ordered_events.lane_release_log l
     WHERE l.stream_id = ordered_events.stream_id(s) ORDER BY l.delivery;
$$;

------------------------------------------------------------------------
-- 0. The first example of docs/consuming.md, "Replay: seek and rebuild",
--    word for word
------------------------------------------------------------------------
-- billing has read payments: seqs 1 and 2 released at 11:00, seq 3 at
-- 12:00 on 2026-11-30.
SELECT ordered_events.create_stream('payments');
SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'payments');
SELECT ordered_events.ingest('payments', 1, 'order_1'), ordered_events.ingest('payments', 2, 'order_2');
SELECT ordered_events.release('payments');
SELECT ordered_events.ingest('payments', 3, 'order_3');
SELECT ordered_events.release('payments');
SELECT * FROM pg_temp.set_clocks('payments', '2026-11-30 10:00:00+00');
SELECT count(*) FROM ordered_events.read('billing');

SELECT ordered_events.seek('billing', 'payments');            -- from the first event kept
SELECT ordered_events.seek('billing', 'payments', 'now');     -- past everything released so far
SELECT ordered_events.seek('billing', 'payments',
                           released_at => '2026-11-30 12:00:00+00');  -- from what was released then on

SELECT seq, key FROM ordered_events.read('billing');
SELECT ordered_events.drop_consumer('billing'), ordered_events.drop_stream('payments');

------------------------------------------------------------------------
-- 1. By position and by time
------------------------------------------------------------------------
-- Global stream sk_g: seqs 1..12 of keys k1..k6, released in three steps
-- of four (10:00, 11:00, 12:00); each event's lag (event_ts -
-- alignment_ts) is -seq seconds, so that a pool's bias tells which events
-- it holds.  Per-key stream sk_p: keys a, b, c, seqs 1..2, one step.
-- Consumer sk_c (2 partitions) reads both.
SELECT ordered_events.create_stream('sk_g'), ordered_events.create_stream('sk_p', 'per_key');
CREATE FUNCTION pg_temp.ingest(stream text, first integer, last integer)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM generate_series(first, last) s,
           LATERAL ordered_events.ingest(stream, s, 'k' || (s % 6 + 1), NULL,
                       timestamptz '2026-01-01 08:00:00+00',
                       timestamptz '2026-01-01 08:00:00+00' + s * interval '1 s') o
     WHERE o = 'accepted'
$$;
SELECT pg_temp.ingest('sk_g', 1, 4) AS accepted, ordered_events.release('sk_g') AS released;
SELECT pg_temp.ingest('sk_g', 5, 8) AS accepted, ordered_events.release('sk_g') AS released;
SELECT pg_temp.ingest('sk_g', 9, 12) AS accepted, ordered_events.release('sk_g') AS released;
SELECT count(ordered_events.ingest('sk_p', s, k, NULL, timestamptz '2026-01-01 08:00:00+00',
                                   timestamptz '2026-01-01 08:00:00+00' + s * interval '1 min'))
       AS ingested
  FROM unnest(ARRAY['a', 'b', 'c']) k, generate_series(1, 2) s;
SELECT ordered_events.release('sk_p') AS released;
SELECT * FROM pg_temp.set_clocks('sk_g');
SELECT ordered_events.create_consumer('sk_c', partitions => 2);
SELECT ordered_events.subscribe('sk_c', 'sk_g'), ordered_events.subscribe('sk_c', 'sk_p');
-- the keys' partitions: both have events of both streams
SELECT k, ordered_events.key_partition(k, 2) AS part
  FROM unnest(ARRAY['k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'a', 'b', 'c']) k ORDER BY 2, 1;

-- Everything read and committed: nothing is unread.
SELECT * FROM pg_temp.read_all('sk_c', 2);
SELECT * FROM pg_temp.seen('sk_c');

-- 'beginning' (the default): every event of sk_g again, in each partition;
-- sk_p stays read.  consumed_count keeps what was consumed.
SELECT ordered_events.seek('sk_c', 'sk_g');
SELECT * FROM pg_temp.seen('sk_c');

-- 'now': past every event released so far.
SELECT ordered_events.seek('sk_c', 'sk_g', 'now');
SELECT * FROM pg_temp.seen('sk_c');

-- By time: from the first step released at or after released_at on.
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 11:00:00+00') AS at_11;
SELECT * FROM pg_temp.seen('sk_c');
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 11:00:00.000001+00')
       AS just_after_11;
SELECT * FROM pg_temp.seen('sk_c');
SELECT ordered_events.seek('sk_c', 'sk_g', NULL, '2026-01-01 10:30:00+00') AS at_10_30_start_null,
       ordered_events.seek('sk_c', 'sk_g', 'beginning', '2026-01-01 10:30:00+00') AS at_10_30;
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 09:00:00+00') AS before_all,
       ordered_events.seek('sk_c', 'sk_g', released_at => '-infinity') AS minus_infinity;
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 12:00:00.000001+00') AS after_all,
       ordered_events.seek('sk_c', 'sk_g', released_at => 'infinity') AS infinity;
SELECT * FROM pg_temp.seen('sk_c');

-- What read() takes after a seek is what the seek counted: from 11:00.
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 11:00:00+00');
SELECT * FROM pg_temp.read_all('sk_c', 2);
SELECT * FROM pg_temp.seen('sk_c');

-- A per-key stream, by position; the global one stays.
SELECT ordered_events.seek('sk_c', 'sk_p');
SELECT * FROM pg_temp.seen('sk_c');
SELECT * FROM pg_temp.read_all('sk_c', 2);
-- By time: its one step released a run per key (a, b, c, in delivery
-- order), each with its own time here; from b's on, a stays read.
SELECT * FROM pg_temp.set_clocks('sk_p');
SELECT ordered_events.seek('sk_c', 'sk_p', released_at => '2026-01-01 11:00:00+00');
SELECT * FROM pg_temp.seen('sk_c');
SELECT * FROM pg_temp.read_all('sk_c', 2);

------------------------------------------------------------------------
-- 2. A seek and reads in one transaction
------------------------------------------------------------------------
-- The seek's position is this transaction's: a read after it starts
-- there, a seek after a read overrides it, and a rollback undoes both.
BEGIN;
SELECT ordered_events.seek('sk_c', 'sk_g');
SELECT key, seq FROM ordered_events.read('sk_c', 2, 0);
SELECT partition, consumed_count, unread_count FROM ordered_events.consumers
 WHERE consumer = 'sk_c' AND stream = 'sk_g' ORDER BY partition;
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 12:00:00+00');
SELECT key, seq FROM ordered_events.read('sk_c', 100, 0);
ROLLBACK;
SELECT * FROM pg_temp.seen('sk_c');
BEGIN;
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 12:00:00+00');
SELECT key, seq FROM ordered_events.read('sk_c', 1, 1);
COMMIT;
SELECT * FROM pg_temp.seen('sk_c');
SELECT * FROM pg_temp.read_all('sk_c', 2);

------------------------------------------------------------------------
-- 3. With a retention
------------------------------------------------------------------------
-- Stream sk_r (retention '0 s'): seqs 1..12 of keys k1..k6 in three steps
-- of four, at 10:00, 11:00 and 12:00.  sk_rc (2 partitions) has read them
-- all; sk_rh (1 partition) has read six, so its position is in the second
-- step and compaction keeps that step and the third.
SELECT ordered_events.create_stream('sk_r', retention => '0 s');
SELECT ordered_events.create_consumer('sk_rc', partitions => 2),
       ordered_events.create_consumer('sk_rh');
SELECT ordered_events.subscribe('sk_rc', 'sk_r'), ordered_events.subscribe('sk_rh', 'sk_r');
SELECT pg_temp.ingest('sk_r', 1, 4) AS accepted, ordered_events.release('sk_r') AS released;
SELECT pg_temp.ingest('sk_r', 5, 8) AS accepted, ordered_events.release('sk_r') AS released;
SELECT pg_temp.ingest('sk_r', 9, 12) AS accepted, ordered_events.release('sk_r') AS released;
SELECT * FROM pg_temp.set_clocks('sk_r');
SELECT * FROM pg_temp.read_all('sk_rc', 2);
SELECT count(*) AS sk_rh_took FROM ordered_events.read('sk_rh', 6);

-- One batch of two events (the worker's batch, max_release_batch 2): the
-- first step loses its first two events, its log row starts at seq 3.
SELECT ordered_events.alter_stream('sk_r', max_release_batch => 2);
SELECT deleted, more FROM ordered_events.compact_stream(ordered_events.stream_id('sk_r'));
SELECT string_agg(seq::text, ',' ORDER BY seq) AS kept FROM ordered_events.released
 WHERE stream = 'sk_r';

-- From the beginning: the first event kept, seq 3; unread_count counts the
-- ten kept events, and is what read() returns.
SELECT ordered_events.seek('sk_rc', 'sk_r');
SELECT * FROM pg_temp.seen('sk_rc');

-- A consumer sought back holds back the retention: nothing is deleted
-- until it has read past it again.
SELECT ordered_events.compact('sk_r') AS deleted;
SELECT * FROM pg_temp.read_all('sk_rc', 2);
SELECT ordered_events.compact('sk_r') AS deleted;
SELECT string_agg(seq::text, ',' ORDER BY seq) AS kept FROM ordered_events.released
 WHERE stream = 'sk_r';

-- Before the oldest kept event, by position or by time (the first step was
-- deleted whole): the seek starts at the oldest kept one.
SELECT ordered_events.seek('sk_rc', 'sk_r') AS beginning,
       ordered_events.seek('sk_rc', 'sk_r', released_at => '2026-01-01 09:00:00+00') AS at_9,
       ordered_events.seek('sk_rc', 'sk_r', released_at => '2026-01-01 10:00:00+00') AS at_10;
SELECT * FROM pg_temp.seen('sk_rc');
SELECT ordered_events.seek('sk_rc', 'sk_r', released_at => '2026-01-01 11:30:00+00') AS at_11_30;
SELECT * FROM pg_temp.seen('sk_rc');
SELECT * FROM pg_temp.read_all('sk_rc', 2);
SELECT ordered_events.seek('sk_rh', 'sk_r') AS sk_rh_beginning;
SELECT * FROM pg_temp.read_all('sk_rh', 1);
SELECT * FROM pg_temp.seen('sk_rh');

------------------------------------------------------------------------
-- 4. Errors: each changes nothing
------------------------------------------------------------------------
-- sk_c has unread events of sk_g from 12:00 on, in partition 0.
SELECT ordered_events.seek('sk_c', 'sk_g', released_at => '2026-01-01 12:00:00+00');
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.seen('sk_c');
-- The rows of pg_temp.seen('sk_c') that differ from before (none: nothing changed).
CREATE FUNCTION pg_temp.unchanged()
RETURNS TABLE (side text, part integer, stream text, consumed bigint, unread bigint,
               bias interval, peeked bigint, seqs text)
LANGUAGE sql AS $$
    (SELECT 'now', s.* FROM pg_temp.seen('sk_c') s EXCEPT SELECT 'now', b.* FROM before b)
    UNION ALL
    (SELECT 'before', b.* FROM before b EXCEPT SELECT 'before', s.* FROM pg_temp.seen('sk_c') s)
$$;
SELECT ordered_events.seek(NULL, 'sk_g');
SELECT ordered_events.seek('sk_c', NULL);
SELECT ordered_events.seek('sk_c', 'sk_g', NULL);
SELECT ordered_events.seek('sk_c', 'sk_g', 'end');
SELECT ordered_events.seek('sk_c', 'sk_g', 'now', '2026-01-01 11:00:00+00');
SELECT ordered_events.seek('sk_nobody', 'sk_g');
SELECT ordered_events.seek('sk_c', 'sk_nothing');
SELECT ordered_events.create_stream('sk_other');
SELECT ordered_events.seek('sk_c', 'sk_other');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT ordered_events.seek('sk_c', 'sk_g');
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT ordered_events.seek('sk_c', 'sk_g');
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.seek('sk_c', 'sk_g');
ROLLBACK;
SELECT * FROM pg_temp.unchanged();

------------------------------------------------------------------------
-- 5. Who may seek
------------------------------------------------------------------------
-- regress_seek_owner owns consumer sk_oc, subscribed to sk_g (it may read
-- it) and read to the end; regress_seek_member is a member of it,
-- regress_seek_noinherit a member that does not inherit its privileges,
-- regress_seek_other another role.  Each may execute seek().
SET client_min_messages = warning;
CREATE ROLE regress_seek_api NOLOGIN;
CREATE ROLE regress_seek_owner IN ROLE regress_seek_api;
CREATE ROLE regress_seek_member IN ROLE regress_seek_owner;
CREATE ROLE regress_seek_noinherit NOINHERIT IN ROLE regress_seek_owner;
CREATE ROLE regress_seek_other IN ROLE regress_seek_api;
RESET client_min_messages;
GRANT USAGE ON SCHEMA ordered_events TO regress_seek_api, regress_seek_noinherit;
GRANT EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.read(text, integer, integer, interval),
    ordered_events.seek(text, text, text, timestamptz)
  TO regress_seek_api, regress_seek_noinherit;
SELECT ordered_events.grant_stream('sk_g', 'read', 'regress_seek_owner');
SET ROLE regress_seek_owner;
SELECT ordered_events.create_consumer('sk_oc');
SELECT ordered_events.subscribe('sk_oc', 'sk_g');
SELECT count(*) FROM ordered_events.read('sk_oc');
RESET ROLE;

-- Run a statement as a role: its result, or its SQLSTATE and message.
CREATE FUNCTION pg_temp.as_role(who text, query text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    EXECUTE query INTO result;
    RESET ROLE;
    RETURN result;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END;
$$;
BEGIN;
SELECT who, pg_temp.as_role(who, $$SELECT ordered_events.seek('sk_oc', 'sk_g')$$) AS beginning,
       pg_temp.as_role(who, $$SELECT ordered_events.seek('sk_oc', 'sk_g', 'now')$$) AS now
  FROM unnest(ARRAY['regress_seek_owner', 'regress_seek_member', 'regress_seek_other',
                    'regress_seek_noinherit']) who;
ROLLBACK;
-- a superuser
SELECT ordered_events.seek('sk_oc', 'sk_g') AS superuser_beginning,
       ordered_events.seek('sk_oc', 'sk_g', 'now') AS superuser_now;
-- the refusal, as the other role reads it
SET ROLE regress_seek_other;
SELECT ordered_events.seek('sk_oc', 'sk_g');
RESET ROLE;
SET ROLE regress_seek_noinherit;
SELECT ordered_events.seek('sk_oc', 'sk_g');
-- as the owner, after SET ROLE
SET ROLE regress_seek_owner;
SELECT ordered_events.seek('sk_oc', 'sk_g');
RESET ROLE;
-- without 'read' on the stream, the owner may not seek it (as subscribe())
SELECT ordered_events.revoke_stream('sk_g', 'read', 'regress_seek_owner');
SET ROLE regress_seek_owner;
\set VERBOSITY terse
SELECT ordered_events.seek('sk_oc', 'sk_g', 'now');
\set VERBOSITY default
RESET ROLE;
SELECT consumer, unread_count FROM ordered_events.consumers WHERE consumer = 'sk_oc';
-- without EXECUTE
REVOKE EXECUTE ON FUNCTION ordered_events.seek(text, text, text, timestamptz) FROM regress_seek_api;
SET ROLE regress_seek_other;
SELECT ordered_events.seek('sk_oc', 'sk_g');
RESET ROLE;

SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['sk_c', 'sk_rc', 'sk_rh', 'sk_oc']) c;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['sk_g', 'sk_p', 'sk_r', 'sk_other']) s;
REVOKE USAGE ON SCHEMA ordered_events FROM regress_seek_api, regress_seek_noinherit;
REVOKE EXECUTE ON FUNCTION
    ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
    ordered_events.subscribe(text, text, interval, text),
    ordered_events.read(text, integer, integer, interval),
    ordered_events.seek(text, text, text, timestamptz)
  FROM regress_seek_api, regress_seek_noinherit;
DROP ROLE regress_seek_member, regress_seek_noinherit, regress_seek_owner, regress_seek_other,
          regress_seek_api;
