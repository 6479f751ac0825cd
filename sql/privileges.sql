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
CREATE ROLE regress_oe_monitor;
GRANT USAGE ON SCHEMA ordered_events
   TO regress_oe_producer, regress_oe_consumer, regress_oe_operator, regress_oe_monitor;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
                          ordered_events.append(text, text, jsonb, timestamptz) TO regress_oe_producer;
GRANT INSERT ON ordered_events.inbox TO regress_oe_producer;
GRANT SELECT ON ordered_events.released, ordered_events.stream_stats TO regress_oe_consumer;
GRANT EXECUTE ON FUNCTION ordered_events.create_stream(text, text, bigint, text, interval, integer),
                          ordered_events.alter_stream(text, text, interval, integer),
                          ordered_events.drop_stream(text),
                          ordered_events.release(text),
                          ordered_events.skip_gap(text, bigint, text, text) TO regress_oe_operator;
GRANT SELECT ON ordered_events.stream_stats, ordered_events.key_status,
                ordered_events.worker_status TO regress_oe_monitor;
GRANT EXECUTE ON FUNCTION ordered_events.worker_status_internal() TO regress_oe_monitor;

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
INSERT INTO ordered_events.event (stream_id, lane, last_event, seq, event_ts, alignment_ts, received_at, key)
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
SELECT count(*) FROM ordered_events.event;
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

-- PUBLIC may not write, nor call the internal functions
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND p.proname IN ('create_stream', 'alter_stream', 'drop_stream', 'ingest', 'append',
                     'release', 'skip_gap', 'gaps', 'blockers', 'blocking_transactions',
                     'inbox_insert', 'stream_def_changed', 'worker_status_internal',
                     'stream_id')
 ORDER BY p.proname;

SELECT ordered_events.drop_stream('priv_o'), ordered_events.drop_stream('priv_f');
DROP OWNED BY regress_oe_producer, regress_oe_consumer, regress_oe_operator, regress_oe_monitor;
DROP ROLE regress_oe_producer, regress_oe_consumer, regress_oe_operator, regress_oe_monitor;
