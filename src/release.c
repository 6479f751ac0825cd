/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Release steps: advancing a stream's lanes over the events that
 *	  arrived, release(), and the per-key bookkeeping of which lanes to
 *	  visit.
 *
 * A step of a global stream walks its one lane (lane.c).  A step of a
 * per-key stream visits only the lanes that received events since the
 * last step (key_arrivals), and those whose gap may have timed out, so its
 * cost follows the keys that received events, never the idle ones; it
 * releases at most max_release_batch events in all.
 *
 * A release step is a step of the engine (step.c): it holds the stream's
 * release lock, settles the skipped runs, walks with snapshots taken after
 * the lock, logs what it released and, after a step that moved a range,
 * queues NOTIFY ordered_events ('<stream>:<range_end>', or '<stream>' for
 * a per-key stream), delivered when the step commits.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"

enum
{
	PLAN_TAKE_ARRIVALS,
	PLAN_EXPIRED_LANES,
	PLAN_ADD_ARRIVAL,
	PLAN_TAKE_AFTER_LAST
};

static OePlan plans[] = {
	[PLAN_TAKE_ARRIVALS] = {
		"WITH taken AS ("
		"  DELETE FROM ordered_events.key_arrivals WHERE ctid = ANY (ARRAY("
		"    SELECT ctid FROM ordered_events.key_arrivals "
		"    WHERE stream_id = $1 ORDER BY arrived_at LIMIT $2)) "
		"  RETURNING key) "
		"SELECT DISTINCT key FROM taken ORDER BY key",
		2, {INT4OID, INT8OID}
	},

	/*
	 * The lanes whose gap timed out (ordered_events.gap_expired(), the one
	 * test), oldest first, at most $2: of the $2 oldest gaps, those that
	 * timed out.  first_seen + timeout grows with first_seen, so a gap
	 * younger than one that has not timed out has not either (but for the
	 * hour a clock goes back, where a calendar-day timeout may see a lane
	 * at the next step); this reads at most $2 rows of progress_gap_idx.
	 */
	[PLAN_EXPIRED_LANES] = {
		"SELECT x.lane FROM ("
		"  SELECT p.lane, p.gap_first_seen, d.gap_timeout FROM ordered_events.progress p "
		"  JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id "
		"  WHERE p.stream_id = $1 AND p.gap_start IS NOT NULL "
		"  ORDER BY p.gap_first_seen LIMIT $2) x "
		"WHERE ordered_events.gap_expired(x.gap_first_seen, x.gap_timeout, "
		"                                 pg_catalog.clock_timestamp()) "
		"ORDER BY x.gap_first_seen",
		2, {INT4OID, INT8OID}
	},
	[PLAN_ADD_ARRIVAL] = {
		"INSERT INTO ordered_events.key_arrivals (stream_id, key, arrived_at) "
		"VALUES ($1, $2, pg_catalog.now())",
		2, {INT4OID, TEXTOID}
	},
	[PLAN_TAKE_AFTER_LAST] = {
		"DELETE FROM ordered_events.event_store "
		"WHERE stream_id = $1 AND lane = $2 AND seq >= $3 "
		"RETURNING seq, key, payload, event_ts, received_at",
		3, {INT4OID, TEXTOID, INT8OID}
	},
};

/*
 * The body of a release step of a global stream (the engine, step.c, holds
 * its lock): walk its one lane; returns the number of events released.
 */
int64
oe_release_global_body(OeStepRun *run, void *arg)
{
	OeLane		lane;
	Snapshot	snapshot = NULL;

	oe_load_lane(&lane, &run->stream, oe_lane_of(&run->stream, NULL), &run->step);

	/*
	 * Walk with a snapshot taken after the lock, so that it sees the
	 * previous step.  A fence read during the walk needs a snapshot taken
	 * after it: walk on once more with a new one.
	 */
	for (int attempt = 0; attempt < 2; attempt++)
	{
		if (snapshot != NULL)
			UnregisterSnapshot(snapshot);
		snapshot = RegisterSnapshot(GetLatestSnapshot());
		lane.gap = false;
		oe_walk_lane(&lane, run->stream.max_release_batch, snapshot);
		if (!(lane.gap && lane.fence_recorded && attempt == 0))
			break;
	}

	oe_add_runs(&lane);
	oe_save_lane(&lane);
	(void) oe_backlog_update(&lane, snapshot);	/* streams_with_work() sees the rest */
	UnregisterSnapshot(snapshot);
	oe_step_notify(run, &lane);
	return lane.released;
}

/*
 * The lane is complete: what waits beyond its last event never will be
 * released.  Move the lane's events from seq "from" on to unprocessed.
 */
