--
-- errors: what a user reads when a call is refused, one worked example of
-- each message, with its detail and hint (docs/reference.md and
-- docs/troubleshooting.md).  The SQLSTATE of every kind of bad input, for every
-- function and the inbox, and that a refused call changes nothing, are
-- asserted in test/pgtap/04_errors.sql; the values at the edge of what is
-- accepted in test/pgtap/05_semantics.sql.  The messages of append() and
-- skip_gap(), and more of the gap options, are shown in gap_policies.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT ordered_events.create_stream('err_s');
SELECT ordered_events.ingest('err_s', 1, 'k1'), ordered_events.ingest('err_s', 3, 'k1');
SELECT ordered_events.release('err_s');

-- An unknown stream; every function says the same.  A name is taken as
-- given: never folded to lower case, never truncated.
SELECT ordered_events.ingest('err_nope', 1, 'k1');
SELECT ordered_events.ingest('ERR_S', 2, 'k1');
SELECT ordered_events.release(repeat('e', 100));

-- A NULL stream, seq or key.
SELECT ordered_events.ingest(NULL, 2, 'k1');
SELECT ordered_events.ingest('err_s', NULL, 'k1');
SELECT ordered_events.ingest('err_s', 2, NULL);

-- A key over 1024 bytes: the detail names the event.
SELECT ordered_events.ingest('err_s', 2, repeat('k', 1025));

-- last_event on a global stream.
SELECT ordered_events.ingest('err_s', 4, 'k1', last_event => true);

-- Invalid stream names: the hint gives the rule.
SELECT ordered_events.create_stream('Err_upper');
SELECT ordered_events.create_stream(NULL);
SELECT ordered_events.create_stream(E'err_s\n');

-- An existing stream.
SELECT ordered_events.create_stream('err_s', max_release_batch => 7);

-- Invalid options of create_stream and alter_stream.
SELECT ordered_events.create_stream('err_t', sequencing => 'bogus');
SELECT ordered_events.create_stream('err_t', gap_policy => 'bogus');
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout');
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout', gap_timeout => '0');
SELECT ordered_events.create_stream('err_t', gap_policy => 'timeout', gap_timeout => '-1 minute');
SELECT ordered_events.create_stream('err_t', gap_timeout => '1 minute');
SELECT ordered_events.create_stream('err_t', sequencing => 'per_key', gap_policy => 'fence');
SELECT ordered_events.create_stream('err_t', max_release_batch => 0);
SELECT ordered_events.create_stream('err_t', max_release_batch => NULL);
SELECT ordered_events.create_stream('err_t', initial_sequence => 9223372036854775807);
SELECT ordered_events.create_stream('err_t', initial_sequence => NULL);
SELECT ordered_events.alter_stream('err_s', gap_policy => 'fence');

-- An error inside a transaction undoes the whole transaction, also the
-- events written before it: 6 is not there afterwards.
BEGIN;
SELECT ordered_events.ingest('err_s', 6, 'k1');
SELECT ordered_events.ingest('err_s', 7, NULL);
ROLLBACK;
SELECT seq FROM ordered_events.pending WHERE stream = 'err_s' ORDER BY seq;
SELECT seq FROM ordered_events.released WHERE stream = 'err_s' ORDER BY seq;

SELECT ordered_events.drop_stream('err_s');
