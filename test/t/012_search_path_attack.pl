
# Security: objects a role creates in public never run inside the extension.
#
# Role mallory owns the schema public (as a database owner does by default
# in PostgreSQL 15) and creates there operators and functions whose argument
# types match exactly what the extension's queries use: || for text and
# integers, = for text, + and <= for timestamps, - for bigints, now(),
# clock_timestamp(), format(), to_regclass().  Each one records who ran it
# and tries to make mallory a superuser.  Then every path of the extension
# runs, by the superuser worker and by hand by a superuser whose session puts
# public first in its search_path: ingest with every kind of rejection,
# append, release, skip_gap, settling an event that committed into a skipped
# run, a key's last event, gaps, blockers, stream_stats, key_status.
# None of mallory's objects may run, and mallory gains no right.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use OrderedEvents;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = OrderedEvents::node('search_path', databases => 'postgres', naptime => 100,
	conf => ['max_prepared_transactions = 2']);

$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	ALTER SCHEMA public OWNER TO mallory;
	SELECT ordered_events.create_stream('g');
	SELECT ordered_events.create_stream('f', gap_policy => 'fence');
	SELECT ordered_events.create_stream('k', 'per_key', gap_policy => 'timeout',
	                                    gap_timeout => '1 hour');
});

# mallory's trap: every object calls pwn(), which leaves a trace.
$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE TABLE public.pwned (who name, what text);
	GRANT INSERT ON public.pwned TO PUBLIC;
	CREATE FUNCTION public.pwn(what text) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO public.pwned VALUES (current_user, what);
		BEGIN
			EXECUTE 'ALTER ROLE mallory SUPERUSER';
		EXCEPTION WHEN OTHERS THEN NULL;
		END;
	END $$;

	CREATE FUNCTION public.cat(text, integer) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('||(text, integer)'); RETURN pg_catalog.textcat($1, $2::text); END $$;
	CREATE FUNCTION public.cat(text, bigint) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('||(text, bigint)'); RETURN pg_catalog.textcat($1, $2::text); END $$;
	CREATE FUNCTION public.cat(integer, text) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('||(integer, text)'); RETURN pg_catalog.textcat($1::text, $2); END $$;
	CREATE FUNCTION public.cat(bigint, text) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('||(bigint, text)'); RETURN pg_catalog.textcat($1::text, $2); END $$;
	CREATE OPERATOR public.|| (FUNCTION = public.cat, LEFTARG = text, RIGHTARG = integer);
	CREATE OPERATOR public.|| (FUNCTION = public.cat, LEFTARG = text, RIGHTARG = bigint);
	CREATE OPERATOR public.|| (FUNCTION = public.cat, LEFTARG = integer, RIGHTARG = text);
	CREATE OPERATOR public.|| (FUNCTION = public.cat, LEFTARG = bigint, RIGHTARG = text);

	CREATE FUNCTION public.eq(text, text) RETURNS boolean LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('=(text, text)'); RETURN pg_catalog.texteq($1, $2); END $$;
	CREATE OPERATOR public.= (FUNCTION = public.eq, LEFTARG = text, RIGHTARG = text);
	CREATE FUNCTION public.plus(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('+(timestamptz, interval)'); RETURN pg_catalog.timestamptz_pl_interval($1, $2); END $$;
	CREATE OPERATOR public.+ (FUNCTION = public.plus, LEFTARG = timestamptz, RIGHTARG = interval);
	CREATE FUNCTION public.le(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('<=(timestamptz, timestamptz)'); RETURN pg_catalog.timestamptz_le($1, $2); END $$;
	CREATE OPERATOR public.<= (FUNCTION = public.le, LEFTARG = timestamptz, RIGHTARG = timestamptz);
	CREATE FUNCTION public.minus(bigint, integer) RETURNS bigint LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('-(bigint, integer)'); RETURN pg_catalog.int84mi($1, $2); END $$;
	CREATE OPERATOR public.- (FUNCTION = public.minus, LEFTARG = bigint, RIGHTARG = integer);

	CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('now()'); RETURN pg_catalog.now(); END $$;
	CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END $$;
	CREATE FUNCTION public.format(text, bigint) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('format(text, bigint)'); RETURN pg_catalog.format($1, $2); END $$;
	CREATE FUNCTION public.format(text, integer) RETURNS text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('format(text, integer)'); RETURN pg_catalog.format($1, $2); END $$;
	CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('to_regclass(text)'); RETURN pg_catalog.to_regclass($1); END $$;

	-- what the consumers' queries use
	CREATE FUNCTION public.gt(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('>(bigint, bigint)'); RETURN pg_catalog.int8gt($1, $2); END $$;
	CREATE OPERATOR public.> (FUNCTION = public.gt, LEFTARG = bigint, RIGHTARG = bigint);
	CREATE FUNCTION public.times(numeric, integer) RETURNS numeric LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('*(numeric, integer)'); RETURN $1 OPERATOR(pg_catalog.*) $2::numeric; END $$;
	CREATE OPERATOR public.* (FUNCTION = public.times, LEFTARG = numeric, RIGHTARG = integer);
	CREATE FUNCTION public.xeq(xid8, xid8) RETURNS boolean LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('=(xid8, xid8)'); RETURN pg_catalog.xid8eq($1, $2); END $$;
	CREATE OPERATOR public.= (FUNCTION = public.xeq, LEFTARG = xid8, RIGHTARG = xid8);
	CREATE FUNCTION public.round(numeric) RETURNS numeric LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('round(numeric)'); RETURN pg_catalog.round($1); END $$;
	CREATE FUNCTION public.extract(text, interval) RETURNS numeric LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('extract(text, interval)'); RETURN pg_catalog.extract($1, $2); END $$;
	CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('unnest(bigint[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
	CREATE FUNCTION public.pg_current_xact_id_if_assigned() RETURNS xid8 LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('pg_current_xact_id_if_assigned()'); RETURN pg_catalog.pg_current_xact_id_if_assigned(); END $$;

	-- what the handlers' queries use
	CREATE FUNCTION public.to_regprocedure(text) RETURNS regprocedure LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('to_regprocedure(text)'); RETURN pg_catalog.to_regprocedure($1); END $$;
	CREATE FUNCTION public.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('nextval(regclass)'); RETURN pg_catalog.nextval($1); END $$;
	CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
	CREATE FUNCTION public.unnest(jsonb[]) RETURNS SETOF jsonb LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('unnest(jsonb[])'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
	CREATE FUNCTION public.has_function_privilege(oid, oid, text) RETURNS boolean LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('has_function_privilege(oid, oid, text)'); RETURN pg_catalog.has_function_privilege($1, $2, $3); END $$;
	CREATE FUNCTION public.plus8(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS
		$$ BEGIN PERFORM public.pwn('+(bigint, bigint)'); RETURN pg_catalog.int8pl($1, $2); END $$;
	CREATE OPERATOR public.+ (FUNCTION = public.plus8, LEFTARG = bigint, RIGHTARG = bigint);
});

# A handler, schema-qualified as handlers must be (they run with
# search_path pg_catalog, pg_temp), in its own schema.
$node->safe_psql('postgres', q{
	CREATE SCHEMA h;
	CREATE FUNCTION h.count(state jsonb, e ordered_events.event) RETURNS ordered_events.step
	LANGUAGE sql AS $$
		SELECT ROW(pg_catalog.jsonb_build_object('n',
		               coalesce((state OPERATOR(pg_catalog.->>) 'n')::integer, 0)
		               OPERATOR(pg_catalog.+) 1),
		           pg_catalog.to_jsonb(e.seq))::ordered_events.step
	$$;
	SELECT ordered_events.create_stream('o', gap_policy => 'fence');
});

# The trap works: a query that uses these operators from public runs them.
is( $node->safe_psql('postgres', q{
	SET ROLE mallory;
	SET search_path = public, pg_catalog;
	SELECT 'x' || 1;
	SELECT count(*) FROM public.pwned;
	DELETE FROM public.pwned;}),
	"x1\n1", 'the trap fires for a query that resolves || in public');

# An event of stream g whose transaction is open while its seq is skipped:
# it commits into the skipped run and must be settled by the worker.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT ordered_events.ingest('g', 5, 'late');
	PREPARE TRANSACTION 'late';
});

# Every path by hand, as a superuser whose search_path puts public first.
$node->safe_psql('postgres', q{
	SET lock_timeout = '60s';   -- a trap that fired may hold a lock: fail, don't hang
	SET search_path = public, pg_catalog;
	SELECT ordered_events.ingest('g', 1, 'a', '{"n": 1}');
	SELECT ordered_events.ingest('g', 1, 'a');               -- duplicate
	SELECT ordered_events.ingest('g', 0, 'a');               -- before_initial_sequence
	SELECT ordered_events.ingest('g', 9223372036854775807, 'a');
	SELECT ordered_events.ingest('g', 3, 'a');
	SELECT ordered_events.ingest('g', 2, 'a');
	SELECT ordered_events.ingest('g', 7, 'a');
	INSERT INTO ordered_events.inbox (stream, seq, key) VALUES ('g', 8, 'b'), ('g', 8, 'b');
	SELECT ordered_events.ingest('g', 10, 'a');
	SELECT ordered_events.append('f', 'a');
	SELECT ordered_events.ingest('k', 3, 'a');
	SELECT ordered_events.ingest('k', 1, 'a');
	SELECT ordered_events.ingest('k', 2, 'a', last_event => true);
	SELECT ordered_events.ingest('k', 5, 'b');
	SELECT ordered_events.release();
	SELECT ordered_events.skip_gap('g', 6, 'lost upstream');
	SELECT ordered_events.skip_gap('k', 4, 'lost upstream', 'b');
	SELECT * FROM ordered_events.gaps('g');
	SELECT * FROM ordered_events.gaps('k');
	SELECT * FROM ordered_events.blockers('g');
	SELECT * FROM ordered_events.stream_stats;
	SELECT * FROM ordered_events.key_status;
	SELECT * FROM ordered_events.released;
	SELECT * FROM ordered_events.pending;
	SELECT ordered_events.create_consumer('c', partitions => 2);
	SELECT ordered_events.subscribe('c', 'g', delay => '1 s');
	SELECT ordered_events.subscribe('c', 'k');
	SELECT ordered_events.subscribe('c', 'k', delay => '2 s');
	SELECT * FROM ordered_events.peek('c', 10, 1);
	BEGIN;
	SELECT * FROM ordered_events.read('c', 2, 0);
	SELECT * FROM ordered_events.read('c', 10, 0);
	SELECT * FROM ordered_events.consumers;
	COMMIT;
	SELECT * FROM ordered_events.read('c', 10, 1);
	SELECT * FROM ordered_events.consumers;
	SELECT ordered_events.key_partition('a', 3);
	SELECT ordered_events.unsubscribe('c', 'g');
	SELECT ordered_events.drop_consumer('c');
	SELECT ordered_events.create_consumer('hc', 2, 'h.count(jsonb, ordered_events.event)');
	SELECT ordered_events.subscribe('hc', 'g');
	SELECT ordered_events.subscribe('hc', 'k');
	SELECT ordered_events.process('hc', 1000, 0), ordered_events.process('hc', 1000, 1);
	SELECT * FROM ordered_events.key_state;
	SELECT * FROM ordered_events.results;
	SELECT ordered_events.create_consumer('hd', handler => 'h.count(jsonb, ordered_events.event)',
	                                      output_stream => 'o', alignment => 'processing');
	SELECT ordered_events.subscribe('hd', 'g');
	SELECT ordered_events.process('hd');
	SELECT ordered_events.drop_consumer('hd');
});

# The late event commits; the worker settles it (moves it to unprocessed).
$node->safe_psql('postgres', q{COMMIT PREPARED 'late'});
ok( $node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM ordered_events.unprocessed
	 WHERE stream = 'g' AND seq = 5 AND reason = 'gap_skipped'}),
	'the worker settled the event that committed into a skipped run');

