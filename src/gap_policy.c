/*-------------------------------------------------------------------------
 *
 * gap_policy.c
 *	  When a gap may be skipped: the stream's gap policy ('wait', 'timeout',
 *	  'fence'), and settling the skipped runs that a late event may still
 *	  commit into.
 *
 * 'timeout' skips a gap once it has been missing for gap_timeout since a
 * step first saw it (progress.gap_first_seen): oe_gap_expired(), the one
 * home of that test, which SQL calls as ordered_events.gap_expired().
 * 'fence' skips it once every transaction that could still fill it has
 * ended, whatever other transactions are open.
 *
 * The fence.  append() (oe_append_event()) takes, in this order, the
 * stream's fence lock (ShareLock on an advisory tag of (database,
 * stream_id), for its (sub)transaction), the top-level xid, and only then a
 * seq (nextval, CACHE 1).  When a step first sees a gap it reads the last
 * allocated seq L, then the next xid X, and stores both (progress.fence_seq,
 * fence_xid); it walks again with a snapshot S taken after that, and every
 * later step walks with a newer one.  A missing seq s <= L is skipped when,
 * for every xid x below X that S does not show as finished (S's xip, and
 * S's xmax up to X), except our own:
 *   1. H: the top-level xids of the fence lock's holders, read now
 *	    (GetLockConflicts(); each VXID's PGPROC, its xid, then its lxid
 *	    again: a PGPROC that moved on to another transaction is dropped);
 *   2. P: x is prepared, or being prepared, here (a dummy PGPROC of
 *	    PreparedXactProcs has xid x): GetLockConflicts() cannot name those;
 *   3. if x is still in progress, it blocks only if it is in H or P;
 *	    otherwise it blocks if it committed (S does not show its rows yet:
 *	    a later step with a newer snapshot decides), not if it aborted.
 * Proof.  Let T hold s, alive (the (sub)transaction that took it did not
 * abort), with S not showing it committed.  T took s before L was read, so
 * its xid came before X was read: x < X, and S does not show x finished.
 * If x is not in progress at 3, T ended; it committed (else s is dead), so
 * x blocks.  If it is, T ran all along since 1; the lock was taken before
 * the seq, and only the end of the top-level transaction or the abort of
 * the subtransaction that holds it (then s is dead) releases it, so T held
 * it at 1: on its own PGPROC, whose xid was x when read (then x is in H),
 * unless T was preparing; or on its dummy PGPROC once prepared.  Preparing
 * sets the dummy's xid before the locks move and before the backend's xid
 * is cleared, and the dummy keeps it until T ends, so then x is in P.
 * Either way x blocks.  Seqs above L are never skipped by this fence: a
 * later fence covers them.  Only a transaction that appended holds the
 * lock, so an unrelated open transaction, of this database or another,
 * blocks nothing; a holder that took its xid before X but its seqs after L
 * does block (conservatively) until it ends.  After a crash restart every
 * transaction from before it has ended, aborted unless its commit record
 * survived, and none holds a lock, except prepared ones, which are in P.
 * The order of the lock and the xid does not matter; both precede the seq.
 * ingest() and the inbox are refused on fence streams, and no stream
 * becomes one later, so append() writes every event of a fence stream.
 *
 * An event whose transaction was open while its seq was skipped may commit
 * afterwards.  The views never release it; settling moves it to
 * unprocessed: a run gets settle_xid (the next xid) from the first step
 * after the skip committed, and once no xid below it runs (possibly in that
 * same step), no transaction that missed the skip can still add to the run.
 * Later arrivals are rejected at ingest (the stream cache knows the highest
 * skipped seq).  Settling keeps to xids (no_xid_below()), not the fence
 * lock: ingest() on other streams settles too and takes no such lock, and
 * a late event only waits in pending meanwhile; it never delays a release.
 *
 * Stored xids (fence_xid, settle_xid) are of the cluster that stored them:
 * after a dump is restored into another cluster they may lie beyond its
 * xid counter; such an xid is read anew, which is always safe.
 *
 * The caller holds the stream's release lock and runs inside an
 * internal-query scope.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/transam.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/sinvaladt.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

enum
{
	PLAN_FENCE_SEQ,
	PLAN_UNSETTLED,
	PLAN_TAKE_LATE,
	PLAN_SETTLE_MARK
};

static OePlan plans[] = {
	[PLAN_FENCE_SEQ] = {
		"SELECT pg_catalog.pg_sequence_last_value($1)",
		1, {REGCLASSOID}
	},
	[PLAN_UNSETTLED] = {
		"SELECT ctid, lane, gap_start, gap_end, settle_xid::text::bigint, xmin "
		"FROM ordered_events.gap_skips WHERE stream_id = $1 AND NOT settled",
		1, {INT4OID}
	},
	[PLAN_TAKE_LATE] = {
		"DELETE FROM ordered_events.event_store "
		"WHERE stream_id = $1 AND lane = $2 AND seq BETWEEN $3 AND $4 "
		"RETURNING seq, key, payload, event_ts, received_at",
		4, {INT4OID, TEXTOID, INT8OID, INT8OID}
	},
	[PLAN_SETTLE_MARK] = {
		"UPDATE ordered_events.gap_skips SET settle_xid = $2::text::xid8, settled = $3 "
		"WHERE ctid = $1",
		3, {TIDOID, TEXTOID, BOOLOID}
	},
};

/*
 * True if a transaction running in the snapshot may have written to this
 * database: it runs here, or it cannot be told (it ended since, or it is a
 * prepared transaction).
 */
