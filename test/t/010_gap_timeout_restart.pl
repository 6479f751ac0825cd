
# gap_policy 'timeout': the timeout clock survives a server restart.
#
# A gap is skipped once it has been missing for gap_timeout, counted from
# first_seen, when a release step first observed it.  first_seen is stored,
# so a restart neither resets nor loses it: the gap is skipped about
# gap_timeout after the ORIGINAL first_seen, not gap_timeout after the
# restart, and never before first_seen + gap_timeout.
#
# Stream t (timeout 4 s) gets seqs 1 and 3; the worker (naptime 100 ms)
# releases 1 and observes the gap at 2.  About 1.5 s later the server is
# restarted.  Then:
# - gaps() shows the same first_seen (when checked before the timeout);
# - the worker alone skips 2 (no release() call) and releases 3;
# - first_seen + 4 s <= skipped_at <= first_seen + 4 s + 1.5 s, and
#   skipped_at < restart + 4 s (a clock restarted at the restart would skip
#   it 4 s after the new worker first saw it, which is after that);
# - a late seq 2 is gap_skipped at once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('gap_timeout_restart');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'ordered_events'\n"
	  . "ordered_events.databases = 'postgres'\n"
	  . "ordered_events.naptime = 100\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('t', gap_policy => 'timeout',
	                                    gap_timeout => '4 s');
});

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres'}),
	'worker is running');

$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('t', 1, 'k');
	SELECT ordered_events.ingest('t', 3, 'k');
});

# The worker observes the gap: gaps() shows when.
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 AND bool_and(gap_start = 2 AND gap_end = 2 AND first_seen IS NOT NULL)
	  FROM ordered_events.gaps('t')}),
	'the worker observed the gap at 2 (first_seen set)');
my $first_seen = $node->safe_psql('postgres',
	"SELECT first_seen FROM ordered_events.gaps('t')");
note "first_seen: $first_seen";
is( $node->safe_psql('postgres', q{
	SELECT range_end || '/' || pending_count
	  FROM ordered_events.stream_stats WHERE stream = 't'}),
	'2/1', 'seq 1 released, seq 3 pending behind the gap');

# Restart about 1.5 s after first_seen: well before the timeout, and late
# enough that a clock restarted by the restart would skip visibly later.
ok( $node->poll_query_until('postgres', qq{
	SELECT clock_timestamp() >= '$first_seen'::timestamptz + interval '1.5 s'}),
	'1.5 s have passed since first_seen');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream = 't'}),
	'0', 'nothing skipped before the restart');

my $old_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres'");
$node->restart;

# Right after the restart the gap keeps its first_seen.  (If the restart
# took so long that the timeout has passed, the gap may be skipped already:
# then the timing checks below are the proof.)
my ($seen_after, $before_timeout) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT coalesce((SELECT first_seen::text FROM ordered_events.gaps('t')), 'none'),
	       clock_timestamp() < '$first_seen'::timestamptz + interval '4 s'});
SKIP:
{
	skip 'the restart outlasted the timeout', 1 unless $before_timeout eq 't';
	is($seen_after, $first_seen, 'first_seen is unchanged by the restart');
}
my $restarted_at = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
note "restarted at: $restarted_at";

ok( $node->poll_query_until('postgres', qq{
	SELECT pid IS NOT NULL AND pid <> $old_pid
	  FROM ordered_events.worker_status WHERE database = 'postgres'}),
	'a new worker runs after the restart');

# The worker alone skips the gap once the timeout has passed.  Wait until
# it did, or until well past the deadline (first_seen + 4 s + 1.5 s), so
# that a worker that never skips fails here quickly.
ok( $node->poll_query_until('postgres', qq{
	SELECT EXISTS (SELECT FROM ordered_events.skipped_gaps WHERE stream = 't')
	    OR clock_timestamp() > '$first_seen'::timestamptz + interval '15 s'}),
	'waited for the skip');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(gap_start || '..' || gap_end || ' ' || reason, ',')
	  FROM ordered_events.skipped_gaps WHERE stream = 't'}),
	'2..2 gap_timeout expired', 'the worker skipped 2..2 for the timeout');

my $skipped_at = $node->safe_psql('postgres',
	"SELECT skipped_at FROM ordered_events.skipped_gaps WHERE stream = 't'");
note "skipped_at: $skipped_at ("
  . $node->safe_psql('postgres', qq{
	SELECT extract(epoch FROM (SELECT skipped_at FROM ordered_events.skipped_gaps
	                            WHERE stream = 't') - '$first_seen'::timestamptz)})
  . " s after first_seen)";
sub skipped_at_is
{
	my ($condition, $what) = @_;
	is( $node->safe_psql('postgres', qq{
		SELECT coalesce(bool_and($condition), false)
		  FROM ordered_events.skipped_gaps WHERE stream = 't'}),
		't', $what);
}
skipped_at_is("skipped_at >= '$first_seen'::timestamptz + interval '4 s'",
	'not skipped before first_seen + gap_timeout');
skipped_at_is("skipped_at <= '$first_seen'::timestamptz + interval '5.5 s'",
	'skipped within 1.5 s after first_seen + gap_timeout');
skipped_at_is("skipped_at < '$restarted_at'::timestamptz + interval '4 s'",
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
