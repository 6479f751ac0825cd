
# reset_consumer() while a processing worker applies the consumer
# (docs/consuming.md, "Rebuilding a handler's states").  The worker locks a
# consumer partition without waiting (oe_consumer_lock_nowait()); the reset
# locks every partition, waiting.  So a reset issued while the worker's step
# is inside the handler waits for that step to commit, then forgets what it
# applied; the worker takes the partitions again only once the reset has
# committed, and rebuilds from the beginning.  Once it is done, the key
# states equal those of a consumer created afresh over the same stream, no
# event is a dead letter and no worker reports an error.
#
# The handler appends each event's seq to its key's state, after reading a
# row of public.gate FOR SHARE: a session that holds that row FOR UPDATE
# keeps the worker's step inside the handler, observed in pg_locks.
#
# Then a handler call stopped past its time limit (docs/handlers.md, "A
# time limit"): its worker is stopped, and the next step would make the
# event a dead letter without calling the handler.  A reset waiting for
# that worker's step gets the partition when the worker exits, and forgets
# the stopped call with the rest: the rebuild calls the handler for the
# event again (a sequence counts the calls), and, the handler fixed
# meanwhile, applies it; no dead letter.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('reset_worker', databases => 'postgres', naptime => 200,
	conf => ['ordered_events.handler_timeout = 0']);

$node->safe_psql('postgres', q{
	CREATE TABLE public.gate (id int PRIMARY KEY);
	INSERT INTO public.gate VALUES (1);
	CREATE FUNCTION public.seqs(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM FROM public.gate WHERE id = 1 FOR SHARE;
		RETURN ROW(coalesce(state, '[]') || pg_catalog.to_jsonb(e.seq), NULL)::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_consumer('c', partitions => 2,
	                                      handler => 'public.seqs(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c', 's');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 's', g, 'k' || (g % 4) FROM generate_series(1, 8) g;
});

ok( $node->poll_query_until('postgres', q{
	SELECT sum(processed_count) FROM ordered_events.key_state WHERE consumer = 'c'}, '8'),
	'the worker applied the first eight events');

# Hold the gate: the worker's next step stops inside the handler.
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('SELECT FROM public.gate WHERE id = 1 FOR UPDATE');
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 's', g, 'k' || (g % 4) FROM generate_series(9, 12) g});
ok( $node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM pg_catalog.pg_locks l
	                 JOIN ordered_events.worker_status w ON w.pid = l.pid
	                WHERE NOT l.granted AND w.kind = 'process' AND w.current_consumer = 'c')}),
	'a processing worker of c waits inside the handler');

# The reset waits for that step.
my $resetter = $node->background_psql('postgres');
OrderedEvents::send_query($resetter, "SELECT ordered_events.reset_consumer('c');");
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query LIKE '%reset_consumer(''c'')%'}),
	'reset_consumer() waits for the step in progress');

# The step goes on and commits; the reset then commits, and the worker
# applies everything again from the beginning.
$locker->query_safe('COMMIT');
$locker->quit;
is($resetter->query_safe('SELECT 1'), "12\n1", 'the reset returned every event as unread');
$resetter->quit;

ok( $node->poll_query_until('postgres', q{
	SELECT sum(unread_count) = 0 AND sum(consumed_count) = 24
	  FROM ordered_events.consumers WHERE consumer = 'c'}),
	'the worker applied the twelve events again');

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_consumer('fresh', partitions => 2,
	                                      handler => 'public.seqs(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('fresh', 's');
});
ok( $node->poll_query_until('postgres', q{
	SELECT sum(processed_count) FROM ordered_events.key_state WHERE consumer = 'fresh'}, '12'),
	'a fresh consumer applied the twelve events');

is( $node->safe_psql('postgres', q{
	SELECT string_agg(key || ' ' || state::text || ' ' || processed_count, ', ' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'c'}),
	'k0 [4, 8, 12] 3, k1 [1, 5, 9] 3, k2 [2, 6, 10] 3, k3 [3, 7, 11] 3',
	'each key holds each of its events once, in order');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	    (SELECT key, state, last_stream, last_seq, processed_count, error_count, attempts, held
	       FROM ordered_events.key_state WHERE consumer = 'c'
	     EXCEPT
	     SELECT key, state, last_stream, last_seq, processed_count, error_count, attempts, held
	       FROM ordered_events.key_state WHERE consumer = 'fresh')
	    UNION ALL
	    (SELECT key, state, last_stream, last_seq, processed_count, error_count, attempts, held
	       FROM ordered_events.key_state WHERE consumer = 'fresh'
	     EXCEPT
	     SELECT key, state, last_stream, last_seq, processed_count, error_count, attempts, held
	       FROM ordered_events.key_state WHERE consumer = 'c')) d}),
	'0', 'the rebuilt key states equal the fresh consumer\'s');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM ordered_events.unprocessed) || '/'
	       || (SELECT count(*) FROM ordered_events.worker_status WHERE last_error IS NOT NULL)}),
	'0/0', 'no dead letter, no worker error');

#
# 2. A stopped call is forgotten.
#
$node->safe_psql('postgres', q{
	CREATE TABLE public.hang (on_ boolean NOT NULL);
	INSERT INTO public.hang VALUES (true);
	CREATE SEQUENCE public.loop_calls;
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		IF e.payload ->> 't' = 'loop' THEN
			PERFORM pg_catalog.nextval('public.loop_calls');
			WHILE (SELECT on_ FROM public.hang) LOOP
				BEGIN
					PERFORM pg_catalog.pg_sleep(0.1);
				EXCEPTION WHEN query_canceled THEN
					NULL;
				END;
			END LOOP;
		END IF;
		RETURN ROW(pg_catalog.jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
		           NULL)::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('s2');
	SELECT ordered_events.create_consumer('stuck', handler => 'public.h(jsonb, ordered_events.event)',
	                                      handler_timeout => '2 s');
	SELECT ordered_events.subscribe('stuck', 's2');
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 's2', g, 'k' || g, jsonb_build_object('t', CASE WHEN g = 2 THEN 'loop' END)
	  FROM generate_series(1, 3) g;
});
ok( $node->poll_query_until('postgres', q{SELECT last_value FROM public.loop_calls}, '1'),
	'the handler of stuck loops in a processing worker');

$resetter = $node->background_psql('postgres');
$resetter->query_safe('BEGIN');
OrderedEvents::send_query($resetter, "SELECT ordered_events.reset_consumer('stuck');");
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE wait_event_type = 'Lock' AND query LIKE '%reset_consumer(''stuck'')%'}),
	'reset_consumer() waits for the step whose handler loops');
# The worker is stopped; the reset gets the partition and returns.
is($resetter->query_safe('SELECT 1'), "3\n1", 'the reset returned the three events as unread');
$node->safe_psql('postgres', 'UPDATE public.hang SET on_ = false');
$resetter->query_safe('COMMIT');
$resetter->quit;

ok( $node->poll_query_until('postgres', q{
	SELECT sum(processed_count) FROM ordered_events.key_state WHERE consumer = 'stuck'}, '3'),
	'the worker rebuilt stuck');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(key || ':' || processed_count || '/' || error_count, ' ' ORDER BY key)
	       || ' calls ' || (SELECT last_value FROM public.loop_calls)
	       || ' dead ' || (SELECT count(*) FROM ordered_events.unprocessed WHERE consumer = 'stuck')
	  FROM ordered_events.key_state WHERE consumer = 'stuck'}),
	'k1:1/0 k2:1/0 k3:1/0 calls 2 dead 0',
	'the stopped event was called again and applied, no dead letter');

$node->stop;
done_testing();
