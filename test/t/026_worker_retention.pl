
# Retention by the background worker (issue 13).
#
# - With a retention of '0 s', the worker deletes a global and a per-key
#   stream's released events by itself; the range, released_count and
#   key_status stay what they were, the metrics count the deleted events,
#   and a retried old seq is still a duplicate.
# - A retention of an hour deletes nothing until the release steps are an
#   hour old (their stored time is moved back), and then only those.
# - Subscribed consumers hold the retention back: the worker deletes only
#   the release steps that every consumer partition with events left to
#   read has read past, by committed reads.
# - A global stream without retention: the worker folds its released events
#   into per-key counters, and key_status still equals a count of the
#   events.
# - SIGKILL during a large compaction: after the crash restart everything
#   converges, nothing counted or deleted twice.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('retention', databases => 'postgres', naptime => 100,
	conf => ['restart_after_crash = on']);

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');

# Wait until the worker has finished two more cycles (OrderedEvents.pm).
sub wait_two_cycles
{
	my ($what) = @_;
	ok(OrderedEvents::two_more_cycles($node), "$what: the worker ran two more cycles");
}

# The events a stream still stores, released or pending.
sub stored
{
	my ($stream) = @_;
	return qq{(SELECT count(*) FROM ordered_events.event_store e
	             JOIN ordered_events.stream_def d USING (stream_id)
	            WHERE d.stream = '$stream')};
}

sub metric
{
	my ($metric, $stream) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT value FROM ordered_events.metrics
		 WHERE metric = 'ordered_events_$metric' AND stream = '$stream'});
}

my $status_sql = q{
	SELECT string_agg(format('%s/%s..%s', stream, range_start, range_end), ' ' ORDER BY stream)
	  FROM ordered_events.ranges WHERE stream IN ('g0', 'p0');
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s/%s', stream, range_end, max_seen_seq, pending_count,
	                         released_count, unprocessed_count, skipped_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats WHERE stream IN ('g0', 'p0');
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s/%s/%s/%s/%s', stream, key, last_released_seq,
	                         buffered_count, earliest_buffered_seq, latest_buffered_seq,
	                         received_count, released_count, duplicate_count, last_event_received),
	                  E'\n' ORDER BY stream, key)
	  FROM ordered_events.key_status WHERE stream IN ('g0', 'p0');
};

# 1. Retention '0 s': everything released goes, by the worker alone.  One
# transaction, so that the worker sees it whole: g0 1..1000 over 4 keys, a
# pending 1002 behind the gap at 1001, a duplicate; p0 a, b, c 1..100 each,
# a's last event 100, b's pending 102, a duplicate and an event after a's
# last.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('g0', retention => '0 s');
	SELECT ordered_events.create_stream('p0', 'per_key', retention => '0 s');
	BEGIN;
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'g0', g, 'k' || g % 4 FROM generate_series(1, 1000) g;
	INSERT INTO ordered_events.inbox (stream, seq, key, last_event)
	SELECT 'p0', g, k, k = 'a' AND g = 100
	  FROM unnest(ARRAY['a', 'b', 'c']) k, generate_series(1, 100) g;
	SELECT ordered_events.ingest('g0', 1002, 'k2');
	SELECT ordered_events.ingest('g0', 1, 'k1');
	SELECT ordered_events.ingest('p0', 102, 'b');
	SELECT ordered_events.ingest('p0', 1, 'a');
	SELECT ordered_events.ingest('p0', 101, 'a');
	COMMIT;
});
ok( $node->poll_query_until('postgres', 'SELECT ' . stored('g0') . ' + ' . stored('p0'), '2'),
	'g0, p0: the worker deleted every released event');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream IN ('g0', 'p0');
	SELECT string_agg(format('%s/%s/%s', stream, key, seq), ' ' ORDER BY stream, key, seq)
	  FROM ordered_events.pending WHERE stream IN ('g0', 'p0');
	SELECT string_agg(format('%s/%s', d.stream, l.seq_end - l.seq_start), ' ' ORDER BY d.stream)
	  FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream IN ('g0', 'p0')}),
	"0\ng0/k2/1002 p0/b/102\ng0/0 p0/0",
	'released is empty, the pending events are kept, the release log keeps each stream\'s newest run, emptied');
