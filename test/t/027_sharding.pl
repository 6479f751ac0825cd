
# Sharding over PL/Proxy (docs/sharding.md; issue 14): one router and
# four shard clusters on this machine, and a sixth, plain server to compare
# with.  Every cluster preloads ordered_events and runs its worker; the
# router's worker runs a combine step every 50 ms.
#
# - The seed example (sql/seed.sql), sharded: the router releases what one
#   server releases for the same events: the same seqs in the same order,
#   keys, payloads, range_end and max_event_ts, the same pending events and
#   the same order per key.
# - Bulk: 1000000 events (OE_SHARD_BULK_EVENTS sets another number: the
#   whole test takes 1.5 to 4 minutes on 2 cores) of one global stream,
#   ingested out of order through the router by four concurrent sessions
#   (ingest_many, batches of about 5000 shuffled seqs).  Once the range
#   reaches the end: each shard released exactly the events of its own keys,
#   the shards together released every seq once, as the single server fed
#   the same events did, each key in seq order; the router's max_event_ts is
#   the largest event_ts.
# - gap_policy 'timeout' on the router: a missing seq is skipped once the
#   gap is older than gap_timeout (the stored clock is moved), the skip is
#   recorded on the router and on every shard, and the seq arriving late is
#   gap_skipped on any shard.
# - A shard stopped: the range holds at the missing seq that belongs to the
#   stopped shard, nothing is skipped even with the gap timed out,
#   shard_status shows the shard failing; once it is back and its events
#   arrive, the range catches up and every event is released once.
# - A shard's postmaster killed (SIGKILL) while two sessions ingest: nothing
#   committed is lost; every event whose ingest returned 'accepted' is
#   released once, and the failed ones, sent again, complete the range.
# - The router's registration with the worker of ordered_events: a
#   failing combine step shows in worker_status and the log, and clears;
#   after DROP EXTENSION ordered_events_router the worker goes on without
#   an error; the router made again is called again; a dump restored
#   registers it again.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $bulk_events = $ENV{OE_SHARD_BULK_EVENTS} // 1_000_000;
my $shard_count = 4;

# Statements are not logged: the bulk's arrays would fill the logs.
my @quiet = ("log_statement = 'ddl'");
my @shards = map {
	OrderedEvents::node("shard$_", databases => 'postgres', naptime => 200,
		conf => \@quiet)
} 0 .. $shard_count - 1;
my $single = OrderedEvents::node('single', databases => 'postgres', naptime => 50,
	conf => \@quiet);
my $router = OrderedEvents::node('router', databases => 'postgres', naptime => 50,
	conf => \@quiet, extension => 0);

my $partitions = join ', ', map {
	sprintf "p%d 'dbname=postgres host=%s port=%d connect_timeout=2'", $_,
	  $shards[$_]->host, $shards[$_]->port
} 0 .. $shard_count - 1;
$router->safe_psql('postgres', qq{
	SET client_min_messages = warning;
	CREATE EXTENSION ordered_events_router CASCADE;
	CREATE SERVER ordered_events_shards FOREIGN DATA WRAPPER plproxy OPTIONS ($partitions);
	CREATE USER MAPPING FOR PUBLIC SERVER ordered_events_shards;
});
is($router->safe_psql('postgres', 'SELECT ordered_events_router.shard_count()'),
	$shard_count, 'the router has four shards');

ok( $router->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'the router\'s worker runs');

sub router_sql
{
	return $router->safe_psql('postgres', $_[0]);
}

# The same query on every shard: its answers, one per shard.
sub on_shards
{
	my ($sql) = @_;
	return map { $_->safe_psql('postgres', $sql) } @shards;
}

sub range_end
{
	my ($stream) = @_;
	return router_sql(
		"SELECT range_end FROM ordered_events_router.ranges WHERE stream = '$stream'");
}

sub wait_range_end
{
	my ($stream, $end, $what) = @_;
	ok( $router->poll_query_until('postgres',
			"SELECT range_end FROM ordered_events_router.ranges WHERE stream = '$stream'",
			$end),
		$what);
}

# Wait until every shard has released $stream through $end (the range a
# combine step reached is released on the shards in that step, but a shard
# that failed then catches up in a later one).
sub wait_shards_released
{
	my ($stream, $end, $what) = @_;
	ok( $router->poll_query_until('postgres', qq{
		SELECT string_agg(released_through::text, ',' ORDER BY shard)
		  FROM ordered_events_router.shard_stream WHERE stream = '$stream'},
			join(',', ($end) x $shard_count)),
		$what);
}

