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
-- the same as the router's combine step asks: a bit a seq of a window, and
-- the first seq held past it; the router ORs the shards' bitmaps
SELECT seqs, next_seq FROM ordered_events.shard_seq_bits('sh', 1, 8);
SELECT seqs, next_seq FROM ordered_events.shard_seq_bits('sh', 1, 9);
SELECT seqs, next_seq FROM ordered_events.shard_seq_bits('sh', 3, 1);
SELECT seqs, next_seq FROM ordered_events.shard_seq_bits('sh', 10, 100);
SELECT ordered_events.seq_bits_runs(1, ARRAY[(ordered_events.shard_seq_bits('sh', 1, 100)).seqs]);
SELECT ordered_events.seq_bits_runs(1, ARRAY['\x0b', '\x3401', NULL, '\x']::bytea[]);
SELECT ordered_events.seq_bits_runs(100, ARRAY['\xff00ff', '\x00ff']::bytea[]);
SELECT ordered_events.seq_bits_runs(-8, ARRAY['\x80']::bytea[]), ordered_events.seq_bits_runs(5, '{}');
-- the same as bit strings: bit i of a byte is seq from_seq + 8 * byte + i
SELECT bool_and(ordered_events.seq_bits_runs(0, ARRAY[b]) =
                (SELECT coalesce(range_agg(int8range(i, i + 1)), '{}')
                   FROM generate_series(0, 15) i
                  WHERE get_bit(b, i) = 1)) AS bits_are_seqs
  FROM (SELECT decode(lpad(to_hex(n), 4, '0'), 'hex') AS b FROM generate_series(0, 65535, 257) n) x;
-- and the union of several: 300 random sets of 1 to 4 bitmaps of 0 to 6
-- bytes (a byte all clear, all set or random), from a seq around 0, against
-- the seqs of every set bit
SELECT count(*) AS sets,
       count(*) FILTER (WHERE ordered_events.seq_bits_runs(x.from_seq, x.bits) IS DISTINCT FROM
                        (SELECT coalesce(range_agg(int8range(x.from_seq + i, x.from_seq + i + 1)), '{}')
                           FROM unnest(x.bits) b, generate_series(0, length(b) * 8 - 1) i
                          WHERE get_bit(b, i) = 1)) AS wrong
  FROM (SELECT t, (t % 21) - 10 AS from_seq, array_agg(b ORDER BY m) AS bits
          FROM (SELECT t, m, decode(string_agg(lpad(to_hex(CASE (t * 7 + m * 3 + k) % 3
                                                             WHEN 0 THEN 0 WHEN 1 THEN 255
                                                             ELSE floor(random() * 256)::integer END),
                                                        2, '0'), '' ORDER BY k), 'hex') AS b
                  FROM generate_series(1, 300) t, generate_series(1, 1 + t % 4) m,
                       generate_series(1, (t + m) % 7) k
                 GROUP BY t, m) y
         GROUP BY t) x;

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
-- as the router's step asks it: with the largest event_ts of the range
SELECT released, max_event_ts = (SELECT max(event_ts) FROM ordered_events.released
                                  WHERE stream = 'sh') AS is_max
  FROM ordered_events.shard_release('sh', 7);
SELECT seqs, next_seq FROM ordered_events.shard_seq_bits('sh', 7, 4);

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
SELECT ordered_events.shard_release('sh', NULL);
SELECT ordered_events.shard_release('sh_done', 5);
SELECT ordered_events.shard_seq_bits('sh', NULL, 10);
SELECT ordered_events.shard_seq_bits('sh', 1, NULL);
SELECT ordered_events.shard_seq_bits('sh', 1, 0);
SELECT ordered_events.shard_seq_bits('sh', 1, 134217729);
SELECT ordered_events.shard_seq_bits('sh_done', 1, 10);
SELECT ordered_events.shard_seq_bits(NULL, 1, 10);
SELECT ordered_events.seq_bits_runs(NULL, '{}');
SELECT ordered_events.seq_bits_runs(1, NULL);
SELECT ordered_events.seq_bits_runs(9223372036854775800, ARRAY['\xff01']::bytea[]);
SELECT ordered_events.seq_bits_runs(1, ARRAY[decode(repeat('00', 16777217), 'hex')]);
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
