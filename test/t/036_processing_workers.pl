
# Processing workers (docs/operating.md, "Processing workers";
# docs/architecture.md): handler consumers are applied by background
# workers of their own, one per consumer partition with work, never by the
# worker that releases.
#
# 1. Isolation: a handler that waits for an advisory lock the test holds
#    (bounded by handler_timeout) does not delay releasing: an unrelated
#    stream's gap is filled and its events are released while the handler
#    provably still waits (its event not applied, its lock wait in
#    pg_locks), by the release worker, another process.
# 2. Two partitions of one consumer are applied at once by two workers: each
#    partition's handler waits until pg_stat_activity shows the other
#    partition's worker inside the handler too (then until the other saw
#    it), and records whether it did.
# 3. A processing worker exits once idle, and when its consumer is
#    dropped; DROP DATABASE goes through while a processing worker of that
#    database sleeps in its handler.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('processing_workers', databases => 'postgres, app',
	naptime => 200, conf => ['ordered_events.handler_timeout = 120s']);

my $handlers = q{
	CREATE TABLE public.seen (consumer text, key text, pid int, saw_other boolean, kind text,
	                          part int);
	-- waits for advisory lock 42, which the test holds
	CREATE FUNCTION public.wait_lock(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.pg_advisory_xact_lock(42);
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	-- inside, waits (at most 60 s) until another worker is inside too, then
	-- until that one saw it as well (a rendezvous in pg_stat_activity)
	CREATE FUNCTION public.pair(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	DECLARE
		saw boolean := false;
	BEGIN
		PERFORM pg_catalog.set_config('application_name', 'pair inside', true);
		FOR i IN 1 .. 6000 LOOP
			PERFORM pg_catalog.pg_stat_clear_snapshot();	-- a fresh look each time
			saw := EXISTS (SELECT FROM pg_catalog.pg_stat_activity
			                WHERE application_name IN ('pair inside', 'pair saw')
			                  AND pid <> pg_catalog.pg_backend_pid());
			EXIT WHEN saw;
			PERFORM pg_catalog.pg_sleep(0.01);
		END LOOP;
		PERFORM pg_catalog.set_config('application_name', 'pair saw', true);
		FOR i IN 1 .. 6000 LOOP
			PERFORM pg_catalog.pg_stat_clear_snapshot();
			EXIT WHEN NOT saw OR EXISTS (SELECT FROM pg_catalog.pg_stat_activity
			                              WHERE application_name = 'pair saw'
			                                AND pid <> pg_catalog.pg_backend_pid());
			PERFORM pg_catalog.pg_sleep(0.01);
		END LOOP;
		INSERT INTO public.seen
		SELECT 'pair', e.key, w.pid, saw, w.kind, w.partition
		  FROM ordered_events.worker_status w WHERE w.pid = pg_catalog.pg_backend_pid();
		RETURN ROW(state, pg_catalog.to_jsonb(saw))::ordered_events.step;
	END $$;
	CREATE FUNCTION public.plain(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step
	$$;
};
$node->safe_psql('postgres', $handlers . q{
	SELECT ordered_events.create_stream('slow');
	SELECT ordered_events.create_stream('fast');
	SELECT ordered_events.create_consumer('blocked', handler => 'public.wait_lock(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('blocked', 'slow');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'the release worker runs');
my $release_pid = $node->safe_psql('postgres', q{
	SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'});

#
# 1. Isolation.
#
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(42)');
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('slow', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_catalog.pg_locks l
	  JOIN ordered_events.worker_status w ON w.pid = l.pid
	 WHERE l.locktype = 'advisory' AND NOT l.granted
	   AND w.kind = 'process' AND w.current_consumer = 'blocked' AND w.partition = 0}),
	'the processing worker of blocked waits in its handler for the advisory lock');
my $process_pid = $node->safe_psql('postgres', q{
	SELECT pid FROM ordered_events.worker_status WHERE kind = 'process' AND current_consumer = 'blocked'});
isnt($process_pid, $release_pid, 'the processing worker is not the release worker');

# An unrelated stream: 2 first (held back by the gap at 1), then 1.
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('fast', 2, 'k')});
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('fast', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream = 'fast'}, '2'),
	'fast: both events released while the handler of blocked waits');
is( $node->safe_psql('postgres', qq{
	SELECT (SELECT count(*) FROM ordered_events.results WHERE consumer = 'blocked') || '/' ||
	       (SELECT count(*) FROM pg_catalog.pg_locks
	         WHERE pid = $process_pid AND locktype = 'advisory' AND NOT granted) || '/' ||
	       (SELECT count(*) FROM pg_catalog.pg_locks
	         WHERE pid = pg_backend_pid() AND locktype = 'advisory')}),
	'0/1/0',
	'meanwhile blocked applied nothing and its worker still waits for the lock');
$holder->query_safe('SELECT pg_advisory_unlock(42)');
$holder->quit;
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'blocked'}, '1'),
	'blocked: its event is applied once the lock is free');

