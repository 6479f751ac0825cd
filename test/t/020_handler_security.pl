
# Security of handlers (docs/architecture.md, rule 16; docs/handlers.md,
# "Security of handlers").
#
# Role alice, no superuser, may create consumers and subscribe them.  Her
# handler, applied by the superuser worker, tries for one event each:
# ALTER ROLE alice SUPERUSER, reading and emptying a table she has no right
# on, SET ROLE to a superuser, SET SESSION AUTHORIZATION, a temporary
# table, writing the extension's own state table.  Each is its event's
# error, exception_thrown with SQLSTATE 42501, nothing more: alice is no
# superuser, the table is untouched, the key's state skips the event.  Her
# handler also changes search_path: that holds within its call only, the
# next call and another consumer's handler in the same worker see
# "pg_catalog, pg_temp" again.  The handler runs as alice, never as the
# worker's role.
#
# An endless handler (LOOP END LOOP for one event) is stopped by
# ordered_events.handler_timeout = 500ms: that event is exception_thrown
# with 57014, the consumer's next events and another consumer's events are
# applied, and the same worker goes on without an error.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('handler_security', databases => 'postgres', naptime => 200,
	conf => ["ordered_events.handler_timeout = '500ms'"]);
my $superuser = $node->safe_psql('postgres', 'SELECT current_user');

$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE SCHEMA alice_s AUTHORIZATION alice;
	GRANT USAGE ON SCHEMA ordered_events TO alice;
	GRANT EXECUTE ON FUNCTION ordered_events.create_consumer(text, integer, regprocedure, text, text, interval, text, integer, interval, text),
	                          ordered_events.subscribe(text, text, interval, text) TO alice;
	CREATE TABLE public.secret (v text);
	INSERT INTO public.secret VALUES ('s1'), ('s2');
	SELECT ordered_events.create_stream('s');
	SELECT ordered_events.create_stream('l');
	-- 0.3: alice's consumers read the streams through her 'read'
	SELECT ordered_events.grant_stream(s, 'read', 'alice') FROM unnest(ARRAY['s', 'l']) s;
});

# alice's handler: for payload {"try": t} it attempts t, then counts the
# event in the key's state; its result says who ran it, with which
# search_path, and whether that role is a superuser.
$node->safe_psql('postgres', q{
	SET ROLE alice;
	CREATE FUNCTION alice_s.evil(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE plpgsql AS $$
	DECLARE
		t text := e.payload ->> 'try';
		n bigint := coalesce((state ->> 'n')::bigint, 0) + 1;
	BEGIN
		IF t = 'superuser' THEN
			EXECUTE 'ALTER ROLE alice SUPERUSER';
		ELSIF t = 'read_secret' THEN
			PERFORM count(*) FROM public.secret;
		ELSIF t = 'empty_secret' THEN
			DELETE FROM public.secret;
		ELSIF t = 'set_role' THEN
			EXECUTE pg_catalog.format('SET ROLE %I', e.payload ->> 'role');
		ELSIF t = 'session_authorization' THEN
			EXECUTE pg_catalog.format('SET SESSION AUTHORIZATION %I', e.payload ->> 'role');
		ELSIF t = 'temp_table' THEN
			CREATE TEMP TABLE trap (v text);
		ELSIF t = 'extension_state' THEN
			UPDATE ordered_events.handler_state SET processed_count = 0;
		ELSIF t = 'search_path' THEN
			SET search_path = alice_s, public;
		ELSIF t = 'set_config' THEN
			PERFORM pg_catalog.set_config('search_path', 'public', false);
		ELSIF t = 'loop' THEN
			LOOP
			END LOOP;
		END IF;
		RETURN ROW(pg_catalog.jsonb_build_object('n', n),
		           pg_catalog.jsonb_build_object(
		               'try', t, 'n', n, 'user', current_user, 'session_user', session_user,
		               'search_path', pg_catalog.current_setting('search_path'),
		               'super', (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)))::ordered_events.step;
	END $$;
	SELECT ordered_events.create_consumer('alice_c', handler => 'alice_s.evil(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('alice_c', 's');
	SELECT ordered_events.create_consumer('alice_loop', handler => 'alice_s.evil(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('alice_loop', 'l');
	RESET ROLE;
});

# A consumer of the superuser on both streams: its handler records who ran
# it and with which search_path.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.watch(state jsonb, e ordered_events.event)
	RETURNS ordered_events.step LANGUAGE sql AS $$
		SELECT ROW(NULL, pg_catalog.jsonb_build_object(
		           'user', current_user, 'search_path', pg_catalog.current_setting('search_path')))::ordered_events.step
	$$;
	SELECT ordered_events.create_consumer('watch', handler => 'public.watch(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('watch', 's'), ordered_events.subscribe('watch', 'l');
});
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s', c.consumer, c.owner::text), ' ' ORDER BY c.consumer)
	  FROM ordered_events.consumer_def c}),
	"alice_c/alice alice_loop/alice watch/$superuser",
	'alice\'s consumers are hers, watch is the superuser\'s');