static void
reject_after_last(const OeStream *stream, text *key, int64 from)
{
	Datum		values[3] = {Int32GetDatum(stream->stream_id), PointerGetDatum(key),
	Int64GetDatum(from)};
	char	   *detail = psprintf("The last event of this key is seq " INT64_FORMAT ".", from - 1);

	oe_run_plan(&plans[PLAN_TAKE_AFTER_LAST], values, NULL, SPI_OK_DELETE_RETURNING);
	for (uint64 i = 0; i < SPI_processed; i++)
		oe_dead_letter_row(stream->name, i, OE_AFTER_LAST_EVENT, detail);
}

/*
 * Release the lane of one key of a per-key stream in the step, at most
 * "limit" events, walking with "snapshot"; *more is set if it stopped at
 * the limit.  Returns the number released.
 */
int64
oe_release_lane(OeStep *step, text *key, int64 limit, Snapshot snapshot, bool *more)
{
	const OeStream *stream = step->stream;
	OeLane		lane;

	oe_load_lane(&lane, stream, key, step);
	*more = false;
	if (lane.completed)
	{
		/* A seq above the last event whose transaction was open at the time. */
		reject_after_last(stream, key, lane.range_end);
		oe_backlog_forget(&lane);
		return 0;
	}
	oe_walk_lane(&lane, limit, snapshot);
	oe_add_runs(&lane);
	*more = lane.more;
	oe_save_lane(&lane);
	if (lane.last_event)
	{
		reject_after_last(stream, key, lane.range_end);
		oe_backlog_forget(&lane);
	}
	else if (oe_backlog_update(&lane, snapshot))
		*more = true;			/* its summary goes on in the next step */
	return lane.released;
}

/* Visit the key's lane again in the next step (its budget ran out). */
void
oe_note_arrival(const OeStream *stream, text *key)
{
	Datum		values[2] = {Int32GetDatum(stream->stream_id), PointerGetDatum(key)};

	oe_run_plan(&plans[PLAN_ADD_ARRIVAL], values, NULL, SPI_OK_INSERT);
}

/*
 * Run a plan that returns lanes (column 1) and return them as a List of
 * text copies.
 */
static List *
lanes_from(int plan, const OeStream *stream, int64 limit)
{
	Datum		values[2] = {Int32GetDatum(stream->stream_id), Int64GetDatum(limit)};
	List	   *lanes = NIL;

	oe_run_plan(&plans[plan], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		lanes = lappend(lanes, DatumGetTextPCopy(oe_result(i, 1, &isnull)));
	}
	return lanes;
}

/*
 * Release lanes of a per-key stream while the budget lasts; returns the
 * number released so far.
 */
static int64
release_lanes(OeStep *step, List *keys, int64 released)
{
	const OeStream *stream = step->stream;
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ListCell   *lc;

	foreach(lc, keys)
	{
		text	   *key = lfirst(lc);
		bool		more = false;

		if (released < stream->max_release_batch)
			released += oe_release_lane(step, key, stream->max_release_batch - released,
										snapshot, &more);
		else
			more = true;		/* out of budget: look at it next step */
		if (more)
			oe_note_arrival(stream, key);
	}
	UnregisterSnapshot(snapshot);
	return released;
}

/*
 * The body of a release step of a per-key stream.  Visits the lanes whose
 * gap timed out, then takes arrivals, oldest first, until the budget is
 * spent or none are left; each arrival is taken once, so the cost follows
 * the keys that received events.
 */
static int64
release_per_key_body(OeStepRun *run, void *arg)
{
	const OeStream *stream = &run->stream;
	List	   *keys;
	int64		released;

	released = 0;
	if (stream->gap_policy == OE_GAP_TIMEOUT)
		released = release_lanes(&run->step, lanes_from(PLAN_EXPIRED_LANES, stream,
														stream->max_release_batch), 0);
	/* Each snapshot is taken after its arrivals: it sees their events. */
	while (released < stream->max_release_batch &&
		   (keys = lanes_from(PLAN_TAKE_ARRIVALS, stream, stream->max_release_batch)) != NIL)
		released = release_lanes(&run->step, keys, released);
	if (released > 0)
		oe_step_notify(run, NULL);
	return released;
}

/* A release step: settles first; a sharded stream's range is its router's. */
static const OeStepKind global_release = {
	.settle = true, .skip_sharded = true, .body = oe_release_global_body
};
static const OeStepKind per_key_release = {
	.settle = true, .body = release_per_key_body
};

/*
 * One release step for a stream: advance its lanes over the arrived events,
 * at most max_release_batch of them, skip what its gap policy allows, and
 * note the gap where each stops.  Returns the number of events released.
 * Runs in the caller's transaction.
 */
int64
oe_release_stream(const OeStream *stream)
{
	return oe_run_step(stream, stream->per_key ? &per_key_release : &global_release, NULL);
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

	PreventCommandIfReadOnly("release()");
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
