
# A database restored from pg_dump continues releasing and consuming where
# the source stood.
#
# The source cluster runs the worker.  At the dump it holds a global stream
# g with a skipped gap (skip_gap, in the ledger), a duplicate in the dead
# letters, and events pending behind an open gap; a per-key stream pk with
# key a blocked by a gap and keys b and c released; a timeout stream t
# whose gap a release step has seen (first_seen set, its timeout far away);
# a fence stream f.  A plain consumer c has read part of g, pk and t, and
# cf part of f.
#
# pg_dump -Fc; restore with pg_restore into an empty database (createdb -T
# template0) of a second cluster whose worker then serves it.  Before
# anything is filled, every view a user reads equals the source's.  Then
# the same steps on both copies: the missing seqs arrive, the worker
# releases exactly what was pending, in order; the consumers read the rest
# of each stream once; append() continues f's seqs.  Both copies end equal.
#
# Every ingested event has explicit event_ts and alignment_ts (the same lag
# on all streams), so c's merged order is the same on both copies.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $source = OrderedEvents::node('source', databases => 'postgres', naptime => 200);
my $sdb = 'postgres';
$source->safe_psql($sdb, q{
	SELECT ordered_events.create_stream('g');
	SELECT ordered_events.create_stream('pk', sequencing => 'per_key');
	SELECT ordered_events.create_stream('t', gap_policy => 'timeout', gap_timeout => '1 hour');
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
	SELECT ordered_events.create_consumer('c');
	SELECT ordered_events.subscribe('c', 'g');
	SELECT ordered_events.subscribe('c', 'pk');
	SELECT ordered_events.subscribe('c', 't');
	SELECT ordered_events.create_consumer('cf');
	SELECT ordered_events.subscribe('cf', 'f');
});

# Events as [stream, seq, key]; event i of the test has event_ts T + i s
# and alignment_ts T + i s + 1 s.
my $n_events = 0;
sub ingest_sql
{
	my @rows;
	for my $e (@_)
	{
		my ($stream, $seq, $key) = @$e;
		$n_events++;
		push @rows, sprintf(
			q{('%s', %d, '%s', '{"n": %d}', timestamptz '2024-01-01 00:00:00+00' + %d * interval '1 s', timestamptz '2024-01-01 00:00:00+00' + %d * interval '1 s')},
			$stream, $seq, $key, $n_events, $n_events, $n_events + 1);
	}
	return 'INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts) VALUES '
	  . join(",\n", @rows);
}

# Events as "stream:key:seq", in the view's order.
my $released_sql = q{SELECT string_agg(stream || ':' || key || ':' || seq, ' ' ORDER BY stream, key, seq)
                       FROM ordered_events.released};
my $pending_sql = q{SELECT string_agg(stream || ':' || key || ':' || seq, ' ' ORDER BY stream, key, seq)
                      FROM ordered_events.pending};

# 1. g 3, pk a:3 and t 3 are missing; the worker releases what is before.
$source->safe_psql($sdb, ingest_sql(
	[ 'g', 1, 'x' ], [ 'pk', 1, 'a' ], [ 't', 1, 'x' ], [ 'pk', 1, 'b' ], [ 'g', 2, 'x' ],
	[ 'pk', 2, 'a' ], [ 't', 2, 'x' ], [ 'pk', 2, 'b' ], [ 'pk', 1, 'c' ], [ 'g', 4, 'x' ],
	[ 'pk', 4, 'a' ], [ 't', 4, 'x' ]));
ok($source->poll_query_until($sdb, q{
	SELECT count(*) = 9 FROM ordered_events.released}),
	'source: the worker released what is before the gaps');
ok($source->poll_query_until($sdb, q{
	SELECT first_seen IS NOT NULL FROM ordered_events.gaps('t')}),
	'source: a release step saw t\'s gap');

# 2. g 3 is declared lost; g 5, 7, 8 arrive (6 missing); g 1 again is a
#    duplicate; f gets three events.
is($source->safe_psql($sdb, q{SELECT ordered_events.skip_gap('g', 3, 'lost upstream')}),
	'1', 'source: g 3 skipped');
$source->safe_psql($sdb, ingest_sql([ 'g', 5, 'x' ], [ 'g', 7, 'x' ], [ 'g', 8, 'x' ]));
is($source->safe_psql($sdb, q{SELECT ordered_events.ingest('g', 1, 'x')}),
	'duplicate', 'source: g 1 again is a duplicate');
$source->safe_psql($sdb, q{
	SELECT ordered_events.append('f', k) FROM (VALUES ('x'), ('y'), ('z')) v(k);
});
ok($source->poll_query_until($sdb, q{
	SELECT count(*) = 14 FROM ordered_events.released}),
	'source: the worker released g 4..5 and f 1..3');
