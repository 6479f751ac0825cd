
# gap_policy 'fence' across a crash (immediate stop while appends run).
#
# Four producers append to fence stream f in a loop, one transaction per
# event, every 11th rolled back, some held open for a few ms; each reports
# every commit (and rollback) after it returned.  Two more sessions append
# and keep their transactions open.  The server is stopped in immediate mode
# in the middle of this, then started: crash recovery.  Then:
# - the seqs burned by the crash (a sequence WAL-logs up to 32 values ahead;
#   the open and in-flight transactions' seqs) are never released: the
#   fence skips them once appends after the restart come behind them;
# - every append that returned committed before the crash is in released
#   exactly once, in seq order; nothing is pending once the worker caught up;
# - every seq below range_end is either released or skipped (never both),
#   every skip has the fence reason, nothing went to unprocessed (a fence
#   skips only seqs whose transactions have ended: none can arrive late);
# - the worker alone did all this: release() is never called.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More;

my $FENCE_REASON = 'fence: every transaction that could fill it has ended';

my $node = OrderedEvents::node('gap_fence_crash', databases => 'postgres', naptime => 100);

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
});
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');

sub stats
{
	my ($column) = @_;
	return $node->safe_psql('postgres',
		"SELECT $column FROM ordered_events.stream_stats WHERE stream = 'f'");
}

# The producers: a DO block that commits (or rolls back) each append and
# then reports it with a NOTICE, which the server flushes at once; psql
# writes it to unbuffered stderr, kept in a file.
my $tmp = PostgreSQL::Test::Utils::tempdir;
my @producers;
for my $w (1 .. 4)
{
	my $do = qq{
		DO \$\$
		DECLARE s bigint;
		BEGIN
		  FOR i IN 1 .. 50000 LOOP
		    s := ordered_events.append('f', 'w$w', jsonb_build_object('w', $w, 'i', i));
		    IF i % 3 = $w % 3 THEN PERFORM pg_sleep(0.003); END IF;
		    IF i % 11 = $w THEN
		      ROLLBACK;
		      RAISE NOTICE 'rolled back %', s;
		    ELSE
		      COMMIT;
		      RAISE NOTICE 'committed %', s;
		    END IF;
		  END LOOP;
		END \$\$};
	my $log = "$tmp/producer_$w.log";
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', $do ],
		'<', \undef, '>', "$tmp/producer_$w.out", '2>', $log);
	push @producers, { h => $h, log => $log };
}

# The worker releases while they run (and fences the rolled-back seqs).
ok( $node->poll_query_until('postgres', q{
	SELECT released_count >= 2000 FROM ordered_events.stream_stats WHERE stream = 'f'}),
	'the worker releases during the load');

# Two transactions that append and stay open until the crash.
my @open_seqs;
my @open_sessions;
for my $n (1 .. 2)
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('BEGIN');
	for (1 .. $n)
	{
		push @open_seqs, $s->query_safe("SELECT ordered_events.append('f', 'open$n')");
	}
	push @open_sessions, $s;
}
note 'seqs of open transactions: ' . join(',', @open_seqs);
my ($open_min) = sort { $a <=> $b } @open_seqs;
my ($open_max) = sort { $b <=> $a } @open_seqs;

# The producers go on well past the open seqs, which hold the range.
ok( $node->poll_query_until('postgres', qq{
	SELECT max_seen_seq >= $open_max + 2000 FROM ordered_events.stream_stats WHERE stream = 'f'}),
	'the producers went on past the open transactions');
cmp_ok(stats('range_end'), '<=', $open_min, 'the range does not pass the first open seq');
is( $node->safe_psql('postgres', qq{
	SELECT count(*) FROM ordered_events.skipped_gaps
	 WHERE stream = 'f' AND gap_end >= $open_min}),
	'0', 'nothing at or beyond the first open seq is skipped while it is open');

# Crash.
$node->stop('immediate');
for my $p (@producers)
{
	$p->{h}->finish;    # psql fails: the server is gone
}
for my $s (@open_sessions)
{
	eval { $s->quit };
}

# What the producers saw.
my (%committed, %rolled_back);
for my $p (@producers)
{
	my $log = slurp_file($p->{log});
	$committed{$1} = 1 while $log =~ /NOTICE:\s+committed (\d+)/g;
	$rolled_back{$1} = 1 while $log =~ /NOTICE:\s+rolled back (\d+)/g;
}
my @committed = sort { $a <=> $b } keys %committed;
my $pre_max = (sort { $b <=> $a } (@committed, keys %rolled_back, @open_seqs))[0];
note scalar(@committed) . ' appends committed before the crash, '
  . scalar(keys %rolled_back) . " rolled back; highest seq seen: $pre_max";
cmp_ok(scalar(@committed), '>=', 300, 'the producers committed appends before the crash');
cmp_ok(scalar(keys %rolled_back), '>', 0, 'and rolled some back');

$node->start;
ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'the worker runs after the restart');

