
# worker_status shows what an operator asks first: the stream the worker is
# releasing or the consumer it is processing (seen while the worker waits
# for a lock that the test holds), how long its last cycle took, and the
# events it released and applied, in total and per second over the last
# minute.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('worker_status', databases => 'postgres', naptime => 200,
	conf => ['ordered_events.handler_timeout = 0']);

$node->safe_psql('postgres', q{
	CREATE TABLE public.gate (id int PRIMARY KEY);
	INSERT INTO public.gate VALUES (1);
	-- waits while the test holds the gate's row
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM FROM public.gate WHERE id = 1 FOR SHARE;
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('blocked');
	SELECT ordered_events.create_consumer('c', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c', 's');
});

sub status
{
	my ($columns) = @_;
	return $node->safe_psql('postgres',
		"SELECT $columns FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
}

# 1,000 events released and applied.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 's', g, 'k' || (g % 10) FROM generate_series(1, 1000) g});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'c'}, '1000'),
	'the worker released and applied 1000 events');
ok( $node->poll_query_until('postgres', q{
	SELECT released_total >= 1000 AND processed_total >= 1000
	       AND released_per_second > 0 AND processed_per_second > 0
	       AND last_cycle_duration >= '0 s'
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'totals count them, and the rates over the last minute are positive');
ok( $node->poll_query_until('postgres', q{
	SELECT state = 'idle' AND current_stream IS NULL AND current_consumer IS NULL
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'idle: no current stream or consumer');

# The worker processing c waits for the gate.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT FROM public.gate WHERE id = 1 FOR UPDATE');
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('s', 1001, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT state || '/' || coalesce(current_consumer, '-') || '/' || coalesce(current_stream, '-')
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'},
	'processing/c/-'),
	'while it applies c: state processing, current_consumer c');
$holder->query_safe('COMMIT');

# The worker releasing "blocked" waits for its progress row (1 s, then again).
$holder->query_safe('BEGIN');
$holder->query_safe(q{
	SELECT FROM ordered_events.progress p
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'blocked' FOR UPDATE OF p});
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('blocked', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT state || '/' || coalesce(current_stream, '-') || '/' || coalesce(current_consumer, '-')
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'},
	'releasing/blocked/-'),
	'while it releases blocked: state releasing, current_stream blocked');
$holder->query_safe('COMMIT');
$holder->quit;

ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT count(*) FROM ordered_events.results WHERE consumer = 'c') = 1001
	   AND (SELECT range_end FROM ordered_events.ranges WHERE stream = 'blocked') = 2}),
	'both go on once the locks are gone');

$node->stop;
done_testing();
