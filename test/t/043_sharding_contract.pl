
# The contract of a sharded global stream (docs/sharding.md; issue 25): a
# router and two shard clusters over PL/Proxy, set up as the page says (the
# router connects to the shards as oe_router, with the page's grants; the
# producer and the reader have the page's grants on the router).  The
# router has no worker until the last part: every combine step is run by
# hand, so each test knows what the router saw.
#
# - A lagging shard (its grant of shard_release() to the router revoked):
#   the reader of the page's recipe reads nothing the lagging shard has not
#   released, tells the lag from a skip (ranges.released_end, shard_status,
#   a row for each skipped run), and once the grant is back reads every
#   event once, in seq order, the skipped seq as one row.
# - A shard down longer than the gap timeout (its stored clock moved back
#   past it): the first combine step after the outage skips nothing, the
#   producer's retry of the seq it could not write is accepted, and the
#   gap's clock, started again, runs while every shard answers.  A step
#   looks at a window of max_release_batch seqs: a gap past it is seen too.
# - Bad batches through ingest_many(): a NULL seq or key, arrays of
#   different lengths, a key over the limit, an unknown stream, a NULL or
#   two-dimensional array: the SQLSTATE a single server gives, and nothing
#   written on any shard.
# - A batch that fails on one shard (its grant refused there, or the shard
#   down) is written on the other; the producer's retry of the whole batch
#   is safe: each event is released once, the first part's events are
#   duplicates on their shard.
# - The router's errors: a NULL key (22004, not PL/Proxy's XX000), an
#   existing stream (42710, not 23505), bad arguments of released(); who
#   may call what (producer, reader, a member of reader, another role).
# - A stream whose router row another session holds (an operator's
#   combine() in an open transaction, holding every shard's row too) does
#   not stop combine_all() for the other streams, by hand and in the
#   router's worker, which records no error.
# - A combine step with nothing new writes nothing: no transaction id on
#   the router, no release step on a shard.  The shard side of the step
#   (shard_seq_bits(), shard_release(), and shard_run_set() of
#   skip_gap()): their errors, and who may call them.
# - A write through the router (ingest(), ingest_many()) wakes the router's
#   worker at its commit: with a naptime of an hour, a fill is combined.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my @shards = map { OrderedEvents::node("shard$_", databases => 'postgres', naptime => 200) } 0, 1;
my $router = OrderedEvents::node('router', naptime => 50, extension => 0);

# On each shard, the role the router connects as, with the page's grants.
my $shard_grants = q{
	CREATE ROLE oe_router LOGIN PASSWORD 'secret';
	GRANT USAGE ON SCHEMA ordered_events TO oe_router;
	GRANT EXECUTE ON FUNCTION
	    ordered_events.create_stream(text, text, bigint, text, interval, integer, interval, interval),
	    ordered_events.shard_stream(text),
	    ordered_events.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
	    ordered_events.ingest_array(text, bigint[], text[], jsonb[]),
	    ordered_events.shard_runs(text, bigint, integer),
	    ordered_events.shard_run_set(text, bigint, integer),
	    ordered_events.shard_seq_bits(text, bigint, integer),
	    ordered_events.shard_release(text, bigint),
	    ordered_events.release_through(text, bigint),
	    ordered_events.shard_skip(text, bigint, bigint, text)
	  TO oe_router;
	GRANT INSERT ON ordered_events.inbox TO oe_router;
	GRANT SELECT ON ordered_events.released TO oe_router;
};
$_->safe_psql('postgres', $shard_grants) for @shards;

my $partitions = join ', ', map {
	sprintf "p%d 'dbname=postgres host=%s port=%d connect_timeout=2'", $_,
	  $shards[$_]->host, $shards[$_]->port
} 0, 1;
$router->safe_psql('postgres', qq{
	SET client_min_messages = warning;
	CREATE EXTENSION ordered_events_router CASCADE;
	CREATE SERVER ordered_events_shards FOREIGN DATA WRAPPER plproxy OPTIONS ($partitions);
	CREATE USER MAPPING FOR PUBLIC SERVER ordered_events_shards
	    OPTIONS (user 'oe_router', password 'secret');
	-- the roles of docs/sharding.md, "Setting up", with its grants
	CREATE ROLE producer;
	CREATE ROLE reader;
	GRANT USAGE ON FOREIGN SERVER ordered_events_shards TO producer;
	GRANT USAGE ON SCHEMA ordered_events_router TO producer, reader;
	GRANT EXECUTE ON FUNCTION ordered_events_router.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
	                          ordered_events_router.ingest_many(text, bigint[], text[], jsonb[]) TO producer;
	GRANT EXECUTE ON FUNCTION ordered_events_router.released(text, bigint, integer) TO reader;
	GRANT SELECT ON ordered_events_router.ranges, ordered_events_router.shard_status TO reader;
	-- and two more: a member of reader, a role without grants
	CREATE ROLE reader_member IN ROLE reader;
	CREATE ROLE other;
});

