
# ALTER EXTENSION ordered_events UPDATE from 0.1, on a database that holds
# data of every kind: nothing is lost or changed, the new library refuses
# the old objects with a hint until the update (never crashes on them), and
# the update brings 0.2's rules, then 0.3's.
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
	-- and a monitor's, to the function behind worker_status included
	CREATE ROLE dashboard;
	GRANT USAGE ON SCHEMA ordered_events TO dashboard;
	GRANT SELECT ON ordered_events.stream_stats, ordered_events.key_status,
	                ordered_events.worker_status TO dashboard;
	GRANT EXECUTE ON FUNCTION ordered_events.worker_status_internal() TO dashboard;

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

# key_status, every column, of the global streams and of the per-key one:
# 0.2 reads a per-key lane's last released seq from its progress, and a
# global stream's counts from counters once compacted.
sub key_status_sql
{
	my ($streams) = @_;
	return qq{
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s/%s/%s/%s/%s', stream, key, last_released_seq,
	                         buffered_count, earliest_buffered_seq, latest_buffered_seq,
	                         received_count, released_count, duplicate_count, last_event_received),
	                  ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status WHERE stream IN ($streams)};
}
my $global_key_status_sql = key_status_sql(q{'f', 'g'});
my $per_key_status_sql = key_status_sql(q{'k'});
my $global_key_status = $node->safe_psql('postgres', $global_key_status_sql);
my $per_key_status = $node->safe_psql('postgres', $per_key_status_sql);
is($global_key_status,
	'f/x/1/0///1/1/0/f f/y/2/0///1/1/0/f '
	  . 'g/k0/6/0///3/2/1/f g/k1/5/1/9/9/4/3/0/f',
	'0.1 key_status of the global streams');
is($per_key_status, 'k/a/1/1/3/3/2/1/0/f k/b/2/0///3/2/0/t',
	'0.1 key_status of the per-key stream');

# The 0.3 library refuses the 0.1 objects, and those of 0.2, with the way
# out; the chain goes through 0.2.
my $refused = qr/ERROR:  55000: the objects of extension "ordered_events" are not those of library version 0\.3\n.*\nHINT:  Run ALTER EXTENSION ordered_events UPDATE\./;
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT ordered_events.ingest('g', 11, 'k')});
like($stderr, $refused, 'before the update, the new library refuses to write, with a hint');
is($node->safe_psql('postgres', $state_sql), $before, '... and changes nothing');

$node->safe_psql('postgres', q{ALTER EXTENSION ordered_events UPDATE TO '0.2'});
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'}),
	'0.2', 'updated to 0.2');
($ret, $stdout, $stderr) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT ordered_events.ingest('g', 11, 'k')});
like($stderr, $refused, 'at 0.2, the 0.3 library refuses to write, with a hint');

$node->safe_psql('postgres', 'ALTER EXTENSION ordered_events UPDATE');
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'ordered_events'}),
	'0.3', 'updated to 0.3');
is($node->safe_psql('postgres', $state_sql), $before, 'every event, dead letter, skip and counter is kept');

# 0.3: the streams of 0.2 belong to the extension's owner and let PUBLIC
# read and write them, so 0.1's producer goes on (below).
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s', stream, owner, privileges), ' ' ORDER BY stream)
	  FROM ordered_events.streams}),
	'f/postgres/{=r/postgres,=a/postgres} g/postgres/{=r/postgres,=a/postgres} k/postgres/{=r/postgres,=a/postgres}',
	'0.2 streams: owned by the extension owner, read and write for PUBLIC');

# The update filled each lane's last released seq: the last event below its
# range_end (g: 6, the skipped 4 and the pending 9 are not; b: 2, its last).
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s', d.stream, p.lane, p.last_released_seq), ' '
	                  ORDER BY d.stream, p.lane)
	  FROM ordered_events.progress p JOIN ordered_events.stream_def d USING (stream_id)}),
	'f//2 g//6 k/a/1 k/b/2', 'the update filled progress.last_released_seq of every lane');
is($node->safe_psql('postgres', $per_key_status_sql), $per_key_status,
	'key_status of the per-key stream: the same last released seqs and counts as before');
is($node->safe_psql('postgres', $global_key_status_sql), $global_key_status,
	'key_status of the global streams: as before');
# Counting a global stream's released events into counters (compact()
# without a retention) changes none of it.
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.compact();
	SELECT string_agg(format('%s/%s', d.stream, p.counted_end), ' ' ORDER BY d.stream)
	  FROM ordered_events.progress p JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE p.lane = ''}),
	"0\nf/3 g/4", 'compact() deletes nothing without a retention, and counts f and g up to the skipped 4');