# Wait until the router's worker has run $n more cycles, each with a
# combine step: what it would do with the current state, it has done.
sub wait_router_cycles
{
	my ($n) = @_;
	my $cycles = router_sql(
		"SELECT cycles FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
	$cycles += $n;
	ok( $router->poll_query_until('postgres', qq{
		SELECT cycles >= $cycles
		  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
		"the router's worker ran $n more cycles");
}

# Keys by the shard PL/Proxy sends them to (hashtext(key) & 3): three each.
my @shard_keys;
for my $line (split /\n/, router_sql(q{
	SELECT hashtext(k) & 3, string_agg(k, ',' ORDER BY n)
	  FROM (SELECT n, 'k' || n AS k FROM generate_series(0, 99) n) x
	 GROUP BY 1 ORDER BY 1}))
{
	my ($shard, $keys) = split /\|/, $line;
	$shard_keys[$shard] = [ (split /,/, $keys)[ 0 .. 2 ] ];
}

# Every accepted event of $stream is on the shard of its key.
sub placement_ok
{
	my ($stream) = @_;
	is( join(',', map {
			$shards[$_]->safe_psql('postgres', qq{
				SELECT count(*) FROM ordered_events.accepted_events
				 WHERE stream = '$stream' AND hashtext(key) & 3 <> $_})
		} 0 .. $shard_count - 1),
		'0,0,0,0', "stream $stream: every event is on the shard of its key");
}

# The released events of $stream on every shard, as "seq|key" lines
# sorted by seq; the shard a line came from is the line's prefix "i:".
sub released_on_shards
{
	my ($stream) = @_;
	my @lines;
	for my $i (0 .. $shard_count - 1)
	{
		push @lines, map { [ (split /\|/)[0], "$i:$_" ] } split /\n/,
		  $shards[$i]->safe_psql('postgres', qq{
			SELECT seq, key FROM ordered_events.released
			 WHERE stream = '$stream' ORDER BY seq});
	}
	return join "\n", map { $_->[1] } sort { $a->[0] <=> $b->[0] } @lines;
}

my $session_dir = PostgreSQL::Test::Utils::tempdir;

# A psql session on the router running $script in the background; its
# output goes to files.  With $stop, it stops at the first error.
sub start_session
{
	my ($name, $script, $stop) = @_;
	my $base = "$session_dir/$name";
	PostgreSQL::Test::Utils::append_to_file("$base.sql", $script);
	my $run = IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=' . ($stop ? 1 : 0),
		  '-d', $router->connstr('postgres'), '-f', "$base.sql" ],
		'<', '/dev/null', '>', "$base.out", '2>', "$base.err");
	return { run => $run, base => $base };
}

# Wait for a session's end: whether psql succeeded, what it printed.
sub finish_session
{
	my ($session) = @_;
	my $ok = $session->{run}->finish;
	return ($ok, slurp_file("$session->{base}.out"), slurp_file("$session->{base}.err"));
}

#
# 1. The seed example, sharded: the same as one server.
#
my @seed_first = ([ 5, 'key2' ], [ 1, 'key1' ], [ 7, 'key2' ], [ 3, 'key1' ],
	[ 2, 'key2' ], [ 4, 'key1' ]);
my @seed_late = ([ 6, 'key1' ]);

sub seed_ingest
{
	my ($function, @events) = @_;
	return join ";\n", map {
		"SELECT $function('s', $_->[0], '$_->[1]', '{\"n\": $_->[0]}', "
		  . "'2024-01-01 00:00:0$_->[0]+00')"
	} @events;
}

# The seed's keys go to two different shards.
is( router_sql(q{SELECT hashtext('key1') & 3 <> hashtext('key2') & 3}),
	't', 'seed: key1 and key2 live on different shards');

router_sql(q{SELECT ordered_events_router.create_stream('s')});
$single->safe_psql('postgres', q{SELECT ordered_events.create_stream('s')});
is( router_sql(seed_ingest('ordered_events_router.ingest', @seed_first)),
	join("\n", ('accepted') x 6), 'seed: six events accepted through the router');
is( $single->safe_psql('postgres', seed_ingest('ordered_events.ingest', @seed_first)),
	join("\n", ('accepted') x 6), 'seed: six events accepted by the single server');
ok( $single->poll_query_until('postgres',
		q{SELECT range_end FROM ordered_events.ranges WHERE stream = 's'}, 6),
	'seed: the single server\'s worker released up to 6');
wait_range_end('s', 6, 'seed: the router\'s range reaches 6');
placement_ok('s');

# The single server's view and the router's, for the same questions.
my %seed_single = (
	range => q{SELECT range_start, range_end, max_event_ts FROM ordered_events.ranges
	            WHERE stream = 's'},
	released => q{SELECT seq, key, payload, event_ts FROM ordered_events.released
	               WHERE stream = 's' ORDER BY seq},
	pending => q{SELECT seq, key FROM ordered_events.pending WHERE stream = 's' ORDER BY seq},
	per_key => q{SELECT key, string_agg(seq::text, ',' ORDER BY released_at, seq)
	               FROM ordered_events.released WHERE stream = 's'
	              GROUP BY key ORDER BY key});
my %seed_router = (
	range => q{SELECT range_start, range_end, max_event_ts FROM ordered_events_router.ranges
	            WHERE stream = 's'},
	released => q{SELECT seq, key, payload, event_ts
	                FROM ordered_events_router.released('s', 1, 100)});

sub seed_compare
{
	my ($step) = @_;
	for my $what ('range', 'released')
	{
		is( router_sql("SET TimeZone = 'UTC'; $seed_router{$what}"),
			$single->safe_psql('postgres', "SET TimeZone = 'UTC'; $seed_single{$what}"),
			"seed, $step: $what through the router equals the single server's");
	}
	# pending (by seq) and the order per key (by key): each shard has its keys
	for my $what ('pending', 'per_key')
	{
		my @lines = grep { $_ ne '' } map { split /\n/ } on_shards($seed_single{$what});
		@lines = $what eq 'pending'
		  ? sort { (split /\|/, $a)[0] <=> (split /\|/, $b)[0] } @lines
		  : sort { (split /\|/, $a)[0] cmp (split /\|/, $b)[0] } @lines;
		is( join("\n", @lines),
			$single->safe_psql('postgres', $seed_single{$what}),
			"seed, $step: $what on the shards equals the single server's");
	}
}

seed_compare('range [1,6)');
is( $single->safe_psql('postgres', "SET TimeZone = 'UTC'; $seed_single{range}"),
	'1|6|2024-01-01 00:00:05+00', 'seed: the single server\'s range is [1,6), max 00:00:05');
is( router_sql(q{
		SELECT string_agg(seq || ':' || key, ',') FROM ordered_events_router.released('s', 1, 100)}),
	'1:key1,2:key2,3:key1,4:key1,5:key2', 'seed: the router released 1..5');
is( router_sql(q{SELECT string_agg(seq::text, ',') FROM ordered_events_router.released('s', 3, 2)}),
	'3,4', 'seed: released() from seq 3, two events');
is( join(',', on_shards(q{
		SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ordered_events.pending
		 WHERE stream = 's'})),
	',,,7', 'seed: 7 waits on the shard of key2');

is( router_sql(seed_ingest('ordered_events_router.ingest', @seed_late)),
	'accepted', 'seed: 6 accepted through the router');
$single->safe_psql('postgres', seed_ingest('ordered_events.ingest', @seed_late));
ok( $single->poll_query_until('postgres',
		q{SELECT range_end FROM ordered_events.ranges WHERE stream = 's'}, 8),
	'seed: the single server\'s worker released up to 8');
wait_range_end('s', 8, 'seed: the router\'s range reaches 8');
seed_compare('range [1,8)');
is( $single->safe_psql('postgres', "SET TimeZone = 'UTC'; $seed_single{range}"),
	'1|8|2024-01-01 00:00:07+00', 'seed: the single server\'s range is [1,8), max 00:00:07');
is( $single->safe_psql('postgres', $seed_single{per_key}),
	"key1|1,3,4,6\nkey2|2,5,7", 'seed: key1 1,3,4,6 and key2 2,5,7');
is(released_on_shards('s'), "2:1|key1\n3:2|key2\n2:3|key1\n2:4|key1\n3:5|key2\n2:6|key1\n3:7|key2",
	'seed: each event released once, on the shard of its key');

#
# 2. Bulk: out of order, by four sessions at once.
#
my $n = $bulk_events;
my $batches = 10 * int(($n + 49_999) / 50_000);
router_sql(q{SELECT ordered_events_router.create_stream('g')});
# Batch b: the seqs of window b / 10 (50000 seqs) whose hash is b % 10
# (about 5000), shuffled; key 'k' || seq % 1000.
router_sql(q{
	CREATE FUNCTION bulk_batch(n bigint, b integer,
	                           OUT seqs bigint[], OUT keys text[], OUT payloads jsonb[])
	LANGUAGE sql IMMUTABLE
	AS $$
	SELECT array_agg(s ORDER BY md5(s::text)),
	       array_agg('k' || s % 1000 ORDER BY md5(s::text)),
	       array_agg(jsonb_build_object('n', s) ORDER BY md5(s::text))
	  FROM generate_series((b / 10) * 50000::bigint + 1, least((b / 10 + 1) * 50000::bigint, n)) s
	 WHERE (hashtext(s::text) & 2147483647) % 10 = b % 10
	$$;
});

my @sessions;
for my $i (0 .. 3)
{
	my $script = join '', map {
		"SELECT sum(w) FROM bulk_batch($n, $_) x, "
		  . "ordered_events_router.ingest_many('g', x.seqs, x.keys, x.payloads) w;\n"
	} grep { $_ % 4 == $i } 0 .. $batches - 1;
	push @sessions, start_session("bulk$i", $script, 1);
}
# The single server gets the same events in one statement.
$single->safe_psql('postgres', qq{
	SELECT ordered_events.create_stream('g');
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 'g', s, 'k' || s % 1000, jsonb_build_object('n', s)
	  FROM generate_series(1, $n) s ORDER BY md5(s::text);
});
my $written = 0;
for my $i (0 .. 3)
{
	my ($ok, $out, $err) = finish_session($sessions[$i]);
	ok($ok, "bulk: session $i ingested its batches");
	is($err, '', "bulk: session $i: no error");
	$written += $_ for split /\n/, $out;
}
is($written, $n, "bulk: the sessions wrote $n events");

wait_range_end('g', $n + 1, "bulk: the router's range reaches " . ($n + 1));
wait_shards_released('g', $n + 1, 'bulk: every shard released through the range');
ok( $single->poll_query_until('postgres',
		q{SELECT range_end FROM ordered_events.ranges WHERE stream = 'g'}, $n + 1),
	'bulk: the single server\'s range reaches ' . ($n + 1));

# What each shard released, read once: whether it is exactly the events of
# its keys (seq, key, payload), each once; what is pending or rejected;
# count, distinct count, min, max, sum(seq) and a hash sum; the largest
# event_ts; the keys whose release times go down along their seqs (per
# key, the release order must be the seq order).  And the release steps:
# how many, and whether they tile [1, n+1) in seq and delivery order.
my $summary = q{
	WITH got AS MATERIALIZED (
	  SELECT seq, key COLLATE "default" AS key, payload, event_ts, released_at
	    FROM ordered_events.released WHERE stream = 'g'),
	expected AS (
	  SELECT s AS seq, 'k' || s % 1000 AS key, jsonb_build_object('n', s) AS payload
	    FROM generate_series(1, :n) s WHERE hashtext('k' || s % 1000) & 3 = :shard),
	steps AS (
	  SELECT l.seq_start, l.seq_end, l.delivery,
	         lag(l.seq_end) OVER (ORDER BY l.seq_end) AS prev_end,
	         lag(l.delivery) OVER (ORDER BY l.seq_end) AS prev_delivery
	    FROM ordered_events.lane_release_log l
	    JOIN ordered_events.stream_def d USING (stream_id)
	   WHERE d.stream = 'g' AND l.lane = '')
	SELECT (SELECT count(*) FROM (SELECT seq, key, payload FROM expected
	                              EXCEPT ALL SELECT seq, key, payload FROM got) x)
	       + (SELECT count(*) FROM (SELECT seq, key, payload FROM got
	                                EXCEPT ALL SELECT seq, key, payload FROM expected) x),
	       (SELECT count(*) FROM ordered_events.pending WHERE stream = 'g'),
	       (SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'g'),
	       count(*), count(DISTINCT seq), min(seq), max(seq), sum(seq),
	       sum(hashtext(seq || ':' || key || ':' || payload::text)),
	       max(event_ts),
	       (SELECT count(*)
	          FROM (SELECT released_at,
	                       lag(released_at) OVER (PARTITION BY key ORDER BY seq) AS prev_at
	                  FROM got) x
	         WHERE prev_at > released_at),
	       (SELECT count(*) FROM steps),
	       (SELECT sum(seq_end - seq_start) = :n
	               AND bool_and(seq_start = coalesce(prev_end, 1))
	               AND bool_and(delivery > coalesce(prev_delivery, 0))
	               AND max(seq_end) = :n + 1
	          FROM steps)
	  FROM got};
my (@sums, @max_ts);
for my $i (0 .. $shard_count - 1)
{
	(my $sql = $summary) =~ s/:n\b/$n/g;
	$sql =~ s/:shard\b/$i/g;
	my ($diff, $pending, $rejected, $count, $distinct, $min, $max, $sum, $hash, $max_ts,
		$order, $steps, $tiled) = split /\|/, $shards[$i]->safe_psql('postgres', $sql);
	is("$diff/$pending/$rejected", '0/0/0',
		"bulk: shard $i released exactly its keys' events, each once; nothing pending or rejected");
	is($distinct, $count, "bulk: shard $i released distinct seqs ($count)");
	cmp_ok($count, '>', 0, "bulk: shard $i released events");
	is($order, '0', "bulk: shard $i released each key in seq order");
	is($tiled, 't', "bulk: shard $i\'s release steps tile [1, " . ($n + 1) . ') in order');
	# combine steps read at most max_release_batch (10000) events per shard
	cmp_ok($steps, '>=', int($n / 40_000), "bulk: shard $i released in several steps ($steps)");
	$sums[0] += $count;
	$sums[1] += $distinct;
	$sums[2] = $min if !defined $sums[2] || $min < $sums[2];
	$sums[3] = $max if !defined $sums[3] || $max > $sums[3];
	$sums[4] += $sum;
	$sums[5] += $hash;
	push @max_ts, $max_ts;
}
# Together: seqs 1..n, each once, as the single server released them.
is(join('|', @sums[ 0 .. 4 ]), join('|', $n, $n, 1, $n, $n * ($n + 1) / 2),
	"bulk: seqs 1..$n, each once");
is( join('|', @sums),
	$single->safe_psql('postgres', q{
		SELECT count(*), count(DISTINCT seq), min(seq), max(seq), sum(seq),
		       sum(hashtext(seq || ':' || key || ':' || payload::text))
		  FROM ordered_events.released WHERE stream = 'g'}),
	'bulk: the shards together released what the single server did');

# The router's max_event_ts is the largest event_ts of all.
is( router_sql(qq{
	SELECT max_event_ts = greatest(@{[ join ', ', map { "'$_'::timestamptz" } @max_ts ]})
	  FROM ordered_events_router.ranges WHERE stream = 'g'}),
	't', 'bulk: the router\'s max_event_ts is the largest event_ts');
# released() merges the shards by seq
is( router_sql(qq{
	SELECT count(*) || '/' || bool_and(seq = ord) || '/' || bool_and(key = 'k' || seq % 1000)
	  FROM (SELECT seq, key, row_number() OVER () + $n - 1500 AS ord
	          FROM ordered_events_router.released('g', $n - 1499, 5000)) r}),
	'1500/true/true', 'bulk: released() reads the last 1500 in seq order across shards');
is( router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'g'}),
	'0', 'bulk: nothing skipped');

