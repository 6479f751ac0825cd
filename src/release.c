/*-------------------------------------------------------------------------
 *
 * release.c
 *	  Advancing the contiguous ranges of a stream over the events that
 *	  arrived, and over the gaps its policy or an operator skips.
 *
 * Releasing moves no rows: an event is released exactly when its seq is
 * below its sequence's range_end (the stream's, in stream_progress, for a
 * global stream; its key's, in key_progress, for a per-key stream).  Each
 * sequence is a "lane".  A release step walks the lane's primary key from
 * range_end, counting consecutive seqs until the first missing one or
 * max_release_batch, then stores the new range_end.  Its cost is
 * proportional to the events it releases, never to the backlog beyond the
 * gap.  A per-key step looks only at the keys that received events since the
 * last step (key_arrivals), so its cost does not grow with idle keys.
 *
 * Skips: the walk passes over the runs recorded in the skip ledger
 * (gap_skips), and records new ones when the gap policy allows: 'timeout'
 * once the gap has been missing for gap_timeout since a step first saw it;
 * 'fence' once every transaction that could still fill it has ended.  The
 * fence is sound because append() gives its transaction an xid before it
 * takes a seq: when a step first sees the gap it reads the last allocated
 * seq L, then the next xid X; a transaction holding a seq <= L has an xid
 * below X, so once no xid below X runs, every seq <= L that is still missing
 * never will arrive.
 *
 * An event whose transaction was open while its seq was skipped may commit
 * afterwards.  The views never release it; "settling" moves it to
 * unprocessed: a run gets settle_xid (the next xid) from the first step
 * after the skip committed, and once no xid below it runs (possibly in that
 * same step), no transaction that missed the skip can still add to the run.  Later arrivals are
 * rejected at ingest (the stream cache knows the highest skipped seq).
 *
 * Concurrency: a step first locks the stream's stream_progress row, then
 * takes a fresh snapshot for the walks, so two concurrent steps run one
 * after the other and the second starts where the first ended.  The walk
 * sees only committed events (and the caller's own): an event whose
 * transaction is still open is a gap until it commits, so a later seq that
 * committed first waits for it.
 *
 * After a step that moved a range, NOTIFY ordered_events is queued
 * ('<stream>:<range_end>', or '<stream>' for a per-key stream); it is
 * delivered when the step commits.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/int.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* A run of skipped seqs, inclusive. */
typedef struct SkipRun
{
	int64		start;
	int64		end;
	const char *reason;			/* set for runs this step adds */
} SkipRun;

/* One sequence being released: a global stream, or one key. */
typedef struct Lane
{
	const OeStream *stream;
	text	   *key;			/* NULL for a global stream */
	int64		range_end;		/* first seq not released */
	TimestampTz max_event_ts;	/* largest event_ts released (global) */
	bool		max_event_ts_valid;
	int64		seen_gap;		/* gap a step saw before, or PG_INT64_MIN */
	int64		seen_gap_end;	/* ... seen_gap..seen_gap_end was missing */
	bool		seen_gap_expired;	/* ... for longer than gap_timeout */
	bool		has_fence;		/* fence_seq and fence_xid are set */
	int64		fence_seq;
	FullTransactionId fence_xid;
	List	   *runs;			/* SkipRuns ending at or after range_end, by start */
	List	   *new_runs;		/* SkipRuns this step adds */

	/* what the step did */
	int64		start;			/* range_end before the step */
	int64		released;
	int64		skipped;		/* seqs skip_gap() declared lost */
	bool		gap;			/* stopped at a missing seq, a later one arrived */
	int64		gap_end;		/* ... and range_end..gap_end is missing */
	bool		fence_recorded; /* read a new fence */
	bool		last_event;		/* passed the key's last event */
	bool		completed;		/* a step passed the key's last event before */
	bool		more;			/* stopped by the limit at a releasable event */
} Lane;

enum
{
	PLAN_LOCK,
	PLAN_ADVANCE,
	PLAN_LOG,
	PLAN_RUNS,
	PLAN_ADD_RUN,
	PLAN_UNSETTLED,
	PLAN_SETTLE_MOVE,
	PLAN_SETTLE_MARK,
	PLAN_FENCE_SEQ,
	PLAN_TAKE_ARRIVALS,
	PLAN_EXPIRED_KEYS,
	PLAN_ADD_ARRIVAL,
	PLAN_KEY_PROGRESS,
	PLAN_ADVANCE_KEY,
	PLAN_LOG_KEY,
	PLAN_AFTER_LAST,
	NUM_PLANS
};

static SPIPlanPtr plans[NUM_PLANS];

/*
 * A gap keeps the time a step first saw it while the first missing seq is
 * one that was missing then ($2 is the new range_end, $4 the gap's end).
 */
#define GAP_CLOCK \
	"gap_first_seen = CASE WHEN $4 IS NULL THEN NULL " \
	"  WHEN $2 BETWEEN gap_start AND gap_end THEN gap_first_seen " \
	"  ELSE clock_timestamp() END, "

