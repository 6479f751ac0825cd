
# A handler applied by the worker that waits for a row lock waits as the
# server's lock_timeout allows (here none), bounded by handler_timeout
# (here none): not the worker's own 1 s lock_timeout, which would turn a
# passing lock conflict into a dead letter.  Once the lock is released,
# the event is applied, once, and no event of the consumer is a dead
# letter.  The wait is observed in pg_locks, and the lock is held for well
# over the worker's 1 s before it is released.  The worker's own queries
# keep their 1 s afterwards.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('handler_lock_wait', databases => 'postgres', naptime => 200,
	conf => ['ordered_events.handler_timeout = 0']);

$node->safe_psql('postgres', q{
	CREATE TABLE public.acct (id int PRIMARY KEY, v int NOT NULL);
	INSERT INTO public.acct VALUES (1, 0);
	CREATE FUNCTION public.bump(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		UPDATE public.acct SET v = v + 1 WHERE id = 1;
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_consumer('c', handler => 'public.bump(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c', 's');
});

my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
ok($worker_pid =~ /^\d+$/, 'the worker runs');

# Hold the row the handler updates.
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('SELECT v FROM public.acct WHERE id = 1 FOR UPDATE');

$node->safe_psql('postgres', q{SELECT ordered_events.ingest('s', 1, 'k')});

ok( $node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM pg_catalog.pg_locks l
	                 JOIN ordered_events.worker_status w ON w.pid = l.pid
	                WHERE NOT l.granted AND w.kind = 'process' AND w.current_consumer = 'c')}),
	'the processing worker of c waits for the row lock inside the handler');
my $process_pid = $node->safe_psql('postgres', q{
	SELECT pid FROM ordered_events.worker_status WHERE kind = 'process' AND current_consumer = 'c'});

# Longer than the worker's own lock_timeout (1 s): it still waits.
$node->safe_psql('postgres', 'SELECT pg_sleep(2.5)');
is( $node->safe_psql('postgres', qq{
	SELECT EXISTS (SELECT FROM pg_catalog.pg_locks WHERE pid = $process_pid AND NOT granted)
	       || '/' || (SELECT count(*) FROM ordered_events.unprocessed)}),
	'true/0', 'after 2.5 s the worker still waits, and no dead letter');

$locker->query_safe('COMMIT');
$locker->quit;

ok( $node->poll_query_until('postgres', q{
	SELECT string_agg(seq || ':' || result, ',') FROM ordered_events.results WHERE consumer = 'c'},
	'1:1'),
	'once the lock is released, the event is applied');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT v FROM public.acct) || '/' || (SELECT count(*) FROM ordered_events.unprocessed)
	       || '/' || (SELECT processed_count || ':' || error_count FROM ordered_events.key_state)}),
	'1/0/1:0', 'applied once, no dead letter');
is( $node->safe_psql('postgres', q{
	SELECT pid || '/' || (last_error IS NULL) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	"$worker_pid/true", 'the same release worker, no error');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status WHERE kind = 'process' AND last_error IS NOT NULL}),
	'0', 'no error in the processing worker\'s row');

# The handler's calls had no lock_timeout; the workers' own queries still
# have theirs: a release step that waits for a stream's lock gives up.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{
	SELECT FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 's' FOR UPDATE OF p});
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('s', 2, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT last_error FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'},
	'stream s: canceling statement due to lock timeout'),
	'after handler calls, the worker\'s own lock waits still time out');
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'c'}, '2'),
	'the next event is applied once the stream is free');

$node->stop;
done_testing();
