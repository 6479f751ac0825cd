/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  A shard's part of a global stream spread over several servers: its
 *	  range is set by a router (docs/sharding.md), never by its own
 *	  release steps.
 *
 * A sharded stream holds the events of the keys that hash to this shard;
 * its seqs are spread over every shard.  The router asks each shard for
 * the runs of seqs it holds (shard_runs(), src/sql/shard.sql), combines
 * them into the global contiguous range, and tells each shard to release
 * its events below the range's end: release_through() here.  A seq this
 * shard does not hold is on another one, not a gap.
 *
 * release_through() is a step of the engine (step.c): it holds the
 * stream's release lock, logs its run for consumers, counts what it
 * released, and notifies at commit.  Calling it again with the same or a lower end
 * releases nothing, so a router may repeat it after a failure.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "miscadmin.h"
#include "utils/snapmgr.h"

/* The body of release_through(): "arg" is the end, exclusive. */
static int64
release_through_body(OeStepRun *run, void *arg)
{
	int64		through = *(const int64 *) arg;
	OeLane		lane;
	Snapshot	snapshot;

	oe_load_lane(&lane, &run->stream, oe_lane_of(&run->stream, NULL), &run->step);
	if (through <= lane.range_end)
		return 0;
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	oe_walk_lane_through(&lane, through, snapshot);
	UnregisterSnapshot(snapshot);
	oe_save_lane(&lane);
	run->notify = psprintf("%s:" INT64_FORMAT, run->stream.name, lane.range_end);
	return lane.released;
}

static const OeStepKind through_step = {.settle = true, .body = release_through_body};

/*
 * release_through(stream text, through_seq bigint) returns bigint
 *
 * Release the sharded stream's events below through_seq (the global range's
 * end, exclusive) and move its range there; returns how many were released.
 */
PG_FUNCTION_INFO_V1(oe_release_through);
Datum
oe_release_through(PG_FUNCTION_ARGS)
{
	OeStream	stream = oe_stream_arg(fcinfo, 0);
	int64		through;
	int64		released;

	oe_check_not_null(fcinfo, 1, "through_seq");
	through = PG_GETARG_INT64(1);
	PreventCommandIfReadOnly("release_through()");
	if (!stream.sharded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is not sharded", stream.name),
				 errhint("Only a global stream made a shard's part with ordered_events.shard_stream() takes its range from a router.")));

	released = oe_run_step(&stream, &through_step, &through);

	/* Handlers may have events to apply now: wake the worker at commit. */
	if (released > 0)
		oe_note_events_written();
	PG_RETURN_INT64(released);
}
