
# Members of a consumer group that join and die while they read
# (docs/consuming.md, "Groups of readers"; docs/architecture.md, rule 8).
#
# Each member is a session running the loop of docs/consuming.md, as a
# procedure: join(), then read each partition it holds, in a transaction
# per partition that records what it read; events are written and released
# meanwhile.  w1 and w2 join one after the other, then w3; w3 is
# terminated while the members read, its lease is made to end (its stored
# lease_until moved to now: no waiting), and w4 joins.
#
# Claims, on the recorded joins (member, joined_at: its first, renewed_at,
# partitions, lease_until) and reads:
# - every event is read exactly once, from its own partition, although a
#   member died and partitions moved (rule 8: read() locks the partition,
#   whoever believes it holds it);
# - w3's partitions stay with it after it died, as long as its lease runs:
#   the other members' joins meanwhile return none of them; the first joins
#   after the lease ended spread them over w1 and w2;
# - sticky: a member's partitions change between two of its joins only when
#   a member joined or was removed in between;
# - the spread is even: 3 + 3 with two members, 2 + 2 + 2 with three.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('consumer_groups');    # no worker: release() by hand

$node->safe_psql('postgres', q{
	CREATE TABLE joins (member text, joined_at timestamptz, renewed_at timestamptz,
	                    partitions integer[], lease_until timestamptz);
	CREATE TABLE got (member text, partition integer, seq bigint, key text);
	CREATE TABLE ctl (total bigint);        -- the events to read, once all are written
	INSERT INTO ctl VALUES (NULL);
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_consumer('g', partitions => 6);
	SELECT ordered_events.subscribe('g', 's');

	-- A member's loop, until every event written has been read by someone.
	CREATE PROCEDURE member_loop(me text, lease interval)
	LANGUAGE plpgsql AS $$
	DECLARE
		held integer[];
		p integer;
		n bigint;
		taken bigint;
	BEGIN
		LOOP
			held := ordered_events.join('g', me, lease);
			-- recorded under join()'s lock, held until COMMIT: the times are
			-- in the order of the joins; joined_at is the member's first
			INSERT INTO joins
			SELECT me, coalesce((SELECT min(j.joined_at) FROM joins j WHERE j.member = me),
			                    clock_timestamp()),
			       clock_timestamp(), held, m.lease_until
			  FROM ordered_events.members m WHERE m.consumer = 'g' AND m.member = me;
			COMMIT;
			taken := 0;
			FOREACH p IN ARRAY held LOOP
				INSERT INTO got SELECT me, p, r.seq, r.key FROM ordered_events.read('g', 25, p) r;
				GET DIAGNOSTICS n = ROW_COUNT;
				taken := taken + n;
				COMMIT;
			END LOOP;
			EXIT WHEN (SELECT c.total FROM ctl c) <= (SELECT count(*) FROM got);
			IF taken = 0 THEN
				PERFORM pg_sleep(0.01);     -- nothing read: do not spin
			END IF;
		END LOOP;
	END $$;
});

my $written = 0;

# Write and release $n more events (keys of every partition).
sub write_events
{
	my ($n) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM generate_series($written + 1, $written + $n) s,
		       LATERAL ordered_events.ingest('s', s, 'k' || (s % 50)) o WHERE o = 'accepted';
		SELECT ordered_events.release('s');
	});
	$written += $n;
	return;
}

my %members;

# Start member $me's loop in a session of its own; returns its pid.
sub start_member
{
	my ($me, $lease) = @_;
	my $session = $node->background_psql('postgres');
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	OrderedEvents::send_query($session, "CALL member_loop('$me', '$lease');");
	$members{$me} = $session;
	return $pid;
}

# The members and how many partitions each holds, as members shows them.
my $spread_sql = q{
	SELECT string_agg(member || ':' || cardinality(partitions), ' ' ORDER BY member)
	  FROM ordered_events.members WHERE consumer = 'g'};

# True once every member in @who has joined again since $since (an SQL
# expression of a time).
sub all_joined_since
{
	my ($since, @who) = @_;
	my $list = join(',', map { "'$_'" } @who);
	return $node->poll_query_until('postgres', qq{
		SELECT count(DISTINCT member) = ${\ scalar(@who)} FROM joins
		 WHERE member IN ($list) AND renewed_at > ($since)});
}

write_events(300);
start_member('w1', '1 hour');
ok($node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM got WHERE member = 'w1'}),
	'w1 joins and reads');

start_member('w2', '1 hour');
ok( all_joined_since(q{(SELECT min(joined_at) FROM joins WHERE member = 'w2')}, 'w1', 'w2'),
	'w2 joins, and w1 joins again after it');
is($node->safe_psql('postgres', $spread_sql), 'w1:3 w2:3', 'two members: 3 + 3');

my $w3_pid = start_member('w3', '1 hour');
write_events(300);
ok( all_joined_since(q{(SELECT min(joined_at) FROM joins WHERE member = 'w3')}, 'w1', 'w2', 'w3'),
	'w3 joins, and w1 and w2 join again after it');
is($node->safe_psql('postgres', $spread_sql), 'w1:2 w2:2 w3:2', 'three members: 2 + 2 + 2');
ok($node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM got WHERE member = 'w3'}),
	'w3 reads');

# w3 dies while the members read.
write_events(300);
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($w3_pid)"), 't', 'w3 is terminated');
$node->poll_query_until('postgres', "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $w3_pid)")
  or die 'w3 does not end';
