/*-------------------------------------------------------------------------
 *
 * backlog.c
 *	  The summary of a lane's backlog, the events that wait beyond its
 *	  first gap, so that monitoring and gaps() cost the gaps and what
 *	  arrived since the last release step, not the backlog.
 *
 * The seqs of a lane are cut in blocks of BLOCK_SIZE (block b holds seqs
 * b * BLOCK_SIZE .. b * BLOCK_SIZE + BLOCK_SIZE - 1).  A release step that
 * stops at a gap looks at the lane's events beyond it and stores each
 * block that is complete: every seq of it arrived and none is in a skipped
 * run (a late event could still commit there).  A complete block does not
 * change until it is released: no seq of it can arrive again (that would
 * be a duplicate) and nothing deletes a pending event, except when its
 * lane completes (the step that rejects what follows a last event forgets
 * the lane's blocks).  So a reader with any snapshot that sees the blocks
 * takes a run of them (an island, OeIsland) for their events without
 * reading these, and reads only the rest: the blocks with a hole, the last
 * one, and what arrived since the step.  A reader whose snapshot does not
 * see them reads every event, as it must.
 *
 * Storage: one row per block in backlog_blocks (with its oldest
 * received_at, indexed, so the oldest waiting event is one index probe)
 * and one per island in backlog_islands, merged as blocks are stored and
 * trimmed as they are released, so that a reader reads a row per island;
 * for a global lane, the keys of the blocks' events in backlog_keys
 * (backlog_keys.c), which key_status reads.  A step deletes the blocks its
 * range passed, and their keys, in the transaction that moves the range:
 * no row lies below a lane's range_end.
 *
 * progress.backlog_end is the first seq the last step did not look at, so
 * that streams_with_work() asks for another step while events lie there;
 * NULL when nothing waits beyond the lane's range.  A step looks at most
 * STEP_EVENTS events that are not in islands, and none when the lane has
 * no gap (releasing in batches, it forgets only the blocks it released):
 * the summary costs a backlog's events once, when they wait behind a gap.
 *
 * Concurrency: written by release steps, under the stream's release lock
 * (step.c); read with any snapshot, without a lock.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#define BLOCK_SIZE 1024
#define STEP_EVENTS 65536		/* events a step looks at, beyond islands */

enum
{
	PLAN_ISLANDS,
	PLAN_OLDEST,
	PLAN_STORE,
	PLAN_MERGE,
	PLAN_FORGET,
	PLAN_SET_END
};

static OePlan plans[] = {
	[PLAN_ISLANDS] = {
		"SELECT greatest(first_block, $3), last_block "
		"FROM ordered_events.backlog_islands "
		"WHERE stream_id = $1 AND lane = $2 AND last_block >= $3 ORDER BY first_block",
		3, {INT4OID, TEXTOID, INT8OID}
	},
	/* by backlog_blocks_oldest_idx: a step leaves no block below the range */
	[PLAN_OLDEST] = {
		"SELECT oldest_received_at FROM ordered_events.backlog_blocks "
		"WHERE stream_id = $1 AND lane = $2 AND block >= $3 "
		"ORDER BY oldest_received_at LIMIT 1",
		3, {INT4OID, TEXTOID, INT8OID}
	},
	[PLAN_STORE] = {
		"INSERT INTO ordered_events.backlog_blocks (stream_id, lane, block, oldest_received_at) "
		"SELECT $1, $2, b.block, b.oldest "
		"FROM ROWS FROM (pg_catalog.unnest($3::bigint[]), pg_catalog.unnest($4::timestamptz[])) "
		"  AS b(block, oldest) "
		"ON CONFLICT DO NOTHING",
		4, {INT4OID, TEXTOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID}
	},
	/* the new run of blocks $3..$4 joins the islands it touches */
	[PLAN_MERGE] = {
		"WITH l AS ("
		"  DELETE FROM ordered_events.backlog_islands "
		"  WHERE stream_id = $1 AND lane = $2 AND last_block = $3 - 1 RETURNING first_block), "
		"r AS ("
		"  DELETE FROM ordered_events.backlog_islands "
		"  WHERE stream_id = $1 AND lane = $2 AND first_block = $4 + 1 RETURNING last_block) "
		"INSERT INTO ordered_events.backlog_islands (stream_id, lane, first_block, last_block) "
		"SELECT $1, $2, coalesce((SELECT first_block FROM l), $3), "
		"  coalesce((SELECT last_block FROM r), $4)",
		4, {INT4OID, TEXTOID, INT8OID, INT8OID}
	},
	[PLAN_FORGET] = {
		"WITH b AS ("
		"  DELETE FROM ordered_events.backlog_blocks "
		"  WHERE stream_id = $1 AND lane = $2 AND block < $3), "
		"i AS ("
		"  DELETE FROM ordered_events.backlog_islands "
		"  WHERE stream_id = $1 AND lane = $2 AND last_block < $3) "
		"UPDATE ordered_events.backlog_islands SET first_block = $3 "
		"WHERE stream_id = $1 AND lane = $2 AND first_block < $3 AND last_block >= $3",
		3, {INT4OID, TEXTOID, INT8OID}
	},
	[PLAN_SET_END] = {
		"UPDATE ordered_events.progress SET backlog_end = $3 "
		"WHERE stream_id = $1 AND lane = $2",
		3, {INT4OID, TEXTOID, INT8OID}
	},
};

