
# Background worker: handler consumers (docs/handlers.md; docs/architecture.md,
# rule 10).
#
# - The worker alone (no release(), no process()) releases events ingested
#   out of order and applies them to a handler consumer: each event once,
#   each key's events in seq order, the state carried from one to the next.
#   Nothing is applied while a gap holds the events back.
# - Derived events: a handler consumer appends its results to a fence
#   stream; the worker releases them and a second handler consumer
#   downstream applies them, each key's in the order of their parents
#   (Flow's lineage order).
# - release() by hand wakes the worker: with a naptime of an hour, events
#   that only a release() by hand released are applied, and so are the
#   events derived from them, well within that hour (recorded times).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('handler_worker', databases => 'postgres', naptime => 200);

# count_fn keeps per key n and the sum of payload v; its result names the
# event, the state after it, and the parent of a derived event.  derive_fn
# outputs {"parent": seq, "v": v} for each event.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.count_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(pg_catalog.jsonb_build_object('n', n, 'sum', sum),
		           pg_catalog.jsonb_build_object('seq', e.seq, 'n', n, 'sum', sum,
		                                         'parent', e.payload -> 'parent'))::ordered_events.step
		  FROM (SELECT coalesce((state ->> 'n')::bigint, 0) + 1 AS n,
		               coalesce((state ->> 'sum')::bigint, 0) + (e.payload ->> 'v')::bigint AS sum) s
	$$;
	CREATE FUNCTION public.derive_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(NULL, pg_catalog.jsonb_build_object('parent', e.seq, 'v', e.payload -> 'v'))::ordered_events.step
	$$;
	SELECT ordered_events.create_stream('src');
	SELECT ordered_events.create_stream('mid', gap_policy => 'fence');
	SELECT ordered_events.create_consumer('direct', handler => 'count_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('direct', 'src');
	SELECT ordered_events.create_consumer('deriver', handler => 'derive_fn(jsonb, ordered_events.event)',
	                                      output_stream => 'mid');
	SELECT ordered_events.subscribe('deriver', 'src');
	SELECT ordered_events.create_consumer('down', handler => 'count_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('down', 'mid');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');
my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

# How many events a consumer has applied, over its keys.
sub applied
{
	my ($consumer) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state
		 WHERE consumer = '$consumer'});
}

# The checks of a consumer with count_fn that applied $n events of keys
# k0..k4: each key's results in the order of $what (seq or parent), n
# counting 1, 2, 3 ..., sum the running sum; the state is the last result.
sub check_consumer
{
	my ($consumer, $n, $what) = @_;
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) || '/' || count(DISTINCT result ->> '$what')
		  FROM ordered_events.results WHERE consumer = '$consumer'}),
		"$n/$n", "$consumer: $n results, one per event");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE this <= prev) || '/' ||
		       count(*) FILTER (WHERE n <> row_number) || '/' ||
		       count(*) FILTER (WHERE sum <> running_sum)
		  FROM (SELECT (result ->> '$what')::bigint AS this, (result ->> 'n')::bigint AS n,
		               (result ->> 'sum')::bigint AS sum,
		               lag((result ->> '$what')::bigint) OVER w AS prev,
		               row_number() OVER w,
		               sum((result ->> '$what')::bigint) OVER w AS running_sum
		          FROM ordered_events.results WHERE consumer = '$consumer'
		        WINDOW w AS (PARTITION BY key ORDER BY position)) r}),
		'0/0/0', "$consumer: each key's events applied in $what order, the state carried");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM ordered_events.key_state k
		  LEFT JOIN LATERAL (
		       SELECT r.result FROM ordered_events.results r
		        WHERE r.consumer = k.consumer AND r.key = k.key
		        ORDER BY r.position DESC LIMIT 1) l ON true
		 WHERE k.consumer = '$consumer'
		   AND (k.state, k.processed_count, k.error_count) IS DISTINCT FROM
		       (jsonb_build_object('n', l.result -> 'n', 'sum', l.result -> 'sum'),
		        (l.result ->> 'n')::bigint, 0::bigint)}),
		'0', "$consumer: each key's state and counts are those of its last result");
	return;
}

#
# 1. Out of order: 2..50 arrive first (the gap at 1 holds them), then 1.
#    Payload v = seq, so a key's sum is the sum of its seqs.
#
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 'src', g, 'k' || (g % 5), jsonb_build_object('v', g)
	  FROM generate_series(50, 2, -1) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 1 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 'src'}),
	'the worker observed the gap at seq 1');
is(applied('direct') . '/' . applied('deriver'), '0/0', 'nothing applied while seq 1 is missing');

$node->safe_psql('postgres',
	q{SELECT ordered_events.ingest('src', 1, 'k1', '{"v": 1}')});
ok($node->poll_query_until('postgres', "SELECT " . q{
	(SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state WHERE consumer = 'direct')},
	'50'), 'direct: the worker applied the 50 events');
