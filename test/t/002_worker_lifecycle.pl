
# Background worker: configuration and lifecycle.
#
# - ordered_events.databases is reloadable: a database added by SIGHUP gets a
#   worker that releases its backlog; a database removed loses its worker.
# - A listed database without the extension, or not created yet, is waited
#   for quietly (no ERROR, no restart loop); once the extension is created
#   it is served by the same worker, which checks every naptime: no event
#   is needed to wake it.
# - ordered_events.enabled = off (reload) stops the workers and releases
#   nothing; on again, the backlog is released (the release log shows it
#   was released after enabled = on, however long it was off).
# - A worker terminated with pg_terminate_backend comes back (new pid) and
#   releases.
# - A library/extension version mismatch is a WARNING with a hint, logged
#   once per worker; the worker goes on releasing.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('lifecycle', databases => 'postgres', naptime => 200);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s');
});

sub worker_field
{
	my ($db, $field) = @_;
	return $node->safe_psql('postgres',
		"SELECT $field FROM ordered_events.worker_status WHERE database = '$db' AND kind = 'release'");
}

sub range_end
{
	my ($db, $stream) = @_;
	return $node->safe_psql($db,
		"SELECT range_end FROM ordered_events.ranges WHERE stream = '$stream'");
}

# Wait until the worker of postgres has run $n more cycles: a clock for
# checking that something does NOT happen (each cycle is at most a naptime
# apart, and the launcher reconciles every naptime too).
sub wait_cycles
{
	my ($n) = @_;
	my $c = worker_field('postgres', 'cycles');
	return $node->poll_query_until('postgres', qq{
		SELECT cycles >= $c + $n FROM ordered_events.worker_status
		 WHERE database = 'postgres' AND kind = 'release'});
}

sub set_databases
{
	my ($list) = @_;
	$node->safe_psql('postgres', qq{
		ALTER SYSTEM SET ordered_events.databases = '$list';
		SELECT pg_reload_conf();
	});
}

# Workers as the server sees them, by database.
sub running_workers
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(datname, ',' ORDER BY datname), '')
		  FROM pg_stat_activity WHERE backend_type = 'ordered_events worker'});
}

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND state IN ('idle', 'releasing')
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker for postgres is running');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'ordered_events launcher'}),
	'1', 'one launcher');
is(running_workers(), 'postgres', 'one worker, for postgres');

#
# 1. A database added by SIGHUP.
#
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('a');
	SELECT ordered_events.ingest('a', 2, 'k');
	SELECT ordered_events.ingest('a', 1, 'k');
});
ok(wait_cycles(3), 'postgres worker ran 3 cycles');
is(range_end('app', 'a'), '1', 'app not listed: nothing released');
is( $node->safe_psql('app', "SELECT count(*) FROM ordered_events.pending"),
	'2', 'app not listed: both events pending');
is(worker_field('app', 'count(*)'), '0', 'app not listed: no worker_status row');
is(running_workers(), 'postgres', 'app not listed: no worker for it');

set_databases('postgres,app');
ok($node->poll_query_until('app',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'a'", '3'),
	'app added by reload: its worker released 1,2');
is($node->safe_psql('app',
		"SELECT string_agg(seq::text, ',') FROM ordered_events.released"),
	'1,2', 'app released 1,2 in order');
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND released_total = 2
	  FROM ordered_events.worker_status WHERE database = 'app' AND kind = 'release'}),
	'worker_status shows the app worker and its 2 releases');
is(running_workers(), 'app,postgres', 'two workers run');
my $postgres_pid = worker_field('postgres', 'pid');

#
# 2. A database removed by SIGHUP.
#
set_databases('postgres');
ok( $node->poll_query_until('postgres', q{
	SELECT NOT EXISTS (SELECT FROM ordered_events.worker_status WHERE database = 'app' AND kind = 'release')
	   AND NOT EXISTS (SELECT FROM pg_stat_activity
	                    WHERE backend_type = 'ordered_events worker' AND datname = 'app')}),
	'app removed by reload: its worker stopped');
$node->safe_psql('app', "SELECT ordered_events.ingest('a', 3, 'k')");
ok(wait_cycles(3), 'postgres worker ran 3 cycles');
is(range_end('app', 'a'), '3', 'app removed: seq 3 not released');
is(worker_field('postgres', 'pid'), $postgres_pid,
	'the postgres worker was not disturbed');

#
# 3. Listed databases without the extension (noext) or not created yet
#    (later): waited for quietly.
#
$node->safe_psql('postgres', 'CREATE DATABASE noext');
my $log_offset = -s $node->logfile;
set_databases('postgres,noext,later');
ok( $node->poll_query_until('postgres', q{
	SELECT state FROM ordered_events.worker_status WHERE database = 'noext' AND kind = 'release'},
	'waiting for extension'),
	'noext: worker waits for the extension');
my $noext_pid = worker_field('noext', 'pid');
ok(wait_cycles(5), 'postgres worker ran 5 cycles');
is(worker_field('noext', 'pid'), $noext_pid, 'noext: the same worker keeps waiting');
is(worker_field('noext', 'state'), 'waiting for extension', 'noext: still waiting');
is(worker_field('noext', 'last_error'), '', 'noext: no last_error');
is(worker_field('later', 'count(*)'), '0', 'later (not created): no worker_status row');
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/\b(ERROR|FATAL|PANIC):/, 'nothing logged above WARNING while waiting');
unlike($log, qr/WARNING:/, 'no WARNING while waiting');

