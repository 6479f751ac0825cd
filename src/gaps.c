/*-------------------------------------------------------------------------
 *
 * gaps.c
 *	  gaps(stream): the missing runs of each lane, between its released
 *	  part and its highest arrived seq, found by the lane walk that
 *	  releasing and skip_gap() use (lane.c).
 *
 * A global stream has one lane.  Of a per-key stream only the lanes that
 * can have a gap are walked, in key order: those where a release step saw
 * one (progress.gap_start, by a partial index) and those with events that
 * no step has looked at yet (key_arrivals).  A step that leaves a lane with
 * a missing seq records it, so the other lanes have none, and gaps() costs
 * what it finds, not the stream's keys.  Reads with the statement's
 * snapshot; takes no lock.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

static OePlan candidate_lanes_plan = {
	"SELECT lane FROM ordered_events.progress WHERE stream_id = $1 AND gap_start IS NOT NULL "
	"UNION "
	"SELECT key FROM ordered_events.key_arrivals WHERE stream_id = $1 "
	"ORDER BY 1",
	1, {INT4OID}
};

/* oe_lane_holes() callback: one row (key, gap_start, gap_end, first_seen). */
static void
emit_gap(OeLane *lane, int64 start, int64 end, void *arg)
{
	ReturnSetInfo *rsinfo = arg;
	Datum		values[4];
	bool		nulls[4] = {0};

	values[0] = PointerGetDatum(lane->lane);
	nulls[0] = !lane->stream->per_key;
	values[1] = Int64GetDatum(start);
	values[2] = Int64GetDatum(end);
	values[3] = TimestampTzGetDatum(lane->seen_gap_at);
	nulls[3] = (start != lane->seen_gap);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* The gaps of one lane, as rows of the result. */
static void
lane_gaps(const OeStream *stream, text *lane_key, Snapshot snapshot, ReturnSetInfo *rsinfo)
{
	OeLane		lane;

	oe_load_lane(&lane, stream, lane_key, NULL);
	oe_lane_holes(&lane, snapshot, PG_INT64_MAX, false, emit_gap, rsinfo);
}

/*
 * The lanes of a stream that can have events waiting, in key order: a
 * global stream's one lane; of a per-key stream those where a release step
 * saw a gap and those with events no step has looked at (see the banner),
 * as text copies.  Inside an internal-query scope.
 */
List *
oe_waiting_lanes(const OeStream *stream, Snapshot snapshot)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	List	   *lanes = NIL;

	if (!stream->per_key)
		return list_make1(oe_lane_of(stream, NULL));
	oe_run_plan_snapshot(&candidate_lanes_plan, &id, NULL, snapshot);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		lanes = lappend(lanes, DatumGetTextPCopy(oe_result(i, 1, &isnull)));
	}
	return lanes;
}

/*
 * gaps(stream text) returns table (key text, gap_start bigint, gap_end
 * bigint, first_seen timestamptz)
 */
PG_FUNCTION_INFO_V1(oe_gaps);
Datum
oe_gaps(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	ReturnSetInfo *rsinfo;
	Snapshot	snapshot = GetActiveSnapshot();
	OeInternalScope scope;
	ListCell   *lc;

	stream = oe_stream_arg(fcinfo, 0);

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	oe_internal_begin(&scope, oe_relations()->owner);
	foreach(lc, oe_waiting_lanes(&stream, snapshot))
		lane_gaps(&stream, lfirst(lc), snapshot, rsinfo);
	oe_internal_end(&scope);
	return (Datum) 0;
}
