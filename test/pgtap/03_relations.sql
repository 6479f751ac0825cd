-- The views and tables of the contract (docs/reference.md: streams
-- under "Streams", inbox under "Writing", the others under "Reading"): each
-- has exactly the contract's columns, in the contract's order, with their
-- types.
BEGIN;
SELECT plan(140);

CREATE TEMP TABLE contract_column (
    rel name NOT NULL,
    pos int NOT NULL,
    col name NOT NULL,
    typ text NOT NULL,              -- format_type()
    PRIMARY KEY (rel, pos)
) ON COMMIT DROP;

CREATE TEMP TABLE contract_relation (
    ord int PRIMARY KEY,
    rel name NOT NULL,
    kinds "char"[] NOT NULL         -- allowed pg_class.relkind
) ON COMMIT DROP;

INSERT INTO contract_relation VALUES
    (1, 'streams',       '{v}'),
    (2, 'inbox',         '{v}'),
    (3, 'released',      '{v}'),
    (4, 'pending',       '{v}'),
    (5, 'ranges',        '{v,r}'),     -- a view in docs/reference.md; a table would do as well
    (6, 'key_status',    '{v}'),
    (7, 'stream_stats',  '{v}'),
    (8, 'worker_status', '{v}'),
    (9, 'unprocessed',   '{r}'),
    (10, 'skipped_gaps', '{v,r}'),    -- a view over the internal ledger; a table would do as well
    (11, 'metrics',      '{v}');      -- 0.2: for Prometheus (contrib/prometheus/)

INSERT INTO contract_column (rel, pos, col, typ) VALUES
    ('streams', 1, 'stream', 'text'),
    ('streams', 2, 'sequencing', 'text'),
    ('streams', 3, 'initial_sequence', 'bigint'),
    ('streams', 4, 'gap_policy', 'text'),
    ('streams', 5, 'gap_timeout', 'interval'),
    ('streams', 6, 'max_release_batch', 'integer'),
    ('streams', 7, 'created_at', 'timestamp with time zone'),
    ('streams', 8, 'retention', 'interval'),
    ('streams', 9, 'dead_letter_retention', 'interval'),
    ('streams', 10, 'owner', 'regrole'),          -- 0.3
    ('streams', 11, 'privileges', 'aclitem[]'),   -- 0.3

    ('inbox', 1, 'stream', 'text'),
    ('inbox', 2, 'seq', 'bigint'),
    ('inbox', 3, 'key', 'text'),
    ('inbox', 4, 'payload', 'jsonb'),
    ('inbox', 5, 'event_ts', 'timestamp with time zone'),
    ('inbox', 6, 'alignment_ts', 'timestamp with time zone'),
    ('inbox', 7, 'last_event', 'boolean'),

    ('released', 1, 'stream', 'text'),
    ('released', 2, 'seq', 'bigint'),
    ('released', 3, 'key', 'text'),
    ('released', 4, 'payload', 'jsonb'),
    ('released', 5, 'event_ts', 'timestamp with time zone'),
    ('released', 6, 'alignment_ts', 'timestamp with time zone'),
    ('released', 7, 'received_at', 'timestamp with time zone'),
    ('released', 8, 'released_at', 'timestamp with time zone'),

    ('pending', 1, 'stream', 'text'),
    ('pending', 2, 'seq', 'bigint'),
    ('pending', 3, 'key', 'text'),
    ('pending', 4, 'payload', 'jsonb'),
    ('pending', 5, 'event_ts', 'timestamp with time zone'),
    ('pending', 6, 'alignment_ts', 'timestamp with time zone'),
    ('pending', 7, 'received_at', 'timestamp with time zone'),

    ('ranges', 1, 'stream', 'text'),
    ('ranges', 2, 'range_start', 'bigint'),
    ('ranges', 3, 'range_end', 'bigint'),
    ('ranges', 4, 'max_event_ts', 'timestamp with time zone'),
    ('ranges', 5, 'updated_at', 'timestamp with time zone'),

    ('key_status', 1, 'stream', 'text'),
    ('key_status', 2, 'key', 'text'),
    ('key_status', 3, 'last_released_seq', 'bigint'),
    ('key_status', 4, 'buffered_count', 'bigint'),
    ('key_status', 5, 'earliest_buffered_seq', 'bigint'),
    ('key_status', 6, 'latest_buffered_seq', 'bigint'),
    ('key_status', 7, 'received_count', 'bigint'),
    ('key_status', 8, 'released_count', 'bigint'),
    ('key_status', 9, 'duplicate_count', 'bigint'),
    ('key_status', 10, 'last_event_received', 'boolean'),

    ('stream_stats', 1, 'stream', 'text'),
    ('stream_stats', 2, 'range_end', 'bigint'),
    ('stream_stats', 3, 'max_seen_seq', 'bigint'),
    ('stream_stats', 4, 'pending_count', 'bigint'),
    ('stream_stats', 5, 'released_count', 'bigint'),
    ('stream_stats', 6, 'unprocessed_count', 'bigint'),
    ('stream_stats', 7, 'oldest_pending_at', 'timestamp with time zone'),
    ('stream_stats', 8, 'first_gap_start', 'bigint'),
    ('stream_stats', 9, 'first_gap_since', 'timestamp with time zone'),
    ('stream_stats', 10, 'skipped_count', 'bigint'),

    ('worker_status', 1, 'database', 'text'),
    ('worker_status', 2, 'pid', 'integer'),
    ('worker_status', 3, 'state', 'text'),
    ('worker_status', 4, 'started_at', 'timestamp with time zone'),
    ('worker_status', 5, 'last_cycle_at', 'timestamp with time zone'),
    ('worker_status', 6, 'cycles', 'bigint'),
    ('worker_status', 7, 'released_total', 'bigint'),
    ('worker_status', 8, 'last_error', 'text'),
    -- 0.2 (issue 13): what the worker does now and how fast
    ('worker_status', 9, 'processed_total', 'bigint'),
    ('worker_status', 10, 'current_stream', 'text'),
    ('worker_status', 11, 'current_consumer', 'text'),
    ('worker_status', 12, 'last_cycle_duration', 'interval'),
    ('worker_status', 13, 'released_per_second', 'double precision'),
    ('worker_status', 14, 'processed_per_second', 'double precision'),
    -- 0.3 (issue 22): one row per worker, release or processing
    ('worker_status', 15, 'kind', 'text'),
    ('worker_status', 16, 'partition', 'integer'),

    ('unprocessed', 1, 'stream', 'text'),
    ('unprocessed', 2, 'seq', 'bigint'),
    ('unprocessed', 3, 'key', 'text'),
    ('unprocessed', 4, 'payload', 'jsonb'),
    ('unprocessed', 5, 'event_ts', 'timestamp with time zone'),
    ('unprocessed', 6, 'reason', 'ordered_events.outcome'),
    ('unprocessed', 7, 'detail', 'text'),
    ('unprocessed', 8, 'received_at', 'timestamp with time zone'),
    ('unprocessed', 9, 'consumer', 'text'),     -- 0.2: the handler consumer of a dead letter

    ('skipped_gaps', 1, 'stream', 'text'),
    ('skipped_gaps', 2, 'key', 'text'),
    ('skipped_gaps', 3, 'gap_start', 'bigint'),
    ('skipped_gaps', 4, 'gap_end', 'bigint'),
    ('skipped_gaps', 5, 'reason', 'text'),
    ('skipped_gaps', 6, 'skipped_at', 'timestamp with time zone'),

    ('metrics', 1, 'metric', 'text'),
    ('metrics', 2, 'type', 'text'),
    ('metrics', 3, 'stream', 'text'),
    ('metrics', 4, 'consumer', 'text'),
    ('metrics', 5, 'value', 'double precision');