sub router_sql
{
	my ($sql, $role) = @_;
	$sql = "SET ROLE $role;\n$sql" if defined $role;
	return $router->safe_psql('postgres', $sql);
}

# The error of a statement on $node as "SQLSTATE: message" ('' if none).
sub error_of
{
	my ($node, $sql, $role) = @_;
	$sql = "SET ROLE $role;\n$sql" if defined $role;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $err =~ /ERROR:  (\w{5}: [^\n]*)/ ? $1 : "";
}

# Keys by the shard PL/Proxy sends them to (hashtext(key) & 1): 'a' keys on
# shard 0, 'b' keys on shard 1.
my ($key0, $key1) = split /\|/, router_sql(q{
	SELECT (SELECT 'k' || n FROM generate_series(0, 99) n WHERE hashtext('k' || n) & 1 = 0
	         ORDER BY n LIMIT 1),
	       (SELECT 'k' || n FROM generate_series(0, 99) n WHERE hashtext('k' || n) & 1 = 1
	         ORDER BY n LIMIT 1)});
my @key = ($key0, $key1);

# Seq s goes to shard s % 2 unless said otherwise.
sub ingest
{
	my ($stream, @seqs) = @_;
	return router_sql(join(";\n", map {
		"SELECT ordered_events_router.ingest('$stream', $_, '$key[$_ % 2]')"
	} @seqs), 'producer');
}

sub combine
{
	return router_sql("SELECT ordered_events_router.combine('$_[0]')");
}

# What each shard holds of $stream: "accepted/unprocessed" per shard.
sub held
{
	my ($stream) = @_;
	return join ',', map {
		$_->safe_psql('postgres', qq{
			SELECT (SELECT count(*) FROM ordered_events.accepted_events WHERE stream = '$stream')
			       || '/' ||
			       (SELECT count(*) FROM ordered_events.unprocessed WHERE stream = '$stream')})
	} @shards;
}

# The released events of $stream on both shards, "seq:key" by seq.
sub released_on_shards
{
	my ($stream) = @_;
	my @rows = map {
		split /\n/, $_->safe_psql('postgres', qq{
			SELECT seq || ':' || key FROM ordered_events.released WHERE stream = '$stream'})
	} @shards;
	return join ',', sort { (split /:/, $a)[0] <=> (split /:/, $b)[0] } @rows;
}

#
# 1. A lagging shard: the reader reads everything once, in order.
#
router_sql(q{SELECT ordered_events_router.create_stream('lag')});
is(ingest('lag', 1 .. 4), join("\n", ('accepted') x 4), 'lag: 1..4 accepted');
is(combine('lag'), 4, 'lag: the range reaches 5');

# The reader of docs/sharding.md, "Reading a sharded stream": from the seq
# after its last row, max 3 rows a call, as the role reader; what it read,
# "seq:key" for an event, "first-last skipped" for a skipped run.
my $next = router_sql(q{SELECT range_start FROM ordered_events_router.ranges WHERE stream = 'lag'},
	'reader');
is($next, 1, 'lag: the reader starts at range_start, 1');
my @read;

sub read_all
{
	my ($stream) = @_;
	my $calls = 0;
	while (1)
	{
		my $rows = router_sql(qq{
			SELECT seq, key, skipped_through
			  FROM ordered_events_router.released('$stream', $next, 3)}, 'reader');
		$calls++;
		last if $rows eq '';
		for my $row (split /\n/, $rows)
		{
			my ($seq, $key, $skipped_through) = split /\|/, $row, -1;
			push @read, $skipped_through ne '' ? "$seq-$skipped_through skipped" : "$seq:$key";
			$next = ($skipped_through ne '' ? $skipped_through : $seq) + 1;
		}
	}
	return $calls;
}
read_all('lag');
is(join(',', @read), "1:$key1,2:$key0,3:$key1,4:$key0", 'lag: the reader read 1..4');
is($next, 5, 'lag: and goes on from 5');

# A DBA's mistake: shard 1 may no longer release for the router.
$shards[1]->safe_psql('postgres',
	'REVOKE EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) FROM oe_router');
