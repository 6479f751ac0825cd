/*-------------------------------------------------------------------------
 *
 * lane.c
 *	  The lane: one sequence of a stream, its progress, and the walk over
 *	  its events that releasing, skip_gap() and gaps() share.
 *
 * A global stream has one lane, '' ; a per-key stream one per key, named
 * by the key.  Its events are the rows of ordered_events.event_store with
 * that (stream_id, lane), in the order of the primary key (stream_id, lane,
 * seq); its progress is a row of ordered_events.progress (a lane without
 * one starts at the stream's initial_sequence).  An event is released
 * exactly when its seq is below the lane's range_end: releasing moves no
 * rows, it walks the primary key from range_end, counting consecutive seqs
 * until the first missing one or the step's limit, and stores the new
 * range_end.  Its cost follows the events it releases, never the backlog
 * beyond the gap.
 *
 * Skips: the walk passes over the runs in the skip ledger (gap_skips) and
 * over what the gap policy skips (gap_policy.c); the new runs are recorded
 * in the ledger by oe_add_runs().
 *
 * Locking and snapshots: the caller holds the stream's release lock (see
 * release.c) and gives the walk a snapshot taken after it, so the walk sees
 * every step before; an event whose transaction is still open is a gap
 * until it commits.  Everything here runs inside an internal-query scope.
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
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

enum
{
	PLAN_LOAD,
	PLAN_SAVE,
	PLAN_RUNS,
	PLAN_ADD_RUN
};

static OePlan plans[] = {
	[PLAN_LOAD] = {
		"SELECT p.range_end, p.max_event_ts, p.gap_start, p.gap_end, "
		"  d.gap_timeout, "
		"  p.fence_seq, p.fence_xid::text::bigint, p.last_event_seq, p.gap_first_seen, "
		"  p.backlog_end "
		"FROM ordered_events.progress p "
		"JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id "
		"WHERE p.stream_id = $1 AND p.lane = $2",
		2, {INT4OID, TEXTOID}
	},

	/*
	 * A gap keeps the time a step first saw it while the first missing seq
	 * is one that was missing then ($3 is the new range_end, $5 the gap's
	 * end, NULL if the lane stopped at no gap).
	 */
	[PLAN_SAVE] = {
		"INSERT INTO ordered_events.progress AS p "
		"(stream_id, lane, range_end, released_count, max_event_ts, last_event_seq, "
		" gap_start, gap_end, gap_first_seen, fence_seq, fence_xid, updated_at, "
		" last_released_seq) "
		"VALUES ($1, $2, $3, $4, $6, $7, CASE WHEN $5 IS NOT NULL THEN $3 END, $5, "
		"  CASE WHEN $5 IS NOT NULL THEN pg_catalog.clock_timestamp() END, "
		"  $8, $9::xid8, pg_catalog.clock_timestamp(), $10) "
		"ON CONFLICT (stream_id, lane) DO UPDATE SET "
		"released_count = p.released_count + $4, "
		"last_released_seq = coalesce($10, p.last_released_seq), "
		"updated_at = CASE WHEN $3 > p.range_end THEN pg_catalog.clock_timestamp() "
		"  ELSE p.updated_at END, "
		"range_end = $3, "
		"max_event_ts = $6, "
		"last_event_seq = coalesce($7, p.last_event_seq), "
		"gap_first_seen = CASE WHEN $5 IS NULL THEN NULL "
		"  WHEN $3 BETWEEN p.gap_start AND p.gap_end THEN p.gap_first_seen "
		"  ELSE pg_catalog.clock_timestamp() END, "
		"gap_start = CASE WHEN $5 IS NOT NULL THEN $3 END, "
		"gap_end = $5, "
		"fence_seq = $8, "
		"fence_xid = $9::xid8",
		10, {INT4OID, TEXTOID, INT8OID, INT8OID, INT8OID, TIMESTAMPTZOID, INT8OID, INT8OID, TEXTOID,
		INT8OID}
	},
	[PLAN_RUNS] = {
		"SELECT gap_start, gap_end FROM ordered_events.gap_skips "
		"WHERE stream_id = $1 AND lane = $2 AND gap_end >= $3 ORDER BY gap_start",
		3, {INT4OID, TEXTOID, INT8OID}
	},
	[PLAN_ADD_RUN] = {
		"INSERT INTO ordered_events.gap_skips "
		"(stream_id, lane, gap_start, gap_end, reason, skipped_at) "
		"VALUES ($1, $2, $3, $4, $5, pg_catalog.clock_timestamp())",
		5, {INT4OID, TEXTOID, INT8OID, INT8OID, TEXTOID}
	},
};

