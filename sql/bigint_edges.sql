--
-- Both edges of bigint on every arithmetic path: seqs, skips and counts
-- near -9223372036854775808 and 9223372036854775807 never overflow, never
-- give a negative count, and never break stream_stats for other streams.
--
\set VERBOSITY terse
SELECT ordered_events.create_stream('low', initial_sequence => -9223372036854775808);
SELECT ordered_events.create_stream('low_keys', 'per_key', initial_sequence => -9223372036854775808);
SELECT ordered_events.create_stream('high');

-- the lowest seq is accepted and released
SELECT ordered_events.ingest('low', -9223372036854775808, 'k');
SELECT ordered_events.ingest('low', -9223372036854775806, 'k');
SELECT ordered_events.release('low');
SELECT key, gap_start, gap_end, first_seen IS NOT NULL AS seen FROM ordered_events.gaps('low');

-- more seqs than a bigint counts: an error, and nothing changes
SELECT ordered_events.skip_gap('low', 9223372036854775806, 'too many');
SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream = 'low';

-- the most one call may skip, 9223372036854775807 seqs; then the rest
SELECT ordered_events.skip_gap('low', 0, 'the most in one call');
SELECT ordered_events.ingest('low', 9223372036854775806, 'k');
SELECT ordered_events.skip_gap('low', 9223372036854775805, 'the rest');
SELECT range_start, range_end FROM ordered_events.ranges WHERE stream = 'low';
SELECT seq FROM ordered_events.released WHERE stream = 'low';
SELECT ordered_events.ingest('low', 5, 'k');    -- late: skipped

-- per-key: two keys skipped nearly whole: the total is more than a bigint
SELECT ordered_events.ingest('low_keys', 9223372036854775806, 'a');
SELECT ordered_events.ingest('low_keys', 9223372036854775806, 'b');
SELECT ordered_events.skip_gap('low_keys', -2, 'lost', 'a');
SELECT ordered_events.skip_gap('low_keys', 9223372036854775805, 'lost', 'a');
SELECT ordered_events.skip_gap('low_keys', -2, 'lost', 'b');
SELECT ordered_events.skip_gap('low_keys', 9223372036854775805, 'lost', 'b');
SELECT key, seq FROM ordered_events.released WHERE stream = 'low_keys';

-- the highest seq that has a successor
SELECT ordered_events.ingest('high', 9223372036854775806, 'k');
SELECT ordered_events.ingest('high', 9223372036854775807, 'k');
SELECT * FROM ordered_events.gaps('high');
SELECT ordered_events.skip_gap('high', 9223372036854775807, 'no successor');
SELECT ordered_events.skip_gap('high', 9223372036854775805, 'lost');
SELECT range_end FROM ordered_events.ranges WHERE stream = 'high';

-- a fence stream at the end of bigint: no seq left is an error, not a dead letter
SELECT ordered_events.create_stream('fence_end', gap_policy => 'fence',
                                    initial_sequence => 9223372036854775805);
SELECT ordered_events.append('fence_end', 'k'), ordered_events.append('fence_end', 'k');
\set VERBOSITY default
SELECT ordered_events.append('fence_end', 'k');
\set VERBOSITY sqlstate
SELECT ordered_events.append('fence_end', 'k');  -- the sequence's own limit
\set VERBOSITY terse
SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'fence_end';
SELECT ordered_events.release('fence_end');

-- stream_stats works for every stream; skipped_count stops at the largest bigint
SELECT stream, range_end, max_seen_seq, pending_count, released_count, skipped_count
  FROM ordered_events.stream_stats WHERE stream IN ('low', 'low_keys', 'high') ORDER BY stream;

-- the release log gives each step's first seq, skipped runs included
SELECT ordered_events.create_stream('rl');
SELECT ordered_events.ingest('rl', 1, 'k'), ordered_events.ingest('rl', 4, 'k'),
       ordered_events.ingest('rl', 5, 'k');
SELECT ordered_events.release('rl');
SELECT ordered_events.skip_gap('rl', 3, 'lost');
SELECT d.stream, l.seq_start, l.seq_end
  FROM ordered_events.lane_release_log l JOIN ordered_events.stream_def d USING (stream_id)
 WHERE d.stream IN ('low', 'high', 'rl') ORDER BY d.stream, l.seq_end;

-- compaction counts and deletes runs that span more seqs than a bigint holds
SELECT ordered_events.create_stream('wide', initial_sequence => -9223372036854775808,
                                    retention => '0 s');
SELECT ordered_events.ingest('wide', -9223372036854775808, 'a'),
       ordered_events.ingest('wide', 9223372036854775806, 'b');
SELECT ordered_events.release('wide');
SELECT ordered_events.skip_gap('wide', -1, 'lost');
SELECT ordered_events.skip_gap('wide', 9223372036854775805, 'lost');
-- a is deleted; b, released by the skip, waits until a release step settles
-- the skipped run (a late event may still commit into it)
SELECT ordered_events.compact('wide'), ordered_events.compact('wide'),
       ordered_events.compact('wide');
SELECT stream, key, last_released_seq, released_count FROM ordered_events.key_status
 WHERE stream = 'wide' ORDER BY key;
SELECT count(*) FROM ordered_events.released WHERE stream = 'wide';
SELECT ordered_events.ingest('wide', 9223372036854775806, 'b'),
       ordered_events.ingest('wide', -9223372036854775808, 'a');

SELECT ordered_events.drop_stream(s)
  FROM unnest(ARRAY['low', 'low_keys', 'high', 'rl', 'fence_end', 'wide']) s;
