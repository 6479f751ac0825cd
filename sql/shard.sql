-- A shard's part of a sharded global stream (docs/sharding.md): its
-- range comes from a router, here played by hand.
\set VERBOSITY terse
SELECT ordered_events.create_stream('sh');
SELECT ordered_events.shard_stream('sh');

-- this shard holds the seqs of its keys; the others are on other shards
SELECT ordered_events.ingest_array('sh', ARRAY[1, 2, 4, 7, 8, 9]::bigint[],
                                   ARRAY['a', 'b', 'a', 'b', 'a', 'a'],
                                   ARRAY['{"n": 1}', NULL, NULL, NULL, NULL, NULL]::jsonb[]);
SELECT run_start, run_end FROM ordered_events.shard_runs('sh', 1, 100);
SELECT run_start, run_end FROM ordered_events.shard_runs('sh', 3, 2);

-- its own release steps never move its range
SELECT ordered_events.release('sh');
SELECT range_end FROM ordered_events.ranges WHERE stream = 'sh';

-- the router's range: seqs 3, 5 and 6 are on other shards
SELECT ordered_events.release_through('sh', 7);
SELECT seq, key FROM ordered_events.released WHERE stream = 'sh' ORDER BY seq;
SELECT range_end, released_count, pending_count
  FROM ordered_events.stream_stats WHERE stream = 'sh';
-- again, or lower: nothing more
SELECT ordered_events.release_through('sh', 7), ordered_events.release_through('sh', 5);

-- a skip of the router, then a late event of it
SELECT ordered_events.shard_skip('sh', 10, 11, 'lost on the router');
SELECT ordered_events.shard_skip('sh', 10, 11, 'lost on the router');   -- once
SELECT ordered_events.ingest('sh', 10, 'a');
SELECT ordered_events.release_through('sh', 12);
SELECT stream, key, gap_start, gap_end, reason FROM ordered_events.skipped_gaps WHERE stream = 'sh';
SELECT seq, key FROM ordered_events.released WHERE stream = 'sh' ORDER BY seq;
-- a seq below the range that another shard held: a duplicate, never released
SELECT ordered_events.ingest('sh', 5, 'c'), ordered_events.ingest('sh', 1, 'c');
SELECT count(*) FROM ordered_events.released WHERE stream = 'sh' AND key = 'c';
SELECT stream, seq, key, reason, detail FROM ordered_events.unprocessed
 WHERE stream = 'sh' ORDER BY seq;

-- errors
\set VERBOSITY sqlstate
SELECT ordered_events.shard_stream('sh_nope');
SELECT ordered_events.create_stream('sh_keys', 'per_key');
SELECT ordered_events.shard_stream('sh_keys');
SELECT ordered_events.create_stream('sh_done');
SELECT ordered_events.ingest('sh_done', 1, 'k');
SELECT ordered_events.release('sh_done');
SELECT ordered_events.shard_stream('sh_done');
SELECT ordered_events.release_through('sh_done', 5);
SELECT ordered_events.shard_skip('sh_done', 5, 6, 'x');
SELECT ordered_events.release_through('sh', NULL);
SELECT ordered_events.skip_gap('sh', 20, 'not here');
SELECT ordered_events.alter_stream('sh', gap_policy => 'timeout', gap_timeout => '1 s');
\set VERBOSITY default
-- a batch is checked whole before any of it is written (docs/sharding.md,
-- "Writing through the router"): nothing of these is accepted
SELECT ordered_events.ingest_array('sh', ARRAY[30, NULL, 32], ARRAY['a', 'a', 'a'],
                                   ARRAY[NULL, NULL, NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[30, 31], ARRAY['a', NULL],
                                   ARRAY[NULL, NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[30, 31], ARRAY['a', repeat('k', 1025)],
                                   ARRAY[NULL, NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[30, 31], ARRAY['a', 'b'], ARRAY['{}']::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[30, 31, 32], ARRAY['a', 'b'],
                                   ARRAY[NULL, NULL, NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[[30, 31]], ARRAY['a', 'b'], ARRAY[NULL, NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', NULL, ARRAY['a'], ARRAY[NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', ARRAY[30], ARRAY['a'], NULL);
SELECT ordered_events.ingest_array(NULL, ARRAY[30], ARRAY['a'], ARRAY[NULL]::jsonb[]);
SELECT count(*) AS written FROM ordered_events.accepted_events WHERE stream = 'sh' AND seq >= 30;
-- a key of 1024 bytes is the longest; the empty batch writes nothing
SELECT ordered_events.check_event_batch('sh', ARRAY[30], ARRAY[repeat('k', 1024)], ARRAY[NULL]::jsonb[]);
SELECT ordered_events.ingest_array('sh', '{}', '{}', '{}');
SELECT ordered_events.skip_gap('sh', 20, 'not here');
SELECT ordered_events.shard_stream('sh_keys');
SELECT ordered_events.release_through('sh_done', 5);

SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['sh', 'sh_keys', 'sh_done']) s;