/* Load the lane's skipped runs that end at or after its range_end. */
static void
load_runs(OeLane *lane)
{
	Datum		values[3];

	lane->runs = NIL;
	if (lane->range_end > lane->stream->skipped_through)
		return;					/* no skip reaches this far */

	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(lane->range_end);
	oe_run_plan(&plans[PLAN_RUNS], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		OeSkipRun  *run = palloc0(sizeof(OeSkipRun));
		bool		isnull;

		run->start = DatumGetInt64(oe_result(i, 1, &isnull));
		run->end = DatumGetInt64(oe_result(i, 2, &isnull));
		lane->runs = lappend(lane->runs, run);
	}
}

/*
 * True if the gap a step saw (gap_first_seen, column 9 of PLAN_LOAD's
 * "row") has been missing for the stream's gap_timeout (column 5) by now:
 * oe_gap_expired(), at clock_timestamp() as before.
 */
static bool
seen_gap_expired(uint64 row)
{
	bool		no_gap;
	bool		no_timeout;
	Datum		first_seen = oe_result(row, 9, &no_gap);
	Datum		gap_timeout = oe_result(row, 5, &no_timeout);

	if (no_gap || no_timeout)
		return false;
	return oe_gap_expired(DatumGetTimestampTz(first_seen), DatumGetIntervalP(gap_timeout),
						  GetCurrentTimestamp());
}

/*
 * Load a lane's progress, skipped runs and islands: the lane of key
 * "lane_key" of a per-key stream, or the global lane (pass oe_lane_of()).
 * "step" is the release step that will walk it, NULL if none will.
 */
void
oe_load_lane(OeLane *lane, const OeStream *stream, text *lane_key, OeStep *step)
{
	Datum		values[2];

	memset(lane, 0, sizeof(*lane));
	lane->stream = stream;
	lane->step = step;
	lane->lane = lane_key;
	lane->range_end = lane->start = stream->initial_sequence;
	lane->seen_gap = PG_INT64_MIN;

	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(lane_key);
	oe_run_plan(&plans[PLAN_LOAD], values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		value;

		lane->range_end = lane->start = DatumGetInt64(oe_result(0, 1, &isnull));
		value = oe_result(0, 2, &isnull);
		lane->max_event_ts = DatumGetTimestampTz(value);
		lane->max_event_ts_valid = !isnull;
		value = oe_result(0, 3, &isnull);
		lane->seen_gap = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		lane->seen_gap_end = DatumGetInt64(oe_result(0, 4, &isnull));
		lane->seen_gap_expired = seen_gap_expired(0);
		value = oe_result(0, 7, &isnull);
		lane->has_fence = oe_stored_xid(value, isnull, &lane->fence_xid);
		if (lane->has_fence)
			lane->fence_seq = DatumGetInt64(oe_result(0, 6, &isnull));
		(void) oe_result(0, 8, &isnull);
		lane->completed = !isnull;
		value = oe_result(0, 9, &isnull);
		lane->seen_gap_at = isnull ? 0 : DatumGetTimestampTz(value);
		value = oe_result(0, 10, &isnull);
		lane->has_backlog = !isnull;
		lane->backlog_end = isnull ? 0 : DatumGetInt64(value);
	}
	load_runs(lane);
	oe_backlog_load(lane);
}

