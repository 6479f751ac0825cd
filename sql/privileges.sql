--
-- The privileges of README.md ("Security"): each role needs only what is
-- granted there.  The functions' EXECUTE privilege is the gate: a producer
-- needs no rights on the internal tables (and cannot forge their rows), an
-- operator none either; writing and releasing are not for PUBLIC.
--
\set VERBOSITY terse
SELECT ordered_events.create_stream('priv_o');
SELECT ordered_events.create_stream('priv_f', gap_policy => 'fence');
CREATE ROLE regress_oe_producer;
CREATE ROLE regress_oe_consumer;
CREATE ROLE regress_oe_operator;
-- the monitor has pg_monitor and nothing else: the extension grants it
-- the views that show state (README.md, "Security")
CREATE ROLE regress_oe_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA ordered_events
   TO regress_oe_producer, regress_oe_consumer, regress_oe_operator;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
                          ordered_events.append(text, text, jsonb, timestamptz) TO regress_oe_producer;
GRANT INSERT ON ordered_events.inbox TO regress_oe_producer;
GRANT SELECT ON ordered_events.released, ordered_events.stream_stats TO regress_oe_consumer;
GRANT EXECUTE ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval),
                          ordered_events.alter_stream(text, text, interval, integer, interval, interval, boolean),
                          ordered_events.drop_stream(text),
                          ordered_events.release(text),
                          ordered_events.skip_gap(text, bigint, text, text) TO regress_oe_operator;

-- the producer writes by every path, rejected events included
SET ROLE regress_oe_producer;
SELECT ordered_events.ingest('priv_o', 1, 'k');
SELECT ordered_events.ingest('priv_o', 1, 'k');
SELECT ordered_events.ingest('priv_o', 3, 'k');
SELECT ordered_events.append('priv_f', 'k');
INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('priv_o', 2, 'k'), ('priv_o', 0, 'k');
-- ... but does not release, create or skip
SELECT ordered_events.release('priv_o');
SELECT ordered_events.create_stream('priv_x');
SELECT ordered_events.skip_gap('priv_o', 5, 'no');
-- ... nor read or write the tables: no forged dead letter, no forged event
INSERT INTO ordered_events.unprocessed (stream, seq, key, reason)
VALUES ('priv_o', 7, 'k', 'duplicate');
INSERT INTO ordered_events.event_store (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key)
VALUES (1, '', false, 7, now(), now(), now(), 'k');
SELECT count(*) FROM ordered_events.stream_def;
RESET ROLE;
SELECT stream, seq, reason FROM ordered_events.unprocessed WHERE stream LIKE 'priv_%' ORDER BY seq;

-- the operator manages streams and releases with EXECUTE alone
SET ROLE regress_oe_operator;
SELECT ordered_events.create_stream('priv_op', gap_policy => 'fence');
SELECT ordered_events.alter_stream('priv_o', max_release_batch => 100);
SELECT ordered_events.release('priv_o'), ordered_events.release('priv_f');
SELECT ordered_events.skip_gap('priv_o', 0, 'nothing to skip');
SELECT ordered_events.drop_stream('priv_op');
SELECT ordered_events.ingest('priv_o', 9, 'k');
RESET ROLE;

-- the consumer reads the ordered view and the statistics, and writes nothing
SET ROLE regress_oe_consumer;
SELECT stream, seq, key FROM ordered_events.released WHERE stream LIKE 'priv_%';
SELECT stream, range_end, pending_count, released_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'priv_%' ORDER BY stream;
SELECT count(*) FROM ordered_events.blockers('priv_o');
SELECT ordered_events.ingest('priv_o', 9, 'k');
SELECT count(*) FROM ordered_events.event_store;
SELECT count(*) FROM ordered_events.worker_status;
RESET ROLE;

-- the monitor reads the statistics and the worker's state
SET ROLE regress_oe_monitor;
SELECT stream, pending_count FROM ordered_events.stream_stats WHERE stream LIKE 'priv_%' ORDER BY stream;
SELECT key, received_count FROM ordered_events.key_status WHERE stream = 'priv_o';
SELECT count(*) >= 0 AS readable FROM ordered_events.worker_status;
RESET ROLE;