ok( $node->poll_query_until('postgres', q{
	SELECT pid IS NOT NULL AND cycles > 0
	  FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'}),
	'worker is running');
my $worker_pid = $node->safe_psql('postgres',
	"SELECT pid FROM ordered_events.worker_status WHERE database = 'postgres' AND kind = 'release'");

#
# 1. The attempts, one event each, all of key k, between two harmless ones.
#
my @tries = qw(none superuser read_secret empty_secret set_role session_authorization
  temp_table extension_state search_path none set_config none);
my $values = join(', ',
	map { sprintf("(%d, '%s')", $_ + 1, $tries[$_]) } 0 .. $#tries);
$node->safe_psql('postgres', qq{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 's', v.seq, 'k', jsonb_build_object('try', v.try, 'role', '$superuser')
	  FROM (VALUES $values) AS v(seq, try);
});
my $n_tries = scalar @tries;
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT processed_count FROM ordered_events.key_state WHERE consumer = 'alice_c' AND key = 'k')
	       || '/' ||
	       (SELECT processed_count FROM ordered_events.key_state WHERE consumer = 'watch' AND key = 'k')},
	"$n_tries/$n_tries"),
	"the worker applied the $n_tries events to alice_c and watch");

# Every attempt to escalate is its event's error, SQLSTATE 42501.
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s', payload ->> 'try', reason), ' ' ORDER BY seq)
	  FROM ordered_events.unprocessed WHERE consumer = 'alice_c'}),
	'superuser:exception_thrown read_secret:exception_thrown empty_secret:exception_thrown '
	  . 'set_role:exception_thrown session_authorization:exception_thrown '
	  . 'temp_table:exception_thrown extension_state:exception_thrown',
	'each escalation attempt is an exception_thrown dead letter of alice_c');
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM ordered_events.unprocessed
	 WHERE consumer = 'alice_c' AND detail NOT LIKE 'SQLSTATE 42501: %'}),
	'0', '... each with SQLSTATE 42501 in detail');
my $details = $node->safe_psql('postgres', q{
	SELECT string_agg(payload ->> 'try' || ' => ' || detail, E'\n' ORDER BY seq)
	  FROM ordered_events.unprocessed WHERE consumer = 'alice_c'});
like($details, qr/read_secret => SQLSTATE 42501: permission denied for table secret/,
	'reading the table: permission denied');
# PostgreSQL names the user id change it checks first: "within
# security-definer function".
like($details, qr/set_role => SQLSTATE 42501: cannot set parameter "role" within security-/,
	'SET ROLE: refused while the handler runs as its owner');
like($details, qr/session_authorization => SQLSTATE 42501: cannot set parameter "session_authorization" within security-/,
	'SET SESSION AUTHORIZATION: refused likewise');
like($details, qr/superuser => SQLSTATE 42501: must be superuser to alter superuser roles/,
	'ALTER ROLE alice SUPERUSER: refused');
like($details, qr/temp_table => SQLSTATE 42501: cannot create temporary table within security-restricted operation/,
	'a temporary table: refused within a security-restricted operation');

