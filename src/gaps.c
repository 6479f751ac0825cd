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

	stream = oe_stream_arg(fcinfo, 0);

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	oe_internal_begin(&scope, oe_relations()->owner);
	if (!stream.per_key)
		lane_gaps(&stream, oe_lane_of(&stream, NULL), snapshot, rsinfo);
	else
	{
		Datum		id = Int32GetDatum(stream.stream_id);
		SPITupleTable *lanes;
		uint64		nlanes;

		oe_run_plan_snapshot(&candidate_lanes_plan, &id, NULL, snapshot);
		lanes = SPI_tuptable;
		nlanes = SPI_processed;
		for (uint64 i = 0; i < nlanes; i++)
		{
			bool		isnull;

			lane_gaps(&stream,
					  DatumGetTextPP(SPI_getbinval(lanes->vals[i], lanes->tupdesc, 1, &isnull)),
					  snapshot, rsinfo);
		}
	}
	oe_internal_end(&scope);
	return (Datum) 0;
}
