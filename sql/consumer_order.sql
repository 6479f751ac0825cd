--
-- consumer_order: the merged read of consumers (docs/consuming.md;
-- docs/architecture.md, rules 6 and 9), case by case, with every
-- expectation worked out by hand in the comment above the statement that
-- shows it.
--
-- A consumer reads the released events of its streams as one sequence: a
-- k-way merge of the streams' delivery orders by (stabilized_ts, arrival
-- order), where stabilized_ts = alignment_ts + bias + delay and bias is the
-- average of event_ts - alignment_ts (the lag) over the consumer's pool of
-- the stream (released, not consumed by committed reads), taken once at the
-- start of each read.  Delivery order: global streams in seq order, per-key
-- streams in release order.
--
-- Every time is explicit: pg_temp.at(s) is s seconds after the epoch of the
-- test, 2026-01-01 00:00:00+00, and the reads print stabilized_ts as the
-- interval since that epoch (00:01:10 is 70 s).  An event is written with
-- its alignment time and its lag in seconds (event_ts = alignment_ts + lag;
-- a negative lag: the event happened before it was written).  No clock time
-- is printed, only whether it is set.  release() is called by hand (no
-- background worker serves this database); each call is one release step.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- s seconds after the epoch of the test, exact to the microsecond.
CREATE FUNCTION pg_temp.at(s numeric)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT timestamptz '2026-01-01 00:00:00+00'
           + round(s * 1000000)::bigint * interval '1 microsecond'
$$;

