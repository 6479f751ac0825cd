--
-- docs_concepts: the SQL examples of docs/concepts.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
--
SELECT ordered_events.create_stream('sessions', sequencing => 'per_key');
SELECT ordered_events.ingest('sessions', 2, 'alice', '{"page": "/cart"}');
SELECT ordered_events.ingest('sessions', 1, 'bob',   '{"page": "/"}');
SELECT ordered_events.release('sessions');       -- bob:1 is released, alice waits for 1
SELECT ordered_events.ingest('sessions', 1, 'alice', '{"page": "/"}');
SELECT ordered_events.ingest('sessions', 3, 'alice', '{"page": "/pay"}', last_event => true);
SELECT ordered_events.release('sessions');       -- alice: 1, 2, 3; alice is complete
SELECT * FROM ordered_events.key_status WHERE stream = 'sessions' ORDER BY key;

-- "Gaps": stream orders with the example's events; seq 6 is missing
SELECT ordered_events.create_stream('orders');
SELECT ordered_events.ingest('orders', s, 'key1') FROM generate_series(1, 7) s WHERE s <> 6;
SELECT ordered_events.release('orders');

SELECT ordered_events.skip_gap('orders', 6, 'message 6 lost upstream, ticket OPS-123');

SELECT * FROM ordered_events.blockers('orders');
--   pid  |  xid  |        state        |  xact_start  | query

CREATE ROLE producer;

ALTER ROLE producer SET idle_in_transaction_session_timeout = '5min';

DROP ROLE producer;
SELECT ordered_events.drop_stream(s) FROM unnest(ARRAY['orders', 'sessions']) s;
