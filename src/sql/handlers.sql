/*
 * Handlers: consumers that the extension reads itself, applying each event
 * in merged order to a per-key state machine (docs/handlers.md; the
 * processing is src/handler.c).
 */

CREATE TYPE ordered_events.event AS (
    stream text,
    seq bigint,
    key text,
    payload jsonb,
    event_ts timestamptz,
    alignment_ts timestamptz,
    last_event boolean
);
COMMENT ON TYPE ordered_events.event IS
    'An event as a handler receives it';

CREATE TYPE ordered_events.step AS (
    state jsonb,
    result jsonb
);
COMMENT ON TYPE ordered_events.step IS
    'What a handler returns: the key''s new state and the result to output (NULL: none)';

/*
 * The state of each key of a handler consumer, across the consumer's
 * streams.  Processing steps write these rows and those of handler_result
 * straight to the table (src/handler.c): no foreign key, drop_consumer()
 * deletes them.  A state row is updated at every step that applies one of
 * its key's events: room on its page keeps the update HOT.
 */
CREATE TABLE ordered_events.handler_state (
    consumer_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    state jsonb,
    last_stream_id integer NOT NULL,
    last_seq bigint NOT NULL,
    processed_count bigint NOT NULL,
    error_count bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    attempts integer NOT NULL DEFAULT 0,    -- failed calls of the key's first parked event
    next_attempt_at timestamptz,            -- its parked events are due then
    held_since timestamptz,                 -- held: they wait for redrive() or skip_held()
    last_error text,                        -- of its first parked event
    parked integer NOT NULL DEFAULT 0,      -- its events in handler_parked
    PRIMARY KEY (consumer_id, key)
) WITH (fillfactor = 50);
COMMENT ON TABLE ordered_events.handler_state IS
    'Internal: the state of each key of a handler consumer';
-- Results of handlers without an output stream; position is processing order.
CREATE SEQUENCE ordered_events.result_position_seq AS bigint;
COMMENT ON SEQUENCE ordered_events.result_position_seq IS
    'Internal: the processing order of handler results';
CREATE TABLE ordered_events.handler_result (
    consumer_id integer NOT NULL,
    position bigint NOT NULL,
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    key text COLLATE "C" NOT NULL,
    result jsonb NOT NULL,
    produced_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, position)
);
COMMENT ON TABLE ordered_events.handler_result IS
    'Internal: the results of handlers without an output stream';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_state', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_result', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.result_position_seq', '');
/*
 * Parked events: events a processing step took from its consumer's
 * positions but did not apply, because their key waits: for the retry of
 * its failed event (handler_state.next_attempt_at), held until redrive()
 * or skip_held() (held_since), or behind the key's earlier parked events.
 * A key's first parked event (lowest position) is the one that failed, or
 * a dead letter redrive() queued.  The key's state row counts them
 * (parked); steps apply them first, in position order, once the key is
 * due (src/handler.c).
 */
CREATE SEQUENCE ordered_events.parked_position_seq AS bigint;
COMMENT ON SEQUENCE ordered_events.parked_position_seq IS
    'Internal: the order of parked events';
CREATE TABLE ordered_events.handler_parked (
    consumer_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    position bigint NOT NULL,
    stream_id integer NOT NULL,
    seq bigint NOT NULL,
    arrival bigint NOT NULL,
    payload jsonb,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    last_event boolean NOT NULL,
    received_at timestamptz NOT NULL,
    dead_letter boolean NOT NULL,       -- re-driven: its dead letter goes once it is applied
    parked_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_id, key, position)
);
COMMENT ON TABLE ordered_events.handler_parked IS
    'Internal: events of handler consumers that wait for a retry, a re-drive or an earlier event of their key';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.handler_parked', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.parked_position_seq', '');
-- The keys whose parked events are due, and the held keys: few, found by index.
CREATE INDEX handler_state_due_idx ON ordered_events.handler_state (consumer_id, next_attempt_at)
    WHERE parked > 0 AND held_since IS NULL;
