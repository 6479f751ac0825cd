/*-------------------------------------------------------------------------
 *
 * table_insert.c
 *	  Inserting one row into a table and its indexes without the executor's
 *	  per-statement setup: the hot path of ingest.
 *
 * An INSERT through SPI costs a plan check and an executor start and end
 * per row, several times what the heap and index inserts themselves cost;
 * bench/ingest.sh measures the difference.  These functions do what
 * ExecInsert does for our own tables, which have no triggers, no
 * constraints beyond NOT NULL (the callers fill every column) and no
 * generated columns.
 *
 * oe_insert_unique() is INSERT ... ON CONFLICT DO NOTHING: the speculative
 * insertion protocol of nodeModifyTable.c.  A conflicting row of a
 * transaction still in progress is waited for, so of two sessions inserting
 * the same key, one inserts and the other then sees the conflict; a race
 * lost between the check and the insert is retried.
 *
 * The caller holds RowExclusiveLock on the table for the transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"

/* What inserting into one table needs, set up for one row. */
typedef struct Inserter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
} Inserter;

static void
begin_insert(Inserter *ins, Oid relid, Datum *values, bool *isnull, bool speculative)
{
	TupleDesc	desc;

	ins->rel = table_open(relid, RowExclusiveLock);
	desc = RelationGetDescr(ins->rel);
	ins->estate = CreateExecutorState();
	ins->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(ins->rri, ins->rel, 1, NULL, 0);
	ExecOpenIndices(ins->rri, speculative);

	ins->slot = ExecInitExtraTupleSlot(ins->estate, desc, table_slot_callbacks(ins->rel));
	ExecClearTuple(ins->slot);
	memcpy(ins->slot->tts_values, values, desc->natts * sizeof(Datum));
	memcpy(ins->slot->tts_isnull, isnull, desc->natts * sizeof(bool));
	ExecStoreVirtualTuple(ins->slot);
}

static void
end_insert(Inserter *ins)
{
	ExecCloseIndices(ins->rri);
	ExecResetTupleTable(ins->estate->es_tupleTable, false);
	FreeExecutorState(ins->estate);
	table_close(ins->rel, NoLock);
}

/*
 * Insert a row, unless a row with the same key in a unique index exists.
 * Returns true if the row was inserted.
 */
bool
oe_insert_unique(Oid relid, Datum *values, bool *isnull)
{
	Inserter	ins;
	bool		inserted;

	begin_insert(&ins, relid, values, isnull, true);
	for (;;)
	{
		ItemPointerData conflict;
		TransactionId xid;
		uint32		token;
		bool		lost_race = false;
		List	   *recheck;

		/* Waits for a conflicting insert in progress, then looks again. */
		if (!ExecCheckIndexConstraints(ins.rri, ins.slot, ins.estate, &conflict, NIL))
		{
			inserted = false;
			break;
		}

		xid = GetCurrentTransactionId();
		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(ins.rel, ins.slot, GetCurrentCommandId(true), 0,
									   NULL, token);
		recheck = ExecInsertIndexTuples(ins.rri, ins.slot, ins.estate, false, true,
										&lost_race, NIL);
		table_tuple_complete_speculative(ins.rel, ins.slot, token, !lost_race);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);

		if (!lost_race)
		{
			inserted = true;
			break;
		}
		/* Someone inserted the same key meanwhile: check again. */
	}
	end_insert(&ins);
	return inserted;
}

/* Insert a row into a table without unique indexes. */
void
oe_insert_row(Oid relid, Datum *values, bool *isnull)
{
	Inserter	ins;

	begin_insert(&ins, relid, values, isnull, false);
	table_tuple_insert(ins.rel, ins.slot, GetCurrentCommandId(true), 0, NULL);
	list_free(ExecInsertIndexTuples(ins.rri, ins.slot, ins.estate, false, false,
									NULL, NIL));
	end_insert(&ins);
}
