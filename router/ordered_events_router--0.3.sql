/* ordered_events_router--0.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ordered_events_router CASCADE" to load this file. \quit

/*
 * The router of streams sharded over several ordered_events servers
 * (docs/sharding.md).  PL/Proxy routes the calls: the shards are the
 * partitions of the SQL/MED server ordered_events_shards, a power of two
 * of them, each a database with ordered_events.  A key's events go to the
 * shard hashtext(key) picks, so a key lives on one shard.
 *
 * A global stream exists on every shard, "sharded" there: its seqs are
 * spread over the shards, and the router sets its range.  The combine step
 * (combine()) asks every shard for the runs of seqs it holds above the
 * global range_end, unites them (a union of int8ranges: associative and
 * order-independent, Beam's ContiguousSequenceRange combiner), takes the
 * contiguous part from range_end on, and tells every shard to release its
 * events below the new end.  A shard that does not answer holds the range
 * at the first seq no other shard reported: nothing is skipped for it (a
 * gap's clock runs only while every shard answers), shard_status shows
 * it, and it catches up when it answers again.  Per-key streams need no
 * combining: each shard releases its keys alone.
 *
 * released() reads a global stream back in seq order, never past what
 * every shard has released, with a row for each run of skipped seqs, so
 * that a reader can go on from the seq after its last row and lose
 * nothing.
 *
 * The background worker of ordered_events runs combine_all() every cycle
 * in a database with this extension (its naptime paces it): the script
 * registers it (ordered_events.register_cycle_hook()).
 */

DO $$
BEGIN
    IF pg_catalog.to_regprocedure('ordered_events.register_cycle_hook(regprocedure)') IS NULL THEN
        RAISE EXCEPTION 'ordered_events_router 0.3 needs ordered_events 0.3'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Run ALTER EXTENSION ordered_events UPDATE first.';
    END IF;
END;
$$;

