
# Background worker: one huge backlog cannot starve the other streams.
#
# Stream "big" has a backlog of 400,000 events released in batches of 500
# (800 release steps), with seqs 1 and 200,001 missing; stream "small" misses
# seq 1.  Filling big's seq 1 sets the worker on the first half.  Then one
# transaction fills big's 200,001 and small's 1: from that commit on, big
# has at least 200,000 events (400 steps) to go and small a single step.
# Small's step must come before big's last one, and both must end complete
# and in order.
#
# Whether the worker is still busy with the first half at that commit
# depends on the machine's speed; the outcome does not: the check compares
# the release times the extension records (lane_release_log, one row per
# release step), after everything is done.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('fairness', databases => 'postgres', naptime => 1000);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('big', max_release_batch => 500);
	SELECT ordered_events.create_stream('small');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'big', g, 'k' || (g % 100) FROM generate_series(2, 400001) g
	 WHERE g <> 200001;
	SELECT ordered_events.ingest('small', 2, 'a');
});

ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release' AND pid IS NOT NULL AND state IN ('idle', 'releasing')}),
	'worker for postgres is running');

# Fill big's first gap: the worker starts on the backlog.
$node->safe_psql('postgres', q{SELECT ordered_events.ingest('big', 1, 'k')});
ok( $node->poll_query_until('postgres', q{
	SELECT range_end > 1 FROM ordered_events.ranges WHERE stream = 'big'}),
	'the worker is releasing the backlog');

# Fill big's second gap and small's gap in one transaction: when it
# commits, big has at least 400 steps to go, however far the worker got.
is( $node->safe_psql('postgres', q{
	BEGIN;
	SELECT ordered_events.ingest('big', 200001, 'k')
	    || ' ' || ordered_events.ingest('small', 1, 'a');
	COMMIT;
}), 'accepted accepted', "big's second gap and small's gap filled together");

ok( $node->poll_query_until('postgres', q{
	SELECT range_end = 3 FROM ordered_events.ranges WHERE stream = 'small'}),
	'the small stream is released');
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

# The release steps as the extension recorded them.  Small took one step;
# big had steps after it, so small did not wait for the backlog.
is( $node->safe_psql('postgres', q{
	SELECT string_agg(l.seq_start || '-' || l.seq_end, ',')
	  FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'small'}),
	'1-3', 'the small stream was released by one step');
my ($big_steps_after, $big_events_after) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*), coalesce(sum(l.seq_end - l.seq_start), 0)
	  FROM ordered_events.lane_release_log l
	  JOIN ordered_events.stream_def d USING (stream_id)
	 WHERE d.stream = 'big'
	   AND l.released_at > (SELECT max(s.released_at)
	                          FROM ordered_events.lane_release_log s
	                          JOIN ordered_events.stream_def sd USING (stream_id)
	                         WHERE sd.stream = 'small')});
cmp_ok($big_steps_after, '>', 0,
	"small was released before big's last release step "
	  . "($big_steps_after steps, $big_events_after events of big came after it)");

done_testing();
