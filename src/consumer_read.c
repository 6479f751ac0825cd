/*-------------------------------------------------------------------------
 *
 * consumer_read.c
 *	  read() and peek(): a consumer's next events in merged order.
 *	  Processing steps of handler consumers (handler.c) take their events
 *	  here too, through oe_consumer_take().
 *
 * A consumer partition has a position in each stream it subscribes to:
 * (read_delivery, read_seq), the release log row and seq of the last event
 * it took.  Each stream's unread events follow in delivery order: the log
 * rows after the position by delivery number (delivery.c), and in each the
 * lane's events in seq order, those of other partitions left out.
 *
 * The merge takes, again and again, the next event of the stream whose next
 * event has the smallest (stabilized_ts, arrival), where stabilized_ts =
 * alignment_ts + bias + delay.  bias is the average lag of the stream's
 * pool (its released events the consumer has not consumed, by committed
 * reads), computed once per read from release_totals minus what the
 * position took out: no pool is counted row by row.  Each stream is read
 * lazily, one event ahead, so a read costs what it returns, whatever waits
 * behind.  The scans are direct index scans of the log and of the event
 * primary key, in the order of their keys: the read is the consumers' hot
 * path (bench/consume.sh).
 *
 * Concurrency: read() locks its subscription rows (FOR UPDATE) before it
 * takes its snapshot, so a second session reading the same consumer
 * partition waits for the first to end and then continues after it; other
 * partitions have other rows.  The worker locks a partition first with
 * oe_consumer_lock_nowait(), which does not wait: it leaves a partition
 * that a process() by hand holds to its next cycle.  The new position is
 * written in the caller's transaction: a rollback consumes nothing.
 * Released events never change, so one snapshot, taken after the lock,
 * gives a consistent pool and scan.
 * peek() takes no lock and writes nothing.  A waiting read() looks as
 * peek() does until something is unread, then locks and reads.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "lib/binaryheap.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

enum
{
	PLAN_CONSUMER,
	PLAN_LOCK,
	PLAN_LOCK_NOWAIT,
	PLAN_SUBSCRIPTIONS,
	PLAN_UNSETTLED,
	PLAN_ADVANCE
};

static OePlan plans[] = {
	[PLAN_CONSUMER] = {
		"SELECT c.consumer_id, c.partitions, c.handler, c.owner, "
		"  (SELECT d.stream FROM ordered_events.stream_def d "
		"    WHERE d.stream_id = c.output_stream_id), "
		"  c.alignment = 'processing', c.handler_owner, pg_catalog.to_regprocedure(c.handler), "
		"  (extract(epoch FROM c.handler_timeout) * 1000)::integer, "
		"  c.on_error = 'hold', c.max_attempts, "
		"  (extract(epoch FROM c.retry_delay) * 1000000)::bigint, "
		"  c.delivery = 'lease' "
		"FROM ordered_events.consumer_or_error($1) c",
		1, {TEXTOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_LOCK] = {
		"SELECT FROM ordered_events.subscription "
		"WHERE consumer_id = $1 AND partition = $2 ORDER BY stream_id FOR UPDATE",
		2, {INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},

	/*
	 * PLAN_LOCK by the consumer's name without waiting: true if it locked
	 * every subscription row of the partition (none was held).
	 */
	[PLAN_LOCK_NOWAIT] = {
		"WITH p AS (SELECT s.stream_id FROM ordered_events.subscription s "
		"  JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id "
		"  WHERE c.consumer = $1 AND s.partition = $2), "
		"locked AS (SELECT s.stream_id FROM ordered_events.subscription s "
		"  WHERE s.consumer_id = (SELECT c.consumer_id FROM ordered_events.consumer_def c "
		"                          WHERE c.consumer = $1) "
		"    AND s.partition = $2 ORDER BY s.stream_id FOR UPDATE SKIP LOCKED) "
		"SELECT (SELECT count(*) FROM locked) = (SELECT count(*) FROM p)",
		2, {TEXTOID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},

	/*
	 * Each subscription of the partition, with the bias of its pool: the
	 * pool as committed reads left it (base_* if this transaction read
	 * before), NULL if it is empty.
	 */
	[PLAN_SUBSCRIPTIONS] = {
		"SELECT s.stream_id, d.stream, d.sequencing = 'per_key', "
		"  (extract(epoch FROM s.delay) * 1000000)::bigint, s.read_delivery, s.read_seq, "
		"  CASE WHEN t.released_count > b.taken_count "
		"    THEN round((t.lag_sum - b.taken_lag) / (t.released_count - b.taken_count))::bigint "
		"  END, "
		"  t.stream_id IS NOT NULL, "
		"  EXISTS (SELECT FROM ordered_events.gap_skips g "
		"          WHERE g.stream_id = s.stream_id AND NOT g.settled) "
		"FROM ordered_events.subscription s "
		"JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id "
		"LEFT JOIN ordered_events.release_totals t ON t.stream_id = s.stream_id "
		"  AND t.partitions = $3 AND t.partition = s.partition "
		"CROSS JOIN LATERAL (SELECT "
		"    CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"      THEN s.base_count ELSE s.taken_count END AS taken_count, "
		"    CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"      THEN s.base_lag ELSE s.taken_lag END AS taken_lag) b "
		"WHERE s.consumer_id = $1 AND s.partition = $2 "
		"ORDER BY s.stream_id",
		3, {INT4OID, INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},

	/* Late events may sit in these runs until a release step settles them. */
	[PLAN_UNSETTLED] = {
		"SELECT lane, gap_start, gap_end FROM ordered_events.gap_skips "
		"WHERE stream_id = $1 AND NOT settled",
		1, {INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},

	/*
	 * Each stream's new position ($3..$7 hold one element per stream the
	 * read took from); what committed reads left stays in base_* for this
	 * transaction.
	 */
	[PLAN_ADVANCE] = {
		"UPDATE ordered_events.subscription s SET "
		"  base_delivery = CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"    THEN s.base_delivery ELSE s.read_delivery END, "
		"  base_seq = CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"    THEN s.base_seq ELSE s.read_seq END, "
		"  base_count = CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"    THEN s.base_count ELSE s.taken_count END, "
		"  base_lag = CASE WHEN ordered_events.read_here(s.read_xid, s.xmin) "
		"    THEN s.base_lag ELSE s.taken_lag END, "
		"  read_xid = pg_catalog.pg_current_xact_id(), "
		"  read_delivery = a.read_delivery, read_seq = a.read_seq, "
		"  taken_count = s.taken_count + a.taken, taken_lag = s.taken_lag + a.lag, "
		"  consumed_count = s.consumed_count + a.taken, "
		"  last_read_at = pg_catalog.clock_timestamp() "
		"FROM ROWS FROM (pg_catalog.unnest($3::integer[]), pg_catalog.unnest($4::bigint[]), "
		"  pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]), "
		"  pg_catalog.unnest($7::numeric[])) AS a(stream_id, read_delivery, read_seq, taken, lag) "
		"WHERE s.consumer_id = $1 AND s.partition = $2 AND s.stream_id = a.stream_id",
		7, {INT4OID, INT4OID, INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID},
		CURSOR_OPT_GENERIC_PLAN
	},
};

/* A late event's skipped run: the lane and seqs it may not be read in. */
typedef struct UnsettledRun
{
	text	   *lane;
	int64		start;
	int64		end;
} UnsettledRun;

/* One subscribed stream being read: its position, scans and next event. */
typedef struct Reader
{
	int32		stream_id;
	text	   *stream;			/* name, for the rows */
	bool		per_key;
	int64		delay;			/* microseconds */
	int64		bias;			/* microseconds */
	List	   *unsettled;		/* UnsettledRuns */

	/* position: the last event taken, and what this read took */
	int64		read_delivery;
	int64		read_seq;
	int64		taken;
	int128		taken_lag;

	/* scans */
	IndexScanDesc log_scan;
	TupleTableSlot *log_slot;
	IndexScanDesc event_scan;
	TupleTableSlot *event_slot;
	bool		in_run;			/* a log row's events are being scanned */
	int64		run_delivery;
	int64		run_end;
	TimestampTz run_released_at;
	text	   *run_lane;		/* in log_slot, which keeps its row meanwhile */
	ScanKeyData event_keys[3];

	/* the next event in delivery order */
	OeReadEvent head;
	MemoryContext head_cxt;
} Reader;

/* What one read() or peek() reads with. */
typedef struct ReadContext
{
	Oid			reader;			/* must have 'read' on every stream */
	int32		consumer_id;
	int32		partitions;
	int32		partition;
	Snapshot	snapshot;
	Relation	event_heap;
	Relation	event_index;
	Relation	log_heap;
	Relation	log_index;
} ReadContext;

/*
 * read_here(read_xid xid8, row_xmin xid) returns boolean
 *
 * Whether the current transaction read the subscription row: see
 * committed_position() in src/sql/consumers.sql.
 */
PG_FUNCTION_INFO_V1(oe_read_here);
Datum
oe_read_here(PG_FUNCTION_ARGS)
{
	FullTransactionId top = GetTopFullTransactionIdIfAny();

	PG_RETURN_BOOL(FullTransactionIdIsValid(top) &&
				   FullTransactionIdEquals(top, PG_GETARG_FULLTRANSACTIONID(0)) &&
				   TransactionIdIsCurrentTransactionId(DatumGetTransactionId(PG_GETARG_DATUM(1))));
}

/* alignment_ts + bias + delay, or an infinity beyond the range of timestamps. */
static TimestampTz
stabilized(TimestampTz alignment_ts, int64 bias, int64 delay)
{
	int128		ts;

	if (TIMESTAMP_NOT_FINITE(alignment_ts))
		return alignment_ts;
	ts = (int128) alignment_ts + bias + delay;
	if (ts < MIN_TIMESTAMP)
		return DT_NOBEGIN;
	if (ts >= END_TIMESTAMP)
		return DT_NOEND;
	return (TimestampTz) ts;
}

/* The stream's skipped runs that late events may still sit in. */
static List *
load_unsettled(int32 stream_id, Snapshot snapshot)
{
	Datum		id = Int32GetDatum(stream_id);
	List	   *runs = NIL;

	oe_run_plan_snapshot(&plans[PLAN_UNSETTLED], &id, NULL, snapshot);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		UnsettledRun *run = palloc(sizeof(UnsettledRun));
		bool		isnull;

		run->lane = DatumGetTextPCopy(oe_result(i, 1, &isnull));
		run->start = DatumGetInt64(oe_result(i, 2, &isnull));
		run->end = DatumGetInt64(oe_result(i, 3, &isnull));
		runs = lappend(runs, run);
	}
	return runs;
}