is($node->safe_psql('postgres', $status_sql),
	"g0/1..1001\n"
	  . "g0/1001/1002/1/1000/1/0 p0//102/1/300/2/0\n"
	  . "g0/k0/1000/0///250/250/0/f\n"
	  . "g0/k1/997/0///251/250/1/f\n"
	  . "g0/k2/998/1/1002/1002/251/250/0/f\n"
	  . "g0/k3/999/0///250/250/0/f\n"
	  . "p0/a/100/0///102/100/1/t\n"
	  . "p0/b/100/1/102/102/101/100/0/f\n"
	  . "p0/c/100/0///100/100/0/f",
	'ranges, stream_stats and key_status count the deleted events as released');
is(metric('deleted_events_total', 'g0') . '/' . metric('deleted_events_total', 'p0')
	  . '/' . metric('released_events_total', 'g0') . '/' . metric('released_events_total', 'p0'),
	'1000/300/1000/300', 'the metrics count 1000 and 300 deleted events of as many released');

# Retried old seqs: still duplicates (the events are gone, the range knows).
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('g0', 5, 'k1'), ordered_events.ingest('g0', 1000, 'k0'),
	       ordered_events.ingest('p0', 50, 'a'), ordered_events.ingest('p0', 150, 'a'),
	       ordered_events.ingest('p0', 100, 'c');
	SELECT string_agg(format('%s/%s/%s/%s', stream, key, seq, detail), E'\n' ORDER BY stream, key, seq)
	  FROM ordered_events.unprocessed
	 WHERE stream IN ('g0', 'p0') AND seq NOT IN (1, 101)}),
	"duplicate|duplicate|duplicate|after_last_event|duplicate\n"
	  . "g0/k0/1000/Seq 1000 was already released.\n"
	  . "g0/k1/5/Seq 5 was already released.\n"
	  . "p0/a/50/Seq 50 was already released.\n"
	  . "p0/a/150/The last event of this key is seq 100.\n"
	  . "p0/c/100/Seq 100 was already released.",
	'retried old seqs of deleted events are duplicates; after a key\'s last event, after_last_event');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s/%s', stream, key, received_count, released_count,
	                         duplicate_count), ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status WHERE stream IN ('g0', 'p0')}),
	'g0/k0/251/250/1 g0/k1/252/250/2 g0/k2/251/250/0 g0/k3/250/250/0 '
	  . 'p0/a/104/100/2 p0/b/101/100/0 p0/c/101/100/1',
	'key_status counts the retries');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release' AND last_error IS NULL}),
	'1', 'worker_status shows no error');

# 2. Retention '1 hour': two release steps per stream; nothing is deleted
# until a step is an hour old, then only that step.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('h', retention => '1 hour');
	SELECT ordered_events.create_stream('hk', 'per_key', retention => '1 hour');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'h', g, 'k' || g % 3 FROM generate_series(1, 50) g
	UNION ALL
	SELECT 'hk', g, k FROM unnest(ARRAY['x', 'y']) k, generate_series(1, 25) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT range_end FROM ordered_events.ranges WHERE stream = 'h') = 51
	   AND (SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'hk') = 50}),
	'h, hk: the first 50 events released');
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'h', g, 'k' || g % 3 FROM generate_series(51, 100) g
	UNION ALL
	SELECT 'hk', g, k FROM unnest(ARRAY['x', 'y']) k, generate_series(26, 50) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT range_end FROM ordered_events.ranges WHERE stream = 'h') = 101
	   AND (SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'hk') = 100}),
	'h, hk: the next 50 events released');
wait_two_cycles('after the release');

