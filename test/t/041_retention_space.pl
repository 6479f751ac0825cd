# Space under retention (issue 23): the release worker vacuums the tables
# its retention deleted from, whatever autovacuum's timing.  Autovacuum is
# off here, so that every vacuum of event_store the statistics record is
# the worker's.
#
# - Below ordered_events.vacuum_after deleted events, the worker does not
#   vacuum; once its deletes reach it, it vacuums event_store and
#   lane_release_log, and the deleted events are no longer dead rows.
# - The threshold grows by a fifth of the rows event_store holds (a stream
#   without retention keeps 10,000 events: 1,000 + 2,000 deletes).
# - vacuum_after = 0: the worker never vacuums.
# - Without the worker, the VACUUM job that docs/operating.md gives
#   ("Running without the worker") runs as pg_cron would run it, one
#   command outside a transaction block, and vacuums the same tables.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('retention_space', databases => 'postgres', naptime => 100,
	conf => ['autovacuum = off', 'ordered_events.vacuum_after = 1000']);

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

# Events $from..$to of stream $stream, in one statement.
sub ingest
{
	my ($stream, $from, $to) = @_;
	$node->safe_psql('postgres', qq{
		INSERT INTO ordered_events.inbox (stream, seq, key, payload)
		SELECT '$stream', g, 'k' || g % 10, jsonb_build_object('n', g)
		  FROM generate_series($from, $to) g});
}

# Wait until the worker deleted $n events of stream $stream in all.
sub wait_deleted
{
	my ($stream, $n) = @_;
	ok( $node->poll_query_until('postgres', qq{
		SELECT t.events FROM ordered_events.deleted_totals t
		  JOIN ordered_events.stream_def d USING (stream_id) WHERE d.stream = '$stream'}, $n),
		"$stream: the worker deleted $n events");
}

# vacuum_count of a table of the extension
sub vacuums
{
	my ($table) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT vacuum_count FROM pg_stat_user_tables
		 WHERE relid = 'ordered_events.$table'::regclass});
}

$node->safe_psql('postgres', q{SELECT ordered_events.create_stream('g', retention => '0 s')});

# 1. 999 events deleted: fewer than vacuum_after, no vacuum.
ingest('g', 1, 999);
wait_deleted('g', 999);
wait_two_cycles('999 deleted');
is(vacuums('event_store') . '/' . vacuums('lane_release_log'), '0/0',
	'999 events deleted, fewer than vacuum_after: the worker vacuumed nothing');

# 2. One more: the worker's deletes reach 1000, it vacuums both tables.
# The 999 were deleted before this test's last query began, so no
# snapshot keeps them; only the last event's row might be seen by a query
# of the poll below while the vacuum starts.
ingest('g', 1000, 1000);
ok( $node->poll_query_until('postgres', q{
	SELECT vacuum_count >= 1 FROM pg_stat_user_tables WHERE relid = 'ordered_events.event_store'::regclass}),
	'1000 events deleted: the worker vacuumed event_store');
is( $node->safe_psql('postgres', q{
	SELECT s.vacuum_count, s.n_dead_tup <= 1, s.autovacuum_count, c.reltuples
	  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
	 WHERE s.relid = 'ordered_events.event_store'::regclass}),
	'1|t|0|0',
	'one vacuum, by the worker: the deleted events are no longer dead rows, none live');
ok( $node->poll_query_until('postgres', q{
	SELECT vacuum_count >= 1 FROM pg_stat_user_tables WHERE relid = 'ordered_events.lane_release_log'::regclass}),
	'and lane_release_log');
is( $node->safe_psql('postgres', q{
	SELECT last_error IS NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	't', 'no error in worker_status');

# 3. A stream without retention keeps 10,000 events.  After the next
# vacuum (1000 more deleted) event_store holds 10,000 rows, so the one
# after waits for 1000 + 2000 deletes.
$node->safe_psql('postgres', q{SELECT ordered_events.create_stream('keep')});
ingest('keep', 1, 10000);
ok( $node->poll_query_until('postgres', q{
	SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'keep'}, '10000'),
	'keep: 10000 events released');
ingest('g', 1001, 2000);
ok( $node->poll_query_until('postgres', q{
	SELECT vacuum_count >= 2 FROM pg_stat_user_tables WHERE relid = 'ordered_events.event_store'::regclass}),
	'1000 more deleted: the worker vacuumed event_store again');
is( $node->safe_psql('postgres', q{
	SELECT vacuum_count, reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
	 WHERE s.relid = 'ordered_events.event_store'::regclass}),
	'2|10000', 'event_store holds the 10000 events kept');
ingest('g', 2001, 4999);
wait_deleted('g', 4999);
wait_two_cycles('2999 deleted');
is(vacuums('event_store'), '2',
	'2999 deleted, fewer than 1000 + a fifth of 10000: no vacuum');
ingest('g', 5000, 5000);
ok( $node->poll_query_until('postgres', q{
	SELECT vacuum_count >= 3 FROM pg_stat_user_tables WHERE relid = 'ordered_events.event_store'::regclass}),
	'3000 deleted: the worker vacuumed event_store');

# 4. vacuum_after = 0: no vacuum, whatever is deleted.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET ordered_events.vacuum_after = 0;
	SELECT pg_reload_conf()});
wait_two_cycles('reloaded');
ingest('g', 5001, 9000);
wait_deleted('g', 9000);
wait_two_cycles('4000 deleted with vacuum_after = 0');
is(vacuums('event_store'), '3', 'vacuum_after = 0: the worker did not vacuum');

# 5. Without the worker: the documented job vacuums the tables.  pg_cron
# is not installed here: this cron.schedule() keeps the job's command,
# which then runs as pg_cron runs it, alone in a session of its own.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET ordered_events.enabled = off;
	SELECT pg_reload_conf()});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'ordered_events worker'}),
	'the worker stopped');
$node->safe_psql('postgres', q{
	CREATE SCHEMA cron;
	CREATE TABLE cron.job (command text);
	CREATE FUNCTION cron.schedule(job_name text, schedule text, command text) RETURNS bigint
	LANGUAGE sql AS $$ INSERT INTO cron.job VALUES (command); SELECT 1::bigint $$;
	INSERT INTO ordered_events.inbox (stream, seq, key) SELECT 'g', g, 'k' FROM generate_series(9001, 9100) g;
	SELECT ordered_events.release();
	SELECT ordered_events.compact();
	SELECT cron.schedule('ordered-events-vacuum', '* * * * *',
	                     'VACUUM ordered_events.event_store, ordered_events.lane_release_log');
});
is( $node->safe_psql('postgres', q{
	SELECT t.events FROM ordered_events.deleted_totals t JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'g'}),
	'9100', 'compact() by hand deleted the last 100');
my $before = vacuums('event_store');
$node->safe_psql('postgres', $node->safe_psql('postgres', 'SELECT command FROM cron.job'));
is(vacuums('event_store') . '/' . vacuums('lane_release_log'), ($before + 1) . '/4',
	'the VACUUM job vacuumed event_store and lane_release_log');

$node->stop;
done_testing();
