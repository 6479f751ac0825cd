# The lease mode: a worker of a group killed with SIGKILL mid-batch, then
# the server (docs/consuming.md, "Work outside the database: the lease
# mode").
#
# Workers share consumer calls (delivery 'lease', one partition): each
# receives a batch, "calls the outside service" for each event (a row of
# table service_calls, committed on its own, as an outside call is not
# part of the database's transaction), then acknowledges it.  Worker a is
# killed (SIGKILL of its client) between a call and its ack(), with events
# of its batch not called yet.  Its leases stay, and the keys of its events
# wait meanwhile.  Once the leases run out (the test moves their
# visibility instead of waiting), workers b and c receive them again,
# attempt 2.  In the end every event was called at least once, only the
# event in flight twice, each key's calls in seq order, nothing is out.
#
# Then a backend is killed with SIGKILL (a crash restart of the server)
# while its ack() is not committed: the leases survive, the ack() does not.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('lease_kill', conf => ['restart_after_crash = on']);

# 40 jobs, keys k0..k3 (seq % 4).
$node->safe_psql('postgres', q{
	CREATE TABLE service_calls (id bigserial PRIMARY KEY, worker text NOT NULL,
	                            seq bigint NOT NULL, key text NOT NULL, attempt integer NOT NULL);
	SELECT ordered_events.create_stream('jobs');
	SELECT ordered_events.ingest('jobs', s, 'k' || (s % 4), jsonb_build_object('job', s))
	  FROM generate_series(1, 40) s;
	SELECT ordered_events.release('jobs');
	SELECT ordered_events.create_consumer('calls', delivery => 'lease');
	SELECT ordered_events.subscribe('calls', 'jobs');
});

# A batch of a worker's session, "seq:key:attempt:receipt ..." by seq.
sub receive_batch
{
	my ($session, $max) = @_;
	return $session->query_safe(qq{
		SELECT coalesce(string_agg(concat_ws(':', seq, key, attempt, receipt), ' ' ORDER BY seq), '')
		  FROM ordered_events.receive('calls', $max, visibility => '1 h')});
}

# Call the service for an event of a batch, then acknowledge it.
sub call
{
	my ($session, $worker, $event) = @_;
	my ($seq, $key, $attempt) = split /:/, $event;
	$session->query_safe(
		"INSERT INTO service_calls (worker, seq, key, attempt) VALUES ('$worker', $seq, '$key', $attempt)");
}

sub ack
{
	my ($session, $event) = @_;
	my $receipt = (split /:/, $event)[3];
	return $session->query_safe("SELECT ordered_events.ack('calls', ARRAY[$receipt]::bigint[])");
}

# Worker a: the first event of each key (the others wait behind them).
my $a = $node->background_psql('postgres');
my @batch = split / /, receive_batch($a, 6);
is(join(' ', map { (split /:/)[0] } @batch), '1 2 3 4',
	'worker a received the first event of each key');
call($a, 'a', $batch[0]);
is(ack($a, $batch[0]), '1', 'worker a acknowledged seq 1');
call($a, 'a', $batch[1]);

# Killed between the call of seq 2 and its ack, with 3 and 4 not called.
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
$a->{run}->signal('KILL');
$a->{run}->finish;
ok( $node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $a_pid)"),
	'worker a is gone');

# Its leases stay: seq 2, 3 and 4 are out, their keys' later events wait.
is( $node->safe_psql('postgres', q{
		SELECT string_agg(seq || ':' || attempt, ' ' ORDER BY seq) FROM ordered_events.leases
		 WHERE visible_until IS NOT NULL}),
	'2:1 3:1 4:1', 'the killed worker\'s unacknowledged events are still leased');
my $b = $node->background_psql('postgres');
my @b_batch = split / /, receive_batch($b, 6);
is(join(' ', map { (split /:/)[0] } @b_batch), '5',
	'worker b gets only key k1\'s next event, 5: k2, k3 and k0 wait behind a\'s leases');