is($source->safe_psql($sdb, $released_sql),
	'f:x:1 f:y:2 f:z:3 g:x:1 g:x:2 g:x:4 g:x:5 pk:a:1 pk:a:2 pk:b:1 pk:b:2 pk:c:1 t:x:1 t:x:2',
	'source: released');
is($source->safe_psql($sdb, $pending_sql), 'g:x:7 g:x:8 pk:a:4 t:x:4',
	'source: pending behind the gaps');

# 3. The consumers read part of each stream.
my $read_c = q{SELECT coalesce(string_agg(stream || ':' || key || ':' || seq, ' '), '')
                 FROM ordered_events.read('c', %d)};
my $read_cf = q{SELECT coalesce(string_agg(stream || ':' || key || ':' || seq, ' '), '')
                  FROM ordered_events.read('cf', %d)};
my $first_c = $source->safe_psql($sdb, sprintf($read_c, 5));
is($source->safe_psql($sdb, q{
	SELECT string_agg(stream, ',' ORDER BY stream) FROM ordered_events.consumers
	 WHERE consumer = 'c' AND consumed_count > 0 AND unread_count > 0}),
	'g,pk,t', "source: c read part of each stream ($first_c)");
is($source->safe_psql($sdb, sprintf($read_cf, 1)), 'f:x:1', 'source: cf read f 1');

# Everything a user sees, timestamps included: a restore copies it as it is.
my %full = (
	ranges => q{SELECT * FROM ordered_events.ranges ORDER BY stream},
	released => q{SELECT * FROM ordered_events.released ORDER BY stream, key, seq},
	pending => q{SELECT * FROM ordered_events.pending ORDER BY stream, key, seq},
	key_status => q{SELECT * FROM ordered_events.key_status ORDER BY stream, key},
	stream_stats => q{SELECT * FROM ordered_events.stream_stats ORDER BY stream},
	gaps => q{SELECT s, g.* FROM unnest('{g,pk,t,f}'::text[]) s, ordered_events.gaps(s) g ORDER BY 1, 2, 3},
	skipped_gaps => q{SELECT * FROM ordered_events.skipped_gaps ORDER BY stream, key, gap_start},
	unprocessed => q{SELECT * FROM ordered_events.unprocessed ORDER BY stream, key, seq},
	consumers => q{SELECT * FROM ordered_events.consumers});
my %before = map { $_ => $source->safe_psql($sdb, $full{$_}) } keys %full;
like($before{skipped_gaps}, qr/^g\|\|3\|3\|lost upstream\|/, 'the ledger compared has the skip');
like($before{unprocessed}, qr/^g\|1\|x\|.*\|duplicate\|/, 'the dead letters compared have the duplicate');
like($before{gaps}, qr/^g\|\|6\|6\|2\d+-.*\npk\|a\|3\|3\|2\d+-.*\nt\|\|3\|3\|2\d+-/,
	'the gaps compared: g 6, pk a:3 and t 3, each seen by a release step');

my $dump = $source->basedir . '/dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $source->connstr($sdb) ], 'dump the source');

# The target: an empty database from template0, the dump restored into it,
# then the worker told to serve it.
my $target = OrderedEvents::node('target', naptime => 200, extension => 0);
my $tdb = 'restored';
command_ok([ 'createdb', '-h', $target->host, '-p', $target->port, '-T', 'template0', $tdb ],
	'createdb -T template0');
command_ok([ 'pg_restore', '-d', $target->connstr($tdb), $dump ], 'pg_restore -d');
$target->append_conf('postgresql.conf', "ordered_events.databases = '$tdb'");
$target->reload;
ok($target->poll_query_until($tdb, q{
	SELECT pid IS NOT NULL AND cycles >= 2 FROM ordered_events.worker_status}),
	'target: the worker serves the restored database');

for my $what (sort keys %full)
{
	is($target->safe_psql($tdb, $full{$what}), $before{$what}, "target: $what as in the source");
}

