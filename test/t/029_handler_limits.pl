
# A handler that does not return (docs/architecture.md, rule 17;
# docs/handlers.md, "A time limit"): issue 20, item 3.
#
# Consumer "stuck" has handler_timeout 300 ms.  Its handler, for the event
# of key k2, loops for ever and catches every cancel.
# - Its processing worker is stopped (a FATAL, which no exception block
#   catches) about a grace period after the limit, the release worker
#   starts another, and the event becomes a dead letter (57014, "its worker
#   was stopped") without being called again: its calls are counted by a
#   sequence, which no rollback undoes.  The key's error counts, its state
#   stays; the other events are applied; other streams are released, and
#   another consumer is processed; the release worker was never stopped.
# - drop_consumer() of a consumer whose handler loops waits for the step,
#   and completes once the processing worker is stopped.
# - pg_cancel_backend() of a processing worker while a handler, within its
#   limit, catches the cancel and returns: the step still ends (nothing is
#   applied, the worker logs it), and its next step applies the event.
# - process() by hand, in a database without a worker: the session that
#   called it is stopped; its next process() makes the event (of a per-key
#   stream, told from another key's event of the same seq) a dead letter
#   without calling the handler.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('handler_limits', databases => 'postgres', naptime => 200);

# The handler of every consumer here.  Payload "t":
#   "loop": counted in public.loop_calls, then sleeps in steps of 0.2 s for
#           ever, catching every cancel;
#   "swallow": counted in public.swallow_calls; its first call sleeps 60 s
#           and catches the cancel, then returns, later calls return;
#   else returns.
# Its result is the event's seq.
my $handler = q{
	CREATE SEQUENCE public.loop_calls;
	CREATE SEQUENCE public.swallow_calls;
	CREATE SEQUENCE public.cancels;
	CREATE FUNCTION public.h(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		IF e.payload ->> 't' = 'loop' THEN
			PERFORM pg_catalog.nextval('public.loop_calls');
			LOOP
				BEGIN
					PERFORM pg_catalog.pg_sleep(0.2);
				EXCEPTION WHEN query_canceled THEN
					PERFORM pg_catalog.nextval('public.cancels');
				END;
			END LOOP;
		ELSIF e.payload ->> 't' = 'swallow' THEN
			IF pg_catalog.nextval('public.swallow_calls') = 1 THEN
				BEGIN
					PERFORM pg_catalog.pg_sleep(60);
				EXCEPTION WHEN query_canceled THEN
					PERFORM pg_catalog.nextval('public.cancels');
				END;
			END IF;
		END IF;
		RETURN ROW(pg_catalog.jsonb_build_object('n', coalesce((state ->> 'n')::int, 0) + 1),
		           pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
};
$node->safe_psql('postgres', $handler . q{
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('other');
	SELECT ordered_events.create_consumer('stuck', handler => 'public.h(jsonb, ordered_events.event)',
	                                      handler_timeout => '300ms');
	SELECT ordered_events.subscribe('stuck', 's');
	SELECT ordered_events.create_consumer('fine', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('fine', 'other');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');
my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

# The pid of the processing worker of a consumer that runs now.
sub process_pid
{
	my ($consumer) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM ordered_events.worker_status
		 WHERE kind = 'process' AND current_consumer = '$consumer' AND pid IS NOT NULL})
	  or return undef;
	return $node->safe_psql('postgres', qq{
		SELECT pid FROM ordered_events.worker_status
		 WHERE kind = 'process' AND current_consumer = '$consumer'});
}

#
# 1. The worker applies k1, k2 (loops), k3.
#
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 's', g, 'k' || g, jsonb_build_object('t', CASE WHEN g = 2 THEN 'loop' END)
	  FROM generate_series(1, 3) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.unprocessed WHERE consumer = 'stuck'}, '1'),
	'the endless call became a dead letter');
is( $node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$worker_pid, 'the release worker is not the one stopped');
like( $node->safe_psql('postgres', q{
	SELECT seq || ' ' || reason || ' ' || detail FROM ordered_events.unprocessed
	 WHERE consumer = 'stuck'}),
	qr/^2 exception_thrown SQLSTATE 57014: handler did not return within \d+ ms, past its limit of 300 ms; its worker was stopped$/,
	'the dead letter of k2 says the limit and that the worker was stopped');
is( $node->safe_psql('postgres', q{
	SELECT last_value || '/' || is_called FROM public.loop_calls;
	SELECT (SELECT last_value FROM public.cancels) > 1}),
	"1/true\nt", 'k2\'s handler was called once, and cancelled more than once');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s %s/%s', key, coalesce(state::text, 'NULL'),
	                         processed_count, error_count), ' ' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'stuck';
	SELECT string_agg(seq::text, ',' ORDER BY position) FROM ordered_events.results
	 WHERE consumer = 'stuck'}),
	"k1:{\"n\": 1} 1/0 k2:NULL 1/1 k3:{\"n\": 1} 1/0\n1,3",
	'k2 counts an error and keeps its state; k1 and k3 are applied');
