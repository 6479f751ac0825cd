--
-- A handler runs with the rights of the role that created its consumer.
-- If its function is dropped and another role creates one with the same
-- name and arguments, that function must not run with those rights: the
-- processing step stops (42501) until the function is back in the hands of
-- its first owner, or the consumer is created again.
--
SET client_min_messages = warning;
CREATE ROLE regress_hr_author;
CREATE ROLE regress_hr_owner;
CREATE ROLE regress_hr_intruder;
CREATE SCHEMA hrep;
GRANT CREATE, USAGE ON SCHEMA hrep TO regress_hr_author, regress_hr_intruder;
GRANT USAGE ON SCHEMA hrep, ordered_events TO regress_hr_owner, regress_hr_author, regress_hr_intruder;
GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                          ordered_events.subscribe(text, text, interval, text)
   TO regress_hr_owner;

SET ROLE regress_hr_author;
CREATE FUNCTION hrep.h(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(NULL, pg_catalog.to_jsonb(current_user::text))::ordered_events.step $$;
RESET ROLE;

SELECT ordered_events.create_stream('hrep_s');
SELECT ordered_events.grant_stream('hrep_s', 'read', 'regress_hr_owner');
SET ROLE regress_hr_owner;
SELECT ordered_events.create_consumer('hrep_c', handler => 'hrep.h(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('hrep_c', 'hrep_s');
RESET ROLE;
SELECT ordered_events.ingest('hrep_s', 1, 'k');
SELECT ordered_events.release('hrep_s');
SELECT ordered_events.process('hrep_c');
SELECT seq, result FROM ordered_events.results WHERE consumer = 'hrep_c';

-- The author drops it; an intruder plants a function with the same signature.
SET ROLE regress_hr_author;
DROP FUNCTION hrep.h(jsonb, ordered_events.event);
SET ROLE regress_hr_intruder;
CREATE FUNCTION hrep.h(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(NULL, '"planted"'::jsonb)::ordered_events.step $$;
RESET ROLE;
SELECT ordered_events.ingest('hrep_s', 2, 'k');
SELECT ordered_events.release('hrep_s');
\set VERBOSITY default
SELECT ordered_events.process('hrep_c');
\set VERBOSITY terse
-- nothing was applied: the event waits
SELECT seq, result FROM ordered_events.results WHERE consumer = 'hrep_c';
SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'hrep_c';

-- The author's function again: the event is applied by it.
SET ROLE regress_hr_intruder;
DROP FUNCTION hrep.h(jsonb, ordered_events.event);
SET ROLE regress_hr_author;
CREATE FUNCTION hrep.h(state jsonb, e ordered_events.event) RETURNS ordered_events.step
LANGUAGE sql AS $$ SELECT ROW(NULL, pg_catalog.to_jsonb(current_user::text))::ordered_events.step $$;
RESET ROLE;
SELECT ordered_events.process('hrep_c');
SELECT seq, result FROM ordered_events.results WHERE consumer = 'hrep_c';

SELECT ordered_events.drop_consumer('hrep_c');
SELECT ordered_events.drop_stream('hrep_s');
DROP SCHEMA hrep CASCADE;
REVOKE ALL ON SCHEMA ordered_events FROM regress_hr_owner, regress_hr_author, regress_hr_intruder;
REVOKE ALL ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
                       ordered_events.subscribe(text, text, interval, text)
  FROM regress_hr_owner;
DROP ROLE regress_hr_author, regress_hr_owner, regress_hr_intruder;