# Seq s of the streams below has a key of shard s % 4: the $spread keys of
# that shard in turn.
sub key_of
{
	my ($seq, $spread) = @_;
	return $shard_keys[ $seq % 4 ][ int($seq / 4) % $spread ];
}

# One ingest() call through the router per seq: the outcomes, one a line.
sub ingest_seqs
{
	my ($stream, $spread, @seqs) = @_;
	return router_sql(join ";\n", map {
		"SELECT ordered_events_router.ingest('$stream', $_, '" . key_of($_, $spread) . "')"
	} @seqs);
}

# Exactly seqs @seqs of $stream released, each once, on the shard of its
# key: what released_on_shards() must show.
sub released_expected
{
	my ($spread, @seqs) = @_;
	return join "\n", map { ($_ % 4) . ":$_|" . key_of($_, $spread) } sort { $a <=> $b } @seqs;
}

#
# 3. gap_policy 'timeout' on the router: the skip is recorded everywhere.
#
router_sql(q{SELECT ordered_events_router.create_stream('gt', gap_policy => 'timeout',
                                                        gap_timeout => '1 hour')});
is(ingest_seqs('gt', 1, grep { $_ != 4 } 1 .. 10), join("\n", ('accepted') x 9),
	'timeout: 1..10 but 4 accepted');