# 4. The same steps on both copies.
my $fill = ingest_sql([ 'g', 6, 'x' ], [ 'pk', 3, 'a' ], [ 't', 3, 'x' ]);
my %read;
for my $case ([ $source, $sdb ], [ $target, $tdb ])
{
	my ($node, $db) = @$case;
	my $name = $node->name;
	$node->safe_psql($db, $fill);
	ok($node->poll_query_until($db, q{SELECT count(*) = 0 FROM ordered_events.pending}),
		"$name: the worker released everything pending");
	is($node->safe_psql($db, $released_sql),
		'f:x:1 f:y:2 f:z:3 g:x:1 g:x:2 g:x:4 g:x:5 g:x:6 g:x:7 g:x:8 pk:a:1 pk:a:2 pk:a:3 pk:a:4 pk:b:1 pk:b:2 pk:c:1 t:x:1 t:x:2 t:x:3 t:x:4',
		"$name: released: the pending events and the filled seqs, nothing else");
	is($node->safe_psql($db, q{
		SELECT string_agg(stream || ' ' || range_end, ', ' ORDER BY stream) FROM ordered_events.ranges}),
		'f 4, g 9, t 5', "$name: the ranges end after the highest seqs");

	# c reads the rest, cf the rest and an appended event.
	$read{$name}{c} = $node->safe_psql($db, sprintf($read_c, 1000));
	is($node->safe_psql($db, sprintf($read_c, 1000)), '', "$name: c has nothing left");
	is($node->safe_psql($db, q{SELECT ordered_events.append('f', 'w')}), '4',
		"$name: append() continues f after the restored seqs");
	ok($node->poll_query_until($db, q{
		SELECT count(*) = 4 FROM ordered_events.released WHERE stream = 'f'}),
		"$name: the worker released f 4");
	$read{$name}{cf} = $node->safe_psql($db, sprintf($read_cf, 1000));
	is($read{$name}{cf}, 'f:y:2 f:z:3 f:w:4', "$name: cf read f 2..4, after its restored position");
	is($node->safe_psql($db, q{
		SELECT string_agg(consumer || ' ' || stream || ' ' || consumed_count || ' ' || unread_count, ', '
		                  ORDER BY consumer, stream)
		  FROM ordered_events.consumers}),
		'c g 7 0, c pk 7 0, c t 4 0, cf f 4 0',
		"$name: every consumer consumed every released event of its streams, none left");
}

# What c read after the dump is the rest of each stream, in delivery order,
# and the same on both copies.
is($read{target}{c}, $read{source}{c}, 'c read the same rest on both copies');
my %by_stream;
for my $e (split / /, "$first_c $read{target}{c}")
{
	push @{ $by_stream{ (split /:/, $e)[0] } }, $e;
}
is(join(' ', @{ $by_stream{g} }), 'g:x:1 g:x:2 g:x:4 g:x:5 g:x:6 g:x:7 g:x:8',
	'c read each seq of g once, in seq order, across the restore');
is(join(' ', sort @{ $by_stream{pk} }),
	'pk:a:1 pk:a:2 pk:a:3 pk:a:4 pk:b:1 pk:b:2 pk:c:1',
	'c read each event of pk once across the restore');
is(join(' ', (grep { /^pk:a:/ } @{ $by_stream{pk} }), (grep { /^pk:b:/ } @{ $by_stream{pk} })),
	'pk:a:1 pk:a:2 pk:a:3 pk:a:4 pk:b:1 pk:b:2',
	'c read each key of pk in seq order');
is(join(' ', @{ $by_stream{t} }), 't:x:1 t:x:2 t:x:3 t:x:4',
	'c read each seq of t once, in seq order, across the restore');

# Both copies end equal, but for the times of the steps after the dump.
my %final = (
	ranges => q{SELECT stream, range_start, range_end, CASE WHEN stream <> 'f' THEN max_event_ts END
	             FROM ordered_events.ranges ORDER BY stream},
	released => q{SELECT stream, seq, key, payload, event_ts, alignment_ts FROM ordered_events.released
	               WHERE stream <> 'f' ORDER BY stream, key, seq},
	fence => q{SELECT seq, key, payload FROM ordered_events.released WHERE stream = 'f' ORDER BY seq},
	key_status => q{SELECT * FROM ordered_events.key_status ORDER BY stream, key},
	stream_stats => q{SELECT stream, range_end, max_seen_seq, pending_count, released_count,
	                         unprocessed_count, first_gap_start, skipped_count
	                    FROM ordered_events.stream_stats ORDER BY stream},
	skipped_gaps => q{SELECT * FROM ordered_events.skipped_gaps ORDER BY stream, key, gap_start},
	unprocessed => q{SELECT * FROM ordered_events.unprocessed ORDER BY stream, key, seq},
	consumers => q{SELECT consumer, partition, stream, delay, consumed_count, unread_count, bias
	                 FROM ordered_events.consumers});
for my $what (sort keys %final)
{
	is($target->safe_psql($tdb, $final{$what}), $source->safe_psql($sdb, $final{$what}),
		"final $what equal on source and target");
}

$source->stop;
$target->stop;
done_testing();
