
# The examples of docs/sharding.md, run as the page shows them: a router
# and two shards (shard0, shard1), each a cluster of its own with a
# database of its name, PL/Proxy on the router.  Each ```sql block of the
# page is below word for word (test/docs_examples checks that), cut into
# its statements, and run on the server its comments name, in the page's
# order; every result is checked against what the page says it returns.
#
# What the test does that the page does not show, each marked where it
# happens:
# - the connection strings of the router's server: the page's
#   host=shardN.example.com port=5432 become the shard clusters' sockets
#   and ports;
# - the roles producer and reader, which the page grants to, are created,
#   and the router's ingest(), ingest_many() and released() run as them
#   (SET ROLE), and so do the reader's queries of ranges and shard_status
#   in "Reading a sharded stream": the grants are the ones the page gives;
#   every call from the router to a shard runs as oe_router, with the
#   shard-side grants of the page;
# - the router's worker is off until the monitoring examples, so that the
#   combine steps by hand return what the page says (with the worker on,
#   it would have combined before them); then it is turned on;
# - SELECT pg_sleep(2) of the gap timeout example moves the stored clock
#   of the gap 2 seconds back instead of waiting;
# - "with shard 1 stopped" and "once it runs again": the shard cluster is
#   stopped and started;
# - a wait for a shard's worker where the page says "once its worker ran".

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

# The shards' workers serve their databases (set once these exist); the
# router's does not, until the monitoring examples.
my @shards = map { OrderedEvents::node("shard$_", naptime => 200, extension => 0) } 0, 1;
my $router = OrderedEvents::node('router', naptime => 200, extension => 0);
my %node = (router => $router, shard0 => $shards[0], shard1 => $shards[1]);
$node{$_}->safe_psql('postgres', "CREATE DATABASE $_") for sort keys %node;

# The statements of a block, in order: each ends with a ";" at the end of
# a line (a comment may follow); the comment lines between them, which say
# what they return, are left out.
sub statements
{
	my ($block) = @_;
	my (@statements, $current);
	for my $line (split /\n/, $block)
	{
		next if !defined $current && $line =~ /^\s*(--.*)?$/;
		$current .= "$line\n";
		if ($line =~ /;\s*(--.*)?$/)
		{
			push @statements, $current;
			undef $current;
		}
	}
	die "a statement without its end: $current" if defined $current;
	return @statements;
}

# Run $sql on $where (router, shard0 or shard1), in the database of that
# name, as $role if given (else as the bootstrap superuser, the owner of
# everything): what it printed.  Dies on an error.
sub run
{
	my ($where, $sql, $role) = @_;
	$sql = "SET ROLE $role;\n$sql" if defined $role;
	return $node{$where}->safe_psql($where, $sql);
}