is(ingest('lag', 6 .. 12), join("\n", ('accepted') x 7), 'lag: 6..12 accepted, 5 missing');
is(combine('lag'), 0, 'lag: the range waits at 5');
is( router_sql(q{SELECT ordered_events_router.skip_gap('lag', 5, 'lost upstream')}),
	1, 'lag: the operator skips 5');
is( router_sql(q{SELECT range_end, released_end FROM ordered_events_router.ranges WHERE stream = 'lag'},
		'reader'),
	'13|5', 'lag: the range is at 13, released only below 5 on every shard (the reader sees it)');
like( router_sql(q{SELECT shard, failing, min_released_through, last_error
                     FROM ordered_events_router.shard_status WHERE shard = 1}, 'reader'),
	qr/^1\|t\|5\|.*permission denied for function shard_release/,
	'lag: shard_status shows shard 1 failing to release (the reader sees it)');
is(router_sql(q{SELECT count(*) FROM ordered_events_router.released('lag', 5, 3)}, 'reader'),
	0, 'lag: released() from 5 returns nothing while shard 1 lags');
read_all('lag');
is(scalar(@read) . "/$next", '4/5', 'lag: the reader read nothing more and stays at 5');

# The grant is back: the next step releases shard 1, the reader reads on.
$shards[1]->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) TO oe_router');
is(combine('lag'), 0, 'lag: the next combine step moves no range');
is( router_sql(q{SELECT range_end, released_end FROM ordered_events_router.ranges WHERE stream = 'lag'}),
	'13|13', 'lag: but releases shard 1 through 13');
read_all('lag');
is( join(',', @read),
	join(',', map { $_ == 5 ? '5-5 skipped' : "$_:$key[$_ % 2]" } 1 .. 12),
	'lag: the reader read each of 1..12 once, in seq order, 5 as a skipped run');
is($next, 13, 'lag: and goes on from 13');
is( released_on_shards('lag'), join(',', map { "$_:$key[$_ % 2]" } grep { $_ != 5 } 1 .. 12),
	'lag: each shard released its events once');

# The rows of skipped runs: a long run is one row, cut at from_seq; the
# events before a run fill an answer first.
router_sql(q{SELECT ordered_events_router.skip_gap('lag', 1000000, 'jumped')});
is( router_sql(q{SELECT seq || '/' || coalesce(skipped_through::text, key)
                   FROM ordered_events_router.released('lag', 11, 5)}, 'reader'),
	"11/$key1\n12/$key0\n13/1000000", 'lag: a skipped run of a million seqs is one row');
is( router_sql(q{SELECT seq || '/' || skipped_through
                   FROM ordered_events_router.released('lag', 500, 5)}, 'reader'),
	'500/1000000', 'lag: read from inside it, it starts at from_seq');
is( router_sql(q{SELECT string_agg(seq::text, ',') FROM ordered_events_router.released('lag', 7, 3)},
		'reader'),
	'7,8,9', 'lag: three rows from 7');
is( router_sql(q{SELECT string_agg(seq || ':' || coalesce(skipped_through::text, ''), ',')
                   FROM ordered_events_router.released('lag', 3, 3)}, 'reader'),
	'3:,4:,5:5', 'lag: a skipped run counts as one row');

#
# 2. A shard down longer than the gap timeout: nothing is skipped for it.
#
router_sql(q{SELECT ordered_events_router.create_stream('outage', gap_policy => 'timeout',
                                                        gap_timeout => '1 hour')});
# 1 and 3 on shard 0, 2 (missing) of a key of shard 1.
is( router_sql(qq{SELECT ordered_events_router.ingest('outage', 1, '$key0'),
                         ordered_events_router.ingest('outage', 3, '$key0')}, 'producer'),
	'accepted|accepted', 'outage: 1 and 3 accepted on shard 0, 2 missing');
is(combine('outage'), 1, 'outage: the range reaches 2');
is( router_sql(q{SELECT gap_start, gap_first_seen IS NOT NULL FROM ordered_events_router.stream
                  WHERE stream = 'outage'}),
	'2|t', 'outage: the gap at 2 is seen, its clock starts');

$shards[1]->stop;
is(combine('outage'), 0, 'outage: shard 1 down, the range holds');
# The outage lasts two hours: every stored clock of the stream goes back.
router_sql(q{
	UPDATE ordered_events_router.stream
	   SET gap_first_seen = gap_first_seen - interval '2 hours'
	 WHERE stream = 'outage'});