ok( $router->poll_query_until('postgres', q{
	SELECT range_end = 4 AND gap_start = 4 AND gap_first_seen IS NOT NULL
	  FROM ordered_events_router.stream WHERE stream = 'gt'}),
	'timeout: the range waits at 4, the router saw the gap');
wait_router_cycles(3);
is(range_end('gt'), 4, 'timeout: a gap younger than gap_timeout holds the range');
is(router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'gt'}),
	'0', 'timeout: nothing skipped yet');

# The gap was seen two hours ago.
router_sql(q{
	UPDATE ordered_events_router.stream
	   SET gap_first_seen = gap_first_seen - interval '2 hours'
	 WHERE stream = 'gt' AND gap_start = 4});
wait_range_end('gt', 11, 'timeout: the timed-out gap is skipped, the range reaches 11');
wait_shards_released('gt', 11, 'timeout: every shard released through 11');
is( router_sql(q{SELECT gap_start, gap_end, reason FROM ordered_events_router.skip
                  WHERE stream = 'gt'}),
	'4|4|gap_timeout 01:00:00 expired', 'timeout: the router recorded the skip of 4');
is( join(',', on_shards(q{
		SELECT string_agg(gap_start || '-' || gap_end || ' ' || reason, ',')
		  FROM ordered_events.skipped_gaps WHERE stream = 'gt'})),
	join(',', ('4-4 gap_timeout 01:00:00 expired') x 4),
	'timeout: every shard recorded the skip of 4');