my $h_status_sql = q{
	SELECT string_agg(format('%s/%s/%s/%s/%s', stream, key, last_released_seq, received_count,
	                         released_count), ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status WHERE stream IN ('h', 'hk');
	SELECT string_agg(format('%s/%s/%s', stream, max_seen_seq, released_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats WHERE stream IN ('h', 'hk');
};
my $h_status = $node->safe_psql('postgres', $h_status_sql);
is($h_status, "h/k0/99/33/33 h/k1/100/34/34 h/k2/98/33/33 hk/x/50/50/50 hk/y/50/50/50\n"
	  . "h/100/100 hk/50/100", 'h, hk: key_status and stream_stats');
is( $node->safe_psql('postgres', 'SELECT ' . stored('h') . ', ' . stored('hk') . q{,
	(SELECT p.counted_end FROM ordered_events.progress p
	   JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 'h')}),
	'100|100|101', 'a retention of an hour deletes nothing (h is counted per key, though)');
is(metric('deleted_events_total', 'h') . '/' . metric('deleted_events_total', 'hk'), '0/0',
	'the metrics count none deleted');

# The first steps (h 1..50, hk 1..25 of each key) released two hours ago.
$node->safe_psql('postgres', q{
	UPDATE ordered_events.lane_release_log l SET released_at = l.released_at - interval '2 hours'
	  FROM ordered_events.stream_def d
	 WHERE d.stream_id = l.stream_id
	   AND (d.stream = 'h' AND l.seq_end <= 51 OR d.stream = 'hk' AND l.seq_end <= 26)});
ok( $node->poll_query_until('postgres', 'SELECT ' . stored('h') . ' + ' . stored('hk'), '100'),
	'h, hk: the worker deleted the events of the old steps');
wait_two_cycles('after the old steps were deleted');
is( $node->safe_psql('postgres', q{
	SELECT stream, min(seq), max(seq), count(*) FROM ordered_events.released
	 WHERE stream IN ('h', 'hk') GROUP BY stream ORDER BY stream}),
	"h|51|100|50\nhk|26|50|50", 'the steps younger than an hour are kept');
is($node->safe_psql('postgres', $h_status_sql), $h_status, 'key_status and stream_stats unchanged');

$node->safe_psql('postgres', q{
	UPDATE ordered_events.lane_release_log l SET released_at = l.released_at - interval '2 hours'
	  FROM ordered_events.stream_def d
	 WHERE d.stream_id = l.stream_id AND d.stream IN ('h', 'hk')});
ok( $node->poll_query_until('postgres', 'SELECT ' . stored('h') . ' + ' . stored('hk'), '0'),
	'h, hk: once the rest is two hours old, the worker deletes it too');
is($node->safe_psql('postgres', $h_status_sql), $h_status, 'key_status and stream_stats unchanged');
is(metric('deleted_events_total', 'h') . '/' . metric('deleted_events_total', 'hk'), '100/100',
	'the metrics count 100 deleted in each');

# 3. Consumers hold the retention back.  c releases 10 events per step: 5
# steps.  The worker deletes the steps before the committed position of
# every consumer partition that has events left to read: "reader", and
# partition 0 of "pair" (its keys k0 and k1 are both in partition 0; the
# empty partition 1 holds nothing back).
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('c', retention => '0 s', max_release_batch => 10);
	SELECT ordered_events.create_consumer('reader');
	SELECT ordered_events.subscribe('reader', 'c');
	SELECT ordered_events.create_consumer('pair', 2);
	SELECT ordered_events.subscribe('pair', 'c');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' || g % 2 FROM generate_series(1, 50) g;
});
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.key_partition('k0', 2), ordered_events.key_partition('k1', 2)}),
	'0|0', 'the keys of c are in partition 0 of 2');
ok( $node->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'}, '51'),
	'c: 50 events released');
wait_two_cycles('c released');
is( $node->safe_psql('postgres', 'SELECT ' . stored('c') . q{;
	SELECT count(*) FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 'c'}),
	"50\n5", 'c: the consumers read nothing: nothing deleted, in 5 release steps');

# The next events of a consumer partition, as a list of seqs.
sub read_seqs
{
	my ($consumer, $max, $partition) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(seq::text, ',' ORDER BY n)
		  FROM ordered_events.read('$consumer', $max, $partition)
		       WITH ORDINALITY AS r(stream, seq, key, payload, event_ts, alignment_ts,
		                            stabilized_ts, released_at, n)});
}

# Reads that roll back consume nothing: nothing goes.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM ordered_events.read('reader', 50);
	SELECT count(*) FROM ordered_events.read('pair', 50, 0);
	ROLLBACK});
wait_two_cycles('reads rolled back');
is($node->safe_psql('postgres', 'SELECT ' . stored('c')), '50',
	'c: reads that rolled back hold everything back');