static const char *const plan_sql[] = {
	[PLAN_LOCK] =
	"SELECT p.range_end, p.max_event_ts, p.gap_start, "
	"  p.gap_first_seen + d.gap_timeout <= clock_timestamp(), "
	"  p.fence_seq, p.fence_xid::text::bigint, p.gap_end "
	"FROM ordered_events.stream_progress p "
	"JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id "
	"WHERE p.stream_id = $1 FOR UPDATE OF p",

	[PLAN_ADVANCE] =
	"UPDATE ordered_events.stream_progress SET "
	"released_count = released_count + $5, "
	"updated_at = CASE WHEN $2 > range_end THEN clock_timestamp() ELSE updated_at END, "
	"range_end = $2, "
	"max_event_ts = $3, "
	GAP_CLOCK
	"gap_start = CASE WHEN $4 IS NOT NULL THEN $2 END, "
	"gap_end = $4, "
	"fence_seq = $6, "
	"fence_xid = $7::text::xid8 "
	"WHERE stream_id = $1",

	[PLAN_LOG] =
	"INSERT INTO ordered_events.release_log (stream_id, seq_start, seq_end, released_at) "
	"VALUES ($1, $2, $3, clock_timestamp())",

	[PLAN_RUNS] =
	"SELECT gap_start, gap_end FROM ordered_events.gap_skips "
	"WHERE stream_id = $1 AND key IS NOT DISTINCT FROM $2 AND gap_end >= $3 "
	"ORDER BY gap_start",

	[PLAN_ADD_RUN] =
	"INSERT INTO ordered_events.gap_skips "
	"(stream_id, key, gap_start, gap_end, reason, skipped_at) "
	"VALUES ($1, $2, $3, $4, $5, clock_timestamp())",

	[PLAN_UNSETTLED] =
	"SELECT ctid, key, gap_start, gap_end, settle_xid::text::bigint, xmin "
	"FROM ordered_events.gap_skips WHERE stream_id = $1 AND NOT settled",

	[PLAN_SETTLE_MOVE] =
	"WITH late AS ("
	"  DELETE FROM ordered_events.events "
	"  WHERE $2::text IS NULL AND stream_id = $1 AND seq BETWEEN $3 AND $4 "
	"  RETURNING seq, key, payload, event_ts, received_at), "
	"late_key AS ("
	"  DELETE FROM ordered_events.key_events "
	"  WHERE $2::text IS NOT NULL AND stream_id = $1 AND key = $2 AND seq BETWEEN $3 AND $4 "
	"  RETURNING seq, key, payload, event_ts, received_at) "
	"INSERT INTO ordered_events.unprocessed "
	"(stream, seq, key, payload, event_ts, reason, detail, received_at) "
	"SELECT d.stream, l.seq, l.key, l.payload, l.event_ts, 'gap_skipped', "
	"  pg_catalog.format('Seq %s committed after it was skipped.', l.seq), l.received_at "
	"FROM (SELECT * FROM late UNION ALL SELECT * FROM late_key) l, "
	"  ordered_events.stream_def d WHERE d.stream_id = $1",

	[PLAN_SETTLE_MARK] =
	"UPDATE ordered_events.gap_skips SET settle_xid = $2::text::xid8, settled = $3 "
	"WHERE ctid = $1",

	[PLAN_FENCE_SEQ] =
	"SELECT pg_catalog.pg_sequence_last_value($1)",

	[PLAN_TAKE_ARRIVALS] =
	"WITH taken AS ("
	"  DELETE FROM ordered_events.key_arrivals WHERE ctid = ANY (ARRAY("
	"    SELECT ctid FROM ordered_events.key_arrivals "
	"    WHERE stream_id = $1 ORDER BY arrived_at LIMIT $2)) "
	"  RETURNING key) "
	"SELECT DISTINCT key FROM taken ORDER BY key",

	[PLAN_EXPIRED_KEYS] =
	"SELECT key FROM ordered_events.key_progress k "
	"JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id "
	"WHERE k.stream_id = $1 AND k.gap_start IS NOT NULL "
	"  AND k.gap_first_seen <= clock_timestamp() - d.gap_timeout "
	"ORDER BY k.gap_first_seen LIMIT $2",

	[PLAN_ADD_ARRIVAL] =
	"INSERT INTO ordered_events.key_arrivals (stream_id, key, arrived_at) "
	"VALUES ($1, $2, now())",

	[PLAN_KEY_PROGRESS] =
	"SELECT k.range_end, k.gap_start, "
	"  k.gap_first_seen + d.gap_timeout <= clock_timestamp(), k.last_event_seq, k.gap_end "
	"FROM ordered_events.key_progress k "
	"JOIN ordered_events.stream_def d ON d.stream_id = k.stream_id "
	"WHERE k.stream_id = $1 AND k.key = $2",

	[PLAN_ADVANCE_KEY] =
	"INSERT INTO ordered_events.key_progress AS k "
	"(stream_id, key, range_end, released_count, last_event_seq, "
	" gap_start, gap_end, gap_first_seen, updated_at) "
	"VALUES ($1, $2, $3, $4, $6, CASE WHEN $5 IS NOT NULL THEN $3 END, $5, "
	"  CASE WHEN $5 IS NOT NULL THEN clock_timestamp() END, clock_timestamp()) "
	"ON CONFLICT (stream_id, key) DO UPDATE SET "
	"released_count = k.released_count + $4, "
	"last_event_seq = $6, "
	"updated_at = CASE WHEN $3 > k.range_end THEN clock_timestamp() ELSE k.updated_at END, "
	"range_end = $3, "
	"gap_first_seen = CASE WHEN $5 IS NULL THEN NULL "
	"  WHEN $3 BETWEEN k.gap_start AND k.gap_end THEN k.gap_first_seen "
	"  ELSE clock_timestamp() END, "
	"gap_start = CASE WHEN $5 IS NOT NULL THEN $3 END, "
	"gap_end = $5",

	[PLAN_LOG_KEY] =
	"INSERT INTO ordered_events.key_release_log "
	"(stream_id, key, seq_start, seq_end, released_at) "
	"VALUES ($1, $2, $3, $4, clock_timestamp())",

	[PLAN_AFTER_LAST] =
	"WITH rejected AS ("
	"  DELETE FROM ordered_events.key_events "
	"  WHERE stream_id = $1 AND key = $2 AND seq >= $3 "
	"  RETURNING seq, key, payload, event_ts, received_at) "
	"INSERT INTO ordered_events.unprocessed "
	"(stream, seq, key, payload, event_ts, reason, detail, received_at) "
	"SELECT d.stream, r.seq, r.key, r.payload, r.event_ts, 'after_last_event', "
	"  pg_catalog.format('The last event of this key is seq %s.', $3 - 1), r.received_at "
	"FROM rejected r, ordered_events.stream_def d WHERE d.stream_id = $1",
};

