--
-- Writing functions honour READ ONLY transactions like any write: 25006,
-- and nothing is written.  (On a hot standby too: test/t/014.)
--
\set VERBOSITY sqlstate
SELECT ordered_events.create_stream('ro');
SELECT ordered_events.create_stream('ro_fence', gap_policy => 'fence');
SELECT ordered_events.ingest('ro', 2, 'k');

BEGIN READ ONLY;
SELECT ordered_events.ingest('ro', 1, 'k');
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.ingest('ro', 2, 'k');     -- a duplicate would be a dead letter
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.append('ro_fence', 'k');
ROLLBACK;
BEGIN READ ONLY;
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('ro', 1, 'k');
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.release('ro');
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.release();
ROLLBACK;
BEGIN READ ONLY;
SELECT ordered_events.skip_gap('ro', 1, 'lost');
ROLLBACK;
SET default_transaction_read_only = on;
SELECT ordered_events.ingest('ro', 1, 'k');
RESET default_transaction_read_only;

-- nothing was written; reading works in a read-only transaction
BEGIN READ ONLY;
SELECT stream, range_end, pending_count, released_count, unprocessed_count, skipped_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'ro%' ORDER BY stream;
SELECT * FROM ordered_events.gaps('ro');
COMMIT;

SELECT ordered_events.drop_stream('ro'), ordered_events.drop_stream('ro_fence');
