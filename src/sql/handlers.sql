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
-- The (consumer, partition)s whose handler has events to apply, the one
-- that waited longest first: what a worker cycle processes.
CREATE FUNCTION ordered_events.consumers_with_work()
RETURNS TABLE (consumer text, partition integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT c.consumer, s.partition
  FROM ordered_events.consumer_def c
  JOIN ordered_events.subscription s ON s.consumer_id = c.consumer_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 WHERE c.handler IS NOT NULL AND t.released_count > s.taken_count
 GROUP BY c.consumer, s.partition
 ORDER BY min(s.last_read_at) NULLS FIRST, c.consumer, s.partition
$$;
COMMENT ON FUNCTION ordered_events.consumers_with_work() IS
    'Internal: the handler consumer partitions with events to apply';
REVOKE EXECUTE ON FUNCTION ordered_events.consumers_with_work() FROM PUBLIC;
CREATE VIEW ordered_events.key_state AS
SELECT c.consumer, k.key, k.state, d.stream AS last_stream, k.last_seq,
       k.processed_count, k.error_count, k.updated_at
  FROM ordered_events.handler_state k
  JOIN ordered_events.consumer_def c ON c.consumer_id = k.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = k.last_stream_id;
COMMENT ON VIEW ordered_events.key_state IS
    'The state of each key of each handler consumer, and how many of its events were applied';
CREATE VIEW ordered_events.results AS
SELECT c.consumer, r.position, d.stream, r.seq, r.key, r.result, r.produced_at
  FROM ordered_events.handler_result r
  JOIN ordered_events.consumer_def c ON c.consumer_id = r.consumer_id
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = r.stream_id
 ORDER BY r.position;
COMMENT ON VIEW ordered_events.results IS
    'The results of handler consumers without an output stream, in processing order';
