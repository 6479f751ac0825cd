
# ALTER EXTENSION ordered_events UPDATE from 0.1, on a database that holds
# data of every kind: nothing is lost or changed, the new library serves
# the old objects until the update, and the update brings 0.2's rules.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ordered_events'\n");
$node->start;

# 0.1, with the grants its README gave a producer.
$node->safe_psql('postgres', q{
	CREATE EXTENSION ordered_events VERSION '0.1';
	CREATE ROLE producer;
	GRANT USAGE ON SCHEMA ordered_events TO producer;
	GRANT EXECUTE ON FUNCTION ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean)
	   TO producer;
	GRANT SELECT ON ordered_events.stream_def, ordered_events.gap_skips TO producer;
	GRANT INSERT ON ordered_events.unprocessed, ordered_events.inbox TO producer;

	SELECT ordered_events.create_stream('g');
	SELECT ordered_events.create_stream('k', 'per_key', gap_policy => 'timeout', gap_timeout => '1 hour');
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
	SELECT ordered_events.ingest('g', s, 'k' || s % 2, jsonb_build_object('n', s))
	  FROM unnest(ARRAY[1, 2, 3, 5, 6, 9]) s;
	SELECT ordered_events.ingest('g', 2, 'k0');
	SELECT ordered_events.ingest('k', 1, 'a'), ordered_events.ingest('k', 3, 'a'),
	       ordered_events.ingest('k', 1, 'b'), ordered_events.ingest('k', 2, 'b', last_event => true),
	       ordered_events.ingest('k', 3, 'b');
	SELECT ordered_events.append('f', 'x'), ordered_events.append('f', 'y');
	SELECT ordered_events.release();
	SELECT ordered_events.skip_gap('g', 4, 'lost upstream');
});

# Everything a user can see.
my $state_sql = q{
	SELECT string_agg(format('%s/%s/%s/%s', stream, seq, key, payload), ' ' ORDER BY stream, key, seq)
	  FROM ordered_events.released;
	SELECT string_agg(format('%s/%s/%s', stream, seq, key), ' ' ORDER BY stream, key, seq)
	  FROM ordered_events.pending;
	SELECT string_agg(format('%s/%s/%s/%s', stream, seq, key, reason), ' ' ORDER BY stream, key, seq, reason)
	  FROM ordered_events.unprocessed;
	SELECT string_agg(format('%s/%s..%s/%s', stream, gap_start, gap_end, reason), ' ' ORDER BY stream, gap_start)
	  FROM ordered_events.skipped_gaps;
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s/%s', stream, range_end, max_seen_seq, pending_count,
	                         released_count, unprocessed_count, skipped_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats;
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s', stream, key, last_released_seq, buffered_count,
	                         received_count, duplicate_count), ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status;
	SELECT string_agg(format('%s/%s..%s', stream, range_start, range_end), ' ' ORDER BY stream)
	  FROM ordered_events.ranges;
};
my $before = $node->safe_psql('postgres', $state_sql);
like($before, qr{^f/1/x/ f/2/y/ g/2/k0/\{"n": 2\}}, 'the 0.1 database holds released events');

# The 0.2 library serves the 0.1 objects.
is($node->safe_psql('postgres', q{
	SET ROLE producer;
	SELECT ordered_events.ingest('g', 11, 'k');
	RESET ROLE;
	SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'}),
	"accepted\n0.1", 'the new library ingests into the 0.1 objects');
$before = $node->safe_psql('postgres', $state_sql);

$node->safe_psql('postgres', 'ALTER EXTENSION ordered_events UPDATE');
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'}),
	'0.2', 'updated to 0.2');
is($node->safe_psql('postgres', $state_sql), $before, 'every event, dead letter, skip and counter is kept');

# 0.2's rules.
is($node->safe_psql('postgres', q{
	SELECT has_table_privilege('producer', 'ordered_events.unprocessed', 'INSERT'),
	       has_function_privilege('public', 'ordered_events.worker_status_internal()', 'EXECUTE'),
	       has_function_privilege('public', 'ordered_events.inbox_insert()', 'EXECUTE'),
	       (SELECT prosecdef FROM pg_proc WHERE oid = 'ordered_events.blockers(text)'::regprocedure),
	       (SELECT prosecdef FROM pg_proc WHERE oid = 'ordered_events.drop_stream(text)'::regprocedure)}),
	'f|f|f|f|t', 'the producer may no longer forge dead letters; internal functions are not PUBLIC');

# The streams go on.
is($node->safe_psql('postgres', q{
	SET ROLE producer;
	SELECT ordered_events.ingest('g', 7, 'k'), ordered_events.ingest('g', 8, 'k'),
	       ordered_events.ingest('g', 10, 'k'), ordered_events.ingest('g', 7, 'k');
	RESET ROLE;
	SELECT ordered_events.ingest('k', 2, 'a');
	SELECT ordered_events.release();
	SELECT range_end FROM ordered_events.ranges WHERE stream = 'g';
	SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ordered_events.released
	 WHERE stream = 'k' AND key = 'a';
	SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'g' AND seq = 7}),
	"accepted|accepted|accepted|duplicate\naccepted\n7\n12\n1,2,3\n1",
	'after the update the streams release and reject as before');

done_testing();