check_consumer('direct', 50, 'seq');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s', key, state), ' ' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'direct'}),
	join(' ', map {
		my $k = $_;
		my @s = grep { $_ % 5 == $k } 1 .. 50;
		my $sum = 0;
		$sum += $_ for @s;
		sprintf('k%d:{"n": %d, "sum": %d}', $k, scalar @s, $sum)
	} 0 .. 4),
	'direct: each key\'s state counts its events and sums their seqs');

#
# 2. Derived events: deriver appended 50 events to mid, the worker released
#    them and down applied them.
#
ok($node->poll_query_until('postgres', "SELECT " . q{
	(SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state WHERE consumer = 'down')},
	'50'), 'down: the worker released the derived events and applied them');
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT payload ->> 'parent') || '/' ||
	       min(seq) || '/' || max(seq) || '/' ||
	       count(*) FILTER (WHERE key <> 'k' || ((payload ->> 'parent')::bigint % 5))
	  FROM ordered_events.released WHERE stream = 'mid'}),
	'50/50/1/50/0', 'mid: 50 derived events released, one per parent, each with its parent\'s key');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT (payload ->> 'parent')::bigint AS parent,
	         lag((payload ->> 'parent')::bigint) OVER (PARTITION BY key ORDER BY seq) AS prev
	    FROM ordered_events.released WHERE stream = 'mid') m
	 WHERE parent <= prev}),
	'0', 'mid: each key\'s derived events in the order of their parents');
check_consumer('down', 50, 'parent');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s', key, state), ' ' ORDER BY key) FROM ordered_events.key_state
	 WHERE consumer = 'down'}),
	$node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s', key, state), ' ' ORDER BY key) FROM ordered_events.key_state
	 WHERE consumer = 'direct'}),
	'down: the same states as direct, through the derived events');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.unprocessed}),
	'0', 'no dead letters');

#
# 3. release() by hand wakes the worker.  With naptime = 1h, only a commit
#    can wake it.  Stream t skips a gap after 1 s; the worker observes the
#    gap when the ingest commits, and then sleeps: it never looks again by
#    itself.  A release() by hand skips the gap and releases 2..4; its
#    commit must wake the worker, which applies them (consumer tw) and the
#    events derived from them (tder appends to tmid, tdown applies those).
#
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('t', gap_policy => 'timeout', gap_timeout => '1 s');
	SELECT ordered_events.create_stream('tmid', gap_policy => 'fence');
	SELECT ordered_events.create_consumer('tw', handler => 'count_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('tw', 't');
	SELECT ordered_events.create_consumer('tder', handler => 'derive_fn(jsonb, ordered_events.event)',
	                                      output_stream => 'tmid');
	SELECT ordered_events.subscribe('tder', 't');
	SELECT ordered_events.create_consumer('tdown', handler => 'count_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('tdown', 'tmid');
	ALTER SYSTEM SET ordered_events.naptime = '1h';
	SELECT pg_reload_conf();
});
ok( $node->poll_query_until('postgres', q{
	SELECT setting FROM pg_settings WHERE name = 'ordered_events.naptime'},
	'3600000'),
	'naptime is 1h');
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 't', g, 'k' || (g % 2), jsonb_build_object('v', g) FROM generate_series(2, 4) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 1 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 't'}),
	'the worker observed the gap at seq 1 of t');
# The gap is older than its timeout: the next release step skips it.
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_since < now() - interval '1 s'
	  FROM ordered_events.stream_stats WHERE stream = 't'}),
	'the gap of t has timed out');
is(applied('tw'), '0', 'tw: nothing applied before the release by hand');
my $cycles = $node->safe_psql('postgres',
	"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

is($node->safe_psql('postgres', q{SELECT ordered_events.release('t')}),
	'3', 'release() by hand skips the gap and releases 2..4');
ok($node->poll_query_until('postgres', "SELECT " . q{
	(SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state WHERE consumer = 'tw')},
	'3'), 'tw: the worker applied the events that release() released, with naptime = 1h');
check_consumer('tw', 3, 'seq');
ok($node->poll_query_until('postgres', "SELECT " . q{
	(SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state WHERE consumer = 'tdown')},
	'3'), 'tdown: the events derived from them were released and applied too');
check_consumer('tdown', 3, 'parent');
# Recorded times, not the test's clock: the results came less than a
# naptime after the release.
is( $node->safe_psql('postgres', q{
	SELECT bool_and(r.produced_at < l.released_at + interval '1 hour')
	  FROM ordered_events.results r, ordered_events.released l
	 WHERE r.consumer IN ('tw', 'tdown') AND l.stream = 't' AND l.seq = 2}),
	't', 'the results were produced less than a naptime (1h) after the release');
cmp_ok( $node->safe_psql('postgres',
		"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	'>', $cycles, 'the worker ran a cycle after the release by hand');

is( $node->safe_psql('postgres', q{
	SELECT pid || '/' || (last_error IS NULL) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	"$worker_pid/true", 'the same worker served the whole test, no error');
ok(!$node->log_contains(qr/could not (process|release)/), 'no processing or release errors logged');

$node->stop;
done_testing();
