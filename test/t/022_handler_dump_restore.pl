
# Handler consumers survive pg_dump / pg_restore, exactly once.
#
# A source cluster holds a global stream g and a per-key stream pk; a
# handler h.fn in its own schema, owned by the non-superuser owner1;
# consumer c1 (created by owner1, 2 partitions, subscribed to g and pk,
# results in the view results) and consumer c2 (created by owner2, output
# stream out with gap_policy 'fence', alignment 'processing', subscribed to
# g).  At the dump some events are applied (with one exception_thrown dead
# letter), some are released but not applied, some pending behind a gap.
#
# The dump (-Fc) is restored into a fresh cluster where the roles were
# created first (pg_dump does not dump roles), in another order, so their
# oids differ: the consumer's owner must be kept by name.  There, key_state,
# results (with positions), unprocessed, consumers and the derived events
# equal the source's.  Then the same new events and processing steps on
# both copies must end in equal states, results and derived events: each
# event applied once, none lost, none applied twice; the handlers still run
# as owner1 and owner2 (their results record current_user); the derived
# events continue with the seqs after the restored ones.
#
# No worker serves either cluster: process() and release() by hand decide
# what is applied when, so "released but not applied" stays so until the
# dump, and both copies run the very same steps (the worker calls the same
# code).  Every event has explicit event_ts and alignment_ts, so the merged
# order, and with it the result positions, is the same on both copies.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $source = OrderedEvents::node('source');

# h.fn keeps per key the sum of payload v and the list of events seen
# (stream:key:seq); its result names the event and the role it ran as.
# Payload {"boom": true} raises.
$source->safe_psql('postgres', q{
	CREATE ROLE owner1;
	CREATE ROLE owner2;
	GRANT USAGE ON SCHEMA ordered_events TO owner1, owner2;
	GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
	                          ordered_events.subscribe(text, text, interval, text) TO owner1, owner2;
	CREATE SCHEMA h AUTHORIZATION owner1;
	GRANT USAGE ON SCHEMA h TO owner2;
	SELECT ordered_events.create_stream('g');
	SELECT ordered_events.create_stream('pk', sequencing => 'per_key');
	SELECT ordered_events.create_stream('out', gap_policy => 'fence');
	-- 0.3: the consumers' owners read g and pk, owner2's handler writes out
	SELECT ordered_events.grant_stream(s, 'read', r)
	  FROM unnest(ARRAY['g', 'pk']) s, unnest(ARRAY['owner1', 'owner2']::regrole[]) r;
	SELECT ordered_events.grant_stream('out', 'write', 'owner2');

	SET ROLE owner1;
	CREATE FUNCTION h.fn(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	DECLARE
		sum bigint := coalesce((state ->> 'sum')::bigint, 0) + (e.payload ->> 'v')::bigint;
		seen jsonb := coalesce(state -> 'seen', '[]'::jsonb)
		              || pg_catalog.to_jsonb(e.stream || ':' || e.key || ':' || e.seq);
	BEGIN
		IF e.payload ? 'boom' THEN
			RAISE EXCEPTION 'boom at %:%:%', e.stream, e.key, e.seq;
		END IF;
		RETURN ROW(pg_catalog.jsonb_build_object('sum', sum, 'seen', seen),
		           pg_catalog.jsonb_build_object('stream', e.stream, 'seq', e.seq, 'sum', sum,
		                                         'by', current_user))::ordered_events.step;
	END;
	$$;
	SELECT ordered_events.create_consumer('c1', partitions => 2,
	                                      handler => 'h.fn(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('c1', 'g');
	SELECT ordered_events.subscribe('c1', 'pk');
	SET ROLE owner2;
	SELECT ordered_events.create_consumer('c2', handler => 'h.fn(jsonb, ordered_events.event)',
	                                      output_stream => 'out', alignment => 'processing');
	SELECT ordered_events.subscribe('c2', 'g');
});

# Events as (stream, seq, key, v[, boom]); event i of the test has
# event_ts T + i s and alignment_ts T + i s + 1 s.
my $n_events = 0;
sub ingest_sql
{
	my @rows;
	for my $e (@_)
	{
		my ($stream, $seq, $key, $v, $boom) = @$e;
		$n_events++;
		push @rows, sprintf(
			q{('%s', %d, '%s', '{"v": %d%s}', timestamptz '2024-01-01 00:00:00+00' + %d * interval '1 s', timestamptz '2024-01-01 00:00:00+00' + %d * interval '1 s')},
			$stream, $seq, $key, $v, $boom ? ', "boom": true' : '', $n_events, $n_events + 1);
	}
	return 'INSERT INTO ordered_events.inbox (stream, seq, key, payload, event_ts, alignment_ts) VALUES '
	  . join(",\n", @rows);
}

# One processing step for every consumer partition, in a fixed order:
# the numbers of events applied.
sub process_all
{
	my ($node) = @_;
	return join '/', map { $node->safe_psql('postgres', "SELECT ordered_events.process($_)") }
	  (q{'c1', partition => 0}, q{'c1', partition => 1}, q{'c2'});
}

# 1. Applied before the dump: pk b:2 raises in c1.
$source->safe_psql('postgres', ingest_sql(
	[ 'g', 1, 'a', 1 ], [ 'g', 2, 'b', 2 ], [ 'g', 3, 'c', 3 ], [ 'g', 4, 'd', 4 ],
	[ 'pk', 1, 'a', 101 ], [ 'pk', 1, 'b', 102 ], [ 'pk', 2, 'b', 103, 1 ], [ 'pk', 1, 'c', 104 ]));
is($source->safe_psql('postgres', q{
	SELECT ordered_events.release('g') || '/' || ordered_events.release('pk')}),
	'4/4', 'source: 8 events released');
my ($p0, $p1, $c2) = split m{/}, process_all($source);
is($p0 + $p1 . "/$c2", '8/4', 'source: c1 applied 8 events over its partitions, c2 4');
is($source->safe_psql('postgres', q{SELECT ordered_events.release('out')}),
	'4', 'source: c2\'s 4 derived events released');

# 2. Released, not applied.
$source->safe_psql('postgres', ingest_sql(
	[ 'g', 5, 'a', 5 ], [ 'g', 6, 'c', 6 ], [ 'pk', 2, 'a', 105 ], [ 'pk', 1, 'd', 106 ]));
is($source->safe_psql('postgres', q{
	SELECT ordered_events.release('g') || '/' || ordered_events.release('pk')}),
	'2/2', 'source: 4 more events released, not applied');

# 3. Pending: g 7 and pk a:3 are missing.
$source->safe_psql('postgres', ingest_sql(
	[ 'g', 8, 'b', 8 ], [ 'g', 9, 'd', 9 ], [ 'pk', 4, 'a', 108 ]));
is($source->safe_psql('postgres', q{
	SELECT ordered_events.release('g') || '/' || ordered_events.release('pk') || '/' ||
	       (SELECT count(*) FROM ordered_events.pending)}),
	'0/0/3', 'source: 3 events pending behind gaps');

# The source is what the test says it is.
is($source->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM ordered_events.key_state) || '/' ||
	       (SELECT count(*) FROM ordered_events.results WHERE result ->> 'by' = 'owner1') || '/' ||
	       (SELECT count(DISTINCT ordered_events.key_partition(key, 2)) FROM ordered_events.results) || '/' ||
	       (SELECT string_agg(consumer || ' ' || stream || ':' || key || ':' || seq || ' ' || reason || ' ' || detail, ', ')
	          FROM ordered_events.unprocessed) || '/' ||
	       (SELECT sum(unread_count) FROM ordered_events.consumers) || '/' ||
	       (SELECT string_agg(DISTINCT payload ->> 'by', ',') FROM ordered_events.released WHERE stream = 'out')}),
	'8/7/2/c1 pk:b:2 exception_thrown SQLSTATE P0001: boom at pk:b:2/6/owner2',
	'source: states, results of owner1 in both partitions, one dead letter, unread events, owner2\'s derived events');

