
# Failure policy under SIGKILL: a key held, another key's retry pending,
# the workers killed; then the data fixed, the key re-driven, the retry
# made due, and the workers killed again while they drain.  In the end
# nothing is lost, nothing applied twice, and each key's events were
# applied in seq order: each key's state lists its seqs in order, and it
# equals the key's released events.
#
# Consumers: held_c (on_error 'hold') and retry_c (max_attempts 5, a
# retry_delay of an hour: the test moves the stored clock, next_attempt_at,
# instead of waiting).  Their handler appends the seq to the key's list
# and raises while the key is in public.broken.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = OrderedEvents::node('handler_policy_crash', databases => 'postgres', naptime => 200,
	conf => ['restart_after_crash = on']);

$node->safe_psql('postgres', q{
	CREATE TABLE public.broken (key text PRIMARY KEY);
	CREATE FUNCTION public.list_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		IF EXISTS (SELECT FROM public.broken b WHERE b.key = e.key) THEN
			RAISE EXCEPTION 'key % is broken', e.key;
		END IF;
		RETURN ROW(pg_catalog.jsonb_build_object('seqs',
		               coalesce(state -> 'seqs', '[]'::jsonb) || pg_catalog.to_jsonb(e.seq)),
		           pg_catalog.to_jsonb(e.seq))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('c');
	SELECT ordered_events.create_consumer('held_c', 2, handler => 'list_fn(jsonb, ordered_events.event)',
	                                      on_error => 'hold');
	SELECT ordered_events.create_consumer('retry_c', handler => 'list_fn(jsonb, ordered_events.event)',
	                                      max_attempts => 5, retry_delay => '1 hour');
	SELECT ordered_events.subscribe(c, 'c') FROM unnest(ARRAY['held_c', 'retry_c']) c;
});

# Kill one of the workers with SIGKILL: the postmaster reinitializes and
# the launcher starts them again.
sub crash
{
	my ($what) = @_;
	my $pid = $node->safe_psql('postgres',
		'SELECT pid FROM ordered_events.worker_status WHERE pid IS NOT NULL LIMIT 1');
	my $log_offset = -s $node->logfile;
	is(kill('KILL', $pid), 1, "SIGKILL sent to a worker (pid $pid) $what");
	ok( $node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
		"the postmaster reinitialized $what");
	ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) > 0 FROM ordered_events.worker_status
		 WHERE pid IS NOT NULL AND pid <> $pid AND cycles > 0}),
		"the workers run again $what");
}

my $applied_sql = q{
	SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state};

# 1000 events over 10 keys; k3 is broken from its first event on.
$node->safe_psql('postgres', q{
	INSERT INTO public.broken VALUES ('k3');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' || (g % 10) FROM generate_series(1, 1000) g;
});
ok( $node->poll_query_until('postgres', $applied_sql, 2 * 900),
	'every event of the other keys was applied by both consumers');
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT count(*) FROM ordered_events.held WHERE consumer = 'held_c' AND key = 'k3')
	     + (SELECT count(*) FROM ordered_events.key_state
	         WHERE consumer = 'retry_c' AND key = 'k3' AND attempts = 1
	           AND next_attempt_at > now() + interval '50 minutes')}, 2),
	'k3 is held for held_c, and waits an hour for its retry for retry_c');

crash('while a key is held and a retry is pending');

is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s:%s:%s', h.consumer, h.seq, h.attempts, k.parked), ' ')
	  FROM ordered_events.held h
	  JOIN ordered_events.consumer_def c ON c.consumer = h.consumer
	  JOIN ordered_events.handler_state k ON k.consumer_id = c.consumer_id AND k.key = h.key}),
	'held_c:3:1:100', 'after the crash k3 is still held at seq 3, its 100 events parked');
is( $node->safe_psql('postgres', q{
	SELECT attempts || '/' || (next_attempt_at > now() + interval '50 minutes') || '/' || held
	  FROM ordered_events.key_state WHERE consumer = 'retry_c' AND key = 'k3'}),
	'1/true/false', 'after the crash the retry of k3 still waits, not due');

# More events, k3's among them: they wait behind.
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'c', g, 'k' || (g % 10) FROM generate_series(1001, 2000) g;
});
ok($node->poll_query_until('postgres', $applied_sql, 2 * 1800),
	'the other keys went on with the new events');

# Fixed: k3 re-driven for held_c, its retry made due for retry_c; kill a
# worker as soon as some of k3's events are applied again.
$node->safe_psql('postgres', q{
	DELETE FROM public.broken;
	SELECT ordered_events.redrive('held_c', 'k3');
	UPDATE ordered_events.handler_state SET next_attempt_at = now() - interval '1 s'
	 WHERE key = 'k3' AND next_attempt_at IS NOT NULL;
});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) > 0 FROM ordered_events.key_state
	 WHERE key = 'k3' AND processed_count > 0}),
	'k3 is being applied again');
crash('while the re-driven and retried events are applied');

ok($node->poll_query_until('postgres', $applied_sql, 2 * 2000),
	'both consumers applied all 2 x 2000 events');
for my $c ('held_c', 'retry_c')
{
	is( $node->safe_psql('postgres', qq{
		WITH truth AS (
		  SELECT key, jsonb_agg(seq ORDER BY seq) AS seqs, count(*) AS n
		    FROM ordered_events.released WHERE stream = 'c' GROUP BY key)
		SELECT count(*) || '/' ||
		       count(*) FILTER (WHERE k.key IS NULL OR t.key IS NULL
		                           OR k.state <> jsonb_build_object('seqs', t.seqs)
		                           OR k.processed_count <> t.n OR k.held OR k.attempts <> 0
		                           OR k.next_attempt_at IS NOT NULL)
		  FROM truth t FULL JOIN (SELECT * FROM ordered_events.key_state WHERE consumer = '$c') k
		    USING (key)}),
		'10/0', "$c: each key's state lists exactly its released seqs, in seq order");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) || '/' || count(DISTINCT seq) || '/' ||
		       count(*) FILTER (WHERE seq <= prev)
		  FROM (SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY position) AS prev
		          FROM ordered_events.results WHERE consumer = '$c') r}),
		'2000/2000/0', "$c: one result per event, each key's in seq order");
}
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM ordered_events.handler_parked) || '/' ||
	       (SELECT count(*) FROM ordered_events.unprocessed) || '/' ||
	       (SELECT count(*) FROM ordered_events.held)}),
	'0/0/0', 'nothing parked, no dead letter, nothing held');

$node->stop;
done_testing();