/* The block of a seq (floor division, also below zero). */
static int64
block_of(int64 seq)
{
	return seq >= 0 ? seq / BLOCK_SIZE : -((-(seq + 1)) / BLOCK_SIZE) - 1;
}

static int64
block_first(int64 block)
{
	return block * BLOCK_SIZE;
}

/* The first block that lies wholly at or after seq. */
static int64
first_block_from(int64 seq)
{
	int64		block = block_of(seq);

	return block_first(block) == seq ? block : block + 1;
}

/*
 * Load the lane's islands from its range_end on, if a step stored any
 * (oe_load_lane() calls this).
 */
void
oe_backlog_load(OeLane *lane)
{
	Datum		values[3];

	lane->islands = NIL;
	if (!lane->has_backlog)
		return;
	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(first_block_from(lane->range_end));
	oe_run_plan(&plans[PLAN_ISLANDS], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		OeIsland   *island = palloc(sizeof(OeIsland));
		bool		isnull;

		island->first = block_first(DatumGetInt64(oe_result(i, 1, &isnull)));
		island->last = block_first(DatumGetInt64(oe_result(i, 2, &isnull))) + (BLOCK_SIZE - 1);
		lane->islands = lappend(lane->islands, island);
	}
}

/* Forget the lane's blocks below "block". */
static void
forget_blocks(const OeLane *lane, int64 block)
{
	Datum		values[3];

	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(block);
	oe_run_plan(&plans[PLAN_FORGET], values, NULL, SPI_OK_UPDATE);
}

/* Store the lane's backlog_end (NULL without has_end) if it changed. */
static void
set_backlog_end(const OeLane *lane, bool has_end, int64 end)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	if (has_end == lane->has_backlog && (!has_end || end == lane->backlog_end))
		return;
	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(end);
	nulls[2] = has_end ? ' ' : 'n';
	oe_run_plan(&plans[PLAN_SET_END], values, nulls, SPI_OK_UPDATE);
}

/* Forget everything stored of a lane: its pending events are gone. */
void
oe_backlog_forget(const OeLane *lane)
{
	if (!lane->has_backlog)
		return;
	forget_blocks(lane, PG_INT64_MAX);
	oe_keys_forget(lane);
	set_backlog_end(lane, false, 0);
}

/*
 * Forget what the step's range passed: the blocks below the first one
 * wholly beyond it, and their events in the keys' rows.
 */
static void
forget_passed(OeLane *lane, Snapshot snapshot)
{
	int64		kept = first_block_from(lane->range_end);
	bool		has_kept = kept <= block_of(PG_INT64_MAX);
	OeKeysPass	pass = {
		.from_block = first_block_from(lane->start),
		.kept_block = kept,
		.tail_last = has_kept ? block_first(kept) - 1 : PG_INT64_MAX,
		.kept_first = has_kept ? block_first(kept) : 1,
		.kept_last = has_kept ? block_first(kept) + (BLOCK_SIZE - 1) : 0
	};

	forget_blocks(lane, kept);
	oe_keys_pass(lane, snapshot, &pass);
}

