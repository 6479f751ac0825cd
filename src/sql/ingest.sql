/*
 * Writing: the events, the dead letters, and ingest(), the inbox and
 * append() (src/ingest.c, src/gap_policy.c).
 */

CREATE TYPE ordered_events.outcome AS ENUM (
    'accepted',
    'duplicate',
    'before_initial_sequence',
    'sequence_id_outside_valid_range',
    'after_last_event',
    'gap_skipped',
    'exception_thrown'
);
COMMENT ON TYPE ordered_events.outcome IS
    'What happened to an ingested event: accepted, or the reason it went to unprocessed';

/*
 * Events.  lane sits in the padding before seq: '' costs no byte for a
 * global stream's row, and neither does last_event.  An event is released
 * exactly when its seq is below its lane's range_end (see progress).
 */
CREATE TABLE ordered_events.event_store (
    stream_id integer NOT NULL,
    lane text COLLATE "C" NOT NULL,
    last_event boolean NOT NULL,
    seq bigint NOT NULL,
    event_ts timestamptz NOT NULL,
    alignment_ts timestamptz NOT NULL,
    received_at timestamptz NOT NULL,
    arrival bigint NOT NULL,        -- arrival order: see arrival_seq
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    CONSTRAINT event_store_pkey PRIMARY KEY (stream_id, lane, seq)
);
CREATE INDEX event_store_last_event_idx ON ordered_events.event_store (stream_id, lane) WHERE last_event;
COMMENT ON TABLE ordered_events.event_store IS
    'Internal: every accepted event, pending or released, by stream, lane and seq';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.event_store', '');

/*
 * The order in which the extension accepted events, across the streams of
 * the database: consumers break ties between streams by it.  Each value
 * stands for a block of 1024 arrival numbers (src/arrival.c).
 */
CREATE SEQUENCE ordered_events.arrival_seq AS bigint CACHE 1;
COMMENT ON SEQUENCE ordered_events.arrival_seq IS
    'Internal: the arrival order of accepted events';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.arrival_seq', '');

/*
 * Keys that received events since their last release step: one row per
 * accepted event, deleted by the step that looks at the key.  A row of an
 * open transaction is invisible until it commits, so no arrival is missed.
 */
CREATE TABLE ordered_events.key_arrivals (
    stream_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    arrived_at timestamptz NOT NULL
);
CREATE INDEX key_arrivals_stream_idx ON ordered_events.key_arrivals (stream_id, arrived_at);
COMMENT ON TABLE ordered_events.key_arrivals IS
    'Internal: keys of per-key streams with events no release step has looked at';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.key_arrivals', '');

/*
 * Dead letters: events received but never to be released, with the
 * reason; a handler's failures name their consumer.  A role granted SELECT
 * sees the rejections of the streams it may read.
 */
CREATE TABLE ordered_events.unprocessed (
    stream text NOT NULL,
    seq bigint NOT NULL,
    key text COLLATE "C" NOT NULL,
    payload jsonb,
    event_ts timestamptz,
    reason ordered_events.outcome NOT NULL,
    detail text,
    received_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    consumer text
);
CREATE INDEX unprocessed_stream_key_idx ON ordered_events.unprocessed (stream, key);
-- Dead letters by age, for their retention.
CREATE INDEX unprocessed_stream_received_idx
    ON ordered_events.unprocessed (stream, received_at) WHERE consumer IS NULL;
COMMENT ON TABLE ordered_events.unprocessed IS
    'Events received but never to be released, with the reason (dead letters)';
SELECT pg_catalog.pg_extension_config_dump('ordered_events.unprocessed', '');
ALTER TABLE ordered_events.unprocessed ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable_streams ON ordered_events.unprocessed FOR SELECT
    USING (ordered_events.may_read_stream(stream));

CREATE FUNCTION ordered_events.ingest(
    stream text,
    seq bigint,
    key text,
    payload jsonb DEFAULT NULL,
    event_ts timestamptz DEFAULT NULL,
    alignment_ts timestamptz DEFAULT NULL,
    last_event boolean DEFAULT false)
RETURNS ordered_events.outcome
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_ingest';
COMMENT ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean) IS
    'Write one event; returns accepted or the reason it went to unprocessed';
REVOKE EXECUTE ON FUNCTION ordered_events.ingest(text,bigint,text,jsonb,timestamp with time zone,timestamp with time zone,boolean) FROM PUBLIC;
CREATE FUNCTION ordered_events.append(
    stream text,
    key text,
    payload jsonb DEFAULT NULL,
    event_ts timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'oe_append';
COMMENT ON FUNCTION ordered_events.append(text, text, jsonb, timestamptz) IS
    'Write an event to a fence stream; the stream allocates its seq, which is returned';
REVOKE EXECUTE ON FUNCTION ordered_events.append(text,text,jsonb,timestamp with time zone) FROM PUBLIC;
-- Many events in one call, through the inbox: what a router sends a shard.
CREATE FUNCTION ordered_events.ingest_array(stream text, seqs bigint[], keys text[],
                                            payloads jsonb[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    written bigint;
BEGIN
    -- the whole batch first: a bad event writes nothing (src/shard.c)
    PERFORM ordered_events.check_event_batch(stream, seqs, keys, payloads);
    INSERT INTO ordered_events.inbox (stream, seq, key, payload)
    SELECT ingest_array.stream, u.seq, u.key, u.payload
      FROM unnest(seqs, keys, payloads) u(seq, key, payload);
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END;
$$;
COMMENT ON FUNCTION ordered_events.ingest_array(text, bigint[], text[], jsonb[]) IS
    'Write many events (arrays of the same length) through the inbox; returns how many were written';
REVOKE EXECUTE ON FUNCTION ordered_events.ingest_array(text,bigint[],text[],jsonb[]) FROM PUBLIC;

CREATE VIEW ordered_events.inbox AS
SELECT NULL::text AS stream, NULL::bigint AS seq, NULL::text AS key,
       NULL::jsonb AS payload, NULL::timestamptz AS event_ts,
       NULL::timestamptz AS alignment_ts, false AS last_event
 WHERE false;
ALTER VIEW ordered_events.inbox ALTER COLUMN last_event SET DEFAULT false;
COMMENT ON VIEW ordered_events.inbox IS
    'Bulk ingest: INSERT or COPY rows here; each follows the rules of ingest()';
CREATE FUNCTION ordered_events.inbox_insert() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'oe_inbox_insert';
REVOKE EXECUTE ON FUNCTION ordered_events.inbox_insert() FROM PUBLIC;

CREATE TRIGGER inbox_insert
    INSTEAD OF INSERT ON ordered_events.inbox
    FOR EACH ROW EXECUTE FUNCTION ordered_events.inbox_insert();