#
# 2. Two partitions at once: one key of each.
#
my ($k0, $k1) = split /\|/, $node->safe_psql('postgres', q{
	SELECT (SELECT 'k' || g FROM generate_series(1, 100) g
	         WHERE ordered_events.key_partition('k' || g, 2) = 0 LIMIT 1) || '|' ||
	       (SELECT 'k' || g FROM generate_series(1, 100) g
	         WHERE ordered_events.key_partition('k' || g, 2) = 1 LIMIT 1)});
$node->safe_psql('postgres', qq{
	SELECT ordered_events.create_stream('two');
	SELECT ordered_events.create_consumer('pair', partitions => 2,
	                                      handler => 'public.pair(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('pair', 'two');
	SELECT ordered_events.ingest('two', 1, '$k0');
	SELECT ordered_events.ingest('two', 2, '$k1');
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'pair'}, '2'),
	'pair: both partitions\' events applied');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE saw_other) || '/' || count(DISTINCT pid)
	  FROM public.seen WHERE consumer = 'pair'}),
	'2/2', 'each partition\'s handler saw the other partition\'s worker inside: two workers at once');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(kind || ':' || part, ',' ORDER BY part) FROM public.seen
	 WHERE consumer = 'pair'}),
	'process:0,process:1',
	'each handler ran in the processing worker of its partition (worker_status, read inside)');

#
# 3. Workers go away: idle (after 10 s with nothing to apply), or at once
#    when their consumer is dropped.
#
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE kind = 'process' AND current_consumer = 'blocked'}, '0'),
	'the idle processing worker of blocked exited');
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_consumer('gone', handler => 'public.plain(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('gone', 'fast');
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE kind = 'process' AND current_consumer = 'gone' AND pid IS NOT NULL}, '1'),
	'gone: a processing worker applies its events');
$node->safe_psql('postgres', q{SELECT ordered_events.drop_consumer('gone')});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status
	 WHERE kind = 'process' AND current_consumer = 'gone'}, '0'),
	'its worker exits once the consumer is dropped');

# DROP DATABASE while a processing worker of it sleeps in its handler (a
# session of app would stop the drop: the handler sleeps, bounded by
# handler_timeout, and says so in its application_name).
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION ordered_events;
	CREATE FUNCTION public.sleepy(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.set_config('application_name', 'sleepy', true);
		PERFORM pg_catalog.pg_sleep(110);
		RETURN ROW(state, pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('slow');
	SELECT ordered_events.create_consumer('sleepy', handler => 'public.sleepy(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('sleepy', 'slow');
	SELECT ordered_events.ingest('slow', 1, 'k');
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM pg_catalog.pg_stat_activity a
	  JOIN ordered_events.worker_status w ON w.pid = a.pid
	 WHERE a.datname = 'app' AND a.application_name = 'sleepy'
	   AND w.kind = 'process' AND w.current_consumer = 'sleepy'}, '1'),
	'app: its processing worker sleeps in its handler');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE app');
is($ret, 0, 'DROP DATABASE app succeeds while its processing worker is in a handler');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.worker_status WHERE database = 'app'}, '0'),
	'no worker of app is left');

is( $node->safe_psql('postgres', q{
	SELECT pid || '/' || (last_error IS NULL) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	"$release_pid/true", 'the same release worker served the whole test, no error');

$node->stop;
done_testing();