static const Oid plan_argtypes[][7] = {
	[PLAN_LOCK] = {INT4OID},
	[PLAN_ADVANCE] = {INT4OID, INT8OID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID, TEXTOID},
	[PLAN_LOG] = {INT4OID, INT8OID, INT8OID},
	[PLAN_RUNS] = {INT4OID, TEXTOID, INT8OID},
	[PLAN_ADD_RUN] = {INT4OID, TEXTOID, INT8OID, INT8OID, TEXTOID},
	[PLAN_UNSETTLED] = {INT4OID},
	[PLAN_SETTLE_MOVE] = {INT4OID, TEXTOID, INT8OID, INT8OID},
	[PLAN_SETTLE_MARK] = {TIDOID, TEXTOID, BOOLOID},
	[PLAN_FENCE_SEQ] = {REGCLASSOID},
	[PLAN_TAKE_ARRIVALS] = {INT4OID, INT8OID},
	[PLAN_EXPIRED_KEYS] = {INT4OID, INT8OID},
	[PLAN_ADD_ARRIVAL] = {INT4OID, TEXTOID},
	[PLAN_KEY_PROGRESS] = {INT4OID, TEXTOID},
	[PLAN_ADVANCE_KEY] = {INT4OID, TEXTOID, INT8OID, INT8OID, INT8OID, INT8OID},
	[PLAN_LOG_KEY] = {INT4OID, TEXTOID, INT8OID, INT8OID},
	[PLAN_AFTER_LAST] = {INT4OID, TEXTOID, INT8OID},
};

static const int plan_nargs[] = {
	[PLAN_LOCK] = 1, [PLAN_ADVANCE] = 7, [PLAN_LOG] = 3, [PLAN_RUNS] = 3,
	[PLAN_ADD_RUN] = 5, [PLAN_UNSETTLED] = 1, [PLAN_SETTLE_MOVE] = 4,
	[PLAN_SETTLE_MARK] = 3, [PLAN_FENCE_SEQ] = 1,
	[PLAN_TAKE_ARRIVALS] = 2, [PLAN_EXPIRED_KEYS] = 2, [PLAN_ADD_ARRIVAL] = 2, [PLAN_KEY_PROGRESS] = 2,
	[PLAN_ADVANCE_KEY] = 6, [PLAN_LOG_KEY] = 4, [PLAN_AFTER_LAST] = 3,
};

/*
 * Run one of the step's statements (prepared once per backend).  "nulls"
 * may be NULL.  Fails unless SPI returns "expected".
 */
static void
run_plan(int plan, Datum *values, const char *nulls, int expected)
{
	int			rc;

	if (plans[plan] == NULL)
		plans[plan] = oe_prepare_kept(plan_sql[plan], plan_nargs[plan],
									  (Oid *) plan_argtypes[plan]);
	rc = SPI_execute_plan(plans[plan], values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "release step failed: %s", SPI_result_code_string(rc));
}