/* True if a skipped run of the lane (or one this step adds) meets the block. */
static bool
block_meets_runs(const OeLane *lane, int64 block)
{
	int64		first = block_first(block);
	int64		last = first + (BLOCK_SIZE - 1);
	List	   *lists[2] = {lane->runs, lane->new_runs};

	for (int i = 0; i < 2; i++)
	{
		ListCell   *lc;

		foreach(lc, lists[i])
		{
			OeSkipRun  *run = lfirst(lc);

			if (run->start <= last && run->end >= first)
				return true;
		}
	}
	return false;
}

/* Blocks a step found complete, to store. */
typedef struct NewBlocks
{
	ArrayBuildState *blocks;
	ArrayBuildState *oldest;
	List	   *runs;			/* BlockRuns of consecutive new blocks, in order */
	OeKeyRuns  *keys;			/* their keys (backlog_keys.c) */
} NewBlocks;

typedef struct BlockRun
{
	int64		first;
	int64		last;
} BlockRun;

/* Keep a block the walk finished if all its seqs arrived. */
static void
finish_block(const OeLane *lane, NewBlocks *found, int64 block, int64 events,
			 TimestampTz oldest)
{
	bool		complete = events == BLOCK_SIZE && block_first(block) >= lane->range_end &&
		!block_meets_runs(lane, block);

	oe_keys_end_block(found->keys, block, complete);
	if (!complete)
		return;
	found->blocks = accumArrayResult(found->blocks, Int64GetDatum(block), false, INT8OID,
									 CurrentMemoryContext);
	found->oldest = accumArrayResult(found->oldest, TimestampTzGetDatum(oldest), false,
									 TIMESTAMPTZOID, CurrentMemoryContext);
	if (found->runs != NIL && ((BlockRun *) llast(found->runs))->last == block - 1)
		((BlockRun *) llast(found->runs))->last = block;
	else
	{
		BlockRun   *run = palloc(sizeof(BlockRun));

		run->first = run->last = block;
		found->runs = lappend(found->runs, run);
	}
}

static void
store_blocks(const OeLane *lane, NewBlocks *found)
{
	Datum		values[4];
	ListCell   *lc;

	oe_keys_store(lane, found->keys);
	if (found->runs == NIL)
		return;
	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = makeArrayResult(found->blocks, CurrentMemoryContext);
	values[3] = makeArrayResult(found->oldest, CurrentMemoryContext);
	oe_run_plan(&plans[PLAN_STORE], values, NULL, SPI_OK_INSERT);
	foreach(lc, found->runs)
	{
		BlockRun   *run = lfirst(lc);

		values[2] = Int64GetDatum(run->first);
		values[3] = Int64GetDatum(run->last);
		oe_run_plan(&plans[PLAN_MERGE], values, NULL, SPI_OK_INSERT);
	}
}

static TimestampTz
received_at(TupleTableSlot *slot)
{
	bool		isnull;

	return DatumGetTimestampTz(slot_getattr(slot, Anum_oe_event_received_at, &isnull));
}

/*
 * After a release step walked the lane (lane.c): forget the blocks it
 * released, and if it stopped at a gap, look at the events beyond that are
 * in no island, storing the blocks now complete, with the step's snapshot.
 * Returns true if it stopped at STEP_EVENTS: the lane needs another step.
 */
