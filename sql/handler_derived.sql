--
-- handler_derived: derived events (docs/handlers.md, "Derived events";
-- docs/architecture.md, rule 12; YTsaurus Flow's derived messages).  A handler consumer with output_stream appends each
-- result to that fence stream: key = the parent's key (the lineage key),
-- payload = the result, seq allocated in processing order, event_ts = the
-- parent's, alignment_ts = the parent's (alignment 'inherit') or the
-- processing step's start time, never below the output stream's last
-- alignment_ts ('processing').  The lineage guarantee: if a precedes b with
-- the same key, a' precedes b' in the output stream and in every consumer
-- of it.
--
-- Parents are written (alignment_ts) in 2000, so that a processing time is
-- above them whatever the machine's clock; processing times are compared
-- with clock readings around the step, never printed.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- s seconds after 2000-01-01.
CREATE FUNCTION pg_temp.at(s numeric)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT timestamptz '2000-01-01 00:00:00+00' + s * interval '1 s'
$$;

-- Event at seq s: happened at s seconds, written at 10 * s seconds.
CREATE FUNCTION pg_temp.ev(stream text, seq bigint, key text, word text)
RETURNS ordered_events.outcome
LANGUAGE sql AS $$
    SELECT ordered_events.ingest(stream, seq, key, to_jsonb(word), pg_temp.at(seq), pg_temp.at(10 * seq))
$$;

-- The derived event says where it comes from; the state counts a key's
-- events.
CREATE FUNCTION public.hd_derive(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1),
               jsonb_build_object('of', e.stream || '/' || e.seq, 'word', e.payload))::ordered_events.step
$$;