/* True if the event of the lane at seq sits in a skipped run, unsettled. */
static bool
in_unsettled_run(const Reader *r, text *lane, int64 seq)
{
	ListCell   *lc;

	foreach(lc, r->unsettled)
	{
		UnsettledRun *run = lfirst(lc);

		if (seq >= run->start && seq <= run->end &&
			VARSIZE_ANY_EXHDR(run->lane) == VARSIZE_ANY_EXHDR(lane) &&
			memcmp(VARDATA_ANY(run->lane), VARDATA_ANY(lane), VARSIZE_ANY_EXHDR(lane)) == 0)
			return true;
	}
	return false;
}

/* Open the scans of a reader, from its position on. */
static void
begin_reader(Reader *r, ReadContext *cx)
{
	ScanKeyData keys[2];

	r->head_cxt = AllocSetContextCreate(CurrentMemoryContext, "ordered_events read event",
										ALLOCSET_SMALL_SIZES);

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(r->stream_id));
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(r->read_delivery));
	r->log_slot = table_slot_create(cx->log_heap, NULL);
	r->log_scan = index_beginscan(cx->log_heap, cx->log_index, cx->snapshot, 2, 0);
	index_rescan(r->log_scan, keys, 2, NULL, 0);

	r->event_slot = table_slot_create(cx->event_heap, NULL);
	r->event_scan = index_beginscan(cx->event_heap, cx->event_index, cx->snapshot, 3, 0);
}