# Everything a user sees of the consumers, timestamps included: a restore
# must copy it as it is.
my %full = (
	key_state => q{SELECT consumer, key, state, last_stream, last_seq, processed_count,
	                      error_count, updated_at
	                 FROM ordered_events.key_state ORDER BY consumer, key},
	results => q{SELECT consumer, position, stream, seq, key, result, produced_at
	               FROM ordered_events.results ORDER BY consumer, position},
	unprocessed => q{SELECT consumer, stream, seq, key, payload, event_ts, reason, detail, received_at
	                   FROM ordered_events.unprocessed ORDER BY consumer, stream, key, seq},
	consumers => q{SELECT * FROM ordered_events.consumers},
	definitions => q{SELECT c.consumer, c.partitions, c.handler, c.owner, d.stream, c.alignment
	                   FROM ordered_events.consumer_def c
	                   LEFT JOIN ordered_events.stream_def d ON d.stream_id = c.output_stream_id
	                  ORDER BY c.consumer},
	released => q{SELECT stream, seq, key, payload, event_ts, alignment_ts, released_at
	                FROM ordered_events.released ORDER BY stream, key, seq},
	pending => q{SELECT * FROM ordered_events.pending ORDER BY stream, key, seq});
my %before = map { $_ => $source->safe_psql('postgres', $full{$_}) } keys %full;

my $dump = $source->basedir . '/dump';
command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $source->connstr('postgres') ],
	'dump the source');

# The roles first, in the other order: their oids are not the source's.
my $target = OrderedEvents::node('target', extension => 0);
$target->safe_psql('postgres', 'CREATE ROLE owner2; CREATE ROLE owner1;');
command_ok([ 'pg_restore', '-d', $target->connstr('postgres'), $dump ],
	'restore into a fresh cluster');
isnt($target->safe_psql('postgres', q{SELECT 'owner1'::regrole::oid}),
	$source->safe_psql('postgres', q{SELECT 'owner1'::regrole::oid}),
	'owner1 has another oid in the target');

