--
-- retention: the stream options retention and dead_letter_retention, and
-- compact() (docs/operating.md, "Retention"; docs/architecture.md, rule
-- 13): what it deletes (released events
-- whose release step is older than the retention and that every
-- subscribed consumer has read past; rejections older than the dead
-- letter retention), and what it keeps (ranges, stream_stats, key_status,
-- the skip ledger, the dedup of retried old seqs, the metrics counters).
--
-- No background worker serves this database: release() and compact() are
-- called by hand, and each compact() call is one batch per stream.  A
-- retention of '0 s' lets compact() delete any release step of an earlier
-- statement; a longer one is made to have passed by moving the stored
-- clocks back (lane_release_log.released_at, unprocessed.received_at), so
-- nothing depends on the machine's speed.  No timestamp is printed.
--
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Range, counters and gaps of a stream, without timestamps.
CREATE FUNCTION pg_temp.state(s text)
RETURNS TABLE (range_end bigint, max_seen_seq bigint, pending bigint, released bigint,
               unprocessed bigint, first_gap_start bigint, skipped bigint)
LANGUAGE sql AS $$
    SELECT st.range_end, st.max_seen_seq, st.pending_count, st.released_count,
           st.unprocessed_count, st.first_gap_start, st.skipped_count
      FROM ordered_events.stream_stats st WHERE st.stream = s
$$;

-- Every column of key_status (it has no timestamps).
CREATE FUNCTION pg_temp.keys(s text)
RETURNS SETOF ordered_events.key_status
LANGUAGE sql AS $$
    SELECT * FROM ordered_events.key_status k WHERE k.stream = s ORDER BY k.key
$$;

-- The released seqs of a stream, by key.
CREATE FUNCTION pg_temp.released(s text)
RETURNS TABLE (key text, seqs bigint[])
LANGUAGE sql AS $$
    SELECT r.key, array_agg(r.seq ORDER BY r.seq)
      FROM ordered_events.released r WHERE r.stream = s
     GROUP BY r.key ORDER BY r.key
$$;

-- The dead letters of a stream, without received_at.
CREATE FUNCTION pg_temp.dead(s text)
RETURNS TABLE (seq bigint, key text, reason ordered_events.outcome, detail text)
LANGUAGE sql AS $$
    SELECT u.seq, u.key, u.reason, u.detail FROM ordered_events.unprocessed u
     WHERE u.stream = s AND u.consumer IS NULL
     ORDER BY u.seq, u.key, u.reason, u.detail
$$;

-- The release steps of a stream (lane_release_log): [seq_start, seq_end)
-- of each lane, in delivery order.
CREATE FUNCTION pg_temp.steps(s text)
RETURNS TABLE (lane text, seq_start bigint, seq_end bigint)
LANGUAGE sql AS $$
    SELECT l.lane, l.seq_start, l.seq_end
      FROM ordered_events.lane_release_log l
     WHERE l.stream_id = ordered_events.stream_id(s)
     ORDER BY l.delivery
$$;