# pair reads all, reader 25: the steps of 1..10 and 11..20 go, 21..30
# holds reader's position.
is(read_seqs('pair', 100, 0), join(',', 1 .. 50), 'pair reads 1..50 in partition 0');
is(read_seqs('pair', 100, 1), '', '... and nothing in partition 1');
is(read_seqs('reader', 25, 0), join(',', 1 .. 25), 'reader reads 1..25');
ok($node->poll_query_until('postgres', 'SELECT ' . stored('c'), '30'),
	'c: the worker deleted the two steps both consumers read past');
wait_two_cycles('c read to 25');
is( $node->safe_psql('postgres', q{
	SELECT min(seq), max(seq), count(*) FROM ordered_events.released WHERE stream = 'c'}),
	'21|50|30', 'c: the step of reader\'s position and those after it are kept');

# reader reads the rest: both consumers have nothing left to read, the
# worker deletes everything.
is(read_seqs('reader', 100, 0), join(',', 26 .. 50), 'reader reads 26..50 after the deletion');
ok($node->poll_query_until('postgres', 'SELECT ' . stored('c'), '0'),
	'c: the worker deleted everything once both consumers read it');

# Events released after that wait for both consumers again.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' || g % 2 FROM generate_series(51, 55) g});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'}, '56'),
	'c: 51..55 released');
wait_two_cycles('c released to 55');
is($node->safe_psql('postgres', 'SELECT ' . stored('c')), '5',
	'c: the events neither consumer read are kept');
is(read_seqs('reader', 100, 0), join(',', 51 .. 55), 'reader reads 51..55');
wait_two_cycles('reader read 51..55');
is($node->safe_psql('postgres', 'SELECT ' . stored('c')), '5',
	'c: pair has not read them: they are kept');
is(read_seqs('pair', 100, 0), join(',', 51 .. 55), 'pair reads 51..55');
ok($node->poll_query_until('postgres', 'SELECT ' . stored('c'), '0'),
	'c: the worker deleted them once both read them');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s/%s', consumer, partition, consumed_count, unread_count,
	                         bias IS NULL), ' ' ORDER BY consumer, partition)
	  FROM ordered_events.consumers WHERE stream = 'c';
	SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'c'}),
	"pair/0/55/0/t pair/1/0/0/t reader/0/55/0/t\n55",
	'the consumers consumed 55 and have none unread; 55 released');
is(metric('deleted_events_total', 'c'), '55', 'c: 55 deleted');

# 4. No retention: a global stream's key_status from the worker's per-key
# counters equals a count of its events.  50,000 events over 100 keys, in
# two commits in descending order, the first held by a gap at 25,000; some
# duplicates; 50,002..50,010 pending behind the gap at 50,001.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('ks');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'ks', g, 'k' || (g * 7919) % 100 FROM generate_series(1, 50000) g
	 WHERE g <> 25000 ORDER BY g DESC;
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'ks', g, 'k' || g % 13 FROM generate_series(1, 500, 10) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events.ranges WHERE stream = 'ks'}, '25000'),
	'ks: released up to the gap at 25000');
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('ks', 25000, 'k0');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'ks', g, 'k' || g % 7 FROM generate_series(50010, 50002, -1) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT p.range_end = 50001 AND p.counted_end = 50001
	  FROM ordered_events.progress p JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'ks'}),
	'ks: the worker released and counted 50,000 events');