-- 11 relations x 4 tests = 44
SELECT has_relation('ordered_events', r.rel, format('relation ordered_events.%s exists', r.rel))
  FROM contract_relation r ORDER BY r.ord;
SELECT ok((SELECT c.relkind = ANY (r.kinds) FROM pg_class c
            WHERE c.oid = format('ordered_events.%I', r.rel)::regclass),
          format('%s is a %s', r.rel,
                 CASE r.kinds WHEN '{v}' THEN 'view' WHEN '{r}' THEN 'table'
                              ELSE 'table or view' END))
  FROM contract_relation r ORDER BY r.ord;
SELECT columns_are('ordered_events', r.rel,
           (SELECT array_agg(c.col ORDER BY c.pos) FROM contract_column c WHERE c.rel = r.rel),
           format('%s has exactly the contract columns', r.rel))
  FROM contract_relation r ORDER BY r.ord;
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', '
                             ORDER BY a.attnum)
             FROM pg_attribute a
            WHERE a.attrelid = format('ordered_events.%I', r.rel)::regclass
              AND a.attnum > 0 AND NOT a.attisdropped),
          (SELECT string_agg(c.col || ' ' || c.typ, ', ' ORDER BY c.pos)
             FROM contract_column c WHERE c.rel = r.rel),
          format('%s: columns in contract order with contract types', r.rel))
  FROM contract_relation r ORDER BY r.ord;

-- 88 columns, one col_type_is each
SELECT col_type_is('ordered_events', c.rel, c.col, c.typ,
           format('%s.%s is %s', c.rel, c.col, c.typ))
  FROM contract_column c JOIN contract_relation r USING (rel)
 ORDER BY r.ord, c.pos;

-- inbox takes INSERT (and so COPY FROM); last_event defaults to false.
SELECT ok((pg_relation_is_updatable('ordered_events.inbox', true) & 8) = 8,
    'inbox accepts INSERT');
SELECT col_default_is('ordered_events', 'inbox', 'last_event', 'false',
    'inbox.last_event defaults to false');

SELECT * FROM finish();
ROLLBACK;
