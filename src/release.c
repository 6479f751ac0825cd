/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Advancing the contiguous ranges of a stream over the events that arrived.
 *
 * Releasing moves no rows: an event is released exactly when its seq is
 * below its sequence's range_end (the stream's, in stream_progress, for a
 * global stream; its key's, in key_progress, for a per-key stream).  A
 * release step walks the primary key from range_end, counting consecutive
 * seqs until the first missing one or max_release_batch, then stores the
 * new range_end.  Its cost is proportional to the events it releases, never
 * to the backlog beyond the gap.
 *
 * A per-key step looks only at the keys that received events since the
 * last step (key_arrivals), so its cost does not grow with idle keys.
 *
 * Concurrency: a step first locks the stream's stream_progress row, then
 * takes a fresh snapshot for the walks, so two concurrent steps run one
 * after the other and the second starts where the first ended.  The walk
 * sees only committed events (and the caller's own): an event whose
 * transaction is still open is a gap until it commits, so a later seq that
 * committed first waits for it.
 *
 * After a step that released something, NOTIFY ordered_events is queued
 * ('<stream>:<range_end>', or '<stream>' for a per-key stream); it is
 * delivered when the step commits.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_collation.h"
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

/* What one walk over the arrived seqs of a sequence found. */
typedef struct ReleaseWalk
{
	int64		range_end;		/* first seq not released */
	int64		released;		/* events passed over */
	TimestampTz max_event_ts;	/* largest event_ts passed over */
	bool		max_event_ts_valid;
	bool		gap;			/* a later seq has arrived: range_end is a gap */
	bool		last_event;		/* passed over the key's last event */
} ReleaseWalk;

static SPIPlanPtr lock_plan = NULL;
static SPIPlanPtr advance_plan = NULL;
static SPIPlanPtr log_plan = NULL;
static SPIPlanPtr take_arrivals_plan = NULL;
static SPIPlanPtr key_progress_plan = NULL;
static SPIPlanPtr advance_key_plan = NULL;
static SPIPlanPtr log_key_plan = NULL;
static SPIPlanPtr reject_after_last_plan = NULL;
static SPIPlanPtr arrival_plan = NULL;

static SPIPlanPtr
prepare_kept(const char *query, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(query, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

static void
execute(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	if (rc != expected)
		elog(ERROR, "release step failed: %s", SPI_result_code_string(rc));
}

/*
 * Walk an events table's primary key from walk->range_end in seq order,
 * with the given snapshot, over at most "limit" consecutive seqs.  "keys"
 * select the sequence; the last one must be seq >= range_end.  A per-key
 * walk stops after the key's last event.
 */
static void
walk_arrived(Oid heap_oid, Oid index_oid, ScanKey keys, int nkeys, bool per_key,
			 int64 limit, Snapshot snapshot, ReleaseWalk *walk)
{
	Relation	heap = table_open(heap_oid, AccessShareLock);
	Relation	index = index_open(index_oid, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan = index_beginscan(heap, index, snapshot, nkeys, 0);

	index_rescan(scan, keys, nkeys, NULL, 0);
	while (walk->released < limit && !walk->last_event &&
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
		if (per_key)
			walk->last_event = DatumGetBool(slot_getattr(slot, Anum_oe_key_events_last_event,
														 &isnull));
		walk->range_end++;
		walk->released++;
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
}

/*
 * Lock the stream's progress row, which serialises release steps.  Returns
 * the row, or NULL if the stream was dropped since it was looked up.
 */
static HeapTuple
lock_progress(const OeStream *stream, TupleDesc *desc)
{
	Datum		id = Int32GetDatum(stream->stream_id);

	if (lock_plan == NULL)
	{
		Oid			argtype = INT4OID;

		lock_plan = prepare_kept(
			"SELECT range_end, max_event_ts, gap_start "
			"FROM ordered_events.stream_progress WHERE stream_id = $1 FOR UPDATE",
			1, &argtype);
	}
	execute(lock_plan, &id, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return NULL;
	*desc = SPI_tuptable->tupdesc;
	return SPI_tuptable->vals[0];
}

/* One release step of a global stream; see oe_release_stream(). */
static int64
release_global(const OeStream *stream)
{
	const OeRelations *rels = oe_relations();
	ReleaseWalk walk;
	ScanKeyData keys[2];
	Snapshot	snapshot;
	HeapTuple	progress;
	TupleDesc	desc;
	bool		isnull;
	Datum		old_gap_start;
	bool		gap_was_seen;

	progress = lock_progress(stream, &desc);
	if (progress == NULL)
		return 0;

	memset(&walk, 0, sizeof(walk));
	walk.range_end = DatumGetInt64(SPI_getbinval(progress, desc, 1, &isnull));
	walk.max_event_ts = DatumGetTimestampTz(SPI_getbinval(progress, desc, 2, &isnull));
	walk.max_event_ts_valid = !isnull;
	old_gap_start = SPI_getbinval(progress, desc, 3, &isnull);
	gap_was_seen = !isnull && DatumGetInt64(old_gap_start) == walk.range_end;

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(stream->stream_id));
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(walk.range_end));

	/* The snapshot is taken after the lock: it sees the previous step. */
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	walk_arrived(rels->events, rels->events_pkey, keys, 2, false,
				 stream->max_release_batch, snapshot, &walk);
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
		args[0] = Int32GetDatum(stream->stream_id);
		args[1] = Int64GetDatum(walk.range_end);
		args[2] = TimestampTzGetDatum(walk.max_event_ts);
		if (!walk.max_event_ts_valid)
			nulls[2] = 'n';
		args[3] = BoolGetDatum(walk.gap);
		execute(advance_plan, args, nulls, SPI_OK_UPDATE);
	}

	if (walk.released > 0)
	{
		Datum		args[3];
		char		payload[NAMEDATALEN + 24];

		if (log_plan == NULL)
		{
			Oid			argtypes[3] = {INT4OID, INT8OID, INT8OID};

			log_plan = prepare_kept(
				"INSERT INTO ordered_events.release_log "
				"(stream_id, seq_start, seq_end, released_at) "
				"VALUES ($1, $2, $3, clock_timestamp())",
				3, argtypes);
		}
		args[0] = Int32GetDatum(stream->stream_id);
		args[1] = Int64GetDatum(walk.range_end - walk.released);
		args[2] = Int64GetDatum(walk.range_end);
		execute(log_plan, args, NULL, SPI_OK_INSERT);

		snprintf(payload, sizeof(payload), "%s:" INT64_FORMAT, stream->name, walk.range_end);
		Async_Notify("ordered_events", payload);
	}
	return walk.released;
}

/*
 * Take (delete) up to "limit" arrivals of a per-key stream, oldest first.
 * Returns the distinct keys, copied into the SPI procedure context.
 */
static List *
take_arrivals(const OeStream *stream, int64 limit)
{
	Datum		args[2];
	List	   *keys = NIL;

	if (take_arrivals_plan == NULL)
	{
		Oid			argtypes[2] = {INT4OID, INT8OID};

		take_arrivals_plan = prepare_kept(
			"WITH taken AS ("
			"  DELETE FROM ordered_events.key_arrivals WHERE ctid = ANY (ARRAY("
			"    SELECT ctid FROM ordered_events.key_arrivals "
			"    WHERE stream_id = $1 ORDER BY arrived_at LIMIT $2)) "
			"  RETURNING key) "
			"SELECT DISTINCT key FROM taken ORDER BY key",
			2, argtypes);
	}
	args[0] = Int32GetDatum(stream->stream_id);
	args[1] = Int64GetDatum(limit);
	execute(take_arrivals_plan, args, NULL, SPI_OK_SELECT);

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		key = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		keys = lappend(keys, DatumGetTextPCopy(key));
	}
	return keys;
}

/* Note a key again so that the next step looks at it. */
static void
add_arrival(const OeStream *stream, text *key)
{
	Datum		args[2];

	if (arrival_plan == NULL)
	{
		Oid			argtypes[2] = {INT4OID, TEXTOID};

		arrival_plan = prepare_kept(
			"INSERT INTO ordered_events.key_arrivals (stream_id, key, arrived_at) "
			"VALUES ($1, $2, now())",
			2, argtypes);
	}
	args[0] = Int32GetDatum(stream->stream_id);
	args[1] = PointerGetDatum(key);
	execute(arrival_plan, args, NULL, SPI_OK_INSERT);
}

/*
 * One release step of one key of a per-key stream, over at most "limit"
 * events.  Returns the number released; *more is set if the key may have
 * more to release right away.
 */
static int64
release_key(const OeStream *stream, text *key, int64 limit, Snapshot snapshot, bool *more)
{
	const OeRelations *rels = oe_relations();
	Datum		args[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	ReleaseWalk walk;
	ScanKeyData keys[3];
	bool		isnull;
	bool		gap_was_seen = false;

	if (key_progress_plan == NULL)
	{
		Oid			argtypes[2] = {INT4OID, TEXTOID};

		key_progress_plan = prepare_kept(
			"SELECT range_end, gap_start FROM ordered_events.key_progress "
			"WHERE stream_id = $1 AND key = $2",
			2, argtypes);
	}
	args[0] = Int32GetDatum(stream->stream_id);
	args[1] = PointerGetDatum(key);
	execute(key_progress_plan, args, NULL, SPI_OK_SELECT);

	memset(&walk, 0, sizeof(walk));
	walk.range_end = stream->initial_sequence;
	if (SPI_processed == 1)
	{
		HeapTuple	row = SPI_tuptable->vals[0];
		Datum		gap_start;

		walk.range_end = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
		gap_start = SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull);
		gap_was_seen = !isnull && DatumGetInt64(gap_start) == walk.range_end;
	}

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(stream->stream_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(key));
	keys[1].sk_collation = C_COLLATION_OID;
	ScanKeyInit(&keys[2], 3, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(walk.range_end));
	walk_arrived(rels->key_events, rels->key_events_pkey, keys, 3, true,
				 limit, snapshot, &walk);

	*more = (walk.released == limit && !walk.gap && !walk.last_event);
	if (walk.released == 0 && (!walk.gap || gap_was_seen))
		return 0;

	if (advance_key_plan == NULL)
	{
		Oid			argtypes[5] = {INT4OID, TEXTOID, INT8OID, INT8OID, BOOLOID};

		advance_key_plan = prepare_kept(
			"INSERT INTO ordered_events.key_progress AS k "
			"(stream_id, key, range_end, released_count, gap_start, gap_first_seen, updated_at) "
			"VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN $3 END, "
			"  CASE WHEN $5 THEN clock_timestamp() END, clock_timestamp()) "
			"ON CONFLICT (stream_id, key) DO UPDATE SET "
			"released_count = k.released_count + $4, "
			"range_end = $3, "
			"updated_at = CASE WHEN $4 > 0 THEN clock_timestamp() ELSE k.updated_at END, "
			"gap_first_seen = CASE WHEN NOT $5 THEN NULL "
			"  WHEN k.gap_start IS DISTINCT FROM $3 THEN clock_timestamp() "
			"  ELSE k.gap_first_seen END, "
			"gap_start = CASE WHEN $5 THEN $3 END",
			5, argtypes);
	}
	args[2] = Int64GetDatum(walk.range_end);
	args[3] = Int64GetDatum(walk.released);
	args[4] = BoolGetDatum(walk.gap);
	execute(advance_key_plan, args, nulls, SPI_OK_INSERT);

	if (walk.released > 0)
	{
		if (log_key_plan == NULL)
		{
			Oid			argtypes[4] = {INT4OID, TEXTOID, INT8OID, INT8OID};

			log_key_plan = prepare_kept(
				"INSERT INTO ordered_events.key_release_log "
				"(stream_id, key, seq_start, seq_end, released_at) "
				"VALUES ($1, $2, $3, $4, clock_timestamp())",
				4, argtypes);
		}
		args[2] = Int64GetDatum(walk.range_end - walk.released);
		args[3] = Int64GetDatum(walk.range_end);
		execute(log_key_plan, args, NULL, SPI_OK_INSERT);
	}

	/* The key is complete: what waits beyond its last event never will be released. */
	if (walk.last_event)
	{
		if (reject_after_last_plan == NULL)
		{
			Oid			argtypes[3] = {INT4OID, TEXTOID, INT8OID};

			reject_after_last_plan = prepare_kept(
				"WITH rejected AS ("
				"  DELETE FROM ordered_events.key_events "
				"  WHERE stream_id = $1 AND key = $2 AND seq >= $3 "
				"  RETURNING seq, key, payload, event_ts, received_at) "
				"INSERT INTO ordered_events.unprocessed "
				"(stream, seq, key, payload, event_ts, reason, detail, received_at) "
				"SELECT d.stream, r.seq, r.key, r.payload, r.event_ts, 'after_last_event', "
				"  'The last event of this key is seq ' || ($3 - 1) || '.', r.received_at "
				"FROM rejected r, ordered_events.stream_def d WHERE d.stream_id = $1",
				3, argtypes);
		}
		args[2] = Int64GetDatum(walk.range_end);
		execute(reject_after_last_plan, args, NULL, SPI_OK_INSERT);
	}
	return walk.released;
}

/* One release step of a per-key stream; see oe_release_stream(). */
static int64
release_per_key(const OeStream *stream)
{
	List	   *keys;
	ListCell   *lc;
	Snapshot	snapshot;
	int64		released = 0;
	TupleDesc	desc;

	if (lock_progress(stream, &desc) == NULL)
		return 0;

	keys = take_arrivals(stream, stream->max_release_batch);

	/* Taken after the arrivals: it sees the events of every key taken. */
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	foreach(lc, keys)
	{
		text	   *key = lfirst(lc);
		bool		more = false;

		if (released < stream->max_release_batch)
			released += release_key(stream, key, stream->max_release_batch - released,
									snapshot, &more);
		else
			more = true;		/* out of budget: look at it next step */
		if (more)
			add_arrival(stream, key);
	}
	UnregisterSnapshot(snapshot);

	if (released > 0)
		Async_Notify("ordered_events", stream->name);
	return released;
}

/*
 * One release step for a stream: advance its range (or its keys' ranges)
 * over the arrived events, at most max_release_batch of them, and note the
 * gap where it stops.  Returns the number of events released.  Runs in the
 * caller's transaction.
 */
int64
oe_release_stream(const OeStream *stream)
{
	int64		released;

	SPI_connect();
	released = stream->per_key ? release_per_key(stream) : release_global(stream);
	SPI_finish();
	return released;
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