# Run a statement of the page on the router, as the page's grants say who
# calls it: producer writes (ingest(), ingest_many()), reader reads
# (released()), the owner does the rest.
sub on_router
{
	my ($sql, $role) = @_;
	$role //=
	    $sql =~ /ordered_events_router\.ingest/ ? 'producer'
	  : $sql =~ /ordered_events_router\.released\(/ ? 'reader'
	  : undef;
	return run('router', $sql, $role);
}

# Lines of output in a fixed order, for a query of the page without
# ORDER BY.
sub sorted
{
	return join "\n", sort split /\n/, $_[0];
}

#
# Setting up: on each shard, the role the router connects as.
#
my @shard_setup = statements(<<'SQL');
CREATE ROLE oe_router LOGIN PASSWORD 'secret';
CREATE EXTENSION ordered_events;
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
GRANT INSERT ON ordered_events.inbox TO oe_router;        -- ingest_array() writes through it
GRANT SELECT ON ordered_events.released TO oe_router;     -- the router's released()
SQL
is(scalar @shard_setup, 6, 'setup: the shards\' block has six statements');
for my $shard ('shard0', 'shard1')
{
	run($shard, $_) for @shard_setup;
	# The page's postgresql.conf: ordered_events.databases = 'shard0'.
	$node{$shard}->append_conf('postgresql.conf', "ordered_events.databases = '$shard'");
	$node{$shard}->reload;
	ok( $node{$shard}->poll_query_until($shard, qq{
		SELECT pid IS NOT NULL AND cycles > 0
		  FROM ordered_events.worker_status WHERE database = '$shard' AND kind = 'release'}),
		"setup: $shard is set up, its worker serves it");
}

# On the router: the extension, the cluster, the user mapping.  The page's
# hosts stand for the shards': here, the clusters' sockets and ports.
my $router_setup = <<'SQL';
CREATE EXTENSION ordered_events_router CASCADE;
--  NOTICE:  installing required extension "plproxy"
--  NOTICE:  installing required extension "ordered_events"
CREATE SERVER ordered_events_shards FOREIGN DATA WRAPPER plproxy OPTIONS (
    p0 'dbname=shard0 host=shard0.example.com port=5432 connect_timeout=2',
    p1 'dbname=shard1 host=shard1.example.com port=5432 connect_timeout=2');
CREATE USER MAPPING FOR PUBLIC SERVER ordered_events_shards
    OPTIONS (user 'oe_router', password 'secret');
SQL
my $hosts = $router_setup =~ s{host=(shard[01])\.example\.com port=5432}
	{'host=' . $node{$1}->host . ' port=' . $node{$1}->port}ge;
is($hosts, 2, 'setup: both connection strings point at the shard clusters');
my @router_setup = statements($router_setup);
is(scalar @router_setup, 3, 'setup: the router\'s block has three statements');
my ($ret, $stdout, $stderr) = (0, '', '');
$ret = $router->psql('router', $router_setup[0], stdout => \$stdout, stderr => \$stderr);
is($ret, 0, 'setup: CREATE EXTENSION ordered_events_router CASCADE');
like( $stderr,
	qr/NOTICE:  installing required extension "plproxy"\n.*NOTICE:  installing required extension "ordered_events"/s,
	'setup: it installs plproxy and ordered_events, with the notices the page shows');
run('router', $_) for @router_setup[ 1, 2 ];
is(run('router', 'SELECT ordered_events_router.shard_count()'), 2, 'setup: the router has two shards');

# The roles the page grants to (it does not show them made).
run('router', 'CREATE ROLE producer; CREATE ROLE reader');
my @router_grants = statements(<<'SQL');
GRANT USAGE ON FOREIGN SERVER ordered_events_shards TO producer;
GRANT USAGE ON SCHEMA ordered_events_router TO producer, reader;
GRANT EXECUTE ON FUNCTION ordered_events_router.ingest(text, bigint, text, jsonb, timestamptz, timestamptz, boolean),
                          ordered_events_router.ingest_many(text, bigint[], text[], jsonb[]) TO producer;
GRANT EXECUTE ON FUNCTION ordered_events_router.released(text, bigint, integer) TO reader;
GRANT SELECT ON ordered_events_router.ranges, ordered_events_router.shard_status TO reader;
SQL
is(scalar @router_grants, 5, 'setup: the grants block has five statements');
run('router', $_) for @router_grants;
is( run('router', q{
		SELECT count(*) FROM ordered_events.worker_status WHERE database = 'router' AND kind = 'release'}),
	0, 'setup: no worker serves the router\'s database yet');

#
# The example, sharded.
#
is( run('router', q{SELECT hashtext('key1') & 1, hashtext('key2') & 1}),
	'0|1', 'example: key1 hashes to shard 0, key2 to shard 1');
my @example = statements(<<'SQL');
SELECT ordered_events_router.create_stream('orders');   -- on every shard

SELECT ordered_events_router.ingest('orders', 1, 'key1', '{"op": "create"}');
SELECT ordered_events_router.ingest('orders', 3, 'key1', '{"op": "pay"}');
SELECT ordered_events_router.ingest('orders', 2, 'key2', '{"op": "create"}');
SELECT ordered_events_router.ingest('orders', 7, 'key2', '{"op": "ship"}');
SELECT ordered_events_router.ingest('orders', 5, 'key2', '{"op": "pay"}');
SELECT ordered_events_router.ingest('orders', 4, 'key1', '{"op": "ship"}');
SELECT ordered_events_router.ingest('orders', 3, 'key1', '{"op": "pay"}');   -- a retry
--  duplicate                                       the same key: the same shard

SELECT ordered_events_router.combine('orders');     -- the router's worker does this by itself
--  5
SELECT stream, range_start, range_end FROM ordered_events_router.ranges;
--  orders | 1 | 6
SELECT seq, key, payload FROM ordered_events_router.released('orders', 1, 100);
--  1 | key1 | {"op": "create"}
--  2 | key2 | {"op": "create"}
--  3 | key1 | {"op": "pay"}
--  4 | key1 | {"op": "ship"}
--  5 | key2 | {"op": "pay"}

SELECT ordered_events_router.ingest('orders', 6, 'key1', '{"op": "refund"}');
SELECT ordered_events_router.combine('orders');
--  2                                               range [1,8): 6, then 7
SELECT seq, key FROM ordered_events_router.released('orders', 6, 100);
--  6 | key1
--  7 | key2
SELECT shard, released_through FROM ordered_events_router.shard_stream WHERE stream = 'orders';
--  0 | 8
--  1 | 8
SQL
is(scalar @example, 15, 'example: the block has fifteen statements');
is(on_router($example[0]), '', 'example: create_stream(\'orders\')');
is( join(',', map { run($_, q{SELECT count(*) FROM ordered_events.streams WHERE stream = 'orders'}) }
		'shard0', 'shard1'),
	'1,1', 'example: the stream exists on every shard');
is( join(',', map { on_router($_) } @example[ 1 .. 7 ]),
	'accepted,accepted,accepted,accepted,accepted,accepted,duplicate',
	'example: six events accepted, the retry of 3 a duplicate');
# docs/sharding.md, "Limits": gaps() on a shard before the first combine
# step lists the seqs of other shards.
is( run('shard0', q{SELECT gap_start, gap_end FROM ordered_events.gaps('orders')}),
	'2|2', 'limits: gaps() on shard0 lists 2 (key2\'s, on shard1) before the first combine step');
is(on_router($example[8]), '5', 'example: combine() moves the range 5 seqs');
is(on_router($example[9]), 'orders|1|6', 'example: the range is [1,6)');
is( on_router($example[10]),
	join("\n", '1|key1|{"op": "create"}', '2|key2|{"op": "create"}', '3|key1|{"op": "pay"}',
		'4|key1|{"op": "ship"}', '5|key2|{"op": "pay"}'),
	'example: released() returns 1 to 5 in seq order');
is(on_router($example[11]), 'accepted', 'example: 6 accepted');
is(on_router($example[12]), '2', 'example: the next combine step moves the range 2 seqs');
is(on_router($example[13]), "6|key1\n7|key2", 'example: released() from 6: 6 and 7');
is(sorted(on_router($example[14])), "0|8\n1|8", 'example: both shards released through 8');

my @on_shards = statements(<<'SQL');
-- on shard0
SELECT seq, key FROM ordered_events.released WHERE stream = 'orders';
--  1 key1 / 3 key1 / 4 key1 / 6 key1
SELECT stream, range_end, released_count FROM ordered_events.stream_stats WHERE stream = 'orders';
--  orders | 8 | 4
-- on shard1
SELECT seq, key FROM ordered_events.released WHERE stream = 'orders';
--  2 key2 / 5 key2 / 7 key2
SQL
is(scalar @on_shards, 3, 'example on the shards: the block has three statements');
is( sorted(run('shard0', $on_shards[0])), "1|key1\n3|key1\n4|key1\n6|key1",
	'example on the shards: shard0 released 1, 3, 4 and 6 of key1');
# released_count is counted by the shard's worker.
ok($shards[0]->poll_query_until('shard0', $on_shards[1], 'orders|8|4'),
	'example on the shards: shard0\'s stream_stats: range_end 8, 4 released');
is(sorted(run('shard1', $on_shards[2])), "2|key2\n5|key2\n7|key2",
	'example on the shards: shard1 released 2, 5 and 7 of key2');

#
# A shard that does not answer holds the range.
#
my @shard_down = statements(<<'SQL');
SELECT ordered_events_router.ingest('orders', 9, 'key1', '{"op": "create"}');
--  accepted
SELECT ordered_events_router.ingest('orders', 8, 'key2', '{"op": "refund"}');
--  ERROR:  PL/Proxy function ordered_events_router.on_shard_ingest(7): [shard1] ...: connection to server ... failed: ...
SELECT ordered_events_router.combine('orders');
--  0
SELECT stream, range_end FROM ordered_events_router.ranges;
--  orders | 8
SELECT shard, failing, min_released_through, last_error FROM ordered_events_router.shard_status;
--  0 | f | 8 |
--  1 | t | 8 | PL/Proxy function ordered_events_router.on_shard_seq_bits(4): [shard1] ...: connection to server ... failed: ...
SQL
is(scalar @shard_down, 5, 'shard down: the block has five statements');
# "With shard 1 stopped"
$shards[1]->stop;
is(on_router($shard_down[0]), 'accepted', 'shard down: 9 of key1 accepted on shard0');
($ret, $stdout, $stderr) = $router->psql('router', "SET ROLE producer;\n$shard_down[1]");
isnt($ret, 0, 'shard down: 8 of key2 is refused');
like( $stderr,
	qr/ERROR:  PL\/Proxy function ordered_events_router\.on_shard_ingest\(7\): \[shard1\] \w+: connection to server .* failed: /,
	'shard down: PL/Proxy could not connect to shard1');
is(on_router($shard_down[2]), '0', 'shard down: combine() does not move the range');
is(on_router($shard_down[3]), 'orders|8', 'shard down: the range holds at 8');
my @status = split /\n/, on_router($shard_down[4]);
is($status[0], '0|f|8|', 'shard down: shard 0 answers');
like( $status[1],
	qr/^1\|t\|8\|PL\/Proxy function ordered_events_router\.on_shard_seq_bits\(4\): \[shard1\] \w+: connection to server .* failed: /,
	'shard down: shard 1 is failing, with its error');

my @shard_back = statements(<<'SQL');
SELECT ordered_events_router.ingest('orders', 8, 'key2', '{"op": "refund"}');
--  accepted
SELECT ordered_events_router.combine('orders');
--  2
SELECT stream, range_end FROM ordered_events_router.ranges;
--  orders | 10
SELECT shard, failing, min_released_through, last_error FROM ordered_events_router.shard_status;
--  0 | f | 10 |
--  1 | f | 10 |
SQL
is(scalar @shard_back, 4, 'shard back: the block has four statements');
# "once it runs again"
$shards[1]->start;
is(on_router($shard_back[0]), 'accepted', 'shard back: 8 of key2 accepted');
is(on_router($shard_back[1]), '2', 'shard back: combine() moves the range 2 seqs');
is(on_router($shard_back[2]), 'orders|10', 'shard back: the range is at 10');
is(on_router($shard_back[3]), "0|f|10|\n1|f|10|", 'shard back: both shards answer, released through 10');

#
# Gap policies act on the global range.
#
my @gaps = statements(<<'SQL');
SELECT ordered_events_router.ingest('orders', 11, 'key2', '{"op": "pay"}');
SELECT ordered_events_router.skip_gap('orders', 10, 'message 10 lost upstream, ticket OPS-123');
--  1
SELECT stream, range_end FROM ordered_events_router.ranges;
--  orders | 12
SELECT stream, gap_start, gap_end, reason FROM ordered_events_router.skip;
--  orders | 10 | 10 | message 10 lost upstream, ticket OPS-123
-- on each shard: the same row in ordered_events.skipped_gaps

SELECT ordered_events_router.create_stream('payments', gap_policy => 'timeout', gap_timeout => '2 s');
SELECT ordered_events_router.ingest('payments', 1, 'key1'), ordered_events_router.ingest('payments', 3, 'key2');
SELECT ordered_events_router.combine('payments');
--  1                                               seq 2 missing: the clock starts
SELECT pg_sleep(2);
SELECT ordered_events_router.combine('payments');
--  2                                               2 skipped, 3 released
SELECT stream, gap_start, gap_end, reason FROM ordered_events_router.skip WHERE stream = 'payments';
--  payments | 2 | 2 | gap_timeout 00:00:02 expired
SELECT ordered_events_router.ingest('payments', 2, 'key1');
--  gap_skipped
SQL
is(scalar @gaps, 11, 'gaps: the block has eleven statements');
is(on_router($gaps[0]), 'accepted', 'gaps: 11 of key2 accepted');
is(on_router($gaps[1]), '1', 'gaps: skip_gap() through 10 skips one seq');
is(on_router($gaps[2]), 'orders|12', 'gaps: the range goes on to 12');
my $skip_row = 'orders|10|10|message 10 lost upstream, ticket OPS-123';
is(on_router($gaps[3]), $skip_row, 'gaps: the router recorded the skip');
is( join("\n", map {
			run($_, q{SELECT stream, gap_start, gap_end, reason FROM ordered_events.skipped_gaps
			          WHERE stream = 'orders'})
		} 'shard0', 'shard1'),
	"$skip_row\n$skip_row", 'gaps: each shard has the same row in skipped_gaps');
is(on_router($gaps[4]), '', 'gaps: create_stream(\'payments\') with a gap timeout of 2 s');
is(on_router($gaps[5]), 'accepted|accepted', 'gaps: 1 and 3 accepted');
is(on_router($gaps[6]), '1', 'gaps: combine() releases 1');
is( run('router', q{
		SELECT gap_start, gap_first_seen IS NOT NULL FROM ordered_events_router.stream
		 WHERE stream = 'payments'}),
	'2|t', 'gaps: seq 2 missing, the clock starts');
like($gaps[7], qr/^SELECT pg_sleep\(2\);$/, 'gaps: the page waits 2 s here');
# Instead of waiting: the gap was first seen 2 s earlier.
run('router', q{
	UPDATE ordered_events_router.stream SET gap_first_seen = gap_first_seen - interval '2 s'
	 WHERE stream = 'payments'});
is(on_router($gaps[8]), '2', 'gaps: the next combine step skips 2 and releases 3');
is(on_router($gaps[9]), 'payments|2|2|gap_timeout 00:00:02 expired', 'gaps: the skip of 2 is recorded');
is(on_router($gaps[10]), 'gap_skipped', 'gaps: 2 arriving late is gap_skipped');

#
# Per-key streams need no combining.
#
is( run('router', q{SELECT hashtext('alice') & 1, hashtext('bob') & 1, hashtext('carol') & 1}),
	'1|1|0', 'per key: alice and bob hash to shard 1, carol to shard 0');
my @per_key = statements(<<'SQL');
SELECT ordered_events_router.create_stream('sessions', sequencing => 'per_key');
SELECT ordered_events_router.ingest('sessions', 2, 'alice', '{"page": "/cart"}');
SELECT ordered_events_router.ingest('sessions', 1, 'alice', '{"page": "/"}');
SELECT * FROM ordered_events_router.ingest_many('sessions', ARRAY[1, 2], ARRAY['bob', 'carol'],
                                                ARRAY['{"page": "/"}', '{"page": "/"}']::jsonb[]);
--  1                                               one accepted count per shard called
--  1
-- on shard1, once its worker ran
SELECT seq, key FROM ordered_events.released WHERE stream = 'sessions';
--  1 alice / 2 alice / 1 bob
-- on shard0
SELECT key, last_released_seq, buffered_count FROM ordered_events.key_status WHERE stream = 'sessions';
--  carol |  | 1                                    carol's 2 waits for her 1
SQL
is(scalar @per_key, 6, 'per key: the block has six statements');
is(on_router($per_key[0]), '', 'per key: create_stream(\'sessions\', per_key)');
is(on_router($per_key[1]) . ',' . on_router($per_key[2]), 'accepted,accepted',
	'per key: 2 and 1 of alice accepted');
is(on_router($per_key[3]), "1\n1", 'per key: ingest_many() returns one count per shard called');
# "once its worker ran"
ok( $shards[1]->poll_query_until('shard1', q{
		SELECT count(*) FROM ordered_events.released WHERE stream = 'sessions'}, 3),
	'per key: shard1\'s worker released its three events');
is(sorted(run('shard1', $per_key[4])), "1|alice\n1|bob\n2|alice",
	'per key: shard1 released 1 and 2 of alice, 1 of bob');
is(run('shard0', $per_key[5]), 'carol||1', 'per key: carol\'s 2 waits on shard0 for her 1');

#
# Writing through the router: a bad batch is refused whole.
#
my @writing = statements(<<'SQL');
SELECT * FROM ordered_events_router.ingest_many('orders', ARRAY[12, 13], ARRAY['key1', NULL],
                                                ARRAY[NULL, NULL]::jsonb[]);
--  ERROR:  key must not be null
--  DETAIL:  Event 2 of the batch for stream "orders".
--  HINT:  Every event needs a stream, a seq and a key.
SQL
is(scalar @writing, 1, 'writing: the block has one statement');
($ret, $stdout, $stderr) = $router->psql('router', "SET ROLE producer;\n$writing[0]");
isnt($ret, 0, 'writing: the batch with a NULL key is refused');
like( $stderr,
	qr/ERROR:  key must not be null\nDETAIL:  Event 2 of the batch for stream "orders"\.\nHINT:  Every event needs a stream, a seq and a key\./,
	'writing: with the message, detail and hint the page shows');
is( join(',', map { run($_, q{SELECT count(*) FROM ordered_events.accepted_events
                               WHERE stream = 'orders' AND seq >= 12}) } 'shard0', 'shard1'),
	'0,0', 'writing: nothing of it is written on any shard');

#
# Reading a sharded stream: the recipe, a lag.
#
my @recipe = statements(<<'SQL');
SELECT range_start FROM ordered_events_router.ranges WHERE stream = 'orders';
--  1
SELECT seq, key, skipped_through FROM ordered_events_router.released('orders', 1, 100);
--  1 | key1 |
--  2 | key2 |
--  3 | key1 |
--  4 | key1 |
--  5 | key2 |
--  6 | key1 |
--  7 | key2 |
--  8 | key2 |
--  9 | key1 |
--  10 |      | 10                                 skipped by skip_gap() above
--  11 | key2 |
-- the next read is from 12
SELECT seq, key, skipped_through FROM ordered_events_router.released('orders', 12, 100);
--  (no rows)                                       nothing from 12 on yet
SQL
is(scalar @recipe, 3, 'recipe: the block has three statements');
is(on_router($recipe[0], 'reader'), '1', 'recipe: the reader starts at range_start, 1');
is( on_router($recipe[1]),
	join("\n", '1|key1|', '2|key2|', '3|key1|', '4|key1|', '5|key2|', '6|key1|', '7|key2|',
		'8|key2|', '9|key1|', '10||10', '11|key2|'),
	'recipe: 1 to 11 in seq order, 10 as a skipped run');
is(on_router($recipe[2]), '', 'recipe: nothing from 12 on yet');

my @lag = statements(<<'SQL');
-- on shard1
REVOKE EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) FROM oe_router;
-- on the router
SELECT ordered_events_router.ingest('orders', 12, 'key1'), ordered_events_router.ingest('orders', 13, 'key2');
SELECT ordered_events_router.combine('orders');
--  2
SELECT range_end, released_end FROM ordered_events_router.ranges WHERE stream = 'orders';
--  14 | 12                                         shard 1 lags: released() stops at 12
SELECT seq, key, skipped_through FROM ordered_events_router.released('orders', 12, 100);
--  (no rows)                                       a lag: ask again later, from 12
SELECT shard, failing, last_error FROM ordered_events_router.shard_status WHERE failing;
--  1 | t | ordered_events_router.on_shard_release(3): [shard1] REMOTE ERROR: permission denied for function shard_release
-- on shard1
GRANT EXECUTE ON FUNCTION ordered_events.shard_release(text, bigint) TO oe_router;
-- on the router: the next combine step releases shard 1
SELECT ordered_events_router.combine('orders');
--  0
SELECT seq, key, skipped_through FROM ordered_events_router.released('orders', 12, 100);
--  12 | key1 |
--  13 | key2 |
SQL
is(scalar @lag, 9, 'lag: the block has nine statements');
run('shard1', $lag[0]);
is(on_router($lag[1]), 'accepted|accepted', 'lag: 12 and 13 accepted');
is(on_router($lag[2]), '2', 'lag: the range moves 2 seqs');
is(on_router($lag[3], 'reader'), '14|12', 'lag: the reader sees the range at 14, released below 12');
is(on_router($lag[4]), '', 'lag: released() from 12 returns nothing');
is( on_router($lag[5], 'reader'),
	'1|t|ordered_events_router.on_shard_release(3): [shard1] REMOTE ERROR: permission denied for function shard_release',
	'lag: the reader sees shard 1 failing, and why');
