/*-------------------------------------------------------------------------
 *
 * arrival.c
 *	  The arrival order of accepted events: a number per event, increasing
 *	  in the order the extension accepts them, across the sessions and the
 *	  streams of a database.  Consumers break ties between streams by it.
 *
 * The numbers come from the sequence ordered_events.arrival_seq in blocks:
 * its value v stands for the numbers v * OE_ARRIVAL_BLOCK to
 * (v + 1) * OE_ARRIVAL_BLOCK - 1.  With the library preloaded, the sessions
 * of a database share their current block in shared memory and take its
 * numbers one at a time under a spinlock, so the numbers follow the order
 * of acceptance across sessions, and a bulk load calls the sequence once
 * per block instead of once per row.  Without shared memory every event
 * takes a block of its own: slower, in the same order.
 *
 * Why it is safe: a block comes from nextval(), above every block before it,
 * and replaces the shared one only if it is higher, so numbers never go
 * down (of two sessions refilling at once, the lower block is dropped); a
 * forgotten block (an evicted entry, a restart) only leaves a hole.  The
 * sequence's WAL record precedes the commit of any transaction that used a
 * number of the block, so after a crash new blocks come after them.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "commands/sequence.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/spin.h"

/* The shared block of (this database, seq), or NULL; under the spinlock. */
static OeArrivalBlock *
find_block(Oid seq)
{
	for (int i = 0; i < OE_ARRIVAL_BLOCKS; i++)
	{
		OeArrivalBlock *block = &oe_shared->arrival[i];

		if (block->dboid == MyDatabaseId && block->seq == seq)
			return block;
	}
	return NULL;
}

/* Take a number of the shared block; false if none is left. */
static bool
take_shared(Oid seq, int64 *number)
{
	OeArrivalBlock *block;
	bool		taken = false;

	SpinLockAcquire(&oe_shared->arrival_lock);
	block = find_block(seq);
	if (block != NULL && block->next < block->limit)
	{
		*number = block->next++;
		taken = true;
	}
	SpinLockRelease(&oe_shared->arrival_lock);
	return taken;
}

/* Share the block from "start" on, unless a higher one is shared already. */
static void
share_block(Oid seq, int64 start)
{
	OeArrivalBlock *block;

	SpinLockAcquire(&oe_shared->arrival_lock);
	block = find_block(seq);
	if (block == NULL)
	{
		/* A new entry, in turn: an evicted one gets a new block next time. */
		block = &oe_shared->arrival[oe_shared->arrival_victim];
		oe_shared->arrival_victim = (oe_shared->arrival_victim + 1) % OE_ARRIVAL_BLOCKS;
		block->dboid = MyDatabaseId;
		block->seq = seq;
		block->next = block->limit = 0;
	}
	if (start >= block->limit)
	{
		block->next = start;
		block->limit = start + OE_ARRIVAL_BLOCK;
	}
	SpinLockRelease(&oe_shared->arrival_lock);
}

/* The first number of a new block of the sequence. */
static int64
new_block(Oid seq)
{
	int64		start;

	if (pg_mul_s64_overflow(nextval_internal(seq, false), OE_ARRIVAL_BLOCK, &start) ||
		start > PG_INT64_MAX - OE_ARRIVAL_BLOCK)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("sequence ordered_events.arrival_seq is exhausted"),
				 errhint("Its value counts blocks of %d arrivals; it cannot pass %lld.",
						 OE_ARRIVAL_BLOCK,
						 (long long) (PG_INT64_MAX / OE_ARRIVAL_BLOCK - 1))));
	return start;
}

/* The arrival number of the event being accepted now. */
int64
oe_next_arrival(void)
{
	Oid			seq = oe_relations()->arrival_seq;
	int64		number;

	if (oe_shared == NULL)
		return new_block(seq);
	while (!take_shared(seq, &number))
		share_block(seq, new_block(seq));
	return number;
}