static void
end_reader(Reader *r)
{
	index_endscan(r->log_scan);
	index_endscan(r->event_scan);
	ExecDropSingleTupleTableSlot(r->log_slot);
	ExecDropSingleTupleTableSlot(r->event_slot);
}

/*
 * Move to the next log row with events for the partition, and start the
 * scan of its lane; false when the stream has no more.
 */
static bool
next_run(Reader *r, ReadContext *cx)
{
	while (index_getnext_slot(r->log_scan, ForwardScanDirection, r->log_slot))
	{
		bool		isnull;
		int64		delivery = DatumGetInt64(slot_getattr(r->log_slot, Anum_oe_log_delivery,
														  &isnull));
		int64		from = DatumGetInt64(slot_getattr(r->log_slot, Anum_oe_log_seq_start,
													  &isnull));
		text	   *lane;

		CHECK_FOR_INTERRUPTS();
		if (delivery == r->read_delivery)
		{
			/* The run of the position: after the last event taken. */
			if (r->read_seq == PG_INT64_MAX)
				continue;
			from = Max(from, r->read_seq + 1);
		}
		lane = DatumGetTextPP(slot_getattr(r->log_slot, Anum_oe_log_lane, &isnull));
		if (r->per_key && cx->partitions > 1 &&
			oe_partition_of(oe_key_hash(lane), cx->partitions) != cx->partition)
			continue;			/* a key of another partition */

		r->run_lane = lane;
		r->run_delivery = delivery;
		r->run_end = DatumGetInt64(slot_getattr(r->log_slot, Anum_oe_log_seq_end, &isnull));
		r->run_released_at = DatumGetTimestampTz(slot_getattr(r->log_slot,
															  Anum_oe_log_released_at, &isnull));
		ScanKeyInit(&r->event_keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
					Int32GetDatum(r->stream_id));
		ScanKeyInit(&r->event_keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ,
					PointerGetDatum(r->run_lane));
		r->event_keys[1].sk_collation = C_COLLATION_OID;
		ScanKeyInit(&r->event_keys[2], 3, BTGreaterEqualStrategyNumber, F_INT8GE,
					Int64GetDatum(from));
		index_rescan(r->event_scan, r->event_keys, 3, NULL, 0);
		r->in_run = true;
		return true;
	}
	return false;
}