bool
oe_backlog_update(OeLane *lane, Snapshot snapshot)
{
	OeLaneScan	ls;
	NewBlocks	found = {0};
	int64		first;
	int64		last;
	const OeIsland *island;
	int64		block = 0;
	int64		events = 0;
	int64		looked = 0;
	int64		end = lane->range_end;
	TimestampTz oldest = DT_NOEND;
	bool		in_block = false;
	bool		stopped = false;

	bool		moved = lane->has_backlog && lane->range_end > lane->start;

	if (!lane->gap)
	{
		/* Nothing waits, or it is being released in batches. */
		if (!lane->more)
			oe_backlog_forget(lane);
		else if (moved)
			forget_passed(lane, snapshot);
		return false;
	}

	found.keys = oe_keys_begin(lane);
	oe_lane_scan_begin(&ls, lane, snapshot, lane->range_end, true);
	while (oe_lane_scan_next(&ls, &first, &last, &island))
	{
		CHECK_FOR_INTERRUPTS();
		if (island != NULL || block_of(first) != block || !in_block)
		{
			if (in_block)
				finish_block(lane, &found, block, events, oldest);
			in_block = false;
			if (island != NULL)
			{
				end = last + 1;
				continue;
			}
			if (looked >= STEP_EVENTS)
			{
				stopped = true;
				end = block_first(block_of(first));
				break;
			}
			block = block_of(first);
			events = 0;
			oldest = DT_NOEND;
			in_block = true;
		}
		events++;
		looked++;
		oldest = Min(oldest, received_at(ls.slot));
		oe_keys_note(found.keys, ls.slot, first);
		end = first + 1;
	}
	if (in_block && !stopped)
		finish_block(lane, &found, block, events, oldest);
	oe_lane_scan_end(&ls);

	if (moved)
		forget_passed(lane, snapshot);
	store_blocks(lane, &found);
	set_backlog_end(lane, true, end);
	return stopped;
}

/* What a reader finds beyond a lane's range: stream_backlog()'s row. */
typedef struct Backlog
{
	int64		pending;
	TimestampTz oldest;
	bool		any;			/* an event waits: the seqs and oldest are set */
	int64		min_seq;
	int64		max_seq;
	bool		has_gap;
	int64		gap_start;
	bool		gap_seen;		/* a step saw the gap: gap_since is set */
	TimestampTz gap_since;
} Backlog;

/* The earliest received_at in the lane's stored blocks (it has some). */
static TimestampTz
islands_oldest(const OeLane *lane)
{
	Datum		values[3];
	bool		isnull;

	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(first_block_from(lane->range_end));
	oe_run_plan(&plans[PLAN_OLDEST], values, NULL, SPI_OK_SELECT);
	return DatumGetTimestampTz(oe_result(0, 1, &isnull));
}

/* The first hole of a lane, once found. */
typedef struct Hole
{
	bool		found;
	int64		start;
} Hole;

/* oe_unskipped_parts() callback: keep the start of the first part. */
static void
first_part(OeLane *lane, int64 start, int64 end, void *arg)
{
	Hole	   *hole = arg;

	if (!hole->found)
	{
		hole->found = true;
		hole->start = start;
	}
}

/*
 * Make a lane's first hole the stream's first gap if it sorts first: by
 * the time a step saw it (never seen last), then by seq, as stream_stats
 * orders gaps().
 */
static bool
gap_sorts_first(const Backlog *b, int64 start, bool seen, TimestampTz since)
{
	if (!b->has_gap)
		return true;
	if (seen != b->gap_seen)
		return seen;
	if (seen && since != b->gap_since)
		return since < b->gap_since;
	return start < b->gap_start;
}

static void
note_gap(Backlog *b, int64 start, bool seen, TimestampTz since)
{
	if (!gap_sorts_first(b, start, seen, since))
		return;
	b->has_gap = true;
	b->gap_start = start;
	b->gap_seen = seen;
	b->gap_since = since;
}

/*
 * Add the lane's waiting events to *b (islands by their blocks), and its
 * first hole as a candidate for the stream's first gap.
 */
static void
measure_lane(OeLane *lane, Snapshot snapshot, Backlog *b)
{
	OeLaneScan	ls;
	int64		pos = lane->range_end;
	int64		first;
	int64		last;
	const OeIsland *island;
	Hole		hole = {0};
	TimestampTz islands_since = lane->islands != NIL ? islands_oldest(lane) : 0;

	oe_lane_scan_begin(&ls, lane, snapshot, lane->range_end, true);
	while (oe_lane_scan_next(&ls, &first, &last, &island))
	{
		TimestampTz oldest = island != NULL ? islands_since : received_at(ls.slot);

		CHECK_FOR_INTERRUPTS();
		if (!hole.found && first > pos)
			oe_unskipped_parts(lane, pos, first - 1, first_part, &hole);
		b->pending += last - first + 1;
		b->oldest = b->any ? Min(b->oldest, oldest) : oldest;
		b->min_seq = b->any ? Min(b->min_seq, first) : first;
		b->max_seq = b->any ? Max(b->max_seq, last) : last;
		b->any = true;
		pos = last + 1;
	}
	oe_lane_scan_end(&ls);
	if (hole.found)
		note_gap(b, hole.start, hole.start == lane->seen_gap, lane->seen_gap_at);
}