is( router_sql(q{
	SELECT string_agg(seq || coalesce('-' || skipped_through || ' skipped', ''), ',')
	  FROM ordered_events_router.released('gt', 1, 100)}),
	'1,2,3,4-4 skipped,5,6,7,8,9,10', 'timeout: 1..10 released but 4, a skipped run');
is( router_sql(qq{SELECT ordered_events_router.ingest('gt', 4, '@{[ key_of(4, 1) ]}')}),
	'gap_skipped', 'timeout: 4 arriving late is gap_skipped on the shard of its key (0)');
is( router_sql(qq{SELECT ordered_events_router.ingest('gt', 4, '$shard_keys[3][0]')}),
	'gap_skipped', 'timeout: and on shard 3, with a key of shard 3');
is( join(',', on_shards(q{
		SELECT string_agg(seq || ' ' || reason, ',') FROM ordered_events.unprocessed
		 WHERE stream = 'gt'})),
	'4 gap_skipped,,,4 gap_skipped', 'timeout: the late events are in unprocessed');
is(ingest_seqs('gt', 1, 11), 'accepted', 'timeout: 11 accepted');
wait_range_end('gt', 12, 'timeout: the range goes on after the skip');
is(released_on_shards('gt'), released_expected(1, grep { $_ != 4 } 1 .. 11),
	'timeout: each event released once, on the shard of its key');

