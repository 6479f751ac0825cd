--
-- docs_operating: the SQL examples of docs/operating.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
SELECT ordered_events.create_stream('orders');

SELECT ordered_events.create_stream('clicks', retention => '1 day');
SELECT ordered_events.alter_stream('orders', retention => '7 days',
                                   dead_letter_retention => '30 days');
SELECT ordered_events.alter_stream('orders', keep_forever => true);   -- keep everything again

SELECT ordered_events.create_stream('audit', retention => '0 s');
SELECT ordered_events.create_consumer('archiver');
SELECT ordered_events.subscribe('archiver', 'audit');
INSERT INTO ordered_events.inbox (stream, seq, key) SELECT 'audit', g, 'k' FROM generate_series(1, 10) g;
SELECT ordered_events.release('audit');     -- 10, one run
INSERT INTO ordered_events.inbox (stream, seq, key) SELECT 'audit', g, 'k' FROM generate_series(11, 20) g;
SELECT ordered_events.release('audit');     -- 10, a second run
SELECT count(*) FROM ordered_events.read('archiver', 15);
--  15
SELECT ordered_events.compact('audit');     -- the worker does this by itself
--  10                                          the first run; archiver has not read all of the second
SELECT min(seq), count(*) FROM ordered_events.released WHERE stream = 'audit';
--  11 | 10
SELECT ordered_events.ingest('audit', 5, 'k');
--  duplicate                                   detail: Seq 5 was already released.
SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'audit';
--  20
SELECT ordered_events.create_consumer('newcomer');
SELECT ordered_events.subscribe('newcomer', 'audit');
SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'newcomer';
--  10                                          seqs 11 to 20

SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['archiver', 'newcomer']) c;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['clicks', 'audit']) s;
-- "Running without the worker".  pg_cron is not installed here: this
-- cron.schedule() runs the job's command once, as pg_cron's job would.
CREATE SCHEMA cron;
CREATE FUNCTION cron.schedule(job_name text, schedule text, command text) RETURNS bigint
LANGUAGE plpgsql AS $$ BEGIN EXECUTE command; RETURN 1; END $$;
SELECT ordered_events.ingest('orders', 1, 'k');

SELECT cron.schedule('ordered-events', '* * * * *',
                     $$SELECT ordered_events.release(); SELECT ordered_events.compact()$$);

SELECT ordered_events.ingest('orders', 2, 'k'), ordered_events.ingest('orders', 3, 'k');

DO $$ BEGIN WHILE ordered_events.release() > 0 LOOP PERFORM ordered_events.compact(); COMMIT; END LOOP; END $$;

SELECT range_end FROM ordered_events.ranges WHERE stream = 'orders';
-- a handler consumer order_fsm, as in docs/handlers.md
CREATE FUNCTION pg_temp.count_events(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE sql
AS $$ SELECT (pg_catalog.to_jsonb(coalesce((state ->> 'n')::int, 0) + 1), NULL)::ordered_events.step $$;
SELECT ordered_events.create_consumer('order_fsm', handler => 'pg_temp.count_events(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('order_fsm', 'orders');

DO $$ BEGIN WHILE ordered_events.process('order_fsm', 1000, 0) > 0 LOOP COMMIT; END LOOP; END $$;

SELECT key, processed_count FROM ordered_events.key_state WHERE consumer = 'order_fsm';
-- "Sizing": sizes and times are not printed
\o /dev/null

-- released events kept per stream (a role with pg_monitor may run it)
SELECT r.stream, s.retention, r.value - d.value AS kept_released
  FROM ordered_events.metrics r
  JOIN ordered_events.metrics d
    ON d.stream = r.stream AND d.metric = 'ordered_events_deleted_events_total'
  JOIN ordered_events.streams s ON s.stream = r.stream
 WHERE r.metric = 'ordered_events_released_events_total';

-- the extension's tables: rows, dead rows, size, last autovacuum
SELECT relname, n_live_tup, n_dead_tup, pg_size_pretty(pg_total_relation_size(relid)) AS size,
       last_autovacuum
  FROM pg_stat_user_tables
 WHERE schemaname = 'ordered_events'
 ORDER BY pg_total_relation_size(relid) DESC;

\o
-- "Vacuum"

  ALTER TABLE ordered_events.event_store
    SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

ALTER TABLE ordered_events.event_store
  RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay);
SELECT ordered_events.drop_consumer('order_fsm');
SELECT ordered_events.drop_stream('orders');
DROP SCHEMA cron CASCADE;