-- A time as the interval since the epoch of the test (an infinity as is).
CREATE FUNCTION pg_temp.since(t timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN isfinite(t) THEN (t - timestamptz '2026-01-01 00:00:00+00')::text
                ELSE t::text END
$$;

-- One event: written (alignment_ts) al seconds after the epoch, happened
-- (event_ts) lag seconds from then.
CREATE FUNCTION pg_temp.ev(stream text, seq bigint, key text, al numeric, lag numeric DEFAULT 0)
RETURNS ordered_events.outcome
LANGUAGE sql AS $$
    SELECT ordered_events.ingest(stream, seq, key, NULL, pg_temp.at(al + lag), pg_temp.at(al))
$$;

-- read() and peek(), in the order they return their rows.
CREATE FUNCTION pg_temp.rd(consumer text, n integer DEFAULT 1000, part integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, stabilized text)
LANGUAGE sql AS $$
    SELECT r.stream, r.seq, r.key, pg_temp.since(r.stabilized_ts)
      FROM ordered_events.read(consumer, n, part) WITH ORDINALITY r
     ORDER BY r.ordinality
$$;
CREATE FUNCTION pg_temp.pk(consumer text, n integer DEFAULT 1000, part integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, stabilized text)
LANGUAGE sql AS $$
    SELECT r.stream, r.seq, r.key, pg_temp.since(r.stabilized_ts)
      FROM ordered_events.peek(consumer, n, part) WITH ORDINALITY r
     ORDER BY r.ordinality
$$;

-- The consumers view of a consumer, without clock times.
CREATE FUNCTION pg_temp.subs(c text)
RETURNS TABLE (part integer, stream text, delay interval, consumed bigint, unread bigint,
               bias interval, has_unread_at boolean, has_read_at boolean)
LANGUAGE sql AS $$
    SELECT v.partition, v.stream, v.delay, v.consumed_count, v.unread_count, v.bias,
           v.oldest_unread_at IS NOT NULL, v.last_read_at IS NOT NULL
      FROM ordered_events.consumers v
     WHERE v.consumer = c
     ORDER BY v.partition, v.stream
$$;

--
-- Two streams, every lag 0 (bias 0, stabilized_ts = alignment_ts): the
-- merge interleaves them by alignment time, whichever stream arrived first.
--   co_zero_a: 1 @1, 2 @4, 3 @6      co_zero_b: 1 @2, 2 @3, 3 @7
-- merged: a1 :01, b1 :02, b2 :03, a2 :04, a3 :06, b3 :07.
--
SELECT ordered_events.create_stream('co_zero_a'), ordered_events.create_stream('co_zero_b');
SELECT pg_temp.ev('co_zero_b', 1, 'k', 2), pg_temp.ev('co_zero_b', 2, 'k', 3),
       pg_temp.ev('co_zero_b', 3, 'k', 7);
SELECT pg_temp.ev('co_zero_a', 1, 'k', 1), pg_temp.ev('co_zero_a', 2, 'k', 4),
       pg_temp.ev('co_zero_a', 3, 'k', 6);
SELECT ordered_events.release('co_zero_a'), ordered_events.release('co_zero_b');
SELECT ordered_events.create_consumer('co_zero');
SELECT ordered_events.subscribe('co_zero', 'co_zero_a'), ordered_events.subscribe('co_zero', 'co_zero_b');
-- before any read: 3 unread in each, bias 0, an oldest unread, no read yet
SELECT * FROM pg_temp.subs('co_zero');
-- peek: a1 :01, b1 :02, b2 :03, a2 :04, a3 :06, b3 :07; it consumes nothing
SELECT * FROM pg_temp.pk('co_zero');
SELECT * FROM pg_temp.subs('co_zero');
-- read 4: a1 :01, b1 :02, b2 :03, a2 :04
SELECT * FROM pg_temp.rd('co_zero', 4);
-- 2 consumed and 1 unread in each; both were read
SELECT * FROM pg_temp.subs('co_zero');
-- the rest: a3 :06, b3 :07; every column of the rows as stored
SELECT r.stream, r.seq, r.key, r.payload, r.event_ts, r.alignment_ts, r.stabilized_ts
  FROM ordered_events.read('co_zero') r;
-- all consumed: empty pools have no bias and no oldest unread event
SELECT * FROM pg_temp.subs('co_zero');
-- nothing more
SELECT * FROM pg_temp.rd('co_zero');

--
-- Bias moves a lagging stream ahead of one with earlier raw alignment.
--   co_bias_fast, lag 0:    1 @10, 2 @20, 3 @30
--   co_bias_slow, lag -60:  1 @65, 2 @75, 3 @85 (they happened at 5, 15, 25)
-- bias: fast 0, slow -60 s; stabilized slow 5, 15, 25; fast 10, 20, 30.
-- merged: slow1 :05, fast1 :10, slow2 :15, fast2 :20, slow3 :25, fast3 :30
-- (by raw alignment every fast event would come first).
--
SELECT ordered_events.create_stream('co_bias_fast'), ordered_events.create_stream('co_bias_slow');
SELECT pg_temp.ev('co_bias_fast', s, 'k', 10 * s) FROM generate_series(1, 3) s;
SELECT pg_temp.ev('co_bias_slow', s, 'k', 55 + 10 * s, -60) FROM generate_series(1, 3) s;
SELECT ordered_events.release('co_bias_fast'), ordered_events.release('co_bias_slow');
SELECT ordered_events.create_consumer('co_bias');
SELECT ordered_events.subscribe('co_bias', 'co_bias_fast'),
       ordered_events.subscribe('co_bias', 'co_bias_slow');
-- bias: fast 00:00:00, slow -00:01:00
SELECT * FROM pg_temp.subs('co_bias');
SELECT * FROM pg_temp.rd('co_bias');

--
-- The bias is the average lag of the pool, not each event's own lag.
--   co_avg_lag: 1 @100 lag -10, 2 @110 lag -50, 3 @120 lag -30: bias -30 s
--   co_avg_ref, lag 0: 1 @75, 2 @85
-- stabilized co_avg_lag: 70, 80, 90 (each event's own lag would give 90,
-- 60, 90, and ref1, ref2 first).
-- merged: lag1 01:10, ref1 01:15, lag2 01:20, ref2 01:25, lag3 01:30.
--
SELECT ordered_events.create_stream('co_avg_lag'), ordered_events.create_stream('co_avg_ref');
SELECT pg_temp.ev('co_avg_lag', 1, 'k', 100, -10), pg_temp.ev('co_avg_lag', 2, 'k', 110, -50),
       pg_temp.ev('co_avg_lag', 3, 'k', 120, -30);
SELECT pg_temp.ev('co_avg_ref', 1, 'k', 75), pg_temp.ev('co_avg_ref', 2, 'k', 85);
SELECT ordered_events.release('co_avg_lag'), ordered_events.release('co_avg_ref');
SELECT ordered_events.create_consumer('co_avg');
SELECT ordered_events.subscribe('co_avg', 'co_avg_lag'), ordered_events.subscribe('co_avg', 'co_avg_ref');
-- bias: lag -00:00:30, ref 00:00:00
SELECT * FROM pg_temp.subs('co_avg');
SELECT * FROM pg_temp.rd('co_avg');

--
-- The bias is rounded to the microsecond, half away from zero.
--   co_round_neg: lags -2 us, -3 us: -2.5 us -> -3 us (half-even: -2)
--   co_round_pos: lags +2 us, +3 us: +2.5 us -> +3 us (half-even: +2)
-- both at @10 and @20: neg1 :09.999997, pos1 :10.000003, neg2 :19.999997,
-- pos2 :20.000003.
--
SELECT ordered_events.create_stream('co_round_neg'), ordered_events.create_stream('co_round_pos');
SELECT pg_temp.ev('co_round_neg', 1, 'k', 10, -0.000002), pg_temp.ev('co_round_neg', 2, 'k', 20, -0.000003);
SELECT pg_temp.ev('co_round_pos', 1, 'k', 10, 0.000002), pg_temp.ev('co_round_pos', 2, 'k', 20, 0.000003);
SELECT ordered_events.release('co_round_neg'), ordered_events.release('co_round_pos');
SELECT ordered_events.create_consumer('co_round');
SELECT ordered_events.subscribe('co_round', 'co_round_neg'),
       ordered_events.subscribe('co_round', 'co_round_pos');
-- bias: neg -00:00:00.000003, pos 00:00:00.000003
SELECT * FROM pg_temp.subs('co_round');
SELECT * FROM pg_temp.rd('co_round');

--
-- An infinite event_ts or alignment_ts counts lag 0; an infinite
-- alignment_ts stays infinite when stabilized.
--   co_inf: 1 @100 with event_ts infinity (lag 0), 2 @110 lag -30,
--           3 with alignment_ts -infinity (lag 0): bias -30/3 = -10 s
--   co_inf_ref, lag 0: 1 @95
-- stabilized co_inf: 90, 100, -infinity.
-- merged: inf1 01:30, ref1 01:35, inf2 01:40, inf3 -infinity (the stream's
-- order is kept: inf3 comes after inf2).
--
SELECT ordered_events.create_stream('co_inf'), ordered_events.create_stream('co_inf_ref');
SELECT ordered_events.ingest('co_inf', 1, 'k', NULL, 'infinity', pg_temp.at(100));
SELECT pg_temp.ev('co_inf', 2, 'k', 110, -30);
SELECT ordered_events.ingest('co_inf', 3, 'k', NULL, pg_temp.at(50), '-infinity');
SELECT pg_temp.ev('co_inf_ref', 1, 'k', 95);
SELECT ordered_events.release('co_inf'), ordered_events.release('co_inf_ref');
SELECT ordered_events.create_consumer('co_inf');
SELECT ordered_events.subscribe('co_inf', 'co_inf'), ordered_events.subscribe('co_inf', 'co_inf_ref');
-- bias: co_inf -00:00:10
SELECT * FROM pg_temp.subs('co_inf');
SELECT * FROM pg_temp.rd('co_inf');

--
-- delay lowers a stream's priority for one consumer; it never holds
-- events back.  Lag 0 everywhere:
--   co_delay_1: 1 @10, 2 @20, 3 @30     co_delay_2: 1 @12, 2 @22, 3 @32
-- co_delay_x, no delay:      d1 :10, d2 :12, d1 :20, d2 :22, d1 :30, d2 :32
-- co_delay_y, co_delay_1 +5 s (15, 25, 35):
--                            d2 :12, d1 :15, d2 :22, d1 :25, d2 :32, d1 :35
-- co_delay_z, co_delay_2 +15 s (27, 37, 47):
--                            d1 :10, d1 :20, d2 :27, d1 :30, d2 :37, d2 :47
-- co_delay_w, co_delay_1 +100 hours: d2 :12, :22, :32, then d1 at 4 days
--                            04:00:10, 04:00:20, 04:00:30, all in one read
--
SELECT ordered_events.create_stream('co_delay_1'), ordered_events.create_stream('co_delay_2');
SELECT pg_temp.ev('co_delay_1', s, 'k', 10 * s), pg_temp.ev('co_delay_2', s, 'k', 10 * s + 2)
  FROM generate_series(1, 3) s;
SELECT ordered_events.release('co_delay_1'), ordered_events.release('co_delay_2');
SELECT ordered_events.create_consumer(c) FROM unnest('{co_delay_x,co_delay_y,co_delay_z,co_delay_w}'::text[]) c;
SELECT ordered_events.subscribe('co_delay_x', 'co_delay_1'),
       ordered_events.subscribe('co_delay_x', 'co_delay_2');
SELECT ordered_events.subscribe('co_delay_y', 'co_delay_1', '5 s'),
       ordered_events.subscribe('co_delay_y', 'co_delay_2');
SELECT ordered_events.subscribe('co_delay_z', 'co_delay_1'),
       ordered_events.subscribe('co_delay_z', 'co_delay_2', delay => '15 s');
SELECT ordered_events.subscribe('co_delay_w', 'co_delay_1', '100 hours'),
       ordered_events.subscribe('co_delay_w', 'co_delay_2');
-- the delays as subscribed, the same pools and biases
SELECT c, s.* FROM unnest('{co_delay_x,co_delay_y,co_delay_z,co_delay_w}'::text[]) c,
       LATERAL pg_temp.subs(c) s;
SELECT * FROM pg_temp.rd('co_delay_x');
SELECT * FROM pg_temp.rd('co_delay_y');
SELECT * FROM pg_temp.rd('co_delay_z');
SELECT * FROM pg_temp.rd('co_delay_w');

--
-- Ties of stabilized_ts go by arrival order: the event the extension
-- accepted first comes first.  Lag 0; arrivals, in this order:
--   co_tie_2/1 @10, co_tie_1/1 @10, co_tie_1/2 @20, co_tie_2/2 @20
-- co_tie:       t2/1 :10, t1/1 :10, t1/2 :20, t2/2 :20
-- co_tie_delay, co_tie_1 +10 s (20, 30): t2/1 :10; then t1/1 :20 and t2/2
--   :20 tie, t1/1 arrived second, t2/2 fourth: t1/1 :20, t2/2 :20, t1/2 :30
--
SELECT ordered_events.create_stream('co_tie_1'), ordered_events.create_stream('co_tie_2');
SELECT pg_temp.ev('co_tie_2', 1, 'k', 10);
SELECT pg_temp.ev('co_tie_1', 1, 'k', 10);
SELECT pg_temp.ev('co_tie_1', 2, 'k', 20);
SELECT pg_temp.ev('co_tie_2', 2, 'k', 20);
SELECT ordered_events.release('co_tie_1'), ordered_events.release('co_tie_2');
SELECT ordered_events.create_consumer('co_tie'), ordered_events.create_consumer('co_tie_delay');
SELECT ordered_events.subscribe('co_tie', 'co_tie_1'), ordered_events.subscribe('co_tie', 'co_tie_2');
SELECT ordered_events.subscribe('co_tie_delay', 'co_tie_1', '10 s'),
       ordered_events.subscribe('co_tie_delay', 'co_tie_2');
SELECT * FROM pg_temp.rd('co_tie');
SELECT * FROM pg_temp.rd('co_tie_delay');

-- Within one statement the arrival order is the statement's row order:
-- one multi-row insert into the inbox, rows co_tie_4/1 @5, co_tie_3/1 @5,
-- co_tie_3/2 @6, co_tie_4/2 @6.
-- co_tie_rows: t4/1 :05, t3/1 :05, t3/2 :06, t4/2 :06
SELECT ordered_events.create_stream('co_tie_3'), ordered_events.create_stream('co_tie_4');
INSERT INTO ordered_events.inbox (stream, seq, key, event_ts, alignment_ts) VALUES
    ('co_tie_4', 1, 'k', pg_temp.at(5), pg_temp.at(5)),
    ('co_tie_3', 1, 'k', pg_temp.at(5), pg_temp.at(5)),
    ('co_tie_3', 2, 'k', pg_temp.at(6), pg_temp.at(6)),
    ('co_tie_4', 2, 'k', pg_temp.at(6), pg_temp.at(6));
SELECT ordered_events.release('co_tie_3'), ordered_events.release('co_tie_4');
SELECT ordered_events.create_consumer('co_tie_rows');
SELECT ordered_events.subscribe('co_tie_rows', 'co_tie_3'),
       ordered_events.subscribe('co_tie_rows', 'co_tie_4');
SELECT * FROM pg_temp.rd('co_tie_rows');

--
-- The bias is taken at the start of each read from the pool as committed
-- reads left it: recomputed after a committed read, not after a rolled-back
-- one, and within one transaction a second read still counts the first
-- read's events (they are consumed only at commit).
--   co_rec_1: 1 @100 lag -60, 2 @110 lag -30, 3 @120 lag 0, 4 @130 lag -30
--   co_rec_2, lag 0: 1 @75, 2 @95
-- pool {1,2,3,4}: bias -30 s; {2,3,4}: -20 s; {3,4}: -15 s; {4}: -30 s.
--
SELECT ordered_events.create_stream('co_rec_1'), ordered_events.create_stream('co_rec_2');
SELECT pg_temp.ev('co_rec_1', 1, 'k', 100, -60), pg_temp.ev('co_rec_1', 2, 'k', 110, -30),
       pg_temp.ev('co_rec_1', 3, 'k', 120, 0), pg_temp.ev('co_rec_1', 4, 'k', 130, -30);
SELECT pg_temp.ev('co_rec_2', 1, 'k', 75), pg_temp.ev('co_rec_2', 2, 'k', 95);
SELECT ordered_events.release('co_rec_1'), ordered_events.release('co_rec_2');
SELECT ordered_events.create_consumer('co_rec');
SELECT ordered_events.subscribe('co_rec', 'co_rec_1'), ordered_events.subscribe('co_rec', 'co_rec_2');
-- bias -30 s: r1/1 01:10, r2/1 01:15, r1/2 01:20, r1/3 01:30, r2/2 01:35, r1/4 01:40
SELECT * FROM pg_temp.pk('co_rec');
-- a read rolled back: r1/1 01:10, then nothing is consumed
BEGIN;
SELECT * FROM pg_temp.rd('co_rec', 1);
ROLLBACK;
-- consumed 0, unread 4 and 2, bias -30 s still, never read
SELECT * FROM pg_temp.subs('co_rec');
-- the same six rows as before, at the same times
SELECT * FROM pg_temp.pk('co_rec');
-- two reads in one transaction: r1/1 01:10, then r2/1 01:15, r1/2 01:20 --
-- the second read's pool still holds r1/1 (bias -30 s); without it (-20 s)
-- r1/2 would be at 01:30
BEGIN;
SELECT * FROM pg_temp.rd('co_rec', 1);
-- inside this transaction the view shows the pool the next read uses: as
-- committed reads left it (consumed 0, unread 4 and 2, bias -30 s)
SELECT v.stream, v.consumed_count, v.unread_count, v.bias
  FROM ordered_events.consumers v WHERE v.consumer = 'co_rec' ORDER BY v.stream;
SELECT * FROM pg_temp.rd('co_rec', 2);
COMMIT;
-- committed: co_rec_1 consumed 2, unread 2, bias -15 s; co_rec_2 consumed
-- 1, unread 1, bias 0; both read
SELECT * FROM pg_temp.subs('co_rec');
-- recomputed: r2/2 01:35, r1/3 01:45, r1/4 01:55 (with -30 s still, r1/3
-- 01:30 would come first)
SELECT * FROM pg_temp.pk('co_rec');
-- r2/2 01:35, r1/3 01:45; then the pool of co_rec_1 is {4}: bias -30 s
SELECT * FROM pg_temp.rd('co_rec', 2);
SELECT * FROM pg_temp.subs('co_rec');
-- a read in a subtransaction rolled back consumes nothing either: r1/4
-- 01:40 twice, the second one committed
BEGIN;
SAVEPOINT before_read;
SELECT * FROM pg_temp.rd('co_rec', 1);
ROLLBACK TO SAVEPOINT before_read;
SELECT * FROM pg_temp.rd('co_rec', 1);
COMMIT;
-- consumed 4 and 2, nothing unread
SELECT * FROM pg_temp.subs('co_rec');

--
-- A late event with an early alignment time is simply read next: nothing
-- read before is reordered.  Lag 0:
--   co_late_1: 1 @10, 2 @20, 3 @30     co_late_2: 1 @15, 2 @25
-- read 4: l1/1 :10, l2/1 :15, l1/2 :20, l2/2 :25; next would be l1/3 :30.
-- Then co_late_2/3 @5 is released: the next read gives l2/3 :05, l1/3 :30.
--
SELECT ordered_events.create_stream('co_late_1'), ordered_events.create_stream('co_late_2');
SELECT pg_temp.ev('co_late_1', s, 'k', 10 * s) FROM generate_series(1, 3) s;
SELECT pg_temp.ev('co_late_2', s, 'k', 10 * s + 5) FROM generate_series(1, 2) s;
SELECT ordered_events.release('co_late_1'), ordered_events.release('co_late_2');
SELECT ordered_events.create_consumer('co_late');
SELECT ordered_events.subscribe('co_late', 'co_late_1'), ordered_events.subscribe('co_late', 'co_late_2');
SELECT * FROM pg_temp.rd('co_late', 4);
SELECT * FROM pg_temp.pk('co_late');
SELECT pg_temp.ev('co_late_2', 3, 'k', 5);
SELECT ordered_events.release('co_late_2');
SELECT * FROM pg_temp.rd('co_late');
-- A stream's own order is never changed: co_late_1/5 @8 waits for seq 4
-- (nothing to read), then co_late_1/4 @40 and co_late_2/4 @35 arrive:
-- l2/4 :35, l1/4 :40, l1/5 :08 (after l1/4, its predecessor).
SELECT pg_temp.ev('co_late_1', 5, 'k', 8);
SELECT ordered_events.release('co_late_1');
SELECT * FROM pg_temp.pk('co_late');
SELECT pg_temp.ev('co_late_2', 4, 'k', 35), pg_temp.ev('co_late_1', 4, 'k', 40);
SELECT ordered_events.release('co_late_1'), ordered_events.release('co_late_2');
SELECT * FROM pg_temp.rd('co_late');

--
-- Per-key delivery order: release step after release step; inside a step,
-- keys by the (alignment_ts, key) of their first event released in the
-- step, keys in the C collation ('B' before 'a'), each key's events in seq
-- order.  Stream co_perkey, lag 0.
-- Step 1 arrivals: b/1 @30, b/2 @5, a/1 @20, a/2 @1, B/1 @20, d/2 @0 (d/1
-- is missing: d waits).  First events: a @20, B @20, b @30:
--   B/1 :20, a/1 :20, a/2 :01, b/1 :30, b/2 :05
-- Step 2 arrivals: d/1 @50, a/3 @2, e/1 @3.  First events: a/3 @2, e/1 @3,
-- d/1 @50 -- all after step 1, though a/3 is earlier than b/1:
--   a/3 :02, e/1 :03, d/1 :50, d/2 :00
-- Step 3: b/3 @0, earliest of all, after everything of steps 1 and 2.
--
SELECT ordered_events.create_stream('co_perkey', 'per_key');
SELECT pg_temp.ev('co_perkey', 1, 'b', 30), pg_temp.ev('co_perkey', 2, 'b', 5),
       pg_temp.ev('co_perkey', 1, 'a', 20), pg_temp.ev('co_perkey', 2, 'a', 1),
       pg_temp.ev('co_perkey', 1, 'B', 20), pg_temp.ev('co_perkey', 2, 'd', 0);
SELECT ordered_events.release('co_perkey');
SELECT pg_temp.ev('co_perkey', 1, 'd', 50), pg_temp.ev('co_perkey', 3, 'a', 2),
       pg_temp.ev('co_perkey', 1, 'e', 3);
SELECT ordered_events.release('co_perkey');
SELECT pg_temp.ev('co_perkey', 3, 'b', 0);
SELECT ordered_events.release('co_perkey');
SELECT ordered_events.create_consumer('co_perkey');
SELECT ordered_events.subscribe('co_perkey', 'co_perkey');
-- step 1: B/1, a/1, a/2, b/1, b/2
SELECT * FROM pg_temp.rd('co_perkey', 5);
-- oldest_unread_at is the released_at of the first unread event in delivery
-- order, a/3 (released by step 2), not that of b/3 (step 3)
SELECT v.oldest_unread_at = r2.released_at AS is_step_2, v.oldest_unread_at = r3.released_at AS is_step_3
  FROM ordered_events.consumers v, ordered_events.released r2, ordered_events.released r3
 WHERE v.consumer = 'co_perkey'
   AND r2.stream = 'co_perkey' AND r2.key = 'a' AND r2.seq = 3
   AND r3.stream = 'co_perkey' AND r3.key = 'b' AND r3.seq = 3;
-- step 2: a/3, e/1, d/1, d/2; step 3: b/3
SELECT * FROM pg_temp.rd('co_perkey');
-- Merged with co_perkey_ref (lag 0: 1 @10, 2 @25), the per-key order is
-- kept: heads B/1 :20 and ref1 :10 -> ref1; B/1 :20 < ref2 :25; a/1 :20,
-- a/2 :01 too; b/1 :30 > ref2 :25 -> ref2; then the rest of co_perkey:
--   ref1 :10, B/1 :20, a/1 :20, a/2 :01, ref2 :25, b/1 :30, b/2 :05,
--   a/3 :02, e/1 :03, d/1 :50, d/2 :00, b/3 :00
SELECT ordered_events.create_stream('co_perkey_ref');
SELECT pg_temp.ev('co_perkey_ref', 1, 'r', 10), pg_temp.ev('co_perkey_ref', 2, 'r', 25);
SELECT ordered_events.release('co_perkey_ref');
SELECT ordered_events.create_consumer('co_perkey_merged');
SELECT ordered_events.subscribe('co_perkey_merged', 'co_perkey'),
       ordered_events.subscribe('co_perkey_merged', 'co_perkey_ref');
SELECT * FROM pg_temp.rd('co_perkey_merged');

--
-- Each consumer has its own pool: two consumers of one stream at different
-- positions see different biases, so different stabilized times.
--   co_pool_s: 1 @100 lag -60, 2 @110 lag -20, 3 @120 lag 0
-- co_pool_1 reads seq 1 with bias -80/3 s = -26.666667 s (rounded): 01:13.333333;
-- then its pool {2,3} has bias -10 s: 2 01:40, 3 01:50.
-- co_pool_2 has read nothing: bias -26.666667 s: 1 01:13.333333,
-- 2 01:23.333333, 3 01:33.333333.
--
SELECT ordered_events.create_stream('co_pool_s');
SELECT pg_temp.ev('co_pool_s', 1, 'k', 100, -60), pg_temp.ev('co_pool_s', 2, 'k', 110, -20),
       pg_temp.ev('co_pool_s', 3, 'k', 120, 0);
SELECT ordered_events.release('co_pool_s');
SELECT ordered_events.create_consumer('co_pool_1'), ordered_events.create_consumer('co_pool_2');
SELECT ordered_events.subscribe('co_pool_1', 'co_pool_s'), ordered_events.subscribe('co_pool_2', 'co_pool_s');
SELECT * FROM pg_temp.rd('co_pool_1', 1);
SELECT c, s.* FROM unnest('{co_pool_1,co_pool_2}'::text[]) c, LATERAL pg_temp.subs(c) s;
SELECT * FROM pg_temp.pk('co_pool_1');
SELECT * FROM pg_temp.pk('co_pool_2');

--
-- Partitions: an event belongs to partition key_partition(key, n) of a
-- consumer with n partitions; each partition has its own positions, pool
-- and bias.  key_partition is (hashtextextended(key, 0) & max bigint) % n.
--
SELECT bool_and(ordered_events.key_partition(k, n)
                = (hashtextextended(k, 0) & 9223372036854775807) % n) AS formula,
       bool_and(ordered_events.key_partition(k, n) BETWEEN 0 AND n - 1) AS in_range
  FROM generate_series(1, 200) i, LATERAL (SELECT 'key' || i) kk(k),
       unnest('{1,2,3,7,1024}'::integer[]) n;
-- The keys of this case: k1, k2 are in partition 0 of 2, k3, k4 in 1; of
-- 3: k2 in 0, k3 in 1, k1 and k4 in 2.
SELECT k AS key, ordered_events.key_partition(k, 2) AS of_2,
       ordered_events.key_partition(k, 3) AS of_3
  FROM unnest('{k1,k2,k3,k4}'::text[]) k;
-- co_part_g (global): 1 k1 @10 lag -10, 2 k3 @20, 3 k2 @30 lag -10,
--                     4 k4 @40, 5 k1 @50 lag -10
-- co_part_k (per-key, one step): k2/1 @15, k3/1 @25 lag -20, k3/2 @35 lag
--                     -20, k1/1 @5; delivery k1/1, k2/1, k3/1, k3/2
-- Of 2 partitions:
--   0 (k1, k2): g1, g3, g5 (bias -10 s: :00, :20, :40); k1/1 :05, k2/1 :15
--     (bias 0) -- merged g1 :00, k1/1 :05, k2/1 :15, g3 :20, g5 :40
--   1 (k3, k4): g2, g4 (bias 0: :20, :40); k3/1, k3/2 (bias -20 s: :05,
--     :15) -- merged k3/1 :05, k3/2 :15, g2 :20, g4 :40
-- co_part_3 (3 partitions) subscribes before the events are released,
-- co_part_2 (2 partitions) after.
SELECT ordered_events.create_stream('co_part_g'), ordered_events.create_stream('co_part_k', 'per_key');
SELECT ordered_events.create_consumer('co_part_3', 3), ordered_events.create_consumer('co_part_2', partitions => 2);
SELECT ordered_events.subscribe('co_part_3', 'co_part_g'), ordered_events.subscribe('co_part_3', 'co_part_k');
SELECT pg_temp.ev('co_part_g', 1, 'k1', 10, -10), pg_temp.ev('co_part_g', 2, 'k3', 20),
       pg_temp.ev('co_part_g', 3, 'k2', 30, -10), pg_temp.ev('co_part_g', 4, 'k4', 40),
       pg_temp.ev('co_part_g', 5, 'k1', 50, -10);
SELECT pg_temp.ev('co_part_k', 1, 'k2', 15), pg_temp.ev('co_part_k', 1, 'k3', 25, -20),
       pg_temp.ev('co_part_k', 2, 'k3', 35, -20), pg_temp.ev('co_part_k', 1, 'k1', 5);
SELECT ordered_events.release('co_part_g'), ordered_events.release('co_part_k');
SELECT ordered_events.subscribe('co_part_2', 'co_part_g'), ordered_events.subscribe('co_part_2', 'co_part_k');
-- one row per partition and stream:
--   0: g unread 3 bias -10 s, k unread 2 bias 0
--   1: g unread 2 bias 0,     k unread 2 bias -20 s
SELECT * FROM pg_temp.subs('co_part_2');
-- partition 0, 2 events: g1 :00 (k1), k1/1 :05
SELECT * FROM pg_temp.rd('co_part_2', 2, 0);
-- partition 0 consumed 1 + 1, partition 1 nothing; partition 0's pools
-- {g3, g5} bias -10 s and {k2/1} bias 0
SELECT * FROM pg_temp.subs('co_part_2');
-- partition 1 from its own start: k3/1 :05, k3/2 :15, g2 :20, g4 :40
SELECT * FROM pg_temp.rd('co_part_2', 10, 1);
-- partition 0 from where it was: k2/1 :15, g3 :20, g5 :40
SELECT * FROM pg_temp.rd('co_part_2', 10, 0);
SELECT * FROM pg_temp.subs('co_part_2');
-- Of 3 partitions (counted by the release step):
--   0 (k2): g3 (bias -10 s), k2/1 (bias 0)
--   1 (k3): g2 (bias 0), k3/1, k3/2 (bias -20 s)
--   2 (k1, k4): g1, g4, g5 (bias -20/3 s = -6.666667 s), k1/1 (bias 0)
SELECT * FROM pg_temp.subs('co_part_3');
-- 0: k2/1 :15, g3 :30 - 10 = :20
SELECT * FROM pg_temp.rd('co_part_3', 10, 0);
-- 1: k3/1 :05, k3/2 :15, g2 :20
SELECT * FROM pg_temp.rd('co_part_3', 10, 1);
-- 2: g1 :10 - 6.666667 = :03.333333, k1/1 :05, g4 :33.333333, g5 :43.333333
SELECT * FROM pg_temp.rd('co_part_3', 10, 2);

--
-- start => 'now' takes only events released after the call (an event
-- ingested before it but released after it counts); 'beginning' (the
-- default) every event.
--   co_start_s: 1 @10 lag -100, 2 @20 lag -100 released; 3 @30 lag 0
--   ingested, not released yet.
--
SELECT ordered_events.create_stream('co_start_s');
SELECT pg_temp.ev('co_start_s', 1, 'k', 10, -100), pg_temp.ev('co_start_s', 2, 'k', 20, -100);
SELECT ordered_events.release('co_start_s');
SELECT pg_temp.ev('co_start_s', 3, 'k', 30);
SELECT ordered_events.create_consumer('co_from_start'), ordered_events.create_consumer('co_from_now');
SELECT ordered_events.subscribe('co_from_start', 'co_start_s'),
       ordered_events.subscribe('co_from_now', 'co_start_s', start => 'now');
-- co_from_start: unread 2, bias -100 s; co_from_now: unread 0, no bias
SELECT c, s.* FROM unnest('{co_from_start,co_from_now}'::text[]) c, LATERAL pg_temp.subs(c) s;
SELECT * FROM pg_temp.pk('co_from_now');
SELECT ordered_events.release('co_start_s');
-- co_from_start: unread 3, bias -200/3 s = -66.666667 s; co_from_now:
-- unread 1, bias 0
SELECT c, s.* FROM unnest('{co_from_start,co_from_now}'::text[]) c, LATERAL pg_temp.subs(c) s;
-- co_from_now: 3 :30
SELECT * FROM pg_temp.rd('co_from_now');
-- co_from_start: 1 at 10 - 66.666667 = -00:00:56.666667
SELECT * FROM pg_temp.rd('co_from_start', 1);
-- Subscribing again changes the delay and keeps the position (start is
-- ignored): delay 10 s, consumed 1, unread 2; then 2 and 3 with the bias
-- of {2, 3}, -50 s: 2 at 20 - 50 + 10 = -00:00:20, 3 at -00:00:10.
SELECT ordered_events.subscribe('co_from_start', 'co_start_s', '10 s', 'now');
SELECT * FROM pg_temp.subs('co_from_start');
SELECT * FROM pg_temp.rd('co_from_start');
-- unsubscribe forgets the position: subscribed again from the beginning,
-- co_from_now reads 1, 2, 3 again (bias -66.666667 s: -00:00:56.666667,
-- -00:00:46.666667, -00:00:36.666667)
SELECT ordered_events.unsubscribe('co_from_now', 'co_start_s');
SELECT * FROM pg_temp.subs('co_from_now');
SELECT ordered_events.subscribe('co_from_now', 'co_start_s');
SELECT * FROM pg_temp.rd('co_from_now');

--
-- Skipped seqs and dead letters never reach a consumer.  Lag 0.
-- co_skip_g (global): 1 @10, 2 @20, 2 again (duplicate), 0
-- (before_initial_sequence), the last bigint (outside the valid range),
-- 4 @40; skip_gap through 3 releases 1, 2, 4; 3 arrives late (gap_skipped);
-- skip_gap through 6 skips 5 and 6 (beyond the highest arrived), 7 @70 is
-- released by a release step.  Delivery: 1, 2, 4, 7.
-- co_skip_k (per-key): k/1 @15 last_event, k/2 @25 (after_last_event),
-- j/1 @35, j/3 @45; a release step releases k/1, j/1; skip_gap through j/2
-- releases j/3.  Delivery: k/1, j/1 | j/3.
-- merged: g1 :10, k/1 :15, g2 :20, j/1 :35, g4 :40, j/3 :45, g7 01:10
--
SELECT ordered_events.create_stream('co_skip_g'), ordered_events.create_stream('co_skip_k', 'per_key');
SELECT ordered_events.create_consumer('co_skip');
SELECT ordered_events.subscribe('co_skip', 'co_skip_g'), ordered_events.subscribe('co_skip', 'co_skip_k');
SELECT pg_temp.ev('co_skip_g', 1, 'k', 10), pg_temp.ev('co_skip_g', 2, 'k', 20),
       pg_temp.ev('co_skip_g', 2, 'k', 21), pg_temp.ev('co_skip_g', 0, 'k', 0),
       pg_temp.ev('co_skip_g', 9223372036854775807, 'k', 0), pg_temp.ev('co_skip_g', 4, 'k', 40);
SELECT ordered_events.skip_gap('co_skip_g', 3, 'lost in transit');
SELECT pg_temp.ev('co_skip_g', 3, 'k', 30);
SELECT ordered_events.skip_gap('co_skip_g', 6, 'never sent');
SELECT pg_temp.ev('co_skip_g', 7, 'k', 70);
SELECT ordered_events.release('co_skip_g');
SELECT ordered_events.ingest('co_skip_k', 1, 'k', NULL, pg_temp.at(15), pg_temp.at(15), true);
SELECT pg_temp.ev('co_skip_k', 2, 'k', 25), pg_temp.ev('co_skip_k', 1, 'j', 35),
       pg_temp.ev('co_skip_k', 3, 'j', 45);
SELECT ordered_events.release('co_skip_k');
SELECT ordered_events.skip_gap('co_skip_k', 2, 'lost in transit', 'j');
SELECT stream, seq, key, reason FROM ordered_events.unprocessed
 WHERE stream IN ('co_skip_g', 'co_skip_k') ORDER BY stream, seq;
-- unread 4 and 3, bias 0
SELECT * FROM pg_temp.subs('co_skip');
SELECT * FROM pg_temp.rd('co_skip');

--
-- drop_stream() unsubscribes every consumer: the view loses the row, reads
-- go on with the other streams.  Lag 0:
--   co_drop_a: 1 @10, 2 @30     co_drop_b: 1 @20, 2 @40
-- read 1: a1 :10; after the drop: b1 :20, b2 :40.
--
SELECT ordered_events.create_stream('co_drop_a'), ordered_events.create_stream('co_drop_b');
SELECT pg_temp.ev('co_drop_a', 1, 'k', 10), pg_temp.ev('co_drop_a', 2, 'k', 30),
       pg_temp.ev('co_drop_b', 1, 'k', 20), pg_temp.ev('co_drop_b', 2, 'k', 40);
SELECT ordered_events.release('co_drop_a'), ordered_events.release('co_drop_b');
SELECT ordered_events.create_consumer('co_drop');
SELECT ordered_events.subscribe('co_drop', 'co_drop_a'), ordered_events.subscribe('co_drop', 'co_drop_b');
SELECT * FROM pg_temp.rd('co_drop', 1);
SELECT ordered_events.drop_stream('co_drop_a');
SELECT * FROM pg_temp.subs('co_drop');
SELECT * FROM pg_temp.rd('co_drop');

--
-- drop_consumer() removes the consumer and its positions: the view has no
-- row of it; created again, it has no subscription.
--
SELECT ordered_events.drop_consumer('co_drop');
SELECT count(*) AS rows_of_co_drop FROM ordered_events.consumers WHERE consumer = 'co_drop';
SELECT ordered_events.create_consumer('co_drop');
SELECT * FROM pg_temp.rd('co_drop');

-- Clean up: every consumer and stream of this test.
SELECT count(*) AS consumers_dropped
  FROM (SELECT ordered_events.drop_consumer(c.consumer)
          FROM ordered_events.consumer_def c WHERE c.consumer LIKE 'co\_%') d;
SELECT count(*) AS streams_dropped
  FROM (SELECT ordered_events.drop_stream(s.stream)
          FROM ordered_events.streams s WHERE s.stream LIKE 'co\_%') d;
SELECT count(*) AS subscriptions_left FROM ordered_events.consumers WHERE consumer LIKE 'co\_%';