-- trigger functions belong to the extension's own triggers
CREATE TABLE priv_t (a integer);
CREATE TABLE priv_t2 (a integer);
ALTER TABLE priv_t2 OWNER TO regress_oe_operator;
SET ROLE regress_oe_operator;
CREATE TRIGGER t AFTER INSERT ON priv_t2 FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();
RESET ROLE;
CREATE TRIGGER t AFTER INSERT ON priv_t FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();
INSERT INTO priv_t VALUES (1);
DROP TRIGGER t ON priv_t;
CREATE TRIGGER t BEFORE INSERT ON priv_t FOR EACH ROW EXECUTE FUNCTION ordered_events.stream_def_changed();
INSERT INTO priv_t VALUES (1);
DROP TABLE priv_t, priv_t2;

-- consumers (0.2): the operator creates and subscribes consumers, the
-- consumer role reads them with EXECUTE on read() and peek() alone, the
-- monitor watches the consumers view
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text),
                          ordered_events.drop_consumer(text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.unsubscribe(text, text) TO regress_oe_operator;
GRANT EXECUTE ON FUNCTION ordered_events.read(text, integer, integer),
                          ordered_events.peek(text, integer, integer) TO regress_oe_consumer;
CREATE ROLE regress_oe_nobody;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_nobody;
SET ROLE regress_oe_operator;
SELECT ordered_events.create_stream('priv_c');
RESET ROLE;
SET ROLE regress_oe_producer;
SELECT ordered_events.ingest('priv_c', s, 'k' || s, NULL,
                             '2024-01-01 10:00:00+00'::timestamptz + s * interval '1 s',
                             '2024-01-01 10:00:00+00'::timestamptz + s * interval '1 s')
  FROM generate_series(1, 3) s;
RESET ROLE;
SET ROLE regress_oe_operator;
SELECT ordered_events.release('priv_c');
SELECT ordered_events.create_consumer('priv_cons');
SELECT ordered_events.subscribe('priv_cons', 'priv_c');
SELECT ordered_events.create_consumer('priv_cons2', 2);
SELECT ordered_events.subscribe('priv_cons2', 'priv_c', '1 s', 'now');
SELECT ordered_events.unsubscribe('priv_cons2', 'priv_c');
SELECT ordered_events.drop_consumer('priv_cons2');
-- ... but does not read
SELECT * FROM ordered_events.read('priv_cons');
SELECT * FROM ordered_events.peek('priv_cons');
RESET ROLE;
SET ROLE regress_oe_consumer;
SELECT stream, seq, key FROM ordered_events.peek('priv_cons');
SELECT stream, seq, key FROM ordered_events.read('priv_cons', 2);
SELECT stream, seq, key FROM ordered_events.read('priv_cons');
-- ... but does not manage consumers, nor see their tables or the view
SELECT ordered_events.create_consumer('priv_x');
SELECT ordered_events.subscribe('priv_cons', 'priv_o');
SELECT ordered_events.unsubscribe('priv_cons', 'priv_c');
SELECT ordered_events.drop_consumer('priv_cons');
SELECT count(*) FROM ordered_events.subscription;
SELECT count(*) FROM ordered_events.consumer_def;
SELECT count(*) FROM ordered_events.consumers;
RESET ROLE;
SET ROLE regress_oe_monitor;
SELECT consumer, partition, stream, consumed_count, unread_count, last_read_at IS NOT NULL AS has_read
  FROM ordered_events.consumers;
SELECT * FROM ordered_events.peek('priv_cons');
RESET ROLE;
-- without EXECUTE: insufficient_privilege, 42501
\set VERBOSITY sqlstate
SET ROLE regress_oe_producer;
SELECT * FROM ordered_events.read('priv_cons');
RESET ROLE;
SET ROLE regress_oe_monitor;
SELECT * FROM ordered_events.read('priv_cons');
RESET ROLE;
\set VERBOSITY terse
-- a role with PUBLIC's rights only may compute partitions, nothing else
SET ROLE regress_oe_nobody;
SELECT * FROM ordered_events.read('priv_cons');
SELECT * FROM ordered_events.peek('priv_cons');
SELECT ordered_events.create_consumer('priv_x');
SELECT ordered_events.drop_consumer('priv_cons');
SELECT ordered_events.subscribe('priv_cons', 'priv_o');
SELECT ordered_events.unsubscribe('priv_cons', 'priv_c');
SELECT count(*) FROM ordered_events.consumers;
SELECT ordered_events.key_partition('k1', 4) = (hashtextextended('k1', 0) & 9223372036854775807) % 4
    AS key_partition_works;
RESET ROLE;
SELECT consumer, stream, consumed_count, unread_count FROM ordered_events.consumers;

-- handlers (0.2, README.md "Security"): the handler owner creates a handler
-- consumer with its own function, the processor applies its events with
-- EXECUTE on process() alone (the handler runs as its owner, not as the
-- processor), the reporting role reads key_state and results; none of
-- them may do the others' part, and a role with PUBLIC's rights none
CREATE ROLE regress_oe_handler_owner;
CREATE ROLE regress_oe_processor;
CREATE ROLE regress_oe_reporting;
GRANT USAGE ON SCHEMA ordered_events
   TO regress_oe_handler_owner, regress_oe_processor, regress_oe_reporting;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text),
                          ordered_events.subscribe(text, text, interval, text),
                          ordered_events.drop_consumer(text) TO regress_oe_handler_owner;
