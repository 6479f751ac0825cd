-- make demo: the seed example, released by the background worker.
\set QUIET on
\pset footer off
CREATE EXTENSION ordered_events;
SELECT ordered_events.create_stream('orders') \gset

-- After each arrival: give the worker (woken by the commit) a moment, then
-- show the contiguous range, what is released and what is pending.
\set show 'SELECT pg_sleep(0.2) \\gset \\\\ SELECT format(''[%s,%s)'', range_start, range_end) AS range, (SELECT string_agg(seq || '':'' || key, '' '' ORDER BY seq) FROM ordered_events.released) AS "released (seq:key)", (SELECT string_agg(seq::text, '' '' ORDER BY seq) FROM ordered_events.pending) AS pending FROM ordered_events.ranges;'

\echo
\echo 'Stream "orders", global sequencing from seq 1.  Events arrive out of order:'
\echo 'seq 1, 3, 2, 7, 5, 4 - and seq 6 is still on its way.'
\echo
\echo '--- seq 1 (key1) arrives'
SELECT ordered_events.ingest('orders', 1, 'key1', '{"op": "create"}') AS outcome;
:show
\echo '--- seq 3 (key1) arrives: 2 is missing, so 3 waits'
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}') AS outcome;
:show
\echo '--- seq 2 (key2) arrives: 2 and 3 are released, in order'
SELECT ordered_events.ingest('orders', 2, 'key2', '{"op": "create"}') AS outcome;
:show
\echo '--- seq 7 (key2) arrives: waits for 4, 5, 6'
SELECT ordered_events.ingest('orders', 7, 'key2', '{"op": "ship"}') AS outcome;
:show
\echo '--- seq 5 (key2) arrives'
SELECT ordered_events.ingest('orders', 5, 'key2', '{"op": "pay"}') AS outcome;
:show
\echo '--- seq 4 (key1) arrives: 4 and 5 are released; 7 still waits for 6'
SELECT ordered_events.ingest('orders', 4, 'key1', '{"op": "ship"}') AS outcome;
:show
\echo '--- a retry delivers seq 3 again: a duplicate, recorded, never released twice'
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}') AS outcome;
SELECT seq, key, reason, detail FROM ordered_events.unprocessed;
\echo '--- the missing seqs, and each key''s status'
SELECT gap_start, gap_end FROM ordered_events.gaps('orders');
SELECT key, last_released_seq, buffered_count, received_count, duplicate_count
  FROM ordered_events.key_status ORDER BY key;

\echo '--- seq 6 (key1) arrives: the gap fills, 6 and 7 are released'
SELECT ordered_events.ingest('orders', 6, 'key1', '{"op": "refund"}') AS outcome;
:show
\echo '--- the ordered view: every key''s events in order (key1: 1,3,4,6; key2: 2,5,7)'
SELECT seq, key, payload FROM ordered_events.released;
\echo '--- nobody called release(): the background worker did'
SELECT database, state, released_total FROM ordered_events.worker_status;
