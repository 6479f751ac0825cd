--
-- docs_monitoring: the SQL examples of docs/monitoring.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
-- The queries run on a stream with a gap, a dead letter, a consumer and a
-- handler consumer; what they return holds times, so it is not printed.
SELECT ordered_events.create_stream('orders');
SELECT ordered_events.ingest('orders', 1, 'k'), ordered_events.ingest('orders', 3, 'k'),
       ordered_events.ingest('orders', 3, 'k');
SELECT ordered_events.release('orders');
SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'orders');
\o /dev/null

-- one row per stream: backlog, dead letters, the first gap and since when
SELECT * FROM ordered_events.stream_stats;

-- streams blocked for more than a minute, and by whom
SELECT s.stream, s.first_gap_start, now() - s.first_gap_since AS blocked_for, b.*
  FROM ordered_events.stream_stats s
  LEFT JOIN LATERAL ordered_events.blockers(s.stream) b ON true
 WHERE s.first_gap_since < now() - interval '1 minute';

-- the workers
SELECT * FROM ordered_events.worker_status;

-- dead letters by reason
SELECT stream, reason, count(*) FROM ordered_events.unprocessed GROUP BY 1, 2;

-- consumers: unread events, and since when the oldest of them was released
SELECT consumer, partition, stream, unread_count, now() - oldest_unread_at AS behind, last_read_at
  FROM ordered_events.consumers;

-- handler consumers: keys, events applied and failed; dead letters per consumer
SELECT consumer, count(*) AS keys, sum(processed_count) AS applied,
       sum(error_count) AS failed, max(updated_at) AS last_applied_at
  FROM ordered_events.key_state GROUP BY consumer;
SELECT consumer, left(detail, 60), count(*)
  FROM ordered_events.unprocessed WHERE consumer IS NOT NULL GROUP BY 1, 2;

-- what is the worker doing, and how fast
SELECT database, state, current_stream, current_consumer, last_cycle_duration,
       round(released_per_second) AS released_s, round(processed_per_second) AS processed_s
  FROM ordered_events.worker_status;

-- the processing workers: which consumer partition, and how fast it applies
SELECT database, current_consumer, partition, state, processed_total,
       round(processed_per_second) AS processed_s, last_cycle_at
  FROM ordered_events.worker_status
 WHERE kind = 'process'
 ORDER BY database, current_consumer, partition;

SELECT * FROM ordered_events.consumers;
--  consumer | partition |  stream   |  delay   | consumed_count | unread_count |   bias    | oldest_unread_at | last_read_at

-- consumers with events released more than a minute ago still unread
SELECT consumer, partition, stream, unread_count, now() - oldest_unread_at AS behind
  FROM ordered_events.consumers
 WHERE oldest_unread_at < now() - interval '1 minute';

-- a stream blocked by a gap for more than 5 minutes, and by whom
SELECT s.stream, s.first_gap_start, now() - s.first_gap_since AS blocked_for, b.pid, b.state
  FROM ordered_events.stream_stats s
  LEFT JOIN LATERAL ordered_events.blockers(s.stream) b ON true
 WHERE s.first_gap_since < now() - interval '5 minutes';

-- a consumer lagging: many unread events, or the oldest released long ago
SELECT consumer, partition, stream, unread_count, now() - oldest_unread_at AS behind, last_read_at
  FROM ordered_events.consumers
 WHERE unread_count > 10000 OR oldest_unread_at < now() - interval '15 minutes';

-- dead letters of the last 15 minutes: rejections (consumer NULL) and
-- handler errors (needs SELECT on unprocessed; with pg_monitor alone,
-- compare the dead-letter rows of metrics between two checks)
SELECT stream, consumer, reason, count(*)
  FROM ordered_events.unprocessed
 WHERE received_at > now() - interval '15 minutes'
 GROUP BY 1, 2, 3;

-- the worker: not running, an error since it started, or no cycle ended
-- for 5 minutes (idle, it cycles every ordered_events.naptime)
SELECT database, pid, state, current_stream, current_consumer, last_cycle_at, last_error
  FROM ordered_events.worker_status
 WHERE pid IS NULL OR last_error IS NOT NULL OR last_cycle_at < now() - interval '5 minutes';

-- retention: released events kept per stream with a retention, and the
-- subscriptions holding them back (the oldest unread first)
SELECT r.stream, s.retention, r.value - d.value AS kept_released
  FROM ordered_events.metrics r
  JOIN ordered_events.metrics d
    ON d.stream = r.stream AND d.metric = 'ordered_events_deleted_events_total'
  JOIN ordered_events.streams s ON s.stream = r.stream
 WHERE r.metric = 'ordered_events_released_events_total' AND s.retention IS NOT NULL;
SELECT c.consumer, c.partition, c.stream, c.unread_count, c.oldest_unread_at
  FROM ordered_events.consumers c
  JOIN ordered_events.streams s ON s.stream = c.stream
 WHERE s.retention IS NOT NULL AND c.unread_count > 0
 ORDER BY c.oldest_unread_at;

\o
SELECT ordered_events.drop_consumer('billing');
SELECT ordered_events.drop_stream('orders');
