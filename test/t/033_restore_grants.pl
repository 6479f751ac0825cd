
# The grants of a database made at 0.1 survive the updates to 0.2 and 0.3
# and a pg_dump / pg_restore into a fresh cluster, as a DBA would do it.
#
# A database made at 0.1 and filled, with the roles 0.1's README told users
# to create (a producer, a consumer, a monitor reading worker_status), the
# library of this version preloaded and its worker serving the database;
# ALTER EXTENSION ordered_events UPDATE TO '0.2', then UPDATE.  pg_dump -Fc;
# pg_restore into a fresh database of a fresh cluster.  Every privilege on
# every member of the extension is the same after the restore as before the
# dump, and the roles use them.
#
# pg_dump leaves out of a member's ACL what pg_init_privs holds, the
# extension's own initial privileges: an update's GRANT or REVOKE on an
# object that already existed recorded the users' grants there too, so the
# dump lost them.  The update to 0.3 repairs pg_init_privs: after it, every
# database has those of a fresh install, whatever path it took.
#
# Between the restart with the new library and the update, the worker logs
# the one thing to do.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('grants', databases => 'postgres', naptime => 200,
	extension => 0);
my $log_offset = -s $node->logfile;

# 0.1, with the grants of 0.1's README ("Installation") and a monitor of the
# views it showed ("Monitoring"): worker_status_internal() was PUBLIC's.
my $roles_sql = q{
	CREATE ROLE producer;
	CREATE ROLE consumer;
	CREATE ROLE monitor;
};
my $grants_0_1_sql = q{
	GRANT USAGE ON SCHEMA ordered_events TO producer;
	GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
	                          ordered_events.append(text, text, jsonb, timestamptz) TO producer;
	GRANT SELECT ON ordered_events.stream_def, ordered_events.gap_skips TO producer;
	GRANT INSERT ON ordered_events.unprocessed, ordered_events.inbox TO producer;
	GRANT USAGE ON SCHEMA ordered_events TO consumer;
	GRANT SELECT ON ordered_events.released, ordered_events.stream_stats TO consumer;
	GRANT USAGE ON SCHEMA ordered_events TO monitor;
	GRANT SELECT ON ordered_events.stream_stats, ordered_events.key_status,
	                ordered_events.worker_status TO monitor;
};
# And what a DBA may have added: stream_stats for every role, some columns
# of the dead letters for the monitor (column privileges are recorded too).
my $grants_dba_sql = q{
	GRANT SELECT ON ordered_events.stream_stats TO PUBLIC;
	GRANT SELECT (stream, seq, reason) ON ordered_events.unprocessed TO monitor;
};
$node->safe_psql('postgres', $roles_sql);
$node->safe_psql('postgres', qq{
	CREATE EXTENSION ordered_events VERSION '0.1';
	$grants_0_1_sql
	$grants_dba_sql
	SELECT ordered_events.create_stream('g');
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
});

# What 0.1's ingest() and release() left for g 1, 2, 3, 5 (4 missing) and
# a duplicate of 2; f is empty.  The new library refuses 0.1's objects, so
# the rows are written directly (as in 016_upgrade.pl).
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.events (stream_id, seq, event_ts, alignment_ts, received_at, key, payload)
	SELECT d.stream_id, s, '2026-01-01'::timestamptz + s * interval '1 s',
	       '2026-01-01'::timestamptz + s * interval '1 s', '2026-01-02', 'k', jsonb_build_object('n', s)
	  FROM ordered_events.stream_def d, unnest(ARRAY[1, 2, 3, 5]) s WHERE d.stream = 'g';
	INSERT INTO ordered_events.unprocessed (stream, seq, key, payload, event_ts, reason, detail, received_at)
	VALUES ('g', 2, 'k', NULL, '2026-01-02', 'duplicate', 'Seq 2 was already received.', '2026-01-02');
	UPDATE ordered_events.stream_progress p
	   SET range_end = 4, released_count = 3, max_event_ts = '2026-01-01 00:00:03',
	       gap_start = 4, gap_end = 4, gap_first_seen = '2026-01-03'
	  FROM ordered_events.stream_def d WHERE d.stream_id = p.stream_id AND d.stream = 'g';
	INSERT INTO ordered_events.release_log (stream_id, seq_start, seq_end, released_at)
	SELECT stream_id, 1, 4, '2026-01-03' FROM ordered_events.stream_def WHERE stream = 'g';
});

