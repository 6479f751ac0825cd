--
-- lease_errors: every bad input of the lease mode (docs/reference.md,
-- "Consumers"; docs/architecture.md, rule 5): its message, hint and
-- SQLSTATE, and that the refused call changed nothing.
--   create_consumer(): a delivery other than 'transaction' or 'lease'
--   22023, NULL 22004, 'lease' with a handler or a handler's options 22023;
--   alter_consumer() of a lease consumer's handler options 42809;
--   receive(), ack(), nack(): NULL arguments 22004, bad values 22023, an
--   unknown consumer 42704, a consumer of the other kind 42809 (read() of
--   a lease consumer too), a read-only transaction 25006.
--
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';
\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE FUNCTION public.le_count(state jsonb, e ordered_events.event)
RETURNS ordered_events.step
LANGUAGE sql AS $$
    SELECT ROW(to_jsonb(coalesce(state::int, 0) + 1), NULL)::ordered_events.step
$$;
SELECT ordered_events.create_stream('le_s');
SELECT ordered_events.ingest('le_s', s, 'k' || s) FROM generate_series(1, 3) s;
SELECT ordered_events.release('le_s');
-- le_l (lease, 2 partitions) has leased seq 1; le_t reads in transactions;
-- le_h has a handler.
SELECT ordered_events.create_consumer('le_l', 2, delivery => 'lease');
SELECT ordered_events.create_consumer('le_t');
SELECT ordered_events.create_consumer('le_h', handler => 'public.le_count(jsonb, ordered_events.event)');
SELECT ordered_events.subscribe(c, 'le_s') FROM unnest(ARRAY['le_l', 'le_t', 'le_h']) c;
SELECT stream, seq, key, attempt FROM ordered_events.receive('le_l', 1, 0);

-- What the calls below could change.
CREATE FUNCTION pg_temp.state()
RETURNS SETOF text
LANGUAGE sql AS $$
    SELECT format('consumer %s delivery %s max_attempts %s on_error %s', consumer, delivery,
                  max_attempts, on_error)
      FROM ordered_events.consumer_def
    UNION ALL
    SELECT format('subscription %s/%s consumed %s unread %s', consumer, partition,
                  consumed_count, unread_count)
      FROM ordered_events.consumers
    UNION ALL
    SELECT format('lease %s/%s %s/%s attempt %s until %s', consumer, partition, stream, seq,
                  attempt, visible_until)
      FROM ordered_events.leases
    UNION ALL
    SELECT format('dead letters %s', count(*)) FROM ordered_events.unprocessed
$$;
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.state() f;
CREATE FUNCTION pg_temp.unchanged()
RETURNS boolean
LANGUAGE sql AS $$
    SELECT NOT EXISTS ((SELECT * FROM pg_temp.state() EXCEPT SELECT * FROM before)
                       UNION ALL (SELECT * FROM before EXCEPT SELECT * FROM pg_temp.state()))
$$;

-- create_consumer()
SELECT ordered_events.create_consumer('le_x', delivery => 'queue');
SELECT ordered_events.create_consumer('le_x', delivery => NULL);
SELECT ordered_events.create_consumer('le_x', handler => 'public.le_count(jsonb, ordered_events.event)',
                                      delivery => 'lease');
SELECT ordered_events.create_consumer('le_x', delivery => 'lease', on_error => 'hold');
SELECT ordered_events.create_consumer('le_x', delivery => 'lease', retry_delay => '2 s');
SELECT ordered_events.create_consumer('le_x', delivery => 'lease', max_attempts => 0);
SELECT ordered_events.create_consumer('le_x', delivery => 'lease', max_attempts => 101);
-- max_attempts is a handler's or a lease consumer's
SELECT ordered_events.create_consumer('le_x', max_attempts => 3);
SELECT pg_temp.unchanged();

-- alter_consumer(): a lease consumer takes max_attempts only
SELECT ordered_events.alter_consumer('le_l', on_error => 'hold');
SELECT ordered_events.alter_consumer('le_l', retry_delay => '1 s');
SELECT ordered_events.alter_consumer('le_l', handler_timeout => '1 s');
SELECT ordered_events.alter_consumer('le_l', max_attempts => 0);
SELECT ordered_events.alter_consumer('le_t', max_attempts => 3);
SELECT pg_temp.unchanged();

-- receive()
SELECT * FROM ordered_events.receive('le_nope');
SELECT * FROM ordered_events.receive(NULL);
SELECT * FROM ordered_events.receive('le_l', NULL);
SELECT * FROM ordered_events.receive('le_l', 10, NULL);
SELECT * FROM ordered_events.receive('le_l', 10, 0, NULL);
SELECT * FROM ordered_events.receive('le_l', 10, 0, '1 s', NULL);
SELECT * FROM ordered_events.receive('le_l', 0);
SELECT * FROM ordered_events.receive('le_l', 65537);
SELECT * FROM ordered_events.receive('le_l', 10, 2);
SELECT * FROM ordered_events.receive('le_l', 10, -1);
SELECT * FROM ordered_events.receive('le_l', 10, 0, '-1 s');
SELECT * FROM ordered_events.receive('le_l', 10, 0, '1 s', '-0.001 s');
SELECT * FROM ordered_events.receive('le_t');
SELECT * FROM ordered_events.receive('le_h');
SELECT pg_temp.unchanged();

-- read() of a lease consumer; peek() shows what no receive() took yet
SELECT * FROM ordered_events.read('le_l');
SELECT stream, seq, key FROM ordered_events.peek('le_l', 10, 0);
SELECT ordered_events.process('le_l');
SELECT pg_temp.unchanged();

-- ack() and nack()
SELECT ordered_events.ack('le_nope', '{1}');
SELECT ordered_events.ack(NULL, '{1}');
SELECT ordered_events.ack('le_l', NULL);
SELECT ordered_events.ack('le_l', '{1,NULL}');
SELECT ordered_events.ack('le_t', '{1}');
SELECT ordered_events.ack('le_h', '{1}');
SELECT ordered_events.nack('le_nope', '{1}');
SELECT ordered_events.nack('le_l', NULL);
SELECT ordered_events.nack('le_l', '{1}', NULL);
SELECT ordered_events.nack('le_l', '{1}', '-1 s');
SELECT ordered_events.nack('le_t', '{1}');
SELECT pg_temp.unchanged();

-- a read-only transaction, in autocommit and in a transaction block
SET default_transaction_read_only = on;
SELECT * FROM ordered_events.receive('le_l');
SELECT ordered_events.ack('le_l', '{1}');
SELECT ordered_events.nack('le_l', '{1}');
RESET default_transaction_read_only;
BEGIN READ ONLY;
SELECT * FROM ordered_events.receive('le_l');
ROLLBACK;
SELECT pg_temp.unchanged();

-- what is right is accepted
SELECT ordered_events.alter_consumer('le_l', max_attempts => 3);
SELECT ordered_events.create_consumer('le_x', max_attempts => 1);
SELECT consumer, delivery, max_attempts FROM ordered_events.consumer_def
 WHERE consumer IN ('le_l', 'le_x') ORDER BY consumer;
SELECT ordered_events.drop_consumer(c) FROM unnest(ARRAY['le_l', 'le_t', 'le_h', 'le_x']) c;
SELECT ordered_events.drop_stream('le_s');
DROP FUNCTION public.le_count(jsonb, ordered_events.event);
