
# Background worker: it never blocks DROP DATABASE, fast shutdown or
# binary-upgrade mode (pg_upgrade).
#
# - DROP DATABASE of a served database succeeds while its worker is busy
#   releasing: the worker is terminated for it (PostgreSQL would otherwise
#   wait 5s for the worker and fail with "database is being accessed by
#   other users"); no worker is started for it again, and a database
#   re-created with the same name is served again.
# - A fast shutdown while the worker releases a backlog and waits for a lock
#   completes (pg_ctl would give up otherwise), the worker ended by it.
# - Started with postgres -b (binary-upgrade mode), the library does
#   nothing: no launcher, no worker, no shared state.  A normal restart
#   brings the worker back.
#
# No check measures elapsed time, which depends on the machine (DROP
# DATABASE and a shutdown both write a checkpoint): the log records how the
# worker ended.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('dropstop', databases => 'postgres', naptime => 200);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s', max_release_batch => 100);
	SELECT ordered_events.create_stream('blocked');
	ALTER SYSTEM SET ordered_events.databases = 'postgres,app';
	SELECT pg_reload_conf();
});

# After $node->stop('fast') (which fails the test if pg_ctl gives up
# waiting): the server went down by a fast shutdown, and the worker was
# ended by it.
sub fast_shutdown_ok
{
	my ($offset, $pid, $what) = @_;
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/received fast shutdown request.*database system is shut down/s,
		"$what: fast shutdown completed");
	like($log,
		qr/\[$pid\] FATAL:  terminating background worker "ordered_events worker" due to administrator command/,
		"$what: the worker was terminated by the shutdown");
}

#
# 1. DROP DATABASE of a served database.
#
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('a', max_release_batch => 100);
	SELECT ordered_events.ingest('a', 1, 'k');
});
ok( $node->poll_query_until('app',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'a'", '2'),
	'app is served');
my $app_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'app' AND kind = 'release'");
ok($app_pid =~ /^\d+$/, "app worker pid $app_pid");

# A backlog of 30000 behind a gap: filling it keeps the worker busy with
# 300 release steps while the database is dropped.
$node->safe_psql('app', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'a', g, 'k' FROM generate_series(3, 30000) g;
});
$node->safe_psql('app', "SELECT ordered_events.ingest('a', 2, 'k')");

is( $node->safe_psql('postgres', qq{
	SELECT count(*) FROM pg_stat_activity WHERE pid = $app_pid AND datname = 'app'}),
	'1', 'the app worker is connected to app');

my $log_offset = -s $node->logfile;
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE app');
is($ret, 0, 'DROP DATABASE app succeeds while its worker runs');
is($stderr, '', 'DROP DATABASE: no error') or diag $stderr;
like(slurp_file($node->logfile, $log_offset),
	qr/\[$app_pid\] FATAL:  terminating background worker "ordered_events worker" due to administrator command/,
	'DROP DATABASE did not wait for the worker: the worker was terminated');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'app'"),
	'0', 'app is gone');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $app_pid", '0'),
	'the app worker has exited');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status WHERE database = 'app' AND kind = 'release'}, '0'),
	'worker_status forgets app');

# Still listed but gone: no new worker, no error, for a few cycles.
my $c = $node->safe_psql('postgres',
	"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
ok( $node->poll_query_until('postgres', qq{
	SELECT cycles >= $c + 5 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'the postgres worker ran 5 more cycles');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'ordered_events worker' AND datname IS DISTINCT FROM 'postgres'}),
	'0', 'no worker is started for the dropped database');
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/ordered_events worker started for database "app"/,
	'the launcher did not start a worker for app again');
unlike($log, qr/\b(ERROR|PANIC):/, 'no ERROR in the log');
unlike($log, qr/FATAL:  (?!terminating background worker "ordered_events worker" due to administrator command)/,
	'no FATAL in the log but the worker\'s termination');

# Re-created under the same name: served again.
$node->safe_psql('postgres', 'CREATE DATABASE app');
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND state = 'waiting for extension'
	  FROM ordered_events.worker_status WHERE database = 'app' AND kind = 'release'}),
	're-created app gets a worker');
$node->safe_psql('app', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('a');
	SELECT ordered_events.ingest('a', 1, 'k');
});
ok( $node->poll_query_until('app',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'a'", '2'),
	're-created app is served');

# Drop it again, its worker idle this time.
$node->safe_psql('postgres', 'DROP DATABASE app');
ok(1, 'second DROP DATABASE app succeeded');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'ordered_events worker' AND datname IS DISTINCT FROM 'postgres'},
	'0'),
	'its worker is gone');

#
# 2. Fast shutdown while the worker is busy: a backlog of 50000 (500 steps)
#    in stream s, and stream blocked locked by another session, so that
#    every cycle also waits up to 1s for a lock.
#
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe(q{
	SELECT 1 FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'blocked' FOR UPDATE OF p});
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('blocked', 1, 'k');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 's', g, 'k' FROM generate_series(2, 50000) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT last_error LIKE 'stream blocked:%lock timeout%'
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'the worker is stuck on the blocked stream every cycle');
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 1, 'k')");
my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
$log_offset = -s $node->logfile;
$node->stop('fast');
fast_shutdown_ok($log_offset, $worker_pid, 'busy worker');
# The locker's session was terminated by the shutdown.
eval { $locker->quit };

#
# 3. Binary-upgrade mode: nothing of the worker.
#
$log_offset = -s $node->logfile;
PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-w', '-D', $node->data_dir,
	'-l', $node->logfile, '-o', '-b', 'start');
# Let the test framework stop the server even if a test below dies.
$node->_update_pid(1);

($ret, $stdout, $stderr) =
  $node->psql('postgres', 'SELECT * FROM ordered_events.worker_status');
isnt($ret, 0, 'binary-upgrade mode: worker_status fails');
like($stderr, qr/the ordered_events background worker is not loaded/,
	'binary-upgrade mode: the library set up no shared state');
is( $node->safe_psql('postgres', q{
	SELECT coalesce(string_agg(metric, ',') FILTER (WHERE metric LIKE '%worker%'), '')
	       || '/' || count(*) FILTER (WHERE metric = 'ordered_events_released_events_total'
	                                    AND stream = 's')
	  FROM ordered_events.metrics}),
	'/1', 'binary-upgrade mode: metrics has the stream, and no worker metrics');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'ordered_events%'}),
	'0', 'binary-upgrade mode: no ordered_events process');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_settings WHERE name LIKE 'ordered_events.%'}),
	'0', 'binary-upgrade mode: the library defined no GUCs');
$node->stop;
$log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/ordered_events (launcher|worker) started/,
	'binary-upgrade mode: no launcher or worker was started');
unlike($log, qr/\b(ERROR|FATAL|PANIC):  (?!the ordered_events background worker is not loaded)/,
	'binary-upgrade mode: no other error in the log');

# A normal restart: the worker is back and releases what waited.
$node->start;
ok( $node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '50001'),
	'after a normal restart the worker releases the backlog');
ok( $node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'blocked'", '2'),
	'and the stream that was blocked');
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT seq) FROM ordered_events.released
	 WHERE stream = 's'}),
	'50000/50000', 'every event of s released once');
is( $node->safe_psql('postgres', q{
	SELECT sum(seq_end - seq_start) FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = 's'}),
	'50000', 'the release log covers each event of s once');

$worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
$log_offset = -s $node->logfile;
$node->stop('fast');
fast_shutdown_ok($log_offset, $worker_pid, 'idle worker');
done_testing();
