/*
 * Leases: the at-least-once delivery of consumers created with delivery =>
 * 'lease' (docs/consuming.md, "Work outside the database: the lease mode";
 * the code is src/lease.c, and src/lease_worker.c for a receive() inside a
 * transaction block).
 */

-- A receipt is batch * 65536 + the event's slot in its batch.
CREATE SEQUENCE ordered_events.lease_batch_seq AS bigint MAXVALUE 140737488355327;
/*
 * The events of a lease consumer partition that are out or waiting, one
 * row per batch: 'leased' (what one receive() delivered; due again at
 * visible_until unless acknowledged), 'returned' (given back by nack(), due
 * at visible_until), 'waiting' (taken while an earlier event of their key
 * was out; visible_until NULL).  events holds them, encoded (src/lease.c),
 * written once; bit i of done is set once event i is acknowledged or has
 * moved on (delivered again, returned, a dead letter); the row goes when
 * every bit is set.  floors[i] is the oldest release log row (delivery)
 * of its events of streams[i]: retention keeps it and what follows.
 * drop_consumer() deletes the consumer's rows.
 */
CREATE TABLE ordered_events.lease (
    batch bigint PRIMARY KEY,
    consumer_id integer NOT NULL,
    partition integer NOT NULL,
    state text NOT NULL CHECK (state IN ('leased', 'returned', 'waiting')),
    visible_until timestamptz,
    done bit varying NOT NULL,
    streams integer[] NOT NULL,
    floors bigint[] NOT NULL,
    events bytea NOT NULL,
    CHECK ((state = 'waiting') = (visible_until IS NULL))
);
-- Written once, read whole: not worth compressing at every receive().
ALTER TABLE ordered_events.lease ALTER COLUMN events SET STORAGE EXTERNAL;
CREATE INDEX lease_partition_idx ON ordered_events.lease (consumer_id, partition, batch);
ALTER SEQUENCE ordered_events.lease_batch_seq OWNED BY ordered_events.lease.batch;
COMMENT ON TABLE ordered_events.lease IS
    'Internal: the events of lease consumers that are out or waiting, by batch';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lease_batch_seq', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events.lease', '');
-- The view leases calls it as its reader: it stays executable by PUBLIC.
CREATE FUNCTION ordered_events.lease_events(events bytea, done bit varying)
RETURNS TABLE (slot integer, stream_id integer, seq bigint, key text, attempt integer)
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_lease_events';
COMMENT ON FUNCTION ordered_events.lease_events(bytea, bit varying) IS
    'Internal: the events of a lease row not acknowledged or moved on yet';
/*
 * What seek() and reset_consumer() do to a lease consumer's leases: its
 * events of the streams sought are delivered again from the new position,
 * or not at all, so they leave the rows (their bits set, as if
 * acknowledged; a row with nothing left goes) and their receipts
 * acknowledge nothing any more.  Events of other streams stay out.  The
 * caller holds the consumer's subscription rows, as receive() takes them.
 */
CREATE FUNCTION ordered_events.forget_leases(consumer_id integer, stream_ids integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    x ordered_events.lease;
    left_out bit varying;
    slot integer;
BEGIN
    FOR x IN SELECT * FROM ordered_events.lease l
              WHERE l.consumer_id = forget_leases.consumer_id AND l.streams && stream_ids
              ORDER BY l.batch
                FOR UPDATE LOOP
        left_out := x.done;
        FOR slot IN SELECT e.slot FROM ordered_events.lease_events(x.events, x.done) e
                     WHERE e.stream_id = ANY (stream_ids) LOOP
            left_out := pg_catalog.set_bit(left_out, slot, 1);
        END LOOP;
        IF pg_catalog.bit_count(left_out) = pg_catalog.length(left_out) THEN
            DELETE FROM ordered_events.lease l WHERE l.batch = x.batch;
        ELSE
            UPDATE ordered_events.lease l SET done = left_out WHERE l.batch = x.batch;
        END IF;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION ordered_events.forget_leases(integer, integer[]) IS
    'Internal: take a lease consumer''s events of some streams out of its leases (seek(), reset_consumer())';
REVOKE EXECUTE ON FUNCTION ordered_events.forget_leases(integer, integer[]) FROM PUBLIC;

CREATE FUNCTION ordered_events.receive(consumer text, max_events integer DEFAULT 1000,
                                       partition integer DEFAULT 0,
                                       visibility interval DEFAULT '30 s',
                                       wait interval DEFAULT '0 s')
RETURNS TABLE (stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, stabilized_ts timestamptz, released_at timestamptz,
               receipt bigint, attempt integer)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_receive';
COMMENT ON FUNCTION ordered_events.receive(text, integer, integer, interval, interval) IS
    'The next events of a lease consumer (partition), leased for visibility: delivered again, attempt + 1, unless acknowledged; the leases commit at once';
REVOKE EXECUTE ON FUNCTION ordered_events.receive(text,integer,integer,interval,interval) FROM PUBLIC;
CREATE FUNCTION ordered_events.ack(consumer text, receipts bigint[])
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_ack';
COMMENT ON FUNCTION ordered_events.ack(text, bigint[]) IS
    'Consume the leased events of the receipts, in the caller''s transaction; returns how many';
REVOKE EXECUTE ON FUNCTION ordered_events.ack(text,bigint[]) FROM PUBLIC;
CREATE FUNCTION ordered_events.nack(consumer text, receipts bigint[],
                                    delay interval DEFAULT '0 s')
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_nack';
COMMENT ON FUNCTION ordered_events.nack(text, bigint[], interval) IS
    'Give the leased events of the receipts back, delivered again once delay has passed; returns how many';
REVOKE EXECUTE ON FUNCTION ordered_events.nack(text,bigint[],interval) FROM PUBLIC;
/*
 * The events out or waiting, for the consumers' owners and pg_monitor: a
 * role granted SELECT sees the consumers it may act as the owner of.
 */
CREATE VIEW ordered_events.leases WITH (security_barrier) AS
SELECT c.consumer, l.partition, d.stream, e.seq, e.key, e.attempt, l.visible_until
  FROM ordered_events.lease l
  JOIN ordered_events.consumer_def c ON c.consumer_id = l.consumer_id
 CROSS JOIN LATERAL ordered_events.lease_events(l.events, l.done) e
  LEFT JOIN ordered_events.stream_def d ON d.stream_id = e.stream_id
 WHERE pg_catalog.pg_has_role(c.owner, 'USAGE') OR pg_catalog.pg_has_role('pg_monitor', 'USAGE')
 ORDER BY c.consumer, l.partition, l.batch, e.slot;
COMMENT ON VIEW ordered_events.leases IS
    'The events of lease consumers that are leased (visible_until: when they come back), returned by nack(), or waiting behind an earlier event of their key (visible_until NULL)';
GRANT SELECT ON ordered_events.leases TO pg_monitor;