/* Record the runs this step adds in the ledger. */
void
oe_add_runs(OeLane *lane)
{
	ListCell   *lc;

	foreach(lc, lane->new_runs)
	{
		OeSkipRun  *run = lfirst(lc);
		Datum		values[5];

		values[0] = Int32GetDatum(lane->stream->stream_id);
		values[1] = PointerGetDatum(lane->lane);
		values[2] = Int64GetDatum(run->start);
		values[3] = Int64GetDatum(run->end);
		values[4] = CStringGetTextDatum(run->reason);
		oe_run_plan(&plans[PLAN_ADD_RUN], values, NULL, SPI_OK_INSERT);
	}
}

/* True if the gap the lane stopped at is not the one stored. */
static bool
gap_changed(const OeLane *lane)
{
	if (!lane->gap)
		return lane->seen_gap != PG_INT64_MIN;
	return lane->seen_gap != lane->range_end || lane->seen_gap_end != lane->gap_end;
}

/*
 * Store what a step did to the lane, and give the step the run it released
 * (delivery.c logs it).  Writes only when something changed (a stored fence
 * always comes with a stored gap, so a fence to forget is a gap that
 * changed).
 */
void
oe_save_lane(OeLane *lane)
{
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		keep_fence = lane->gap && lane->has_fence;

	if (lane->range_end == lane->start && !lane->fence_recorded && !gap_changed(lane))
		return;

	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = PointerGetDatum(lane->lane);
	values[2] = Int64GetDatum(lane->range_end);
	values[3] = Int64GetDatum(lane->released);
	values[4] = Int64GetDatum(lane->gap_end);
	nulls[4] = lane->gap ? ' ' : 'n';
	values[5] = TimestampTzGetDatum(lane->max_event_ts);
	nulls[5] = lane->max_event_ts_valid ? ' ' : 'n';
	values[6] = Int64GetDatum(lane->range_end - 1);
	nulls[6] = lane->last_event ? ' ' : 'n';
	nulls[7] = nulls[8] = 'n';
	if (keep_fence)
	{
		values[7] = Int64GetDatum(lane->fence_seq);
		values[8] = CStringGetTextDatum(psprintf(UINT64_FORMAT,
												 U64FromFullTransactionId(lane->fence_xid)));
		nulls[7] = nulls[8] = ' ';
	}
	values[9] = Int64GetDatum(lane->last_released);
	nulls[9] = lane->released > 0 ? ' ' : 'n';
	oe_run_plan(&plans[PLAN_SAVE], values, nulls, SPI_OK_INSERT);
	oe_step_add_run(lane);
}

/* Position the scan at the lane's first event from "from" on. */
static void
lane_scan_from(OeLaneScan *ls, int64 from)
{
	ScanKeyData keys[3];

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(ls->lane->stream->stream_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(ls->lane->lane));
	keys[1].sk_collation = C_COLLATION_OID;
	ScanKeyInit(&keys[2], 3, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(from));
	index_rescan(ls->scan, keys, 3, NULL, 0);
}

/*
 * Scan the lane's events in seq order from "from" on, by the primary key.
 * With "jump", the lane's islands (backlog.c) come as runs of their own and
 * the scan goes on after each, so a summarised backlog costs its islands,
 * not its events.
 */
void
oe_lane_scan_begin(OeLaneScan *ls, const OeLane *lane, Snapshot snapshot, int64 from,
				   bool jump)
{
	const OeRelations *rels = oe_relations();

	ls->lane = lane;
	ls->next_island = jump ? list_head(lane->islands) : NULL;
	while (ls->next_island != NULL && ((OeIsland *) lfirst(ls->next_island))->last < from)
		ls->next_island = lnext(lane->islands, ls->next_island);
	ls->heap = table_open(rels->event, AccessShareLock);
	ls->index = index_open(rels->event_pkey, AccessShareLock);
	ls->slot = table_slot_create(ls->heap, NULL);
	ls->scan = index_beginscan(ls->heap, ls->index, snapshot, 3, 0);
	lane_scan_from(ls, from);
}