GRANT EXECUTE ON FUNCTION ordered_events.process(text, integer, integer) TO regress_oe_processor;
GRANT SELECT ON ordered_events.key_state, ordered_events.results TO regress_oe_reporting;
CREATE FUNCTION public.priv_whoami(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1), to_jsonb(current_user::text))::ordered_events.step
$$;
ALTER FUNCTION public.priv_whoami(jsonb, ordered_events.event) OWNER TO regress_oe_handler_owner;
REVOKE EXECUTE ON FUNCTION public.priv_whoami(jsonb, ordered_events.event) FROM PUBLIC;
SET ROLE regress_oe_handler_owner;
SELECT ordered_events.create_consumer('priv_h', handler => 'public.priv_whoami(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('priv_h', 'priv_c');
-- ... but does not process, nor read the states and results
SELECT ordered_events.process('priv_h');
SELECT count(*) FROM ordered_events.key_state;
SELECT count(*) FROM ordered_events.results;
RESET ROLE;
SET ROLE regress_oe_processor;
SELECT ordered_events.process('priv_h', 2);
-- ... but reads no state or result, and cannot read the consumer
SELECT count(*) FROM ordered_events.key_state;
SELECT count(*) FROM ordered_events.results;
SELECT count(*) FROM ordered_events.handler_state;
SELECT * FROM ordered_events.peek('priv_h');
RESET ROLE;
SET ROLE regress_oe_reporting;
-- the handler ran as its owner
SELECT key, result FROM ordered_events.results WHERE consumer = 'priv_h' ORDER BY position;
SELECT key, state, processed_count FROM ordered_events.key_state WHERE consumer = 'priv_h' ORDER BY key;
SELECT ordered_events.process('priv_h');
SELECT count(*) FROM ordered_events.handler_result;
RESET ROLE;
SET ROLE regress_oe_nobody;
SELECT ordered_events.process('priv_h');
SELECT count(*) FROM ordered_events.key_state;
SELECT count(*) FROM ordered_events.results;
RESET ROLE;
-- nothing was applied but by the processor: 1 event left
SELECT ordered_events.process('priv_h');
-- pg_monitor (0.2): the role with pg_monitor alone reads every monitoring
-- view and the metrics of a handler consumer and a plain one (a gap's age
-- shown as whether there is one), but no
-- event, state or result, and neither reads nor processes
SET ROLE regress_oe_monitor;
SELECT count(*) > 0 AS streams FROM ordered_events.streams WHERE stream LIKE 'priv_%';
SELECT count(*) > 0 AS ranges FROM ordered_events.ranges WHERE stream LIKE 'priv_%';
SELECT count(*) >= 0 AS skipped_gaps FROM ordered_events.skipped_gaps;
SELECT count(*) > 0 AS stream_stats FROM ordered_events.stream_stats WHERE stream LIKE 'priv_%';
SELECT count(*) > 0 AS key_status FROM ordered_events.key_status WHERE stream LIKE 'priv_%';
SELECT consumer, stream, unread_count FROM ordered_events.consumers
 WHERE consumer LIKE 'priv_%' ORDER BY consumer, stream;
SELECT count(*) >= 0 AS worker_status FROM ordered_events.worker_status;
SELECT metric, type, stream, consumer,
       CASE WHEN metric = 'ordered_events_gap_age_seconds' THEN (value > 0)::integer
            ELSE value END AS value
  FROM ordered_events.metrics
 WHERE stream LIKE 'priv_%' OR consumer LIKE 'priv_%'
 ORDER BY metric, stream, consumer;
\set VERBOSITY sqlstate
SELECT count(*) FROM ordered_events.pending;
SELECT count(*) FROM ordered_events.released;
SELECT count(*) FROM ordered_events.key_state;
SELECT count(*) FROM ordered_events.results;
SELECT count(*) FROM ordered_events.unprocessed;
SELECT ordered_events.process('priv_h');
SELECT * FROM ordered_events.read('priv_cons');
SELECT ordered_events.release('priv_c');
\set VERBOSITY terse
RESET ROLE;
-- what pg_monitor may read and call: the monitoring views and the
-- function behind worker_status, nothing more
SELECT c.relname AS pg_monitor_may_select
  FROM pg_class c
 WHERE c.relnamespace = 'ordered_events'::regnamespace
   AND has_table_privilege('pg_monitor', c.oid, 'SELECT')
 ORDER BY c.relname;
SELECT p.proname AS pg_monitor_may_execute_beyond_public
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND has_function_privilege('pg_monitor', p.oid, 'EXECUTE')
   AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY p.proname;
SET ROLE regress_oe_handler_owner;
SELECT ordered_events.drop_consumer('priv_h');
RESET ROLE;
DROP FUNCTION public.priv_whoami(jsonb, ordered_events.event);

-- PUBLIC may not write, nor call the internal functions
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND p.proname IN ('create_stream', 'alter_stream', 'drop_stream', 'ingest', 'append',
                     'release', 'skip_gap', 'gaps', 'blockers', 'blocking_transactions',
                     'inbox_insert', 'stream_def_changed', 'worker_report',
                     'stream_id',
                     'create_consumer', 'drop_consumer', 'subscribe', 'unsubscribe', 'read',
                     'peek', 'key_partition', 'count_released', 'forget_unused_totals',
                     'lock_streams', 'consumer_or_error', 'check_not_null', 'lag_us',
                     'process', 'check_handler', 'define_consumer', 'output_stream_or_error',
                     'consumers_with_work')
 ORDER BY p.proname;

SELECT has_table_privilege('public', c.oid, 'SELECT') AS public_may_select, c.relname
  FROM pg_class c
 WHERE c.relnamespace = 'ordered_events'::regnamespace
   AND c.relname IN ('consumers', 'consumer_def', 'subscription', 'release_totals',
                     'key_state', 'results', 'handler_state', 'handler_result',
                     'result_position_seq')
 ORDER BY c.relname;

SELECT ordered_events.drop_consumer('priv_cons');
SELECT ordered_events.drop_stream('priv_o'), ordered_events.drop_stream('priv_f'),
       ordered_events.drop_stream('priv_c');
DROP OWNED BY regress_oe_producer, regress_oe_consumer, regress_oe_operator, regress_oe_monitor,
              regress_oe_nobody, regress_oe_handler_owner, regress_oe_processor, regress_oe_reporting;
DROP ROLE regress_oe_producer, regress_oe_consumer, regress_oe_operator, regress_oe_monitor,
          regress_oe_nobody, regress_oe_handler_owner, regress_oe_processor, regress_oe_reporting;
