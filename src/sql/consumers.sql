/*
 * Consumers: named readers of the released events of their streams, in one
 * merged sequence (docs/consuming.md; the read is src/consumer_read.c, what
 * release steps record for it src/delivery.c).
 */

CREATE SEQUENCE ordered_events.consumer_id_seq AS integer;
/*
 * A consumer has an owner, the role that created it, who alone may read it
 * (a consumer that 0.2 made without a handler has none: who may execute
 * read() may read it, until alter_consumer() gives it one).
 * A consumer with a handler is read by the extension (src/handler.c): the
 * handler runs as "owner", the role that created the consumer.  The
 * handler is kept as its signature's text and the roles as regroles, so
 * that a dump, a restore and pg_upgrade keep them by name.  The handler
 * function's owner at creation (handler_owner) must still own it when it
 * runs: a function of that signature created by another role, after the
 * first was dropped, never runs with the consumer owner's rights.
 */
CREATE TABLE ordered_events.consumer_def (
    consumer_id integer PRIMARY KEY
        DEFAULT pg_catalog.nextval('ordered_events.consumer_id_seq'),
    consumer text NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    handler text,
    owner regrole,                  -- NULL: a consumer of 0.2 without a handler
    handler_owner regrole,
    output_stream_id integer REFERENCES ordered_events.stream_def,
    alignment text NOT NULL DEFAULT 'inherit' CHECK (alignment IN ('inherit', 'processing')),
    handler_timeout interval
        CHECK (handler_timeout > interval '0' AND handler_timeout <= interval '24 days'),
    on_error text NOT NULL DEFAULT 'dead_letter' CHECK (on_error IN ('dead_letter', 'hold')),
    max_attempts integer NOT NULL DEFAULT 1 CHECK (max_attempts BETWEEN 1 AND 100),
    retry_delay interval NOT NULL DEFAULT '1 s'
        CHECK (retry_delay >= interval '0' AND retry_delay <= interval '1 day'),
    -- named as the updates from 0.1 named them
    CONSTRAINT consumer_def_check CHECK ((handler IS NULL) = (handler_owner IS NULL)),
    CONSTRAINT consumer_def_check1 CHECK (handler IS NOT NULL OR output_stream_id IS NULL),
    delivery text NOT NULL DEFAULT 'transaction' CHECK (delivery IN ('transaction', 'lease')),
    CONSTRAINT consumer_def_lease_check CHECK (delivery = 'transaction' OR handler IS NULL)
);
CREATE INDEX consumer_def_output_idx ON ordered_events.consumer_def (output_stream_id);
ALTER SEQUENCE ordered_events.consumer_id_seq OWNED BY ordered_events.consumer_def.consumer_id;
COMMENT ON TABLE ordered_events.consumer_def IS
    'Internal: one row per consumer';
COMMENT ON COLUMN ordered_events.consumer_def.handler_timeout IS
    'The limit of one handler call; NULL: the server''s ordered_events.handler_timeout';
COMMENT ON COLUMN ordered_events.consumer_def.on_error IS
    'What becomes of an event whose handler failed max_attempts times: ''dead_letter'' or ''hold''';