is(combine('outage'), 0, 'outage: still down, still held');
like( error_of($router, "SELECT ordered_events_router.ingest('outage', 2, '$key1')", 'producer'),
	qr/^XX000: PL\/Proxy function ordered_events_router\.on_shard_ingest\(7\): .*connection to server .* failed/,
	'outage: the producer cannot write 2, of a key of shard 1, while shard 1 is down');
$shards[1]->start;
is(combine('outage'), 0, 'outage: the first step after it skips nothing');
is( router_sql(q{SELECT range_end, gap_start, gap_first_seen > now() - interval '1 minute'
                   FROM ordered_events_router.stream WHERE stream = 'outage'}),
	'2|2|t', 'outage: the range waits at 2, the gap\'s clock started again');
is(router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'outage'}),
	0, 'outage: nothing skipped');
is( router_sql("SELECT ordered_events_router.ingest('outage', 2, '$key1')", 'producer'),
	'accepted', 'outage: the producer\'s retry of 2 is accepted');
is(combine('outage'), 2, 'outage: the range goes on to 4');
is( released_on_shards('outage'), "1:$key0,2:$key1,3:$key0",
	'outage: 1, 2 and 3 released once each');

# The clock runs while every shard answers: a gap older than the timeout
# with every shard answering is skipped.
is(ingest('outage', 5), 'accepted', 'outage: 5 accepted, 4 missing');
is(combine('outage'), 0, 'outage: the gap at 4 is seen');
router_sql(q{
	UPDATE ordered_events_router.stream
	   SET gap_first_seen = gap_first_seen - interval '2 hours'
	 WHERE stream = 'outage'});
is(combine('outage'), 2, 'outage: every shard answering, the timed-out gap at 4 is skipped');
is( router_sql(q{SELECT gap_start, gap_end, reason FROM ordered_events_router.skip
                  WHERE stream = 'outage'}),
	'4|4|gap_timeout 01:00:00 expired', 'outage: the skip of 4 is recorded');

# A step looks at max_release_batch seqs from the range's end (the shards'
# bitmaps of that window): a full window moves the range that far and
# judges no gap; a gap whose next seq lies past the window is seen, and
# times out, as any other.
router_sql(q{SELECT ordered_events_router.create_stream('window', max_release_batch => 3,
                                                        gap_policy => 'timeout',
                                                        gap_timeout => '1 hour')});
is(ingest('window', 1 .. 5, 9), join("\n", ('accepted') x 6), 'window: 1..5 and 9 accepted');
is(combine('window'), 3, 'window: a step moves the range 3 seqs, its window');
is( router_sql(q{SELECT range_end, gap_start IS NULL FROM ordered_events_router.stream
                  WHERE stream = 'window'}),
	'4|t', 'window: a full window judges no gap');
is(combine('window'), 2, 'window: the next step reaches 6');
is( router_sql(q{SELECT gap_start FROM ordered_events_router.stream WHERE stream = 'window'}),
	'6', 'window: the gap at 6 is seen, 9 past the window');
router_sql(q{
	UPDATE ordered_events_router.stream
	   SET gap_first_seen = gap_first_seen - interval '2 hours'
	 WHERE stream = 'window'});
is(combine('window'), 3, 'window: the timed-out gap 6..8 is skipped');
is(combine('window'), 1, 'window: and 9 released');
is( router_sql(q{SELECT gap_start, gap_end FROM ordered_events_router.skip WHERE stream = 'window'}),
	'6|8', 'window: the skip of 6..8 is recorded');
is( released_on_shards('window'), join(',', map { "$_:$key[$_ % 2]" } 1 .. 5, 9),
	'window: 1..5 and 9 released once each');