# Appends after the restart: behind the burned seqs.
my @post = map {
	$node->safe_psql('postgres', "SELECT ordered_events.append('f', 'after', '{\"n\": $_}')")
} 1 .. 5;
note 'seqs appended after the restart: ' . join(',', @post);
cmp_ok($post[0], '>', $pre_max, 'the first seq after the crash is above every seq before it');

# The worker alone catches up.
ok( $node->poll_query_until('postgres', q{
	SELECT pending_count = 0 AND range_end = max_seen_seq + 1
	  FROM ordered_events.stream_stats WHERE stream = 'f'}),
	'the worker caught up: nothing pending, range_end past the last seq');
is(stats('range_end'), $post[-1] + 1, 'range_end is past the last append');

# Released: each seq once, in seq order.
my @released = split /\n/, $node->safe_psql('postgres', q{
	SELECT seq FROM ordered_events.released WHERE stream = 'f'});
my %released;
my ($dups, $disorder) = (0, 0);
for my $i (0 .. $#released)
{
	$dups++ if $released{ $released[$i] }++;
	$disorder++ if $i > 0 && $released[$i] <= $released[ $i - 1 ];
}
is($dups, 0, 'no seq is released twice');
is($disorder, 0, 'released in seq order');
is(stats('released_count'), scalar(@released), 'released_count matches the released view');

my @missing = grep { !$released{$_} } @committed;
is(scalar(@missing), 0, 'every append committed before the crash is released');
if (@missing)
{
	my $list = join(',', @missing[ 0 .. ($#missing < 9 ? $#missing : 9) ]);
	diag "committed but not released (first 10): $list";
	diag $node->safe_psql('postgres', qq{
		SELECT string_agg(seq || ' ' || reason || ' (' || coalesce(detail, '') || ')', E'\\n')
		  FROM ordered_events.unprocessed WHERE stream = 'f' AND seq IN ($list)});
}
is(scalar(grep { $released{$_} } keys %rolled_back), 0, 'no rolled-back seq is released');
is(scalar(grep { $released{$_} } @open_seqs), 0, 'no seq of an open transaction is released');
is(scalar(grep { !$released{$_} } @post), 0, 'the appends after the restart are released');

# Every seq below range_end: released or skipped, exactly one of them.
is(OrderedEvents::seqs_not_released_or_skipped_once($node, 'f'),
	'0', 'every seq below range_end is released or skipped, never both');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(DISTINCT reason, ',') FROM ordered_events.skipped_gaps WHERE stream = 'f'}),
	$FENCE_REASON, 'every skip has the fence reason');
is( $node->safe_psql('postgres', qq{
	SELECT count(*) FROM unnest('{@{[ join(',', @open_seqs, keys %rolled_back) ]}}'::bigint[]) o(seq)
	 WHERE NOT EXISTS (SELECT FROM ordered_events.skipped_gaps k
	                    WHERE k.stream = 'f' AND o.seq BETWEEN k.gap_start AND k.gap_end)}),
	'0', 'the open and rolled-back seqs are skipped');
# Above the highest seq the producers saw: seqs the crash burned, and at
# most one commit per producer whose NOTICE the crash cut off (it committed
# before the server stopped, so it is released).
is( $node->safe_psql('postgres', qq{
	SELECT count(*) FILTER (WHERE NOT skipped AND NOT released),
	       count(*) FILTER (WHERE released) <= @{[ scalar(@producers) ]}
	  FROM (SELECT EXISTS (SELECT FROM ordered_events.skipped_gaps k
	                        WHERE k.stream = 'f' AND g.seq BETWEEN k.gap_start AND k.gap_end) AS skipped,
	               EXISTS (SELECT FROM ordered_events.released r
	                        WHERE r.stream = 'f' AND r.seq = g.seq) AS released
	          FROM generate_series($pre_max + 1, $post[0] - 1) AS g(seq)) b}),
	'0|t', 'the seqs burned by the crash are skipped ('
	  . ($post[0] - $pre_max - 1) . ' above the highest seq seen; a commit the crash kept from its producer is released)');
is(stats('unprocessed_count'), '0', 'nothing went to unprocessed');
is(stats('skipped_count') + stats('released_count'), $post[-1],
	'released + skipped = every seq allocated');

# The release steps tile [1, range_end): no seq passed twice.
is( $node->safe_psql('postgres', q{
	SELECT sum(seq_end - seq_start) || '/' ||
	       bool_and(seq_start = coalesce(prev_end, 1))
	  FROM (SELECT l.seq_start, l.seq_end,
	               lag(l.seq_end) OVER (ORDER BY l.seq_end) AS prev_end
	          FROM ordered_events.lane_release_log l
	          JOIN ordered_events.stream_def d USING (stream_id)
	         WHERE d.stream = 'f') s}),
	$post[-1] . '/true', 'release steps cover each seq once, contiguously');
cmp_ok(
	$node->safe_psql('postgres', q{
		SELECT released_total FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'>=', 5, 'the worker released after the restart');

$node->stop;
done_testing();
