/*-------------------------------------------------------------------------
 *
 * table_insert.c
 *	  Writing rows of the extension's tables and their indexes without the
 *	  executor's per-statement setup: the hot paths of ingest and of
 *	  handlers' processing steps.
 *
 * An INSERT through SPI costs a plan check and an executor start and end
 * per row, more than the heap and index inserts themselves; opening the
 * table and its indexes for every row costs a third again.  So each table
 * gets an "inserter" (relation, indexes, executor state, slot) the first
 * time a transaction writes to it, kept until the transaction ends, and the
 * rows go straight to the table AM and ExecInsertIndexTuples.  Our tables
 * have no triggers, no constraints beyond NOT NULL (the callers fill every
 * column) and no generated columns, so nothing else of ExecInsert applies.
 *
 * oe_insert_unique() has the semantics of INSERT ... ON CONFLICT DO NOTHING
 * and uses its protocol, speculative insertion, with one change: the
 * common case, no conflict, does not first look for a conflicting entry.
 * The row is inserted with a speculative token, and the unique index insert
 * reports a conflicting entry instead of failing (UNIQUE_CHECK_PARTIAL).
 * On a conflict, which is rare, the row is "super-deleted" (its xmin
 * cleared, so that nobody waits for it or sees it any more), then we wait
 * for a conflicting transaction still in progress to end: if it committed
 * the row is a duplicate, if it rolled back the insert is tried again.
 * A plain delete would not do: to another inserter our deleted row is still
 * "being inserted", so two losers waiting for each other deadlock.  A
 * caller's "keep" check runs after the index insert found no conflict and
 * before the row is confirmed, and may super-delete it the same way: what
 * it reads then was committed before any conflicting row was deleted.
 *
 * The inserters live in TopTransactionContext and their relations are
 * opened under TopTransactionResourceOwner; they are closed before commit
 * and at abort.  The caller holds RowExclusiveLock on each table.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/* Everything inserting into one table needs, kept for the transaction. */
typedef struct Inserter
{
	Oid			relid;
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
} Inserter;

#define MAX_INSERTERS 8

static Inserter *inserters[MAX_INSERTERS];
static int	ninserters = 0;
static bool callback_registered = false;

/* Close every inserter of the transaction, before it commits. */
static void
close_inserters(void)
{
	ResourceOwner old_owner = CurrentResourceOwner;

	/* They were opened under it; a COMMIT in a procedure runs under another. */
	CurrentResourceOwner = TopTransactionResourceOwner;
	for (int i = 0; i < ninserters; i++)
	{
		Inserter   *ins = inserters[i];

		ExecCloseIndices(ins->rri);
		ExecResetTupleTable(ins->estate->es_tupleTable, false);
		FreeExecutorState(ins->estate);
		table_close(ins->rel, NoLock);
	}
	ninserters = 0;
	CurrentResourceOwner = old_owner;
}

/* Transaction callback: inserters end with their transaction. */
static void
inserters_at_xact_end(XactEvent event, void *arg)
{
	if (ninserters == 0)
		return;
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT ||
		event == XACT_EVENT_PRE_PREPARE)
		close_inserters();
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		/* The resource owner and the memory go away with the transaction. */
		ninserters = 0;
	}
}

/* The transaction's inserter for a table, set up at first use. */
static Inserter *
get_inserter(Oid relid)
{
	MemoryContext old_context;
	ResourceOwner old_owner;
	Inserter   *ins;

	for (int i = 0; i < ninserters; i++)
		if (inserters[i]->relid == relid)
			return inserters[i];
	if (ninserters == MAX_INSERTERS)
		elog(ERROR, "too many tables for the inserters of ordered_events");
	if (!callback_registered)
	{
		RegisterXactCallback(inserters_at_xact_end, NULL);
		callback_registered = true;
	}

	old_context = MemoryContextSwitchTo(TopTransactionContext);
	old_owner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;

	ins = palloc0(sizeof(Inserter));
	ins->relid = relid;
	ins->rel = table_open(relid, RowExclusiveLock);
	ins->estate = CreateExecutorState();
	ins->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(ins->rri, ins->rel, 1, NULL, 0);
	/* With what ExecCheckIndexConstraints needs for the rare conflict. */
	ExecOpenIndices(ins->rri, true);
	ins->slot = ExecInitExtraTupleSlot(ins->estate, RelationGetDescr(ins->rel),
									   table_slot_callbacks(ins->rel));

	CurrentResourceOwner = old_owner;
	MemoryContextSwitchTo(old_context);
	inserters[ninserters++] = ins;
	return ins;
}