/*
 * Load the reader's next event in delivery order as its head; false when
 * it has none.
 */
static bool
next_event(Reader *r, ReadContext *cx)
{
	for (;;)
	{
		while (r->in_run &&
			   index_getnext_slot(r->event_scan, ForwardScanDirection, r->event_slot))
		{
			TupleTableSlot *slot = r->event_slot;
			bool		isnull;
			int64		seq = DatumGetInt64(slot_getattr(slot, Anum_oe_event_seq, &isnull));
			text	   *key;
			Datum		payload;

			if (seq >= r->run_end)
				break;
			key = DatumGetTextPP(slot_getattr(slot, Anum_oe_event_key, &isnull));
			if (!r->per_key && cx->partitions > 1 &&
				oe_partition_of(oe_key_hash(key), cx->partitions) != cx->partition)
				continue;
			if (r->unsettled != NIL && in_unsettled_run(r, r->run_lane, seq))
				continue;		/* committed late into a skipped run */

			/*
			 * The head's values stay in the slot, which keeps its row until
			 * the reader moves on, after the head is taken.  A payload stored
			 * out of line is fetched now.
			 */
			MemoryContextReset(r->head_cxt);
			r->head.seq = seq;
			r->head.key = key;
			payload = slot_getattr(slot, Anum_oe_event_payload, &r->head.payload_null);
			if (!r->head.payload_null && VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(payload)))
			{
				MemoryContext old = MemoryContextSwitchTo(r->head_cxt);

				payload = PointerGetDatum(detoast_external_attr((struct varlena *)
																DatumGetPointer(payload)));
				MemoryContextSwitchTo(old);
			}
			r->head.payload = payload;
			r->head.event_ts = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_event_event_ts,
																&isnull));
			r->head.alignment_ts = DatumGetTimestampTz(slot_getattr(slot,
																	Anum_oe_event_alignment_ts,
																	&isnull));
			r->head.received_at = DatumGetTimestampTz(slot_getattr(slot,
																   Anum_oe_event_received_at,
																   &isnull));
			r->head.released_at = r->run_released_at;
			r->head.last_event = DatumGetBool(slot_getattr(slot, Anum_oe_event_last_event,
														   &isnull));
			r->head.arrival = DatumGetInt64(slot_getattr(slot, Anum_oe_event_arrival, &isnull));
			r->head.delivery = r->run_delivery;
			r->head.stabilized_ts = stabilized(r->head.alignment_ts, r->bias, r->delay);
			return true;
		}
		r->in_run = false;
		if (!next_run(r, cx))
			return false;
	}
}