ok( $node->log_contains(
		qr/FATAL:  terminating background worker "ordered_events processing" due to administrator command\n.*DETAIL:  Handler public\.h\(jsonb,ordered_events\.event\) of consumer "stuck" did not return within 1000 ms after its limit of 300 ms; the event \(seq 2 of stream s\) becomes a dead letter\./
	),
	'the processing worker\'s FATAL says why');

# The release worker releases, and another consumer is processed.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('other', 1, 'o1');
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'fine'}, '1'),
	'another stream is released and applied to another consumer');
is( $node->safe_psql('postgres', q{
	SELECT last_value || '/' || is_called FROM public.loop_calls}),
	'1/true', 'k2 was not called again');

#
# 2. drop_consumer() of a consumer whose handler loops.
#
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES ('s', 4, 'k4', '{"t": "loop"}');
});
ok( $node->poll_query_until('postgres', q{SELECT last_value FROM public.loop_calls}, '2'),
	'the worker calls the next endless handler');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT ordered_events.drop_consumer('stuck')},
	timeout => $PostgreSQL::Test::Utils::timeout_default);
is($ret, 0, 'drop_consumer() of that consumer completes');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.consumer_def WHERE consumer = 'stuck';
	SELECT count(*) FROM ordered_events.unprocessed WHERE consumer = 'stuck';
	SELECT count(*) FROM ordered_events.handler_state hs
	 WHERE NOT EXISTS (SELECT FROM ordered_events.consumer_def d WHERE d.consumer_id = hs.consumer_id)}),
	"0\n0\n0", 'the consumer, its dead letters and its states are gone');
is( $node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$worker_pid, 'the release worker was never stopped');

#
# 3. pg_cancel_backend() while a handler within its limit swallows it.
#
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('sw');
	SELECT ordered_events.create_consumer('swallow', handler => 'public.h(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('swallow', 'sw');
	INSERT INTO ordered_events.inbox (stream, seq, key, payload) VALUES ('sw', 1, 'w1', '{"t": "swallow"}');
});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT last_value FROM public.swallow_calls) = 1 AND wait_event = 'PgSleep'
	  FROM pg_stat_activity
	 WHERE pid = (SELECT pid FROM ordered_events.worker_status
	               WHERE kind = 'process' AND current_consumer = 'swallow')}),
	'the processing worker of swallow sleeps in the handler that will swallow the cancel');
my $swallow_pid = process_pid('swallow');
is( $node->safe_psql('postgres', qq{SELECT pg_cancel_backend($swallow_pid)}),
	't', 'cancel the worker');
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.results WHERE consumer = 'swallow'}, '1'),
	'the event is applied by a later step');
is( $node->safe_psql('postgres', q{
	SELECT last_value FROM public.swallow_calls;
	SELECT processed_count || '/' || error_count FROM ordered_events.key_state WHERE consumer = 'swallow'}),
	"2\n1/0", 'the handler was called again: the cancelled step changed nothing; no dead letter');
ok( $node->log_contains(
		qr/ordered_events could not process consumer "swallow" partition 0: canceling statement due to user request/),
	'the cancelled step is logged');
is( $node->safe_psql('postgres', q{
	SELECT pid FROM ordered_events.worker_status WHERE kind = 'process' AND current_consumer = 'swallow'}),
	$swallow_pid, 'the same processing worker goes on');

#
# 4. process() by hand, in database "hand" that no worker serves: a
#    per-key stream, a/1 loops, b/1 does not.
#
$node->safe_psql('postgres', 'CREATE DATABASE hand');
$node->safe_psql('hand', 'CREATE EXTENSION ordered_events;' . $handler . q{
	SELECT ordered_events.create_stream('p', sequencing => 'per_key');
	SELECT ordered_events.create_consumer('c', handler => 'public.h(jsonb, ordered_events.event)',
	                                      handler_timeout => '300ms');
	SELECT ordered_events.subscribe('c', 'p');
	SELECT ordered_events.ingest('p', 1, 'a', '{"t": "loop"}'), ordered_events.ingest('p', 1, 'b');
	SELECT ordered_events.release('p');
});
($ret, $stdout, $stderr) = $node->psql('hand', q{SELECT ordered_events.process('c')});
isnt($ret, 0, 'process() of the endless handler does not return');
like($stderr,
	qr/FATAL:  terminating connection due to administrator command\nDETAIL:  Handler public\.h\(jsonb,ordered_events\.event\) of consumer "c" did not return within 1000 ms after its limit of 300 ms; the event \(seq 1 of stream p\) becomes a dead letter\./,
	'the session that called it was stopped, and is told why');
is($node->safe_psql('hand', q{SELECT ordered_events.process('c')}), '2',
	'the next process() applies both events');
like( $node->safe_psql('hand', q{
	SELECT string_agg(format('%s/%s:%s', key, seq, detail), ' ') FROM ordered_events.unprocessed;
	SELECT string_agg(key || '/' || seq, ' ') FROM ordered_events.results;
	SELECT last_value FROM public.loop_calls}),
	qr{^a/1:SQLSTATE 57014: handler did not return within \d+ ms, past its limit of 300 ms; the session that called process\(\) was stopped\nb/1\n1$},
	'a/1 is a dead letter, not called again; b/1 of the same seq is applied');

$node->stop;
done_testing();