#
# 4. A shard stopped: the range holds, nothing is skipped, it catches up.
#
# Shard 2 holds seqs 2, 6, 10, ...  The range waits at 22, missing; 26 is
# missing too, 30 is on shard 2 when it stops.
router_sql(q{SELECT ordered_events_router.create_stream('st', gap_policy => 'timeout',
                                                        gap_timeout => '1 hour')});
my @st_before = grep { $_ != 22 && $_ != 26 } 1 .. 30;
my @st_other = grep { $_ % 4 != 2 } 31 .. 60;
my @st_shard2 = (22, 26, grep { $_ % 4 == 2 } 31 .. 60);
is(ingest_seqs('st', 2, @st_before), join("\n", ('accepted') x @st_before),
	'stop: 1..30 but 22 and 26 accepted');
ok( $router->poll_query_until('postgres', q{
	SELECT range_end = 22 AND gap_start = 22 AND gap_first_seen IS NOT NULL
	  FROM ordered_events_router.stream WHERE stream = 'st'}),
	'stop: the range waits at 22 (missing, a seq of shard 2)');

$shards[2]->stop;
is(ingest_seqs('st', 2, @st_other), join("\n", ('accepted') x @st_other),
	'stop: 31..60 of shards 0, 1, 3 accepted while shard 2 is down');
my ($ret, $stdout, $stderr) = $router->psql('postgres',
	"SELECT ordered_events_router.ingest('st', 22, '@{[ key_of(22, 2) ]}')");
isnt($ret, 0, 'stop: 22 cannot be written while its shard is down');
like($stderr, qr/connection to server .* failed/,
	'stop: PL/Proxy could not connect to shard 2');
ok( $router->poll_query_until('postgres', q{
	SELECT string_agg(shard || ':' || failing || ':' || (last_error IS NOT NULL), ','
	                  ORDER BY shard)
	  FROM ordered_events_router.shard_status},
		'0:false:false,1:false:false,2:true:true,3:false:false'),
	'stop: shard_status shows shard 2 failing, with its error');
wait_router_cycles(3);
is(range_end('st'), 22, 'stop: the range holds at 22');

# The gap at 22 times out while shard 2 is down: a shard that does not
# answer still holds the range.
router_sql(q{
	UPDATE ordered_events_router.stream
	   SET gap_first_seen = gap_first_seen - interval '2 hours'
	 WHERE stream = 'st' AND gap_start = 22});
wait_router_cycles(3);
is(range_end('st'), 22, 'stop: a timed-out gap is not skipped while a shard is down');
is(router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'st'}),
	'0', 'stop: the router skipped nothing');
is( join(',', map { $shards[$_]->safe_psql('postgres', q{
			SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream = 'st'})
		} 0, 1, 3),
	'0,0,0', 'stop: the shards that answer skipped nothing');
is( router_sql(q{
	SELECT string_agg(released_through::text, ',' ORDER BY shard)
	  FROM ordered_events_router.shard_stream WHERE stream = 'st'}),
	'22,22,22,22', 'stop: every shard released through 22');
is( join(',', map { $shards[$_]->safe_psql('postgres', q{
			SELECT range_end || '/' || pending_count FROM ordered_events.stream_stats
			 WHERE stream = 'st'})
		} 0, 1, 3),
	'22/10,22/9,22/10', 'stop: the other shards hold their events above 22, pending');

