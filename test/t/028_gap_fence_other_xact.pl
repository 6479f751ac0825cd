
# gap_policy 'fence' with the worker, while an unrelated transaction of the
# same database holds an xid older than every fence (docs/architecture.md,
# rule 14: a dead seq is skipped as soon as the transaction that allocated
# it has ended, whatever other transactions are open).
#
# Session "other" inserts into an unrelated table and stays open.  Then:
# - a rolled-back append() is skipped by the worker, and the seq after it
#   released, while "other" is open;
# - a prepared transaction holding an append is not skipped while it is
#   prepared (its backend has moved on), however many cycles pass; after
#   ROLLBACK PREPARED its seq is skipped, after COMMIT PREPARED released;
# - a backend holding an appended, uncommitted seq is killed with SIGKILL;
#   after the crash restart, with a new unrelated transaction open, the
#   worker skips that seq (and those the crash burned) and releases the
#   next append; nothing committed is lost, nothing goes to unprocessed.
# The worker alone releases: release() is never called.  Every wait is for
# a condition (poll_query_until), never for a duration.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $FENCE_REASON = 'fence: every transaction that could fill it has ended';

my $node = OrderedEvents::node('gap_fence_other_xact',
	databases => 'postgres',
	naptime => 100,
	conf => [ 'max_prepared_transactions = 2', 'restart_after_crash = on' ]);

$node->safe_psql('postgres', q{
	CREATE TABLE other (i integer);
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
});

sub worker_runs
{
	return $node->poll_query_until('postgres', q{
		SELECT pid IS NOT NULL AND cycles > 0
		  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'});
}
ok(worker_runs(), 'worker is running');

my @committed;    # every seq whose transaction committed

sub append_committed
{
	my ($key) = @_;
	my $seq = $node->safe_psql('postgres', "SELECT ordered_events.append('f', '$key')");
	push @committed, $seq;
	return $seq;
}

sub skipped
{
	my ($seq) = @_;
	return "EXISTS (SELECT FROM ordered_events.skipped_gaps
	                 WHERE stream = 'f' AND $seq BETWEEN gap_start AND gap_end)";
}

sub released
{
	my ($seq) = @_;
	return "EXISTS (SELECT FROM ordered_events.released WHERE stream = 'f' AND seq = $seq)";
}

# An unrelated transaction with an xid, open until told otherwise.
sub open_other
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	$s->query_safe('INSERT INTO other VALUES (1)');
	my $xid = $s->query_safe('SELECT pg_current_xact_id()');
	return ($s, $xid);
}

sub still_open
{
	my ($xid) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM pg_stat_activity
		 WHERE backend_xid::text = '$xid' AND state = 'idle in transaction'});
}

my ($other, $other_xid) = open_other();

# A rolled-back append, then a committed one behind it.
my $b = $node->background_psql('postgres');
$b->query_safe('BEGIN');
my $rolled_back = $b->query_safe("SELECT ordered_events.append('f', 'b')");
$b->query_safe('ROLLBACK');
my $next = append_committed('c');

ok( $node->poll_query_until('postgres',
		'SELECT ' . skipped($rolled_back) . ' AND ' . released($next)),
	"the worker skips rolled-back seq $rolled_back and releases $next");
is(still_open($other_xid), '1', 'while the unrelated transaction is still open');

# A prepared transaction holding an append: not skipped while prepared.
sub prepare_append
{
	my ($gid) = @_;
	$b->query_safe('BEGIN');
	my $seq = $b->query_safe("SELECT ordered_events.append('f', '$gid')");
	$b->query_safe("PREPARE TRANSACTION '$gid'");
	return $seq;
}