/* Value of column "col" of row "row" of the last result; *isnull set. */
static Datum
result_value(uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/* key parameter: the key, or NULL for a global lane */
static void
key_param(text *key, Datum *value, char *null)
{
	*value = PointerGetDatum(key);
	*null = key == NULL ? 'n' : ' ';
}

/*
 * True if a transaction running in the snapshot may have written to this
 * database: it runs here, or it cannot be told (it ended since, or it is a
 * prepared transaction).  Only our database's transactions can write our
 * tables, so one of another database never holds a fence or a settling run
 * back (and blockers() shows this database's only).
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
 * An xid stored by a release step, or NULL if it is not of this cluster: a
 * dump restored into another cluster brings xids that its counter has not
 * reached, and waiting for them would never end.  A step then reads a new
 * one, which is always safe (see the banner).
 */
static bool
stored_xid(Datum value, bool isnull, FullTransactionId *xid)
{
	if (isnull)
		return false;
	*xid = FullTransactionIdFromU64(DatumGetInt64(value));
	return !FullTransactionIdFollows(*xid, ReadNextFullTransactionId());
}

/* Load the lane's skipped runs that end at or after its range_end. */
static void
load_runs(Lane *lane)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	lane->runs = NIL;
	if (lane->range_end > lane->stream->skipped_through)
		return;					/* no skip reaches this far */

	values[0] = Int32GetDatum(lane->stream->stream_id);
	key_param(lane->key, &values[1], &nulls[1]);
	values[2] = Int64GetDatum(lane->range_end);
	run_plan(PLAN_RUNS, values, nulls, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		SkipRun    *run = palloc0(sizeof(SkipRun));
		bool		isnull;

		run->start = DatumGetInt64(result_value(i, 1, &isnull));
		run->end = DatumGetInt64(result_value(i, 2, &isnull));
		lane->runs = lappend(lane->runs, run);
	}
}

/* Record new runs in the ledger. */
static void
add_runs(Lane *lane)
{
	ListCell   *lc;

	foreach(lc, lane->new_runs)
	{
		SkipRun    *run = lfirst(lc);
		Datum		values[5];
		char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

		values[0] = Int32GetDatum(lane->stream->stream_id);
		key_param(lane->key, &values[1], &nulls[1]);
		values[2] = Int64GetDatum(run->start);
		values[3] = Int64GetDatum(run->end);
		values[4] = CStringGetTextDatum(run->reason);
		run_plan(PLAN_ADD_RUN, values, nulls, SPI_OK_INSERT);
	}
}

/*
 * The lane is stopped at a gap range_end..gap_end (gap_end+1 has arrived, or
 * starts a skipped run).  If its policy may skip it now, return the last seq
 * to skip and set *reason; otherwise return PG_INT64_MIN.
 */
static int64
policy_skip_end(Lane *lane, int64 gap_end, Snapshot snapshot, const char **reason)
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
				if (no_xid_below(snapshot, lane->fence_xid))
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
				run_plan(PLAN_FENCE_SEQ, &seq, NULL, SPI_OK_SELECT);
				last = result_value(0, 1, &isnull);
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
 * Scan keys selecting the lane's events from seq "from" on; returns their
 * number.  keys must have room for 3.
 */
static int
lane_scankeys(const Lane *lane, int64 from, ScanKey keys)
{
	int			n = 0;

	ScanKeyInit(&keys[n++], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(lane->stream->stream_id));
	if (lane->key != NULL)
	{
		ScanKeyInit(&keys[n], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(lane->key));
		keys[n++].sk_collation = C_COLLATION_OID;
	}
	ScanKeyInit(&keys[n], n + 1, BTGreaterEqualStrategyNumber, F_INT8GE, Int64GetDatum(from));
	return n + 1;
}

/* A scan of a lane's events in seq order, from its range_end. */
typedef struct LaneScan
{
	Relation	heap;
	Relation	index;
	TupleTableSlot *slot;
	IndexScanDesc scan;
} LaneScan;

static void
begin_lane_scan(LaneScan *ls, const Lane *lane, Snapshot snapshot)
{
	const OeRelations *rels = oe_relations();
	ScanKeyData keys[3];
	int			nkeys = lane_scankeys(lane, lane->range_end, keys);

	ls->heap = table_open(lane->key ? rels->key_events : rels->events, AccessShareLock);
	ls->index = index_open(lane->key ? rels->key_events_pkey : rels->events_pkey,
						   AccessShareLock);
	ls->slot = table_slot_create(ls->heap, NULL);
	ls->scan = index_beginscan(ls->heap, ls->index, snapshot, nkeys, 0);
	index_rescan(ls->scan, keys, nkeys, NULL, 0);
}

/* The next event's seq into *seq; false at the end. */
static bool
lane_scan_next(LaneScan *ls, int64 *seq)
{
	bool		isnull;

	if (!index_getnext_slot(ls->scan, ForwardScanDirection, ls->slot))
		return false;
	*seq = DatumGetInt64(slot_getattr(ls->slot, Anum_oe_events_seq, &isnull));
	return true;
}

static void
end_lane_scan(LaneScan *ls)
{
	index_endscan(ls->scan);
	ExecDropSingleTupleTableSlot(ls->slot);
	index_close(ls->index, AccessShareLock);
	table_close(ls->heap, AccessShareLock);
}