/*
 * The next run of arrived seqs first..last: one event (first == last, in
 * ls->slot, *island NULL) or an island.  False at the lane's end.
 */
bool
oe_lane_scan_next(OeLaneScan *ls, int64 *first, int64 *last, const OeIsland **island)
{
	bool		isnull;
	int64		seq;

	*island = NULL;
	if (!index_getnext_slot(ls->scan, ForwardScanDirection, ls->slot))
		return false;
	seq = DatumGetInt64(slot_getattr(ls->slot, Anum_oe_event_seq, &isnull));
	if (ls->next_island != NULL && seq >= ((OeIsland *) lfirst(ls->next_island))->first)
	{
		*island = lfirst(ls->next_island);
		ls->next_island = lnext(ls->lane->islands, ls->next_island);
		*first = (*island)->first;
		*last = (*island)->last;
		if (*last < PG_INT64_MAX)
			lane_scan_from(ls, *last + 1);
		return true;
	}
	*first = *last = seq;
	return true;
}

void
oe_lane_scan_end(OeLaneScan *ls)
{
	index_endscan(ls->scan);
	ExecDropSingleTupleTableSlot(ls->slot);
	index_close(ls->index, AccessShareLock);
	table_close(ls->heap, AccessShareLock);
}

/* The next event's seq into *seq, with no island: false at the end. */
static bool
scan_next(OeLaneScan *ls, int64 *seq)
{
	int64		last;
	const OeIsland *island;

	return oe_lane_scan_next(ls, seq, &last, &island);
}

/* Count the event in the scan's slot, at seq, as released by the step. */
static void
release_event(OeLane *lane, TupleTableSlot *slot, int64 seq)
{
	TimestampTz ts;
	bool		isnull;

	/* What this step reads of the row, deformed at once. */
	slot_getsomeattrs(slot, Anum_oe_event_alignment_ts);
	ts = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_event_event_ts, &isnull));
	if (!lane->max_event_ts_valid || ts > lane->max_event_ts)
	{
		lane->max_event_ts = ts;
		lane->max_event_ts_valid = true;
	}
	lane->last_event = DatumGetBool(slot_getattr(slot, Anum_oe_event_last_event, &isnull));
	oe_step_count_event(lane, slot);
	oe_keys_released(lane, slot, seq);
	lane->last_released = seq;
	lane->released++;
}

/*
 * Walk the lane's primary key from range_end in seq order with the given
 * snapshot, releasing at most "limit" consecutive events, passing skipped
 * runs and skipping what the gap policy allows.
 */
void
oe_walk_lane(OeLane *lane, int64 limit, Snapshot snapshot)
{
	OeLaneScan	ls;
	ListCell   *next_run = list_head(lane->runs);
	int64		seq = 0;
	bool		have;

	oe_lane_scan_begin(&ls, lane, snapshot, lane->range_end, false);
	have = scan_next(&ls, &seq);
	while (!lane->last_event)
	{
		OeSkipRun  *run = NULL;
		int64		gap_end;
		int64		skip_end;
		const char *reason = NULL;

		CHECK_FOR_INTERRUPTS();
		while (next_run != NULL && ((OeSkipRun *) lfirst(next_run))->end < lane->range_end)
			next_run = lnext(lane->runs, next_run);
		if (next_run != NULL)
			run = lfirst(next_run);

		/* A skipped run: pass it, with any event that committed into it late. */
		if (run != NULL && run->start <= lane->range_end)
		{
			while (have && seq <= run->end)
				have = scan_next(&ls, &seq);
			lane->range_end = run->end + 1;
			continue;
		}

		if (have && seq == lane->range_end)
		{
			if (lane->released >= limit)
			{
				lane->more = true;
				break;
			}
			release_event(lane, ls.slot, seq);
			lane->range_end++;
			have = scan_next(&ls, &seq);
			continue;
		}

		if (!have)
			break;				/* nothing arrived beyond: no gap */

		/* range_end..gap_end is missing */
		gap_end = seq - 1;
		if (run != NULL && run->start <= gap_end)
			gap_end = run->start - 1;
		skip_end = oe_policy_skip_end(lane, gap_end, snapshot, &reason);
		if (skip_end == PG_INT64_MIN)
		{
			lane->gap = true;
			lane->gap_end = gap_end;
			break;
		}
		else
		{
			OeSkipRun  *skip = palloc0(sizeof(OeSkipRun));

			skip->start = lane->range_end;
			skip->end = skip_end;
			skip->reason = reason;
			lane->new_runs = lappend(lane->new_runs, skip);
			lane->range_end = skip_end + 1;
		}
	}
	oe_lane_scan_end(&ls);
}