# Creating the listed database starts its worker.
$node->safe_psql('postgres', 'CREATE DATABASE later');
ok( $node->poll_query_until('postgres', q{
	SELECT state FROM ordered_events.worker_status WHERE database = 'later' AND kind = 'release'},
	'waiting for extension'),
	'later created: its worker starts and waits for the extension');

# CREATE EXTENSION: served at the worker's next naptime check, without any
# event to wake it (noext has no stream yet).
$node->safe_psql('noext', 'CREATE EXTENSION ordered_events');
ok( $node->poll_query_until('postgres', q{
	SELECT state IN ('idle', 'releasing') AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'noext' AND kind = 'release'}),
	'noext: served once the extension exists');
is(worker_field('noext', 'pid'), $noext_pid, 'noext: by the same worker');
$node->safe_psql('noext', q{
	SELECT ordered_events.create_stream('n');
	SELECT ordered_events.ingest('n', 2, 'k');
	SELECT ordered_events.ingest('n', 1, 'k');
});
ok($node->poll_query_until('noext',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'n'", '3'),
	'noext: events released');
$log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/\b(ERROR|PANIC):/, 'no ERROR in the log');

set_databases('postgres');
ok( $node->poll_query_until('postgres', q{
	SELECT string_agg(database, ',') FROM ordered_events.worker_status},
	'postgres'),
	'back to serving postgres only');
ok( $node->poll_query_until('postgres', q{
	SELECT string_agg(datname, ',') FROM pg_stat_activity
	 WHERE backend_type = 'ordered_events worker'},
	'postgres'),
	'only the postgres worker runs');

#
# 4. enabled = off: nothing released; on: released.
#
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET ordered_events.enabled = off;
	SELECT pg_reload_conf();
});
ok( $node->poll_query_until('postgres', q{
	SELECT NOT EXISTS (SELECT FROM ordered_events.worker_status
	                    WHERE state NOT IN ('disabled', 'stopped'))}),
	'enabled = off: no worker releasing');
# Wait for the processes to be gone too: then no worker can release.
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	 WHERE backend_type = 'ordered_events worker'}),
	'enabled = off: no worker process runs');
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('s', 2, 'k');
	SELECT ordered_events.ingest('s', 1, 'k');
});
is(range_end('postgres', 's'), '1', 'enabled = off: nothing released');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ordered_events.pending WHERE stream = 's'"),
	'2', 'enabled = off: events pending');
is(running_workers(), '', 'enabled = off: the committed events started no worker');

# No clock to wait on while nothing runs: instead of sleeping, the release
# log proves below that nothing was released before enabled = on.
my $enabled_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET ordered_events.enabled = on;
	SELECT pg_reload_conf();
});
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '3'),
	'enabled = on: released');
is( $node->safe_psql('postgres',
		"SELECT string_agg(seq::text, ',') FROM ordered_events.released WHERE stream = 's'"),
	'1,2', 'released 1,2 in order');
is( $node->safe_psql('postgres', qq{
	SELECT string_agg(l.seq_start || '-' || l.seq_end || ' '
	                  || (l.released_at > '$enabled_at'::timestamptz), ',')
	  FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 's'}),
	'1-3 true', 'released by one step, after enabled = on');

#
# 5. pg_terminate_backend: a new worker comes back and releases.
#
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker running');
my $old_pid = worker_field('postgres', 'pid');
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)"),
	't', 'worker terminated');
ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $old_pid
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker took over');
my $new_pid = worker_field('postgres', 'pid');
isnt($new_pid, $old_pid, "new pid $new_pid, old $old_pid");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $old_pid", '0'),
	'the old worker is gone');
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('s', 4, 'k');
	SELECT ordered_events.ingest('s', 3, 'k');
});
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '5'),
	'the new worker released 3,4');
is( $node->safe_psql('postgres',
		"SELECT string_agg(seq::text, ',') FROM ordered_events.released WHERE stream = 's'"),
	'1,2,3,4', 'released 1..4 in order, once each');
is(running_workers(), 'postgres', 'exactly one worker for postgres');

#
# 6. Version mismatch: WARNING with HINT, once, and the worker goes on.
#
my $version = $node->safe_psql('postgres',
	"SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'");
$node->safe_psql('postgres',
	"UPDATE pg_extension SET extversion = '0.0' WHERE extname = 'ordered_events'");
$log_offset = -s $node->logfile;
$old_pid = $new_pid;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $old_pid AND cycles >= 3
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker ran 3 cycles');
$log = slurp_file($node->logfile, $log_offset);
like($log,
	qr/WARNING:  ordered_events library version \Q$version\E differs from the extension version 0\.0 installed in database "postgres"\n.*HINT:  Run ALTER EXTENSION ordered_events UPDATE in that database\./,
	'version mismatch: WARNING with its HINT');
is(() = $log =~ /differs from the extension version/g, 1,
	'the WARNING is logged once, not every cycle');
$node->safe_psql('postgres', "SELECT ordered_events.ingest('s', 5, 'k')");
ok($node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 's'", '6'),
	'the worker still releases despite the mismatch');

# Restore: a new worker does not warn.
$node->safe_psql('postgres',
	"UPDATE pg_extension SET extversion = '$version' WHERE extname = 'ordered_events'");
$log_offset = -s $node->logfile;
$old_pid = worker_field('postgres', 'pid');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $old_pid AND cycles >= 2
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker ran 2 cycles');
ok(!$node->log_contains(qr/differs from the extension version/, $log_offset),
	'versions match again: no WARNING');

$node->stop;
done_testing();