# Back to a fresh gap: once shard 2 answers, the events sent to it fill the
# gap instead of coming late.
router_sql(q{
	UPDATE ordered_events_router.stream SET gap_first_seen = clock_timestamp()
	 WHERE stream = 'st' AND gap_start = 22});
$shards[2]->start;
ok( $router->poll_query_until('postgres', q{
	SELECT bool_and(NOT failing) FROM ordered_events_router.shard_status}),
	'stop: shard 2 answers again');
is(ingest_seqs('st', 2, @st_shard2), join("\n", ('accepted') x @st_shard2),
	'stop: 22, 26 and shard 2\'s seqs of 31..60 accepted');
wait_range_end('st', 61, 'stop: the range catches up to 61');
wait_shards_released('st', 61, 'stop: every shard released through 61');
is(released_on_shards('st'), released_expected(2, 1 .. 60),
	'stop: each of 1..60 released once, on the shard of its key');
is( join(',', on_shards(q{
		SELECT (SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream = 'st') || '/' ||
		       (SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'st') || '/' ||
		       (SELECT count(*) FROM ordered_events.pending WHERE stream = 'st')})),
	'0/0/0,0/0/0,0/0/0,0/0/0', 'stop: no shard skipped, rejected or holds anything');
is(router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'st'}),
	'0', 'stop: the router never skipped');

#
# 5. A shard's postmaster killed while two sessions ingest.
#
my $nc = 8000;
router_sql(q{SELECT ordered_events_router.create_stream('c')});
my @order = split /\n/,
  router_sql("SELECT s FROM generate_series(1, $nc) s ORDER BY md5('c' || s)");
my @crash_sessions;
for my $j (0, 1)
{
	my $script = join '', map {
		"SELECT $_, ordered_events_router.ingest('c', $_, '" . key_of($_, 3) . "');\n"
	} @order[ grep { $_ % 2 == $j } 0 .. $#order ];
	push @crash_sessions, start_session("crash$j", $script, 0);
}
ok( $shards[1]->poll_query_until('postgres', q{
	SELECT count(*) >= 200 FROM ordered_events.accepted_events WHERE stream = 'c'}),
	'crash: shard 1 holds 200 events of the run');
my $postmaster = (split /\n/, slurp_file($shards[1]->data_dir . '/postmaster.pid'))[0];
my @children = split /\n/, $shards[1]->safe_psql('postgres',
	'SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()');
$shards[1]->kill9;

# While it is down, its events fail, the others' are accepted.
my @down = ($nc + 1 .. $nc + 8);
my %outcome;
for my $seq (@down)
{
	my ($ret, $out) = $router->psql('postgres',
		"SELECT ordered_events_router.ingest('c', $seq, '" . key_of($seq, 3) . "')");
	$outcome{$seq} = $ret == 0 ? $out : 'error';
}
is( join(',', map { $outcome{$_} } @down),
	join(',', map { $_ % 4 == 1 ? 'error' : 'accepted' } @down),
	'crash: while shard 1 is down its events fail, the others are accepted');

my %session_outcome;
my $errors = 0;
for my $j (0, 1)
{
	my (undef, $out, $err) = finish_session($crash_sessions[$j]);
	for my $line (split /\n/, $out)
	{
		my ($seq, $what) = split /\|/, $line;
		$session_outcome{$seq} = $what;
	}
	$errors += () = $err =~ /ERROR:/g;
}
diag "crash: the sessions' ingests: " . scalar(keys %session_outcome) . " accepted, $errors failed";
is( join(',', grep { $_ ne 'accepted' } values %session_outcome), '',
	'crash: every ingest of the sessions that returned an outcome returned accepted');
cmp_ok(scalar keys %session_outcome, '>=', 200,
	'crash: the sessions ingested events before the kill');

ok( $router->poll_query_until('postgres', q{
	SELECT string_agg(shard || ':' || failing, ',' ORDER BY shard)
	  FROM ordered_events_router.shard_status},
		'0:false,1:true,2:false,3:false'),
	'crash: shard_status shows shard 1 failing');

# The old server's processes are gone, then it starts again.
my $gone = 0;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	$gone = !grep { kill 0, $_ } $postmaster, @children;
	last if $gone;
	usleep(100_000);
}
ok($gone, 'crash: the killed postmaster and its children are gone');
$shards[1]->start;
ok( $router->poll_query_until('postgres', q{
	SELECT bool_and(NOT failing) FROM ordered_events_router.shard_status}),
	'crash: shard 1 answers again');

