
# A fence stream restored into another cluster skips its dead gap.
#
# The fence of a release step is an xid of the cluster it ran in.  The
# source cluster is far ahead in xids (pg_resetwal -x); a dump taken while
# a gap waits for its fence is restored into a fresh cluster, whose xid
# counter has not reached the stored fence.  The transaction that held the
# missing seq is of the source cluster, so the gap is dead: the first
# release step in the new cluster must prove it and release what follows,
# not wait for an xid the new cluster has not assigned yet.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $source = OrderedEvents::node('source', start => 0);
command_ok([ 'pg_resetwal', '-x', '30000', $source->data_dir ], 'source: xids start at 30000');
$source->start;
$source->safe_psql('postgres', q{
	CREATE EXTENSION ordered_events;
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
});

# Seq 1 is held by an open transaction; seq 2 commits; a step sees the gap
# and records its fence.
my $holder = $source->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT ordered_events.append('f', 'held')");
$source->safe_psql('postgres', q{SELECT ordered_events.append('f', 'b')});
is($source->safe_psql('postgres', q{
	SELECT ordered_events.release('f');
	SELECT ordered_events.release('f');
	SELECT gap_start || '..' || gap_end FROM ordered_events.gaps('f');
	SELECT fence_xid IS NOT NULL FROM ordered_events.progress}),
	"0\n0\n1..1\nt", 'source: the gap waits for its fence');

my $dump = $source->basedir . '/dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $source->connstr('postgres') ],
	'dump the source');
$holder->quit;
$source->stop;

my $target = OrderedEvents::node('target', extension => 0);
command_ok([ 'pg_restore', '-d', $target->connstr('postgres'), $dump ],
	'restore into a fresh cluster');

is($target->safe_psql('postgres', q{
	SELECT ordered_events.release('f');
	SELECT string_agg(seq || ' ' || key, ', ' ORDER BY seq) FROM ordered_events.released;
	SELECT gap_start || '..' || gap_end || ' ' || reason FROM ordered_events.skipped_gaps}),
	"1\n2 b\n1..1 fence: every transaction that could fill it has ended",
	'target: the fence proves the gap dead and releases what follows');
is($target->safe_psql('postgres', q{SELECT ordered_events.append('f', 'c')}),
	'3', 'target: append() goes on after the restored seqs');

done_testing();
