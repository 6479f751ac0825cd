
# A fresh install (ordered_events--<version>.sql, built from src/sql/) and
# the chain of updates from 0.1 give the same extension: the same objects,
# definitions, columns in the same order, constraints, indexes, triggers,
# policies, comments, privileges and initial privileges
# (catalog_description.sql describes them, without OIDs).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $describe = slurp_file("$FindBin::RealBin/catalog_description.sql");
my $node = OrderedEvents::node('install', extension => 0);

$node->safe_psql('postgres', "CREATE DATABASE $_") for qw(fresh chain changed);
$node->safe_psql('fresh', 'CREATE EXTENSION ordered_events');
for my $db (qw(chain changed))
{
	$node->safe_psql($db, q{
		CREATE EXTENSION ordered_events VERSION '0.1';
		ALTER EXTENSION ordered_events UPDATE TO '0.2';
		ALTER EXTENSION ordered_events UPDATE;
	});
}

# The facts of a database's extension, one per element.
sub facts
{
	my ($db) = @_;
	return split /\n(?=ordered_events\.|extension \|)/,
	  $node->safe_psql($db, $describe, extra_params => [ '-A', '-F', ' | ' ]);
}

# The facts of $a that $b lacks.
sub missing
{
	my ($a, $b) = @_;
	my %in_b = map { $_ => 1 } @$b;
	return join("\n", grep { !$in_b{$_} } @$a);
}

my @fresh = facts('fresh');
my @chain = facts('chain');

is($node->safe_psql('fresh', 'SELECT extversion FROM pg_extension WHERE extname = \'ordered_events\''),
	$node->safe_psql('chain', 'SELECT extversion FROM pg_extension WHERE extname = \'ordered_events\''),
	'both are at the current version');
cmp_ok(scalar(grep { / \| member \| / } @fresh), '>=', 100, 'the description lists every member');
for my $kind (qw(function table view type sequence))
{
	ok((grep { / \| member \| $kind$/ } @fresh), "the description has members of kind $kind");
}
is(missing(\@chain, \@fresh), '', 'a fresh install has everything the updates made');
is(missing(\@fresh, \@chain), '', 'the updates made everything a fresh install has');

# The description sees a change of each kind that could tell them apart.
$node->safe_psql('changed', q{
	COMMENT ON FUNCTION ordered_events.gaps(text) IS 'changed';
	ALTER TABLE ordered_events.gap_skips ALTER COLUMN reason SET DEFAULT 'changed';
	GRANT EXECUTE ON FUNCTION ordered_events.release(text) TO PUBLIC;
});
my $seen = missing([ facts('changed') ], \@chain);
like($seen, qr/gaps.* \| comment \| changed/, 'a changed comment is seen');
like($seen, qr/gap_skips \| column \d+ \| reason text not null default 'changed'/, 'a changed column is seen');
like($seen, qr/release.* \| owner and acl \| .*,=X\//, 'a changed privilege is seen');

$node->stop;
done_testing();