/*
 * Walk the lane's primary key from range_end in seq order with the given
 * snapshot, releasing at most "limit" consecutive events, passing skipped
 * runs and skipping what the gap policy allows.
 */
static void
walk_lane(Lane *lane, int64 limit, Snapshot snapshot)
{
	LaneScan	ls;
	ListCell   *next_run = list_head(lane->runs);
	int64		seq = 0;
	bool		have;
	bool		isnull;

	begin_lane_scan(&ls, lane, snapshot);
	have = lane_scan_next(&ls, &seq);
	while (!lane->last_event)
	{
		SkipRun    *run = NULL;
		int64		gap_end;
		int64		skip_end;
		const char *reason = NULL;

		CHECK_FOR_INTERRUPTS();
		while (next_run != NULL && ((SkipRun *) lfirst(next_run))->end < lane->range_end)
			next_run = lnext(lane->runs, next_run);
		if (next_run != NULL)
			run = lfirst(next_run);

		/* A skipped run: pass it, with any event that committed into it late. */
		if (run != NULL && run->start <= lane->range_end)
		{
			while (have && seq <= run->end)
				have = lane_scan_next(&ls, &seq);
			lane->range_end = run->end + 1;
			continue;
		}

		if (have && seq == lane->range_end)
		{
			TimestampTz ts;

			if (lane->released >= limit)
			{
				lane->more = true;
				break;
			}
			ts = DatumGetTimestampTz(slot_getattr(ls.slot, Anum_oe_events_event_ts, &isnull));

			if (!lane->max_event_ts_valid || ts > lane->max_event_ts)
			{
				lane->max_event_ts = ts;
				lane->max_event_ts_valid = true;
			}
			if (lane->key != NULL)
				lane->last_event =
					DatumGetBool(slot_getattr(ls.slot, Anum_oe_key_events_last_event, &isnull));
			lane->range_end++;
			lane->released++;
			have = lane_scan_next(&ls, &seq);
			continue;
		}

		if (!have)
			break;				/* nothing arrived beyond: no gap */

		/* range_end..gap_end is missing */
		gap_end = seq - 1;
		if (run != NULL && run->start <= gap_end)
			gap_end = run->start - 1;
		skip_end = policy_skip_end(lane, gap_end, snapshot, &reason);
		if (skip_end == PG_INT64_MIN)
		{
			lane->gap = true;
			lane->gap_end = gap_end;
			break;
		}
		else
		{
			SkipRun    *skip = palloc0(sizeof(SkipRun));

			skip->start = lane->range_end;
			skip->end = skip_end;
			skip->reason = reason;
			lane->new_runs = lappend(lane->new_runs, skip);
			lane->range_end = skip_end + 1;
		}
	}
	end_lane_scan(&ls);
}

/*
 * Settle the stream's skipped runs that a transaction open at the skip may
 * still have written into; see the banner.  A run gets its settle_xid from
 * the first step of another transaction after the skip (the skip has sent
 * its invalidations by then), and is settled as soon as no transaction
 * older than that runs.
 */
static void
settle_runs(const OeStream *stream)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	FullTransactionId next_xid;
	Snapshot	snapshot;
	SPITupleTable *runs;
	uint64		nruns;

	run_plan(PLAN_UNSETTLED, &id, NULL, SPI_OK_SELECT);
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
		bool		global;
		Datum		values[4];
		char		nulls[4] = {' ', ' ', ' ', ' '};
		Datum		settle = SPI_getbinval(row, desc, 5, &isnull);
		FullTransactionId settle_xid;
		bool		first_look = !stored_xid(settle, isnull, &settle_xid);
		bool		settled;

		if (first_look)
			settle_xid = next_xid;
		if (TransactionIdIsCurrentTransactionId(DatumGetTransactionId(SPI_getbinval(row, desc, 6,
																					&global))))
			continue;			/* skipped by this transaction: not yet */

		settled = no_xid_below(snapshot, settle_xid);
		if (settled)
		{
			values[0] = id;
			values[1] = SPI_getbinval(row, desc, 2, &global);
			nulls[1] = global ? 'n' : ' ';
			values[2] = SPI_getbinval(row, desc, 3, &isnull);
			values[3] = SPI_getbinval(row, desc, 4, &isnull);
			run_plan(PLAN_SETTLE_MOVE, values, nulls, SPI_OK_INSERT);
		}
		if (!settled && !first_look)
			continue;			/* nothing new to note */
		values[0] = SPI_getbinval(row, desc, 1, &isnull);	/* ctid */
		values[1] = CStringGetTextDatum(psprintf(UINT64_FORMAT,
												 U64FromFullTransactionId(settle_xid)));
		values[2] = BoolGetDatum(settled);
		run_plan(PLAN_SETTLE_MARK, values, NULL, SPI_OK_UPDATE);
	}
	UnregisterSnapshot(snapshot);
	SPI_freetuptable(runs);
}

