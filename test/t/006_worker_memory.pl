
# Background worker: memory stays flat.
#
# After a warm-up, 200000 events go through two streams (inbox
# INSERT ... SELECT in batches, each with gaps filled by a later statement,
# released 500 per step: some 400 release transactions).  The worker's
# private memory must not grow:
# - resident memory from /proc/PID/status: VmRSS minus RssShmem (shared
#   buffers the worker touches for the first time count in VmRSS but are no
#   leak) grows less than 10 MB;
# - the worker's own memory contexts (pg_log_backend_memory_contexts, "Grand
#   total") grow less than 1 MB.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

if ($^O ne 'linux')
{
	plan skip_all => 'reads /proc/PID/status';
}

my $node = OrderedEvents::node('memory', databases => 'postgres', naptime => 200);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('m1', max_release_batch => 500);
	SELECT ordered_events.create_stream('m2', max_release_batch => 500);
});
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

my %next = (m1 => 1, m2 => 1);

# Push $n events into a stream: first every seq but each 1000th, committed,
# then the missing ones; wait until the worker released them all.
sub push_events
{
	my ($stream, $n) = @_;
	my ($from, $to) = ($next{$stream}, $next{$stream} + $n - 1);
	$node->safe_psql('postgres', qq{
		INSERT INTO ordered_events.inbox (stream, seq, key, payload)
		SELECT '$stream', g, 'k' || (g % 100), jsonb_build_object('g', g, 'pad', repeat('x', 50))
		  FROM generate_series($from, $to) g WHERE g % 1000 <> 999;
	});
	$node->safe_psql('postgres', qq{
		INSERT INTO ordered_events.inbox (stream, seq, key, payload)
		SELECT '$stream', g, 'k' || (g % 100), jsonb_build_object('g', g)
		  FROM generate_series($from, $to) g WHERE g % 1000 = 999;
	});
	$next{$stream} = $to + 1;
	return $node->poll_query_until('postgres',
		"SELECT range_end FROM ordered_events.ranges WHERE stream = '$stream'",
		$to + 1);
}

sub proc_status
{
	my %s;
	open my $fh, '<', "/proc/$pid/status" or die "cannot read /proc/$pid/status: $!";
	while (<$fh>)
	{
		$s{$1} = $2 if /^(Vm\w+|Rss\w+):\s+(\d+) kB/;
	}
	close $fh;
	return \%s;
}

# The worker's memory contexts, as it logs them.
sub context_total
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	$node->wait_for_log(qr/\[$pid\] LOG:  Grand total: \d+ bytes/, $offset);
	my ($total) = slurp_file($node->logfile, $offset)
	  =~ /\[$pid\] LOG:  Grand total: (\d+) bytes/;
	return $total;
}

# Warm-up: caches, plans, first touches.
for my $s ('m1', 'm2')
{
	ok(push_events($s, 10000), "warm-up: 10000 events of $s released");
}
my $before = proc_status();
my $ctx_before = context_total();
note "before: " . join(', ', map { "$_=$before->{$_}" } sort keys %$before);

for my $round (1 .. 4)
{
	for my $s ('m1', 'm2')
	{
		ok(push_events($s, 25000), "round $round: 25000 events of $s released");
	}
}

my $after = proc_status();
my $ctx_after = context_total();
note "after: " . join(', ', map { "$_=$after->{$_}" } sort keys %$after);

is($node->safe_psql('postgres',
		"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'"),
	$pid, 'the same worker released everything');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(stream || ':' || range_end || ':' || released_count, ',' ORDER BY stream)
	  FROM ordered_events.stream_stats}),
	'm1:110001:110000,m2:110001:110000', 'all 220000 events released');

my $private_growth =
  ($after->{VmRSS} - $after->{RssShmem}) - ($before->{VmRSS} - $before->{RssShmem});
my $rss_growth = $after->{VmRSS} - $before->{VmRSS};
my $anon_growth = $after->{RssAnon} - $before->{RssAnon};
diag sprintf('worker memory growth over 200000 events: VmRSS %+d kB (RssShmem %+d kB), private %+d kB (RssAnon %+d kB), contexts %+d bytes',
	$rss_growth, $after->{RssShmem} - $before->{RssShmem}, $private_growth,
	$anon_growth, $ctx_after - $ctx_before);
cmp_ok($private_growth, '<', 10 * 1024,
	'private resident memory (VmRSS - RssShmem) grew less than 10 MB');
cmp_ok($anon_growth, '<', 10 * 1024, 'RssAnon grew less than 10 MB');
cmp_ok($ctx_after - $ctx_before, '<', 1024 * 1024,
	'memory contexts grew less than 1 MB');

$node->stop;
done_testing();
