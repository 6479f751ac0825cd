
# Background worker: one huge backlog cannot starve the other streams.
#
# Stream "big" has a backlog of 400,000 events released in batches of 500
# (800 release transactions); while the worker works through it, a gap of
# stream "small" is filled.  Its events must be released long before the
# backlog is done, and both must end complete and in order.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('fairness');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'ordered_events'\n"
	  . "ordered_events.databases = 'postgres'\n"
	  . "ordered_events.naptime = 1000\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('big', max_release_batch => 500);
	SELECT ordered_events.create_stream('small');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'big', g, 'k' || (g % 100) FROM generate_series(2, 400001) g;
	SELECT ordered_events.ingest('small', 2, 'a');
});

ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND pid IS NOT NULL AND state IN ('idle', 'releasing')}),
	'worker for postgres is running');

# Fill big's gap: the worker starts on the backlog.  Then fill small's.
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('big', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end > 1 FROM ordered_events.ranges WHERE stream = 'big'}),
	'the worker is releasing the backlog');
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('small', 1, 'a')});

ok( $node->poll_query_until('postgres', q{
	SELECT range_end = 3 FROM ordered_events.ranges WHERE stream = 'small'}),
	'the small stream is released');
my $big_end = $node->safe_psql('postgres',
	q{SELECT range_end FROM ordered_events.ranges WHERE stream = 'big'});
cmp_ok($big_end, '<', 400002,
	"... while the backlog was still being released (big at $big_end)");

ok( $node->poll_query_until('postgres', q{
	SELECT range_end = 400002 FROM ordered_events.ranges WHERE stream = 'big'}),
	'the backlog is released completely');
is( $node->safe_psql('postgres', q{
	SELECT count(*) || ' ' || count(DISTINCT seq) || ' ' || min(seq) || ' ' || max(seq)
	  FROM ordered_events.released WHERE stream = 'big'}),
	'400001 400001 1 400001', 'every event of the backlog is released once');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(seq::text, ',' ORDER BY seq)
	  FROM ordered_events.released WHERE stream = 'small'}),
	'1,2', 'the small stream, in order');

done_testing();