CREATE INDEX handler_state_held_idx ON ordered_events.handler_state (consumer_id, key)
    WHERE held_since IS NOT NULL;

-- A handler given by an OID that is no function is 42883, as a wrong one is.
CREATE FUNCTION ordered_events.check_handler(handler regprocedure, owner regrole)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p pg_catalog.pg_proc;
BEGIN
    SELECT * INTO p FROM pg_catalog.pg_proc f WHERE f.oid = handler;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'function with OID % does not exist', handler::oid
            USING ERRCODE = 'undefined_function',
                  HINT = 'Name the handler by its signature: ''fn(jsonb, ordered_events.event)''::regprocedure.';
    END IF;
    IF p.prokind <> 'f' OR p.proretset
       OR p.prorettype <> 'ordered_events.step'::pg_catalog.regtype
       OR p.pronargs <> 2 OR p.proargtypes[0] <> 'jsonb'::pg_catalog.regtype
       OR p.proargtypes[1] <> 'ordered_events.event'::pg_catalog.regtype THEN
        RAISE EXCEPTION 'function % is not a handler', handler
            USING ERRCODE = 'undefined_function',
                  DETAIL = pg_catalog.format('It returns %s%s; a handler takes (jsonb, ordered_events.event) and returns one ordered_events.step.',
                               CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END,
                               p.prorettype::pg_catalog.regtype),
                  HINT = 'Declare it as CREATE FUNCTION f(state jsonb, event ordered_events.event) RETURNS ordered_events.step.';
    END IF;
    IF p.proisstrict THEN
        RAISE EXCEPTION 'handler % must not be STRICT', handler
            USING ERRCODE = 'invalid_function_definition',
                  DETAIL = 'The first event of a key comes with a NULL state, which a STRICT function never sees.',
                  HINT = 'Declare it CALLED ON NULL INPUT (the default).';
    END IF;
    IF NOT pg_catalog.has_function_privilege(owner, handler, 'EXECUTE') THEN
        RAISE EXCEPTION 'permission denied for function %', handler
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = pg_catalog.format('The handler runs as the role that creates the consumer, %s, which may not execute it.', owner),
                  HINT = 'Grant EXECUTE on the function to that role, or create the consumer as a role that has it.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_handler(regprocedure, regrole) IS
    'Internal: the error for a handler of the wrong shape or that its owner may not execute';
