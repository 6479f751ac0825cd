/*-------------------------------------------------------------------------
 *
 * backlog_keys.c
 *	  The keys of a global lane's backlog summary: per key, its events in
 *	  the lane's stored blocks (backlog.c), so that key_status counts a
 *	  global stream's backlog from a few rows per key, not from its events.
 *
 * A row of backlog_keys is a run of consecutive stored blocks of the
 * stream's lane each of which holds an event of the key, with the count,
 * first and last seq of the key's events in them; every event of a stored
 * block is in exactly one row, that of its key.  A key found in every block
 * (keys interleaved as a stream's usually are) has one row; a key rarer
 * than one event a block has a row per event at worst: never more rows
 * than events.  A per-key lane is one key: lane_backlog() counts it, and
 * it has no rows here.
 *
 * Storing: the step that stores blocks (oe_backlog_update()) shows this
 * file each event it looks at (oe_keys_note()) and whether its block was
 * stored (oe_keys_end_block()); each key's run of new blocks joins the
 * key's row that ends at the block before it, or is a row of its own
 * (oe_keys_store(): one statement a step).
 *
 * Passing: a step that moves the range through stored blocks (the gap
 * filled; releasing in batches) forgets the blocks below the first block
 * wholly beyond the new range, the kept block, and here their events.  The
 * rows wholly below it go.  A key's row that reaches into it (at most one:
 * the runs of a key are disjoint; the keys found in both the block before
 * the kept one and the kept one, so at most 1024) stays as stored, and
 * the lane's one row of backlog_keys_passed says, for each such key, how
 * many of the row's events lie below the kept block and the key's first
 * seq in it, read from that block (each block of a run holds an event of
 * the key).  So a step that releases writes one row, not one a key, and
 * reads at most two blocks more than it releases: the walk counts by key
 * each event it releases from an island (oe_keys_released()), and
 * oe_keys_pass() reads the events of the last forgotten block that the
 * range stopped in (at most 1023) and of the kept block until it found
 * each such key (at most 1024).  first_seq stays exact whatever the keys.
 *
 * Readers (key_status) take the rows and the lane's events outside its
 * islands, with the snapshot they read the islands and the range with: a
 * step writes all of them in one transaction, and a snapshot that does not
 * see the summary sees neither rows nor islands, and reads every event.
 *
 * Concurrency as backlog.c: written by release steps under the stream's
 * release lock; read with any snapshot, without a lock.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

enum
{
	PLAN_STORE_KEYS,
	PLAN_LOAD_PASSED,
	PLAN_DROP_ROWS,
	PLAN_SAVE_PASSED,
	PLAN_DROP_PASSED,
	PLAN_FORGET_KEYS
};

static OePlan plans[] = {
	/* each new run ($2..$7) joins the key's row that ends just before it */
	[PLAN_STORE_KEYS] = {
		"WITH n AS ("
		"  SELECT * FROM ROWS FROM (pg_catalog.unnest($2::text[]), "
		"    pg_catalog.unnest($3::bigint[]), pg_catalog.unnest($4::bigint[]), "
		"    pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]), "
		"    pg_catalog.unnest($7::bigint[])) "
		"    AS n(key, first_block, last_block, pending_count, first_seq, last_seq)), "
		"joined AS ("
		"  UPDATE ordered_events.backlog_keys k SET last_block = n.last_block, "
		"    pending_count = k.pending_count + n.pending_count, last_seq = n.last_seq "
		"  FROM n WHERE k.stream_id = $1 AND k.key = n.key AND k.last_block = n.first_block - 1 "
		"  RETURNING n.key, n.first_block) "
		"INSERT INTO ordered_events.backlog_keys "
		"(stream_id, key, first_block, last_block, pending_count, first_seq, last_seq) "
		"SELECT $1, n.key, n.first_block, n.last_block, n.pending_count, n.first_seq, n.last_seq "
		"FROM n WHERE NOT EXISTS ("
		"  SELECT FROM joined j WHERE j.key = n.key AND j.first_block = n.first_block)",
		7, {INT4OID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID,
		INT8ARRAYOID}
	},
	[PLAN_LOAD_PASSED] = {
		"SELECT keys, passed, min_last_block FROM ordered_events.backlog_keys_passed "
		"WHERE stream_id = $1",
		1, {INT4OID}
	},

	/*
	 * The rows that begin in blocks $2 .. $3 - 1: those that end below
	 * block $4 go (key, count), and the least last block of the others
	 * (a row with a NULL key).
	 */
	[PLAN_DROP_ROWS] = {
		"WITH gone AS ("
		"  DELETE FROM ordered_events.backlog_keys "
		"  WHERE stream_id = $1 AND first_block >= $2 AND first_block < $3 AND last_block < $4 "
		"  RETURNING key, pending_count) "
		"SELECT key, pending_count FROM gone "
		"UNION ALL "
		"SELECT NULL, pg_catalog.min(last_block) FROM ordered_events.backlog_keys "
		"WHERE stream_id = $1 AND first_block >= $2 AND first_block < $3 AND last_block >= $4",
		4, {INT4OID, INT8OID, INT8OID, INT8OID}
	},
	[PLAN_SAVE_PASSED] = {
		"INSERT INTO ordered_events.backlog_keys_passed "
		"(stream_id, kept_block, keys, passed, first_seqs, min_last_block) "
		"VALUES ($1, $2, $3, $4, $5, $6) "
		"ON CONFLICT (stream_id) DO UPDATE SET kept_block = $2, keys = $3, passed = $4, "
		"first_seqs = $5, min_last_block = $6",
		6, {INT4OID, INT8OID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8OID}
	},
	[PLAN_DROP_PASSED] = {
		"DELETE FROM ordered_events.backlog_keys_passed WHERE stream_id = $1",
		1, {INT4OID}
	},
	[PLAN_FORGET_KEYS] = {
		"DELETE FROM ordered_events.backlog_keys WHERE stream_id = $1",
		1, {INT4OID}
	},
};