/* Only for whoever may read the view that shows what the caller returns. */
static void
check_may_read(const char *view, const char *function)
{
	Oid			relid = get_relname_relid(view, get_namespace_oid("ordered_events", false));

	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for view %s", view),
				 errhint("%s() shows what %s shows: ask for SELECT on it, or membership in pg_monitor.",
						 function, view)));
}

/* Measure the given lanes (their keys, text) of a stream. */
static void
measure_lanes(const OeStream *stream, List *lanes, Backlog *b)
{
	Snapshot	snapshot = GetActiveSnapshot();
	ListCell   *lc;

	foreach(lc, lanes)
	{
		OeLane		lane;

		oe_load_lane(&lane, stream, lfirst(lc), NULL);
		measure_lane(&lane, snapshot, b);
	}
}

static Datum
maybe(Datum value, bool present, bool *isnull)
{
	*isnull = !present;
	return value;
}

/*
 * stream_backlog(stream text) returns (pending_count bigint,
 * oldest_pending_at timestamptz, max_pending_seq bigint, first_gap_start
 * bigint, first_gap_since timestamptz)
 *
 * What waits beyond the ranges of a stream's lanes (late events in skipped
 * runs aside, see stream_stats), from islands and the events in none: for
 * whoever may read stream_stats, which shows it, from the lanes that can
 * wait (oe_waiting_lanes(), as gaps()).
 */
PG_FUNCTION_INFO_V1(oe_stream_backlog);
Datum
oe_stream_backlog(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	OeInternalScope scope;
	Backlog		b = {0};
	TupleDesc	desc;
	Datum		values[5];
	bool		nulls[5];

	check_may_read("stream_stats", "stream_backlog");
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "stream_backlog() must return a row");

	oe_internal_begin(&scope, oe_relations()->owner);
	if (oe_lookup_stream(text_to_cstring(PG_GETARG_TEXT_PP(0)), &stream))
		measure_lanes(&stream, oe_waiting_lanes(&stream, GetActiveSnapshot()), &b);
	oe_internal_end(&scope);

	values[0] = maybe(Int64GetDatum(b.pending), true, &nulls[0]);
	values[1] = maybe(TimestampTzGetDatum(b.oldest), b.any, &nulls[1]);
	values[2] = maybe(Int64GetDatum(b.max_seq), b.any, &nulls[2]);
	values[3] = maybe(Int64GetDatum(b.gap_start), b.has_gap, &nulls[3]);
	values[4] = maybe(TimestampTzGetDatum(b.gap_since), b.has_gap && b.gap_seen, &nulls[4]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * lane_backlog(stream text, key text) returns (pending_count bigint,
 * earliest_pending_seq bigint, latest_pending_seq bigint)
 *
 * The pending events of one key of a per-key stream (its lane), as
 * stream_backlog() counts them: for whoever may read key_status, which
 * shows them.  Nothing for a global stream or an unknown one.
 */
PG_FUNCTION_INFO_V1(oe_lane_backlog);
Datum
oe_lane_backlog(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	OeInternalScope scope;
	Backlog		b = {0};
	TupleDesc	desc;
	Datum		values[3];
	bool		nulls[3];

	check_may_read("key_status", "lane_backlog");
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "lane_backlog() must return a row");

	oe_internal_begin(&scope, oe_relations()->owner);
	if (oe_lookup_stream(text_to_cstring(PG_GETARG_TEXT_PP(0)), &stream) && stream.per_key)
		measure_lanes(&stream, list_make1(PG_GETARG_TEXT_P(1)), &b);
	oe_internal_end(&scope);

	values[0] = maybe(Int64GetDatum(b.pending), true, &nulls[0]);
	values[1] = maybe(Int64GetDatum(b.min_seq), b.any, &nulls[1]);
	values[2] = maybe(Int64GetDatum(b.max_seq), b.any, &nulls[2]);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