COMMENT ON COLUMN ordered_events.consumer_def.delivery IS
    '''transaction'': read() consumes events in the reading transaction; ''lease'': receive() leases them until ack() (src/lease.c)';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.consumer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.consumer_def', '');

/*
 * A consumer's position in a stream, per partition.  The position is the
 * last event taken: (read_delivery, read_seq), its release log row and
 * seq; what follows in delivery order is unread.  taken_* is what left
 * the pool (events taken, and for start 'now' those released before).
 * The pool is what committed reads left, so the transaction that read
 * last (read_xid) keeps in base_* the position and taken_* it started
 * from.  Reading locks the rows of its (consumer, partition).
 */
CREATE TABLE ordered_events.subscription (
    consumer_id integer NOT NULL
        REFERENCES ordered_events.consumer_def ON DELETE CASCADE,
    partition integer NOT NULL,
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    delay interval NOT NULL,
    read_delivery bigint NOT NULL,
    read_seq bigint NOT NULL,
    taken_count bigint NOT NULL,
    taken_lag numeric NOT NULL,
    consumed_count bigint NOT NULL DEFAULT 0,
    read_xid xid8,
    base_delivery bigint,
    base_seq bigint,
    base_count bigint,
    base_lag numeric,
    last_read_at timestamptz,
    subscribed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (consumer_id, partition, stream_id)
);
CREATE INDEX subscription_stream_idx ON ordered_events.subscription (stream_id);
COMMENT ON TABLE ordered_events.subscription IS
    'Internal: the delay and position of a consumer in a stream, per partition';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.subscription', '');

/*
 * What each stream has released, per partition of the partition counts its
 * consumers use (partitions 1 always): a consumer's pool is what is here
 * minus what it took out, so neither a read nor the consumers view counts
 * the pool.  Release steps add to it (src/delivery.c).
 */
CREATE TABLE ordered_events.release_totals (
    stream_id integer NOT NULL
        REFERENCES ordered_events.stream_def ON DELETE CASCADE,
    partitions integer NOT NULL,
    partition integer NOT NULL,
    released_count bigint NOT NULL DEFAULT 0,
    lag_sum numeric NOT NULL DEFAULT 0,     -- of lag_us()
    PRIMARY KEY (stream_id, partitions, partition)
);
COMMENT ON TABLE ordered_events.release_totals IS
    'Internal: count and summed lag of the released events of each stream, by partition';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.release_totals', '');

-- An event's lag, event_ts - alignment_ts, in microseconds, exact; an
-- event with an infinite time has none.  src/delivery.c computes the same.
CREATE FUNCTION ordered_events.lag_us(event_ts timestamptz, alignment_ts timestamptz)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN isfinite(event_ts) AND isfinite(alignment_ts)
            THEN (extract(epoch FROM event_ts) - extract(epoch FROM alignment_ts)) * 1000000
            ELSE 0 END
$$;
COMMENT ON FUNCTION ordered_events.lag_us(timestamptz, timestamptz) IS
    'Internal: event_ts - alignment_ts in microseconds (0 if either is infinite)';
CREATE FUNCTION ordered_events.key_partition(key text, partitions integer)
RETURNS integer
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_key_partition';
COMMENT ON FUNCTION ordered_events.key_partition(text, integer) IS
    'The partition, 0 .. partitions - 1, of a key: (hashtextextended(key, 0) & 9223372036854775807) % partitions';
-- The error for a NULL argument of a consumer function.
CREATE FUNCTION ordered_events.check_not_null(argument text, is_null boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF is_null THEN
        RAISE EXCEPTION '% must not be null', argument
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass a value, or leave out an argument that has a default.';
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.check_not_null(text, boolean) IS
    'Internal: the error for a NULL argument';
-- The consumer's row, or the one error for an unknown consumer.
CREATE FUNCTION ordered_events.consumer_or_error(consumer text)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    SELECT * INTO c FROM ordered_events.consumer_def d WHERE d.consumer = consumer_or_error.consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" does not exist', consumer
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with ordered_events.create_consumer(); the view ordered_events.consumers lists the consumers.';
    END IF;
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.consumer_or_error(text) IS
    'Internal: a consumer''s row, or the error for an unknown consumer';
/*
 * The consumer that drop_consumer(), subscribe(), unsubscribe() and
 * alter_consumer() change, or the error: unknown, another's, or its own
 * handler's (check_not_in_step(), in handlers.sql).  "for_update" locks its
 * row (FOR NO KEY UPDATE: readers' foreign key checks do not wait).
 */
CREATE FUNCTION ordered_events.consumer_to_change(consumer text, caller regrole,
                                                  for_update boolean DEFAULT false)
RETURNS ordered_events.consumer_def
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    IF for_update THEN
        SELECT * INTO c FROM ordered_events.consumer_def d
         WHERE d.consumer = consumer_to_change.consumer FOR NO KEY UPDATE;
    END IF;
    IF c.consumer_id IS NULL THEN
        c := ordered_events.consumer_or_error(consumer);
    END IF;
    PERFORM ordered_events.check_owner('consumer', consumer, c.owner, caller);
    PERFORM ordered_events.check_not_in_step(c.consumer_id);
    RETURN c;
END;
$$;
COMMENT ON FUNCTION ordered_events.consumer_to_change(text, regrole, boolean) IS
    'Internal: a consumer its owner changes, or the error';
REVOKE EXECUTE ON FUNCTION ordered_events.consumer_to_change(text,regrole,boolean) FROM PUBLIC;
/*
 * drop_consumer() and drop_stream() wait for a read in progress without a
 * deadlock: they lock the subscription rows first, in read()'s order (by
 * consumer, partition, stream: consumer_read.c, PLAN_LOCK), holding
 * nothing a reader needs.  Deleting the consumer's or stream's row first
 * would hold FOR KEY SHARE on it while the cascade waits for the rows a
 * read() holds, and a second read() in that transaction, updating rows it
 * wrote, checks its foreign keys against that row: 40P01.
 */
CREATE FUNCTION ordered_events.lock_subscriptions(consumer_id integer, stream_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lock_subscriptions.consumer_id IS NOT NULL THEN
        PERFORM FROM ordered_events.subscription s
         WHERE s.consumer_id = lock_subscriptions.consumer_id
         ORDER BY s.partition, s.stream_id
           FOR UPDATE;
    ELSE
        PERFORM FROM ordered_events.subscription s
         WHERE s.stream_id = lock_subscriptions.stream_id
         ORDER BY s.consumer_id, s.partition
           FOR UPDATE;
    END IF;
END;
$$;
COMMENT ON FUNCTION ordered_events.lock_subscriptions(integer, integer) IS
    'Internal: wait for the reads of a consumer (or of a stream, consumer_id NULL) in progress, locking their subscription rows as read() does';
REVOKE EXECUTE ON FUNCTION ordered_events.lock_subscriptions(integer,integer) FROM PUBLIC;
/*
 * Whether this transaction read the subscription row: its read_xid is this
 * transaction and this transaction wrote the row's version (xmin, a
 * subtransaction's too).  The second half keeps a read_xid from another
 * cluster (a restored dump) from ever being taken for this transaction's.
 */
CREATE FUNCTION ordered_events.read_here(read_xid xid8, row_xmin xid)
RETURNS boolean
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'oe_read_here';
COMMENT ON FUNCTION ordered_events.read_here(xid8, xid) IS
    'Internal: whether the current transaction read a subscription row';
-- The position and taken_* as committed reads left them (see subscription).
-- The view consumers calls it as its reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.committed_position(s ordered_events.subscription, row_xmin xid)
RETURNS TABLE (read_delivery bigint, read_seq bigint, taken_count bigint, taken_lag numeric)
LANGUAGE sql VOLATILE
ROWS 1      -- one row; the default 1000 made the consumers view cost enough for JIT
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN mine THEN s.base_delivery ELSE s.read_delivery END,
       CASE WHEN mine THEN s.base_seq ELSE s.read_seq END,
       CASE WHEN mine THEN s.base_count ELSE s.taken_count END,
       CASE WHEN mine THEN s.base_lag ELSE s.taken_lag END
  FROM (SELECT coalesce(ordered_events.read_here(s.read_xid, row_xmin), false) AS mine) x
$$;
COMMENT ON FUNCTION ordered_events.committed_position(ordered_events.subscription, xid) IS
    'Internal: a subscription''s position as committed reads left it';
-- Fill release_totals for a stream and a partition count, from its released events.
CREATE FUNCTION ordered_events.count_released(stream_id integer, partitions integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO ordered_events.release_totals (stream_id, partitions, partition, released_count, lag_sum)
SELECT count_released.stream_id, count_released.partitions, p.p,
       coalesce(r.released_count, 0), coalesce(r.lag_sum, 0)
  FROM generate_series(0, count_released.partitions - 1) p(p)
  LEFT JOIN ordered_events.kept_released(count_released.stream_id, count_released.partitions) r
    ON r.partition = p.p
$$;
COMMENT ON FUNCTION ordered_events.count_released(integer, integer) IS
    'Internal: fill release_totals for a stream and a partition count';
REVOKE EXECUTE ON FUNCTION ordered_events.count_released(integer,integer) FROM PUBLIC;
/*
 * Drop release_totals of partition counts no consumer of the stream uses
 * any more.  The caller holds the stream's release lock, so that no
 * subscribe() counts them meanwhile.
 */
CREATE FUNCTION ordered_events.forget_unused_totals(stream_id integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DELETE FROM ordered_events.release_totals t
 WHERE t.stream_id = forget_unused_totals.stream_id AND t.partitions > 1
   AND NOT EXISTS (SELECT FROM ordered_events.subscription s
                     JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
                    WHERE s.stream_id = t.stream_id AND c.partitions = t.partitions)
$$;
COMMENT ON FUNCTION ordered_events.forget_unused_totals(integer) IS
    'Internal: drop the release totals of partition counts no consumer of the stream uses';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_unused_totals(integer) FROM PUBLIC;
CREATE FUNCTION ordered_events.define_consumer(
    consumer text, partitions integer, handler regprocedure, output_stream text,
    alignment text, handler_timeout interval, on_error text, max_attempts integer,
    retry_delay interval, delivery text, owner regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    output_id integer;
BEGIN
    IF consumer !~ '^[a-z_][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'invalid consumer name: %', quote_literal(consumer)
            USING ERRCODE = 'invalid_name',
                  HINT = 'A consumer name has 1 to 63 characters: lower-case letters, digits and underscores, not starting with a digit.';
    END IF;
    IF partitions NOT BETWEEN 1 AND 1024 THEN
        PERFORM ordered_events.invalid_option('partitions', partitions::text,
            'Use 1 to 1024: the number of sessions that may read the consumer in parallel.');
    END IF;
    IF alignment NOT IN ('inherit', 'processing') THEN
        PERFORM ordered_events.invalid_option('alignment', alignment,
            'Use ''inherit'' (a derived event has its parent''s alignment_ts) or ''processing'' (the time it is derived).');
    END IF;
    IF delivery NOT IN ('transaction', 'lease') THEN
        PERFORM ordered_events.invalid_option('delivery', delivery,
            'Use ''transaction'' (read() consumes events in the reading transaction: exactly once) or ''lease'' (receive() leases them until ack(): at least once, for work outside the database).');
    END IF;
    IF delivery = 'lease' AND max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many times an event is delivered before it becomes a dead letter.');
    END IF;
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF delivery = 'lease' THEN
        IF handler IS NOT NULL THEN
            RAISE EXCEPTION 'a consumer with a handler cannot have delivery ''lease'''
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The extension applies a handler''s events itself, exactly once: leave out delivery, or leave out the handler for a consumer whose events receive() leases to an application.';
        END IF;
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL
           OR on_error <> 'dead_letter' OR retry_delay <> interval '1 s' THEN
            RAISE EXCEPTION 'output_stream, alignment, handler_timeout, on_error and retry_delay need a handler'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'A lease consumer takes max_attempts: how many times an event is delivered before it becomes a dead letter.';
        END IF;
    ELSIF handler IS NULL THEN
        IF output_stream IS NOT NULL OR alignment <> 'inherit' OR handler_timeout IS NOT NULL
           OR on_error <> 'dead_letter' OR max_attempts <> 1 OR retry_delay <> interval '1 s' THEN
            RAISE EXCEPTION 'output_stream, alignment, handler_timeout, on_error, max_attempts and retry_delay need a handler'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass handler => ''fn(jsonb, ordered_events.event)''::regprocedure, or leave these out.';
        END IF;
    ELSE
        PERFORM ordered_events.check_handler(handler, owner);
        IF output_stream IS NOT NULL THEN
            output_id := (ordered_events.output_stream_or_error(output_stream, owner)).stream_id;
        END IF;
    END IF;
    INSERT INTO ordered_events.consumer_def
        (consumer, partitions, handler, owner, handler_owner, output_stream_id, alignment,
         handler_timeout, on_error, max_attempts, retry_delay, delivery)
    VALUES (define_consumer.consumer, define_consumer.partitions, handler::text, owner,
            (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = handler),
            output_id, define_consumer.alignment, define_consumer.handler_timeout,
            define_consumer.on_error,
            -- NULL: 1 (no retry of a handler), 10 deliveries of a leased event
            coalesce(define_consumer.max_attempts,
                     CASE WHEN define_consumer.delivery = 'lease' THEN 10 ELSE 1 END),
            define_consumer.retry_delay, define_consumer.delivery);
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'consumer "%" already exists', consumer
        USING ERRCODE = 'duplicate_object',
              HINT = 'Drop it first with ordered_events.drop_consumer(), or choose another name.';
