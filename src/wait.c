/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Waiting reads: a reader that found nothing unread sleeps until a
 *	  transaction that released events commits, woken by that commit.
 *
 * Shared memory holds, per wait channel (a consumer of a database hashes
 * to one of OE_WAIT_CHANNELS), a generation number and a condition
 * variable.  A transaction whose release steps gave consumers events
 * (delivery.c calls oe_note_released() for each) increments their
 * channels' generations and broadcasts when it commits: after the commit
 * is visible to new snapshots, so a reader that read the generation before
 * its snapshot either saw the events or sees the generation move.
 *
 * The contract, for every waiting reader (read(), receive()):
 *
 *	for (;;)
 *	{
 *		uint64 seen = oe_release_generation(consumer_id);
 *		... look for events with a new snapshot ...
 *		if (found something || !oe_wait_for_release(consumer_id, seen, deadline))
 *			break;
 *	}
 *
 * oe_wait_for_release() returns true when a release for the channel
 * committed since "seen" (look again), false at the deadline.  The sleep
 * honours interrupts (a cancel, statement_timeout).  A wake-up is for
 * every reader of the channel: each looks again (an index probe per
 * subscribed stream when its partition got nothing), so the readers of
 * other partitions, and of consumers that share the channel, wake in vain.
 *
 * Without shared_preload_libraries there is no shared memory and nothing
 * to wake a reader: oe_wait_deadline() refuses a wait.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* The channels this transaction released events for: woken at commit. */
static uint64 channels_released = 0;

StaticAssertDecl(OE_WAIT_CHANNELS <= 64, "a channel is a bit of channels_released");

static int
channel_of(int32 consumer_id)
{
	return (int) (hash_combine(MyDatabaseId, (uint32) consumer_id) % OE_WAIT_CHANNELS);
}

/* Initialise the channels (shmem.c, at shared memory startup). */
void
oe_wait_shmem_init(OeShared *shared)
{
	for (int i = 0; i < OE_WAIT_CHANNELS; i++)
	{
		pg_atomic_init_u64(&shared->wait[i].generation, 0);
		ConditionVariableInit(&shared->wait[i].released);
	}
}

/* Note that the current transaction released events for a consumer. */
void
oe_note_released(int32 consumer_id)
{
	channels_released |= UINT64CONST(1) << channel_of(consumer_id);
}

/* Transaction callback: wake the readers when a transaction that released commits. */
static void
wake_readers_at_commit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && channels_released != 0 && oe_shared != NULL)
	{
		for (int i = 0; i < OE_WAIT_CHANNELS; i++)
		{
			if ((channels_released & (UINT64CONST(1) << i)) == 0)
				continue;
			pg_atomic_fetch_add_u64(&oe_shared->wait[i].generation, 1);
			ConditionVariableBroadcast(&oe_shared->wait[i].released);
		}
	}
	if (oe_xact_ended(event))
		channels_released = 0;
}

/* Called from _PG_init. */
void
oe_wait_init(void)
{
	RegisterXactCallback(wake_readers_at_commit, NULL);
}

/*
 * The deadline of a read that may wait "wait" (0: it does not wait), or
 * the error: a wait is 0 to OE_MAX_WAIT_SECS, and needs the shared memory
 * of a preloaded library and a snapshot per look (READ COMMITTED).
 */
TimestampTz
oe_wait_deadline(const Interval *wait, const char *function)
{
	int64		wait_us = 0;

	if (wait->month == 0 && wait->day >= 0 && wait->day <= 1)
		wait_us = wait->day * USECS_PER_DAY + wait->time;
	if (wait->month != 0 || wait->day < 0 || wait->day > 1 ||
		wait_us < 0 || wait_us > OE_MAX_WAIT_SECS * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for wait: %s",
						DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(wait)))),
				 errhint("Use an interval from 0 to 1 hour: how long %s waits for events.",
						 function)));
	if (wait_us == 0)
		return 0;
	if (oe_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s cannot wait: ordered_events is not in shared_preload_libraries",
						function),
				 errhint("Add ordered_events to shared_preload_libraries and restart the "
						 "server, or call it with wait => '0 s'.")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s cannot wait in a %s transaction", function,
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot would never see the events released meanwhile."),
				 errhint("Wait in a READ COMMITTED transaction, or call it with wait => '0 s'.")));
	return GetCurrentTimestamp() + wait_us;
}

/* The generation of a consumer's channel, read before a look for events. */
uint64
oe_release_generation(int32 consumer_id)
{
	return oe_shared != NULL ?
		pg_atomic_read_u64(&oe_shared->wait[channel_of(consumer_id)].generation) : 0;
}

/*
 * Sleep until a release commits after generation "seen" (true: look
 * again) or until the deadline (false).
 */
bool
oe_wait_for_release(int32 consumer_id, uint64 seen, TimestampTz deadline)
{
	OeWaitChannel *channel = &oe_shared->wait[channel_of(consumer_id)];
	bool		released = false;

	ConditionVariablePrepareToSleep(&channel->released);
	for (;;)
	{
		long		secs;
		int			usecs;

		if (pg_atomic_read_u64(&channel->generation) != seen)
		{
			released = true;
			break;
		}
		TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
		if (secs == 0 && usecs == 0)
			break;
		(void) ConditionVariableTimedSleep(&channel->released,
										   secs * 1000 + (usecs + 999) / 1000,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return released;
}
