/*-------------------------------------------------------------------------
 *
 * skip_gap.c
 *	  skip_gap(): the operator's override that declares missing seqs lost,
 *	  records them in the skip ledger and releases what that unblocks.
 *
 * The missing seqs are the holes of the lane (lane.c), also those after
 * the last arrived seq.  An event whose transaction is open at the skip and
 * commits into a skipped run later is settled by a later release step
 * (gap_policy.c).  A step of the engine (step.c): under the stream's
 * release lock, in the caller's transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"

/* append() must not hand out a seq that is now skipped. */
static OePlan move_fence_seq = {
	"SELECT pg_catalog.setval($1, $2) "
	"WHERE $2 > coalesce(pg_catalog.pg_sequence_last_value($1), $2 - 1)",
	2, {REGCLASSOID, INT8OID}
};

/* oe_lane_holes() callback: declare a hole lost, with the call's reason. */
static void
declare_lost(OeLane *lane, int64 start, int64 end, void *reason)
{
	OeSkipRun  *run = palloc0(sizeof(OeSkipRun));
	int64		count;

	/* skip_gap() returns the count: it must fit a bigint. */
	if (pg_sub_s64_overflow(end, start, &count) || pg_add_s64_overflow(count, 1, &count) ||
		pg_add_s64_overflow(lane->skipped, count, &lane->skipped))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("cannot skip more than %lld seqs in one call", (long long) PG_INT64_MAX),
				 errhint("Skip in two calls, through a seq in between first.")));
	run->start = start;
	run->end = end;
	run->reason = reason;
	lane->new_runs = lappend(lane->new_runs, run);
}

/* skip_gap() needs a stream, a through_seq and a reason. */
static void
check_null_arguments(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(0) ? "stream" : "through_seq"),
				 errhint("skip_gap(stream, through_seq, reason) skips every missing seq up to through_seq.")));
	if (PG_ARGISNULL(2) || VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(2)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("reason must not be empty"),
				 errhint("Say why the seqs are lost; skipped_gaps keeps the reason.")));
}

/* The lane skip_gap() names: the key's for a per-key stream, else the one. */
static text *
lane_argument(const OeStream *stream, text *key)
{
	if (key != NULL)
		oe_check_key(stream, key, NULL);
	if (stream->per_key && key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("key must not be null for per-key stream \"%s\"", stream->name),
				 errhint("Name the key whose gap to skip: skip_gap(stream, through_seq, reason, key).")));
	if (!stream->per_key && key != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key is only valid for per-key streams"),
				 errdetail("Stream \"%s\" has global sequencing.", stream->name),
				 errhint("Leave key NULL: a global stream has one sequence.")));
	return oe_lane_of(stream, key);
}

/* What skip_gap() asks its step for. */
typedef struct SkipRequest
{
	text	   *lane_key;
	int64		through;
	char	   *reason;
} SkipRequest;

/*
 * Release what the skip unblocks in the same step, which sees the new runs.
 * A global stream's step reads its definition again and settles, as a
 * release step does; a per-key stream's walks the one lane.
 */
static void
release_after_skip(OeStepRun *run, const SkipRequest *req)
{
	run->stream.skipped_through = Max(run->stream.skipped_through, req->through);
	if (run->stream.per_key)
	{
		Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
		bool		more;

		(void) oe_release_lane(&run->step, req->lane_key, run->stream.max_release_batch,
							   snapshot, &more);
		UnregisterSnapshot(snapshot);
		if (more)
			oe_note_arrival(&run->stream, req->lane_key);
	}
	else if (oe_lock_stream(&run->stream) && !run->stream.sharded)
	{
		oe_settle_runs(&run->stream);
		(void) oe_release_global_body(run, NULL);
	}
}

/*
 * The body of skip_gap()'s step: declare the lane's holes through
 * req->through lost, keep append() from handing out a skipped seq, and
 * release what that unblocks.  Returns the number of seqs skipped.
 */
static int64
skip_body(OeStepRun *run, void *arg)
{
	const SkipRequest *req = arg;
	OeLane		lane;
	Snapshot	snapshot;

	oe_load_lane(&lane, &run->stream, req->lane_key, NULL);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	oe_lane_holes(&lane, snapshot, req->through, true, declare_lost, req->reason);
	UnregisterSnapshot(snapshot);
	oe_add_runs(&lane);

	if (run->stream.gap_policy == OE_GAP_FENCE && lane.skipped > 0)
	{
		Datum		values[2] = {ObjectIdGetDatum(run->stream.fence_seq),
		Int64GetDatum(req->through)};

		oe_run_plan(&move_fence_seq, values, NULL, SPI_OK_SELECT);
	}
	release_after_skip(run, req);
	return lane.skipped;
}

static const OeStepKind skip_step = {.must_exist = true, .body = skip_body};

/*
 * skip_gap(stream, through_seq, reason, key DEFAULT NULL) returns bigint
 *
 * Every missing seq of the stream (or of the key of a per-key stream) up to
 * through_seq is declared lost and recorded in the ledger; then a release
 * step releases what that unblocks.  Returns the number of seqs skipped.
 */
PG_FUNCTION_INFO_V1(oe_skip_gap);
Datum
oe_skip_gap(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	SkipRequest req;

	check_null_arguments(fcinfo);
	PreventCommandIfReadOnly("skip_gap()");
	stream = oe_stream_or_error(PG_GETARG_TEXT_PP(0));
	oe_check_owner(GetUserId(), stream.owner, "stream", stream.name);
	if (stream.sharded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is sharded", stream.name),
				 errhint("Its other seqs are on other shards: skip on the router, with ordered_events_router.skip_gap().")));
	req.lane_key = lane_argument(&stream, PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3));
	req.through = PG_GETARG_INT64(1);
	if (req.through == PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("through_seq must be below 9223372036854775807"),
				 errhint("That seq has no successor, so no event can follow it.")));
	req.reason = text_to_cstring(PG_GETARG_TEXT_PP(2));

	PG_RETURN_INT64(oe_run_step(&stream, &skip_step, &req));
}