END;
$$;
COMMENT ON FUNCTION ordered_events.define_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text, regrole) IS
    'Internal: create_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.define_consumer(text,integer,regprocedure,text,text,interval,text,integer,interval,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.create_consumer(
    consumer text,
    partitions integer DEFAULT 1,
    handler regprocedure DEFAULT NULL,
    output_stream text DEFAULT NULL,
    alignment text DEFAULT 'inherit',
    handler_timeout interval DEFAULT NULL,
    on_error text DEFAULT 'dead_letter',
    max_attempts integer DEFAULT NULL,
    retry_delay interval DEFAULT '1 s',
    delivery text DEFAULT 'transaction')
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_create_consumer';
COMMENT ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text) IS
    'Create a consumer owned by the calling role: a named reader of the released events of the streams it subscribes to, read by the extension through a handler if one is given, leased by receive() with delivery ''lease''';
REVOKE EXECUTE ON FUNCTION ordered_events.create_consumer(text,integer,regprocedure,text,text,interval,text,integer,interval,text) FROM PUBLIC;
CREATE FUNCTION ordered_events.alter_consumer_as(consumer text, on_error text,
                                                 max_attempts integer, retry_delay interval,
                                                 handler_timeout interval,
                                                 owner regrole, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    s record;
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller, for_update => true);
    IF c.delivery = 'lease' AND max_attempts NOT BETWEEN 1 AND 100 THEN
        PERFORM ordered_events.invalid_option('max_attempts', max_attempts::text,
            'Use 1 to 100: how many times an event is delivered before it becomes a dead letter.');
    END IF;
    PERFORM ordered_events.check_handler_timeout(handler_timeout);
    PERFORM ordered_events.check_failure_policy(on_error, max_attempts, retry_delay);
    IF c.handler IS NULL AND (handler_timeout IS NOT NULL OR on_error IS NOT NULL
                              OR (max_attempts IS NOT NULL AND c.delivery <> 'lease')
                              OR retry_delay IS NOT NULL) THEN
        RAISE EXCEPTION 'consumer "%" has no handler', consumer
            USING ERRCODE = 'wrong_object_type',
                  HINT = CASE WHEN c.delivery = 'lease'
                              THEN 'handler_timeout, on_error and retry_delay rule the calls of a handler; a lease consumer takes max_attempts.'
                              ELSE 'handler_timeout, on_error, max_attempts and retry_delay rule the calls of a handler; a consumer without one is read by read().' END;
    END IF;
    IF alter_consumer_as.owner IS NOT NULL THEN
        -- the new owner must be allowed what the consumer does
        PERFORM ordered_events.check_new_owner('consumer', consumer, alter_consumer_as.owner, caller);
        IF c.handler IS NOT NULL THEN
            PERFORM ordered_events.check_handler(c.handler::regprocedure, alter_consumer_as.owner);
        END IF;
        FOR s IN SELECT d.stream, 'write' AS privilege FROM ordered_events.stream_def d
                  WHERE d.stream_id = c.output_stream_id
                 UNION
                 SELECT d.stream, 'read' FROM ordered_events.subscription x
                   JOIN ordered_events.stream_def d ON d.stream_id = x.stream_id
                  WHERE x.consumer_id = c.consumer_id
        LOOP
            PERFORM ordered_events.check_stream_privilege(s.stream, s.privilege,
                                                          alter_consumer_as.owner);
        END LOOP;
    END IF;
    UPDATE ordered_events.consumer_def d
       SET handler_timeout = coalesce(alter_consumer_as.handler_timeout, d.handler_timeout),
           on_error = coalesce(alter_consumer_as.on_error, d.on_error),
           max_attempts = coalesce(alter_consumer_as.max_attempts, d.max_attempts),
           retry_delay = coalesce(alter_consumer_as.retry_delay, d.retry_delay),
           owner = coalesce(alter_consumer_as.owner, d.owner)
     WHERE d.consumer_id = c.consumer_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.alter_consumer_as(text, text, integer, interval, interval, regrole, regrole) IS
    'Internal: alter_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.alter_consumer_as(text,text,integer,interval,interval,regrole,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.alter_consumer(
    consumer text,
    on_error text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    retry_delay interval DEFAULT NULL,
    handler_timeout interval DEFAULT NULL,
    owner regrole DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.alter_consumer(text, text, integer, interval, interval, regrole) IS
    'Change the failure policy or handler_timeout of a consumer, or give it to another role; NULL keeps the value; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.alter_consumer(text,text,integer,interval,interval,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.drop_consumer_as(consumer text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    streams integer[];
