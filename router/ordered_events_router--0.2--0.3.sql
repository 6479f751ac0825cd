/* ordered_events_router--0.2--0.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ordered_events_router UPDATE TO '0.3'" to load this file. \quit

/*
 * 0.3: the router has the worker of ordered_events call combine_all()
 * through a registration (ordered_events.register_cycle_hook(), new in
 * ordered_events 0.3), where 0.2's worker called it by name; and
 * combine() is cut into its parts; create_stream()'s hint names the docs
 * of this version.  Nothing else changes.
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

/*
 * Every shard's runs of a global stream above its range (their union, each
 * run's start and largest event_ts), with the runs the router skipped,
 * which count as arrived; answered is false if a shard did not answer: a
 * seq that shard may hold is missing.
 */
CREATE FUNCTION ordered_events_router.gather_runs(
    s ordered_events_router.stream,
    OUT runs int8multirange, OUT run_starts bigint[], OUT run_ts timestamptz[],
    OUT answered boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    runs := '{}';
    run_starts := '{}';
    run_ts := '{}';
    answered := true;
    FOR i IN 0 .. ordered_events_router.shard_count() - 1 LOOP
        BEGIN
            SELECT runs + coalesce(pg_catalog.range_agg(int8range(r.run_start, r.run_end + 1)),
                                   '{}'),
                   run_starts || coalesce(pg_catalog.array_agg(r.run_start), '{}'),
                   run_ts || coalesce(pg_catalog.array_agg(r.max_event_ts), '{}')
              INTO runs, run_starts, run_ts
              FROM ordered_events_router.on_shard_runs(i, s.stream, s.range_end,
                                                       s.max_release_batch) r;
            PERFORM ordered_events_router.note_shard(i, NULL);
        EXCEPTION WHEN OTHERS THEN
            PERFORM ordered_events_router.note_shard(i, SQLERRM);
            answered := false;
        END;
    END LOOP;
    runs := runs + coalesce((SELECT pg_catalog.range_agg(int8range(k.gap_start, k.gap_end + 1))
                               FROM ordered_events_router.skip k
                              WHERE k.stream = s.stream AND k.gap_end >= s.range_end), '{}');
END;
$$;

/*
 * Release every shard behind a global stream's range through new_end: the
 * skips it lacks first.  A shard that does not answer is noted, and
 * released when it answers again.
 */
CREATE FUNCTION ordered_events_router.release_shards(s ordered_events_router.stream,
                                                     new_end bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sk ordered_events_router.skip;
    st ordered_events_router.shard_stream;
BEGIN
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
            PERFORM ordered_events_router.on_shard_release_through(st.shard, s.stream,
                                                                   new_end);
            UPDATE ordered_events_router.shard_stream x SET released_through = new_end
             WHERE x.shard = st.shard AND x.stream = s.stream;
            PERFORM ordered_events_router.note_shard(st.shard, NULL);
        EXCEPTION WHEN OTHERS THEN
            PERFORM ordered_events_router.note_shard(st.shard, SQLERRM);
        END;
    END LOOP;
END;
$$;

/*
 * One combine step for a global stream, as in 0.2: read every shard's
 * runs, advance the range (applying the gap policy), and release every
 * shard through it.  A shard that does not answer may hold any seq not
 * reported: the range stops at the first of them, no gap is skipped, and
 * the shard is released through the range when it answers again.  Returns
 * how far the range moved (in seqs).
 */
CREATE OR REPLACE FUNCTION ordered_events_router.combine(stream text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s ordered_events_router.stream;
    g record;
    runs int8multirange;
    max_ts timestamptz;
    new_end bigint;
    next_start bigint;
BEGIN
    s := ordered_events_router.global_stream_or_error(stream, true);
    SELECT * INTO g FROM ordered_events_router.gather_runs(s);
    runs := g.runs;
    new_end := ordered_events_router.contiguous_end(runs, s.range_end);

    -- the gap at the end of the range: seen since when, skipped once timed out
    next_start := (SELECT min(lower(r)) FROM unnest(runs) r WHERE lower(r) > new_end);
    IF next_start IS NULL THEN
        s.gap_start := NULL;
        s.gap_first_seen := NULL;
    ELSIF s.gap_start IS DISTINCT FROM new_end THEN
        s.gap_start := new_end;
        s.gap_first_seen := pg_catalog.clock_timestamp();
    ELSIF s.gap_policy = 'timeout' AND g.answered    -- a silent shard may hold it
          AND s.gap_first_seen + s.gap_timeout <= pg_catalog.clock_timestamp() THEN
        INSERT INTO ordered_events_router.skip (stream, gap_start, gap_end, reason)
        VALUES (s.stream, new_end, next_start - 1,
                pg_catalog.format('gap_timeout %s expired', s.gap_timeout));
        runs := runs + int8multirange(int8range(new_end, next_start));
        new_end := ordered_events_router.contiguous_end(runs, s.range_end);
        s.gap_start := NULL;
        s.gap_first_seen := NULL;
    END IF;
    -- a run that starts inside the new range lies in it whole
    max_ts := (SELECT greatest(s.max_event_ts, pg_catalog.max(u.ts))
                 FROM unnest(g.run_starts, g.run_ts) u(start, ts) WHERE u.start < new_end);
    UPDATE ordered_events_router.stream r
       SET range_end = new_end, max_event_ts = max_ts, gap_start = s.gap_start,
           gap_first_seen = s.gap_first_seen,
           updated_at = CASE WHEN new_end > s.range_end THEN pg_catalog.clock_timestamp()
                             ELSE r.updated_at END
     WHERE r.stream = s.stream
       AND (r.range_end, r.max_event_ts, r.gap_start, r.gap_first_seen)
           IS DISTINCT FROM (new_end, max_ts, s.gap_start, s.gap_first_seen);

    PERFORM ordered_events_router.release_shards(s, new_end);
    RETURN least(new_end::numeric - s.range_end, 9223372036854775807);
END;
$$;

REVOKE EXECUTE ON FUNCTION
    ordered_events_router.gather_runs(ordered_events_router.stream),
    ordered_events_router.release_shards(ordered_events_router.stream, bigint)
FROM PUBLIC;

-- create_stream() as in 0.2, its hint pointing at the docs of this version.
CREATE OR REPLACE FUNCTION ordered_events_router.create_stream(
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
    -- the options as ordered_events checks them, the gap policy on the router
    PERFORM ordered_events.check_release_options(sequencing, gap_policy, gap_timeout,
                                                 max_release_batch);
    IF gap_policy = 'fence' THEN
        PERFORM ordered_events.invalid_option('gap_policy', gap_policy,
            'A sharded stream takes ''wait'' or ''timeout'': append() allocates seqs on one server.');
    END IF;
    INSERT INTO ordered_events_router.stream
        (stream, sequencing, initial_sequence, gap_policy, gap_timeout, max_release_batch,
         range_end)
    VALUES (create_stream.stream, create_stream.sequencing, create_stream.initial_sequence,
            create_stream.gap_policy, create_stream.gap_timeout,
            create_stream.max_release_batch, create_stream.initial_sequence);
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

-- The worker of ordered_events calls combine_all() every cycle.
SELECT ordered_events.register_cycle_hook('ordered_events_router.combine_all()');
