/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  A shard's part of a global stream spread over several servers: its
 *	  range is set by a router (docs/sharding.md), never by its own
 *	  release steps.
 *
 * A sharded stream holds the events of the keys that hash to this shard;
 * its seqs are spread over every shard.  The router asks every shard at
 * once for the seqs of a window it holds (shard_seq_bits(), seq_bits.c: a
 * bitmap), combines them into the global contiguous range, and tells each
 * shard to release its events below the range's end: shard_release() here
 * (release_through() of 0.2, without the range's largest event_ts).  A
 * seq this shard does not hold is on another one, not a gap.
 *
 * The release is a step of the engine (step.c): it holds the stream's
 * release lock, logs its run for consumers, counts what it released, and
 * notifies at commit.  Calling it again with the same or a lower end
 * releases nothing, so a router may repeat it after a failure.
 *
 * check_event_batch() makes the checks ingest() makes of each event's
 * arguments, for a whole batch before any of it is written: on a shard
 * (ingest_array()), and on a router before it sends any shard its part, so
 * that a bad batch is refused everywhere alike and writes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* What a release to a router's end asks and gives back. */
typedef struct ThroughArg
{
	int64		through;		/* the end, exclusive */
	TimestampTz max_event_ts;	/* the lane's largest event_ts released */
	bool		max_event_ts_valid;
} ThroughArg;

/* The body of release_through() and shard_release(). */
static int64
release_through_body(OeStepRun *run, void *arg)
{
	ThroughArg *ta = arg;
	OeLane		lane;
	Snapshot	snapshot;

	oe_load_lane(&lane, &run->stream, oe_lane_of(&run->stream, NULL), &run->step);
	if (ta->through > lane.range_end)
	{
		snapshot = RegisterSnapshot(GetLatestSnapshot());
		oe_walk_lane_through(&lane, ta->through, snapshot);
		UnregisterSnapshot(snapshot);
		oe_save_lane(&lane);
		run->notify = psprintf("%s:" INT64_FORMAT, run->stream.name, lane.range_end);
	}
	ta->max_event_ts = lane.max_event_ts;
	ta->max_event_ts_valid = lane.max_event_ts_valid;
	return lane.released;
}

static const OeStepKind through_step = {.settle = true, .body = release_through_body};

/* Release the sharded stream of argument 0 below argument 1, as the router asks. */
static int64
release_to_router_end(FunctionCallInfo fcinfo, ThroughArg *ta)
{
	OeStream	stream = oe_stream_arg(fcinfo, 0);

	oe_check_not_null(fcinfo, 1, "through_seq");
	ta->through = PG_GETARG_INT64(1);
	ta->max_event_ts_valid = false;
	PreventCommandIfReadOnly("release_through()");
	if (!stream.sharded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is not sharded", stream.name),
				 errhint("Only a global stream made a shard's part with ordered_events.shard_stream() takes its range from a router.")));

	return oe_run_step(&stream, &through_step, ta);
}

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
	ThroughArg	ta;

	PG_RETURN_INT64(release_to_router_end(fcinfo, &ta));
}

/*
 * shard_release(stream text, through_seq bigint,
 *				 OUT released bigint, OUT max_event_ts timestamptz)
 *
 * release_through(), and the largest event_ts the shard's range holds
 * after it (NULL before anything is released): what the router's step
 * needs for the global range's max_event_ts, without reading the events
 * again.
 */
PG_FUNCTION_INFO_V1(oe_shard_release);
Datum
oe_shard_release(PG_FUNCTION_ARGS)
{
	ThroughArg	ta;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "shard_release() must return a record");
	values[0] = Int64GetDatum(release_to_router_end(fcinfo, &ta));
	values[1] = TimestampTzGetDatum(ta.max_event_ts);
	nulls[1] = !ta.max_event_ts_valid;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/* The error for a NULL array of a batch. */
static ArrayType *
batch_array_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	ArrayType  *array;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("Pass one array of seqs, one of keys and one of payloads, an element per event; a payload may be NULL.")));
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name),
				 errdetail("It has %d dimensions.", ARR_NDIM(array)),
				 errhint("Pass an element per event.")));
	return array;
}

/* The error for a NULL seq or key of a batch: event "i", counted from 1. */
static void
error_null_in_batch(const char *name, const char *stream, int i)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("%s must not be null", name),
			 errdetail("Event %d of the batch for stream \"%s\".", i, stream),
			 errhint("Every event needs a stream, a seq and a key.")));
}

/*
 * check_event_batch(stream text, seqs bigint[], keys text[], payloads jsonb[])
 *		returns void
 *
 * Fail unless every event of the batch would pass ingest()'s checks of its
 * arguments: three one-dimensional arrays of the same length, no NULL seq
 * or key, no key over the limit (a payload may be NULL).  Looks nothing
 * up: the stream is checked where it lives.  Reads and writes nothing.
 */
PG_FUNCTION_INFO_V1(oe_check_event_batch);
Datum
oe_check_event_batch(PG_FUNCTION_ARGS)
{
	ArrayType  *seqs;
	ArrayType  *keys;
	ArrayType  *payloads;
	char	   *stream;
	int			n;
	Datum	   *seq_values;
	bool	   *seq_nulls;
	Datum	   *key_values;
	bool	   *key_nulls;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream must not be null"),
				 errhint("Every event needs a stream, a seq and a key.")));
	stream = text_to_cstring(PG_GETARG_TEXT_PP(0));
	seqs = batch_array_arg(fcinfo, 1, "seqs");
	keys = batch_array_arg(fcinfo, 2, "keys");
	payloads = batch_array_arg(fcinfo, 3, "payloads");

	n = ArrayGetNItems(ARR_NDIM(seqs), ARR_DIMS(seqs));
	if (ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys)) != n ||
		ArrayGetNItems(ARR_NDIM(payloads), ARR_DIMS(payloads)) != n)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("seqs, keys and payloads must have the same length"),
				 errdetail("seqs has %d elements, keys %d, payloads %d.", n,
						   ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys)),
						   ArrayGetNItems(ARR_NDIM(payloads), ARR_DIMS(payloads))),
				 errhint("Pass one seq, one key and one payload (or NULL) per event.")));

	deconstruct_array(seqs, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &seq_values, &seq_nulls, &n);
	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT, &key_values, &key_nulls, &n);
	for (int i = 0; i < n; i++)
	{
		int64		seq;

		if (seq_nulls[i])
			error_null_in_batch("seq", stream, i + 1);
		if (key_nulls[i])
			error_null_in_batch("key", stream, i + 1);
		seq = DatumGetInt64(seq_values[i]);
		oe_check_key_of(stream, (text *) DatumGetPointer(key_values[i]), &seq);
	}
	PG_RETURN_VOID();
}