BEGIN
    c := ordered_events.consumer_to_change(consumer, caller);
    -- First wait for its reads, as read() locks: never a deadlock with one.
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    SELECT array_agg(DISTINCT s.stream_id) INTO streams
      FROM ordered_events.subscription s WHERE s.consumer_id = c.consumer_id;
    PERFORM ordered_events.lock_streams(streams);
    -- Waits for a read of the consumer in progress (it locks these rows).
    DELETE FROM ordered_events.consumer_def d WHERE d.consumer_id = c.consumer_id;
    -- its handler's states, results and dead letters, and its leases go
    -- with it, as a stream's dead letters go with drop_stream()
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_parked p WHERE p.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    DELETE FROM ordered_events.lease x WHERE x.consumer_id = c.consumer_id;
    PERFORM ordered_events.forget_unused_totals(id) FROM unnest(streams) id;
END;
$$;
COMMENT ON FUNCTION ordered_events.drop_consumer_as(text, regrole) IS
    'Internal: drop_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.drop_consumer_as(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.drop_consumer(consumer text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.drop_consumer(text) IS
    'Drop a consumer, its positions, and a handler consumer''s states, results and dead letters';
REVOKE EXECUTE ON FUNCTION ordered_events.drop_consumer(text) FROM PUBLIC;
CREATE FUNCTION ordered_events.subscribe_as(
    consumer text, stream text, delay interval, start text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('delay', delay IS NULL);
    PERFORM ordered_events.check_not_null('start', start IS NULL);
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    -- its owner reads the stream through it (a consumer of 0.2 without one: the caller)
    PERFORM ordered_events.check_stream_privilege(stream, 'read', coalesce(c.owner, caller));
    IF d.stream_id = c.output_stream_id THEN
        RAISE EXCEPTION 'stream "%" is the output stream of consumer "%"', stream, consumer
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A handler does not read what it derives: subscribe the consumer to other streams, and another consumer to this one.';
    END IF;
    IF delay < '0 s' OR extract(year FROM delay) <> 0 OR extract(month FROM delay) <> 0
       OR extract(day FROM delay) <> 0 THEN
        PERFORM ordered_events.invalid_option('delay', delay::text,
            'Use an interval of hours, minutes and seconds, at least 0: days and months have no fixed length.');
    END IF;
    IF start NOT IN ('beginning', 'now') THEN
        PERFORM ordered_events.invalid_option('start', start,
            'Use ''beginning'' (every event the stream released or will release) or ''now'' (only events released from now on).');
    END IF;

    -- No release step of the stream runs while its position is set.
    PERFORM ordered_events.lock_streams(ARRAY[d.stream_id]);
    UPDATE ordered_events.subscription s SET delay = subscribe_as.delay
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id;
    IF FOUND THEN
        RETURN;                 -- subscribed already: a new delay, the same position
    END IF;
    PERFORM ordered_events.check_no_cycle(c, d.stream_id);

    IF NOT EXISTS (SELECT FROM ordered_events.release_totals t
                    WHERE t.stream_id = d.stream_id AND t.partitions = c.partitions) THEN
        PERFORM ordered_events.count_released(d.stream_id, c.partitions);
    END IF;
    INSERT INTO ordered_events.subscription
        (consumer_id, partition, stream_id, delay, read_delivery, read_seq, taken_count, taken_lag)
    SELECT c.consumer_id, t.partition, d.stream_id, subscribe_as.delay,
           CASE WHEN start = 'now'
                THEN coalesce((SELECT max(l.delivery) FROM ordered_events.lane_release_log l
                                WHERE l.stream_id = d.stream_id), 0)
                ELSE 0 END,
           9223372036854775807,
           -- what a retention deleted is out of the pool from the beginning
           CASE WHEN start = 'now' THEN t.released_count
                WHEN d.retains_events THEN t.released_count - coalesce(k.released_count, 0)
                ELSE 0 END,
           CASE WHEN start = 'now' THEN t.lag_sum
                WHEN d.retains_events THEN t.lag_sum - coalesce(k.lag_sum, 0)
                ELSE 0 END
      FROM ordered_events.release_totals t
      LEFT JOIN LATERAL (
            SELECT * FROM ordered_events.kept_released(d.stream_id, c.partitions)
             WHERE d.retains_events AND start = 'beginning') k
        ON k.partition = t.partition
     WHERE t.stream_id = d.stream_id AND t.partitions = c.partitions;
END;
$$;
COMMENT ON FUNCTION ordered_events.subscribe_as(text, text, interval, text, regrole) IS
    'Internal: subscribe() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.subscribe_as(text,text,interval,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.subscribe(
    consumer text,
    stream text,
    delay interval DEFAULT '0 s',
    start text DEFAULT 'beginning')
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.subscribe(text, text, interval, text) IS
    'Subscribe a consumer to a stream (again: change its delay, keep its position)';