#
# 3. Bad batches: the error a single server gives, nothing written anywhere.
#
router_sql(q{SELECT ordered_events_router.create_stream('batch')});
# Each bad event is the last of its batch; the others go to both shards.
my %bad = (
	'a NULL seq' => [ "ARRAY[1, 2, NULL]", "ARRAY['$key1', '$key0', '$key1']",
		'ARRAY[NULL, NULL, NULL]::jsonb[]',
		'22004: seq must not be null' ],
	'a NULL key' => [ "ARRAY[1, 2, 3]", "ARRAY['$key1', '$key0', NULL]",
		'ARRAY[NULL, NULL, NULL]::jsonb[]',
		'22004: key must not be null' ],
	'a key over the limit' => [ "ARRAY[1, 2, 3]", "ARRAY['$key1', '$key0', repeat('x', 1025)]",
		'ARRAY[NULL, NULL, NULL]::jsonb[]',
		'22001: key of 1025 bytes is too long' ],
	'fewer keys' => [ "ARRAY[1, 2, 3]", "ARRAY['$key1', '$key0']",
		'ARRAY[NULL, NULL, NULL]::jsonb[]',
		'22023: seqs, keys and payloads must have the same length' ],
	'fewer payloads' => [ "ARRAY[1, 2, 3]", "ARRAY['$key1', '$key0', '$key1']",
		'ARRAY[NULL, NULL]::jsonb[]',
		'22023: seqs, keys and payloads must have the same length' ],
	'no payloads' => [ "ARRAY[1, 2, 3]", "ARRAY['$key1', '$key0', '$key1']", 'NULL',
		'22004: payloads must not be null' ],
	'two dimensions' => [ "ARRAY[[1, 2], [3, 4]]", "ARRAY['$key1', '$key0', '$key1', '$key0']",
		'ARRAY[NULL, NULL, NULL, NULL]::jsonb[]',
		'22023: seqs must be a one-dimensional array' ]);
for my $what (sort keys %bad)
{
	my ($seqs, $keys, $payloads, $error) = @{ $bad{$what} };
	is( error_of($router, "SELECT * FROM ordered_events_router.ingest_many('batch', $seqs, $keys, $payloads)",
			'producer'),
		$error, "batch: $what is refused");
	is(held('batch'), '0/0,0/0', "batch: $what: nothing written on any shard");
}
is( error_of($router, "SELECT * FROM ordered_events_router.ingest_many('nope', ARRAY[1, 2], "
		  . "ARRAY['$key0', '$key1'], ARRAY[NULL, NULL]::jsonb[])", 'producer'),
	'42704: stream "nope" does not exist', 'batch: an unknown stream is refused on the router');
is( router_sql("SELECT count(*) FROM ordered_events_router.ingest_many('batch', '{}', '{}', '{}')",
		'producer'),
	0, 'batch: an empty batch calls no shard');
is( router_sql("SELECT sum(n) || ' on ' || count(*) FROM ordered_events_router.ingest_many('batch', "
		  . "ARRAY[1, 2, 3, 4], ARRAY['$key1', '$key0', '$key1', repeat('x', 1024)], "
		  . "ARRAY['{\"n\": 1}', NULL, NULL, NULL]::jsonb[]) n", 'producer'),
	'4 on 2', 'batch: a good one (a key of 1024 bytes is the longest) is written, a count per shard');
is(combine('batch'), 4, 'batch: and released');

#
# 4. A batch that fails on one shard: the retry of the whole batch is safe.
#
router_sql(q{SELECT ordered_events_router.create_stream('retry')});
my $batch = sub {
	my @seqs = @_;
	return sprintf "SELECT string_agg(n::text, ',' ORDER BY n) FROM "
	  . "ordered_events_router.ingest_many('retry', ARRAY[%s], ARRAY[%s], "
	  . "array_fill(NULL::jsonb, ARRAY[%d])) n",
	  join(', ', @seqs), join(', ', map { "'$key[$_ % 2]'" } @seqs), scalar @seqs;
};
# Shard 1 refuses: its part fails, shard 0's part is written.  The
# producer's session has both shards' connections open (a first batch of
# another stream), so that PL/Proxy sends both parts before either answers.
router_sql(q{SELECT ordered_events_router.create_stream('warm')});
my $producer = $router->background_psql('postgres', on_error_stop => 0);
$producer->query_safe("SET client_min_messages = warning;\nSET ROLE producer;\n\\set VERBOSITY verbose");
$producer->query_safe("SELECT * FROM ordered_events_router.ingest_many('warm', ARRAY[1, 2], "
	  . "ARRAY['$key1', '$key0'], ARRAY[NULL, NULL]::jsonb[])");
is(combine('warm'), 2, 'retry: the producer\'s session wrote a first batch');
$shards[1]->safe_psql('postgres', 'REVOKE INSERT ON ordered_events.inbox FROM oe_router');
$producer->query($batch->(1 .. 6));
like($producer->{stderr}, qr/ERROR:  42501: .*permission denied for view inbox/,
	'retry: shard 1 refuses its part of 1..6 (42501)');
like($producer->{stderr}, qr/\nHINT:  The shards that answered may have written their part: there is no commit across servers\. Send the whole batch again once every shard answers: an event a shard holds already is a duplicate there\.\n/,
	'retry: with the router\'s hint: the other parts may be written, the batch may be sent again');
