-- The extension itself: fixed schema ordered_events, not relocatable, every
-- object it owns inside that schema, the inventory of that schema, and the
-- outcome enum.
BEGIN;
SELECT plan(18);

SELECT has_extension('ordered_events', 'ordered_events',
    'extension ordered_events is installed in schema ordered_events');
SELECT has_schema('ordered_events');

SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'ordered_events'),
    false, 'the installed extension is not relocatable');
SELECT is((SELECT extnamespace::regnamespace::text FROM pg_extension
            WHERE extname = 'ordered_events'),
    'ordered_events', 'the installed extension lives in schema ordered_events');
SELECT is((SELECT format('relocatable=%s schema=%s', relocatable, schema)
             FROM pg_available_extension_versions
            WHERE name = 'ordered_events' AND installed),
    'relocatable=f schema=ordered_events',
    'the control file fixes schema ordered_events and relocatable = false');
SELECT throws_ok('ALTER EXTENSION ordered_events SET SCHEMA public', '0A000', NULL,
    'the extension cannot be moved to another schema');

-- Every function, relation and type of the extension is in its schema.
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
     WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ordered_events')
       AND p.pronamespace <> 'ordered_events'::regnamespace$$,
    'every function of the extension is in schema ordered_events');
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
     WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ordered_events')
       AND c.relnamespace <> 'ordered_events'::regnamespace$$,
    'every relation of the extension is in schema ordered_events');
SELECT is_empty($$
    SELECT t.oid::regtype::text FROM pg_depend d JOIN pg_type t ON t.oid = d.objid
     WHERE d.classid = 'pg_type'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ordered_events')
       AND t.typnamespace <> 'ordered_events'::regnamespace$$,
    'every type of the extension is in schema ordered_events');
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_proc p
     WHERE p.pronamespace = 'ordered_events'::regnamespace
       AND NOT EXISTS (SELECT FROM pg_depend d
                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                          AND d.deptype = 'e')$$,
    'schema ordered_events holds no function that is not part of the extension');

-- The inventory of the schema, internal objects included, as 0.2 (issue 11:
-- consumers, issue 12: handlers, issue 13: metrics; worker_status_internal
-- became worker_report) leaves it after CREATE EXTENSION, which runs
-- the 0.1 script and the 0.1--0.2 update: an object the update forgot to
-- drop, or a new one, shows here.  fence_seq_<id> sequences come with fence streams; this
-- database has none.
SELECT functions_are('ordered_events', ARRAY[
    -- streams, writing, releasing, reading
    'create_stream', 'alter_stream', 'drop_stream', 'ingest', 'append', 'release',
    'skip_gap', 'gaps', 'blockers', 'compact',
    -- a shard's part of a sharded stream (docs/sharding.md)
    'shard_stream', 'shard_runs', 'release_through', 'shard_skip', 'ingest_array',
    'check_event_batch', 'shard_run_set', 'shard_seq_bits', 'seq_bits_runs', 'shard_release',
    -- consumers
    'create_consumer', 'drop_consumer', 'subscribe', 'unsubscribe', 'read', 'peek',
    'key_partition',
    -- handlers
    'process', 'redrive', 'skip_held',
    -- groups of readers (0.3)
    'join', 'leave',
    -- owners and privileges (0.3)
    'grant_stream', 'revoke_stream', 'has_stream_privilege', 'alter_consumer',
    -- the lease mode (0.3)
    'receive', 'ack', 'nack',
    -- internal
    'blocking_transactions', 'check_handler', 'check_not_null', 'check_release_options',
    'check_retention', 'committed_position', 'compact_stream', 'consumer_or_error',
    'consumers_with_work', 'count_released', 'cycle_hooks', 'define_consumer', 'extension_of',
    'forget_unused_totals', 'register_cycle_hook',
    'kept_released',
    'inbox_insert', 'invalid_option', 'lag_us', 'lock_streams', 'output_stream_or_error',
    'read_here', 'stream_def_changed',
    'start_retaining', 'stream_id', 'stream_or_error', 'streams_to_compact', 'streams_with_work',
    'worker_loaded', 'worker_report',
    'acl_with', 'alter_consumer_as', 'alter_stream_as', 'check_handler_timeout', 'check_new_owner',
    'check_no_cycle', 'check_owner', 'consumer_to_change', 'check_stream_privilege', 'create_stream_as',
    'drop_consumer_as', 'drop_stream_as', 'grant_stream_as', 'may_read_stream',
    'revoke_stream_as', 'subscribe_as', 'unsubscribe_as', 'check_not_in_step',
    'lock_subscriptions', 'retention_cutoff', 'gap_expired', 'released_end',
    'check_failure_policy', 'forget_parked', 'handler_consumer_to_change', 'redrive_as',
    'skip_held_as', 'wake_worker',
    'stream_backlog', 'lane_backlog', 'compact_due', 'keyset_support', 'read_stream_id',
    'lane_range_end',
    -- seek and rebuild (issue 24)
    'seek', 'reset_consumer', 'seek_as', 'seek_streams', 'reset_consumer_as',
    'forget_stopped_calls',
    -- groups (issue 24)
    'group_consumer', 'assign_partitions', 'join_as', 'leave_as',
    -- leases (issue 24)
    'lease_events', 'forget_leases'],
    'schema ordered_events has exactly the functions of 0.3');
SELECT tables_are('ordered_events', ARRAY[
    'unprocessed',
    -- internal
    'stream_def', 'event_store', 'progress', 'lane_release_log', 'gap_skips', 'key_arrivals',
    'release_totals', 'consumer_def', 'subscription', 'handler_state', 'handler_result',
    'handler_parked', 'key_counters', 'deleted_totals', 'cycle_hook', 'backlog_blocks',
    'backlog_islands', 'group_member', 'lease', 'backlog_keys', 'backlog_keys_passed'],
    'schema ordered_events has exactly the tables of 0.3');
SELECT views_are('ordered_events', ARRAY[
    'streams', 'inbox', 'released', 'pending', 'ranges', 'key_status', 'stream_stats',
    'worker_status', 'skipped_gaps', 'consumers', 'key_state', 'results', 'metrics',
    'held', 'members', 'leases',
    -- internal
    'accepted_events', 'late_events'],
    'schema ordered_events has exactly the views of 0.3');
SELECT sequences_are('ordered_events', ARRAY['stream_id_seq', 'arrival_seq', 'consumer_id_seq',
                                             'result_position_seq', 'parked_position_seq',
                                             'lease_batch_seq'],
    'schema ordered_events has exactly the sequences of 0.3 (no fence stream exists)');

-- The types of the schema: the enums and the handlers' composite types
-- (the row types of the tables and views are not counted).
SELECT types_are('ordered_events', ARRAY['outcome', 'sequencing', 'gap_policy', 'event', 'step'],
    'schema ordered_events has exactly the types of 0.3');

-- outcome: the labels of the contract, in order.
SELECT has_enum('ordered_events', 'outcome', 'enum ordered_events.outcome exists');
SELECT enum_has_labels('ordered_events', 'outcome',
    ARRAY['accepted', 'duplicate', 'before_initial_sequence',
          'sequence_id_outside_valid_range', 'after_last_event', 'gap_skipped',
          'exception_thrown'],
    'enum outcome has exactly the contract labels, in order');
SELECT ok('accepted'::ordered_events.outcome < 'duplicate'::ordered_events.outcome
      AND 'after_last_event'::ordered_events.outcome < 'gap_skipped'::ordered_events.outcome,
    'outcome labels sort in declaration order');
SELECT * FROM finish();
ROLLBACK;
