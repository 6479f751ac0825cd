
# Prometheus: the real prometheus-postgres-exporter, with
# contrib/prometheus/ordered_events.yaml and a role that has pg_monitor
# alone, scraped over localhost, shows the ordered_events metrics with the
# values of the database (docs/monitoring.md, "Prometheus"):
#
# - stream orders: 1, 2, 3 released by the worker, 5 held back by the gap
#   at 4, a duplicate of 2 (a dead letter); stream audit: 1, 2 released;
# - consumer billing on orders has read 1 of its 3 events; handler consumer
#   tally on audit applied both, one of them raised (a handler dead letter);
# - every row of ordered_events.metrics appears in the scrape with its
#   value and its type, and the exporter reports no scrape error.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
plan skip_all => "$exporter is not installed (Debian package prometheus-postgres-exporter; "
  . 'test/setup installs it)'
  unless -x $exporter;

my $queries = "$FindBin::RealBin/../../contrib/prometheus/ordered_events.yaml";
ok(-r $queries, 'the queries file exists');

my $node = OrderedEvents::node('prometheus', databases => 'postgres', naptime => 100);

$node->safe_psql('postgres', q{
	CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
	CREATE FUNCTION public.tally(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	BEGIN
		IF e.payload ->> 'bad' = 'yes' THEN
			RAISE EXCEPTION 'bad event %', e.seq;
		END IF;
		RETURN ROW(to_jsonb(coalesce(state::int, 0) + 1), NULL)::ordered_events.step;
	END $$;
	SELECT ordered_events.create_stream('orders');
	SELECT ordered_events.create_stream('audit');
	SELECT ordered_events.create_consumer('billing');
	SELECT ordered_events.subscribe('billing', 'orders');
	SELECT ordered_events.create_consumer('tally', handler => 'tally(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('tally', 'audit');
	SELECT ordered_events.ingest('orders', s, 'k') FROM unnest(ARRAY[1, 2, 3, 5]) s;
	SELECT ordered_events.ingest('orders', 2, 'k');
	SELECT ordered_events.ingest('audit', 1, 'a');
	SELECT ordered_events.ingest('audit', 2, 'a', '{"bad": "yes"}');
});

# The worker alone releases and applies; its release step sees the gap.
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'orders') = 3
	   AND (SELECT released_count FROM ordered_events.stream_stats WHERE stream = 'audit') = 2
	   AND (SELECT first_gap_since IS NOT NULL FROM ordered_events.stream_stats
	         WHERE stream = 'orders')
	   AND (SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'tally') = 0
	   AND (SELECT processed_total FROM ordered_events.worker_status
	         WHERE database = 'postgres' AND kind = 'release') = 2}),
	'the worker released both streams and applied audit to tally');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.read('billing', 1)}), '1', 'billing read one event');

# The exporter, as role exporter, on the cluster's socket.
my $port = PostgreSQL::Test::Cluster::get_free_port();
my ($out, $err) = ('', '');
my $dsn = sprintf('host=%s port=%d user=exporter dbname=postgres sslmode=disable',
	$node->host, $node->port);
my $h;
{
	local $ENV{DATA_SOURCE_NAME} = $dsn;
	$h = IPC::Run::start(
		[
			$exporter, "--web.listen-address=127.0.0.1:$port",
			"--extend.query-path=$queries", '--disable-default-metrics',
			'--disable-settings-metrics'
		],
		'>', \$out, '2>', \$err);
}

# Scrape until the exporter answers (it listens a moment after it starts).
my $http = HTTP::Tiny->new(timeout => 10);
my $scrape;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	if ($res->{success})
	{
		$scrape = $res->{content};
		last;
	}
	last unless $h->pumpable;
	select(undef, undef, undef, 0.1);
}
ok(defined $scrape, 'the exporter answers on localhost')
  or diag("exporter output:\n$out$err");
$scrape //= '';

