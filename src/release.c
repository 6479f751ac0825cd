/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Advancing a stream's contiguous range over the events that arrived.
 *
 * Releasing moves no rows: an event of a global stream is released exactly
 * when its seq is below the stream's range_end.  A release step walks the
 * (stream_id, seq) primary key from range_end, counting consecutive seqs
 * until the first missing one or max_release_batch, then stores the new
 * range_end.  Its cost is proportional to the events it releases, never to
 * the backlog beyond the gap.
 *
 * Concurrency: a step first locks the stream's stream_progress row, then
 * takes a fresh snapshot for the walk, so two concurrent steps run one after
 * the other and the second starts where the first ended.  The walk sees only
 * committed events (and the caller's own): an event whose transaction is
 * still open is a gap until it commits, so a later seq that committed first
 * waits for it.
 *
 * After a step that released something, NOTIFY ordered_events with
 * '<stream>:<range_end>' is queued; it is delivered when the step commits.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* What one walk over the arrived seqs found. */
typedef struct ReleaseWalk
{
	int64		range_end;		/* first seq not released */
	int64		released;		/* events passed over */
	TimestampTz max_event_ts;	/* largest event_ts passed over */
	bool		max_event_ts_valid;
	bool		gap;			/* a later seq has arrived: range_end is a gap */
} ReleaseWalk;

static SPIPlanPtr lock_plan = NULL;
static SPIPlanPtr advance_plan = NULL;
static SPIPlanPtr log_plan = NULL;

static SPIPlanPtr
prepare_kept(const char *query, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(query, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/*
 * Walk the events of a stream from walk->range_end in seq order, with the
 * given snapshot, over at most "limit" consecutive seqs.
 */
static void
walk_arrived(int32 stream_id, int64 limit, Snapshot snapshot, ReleaseWalk *walk)
{
	const OeRelations *rels = oe_relations();
	Relation	heap = table_open(rels->events, AccessShareLock);
	Relation	index = index_open(rels->events_pkey, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan;
	ScanKeyData keys[2];

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(stream_id));
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(walk->range_end));

	scan = index_beginscan(heap, index, snapshot, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);

	while (walk->released < limit &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		int64		seq = DatumGetInt64(slot_getattr(slot, Anum_oe_events_seq, &isnull));
		TimestampTz ts;

		CHECK_FOR_INTERRUPTS();
		if (seq != walk->range_end)
		{
			walk->gap = true;
			break;
		}
		ts = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_events_event_ts, &isnull));
		if (!walk->max_event_ts_valid || ts > walk->max_event_ts)
		{
			walk->max_event_ts = ts;
			walk->max_event_ts_valid = true;
		}
		walk->range_end++;
		walk->released++;
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
}

/* Queue the wake-up hint for consumers: '<stream>:<range_end>'. */
static void
notify_released(const OeStream *stream, int64 range_end)
{
	char		payload[NAMEDATALEN + 24];

	snprintf(payload, sizeof(payload), "%s:" INT64_FORMAT, stream->name, range_end);
	Async_Notify("ordered_events", payload);
}

/*
 * One release step for a stream: advance its range over the arrived events,
 * at most max_release_batch of them, and note the gap it stops at.  Returns
 * the number of events released.  Runs in the caller's transaction.
 */
int64
oe_release_stream(const OeStream *stream)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	ReleaseWalk walk;
	Snapshot	snapshot;
	HeapTuple	progress;
	TupleDesc	desc;
	bool		isnull;
	Datum		old_gap_start;
	bool		gap_was_seen;

	SPI_connect();
	if (lock_plan == NULL)
	{
		Oid			argtype = INT4OID;

		lock_plan = prepare_kept(
			"SELECT range_end, max_event_ts, gap_start "
			"FROM ordered_events.stream_progress WHERE stream_id = $1 FOR UPDATE",
			1, &argtype);
	}
	if (SPI_execute_plan(lock_plan, &id, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "locking the progress of stream \"%s\" failed", stream->name);
	if (SPI_processed == 0)
	{
		/* dropped since it was looked up */
		SPI_finish();
		return 0;
	}

	progress = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	memset(&walk, 0, sizeof(walk));
	walk.range_end = DatumGetInt64(SPI_getbinval(progress, desc, 1, &isnull));
	walk.max_event_ts = DatumGetTimestampTz(SPI_getbinval(progress, desc, 2, &isnull));
	walk.max_event_ts_valid = !isnull;
	old_gap_start = SPI_getbinval(progress, desc, 3, &isnull);
	gap_was_seen = !isnull && DatumGetInt64(old_gap_start) == walk.range_end;

	/* The snapshot is taken after the lock: it sees the previous step. */
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	walk_arrived(stream->stream_id, stream->max_release_batch, snapshot, &walk);
	UnregisterSnapshot(snapshot);

	/* Write only when the range moved or a new gap came into view. */
	if (walk.released > 0 || (walk.gap && !gap_was_seen))
	{
		Datum		args[4];
		char		nulls[4] = {' ', ' ', ' ', ' '};

		if (advance_plan == NULL)
		{
			Oid			argtypes[4] = {INT4OID, INT8OID, TIMESTAMPTZOID, BOOLOID};

			advance_plan = prepare_kept(
				"UPDATE ordered_events.stream_progress SET "
				"released_count = released_count + ($2 - range_end), "
				"range_end = $2, "
				"max_event_ts = $3, "
				"updated_at = CASE WHEN $2 > range_end THEN clock_timestamp() "
				"  ELSE updated_at END, "
				"gap_first_seen = CASE WHEN NOT $4 THEN NULL "
				"  WHEN gap_start IS DISTINCT FROM $2 THEN clock_timestamp() "
				"  ELSE gap_first_seen END, "
				"gap_start = CASE WHEN $4 THEN $2 END "
				"WHERE stream_id = $1",
				4, argtypes);
		}
		args[0] = id;
		args[1] = Int64GetDatum(walk.range_end);
		args[2] = TimestampTzGetDatum(walk.max_event_ts);
		if (!walk.max_event_ts_valid)
			nulls[2] = 'n';
		args[3] = BoolGetDatum(walk.gap);
		if (SPI_execute_plan(advance_plan, args, nulls, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "advancing the range of stream \"%s\" failed", stream->name);
	}

	if (walk.released > 0)
	{
		Datum		args[3];

		if (log_plan == NULL)
		{
			Oid			argtypes[3] = {INT4OID, INT8OID, INT8OID};

			log_plan = prepare_kept(
				"INSERT INTO ordered_events.release_log "
				"(stream_id, seq_start, seq_end, released_at) "
				"VALUES ($1, $2, $3, clock_timestamp())",
				3, argtypes);
		}
		args[0] = id;
		args[1] = Int64GetDatum(walk.range_end - walk.released);
		args[2] = Int64GetDatum(walk.range_end);
		if (SPI_execute_plan(log_plan, args, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "logging the release of stream \"%s\" failed", stream->name);
		notify_released(stream, walk.range_end);
	}

	SPI_finish();
	return walk.released;
}

/*
 * release(stream text DEFAULT NULL) returns bigint
 *
 * One release step for the named stream, or for every stream when NULL.
 */
PG_FUNCTION_INFO_V1(oe_release);
Datum
oe_release(PG_FUNCTION_ARGS)
{
	int64		released = 0;

	if (!PG_ARGISNULL(0))
	{
		OeStream	stream = oe_stream_or_error(PG_GETARG_TEXT_PP(0));

		released = oe_release_stream(&stream);
	}
	else
	{
		List	   *streams = oe_all_streams();
		ListCell   *lc;

		foreach(lc, streams)
			released += oe_release_stream(lfirst(lc));
		list_free_deep(streams);
	}
	PG_RETURN_INT64(released);
}
