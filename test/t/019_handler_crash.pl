
# Background worker: SIGKILL while it applies handler consumers.
#
# 20000 events wait behind a gap; filling it makes the worker release them
# and apply them to three handler consumers, 1000 events per transaction
# per partition.  Once it has applied some, the worker is killed with
# SIGKILL: the postmaster reinitializes, a new worker goes on.  In the end
# nothing is lost and nothing applied twice: each key's state equals a
# recomputation from scratch over released (count and sum per key), every
# event has one result (or one derived event), the positions are unique,
# and each key's results are in seq order.
#
# Consumers: sum1 (1 partition) and sum3 (3 partitions) keep per key n and
# the sum of payload v; deriver appends {"parent": seq, "v": v} to the
# fence stream mid for each event.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $n = 20000;
my $node = OrderedEvents::node('handler_crash', databases => 'postgres', naptime => 200,
	conf => ['restart_after_crash = on']);

$node->safe_psql('postgres', q{
	CREATE FUNCTION public.sum_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	DECLARE
		n bigint := coalesce((state ->> 'n')::bigint, 0) + 1;
		s bigint := coalesce((state ->> 's')::bigint, 0) + (e.payload ->> 'v')::bigint;
	BEGIN
		RETURN ROW(pg_catalog.jsonb_build_object('n', n, 's', s),
		           pg_catalog.jsonb_build_object('seq', e.seq, 'n', n, 's', s))::ordered_events.step;
	END $$;
	CREATE FUNCTION public.derive_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(NULL, pg_catalog.jsonb_build_object('parent', e.seq, 'v', e.payload -> 'v'))::ordered_events.step
	$$;
	SELECT ordered_events.create_stream('c');
	SELECT ordered_events.create_stream('mid', gap_policy => 'fence');
	SELECT ordered_events.create_consumer('sum1', handler => 'sum_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.create_consumer('sum3', 3, handler => 'sum_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.create_consumer('deriver', handler => 'derive_fn(jsonb, ordered_events.event)',
	                                      output_stream => 'mid');
	SELECT ordered_events.subscribe(c, 'c') FROM unnest(ARRAY['sum1', 'sum3', 'deriver']) c;
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');

# The backlog: 2..n with a gap at 1; v = seq % 1000, keys k0..k99.
$node->safe_psql('postgres', qq{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 'c', g, 'k' || (g % 100), jsonb_build_object('v', g % 1000)
	  FROM generate_series(2, $n) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT first_gap_start = 1 AND first_gap_since IS NOT NULL
	  FROM ordered_events.stream_stats WHERE stream = 'c'}),
	'the worker observed the gap at seq 1: the backlog waits');

my $applied_sql = q{
	SELECT coalesce(sum(processed_count), 0) FROM ordered_events.key_state};
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
my $log_offset = -s $node->logfile;

# Fill the gap; kill the worker as soon as it has applied something.
$node->safe_psql('postgres', "SELECT ordered_events.ingest('c', 1, 'k1', '{\"v\": 1}')");
my $applied = 0;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	$applied = $node->safe_psql('postgres', $applied_sql);
	last if $applied > 0;
	usleep(10_000);
}
cmp_ok($applied, '>', 0, 'the worker started applying');
is(kill('KILL', $pid), 1, "SIGKILL sent to the worker (pid $pid)");
# Where the kill landed (information only: the checks hold either way).
diag "applied (of 3 x $n) when the kill was sent: at least $applied";

ok( $node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset),
	'the postmaster reinitialized after the crash');
ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $pid AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker runs after the crash restart');
diag 'results of sum1 and sum3 committed before the crash: '
  . $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.results
	 WHERE produced_at < (SELECT started_at FROM ordered_events.worker_status
	                       WHERE database = 'postgres' AND kind = 'release')});

# The new worker finishes: every consumer applied n events, and down the
# line mid holds n derived events.
ok($node->poll_query_until('postgres', $applied_sql, 3 * $n),
	"the worker applied the 3 x $n events");
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s', consumer, consumed_count, unread_count), ' ' ORDER BY consumer)
	  FROM (SELECT consumer, sum(consumed_count) AS consumed_count, sum(unread_count) AS unread_count
	          FROM ordered_events.consumers GROUP BY consumer) c}),
	"deriver/$n/0 sum1/$n/0 sum3/$n/0", 'every consumer consumed every event, none unread');

# The states equal a recomputation from scratch over released.
for my $c ('sum1', 'sum3')
{
	is( $node->safe_psql('postgres', qq{
		WITH truth AS (
		  SELECT key, count(*) AS n, sum((payload ->> 'v')::bigint) AS s, max(seq) AS last_seq
		    FROM ordered_events.released WHERE stream = 'c' GROUP BY key)
		SELECT count(*) || '/' ||
		       count(*) FILTER (WHERE k.key IS NULL OR t.key IS NULL
		                           OR k.state <> jsonb_build_object('n', t.n, 's', t.s)
		                           OR k.processed_count <> t.n OR k.error_count <> 0
		                           OR k.last_seq <> t.last_seq)
		  FROM truth t FULL JOIN (SELECT * FROM ordered_events.key_state WHERE consumer = '$c') k
		    USING (key)}),
		'100/0', "$c: each key's state, count and last seq equal a recomputation from released");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) || '/' || count(DISTINCT seq) || '/' || count(DISTINCT position) || '/' ||
		       min(seq) || '/' || max(seq)
		  FROM ordered_events.results WHERE consumer = '$c'}),
		"$n/$n/$n/1/$n", "$c: one result per event, no result twice, positions unique");
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE seq <= prev) || '/' ||
		       count(*) FILTER (WHERE (result ->> 'n')::bigint <> row_number)
		  FROM (SELECT seq, result, lag(seq) OVER w AS prev, row_number() OVER w
		          FROM ordered_events.results WHERE consumer = '$c'
		        WINDOW w AS (PARTITION BY key ORDER BY position)) r}),
		'0/0', "$c: each key's results in seq order, each applied to the state before it");
}

# The derived events: one per parent, each key's in the order of its
# parents.  (Their seqs need not be dense: seqs that the killed step had
# allocated are a gap the fence policy skips.)
ok($node->poll_query_until('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream = 'mid'}, $n),
	"mid: the $n derived events are released");
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT payload ->> 'parent') || '/' || count(DISTINCT seq)
	  FROM ordered_events.event_store e JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'mid'}),
	"$n/$n/$n", 'mid: one derived event per parent, none twice');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.pending WHERE stream = 'mid'}),
	'0', 'mid: nothing pending');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT (payload ->> 'parent')::bigint AS parent,
	         lag((payload ->> 'parent')::bigint) OVER (PARTITION BY key ORDER BY seq) AS prev
	    FROM ordered_events.released WHERE stream = 'mid') m
	 WHERE parent <= prev}),
	'0', 'mid: each key\'s derived events in the order of their parents');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM ordered_events.unprocessed'),
	'0', 'no dead letters');

$node->stop;
done_testing();