/*
 * Lock the stream's progress row, which serialises release steps, and
 * refresh the stream's definition: a skip committed by the step before is
 * seen now.  Returns false if the stream was dropped meanwhile.  Fills the
 * global lane's state from the row.
 */
static bool
lock_stream(OeStream *stream, Lane *lane)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	bool		isnull;
	Datum		value;

	run_plan(PLAN_LOCK, &id, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;

	memset(lane, 0, sizeof(*lane));
	lane->stream = stream;
	lane->range_end = lane->start = DatumGetInt64(result_value(0, 1, &isnull));
	lane->max_event_ts = DatumGetTimestampTz(result_value(0, 2, &isnull));
	lane->max_event_ts_valid = !isnull;
	value = result_value(0, 3, &isnull);
	lane->seen_gap = isnull ? PG_INT64_MIN : DatumGetInt64(value);
	lane->seen_gap_end = DatumGetInt64(result_value(0, 7, &isnull));
	value = result_value(0, 4, &isnull);
	lane->seen_gap_expired = !isnull && DatumGetBool(value);
	value = result_value(0, 6, &isnull);
	lane->has_fence = stored_xid(value, isnull, &lane->fence_xid);
	if (lane->has_fence)
		lane->fence_seq = DatumGetInt64(result_value(0, 5, &isnull));

	AcceptInvalidationMessages();
	return oe_lookup_stream(stream->name, stream);
}

/* True if the gap the lane stopped at is not the one stored. */
static bool
gap_changed(const Lane *lane)
{
	if (!lane->gap)
		return lane->seen_gap != PG_INT64_MIN;
	return lane->seen_gap != lane->range_end || lane->seen_gap_end != lane->gap_end;
}

/* Store what a step did to a global lane. */
static void
save_global_lane(Lane *lane)
{
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		keep_fence = lane->gap && lane->has_fence;

	values[0] = Int32GetDatum(lane->stream->stream_id);
	values[1] = Int64GetDatum(lane->range_end);
	values[2] = TimestampTzGetDatum(lane->max_event_ts);
	nulls[2] = lane->max_event_ts_valid ? ' ' : 'n';
	values[3] = Int64GetDatum(lane->gap_end);
	nulls[3] = lane->gap ? ' ' : 'n';
	values[4] = Int64GetDatum(lane->released);
	values[5] = Int64GetDatum(lane->fence_seq);
	values[6] = CStringGetTextDatum(psprintf(UINT64_FORMAT,
											 U64FromFullTransactionId(lane->fence_xid)));
	nulls[5] = nulls[6] = keep_fence ? ' ' : 'n';
	run_plan(PLAN_ADVANCE, values, nulls, SPI_OK_UPDATE);

	if (lane->range_end != lane->start)
	{
		char		payload[NAMEDATALEN + 24];

		values[1] = Int64GetDatum(lane->start);
		values[2] = Int64GetDatum(lane->range_end);
		run_plan(PLAN_LOG, values, NULL, SPI_OK_INSERT);

		snprintf(payload, sizeof(payload), "%s:" INT64_FORMAT,
				 lane->stream->name, lane->range_end);
		Async_Notify("ordered_events", payload);
	}
}

/* One release step of a global stream; see oe_release_stream(). */
static int64
release_global(OeStream *stream)
{
	Lane		lane;

	if (!lock_stream(stream, &lane))
		return 0;
	settle_runs(stream);
	load_runs(&lane);

	/*
	 * Walk with a snapshot taken after the lock, so that it sees the
	 * previous step.  A fence read during the walk needs a snapshot taken
	 * after it: walk on once more with a new one.
	 */
	for (int attempt = 0; attempt < 2; attempt++)
	{
		Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());

		lane.gap = false;
		walk_lane(&lane, stream->max_release_batch, snapshot);
		UnregisterSnapshot(snapshot);
		if (!(lane.gap && lane.fence_recorded && attempt == 0))
			break;
	}

	add_runs(&lane);
	/*
	 * Write only when something changed.  A stored fence always comes with
	 * a stored gap, so a fence to forget is a gap that changed.
	 */
	if (lane.range_end != lane.start || lane.fence_recorded || gap_changed(&lane))
		save_global_lane(&lane);
	return lane.released;
}

/*
 * Run a plan that returns keys (column 1) and return them as a List of text
 * copies.
 */
static List *
keys_from(int plan, const OeStream *stream, int64 limit)
{
	Datum		values[2] = {Int32GetDatum(stream->stream_id), Int64GetDatum(limit)};
	List	   *keys = NIL;

	run_plan(plan, values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		keys = lappend(keys, DatumGetTextPCopy(result_value(i, 1, &isnull)));
	}
	return keys;
}