# Restarted with this library, before the update: the worker says what to
# do, once for each version it finds, and logs no error of its steps.
$node->wait_for_log(qr/until extension "ordered_events" is updated/, $log_offset);
$node->safe_psql('postgres', q{ALTER EXTENSION ordered_events UPDATE TO '0.2'});
$node->wait_for_log(qr/The installed extension is version 0\.2/, $log_offset);
$node->safe_psql('postgres', q{ALTER EXTENSION ordered_events UPDATE});
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'}),
	'0.3', 'updated to 0.3');
ok($node->poll_query_until('postgres', q{SELECT state = 'idle' FROM ordered_events.worker_status}),
	'the worker serves the updated database');
my $log = slurp_file($node->logfile, $log_offset);
like($log,
	qr/LOG:  ordered_events does not work in database "postgres" until extension "ordered_events" is updated\n.*DETAIL:  The installed extension is version 0\.1, the library version 0\.3\.\n.*HINT:  Run ALTER EXTENSION ordered_events UPDATE in that database\.\n/,
	'before the update, the worker logs the one thing to do');
is(join(' ', $log =~ /The installed extension is version (\S+),/g), '0.1 0.2',
	'... once at 0.1, once at 0.2');
unlike($log, qr/HINT:  .*worker_status|ordered_events could not/, '... and no error of a step, no hint about worker_status');

# Filled at 0.3: the consumer role, granted what 0.3 gives consumers, made
# a consumer and read part of g.
$node->safe_psql('postgres', q{
	GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
	                          ordered_events.subscribe(text, text, interval, text),
	                          ordered_events.read(text, integer, integer, interval) TO consumer;
	SET ROLE consumer;
	SELECT ordered_events.create_consumer('c');
	SELECT ordered_events.subscribe('c', 'g', start => 'beginning');
	SELECT count(*) FROM ordered_events.read('c', 2);
	RESET ROLE;
});

