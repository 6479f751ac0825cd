/*
 * Shards: a global stream spread over several servers, whose range a router
 * sets (docs/sharding.md, src/shard.c).
 */

/*
 * A global stream spread over several servers by key.  On each shard the stream is a normal global stream made
 * "sharded": a router reads the runs of seqs each shard holds, combines
 * them into the global range, and releases each shard's events below it.
 */
CREATE FUNCTION ordered_events.shard_stream(stream text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
BEGIN
    IF d.sequencing <> 'global' OR d.gap_policy <> 'wait' THEN
        RAISE EXCEPTION 'stream "%" cannot be sharded', stream
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A sharded stream is a global stream with gap_policy ''wait'': the router applies the gap policy to the global range.';
    END IF;
    IF EXISTS (SELECT FROM ordered_events.progress p
                WHERE p.stream_id = d.stream_id AND p.lane = ''
                  AND p.range_end <> d.initial_sequence) THEN
        RAISE EXCEPTION 'stream "%" has released events', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Shard a stream when it is created, before anything is released.';
    END IF;
    UPDATE ordered_events.stream_def s SET sharded = true WHERE s.stream_id = d.stream_id;
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_stream(text) IS
    'Make a global stream a shard''s part of a stream spread over several servers: a router sets its range';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_stream(text) FROM PUBLIC;
/*
 * The runs of consecutive seqs a shard holds from from_seq on, among its
 * first max_events committed events there: what the router combines.
 */
CREATE FUNCTION ordered_events.shard_runs(stream text, from_seq bigint, max_events integer)
RETURNS TABLE (run_start bigint, run_end bigint, max_event_ts timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT min(e.seq), max(e.seq), max(e.event_ts)
  FROM (SELECT e.seq, e.event_ts,
               e.seq::numeric - row_number() OVER (ORDER BY e.seq) AS run
          FROM ordered_events.event_store e
         WHERE e.stream_id = ordered_events.stream_id(shard_runs.stream) AND e.lane = ''
           AND e.seq >= shard_runs.from_seq
         ORDER BY e.seq
         LIMIT shard_runs.max_events) e
 GROUP BY e.run
 ORDER BY 1
$$;
COMMENT ON FUNCTION ordered_events.shard_runs(text, bigint, integer) IS
    'The runs of seqs (inclusive bounds) a shard holds of a sharded stream from from_seq on, among its first max_events events';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_runs(text,bigint,integer) FROM PUBLIC;
-- A run the router skipped on the global range, recorded on a shard: in
-- skipped_gaps, and a late event of the run is gap_skipped.
CREATE FUNCTION ordered_events.shard_skip(stream text, gap_start bigint, gap_end bigint,
                                          reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def := ordered_events.stream_or_error(stream, true);
BEGIN
    IF NOT d.sharded THEN
        RAISE EXCEPTION 'stream "%" is not sharded', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a sharded stream takes skips from its router.';
    END IF;
    INSERT INTO ordered_events.gap_skips (stream_id, lane, gap_start, gap_end, reason, skipped_at)
    SELECT d.stream_id, '', shard_skip.gap_start, shard_skip.gap_end, shard_skip.reason,
           pg_catalog.clock_timestamp()
     WHERE NOT EXISTS (SELECT FROM ordered_events.gap_skips g
                        WHERE g.stream_id = d.stream_id AND g.lane = ''
                          AND g.gap_start = shard_skip.gap_start);
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_skip(text, bigint, bigint, text) IS
    'Record on a shard a run of seqs its router skipped on the global range';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_skip(text,bigint,bigint,text) FROM PUBLIC;
/*
 * The checks ingest() makes of each event's arguments, made of a whole
 * batch before any of it is written: by ingest_array(), and by a router
 * before it sends each shard its part.  It reads and writes nothing, so
 * PUBLIC may call it (the role a router connects as runs ingest_array()).
 */
CREATE FUNCTION ordered_events.check_event_batch(stream text, seqs bigint[], keys text[],
                                                 payloads jsonb[])
RETURNS void
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_check_event_batch';
COMMENT ON FUNCTION ordered_events.check_event_batch(text, bigint[], text[], jsonb[]) IS
    'Fail unless every event of a batch passes ingest()''s checks of its arguments: arrays of one length, no NULL seq or key, no key over the limit';
/*
 * The seqs a shard holds from from_seq on, among its first max_events
 * committed events there, as one int8multirange built here: what the
 * router's combine step unites (one value a shard, whatever the number of
 * runs).
 */
CREATE FUNCTION ordered_events.shard_run_set(stream text, from_seq bigint, max_events integer)
RETURNS int8multirange
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d ordered_events.stream_def;
BEGIN
    IF stream IS NULL OR from_seq IS NULL OR max_events IS NULL THEN
        RAISE EXCEPTION 'stream, from_seq and max_events must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'The router passes its stream, the global range_end and max_release_batch.';
    END IF;
    IF max_events < 1 THEN
        PERFORM ordered_events.invalid_option('max_events', max_events::text,
            'Use a positive number: the most events to look at.');
    END IF;
    d := ordered_events.stream_or_error(stream);
    IF NOT d.sharded THEN
        RAISE EXCEPTION 'stream "%" is not sharded', stream
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only a sharded stream is combined by a router.';
    END IF;
    RETURN (SELECT coalesce(pg_catalog.range_agg(int8range(e.seq, e.seq + 1)), '{}')
              FROM (SELECT e.seq FROM ordered_events.event_store e
                     WHERE e.stream_id = d.stream_id
                       AND e.lane = '' AND e.seq >= shard_run_set.from_seq
                     ORDER BY e.seq
                     LIMIT shard_run_set.max_events) e);
END;
$$;
COMMENT ON FUNCTION ordered_events.shard_run_set(text, bigint, integer) IS
    'The seqs a shard holds of a sharded stream from from_seq on, among its first max_events events, as one multirange';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_run_set(text, bigint, integer) FROM PUBLIC;
/*
 * The seqs of a window a shard holds, as a bitmap (src/seq_bits.c): what
 * the router's combine step ORs with the other shards' (seq_bits_runs()).
 */
CREATE FUNCTION ordered_events.shard_seq_bits(stream text, from_seq bigint, span integer,
                                              OUT seqs bytea, OUT next_seq bigint)
RETURNS record
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'oe_shard_seq_bits';
COMMENT ON FUNCTION ordered_events.shard_seq_bits(text, bigint, integer) IS
    'The seqs from_seq .. from_seq + span - 1 a shard holds of a sharded stream, a bit each, and the first it holds past them';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_seq_bits(text, bigint, integer) FROM PUBLIC;
/*
 * The union of the shards' bitmaps of one window, as runs: the router's
 * side of shard_seq_bits().  It reads nothing, so PUBLIC may call it.
 */
CREATE FUNCTION ordered_events.seq_bits_runs(from_seq bigint, seqs bytea[])
RETURNS int8multirange
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'oe_seq_bits_runs';
COMMENT ON FUNCTION ordered_events.seq_bits_runs(bigint, bytea[]) IS
    'The seqs any of the bitmaps shard_seq_bits() returned from from_seq holds, as runs';
/*
 * release_through(), and the largest event_ts of the shard's range after
 * it: what the router needs for the global range's max_event_ts.
 */
CREATE FUNCTION ordered_events.shard_release(stream text, through_seq bigint,
                                             OUT released bigint, OUT max_event_ts timestamptz)
RETURNS record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'oe_shard_release';
COMMENT ON FUNCTION ordered_events.shard_release(text, bigint) IS
    'Release a sharded stream''s events below through_seq; returns how many, and the largest event_ts of its range';
REVOKE EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) FROM PUBLIC;