/* Load the state of one key of a per-key stream into a lane. */
static void
load_key_lane(OeStream *stream, text *key, Lane *lane)
{
	Datum		values[2];
	bool		isnull;

	memset(lane, 0, sizeof(*lane));
	lane->stream = stream;
	lane->key = key;
	lane->range_end = lane->start = stream->initial_sequence;
	lane->seen_gap = PG_INT64_MIN;

	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(key);
	run_plan(PLAN_KEY_PROGRESS, values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		Datum		value;

		lane->range_end = lane->start = DatumGetInt64(result_value(0, 1, &isnull));
		value = result_value(0, 2, &isnull);
		lane->seen_gap = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		lane->seen_gap_end = DatumGetInt64(result_value(0, 5, &isnull));
		value = result_value(0, 3, &isnull);
		lane->seen_gap_expired = !isnull && DatumGetBool(value);
		(void) result_value(0, 4, &isnull);
		lane->completed = !isnull;
	}
	load_runs(lane);
}

static int64
release_key(OeStream *stream, text *key, int64 limit, Snapshot snapshot, bool *more)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	Lane		lane;

	load_key_lane(stream, key, &lane);
	*more = false;
	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(key);
	if (lane.completed)
	{
		/* A seq above the last event whose transaction was open at the time. */
		values[2] = Int64GetDatum(lane.range_end);
		run_plan(PLAN_AFTER_LAST, values, NULL, SPI_OK_INSERT);
		return 0;
	}
	walk_lane(&lane, limit, snapshot);
	add_runs(&lane);

	*more = lane.more;
	if (lane.range_end == lane.start && !gap_changed(&lane))
		return 0;				/* nothing changed */

	values[2] = Int64GetDatum(lane.range_end);
	values[3] = Int64GetDatum(lane.released);
	values[4] = Int64GetDatum(lane.gap_end);
	nulls[4] = lane.gap ? ' ' : 'n';
	values[5] = Int64GetDatum(lane.range_end - 1);
	nulls[5] = lane.last_event ? ' ' : 'n';
	run_plan(PLAN_ADVANCE_KEY, values, nulls, SPI_OK_INSERT);

	if (lane.range_end != lane.start)
	{
		values[2] = Int64GetDatum(lane.start);
		values[3] = Int64GetDatum(lane.range_end);
		run_plan(PLAN_LOG_KEY, values, NULL, SPI_OK_INSERT);
	}

	/* The key is complete: what waits beyond its last event never will be released. */
	if (lane.last_event)
	{
		values[2] = Int64GetDatum(lane.range_end);
		run_plan(PLAN_AFTER_LAST, values, NULL, SPI_OK_INSERT);
	}
	return lane.released;
}

/*
 * Release keys of a per-key stream while the budget lasts; returns the
 * number released so far.
 */
static int64
release_keys(OeStream *stream, List *keys, int64 released)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ListCell   *lc;

	foreach(lc, keys)
	{
		text	   *key = lfirst(lc);
		bool		more = false;

		if (released < stream->max_release_batch)
			released += release_key(stream, key, stream->max_release_batch - released,
									snapshot, &more);
		else
			more = true;		/* out of budget: look at it next step */
		if (more)
		{
			Datum		values[2] = {Int32GetDatum(stream->stream_id), PointerGetDatum(key)};

			run_plan(PLAN_ADD_ARRIVAL, values, NULL, SPI_OK_INSERT);
		}
	}
	UnregisterSnapshot(snapshot);
	return released;
}

/*
 * One release step of a per-key stream; see oe_release_stream().  Visits the
 * keys whose gap timed out, then takes arrivals, oldest first, until the
 * budget is spent or none are left; each arrival is taken once, so the cost
 * follows the keys that received events.
 */
static int64
release_per_key(OeStream *stream)
{
	Lane		stream_lane;
	List	   *keys;
	int64		released;

	if (!lock_stream(stream, &stream_lane))
		return 0;
	settle_runs(stream);

	released = release_keys(stream, keys_from(PLAN_EXPIRED_KEYS, stream,
											  stream->max_release_batch), 0);
	/* Each snapshot is taken after its arrivals: it sees their events. */
	while (released < stream->max_release_batch &&
		   (keys = keys_from(PLAN_TAKE_ARRIVALS, stream, stream->max_release_batch)) != NIL)
		released = release_keys(stream, keys, released);

	if (released > 0)
		Async_Notify("ordered_events", stream->name);
	return released;
}

/*
 * One release step for a stream: advance its range (or its keys' ranges)
 * over the arrived events, at most max_release_batch of them, skip what its
 * gap policy allows, and note the gap where it stops.  Returns the number of
 * events released.  Runs in the caller's transaction.
 */