sub held_while_prepared
{
	my ($seq, $behind) = @_;

	# a step saw the gap at $seq (and read the fence), then more cycles ran
	ok( $node->poll_query_until('postgres', qq{
			SELECT first_gap_start = $seq AND first_gap_since IS NOT NULL
			  FROM ordered_events.stream_stats WHERE stream = 'f'}),
		"a step saw the gap at prepared seq $seq");
	my $cycles = $node->safe_psql('postgres', q{
		SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'});
	ok( $node->poll_query_until('postgres', qq{
			SELECT cycles >= $cycles + 3
			  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
		'three more worker cycles ran');
	is( $node->safe_psql('postgres',
			'SELECT ' . skipped($seq) . ', ' . released($behind)
			  . ", (SELECT range_end FROM ordered_events.ranges WHERE stream = 'f')"),
		"f|f|$seq", "prepared seq $seq is neither skipped nor passed");
}

my $prepared = prepare_append('fence_rb');
my $behind = append_committed('c');
held_while_prepared($prepared, $behind);
$node->safe_psql('postgres', "ROLLBACK PREPARED 'fence_rb'");
ok( $node->poll_query_until('postgres',
		'SELECT ' . skipped($prepared) . ' AND ' . released($behind)),
	"after ROLLBACK PREPARED, seq $prepared is skipped and $behind released");

$prepared = prepare_append('fence_c');
$behind = append_committed('c');
held_while_prepared($prepared, $behind);
$node->safe_psql('postgres', "COMMIT PREPARED 'fence_c'");
push @committed, $prepared;
ok( $node->poll_query_until('postgres',
		'SELECT ' . released($prepared) . ' AND ' . released($behind)),
	"after COMMIT PREPARED, seqs $prepared and $behind are released");
is($node->safe_psql('postgres', 'SELECT ' . skipped($prepared)), 'f',
	"committed prepared seq $prepared is not skipped");
is(still_open($other_xid), '1', 'the unrelated transaction is still open');
$b->quit;

# A backend holding an appended, uncommitted seq dies with SIGKILL.
my $last_before = append_committed('before crash');
ok($node->poll_query_until('postgres', 'SELECT ' . released($last_before)),
	'everything committed before the crash is released');
my $k = $node->background_psql('postgres');
my $k_pid = $k->query_safe('SELECT pg_backend_pid()');
$k->query_safe('BEGIN');
my $held = $k->query_safe("SELECT ordered_events.append('f', 'killed')");
is(kill('KILL', $k_pid), 1, "SIGKILL sent to the backend holding seq $held (pid $k_pid)");
eval { $k->quit };
eval { $other->quit };
ok(worker_runs(), 'the worker runs after the crash restart');

# After the restart: a new unrelated transaction (its xid older than the
# fence the next step reads), then an append behind the dead seq.
($other, $other_xid) = open_other();
my $after = append_committed('after crash');
cmp_ok($after, '>', $held, "the append after the restart gets a later seq ($after)");
ok( $node->poll_query_until('postgres',
		'SELECT ' . skipped($held) . ' AND ' . released($after)),
	"the worker skips seq $held of the killed backend and releases $after");
is(still_open($other_xid), '1', 'while the new unrelated transaction is open');

# Nothing committed is lost, nothing is released twice or skipped and released.
is( $node->safe_psql('postgres', qq{
	SELECT count(*) FROM unnest('{@{[ join(',', @committed) ]}}'::bigint[]) c(seq)
	 WHERE NOT EXISTS (SELECT FROM ordered_events.released r
	                    WHERE r.stream = 'f' AND r.seq = c.seq)}),
	'0', 'every committed append is released (' . scalar(@committed) . ')');
is(OrderedEvents::seqs_not_released_or_skipped_once($node, 'f'),
	'0', 'every seq below range_end is released or skipped, never both');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(DISTINCT reason, ',') FROM ordered_events.skipped_gaps WHERE stream = 'f'}),
	$FENCE_REASON, 'every skip has the fence reason');
is( $node->safe_psql('postgres', q{
	SELECT unprocessed_count FROM ordered_events.stream_stats WHERE stream = 'f'}),
	'0', 'nothing went to unprocessed');

$other->quit;
$node->stop;
done_testing();