is($node->safe_psql('postgres', $global_key_status_sql), $global_key_status,
	'key_status of the global streams from the counters: as before');
is($node->safe_psql('postgres', $state_sql), $before, '... and everything else too');

# 0.2's rules.
is($node->safe_psql('postgres', q{
	SELECT has_table_privilege('producer', 'ordered_events.unprocessed', 'INSERT'),
	       has_function_privilege('public', 'ordered_events.worker_report()', 'EXECUTE'),
	       has_function_privilege('public', 'ordered_events.inbox_insert()', 'EXECUTE'),
	       (SELECT prosecdef FROM pg_proc WHERE oid = 'ordered_events.blockers(text)'::regprocedure),
	       has_function_privilege('public', 'ordered_events.drop_stream_as(text, regrole)', 'EXECUTE')}),
	'f|f|f|f|f', 'the producer may no longer forge dead letters; internal functions are not PUBLIC');

# worker_status_internal() became worker_report() (issue 13): the 0.1
# monitor, granted the old function, still reads worker_status with its new
# columns; a role with pg_monitor alone reads it and the metrics.
is($node->safe_psql('postgres', q{
	SELECT to_regprocedure('ordered_events.worker_status_internal()') IS NULL,
	       has_function_privilege('dashboard', 'ordered_events.worker_report()', 'EXECUTE');
	SET ROLE dashboard;
	SELECT count(*) >= 0, count(processed_total) >= 0 FROM ordered_events.worker_status;
	RESET ROLE;
	CREATE ROLE watcher IN ROLE pg_monitor;
	SET ROLE watcher;
	SELECT count(*) >= 0 FROM ordered_events.worker_status;
	SELECT value FROM ordered_events.metrics
	 WHERE metric = 'ordered_events_released_events_total' AND stream = 'g';
	RESET ROLE}),
	"t|t\nt|t\nt\n5",
	'the 0.1 monitor may still read worker_status, and pg_monitor reads it and the metrics');

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

# Consumers on the updated data (issue 11).  A consumer subscribed with
# start 'beginning' gets exactly the events released before the update and
# after it, each stream in its delivery order: g in seq order, k each key in
# seq order (0.1's release log rows in the order of their time, then key),
# f in seq order.  Released before the update: g 1,2,3,5,6 (on 2026-01-01,
# 4 skipped), f 1,2 (2026-01-03), k a/1, b/1, b/2 (2026-01-04), all logged
# on 2026-01-05; after it, by the release above: g 7,8,9,10 and k a/2, a/3
# (g 7, 8, 10 and a/2 with today's times).
$node->safe_psql('postgres', q{
	CREATE TABLE taken (read_no integer, n bigint, stream text, key text, seq bigint);
	SELECT ordered_events.create_consumer('up');
	SELECT ordered_events.subscribe('up', s, start => 'beginning') FROM unnest(ARRAY['g', 'k', 'f']) s;
	SELECT ordered_events.create_consumer('up2', 2);
	SELECT ordered_events.subscribe('up2', s) FROM unnest(ARRAY['g', 'k']) s;
});

is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s/%s', stream, consumed_count, unread_count,
	                         oldest_unread_at = '2026-01-05', last_read_at IS NULL), ' ' ORDER BY stream)
	  FROM ordered_events.consumers WHERE consumer = 'up';
	SELECT string_agg(format('%s/%s', stream,
	                         CASE stream WHEN 'f' THEN bias = '0'
	                                     ELSE bias > '-1 s' AND bias <= '0' END), ' ' ORDER BY stream)
	  FROM ordered_events.consumers WHERE consumer = 'up'}),
	"f/0/2/t/t g/0/9/t/t k/0/5/t/t\nf/t g/t k/t",
	'the consumers view counts the events released before and after the update as unread');

# Everything released before the update was aligned before anything
# released after it: the first ten events are those, in merged order.
is($node->safe_psql('postgres', q{
	INSERT INTO taken
	SELECT 1, n, stream, key, seq
	  FROM ordered_events.read('up', 10) WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n);
	SELECT string_agg(format('%s/%s/%s', stream, key, seq), ' ' ORDER BY n) FROM taken WHERE read_no = 1}),
	'g/k1/1 g/k0/2 g/k1/3 g/k1/5 g/k0/6 f/x/1 f/y/2 k/a/1 k/b/1 k/b/2',
	'a read takes the events released before the update in merged order');
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s', c.stream, c.consumed_count, c.unread_count,
	                         c.oldest_unread_at IS NOT DISTINCT FROM
	                             (SELECT r.released_at FROM ordered_events.released r
	                               WHERE r.stream = c.stream
	                                 AND (r.stream, r.key, r.seq) IN (('g', 'k', 7), ('k', 'a', 2)))),
	                  ' ' ORDER BY c.stream)
	  FROM ordered_events.consumers c WHERE c.consumer = 'up'}),
	'f/2/0/t g/5/4/t k/3/2/t',
	'... and the view counts them consumed; the oldest unread events are those released after the update');