int64
oe_release_stream(const OeStream *stream)
{
	OeStream	current = *stream;
	OeInternalScope scope;
	int64		released;

	oe_internal_begin(&scope);
	released = current.per_key ? release_per_key(&current) : release_global(&current);
	oe_internal_end(&scope);
	return released;
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

/*
 * Add to the lane's new runs the seqs of from..to that are not in a skipped
 * run yet.
 */
static void
declare_missing(Lane *lane, int64 from, int64 to, const char *reason)
{
	ListCell   *lc;

	foreach(lc, lane->runs)
	{
		SkipRun    *run = lfirst(lc);

		if (from > to)
			return;
		if (run->end < from || run->start > to)
			continue;
		if (run->start > from)
			declare_missing(lane, from, run->start - 1, reason);
		from = run->end + 1;
	}
	if (from <= to)
	{
		SkipRun    *skip = palloc0(sizeof(SkipRun));
		int64		count;

		/* skip_gap() returns the count: it must fit a bigint. */
		if (pg_sub_s64_overflow(to, from, &count) || pg_add_s64_overflow(count, 1, &count) ||
			pg_add_s64_overflow(lane->skipped, count, &lane->skipped))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("cannot skip more than %lld seqs in one call", (long long) PG_INT64_MAX),
					 errhint("Skip in two calls, through a seq in between first.")));
		skip->start = from;
		skip->end = to;
		skip->reason = reason;
		lane->new_runs = lappend(lane->new_runs, skip);
	}
}

/*
 * Declare every seq of the lane from range_end through "through" that has
 * not arrived (in the snapshot) lost.  Returns how many were declared.
 */
static int64
declare_lost(Lane *lane, int64 through, const char *reason, Snapshot snapshot)
{
	LaneScan	ls;
	int64		pos = lane->range_end;
	int64		seq;

	begin_lane_scan(&ls, lane, snapshot);
	while (pos <= through && lane_scan_next(&ls, &seq))
	{
		CHECK_FOR_INTERRUPTS();
		if (seq > pos)
			declare_missing(lane, pos, Min(seq - 1, through), reason);
		pos = seq + 1;
	}
	if (pos <= through)
		declare_missing(lane, pos, through, reason);
	end_lane_scan(&ls);
	return lane->skipped;
}

/*
 * skip_gap(stream, through_seq, reason, key DEFAULT NULL) returns bigint
 *
 * Operator override: every missing seq of the stream (or of the key of a
 * per-key stream) up to through_seq is declared lost and recorded in the
 * ledger; then a release step releases what that unblocks.  Returns the
 * number of seqs skipped.
 */
PG_FUNCTION_INFO_V1(oe_skip_gap);
Datum
oe_skip_gap(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	text	   *key;
	int64		through;
	char	   *reason;
	Lane		lane;
	Snapshot	snapshot;
	int64		skipped;
	OeInternalScope scope;

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

	PreventCommandIfReadOnly("skip_gap()");
	stream = oe_stream_or_error(PG_GETARG_TEXT_PP(0));
	through = PG_GETARG_INT64(1);
	reason = text_to_cstring(PG_GETARG_TEXT_PP(2));
	key = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);

	if (key != NULL)
		oe_check_key(&stream, key, NULL);
	if (stream.per_key && key == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("key must not be null for per-key stream \"%s\"", stream.name),
				 errhint("Name the key whose gap to skip: skip_gap(stream, through_seq, reason, key).")));
	if (!stream.per_key && key != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key is only valid for per-key streams"),
				 errdetail("Stream \"%s\" has global sequencing.", stream.name),
				 errhint("Leave key NULL: a global stream has one sequence.")));
	if (through == PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("through_seq must be below 9223372036854775807"),
				 errhint("That seq has no successor, so no event can follow it.")));

	oe_internal_begin(&scope);
	if (!lock_stream(&stream, &lane))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", stream.name),
				 errhint("It was dropped while skip_gap() waited for it.")));
	if (stream.per_key)
		load_key_lane(&stream, key, &lane);
	else
		load_runs(&lane);

	snapshot = RegisterSnapshot(GetLatestSnapshot());
	skipped = declare_lost(&lane, through, reason, snapshot);
	UnregisterSnapshot(snapshot);
	add_runs(&lane);

	/* append() must not hand out a seq that is now skipped. */
	if (stream.gap_policy == OE_GAP_FENCE && skipped > 0)
	{
		Datum		values[2] = {ObjectIdGetDatum(stream.fence_seq), Int64GetDatum(through)};
		Oid			argtypes[2] = {REGCLASSOID, INT8OID};

		if (SPI_execute_with_args("SELECT pg_catalog.setval($1, $2) "
								  "WHERE $2 > coalesce(pg_catalog.pg_sequence_last_value($1), $2 - 1)",
								  2, argtypes, values, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "moving the fence sequence of stream \"%s\" failed", stream.name);
	}

	/* Release what the skip unblocks: the step sees the new runs. */
	stream.skipped_through = Max(stream.skipped_through, through);
	if (stream.per_key)
	{
		bool		more;

		snapshot = RegisterSnapshot(GetLatestSnapshot());
		(void) release_key(&stream, key, stream.max_release_batch, snapshot, &more);
		UnregisterSnapshot(snapshot);
		if (more)
		{
			Datum		values[2] = {Int32GetDatum(stream.stream_id), PointerGetDatum(key)};

			run_plan(PLAN_ADD_ARRIVAL, values, NULL, SPI_OK_INSERT);
		}
	}
	else
		(void) release_global(&stream);
	oe_internal_end(&scope);
	PG_RETURN_INT64(skipped);
}