/*
 * binaryheap comparator: the heap's first reader must be the one whose head
 * has the smallest (stabilized_ts, arrival), and binaryheap keeps the
 * largest first: compare the other way round.
 */
static int
compare_heads(Datum a, Datum b, void *arg)
{
	const Reader *ra = (const Reader *) DatumGetPointer(a);
	const Reader *rb = (const Reader *) DatumGetPointer(b);

	if (ra->head.stabilized_ts != rb->head.stabilized_ts)
		return ra->head.stabilized_ts < rb->head.stabilized_ts ? 1 : -1;
	if (ra->head.arrival != rb->head.arrival)
		return ra->head.arrival < rb->head.arrival ? 1 : -1;
	return 0;
}

/*
 * Fail unless the consumer's reader may still read the stream: a revoked
 * 'read' stops the reads, as it stops subscribing.
 */
static void
check_read_privilege(const ReadContext *cx, text *name)
{
	OeStream	stream;

	if (oe_lookup_stream(text_to_cstring(name), &stream))
		oe_check_stream_privilege(&stream, cx->reader, OE_PRIV_READ);
}

/* The consumer's subscriptions in this partition, as readers. */
static List *
load_readers(ReadContext *cx)
{
	Datum		values[3] = {Int32GetDatum(cx->consumer_id), Int32GetDatum(cx->partition),
	Int32GetDatum(cx->partitions)};
	List	   *readers = NIL;
	SPITupleTable *rows;
	uint64		nrows;

	oe_run_plan_snapshot(&plans[PLAN_SUBSCRIPTIONS], values, NULL, cx->snapshot);
	rows = SPI_tuptable;
	nrows = SPI_processed;
	for (uint64 i = 0; i < nrows; i++)
	{
		HeapTuple	row = rows->vals[i];
		TupleDesc	desc = rows->tupdesc;
		Reader	   *r = palloc0(sizeof(Reader));
		bool		isnull;
		Datum		bias;

		r->stream_id = DatumGetInt32(SPI_getbinval(row, desc, 1, &isnull));
		r->stream = DatumGetTextPCopy(SPI_getbinval(row, desc, 2, &isnull));
		check_read_privilege(cx, r->stream);
		r->head.stream_id = r->stream_id;
		r->head.stream = r->stream;
		r->per_key = DatumGetBool(SPI_getbinval(row, desc, 3, &isnull));
		r->delay = DatumGetInt64(SPI_getbinval(row, desc, 4, &isnull));
		r->read_delivery = DatumGetInt64(SPI_getbinval(row, desc, 5, &isnull));
		r->read_seq = DatumGetInt64(SPI_getbinval(row, desc, 6, &isnull));
		bias = SPI_getbinval(row, desc, 7, &isnull);
		r->bias = isnull ? 0 : DatumGetInt64(bias);	/* empty pool: nothing to read */
		if (!DatumGetBool(SPI_getbinval(row, desc, 8, &isnull)))
			elog(ERROR, "release totals of stream %d for %d partitions are missing",
				 r->stream_id, cx->partitions);
		if (DatumGetBool(SPI_getbinval(row, desc, 9, &isnull)))
			r->unsettled = load_unsettled(r->stream_id, cx->snapshot);
		readers = lappend(readers, r);
	}
	SPI_freetuptable(rows);
	return readers;
}

/* Write what the read took from each stream into its position. */
static void
advance_positions(ReadContext *cx, List *readers)
{
	int			n = list_length(readers);
	Datum	   *streams = palloc(sizeof(Datum) * n);
	Datum	   *deliveries = palloc(sizeof(Datum) * n);
	Datum	   *seqs = palloc(sizeof(Datum) * n);
	Datum	   *taken = palloc(sizeof(Datum) * n);
	Datum	   *lags = palloc(sizeof(Datum) * n);
	Datum		values[7];
	int			i = 0;
	ListCell   *lc;

	foreach(lc, readers)
	{
		Reader	   *r = lfirst(lc);

		if (r->taken == 0)
			continue;
		streams[i] = Int32GetDatum(r->stream_id);
		deliveries[i] = Int64GetDatum(r->read_delivery);
		seqs[i] = Int64GetDatum(r->read_seq);
		taken[i] = Int64GetDatum(r->taken);
		lags[i] = CStringGetTextDatum(oe_int128_out(r->taken_lag));
		i++;
	}
	if (i == 0)
		return;
	values[0] = Int32GetDatum(cx->consumer_id);
	values[1] = Int32GetDatum(cx->partition);
	values[2] = oe_array(streams, NULL, i, INT4OID);
	values[3] = oe_array(deliveries, NULL, i, INT8OID);
	values[4] = oe_array(seqs, NULL, i, INT8OID);
	values[5] = oe_array(taken, NULL, i, INT8OID);
	values[6] = oe_array(lags, NULL, i, TEXTOID);
	oe_run_plan(&plans[PLAN_ADVANCE], values, NULL, SPI_OK_UPDATE);
}