is($node->safe_psql('postgres', q{
	INSERT INTO taken
	SELECT 2, n, stream, key, seq
	  FROM ordered_events.read('up') WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n);
	SELECT stream, string_agg(format('%s/%s', key, seq), ' ' ORDER BY read_no, n)
	  FROM taken GROUP BY stream ORDER BY stream;
	SELECT count(*), count(DISTINCT (stream, key, seq)) FROM taken;
	SELECT count(*) FROM ordered_events.released r
	 WHERE r.stream IN ('g', 'k', 'f')
	   AND NOT EXISTS (SELECT FROM taken t WHERE (t.stream, t.key, t.seq) = (r.stream, r.key, r.seq))}),
	"f|x/1 y/2\ng|k1/1 k0/2 k1/3 k1/5 k0/6 k/7 k/8 k1/9 k/10\nk|a/1 b/1 b/2 a/2 a/3\n16|16\n0",
	'the next read takes the events released after the update: each released event once, each stream in its order');
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s/%s', stream, consumed_count, unread_count,
	                         bias IS NULL AND oldest_unread_at IS NULL, last_read_at IS NOT NULL),
	                  ' ' ORDER BY stream)
	  FROM ordered_events.consumers WHERE consumer = 'up'}),
	'f/2/0/t/t g/9/0/t/t k/5/0/t/t',
	'the consumers view shows everything consumed, nothing unread');

# A consumer with two partitions counts the updated data per partition
# (subscribe counts the released events for a new partition count).
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s', partition, stream, unread_count), ' ' ORDER BY partition, stream)
	  FROM ordered_events.consumers WHERE consumer = 'up2';
	SELECT string_agg(format('%s/%s/%s', p, stream, n), ' ' ORDER BY p, stream)
	  FROM (SELECT ordered_events.key_partition(key, 2) AS p, stream, count(*) AS n
	          FROM ordered_events.released WHERE stream IN ('g', 'k') GROUP BY 1, 2) r;
	SELECT count(*), count(DISTINCT (r.stream, r.key, r.seq)),
	       bool_and(ordered_events.key_partition(r.key, 2) = p.p)
	  FROM generate_series(0, 1) p(p), LATERAL ordered_events.read('up2', 100, p.p) r;
	SELECT sum(consumed_count), sum(unread_count) FROM ordered_events.consumers WHERE consumer = 'up2'}),
	"0/g/6 0/k/2 1/g/3 1/k/3\n0/g/6 0/k/2 1/g/3 1/k/3\n14|14|t\n14|0",
	'a consumer with 2 partitions reads every updated event once, each from its key\'s partition');

# Ingest after the update records the arrival order; 0.1's events arrived
# in received_at order (then stream, key, seq): arrivals 1 .. 12.  The next
# read gets the new events.  k/c/1 and g/11 have the same alignment_ts and
# lag 0, so their stabilized_ts tie and arrival decides: k/c/1 first,
# although g is the older stream.  A consumer subscribed with start 'now'
# gets only the new events of g.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_consumer('upnow');
	SELECT ordered_events.subscribe('upnow', 'g', start => 'now');
	SET ROLE producer;
	SELECT ordered_events.ingest('k', 1, 'c', NULL, '2026-02-01 00:00:00', '2026-02-01 00:00:00');
	SELECT ordered_events.ingest('g', 11, 'k', NULL, '2026-02-01 00:00:00', '2026-02-01 00:00:00');
	SELECT ordered_events.ingest('g', 12, 'k', NULL, '2026-02-01 00:00:01', '2026-02-01 00:00:01');
	SELECT ordered_events.ingest('k', 4, 'a', NULL, '2026-01-31 23:59:59', '2026-01-31 23:59:59');
	RESET ROLE;
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s', d.stream, e.key, e.seq), ' ' ORDER BY e.arrival)
	  FROM ordered_events.event_store e JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE e.arrival <= 12;
	SELECT string_agg(format('%s/%s/%s', stream, key, seq), ' ' ORDER BY arrival)
	  FROM (SELECT d.stream, e.key, e.seq, e.arrival
	          FROM ordered_events.event_store e JOIN ordered_events.stream_def d USING (stream_id)
	         ORDER BY e.arrival DESC LIMIT 4) t;
	SELECT count(*) FROM ordered_events.event_store WHERE arrival > 12}),
	"g/k1/1 g/k0/2 g/k1/3 g/k1/5 g/k0/6 g/k1/9 f/x/1 f/y/2 k/a/1 k/a/3 k/b/1 k/b/2\n"
	  . "k/c/1 g/k/11 g/k/12 k/a/4\n8",
	'the arrival order: 0.1\'s events first, in received_at order; then every event accepted after the update, in order');
