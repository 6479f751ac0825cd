
# Writing on a hot standby is refused like any write: 25006 (read-only
# transaction), never an internal error, for ingest(), append(), the inbox,
# release() and skip_gap(); reading works there.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = OrderedEvents::node('primary', allows_streaming => 1);
$primary->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
	SELECT ordered_events.ingest('s', 2, 'k');
});
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

for my $sql (
	"SELECT ordered_events.ingest('s', 1, 'k')",
	"SELECT ordered_events.append('f', 'k')",
	"INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('s', 1, 'k')",
	"SELECT ordered_events.release('s')",
	"SELECT ordered_events.release()",
	"SELECT ordered_events.skip_gap('s', 1, 'lost')")
{
	my ($ret, $stdout, $stderr) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$sql");
	like($stderr, qr/ERROR:  25006: cannot execute .* in a read-only transaction/,
		"standby: $sql fails with 25006");
}

is( $standby->safe_psql('postgres', q{
	SELECT pending_count || ' ' || range_end FROM ordered_events.stream_stats WHERE stream = 's'}),
	'1 1', 'standby: the statistics are readable');

done_testing();