/*
 * Merge the readers' streams: hand at most max_events events to the sink,
 * in merged order.  Returns how many.
 */
static int32
merge(ReadContext *cx, List *readers, int32 max_events, OeEventSink sink, void *arg)
{
	binaryheap *heap = binaryheap_allocate(Max(list_length(readers), 1), compare_heads, NULL);
	ListCell   *lc;
	int32		taken = 0;

	foreach(lc, readers)
	{
		Reader	   *r = lfirst(lc);

		if (next_event(r, cx))
			binaryheap_add_unordered(heap, PointerGetDatum(r));
	}
	binaryheap_build(heap);

	while (taken < max_events && !binaryheap_empty(heap))
	{
		Reader	   *r = (Reader *) DatumGetPointer(binaryheap_first(heap));

		sink(&r->head, arg);
		r->read_delivery = r->run_delivery;
		r->read_seq = r->head.seq;
		r->taken++;
		r->taken_lag += oe_lag(r->head.event_ts, r->head.alignment_ts);
		taken++;

		if (next_event(r, cx))
			binaryheap_replace_first(heap, PointerGetDatum(r));
		else
			(void) binaryheap_remove_first(heap);
	}
	binaryheap_free(heap);
	return taken;
}

/*
 * Look a consumer up, and check that "partition" is one of its partitions.
 * Call inside an internal scope.
 */
void
oe_consumer_lookup(Datum name, int32 partition, OeConsumer *consumer)
{
	bool		isnull;
	Datum		value;

	oe_run_plan(&plans[PLAN_CONSUMER], &name, NULL, SPI_OK_SELECT);
	memset(consumer, 0, sizeof(*consumer));
	consumer->name = TextDatumGetCString(name);
	consumer->consumer_id = DatumGetInt32(oe_result(0, 1, &isnull));
	consumer->partitions = DatumGetInt32(oe_result(0, 2, &isnull));
	consumer->partition = partition;
	value = oe_result(0, 4, &isnull);
	consumer->owner = isnull ? InvalidOid : DatumGetObjectId(value);
	consumer->handler_timeout_ms = -1;
	value = oe_result(0, 3, &isnull);
	if (!isnull)
	{
		consumer->handler = TextDatumGetCString(value);
		value = oe_result(0, 5, &isnull);
		consumer->output_stream = isnull ? NULL : DatumGetTextPCopy(value);
		consumer->align_processing = DatumGetBool(oe_result(0, 6, &isnull));
		consumer->handler_owner = DatumGetObjectId(oe_result(0, 7, &isnull));
		value = oe_result(0, 8, &isnull);
		consumer->handler_fn = isnull ? InvalidOid : DatumGetObjectId(value);
		value = oe_result(0, 9, &isnull);
		if (!isnull)
			consumer->handler_timeout_ms = DatumGetInt32(value);
		consumer->on_error_hold = DatumGetBool(oe_result(0, 10, &isnull));
		consumer->max_attempts = DatumGetInt32(oe_result(0, 11, &isnull));
		consumer->retry_delay_us = DatumGetInt64(oe_result(0, 12, &isnull));
	}
	consumer->lease = DatumGetBool(oe_result(0, 13, &isnull));
	if (consumer->lease)
		consumer->max_attempts = DatumGetInt32(oe_result(0, 11, &isnull));
	oe_check_partition(consumer);
}