-- A downstream handler: the words of a key's events, concatenated in the
-- order it receives them.
CREATE FUNCTION public.hd_concat(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state #>> '{}', '') || (e.payload ->> 'word')), NULL)::ordered_events.step
$$;

-- The events of a stream, pending or released, in seq order, with their
-- times as seconds after 2000-01-01 (NULL: not a time of this test).
CREATE FUNCTION pg_temp.events(s text)
RETURNS TABLE (seq bigint, key text, payload jsonb, event_s numeric, alignment_s numeric,
               released boolean)
LANGUAGE sql AS $$
    SELECT e.seq, e.key, e.payload,
           extract(epoch FROM e.event_ts - pg_temp.at(0)),
           CASE WHEN e.alignment_ts < pg_temp.at(86400)
                THEN extract(epoch FROM e.alignment_ts - pg_temp.at(0)) END,
           e.released
      FROM (SELECT p.seq, p.key, p.payload, p.event_ts, p.alignment_ts, false AS released
              FROM ordered_events.pending p WHERE p.stream = s
            UNION ALL
            SELECT r.seq, r.key, r.payload, r.event_ts, r.alignment_ts, true
              FROM ordered_events.released r WHERE r.stream = s) e
     ORDER BY e.seq
$$;

--
-- alignment 'inherit' (Flow's map).  Input hd_in: a (key k) 1, c (key j) 2,
-- b (key k) 3.  Output hd_out: a' 1, c' 2, b' 3 with the parents' keys,
-- event_ts 1, 2, 3 and alignment_ts 10, 20, 30.  They are appended, pending
-- until the fence stream is released.
--
SELECT ordered_events.create_stream('hd_in'),
       ordered_events.create_stream('hd_out', gap_policy => 'fence');
SELECT pg_temp.ev('hd_in', 1, 'k', 'a'), pg_temp.ev('hd_in', 2, 'j', 'c'),
       pg_temp.ev('hd_in', 3, 'k', 'b');
SELECT ordered_events.release('hd_in');
SELECT ordered_events.create_consumer('hd_map', handler => 'public.hd_derive(jsonb, ordered_events.event)',
                                      output_stream => 'hd_out');
SELECT ordered_events.subscribe('hd_map', 'hd_in');
SELECT ordered_events.process('hd_map');
SELECT * FROM pg_temp.events('hd_out');
-- the results go to the output stream only
SELECT count(*) AS results FROM ordered_events.results WHERE consumer = 'hd_map';
-- the state is kept as without output stream
SELECT key, state, last_seq, processed_count FROM ordered_events.key_state
 WHERE consumer = 'hd_map' ORDER BY key;
-- a consumer of the output stream sees nothing before release('hd_out')
SELECT ordered_events.create_consumer('hd_down');
SELECT ordered_events.subscribe('hd_down', 'hd_out');
SELECT count(*) AS visible FROM ordered_events.peek('hd_down');
SELECT ordered_events.release('hd_out');
SELECT * FROM pg_temp.events('hd_out');
-- lineage: a' before b' (key k) in the consumer of the output stream
SELECT r.ordinality AS n, r.seq, r.key, r.payload ->> 'word' AS word
  FROM ordered_events.read('hd_down') WITH ORDINALITY r ORDER BY r.ordinality;
-- and in a handler of the output stream: key k's state is "ab"
SELECT ordered_events.create_consumer('hd_chain', handler => 'public.hd_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hd_chain', 'hd_out');
SELECT ordered_events.process('hd_chain');
SELECT key, state FROM ordered_events.key_state WHERE consumer = 'hd_chain' ORDER BY key;

--
-- The output seq follows processing order, not input order.  hd_part has 2
-- partitions: key_partition('x', 2) = 1, key_partition('y', 2) = 0.
-- Input hd_in2: a (x) 1, c (y) 2, b (x) 3, d (y) 4.  Partition 1 is
-- processed first: a' 1, b' 2, then partition 0: c' 3, d' 4.  Each key's
-- derived events are in its parents' order.
--
SELECT ordered_events.key_partition('x', 2) AS x, ordered_events.key_partition('y', 2) AS y;
SELECT ordered_events.create_stream('hd_in2'),
       ordered_events.create_stream('hd_out2', gap_policy => 'fence');
SELECT pg_temp.ev('hd_in2', 1, 'x', 'a'), pg_temp.ev('hd_in2', 2, 'y', 'c'),
       pg_temp.ev('hd_in2', 3, 'x', 'b'), pg_temp.ev('hd_in2', 4, 'y', 'd');
SELECT ordered_events.release('hd_in2');
SELECT ordered_events.create_consumer('hd_part', 2, 'public.hd_derive(jsonb, ordered_events.event)',
                                      'hd_out2', 'inherit');
SELECT ordered_events.subscribe('hd_part', 'hd_in2');
SELECT ordered_events.process('hd_part', partition => 1) AS p1,
       ordered_events.process('hd_part', partition => 0) AS p0;
SELECT * FROM pg_temp.events('hd_out2');

--
-- alignment 'processing' (Flow's transform): alignment_ts is the clock at
-- the start of the processing step: one time for all the events of a step,
-- between clock readings taken before and after it, and never going back.
-- Input hd_in (a, c, b above), processed one event per step.
--
SELECT ordered_events.create_stream('hd_out3', gap_policy => 'fence');
SELECT ordered_events.create_consumer('hd_xform', handler => 'public.hd_derive(jsonb, ordered_events.event)',
                                      output_stream => 'hd_out3', alignment => 'processing');
SELECT ordered_events.subscribe('hd_xform', 'hd_in');
SELECT clock_timestamp() AS t0 \gset
SELECT ordered_events.process('hd_xform', 1);
SELECT clock_timestamp() AS t1 \gset
SELECT ordered_events.process('hd_xform', 2);
SELECT clock_timestamp() AS t2 \gset
-- event_ts is the parent's; alignment_ts is no parent's time
SELECT seq, key, payload, event_s, alignment_s FROM pg_temp.events('hd_out3');
-- step 1 (a') between t0 and t1; step 2 (c', b') between t1 and t2, both
-- at one time
SELECT p.seq,
       p.alignment_ts BETWEEN :'t0' AND :'t1' AS in_step_1,
       p.alignment_ts BETWEEN :'t1' AND :'t2' AS in_step_2
  FROM ordered_events.pending p WHERE p.stream = 'hd_out3' ORDER BY p.seq;
SELECT count(DISTINCT alignment_ts) AS step_2_times
  FROM ordered_events.pending WHERE stream = 'hd_out3' AND seq IN (2, 3);

--
-- 'processing' never goes below the output stream's last alignment_ts:
-- hd_future ('inherit') appends to hd_out4 an event whose parent was
-- written in 2100; hd_now ('processing') then appends to hd_out4 at the
-- processing time raised to 2100-01-01.  The output stream's alignment
-- never goes back.
--
SELECT ordered_events.create_stream('hd_in4'),
       ordered_events.create_stream('hd_out4', gap_policy => 'fence');
SELECT ordered_events.ingest('hd_in4', 1, 'k', '"future"', pg_temp.at(1), timestamptz '2100-01-01 00:00:00+00');
SELECT ordered_events.release('hd_in4');
SELECT ordered_events.create_consumer('hd_future', handler => 'public.hd_derive(jsonb, ordered_events.event)',
                                      output_stream => 'hd_out4');
SELECT ordered_events.create_consumer('hd_now', handler => 'public.hd_derive(jsonb, ordered_events.event)',
                                      output_stream => 'hd_out4', alignment => 'processing');
SELECT ordered_events.subscribe('hd_future', 'hd_in4'), ordered_events.subscribe('hd_now', 'hd_in2');
SELECT ordered_events.process('hd_future');
SELECT ordered_events.process('hd_now', 1);
SELECT seq, key, payload, alignment_ts FROM ordered_events.pending WHERE stream = 'hd_out4' ORDER BY seq;

SELECT ordered_events.drop_consumer(c)
  FROM unnest('{hd_map,hd_down,hd_chain,hd_part,hd_xform,hd_future,hd_now}'::text[]) c;
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'hd\_%' ORDER BY stream;
DROP FUNCTION public.hd_derive(jsonb, ordered_events.event), public.hd_concat(jsonb, ordered_events.event);