my $w3_died = $node->safe_psql('postgres', 'SELECT clock_timestamp()');

# Its lease runs: the others join again, twice each, and its partitions
# stay its.
ok(all_joined_since("'$w3_died'", 'w1', 'w2'), 'after w3 died, w1 and w2 join again');
my $again = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
ok(all_joined_since("'$again'", 'w1', 'w2'), 'and again');
is($node->safe_psql('postgres', $spread_sql), 'w1:2 w2:2 w3:2', 'w3 keeps its partitions while its lease runs');

# Its lease ends (its stored end moved to now, under the lock join()
# takes, so that no join() in progress misses it): the next joins spread
# its partitions over w1 and w2.
my $w3_lease_end = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT FROM ordered_events.consumer_def WHERE consumer = 'g' FOR NO KEY UPDATE;
	UPDATE ordered_events.group_member SET lease_until = clock_timestamp() WHERE member = 'w3'
	RETURNING lease_until;
	COMMIT;});
ok(all_joined_since("'$w3_lease_end'", 'w1', 'w2'), 'w1 and w2 join after w3\'s lease ended');
is($node->safe_psql('postgres', $spread_sql), 'w1:3 w2:3', 'w3 is removed: 3 + 3');

# w4 joins while the others read.
start_member('w4', '1 hour');
write_events(300);
ok( all_joined_since(q{(SELECT min(joined_at) FROM joins WHERE member = 'w4')}, 'w1', 'w2', 'w4'),
	'w4 joins, and w1 and w2 join again after it');
is($node->safe_psql('postgres', $spread_sql), 'w1:2 w2:2 w4:2', 'w4 takes its share: 2 + 2 + 2');

# All events are written: the members read until none is left, and stop.
$node->safe_psql('postgres', "UPDATE ctl SET total = $written");
ok( $node->poll_query_until('postgres', qq{
	SELECT count(*) >= $written FROM got}),
	'the members read every event');
for my $me ('w1', 'w2', 'w4')
{
	$members{$me}->query_safe('SELECT 1');    # its CALL has returned
	$members{$me}->quit;
}
eval { $members{w3}->quit; };    # its session was terminated

# Exactly once, from its own partition, nothing left.
is( $node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(DISTINCT seq) || '/' || min(seq) || '/' || max(seq) || '/'
	       || count(*) FILTER (WHERE ordered_events.key_partition(key, 6) <> partition)
	  FROM got}),
	"$written/$written/1/$written/0", 'every event read exactly once, each from its partition');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(0, 5) p, LATERAL ordered_events.peek('g', 1000, p)}),
	'0', 'nothing is left unread');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT member) FROM got}), '4',
	'every member read events');

# w3's partitions from its last join to the end of its lease: the joins
# of w1 and w2 meanwhile (4 at least) returned none of them; the first
# join of each after it returned 3, together all 6.
is( $node->safe_psql('postgres', qq{
	WITH last AS (SELECT renewed_at, partitions FROM joins WHERE member = 'w3'
	               ORDER BY renewed_at DESC LIMIT 1)
	SELECT count(*) FILTER (WHERE j.partitions && last.partitions) || '/' || (count(*) >= 4)
	  FROM joins j, last
	 WHERE j.member IN ('w1', 'w2') AND j.renewed_at > last.renewed_at
	   AND j.renewed_at < '$w3_lease_end'}),
	'0/true', 'w3\'s partitions stayed its while its lease ran');
is( $node->safe_psql('postgres', qq{
	WITH firsts AS (SELECT DISTINCT ON (member) member, partitions FROM joins
	                 WHERE member IN ('w1', 'w2') AND renewed_at >= '$w3_lease_end'
	                 ORDER BY member, renewed_at)
	SELECT string_agg(member || ':' || cardinality(partitions), ' ' ORDER BY member) || '/'
	       || (SELECT array_agg(p ORDER BY p) FROM firsts, unnest(partitions) p)::text
	  FROM firsts}),
	'w1:3 w2:3/{0,1,2,3,4,5}', 'then they went to w1 and w2, evenly');

# Sticky: between two joins of a member that returned different
# partitions, a member joined (a new joined_at) or w3's lease ended.  The
# changes: w1 at the joins of w2, w3, w4 and at w3's end; w2 at those of
# w3, w4 and at w3's end.
is( $node->safe_psql('postgres', qq{
	WITH j AS (
	    SELECT member, joined_at, renewed_at, partitions,
	           lag(renewed_at) OVER w AS prev_at, lag(partitions) OVER w AS prev
	      FROM joins WINDOW w AS (PARTITION BY member, joined_at ORDER BY renewed_at)),
	events AS (
	    SELECT DISTINCT joined_at AS at FROM joins
	    UNION
	    SELECT '$w3_lease_end'::timestamptz)
	SELECT count(*) FILTER (WHERE prev <> partitions) || '/'
	       || count(*) FILTER (WHERE prev <> partitions
	                             AND NOT EXISTS (SELECT FROM events e
	                                              WHERE e.at > j.prev_at AND e.at <= j.renewed_at))
	       || '/' || (count(*) > 20)
	  FROM j WHERE prev IS NOT NULL}),
	'7/0/true', 'a member\'s partitions changed only after a member joined or was removed');

done_testing();
