
# ALTER EXTENSION ordered_events UPDATE from 0.1, on a database that holds
# data of every kind: nothing is lost or changed, the new library refuses
# the old objects with a hint until the update (never crashes on them), and
# the update brings 0.2's rules.
#
# The 0.2 library cannot write 0.1's tables, so the 0.1 state is written
# into them directly: exactly the rows 0.1's ingest(), append(), release()
# and skip_gap() left for the calls in the comment below.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('upgrade', extension => 0);

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
});

# What 0.1 stored for:
#   ingest('g', s, 'k' || s % 2, {"n": s}) for s in 1, 2, 3, 5, 6, 9; ingest('g', 2, 'k0');
#   ingest('k', 1, 'a'), ('k', 3, 'a'), ('k', 1, 'b'), ('k', 2, 'b', last_event), ('k', 3, 'b');
#   append('f', 'x'), append('f', 'y'); release(); skip_gap('g', 4, 'lost upstream')
$node->safe_psql('postgres', q{
	CREATE FUNCTION pg_temp.id(s text) RETURNS integer LANGUAGE sql
		AS $$ SELECT stream_id FROM ordered_events.stream_def WHERE stream = s $$;
	INSERT INTO ordered_events.events (stream_id, seq, event_ts, alignment_ts, received_at, key, payload)
	SELECT pg_temp.id('g'), s, '2026-01-01'::timestamptz + s * interval '1 s',
	       '2026-01-01'::timestamptz + s * interval '1 s', '2026-01-02'::timestamptz, 'k' || s % 2,
	       jsonb_build_object('n', s)
	  FROM unnest(ARRAY[1, 2, 3, 5, 6, 9]) s
	UNION ALL
	SELECT pg_temp.id('f'), s, '2026-01-03'::timestamptz, '2026-01-03'::timestamptz, '2026-01-03'::timestamptz, k, NULL::jsonb
	  FROM (VALUES (1, 'x'), (2, 'y')) v(s, k);
	INSERT INTO ordered_events.key_events
	    (stream_id, seq, event_ts, alignment_ts, received_at, key, payload, last_event)
	VALUES (pg_temp.id('k'), 1, '2026-01-04', '2026-01-04', '2026-01-04', 'a', NULL, false),
	       (pg_temp.id('k'), 3, '2026-01-04', '2026-01-04', '2026-01-04', 'a', NULL, false),
	       (pg_temp.id('k'), 1, '2026-01-04', '2026-01-04', '2026-01-04', 'b', NULL, false),
	       (pg_temp.id('k'), 2, '2026-01-04', '2026-01-04', '2026-01-04', 'b', NULL, true);
	INSERT INTO ordered_events.unprocessed (stream, seq, key, payload, event_ts, reason, detail, received_at)
	VALUES ('g', 2, 'k0', NULL, '2026-01-02', 'duplicate', 'Seq 2 was already received.', '2026-01-02'),
	       ('k', 3, 'b', NULL, '2026-01-04', 'after_last_event', 'The last event of this key is seq 2.',
	        '2026-01-04');
	UPDATE ordered_events.stream_progress
	   SET range_end = 7, released_count = 5, max_event_ts = '2026-01-01 00:00:06',
	       gap_start = 7, gap_end = 8, gap_first_seen = '2026-01-05'
	 WHERE stream_id = pg_temp.id('g');
	UPDATE ordered_events.stream_progress SET range_end = 3, released_count = 2,
	       max_event_ts = '2026-01-03'
	 WHERE stream_id = pg_temp.id('f');
	SELECT setval(format('ordered_events.fence_seq_%s', pg_temp.id('f')), 2);
	INSERT INTO ordered_events.key_progress
	    (stream_id, key, range_end, released_count, last_event_seq, gap_start, gap_end,
	     gap_first_seen, updated_at)
	VALUES (pg_temp.id('k'), 'a', 2, 1, NULL, 2, 2, '2026-01-05', '2026-01-05'),
	       (pg_temp.id('k'), 'b', 3, 2, 2, NULL, NULL, NULL, '2026-01-05');
	INSERT INTO ordered_events.release_log (stream_id, seq_start, seq_end, released_at)
	VALUES (pg_temp.id('g'), 1, 4, '2026-01-05'), (pg_temp.id('g'), 4, 7, '2026-01-06'),
	       (pg_temp.id('f'), 1, 3, '2026-01-05');
	INSERT INTO ordered_events.key_release_log (stream_id, key, seq_start, seq_end, released_at)
	VALUES (pg_temp.id('k'), 'a', 1, 2, '2026-01-05'), (pg_temp.id('k'), 'b', 1, 3, '2026-01-05');
	INSERT INTO ordered_events.gap_skips (stream_id, key, gap_start, gap_end, reason, skipped_at)
	VALUES (pg_temp.id('g'), NULL, 4, 4, 'lost upstream', '2026-01-06');
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

# The 0.2 library refuses the 0.1 objects, with the way out.
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT ordered_events.ingest('g', 11, 'k')});
like($stderr, qr/ERROR:  55000: the objects of extension "ordered_events" are not those of library version 0\.2\n.*\nHINT:  Run ALTER EXTENSION ordered_events UPDATE\./,
	'before the update, the new library refuses to write, with a hint');
is($node->safe_psql('postgres', $state_sql), $before, '... and changes nothing');

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
	"accepted|accepted|accepted|duplicate\naccepted\n6\n11\n1,2,3\n1",
	'after the update the streams release and reject as before');

done_testing();