call($b, 'b', $b_batch[0]);
ack($b, $b_batch[0]);

# The leases of a run out (moved, not waited for); b and c share the rest,
# one batch each in turn.
my $c = $node->background_psql('postgres');
$node->safe_psql('postgres', q{
	UPDATE ordered_events.lease SET visible_until = '-infinity' WHERE state = 'leased'});
my %session = (b => $b, c => $c);
my @again;
my $rounds = 0;
for (;;)
{
	my $got = 0;
	for my $w ('b', 'c')
	{
		my @events = split / /, receive_batch($session{$w}, 6);
		push @again, grep { (split /:/)[2] > 1 } @events;
		for my $event (@events)
		{
			call($session{$w}, $w, $event);
			ack($session{$w}, $event);
		}
		$got += @events;
	}
	last if $got == 0 || ++$rounds > 50;
}
is(join(' ', sort map { join ':', (split /:/)[0, 2] } @again), '2:2 3:2 4:2',
	'a\'s leases came back once they ran out, attempt 2');

is( $node->safe_psql('postgres', q{
		SELECT count(DISTINCT seq) || ' ' || count(*) FROM service_calls}),
	'40 41', 'every job was called, one twice');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(worker || ':' || attempt, ' ' ORDER BY id) FROM service_calls WHERE seq = 2}),
	'a:1 ' . ($node->safe_psql('postgres',
		q{SELECT worker FROM service_calls WHERE seq = 2 AND attempt = 2})) . ':2',
	'only the job in flight when a was killed was called twice');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM (
		    SELECT seq < lag(seq) OVER (PARTITION BY key ORDER BY id) AS back FROM service_calls) c
		 WHERE back}),
	'0', 'each key\'s jobs were called in seq order');
is( $node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM ordered_events.leases) || ' '
		    || (SELECT unread_count FROM ordered_events.consumers WHERE consumer = 'calls') || ' '
		    || (SELECT count(*) FROM ordered_events.unprocessed)}),
	'0 0 0', 'nothing is out, unread, or a dead letter');
ok( $node->safe_psql('postgres', q{SELECT count(*) FROM service_calls WHERE worker = 'b'}) > 0
	  && $node->safe_psql('postgres', q{SELECT count(*) FROM service_calls WHERE worker = 'c'}) > 0,
	'both remaining workers took part');
$b->quit;
$c->quit;

# The server: 3 more jobs leased; their ack() is in flight when a backend
# is killed.
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('jobs', s, 'k' || (s % 4)) FROM generate_series(41, 43) s;
	SELECT ordered_events.release('jobs');
});
my $d = $node->background_psql('postgres', on_error_stop => 0);
my @leased = split / /, receive_batch($d, 6);
is(join(' ', map { (split /:/)[0] } @leased), '41 42 43', 'worker d received 41, 42 and 43');
my $receipts = join ',', map { (split /:/)[3] } @leased;
$d->query_safe('BEGIN');
is($d->query_safe("SELECT ordered_events.ack('calls', ARRAY[$receipts]::bigint[])"), '3',
	'worker d acknowledged them, not committed yet');
my $d_pid = $d->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $d_pid;
$d->{run}->finish;
ok( $node->poll_query_until('postgres', 'SELECT true', 't'), 'the server is back after the crash');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(seq || ':' || attempt, ' ' ORDER BY seq) FROM ordered_events.leases}),
	'41:1 42:1 43:1', 'the leases survived the crash, the ack() did not');
$node->safe_psql('postgres', q{
	UPDATE ordered_events.lease SET visible_until = '-infinity' WHERE state = 'leased'});
is( $node->safe_psql('postgres', q{
		SELECT string_agg(seq || ':' || attempt, ' ' ORDER BY seq)
		  FROM ordered_events.receive('calls', 10)}),
	'41:2 42:2 43:2', 'once they ran out they came back, attempt 2');

$node->stop;
done_testing();