# The monitor of 0.1 reads worker_status after the update (0.2's view calls
# worker_report(), not PUBLIC's).
my $monitor_sql = q{
	SET ROLE monitor;
	SELECT count(*) >= 0 FROM ordered_events.worker_status;
	SELECT string_agg(format('%s/%s/%s', stream, range_end, pending_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats;
	SELECT count(*) FROM ordered_events.key_status;
	RESET ROLE};
is($node->safe_psql('postgres', $monitor_sql), "t\nf/1/0 g/4/1\n1",
	'the 0.1 monitor reads worker_status, stream_stats and key_status at 0.3');

my $privileges = OrderedEvents::member_privileges($node, 'postgres');
like($privileges, qr/^schema ordered_events USAGE to producer by postgres$/m,
	'the privileges compared hold the producer\'s USAGE on the schema');
like($privileges,
	qr/^function ordered_events.worker_report\(\) EXECUTE to monitor by postgres$/m,
	'... the monitor\'s EXECUTE on worker_report(), which the update gave it');
like($privileges, qr/^view ordered_events.stream_stats SELECT to PUBLIC by postgres$/m,
	'... PUBLIC\'s SELECT on stream_stats');
like($privileges,
	qr/^column seq of table ordered_events.unprocessed SELECT to monitor by postgres$/m,
	'... and the monitor\'s on columns of unprocessed');

# The update left pg_init_privs as a fresh install has them: the
# extension's own grants only.  fresh02 was made at 0.2 and granted the
# same (what of 0.1 is left, and a function whose signature 0.3 changes),
# fresh03 made at this version.
my $init_privs = OrderedEvents::member_init_privs($node, 'postgres');
unlike($init_privs, qr/\b(?:producer|consumer|monitor)=|[{,]=/,
	'the initial privileges of the updated database name none of the users\' roles, nor PUBLIC');
$node->safe_psql('postgres', q{
	CREATE DATABASE fresh02;
	CREATE DATABASE fresh03;
});
$node->safe_psql('fresh02', qq{
	CREATE EXTENSION ordered_events VERSION '0.2';
	$grants_dba_sql
	GRANT USAGE ON SCHEMA ordered_events TO producer, consumer, monitor;
	GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
	                          ordered_events.append(text, text, jsonb, timestamptz) TO producer;
	GRANT SELECT ON ordered_events.stream_def TO producer;
	GRANT INSERT ON ordered_events.inbox TO producer;
	GRANT SELECT ON ordered_events.released, ordered_events.stream_stats TO consumer;
	GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text)
	   TO consumer;
	GRANT SELECT ON ordered_events.stream_stats, ordered_events.key_status,
	                ordered_events.worker_status TO monitor;
	ALTER EXTENSION ordered_events UPDATE;
});
# The update made create_consumer() again with the grants of 0.2's.
is($node->safe_psql('fresh02', q{
	SELECT has_function_privilege('consumer',
	           'ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text)', 'EXECUTE')}),
	't', 'made at 0.2: the consumer may still create consumers');
$node->safe_psql('fresh03', 'CREATE EXTENSION ordered_events');
my $fresh_init_privs = OrderedEvents::member_init_privs($node, 'fresh03');
like($fresh_init_privs, qr/^schema ordered_events \{postgres=UC\/postgres,pg_monitor=U\/postgres\}$/m,
	'a fresh install records its grants to pg_monitor');
is($init_privs, $fresh_init_privs,
	'the chain from 0.1 with users\' grants: the initial privileges of a fresh install');
is(OrderedEvents::member_init_privs($node, 'fresh02'), $fresh_init_privs,
	'made at 0.2 with users\' grants and updated: the same');
is($node->safe_psql('fresh02', $monitor_sql), "t\n\n0",
	'a monitor granted SELECT on worker_status at 0.2 reads it after the update');

# pg_dump, and pg_restore into a fresh cluster whose roles were made first
# (pg_dump does not dump roles).
my $dump = $node->basedir . '/dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump -Fc');
my $target = OrderedEvents::node('restored', extension => 0);
$target->safe_psql('postgres', $roles_sql);
command_ok([ 'createdb', '-h', $target->host, '-p', $target->port, '-T', 'template0', 'app' ],
	'createdb -T template0');
command_ok([ 'pg_restore', '-d', $target->connstr('app'), $dump ], 'pg_restore -d');

is(OrderedEvents::member_privileges($target, 'app'), $privileges,
	'restored: every privilege on every member of the extension as before the dump');
is(OrderedEvents::member_init_privs($target, 'app'), $fresh_init_privs,
	'restored: the initial privileges of a fresh install');

# The roles use them.
is($target->safe_psql('app', q{
	SET ROLE producer;
	SELECT ordered_events.ingest('g', 4, 'k'), ordered_events.ingest('g', 2, 'k');
	INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('g', 6, 'k');
	SELECT ordered_events.append('f', 'x');
	RESET ROLE;
	SELECT ordered_events.release()}),
	"accepted|duplicate\n1\n4",
	'restored: the producer ingests, inserts into inbox and appends');
is($target->safe_psql('app', q{
	SET ROLE consumer;
	SELECT string_agg(format('%s/%s', stream, seq), ' ' ORDER BY stream, seq) FROM ordered_events.released;
	SELECT string_agg(format('%s/%s', stream, released_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats;
	SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ordered_events.read('c', 10);
	RESET ROLE}),
	"f/1 g/1 g/2 g/3 g/4 g/5 g/6\nf/1 g/6\n3,4,5,6",
	'restored: the consumer reads released, stream_stats and the consumer c');
is($target->safe_psql('app', $monitor_sql), "t\nf/2/0 g/7/0\n2",
	'restored: the monitor reads worker_status, stream_stats and key_status');

done_testing();
