
# Background worker: SIGKILL.
#
# Killing the database worker with SIGKILL makes the postmaster reinitialize
# (crash restart).  Afterwards the launcher and the worker come back and
# release goes on: nothing committed is lost, nothing is released twice, the
# range and the released view are exact.
#
# The kill lands right after the commit that fills a gap in front of a
# backlog of 20000 events released 100 per step, so most of the time it hits
# the worker in the middle of the release: some steps committed, one cut
# short.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('crash', databases => 'postgres', naptime => 200,
	conf => ['restart_after_crash = on']);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('c', max_release_batch => 100);
	SELECT ordered_events.create_stream('d');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');

sub range_end
{
	my ($stream) = @_;
	return $node->safe_psql('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = '$stream'");
}

# Everything that must hold for a stream released exactly up to $n.
sub check_exact
{
	my ($stream, $n, $what) = @_;
	is(range_end($stream), $n + 1, "$what: range_end = " . ($n + 1));
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) || '/' || count(DISTINCT seq) || '/' || min(seq) || '/' || max(seq)
		  FROM ordered_events.released WHERE stream = '$stream'}),
		"$n/$n/1/$n", "$what: released 1..$n, each once");
	# The view returns them in seq order.
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (
		  SELECT seq, row_number() OVER () AS ord
		    FROM ordered_events.released WHERE stream = '$stream') r
		 WHERE seq <> ord}),
		'0', "$what: released in seq order");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM ordered_events.pending WHERE stream = '$stream'}),
		'0', "$what: nothing pending");
	# The release steps tile [1, n+1): no seq released twice or skipped.
	is( $node->safe_psql('postgres', qq{
		SELECT sum(seq_end - seq_start) || '/' ||
		       bool_and(seq_start = coalesce(prev_end, 1))
		  FROM (SELECT l.seq_start, l.seq_end,
		               lag(l.seq_end) OVER (ORDER BY l.seq_end) AS prev_end
		          FROM ordered_events.lane_release_log l
		          JOIN ordered_events.stream_def d USING (stream_id)
		         WHERE d.stream = '$stream') s}),
		"$n/true", "$what: release steps cover each seq once, contiguously");
	is( $node->safe_psql('postgres', qq{
		SELECT released_count FROM ordered_events.stream_stats WHERE stream = '$stream'}),
		$n, "$what: released_count = $n");
}

# A backlog of 20000 with a gap at 2; 1 is released, the rest waits.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 'c', g, 'k' || (g % 7), jsonb_build_object('g', g)
	  FROM generate_series(1, 20000) g WHERE g <> 2;
	SELECT ordered_events.ingest('d', 1, 'k');
	SELECT ordered_events.ingest('d', 3, 'k');
});
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'", '2'),
	'c: 1 released, the gap at 2 holds the backlog');
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'd'", '2'),
	'd: 1 released, the gap at 2 holds 3');

my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
my $log_offset = -s $node->logfile;

# Fill the gap and kill the worker while it releases the backlog.
$node->safe_psql('postgres', "SELECT ordered_events.ingest('c', 2, 'k')");
is(kill('KILL', $pid), 1, "SIGKILL sent to the worker (pid $pid)");

ok( $node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'the postmaster reinitialized after the crash');
like(slurp_file($node->logfile, $log_offset),
	qr/background worker "ordered_events worker" \(PID $pid\) was terminated by signal 9/,
	'the log shows the worker killed by signal 9');

# The server, the launcher and the worker come back.
ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $pid AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker runs after the crash restart');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ordered_events launcher'}),
	'1', 'one launcher after the crash restart');

ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'", '20001'),
	'c: the backlog is released after the crash');
check_exact('c', 20000, 'c after the crash');
# Where the kill landed (information only: the checks hold either way).
diag 'c: range_end when the new worker started: ' . $node->safe_psql('postgres', q{
	SELECT coalesce(max(l.seq_end), 2)
	  FROM ordered_events.lane_release_log l
	 WHERE l.released_at < (SELECT started_at FROM ordered_events.worker_status
	                         WHERE database = 'postgres' AND kind = 'release')});

# Commit the rest after the crash: out of order, with gaps filled later.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' || (g % 7)
	  FROM generate_series(20001, 21000) g WHERE g % 100 <> 0
	 ORDER BY g DESC;
	SELECT ordered_events.ingest('d', 2, 'k');
});
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'", '20100'),
	'c: released up to the gap at 20100');
# The arrival order goes on after the crash: the blocks of numbers that the
# sessions shared in memory are gone, the next ones come after them.
is( $node->safe_psql('postgres', q{
	SELECT min(e.arrival) FILTER (WHERE e.seq > 20000)
	       > max(e.arrival) FILTER (WHERE e.seq <= 20000)
	  FROM ordered_events.event_store e
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'c'}),
	't', 'c: events accepted after the crash arrive after those before it');
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' FROM generate_series(20100, 21000, 100) g;
});
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'", '21001'),
	'c: the rest is released');
check_exact('c', 21000, 'c at the end');
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'd'", '4'),
	'd: released 1..3');
check_exact('d', 3, 'd at the end');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.unprocessed}),
	'0', 'nothing went to unprocessed');

# Each key's events came out in seq order (global sequencing).
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY ord) AS prev
	    FROM (SELECT seq, key, row_number() OVER () AS ord
	            FROM ordered_events.released WHERE stream = 'c') r) s
	 WHERE prev >= seq}),
	'0', 'every key released in seq order');

$node->stop;
done_testing();
