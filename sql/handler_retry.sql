--
-- The calls of a processing step run in subtransactions of several
-- events; after a handler error the calls before it run again (src/
-- handler.c).  What a user can rely on: transactional effects of a
-- handler count once per applied event, and every call that raises is a
-- failed attempt of its event (here max_attempts is 1: a dead letter),
-- also when it raised while the calls before an error ran again.
-- Sequences are not transactional: they count the calls.
--
SET client_min_messages = warning;
CREATE SCHEMA hr;
CREATE TABLE hr.effects (seq bigint, key text);
CREATE SEQUENCE hr.calls;
CREATE SEQUENCE hr.calls_of_2;
CREATE SEQUENCE hr.calls_of_5;

-- Event 3 always raises; every call leaves a row in hr.effects.
CREATE FUNCTION hr.always(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('hr.calls');
    INSERT INTO hr.effects VALUES (e.seq, e.key);
    IF e.seq = 3 THEN
        RAISE EXCEPTION 'seq 3 fails';
    END IF;
    RETURN ROW(jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
               to_jsonb(e.seq))::ordered_events.step;
END $$;

-- Event 5 raises at its first call only, event 2 at its second call only:
-- the first subtransaction fails at 5, its replay of 1..4 fails at 2:
-- both are dead letters, the others applied once.
CREATE FUNCTION hr.flaky(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    IF e.seq = 5 AND nextval('hr.calls_of_5') = 1 THEN
        RAISE EXCEPTION 'seq 5 fails once';
    END IF;
    IF e.seq = 2 AND nextval('hr.calls_of_2') = 2 THEN
        RAISE EXCEPTION 'seq 2 fails at its second call';
    END IF;
    RETURN ROW(jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
               to_jsonb(e.seq))::ordered_events.step;
END $$;

SELECT ordered_events.create_stream('hr_s');
SELECT ordered_events.create_consumer('hr_always', handler => 'hr.always(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hr_always', 'hr_s');
SELECT ordered_events.create_consumer('hr_flaky', handler => 'hr.flaky(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hr_flaky', 'hr_s');
SELECT count(*) FROM (SELECT ordered_events.ingest('hr_s', g, 'k') FROM generate_series(1, 6) g) i;
SELECT ordered_events.release('hr_s');

-- always: 6 applied, seq 3 a dead letter, one effect row per other event
SELECT ordered_events.process('hr_always');
SELECT seq, count(*) FROM hr.effects GROUP BY seq ORDER BY seq;
SELECT seq, detail FROM ordered_events.unprocessed WHERE consumer = 'hr_always';
SELECT string_agg(seq::text, ',' ORDER BY position) AS results
  FROM ordered_events.results WHERE consumer = 'hr_always';
SELECT state, processed_count, error_count FROM ordered_events.key_state WHERE consumer = 'hr_always';
-- the handler ran once more than there are events: 1..3, then 1..2 again,
-- then 4..6 (3 failed for good: not called again)
SELECT nextval('hr.calls') - 1 AS calls;

-- flaky: 5 and 2 dead letters (each raised once), the others applied once,
-- in order
SELECT ordered_events.process('hr_flaky');
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hr_flaky';
SELECT string_agg(seq::text, ',' ORDER BY position) AS results
  FROM ordered_events.results WHERE consumer = 'hr_flaky';
SELECT state, processed_count, error_count FROM ordered_events.key_state WHERE consumer = 'hr_flaky';

-- Errors cost what they cost: 15 % of 1,000 events raise (chosen by their
-- seq), each is called once, and the calls before each error run again
-- in short subtransactions: at most 1.2 calls per event.
CREATE SEQUENCE hr.calls_15;
CREATE FUNCTION hr.fails_15(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('hr.calls_15');
    IF (e.seq * 7919) % 100 < 15 THEN
        RAISE EXCEPTION 'seq % fails', e.seq;
    END IF;
    RETURN ROW(jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1), NULL)::ordered_events.step;
END $$;
SELECT ordered_events.create_stream('hr_15');
SELECT ordered_events.create_consumer('hr_15', handler => 'hr.fails_15(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hr_15', 'hr_15');
SELECT count(*) FROM (SELECT ordered_events.ingest('hr_15', g, 'k' || g % 100)
                        FROM generate_series(1, 1000) g) i;
SELECT ordered_events.release('hr_15');
SELECT ordered_events.process('hr_15', 1000);
SELECT count(*) AS letters FROM ordered_events.unprocessed WHERE consumer = 'hr_15';
SELECT sum(processed_count) AS processed, sum(error_count) AS errors
  FROM ordered_events.key_state WHERE consumer = 'hr_15';
SELECT calls, calls / 1000.0 <= 1.2 AS at_most_1_2_calls_per_event
  FROM (SELECT nextval('hr.calls_15') - 1 AS calls) c;

SELECT ordered_events.drop_consumer('hr_always'), ordered_events.drop_consumer('hr_flaky'),
       ordered_events.drop_consumer('hr_15');
SELECT ordered_events.drop_stream('hr_15');
SELECT ordered_events.drop_stream('hr_s');
DROP SCHEMA hr CASCADE;
