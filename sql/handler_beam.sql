--
-- handler_beam: the handler cases of Apache Beam's OrderedEventProcessor
-- tests, ported to handler consumers (docs/handlers.md;
-- docs/architecture.md, rules 10 and 11).
--
-- Beam's StringBuilderState appends each event to the key's state (mutate)
-- and outputs the state after every mutate (produceResult); it creates the
-- state on the key's initial event, and an event whose processing throws
-- goes to the dead letters while the key's sequence goes on.  Here the
-- handler hb_concat(state, event) does the same with jsonb strings: state
-- "ab" and payload "c" give state "abc" and result "abc".  Its payload
-- words: "throw" raises P0001, "odd" raises the custom SQLSTATE HB001,
-- "divide" divides by zero (22012), "reset" returns a NULL step (NULL
-- state, no result), "quiet" changes the state and returns a NULL result.
-- hb_trace(state, event) outputs the state it was given and the event as
-- it received it.
--
-- process() is called by hand (no background worker serves this
-- database).  Clock times (produced_at, updated_at) are only shown as set.
--
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, YMD';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Handlers run with search_path = pg_catalog, pg_temp: everything of the
-- extension is schema-qualified.
CREATE FUNCTION public.hb_concat(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE plpgsql AS $$
DECLARE
    word text := e.payload #>> '{}';
    s jsonb := to_jsonb(coalesce(state #>> '{}', '') || word);
BEGIN
    CASE word
    WHEN 'throw' THEN
        RAISE EXCEPTION 'cannot process % %', e.stream, e.seq;
    WHEN 'odd' THEN
        RAISE EXCEPTION 'odd event of key %', e.key USING ERRCODE = 'HB001';
    WHEN 'divide' THEN
        RETURN ROW(to_jsonb(1 / 0), NULL)::ordered_events.step;
    WHEN 'reset' THEN
        RETURN NULL;
    WHEN 'quiet' THEN
        RETURN ROW(s, NULL)::ordered_events.step;
    ELSE
        RETURN ROW(s, s)::ordered_events.step;
    END CASE;
END;
$$;

CREATE FUNCTION public.hb_trace(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
               jsonb_build_object('state_was', state, 'stream', e.stream, 'seq', e.seq,
                                  'key', e.key, 'payload', e.payload,
                                  'event_ts', e.event_ts, 'alignment_ts', e.alignment_ts,
                                  'last_event', e.last_event))::ordered_events.step
$$;

-- A consumer's results in position order: positions come from one sequence
-- for all consumers (increasing, not dense), so the rank is shown.
CREATE FUNCTION pg_temp.results(c text)
RETURNS TABLE (n bigint, stream text, seq bigint, key text, result jsonb, has_produced_at boolean)
LANGUAGE sql AS $$
    SELECT row_number() OVER (ORDER BY r.position), r.stream, r.seq, r.key, r.result,
           r.produced_at IS NOT NULL
      FROM ordered_events.results r
     WHERE r.consumer = c
     ORDER BY r.position
$$;

CREATE FUNCTION pg_temp.states(c text)
RETURNS TABLE (key text, state jsonb, last_stream text, last_seq bigint,
               processed_count bigint, error_count bigint, has_updated_at boolean)
LANGUAGE sql AS $$
    SELECT k.key, k.state, k.last_stream, k.last_seq, k.processed_count, k.error_count,
           k.updated_at IS NOT NULL
      FROM ordered_events.key_state k
     WHERE k.consumer = c
     ORDER BY k.key
$$;

-- The dead letters of a handler consumer.
CREATE FUNCTION pg_temp.letters(c text)
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb,
               reason ordered_events.outcome, detail text, consumer text)
LANGUAGE sql AS $$
    SELECT u.stream, u.seq, u.key, u.payload, u.reason, u.detail, u.consumer
      FROM ordered_events.unprocessed u
     WHERE u.consumer = c
     ORDER BY u.stream, u.seq
$$;

-- An event of the global streams below: written s seconds after the epoch
-- of the test, happened at the epoch.
CREATE FUNCTION pg_temp.ev(stream text, seq bigint, key text, word text)
RETURNS ordered_events.outcome
LANGUAGE sql AS $$
    SELECT ordered_events.ingest(stream, seq, key, to_jsonb(word),
                                 timestamptz '2026-01-01 00:00:00+00',
                                 timestamptz '2026-01-01 00:00:00+00' + seq * interval '1 s')
$$;

--
-- Perfect order (Beam's testPerfectOrderingProcessing), global stream:
-- keys k1 "a" "b" "c" (seqs 1, 3, 4) and k2 "x" "y" (seqs 2, 5).  The state
-- is created on each key's initial event; a result follows every mutate:
-- a, x, ab, abc, xy.
--
SELECT ordered_events.create_stream('hb_perfect');
SELECT pg_temp.ev('hb_perfect', 1, 'k1', 'a'), pg_temp.ev('hb_perfect', 2, 'k2', 'x'),
       pg_temp.ev('hb_perfect', 3, 'k1', 'b'), pg_temp.ev('hb_perfect', 4, 'k1', 'c'),
       pg_temp.ev('hb_perfect', 5, 'k2', 'y');
SELECT ordered_events.release('hb_perfect');
SELECT ordered_events.create_consumer('hb_perfect_c',
           handler => 'public.hb_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_perfect_c', 'hb_perfect');
-- nothing was processed before process(): no state, no result
SELECT * FROM pg_temp.states('hb_perfect_c');
SELECT * FROM pg_temp.results('hb_perfect_c');
-- 5 events applied
SELECT ordered_events.process('hb_perfect_c');
SELECT * FROM pg_temp.results('hb_perfect_c');
-- k1 "abc" after seq 4, k2 "xy" after seq 5; every event counted once
SELECT * FROM pg_temp.states('hb_perfect_c');
-- the results view is in position order, positions increase
SELECT bool_and(position > prev) AS positions_increase
  FROM (SELECT position, lag(position, 1, 0::bigint) OVER (ORDER BY position) AS prev
          FROM ordered_events.results WHERE consumer = 'hb_perfect_c') r;
-- exactly once: processing again applies nothing and changes nothing
SELECT ordered_events.process('hb_perfect_c');
SELECT count(*) AS results FROM ordered_events.results WHERE consumer = 'hb_perfect_c';
SELECT key, processed_count FROM ordered_events.key_state WHERE consumer = 'hb_perfect_c' ORDER BY key;

--
-- The state a handler receives: NULL on a key's first event (Beam's
-- createStateOnInitialEvent), then the state it returned; the event with
-- every field as written.  Global stream hb_trace: k1 1, k2 2, k1 3.
--
SELECT ordered_events.create_stream('hb_trace');
SELECT pg_temp.ev('hb_trace', 1, 'k1', 'p1'), pg_temp.ev('hb_trace', 2, 'k2', 'p2'),
       pg_temp.ev('hb_trace', 3, 'k1', 'p3');
SELECT ordered_events.release('hb_trace');
SELECT ordered_events.create_consumer('hb_trace_c',
           handler => 'public.hb_trace(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_trace_c', 'hb_trace');
SELECT ordered_events.process('hb_trace_c');
-- seq 1: state_was null; seq 2 (another key): null; seq 3: {"n": 1}
SELECT n, seq, key, result ->> 'state_was' AS state_was FROM pg_temp.results('hb_trace_c');
-- every field of the event: event_ts the epoch, alignment_ts seq seconds
-- later, last_event false on a global stream
SELECT n, result - 'state_was' AS event FROM pg_temp.results('hb_trace_c');
SELECT * FROM pg_temp.states('hb_trace_c');

--
-- Out of order, unfinished, duplicates (Beam's testOutOfSequenceProcessing,
-- testUnfinishedProcessing, testHandlingOfDuplicateSequences), global
-- stream: seqs arrive 3 1 5 2 (2 twice); 4 is missing.  Only the released
-- prefix 1..3 is processed, in seq order; 5 waits for 4, then both come.
--
SELECT ordered_events.create_stream('hb_ooo');
SELECT pg_temp.ev('hb_ooo', 3, 'k', 'c'), pg_temp.ev('hb_ooo', 1, 'k', 'a'),
       pg_temp.ev('hb_ooo', 5, 'k', 'e'), pg_temp.ev('hb_ooo', 2, 'k', 'b'),
       pg_temp.ev('hb_ooo', 2, 'k', 'B');
SELECT ordered_events.release('hb_ooo');
SELECT ordered_events.create_consumer('hb_ooo_c',
           handler => 'public.hb_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_ooo_c', 'hb_ooo');
-- 3 applied: a, ab, abc (the duplicate "B" never reaches the handler)
SELECT ordered_events.process('hb_ooo_c');
SELECT * FROM pg_temp.results('hb_ooo_c');
-- nothing more until 4 arrives
SELECT ordered_events.process('hb_ooo_c');
SELECT pg_temp.ev('hb_ooo', 4, 'k', 'd');
SELECT ordered_events.release('hb_ooo');
-- 2 applied: abcd, abcde
SELECT ordered_events.process('hb_ooo_c');
SELECT * FROM pg_temp.results('hb_ooo_c');
SELECT * FROM pg_temp.states('hb_ooo_c');

--
-- max_events bounds a step (Beam's batches): 5 events, steps of 2 apply
-- 2, 2, 1, 0; the results are those of one step of 5.
--
SELECT ordered_events.create_stream('hb_batch');
SELECT pg_temp.ev('hb_batch', s, 'k' || s % 2, chr(96 + s)) FROM generate_series(1, 5) s;
SELECT ordered_events.release('hb_batch');
SELECT ordered_events.create_consumer('hb_batch_c',
           handler => 'public.hb_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_batch_c', 'hb_batch');
SELECT ordered_events.process('hb_batch_c', 2) AS step1,
       ordered_events.process('hb_batch_c', 2) AS step2,
       ordered_events.process('hb_batch_c', 2) AS step3,
       ordered_events.process('hb_batch_c', 2) AS step4;
-- k1: a, ac, ace; k0: b, bd
SELECT * FROM pg_temp.results('hb_batch_c');

--
-- An exception in the middle (Beam's testHandlingOfExceptionsThrownByMutate):
-- global stream hb_exc, keys k1 and k2:
--   1 k1 "a", 2 k2 "x", 3 k1 "throw", 4 k2 "odd", 5 k1 "b", 6 k2 "y",
--   7 k3 "divide", 8 k3 "c"
-- 3, 4 and 7 go to unprocessed (exception_thrown, their SQLSTATE and
-- message, the consumer named); the states stay: k1 "a" then "ab", k2 "x"
-- then "xy"; k3's first event raised: its state stays NULL and its next
-- event is its first state ("c").  All 8 count as applied.
--
SELECT ordered_events.create_stream('hb_exc');
SELECT pg_temp.ev('hb_exc', v.seq, v.key, v.word)
  FROM (VALUES (1, 'k1', 'a'), (2, 'k2', 'x'), (3, 'k1', 'throw'), (4, 'k2', 'odd'),
               (5, 'k1', 'b'), (6, 'k2', 'y'), (7, 'k3', 'divide'), (8, 'k3', 'c')) v(seq, key, word)
 ORDER BY v.seq;
SELECT ordered_events.release('hb_exc');
SELECT ordered_events.create_consumer('hb_exc_c',
           handler => 'public.hb_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_exc_c', 'hb_exc');
SELECT ordered_events.process('hb_exc_c');
-- a, x, ab, xy, c
SELECT * FROM pg_temp.results('hb_exc_c');
SELECT * FROM pg_temp.letters('hb_exc_c');
-- processed_count counts the errors too; error_count them alone; k3 has
-- state "c" from its second event
SELECT * FROM pg_temp.states('hb_exc_c');
-- the range went on over the failed events: all 8 released, none pending;
-- stream_stats counts no handler dead letter as the stream's unprocessed
SELECT range_end, released_count, pending_count, unprocessed_count
  FROM ordered_events.stream_stats WHERE stream = 'hb_exc';
-- a key whose only event raised keeps a NULL state
SELECT pg_temp.ev('hb_exc', 9, 'k4', 'throw');
SELECT ordered_events.release('hb_exc');
SELECT ordered_events.process('hb_exc_c');
SELECT * FROM pg_temp.states('hb_exc_c') WHERE key = 'k4';
SELECT seq, key, detail FROM pg_temp.letters('hb_exc_c') WHERE key = 'k4';
-- each dead letter once: processing again adds none
SELECT ordered_events.process('hb_exc_c');
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hb_exc_c';

--
-- A NULL step: the key's state becomes NULL and nothing is output; the
-- next event starts afresh.  A NULL result (Beam's
-- testProcessingWithEveryOtherResultEmission): the state changes, no result
-- row.  Global stream hb_null: k "a", "reset", "b", "quiet", "c".
--   a -> state a, result a; reset -> NULL, none; b -> b, b;
--   quiet -> bquiet, none; c -> bquietc, bquietc
--
SELECT ordered_events.create_stream('hb_null');
SELECT pg_temp.ev('hb_null', v.seq, 'k', v.word)
  FROM (VALUES (1, 'a'), (2, 'reset'), (3, 'b'), (4, 'quiet'), (5, 'c')) v(seq, word)
 ORDER BY v.seq;
SELECT ordered_events.release('hb_null');
SELECT ordered_events.create_consumer('hb_null_c',
           handler => 'public.hb_concat(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_null_c', 'hb_null');
-- all 5 applied, 3 results
SELECT ordered_events.process('hb_null_c');
SELECT * FROM pg_temp.results('hb_null_c');
SELECT * FROM pg_temp.states('hb_null_c');
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hb_null_c';
-- a NULL step after which nothing comes leaves the key with a NULL state
SELECT pg_temp.ev('hb_null', 6, 'k', 'reset');
SELECT ordered_events.release('hb_null');
SELECT ordered_events.process('hb_null_c');
SELECT * FROM pg_temp.states('hb_null_c');

--
-- Per-key stream with last_event (Beam's per-key cases): keys k1 and k2
-- from seq 1; k1's seq 3 is its last event.  Arrivals: k1 2, k2 1, k1 1,
-- k1 3 (last), k1 4 (after the last: unprocessed at ingest, never seen by
-- the handler), k2 2.
-- One release step releases k1 1..3 and k2 1..2; keys in the order of the
-- (alignment_ts, key) of their first event released in the step: k1's seq
-- 1 was written at :03, k2's at :02, so k2 comes first: k2 1, k2 2, k1 1,
-- k1 2, k1 3.
--
SELECT ordered_events.create_stream('hb_pk', 'per_key');
SELECT ordered_events.ingest('hb_pk', v.seq, v.key, to_jsonb(v.word),
                             timestamptz '2026-01-01 00:00:00+00',
                             timestamptz '2026-01-01 00:00:00+00' + v.at * interval '1 s',
                             last_event => v.last)
  FROM (VALUES (1, 2, 'k1', 'b', false), (2, 1, 'k2', 'x', false), (3, 1, 'k1', 'a', false),
               (4, 3, 'k1', 'c', true), (5, 4, 'k1', 'd', false), (6, 2, 'k2', 'y', false))
       v(at, seq, key, word, last)
 ORDER BY v.at;
SELECT ordered_events.release('hb_pk');
SELECT ordered_events.create_consumer('hb_pk_c',
           handler => 'public.hb_trace(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hb_pk_c', 'hb_pk');
SELECT ordered_events.process('hb_pk_c');
-- the handler sees last_event true on k1's seq 3 only
SELECT n, stream, seq, key, result ->> 'payload' AS payload,
       result ->> 'last_event' AS last_event, result ->> 'state_was' AS state_was
  FROM pg_temp.results('hb_pk_c');
SELECT * FROM pg_temp.states('hb_pk_c');
-- k1's seq 4 is the stream's dead letter (no consumer), not the handler's
SELECT seq, key, reason, consumer FROM ordered_events.unprocessed WHERE stream = 'hb_pk';

--
-- drop_consumer removes the states, the results and the handler's dead
-- letters; the stream's own dead letters stay.
--
SELECT (SELECT count(*) FROM ordered_events.key_state WHERE consumer LIKE 'hb\_%') AS states,
       (SELECT count(*) FROM ordered_events.results WHERE consumer LIKE 'hb\_%') AS results;
SELECT ordered_events.drop_consumer(c)
  FROM unnest('{hb_perfect_c,hb_trace_c,hb_ooo_c,hb_batch_c,hb_exc_c,hb_null_c,hb_pk_c}'::text[]) c;
SELECT count(*) AS states FROM ordered_events.key_state WHERE consumer LIKE 'hb\_%';
SELECT count(*) AS results FROM ordered_events.results WHERE consumer LIKE 'hb\_%';
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer LIKE 'hb\_%';
SELECT count(*) AS stream_letters FROM ordered_events.unprocessed
 WHERE stream LIKE 'hb\_%' AND consumer IS NULL;
SELECT ordered_events.drop_stream(stream) FROM ordered_events.streams
 WHERE stream LIKE 'hb\_%' ORDER BY stream;
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE stream LIKE 'hb\_%';
DROP FUNCTION public.hb_concat(jsonb, ordered_events.event), public.hb_trace(jsonb, ordered_events.event);