static bool
may_write_here(TransactionId xid)
{
	int			pid = BackendXidGetPid(xid);
	PGPROC	   *proc = pid != 0 ? BackendPidGetProc(pid) : NULL;

	return proc == NULL || proc->databaseId == MyDatabaseId;
}

/*
 * True if every transaction but ours with an xid below "xid" that may have
 * written here has ended, and the snapshot sees the ones that committed.  A
 * snapshot lists the xids running below its xmax; an xid from its xmax on
 * is invisible to it, so each of those must have rolled back (or died in a
 * crash).  There are only as many as were assigned since the last commit;
 * if there are very many, a later step will know.
 */
static bool
no_xid_below(Snapshot snapshot, FullTransactionId xid)
{
	TransactionId limit = XidFromFullTransactionId(xid);
	int			asked = 0;

	for (uint32 i = 0; i < snapshot->xcnt; i++)
		if (TransactionIdPrecedes(snapshot->xip[i], limit) &&
			!TransactionIdIsCurrentTransactionId(snapshot->xip[i]) &&
			may_write_here(snapshot->xip[i]))
			return false;

	for (TransactionId x = snapshot->xmax; TransactionIdPrecedes(x, limit);)
	{
		if (!TransactionIdIsCurrentTransactionId(x) &&
			(++asked > 1000 || TransactionIdIsInProgress(x) || TransactionIdDidCommit(x)))
			return false;
		TransactionIdAdvance(x);
	}
	return true;
}

/*
 * field4 of the fence lock's advisory tag: the advisory locks of SQL use 1
 * and 2, so no pg_advisory_lock() call can take or release this one.
 */
#define FENCE_LOCK_FIELD4	0x4F45

static void
fence_lock_tag(LOCKTAG *tag, int32 stream_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) stream_id, 0, FENCE_LOCK_FIELD4);
}

/*
 * Take the fence lock of a fence stream for the current (sub)transaction,
 * before taking a seq of it (see the banner).  ShareLock: appenders never
 * wait for each other; nobody asks for a mode that conflicts, the fence
 * only lists the holders.  A subtransaction's abort releases it, its commit
 * passes it to the parent; the top-level transaction's end releases it.
 */
void
oe_fence_lock(const OeStream *stream)
{
	LOCKTAG		tag;

	fence_lock_tag(&tag, stream->stream_id);
	(void) LockAcquire(&tag, ShareLock, false, false);
}

/*
 * The top-level xids of the other transactions that hold the stream's fence
 * lock now, into *xids; returns how many.  A prepared transaction may be
 * missing (see the banner).
 */
static int
fence_holders(int32 stream_id, TransactionId **xids)
{
	LOCKTAG		tag;
	VirtualTransactionId *vxids;
	int			count;
	int			n = 0;

	fence_lock_tag(&tag, stream_id);
	vxids = GetLockConflicts(&tag, ExclusiveLock, &count);
	*xids = palloc(sizeof(TransactionId) * Max(count, 1));
	for (int i = 0; i < count; i++)
	{
		PGPROC	   *proc = BackendIdGetProc(vxids[i].backendId);
		TransactionId xid;

		if (proc == NULL)
			continue;			/* its backend exited: the transaction ended */
		xid = proc->xid;
		/* the xid of the same transaction as the VXID, or it ended */
		pg_read_barrier();
		if (proc->lxid == vxids[i].localTransactionId && TransactionIdIsValid(xid))
			(*xids)[n++] = xid;
	}
	pfree(vxids);
	return n;
}