$producer->{stderr} = '';
ok( $shards[0]->poll_query_until('postgres',
		q{SELECT count(*) FROM ordered_events.accepted_events WHERE stream = 'retry'}, 3),
	'retry: shard 0 wrote its part (2, 4, 6): there is no commit across servers');
is(held('retry'), '3/0,0/0', 'retry: shard 1 wrote nothing');
$shards[1]->safe_psql('postgres', 'GRANT INSERT ON ordered_events.inbox TO oe_router');
is(router_sql($batch->(1 .. 6), 'producer'), '0,3',
	'retry: the whole batch again: shard 0 accepts none, shard 1 its three');
is(held('retry'), '3/3,3/0', 'retry: shard 0\'s events are duplicates there');
is( join(',', map { $_->safe_psql('postgres', q{
		SELECT string_agg(seq || ' ' || reason, ',' ORDER BY seq) FROM ordered_events.unprocessed
		 WHERE stream = 'retry'}) } @shards),
	'2 duplicate,4 duplicate,6 duplicate,', 'retry: as duplicates of 2, 4 and 6');

# Shard 1 down: the same, retried once it is back.
$shards[1]->stop;
my ($ret, $out, $err) = $router->psql('postgres', "SET ROLE producer;\n" . $batch->(7 .. 10));
like( $err,
	qr/ERROR:  PL\/Proxy function ordered_events_router\.on_shards_ingest\(4\): .*connection to server .* failed.*\nHINT:  The shards that answered may have written their part: there is no commit across servers\. Send the whole batch again once every shard answers: an event a shard holds already is a duplicate there\./s,
	'retry: shard 1 down, the batch 7..10 fails, with a hint to send it again');
$shards[1]->start;
my $again = router_sql($batch->(7 .. 10), 'producer');
like($again, qr/^(0|2),2$/, "retry: sent again, shard 1 accepts its two ($again)");
is(combine('retry'), 10, 'retry: the range reaches 11');
is( released_on_shards('retry'), join(',', map { "$_:$key[$_ % 2]" } 1 .. 10),
	'retry: each of 1..10 released once');
is(join(',', map { $_->safe_psql('postgres', q{
		SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'retry' AND reason <> 'duplicate'})
	} @shards), '0,0', 'retry: nothing rejected but duplicates');

#
# 5. The router's errors, and who may call what.
#
is( error_of($router, "SELECT ordered_events_router.ingest('batch', 9, NULL)", 'producer'),
	'22004: key must not be null', 'errors: ingest() of a NULL key is 22004');
like( error_of($router, "SELECT ordered_events_router.ingest('batch', NULL, 'k')", 'producer'),
	qr/^22004: .*seq must not be null/, 'errors: of a NULL seq, 22004 from the shard');
like( error_of($router, "SELECT ordered_events_router.ingest('batch', 9, repeat('x', 1025))", 'producer'),
	qr/^22001: .*key of 1025 bytes is too long/, 'errors: of a key over the limit, 22001 from the shard');
is( error_of($router, q{SELECT ordered_events_router.create_stream('batch')}),
	'42710: stream "batch" already exists', 'errors: create_stream() of an existing stream is 42710');
is( error_of($router, q{SELECT ordered_events_router.create_stream(NULL)}),
	'22004: stream must not be null', 'errors: create_stream() of NULL is 22004');
is( error_of($router, q{SELECT ordered_events_router.create_stream('x', 'both')}),
	'22023: invalid value for sequencing: both', 'errors: a bad sequencing is 22023');
is( error_of($router, q{SELECT * FROM ordered_events_router.released('batch', NULL)}, 'reader'),
	'22004: from_seq and max_events must not be null', 'errors: released() from NULL is 22004');
is( error_of($router, q{SELECT * FROM ordered_events_router.released('batch', 1, 0)}, 'reader'),
	'22023: invalid value for max_events: 0', 'errors: released() of 0 events is 22023');
is( error_of($router, q{SELECT * FROM ordered_events_router.released('nope', 1)}, 'reader'),
	'42704: no global stream "nope" on this router', 'errors: released() of an unknown stream is 42704');

# who may read: reader and its member; not another role; nor write
for my $role ('reader', 'reader_member')
{
	is( router_sql(q{SELECT count(*) FROM ordered_events_router.released('batch', 1)}, $role)
		  . '/' . router_sql(q{SELECT count(*) FROM ordered_events_router.ranges}, $role)
		  . '/' . router_sql(q{SELECT count(*) FROM ordered_events_router.shard_status}, $role),
		'4/6/2', "grants: $role reads released(), ranges and shard_status");
	like( error_of($router, "SELECT ordered_events_router.ingest('batch', 20, '$key0')", $role),
		qr/^42501: permission denied for function ingest/, "grants: $role may not ingest()");
}
like( error_of($router, q{SELECT * FROM ordered_events_router.released('batch', 1)}, 'other'),
	qr/^42501: permission denied for (schema ordered_events_router|function released)/,
	'grants: another role may not read');