-- Move back the release time of a stream's steps up to seq_end through_end
-- (all: NULL) by span, as if they had been released that much earlier;
-- returns the number of steps moved.
CREATE FUNCTION pg_temp.age_steps(s text, span interval, through_end bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    WITH moved AS (
        UPDATE ordered_events.lane_release_log
           SET released_at = released_at - span
         WHERE stream_id = ordered_events.stream_id(s)
           AND (through_end IS NULL OR seq_end <= through_end)
        RETURNING 1)
    SELECT count(*) FROM moved
$$;

-- A metric of a stream.
CREATE FUNCTION pg_temp.metric(s text, name text)
RETURNS double precision
LANGUAGE sql AS $$
    SELECT m.value FROM ordered_events.metrics m
     WHERE m.stream = s AND m.metric = name AND m.consumer IS NULL
$$;

-- What compaction keeps, whole rows (timestamps included, never printed):
-- the range, stream_stats, and key_status by key.
CREATE FUNCTION pg_temp.kept(s text)
RETURNS TABLE (part text, key text, row_text text)
LANGUAGE sql AS $$
    SELECT 'ranges', NULL, r::text FROM ordered_events.ranges r WHERE r.stream = s
    UNION ALL
    SELECT 'stream_stats', NULL, t::text FROM ordered_events.stream_stats t WHERE t.stream = s
    UNION ALL
    SELECT 'key_status', k.key, k::text FROM ordered_events.key_status k WHERE k.stream = s
$$;
CREATE TEMP TABLE kept_before (part text, key text, row_text text);
CREATE FUNCTION pg_temp.keep_before(s text)
RETURNS void
LANGUAGE sql AS $$
    DELETE FROM kept_before;
    INSERT INTO kept_before SELECT * FROM pg_temp.kept(s);
$$;
-- The rows of pg_temp.kept(s) that differ from those pg_temp.keep_before(s)
-- took: which part (and key), before or after.  No row: nothing changed.
CREATE FUNCTION pg_temp.kept_diff(s text)
RETURNS TABLE (part text, key text, side text)
LANGUAGE sql AS $$
    SELECT x.part, x.key, x.side
      FROM ((SELECT *, 'after' AS side FROM pg_temp.kept(s)
             EXCEPT ALL SELECT *, 'after' FROM kept_before)
            UNION ALL
            (SELECT *, 'before' FROM kept_before
             EXCEPT ALL SELECT *, 'before' FROM pg_temp.kept(s))) x
     ORDER BY x.part, x.key, x.side DESC
$$;

--
-- Options.  Both retentions are NULL (keep for ever) by default; NULL in
-- alter_stream() keeps a value; keep_forever => true sets both to NULL.
--
SELECT ordered_events.create_stream('ret_opt');
SELECT ordered_events.create_stream('ret_opt2', retention => '1 day',
                                    dead_letter_retention => '7 days');
SELECT ordered_events.create_stream('ret_opt3', sequencing => 'per_key',
                                    retention => '0 s', dead_letter_retention => '0 s');
SELECT stream, sequencing, max_release_batch, retention, dead_letter_retention
  FROM ordered_events.streams WHERE stream LIKE 'ret\_opt%' ORDER BY stream;
SELECT ordered_events.alter_stream('ret_opt', retention => '2 hours');
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'ret_opt';
SELECT ordered_events.alter_stream('ret_opt', dead_letter_retention => '30 minutes');
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'ret_opt';
-- other options, and NULLs, keep both
SELECT ordered_events.alter_stream('ret_opt', max_release_batch => 5);
SELECT ordered_events.alter_stream('ret_opt', NULL, NULL, NULL, NULL, NULL);
SELECT max_release_batch, retention, dead_letter_retention
  FROM ordered_events.streams WHERE stream = 'ret_opt';
-- keep_forever => false is the default: it keeps them too
SELECT ordered_events.alter_stream('ret_opt', keep_forever => false);
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'ret_opt';
SELECT ordered_events.alter_stream('ret_opt', keep_forever => true);
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'ret_opt';
SELECT ordered_events.alter_stream('ret_opt', retention => '0 s', dead_letter_retention => '1 s');
SELECT retention, dead_letter_retention FROM ordered_events.streams WHERE stream = 'ret_opt';

-- Refused: a negative retention, keep_forever with a retention.  Nothing
-- changes: no stream is created, no option of ret_opt moves.
SELECT ordered_events.create_stream('ret_bad', retention => '-1 second');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.create_stream('ret_bad', dead_letter_retention => '1 day -25 hours');
\echo SQLSTATE :SQLSTATE
SELECT count(*) AS ret_bad_streams FROM ordered_events.streams WHERE stream = 'ret_bad';
SELECT ordered_events.alter_stream('ret_opt', max_release_batch => 7, retention => '-1 day');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('ret_opt', max_release_batch => 7,
                                   dead_letter_retention => '-00:00:00.000001');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('ret_opt', keep_forever => true, retention => '1 hour');
\echo SQLSTATE :SQLSTATE
SELECT ordered_events.alter_stream('ret_opt', keep_forever => true, dead_letter_retention => '0 s');
\echo SQLSTATE :SQLSTATE
SELECT max_release_batch, retention, dead_letter_retention
  FROM ordered_events.streams WHERE stream = 'ret_opt';
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'ret\_opt%' ORDER BY stream;

--
-- A global stream with retention '0 s'.  Arrivals out of order, 6 missing:
-- release() releases 1..5 (k1: 1, 3, 4; k2: 2, 5); 7 and 8 are pending.
-- A duplicate and a seq below the initial sequence are dead letters.
--
SELECT ordered_events.create_stream('ret_g', retention => '0 s');
SELECT seq, key, ordered_events.ingest('ret_g', seq, key) AS outcome
  FROM (VALUES (3, 'k1'), (1, 'k1'), (2, 'k2'), (5, 'k2'), (4, 'k1'), (8, 'k2'), (7, 'k1'),
               (2, 'k2'), (0, 'k1')) v(seq, key);
SELECT ordered_events.release('ret_g');
SELECT * FROM pg_temp.released('ret_g');
SELECT * FROM pg_temp.steps('ret_g');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'ret_g';
SELECT * FROM pg_temp.state('ret_g');
SELECT * FROM pg_temp.keys('ret_g');
SELECT pg_temp.metric('ret_g', 'ordered_events_deleted_events_total') AS deleted_total;
SELECT pg_temp.keep_before('ret_g');

-- compact() deletes the step [1, 6): its five events are gone from
-- released; the pending ones stay.
SELECT ordered_events.compact('ret_g');
SELECT * FROM pg_temp.released('ret_g');
SELECT * FROM pg_temp.steps('ret_g');
SELECT seq, key FROM ordered_events.pending WHERE stream = 'ret_g' ORDER BY seq;
-- ranges, stream_stats and key_status are the same as before
SELECT * FROM pg_temp.kept_diff('ret_g');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'ret_g';
SELECT * FROM pg_temp.state('ret_g');
SELECT * FROM pg_temp.keys('ret_g');
SELECT pg_temp.metric('ret_g', 'ordered_events_deleted_events_total') AS deleted_total;
-- nothing left to delete
SELECT ordered_events.compact('ret_g');

-- The dedup claim: a retried seq whose event was deleted is a duplicate
-- ("already released"), by ingest, a multi-row INSERT into the inbox and
-- COPY; a retried pending seq is a duplicate as before ("already
-- received").  None is released again; each counts in its key's
-- duplicate_count and received_count.
SELECT pg_temp.keep_before('ret_g');
SELECT ordered_events.ingest('ret_g', 3, 'k1');
SELECT ordered_events.ingest('ret_g', 5, 'k9');
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES
    ('ret_g', 1, 'k1'), ('ret_g', 4, 'k1'), ('ret_g', 7, 'k1');
COPY ordered_events.inbox (stream, seq, key) FROM stdin;
ret_g	2	k2
ret_g	5	k2
\.
SELECT * FROM pg_temp.dead('ret_g');
SELECT ordered_events.release('ret_g');
SELECT * FROM pg_temp.released('ret_g');
SELECT * FROM pg_temp.state('ret_g');
SELECT * FROM pg_temp.keys('ret_g');
-- the retries changed only what counts dead letters: stream_stats
-- (unprocessed_count) and the key_status of k1, k2 and the new k9
SELECT * FROM pg_temp.kept_diff('ret_g');

-- A skipped run survives the deletion of what it let through.  skip_gap()
-- skips 6 and releases 7 and 8; a late 6 is gap_skipped.  Compaction
-- waits until a release step has settled the run (no transaction that
-- began before the skip still runs: normally the first step), so release
-- until then.  Then 7 and 8 go; a late 6 is still gap_skipped, a retried
-- 8 a duplicate, and the skip ledger keeps the run.
SELECT ordered_events.skip_gap('ret_g', 6, 'lost upstream');
SELECT ordered_events.ingest('ret_g', 6, 'k1');
SELECT * FROM pg_temp.released('ret_g');
-- no release step after the skip has settled the run yet: nothing goes
SELECT ordered_events.compact('ret_g');
DO $$
BEGIN
    FOR i IN 1..6000 LOOP
        PERFORM ordered_events.release('ret_g');
        COMMIT;
        IF NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                        WHERE g.stream_id = ordered_events.stream_id('ret_g')
                          AND NOT g.settled) THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE EXCEPTION 'the skipped run of ret_g is not settled';
END;
$$;
SELECT * FROM pg_temp.steps('ret_g');
SELECT pg_temp.keep_before('ret_g');
SELECT ordered_events.compact('ret_g');
SELECT * FROM pg_temp.released('ret_g');
SELECT * FROM pg_temp.steps('ret_g');
SELECT * FROM pg_temp.kept_diff('ret_g');
SELECT ordered_events.ingest('ret_g', 6, 'k2');
SELECT ordered_events.ingest('ret_g', 8, 'k2');
SELECT gap_start, gap_end, reason FROM ordered_events.skipped_gaps WHERE stream = 'ret_g';
SELECT * FROM pg_temp.dead('ret_g') WHERE seq >= 6;
SELECT ordered_events.release('ret_g');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'ret_g';
SELECT * FROM pg_temp.state('ret_g');
SELECT * FROM pg_temp.keys('ret_g');
-- the stream goes on: 9 is new
SELECT ordered_events.ingest('ret_g', 9, 'k1'), ordered_events.release('ret_g');
SELECT * FROM pg_temp.released('ret_g');
SELECT pg_temp.metric('ret_g', 'ordered_events_deleted_events_total') AS deleted_total;

--
-- A retention of '1 hour', set by alter_stream() after a first step was
-- released: compact() deletes nothing until a step was released more than
-- an hour ago, then only the steps that old.  Two steps: [1, 3) and [3, 5).
--
SELECT ordered_events.create_stream('ret_h');
SELECT count(*) FILTER (WHERE ordered_events.ingest('ret_h', g, 'k' || g % 2) = 'accepted')
  FROM generate_series(1, 2) g;
SELECT ordered_events.release('ret_h');
SELECT ordered_events.alter_stream('ret_h', retention => '1 hour');
SELECT count(*) FILTER (WHERE ordered_events.ingest('ret_h', g, 'k' || g % 2) = 'accepted')
  FROM generate_series(3, 4) g;
SELECT ordered_events.release('ret_h');
SELECT * FROM pg_temp.steps('ret_h');
SELECT ordered_events.compact('ret_h');
SELECT * FROM pg_temp.released('ret_h');
-- half an hour back is not enough
SELECT pg_temp.age_steps('ret_h', '30 minutes', 3);
SELECT ordered_events.compact('ret_h');
SELECT * FROM pg_temp.released('ret_h');
-- two hours back, the first step only: it goes
SELECT pg_temp.age_steps('ret_h', '90 minutes', 3);
SELECT ordered_events.compact('ret_h');
SELECT * FROM pg_temp.released('ret_h');
SELECT * FROM pg_temp.steps('ret_h');
-- every step of the stream two hours back: the second goes too
UPDATE ordered_events.lane_release_log SET released_at = released_at - interval '2 hours'
 WHERE stream_id = ordered_events.stream_id('ret_h');
SELECT pg_temp.keep_before('ret_h');
SELECT ordered_events.compact('ret_h');
SELECT * FROM pg_temp.released('ret_h');
SELECT * FROM pg_temp.steps('ret_h');
-- nothing pending, nothing released left: the range and counters hold
SELECT * FROM pg_temp.kept_diff('ret_h');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'ret_h';
SELECT * FROM pg_temp.state('ret_h');
SELECT * FROM pg_temp.keys('ret_h');
-- retries of a seq of either step are duplicates; 5 is new
SELECT ordered_events.ingest('ret_h', 4, 'k0'), ordered_events.ingest('ret_h', 1, 'k1'),
       ordered_events.ingest('ret_h', 5, 'k1');
SELECT ordered_events.release('ret_h');
SELECT * FROM pg_temp.released('ret_h');
SELECT * FROM pg_temp.dead('ret_h');
-- keep_forever: compact() deletes no more, however old the step; the
-- dedup goes on
SELECT ordered_events.alter_stream('ret_h', keep_forever => true);
SELECT pg_temp.age_steps('ret_h', '1 year');
SELECT ordered_events.compact('ret_h');
SELECT * FROM pg_temp.released('ret_h');
SELECT ordered_events.ingest('ret_h', 2, 'k0');

--
-- A per-key stream with retention '0 s'.  Key a: 1, 2, 3 (its last
-- event), all released; key b: 1 released, 3 pending (2 missing).
--
SELECT ordered_events.create_stream('ret_k', sequencing => 'per_key', retention => '0 s');
SELECT ordered_events.ingest('ret_k', 2, 'a'), ordered_events.ingest('ret_k', 1, 'a'),
       ordered_events.ingest('ret_k', 3, 'a', last_event => true),
       ordered_events.ingest('ret_k', 1, 'b'), ordered_events.ingest('ret_k', 3, 'b');
SELECT ordered_events.release('ret_k');
SELECT * FROM pg_temp.released('ret_k');
SELECT * FROM pg_temp.keys('ret_k');
SELECT pg_temp.keep_before('ret_k');
SELECT ordered_events.compact('ret_k');
SELECT * FROM pg_temp.released('ret_k');
SELECT * FROM pg_temp.steps('ret_k');
SELECT * FROM pg_temp.kept_diff('ret_k');
SELECT * FROM pg_temp.state('ret_k');
SELECT * FROM pg_temp.keys('ret_k');
-- retried seqs of a and b are duplicates; a seq after a's last event is
-- after_last_event; b goes on
SELECT ordered_events.ingest('ret_k', 2, 'a'), ordered_events.ingest('ret_k', 3, 'a'),
       ordered_events.ingest('ret_k', 4, 'a'), ordered_events.ingest('ret_k', 1, 'b'),
       ordered_events.ingest('ret_k', 2, 'b');
SELECT * FROM pg_temp.dead('ret_k');
SELECT ordered_events.release('ret_k');
SELECT * FROM pg_temp.released('ret_k');
SELECT * FROM pg_temp.keys('ret_k');

--
-- Consumers hold retention back: a release step is deleted only once every
-- subscribed consumer has read past it (its position is in a later step).
-- Stream ret_c, retention '0 s', three steps of two events: [1, 3), [3, 5),
-- [5, 7).  Each event's lag (event_ts - alignment_ts) is -seq seconds.
--
SELECT ordered_events.create_stream('ret_c', retention => '0 s', max_release_batch => 2);
SELECT count(*) FILTER (WHERE o = 'accepted') AS accepted
  FROM generate_series(1, 6) g,
       LATERAL ordered_events.ingest('ret_c', g, 'k' || g % 2, NULL,
                                     timestamptz '2026-01-01 00:00:00+00' + g * interval '9 s',
                                     timestamptz '2026-01-01 00:00:00+00' + g * interval '10 s') o;
SELECT ordered_events.release('ret_c'), ordered_events.release('ret_c'),
       ordered_events.release('ret_c');
SELECT * FROM pg_temp.steps('ret_c');
SELECT ordered_events.create_consumer('ret_c1', 1);
SELECT ordered_events.subscribe('ret_c1', 'ret_c');
-- nothing read: nothing deleted (each call counts one batch of two)
SELECT ordered_events.compact('ret_c');
SELECT ordered_events.compact('ret_c');
SELECT ordered_events.compact('ret_c');
SELECT ordered_events.compact('ret_c');
SELECT * FROM pg_temp.released('ret_c');
-- read 1..3: the position is in the second step, so only the first goes
SELECT seq, key FROM ordered_events.read('ret_c1', 3);
SELECT ordered_events.compact('ret_c');
SELECT * FROM pg_temp.steps('ret_c');
SELECT * FROM pg_temp.released('ret_c');
-- read 4: the second step is read to its end, but the position is still
-- in it: it stays
SELECT seq, key FROM ordered_events.read('ret_c1', 1);
SELECT ordered_events.compact('ret_c');
SELECT * FROM pg_temp.steps('ret_c');
SELECT consumer, stream, consumed_count, unread_count, extract(epoch FROM bias) AS bias_s
  FROM ordered_events.consumers WHERE stream = 'ret_c';
-- A consumer subscribed now from the beginning starts at the first kept
-- event: its pool is 3..6 (bias -4.5 s, the mean lag of those), and it
-- holds back the second step again.
SELECT ordered_events.create_consumer('ret_c2', 1);
SELECT ordered_events.subscribe('ret_c2', 'ret_c', start => 'beginning');
SELECT consumer, stream, consumed_count, unread_count, extract(epoch FROM bias) AS bias_s
  FROM ordered_events.consumers WHERE stream = 'ret_c' ORDER BY consumer;
SELECT seq, key FROM ordered_events.read('ret_c1', 1);
SELECT ordered_events.compact('ret_c');
SELECT seq, key FROM ordered_events.read('ret_c2', 10);
SELECT count(*) AS more FROM ordered_events.read('ret_c2', 10);
-- both read past the second step: it goes; the third stays (both are in it)
SELECT ordered_events.compact('ret_c');
SELECT * FROM pg_temp.steps('ret_c');
SELECT * FROM pg_temp.released('ret_c');
SELECT consumer, stream, consumed_count, unread_count
  FROM ordered_events.consumers WHERE stream = 'ret_c' ORDER BY consumer;
-- unsubscribed, a consumer holds nothing back; a third one subscribed from
-- the beginning has only 5 and 6 left to read
SELECT ordered_events.unsubscribe('ret_c1', 'ret_c'), ordered_events.unsubscribe('ret_c2', 'ret_c');
SELECT ordered_events.compact('ret_c');
SELECT * FROM pg_temp.released('ret_c');
SELECT ordered_events.subscribe('ret_c2', 'ret_c');
SELECT consumer, stream, consumed_count, unread_count
  FROM ordered_events.consumers WHERE stream = 'ret_c' ORDER BY consumer;
SELECT count(*) AS readable FROM ordered_events.read('ret_c2', 10);
SELECT * FROM pg_temp.state('ret_c');
SELECT pg_temp.metric('ret_c', 'ordered_events_deleted_events_total') AS deleted_total,
       pg_temp.metric('ret_c', 'ordered_events_released_events_total') AS released_total;

--
-- dead_letter_retention '1 hour': rejections older than it are deleted,
-- still counted in key_status and in the metric of dead letters.  A
-- retention of events is not needed for it.
--
SELECT ordered_events.create_stream('ret_d', dead_letter_retention => '1 hour');
SELECT ordered_events.ingest('ret_d', 1, 'k1'), ordered_events.ingest('ret_d', 2, 'k1'),
       ordered_events.ingest('ret_d', 1, 'k1'), ordered_events.ingest('ret_d', 0, 'k2'),
       ordered_events.ingest('ret_d', 2, 'k2');
SELECT ordered_events.release('ret_d');
SELECT * FROM pg_temp.dead('ret_d');
SELECT * FROM pg_temp.keys('ret_d');
SELECT pg_temp.metric('ret_d', 'ordered_events_dead_letters_total') AS dead_letters_total;
SELECT ordered_events.compact('ret_d');
SELECT count(*) AS dead_letters FROM pg_temp.dead('ret_d');
-- the rejection of k2's 0 two hours back: it goes; compact() counts
-- events, not dead letters
UPDATE ordered_events.unprocessed SET received_at = received_at - interval '2 hours'
 WHERE stream = 'ret_d' AND seq = 0;
SELECT pg_temp.keep_before('ret_d');
SELECT ordered_events.compact('ret_d');
SELECT * FROM pg_temp.dead('ret_d');
SELECT * FROM pg_temp.keys('ret_d');
SELECT pg_temp.metric('ret_d', 'ordered_events_dead_letters_total') AS dead_letters_total;
-- then the others
UPDATE ordered_events.unprocessed SET received_at = received_at - interval '2 hours'
 WHERE stream = 'ret_d' AND seq <> 0;
SELECT ordered_events.compact('ret_d');
SELECT count(*) AS dead_letters FROM pg_temp.dead('ret_d');
SELECT * FROM pg_temp.keys('ret_d');
-- only stream_stats changed: its unprocessed_count counts the dead
-- letters that are left
SELECT * FROM pg_temp.kept_diff('ret_d');
SELECT * FROM pg_temp.state('ret_d');
SELECT pg_temp.metric('ret_d', 'ordered_events_dead_letters_total') AS dead_letters_total,
       pg_temp.metric('ret_d', 'ordered_events_deleted_events_total') AS deleted_total;
-- released events are kept (no retention)
SELECT * FROM pg_temp.released('ret_d');
-- new rejections count on top
SELECT ordered_events.ingest('ret_d', 2, 'k2');
SELECT * FROM pg_temp.keys('ret_d');
SELECT pg_temp.metric('ret_d', 'ordered_events_dead_letters_total') AS dead_letters_total;

--
-- compact(): an unknown stream is the usual error; NULL (the default)
-- compacts every stream: ret_g's 9 and ret_k's 2 and 3 of b go; ret_h
-- keeps its 5 (keep_forever), ret_d its events (no retention).
--
SELECT ordered_events.compact('ret_nope');
\echo SQLSTATE :SQLSTATE
SELECT stream, count(*) AS released FROM ordered_events.released
 WHERE stream LIKE 'ret\_%' GROUP BY stream ORDER BY stream;
SELECT ordered_events.compact(NULL);
SELECT stream, count(*) AS released FROM ordered_events.released
 WHERE stream LIKE 'ret\_%' GROUP BY stream ORDER BY stream;
SELECT ordered_events.compact();

SELECT ordered_events.drop_consumer('ret_c1'), ordered_events.drop_consumer('ret_c2');
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'ret\_%' ORDER BY stream;
SELECT count(*) AS ret_streams FROM ordered_events.streams WHERE stream LIKE 'ret\_%';
