
# Background worker: pg_upgrade of a cluster that preloads ordered_events.
#
# pg_upgrade runs both clusters in binary-upgrade mode (postgres -b), where
# the library starts no worker; the upgrade succeeds, and on the new
# cluster the worker serves the upgraded data: what was released stays
# released, what was pending is released once its gap is filled, exactly
# once and in order.

use strict;
use warnings;

use Cwd;
use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my %worker = (databases => 'postgres', naptime => 200);

my $old = OrderedEvents::node('old', %worker);

$old->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('u');
	INSERT INTO ordered_events.inbox (stream, seq, key)
	SELECT 'u', g, 'k' || (g % 3) FROM generate_series(1, 1000) g WHERE g <> 501;
});
ok($old->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'u'", '501'),
	'old cluster: released up to the gap at 501');

my $new = OrderedEvents::node('new', %worker, start => 0);

$old->stop;

my $bindir = $old->config_data('--bindir');
my $cwd = getcwd();
chdir $PostgreSQL::Test::Utils::tmp_check;
command_ok(
	[
		'pg_upgrade', '--no-sync', '--retain',
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-b', $bindir, '-B', $bindir,
		'-s', $new->host,
		'-p', $old->port, '-P', $new->port
	],
	'pg_upgrade succeeds with ordered_events preloaded');
chdir $cwd;

# No worker ran in the servers pg_upgrade started (their logs are kept
# with --retain).
my @server_logs =
  glob($new->data_dir . '/pg_upgrade_output.d/*/log/pg_upgrade_server.log');
ok(scalar(@server_logs) > 0, 'pg_upgrade kept its server log');
my $server_log = join('', map { slurp_file($_) } @server_logs);
like($server_log, qr/database system is ready to accept connections/,
	'the server log shows the servers pg_upgrade ran');
unlike($server_log, qr/ordered_events (launcher|worker) started/,
	'no ordered_events launcher or worker ran during pg_upgrade');

$new->start;
ok( $new->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'new cluster: worker is running');
is( $new->safe_psql('postgres', q{
	SELECT range_end || '/' || (SELECT count(*) FROM ordered_events.pending)
	  FROM ordered_events.ranges WHERE stream = 'u'}),
	'501/499', 'new cluster: range and pending events kept');
$new->safe_psql('postgres', "SELECT ordered_events.ingest('u', 501, 'k')");
ok($new->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = 'u'", '1001'),
	'new cluster: the worker releases the rest');
is( $new->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT seq) || '/' ||
	       count(*) FILTER (WHERE seq <> ord)
	  FROM (SELECT seq, row_number() OVER () AS ord
	          FROM ordered_events.released WHERE stream = 'u') r}),
	'1000/1000/0', 'new cluster: 1..1000 released once each, in order');
is( $new->safe_psql('postgres', q{
	SELECT sum(seq_end - seq_start) FROM ordered_events.lane_release_log}),
	'1000', 'new cluster: the release log covers each event once');

$new->stop;
done_testing();
