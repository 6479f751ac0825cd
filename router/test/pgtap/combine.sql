-- The combiner of the router alone (docs/sharding.md): the shards'
-- runs of seqs (inclusive bounds, as ordered_events.shard_runs() returns
-- them) are united as int8ranges, and ordered_events_router.contiguous_end()
-- takes the end of the contiguous range from range_end on.  Like Beam's
-- ContiguousSequenceRange combiner, the result must not depend on how the
-- runs are grouped (which shard, which partial union) nor on the order in
-- which the partial unions are combined.
--
-- Random trials (setseed: the same trials every run): each a range_end
-- and up to 12 runs around it, some below it, some across it, some
-- touching or overlapping.  Every trial's runs are grouped at random six
-- times, each group's runs united (range_agg, in a shuffled order), and the
-- groups' unions merged pairwise in a random order, each merge with its
-- operands in a random order.  Every grouping gives the same union and the
-- same contiguous_end, and that equals a brute-force walk over the runs.
-- Then the edge cases one by one.
BEGIN;
SET LOCAL client_min_messages = warning;     -- not the NOTICE installing plproxy
CREATE EXTENSION ordered_events_router CASCADE;
RESET client_min_messages;
SELECT plan(22);

SELECT setseed(0.14);

CREATE TEMP TABLE trial ON COMMIT DROP AS
SELECT t, (floor(random() * 41) - 20)::bigint AS range_end,
       floor(random() * 13)::integer AS nruns
  FROM generate_series(1, 400) t;

-- Runs from 8 below range_end to 25 above it, 1 to 6 seqs long.
CREATE TEMP TABLE run ON COMMIT DROP AS
SELECT x.t, x.r, x.run_start, x.run_start + x.extra AS run_end
  FROM (SELECT t.t, g.r, t.range_end - 8 + floor(random() * 34)::bigint AS run_start,
               floor(random() * 6)::bigint AS extra
          FROM trial t CROSS JOIN LATERAL generate_series(1, t.nruns) g(r)) x;

-- Six random groupings of each trial's runs into 1 to 5 groups.
CREATE TEMP TABLE grouping ON COMMIT DROP AS
SELECT r.t, c, r.r, floor(random() * (1 + c % 5))::integer AS grp
  FROM run r CROSS JOIN generate_series(1, 6) c;

-- One grouping's union: each group's runs united in a shuffled order, then
-- random pairs of partial unions merged until one is left.
CREATE FUNCTION pg_temp.combined(p_t integer, p_c integer)
RETURNS int8multirange
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    parts int8multirange[];
    i integer;
    j integer;
    merged int8multirange;
BEGIN
    SELECT coalesce(array_agg(m ORDER BY random()), '{}') INTO parts
      FROM (SELECT range_agg(int8range(r.run_start, r.run_end + 1) ORDER BY random()) AS m
              FROM run r JOIN grouping g ON g.t = r.t AND g.r = r.r
             WHERE r.t = p_t AND g.c = p_c
             GROUP BY g.grp) p;
    IF cardinality(parts) = 0 THEN
        RETURN '{}';
    END IF;
    WHILE cardinality(parts) > 1 LOOP
        i := 1 + floor(random() * cardinality(parts))::integer;
        j := 1 + floor(random() * (cardinality(parts) - 1))::integer;
        IF j >= i THEN
            j := j + 1;
        END IF;
        IF random() < 0.5 THEN
            merged := parts[i] + parts[j];
        ELSE
            merged := parts[j] + parts[i];
        END IF;
        parts := array_append(
            ARRAY(SELECT p FROM unnest(parts) WITH ORDINALITY u(p, o)
                   WHERE o NOT IN (i, j) ORDER BY o),
            merged);
    END LOOP;
    RETURN parts[1];
END;
$$;

-- Brute force: walk the seqs from range_end on while a run holds them.
CREATE FUNCTION pg_temp.walked_end(p_t integer)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    x bigint := (SELECT range_end FROM trial WHERE t = p_t);
BEGIN
    WHILE EXISTS (SELECT FROM run r WHERE r.t = p_t AND x BETWEEN r.run_start AND r.run_end) LOOP
        x := x + 1;
    END LOOP;
    RETURN x;
END;
$$;

-- c = 0: every run in one union, in run order; c = 1..6: the groupings.
CREATE TEMP TABLE combination ON COMMIT DROP AS
SELECT t.t, 0 AS c,
       coalesce((SELECT range_agg(int8range(r.run_start, r.run_end + 1) ORDER BY r.r)
                   FROM run r WHERE r.t = t.t), '{}') AS m
  FROM trial t
UNION ALL
SELECT t.t, c, pg_temp.combined(t.t, c)
  FROM trial t CROSS JOIN generate_series(1, 6) c;