/*
 * Release every event of the lane from its range_end up to "through"
 * (exclusive) in the snapshot, and move range_end there: the lane of a
 * sharded stream, whose other seqs are on other servers (shard.c).  An
 * event in a skipped run is a late one: it is passed, as oe_walk_lane()
 * passes it.
 */
void
oe_walk_lane_through(OeLane *lane, int64 through, Snapshot snapshot)
{
	OeLaneScan	ls;
	ListCell   *lc = list_head(lane->runs);
	int64		seq;

	oe_lane_scan_begin(&ls, lane, snapshot, lane->range_end, false);
	while (lane->range_end < through && scan_next(&ls, &seq) && seq < through)
	{
		OeSkipRun  *run = NULL;

		CHECK_FOR_INTERRUPTS();
		while (lc != NULL && ((OeSkipRun *) lfirst(lc))->end < seq)
			lc = lnext(lane->runs, lc);
		if (lc != NULL)
			run = lfirst(lc);
		if (run == NULL || run->start > seq)
			release_event(lane, ls.slot, seq);
	}
	oe_lane_scan_end(&ls);
	if (lane->range_end < through)
		lane->range_end = through;
}

/* Emit the parts of from..to that no skipped run of the lane covers. */
void
oe_unskipped_parts(OeLane *lane, int64 from, int64 to,
				void (*emit) (OeLane *lane, int64 start, int64 end, void *arg), void *arg)
{
	ListCell   *lc;

	foreach(lc, lane->runs)
	{
		OeSkipRun  *run = lfirst(lc);

		if (from > to)
			return;
		if (run->end < from || run->start > to)
			continue;
		if (run->start > from)
			emit(lane, from, run->start - 1, arg);
		from = run->end + 1;
	}
	if (from <= to)
		emit(lane, from, to, arg);
}

/*
 * The holes of the lane in the snapshot: every run of missing seqs from its
 * range_end through "through" that no skipped run covers, in seq order.  A
 * hole ends before an arrived seq; with past_last, the seqs after the last
 * arrived one (through "through") are a hole too.  gaps() lists them,
 * skip_gap() declares them lost.  An island has no hole: it is passed whole.
 */
void
oe_lane_holes(OeLane *lane, Snapshot snapshot, int64 through, bool past_last,
			  void (*emit) (OeLane *lane, int64 start, int64 end, void *arg), void *arg)
{
	OeLaneScan	ls;
	int64		pos = lane->range_end;
	int64		first;
	int64		last;
	const OeIsland *island;

	oe_lane_scan_begin(&ls, lane, snapshot, lane->range_end, true);
	while (pos <= through && oe_lane_scan_next(&ls, &first, &last, &island))
	{
		CHECK_FOR_INTERRUPTS();
		if (first > pos)
			oe_unskipped_parts(lane, pos, Min(first - 1, through), emit, arg);
		pos = last + 1;
	}
	if (past_last && pos <= through)
		oe_unskipped_parts(lane, pos, through, emit, arg);
	oe_lane_scan_end(&ls);
}
