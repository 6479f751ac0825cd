--
-- consumer_wait: read(..., wait) and released_at (docs/consuming.md,
-- "Waiting reads"; a read woken by a release in another session is TAP
-- test/t/043_waiting_read.pl, the per-consumer channels the isolation spec
-- consumer_notify).
--   A read with events returns at once, whatever its wait; with nothing
--   unread it returns nothing once the wait is over (recorded: at least
--   the wait went by); released_at is the release step's time.
--   Errors: NULL wait 22004, a wait below 0 or above 1 hour 22023, a wait
--   in REPEATABLE READ or SERIALIZABLE 25000; another role's read is 42501
--   at once, waiting for nothing.
--
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT ordered_events.create_stream('cw_s');
SELECT ordered_events.create_consumer('cw_c');
SELECT ordered_events.subscribe('cw_c', 'cw_s', start => 'beginning');
SELECT ordered_events.ingest('cw_s', 1, 'k1'), ordered_events.ingest('cw_s', 2, 'k2');
SELECT ordered_events.release('cw_s');

-- released_at: the time of the log row each event was released in
SELECT r.seq, r.released_at = l.released_at AS released_at_of_its_step
  FROM ordered_events.peek('cw_c') r
  JOIN ordered_events.lane_release_log l
    ON l.stream_id = ordered_events.stream_id('cw_s') AND r.seq >= l.seq_start AND r.seq < l.seq_end
 ORDER BY r.seq;

-- events unread: returned at once, however long the wait
SELECT seq, key, clock_timestamp() - statement_timestamp() < interval '1 hour' AS at_once
  FROM ordered_events.read('cw_c', 10, 0, wait => '1 hour');

-- nothing unread: nothing, after the wait
SELECT count(*) AS events, clock_timestamp() - statement_timestamp() >= interval '20 ms' AS waited
  FROM ordered_events.read('cw_c', 10, 0, wait => '20 ms');
-- a wait of 0 (the default) does not wait
SELECT count(*) AS events FROM ordered_events.read('cw_c', 10, 0, wait => '0 s');

-- errors, each before anything is read
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => NULL);
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '-1 s');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '1 hour 1 s');
\echo SQLSTATE :SQLSTATE
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '1 mon');
\echo SQLSTATE :SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '1 s');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '1 s');
\echo SQLSTATE :SQLSTATE
ROLLBACK;
-- in REPEATABLE READ a read that does not wait works
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS events FROM ordered_events.read('cw_c', 10, 0);
ROLLBACK;

-- another role may not read (or wait on) the consumer: 42501 at once
CREATE ROLE regress_oe_cw_owner;
CREATE ROLE regress_oe_cw_other;
SELECT ordered_events.grant_stream('cw_s', 'read', 'regress_oe_cw_owner');
SELECT ordered_events.alter_consumer('cw_c', owner => 'regress_oe_cw_owner');
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_cw_other;
GRANT EXECUTE ON FUNCTION ordered_events.read(text, integer, integer, interval) TO regress_oe_cw_other;
SET ROLE regress_oe_cw_other;
SELECT * FROM ordered_events.read('cw_c', 10, 0, wait => '1 hour');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
DROP OWNED BY regress_oe_cw_other;
DROP ROLE regress_oe_cw_other;
SELECT ordered_events.alter_consumer('cw_c', owner => current_user::regrole);
SELECT ordered_events.revoke_stream('cw_s', 'read', 'regress_oe_cw_owner');
DROP ROLE regress_oe_cw_owner;

-- nothing of the above consumed anything more: the position is after seq 2
SELECT stream, consumed_count, unread_count FROM ordered_events.consumers WHERE consumer = 'cw_c';

-- docs/consuming.md: a client that LISTENs on a consumer's channel
LISTEN "ordered_events.billing";
UNLISTEN *;

SELECT ordered_events.drop_consumer('cw_c');
SELECT ordered_events.drop_stream('cw_s');
