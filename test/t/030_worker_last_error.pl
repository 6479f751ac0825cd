
# worker_status.last_error names the unit of work that failed, also when
# several fail in one cycle (issue 20, finding 9: the name was read after
# the error state that held it was flushed, and showed the log's hint).
#
# Streams a and b each have a release step that fails on the worker's
# lock_timeout (the test holds their progress rows, which only a release
# step writes).  Both start failing in the same cycle, so both are logged
# in it.  Consumer g's processing worker meanwhile waits in its handler for
# a row the test holds: the release worker's row shows a stream's error
# (not the log's hint) while the release worker goes on.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('last_error', databases => 'postgres', naptime => 200,
	conf => ['ordered_events.handler_timeout = 0']);

$node->safe_psql('postgres', q{
	CREATE TABLE public.gate (id int PRIMARY KEY);
	INSERT INTO public.gate VALUES (1);
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM FROM public.gate WHERE id = 1 FOR SHARE;
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('a');
	SELECT ordered_events.create_stream('b');
	SELECT ordered_events.create_stream('gs');
	SELECT ordered_events.create_consumer('g', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('g', 'gs');
	SELECT ordered_events.ingest('a', 1, 'k'), ordered_events.ingest('b', 1, 'k');
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.ranges WHERE stream IN ('a', 'b') AND range_end = 2},
	'2'),
	'a and b have released once: their progress rows exist');

sub status
{
	my ($columns) = @_;
	return $node->safe_psql('postgres',
		"SELECT $columns FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
}

my $log_offset = -s $node->logfile;

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{
	SELECT FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream IN ('a', 'b') FOR UPDATE OF p});
$holder->query_safe('SELECT FROM public.gate WHERE id = 1 FOR UPDATE');

# One commit: the first cycle that sees any of it sees all of it.
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('a', 2, 'k'), ordered_events.ingest('b', 2, 'k'),
	       ordered_events.ingest('gs', 1, 'k')});

ok( $node->poll_query_until('postgres', q{
	SELECT state || '/' || coalesce(current_consumer, '-')
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'process'},
	'processing/g'),
	'g\'s processing worker waits in its handler');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release' AND cycles > 0
	   AND last_error LIKE 'stream %'}, '1'),
	'meanwhile the release worker found a or b failing');
like(status('last_error'),
	qr/^stream [ab]: canceling statement due to lock timeout$/,
	'last_error names a stream that failed, and its error');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/LOG:  ordered_events could not release stream "a": canceling statement due to lock timeout/,
	'a\'s failure is logged');
like($log, qr/LOG:  ordered_events could not release stream "b": canceling statement due to lock timeout/,
	'b\'s failure is logged in the same cycle');

$holder->query_safe('ROLLBACK');
$holder->quit;
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.ranges WHERE stream IN ('a', 'b') AND range_end = 3},
	'2'),
	'a and b are released once the rows are free');
ok( $node->poll_query_until('postgres', q{
	SELECT last_error IS NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'and last_error is cleared');

# A failing unit that goes away (its stream dropped while it fails) takes
# its error with it: no step of it will ever succeed to clear it.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('c');
	SELECT ordered_events.ingest('c', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events.ranges WHERE stream = 'c'}, '2'),
	'c has released once: its progress row exists');
$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{
	SELECT FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'c' FOR UPDATE OF p});
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('c', 2, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT last_error LIKE 'stream c: %lock timeout%'
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'c fails');
$holder->query_safe(q{SELECT ordered_events.drop_stream('c')});
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres', q{
	SELECT last_error IS NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'dropped while failing, c leaves no error behind');

$node->stop;
done_testing();
