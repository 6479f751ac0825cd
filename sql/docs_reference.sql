--
-- docs_reference: the SQL examples of docs/reference.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
SELECT ordered_events.create_stream('orders');
SELECT ordered_events.create_stream('sessions', sequencing => 'per_key');

COPY ordered_events.inbox (stream, seq, key, payload) FROM STDIN (FORMAT csv);
orders,1,key1,"{""op"": ""create""}"
orders,2,key2,
\.

SELECT ordered_events.ingest('sessions', 1, 'alice');
SELECT ordered_events.release();
\set last_seen 0

-- a global stream: seqs are contiguous in released, bar skipped ones
SELECT seq, key, payload FROM ordered_events.released
 WHERE stream = 'orders' AND seq > :last_seen
 ORDER BY seq LIMIT 1000;
-- a per-key stream: per key
SELECT seq, payload FROM ordered_events.released
 WHERE stream = 'sessions' AND key = 'alice' AND seq > :last_seen
 ORDER BY seq LIMIT 1000;

SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['orders', 'sessions']) s;