# What failed is sent again: accepted, or a duplicate if it had committed.
my @failed = grep { !exists $session_outcome{$_} } 1 .. $nc;
push @failed, grep { $outcome{$_} eq 'error' } @down;
my @again = @failed ? split(/\n/, ingest_seqs('c', 3, @failed)) : ();
is(join(',', grep { $_ ne 'accepted' && $_ ne 'duplicate' } @again), '',
	'crash: every event sent again is accepted or a duplicate of a committed one');
diag 'crash: sent again: ' . scalar(@again) . ', of them duplicates: '
  . scalar(grep { $_ eq 'duplicate' } @again);
wait_range_end('c', $nc + 9, 'crash: the range reaches ' . ($nc + 9));
wait_shards_released('c', $nc + 9, 'crash: every shard released through the range');
my $released_c = released_on_shards('c');
my %released_c = map { (split /[:|]/)[1] => 1 } split /\n/, $released_c;
is( join(',', grep { !$released_c{$_} } sort { $a <=> $b } keys %session_outcome,
		grep { $outcome{$_} eq 'accepted' } @down),
	'', 'crash: every event whose ingest returned accepted is released');
is($released_c, released_expected(3, 1 .. $nc + 8),
	'crash: every event released once, on the shard of its key');
is( join(',', on_shards(q{
		SELECT count(*) FROM ordered_events.unprocessed WHERE stream = 'c' AND reason <> 'duplicate'})),
	'0,0,0,0', 'crash: nothing rejected but duplicates');
is( router_sql(q{SELECT count(*) FROM ordered_events_router.skip WHERE stream = 'c'}) . '/'
	  . join(',', on_shards(q{SELECT count(*) FROM ordered_events.skipped_gaps WHERE stream = 'c'})),
	'0/0,0,0,0', 'crash: nothing skipped');

#
# 6. The worker of ordered_events runs the router through its registration
#    (a cycle hook, router/README.md): the hook's error shows in
#    worker_status and clears; after DROP EXTENSION the worker goes on
#    without it, and calls the router made again.
#
sub router_status
{
	return router_sql("SELECT $_[0] FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");
}
is(router_sql(q{SELECT hook FROM ordered_events.cycle_hooks()}),
	'ordered_events_router.combine_all()', 'hook: the router registered combine_all()');
is(router_status('last_error'), '', 'hook: no error so far');

# A session locks the router's stream table: the combine step waits for it
# past the worker's lock_timeout, and fails (a session that holds one
# stream's row only is left that stream: test/t/043_sharding_contract.pl).
my $log_offset = -s $router->logfile;
my $holder = $router->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe(q{LOCK TABLE ordered_events_router.stream IN ACCESS EXCLUSIVE MODE});
ok( $router->poll_query_until('postgres', q{
	SELECT last_error LIKE 'ordered_events_router.combine_all(): %lock timeout%'
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'hook: its error shows in worker_status, under the hook\'s name');
$holder->query_safe('COMMIT');
$holder->quit;
ok( $router->poll_query_until('postgres', q{
	SELECT last_error IS NULL FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'hook: the error clears once a combine step succeeds again');
like( slurp_file($router->logfile, $log_offset),
	qr/LOG:  ordered_events could not run the cycle hook ordered_events_router\.combine_all\(\): .*lock timeout/,
	'hook: the error was logged');

router_sql('DROP EXTENSION ordered_events_router');
wait_router_cycles(3);
is( router_status(q{last_error IS NULL}) . '/'
	  . router_sql(q{SELECT count(*) FROM ordered_events.cycle_hooks()}),
	't/0', 'hook: dropped, the router is not called, and nothing fails');
router_sql(q{
	SET client_min_messages = warning;
	CREATE EXTENSION ordered_events_router;
	SELECT ordered_events_router.create_stream('again');
});
is(ingest_seqs('again', 1, 3, 1, 2), join("\n", ('accepted') x 3),
	'hook: 1..3 of a new stream accepted through the router made again');
wait_range_end('again', 4, 'hook: the router made again is called: its range reaches 4');
is(router_status('last_error'), '', 'hook: no error');

# The registration is not dumped: restored, the router's CREATE EXTENSION
# makes it again.
my $dump = "$session_dir/router.dump";
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $router->connstr('postgres') ],
	'hook: the router database dumps');
router_sql('CREATE DATABASE restored');
command_ok([ 'pg_restore', '--exit-on-error', '-d', $router->connstr('restored'), $dump ],
	'hook: and restores');
is( $router->safe_psql('restored', q{
		SELECT string_agg(hook || ' ' || extension, ',') FROM ordered_events.cycle_hooks()}),
	'ordered_events_router.combine_all() ordered_events_router',
	'hook: the restored router is registered, once');

$_->stop for $router, $single, @shards;
done_testing();