/* The table's inserter, with values/isnull as the row in its slot. */
static Inserter *
begin_row(Oid relid, Datum *values, bool *isnull)
{
	Inserter   *ins = get_inserter(relid);
	int			natts = RelationGetDescr(ins->rel)->natts;

	ResetPerTupleExprContext(ins->estate);
	ExecClearTuple(ins->slot);
	memcpy(ins->slot->tts_values, values, natts * sizeof(Datum));
	memcpy(ins->slot->tts_isnull, isnull, natts * sizeof(bool));
	ExecStoreVirtualTuple(ins->slot);
	return ins;
}

/*
 * Insert a row, unless a row with the same key in a unique index exists or
 * "keep" (if not NULL) says no.  Returns true if the row was inserted; see
 * the banner.
 */
bool
oe_insert_unique(Oid relid, Datum *values, bool *isnull, bool (*keep) (void *arg), void *arg)
{
	Inserter   *ins = begin_row(relid, values, isnull);
	TransactionId xid = GetCurrentTransactionId();

	for (;;)
	{
		uint32		token = SpeculativeInsertionLockAcquire(xid);
		bool		conflict = false;
		ItemPointerData existing;

		table_tuple_insert_speculative(ins->rel, ins->slot, GetCurrentCommandId(true),
									   0, NULL, token);
		list_free(ExecInsertIndexTuples(ins->rri, ins->slot, ins->estate, false,
										true, &conflict, NIL));
		if (!conflict && keep != NULL && !keep(arg))
		{
			table_tuple_complete_speculative(ins->rel, ins->slot, token, false);
			SpeculativeInsertionLockRelease(xid);
			return false;
		}
		table_tuple_complete_speculative(ins->rel, ins->slot, token, !conflict);
		SpeculativeInsertionLockRelease(xid);
		if (!conflict)
			return true;

		/* Waits for a conflicting inserter still in progress. */
		if (!ExecCheckIndexConstraints(ins->rri, ins->slot, ins->estate, &existing, NIL))
			return false;
		/* The conflicting row was rolled back: insert again. */
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Insert a row into a table whose unique keys the caller knows to be new
 * (a duplicate is an error).
 */
void
oe_insert_row(Oid relid, Datum *values, bool *isnull)
{
	Inserter   *ins = begin_row(relid, values, isnull);

	table_tuple_insert(ins->rel, ins->slot, GetCurrentCommandId(true), 0, NULL);
	list_free(ExecInsertIndexTuples(ins->rri, ins->slot, ins->estate, false,
									false, NULL, NIL));
}

/*
 * Replace the row at "tid", which nobody else may be changing (the caller
 * holds a lock that serializes its writers), with the key columns of its
 * unique indexes unchanged.
 */
void
oe_update_row(Oid relid, ItemPointer tid, Datum *values, bool *isnull)
{
	Inserter   *ins = begin_row(relid, values, isnull);
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	result;

	result = table_tuple_update(ins->rel, tid, ins->slot, GetCurrentCommandId(true),
								InvalidSnapshot, InvalidSnapshot, true, &tmfd, &lockmode,
								&update_indexes);
	if (result != TM_Ok)
		elog(ERROR, "row (%u,%u) of %s changed while it was updated: %d",
			 ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid),
			 RelationGetRelationName(ins->rel), (int) result);
	/* Not HOT: new index entries (without the "unchanged" hint, which needs a range table). */
	if (update_indexes)
		list_free(ExecInsertIndexTuples(ins->rri, ins->slot, ins->estate, false,
										false, NULL, NIL));
}
