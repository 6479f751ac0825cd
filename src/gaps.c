/*-------------------------------------------------------------------------
 *
 * gaps.c
 *	  gaps(stream): the missing runs of each lane, between its released
 *	  part and its highest arrived seq, found by the lane walk that
 *	  releasing and skip_gap() use (lane.c).
 *
 * A global stream has one lane; a per-key stream's lanes are visited in
 * key order, jumping from one to the next in the primary key.  Reads with
 * the statement's snapshot; takes no lock.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

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
		text	   *lane = NULL;

		while ((lane = oe_next_lane(&stream, lane, snapshot)) != NULL)
			lane_gaps(&stream, lane, snapshot, rsinfo);
	}
	oe_internal_end(&scope);
	return (Datum) 0;
}