for my $what (sort keys %full)
{
	is($target->safe_psql('postgres', $full{$what}), $before{$what},
		"target: $what as in the source");
}
like($before{definitions}, qr/^c1\|2\|h\.fn\(jsonb,ordered_events\.event\)\|owner1\|\|inherit\nc2\|1\|h\.fn\(jsonb,ordered_events\.event\)\|owner2\|out\|processing$/,
	'the definitions compared: c1 owned by owner1, c2 by owner2 with its output stream');

# 4. The missing events arrive on both copies; the same steps apply all
#    that is left.
my $rest = ingest_sql([ 'g', 7, 'a', 7 ], [ 'pk', 3, 'a', 107 ]);
for my $node ($source, $target)
{
	my $name = $node->name;
	$node->safe_psql('postgres', $rest);
	is($node->safe_psql('postgres', q{
		SELECT ordered_events.release('g') || '/' || ordered_events.release('pk')}),
		'3/2', "$name: g 7..9 and pk a:3..4 released");
	($p0, $p1, $c2) = split m{/}, process_all($node);
	is($p0 + $p1 . "/$c2", '9/5', "$name: c1 applied the 9 events left, c2 the 5 left");
	is(process_all($node), '0/0/0', "$name: nothing left to apply");
	is($node->safe_psql('postgres', q{SELECT ordered_events.release('out')}),
		'5', "$name: c2's 5 new derived events released");

	# Each of the 17 events of g and pk applied once by c1 (b:2 as its
	# error), each of the 9 events of g once by c2.
	is($node->safe_psql('postgres', q{
		SELECT sum(processed_count) || '/' || sum(error_count) || '/' ||
		       (SELECT count(*) || '/' || count(DISTINCT s) FROM ordered_events.key_state k2,
		               jsonb_array_elements_text(k2.state -> 'seen') s WHERE k2.consumer = 'c1')
		  FROM ordered_events.key_state WHERE consumer = 'c1'}),
		'17/1/16/16', "$name: c1 applied 17 events, one error, each other event in a state once");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(s, ',' ORDER BY s) FROM ordered_events.key_state,
		       jsonb_array_elements_text(state -> 'seen') s WHERE consumer = 'c1'}),
		$node->safe_psql('postgres', q{
		SELECT string_agg(stream || ':' || key || ':' || seq, ',' ORDER BY stream || ':' || key || ':' || seq)
		  FROM ordered_events.released WHERE stream IN ('g', 'pk') AND NOT payload ? 'boom'}),
		"$name: c1's states saw exactly the released events but the dead letter");
	is($node->safe_psql('postgres', q{
		SELECT count(*) || '/' || count(*) FILTER (WHERE result ->> 'by' = 'owner1')
		  FROM ordered_events.results WHERE consumer = 'c1'}),
		'16/16', "$name: 16 results of c1, all computed as owner1");
	is($node->safe_psql('postgres', q{
		SELECT string_agg(seq || ':' || (payload ->> 'seq') || ':' || (payload ->> 'by'), ' ' ORDER BY seq)
		  FROM ordered_events.released WHERE stream = 'out'}),
		'1:1:owner2 2:2:owner2 3:3:owner2 4:4:owner2 5:5:owner2 6:6:owner2 7:7:owner2 8:8:owner2 9:9:owner2',
		"$name: out has one derived event per event of g, in order, seqs 5..9 after the restored 1..4, as owner2");
	is($node->safe_psql('postgres', q{
		SELECT bool_and(n.alignment_ts >= (SELECT max(alignment_ts) FROM ordered_events.released
		                                    WHERE stream = 'out' AND seq <= 4))
		  FROM ordered_events.released n WHERE n.stream = 'out' AND n.seq > 4}),
		't', "$name: the new derived events are aligned no earlier than the restored ones");
	is($node->safe_psql('postgres', q{
		SELECT (SELECT sum(unread_count) FROM ordered_events.consumers) || '/' ||
		       (SELECT count(*) FROM ordered_events.unprocessed)}),
		'0/1', "$name: nothing left unread; still the one dead letter");
}

# The two copies ended the same, but for the times of the new steps
# (updated_at, produced_at, the derived events' processing alignment).
my %final = (
	key_state => q{SELECT consumer, key, state, last_stream, last_seq, processed_count, error_count
	                 FROM ordered_events.key_state ORDER BY consumer, key},
	results => q{SELECT consumer, position, stream, seq, key, result
	               FROM ordered_events.results ORDER BY consumer, position},
	unprocessed => q{SELECT consumer, stream, seq, key, payload, event_ts, reason, detail, received_at
	                   FROM ordered_events.unprocessed ORDER BY consumer, stream, key, seq},
	consumers => q{SELECT consumer, partition, stream, delay, consumed_count, unread_count, bias
	                 FROM ordered_events.consumers},
	derived => q{SELECT seq, key, payload, event_ts FROM ordered_events.released
	              WHERE stream = 'out' ORDER BY seq});
for my $what (sort keys %final)
{
	is($target->safe_psql('postgres', $final{$what}), $source->safe_psql('postgres', $final{$what}),
		"final $what equal on source and target");
}

$source->stop;
$target->stop;
done_testing();
