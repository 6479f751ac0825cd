
# A transaction of another database never holds a fence stream back, and
# blockers() never shows it: only this database's transactions can write
# the stream's tables.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('other_db');
$node->safe_psql('postgres', q{
	CREATE DATABASE other;
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
});

# An old transaction in database "other", with an xid, stays open.
my $other = $node->background_psql('other');
$other->query_safe('BEGIN');
$other->query_safe('SELECT pg_current_xact_id()');
my $other_pid = $other->query_safe('SELECT pg_backend_pid()');

# Seq 1 is held by a transaction of this database; seq 2 commits.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT ordered_events.append('f', 'held')");
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('postgres', q{
	SELECT ordered_events.append('f', 'b');
	SELECT ordered_events.release('f');
});

is($node->safe_psql('postgres', q{SELECT string_agg(pid::text, ',') FROM ordered_events.blockers('f')}),
	$holder_pid, 'blockers() shows the holder of this database, not the transaction of "other"');

$holder->query_safe('ROLLBACK');
$holder->quit;
is($node->safe_psql('postgres', q{
	SELECT ordered_events.release('f');
	SELECT gap_start || '..' || gap_end FROM ordered_events.skipped_gaps WHERE stream = 'f'}),
	"1\n1..1", 'the fence skips the dead gap while the transaction of "other" is still open');

is($node->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $other_pid"),
	'idle in transaction', '... which it is');
$other->quit;

done_testing();