is($node->safe_psql('postgres', q{
	SELECT ordered_events.release();
	SELECT string_agg(format('%s/%s/%s/%s', stream, key, seq,
	                         extract(epoch FROM stabilized_ts - '2026-02-01 00:00:00')), ' ' ORDER BY n)
	  FROM ordered_events.read('up') WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n);
	SELECT string_agg(format('%s/%s/%s', stream, key, seq), ' ' ORDER BY n)
	  FROM ordered_events.read('upnow') WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n);
	SELECT string_agg(format('%s/%s/%s', stream, consumed_count, unread_count), ' ' ORDER BY consumer, stream)
	  FROM ordered_events.consumers WHERE consumer IN ('up', 'upnow')}),
	"4\nk/a/4/-1.000000 k/c/1/0.000000 g/k/11/0.000000 g/k/12/1.000000\ng/k/11 g/k/12\n"
	  . "f/2/0 g/11/0 k/7/0 g/2/0",
	'the next read gets the events ingested after the update, ties broken by arrival; start \'now\' gets only those');

# Handlers on the updated data (issue 12): a handler consumer subscribed
# with start 'beginning' applies every event released before and after the
# update, each key's in its order, with its state carried; the dead letter
# of its handler names the consumer and leaves the streams' counts of 0.1's
# dead letters as they were.  The handler keeps per key n and the list of
# its events; g/3 raises division by zero.  g's keys are k0, k1, k; k's are
# a, b, c.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.up_fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(pg_catalog.jsonb_build_object('n', coalesce((state ->> 'n')::integer, 0) + 1,
		                                         'seen', coalesce(state -> 'seen', '[]') || to_jsonb(e.seq)),
		           pg_catalog.jsonb_build_object('seq', e.seq,
		                                         'ok', 1 / CASE WHEN e.stream = 'g' AND e.seq = 3 THEN 0 ELSE 1 END))::ordered_events.step
	$$;
	SELECT ordered_events.create_consumer('uph', handler => 'public.up_fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('uph', s, start => 'beginning') FROM unnest(ARRAY['g', 'k']) s;
});
my $counts_sql = q{
	SELECT string_agg(format('%s/%s', stream, unprocessed_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats;
	SELECT string_agg(format('%s/%s/%s', stream, key, duplicate_count), ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status};
my $counts_before = $node->safe_psql('postgres', $counts_sql);
is($node->safe_psql('postgres', q{
	SELECT ordered_events.process('uph');
	SELECT ordered_events.process('uph')}),
	"18\n0", 'process() applies the 18 released events of g and k, then finds none');
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s %s/%s/%s', key, state, processed_count, error_count, last_seq),
	                  E'\n' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'uph'}),
	qq{a:{"n": 4, "seen": [1, 2, 3, 4]} 4/0/4\n}
	  . qq{b:{"n": 2, "seen": [1, 2]} 2/0/2\n}
	  . qq{c:{"n": 1, "seen": [1]} 1/0/1\n}
	  . qq{k:{"n": 5, "seen": [7, 8, 10, 11, 12]} 5/0/12\n}
	  . qq{k0:{"n": 2, "seen": [2, 6]} 2/0/6\n}
	  . qq{k1:{"n": 3, "seen": [1, 5, 9]} 4/1/9},
	'key_state: each key\'s events in order, old and new, the failed g/3 counted but not in the state');
is($node->safe_psql('postgres', q{
	SELECT count(*), count(DISTINCT (stream, seq, key)) FROM ordered_events.results WHERE consumer = 'uph';
	SELECT string_agg(format('%s/%s/%s/%s/%s', stream, seq, key, reason, detail), ' ')
	  FROM ordered_events.unprocessed WHERE consumer = 'uph';
	SELECT count(*) FROM ordered_events.unprocessed WHERE consumer IS NULL}),
	"17|17\ng/3/k1/exception_thrown/SQLSTATE 22012: division by zero\n3",
	'one result per event that held; the handler\'s dead letter names the consumer, 0.1\'s have none');
is($node->safe_psql('postgres', $counts_sql), $counts_before,
	'stream_stats and key_status do not count the handler\'s dead letter');