is( run('shard0', q{SELECT range_end FROM ordered_events.ranges WHERE stream = 'orders'}),
	'14', 'lag: shard 0 released 12');
run('shard1', $lag[6]);
is(on_router($lag[7]), '0', 'lag: the next combine step moves no range');
is(on_router($lag[8]), "12|key1|\n13|key2|", 'lag: released() from 12 returns 12 and 13');

#
# Reading a sharded stream: a consumer on each shard.
#
my @consumer = statements(<<'SQL');
-- on shard0 (and the same on shard1)
SELECT ordered_events.create_consumer('billing');
SELECT ordered_events.subscribe('billing', 'orders');
SELECT stream, seq, key FROM ordered_events.read('billing', 100);
--  orders 1 key1 / orders 3 key1 / orders 4 key1 / orders 6 key1 / orders 9 key1 / orders 12 key1
--  (on shard1: orders 2, 5, 7, 8, 11 and 13, all key2)
SQL
is(scalar @consumer, 3, 'consumer: the block has three statements');
my %read;
for my $shard ('shard0', 'shard1')
{
	run($shard, $_) for @consumer[ 0, 1 ];
	$read{$shard} = run($shard, $consumer[2]);
}
is( $read{shard0}, join("\n", map { "orders|$_|key1" } 1, 3, 4, 6, 9, 12),
	'consumer: on shard0, 1, 3, 4, 6, 9 and 12 of key1');
