--
-- lease_basic: the lease mode of a consumer (docs/consuming.md, "Work
-- outside the database: the lease mode"; docs/reference.md, "Consumers").
--   an event not acknowledged comes back with attempt + 1 and a new
--   receipt, oldest first; a key's later events wait while one of its
--   events is out; after max_attempts the event is a dead letter
--   (exception_thrown, "not acknowledged") and its key goes on; nack()
--   returns events, after a delay; ack() of a stale or unknown receipt
--   acknowledges nothing; the consumers and leases views; retention keeps
--   what is leased; seek() and reset_consumer() take the streams' events
--   out of the leases; unsubscribe() and drop_consumer() forget the leases.
--
-- The visibility clock is moved by pg_temp.expire(), which makes every
-- lease of a consumer due (a write of the internal table, as superuser):
-- nothing here sleeps.
--
SET TimeZone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Every lease of the consumer (holding seq, if given) runs out now.
CREATE FUNCTION pg_temp.expire(consumer text, seq bigint DEFAULT NULL)
RETURNS void
LANGUAGE sql AS $$
    UPDATE ordered_events.lease l SET visible_until = '-infinity'
      FROM ordered_events.consumer_def c
     WHERE c.consumer = expire.consumer AND l.consumer_id = c.consumer_id
       AND l.state <> 'waiting'
       AND (expire.seq IS NULL OR EXISTS (SELECT FROM ordered_events.lease_events(l.events, l.done) e
                                           WHERE e.seq = expire.seq))
$$;
-- What receive() returned, with the receipts, to acknowledge by seq.
CREATE TEMP TABLE got (call integer, stream text, seq bigint, key text, receipt bigint,
                       attempt integer);
CREATE FUNCTION pg_temp.receive(call integer, consumer text, max_events integer DEFAULT 100,
                                visibility interval DEFAULT '1 h')
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, attempt integer)
LANGUAGE sql AS $$
    WITH r AS (SELECT * FROM ordered_events.receive(consumer, max_events,
                                                    visibility => visibility)),
    saved AS (INSERT INTO got SELECT call, r.stream, r.seq, r.key, r.receipt, r.attempt FROM r)
    SELECT r.stream, r.seq, r.key, r.payload, r.attempt FROM r
$$;
-- The receipt of the latest delivery of a seq.
CREATE FUNCTION pg_temp.receipt_of(stream text, seq bigint)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT g.receipt FROM got g WHERE g.stream = receipt_of.stream AND g.seq = receipt_of.seq
     ORDER BY g.call DESC LIMIT 1
$$;
-- The leases view without its times.
CREATE FUNCTION pg_temp.leases(consumer text)
RETURNS TABLE (stream text, seq bigint, key text, attempt integer, state text)
LANGUAGE sql AS $$
    SELECT l.stream, l.seq, l.key, l.attempt,
           CASE WHEN l.visible_until IS NULL THEN 'waiting'
                WHEN l.visible_until > now() THEN 'leased' ELSE 'due' END
      FROM ordered_events.leases l WHERE l.consumer = leases.consumer
     ORDER BY l.stream, l.seq
$$;

-- Stream lb_s, global: seqs 1..6 with keys a b a c b a.
SELECT ordered_events.create_stream('lb_s');
SELECT ordered_events.ingest('lb_s', s, (ARRAY['a', 'b', 'a', 'c', 'b', 'a'])[s], jsonb_build_object('n', s))
  FROM generate_series(1, 6) s;
SELECT ordered_events.release('lb_s');

-- A lease consumer: no handler; max_attempts defaults to 10 deliveries.
SELECT ordered_events.create_consumer('lb_c', delivery => 'lease');
SELECT consumer, delivery, max_attempts, handler FROM ordered_events.consumer_def WHERE consumer = 'lb_c';
SELECT ordered_events.alter_consumer('lb_c', max_attempts => 2);
SELECT ordered_events.subscribe('lb_c', 'lb_s');

-- The first event of each key; 3, 5 and 6 wait behind 1 (a) and 2 (b).
SELECT * FROM pg_temp.receive(1, 'lb_c');
SELECT * FROM pg_temp.leases('lb_c');
-- Taken from the pool: consumed, none unread (the leases view shows what is out).
SELECT consumer, stream, consumed_count, unread_count FROM ordered_events.consumers
 WHERE consumer = 'lb_c';
-- Nothing is free: a, b and c are out, nothing else is released.
SELECT * FROM pg_temp.receive(2, 'lb_c');

-- ack() of seq 1 frees key a: its next event, 3, comes.
SELECT ordered_events.ack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 1)]);
-- again, or a receipt of no event: nothing
SELECT ordered_events.ack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 1)]);
SELECT ordered_events.ack('lb_c', ARRAY[-1, 0, 65535]::bigint[]);
SELECT ordered_events.ack('lb_c', '{}');
SELECT * FROM pg_temp.receive(3, 'lb_c');

