
# worker_status has one row per worker (docs/monitoring.md): the release
# worker of each served database (kind 'release') and the processing
# workers (kind 'process', with their consumer and partition).  It shows
# what an operator asks first: the stream a release worker is releasing
# and the consumer partition a processing worker applies (seen while they
# wait for locks that the test holds), how long the last cycle took, and
# the events released and applied, in total and per second over the last
# minute.
#
# - Counters move during a long step: a handler that sleeps 10 ms per
#   event, 1000 events in one step; processed_total rises (and the rate is
#   positive) while none of the step's results is committed yet.
# - max_processing_workers = 1 with two partitions: every handler call
#   sees at most one processing worker in pg_stat_activity, both partitions
#   are drained, and the release worker says once in the log that
#   partitions wait.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('worker_status', databases => 'postgres', naptime => 200,
	conf => [ 'ordered_events.handler_timeout = 0', 'ordered_events.max_processing_workers = 1' ]);

$node->safe_psql('postgres', q{
	CREATE TABLE public.gate (id int PRIMARY KEY);
	INSERT INTO public.gate VALUES (1);
	CREATE TABLE public.calls (consumer text, partition int, workers int);
	-- waits while the test holds the gate's row
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM FROM public.gate WHERE id = 1 FOR SHARE;
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	CREATE FUNCTION public.slow(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.pg_sleep(0.01);
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	-- records how many processing workers run at each call
	CREATE FUNCTION public.count_workers(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO public.calls
		SELECT 'two', ordered_events.key_partition(e.key, 2), count(*)
		  FROM pg_catalog.pg_stat_activity WHERE backend_type = 'ordered_events processing';
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('blocked');
	SELECT ordered_events.create_consumer('c', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c', 's');
});

sub release_row
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
	'the workers released and applied 1000 events');
ok( $node->poll_query_until('postgres', q{
	SELECT released_total >= 1000 AND processed_total >= 1000
	       AND released_per_second > 0 AND processed_per_second > 0
	       AND last_cycle_duration >= '0 s' AND partition IS NULL
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'the release row: its totals count them (applied: by its processing workers), positive rates');
ok( $node->poll_query_until('postgres', q{
	SELECT state = 'idle' AND current_stream IS NULL AND current_consumer IS NULL
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'idle: no current stream or consumer');

# The processing worker of c waits for the gate.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT FROM public.gate WHERE id = 1 FOR UPDATE');
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('s', 1001, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT string_agg(state || '/' || current_consumer || '/' || partition || '/' ||
	                  coalesce(current_stream, '-') || '/' || (pid IS NOT NULL), ' ')
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'process'},
	'processing/c/0/-/true'),
	'while it applies c: a process row, state processing, consumer c, partition 0');
is(release_row('current_consumer IS NULL'), 't', 'the release row processes nothing');
$holder->query_safe('COMMIT');

# The release worker releasing "blocked" waits for its progress row (1 s, then again).
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

#
# Counters move during a long step: 1000 events of 10 ms in one step.  c's
# idle worker makes way (max_processing_workers = 1).
#
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('long');
	SELECT ordered_events.create_consumer('slow', handler => 'public.slow(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('slow', 'long');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'long', g, 'k' || (g % 10) FROM generate_series(1, 1000) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT w.processed_total > 0 AND w.processed_per_second > 0 AND w.last_cycle_at IS NOT NULL
	       AND w.state = 'processing'
	       AND (SELECT count(*) FROM ordered_events.results WHERE consumer = 'slow') = 0
	  FROM ordered_events.worker_status w
	 WHERE w.kind = 'process' AND w.current_consumer = 'slow'}),
	'slow: processed_total rises during the step, before any of its results is committed');
my $first = $node->safe_psql('postgres', q{
	SELECT processed_total || '/' || last_cycle_at FROM ordered_events.worker_status
	 WHERE kind = 'process' AND current_consumer = 'slow'});
ok( $node->poll_query_until('postgres', qq{
	SELECT w.processed_total || '/' || w.last_cycle_at <> '$first'
	       AND (SELECT count(*) FROM ordered_events.results WHERE consumer = 'slow') = 0
	  FROM ordered_events.worker_status w
	 WHERE w.kind = 'process' AND w.current_consumer = 'slow'}),
	'... and moves again, still before the commit');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'slow'}, '1000'),
	'slow: 1000 events applied');
ok( $node->poll_query_until('postgres', q{
	SELECT processed_total >= 2001 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'the release row counts what the processing workers applied');

#
# max_processing_workers = 1, two partitions.
#
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('t');
	SELECT ordered_events.create_consumer('two', partitions => 2,
	                                      handler => 'public.count_workers(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('two', 't');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 't', g, 'k' || g FROM generate_series(1, 200) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'two'}, '200'),
	'two: both partitions drained');
is( $node->safe_psql('postgres', q{
	SELECT count(DISTINCT partition) || '/' || max(workers) FROM public.calls}),
	'2/1', 'two: both partitions applied, never more than one processing worker at once');
ok( $node->log_contains(qr/handler consumer partitions of database "postgres" wait for a processing worker/),
	'the release worker said in the log that partitions wait');
is(release_row('last_error IS NULL'), 't', 'no error in worker_status');

$node->stop;
done_testing();