# name{labels} => value and name => type, from the text format.
my (%value, %type);
for my $line (split /\n/, $scrape)
{
	if ($line =~ /^# TYPE (\S+) (\S+)$/)
	{
		$type{$1} = $2;
	}
	elsif ($line =~ /^(ordered_events_\w+|pg_exporter_last_scrape_error)(?:\{(.*)\})? (\S+)$/)
	{
		my ($name, $labels, $v) = ($1, $2 // '', $3);
		my %l = $labels =~ /(\w+)="([^"]*)"/g;
		# the exporter adds server (host:port of the connection); an empty
		# label is no label
		delete $l{server};
		delete @l{ grep { $l{$_} eq '' } keys %l };
		$value{ key($name, %l) } = $v;
	}
}

sub key
{
	my ($name, %l) = @_;
	return $name . '{' . join(',', map { "$_=$l{$_}" } sort keys %l) . '}';
}

is($value{ key('pg_exporter_last_scrape_error') }, 0, 'no query of the file failed')
  or diag("exporter output:\n$out$err");

my %expected = (
	key('ordered_events_released_events_total', stream => 'orders') => 3,
	key('ordered_events_released_events_total', stream => 'audit') => 2,
	key('ordered_events_range_end', stream => 'orders') => 4,
	key('ordered_events_range_end', stream => 'audit') => 3,
	key('ordered_events_dead_letters_total', stream => 'orders') => 1,
	key('ordered_events_dead_letters_total', stream => 'audit') => 0,
	key('ordered_events_skipped_seqs_total', stream => 'orders') => 0,
	key('ordered_events_consumer_unread_events', stream => 'orders', consumer => 'billing') => 2,
	key('ordered_events_consumer_consumed_events_total',
		stream => 'orders', consumer => 'billing') => 1,
	key('ordered_events_consumer_consumed_events_total',
		stream => 'audit', consumer => 'tally') => 2,
	key('ordered_events_consumer_unread_events', stream => 'audit', consumer => 'tally') => 0,
	key('ordered_events_handler_dead_letters_total', consumer => 'tally') => 1,
	key('ordered_events_handler_held_keys', consumer => 'tally') => 0,
	key('ordered_events_handler_retrying_keys', consumer => 'tally') => 0,
	key('ordered_events_handler_parked_events', consumer => 'tally') => 0,
	key('ordered_events_worker_up') => 1,
	key('ordered_events_worker_failing') => 0,
	key('ordered_events_worker_released_events_total') => 5,
	key('ordered_events_worker_processed_events_total') => 2,
	key('ordered_events_gap_age_seconds', stream => 'audit') => 0);
for my $k (sort keys %expected)
{
	is($value{$k}, $expected{$k}, "scraped $k = $expected{$k}");
}
ok(defined $value{ key('ordered_events_gap_age_seconds', stream => 'orders') }
	  && $value{ key('ordered_events_gap_age_seconds', stream => 'orders') } > 0,
	'scraped the age of the gap of orders, above 0');

# Every row of the view, read as the exporter's role, is in the scrape with
# its type; its value too, but for those that change with time.
my $rows = $node->safe_psql('postgres', q{
	SET ROLE exporter;
	SELECT metric, type, coalesce(stream, ''), coalesce(consumer, ''), value
	  FROM ordered_events.metrics ORDER BY 1, 3, 4});
my ($missing, $wrong) = (0, 0);
my %families;
for my $row (split /\n/, $rows)
{
	my ($metric, $mtype, $stream, $consumer, $v) = split /\|/, $row, -1;
	my %l;
	$l{stream} = $stream if $stream ne '';
	$l{consumer} = $consumer if $consumer ne '';
	my $k = key($metric, %l);
	$families{$metric} = $mtype;
	if (!defined $value{$k})
	{
		$missing++;
		diag("not scraped: $k");
	}
	elsif ($metric !~ /_(gap_age_seconds|cycles_total|last_cycle_seconds)$/
		&& $value{$k} != $v)
	{
		$wrong++;
		diag("scraped $k = $value{$k}, the view has $v");
	}
}
ok(keys %families >= 13, 'the view has every metric family')
  or diag(join ' ', sort keys %families);
is($missing, 0, 'every row of the metrics view is scraped');
is($wrong, 0, '... with the value of the view');
is( join(' ', map { "$_=" . ($type{$_} // 'none') } sort keys %families),
	join(' ', map { "$_=$families{$_}" } sort keys %families),
	'every metric family has the type of the view');

$h->kill_kill;
done_testing();
