
# Background worker: releasing and NOTIFY.
#
# - A filled gap is released by the worker alone (no release() call), once,
#   in seq order, and only after the gap is filled.
# - The worker sends NOTIFY ordered_events, '<stream>:<range_end>' after each
#   release step (and none when nothing was released).
# - A committing transaction that wrote events wakes the worker: with a
#   naptime of an hour, a filled gap is still released, and the release
#   time the extension recorded is well within that hour of the commit.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = OrderedEvents::node('release', databases => 'postgres', naptime => 200);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('other');
});

# The worker is up and has run a cycle in the extension's database.
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 AND bool_and(pid IS NOT NULL AND state IN ('idle', 'releasing'))
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker for postgres is running');

# The released seqs of a stream, in the order of the released view.
sub released
{
	my ($stream) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(string_agg(seq::text, ',' ORDER BY ord), '')
		  FROM (SELECT seq, row_number() OVER () AS ord
		          FROM ordered_events.released WHERE stream = '$stream') r});
}

sub range_end
{
	my ($stream) = @_;
	return $node->safe_psql('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = '$stream'");
}

# A session that LISTENs; its notifications are printed by psql after the
# next command it runs.
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN ordered_events');
my $notifications = '';

# Run a command in the listener until its output matches $re.
sub wait_for_notification
{
	my ($re) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		$notifications .= $listener->query_safe('SELECT 1');
		return 1 if $notifications =~ $re;
		usleep(100_000);
	}
	diag "notifications seen:\n$notifications";
	return 0;
}

my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

#
# 1. Gap: 2 and 3 arrive (and commit) before 1.
#
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('s', 2, 'k2');
	SELECT ordered_events.ingest('s', 3, 'k1');
});

# A release step of the worker has seen the gap at 1 (first_seen is set only
# by a release step, and this test never calls release()).
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 1 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 's'}),
	'the worker observed the gap at seq 1');
is(range_end('s'), '1', 'nothing released while seq 1 is missing');
is(released('s'), '', 'released view empty while seq 1 is missing');
is( $node->safe_psql('postgres',
		"SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ordered_events.pending WHERE stream = 's'"),
	'2,3',
	'2 and 3 are pending');

# Fill the gap: the worker alone releases 1..3.
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 1, 'k1')");
ok( $node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '4'),
	'worker released the filled gap: range_end = 4');
is(released('s'), '1,2,3', 'released 1,2,3 in order');
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT seq) || '/' || count(released_at)
	  FROM ordered_events.released WHERE stream = 's'}),
	'3/3/3', 'each event released exactly once, with a release time');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(l.seq_start || '-' || l.seq_end, ',' ORDER BY l.seq_end)
	  FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 's'}),
	'1-4', 'one release step covered [1,4)');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ordered_events.pending WHERE stream = 's'"),
	'0', 'nothing pending');
ok( $node->poll_query_until('postgres', q{
	SELECT released_total >= 3 AND last_error IS NULL
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker_status counts the released events, no error');

#
# 2. NOTIFY: '<stream>:<range_end>' from the worker's process.
#
ok(wait_for_notification(qr/Asynchronous notification "ordered_events" with payload "s:4" received from server process with PID (\d+)/),
	'listener got s:4');
my ($notify_pid) = $notifications =~ /payload "s:4" received from server process with PID (\d+)/;
is($notify_pid, $worker_pid, 'the notification came from the worker');
unlike($notifications, qr/payload "s:[0-35-9]/,
	'no notification for steps that released nothing');
is(() = $notifications =~ /payload "s:4"/g, 1, 's:4 notified once');

# More: 4,5 in one transaction, then 7 (gap at 6), then 6.
$notifications = '';
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT ordered_events.ingest('s', 5, 'k2');
	SELECT ordered_events.ingest('s', 4, 'k1');
	COMMIT;
});
ok(wait_for_notification(qr/payload "s:6"/), 'listener got s:6');
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 7, 'k1')");
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 6 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 's'}),
	'the worker observed the gap at seq 6');
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 6, 'k2')");
ok(wait_for_notification(qr/payload "s:8"/), 'listener got s:8');
unlike($notifications, qr/payload "s:7"/, 'no notification while 6 was missing');
is(released('s'), '1,2,3,4,5,6,7', 'released 1..7 in order');

# The other stream notifies with its own name.
$notifications = '';
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'other', g, 'k' FROM generate_series(1, 10) g;
});
ok(wait_for_notification(qr/payload "other:11"/), 'listener got other:11');
is(released('other'), '1,2,3,4,5,6,7,8,9,10', 'other released 1..10 in order');
$listener->quit;

#
# 3. The commit wakes the worker: with naptime = 1h only the latch set at
#    commit can make it release.
#
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET ordered_events.naptime = '1h';
	SELECT pg_reload_conf();
});
ok( $node->poll_query_until('postgres', q{
	SELECT setting FROM pg_settings WHERE name = 'ordered_events.naptime'},
	'3600000'),
	'naptime is 1h');
# Let the worker go back to sleep with the new naptime: its next cycle
# after the reload sees a new gap (at 8, 9 arrives) and records it.
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 9, 'k')");
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 8 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 's'}),
	'the worker observed the gap at seq 8');
my $cycles = $node->safe_psql('postgres',
	"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 8, 'k')");
ok( $node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '10'),
	'filled gap released with naptime = 1h');
# Recorded times, not the test's clock: the step ran before a naptime could
# have passed since the commit, so the commit woke the worker.
is( $node->safe_psql('postgres', q{
	SELECT released_at < received_at + interval '1 hour'
	  FROM ordered_events.released WHERE stream = 's' AND seq = 8}),
	't', 'seq 8 released less than a naptime (1h) after it was received');
cmp_ok( $node->safe_psql('postgres',
		"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	'>', $cycles, 'the worker ran a cycle after the commit');
is(released('s'), '1,2,3,4,5,6,7,8,9', 'released 1..9 in order');

# A rolled-back ingest wakes nothing and releases nothing.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT ordered_events.ingest('s', 10, 'k');
	ROLLBACK;
});
is(range_end('s'), '10', 'rolled-back event not released');

is( $node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$worker_pid, 'the same worker served the whole test');
ok(!$node->log_contains(qr/could not release stream/), 'no release errors logged');

$node->stop;
done_testing();
