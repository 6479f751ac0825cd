--
-- lease_transaction: receive() commits its leases at once, also inside
-- the caller's transaction block, where it runs in a background worker
-- of its own (docs/consuming.md, "Work outside the database: the lease
-- mode"): a rollback of the caller takes back its ack() and nack(), never
-- what receive() delivered.  A receive() that would wait for a lock of
-- the calling transaction fails with 40P01 instead of waiting for ever.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT ordered_events.create_stream('lt_s');
SELECT ordered_events.ingest('lt_s', s, 'k' || s) FROM generate_series(1, 6) s;
SELECT ordered_events.release('lt_s');
SELECT ordered_events.create_consumer('lt_c', delivery => 'lease');
SELECT ordered_events.subscribe('lt_c', 'lt_s');
CREATE FUNCTION pg_temp.leases()
RETURNS TABLE (seq bigint, attempt integer, due boolean)
LANGUAGE sql AS $$
    SELECT l.seq, l.attempt, l.visible_until <= clock_timestamp()
      FROM ordered_events.leases l WHERE l.consumer = 'lt_c' ORDER BY l.seq
$$;

-- A rollback keeps what receive() delivered: the events stay leased.
BEGIN;
SELECT seq, key, attempt FROM ordered_events.receive('lt_c', 2);
ROLLBACK;
SELECT * FROM pg_temp.leases();
SELECT consumed_count, unread_count FROM ordered_events.consumers WHERE consumer = 'lt_c';

-- So does a rollback to a savepoint; two receive()s in one transaction
-- see each other's leases.
BEGIN;
SAVEPOINT s;
SELECT seq, key, attempt FROM ordered_events.receive('lt_c', 1);
ROLLBACK TO SAVEPOINT s;
SELECT seq, key, attempt FROM ordered_events.receive('lt_c', 1);
COMMIT;
SELECT * FROM pg_temp.leases();

-- ack() is the caller's: rolled back, the event is still leased.
BEGIN;
SELECT receipt AS r5 FROM ordered_events.receive('lt_c', 1) \gset
SELECT ordered_events.ack('lt_c', ARRAY[:r5]::bigint[]);
ROLLBACK;
SELECT * FROM pg_temp.leases();
BEGIN;
SELECT ordered_events.ack('lt_c', ARRAY[:r5]::bigint[]);
COMMIT;
SELECT * FROM pg_temp.leases();

-- An error of the worker is the caller's error.
BEGIN;
SELECT * FROM ordered_events.receive('lt_nope');
ROLLBACK;
BEGIN;
SELECT * FROM ordered_events.receive('lt_c', 10, 3);
ROLLBACK;

-- This transaction acknowledges 6, leased for an hour, which locks its
-- lease row; receive() then delivers 1..4 again, due now: it does not
-- touch the row of 6, and does not wait.
SELECT receipt AS r6 FROM ordered_events.receive('lt_c', 1) \gset
UPDATE ordered_events.lease SET visible_until = '-infinity'
 WHERE state = 'leased'
   AND NOT EXISTS (SELECT FROM ordered_events.lease_events(events, done) e WHERE e.seq = 6);
BEGIN;
SELECT ordered_events.ack('lt_c', ARRAY[:r6]::bigint[]);
SELECT seq, attempt FROM ordered_events.receive('lt_c') ORDER BY seq;
COMMIT;
SELECT * FROM pg_temp.leases();

-- Here receive() must deliver 1 and 2 again, from the lease row whose 3
-- this transaction returned: the worker would wait for this transaction,
-- which waits for the worker.  The caller sees it: 40P01.
UPDATE ordered_events.lease SET visible_until = '-infinity' WHERE state = 'leased';
SELECT array_agg(receipt ORDER BY seq) AS rs FROM ordered_events.receive('lt_c', 3, visibility => '0 s') \gset
SET deadlock_timeout = '10ms';
BEGIN;
SELECT ordered_events.nack('lt_c', ARRAY[(:'rs'::bigint[])[3]], '1 h');
\set VERBOSITY terse
SELECT seq, attempt FROM ordered_events.receive('lt_c');
\set VERBOSITY default
ROLLBACK;
RESET deadlock_timeout;
-- nothing was delivered, the nack() was rolled back: all four come now,
-- one attempt more
SELECT seq, attempt FROM ordered_events.receive('lt_c') ORDER BY seq;
SELECT ordered_events.drop_consumer('lt_c');
SELECT ordered_events.drop_stream('lt_s');