REVOKE EXECUTE ON FUNCTION ordered_events.check_handler(regprocedure,regrole) FROM PUBLIC;
-- A handler_timeout is NULL (the server's) or a positive interval of at most 24 days.
CREATE FUNCTION ordered_events.check_handler_timeout(handler_timeout interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF handler_timeout <= interval '0' OR handler_timeout > interval '24 days' THEN
        PERFORM ordered_events.invalid_option('handler_timeout', handler_timeout::text,
            'Use a positive interval of at most 24 days, or NULL for the server''s ordered_events.handler_timeout.');
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_handler_timeout(interval) IS
    'Internal: the error for an invalid handler_timeout';
-- A failure policy is on_error 'dead_letter' or 'hold', 1 to 100 attempts, a delay of 0 to 1 day.
CREATE FUNCTION ordered_events.check_failure_policy(on_error text, max_attempts integer,
                                                    retry_delay interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF on_error NOT IN ('dead_letter', 'hold') THEN
        PERFORM ordered_events.invalid_option('on_error', on_error,
            'Use ''dead_letter'' (the event goes to unprocessed, its key goes on) or ''hold'' (its key waits for redrive() or skip_held()).');
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many calls of the handler may fail for one event.');
    END IF;
    IF retry_delay < interval '0' OR retry_delay > interval '1 day' THEN
        PERFORM ordered_events.invalid_option('retry_delay', retry_delay::text,
            'Use an interval from 0 to 1 day: the wait before the first retry, doubled at each one after.');
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_failure_policy(text, integer, interval) IS
    'Internal: the error for an invalid on_error, max_attempts or retry_delay';
-- The fence stream a handler consumer appends its results to, or the error.
CREATE FUNCTION ordered_events.output_stream_or_error(output_stream text)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(output_stream);
BEGIN
    IF d.gap_policy <> 'fence' THEN
        RAISE EXCEPTION 'output stream "%" does not have gap_policy ''fence''', output_stream
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = pg_catalog.format('Stream "%s" has gap_policy ''%s''.', output_stream, d.gap_policy),
                  HINT = 'Derived events are appended: create the output stream with gap_policy => ''fence''.';
    END IF;
    RETURN d;
END;
$$;
COMMENT ON FUNCTION ordered_events.output_stream_or_error(text) IS
    'Internal: the fence stream named as a handler''s output, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.output_stream_or_error(text) FROM PUBLIC;
-- The fence stream a handler consumer appends its results to, which its owner may write.
CREATE FUNCTION ordered_events.output_stream_or_error(output_stream text, owner regrole)
RETURNS ordered_events.stream_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.output_stream_or_error(output_stream);
BEGIN
    PERFORM ordered_events.check_stream_privilege(output_stream, 'write', owner);
    RETURN d;
END;
$$;
COMMENT ON FUNCTION ordered_events.output_stream_or_error(text, regrole) IS
    'Internal: the fence stream named as the output of a handler, which its owner may write, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.output_stream_or_error(text,regrole) FROM PUBLIC;
/*
 * The error if subscribing a handler consumer to a stream closes a cycle:
 * its output stream already feeds that stream, through the output streams
 * of the consumers subscribed along the way.
 */
CREATE FUNCTION ordered_events.check_no_cycle(c ordered_events.consumer_def, stream_id integer)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    path text;
BEGIN
    IF c.output_stream_id IS NULL THEN
        RETURN;
    END IF;
    WITH RECURSIVE fed(stream_id, path) AS (
        SELECT c.output_stream_id, ARRAY[c.consumer]
        UNION
        SELECT o.output_stream_id, f.path || o.consumer
          FROM fed f
          JOIN ordered_events.subscription s ON s.stream_id = f.stream_id AND s.partition = 0
          JOIN ordered_events.consumer_def o ON o.consumer_id = s.consumer_id
         WHERE o.output_stream_id IS NOT NULL AND o.consumer <> ALL (f.path)
    )
    SELECT pg_catalog.array_to_string(f.path, ' -> ') INTO path
      FROM fed f WHERE f.stream_id = check_no_cycle.stream_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'subscribing consumer "%" to stream "%" would make a cycle', c.consumer,
              (SELECT d.stream FROM ordered_events.stream_def d
                WHERE d.stream_id = check_no_cycle.stream_id)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The derived events of %s feed that stream.', path),
                  HINT = 'A handler must not read, even through other handlers, what it derives: one event would multiply without end.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_no_cycle(ordered_events.consumer_def, integer) IS
    'Internal: the error if a subscription would feed the output of a handler back to it';
REVOKE EXECUTE ON FUNCTION ordered_events.check_no_cycle(ordered_events.consumer_def,integer) FROM PUBLIC;
/*
 * A handler that calls a function of its own consumer: the functions that
 * change or drop a consumer call this first, and get 55006 while a step of
 * this transaction processes it (process() and read() check it in C).
 */
CREATE FUNCTION ordered_events.check_not_in_step(consumer_id integer)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'oe_check_not_in_step_sql';
COMMENT ON FUNCTION ordered_events.check_not_in_step(integer) IS
    'Internal: the error for a handler that changes, drops or reads its own consumer';
CREATE FUNCTION ordered_events.process(consumer text, max_events integer DEFAULT 1000,
                                       partition integer DEFAULT 0)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_process';
COMMENT ON FUNCTION ordered_events.process(text, integer, integer) IS
    'Apply the next events of a handler consumer (partition) to its handler; returns how many were applied';
REVOKE EXECUTE ON FUNCTION ordered_events.process(text,integer,integer) FROM PUBLIC;
/*
 * The (consumer, partition)s whose handler has events to apply, released
 * or parked and due, the one that waited longest first: what the workers
 * process.
 */
CREATE FUNCTION ordered_events.consumers_with_work()
RETURNS TABLE (consumer text, partition integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT w.consumer, w.partition
  FROM (SELECT c.consumer, s.partition, s.last_read_at AS waited_from
          FROM ordered_events.consumer_def c
          JOIN ordered_events.subscription s ON s.consumer_id = c.consumer_id
          JOIN ordered_events.release_totals t
            ON t.stream_id = s.stream_id AND t.partitions = c.partitions
           AND t.partition = s.partition
         WHERE c.handler IS NOT NULL AND t.released_count > s.taken_count
        UNION ALL
        SELECT c.consumer, ordered_events.key_partition(k.key, c.partitions), k.next_attempt_at
          FROM ordered_events.handler_state k
          JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
         WHERE k.parked > 0 AND k.held_since IS NULL AND k.next_attempt_at <= now()) w
 GROUP BY w.consumer, w.partition
 ORDER BY min(w.waited_from) NULLS FIRST, w.consumer, w.partition
$$;
COMMENT ON FUNCTION ordered_events.consumers_with_work() IS
    'Internal: the handler consumer partitions with events to apply';
REVOKE EXECUTE ON FUNCTION ordered_events.consumers_with_work() FROM PUBLIC;
-- Wake the worker when this transaction commits (redrive(), skip_held()).
CREATE FUNCTION ordered_events.wake_worker()
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_wake_worker';
COMMENT ON FUNCTION ordered_events.wake_worker() IS
    'Internal: have the worker look for work when this transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.wake_worker() FROM PUBLIC;
-- reset_consumer(): the handler is called again for the events of calls stopped past their limit.
CREATE FUNCTION ordered_events.forget_stopped_calls(consumer_id integer, partitions integer)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'oe_forget_stopped_calls';
COMMENT ON FUNCTION ordered_events.forget_stopped_calls(integer, integer) IS
    'Internal: forget the stopped handler calls of a consumer when this transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_stopped_calls(integer,integer) FROM PUBLIC;
/*
 * drop_stream(): the parked events of a dropped stream go, and a key left
 * without parked events waits no more.
 */
CREATE FUNCTION ordered_events.forget_parked(stream_id integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
WITH gone AS (
    DELETE FROM ordered_events.handler_parked p
     WHERE p.stream_id = forget_parked.stream_id
    RETURNING p.consumer_id, p.key
), counts AS (
    SELECT g.consumer_id, g.key, count(*)::integer AS n FROM gone g GROUP BY g.consumer_id, g.key
)
UPDATE ordered_events.handler_state k
   SET parked = k.parked - n.n,
       attempts = CASE WHEN k.parked = n.n THEN 0 ELSE k.attempts END,
       last_error = CASE WHEN k.parked = n.n THEN NULL ELSE k.last_error END,
       held_since = CASE WHEN k.parked = n.n THEN NULL ELSE k.held_since END,
       next_attempt_at = CASE WHEN k.parked = n.n THEN NULL ELSE k.next_attempt_at END
  FROM counts n
 WHERE k.consumer_id = n.consumer_id AND k.key = n.key
$$;
COMMENT ON FUNCTION ordered_events.forget_parked(integer) IS
    'Internal: drop the parked events of a stream';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_parked(integer) FROM PUBLIC;
-- The handler consumer its owner changes, or the error; waits for its steps.
CREATE FUNCTION ordered_events.handler_consumer_to_change(consumer text, caller regrole)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.consumer_to_change(consumer, caller);
BEGIN
    IF c.handler IS NULL THEN
        RAISE EXCEPTION 'consumer "%" has no handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Only the events of a handler consumer are held or re-driven.';
    END IF;
    -- a step in progress holds these rows and writes the keys' rows at its end
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.handler_consumer_to_change(text, regrole) IS
    'Internal: the handler consumer that redrive() or skip_held() changes, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.handler_consumer_to_change(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.redrive_as(consumer text, key text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.handler_consumer_to_change(consumer, caller);
    held bigint;
    letters bigint := 0;
    l record;
BEGIN
    -- held keys, and keys waiting for a retry: due now, with their attempts again
    UPDATE ordered_events.handler_state k
       SET held_since = NULL, attempts = 0, next_attempt_at = now()
     WHERE k.consumer_id = c.consumer_id
       AND (k.held_since IS NOT NULL OR (k.parked > 0 AND k.next_attempt_at > now()))
       AND (redrive_as.key IS NULL OR k.key = redrive_as.key);
    GET DIAGNOSTICS held = ROW_COUNT;
    IF c.on_error = 'dead_letter' THEN
        -- oldest first; a key's from one stream in seq order, as they were applied
        FOR l IN
            SELECT u.key, d.stream_id, u.seq, u.payload,
                   coalesce(u.event_ts, u.received_at) AS event_ts, u.received_at
              FROM ordered_events.unprocessed u
              JOIN ordered_events.stream_def d ON d.stream = u.stream
             WHERE u.consumer = c.consumer AND u.reason = 'exception_thrown'
               AND (redrive_as.key IS NULL OR u.key = redrive_as.key)
               AND NOT EXISTS (SELECT FROM ordered_events.handler_parked p
                                WHERE p.consumer_id = c.consumer_id AND p.key = u.key
                                  AND p.stream_id = d.stream_id AND p.seq = u.seq AND p.dead_letter)
             ORDER BY u.received_at, u.stream, u.seq
        LOOP
            INSERT INTO ordered_events.handler_parked
                (consumer_id, key, position, stream_id, seq, arrival, payload, event_ts,
                 alignment_ts, last_event, received_at, dead_letter, parked_at)
            VALUES (c.consumer_id, l.key, nextval('ordered_events.parked_position_seq'),
                    l.stream_id, l.seq, 0, l.payload, l.event_ts, l.event_ts, false,
                    l.received_at, true, now());
            INSERT INTO ordered_events.handler_state AS k
                (consumer_id, key, state, last_stream_id, last_seq, processed_count,
                 error_count, updated_at, parked, next_attempt_at)
            VALUES (c.consumer_id, l.key, NULL, l.stream_id, l.seq, 0, 0, now(), 1, now())
            ON CONFLICT ON CONSTRAINT handler_state_pkey DO UPDATE
               SET parked = k.parked + 1, next_attempt_at = coalesce(k.next_attempt_at, now());
            letters := letters + 1;
        END LOOP;
    END IF;
    PERFORM ordered_events.wake_worker();
    RETURN held + letters;
END;
$$;
COMMENT ON FUNCTION ordered_events.redrive_as(text, text, regrole) IS
    'Internal: redrive() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.redrive_as(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.redrive(consumer text, key text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.redrive(text, text) IS
    'Apply a handler consumer''s held events and pending retries (of one key or all) in its next step, and a dead_letter consumer''s dead letters; returns how many were queued; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.redrive(text,text) FROM PUBLIC;
CREATE FUNCTION ordered_events.skip_held_as(consumer text, key text, reason text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    k ordered_events.handler_state;
    e ordered_events.handler_parked;
BEGIN
    PERFORM ordered_events.check_not_null('key', key IS NULL);
    PERFORM ordered_events.check_not_null('reason', reason IS NULL);
    c := ordered_events.handler_consumer_to_change(consumer, caller);
    SELECT * INTO k FROM ordered_events.handler_state s
     WHERE s.consumer_id = c.consumer_id AND s.key = skip_held_as.key AND s.held_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    DELETE FROM ordered_events.handler_parked p
     WHERE (p.consumer_id, p.key, p.position) =
           (SELECT q.consumer_id, q.key, q.position FROM ordered_events.handler_parked q
             WHERE q.consumer_id = c.consumer_id AND q.key = skip_held_as.key
             ORDER BY q.position LIMIT 1)
    RETURNING * INTO e;
    IF e.dead_letter THEN
        DELETE FROM ordered_events.unprocessed u
         WHERE u.consumer = c.consumer AND u.key = e.key AND u.seq = e.seq
           AND u.stream = (SELECT d.stream FROM ordered_events.stream_def d WHERE d.stream_id = e.stream_id);
    END IF;
    INSERT INTO ordered_events.unprocessed
        (stream, seq, key, payload, event_ts, reason, detail, received_at, consumer)
    SELECT d.stream, e.seq, e.key, e.payload, e.event_ts, 'exception_thrown',
           format('Skipped by %s: %s. Its last error, at attempt %s: %s', caller, reason,
                  k.attempts, k.last_error),
           e.received_at, c.consumer
      FROM ordered_events.stream_def d WHERE d.stream_id = e.stream_id;
    UPDATE ordered_events.handler_state s
       SET held_since = NULL, attempts = 0, last_error = NULL, parked = s.parked - 1,
           processed_count = s.processed_count + 1,
           next_attempt_at = CASE WHEN s.parked > 1 THEN now() END
     WHERE s.consumer_id = c.consumer_id AND s.key = skip_held_as.key;
    PERFORM ordered_events.wake_worker();
    RETURN 1;
END;
$$;
COMMENT ON FUNCTION ordered_events.skip_held_as(text, text, text, regrole) IS
    'Internal: skip_held() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.skip_held_as(text,text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.skip_held(consumer text, key text, reason text)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.skip_held(text, text, text) IS
    'Make the held event of a key a dead letter, with the reason, so that the key goes on; returns 1, or 0 if the key is not held; for the consumer''s owner';
REVOKE EXECUTE ON FUNCTION ordered_events.skip_held(text,text,text) FROM PUBLIC;
CREATE VIEW ordered_events.key_state AS
SELECT c.consumer, k.key, k.state, d.stream AS last_stream, k.last_seq,
       k.processed_count, k.error_count, k.updated_at,
       k.attempts, CASE WHEN k.held_since IS NULL THEN k.next_attempt_at END AS next_attempt_at,
       k.held_since IS NOT NULL AS held
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = k.last_stream_id;
COMMENT ON VIEW ordered_events.key_state IS
    'The state of each key of each handler consumer, how many of its events were applied, and whether it waits for a retry or is held';
-- The held keys and the event each waits on: by an index of the held keys.
CREATE VIEW ordered_events.held AS
SELECT c.consumer, k.key, d.stream, p.seq, k.attempts, k.last_error, k.held_since
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
 CROSS JOIN LATERAL (SELECT q.stream_id, q.seq FROM ordered_events.handler_parked q
                      WHERE q.consumer_id = k.consumer_id AND q.key = k.key
                      ORDER BY q.position LIMIT 1) p
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id
 WHERE k.held_since IS NOT NULL;
COMMENT ON VIEW ordered_events.held IS
    'The held events of handler consumers, one per held key: their key''s later events wait until redrive() or skip_held()';
CREATE VIEW ordered_events.results AS
SELECT c.consumer, r.position, d.stream, r.seq, r.key, r.result, r.produced_at
  FROM ordered_events.handler_result r
  JOIN ordered_events.consumer_def c ON c.consumer_id = r.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = r.stream_id
 ORDER BY r.position;
COMMENT ON VIEW ordered_events.results IS
    'The results of handler consumers without an output stream, in processing order';
