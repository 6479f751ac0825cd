
# The worker's transactions are READ COMMITTED whatever the database's
# default_transaction_isolation (issue 20, finding 4).  In a database whose
# default is 'repeatable read', a compaction took its snapshot before it
# waited for the stream's lock, held by a subscribe() from the beginning;
# it then missed the new subscription and deleted the 20 events that the
# newcomer was shown as unread: it read none, and unread_count stayed 20.
#
# - A handler applied by the worker sees transaction_isolation 'read
#   committed'.
# - The newcomer's subscribe() holds the stream's lock while the only
#   other consumer commits having read everything; once it commits, the
#   newcomer reads all 20 events, and the worker deletes them only after
#   that read.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('repeatable_read', databases => 'postgres', naptime => 100);

$node->safe_psql('postgres', q{
	ALTER DATABASE postgres SET default_transaction_isolation = 'repeatable read';
	CREATE TABLE public.seen (isolation text);
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO public.seen VALUES (pg_catalog.current_setting('transaction_isolation'));
		RETURN ROW(state, NULL)::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('hs');
	SELECT ordered_events.create_consumer('c', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c', 'hs');
	SELECT ordered_events.create_stream('r', retention => '0 s');
	SELECT ordered_events.create_consumer('old');
	SELECT ordered_events.subscribe('old', 'r');
	SELECT ordered_events.create_consumer('newc');
});
# A new worker, which starts with the database's setting.
$node->restart;

is($node->safe_psql('postgres', 'SHOW default_transaction_isolation'),
	'repeatable read', 'the database defaults to repeatable read');

sub status
{
	my ($columns) = @_;
	return $node->safe_psql('postgres',
		"SELECT $columns FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
}
ok( $node->poll_query_until('postgres', q{
	SELECT cycles > 0 FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'the worker runs');

# What the worker's transactions see.
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('hs', 1, 'k')});
ok($node->poll_query_until('postgres', 'SELECT count(*) FROM public.seen', '1'),
	'the worker applied an event');
is($node->safe_psql('postgres', 'SELECT isolation FROM public.seen'),
	'read committed', 'in a read committed transaction');

# 20 events of r, released and counted; "old" has not read them: kept.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'r', g, 'k' || (g % 3) FROM generate_series(1, 20) g});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT range_end FROM ordered_events.ranges WHERE stream = 'r') = 21
	   AND NOT EXISTS (SELECT FROM ordered_events.streams_to_compact() WHERE stream = 'r')}),
	'r is released and counted');

# The newcomer subscribes from the beginning, holding r's lock meanwhile;
# "old" reads everything, so that only the subscription keeps the events.
my $subscriber = $node->background_psql('postgres');
$subscriber->query_safe('BEGIN');
$subscriber->query_safe(q{SELECT ordered_events.subscribe('newc', 'r', start => 'beginning')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM ordered_events.read('old', 100)}),
	'20', 'old reads all 20');

# Let the worker come to r: it waits for the lock (as it used to), or
# leaves r for later cycles (as it does now).
my $cycles = status('cycles');
ok( $node->poll_query_until('postgres', qq{
	SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
	                 JOIN ordered_events.worker_status w ON w.pid = a.pid
	                WHERE w.database = 'postgres' AND a.wait_event_type = 'Lock')
	    OR (SELECT cycles >= $cycles + 2 FROM ordered_events.worker_status
	         WHERE database = 'postgres' AND kind = 'release')}),
	'the worker came to r while its lock is held');
$subscriber->query_safe('COMMIT');
$subscriber->quit;

$cycles = status('cycles');
ok( $node->poll_query_until('postgres', qq{
	SELECT cycles >= $cycles + 2 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'two more cycles');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream = 'r'}),
	'20', 'the worker kept the newcomer\'s 20 unread events');
is( $node->safe_psql('postgres', q{
	SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'newc'}),
	'20', 'which it is shown as unread');
is($node->safe_psql('postgres', q{SELECT count(*) FROM ordered_events.read('newc', 100)}),
	'20', 'and reads');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream = 'r'}, '0'),
	'once read by both, the worker deletes them');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(consumer || ':' || unread_count, ',' ORDER BY consumer)
	  FROM ordered_events.consumers WHERE stream = 'r'}),
	'newc:0,old:0', 'and nothing is left unread');
is( $node->safe_psql('postgres', q{
	SELECT sum(released_count) FROM ordered_events.key_status WHERE stream = 'r'}),
	'20', 'key_status still counts the 20');
is(status('last_error IS NULL'), 't', 'no error in worker_status');

$node->stop;
done_testing();
