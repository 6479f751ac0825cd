
# A waiting read (docs/consuming.md, "Waiting reads"): read(..., wait)
# with nothing unread sleeps, and is woken by the commit of the release
# that gives its partition events, whoever releases: the worker after a
# gap fill, or release() by hand in another session.  Asserted on
# recorded facts: the reader was seen sleeping (pg_stat_activity,
# wait_event_type 'Extension', no transaction id, another session's read
# and subscribe() not blocked) before the gap was filled, and returned
# the events with a wait of 5 minutes long before it ran out; a release
# for another partition does not end the wait; a cancel ends it with
# 57014 and consumes nothing.  A waiting receive() of a lease consumer
# sleeps holding no lock, and is woken by a release and by the ack() that
# frees the key its next event waits behind.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('waiting_read', databases => 'postgres');

$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_consumer('c', 2);
	SELECT ordered_events.subscribe('c', 's');
	-- the partition of each key of consumer c
	CREATE TABLE public.keys AS
	SELECT k AS key, ordered_events.key_partition(k, 2) AS partition
	  FROM (VALUES ('a'), ('b'), ('c'), ('d')) v(k);
});
my $key0 = $node->safe_psql('postgres', 'SELECT min(key) FROM public.keys WHERE partition = 0');
my $key1 = $node->safe_psql('postgres', 'SELECT min(key) FROM public.keys WHERE partition = 1');

my $reader = $node->background_psql('postgres');
my $reader_pid = $reader->query_safe('SELECT pg_backend_pid()');

sub reader_sleeps
{
	return $node->poll_query_until('postgres', qq{
		SELECT wait_event_type = 'Extension' FROM pg_catalog.pg_stat_activity WHERE pid = $reader_pid});
}

# 1. Woken by the worker's release after a gap fill.  Seq 2 waits for 1.
$node->safe_psql('postgres', qq{SELECT ordered_events.ingest('s', 2, '$key0')});
OrderedEvents::send_query($reader, q{
	SELECT string_agg(seq::text, ',' ORDER BY seq)
	       || '|' || bool_and(released_at <= clock_timestamp())
	       || '|' || (clock_timestamp() - statement_timestamp() < interval '4 min')
	  FROM ordered_events.read('c', 10, 0, wait => '5 min');});
ok(reader_sleeps(), 'with nothing unread, the read sleeps');
is($node->safe_psql('postgres', qq{
	SELECT backend_xid IS NULL FROM pg_catalog.pg_stat_activity WHERE pid = $reader_pid}),
	't', '... without a transaction id');
is($node->safe_psql('postgres', q{
	SET lock_timeout = '1 min';
	SELECT count(*) FROM ordered_events.read('c', 10, 0);
	SELECT ordered_events.subscribe('c', 't_other') FROM ordered_events.create_stream('t_other');
	SELECT ordered_events.unsubscribe('c', 't_other');
	SELECT ordered_events.drop_stream('t_other');}),
	"0\n\n\n", '... and without the partition\'s lock: another read, subscribe() and drop_stream() go on');
$node->safe_psql('postgres', qq{SELECT ordered_events.ingest('s', 1, '$key0')});
my $got = $reader->query_safe(q{SELECT 'woken'});
like($got, qr/^1,2\|true\|true\nwoken$/,
	'the gap fill\'s release woke it: both events, released before it returned, long before its wait ran out');

# 2. A release for the other partition does not end the wait; one for its
# partition, by hand in another session, does.
$node->safe_psql('postgres', q{ALTER SYSTEM SET ordered_events.databases = ''});
$node->reload;
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM ordered_events.worker_status WHERE kind = 'release'}),
	'the worker has left the database: releases are by hand now');
OrderedEvents::send_query($reader, q{
	SELECT string_agg(seq::text, ',' ORDER BY seq)
	  FROM ordered_events.read('c', 10, 0, wait => '5 min');});
ok(reader_sleeps(), 'the read of partition 0 sleeps');
$node->safe_psql('postgres', qq{
	SELECT ordered_events.ingest('s', 3, '$key1');
	SELECT ordered_events.release('s');});
is($node->safe_psql('postgres', q{SELECT unread_count FROM ordered_events.consumers WHERE partition = 1}),
	'1', 'partition 1 got seq 3');
ok(reader_sleeps(), 'the read of partition 0 looked again and sleeps on');
$node->safe_psql('postgres', qq{
	SELECT ordered_events.ingest('s', 4, '$key0');
	SELECT ordered_events.release('s');});
is($reader->query_safe(q{SELECT 'woken'}), "4\nwoken", 'the release of seq 4 into partition 0 woke it');

# 3. A cancel ends the wait with 57014; nothing is consumed.
OrderedEvents::send_query($reader, q{
	SELECT count(*) FROM ordered_events.read('c', 10, 0, wait => '5 min');});
ok(reader_sleeps(), 'another read sleeps');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($reader_pid)");
# psql stops at the error (ON_ERROR_STOP): read its last words
$reader->{run}->pump()
  until $reader->{stderr} =~ /canceling statement/ || $reader->{timeout}->is_expired;
like($reader->{stderr}, qr/canceling statement due to user request/, 'a cancel ends the wait');
is($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s/%s', partition, consumed_count, unread_count), ' ' ORDER BY partition)
	  FROM ordered_events.consumers}),
	'0:3/0 1:0/1', 'what each partition consumed: nothing by the cancelled read');

eval { $reader->quit };

# 4. receive(..., wait) of a lease consumer: woken by a release, and by an
# ack() that frees a key; it sleeps holding no lock of its partition.
$node->safe_psql('postgres', q{
	SELECT ordered_events.create_stream('l_s');
	SELECT ordered_events.create_consumer('l', delivery => 'lease');
	SELECT ordered_events.subscribe('l', 'l_s');});
my $receiver = $node->background_psql('postgres');
my $receiver_pid = $receiver->query_safe('SELECT pg_backend_pid()');
my $receive = q{
	SELECT string_agg(seq || '/' || attempt || '/' || receipt, ',' ORDER BY seq)
	  FROM ordered_events.receive('l', 10, 0, visibility => '1 hour', wait => '5 min');};
sub receiver_sleeps
{
	return $node->poll_query_until('postgres', qq{
		SELECT wait_event_type = 'Extension' FROM pg_catalog.pg_stat_activity WHERE pid = $receiver_pid});
}
OrderedEvents::send_query($receiver, $receive);
ok(receiver_sleeps(), 'a receive() with nothing to deliver sleeps');
is($node->safe_psql('postgres', q{
	SET lock_timeout = '1 min';
	SELECT count(*) FROM ordered_events.receive('l', 10, 0);}),
	'0', '... holding no lock of its partition: another receive() goes on');
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('l_s', 1, 'k'), ordered_events.ingest('l_s', 2, 'k');
	SELECT ordered_events.release('l_s');});
my $first = $receiver->query_safe(q{SELECT 'woken'});
like($first, qr{^1/1/\d+\nwoken$}, 'the release woke it: seq 1 (seq 2 of its key waits behind it)');
my ($receipt) = $first =~ m{^1/1/(\d+)};
OrderedEvents::send_query($receiver, $receive);
ok(receiver_sleeps(), 'the next receive() sleeps: seq 2 waits behind the lease of seq 1');
is($node->safe_psql('postgres', "SELECT ordered_events.ack('l', ARRAY[$receipt]::bigint[])"), '1',
	'seq 1 is acknowledged');
like($receiver->query_safe(q{SELECT 'woken'}), qr{^2/1/\d+\nwoken$}, 'the ack woke it: seq 2');
$receiver->quit;
$node->stop;
done_testing();