/*
 * True if "xid" is that of a prepared transaction of this database, or of
 * one being prepared: a dummy PGPROC has it from the start of PREPARE until
 * the transaction ends.
 */
static bool
prepared_here(TransactionId xid)
{
	bool		found = false;

	if (max_prepared_xacts == 0)
		return false;
	LWLockAcquire(TwoPhaseStateLock, LW_SHARED);
	for (int i = 0; i < max_prepared_xacts && !found; i++)
		found = PreparedXactProcs[i].xid == xid &&
			PreparedXactProcs[i].databaseId == MyDatabaseId;
	LWLockRelease(TwoPhaseStateLock);
	return found;
}

/*
 * True if the xid blocks the fence (steps 2 and 3 of the banner, in this
 * order; "holders" from step 1, taken before).
 */
static bool
blocks_fence(TransactionId xid, const TransactionId *holders, int nholders)
{
	bool		held = false;

	if (TransactionIdIsCurrentTransactionId(xid))
		return false;
	for (int i = 0; i < nholders && !held; i++)
		held = TransactionIdEquals(holders[i], xid);
	if (!held)
		held = prepared_here(xid);
	if (TransactionIdIsInProgress(xid))
		return held;
	return TransactionIdDidCommit(xid);
}

/*
 * True if no xid below the lane's fence_xid can still hold a missing seq
 * <= its fence_seq that "snapshot" does not show (see the banner).  As in
 * no_xid_below(), if very many xids from the snapshot's xmax on are to be
 * asked about, a later step will know.
 */
static bool
fence_passed(const OeLane *lane, Snapshot snapshot)
{
	TransactionId limit = XidFromFullTransactionId(lane->fence_xid);
	TransactionId *holders;
	int			nholders = fence_holders(lane->stream->stream_id, &holders);
	int			asked = 0;
	bool		passed = true;

	for (uint32 i = 0; i < snapshot->xcnt && passed; i++)
		if (TransactionIdPrecedes(snapshot->xip[i], limit))
			passed = !blocks_fence(snapshot->xip[i], holders, nholders);

	for (TransactionId x = snapshot->xmax; TransactionIdPrecedes(x, limit) && passed;)
	{
		passed = ++asked <= 1000 && !blocks_fence(x, holders, nholders);
		TransactionIdAdvance(x);
	}
	pfree(holders);
	return passed;
}

/*
 * A stored xid into *xid; false if it is NULL or not of this cluster (its
 * counter has not reached it: see the banner).
 */
bool
oe_stored_xid(Datum value, bool isnull, FullTransactionId *xid)
{
	if (isnull)
		return false;
	*xid = FullTransactionIdFromU64(DatumGetInt64(value));
	return !FullTransactionIdFollows(*xid, ReadNextFullTransactionId());
}

/*
 * True if a gap first seen at "first_seen" has timed out at "now": the one
 * test of gap_timeout, first_seen + gap_timeout <= now, in the session's
 * time zone as timestamptz + interval is (a month is a calendar month, a
 * day a calendar day).  first_seen <= now - gap_timeout is not the same
 * test: from 31 January, one month has passed on 28 February by this one,
 * on 1 March by that one.
 */
bool
oe_gap_expired(TimestampTz first_seen, Interval *gap_timeout, TimestampTz now)
{
	Datum		expires = DirectFunctionCall2(timestamptz_pl_interval,
											  TimestampTzGetDatum(first_seen),
											  PointerGetDatum(gap_timeout));

	return DatumGetTimestampTz(expires) <= now;
}

/*
 * gap_expired(first_seen timestamptz, gap_timeout interval, at timestamptz)
 * returns boolean: oe_gap_expired() for SQL (STRICT).
 */
PG_FUNCTION_INFO_V1(oe_gap_expired_sql);
Datum
oe_gap_expired_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(oe_gap_expired(PG_GETARG_TIMESTAMPTZ(0), PG_GETARG_INTERVAL_P(1),
								  PG_GETARG_TIMESTAMPTZ(2)));
}

