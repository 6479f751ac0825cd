
# The extension's objects change under running sessions and the worker.
#
# - A session whose ingest() was waiting while DROP EXTENSION committed gets
#   an error, and ingests again once the extension is created again (the
#   stream cache was left half rebuilt: the next call crashed the server).
# - DROP EXTENSION while the worker releases a backlog in small steps:
#   the drop neither deadlocks nor crashes, and the worker serves the
#   extension again once it is created again.
# - REINDEX ... CONCURRENTLY gives the indexes new OIDs: a long-lived
#   producer and the worker go on (they cached the old OIDs).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('lifecycle', databases => 'postgres', naptime => 100);
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.ingest('s', 1, 'k');
});

# A producer session waits in ingest() for the lock DROP EXTENSION holds.
my $producer = $node->background_psql('postgres', on_error_stop => 0);
$producer->query_safe("SELECT ordered_events.ingest('s', 2, 'k')");
my $dropper = $node->background_psql('postgres');
$dropper->query_safe('BEGIN');
$dropper->query_safe('DROP EXTENSION ordered_events');
OrderedEvents::send_query($producer, "SELECT ordered_events.ingest('s', 3, 'k');");
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query LIKE '%ingest(''s'', 3%'}),
	'the producer waits for DROP EXTENSION');
$dropper->query_safe('COMMIT');
$producer->query('SELECT 1');
like($producer->{stderr}, qr/ERROR/,
	'its ingest() failed once the extension was gone');
$producer->{stderr} = '';

$dropper->query_safe(q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('s');
});
is($producer->query_safe("SELECT ordered_events.ingest('s', 1, 'k')"),
	'accepted', 'the same session ingests into the new extension');
$dropper->quit;

# DROP EXTENSION while the worker releases a backlog 10 events per step.
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', q{
		SELECT ordered_events.create_stream('big', max_release_batch => 10);
		INSERT INTO ordered_events.inbox (stream, seq, key)
		SELECT 'big', g, 'k' FROM generate_series(2, 20000) g;
		SELECT ordered_events.ingest('big', 1, 'k');
	});
	$node->poll_query_until('postgres', q{
		SELECT range_end > 100 FROM ordered_events.ranges WHERE stream = 'big'})
	  or die 'the worker does not release';
	my ($stdout, $stderr);
	$node->psql('postgres', 'DROP EXTENSION ordered_events',
		stdout => \$stdout, stderr => \$stderr);
	is($stderr, '', "round $round: DROP EXTENSION while the worker releases");
	$node->safe_psql('postgres', q{
		CREATE EXTENSION ordered_events;
		SELECT ordered_events.create_stream('s');
	});
}

# The worker serves the new extension.
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('s', 2, 'k');
	SELECT ordered_events.ingest('s', 1, 'k');
});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end = 3 FROM ordered_events.ranges WHERE stream = 's'}),
	'the worker releases in the recreated extension');

# REINDEX CONCURRENTLY under a long-lived producer and the worker.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('pk', 'per_key');
	SELECT ordered_events.ingest('pk', 1, 'a');
});
is($producer->query_safe(q{
	SELECT ordered_events.ingest('s', 4, 'k'), ordered_events.ingest('pk', 3, 'a')}),
	'accepted|accepted', 'the producer has cached the indexes');
$node->safe_psql('postgres', 'REINDEX TABLE CONCURRENTLY ordered_events.event_store');
$node->safe_psql('postgres', 'REINDEX TABLE CONCURRENTLY ordered_events.progress');
is($producer->query_safe(q{
	SELECT ordered_events.ingest('s', 3, 'k'), ordered_events.ingest('pk', 2, 'a'),
	       ordered_events.ingest('s', 3, 'k')}),
	'accepted|accepted|duplicate', 'the producer ingests after REINDEX CONCURRENTLY');
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT range_end FROM ordered_events.ranges WHERE stream = 's') = 5
	   AND (SELECT string_agg(seq::text, ',') FROM ordered_events.released
	         WHERE stream = 'pk') = '1,2,3'}),
	'the worker releases after REINDEX CONCURRENTLY');
$producer->quit;

is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$started, 'the server never restarted');
ok(!$node->log_contains(qr/could not open relation|terminated by signal|deadlock/),
	'no stale OID, crash or deadlock in the log');

done_testing();