REVOKE EXECUTE ON FUNCTION ordered_events.subscribe(text,text,interval,text) FROM PUBLIC;
CREATE FUNCTION ordered_events.unsubscribe_as(consumer text, stream text, caller regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    -- the order of seek() and drop_consumer(): the positions, in read()'s
    -- order, then the stream's release lock (either way round: 40P01)
    PERFORM ordered_events.lock_subscriptions(c.consumer_id, NULL);
    PERFORM ordered_events.lock_streams(ARRAY[d.stream_id]);
    DELETE FROM ordered_events.subscription s
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" is not subscribed to stream "%"', consumer, stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'The view ordered_events.consumers lists the subscriptions.';
    END IF;
    PERFORM ordered_events.forget_unused_totals(d.stream_id);
END;
$$;
COMMENT ON FUNCTION ordered_events.unsubscribe_as(text, text, regrole) IS
    'Internal: unsubscribe() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.unsubscribe_as(text,text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.unsubscribe(consumer text, stream text)
RETURNS void
LANGUAGE c VOLATILE SECURITY INVOKER
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.unsubscribe(text, text) IS
    'Unsubscribe a consumer from a stream: its position there is forgotten';
REVOKE EXECUTE ON FUNCTION ordered_events.unsubscribe(text,text) FROM PUBLIC;
/*
 * Move a consumer's positions in streams, in every partition (seek() and
 * reset_consumer()): to 'beginning' or 'now' as subscribe() places them,
 * or with released_at before the first release run (by delivery) released
 * at or after it.  Each partition's taken_* become what is before the new
 * position: the stream's totals minus the events read() finds after it
 * (the release runs after the position, that partition's events in them,
 * none in a skipped run not settled yet), so that unread_count is what
 * read() returns, whatever a retention deleted.  Returns the unread count
 * after it, over the streams and partitions.  consumed_count stays: events
 * read again are counted again.  The position becomes committed for this
 * transaction (read_xid and base_* cleared): a read() after it in the same
 * transaction starts from it.
 *
 * Locks: the subscription rows of the streams, in read()'s order (by
 * partition, then stream), so that a read or processing step of the
 * consumer in progress ends first and the next waits for this transaction;
 * then the streams' release locks, so that no release step or compaction
 * changes what is counted until this transaction ends.  It refuses
 * REPEATABLE READ and SERIALIZABLE (25000), as compaction does: a snapshot
 * taken before the locks could count events a compaction deleted meanwhile.
 */
CREATE FUNCTION ordered_events.seek_streams(c ordered_events.consumer_def, stream_ids integer[],
                                            start text, released_at timestamptz, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
    first_run bigint;
    after_run bigint;
    whole boolean;
    total bigint := 0;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'cannot seek consumer "%" in a % transaction', c.consumer,
                        current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  DETAIL = 'A seek counts the events it makes unread once it holds the streams'' locks; this transaction''s snapshot may predate a compaction that deleted some of them.',
                  HINT = 'Call it in a READ COMMITTED transaction.';
    END IF;
    PERFORM FROM ordered_events.subscription s
     WHERE s.consumer_id = c.consumer_id AND s.stream_id = ANY (stream_ids)
     ORDER BY s.partition, s.stream_id
       FOR UPDATE;
    PERFORM ordered_events.lock_streams(stream_ids);
    FOR d IN SELECT * FROM ordered_events.stream_def x
              WHERE x.stream_id = ANY (stream_ids) ORDER BY x.stream_id
    LOOP
        -- its owner reads the stream through it (a consumer of 0.2 without one: the caller)
        PERFORM ordered_events.check_stream_privilege(d.stream, 'read', coalesce(c.owner, caller));
        first_run := NULL;
        after_run := 0;
        IF seek_streams.released_at IS NOT NULL THEN
            SELECT l.delivery INTO first_run FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id AND l.released_at >= seek_streams.released_at
             ORDER BY l.delivery LIMIT 1;
        END IF;
        IF seek_streams.released_at IS NOT NULL OR start = 'now' THEN
            -- after the last run before it (none: every run is after it)
            SELECT coalesce(max(l.delivery), 0) INTO after_run FROM ordered_events.lane_release_log l
             WHERE l.stream_id = d.stream_id AND (first_run IS NULL OR l.delivery < first_run);
        END IF;
        -- every event released is still there: nothing is before the position
        whole := after_run = 0 AND NOT d.retains_events;
        WITH kept AS (
            SELECT ordered_events.key_partition(CASE WHEN d.sequencing = 'per_key' THEN e.lane
                                                     ELSE e.key END, c.partitions) AS partition,
                   count(*) AS released_count,
                   sum(ordered_events.lag_us(e.event_ts, e.alignment_ts)) AS lag_sum
              FROM ordered_events.lane_release_log l
              JOIN ordered_events.event_store e
                ON e.stream_id = l.stream_id AND e.lane = l.lane
               AND e.seq >= l.seq_start AND e.seq < l.seq_end
             WHERE NOT whole AND l.stream_id = d.stream_id AND l.delivery > after_run
               AND NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                                WHERE g.stream_id = e.stream_id AND g.lane = e.lane
                                  AND NOT g.settled AND e.seq BETWEEN g.gap_start AND g.gap_end)
             GROUP BY 1
        ), moved AS (
            UPDATE ordered_events.subscription s
               SET read_delivery = after_run, read_seq = 9223372036854775807,
                   taken_count = CASE WHEN whole THEN 0
                                      ELSE t.released_count - coalesce(u.released_count, 0) END,
                   taken_lag = CASE WHEN whole THEN 0 ELSE t.lag_sum - coalesce(u.lag_sum, 0) END,
                   read_xid = NULL, base_delivery = NULL, base_seq = NULL, base_count = NULL,
                   base_lag = NULL
              FROM ordered_events.release_totals t
              LEFT JOIN kept u ON u.partition = t.partition
             WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id
               AND t.stream_id = d.stream_id AND t.partitions = c.partitions
               AND t.partition = s.partition
            RETURNING t.released_count - s.taken_count AS unread_count
        )
        SELECT total + coalesce(sum(m.unread_count), 0) INTO total FROM moved m;
    END LOOP;
    -- a lease consumer's events of these streams out now are not any more
    IF c.delivery = 'lease' THEN
        PERFORM ordered_events.forget_leases(c.consumer_id, stream_ids);
    END IF;
    IF c.handler IS NOT NULL THEN
        PERFORM ordered_events.wake_worker();
    END IF;
    RETURN total;
END;
$$;
COMMENT ON FUNCTION ordered_events.seek_streams(ordered_events.consumer_def, integer[], text, timestamptz, regrole) IS
    'Internal: move a consumer''s positions in streams, every partition; the unread count after it';
REVOKE EXECUTE ON FUNCTION ordered_events.seek_streams(ordered_events.consumer_def,integer[],text,timestamp with time zone,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.seek_as(consumer text, stream text, start text,
                                       released_at timestamptz, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def;
    d ordered_events.stream_def;
BEGIN
    PERFORM ordered_events.check_not_null('consumer', consumer IS NULL);
    PERFORM ordered_events.check_not_null('stream', stream IS NULL);
    PERFORM ordered_events.check_not_null('start', start IS NULL AND released_at IS NULL);
    IF released_at IS NULL AND start NOT IN ('beginning', 'now') THEN
        PERFORM ordered_events.invalid_option('start', start,
            'Use ''beginning'' (the first event the stream keeps) or ''now'' (only events released from now on), or pass released_at.');
    END IF;
    IF released_at IS NOT NULL AND start <> 'beginning' THEN
        PERFORM ordered_events.invalid_option('start', start,
            'With released_at the seek goes to the first event released at or after it: leave start out, or pass NULL.');
    END IF;
    c := ordered_events.consumer_to_change(consumer, caller);
    d := ordered_events.stream_or_error(stream);
    IF NOT EXISTS (SELECT FROM ordered_events.subscription s
                    WHERE s.consumer_id = c.consumer_id AND s.stream_id = d.stream_id) THEN
        RAISE EXCEPTION 'consumer "%" is not subscribed to stream "%"', consumer, stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'Subscribe it with ordered_events.subscribe(), which takes a start too; the view ordered_events.consumers lists the subscriptions.';
    END IF;
    RETURN ordered_events.seek_streams(c, ARRAY[d.stream_id], coalesce(start, 'beginning'),
                                       released_at, caller);
END;
$$;
COMMENT ON FUNCTION ordered_events.seek_as(text, text, text, timestamptz, regrole) IS
    'Internal: seek() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.seek_as(text,text,text,timestamp with time zone,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.seek(
    consumer text,
    stream text,
    start text DEFAULT 'beginning',
    released_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.seek(text, text, text, timestamptz) IS
    'Move a consumer''s position in a stream, every partition: to ''beginning'', ''now'', or the first event released at or after released_at; returns the unread count; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.seek(text,text,text,timestamp with time zone) FROM PUBLIC;
/*
 * reset_consumer(): a rebuild.  A handler consumer's key states, results,
 * parked events (retries, held keys, re-driven dead letters) and dead
 * letters go, and so do the handler calls recorded as stopped (at commit),
 * so that the handler is called for those events again; then every stream
 * is sought to the beginning, which first waits for a processing step in
 * progress and holds back the next until this transaction ends.  What the
 * handler appended to its output stream stays: the rebuild appends again.
 */
CREATE FUNCTION ordered_events.reset_consumer_as(consumer text, caller regrole)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c ordered_events.consumer_def := ordered_events.consumer_to_change(consumer, caller);
    unread bigint;
BEGIN
    unread := ordered_events.seek_streams(c, ARRAY(SELECT DISTINCT s.stream_id
                                                     FROM ordered_events.subscription s
                                                    WHERE s.consumer_id = c.consumer_id),
                                          'beginning', NULL, caller);
    DELETE FROM ordered_events.handler_state k WHERE k.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_parked p WHERE p.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.handler_result r WHERE r.consumer_id = c.consumer_id;
    DELETE FROM ordered_events.unprocessed u WHERE u.consumer = c.consumer;
    IF c.handler IS NOT NULL THEN
        PERFORM ordered_events.forget_stopped_calls(c.consumer_id, c.partitions);
    END IF;
    RETURN unread;
END;
$$;
COMMENT ON FUNCTION ordered_events.reset_consumer_as(text, regrole) IS
    'Internal: reset_consumer() once it knows the calling role';
REVOKE EXECUTE ON FUNCTION ordered_events.reset_consumer_as(text,regrole) FROM PUBLIC;
CREATE FUNCTION ordered_events.reset_consumer(consumer text)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_call_as_caller';
COMMENT ON FUNCTION ordered_events.reset_consumer(text) IS
    'Rebuild a consumer: forget a handler''s key states, results and dead letters, and seek every stream to the beginning; returns the unread count; for its owner';
REVOKE EXECUTE ON FUNCTION ordered_events.reset_consumer(text) FROM PUBLIC;
CREATE FUNCTION ordered_events.read(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0, wait interval DEFAULT '0 s')
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_read';
COMMENT ON FUNCTION ordered_events.read(text, integer, integer, interval) IS
    'The next events of a consumer (partition) in merged order, waiting up to "wait" for some; consumed when the transaction commits';
REVOKE EXECUTE ON FUNCTION ordered_events.read(text,integer,integer,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.peek(consumer text, max_events integer DEFAULT 1000,
                                    partition integer DEFAULT 0)
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_peek';
COMMENT ON FUNCTION ordered_events.peek(text, integer, integer) IS
    'What read() would return now, consuming nothing';
REVOKE EXECUTE ON FUNCTION ordered_events.peek(text,integer,integer) FROM PUBLIC;
CREATE VIEW ordered_events.consumers AS
SELECT c.consumer, s.partition, d.stream, s.delay,
       s.consumed_count - (s.taken_count - p.taken_count) AS consumed_count,
       t.released_count - p.taken_count AS unread_count,
       CASE WHEN t.released_count > p.taken_count
            THEN round((t.lag_sum - p.taken_lag) / (t.released_count - p.taken_count))::bigint
                 * interval '1 microsecond'
       END AS bias,
       CASE WHEN t.released_count > p.taken_count THEN (
            SELECT l.released_at
              FROM ordered_events.lane_release_log l
             WHERE l.stream_id = s.stream_id AND l.delivery >= p.read_delivery
               AND EXISTS (
                   SELECT FROM ordered_events.event_store e
                    WHERE e.stream_id = l.stream_id AND e.lane = l.lane
                      AND e.seq >= l.seq_start AND e.seq < l.seq_end
                      -- after the position (a bound the primary key takes)
                      AND e.seq > CASE WHEN l.delivery = p.read_delivery THEN p.read_seq
                                       ELSE '-9223372036854775808'::bigint END
                      AND (c.partitions = 1
                           OR ordered_events.key_partition(e.key, c.partitions) = s.partition))
             ORDER BY l.delivery
             LIMIT 1)
       END AS oldest_unread_at,
       s.last_read_at,
       c.owner
  FROM ordered_events.subscription s
  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id
  JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id
  JOIN ordered_events.release_totals t
    ON t.stream_id = s.stream_id AND t.partitions = c.partitions AND t.partition = s.partition
 CROSS JOIN LATERAL ordered_events.committed_position(s, s.xmin) p
 -- a role sees its own consumers (as members and leases show them); pg_monitor all
 WHERE c.owner IS NULL OR pg_catalog.pg_has_role(c.owner, 'USAGE')
    OR pg_catalog.pg_has_role('pg_monitor', 'USAGE')
 ORDER BY c.consumer, s.partition, d.stream;
COMMENT ON VIEW ordered_events.consumers IS
    'Each consumer''s subscriptions, per partition: delay, consumed and unread events, bias';
GRANT SELECT ON ordered_events.consumers TO pg_monitor;