like( error_of($router, "SELECT * FROM ordered_events_router.ingest_many('batch', ARRAY[20], "
		  . "ARRAY['$key0'], ARRAY[NULL]::jsonb[])", 'reader'),
	qr/^42501: permission denied for function ingest_many/, 'grants: reader may not ingest_many()');
is(router_sql("SELECT ordered_events_router.ingest('batch', 20, '$key0')", 'producer'),
	'accepted', 'grants: producer ingests');

#
# 6. A stream another session holds does not stop combine_all().
#
is(ingest('lag', 1000001), 'accepted', 'locked: an event for stream lag');
is(ingest('retry', 11), 'accepted', 'locked: and one for stream retry');
router_sql(q{UPDATE ordered_events_router.shard SET last_ok_at = now() - interval '1 hour'});
# An operator's combine step of stream lag in an open transaction: it holds
# lag's row and, noting a shard's answer, every shard's row.
my $operator = $router->background_psql('postgres');
$operator->query_safe('BEGIN');
is($operator->query_safe(q{SELECT ordered_events_router.combine('lag')}), 1,
	'locked: an operator\'s combine() of lag, not committed');
is( router_sql(q{
		SELECT (SELECT count(*) FROM (SELECT FROM ordered_events_router.stream
		                               WHERE stream = 'lag' FOR UPDATE SKIP LOCKED) x)
		       || '/' ||
		       (SELECT count(*) FROM (SELECT FROM ordered_events_router.shard
		                               FOR UPDATE SKIP LOCKED) y)}),
	'0/0', 'locked: it holds the row of lag and the row of every shard');
is( router_sql(q{
		SET lock_timeout = '2s';
		SELECT ordered_events_router.combine_all()}),
	1, 'locked: combine_all() by hand, with a lock_timeout, combines retry');
is( router_sql(q{SELECT string_agg(stream || ' ' || range_end, ',' ORDER BY stream)
                   FROM ordered_events_router.ranges WHERE stream IN ('lag', 'retry')}),
	'lag 1000001,retry 12', 'locked: retry moved, lag is left to the operator');

# The router's worker, on now: its cycles go on, without an error.
is(ingest('retry', 12), 'accepted', 'locked: another event for retry');
$router->append_conf('postgresql.conf', "ordered_events.databases = 'postgres'");
$router->reload;
ok( $router->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events_router.ranges WHERE stream = 'retry'}, 13),
	'locked: the router\'s worker combines retry');
ok(OrderedEvents::two_more_cycles($router), 'locked: the worker runs its cycles');
is( router_sql(q{SELECT coalesce(last_error, 'none') FROM ordered_events.worker_status
                  WHERE database = 'postgres' AND kind = 'release'}),
	'none', 'locked: no error in worker_status');
$operator->query_safe('COMMIT');
$operator->quit;
ok( $router->poll_query_until('postgres', q{
	SELECT range_end FROM ordered_events_router.ranges WHERE stream = 'lag'}, 1000002),
	'locked: the operator done, the worker combines lag too');

#
# 7. A combine step with nothing new writes nothing (issue 25, speed): no
#    transaction id on the router, no release step on any shard.
#
ok( $router->poll_query_until('postgres', q{
	SELECT ordered_events_router.combine_all() = 0 AND txid_current_if_assigned() IS NULL}),
	'idle: combine_all() with nothing new assigns no transaction id');
my $shard_steps = q{SELECT count(*) FROM ordered_events.lane_release_log l
                     JOIN ordered_events.stream_def d USING (stream_id) WHERE d.sharded};
my @steps = map { $_->safe_psql('postgres', $shard_steps) } @shards;
is( router_sql(q{SELECT ordered_events_router.combine('lag') || '/'
                        || (txid_current_if_assigned() IS NULL)}),
	'0/true', 'idle: combine() of lag moves nothing and assigns no transaction id');
is( router_sql(q{SELECT ordered_events_router.combine('retry') || '/'
                        || (txid_current_if_assigned() IS NULL)}),
	'0/true', 'idle: nor of retry');
is(join(',', map { $_->safe_psql('postgres', $shard_steps) } @shards), join(',', @steps),
	'idle: no shard ran a release step');

