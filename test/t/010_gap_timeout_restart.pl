
# gap_policy 'timeout': the timeout clock survives a server restart.
#
# A gap is skipped once it has been missing for gap_timeout, counted from
# first_seen, when a release step first observed it.  first_seen is stored,
# so a restart neither resets nor loses it: the gap is skipped gap_timeout
# after the ORIGINAL first_seen, not gap_timeout after the restart, and
# never before first_seen + gap_timeout.
#
# Nothing waits for the timeout, so no outcome depends on the machine's
# speed: gap_timeout is an hour, and the test moves the stored first_seen
# back instead of sleeping, as if the gap had been missing that long.
#
# Stream t gets seqs 1 and 3; the worker (naptime 100 ms) releases 1 and
# observes the gap at 2.  first_seen is moved back 30 minutes (half the
# timeout) and the server is restarted.  Then:
# - gaps() shows the same (moved) first_seen, after the new worker ran
#   cycles, and nothing is skipped: the clock was neither reset nor lost;
# - first_seen is moved back 30 more minutes: the gap has now been missing
#   for gap_timeout, counted from the original first_seen, but only seconds
#   since the restart.  The worker alone skips 2 (no release() call) and
#   releases 3; skipped_at is after that move (not before first_seen +
#   gap_timeout) and long before restart + gap_timeout (a clock restarted by
#   the restart would skip it only then);
# - a late seq 2 is gap_skipped at once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('gap_timeout_restart', databases => 'postgres', naptime => 100);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('t', gap_policy => 'timeout',
	                                    gap_timeout => '1 hour');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');

# Move the stored first_seen of t's gap back; returns the clock time of the
# move.
sub age_gap
{
	my ($span) = @_;
	return $node->safe_psql('postgres', qq{
		UPDATE ordered_events.progress
		   SET gap_first_seen = gap_first_seen - interval '$span'
		 WHERE stream_id = (SELECT stream_id FROM ordered_events.stream_def
		                     WHERE stream = 't')
		   AND gap_first_seen IS NOT NULL
		RETURNING clock_timestamp()});
}

sub first_seen
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(first_seen::text, 'none') FROM ordered_events.gaps('t')");
}

sub skipped
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(gap_start || '..' || gap_end || ' ' || reason, ','), 'none')
		  FROM ordered_events.skipped_gaps WHERE stream = 't'});
}

# Wait until the worker of postgres has run $n more cycles.
sub wait_cycles
{
	my ($n) = @_;
	my $c = $node->safe_psql('postgres',
		"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
	return $node->poll_query_until('postgres', qq{
		SELECT cycles >= $c + $n FROM ordered_events.worker_status
		 WHERE database = 'postgres' AND kind = 'release'});
}

$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('t', 1, 'k');
	SELECT ordered_events.ingest('t', 3, 'k');
});

# The worker observes the gap: gaps() shows when.
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 AND bool_and(gap_start = 2 AND gap_end = 2 AND first_seen IS NOT NULL)
	  FROM ordered_events.gaps('t')}),
	'the worker observed the gap at 2 (first_seen set)');
is( $node->safe_psql('postgres', q{
	SELECT range_end || '/' || pending_count
	  FROM ordered_events.stream_stats WHERE stream = 't'}),
	'2/1', 'seq 1 released, seq 3 pending behind the gap');

# Missing for half the timeout: not skipped, however often the worker looks.
ok(age_gap('30 minutes'), 'first_seen moved back 30 minutes');
my $first_seen = first_seen();
note "first_seen: $first_seen";
ok(wait_cycles(3), 'the worker ran 3 more cycles');
is(skipped(), 'none', 'nothing skipped before the restart');

my $old_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
$node->restart;
my $restarted_at = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
note "restarted at: $restarted_at";

ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $old_pid AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'a new worker runs after the restart');
ok(wait_cycles(3), 'the new worker ran 3 more cycles');
is(first_seen(), $first_seen, 'first_seen is unchanged by the restart');
is(skipped(), 'none', 'nothing skipped after the restart while the timeout is not reached');

# Missing for gap_timeout since the original first_seen: the worker alone
# skips the gap.
my $expired_at = age_gap('30 minutes');
ok($expired_at, 'first_seen moved back 30 more minutes: the timeout is reached');
ok( $node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM ordered_events.skipped_gaps WHERE stream = 't')}),
	'the worker skipped the gap');
is(skipped(), '2..2 gap_timeout expired', 'the worker skipped 2..2 for the timeout');

my $skipped_at = $node->safe_psql('postgres',
	"SELECT skipped_at FROM ordered_events.skipped_gaps WHERE stream = 't'");
note "skipped_at: $skipped_at";
sub skipped_at_is
{
	my ($condition, $what) = @_;
	is( $node->safe_psql('postgres', qq{
		SELECT coalesce(bool_and($condition), false)
		  FROM ordered_events.skipped_gaps WHERE stream = 't'}),
		't', $what);
}
skipped_at_is("skipped_at >= '$expired_at'::timestamptz",
	'not skipped before first_seen + gap_timeout');
skipped_at_is("skipped_at < '$restarted_at'::timestamptz + interval '1 hour'",
	'the timeout was not counted from the restart');

# 3 is released behind the skipped 2; nothing is left.
is( $node->safe_psql('postgres', q{
	SELECT range_end || '/' || pending_count
	  FROM ordered_events.stream_stats WHERE stream = 't'}),
	'4/0', 'range_end 4, nothing pending');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(seq::text, ',' ORDER BY ord)
	  FROM (SELECT seq, row_number() OVER () AS ord
	          FROM ordered_events.released WHERE stream = 't') r}),
	'1,3', 'released 1,3 in order');
is( $node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('t', 2, 'k')}),
	'gap_skipped', 'a late seq 2 is gap_skipped');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(seq || ' ' || reason, ',')
	  FROM ordered_events.unprocessed WHERE stream = 't'}),
	'2 gap_skipped', 'the late seq 2 is in unprocessed');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.released WHERE stream = 't' AND seq = 2}),
	'0', 'the late seq 2 is not released');

$node->stop;
done_testing();