CREATE TEMP TABLE result ON COMMIT DROP AS
SELECT t.t, t.range_end, t.nruns, pg_catalog.max(x.c) AS groupings,
       pg_temp.walked_end(t.t) AS walked,
       pg_catalog.min(ordered_events_router.contiguous_end(x.m, t.range_end)) AS min_end,
       pg_catalog.max(ordered_events_router.contiguous_end(x.m, t.range_end)) AS max_end,
       pg_catalog.count(DISTINCT x.m) AS unions
  FROM trial t JOIN combination x ON x.t = t.t
 GROUP BY t.t, t.range_end, t.nruns;

------------------------------------------------------------------------
-- The trials are not trivial: 7
------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM result WHERE groupings = 6), 400::bigint,
    '400 trials, each combined in 6 random groupings and one plain union');
SELECT cmp_ok((SELECT count(*) FROM result WHERE nruns = 0), '>=', 10::bigint,
    'some trials have no runs');
SELECT cmp_ok((SELECT count(*) FROM result WHERE walked > range_end), '>=', 100::bigint,
    'in many trials the range moves');
SELECT cmp_ok((SELECT count(*) FROM result WHERE walked = range_end AND nruns > 0), '>=', 50::bigint,
    'in many trials with runs it does not (no run holds range_end)');
SELECT cmp_ok((SELECT count(*) FROM result
                WHERE walked > range_end
                  AND EXISTS (SELECT FROM run r
                               WHERE r.t = result.t AND r.run_start > walked)), '>=', 50::bigint,
    'in many trials runs lie beyond the contiguous range');
SELECT cmp_ok((SELECT count(*) FROM result
                WHERE EXISTS (SELECT FROM run r
                               WHERE r.t = result.t AND r.run_start < range_end
                                 AND r.run_end >= range_end)), '>=', 50::bigint,
    'in many trials a run starts below range_end and holds it');
SELECT cmp_ok((SELECT count(DISTINCT (g.t, g.c)) FROM grouping g
                JOIN grouping h ON h.t = g.t AND h.c = g.c AND h.grp <> g.grp),
    '>=', 500::bigint,
    'many groupings split a trial''s runs over several partial unions');

------------------------------------------------------------------------
-- The property: 3
------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM result WHERE unions <> 1), 0::bigint,
    'every grouping and order of combining gives the same union');
SELECT is((SELECT count(*) FROM result WHERE min_end <> max_end), 0::bigint,
    'every grouping and order of combining gives the same contiguous_end');
SELECT is((SELECT count(*) FROM result WHERE max_end <> walked), 0::bigint,
    'contiguous_end equals the brute-force walk from range_end in every trial');

------------------------------------------------------------------------
-- Edge cases: 12
------------------------------------------------------------------------
SELECT is(ordered_events_router.contiguous_end('{}', 5), 5::bigint,
    'no runs: the range stays');
SELECT is(ordered_events_router.contiguous_end('{[5,8)}', 5), 8::bigint,
    'a run starting exactly at range_end: its end');
SELECT is(ordered_events_router.contiguous_end('{[6,9)}', 5), 5::bigint,
    'a run starting after range_end: the range stays');
SELECT is(int8range(5, 7, '[]')::int8multirange + int8range(8, 9, '[]')::int8multirange,
    '{[5,10)}'::int8multirange,
    'adjacent runs 5..7 and 8..9 merge into one');
SELECT is(ordered_events_router.contiguous_end(
        int8range(8, 9, '[]')::int8multirange + int8range(5, 7, '[]')::int8multirange, 5),
    10::bigint,
    'adjacent runs 5..7 and 8..9 (combined in either order): 10');
SELECT is(ordered_events_router.contiguous_end(
        (SELECT range_agg(r) FROM unnest('{"[5,8)","[6,9)","[5,8)","[6,9)","[5,6)"}'::int8range[]) r),
        5),
    9::bigint,
    'overlapping and duplicate runs: the end of their union');
SELECT is(ordered_events_router.contiguous_end('{[5,7),[8,10)}', 5), 7::bigint,
    'a missing seq between two runs stops the range');
SELECT is(ordered_events_router.contiguous_end('{[1,4)}', 5), 5::bigint,
    'a run below range_end: the range stays');
SELECT is(ordered_events_router.contiguous_end('{[1,5)}', 5), 5::bigint,
    'a run ending just below range_end: the range stays');
SELECT is(ordered_events_router.contiguous_end('{[1,7)}', 5), 7::bigint,
    'a run from below range_end across it: its end');
SELECT is(ordered_events_router.contiguous_end('{[-9223372036854775808,-9223372036854775800)}',
                                               -9223372036854775808),
    -9223372036854775800::bigint,
    'the lowest bigint as range_end');
SELECT is(ordered_events_router.contiguous_end(
        int8range(9223372036854775800, 9223372036854775806, '[]')::int8multirange,
        9223372036854775800),
    9223372036854775807::bigint,
    'a run through the highest seq an event can have (9223372036854775806)');

SELECT * FROM finish();
ROLLBACK;