is( $node->safe_psql('postgres', q{
	SELECT count(*), sum(released_count) FROM ordered_events.key_status WHERE stream = 'ks';
	-- key_status, less a recount from the events and the dead letters, and back
	WITH expected AS (
		SELECT coalesce(e.key, u.key) AS key,
		       e.last_released_seq, coalesce(e.buffered_count, 0) AS buffered_count,
		       e.earliest_buffered_seq, e.latest_buffered_seq,
		       coalesce(e.released_count, 0) + coalesce(e.buffered_count, 0)
		         + coalesce(u.rejected, 0) AS received_count,
		       coalesce(e.released_count, 0) AS released_count,
		       coalesce(u.duplicates, 0) AS duplicate_count
		  FROM (SELECT e.key,
		               max(e.seq) FILTER (WHERE e.seq < p.range_end) AS last_released_seq,
		               count(*) FILTER (WHERE e.seq >= p.range_end) AS buffered_count,
		               min(e.seq) FILTER (WHERE e.seq >= p.range_end) AS earliest_buffered_seq,
		               max(e.seq) FILTER (WHERE e.seq >= p.range_end) AS latest_buffered_seq,
		               count(*) FILTER (WHERE e.seq < p.range_end) AS released_count
		          FROM ordered_events.event_store e
		          JOIN ordered_events.stream_def d USING (stream_id)
		          JOIN ordered_events.progress p USING (stream_id, lane)
		         WHERE d.stream = 'ks'
		         GROUP BY e.key) e
		  FULL JOIN (SELECT u.key, count(*) AS rejected,
		                    count(*) FILTER (WHERE u.reason = 'duplicate') AS duplicates
		               FROM ordered_events.unprocessed u
		              WHERE u.stream = 'ks' AND u.consumer IS NULL
		              GROUP BY u.key) u ON u.key = e.key),
	     actual AS (
		SELECT key, last_released_seq, buffered_count, earliest_buffered_seq, latest_buffered_seq,
		       received_count, released_count, duplicate_count
		  FROM ordered_events.key_status WHERE stream = 'ks')
	SELECT (SELECT count(*) FROM (SELECT * FROM expected EXCEPT ALL SELECT * FROM actual) x),
	       (SELECT count(*) FROM (SELECT * FROM actual EXCEPT ALL SELECT * FROM expected) x),
	       (SELECT sum(duplicate_count) FROM expected),
	       (SELECT sum(buffered_count) FROM expected)}),
	"100|50000\n0|0|50|9",
	'ks: key_status (100 keys, 50,000 released) equals a recount of the events and dead letters');

# 5. SIGKILL while the worker compacts 200,000 events of a stream with
# retention '0 s', released in steps of 10,000 and compacted in batches.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('big', retention => '0 s', max_release_batch => 10000);
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'big', g, 'k' || g % 50 FROM generate_series(1, 200000) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT value > 0 FROM ordered_events.metrics
	 WHERE metric = 'ordered_events_deleted_events_total' AND stream = 'big'}),
	'big: the worker started to delete');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
# Where the kill lands (information only: the checks hold either way).
my $deleted_at_kill = metric('deleted_events_total', 'big');
my $log_offset = -s $node->logfile;
is(kill('KILL', $pid), 1, "SIGKILL sent to the worker (pid $pid)");
diag "big: $deleted_at_kill of 200000 events deleted just before the kill";
ok( $node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'the postmaster reinitialized after the crash');

ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $pid AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker runs after the crash restart');
ok($node->poll_query_until('postgres', 'SELECT ' . stored('big'), '0'),
	'big: the new worker deleted every event');
is( $node->safe_psql('postgres', q{
	SELECT format('%s/%s', p.range_end, p.released_count)
	  FROM ordered_events.progress p JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'big';
	SELECT format('%s/%s/%s', max_seen_seq, released_count, pending_count)
	  FROM ordered_events.stream_stats WHERE stream = 'big';
	SELECT format('%s/%s/%s/%s', count(*), sum(released_count), min(released_count),
	              max(released_count))
	  FROM ordered_events.key_status WHERE stream = 'big';
	SELECT count(*) FROM ordered_events.key_status
	 WHERE stream = 'big' AND last_released_seq <> 199950 + substr(key, 2)::integer
	                                               + CASE key WHEN 'k0' THEN 50 ELSE 0 END;
	SELECT count(*) FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'big' AND l.seq_start < l.seq_end}),
	"200001/200000\n200000/200000/0\n50/200000/4000/4000\n0\n0",
	'big: range, released_count and key_status count each event once');
is(metric('deleted_events_total', 'big') . '/' . metric('released_events_total', 'big'),
	'200000/200000', 'big: the metrics count 200,000 released and deleted, none twice');
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('big', 1, 'k1'), ordered_events.ingest('big', 123456, 'k6'),
	       ordered_events.ingest('big', 200000, 'k0')}),
	'duplicate|duplicate|duplicate', 'big: retried old seqs are duplicates');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release' AND last_error IS NULL}),
	'1', 'worker_status shows no error');

$node->stop;
done_testing();
