
# The setup the TAP tests share: a PostgreSQL::Test::Cluster with the
# library preloaded, the worker's GUCs, and the extension created.  Only
# setup lives here; every check stays in its test.
#
#   use FindBin;
#   use lib $FindBin::RealBin;
#   use OrderedEvents;
#
#   my $node = OrderedEvents::node('name',
#       databases => 'postgres',    # ordered_events.databases: where workers run
#       naptime   => 200,           # ordered_events.naptime, in ms
#       conf      => [ 'restart_after_crash = on' ],    # more postgresql.conf lines
#       allows_streaming => 1,      # passed to init() (a primary for a standby)
#       start     => 0,             # only init and configure (default: start)
#       extension => 0);            # no CREATE EXTENSION in postgres (default: create it)
#
# shared_preload_libraries = 'ordered_events' is always set.  Without
# databases, no worker serves any database (the GUC's default is empty).

package OrderedEvents;

use strict;
use warnings;

use Carp;
use PostgreSQL::Test::Cluster;

my %node_options =
  map { $_ => 1 } qw(databases naptime conf allows_streaming start extension);

# A new node named $name: initialized, the library preloaded, the options
# above written to postgresql.conf; unless start => 0, started, and unless
# extension => 0, with the extension created in database postgres.
sub node
{
	my ($name, %opts) = @_;

	for my $opt (sort keys %opts)
	{
		croak "OrderedEvents::node: unknown option \"$opt\""
		  unless $node_options{$opt};
	}
	my $start = $opts{start} // 1;
	my $extension = $opts{extension} // 1;
	croak 'OrderedEvents::node: extension => 1 needs start => 1'
	  if $extension && !$start && exists $opts{extension};

	my $conf = "shared_preload_libraries = 'ordered_events'\n";
	$conf .= "ordered_events.databases = '$opts{databases}'\n"
	  if defined $opts{databases};
	$conf .= "ordered_events.naptime = $opts{naptime}\n"
	  if defined $opts{naptime};
	$conf .= "$_\n" for @{ $opts{conf} // [] };

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $opts{allows_streaming} // 0);
	$node->append_conf('postgresql.conf', $conf);
	return $node unless $start;

	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ordered_events')
	  if $extension;
	return $node;
}

# Send $sql to a background_psql session without waiting for its result
# (the session's next query() or query_safe() reads what it printed).
sub send_query
{
	my ($session, $sql) = @_;
	$session->{stdin} .= "$sql\n";
	$session->{run}->pump_nb();
	return;
}

# How many seqs of global stream $stream below its range_end are not
# exactly one of released or skipped (docs/architecture.md, rule 4: '0'
# when the range holds).
sub seqs_not_released_or_skipped_once
{
	my ($node, $stream) = @_;
	return $node->safe_psql('postgres', qq{
	SELECT count(*)
	  FROM generate_series(1, (SELECT range_end - 1 FROM ordered_events.ranges
	                            WHERE stream = '$stream')) AS g(seq)
	 WHERE (SELECT count(*) FROM ordered_events.released r
	         WHERE r.stream = '$stream' AND r.seq = g.seq)
	     + (SELECT count(*) FROM ordered_events.skipped_gaps k
	         WHERE k.stream = '$stream' AND g.seq BETWEEN k.gap_start AND k.gap_end) <> 1});
}

1;