/* Fail unless consumer->partition is one of the consumer's partitions. */
void
oe_check_partition(const OeConsumer *consumer)
{
	if (consumer->partition < 0 || consumer->partition >= consumer->partitions)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for partition: %d", consumer->partition),
				 errdetail("Consumer \"%s\" has %d partition(s).",
						   consumer->name, consumer->partitions),
				 errhint("Use a partition from 0 to %d.", consumer->partitions - 1)));
}

/*
 * Lock a consumer partition as oe_consumer_take() does, but without
 * waiting: false if another transaction holds any of it (a read() or a
 * process() in progress), in which case this transaction may hold the
 * rest until it ends.  For the worker, which leaves a held partition to its
 * next cycle instead of waiting; a take that follows in the transaction
 * has the lock at once.
 */
bool
oe_consumer_lock_nowait(const char *consumer, int32 partition)
{
	Datum		values[2] = {CStringGetTextDatum(consumer), Int32GetDatum(partition)};
	OeInternalScope scope;
	bool		isnull;
	bool		locked;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&plans[PLAN_LOCK_NOWAIT], values, NULL, SPI_OK_SELECT);
	locked = DatumGetBool(oe_result(0, 1, &isnull));
	oe_internal_end(&scope);
	return locked;
}

/*
 * Lock a consumer partition as oe_consumer_take() does, waiting for a
 * reader of it to end.  Call inside an internal scope.
 */
void
oe_consumer_lock(OeConsumer *consumer)
{
	Datum		values[2] = {Int32GetDatum(consumer->consumer_id),
	Int32GetDatum(consumer->partition)};

	if (consumer->locked)
		return;
	oe_run_plan(&plans[PLAN_LOCK], values, NULL, SPI_OK_SELECT);
	consumer->locked = true;
}

/*
 * Take the next max_events events of a consumer partition in merged order,
 * handing each to the sink; with "consume", lock the partition first and
 * advance its positions past them, in the caller's transaction.  Call
 * inside an internal scope.  Returns how many events were taken.
 */
int32
oe_consumer_take(const OeConsumer *consumer, int32 max_events, bool consume,
				 OeEventSink sink, void *arg)
{
	const OeRelations *rels = oe_relations();
	ReadContext cx = {0};
	List	   *readers;
	ListCell   *lc;
	int32		taken;

	cx.reader = consumer->reader;
	cx.consumer_id = consumer->consumer_id;
	cx.partitions = consumer->partitions;
	cx.partition = consumer->partition;

	/* Wait for a reader of the partition to end, then see what it did. */
	if (consume && !consumer->locked)
	{
		Datum		values[2] = {Int32GetDatum(cx.consumer_id), Int32GetDatum(cx.partition)};

		oe_run_plan(&plans[PLAN_LOCK], values, NULL, SPI_OK_SELECT);
	}
	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	cx.snapshot = GetActiveSnapshot();

	cx.event_heap = table_open(rels->event, AccessShareLock);
	cx.event_index = index_open(rels->event_pkey, AccessShareLock);
	cx.log_heap = table_open(rels->lane_release_log, AccessShareLock);
	cx.log_index = index_open(rels->lane_release_log_delivery_key, AccessShareLock);

	readers = load_readers(&cx);
	foreach(lc, readers)
		begin_reader(lfirst(lc), &cx);
	taken = merge(&cx, readers, max_events, sink, arg);
	foreach(lc, readers)
		end_reader(lfirst(lc));

	index_close(cx.log_index, AccessShareLock);
	table_close(cx.log_heap, AccessShareLock);
	index_close(cx.event_index, AccessShareLock);
	table_close(cx.event_heap, AccessShareLock);
	PopActiveSnapshot();

	if (consume)
		advance_positions(&cx, readers);
	return taken;
}

/* read()'s sink: a row of its result. */
static void
put_row(const OeReadEvent *event, void *arg)
{
	ReturnSetInfo *rsinfo = arg;
	Datum		values[8];
	bool		nulls[8] = {0};

	values[0] = PointerGetDatum(event->stream);
	values[1] = Int64GetDatum(event->seq);
	values[2] = PointerGetDatum(event->key);
	values[3] = event->payload;
	nulls[3] = event->payload_null;
	values[4] = TimestampTzGetDatum(event->event_ts);
	values[5] = TimestampTzGetDatum(event->alignment_ts);
	values[6] = TimestampTzGetDatum(event->stabilized_ts);
	values[7] = TimestampTzGetDatum(event->released_at);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * The arguments (consumer, max_events, partition) of read(), peek() and
 * process(): the errors for a NULL and for max_events below 1, whose hint
 * ends with "takes", as in "the most events read() returns".  Returns
 * max_events.
 */
int32
oe_consumer_args(FunctionCallInfo fcinfo, const char *takes)
{
	int32		max_events;

	oe_check_not_null(fcinfo, 0, "consumer");
	oe_check_not_null(fcinfo, 1, "max_events");
	oe_check_not_null(fcinfo, 2, "partition");
	max_events = PG_GETARG_INT32(1);
	if (max_events <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for max_events: %d", max_events),
				 errhint("Use a positive number: the most events %s.", takes)));
	return max_events;
}

