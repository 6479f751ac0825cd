--
-- handler_reentry: what a handler consumer refuses (issue 20, findings 10,
-- 11 and 13; docs/architecture.md, rule 18; docs/reference.md, Consumers):
--   1. a handler that drops, subscribes, unsubscribes or alters its own
--      consumer gets 55006 for that event: the consumer and its rows stay,
--      the step goes on;
--   2. a subscription that would feed a handler's derived events back to
--      it, directly or through other handler consumers, is 22023 and
--      changes nothing; one that closes no cycle is accepted;
--   3. a handler given by an OID that is no function is 42883.
--
SET TimeZone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never
SET jit = off;

SELECT ordered_events.create_stream('re_in');
SELECT ordered_events.create_stream('re_mid', gap_policy => 'fence');
SELECT ordered_events.create_stream('re_out', gap_policy => 'fence');
SELECT ordered_events.create_stream('re_other');

--
-- 1. By payload, the handler calls on its own consumer re_c:
--    "drop" drop_consumer(), "subscribe" subscribe() to re_other,
--    "unsubscribe" unsubscribe() from re_in, "alter" alter_consumer();
--    anything else is applied.
--
CREATE FUNCTION public.re_self(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE plpgsql AS $$
BEGIN
    CASE e.payload #>> '{}'
        WHEN 'drop' THEN PERFORM ordered_events.drop_consumer('re_c');
        WHEN 'subscribe' THEN PERFORM ordered_events.subscribe('re_c', 're_other');
        WHEN 'unsubscribe' THEN PERFORM ordered_events.unsubscribe('re_c', 're_in');
        WHEN 'alter' THEN PERFORM ordered_events.alter_consumer('re_c', handler_timeout => '1 s');
        ELSE NULL;
    END CASE;
    RETURN ROW(pg_catalog.jsonb_build_object('n', coalesce((state ->> 'n')::integer, 0) + 1),
               NULL)::ordered_events.step;
END;
$$;
SELECT ordered_events.create_consumer('re_c', handler => 'public.re_self(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe('re_c', 're_in');
SELECT ordered_events.ingest('re_in', s, 'k', to_jsonb(w))
  FROM unnest('{drop,subscribe,unsubscribe,alter,plain}'::text[]) WITH ORDINALITY a(w, s);
SELECT ordered_events.release('re_in');
-- all five applied: four as errors, the last one held
SELECT ordered_events.process('re_c');
SELECT seq, reason, detail FROM ordered_events.unprocessed WHERE consumer = 're_c' ORDER BY seq;
SELECT key, state, processed_count, error_count FROM ordered_events.key_state WHERE consumer = 're_c';
-- the consumer is still there, subscribed as before, its limit unchanged
SELECT consumer, stream FROM ordered_events.consumers WHERE consumer = 're_c';
SELECT handler_timeout FROM ordered_events.consumer_def WHERE consumer = 're_c';

--
-- 2. Cycles.  re_a reads re_in and derives into re_mid; re_b reads re_mid
-- and derives into re_out.  Subscribing re_a to re_out would feed re_a's
-- output back to it through re_b; re_b to re_out, directly: both refused.
--
CREATE FUNCTION public.re_copy(state jsonb, e ordered_events.event)
RETURNS ordered_events.step LANGUAGE sql AS $$
    SELECT ROW(NULL, e.payload)::ordered_events.step
$$;
SELECT ordered_events.create_consumer('re_a', handler => 'public.re_copy(jsonb, ordered_events.event)',
                                      output_stream => 're_mid');
SELECT ordered_events.create_consumer('re_b', handler => 'public.re_copy(jsonb, ordered_events.event)',
                                      output_stream => 're_out');
SELECT ordered_events.subscribe('re_a', 're_in');
SELECT ordered_events.subscribe('re_b', 're_mid');
-- re_out -> re_a -> re_mid -> re_b -> re_out: a cycle
SELECT ordered_events.subscribe('re_a', 're_out');
\echo :LAST_ERROR_SQLSTATE
-- directly: re_b reads its own output
SELECT ordered_events.subscribe('re_b', 're_out');
\echo :LAST_ERROR_SQLSTATE
-- nothing changed
SELECT consumer, stream FROM ordered_events.consumers
 WHERE consumer IN ('re_a', 're_b') ORDER BY consumer, stream;
-- no cycle: re_b may read re_in too, and a consumer without a handler anything
SELECT ordered_events.subscribe('re_b', 're_in');
SELECT ordered_events.create_consumer('re_plain');
SELECT ordered_events.subscribe('re_plain', s) FROM unnest('{re_in,re_mid,re_out}'::text[]) s;

--
-- 3. A handler OID that is no function.
--
SELECT ordered_events.create_consumer('re_none', handler => 0::regprocedure);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM ordered_events.consumer_def WHERE consumer = 're_none';

SELECT ordered_events.drop_consumer(c) FROM unnest('{re_c,re_a,re_b,re_plain}'::text[]) c;
SELECT ordered_events.drop_stream(s) FROM unnest('{re_in,re_mid,re_out,re_other}'::text[]) s;
DROP FUNCTION public.re_self(jsonb, ordered_events.event);
DROP FUNCTION public.re_copy(jsonb, ordered_events.event);