is( $read{shard1}, join("\n", map { "orders|$_|key2" } 2, 5, 7, 8, 11, 13),
	'consumer: on shard1, 2, 5, 7, 8, 11 and 13 of key2');

#
# Monitoring a sharded cluster: the router's worker on now, as the page's
# postgresql.conf has it (ordered_events.databases = 'router').
#
$router->append_conf('postgresql.conf', "ordered_events.databases = 'router'");
$router->reload;
ok( $router->poll_query_until('router', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'router' AND kind = 'release'}),
	'monitoring: the router\'s worker runs');
is(run('router', q{SELECT hook FROM ordered_events.cycle_hooks()}),
	'ordered_events_router.combine_all()', 'monitoring: the router registered combine_all() with it');
my @monitoring = statements(<<'SQL');
-- each shard: when it last answered, its last error, whether it fails now,
-- and how far it released its global streams (the lowest)
SELECT * FROM ordered_events_router.shard_status;
--  shard | last_ok_at | last_error | last_error_at | failing | min_released_through

-- the combined range of each global stream, and how far every shard
-- released it (released() reads below released_end)
SELECT * FROM ordered_events_router.ranges;
--  stream | range_start | range_end | max_event_ts | updated_at | released_end

-- how far each shard released each global stream
SELECT * FROM ordered_events_router.shard_stream;
--  shard | stream | released_through