/* A sink that keeps nothing: wait_for_unread() only counts. */
static void
discard_row(const OeReadEvent *event, void *arg)
{
}

/*
 * Until the consumer partition has an unread event or the deadline, sleep
 * until a release for the consumer commits and look again (wait.c).  A
 * look is a peek of one event, without the partition's lock and without a
 * transaction id: while it sleeps, the reader blocks no one (another
 * reader of the partition, subscribe(), drop_stream()).  Each look's
 * memory is freed before the next.
 */
static void
wait_for_unread(const OeConsumer *consumer, TimestampTz deadline)
{
	MemoryContext look_cxt = AllocSetContextCreate(CurrentMemoryContext,
												   "ordered_events waiting read",
												   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(look_cxt);

	for (;;)
	{
		uint64		seen = oe_release_generation(consumer->consumer_id);
		int32		found = oe_consumer_take(consumer, 1, false, discard_row, NULL);

		MemoryContextReset(look_cxt);
		if (found > 0 || !oe_wait_for_release(consumer->consumer_id, seen, deadline))
			break;
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(look_cxt);
}

/* read() and peek(): "consume" says which; read() may wait. */
static Datum
read_consumer(FunctionCallInfo fcinfo, bool consume)
{
	Oid			caller = GetUserId();
	OeConsumer	consumer;
	OeInternalScope scope;
	int32		max_events;
	TimestampTz deadline = 0;

	max_events = oe_consumer_args(fcinfo, consume ? "read() returns" : "peek() returns");
	if (consume)
	{
		oe_check_not_null(fcinfo, 3, "wait");
		deadline = oe_wait_deadline(PG_GETARG_INTERVAL_P(3), "read()");
		PreventCommandIfReadOnly("read()");
	}

	InitMaterializedSRF(fcinfo, 0);

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_consumer_lookup(PG_GETARG_DATUM(0), PG_GETARG_INT32(2), &consumer);
	oe_check_owner(caller, consumer.owner, "consumer", consumer.name);
	oe_check_not_in_step(consumer.consumer_id);
	consumer.reader = OidIsValid(consumer.owner) ? consumer.owner : caller;
	if (consumer.lease && consume)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" has delivery 'lease'", consumer.name),
				 errdetail("Its events are leased, not consumed by a transaction."),
				 errhint("Use ordered_events.receive() and ordered_events.ack().")));
	if (consumer.handler != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" has a handler", consumer.name),
				 errdetail("The extension reads it and applies its events to %s.",
						   consumer.handler),
				 errhint("See the views ordered_events.key_state and ordered_events.results; "
						 "ordered_events.process() applies events by hand.")));
	if (deadline != 0)
		wait_for_unread(&consumer, deadline);
	(void) oe_consumer_take(&consumer, max_events, consume, put_row, fcinfo->resultinfo);
	oe_internal_end(&scope);
	return (Datum) 0;
}

/*
 * read(consumer text, max_events integer DEFAULT 1000, partition integer
 * DEFAULT 0, wait interval DEFAULT '0 s') returns table (stream, seq, key,
 * payload, event_ts, alignment_ts, stabilized_ts, released_at)
 */
PG_FUNCTION_INFO_V1(oe_read);
Datum
oe_read(PG_FUNCTION_ARGS)
{
	return read_consumer(fcinfo, true);
}

/* peek(): the arguments of read() but wait, and its rows; consumes nothing. */
PG_FUNCTION_INFO_V1(oe_peek);
Datum
oe_peek(PG_FUNCTION_ARGS)
{
	return read_consumer(fcinfo, false);
}
