
# Background worker: an error in one stream.
#
# Stream "blocked" has its lane's progress row locked by another session (only a
# release step writes it, so nothing normal holds it), so the worker's release step
# for it fails on lock_timeout (1s) every cycle.  (A session that holds the stream's
# release lock, its stream_def row, is a normal situation the worker does not wait
# for: see 031_worker_held_locks.pl.)
# - Stream "free" is released all the same, also events arriving while
#   "blocked" keeps failing.
# - worker_status.last_error names the stream and the lock timeout.
# - The failure is logged once, not every cycle; a new failure after a
#   recovery is logged again.
# - Once the lock is gone, "blocked" is released, in order, exactly once,
#   and last_error is cleared.
# - The worker never restarts for this.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('errors', databases => 'postgres', naptime => 200);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('blocked');
	SELECT ordered_events.create_stream('free');
});
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

sub range_end
{
	my ($stream) = @_;
	return $node->safe_psql('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = '$stream'");
}

sub released
{
	my ($stream) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(string_agg(seq::text, ',' ORDER BY ord), '')
		  FROM (SELECT seq, row_number() OVER () AS ord
		          FROM ordered_events.released WHERE stream = '$stream') r});
}

# Lines of the log, from an offset, about a failing stream.
sub failure_lines
{
	my ($stream, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	return scalar(() = $log =~ /LOG:  ordered_events could not release stream "$stream"/g);
}

my $lock_sql = q{
	SELECT FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'blocked' FOR UPDATE OF p};

my $log_offset = -s $node->logfile;

# Hold the progress row of "blocked".
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe($lock_sql);

# Releasable events in both streams; "blocked" first, so that every cycle
# tries it before "free".
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('blocked', 2, 'k');
	SELECT ordered_events.ingest('blocked', 1, 'k');
});
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('free', 1, 'k');
	SELECT ordered_events.ingest('free', 2, 'k');
});

ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'free'", '3'),
	'free is released while blocked is locked');
is(released('free'), '1,2', 'free released 1,2 in order');
ok( $node->poll_query_until('postgres', q{
	SELECT last_error FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'},
	'stream blocked: canceling statement due to lock timeout'),
	'worker_status.last_error: lock timeout in stream blocked');
is(range_end('blocked'), '1', 'blocked is not released');

# Several more failing cycles; events of "free" arriving meanwhile are
# released; the failure is still logged once.
my $c = OrderedEvents::release_cycles($node);
$node->safe_psql('postgres', "SELECT ordered_events.ingest('free', 3, 'k')");
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'free'", '4'),
	'free keeps being released while blocked fails');
ok( $node->poll_query_until('postgres', qq{
	SELECT cycles >= $c + 3 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'the worker ran 3 more cycles');
is(range_end('blocked'), '1', 'blocked still not released');
is(failure_lines('blocked', $log_offset), 1,
	'"could not release stream" logged exactly once for blocked');
is(failure_lines('free', $log_offset), 0, 'nothing logged for free');
like(slurp_file($node->logfile, $log_offset),
	qr/LOG:  ordered_events could not release stream "blocked": canceling statement due to lock timeout\n.*HINT:  The worker retries every cycle; see ordered_events.worker_status\./,
	'the log line names the lock timeout and has a hint');
is( $node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$pid, 'the worker did not restart');

# Release the lock: blocked is released.
$locker->query_safe('COMMIT');
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'blocked'", '3'),
	'blocked is released once the lock is gone');
is(released('blocked'), '1,2', 'blocked released 1,2 in order');
ok( $node->poll_query_until('postgres', q{
	SELECT last_error IS NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker_status.last_error is cleared once nothing fails');
is(released('free'), '1,2,3', 'free released 1,2,3 in order');
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT (stream, seq)) FROM ordered_events.released}),
	'5/5', 'every event released once');
is( $node->safe_psql('postgres', q{
	SELECT sum(seq_end - seq_start) FROM ordered_events.lane_release_log}),
	'5', 'the release log covers each event once');

# A new failure after the recovery is logged again (once).
$locker->query_safe('BEGIN');
$locker->query_safe($lock_sql);
$c = OrderedEvents::release_cycles($node);
$node->safe_psql('postgres', "SELECT ordered_events.ingest('blocked', 3, 'k')");
ok( $node->poll_query_until('postgres', qq{
	SELECT cycles >= $c + 3 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'the worker ran 3 more cycles');
is(range_end('blocked'), '3', 'blocked: seq 3 not released while locked');
is(failure_lines('blocked', $log_offset), 2,
	'the second failure episode is logged once more');
$locker->query_safe('ROLLBACK');
$locker->quit;
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'blocked'", '4'),
	'blocked: seq 3 released after the lock is gone');
is(released('blocked'), '1,2,3', 'blocked released 1,2,3 in order');
is( $node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$pid, 'the same worker throughout');
ok(!$node->log_contains(qr/\b(ERROR|FATAL|PANIC):/, $log_offset),
	'no ERROR logged: the failure is a LOG line');

$node->stop;
done_testing();