# The worker releases a filled gap and a fence stream's events by itself.
$node->safe_psql('postgres', q{
	SELECT ordered_events.ingest('g', 9, 'a');
	SELECT ordered_events.append('f', 'b');
});
ok( $node->poll_query_until('postgres', q{
	SELECT (SELECT range_end FROM ordered_events.ranges WHERE stream = 'g') = 11
	   AND (SELECT range_end FROM ordered_events.ranges WHERE stream = 'f') = 3}),
	'the worker released g and f');

is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s %s', stream, seq, reason), ', ' ORDER BY stream, seq, reason)
	  FROM ordered_events.unprocessed}),
	'g 0 before_initial_sequence, g 1 duplicate, g 5 gap_skipped, g 8 duplicate, '
	  . 'g 9223372036854775807 sequence_id_outside_valid_range, k 3 after_last_event',
	'every rejection is recorded');
# (the view's order: global streams, then per-key ones)
is( $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s %s', stream, key, seq), ', ')
	  FROM ordered_events.released}),
	'f a 1, f b 2, g a 1, g a 2, g a 3, g a 7, g b 8, g a 9, g a 10, '
	  . 'o a 1, o a 2, o a 3, o a 4, o b 5, k a 1, k a 2, k b 5',
	'every stream released what it should');

# hc applied by hand what was released then (g 1, 2, 3, 7, 8; k a 1, 2, b 5)
# and the worker the rest (g 9, 10), each once.
ok( $node->poll_query_until('postgres', q{
	SELECT string_agg(format('%s %s', key, state ->> 'n'), ', ' ORDER BY key)
	  FROM ordered_events.key_state WHERE consumer = 'hc'},
	'a 8, b 2'),
	'the handler consumer applied every event once, by hand and by the worker');

is($node->safe_psql('postgres', 'SELECT count(*) FROM public.pwned'),
	'0', 'no object of public ran');
is($node->safe_psql('postgres',
	"SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'mallory'"),
	'f', 'mallory is no superuser');
ok(!$node->log_contains(qr/could not (release|process)/), 'the worker had no error');

done_testing();
