--
-- docs_readme: the SQL examples of README.md, word for word, in the page's order
-- (test/docs_examples checks that every example of the docs is in a test;
-- docs/contributing.md).  What an example needs and the page does not show
-- is set up between them.
-- CREATE EXTENSION, the page's other example, is in test/demo.sql.
--
SELECT ordered_events.create_stream('orders');

SELECT ordered_events.ingest('orders', 1, 'key1', '{"op": "create"}');
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}');
SELECT ordered_events.ingest('orders', 2, 'key2', '{"op": "create"}');
SELECT ordered_events.ingest('orders', 7, 'key2', '{"op": "ship"}');
SELECT ordered_events.ingest('orders', 5, 'key2', '{"op": "pay"}');
SELECT ordered_events.ingest('orders', 4, 'key1', '{"op": "ship"}');
SELECT ordered_events.ingest('orders', 3, 'key1', '{"op": "pay"}');   -- a retry
--  duplicate

SELECT ordered_events.release('orders');     -- the worker does this by itself
--  5
SELECT range_start, range_end FROM ordered_events.ranges;
--  1 | 6
SELECT seq, key FROM ordered_events.released;
--  1 key1 / 2 key2 / 3 key1 / 4 key1 / 5 key2      key1: 1,3,4   key2: 2,5
SELECT seq, key FROM ordered_events.pending;
--  7 key2                                          it waits for 6
SELECT key, gap_start, gap_end FROM ordered_events.gaps('orders');
--  NULL | 6 | 6                                    first_seen: when a release step first saw it

SELECT ordered_events.ingest('orders', 6, 'key1', '{"op": "refund"}');
SELECT ordered_events.release('orders');
--  2                                               range [1,8): 6, then 7

SELECT ordered_events.drop_stream('orders');