is( $node->safe_psql('postgres', q{
	SELECT rolsuper FROM pg_roles WHERE rolname = 'alice';
	SELECT string_agg(v, ',' ORDER BY v) FROM public.secret;
	SELECT count(*) FROM pg_class WHERE relname = 'trap'}),
	"f\ns1,s2\n0", 'alice is still no superuser, the table is untouched, no temporary table');

# The key's state counted only the events that held: 5 of 12.
is( $node->safe_psql('postgres', q{
	SELECT format('%s %s/%s', state, processed_count, error_count)
	  FROM ordered_events.key_state WHERE consumer = 'alice_c'}),
	'{"n": 5} 12/7', 'alice_c: the state skips the failed events, the counts include them');

# The handler ran as alice; its search_path changes held for its call only.
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s:%s/%s:%s', r.result ->> 'try', r.result ->> 'n', r.result ->> 'user',
	                         r.result ->> 'super', r.result ->> 'search_path'), E'\n' ORDER BY r.position)
	  FROM ordered_events.results r WHERE r.consumer = 'alice_c'}),
	"none:1:alice/false:pg_catalog, pg_temp\n"
	  . "search_path:2:alice/false:alice_s, public\n"
	  . "none:3:alice/false:pg_catalog, pg_temp\n"
	  . "set_config:4:alice/false:public\n"
	  . "none:5:alice/false:pg_catalog, pg_temp",
	'alice_c\'s handler ran as alice; its SET search_path and set_config() lasted one call');
# watch ran in the same worker, after alice_c's handler, with the
# extension's search_path and as the superuser.
is( $node->safe_psql('postgres', qq{
	SELECT count(*) || '/' ||
	       count(*) FILTER (WHERE result ->> 'user' = '$superuser'
	                          AND result ->> 'search_path' = 'pg_catalog, pg_temp')
	  FROM ordered_events.results WHERE consumer = 'watch'}),
	"$n_tries/$n_tries", 'watch: every call ran as its owner with search_path "pg_catalog, pg_temp"');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ordered_events.unprocessed WHERE consumer = 'watch'"),
	'0', 'watch: no dead letter');

#
# 2. An endless handler: seq 3 of stream l loops.
#
$node->safe_psql('postgres', q{
	INSERT INTO ordered_events.inbox (stream, seq, key, payload)
	SELECT 'l', g, 'k' || (g % 2), jsonb_build_object('try', CASE WHEN g = 3 THEN 'loop' ELSE 'none' END)
	  FROM generate_series(1, 6) g;
});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT sum(processed_count) FROM ordered_events.key_state WHERE consumer = 'alice_loop')
	       || '/' ||
	       (SELECT count(*) FROM ordered_events.results r
	          JOIN ordered_events.released l ON l.stream = r.stream AND l.seq = r.seq
	         WHERE r.consumer = 'watch' AND r.stream = 'l')},
	'6/6'),
	'the worker applied the 6 events of l to alice_loop and watch');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s:%s:%s', seq, reason, detail), E'\n' ORDER BY seq)
	  FROM ordered_events.unprocessed WHERE consumer = 'alice_loop'}),
	'3:exception_thrown:SQLSTATE 57014: canceling statement due to statement timeout '
	  . '(ordered_events.handler_timeout is 500 ms)',
	'the endless call was cancelled after handler_timeout: exception_thrown, 57014');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s/%s:%s', key, seq, result ->> 'n'), ' ' ORDER BY position)
	  FROM ordered_events.results WHERE consumer = 'alice_loop';
	SELECT string_agg(format('%s:%s %s/%s', key, state, processed_count, error_count), ' ' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'alice_loop'}),
	"k1/1:1 k0/2:1 k0/4:2 k1/5:2 k0/6:3\n" . 'k0:{"n": 3} 3/0 k1:{"n": 2} 3/1',
	'the other events of alice_loop were applied, before and after it, in order');
is( $node->safe_psql('postgres', q{
	SELECT pid || '/' || (last_error IS NULL) FROM ordered_events.worker_status
	 WHERE database = 'postgres' AND kind = 'release'}),
	"$worker_pid/true", 'the same worker served the whole test, no error');
ok(!$node->log_contains(qr/could not process/), 'no processing error logged');

$node->stop;
done_testing();