# Retention set after the update (issue 13).  compact() deletes the release
# steps that every consumer partition with events left to read has read
# past.  up2 has: in g, partition 1 stopped in the step of 7..10 (11 and 12
# unread); in k, partition 0 after b/2 (c/1 unread), partition 1 after a/3
# (a/4 unread).  So g's 0.1 steps (1..6) and k's step of a/1 go; the other
# consumers read everything and hold nothing back.
my $stats_sql = q{
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s/%s', stream, range_end, max_seen_seq, pending_count,
	                         released_count, unprocessed_count, skipped_count), ' ' ORDER BY stream)
	  FROM ordered_events.stream_stats;
} . key_status_sql(q{'f', 'g', 'k'});
my $stats = $node->safe_psql('postgres', $stats_sql);
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.alter_stream('g', retention => '0 s');
	SELECT ordered_events.alter_stream('k', retention => '0 s');
	SELECT ordered_events.compact() + ordered_events.compact() + ordered_events.compact();
	SELECT string_agg(format('%s/%s/%s', stream, key, seq), ' ' ORDER BY stream, key, seq)
	  FROM ordered_events.released WHERE stream IN ('g', 'k')}),
	"\n\n6\ng/k/7 g/k/8 g/k/10 g/k/11 g/k/12 g/k1/9 k/a/2 k/a/3 k/a/4 k/b/1 k/b/2 k/c/1",
	'with a retention of 0 s, compact() deletes the 6 events all consumers read past');
is($node->safe_psql('postgres', $stats_sql), $stats,
	'stream_stats and key_status count the deleted events as before');

# A consumer subscribed now starts at the first event kept.
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.create_consumer('late');
	SELECT ordered_events.subscribe('late', 'g');
	SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'late';
	SELECT string_agg(seq::text, ',' ORDER BY n)
	  FROM ordered_events.read('late') WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n)}),
	"\n\n6\n7,8,9,10,11,12", 'a consumer subscribed after the deletion reads the 6 events kept in g');

# Retried seqs of deleted events are still rejected.
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('g', 1, 'k1'), ordered_events.ingest('g', 6, 'k0'),
	       ordered_events.ingest('g', 4, 'k'), ordered_events.ingest('k', 1, 'a'),
	       ordered_events.ingest('k', 3, 'b');
	SELECT string_agg(format('%s/%s/%s/%s', stream, key, seq, detail), E'\n' ORDER BY stream, key, seq)
	  FROM ordered_events.unprocessed
	 WHERE consumer IS NULL AND (stream, seq) IN (('g', 1), ('g', 6), ('g', 4), ('k', 1))}),
	"duplicate|duplicate|gap_skipped|duplicate|after_last_event\n"
	  . "g/k/4/Seq 4 arrived after it was skipped (lost upstream).\n"
	  . "g/k0/6/Seq 6 was already released.\n"
	  . "g/k1/1/Seq 1 was already released.\n"
	  . "k/a/1/Seq 1 was already released.",
	'retried seqs of deleted events: duplicate, gap_skipped and after_last_event as before');

# up2 reads the rest; then every consumer has read everything and compact()
# deletes all of g and k.
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s', p.p, r.stream, r.key, r.seq), ' ' ORDER BY p.p, n)
	  FROM generate_series(0, 1) p(p),
	       LATERAL ordered_events.read('up2', 100, p.p) WITH ORDINALITY
	       AS r(stream, seq, key, payload, event_ts, alignment_ts, stabilized_ts, released_at, n);
	SELECT ordered_events.compact() + ordered_events.compact() + ordered_events.compact();
	SELECT count(*) FROM ordered_events.released WHERE stream IN ('g', 'k');
	SELECT string_agg(format('%s/%s', stream, value), ' ' ORDER BY stream) FROM ordered_events.metrics
	 WHERE metric = 'ordered_events_deleted_events_total'}),
	"0/k/c/1 1/k/a/4 1/g/k/11 1/g/k/12\n12\n0\nf/0 g/11 k/7",
	'once up2 read the rest, compact() deletes everything in g and k');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s/%s/%s/%s/%s', stream, key, last_released_seq, received_count,
	                         released_count, duplicate_count), ' ' ORDER BY stream, key)
	  FROM ordered_events.key_status WHERE stream IN ('g', 'k')}),
	'g/k/12/7/5/1 g/k0/6/4/2/2 g/k1/9/5/4/1 k/a/4/5/4/1 k/b/2/4/2/0 k/c/1/1/1/0',
	'key_status keeps the counts and last released seqs, with the retries');

done_testing();
