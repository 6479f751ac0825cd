--
-- The privileges of README.md: a producer and a consumer role need only
-- what is granted there; writing and releasing are not for PUBLIC.
--
\set VERBOSITY terse
SELECT ordered_events.create_stream('priv_o');
SELECT ordered_events.create_stream('priv_f', gap_policy => 'fence');
CREATE ROLE regress_oe_producer;
CREATE ROLE regress_oe_consumer;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_producer;
GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
                          ordered_events.append(text, text, jsonb, timestamptz) TO regress_oe_producer;
GRANT SELECT ON ordered_events.stream_def, ordered_events.gap_skips TO regress_oe_producer;
GRANT INSERT ON ordered_events.unprocessed, ordered_events.inbox TO regress_oe_producer;
GRANT USAGE ON SCHEMA ordered_events TO regress_oe_consumer;
GRANT SELECT ON ordered_events.released, ordered_events.stream_stats TO regress_oe_consumer;

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
RESET ROLE;
SELECT ordered_events.release('priv_o'), ordered_events.release('priv_f');

-- the consumer reads the ordered view and the statistics, and writes nothing
SET ROLE regress_oe_consumer;
SELECT stream, seq, key FROM ordered_events.released WHERE stream LIKE 'priv_%';
SELECT stream, range_end, pending_count, released_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream LIKE 'priv_%' ORDER BY stream;
SELECT count(*) FROM ordered_events.blockers('priv_o');
SELECT ordered_events.ingest('priv_o', 9, 'k');
SELECT count(*) FROM ordered_events.events;
RESET ROLE;

-- PUBLIC may not write
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'ordered_events'::regnamespace
   AND p.proname IN ('create_stream', 'alter_stream', 'drop_stream', 'ingest', 'append',
                     'release', 'skip_gap', 'gaps', 'blockers')
 ORDER BY p.proname;

SELECT ordered_events.drop_stream('priv_o'), ordered_events.drop_stream('priv_f');
DROP OWNED BY regress_oe_producer, regress_oe_consumer;
DROP ROLE regress_oe_producer, regress_oe_consumer;