/*
 * The lane is stopped at a gap range_end..gap_end (gap_end+1 has arrived, or
 * starts a skipped run).  If its policy may skip it now, return the last seq
 * to skip and set *reason; otherwise return PG_INT64_MIN.  A fence stream's
 * first look at a gap reads the fence (the caller walks again with a
 * snapshot taken after it).
 */
int64
oe_policy_skip_end(OeLane *lane, int64 gap_end, Snapshot snapshot, const char **reason)
{
	switch (lane->stream->gap_policy)
	{
		case OE_GAP_WAIT:
			break;

		case OE_GAP_TIMEOUT:
			if (lane->seen_gap_expired &&
				lane->range_end >= lane->seen_gap && lane->range_end <= lane->seen_gap_end)
			{
				*reason = "gap_timeout expired";
				return gap_end;
			}
			break;

		case OE_GAP_FENCE:
			if (lane->has_fence && lane->fence_seq >= lane->range_end)
			{
				if (fence_passed(lane, snapshot))
				{
					*reason = "fence: every transaction that could fill it has ended";
					return Min(gap_end, lane->fence_seq);
				}
			}
			else
			{
				Datum		seq = ObjectIdGetDatum(lane->stream->fence_seq);
				bool		isnull;
				Datum		last;

				/* The last allocated seq first, then the next xid: see the banner. */
				oe_run_plan(&plans[PLAN_FENCE_SEQ], &seq, NULL, SPI_OK_SELECT);
				last = oe_result(0, 1, &isnull);
				lane->fence_seq = isnull ? lane->stream->initial_sequence - 1 : DatumGetInt64(last);
				lane->fence_xid = ReadNextFullTransactionId();
				lane->has_fence = true;
				lane->fence_recorded = true;
			}
			break;
	}
	return PG_INT64_MIN;
}

/*
 * Settle the stream's skipped runs that a transaction open at the skip may
 * still have written into; see the banner.  A run gets its settle_xid from
 * the first step of another transaction after the skip (the skip has sent
 * its invalidations by then), and is settled as soon as no transaction
 * older than that runs.
 */
void
oe_settle_runs(const OeStream *stream)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	FullTransactionId next_xid;
	Snapshot	snapshot;
	SPITupleTable *runs;
	uint64		nruns;

	oe_run_plan(&plans[PLAN_UNSETTLED], &id, NULL, SPI_OK_SELECT);
	runs = SPI_tuptable;
	nruns = SPI_processed;
	if (nruns == 0)
		return;

	/* The next xid first, then the snapshot that must not show older ones. */
	next_xid = ReadNextFullTransactionId();
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	for (uint64 i = 0; i < nruns; i++)
	{
		HeapTuple	row = runs->vals[i];
		TupleDesc	desc = runs->tupdesc;
		bool		isnull;
		Datum		values[4];
		Datum		settle;
		FullTransactionId settle_xid;
		bool		first_look;
		bool		settled;

		if (TransactionIdIsCurrentTransactionId(DatumGetTransactionId(SPI_getbinval(row, desc, 6,
																					&isnull))))
			continue;			/* skipped by this transaction: not yet */

		settle = SPI_getbinval(row, desc, 5, &isnull);
		first_look = !oe_stored_xid(settle, isnull, &settle_xid);
		if (first_look)
			settle_xid = next_xid;
		settled = no_xid_below(snapshot, settle_xid);
		if (settled)
		{
			values[0] = id;
			values[1] = SPI_getbinval(row, desc, 2, &isnull);	/* lane */
			values[2] = SPI_getbinval(row, desc, 3, &isnull);
			values[3] = SPI_getbinval(row, desc, 4, &isnull);
			oe_run_plan(&plans[PLAN_TAKE_LATE], values, NULL, SPI_OK_DELETE_RETURNING);
			for (uint64 late = 0; late < SPI_processed; late++)
				oe_dead_letter_row(stream->name, late, OE_GAP_SKIPPED, NULL);
		}
		if (!settled && !first_look)
			continue;			/* nothing new to note */
		values[0] = SPI_getbinval(row, desc, 1, &isnull);	/* ctid */
		values[1] = CStringGetTextDatum(psprintf(UINT64_FORMAT,
												 U64FromFullTransactionId(settle_xid)));
		values[2] = BoolGetDatum(settled);
		oe_run_plan(&plans[PLAN_SETTLE_MARK], values, NULL, SPI_OK_UPDATE);
	}
	UnregisterSnapshot(snapshot);
	SPI_freetuptable(runs);
}
