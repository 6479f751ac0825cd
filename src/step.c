/*-------------------------------------------------------------------------
 *
 * step.c
 *	  The step engine: the one skeleton of every step that changes a
 *	  stream's lanes, release() (release.c), release_through() (shard.c),
 *	  skip_gap() (skip_gap.c) and compaction (compaction.c).
 *
 * A step, in the caller's transaction:
 *	1. enters an internal-query scope (internal_query.c);
 *	2. takes the stream's release lock, its stream_def row FOR NO KEY
 *	   UPDATE, and reads the stream's definition again, so that it sees what
 *	   the step before committed (a skip, say);
 *	3. settles the skipped runs a late event may still commit into, if its
 *	   kind asks (gap_policy.c);
 *	4. runs its kind's body, which walks lanes (lane.c) and records the runs
 *	   it releases in the step (delivery.c);
 *	5. logs those runs and adds the step's totals (delivery.c), queues the
 *	   NOTIFY the body asked for, wakes the worker at commit if a consumer
 *	   with a handler got events and the step ran outside it (release() by
 *	   hand, a router's release), and leaves the scope.
 *
 * Concurrency: the lock of 2 serialises the steps of a stream (and makes
 * alter_stream() and drop_stream() wait for one); every walk takes a
 * snapshot after it, so a second step starts where the first ended.  The
 * worker takes the same lock first without waiting (worker.c), then runs
 * the step, which has it at once.  A NOTIFY is delivered at commit.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"

static OePlan lock_plan = {
	"SELECT FROM ordered_events.stream_def WHERE stream_id = $1 FOR NO KEY UPDATE",
	1, {INT4OID}
};

/*
 * Take the stream's release lock, and read its definition again: a skip
 * committed by the step before is seen now.  Returns false if the stream
 * was dropped meanwhile.  Inside an internal-query scope.
 */
bool
oe_lock_stream(OeStream *stream)
{
	Datum		id = Int32GetDatum(stream->stream_id);

	oe_run_plan(&lock_plan, &id, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	AcceptInvalidationMessages();
	return oe_lookup_stream(stream->name, stream);
}

/*
 * Ask for the NOTIFY of a step that moved a lane: '<stream>:<range_end>'
 * for the lane of a global stream, '<stream>' for a per-key one.  Nothing
 * if the lane did not move.
 */
void
oe_step_notify(OeStepRun *run, const OeLane *lane)
{
	if (lane != NULL && lane->range_end == lane->start)
		return;
	if (lane != NULL && !run->stream.per_key)
		run->notify = psprintf("%s:" INT64_FORMAT, run->stream.name, lane->range_end);
	else
		run->notify = pstrdup(run->stream.name);
}

/*
 * Run one step of the given kind on the stream (see the banner); returns
 * what its body returns, 0 if the stream was dropped meanwhile (unless the
 * kind wants that to be an error), or is sharded and the kind skips such
 * streams.  "arg" is handed to the body.
 */
int64
oe_run_step(const OeStream *stream, const OeStepKind *kind, void *arg)
{
	OeStepRun	run;
	OeInternalScope scope;
	int64		result = 0;

	memset(&run, 0, sizeof(run));
	run.stream = *stream;
	oe_internal_begin(&scope, oe_relations()->owner);
	if (!oe_lock_stream(&run.stream))
	{
		if (!kind->must_exist)
		{
			oe_internal_end(&scope);
			return 0;
		}
		/* the error of a stream that is gone; one made again goes on */
		(void) oe_stream_or_error(cstring_to_text(stream->name));
	}
	if (!(kind->skip_sharded && run.stream.sharded))
	{
		if (kind->settle)
			oe_settle_runs(&run.stream);
		oe_step_begin(&run.step, &run.stream);
		result = kind->body(&run, arg);
		oe_step_finish(&run.step);
		if (run.notify != NULL)
			Async_Notify("ordered_events", run.notify);
		/* run by hand or by a router: the worker applies what handlers got, at commit */
		if (run.step.fed_handlers && !IsBackgroundWorker)
			oe_note_events_written();
	}
	oe_internal_end(&scope);
	return result;
}