-- The leases run out: 2, 4 (the oldest batch), then 3 come back, attempt 2.
SELECT pg_temp.expire('lb_c');
SELECT * FROM pg_temp.leases('lb_c');
SELECT * FROM pg_temp.receive(4, 'lb_c');
-- The receipts of the first delivery are stale: they acknowledge nothing.
SELECT ordered_events.ack('lb_c', ARRAY(SELECT receipt FROM got WHERE call = 1));
SELECT * FROM pg_temp.leases('lb_c');

-- At max_attempts (2), 2, 3 and 4 become dead letters; keys a and b go
-- on with 6 and 5.
SELECT pg_temp.expire('lb_c');
SELECT * FROM pg_temp.receive(5, 'lb_c');
SELECT stream, seq, key, payload, reason, detail, consumer FROM ordered_events.unprocessed
 WHERE consumer = 'lb_c' ORDER BY seq;
SELECT * FROM pg_temp.leases('lb_c');

-- nack(): 5 comes back at once, attempt 2; 6 after an hour.
SELECT ordered_events.nack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 5)]);
SELECT ordered_events.nack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 6)], '1 h');
SELECT * FROM pg_temp.leases('lb_c');
SELECT * FROM pg_temp.receive(6, 'lb_c');
-- The receipts of call 5 were returned: they settle nothing.
SELECT ordered_events.nack('lb_c', ARRAY(SELECT receipt FROM got WHERE call = 5));
SELECT ordered_events.ack('lb_c', ARRAY(SELECT receipt FROM got WHERE call = 5));
SELECT pg_temp.expire('lb_c', 6);
SELECT * FROM pg_temp.receive(7, 'lb_c');
-- 6 again at its last attempt: a nack() makes it a dead letter at the next receive()
SELECT ordered_events.nack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 6)]);
SELECT * FROM pg_temp.receive(8, 'lb_c');
SELECT seq, detail FROM ordered_events.unprocessed WHERE consumer = 'lb_c' ORDER BY seq;

-- What is left: 5 (attempt 2). Acknowledged, nothing is out.
SELECT * FROM pg_temp.leases('lb_c');
SELECT ordered_events.ack('lb_c', ARRAY[pg_temp.receipt_of('lb_s', 5)]);
SELECT * FROM pg_temp.leases('lb_c');
SELECT count(*) AS lease_rows FROM ordered_events.lease l
  JOIN ordered_events.consumer_def c USING (consumer_id) WHERE c.consumer = 'lb_c';
SELECT * FROM pg_temp.receive(9, 'lb_c');

-- max_events: the due events first, then the waiting, then new ones.
-- Stream lb_t, per key: x1 x2 y1 z1 (x2 waits behind x1).
SELECT ordered_events.create_stream('lb_t', sequencing => 'per_key');
SELECT ordered_events.ingest('lb_t', 1, 'x'), ordered_events.ingest('lb_t', 2, 'x'),
       ordered_events.ingest('lb_t', 1, 'y'), ordered_events.ingest('lb_t', 1, 'z');
SELECT ordered_events.release('lb_t');
SELECT ordered_events.create_consumer('lb_m', delivery => 'lease');
SELECT ordered_events.subscribe('lb_m', 'lb_t');
SELECT stream, seq, key, attempt FROM pg_temp.receive(10, 'lb_m', 2);
SELECT ordered_events.ack('lb_m', ARRAY(SELECT receipt FROM got WHERE call = 10 AND key = 'x'));
SELECT pg_temp.expire('lb_m');
-- y1 is due again, x2 waits, z1 is new: one at a time, in that order
SELECT stream, seq, key, attempt FROM pg_temp.receive(11, 'lb_m', 1);
SELECT stream, seq, key, attempt FROM pg_temp.receive(12, 'lb_m', 1);
SELECT stream, seq, key, attempt FROM pg_temp.receive(13, 'lb_m', 1);
SELECT stream, seq, key, attempt FROM pg_temp.receive(14, 'lb_m', 1);

-- A key's order holds across the consumer's streams: key k in lb_u
-- waits while k of lb_v is out.
SELECT ordered_events.create_stream('lb_u'), ordered_events.create_stream('lb_v');
SELECT ordered_events.create_consumer('lb_k', delivery => 'lease');
SELECT ordered_events.subscribe('lb_k', 'lb_u'), ordered_events.subscribe('lb_k', 'lb_v');
SELECT ordered_events.ingest('lb_v', 1, 'k', NULL, '2026-01-01', '2026-01-01'),
       ordered_events.ingest('lb_u', 1, 'k', NULL, '2026-01-02', '2026-01-02'),
       ordered_events.ingest('lb_u', 2, 'j', NULL, '2026-01-03', '2026-01-03');
SELECT ordered_events.release('lb_u') + ordered_events.release('lb_v') AS released;
SELECT stream, seq, key, attempt FROM pg_temp.receive(15, 'lb_k');
SELECT ordered_events.ack('lb_k', ARRAY(SELECT receipt FROM got WHERE call = 15 AND stream = 'lb_v'));
SELECT stream, seq, key, attempt FROM pg_temp.receive(16, 'lb_k');