-- the router's worker: state 'combining' during its combine steps
SELECT database, state, last_error FROM ordered_events.worker_status;
SQL
is(scalar @monitoring, 4, 'monitoring: the block has four statements');

# The columns a statement returns, as the page lists them.
sub columns
{
	my ($sql) = @_;
	my $header = (split /\n/, $router->safe_psql('router', $sql,
		extra_params => [ '-P', 'tuples_only=off', '-F', ' | ' ]))[0];
	return $header;
}
is( columns($monitoring[0]), 'shard | last_ok_at | last_error | last_error_at | failing | min_released_through',
	'monitoring: the columns of shard_status');
is(run('router', 'SELECT shard, failing FROM ordered_events_router.shard_status'), "0|f\n1|f",
	'monitoring: a row per shard, neither failing');
is(columns($monitoring[1]), 'stream | range_start | range_end | max_event_ts | updated_at | released_end',
	'monitoring: the columns of ranges');
is( run('router', 'SELECT stream, range_end FROM ordered_events_router.ranges ORDER BY stream'),
	"orders|14\npayments|4", 'monitoring: a row per global stream (sessions is per key)');
is(columns($monitoring[2]), 'shard | stream | released_through', 'monitoring: the columns of shard_stream');
is( sorted(run('router', $monitoring[2])), "0|orders|14\n0|payments|4\n1|orders|14\n1|payments|4",
	'monitoring: each shard released each global stream through its range');
like(run('router', $monitoring[3]), qr/^router\|\w+\|$/,
	'monitoring: the router\'s worker serves the router, without an error');

$_->stop for $router, @shards;
done_testing();