CREATE TABLE ordered_events_router.stream (
    stream text PRIMARY KEY,
    sequencing text NOT NULL CHECK (sequencing IN ('global', 'per_key')),
    initial_sequence bigint NOT NULL,
    gap_policy text NOT NULL CHECK (gap_policy IN ('wait', 'timeout')),
    gap_timeout interval,
    max_release_batch integer NOT NULL,
    range_end bigint NOT NULL,          -- global: first seq not released
    max_event_ts timestamptz,           -- global: largest event_ts released
    gap_start bigint,                   -- global: the gap at range_end a step saw,
    gap_first_seen timestamptz,         -- and since when
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE ordered_events_router.stream IS
    'The streams of the sharded cluster, with the combined range of each global stream';

-- The runs of seqs the router skipped on a global stream's range.
CREATE TABLE ordered_events_router.skip (
    stream text NOT NULL REFERENCES ordered_events_router.stream ON DELETE CASCADE,
    gap_start bigint NOT NULL,
    gap_end bigint NOT NULL,
    reason text NOT NULL,
    skipped_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (stream, gap_start)
);
COMMENT ON TABLE ordered_events_router.skip IS
    'Runs of seqs skipped on the combined range of a global stream, recorded on every shard';

-- What each shard answered last, and how far it released each global stream.
CREATE TABLE ordered_events_router.shard (
    shard integer PRIMARY KEY,
    last_ok_at timestamptz,
    last_error text,
    last_error_at timestamptz
);
CREATE TABLE ordered_events_router.shard_stream (
    shard integer NOT NULL,
    stream text NOT NULL REFERENCES ordered_events_router.stream ON DELETE CASCADE,
    released_through bigint NOT NULL,
    PRIMARY KEY (shard, stream)
);
COMMENT ON TABLE ordered_events_router.shard_stream IS
    'How far each shard released each global stream (the end it last applied)';

SELECT pg_catalog.pg_extension_config_dump('ordered_events_router.stream', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events_router.skip', '');
SELECT pg_catalog.pg_extension_config_dump('ordered_events_router.shard_stream', '');

-- The number of shards: the partitions of the SQL/MED server.
CREATE FUNCTION ordered_events_router.shard_count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT count(*)::integer
  FROM pg_catalog.pg_foreign_server s
 CROSS JOIN LATERAL pg_catalog.pg_options_to_table(s.srvoptions) o
 WHERE s.srvname = 'ordered_events_shards' AND o.option_name ~ '^p[0-9]+$'
$$;
COMMENT ON FUNCTION ordered_events_router.shard_count() IS
    'The number of shards of the cluster ordered_events_shards';

/*
 * Calls on one shard (RUN ON its number) or on the shard of a key.  They
 * run on the shard in autocommit, as the user mapping's role.
 */
CREATE FUNCTION ordered_events_router.on_shard_create_stream(
    shard integer, stream text, sequencing text, initial_sequence bigint,
    max_release_batch integer)
RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT ordered_events.create_stream($2, $3, $4, 'wait', NULL, $5);
$$;

CREATE FUNCTION ordered_events_router.on_shard_shard_stream(shard integer, stream text)
RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT ordered_events.shard_stream($2);
$$;

CREATE FUNCTION ordered_events_router.on_shard_runs(
    shard integer, stream text, from_seq bigint, max_events integer)
RETURNS text
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT ordered_events.shard_run_set($2, $3, $4)::text;
$$;

/*
 * The calls of a combine step on every shard at once (RUN ON ALL: PL/Proxy
 * sends the query to every partition, then waits for them all), one row a
 * shard; an error if any shard fails, and the step then asks each shard in
 * turn to learn which.  A shard's seqs of the step's window come as a
 * bitmap, a bit a seq (shard_seq_bits(), src/seq_bits.c), and the first
 * seq it holds past the window.
 */
CREATE FUNCTION ordered_events_router.on_shards_seq_bits(
    stream text, from_seq bigint, span integer, OUT seqs bytea, OUT next_seq bigint)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON ALL;
    SELECT b.seqs, b.next_seq FROM ordered_events.shard_seq_bits($1, $2, $3) b;
$$;

CREATE FUNCTION ordered_events_router.on_shard_seq_bits(
    shard integer, stream text, from_seq bigint, span integer,
    OUT seqs bytea, OUT next_seq bigint)
RETURNS record
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT b.seqs, b.next_seq FROM ordered_events.shard_seq_bits($2, $3, $4) b;
$$;

CREATE FUNCTION ordered_events_router.on_shards_skip(
    stream text, gap_start bigint, gap_end bigint, reason text)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON ALL;
    SELECT 1 FROM ordered_events.shard_skip($1, $2, $3, $4);
$$;

-- A shard's release with the largest event_ts of its range after it.
CREATE FUNCTION ordered_events_router.on_shards_release(
    stream text, through_seq bigint, OUT released bigint, OUT max_event_ts timestamptz)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON ALL;
    SELECT r.released, r.max_event_ts FROM ordered_events.shard_release($1, $2) r;
$$;

CREATE FUNCTION ordered_events_router.on_shard_release(
    shard integer, stream text, through_seq bigint,
    OUT released bigint, OUT max_event_ts timestamptz)
RETURNS record
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT r.released, r.max_event_ts FROM ordered_events.shard_release($2, $3) r;
$$;

CREATE FUNCTION ordered_events_router.on_shard_skip(
    shard integer, stream text, gap_start bigint, gap_end bigint, reason text)
RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT ordered_events.shard_skip($2, $3, $4, $5);
$$;

CREATE FUNCTION ordered_events_router.on_shard_released(
    shard integer, stream text, from_seq bigint, to_seq bigint, max_events integer,
    OUT seq bigint, OUT key text, OUT payload jsonb, OUT event_ts timestamptz,
    OUT alignment_ts timestamptz, OUT received_at timestamptz, OUT released_at timestamptz)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON shard;
    SELECT r.seq, r.key, r.payload, r.event_ts, r.alignment_ts, r.received_at, r.released_at
      FROM ordered_events.released r
     WHERE r.stream = $2 AND r.seq >= $3 AND r.seq < $4
     ORDER BY r.seq LIMIT $5;
$$;

/*
 * Writing.  ingest() goes to the key's shard; ingest_many() checks the
 * whole batch as a shard would, then splits its arrays by key and sends
 * each shard its part in one call.
 */

/*
 * The hash PL/Proxy picks a key's shard by (hashtext(key) & (N - 1)), or
 * the error a single server gives for a NULL key, where PL/Proxy's own is
 * XX000 "Hash function returned NULL".  PUBLIC may call it: it reads
 * nothing.
 */
CREATE FUNCTION ordered_events_router.key_hash(key text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Every event needs a stream, a seq and a key.';
    END IF;
    RETURN pg_catalog.hashtext(key);
END;
$$;
COMMENT ON FUNCTION ordered_events_router.key_hash(text) IS
    'The hash of a key that picks its shard (hashtext); an error for a NULL key';

CREATE FUNCTION ordered_events_router.on_shard_ingest(
    stream text, seq bigint, key text, payload jsonb, event_ts timestamptz,
    alignment_ts timestamptz, last_event boolean)
RETURNS ordered_events.outcome
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    RUN ON ordered_events_router.key_hash(key);
    SELECT ordered_events.ingest($1, $2, $3, $4, $5, $6, $7);
$$;

/*
 * One event to the shard of its key.  The router's worker is woken when
 * the transaction commits, as a single server's is by a write: an event
 * that fills a gap is combined at once, not at the next naptime.  It runs
 * as the extension's owner, for on_shard_ingest() and the wake-up, as
 * ingest_many() does; the shards see the user mapping's role.
 */
CREATE FUNCTION ordered_events_router.ingest(
    stream text, seq bigint, key text, payload jsonb DEFAULT NULL,
    event_ts timestamptz DEFAULT NULL, alignment_ts timestamptz DEFAULT NULL,
    last_event boolean DEFAULT false)
RETURNS ordered_events.outcome
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM ordered_events.wake_worker();
    RETURN ordered_events_router.on_shard_ingest(stream, seq, key, payload, event_ts,
                                                 alignment_ts, last_event);
END;
$$;
COMMENT ON FUNCTION ordered_events_router.ingest(text, bigint, text, jsonb, timestamptz,
                                                 timestamptz, boolean) IS
    'Write one event on the shard of its key; returns accepted or the reason it went to that shard''s unprocessed';

-- Each shard's part of a batch checked whole (ingest_many()), in one call.
CREATE FUNCTION ordered_events_router.on_shards_ingest(
    stream text, seqs bigint[], keys text[], payloads jsonb[])
RETURNS SETOF bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'ordered_events_shards';
    SPLIT seqs, keys, payloads;
    RUN ON pg_catalog.hashtext(keys);
    SELECT ordered_events.ingest_array($1, $2, $3, $4);
$$;

/*
 * A batch is checked whole, as each shard would check its part, before
 * any shard sees it: a bad event, or a stream this router does not know,
 * writes nothing anywhere.  What a shard can still refuse, or fail to
 * answer, fails that shard's part alone: the other shards' parts commit on
 * their own (there is no commit across servers), and sending the whole
 * batch again is safe, since an event a shard already holds is a
 * duplicate there (docs/sharding.md, "Writing through the router").  It
 * runs as the extension's owner, for the router's stream table; the
 * shards see the user mapping's role, as for ingest().
 */
CREATE FUNCTION ordered_events_router.ingest_many(
    stream text, seqs bigint[], keys text[], payloads jsonb[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state text;
    message text;
    detail text;
    hint text;
BEGIN
    PERFORM ordered_events.check_event_batch(stream, seqs, keys, payloads);
    IF NOT EXISTS (SELECT FROM ordered_events_router.stream r
                    WHERE r.stream = ingest_many.stream) THEN
        RAISE EXCEPTION 'stream "%" does not exist', stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with ordered_events_router.create_stream(), or see ordered_events_router.stream for the existing ones.';
    END IF;
    IF pg_catalog.cardinality(seqs) = 0 THEN
        RETURN;
    END IF;
    PERFORM ordered_events.wake_worker();       -- at commit, as ingest()
    BEGIN
        RETURN QUERY SELECT * FROM ordered_events_router.on_shards_ingest(stream, seqs, keys,
                                                                          payloads);
    EXCEPTION WHEN OTHERS THEN
        -- a shard's error, or PL/Proxy's for a shard that does not answer,
        -- with what it means for the batch
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                                detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
        hint := pg_catalog.concat_ws(E'\n', NULLIF(hint, ''),
            'The shards that answered may have written their part: there is no commit across servers. Send the whole batch again once every shard answers: an event a shard holds already is a duplicate there.');
        IF detail = '' THEN
            RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, HINT = hint;
        END IF;
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail, HINT = hint;
    END;
END;
$$;
COMMENT ON FUNCTION ordered_events_router.ingest_many(text, bigint[], text[], jsonb[]) IS
    'Write many events, each on the shard of its key (arrays of the same length, checked whole first); returns each shard''s accepted count';

-- Create a stream on every shard (a global one sharded there).
CREATE FUNCTION ordered_events_router.create_stream(
    stream text,
    sequencing text DEFAULT 'global',
    initial_sequence bigint DEFAULT 1,
    gap_policy text DEFAULT 'wait',
    gap_timeout interval DEFAULT NULL,
    max_release_batch integer DEFAULT 10000)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF ordered_events_router.shard_count() = 0 THEN
        RAISE EXCEPTION 'no shards are defined'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'CREATE SERVER ordered_events_shards FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''dbname=... host=...'', p1 ...) and a user mapping; see docs/sharding.md, "Setting up".';
    END IF;
    -- the options as ordered_events checks them (the name on the shards),
    -- the gap policy on the router
    IF stream IS NULL THEN
        RAISE EXCEPTION 'stream must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Name the stream to create on every shard.';
    END IF;
    IF sequencing IS NULL OR sequencing NOT IN ('global', 'per_key') THEN
        PERFORM ordered_events.invalid_option('sequencing', sequencing,
            'Use ''global'' (one sequence for the whole stream) or ''per_key'' (a sequence for each key).');
    END IF;
    IF initial_sequence IS NULL OR initial_sequence = 9223372036854775807 THEN
        PERFORM ordered_events.invalid_option('initial_sequence', initial_sequence::text,
            'Use a bigint below 9223372036854775807; the default is 1.');
    END IF;
    PERFORM ordered_events.check_release_options(sequencing, gap_policy, gap_timeout,
                                                 max_release_batch);
    IF gap_policy = 'fence' THEN
        PERFORM ordered_events.invalid_option('gap_policy', gap_policy,
            'A sharded stream takes ''wait'' or ''timeout'': append() allocates seqs on one server.');
    END IF;
    BEGIN
        INSERT INTO ordered_events_router.stream
            (stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
             range_end)
        VALUES (create_stream.stream, create_stream.sequencing, create_stream.initial_sequence,
                create_stream.gap_policy, create_stream.gap_timeout,
                create_stream.max_release_batch, create_stream.initial_sequence);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'stream "%" already exists', stream
            USING ERRCODE = 'duplicate_object',
                  HINT = 'See ordered_events_router.stream: the stream is on every shard already.';
    END;
    FOR i IN 0 .. ordered_events_router.shard_count() - 1 LOOP
        PERFORM ordered_events_router.on_shard_create_stream(
            i, create_stream.stream, create_stream.sequencing, create_stream.initial_sequence,
            create_stream.max_release_batch);
        IF create_stream.sequencing = 'global' THEN
            PERFORM ordered_events_router.on_shard_shard_stream(i, create_stream.stream);
            INSERT INTO ordered_events_router.shard_stream (shard, stream, released_through)
            VALUES (i, create_stream.stream, create_stream.initial_sequence);
        END IF;
    END LOOP;
END;
$$;
COMMENT ON FUNCTION ordered_events_router.create_stream(text, text, bigint, text, interval,
                                                        integer) IS
    'Create a stream on every shard; a global one has its range combined by this router';

-- A global stream of the router (locked for a step), or the error.
CREATE FUNCTION ordered_events_router.global_stream_or_error(stream text, for_update boolean)
RETURNS ordered_events_router.stream
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s ordered_events_router.stream;
BEGIN
    IF for_update THEN
        SELECT * INTO s FROM ordered_events_router.stream r
         WHERE r.stream = global_stream_or_error.stream AND r.sequencing = 'global' FOR UPDATE;
    ELSE
        SELECT * INTO s FROM ordered_events_router.stream r
         WHERE r.stream = global_stream_or_error.stream AND r.sequencing = 'global';
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no global stream "%" on this router', stream
            USING ERRCODE = 'undefined_object',
                  HINT = 'See ordered_events_router.stream; a per-key stream needs no router: each shard releases and reads its keys.';
    END IF;
    RETURN s;
END;
$$;

/*
 * Note what a shard answered: an error at once, an answer at most once a
 * second (the steps of an idle router write nothing).  Never waits: while
 * another session holds the shard's row (an operator's combine() waiting
 * for a slow shard holds it to its end), that session's note stands, and
 * the next step notes again.
 */
CREATE FUNCTION ordered_events_router.note_shard(shard integer, error text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF error IS NULL AND EXISTS (
           SELECT FROM ordered_events_router.shard s
            WHERE s.shard = note_shard.shard AND s.last_error IS NULL
              AND s.last_ok_at >= pg_catalog.clock_timestamp() - interval '1 second') THEN
        RETURN;
    END IF;
    PERFORM FROM ordered_events_router.shard s WHERE s.shard = note_shard.shard
        FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE ordered_events_router.shard s
           SET last_ok_at = CASE WHEN note_shard.error IS NULL THEN pg_catalog.clock_timestamp()
                                 ELSE s.last_ok_at END,
               last_error = note_shard.error,
               last_error_at = CASE WHEN note_shard.error IS NOT NULL
                                    THEN pg_catalog.clock_timestamp() ELSE s.last_error_at END
         WHERE s.shard = note_shard.shard;
    ELSIF NOT EXISTS (SELECT FROM ordered_events_router.shard s
                       WHERE s.shard = note_shard.shard) THEN
        -- the shard's first note (only a first note of the same shard, at
        -- the same moment, could make this wait)
        INSERT INTO ordered_events_router.shard (shard, last_ok_at, last_error, last_error_at)
        VALUES (note_shard.shard,
                CASE WHEN note_shard.error IS NULL THEN pg_catalog.clock_timestamp() END,
                note_shard.error,
                CASE WHEN note_shard.error IS NOT NULL THEN pg_catalog.clock_timestamp() END)
        ON CONFLICT ON CONSTRAINT shard_pkey DO NOTHING;
    END IF;
END;
$$;

/*
 * The end of the contiguous range from range_end on in the union of runs
 * (int8ranges, upper bound exclusive): the first seq from range_end on
 * that no run holds.  The union is a multirange, so combining the shards'
 * runs in any grouping and any order gives the same end.
 */
CREATE FUNCTION ordered_events_router.contiguous_end(runs int8multirange, range_end bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT lower(int8multirange(int8range(contiguous_end.range_end, NULL)) - contiguous_end.runs)
$$;
COMMENT ON FUNCTION ordered_events_router.contiguous_end(int8multirange, bigint) IS
    'Where the contiguous range starting at range_end ends in a union of runs of seqs';

/*
 * Every shard's seqs of a global stream in the step's window, from the
 * range's end on, max_release_batch seqs wide up to window_end (their
 * union), with the runs the router skipped, which count as arrived;
 * beyond is the first seq past the window any shard holds.  answered is
 * false if a shard did not answer: a seq that shard may hold is missing.
 * The shards are asked at once (on_shards_seq_bits(), RUN ON ALL); if
 * that fails, each in turn, to note which shard failed and use the
 * others.  all_at_once says the first way worked.
 */
CREATE FUNCTION ordered_events_router.gather_runs(
    s ordered_events_router.stream,
    OUT runs int8multirange, OUT window_end bigint, OUT beyond bigint,
    OUT answered boolean, OUT all_at_once boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bits bytea[];
    held record;
BEGIN
    answered := true;
    all_at_once := true;
    window_end := least(s.range_end::numeric + s.max_release_batch, 9223372036854775807);
    BEGIN
        SELECT pg_catalog.array_agg(b.seqs), pg_catalog.min(b.next_seq) INTO bits, beyond
          FROM ordered_events_router.on_shards_seq_bits(s.stream, s.range_end,
                                                        s.max_release_batch) b;
    EXCEPTION WHEN OTHERS THEN
        all_at_once := false;
    END;
    IF NOT all_at_once THEN
        bits := '{}';
        beyond := NULL;
        FOR i IN 0 .. ordered_events_router.shard_count() - 1 LOOP
            BEGIN
                held := ordered_events_router.on_shard_seq_bits(i, s.stream, s.range_end,
                                                                s.max_release_batch);
                bits := bits || held.seqs;
                beyond := least(beyond, held.next_seq);
                PERFORM ordered_events_router.note_shard(i, NULL);
            EXCEPTION WHEN OTHERS THEN
                PERFORM ordered_events_router.note_shard(i, SQLERRM);
                answered := false;
            END;
        END LOOP;
    END IF;
    runs := ordered_events.seq_bits_runs(s.range_end, coalesce(bits, '{}'));
    runs := runs + coalesce((SELECT pg_catalog.range_agg(int8range(k.gap_start, k.gap_end + 1))
                               FROM ordered_events_router.skip k
                              WHERE k.stream = s.stream AND k.gap_end >= s.range_end), '{}');
END;
$$;

/*
 * Release every shard behind a global stream's range through new_end: the
 * skips it lacks first.  When every shard stands at the range's old end,
 * all at once (RUN ON ALL); otherwise, or if that fails, each in turn: a
 * shard that does not answer is noted, and released when it answers again
 * (release_through() and shard_skip() may be repeated).  Returns the
 * largest event_ts the shards released.
 */
CREATE FUNCTION ordered_events_router.release_shards(s ordered_events_router.stream,
                                                     new_end bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sk ordered_events_router.skip;
    st ordered_events_router.shard_stream;
    max_ts timestamptz;
BEGIN
    IF new_end > s.range_end
       AND NOT EXISTS (SELECT FROM ordered_events_router.shard_stream x
                        WHERE x.stream = s.stream AND x.released_through <> s.range_end) THEN
        BEGIN
            FOR sk IN SELECT * FROM ordered_events_router.skip k
                       WHERE k.stream = s.stream AND k.gap_end >= s.range_end
                         AND k.gap_start < new_end LOOP
                PERFORM FROM ordered_events_router.on_shards_skip(s.stream, sk.gap_start,
                                                                  sk.gap_end, sk.reason);
            END LOOP;
            SELECT pg_catalog.max(r.max_event_ts) INTO max_ts
              FROM ordered_events_router.on_shards_release(s.stream, new_end) r;
            UPDATE ordered_events_router.shard_stream x SET released_through = new_end
             WHERE x.stream = s.stream AND x.released_through < new_end;
            RETURN max_ts;
        EXCEPTION WHEN OTHERS THEN
            NULL;                       -- each shard in turn, below
        END;
    END IF;
    FOR st IN SELECT * FROM ordered_events_router.shard_stream x
               WHERE x.stream = s.stream AND x.released_through < new_end
               ORDER BY x.shard LOOP
        BEGIN
            FOR sk IN SELECT * FROM ordered_events_router.skip k
                       WHERE k.stream = s.stream AND k.gap_end >= st.released_through
                         AND k.gap_start < new_end LOOP
                PERFORM ordered_events_router.on_shard_skip(st.shard, s.stream, sk.gap_start,
                                                            sk.gap_end, sk.reason);
            END LOOP;
            max_ts := greatest(max_ts, (ordered_events_router.on_shard_release(
                                            st.shard, s.stream, new_end)).max_event_ts);
            UPDATE ordered_events_router.shard_stream x SET released_through = new_end
             WHERE x.shard = st.shard AND x.stream = s.stream;
            PERFORM ordered_events_router.note_shard(st.shard, NULL);
        EXCEPTION WHEN OTHERS THEN
            PERFORM ordered_events_router.note_shard(st.shard, SQLERRM);
        END;
    END LOOP;
    RETURN max_ts;
END;
$$;

/*
 * One combine step for a global stream: read every shard's runs, advance
 * the range (applying the gap policy), and release every shard through
 * it.  A shard that does not answer may hold any seq not reported: the
 * range stops at the first of them, no gap is skipped, the gap's clock
 * stops (it starts again once every shard answers: a gap times out only
 * after gap_timeout with every shard answering), and the shard is
 * released through the range when it answers again.  Returns how far the
 * range moved (in seqs).
 *
 * Steps of one stream take turns (an advisory lock; combine_all() leaves a
 * stream another session is combining).  A step with nothing new writes
 * nothing, here or on a shard: it reads, and the stream's row is locked
 * and updated only when something changed.
 */
CREATE FUNCTION ordered_events_router.combine(stream text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s ordered_events_router.stream;
    g record;
    runs int8multirange;
    released_ts timestamptz;
    max_ts timestamptz;
    new_end bigint;
    next_start bigint;
    new_gap_start bigint;
    new_gap_seen timestamptz;
BEGIN
    s := ordered_events_router.global_stream_or_error(stream, false);
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ordered_events_router.combine'),
                                             pg_catalog.hashtext(s.stream));
    s := ordered_events_router.global_stream_or_error(stream, false);     -- as it is now
    SELECT * INTO g FROM ordered_events_router.gather_runs(s);
    runs := g.runs;
    new_end := ordered_events_router.contiguous_end(runs, s.range_end);

    -- the gap at the end of the range: seen since when, skipped once timed out
    new_gap_start := s.gap_start;
    new_gap_seen := s.gap_first_seen;
    -- the first seq held past the range's end, if the window tells
    IF new_end < g.window_end THEN
        next_start := least(lower(runs * int8multirange(int8range(new_end, NULL))), g.beyond);
    END IF;
    IF next_start IS NULL THEN
        new_gap_start := NULL;
        new_gap_seen := NULL;
    ELSIF NOT g.answered THEN           -- a silent shard may hold it: no clock
        new_gap_start := new_end;
        new_gap_seen := NULL;
    ELSIF new_gap_start IS DISTINCT FROM new_end OR new_gap_seen IS NULL THEN
        new_gap_start := new_end;
        new_gap_seen := pg_catalog.clock_timestamp();
    ELSIF s.gap_policy = 'timeout'
          AND new_gap_seen + s.gap_timeout <= pg_catalog.clock_timestamp() THEN
        INSERT INTO ordered_events_router.skip (stream, gap_start, gap_end, reason)
        VALUES (s.stream, new_end, next_start - 1,
                pg_catalog.format('gap_timeout %s expired', s.gap_timeout));
        runs := runs + int8multirange(int8range(new_end, next_start));
        new_end := ordered_events_router.contiguous_end(runs, s.range_end);
        new_gap_start := NULL;
        new_gap_seen := NULL;
    END IF;

    -- the shards' answers to the runs noted (before the release, which
    -- notes its own errors): an error's end at once, an answer of a step
    -- that moves the range (note_shard() writes it at most once a
    -- second); an idle step notes nothing
    IF g.all_at_once THEN
        PERFORM ordered_events_router.note_shard(i, NULL)
           FROM generate_series(0, ordered_events_router.shard_count() - 1) i
          WHERE new_end > s.range_end
             OR NOT EXISTS (SELECT FROM ordered_events_router.shard x
                             WHERE x.shard = i AND x.last_error IS NULL
                               AND x.last_ok_at IS NOT NULL);
    END IF;
    IF EXISTS (SELECT FROM ordered_events_router.shard_stream x
                WHERE x.stream = s.stream AND x.released_through < new_end) THEN
        released_ts := ordered_events_router.release_shards(s, new_end);
    END IF;
    max_ts := greatest(s.max_event_ts, released_ts);
    IF (s.range_end, s.max_event_ts, s.gap_start, s.gap_first_seen)
       IS DISTINCT FROM (new_end, max_ts, new_gap_start, new_gap_seen) THEN
        PERFORM FROM ordered_events_router.stream r WHERE r.stream = s.stream FOR UPDATE;
        UPDATE ordered_events_router.stream r
           SET range_end = new_end, max_event_ts = max_ts,
               gap_start = new_gap_start, gap_first_seen = new_gap_seen,
               updated_at = CASE WHEN new_end > s.range_end THEN pg_catalog.clock_timestamp()
                                 ELSE r.updated_at END
         WHERE r.stream = s.stream;
    END IF;
    RETURN least(new_end::numeric - s.range_end, 9223372036854775807);
END;
$$;

COMMENT ON FUNCTION ordered_events_router.combine(text) IS
    'One combine step of a global stream: unite the shards'' runs, advance the range, release every shard through it';

/*
 * skip_gap() on the global range: every seq from range_end through
 * through_seq that no shard holds is declared lost (recorded here, sent to
 * every shard by the next combine step, which it runs).  Every shard must
 * answer, or nothing is skipped.  Returns the number of seqs skipped.
 */
CREATE FUNCTION ordered_events_router.skip_gap(stream text, through_seq bigint, reason text)
RETURNS numeric
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s ordered_events_router.stream;
    held int8multirange := '{}';
    holes int8multirange;
    skipped numeric;
BEGIN
    IF through_seq IS NULL OR reason IS NULL THEN
        RAISE EXCEPTION 'through_seq and reason must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Name the last seq to declare lost and why.';
    END IF;
    s := ordered_events_router.global_stream_or_error(stream, false);
    -- combine()'s turn first, then the row: the order combine() takes them
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ordered_events_router.combine'),
                                             pg_catalog.hashtext(s.stream));
    s := ordered_events_router.global_stream_or_error(stream, true);
    IF through_seq < s.range_end THEN
        RETURN 0;
    END IF;
    -- what the shards hold in the window (an error if one does not answer)
    FOR i IN 0 .. ordered_events_router.shard_count() - 1 LOOP
        held := held + ordered_events_router.on_shard_runs(
                           i, s.stream, s.range_end,
                           least(through_seq::numeric - s.range_end + 1, 2147483647)::integer
                       )::int8multirange;
    END LOOP;
    held := held + coalesce((SELECT pg_catalog.range_agg(int8range(k.gap_start, k.gap_end + 1))
                               FROM ordered_events_router.skip k
                              WHERE k.stream = s.stream AND k.gap_end >= s.range_end), '{}');
    holes := int8multirange(int8range(s.range_end, through_seq, '[]')) - held;
    INSERT INTO ordered_events_router.skip (stream, gap_start, gap_end, reason)
    SELECT s.stream, lower(h), upper(h) - 1, skip_gap.reason FROM unnest(holes) h;
    skipped := (SELECT coalesce(sum(upper(h)::numeric - lower(h)), 0) FROM unnest(holes) h);
    PERFORM ordered_events_router.combine(s.stream);
    RETURN skipped;
END;
$$;
COMMENT ON FUNCTION ordered_events_router.skip_gap(text, bigint, text) IS
    'Declare every seq of a global stream up to through_seq that no shard holds lost; returns the number of seqs skipped';

/*
 * A combine step for every global stream; the worker calls it every cycle.
 * A stream another session is combining (an operator's combine(), which
 * may wait for a slow shard) is left to that session this time: the others
 * go on.
 */
CREATE FUNCTION ordered_events_router.combine_all()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    name text;
    moved numeric := 0;
BEGIN
    FOR name IN SELECT s.stream FROM ordered_events_router.stream s
                 WHERE s.sequencing = 'global'
                 ORDER BY s.stream LOOP
        CONTINUE WHEN NOT pg_catalog.pg_try_advisory_xact_lock(
                              pg_catalog.hashtext('ordered_events_router.combine'),
                              pg_catalog.hashtext(name));
        moved := moved + ordered_events_router.combine(name);
    END LOOP;
    RETURN least(moved, 9223372036854775807)::bigint;
END;
$$;
COMMENT ON FUNCTION ordered_events_router.combine_all() IS
    'One combine step for every global stream of the router; returns how far the ranges moved';

/*
 * Reading (docs/sharding.md, "Reading a sharded stream"): a global
 * stream's released events from from_seq on, merged from every shard in
 * seq order, each shard reading a window of seqs by its primary key, and
 * a row for each run of skipped seqs in it (skipped_through: its last
 * seq; NULL for an event).  The rows account for every seq from from_seq
 * through the last row's, so a reader goes on from the seq after it
 * (coalesce(skipped_through, seq) + 1); nothing is returned past what
 * every shard has released (released_end, in ranges), so a shard that
 * lags holds the reader back instead of making it skip its events.  A
 * per-key stream is read on each shard.  It runs as the extension's owner,
 * for the router's tables; the shards see the user mapping's role.
 */
CREATE FUNCTION ordered_events_router.released(stream text, from_seq bigint,
                                               max_events integer DEFAULT 1000)
RETURNS TABLE (seq bigint, key text, payload jsonb, event_ts timestamptz,
               alignment_ts timestamptz, received_at timestamptz, released_at timestamptz,
               skipped_through bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s ordered_events_router.stream;
    readable bigint;                -- every shard released the seqs below it
    pos bigint;                     -- the first seq of the answer
    win_end bigint;                 -- the answer is complete from pos to here
    budget integer := max_events;   -- rows left
    skip_starts bigint[] := '{}';   -- the skipped runs in the answer
    skip_ends bigint[] := '{}';
    k record;
BEGIN
    IF from_seq IS NULL OR max_events IS NULL THEN
        RAISE EXCEPTION 'from_seq and max_events must not be null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Read from the seq after the last one you processed (ranges.range_start at first).';
    END IF;
    IF max_events < 1 THEN
        PERFORM ordered_events.invalid_option('max_events', max_events::text,
            'Use a positive number: the most rows to return.');
    END IF;
    s := ordered_events_router.global_stream_or_error(stream, false);
    readable := (SELECT r.released_end FROM ordered_events_router.ranges r
                  WHERE r.stream = s.stream);
    pos := greatest(from_seq, s.initial_sequence);
    IF pos >= readable THEN
        RETURN;
    END IF;
    -- the window of max_events rows: an event is a row, a skipped run one
    win_end := pos;
    FOR k IN SELECT greatest(x.gap_start, pos) AS first, least(x.gap_end, readable - 1) AS last
               FROM ordered_events_router.skip x
              WHERE x.stream = s.stream AND x.gap_end >= pos AND x.gap_start < readable
              ORDER BY x.gap_start
              LIMIT max_events LOOP
        EXIT WHEN k.first::numeric - win_end >= budget;     -- the events before it fill it
        budget := budget - (k.first - win_end) - 1;
        skip_starts := skip_starts || k.first;
        skip_ends := skip_ends || k.last;
        win_end := k.last + 1;
        EXIT WHEN budget = 0;
    END LOOP;
    win_end := least(readable, win_end::numeric + budget)::bigint;
    RETURN QUERY
    SELECT r.seq, r.key, r.payload, r.event_ts, r.alignment_ts, r.received_at, r.released_at,
           NULL::bigint
      FROM generate_series(0, ordered_events_router.shard_count() - 1) i
     CROSS JOIN LATERAL ordered_events_router.on_shard_released(i, s.stream, pos, win_end,
                                                                max_events) r
    UNION ALL
    SELECT u.first, NULL, NULL, NULL, NULL, NULL, NULL, u.last
      FROM unnest(skip_starts, skip_ends) u(first, last)
     ORDER BY 1, 2;
END;
$$;
COMMENT ON FUNCTION ordered_events_router.released(text, bigint, integer) IS
    'Released events of a global stream from from_seq on, merged from every shard in seq order, and a row for each run of skipped seqs; never past what every shard released';

CREATE VIEW ordered_events_router.shard_status AS
SELECT i AS shard, s.last_ok_at, s.last_error, s.last_error_at,
       (s.last_error_at IS NOT NULL
        AND s.last_error_at >= coalesce(s.last_ok_at, '-infinity')) AS failing,
       (SELECT pg_catalog.min(x.released_through) FROM ordered_events_router.shard_stream x
         WHERE x.shard = i) AS min_released_through
  FROM generate_series(0, ordered_events_router.shard_count() - 1) i
  LEFT JOIN ordered_events_router.shard s ON s.shard = i;
COMMENT ON VIEW ordered_events_router.shard_status IS
    'Each shard: when it last answered, its last error, whether it is failing now';

CREATE VIEW ordered_events_router.ranges AS
SELECT s.stream, s.initial_sequence AS range_start, s.range_end, s.max_event_ts,
       s.updated_at,
       least(s.range_end, (SELECT pg_catalog.min(x.released_through)
                             FROM ordered_events_router.shard_stream x
                            WHERE x.stream = s.stream)) AS released_end
  FROM ordered_events_router.stream s
 WHERE s.sequencing = 'global';
COMMENT ON VIEW ordered_events_router.ranges IS
    'The combined contiguous range of each global stream, and how far every shard released it (released() reads below released_end)';

REVOKE EXECUTE ON FUNCTION
    ordered_events_router.on_shard_create_stream(integer, text, text, bigint, integer),
    ordered_events_router.on_shard_shard_stream(integer, text),
    ordered_events_router.on_shard_runs(integer, text, bigint, integer),
    ordered_events_router.on_shards_seq_bits(text, bigint, integer),
    ordered_events_router.on_shard_seq_bits(integer, text, bigint, integer),
    ordered_events_router.on_shards_skip(text, bigint, bigint, text),
    ordered_events_router.on_shards_release(text, bigint),
    ordered_events_router.on_shard_release(integer, text, bigint),
    ordered_events_router.on_shard_skip(integer, text, bigint, bigint, text),
    ordered_events_router.on_shard_released(integer, text, bigint, bigint, integer),
    ordered_events_router.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
    ordered_events_router.ingest_many(text, bigint[], text[], jsonb[]),
    ordered_events_router.on_shards_ingest(text, bigint[], text[], jsonb[]),
    ordered_events_router.on_shard_ingest(text, bigint, text, jsonb, timestamptz, timestamptz,
                                          boolean),
    ordered_events_router.create_stream(text, text, bigint, text, interval, integer),
    ordered_events_router.note_shard(integer, text),
    ordered_events_router.global_stream_or_error(text, boolean),
    ordered_events_router.gather_runs(ordered_events_router.stream),
    ordered_events_router.release_shards(ordered_events_router.stream, bigint),
    ordered_events_router.combine(text),
    ordered_events_router.combine_all(),
    ordered_events_router.skip_gap(text, bigint, text),
    ordered_events_router.released(text, bigint, integer)
FROM PUBLIC;

-- The worker of ordered_events calls combine_all() every cycle.
SELECT ordered_events.register_cycle_hook('ordered_events_router.combine_all()');