/* Hash tables by key (oe_key_table()): the entry's first field is the key. */
static HTAB *
key_table(const char *name, Size entrysize)
{
	return oe_key_table(name, 1024, entrysize, CurrentMemoryContext);
}

/*
 * The entry of a key; *found is false for a new one, whose fields but the
 * key the caller sets.
 */
static void *
text_entry(HTAB *table, text *key, bool *found)
{
	text	  **entry = hash_search(table, &key, HASH_ENTER, found);

	/* the caller's copy may go: keep one of our own */
	if (!*found)
		*entry = cstring_to_text_with_len(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
	return entry;
}

/* The key of the event in the slot. */
static text *
event_key(TupleTableSlot *slot)
{
	bool		isnull;

	return DatumGetTextPP(slot_getattr(slot, Anum_oe_event_key, &isnull));
}

static void *
key_entry(HTAB *table, TupleTableSlot *slot, bool *found)
{
	return text_entry(table, event_key(slot), found);
}

/* A key of the blocks a step stores. */
typedef struct RunKey
{
	text	   *key;			/* hash key (a pointer, see oe_key_table()) */
	int64		count;			/* its events in the block looked at, */
	int64		first;			/* ... the first one's seq */
	int64		last;			/* ... and the last one's */
	bool		in_run;			/* this step's run of stored blocks, open: */
	int64		run_first_block;
	int64		run_last_block;
	int64		run_count;
	int64		run_first;
	int64		run_last;
} RunKey;

#define RUN_COLUMNS 6			/* key, first_block, last_block, count, first, last */

struct OeKeyRuns
{
	HTAB	   *keys;			/* RunKeys */
	RunKey	  **touched;		/* the keys of the block looked at */
	int			ntouched;
	int			room;
	ArrayBuildState *columns[RUN_COLUMNS];	/* the runs closed */
};

/*
 * Begin to collect the keys of the blocks a step stores in the lane; NULL
 * for a per-key lane (one key: lane_backlog() counts it).
 */
OeKeyRuns *
oe_keys_begin(const OeLane *lane)
{
	OeKeyRuns  *runs;

	if (lane->stream->per_key)
		return NULL;
	runs = palloc0(sizeof(OeKeyRuns));
	runs->keys = key_table("ordered_events backlog keys", sizeof(RunKey));
	runs->room = 1024;
	runs->touched = palloc(sizeof(RunKey *) * runs->room);
	return runs;
}

/* The event in the slot, at seq, is in the block the step looks at. */
void
oe_keys_note(OeKeyRuns *runs, TupleTableSlot *slot, int64 seq)
{
	RunKey	   *k;
	bool		found;

	if (runs == NULL)
		return;
	k = key_entry(runs->keys, slot, &found);
	if (!found)
	{
		k->count = 0;
		k->in_run = false;
	}
	if (k->count == 0)
	{
		if (runs->ntouched == runs->room)
		{
			runs->room *= 2;
			runs->touched = repalloc(runs->touched, sizeof(RunKey *) * runs->room);
		}
		runs->touched[runs->ntouched++] = k;
		k->first = seq;
	}
	k->count++;
	k->last = seq;
}

static void
close_run(OeKeyRuns *runs, RunKey *k)
{
	Datum		values[RUN_COLUMNS] = {
		PointerGetDatum(k->key), Int64GetDatum(k->run_first_block),
		Int64GetDatum(k->run_last_block), Int64GetDatum(k->run_count),
		Int64GetDatum(k->run_first), Int64GetDatum(k->run_last)
	};

	for (int i = 0; i < RUN_COLUMNS; i++)
		runs->columns[i] = accumArrayResult(runs->columns[i], values[i], false,
											i == 0 ? TEXTOID : INT8OID, CurrentMemoryContext);
	k->in_run = false;
}

/*
 * The block looked at ends: if the step stores it, each of its keys' runs
 * goes on with it when the key's run ended at the block before, or a new
 * one starts.
 */
void
oe_keys_end_block(OeKeyRuns *runs, int64 block, bool stored)
{
	if (runs == NULL)
		return;
	for (int i = 0; i < runs->ntouched; i++)
	{
		RunKey	   *k = runs->touched[i];

		if (stored && k->in_run && k->run_last_block == block - 1)
		{
			k->run_last_block = block;
			k->run_count += k->count;
			k->run_last = k->last;
		}
		else if (stored)
		{
			if (k->in_run)
				close_run(runs, k);
			k->in_run = true;
			k->run_first_block = k->run_last_block = block;
			k->run_count = k->count;
			k->run_first = k->first;
			k->run_last = k->last;
		}
		k->count = 0;
	}
	runs->ntouched = 0;
}

/* Store the keys' runs of the blocks the step stored. */
void
oe_keys_store(const OeLane *lane, OeKeyRuns *runs)
{
	HASH_SEQ_STATUS status;
	RunKey	   *k;
	Datum		values[RUN_COLUMNS + 1];

	if (runs == NULL)
		return;
	hash_seq_init(&status, runs->keys);
	while ((k = hash_seq_search(&status)) != NULL)
	{
		if (k->in_run)
			close_run(runs, k);
	}
	if (runs->columns[0] == NULL)
		return;
	values[0] = Int32GetDatum(lane->stream->stream_id);
	for (int i = 0; i < RUN_COLUMNS; i++)
		values[i + 1] = makeArrayResult(runs->columns[i], CurrentMemoryContext);
	oe_run_plan(&plans[PLAN_STORE_KEYS], values, NULL, SPI_OK_INSERT);
}

/* A key of the events a step forgets. */
typedef struct PassedKey
{
	text	   *key;			/* hash key (a pointer, see oe_key_table()) */
	int64		passed;			/* its rows' events below the kept block */
	bool		in_kept;		/* it has an event in the kept block, */
	int64		kept_first;		/* ... at this seq first */
} PassedKey;

struct OeKeysPassed
{
	HTAB	   *keys;			/* PassedKeys */
	ListCell   *island;			/* the first island not wholly before the walk */
	int64		min_last;		/* a lower bound of the last blocks of the rows
								 * that reach into the kept block */
};

static PassedKey *
passed_entry(OeKeysPassed *passed, text *key)
{
	bool		found;
	PassedKey  *k = text_entry(passed->keys, key, &found);

	if (!found)
	{
		k->passed = 0;
		k->in_kept = false;
	}
	return k;
}

/* The lane's record of what its step forgets, begun at first use. */
static OeKeysPassed *
lane_passed(OeLane *lane)
{
	if (lane->passed_keys == NULL)
	{
		OeKeysPassed *passed = palloc0(sizeof(OeKeysPassed));

		passed->keys = key_table("ordered_events passed keys", sizeof(PassedKey));
		passed->island = list_head(lane->islands);
		lane->passed_keys = passed;
	}
	return lane->passed_keys;
}

/*
 * The walk releases the event in the slot, at seq (lane.c; in seq order):
 * one of the summary's if it is in an island of a global lane.
 */
void
oe_keys_released(OeLane *lane, TupleTableSlot *slot, int64 seq)
{
	OeKeysPassed *passed;
	const OeIsland *island;

	if (lane->islands == NIL || lane->stream->per_key)
		return;
	passed = lane_passed(lane);
	while (passed->island != NULL && ((OeIsland *) lfirst(passed->island))->last < seq)
		passed->island = lnext(lane->islands, passed->island);
	if (passed->island == NULL)
		return;
	island = lfirst(passed->island);
	if (seq >= island->first)
		passed_entry(passed, event_key(slot))->passed++;
}

/* True if seq is in an island of the lane (as loaded by the step). */
static bool
in_island(const OeLane *lane, int64 seq)
{
	ListCell   *lc;

	foreach(lc, lane->islands)
	{
		const OeIsland *island = lfirst(lc);

		if (seq < island->first)
			return false;
		if (seq <= island->last)
			return true;
	}
	return false;
}

/*
 * Show each event of the lane from..to (inclusive, from <= to) to the
 * record: counted as forgotten, or, with "wanted" keys, as the first of its
 * key in the kept block (the scan ends when each wanted key was found).
 */
static void
scan_events(OeLane *lane, Snapshot snapshot, int64 from, int64 to, long wanted)
{
	OeKeysPassed *passed = lane_passed(lane);
	OeLaneScan	ls;
	int64		first;
	int64		last;
	const OeIsland *island;

	oe_lane_scan_begin(&ls, lane, snapshot, from, false);
	while (oe_lane_scan_next(&ls, &first, &last, &island) && first <= to)
	{
		text	   *key = event_key(ls.slot);
		PassedKey  *k;

		if (wanted == 0)
		{
			passed_entry(passed, key)->passed++;
			continue;
		}
		/* only a key whose row reaches below is wanted */
		k = hash_search(passed->keys, &key, HASH_FIND, NULL);
		if (k != NULL && k->passed > 0 && !k->in_kept)
		{
			k->in_kept = true;
			k->kept_first = first;
			if (--wanted == 0)
				break;
		}
	}
	oe_lane_scan_end(&ls);
}

/* The keys of the record whose row reaches into the kept block. */
static long
keys_reaching(OeKeysPassed *passed)
{
	HASH_SEQ_STATUS status;
	PassedKey  *k;
	long		n = 0;

	hash_seq_init(&status, passed->keys);
	while ((k = hash_seq_search(&status)) != NULL)
		n += k->passed > 0;
	return n;
}

/*
 * Add what the last pass recorded to the record: the events below its kept
 * block of the rows that reached into it.  Returns a lower bound of those
 * rows' last blocks (they only grow), PG_INT64_MAX if there is none.
 */
static int64
add_last_pass(const OeLane *lane, OeKeysPassed *passed)
{
	Datum		id = Int32GetDatum(lane->stream->stream_id);
	bool		isnull;
	Datum	   *keys;
	Datum	   *counts;
	int			n;

	oe_run_plan(&plans[PLAN_LOAD_PASSED], &id, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return PG_INT64_MAX;
	deconstruct_array(DatumGetArrayTypeP(oe_result(0, 1, &isnull)), TEXTOID, -1, false,
					  TYPALIGN_INT, &keys, NULL, &n);
	deconstruct_array(DatumGetArrayTypeP(oe_result(0, 2, &isnull)), INT8OID, 8,
					  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &counts, NULL, &n);
	for (int i = 0; i < n; i++)
		passed_entry(passed, DatumGetTextPP(keys[i]))->passed += DatumGetInt64(counts[i]);
	return DatumGetInt64(oe_result(0, 3, &isnull));
}

/*
 * Drop the rows that begin in blocks from .. to - 1 and end below the kept
 * block, and their events from the record; the least last block of those
 * that reach into it lowers the record's bound.
 */
static void
drop_rows(const OeLane *lane, OeKeysPassed *passed, int64 from, int64 to, int64 kept_block)
{
	Datum		values[4] = {Int32GetDatum(lane->stream->stream_id), Int64GetDatum(from),
	Int64GetDatum(to), Int64GetDatum(kept_block)};

	oe_run_plan(&plans[PLAN_DROP_ROWS], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		no_key;
		bool		isnull;
		Datum		key = oe_result(i, 1, &no_key);
		Datum		value = oe_result(i, 2, &isnull);

		if (!no_key)
			passed_entry(passed, DatumGetTextPP(key))->passed -= DatumGetInt64(value);
		else if (!isnull)
			passed->min_last = Min(passed->min_last, DatumGetInt64(value));
	}
}

/*
 * Store the record: each key whose row reaches into the kept block, the
 * row's events below it and the key's first seq in it.
 */
static void
save_pass(const OeLane *lane, OeKeysPassed *passed, int64 kept_block)
{
	HASH_SEQ_STATUS status;
	PassedKey  *k;
	int			n = 0;
	long		size = Max(hash_get_num_entries(passed->keys), 1);
	Datum	   *keys = palloc(sizeof(Datum) * size);
	Datum	   *counts = palloc(sizeof(Datum) * size);
	Datum	   *firsts = palloc(sizeof(Datum) * size);
	Datum		values[6];

	hash_seq_init(&status, passed->keys);
	while ((k = hash_seq_search(&status)) != NULL)
	{
		if (k->passed == 0)
			continue;			/* its rows below the kept block are gone */
		if (k->passed < 0 || !k->in_kept)
			elog(ERROR, "the backlog summary of stream \"%s\" lost count of key \"%s\"",
				 lane->stream->name, text_to_cstring(k->key));
		keys[n] = PointerGetDatum(k->key);
		counts[n] = Int64GetDatum(k->passed);
		firsts[n] = Int64GetDatum(k->kept_first);
		n++;
	}
	values[0] = Int32GetDatum(lane->stream->stream_id);
	if (n == 0)
	{
		oe_run_plan(&plans[PLAN_DROP_PASSED], values, NULL, SPI_OK_DELETE);
		return;
	}
	values[1] = Int64GetDatum(kept_block);
	values[2] = oe_array(keys, NULL, n, TEXTOID);
	values[3] = oe_array(counts, NULL, n, INT8OID);
	values[4] = oe_array(firsts, NULL, n, INT8OID);
	values[5] = Int64GetDatum(passed->min_last);
	oe_run_plan(&plans[PLAN_SAVE_PASSED], values, NULL, SPI_OK_INSERT);
}

/*
 * The step moved the lane's range (to range_end) and forgets its blocks
 * below pass->kept_block: forget their events from the keys' rows.
 *
 * The rows that begin below pass->from_block are those that reached into
 * the last kept block, the record's: they are looked at only if one may
 * end below the new one (its bound says); those that begin in blocks the
 * range passed, always.  A growing run's row is updated in place (HOT: no
 * index has its last block), and a drain step reads none of it.
 */
void
oe_keys_pass(OeLane *lane, Snapshot snapshot, const OeKeysPass *pass)
{
	OeKeysPassed *passed;
	int64		bound;
	long		wanted;

	/* no island below the kept block: no row either */
	if (lane->islands == NIL || lane->stream->per_key ||
		((OeIsland *) linitial(lane->islands))->first > pass->tail_last)
		return;
	passed = lane_passed(lane);
	if (lane->range_end <= pass->tail_last && in_island(lane, lane->range_end))
		scan_events(lane, snapshot, lane->range_end, pass->tail_last, 0);
	bound = add_last_pass(lane, passed);
	passed->min_last = PG_INT64_MAX;
	if (bound < pass->kept_block)
		drop_rows(lane, passed, PG_INT64_MIN, pass->from_block, pass->kept_block);
	else
		passed->min_last = bound;
	drop_rows(lane, passed, pass->from_block, pass->kept_block, pass->kept_block);
	wanted = keys_reaching(passed);
	if (wanted > 0 && pass->kept_first <= pass->kept_last && in_island(lane, pass->kept_first))
		scan_events(lane, snapshot, pass->kept_first, pass->kept_last, wanted);
	save_pass(lane, passed, pass->kept_block);
}

/* Forget the keys' rows of a global lane: its blocks are forgotten. */
void
oe_keys_forget(const OeLane *lane)
{
	Datum		id = Int32GetDatum(lane->stream->stream_id);

	if (lane->stream->per_key)
		return;
	oe_run_plan(&plans[PLAN_FORGET_KEYS], &id, NULL, SPI_OK_DELETE);
	oe_run_plan(&plans[PLAN_DROP_PASSED], &id, NULL, SPI_OK_DELETE);
}