# The shard side of the step: its errors, and who may call it.
$shards[0]->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('plain');
	CREATE ROLE nobody_25;
	GRANT USAGE ON SCHEMA ordered_events TO nobody_25;
});
is(error_of($shards[0], q{SELECT ordered_events.shard_run_set('lag', NULL, 10)}),
	'22004: stream, from_seq and max_events must not be null', 'shard: shard_run_set() of NULL');
is(error_of($shards[0], q{SELECT ordered_events.shard_run_set('lag', 1, 0)}),
	'22023: invalid value for max_events: 0', 'shard: shard_run_set() of no events');
is(error_of($shards[0], q{SELECT ordered_events.shard_run_set('plain', 1, 10)}),
	'55000: stream "plain" is not sharded', 'shard: shard_run_set() of a stream not sharded');
like(error_of($shards[0], q{SELECT ordered_events.shard_run_set('nosuch', 1, 10)}),
	qr/^42704: /, 'shard: shard_run_set() of no stream');
is(error_of($shards[0], q{SELECT ordered_events.shard_seq_bits('lag', NULL, 10)}),
	'22004: from_seq must not be null', 'shard: shard_seq_bits() of NULL');
is(error_of($shards[0], q{SELECT ordered_events.shard_seq_bits('lag', 1, 0)}),
	'22023: span must be between 1 and 134217728', 'shard: shard_seq_bits() of no seqs');
is(error_of($shards[0], q{SELECT ordered_events.shard_seq_bits('plain', 1, 10)}),
	'55000: stream "plain" is not sharded', 'shard: shard_seq_bits() of a stream not sharded');
is(error_of($shards[0], q{SELECT ordered_events.shard_release('lag', NULL)}),
	'22004: through_seq must not be null', 'shard: shard_release() of NULL');
is(error_of($shards[0], q{SELECT ordered_events.shard_release('plain', 10)}),
	'55000: stream "plain" is not sharded', 'shard: shard_release() of a stream not sharded');
is(error_of($shards[0], q{SELECT ordered_events.shard_run_set('lag', 1, 10)}, 'nobody_25'),
	'42501: permission denied for function shard_run_set', 'shard: another role may not call shard_run_set()');
is(error_of($shards[0], q{SELECT ordered_events.shard_seq_bits('lag', 1, 10)}, 'nobody_25'),
	'42501: permission denied for function shard_seq_bits', 'shard: nor shard_seq_bits()');
is(error_of($shards[0], q{SELECT ordered_events.shard_release('lag', 1)}, 'nobody_25'),
	'42501: permission denied for function shard_release', 'shard: nor shard_release()');
is($shards[0]->safe_psql('postgres', q{SET ROLE oe_router;
	SELECT ordered_events.shard_run_set('lag', 1, 3) IS NOT NULL,
	       (ordered_events.shard_seq_bits('lag', 1, 3)).seqs IS NOT NULL,
	       (ordered_events.shard_release('lag', 1)).released}),
	't|t|0', 'shard: the router\'s role calls them (below 1: nothing to release)');

$producer->quit;

#
# 8. A write through the router wakes the router's worker at its commit
#    (issue 25, speed): with a naptime of an hour, the worker combines a
#    fill written by ingest_many(), and then an event of ingest(), at once.
#
$router->append_conf('postgresql.conf', 'ordered_events.naptime = 3600000');
$router->restart;
ok( $router->poll_query_until('postgres', q{
	SELECT cycles >= 1 FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	'wake: the router\'s worker ran its first cycle, and waits an hour for the next');
router_sql(q{SELECT ordered_events_router.create_stream('wake')});
is(ingest('wake', 2), 'accepted', 'wake: 2 is written, 1 is missing');
is( router_sql(q{
	SELECT ordered_events_router.ingest_many('wake', ARRAY[1], ARRAY['k'], ARRAY[NULL]::jsonb[])},
	'producer'), '1', 'wake: ingest_many() writes the fill');
ok( $router->poll_query_until('postgres', q{
	SELECT released_end FROM ordered_events_router.ranges WHERE stream = 'wake'}, 3),
	'wake: the worker combined the fill and released it on every shard');
is(ingest('wake', 3), 'accepted', 'wake: ingest() writes 3');
ok( $router->poll_query_until('postgres', q{
	SELECT released_end FROM ordered_events_router.ranges WHERE stream = 'wake'}, 4),
	'wake: the worker combined it too');

$_->stop for $router, @shards;
done_testing();