-- Partitions: each has its own leases.
SELECT ordered_events.create_consumer('lb_p', 2, delivery => 'lease');
SELECT ordered_events.subscribe('lb_p', 'lb_s');
SELECT key, ordered_events.key_partition(key, 2) AS partition, array_agg(seq ORDER BY seq) AS seqs
  FROM (SELECT * FROM ordered_events.receive('lb_p', 100, 0)
        UNION ALL SELECT * FROM ordered_events.receive('lb_p', 100, 1)) r
 GROUP BY key ORDER BY key;
SELECT partition, count(*) FROM ordered_events.leases WHERE consumer = 'lb_p' GROUP BY partition
 ORDER BY partition;

-- Retention keeps what is out: lb_r keeps released events for 0 s, yet
-- the leased ones stay until acknowledged.
SELECT ordered_events.create_stream('lb_r', retention => '0 s');
SELECT ordered_events.ingest('lb_r', s, 'r' || s, jsonb_build_object('r', s)) FROM generate_series(1, 4) s;
SELECT ordered_events.release('lb_r');
SELECT ordered_events.create_consumer('lb_rc', delivery => 'lease');
SELECT ordered_events.subscribe('lb_rc', 'lb_r');
SELECT stream, seq, key, payload, attempt FROM pg_temp.receive(17, 'lb_rc', 2);
SELECT ordered_events.compact('lb_r');
SELECT seq FROM ordered_events.released WHERE stream = 'lb_r' ORDER BY seq;
SELECT pg_temp.expire('lb_rc');
SELECT stream, seq, key, payload, attempt FROM pg_temp.receive(18, 'lb_rc');
-- 2 of the 4 acknowledged: their lease row still keeps the stream from 1 on
SELECT ordered_events.ack('lb_rc', ARRAY(SELECT receipt FROM got WHERE call = 18 AND seq IN (3, 4)));
SELECT ordered_events.compact('lb_r');
SELECT ordered_events.ack('lb_rc', ARRAY(SELECT receipt FROM got WHERE call = 18));
SELECT ordered_events.compact('lb_r');
SELECT seq FROM ordered_events.released WHERE stream = 'lb_r' ORDER BY seq;
SELECT * FROM pg_temp.receive(19, 'lb_rc');

-- seek() takes the consumer's events of the stream sought out of its
-- leases, whose receipts then acknowledge nothing (they are delivered again
-- from the new position, with attempt 1); its events of other streams stay
-- out.  reset_consumer() takes them all out.
SELECT ordered_events.create_stream('lb_w'), ordered_events.create_stream('lb_x');
SELECT ordered_events.ingest('lb_w', s, 'w' || s) FROM generate_series(1, 3) s;
SELECT ordered_events.ingest('lb_x', s, 'x' || s) FROM generate_series(1, 2) s;
SELECT ordered_events.release('lb_w') AS w, ordered_events.release('lb_x') AS x;
SELECT ordered_events.create_consumer('lb_sk', delivery => 'lease');
SELECT ordered_events.subscribe('lb_sk', 'lb_w'), ordered_events.subscribe('lb_sk', 'lb_x');
SELECT stream, seq, key, attempt FROM pg_temp.receive(30, 'lb_sk', 4);
SELECT ordered_events.seek('lb_sk', 'lb_w') AS unread;
SELECT * FROM pg_temp.leases('lb_sk');
SELECT ordered_events.ack('lb_sk', ARRAY(SELECT receipt FROM got WHERE call = 30 AND stream = 'lb_w'))
       AS acknowledged;
SELECT stream, seq, key, attempt FROM pg_temp.receive(31, 'lb_sk');
SELECT ordered_events.seek('lb_sk', 'lb_w', 'now') AS unread;
SELECT * FROM pg_temp.leases('lb_sk');
SELECT ordered_events.reset_consumer('lb_sk') AS unread;
SELECT * FROM pg_temp.leases('lb_sk');
SELECT stream, seq, key, attempt FROM pg_temp.receive(32, 'lb_sk');
SELECT ordered_events.drop_consumer('lb_sk');
SELECT ordered_events.drop_stream('lb_w'), ordered_events.drop_stream('lb_x');

-- unsubscribe() forgets the stream's leases at the next receive();
-- drop_consumer() forgets them all.
SELECT stream, seq, key FROM pg_temp.receive(20, 'lb_k');
SELECT * FROM pg_temp.leases('lb_k');
SELECT ordered_events.unsubscribe('lb_k', 'lb_u');
SELECT pg_temp.expire('lb_k');
SELECT * FROM pg_temp.receive(21, 'lb_k');
SELECT * FROM pg_temp.leases('lb_k');
SELECT count(*) AS lease_rows FROM ordered_events.lease;
SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['lb_c', 'lb_m', 'lb_k', 'lb_p', 'lb_rc']) c;
SELECT count(*) AS lease_rows FROM ordered_events.lease;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['lb_s', 'lb_t', 'lb_u', 'lb_v', 'lb_r']) s;
