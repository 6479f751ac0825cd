/*-------------------------------------------------------------------------
 *
 * compaction.c
 *	  Counting and retention for a stream, in batches: the worker runs one
 *	  batch a transaction (compact_stream()), compact() by hand every batch
 *	  that is due, in one call (compact_due()).
 *
 * Each part of a worker's batch handles at most 1000 events (or
 * max_release_batch if lower), so that the worker soon gets back to
 * releasing; each part of a batch by hand at most HAND_BATCH (below):
 * 1. a global stream's released events from its lane's counted_end on are
 *	  counted per key in key_counters, up to the end of its released prefix
 *	  (ordered_events.released_end(): a skipped run that may still hold late
 *	  events is not released);
 * 2. with a retention, the oldest released events that every subscribed
 *	  consumer has read past (and no lease consumer has out), released
 *	  longer ago than the retention and counted, are deleted, with the
 *	  release runs (log rows) they empty; a global stream's oldest run may
 *	  be deleted in parts (its seq_start moves up); the stream's newest run
 *	  stays, emptied, since release steps number the next one after it
 *	  (delivery.c); counted in deleted_totals;
 * 3. with a dead_letter_retention, the stream's older rejections leave
 *	  unprocessed, counted per key in key_counters and in deleted_totals.
 *
 * By hand, every batch runs in the caller's transaction, one after the
 * other, with no subtransaction: a function cannot commit, and a
 * subtransaction would neither free the row versions an earlier batch
 * left (nobody may prune them before the top transaction ends) nor
 * release the stream's lock (a row lock, kept until the end).  What a
 * batch bounds is its memory (its SPI context, freed after it) and the
 * rows of each statement.  Batches by hand are large because each batch
 * walks what the earlier ones of the same transaction left: the versions
 * of the key_counters rows it counts into again, the index entries of the
 * runs and dead letters they deleted.  Counting 2M events in one call took
 * 3.3 s in batches of 100,000 and 27 s in batches of 10,000
 * (bench/RESULTS.md, "Compaction by hand").  The stream's lock is held
 * from the first batch to the caller's commit: a release() of that stream
 * waits meanwhile, the worker passes it by.
 *
 * Concurrency: a step of the engine (step.c), so it holds the stream's
 * release lock, the lock the release steps hold, and reads what every
 * consumer has read after taking it.  That is why it refuses a REPEATABLE
 * READ or SERIALIZABLE transaction: under a snapshot taken before the lock
 * it would miss a subscription made meanwhile (a subscribe() from the
 * beginning waits for the lock, then counts what was deleted as read) and
 * delete the events that subscription is shown as unread.  Under READ
 * COMMITTED each statement after the lock sees all of it; the worker's own
 * transactions always use it (worker.c).  Every statement is planned for
 * its values (CURSOR_OPT_CUSTOM_PLAN): a plan cached while a table was
 * small would scan it whole.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* A bigint that may be NULL, as the statements below return them. */
typedef struct MaybeSeq
{
	int64		value;
	bool		isnull;
} MaybeSeq;

/* One batch of compaction under way. */
typedef struct Compaction
{
	const OeStream *stream;
	TimestampTz clock;			/* when it started */
	int64		batch;
	bool		retains;		/* a retention is set */
	TimestampTz kept_since;		/* released before it: past the retention */
	bool		retains_rejected;	/* a dead_letter_retention is set */
	TimestampTz rejected_since; /* received before it: past that */
	MaybeSeq	counted_end;
	int64		deleted;
	bool		more;
	bool		changed;		/* it counted, deleted or shortened anything */
	int64		hand_batch;		/* by hand: its batch (banner); 0 for the worker */
} Compaction;

/* The most events a part of the worker's batch handles (banner). */
#define WORKER_BATCH 1000

/* The most events a part of a batch by hand handles (banner). */
#define HAND_BATCH 100000

#define CUSTOM CURSOR_OPT_CUSTOM_PLAN

enum
{
	PLAN_STREAM,
	PLAN_SETTINGS,
	PLAN_COUNT_BOUNDS,
	PLAN_NTH_SEQ,
	PLAN_COUNT_KEYS,
	PLAN_SET_COUNTED,
	PLAN_READ_FROM,
	PLAN_NEWEST,
	PLAN_OLDEST_START,
	PLAN_KEPT_START,
	PLAN_GLOBAL_RUNS,
	PLAN_PER_KEY_RUNS,
	PLAN_DELETE_EVENTS,
	PLAN_DELETE_RUN,
	PLAN_SHORTEN_RUN,
	PLAN_ADD_DELETED,
	PLAN_DEAD_LETTERS,
	PLAN_ADD_DEAD_LETTERS
};

static OePlan plans[] = {
	[PLAN_STREAM] = {
		"SELECT stream FROM ordered_events.stream_def WHERE stream_id = $1",
		1, {INT4OID}
	},
	[PLAN_SETTINGS] = {
		"SELECT ordered_events.retention_cutoff($2, d.retention), "
		"  ordered_events.retention_cutoff($2, d.dead_letter_retention), "
		"  d.retention IS NOT NULL, d.dead_letter_retention IS NOT NULL "
		"FROM ordered_events.stream_def d WHERE d.stream_id = $1",
		2, {INT4OID, TIMESTAMPTZOID}
	},
	[PLAN_COUNT_BOUNDS] = {
		"SELECT coalesce(p.counted_end, $2), "
		"  ordered_events.released_end(p.stream_id, p.lane, p.range_end) "
		"FROM ordered_events.progress p WHERE p.stream_id = $1 AND p.lane = ''",
		2, {INT4OID, INT8OID}, CUSTOM
	},
	/* the seqs between may be skipped ones */
	[PLAN_NTH_SEQ] = {
		"SELECT e.seq FROM ordered_events.event_store e "
		"WHERE e.stream_id = $1 AND e.lane = '' AND e.seq >= $2 AND e.seq < $3 "
		"ORDER BY e.seq OFFSET $4 LIMIT 1",
		4, {INT4OID, INT8OID, INT8OID, INT8OID}, CUSTOM
	},
	[PLAN_COUNT_KEYS] = {
		"INSERT INTO ordered_events.key_counters AS k "
		"  (stream_id, key, released_count, last_released_seq) "
		"SELECT $1, e.key, pg_catalog.count(*), pg_catalog.max(e.seq) "
		"FROM ordered_events.event_store e "
		"WHERE e.stream_id = $1 AND e.lane = '' AND e.seq >= $2 AND e.seq < $3 "
		"GROUP BY e.key "
		"ON CONFLICT ON CONSTRAINT key_counters_pkey DO UPDATE "
		"SET released_count = k.released_count + excluded.released_count, "
		"  last_released_seq = pg_catalog.int8larger(k.last_released_seq, "
		"                                            excluded.last_released_seq)",
		3, {INT4OID, INT8OID, INT8OID}, CUSTOM
	},
	[PLAN_SET_COUNTED] = {
		"UPDATE ordered_events.progress p SET counted_end = $2 "
		"WHERE p.stream_id = $1 AND p.lane = ''",
		2, {INT4OID, INT8OID}, CUSTOM
	},
	/*
	 * What every consumer read past: the release runs before its position,
	 * or all of them for a partition with nothing left to read; and before
	 * the oldest event a lease consumer has out (lease.floors, src/lease.c).
	 */
	[PLAN_READ_FROM] = {
		"SELECT LEAST((SELECT pg_catalog.min(s.read_delivery) "
		"              FROM ordered_events.subscription s "
		"              JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id "
		"              JOIN ordered_events.release_totals t "
		"                ON t.stream_id = s.stream_id AND t.partitions = c.partitions "
		"               AND t.partition = s.partition "
		"             WHERE s.stream_id = $1 AND s.taken_count < t.released_count), "
		"             (SELECT pg_catalog.min(f.floor) FROM ordered_events.lease x "
		"               CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(x.streams), "
		"                                             pg_catalog.unnest(x.floors)) "
		"                     AS f(stream_id, floor) "
		"              WHERE f.stream_id = $1))",
		1, {INT4OID}, CUSTOM
	},
	[PLAN_NEWEST] = {
		"SELECT pg_catalog.max(l.delivery) FROM ordered_events.lane_release_log l "
		"WHERE l.stream_id = $1",
		1, {INT4OID}, CUSTOM
	},
	[PLAN_OLDEST_START] = {
		"SELECT l.seq_start FROM ordered_events.lane_release_log l "
		"WHERE l.stream_id = $1 ORDER BY l.delivery LIMIT 1",
		1, {INT4OID}, CUSTOM
	},
	/* the first run that must stay */
	[PLAN_KEPT_START] = {
		"SELECT l.seq_start FROM ordered_events.lane_release_log l "
		"WHERE l.stream_id = $1 AND (l.delivery >= $2 OR l.released_at >= $3) "
		"ORDER BY l.delivery LIMIT 1",
		3, {INT4OID, INT8OID, TIMESTAMPTZOID}, CUSTOM
	},
	/* runs (lane, seq_start, seq_end, delivery, emptied) up to $2, the last in part */
	[PLAN_GLOBAL_RUNS] = {
		"SELECT ''::text, l.seq_start, pg_catalog.int8smaller(l.seq_end, $2), l.delivery, "
		"  l.seq_end <= $2 "
		"FROM ordered_events.lane_release_log l "
		"WHERE l.stream_id = $1 AND l.lane = '' "
		"  AND l.seq_end <= coalesce("
		"      (SELECT l2.seq_end FROM ordered_events.lane_release_log l2 "
		"        WHERE l2.stream_id = $1 AND l2.lane = '' AND l2.seq_end >= $2 "
		"        ORDER BY l2.seq_end LIMIT 1), 9223372036854775807) "
		"  AND l.seq_start < $2 "
		"ORDER BY l.delivery",
		2, {INT4OID, INT8OID}, CUSTOM
	},

	/*
	 * Whole runs, at most "batch" ($3) of them or the one that reaches
	 * "batch" seqs; a lane stops before a skipped run that may still
	 * receive late events.  $2 read_from, $4 kept_since, $5 the newest run.
	 */
	[PLAN_PER_KEY_RUNS] = {
		"SELECT c.lane, c.seq_start, c.seq_end, c.delivery, true "
		"FROM (SELECT l.lane, l.seq_start, l.seq_end, l.delivery, l.released_at, "
		"             coalesce(pg_catalog.sum(l.seq_end::numeric - l.seq_start) "
		"                 OVER (ORDER BY l.delivery ROWS BETWEEN UNBOUNDED PRECEDING "
		"                                               AND 1 PRECEDING), 0) AS before "
		"        FROM ordered_events.lane_release_log l "
		"       WHERE l.stream_id = $1 AND ($2 IS NULL OR l.delivery < $2) "
		"       ORDER BY l.delivery LIMIT $3) c "
		"WHERE c.released_at < $4 AND c.before < $3 "
		"  AND (c.delivery <> $5 OR c.seq_start < c.seq_end) "
		"  AND ordered_events.released_end($1, c.lane, c.seq_end) = c.seq_end "
		"ORDER BY c.delivery",
		5, {INT4OID, INT8OID, INT8OID, TIMESTAMPTZOID, INT8OID}, CUSTOM
	},
	[PLAN_DELETE_EVENTS] = {
		"DELETE FROM ordered_events.event_store e "
		"WHERE e.stream_id = $1 AND e.lane = $2 AND e.seq >= $3 AND e.seq < $4",
		4, {INT4OID, TEXTOID, INT8OID, INT8OID}, CUSTOM
	},
	[PLAN_DELETE_RUN] = {
		"DELETE FROM ordered_events.lane_release_log l "
		"WHERE l.stream_id = $1 AND l.delivery = $2",
		2, {INT4OID, INT8OID}, CUSTOM
	},
	[PLAN_SHORTEN_RUN] = {
		"UPDATE ordered_events.lane_release_log l SET seq_start = $3 "
		"WHERE l.stream_id = $1 AND l.delivery = $2",
		3, {INT4OID, INT8OID, INT8OID}, CUSTOM
	},
	[PLAN_ADD_DELETED] = {
		"INSERT INTO ordered_events.deleted_totals AS t (stream_id, events) VALUES ($1, $2) "
		"ON CONFLICT ON CONSTRAINT deleted_totals_pkey DO UPDATE SET events = t.events + $2",
		2, {INT4OID, INT8OID}
	},
	/* the oldest, up to "batch" ($4) of them (and those received at the same time) */
	[PLAN_DEAD_LETTERS] = {
		"WITH gone AS ("
		"    DELETE FROM ordered_events.unprocessed u "
		"     WHERE u.stream = $2 AND u.consumer IS NULL AND u.received_at < $3 "
		"       AND u.received_at <= coalesce("
		"           (SELECT u2.received_at FROM ordered_events.unprocessed u2 "
		"             WHERE u2.stream = $2 AND u2.consumer IS NULL "
		"             ORDER BY u2.received_at OFFSET $4 - 1 LIMIT 1), 'infinity') "
		"    RETURNING u.key, u.reason), "
		"  per_key AS ("
		"    INSERT INTO ordered_events.key_counters AS k "
		"        (stream_id, key, rejected_count, duplicate_count) "
		"    SELECT $1, g.key, pg_catalog.count(*), "
		"           pg_catalog.count(*) FILTER (WHERE g.reason = 'duplicate') "
		"      FROM gone g GROUP BY g.key "
		"    ON CONFLICT ON CONSTRAINT key_counters_pkey DO UPDATE "
		"       SET rejected_count = k.rejected_count + excluded.rejected_count, "
		"           duplicate_count = k.duplicate_count + excluded.duplicate_count "
		"    RETURNING 1) "
		"SELECT pg_catalog.count(*) FROM gone",
		4, {INT4OID, TEXTOID, TIMESTAMPTZOID, INT8OID}, CUSTOM
	},
	[PLAN_ADD_DEAD_LETTERS] = {
		"INSERT INTO ordered_events.deleted_totals AS t (stream_id, dead_letters) "
		"VALUES ($1, $2) ON CONFLICT ON CONSTRAINT deleted_totals_pkey "
		"DO UPDATE SET dead_letters = t.dead_letters + $2",
		2, {INT4OID, INT8OID}
	},
};

/* Run a plan whose first column of its one row (if any) is a bigint. */
static MaybeSeq
seq_of(int plan, Datum *values, const char *nulls)
{
	MaybeSeq	seq = {0, true};

	oe_run_plan(&plans[plan], values, nulls, SPI_OK_SELECT);
	if (SPI_processed > 0)
		seq.value = DatumGetInt64(oe_result(0, 1, &seq.isnull));
	return seq;
}

/* The smaller of two, NULL only if both are (as least() does). */
static MaybeSeq
least_of(MaybeSeq a, MaybeSeq b)
{
	if (a.isnull || (!b.isnull && b.value < a.value))
		return b;
	return a;
}

/* The retentions and their cut-offs at the compaction's clock. */
static void
read_settings(Compaction *c)
{
	Datum		values[2] = {Int32GetDatum(c->stream->stream_id), TimestampTzGetDatum(c->clock)};
	bool		isnull;

	oe_run_plan(&plans[PLAN_SETTINGS], values, NULL, SPI_OK_SELECT);
	c->kept_since = DatumGetTimestampTz(oe_result(0, 1, &isnull));
	c->rejected_since = DatumGetTimestampTz(oe_result(0, 2, &isnull));
	c->retains = DatumGetBool(oe_result(0, 3, &isnull));
	c->retains_rejected = DatumGetBool(oe_result(0, 4, &isnull));
	c->batch = c->hand_batch > 0 ? c->hand_batch
		: Min(c->stream->max_release_batch, WORKER_BATCH);
}

/*
 * "to" moved down, if needed, to the seq "batch" events after "from" in
 * the global lane: a part handles at most "batch" events.
 */
static MaybeSeq
batch_end(const Compaction *c, MaybeSeq from, MaybeSeq to)
{
	Datum		values[4];
	MaybeSeq	nth;

	if (from.isnull || to.isnull)
		return to;
	values[0] = Int32GetDatum(c->stream->stream_id);
	values[1] = Int64GetDatum(from.value);
	values[2] = Int64GetDatum(to.value);
	values[3] = Int64GetDatum(c->batch);
	nth = seq_of(PLAN_NTH_SEQ, values, NULL);
	return nth.isnull ? to : nth;
}

/* Part 1: count a global stream's released events per key (banner). */
static void
count_released(Compaction *c)
{
	Datum		values[3] = {Int32GetDatum(c->stream->stream_id),
	Int64GetDatum(c->stream->initial_sequence)};
	MaybeSeq	count_to = {0, true};

	c->counted_end.isnull = true;
	oe_run_plan(&plans[PLAN_COUNT_BOUNDS], values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		c->counted_end.value = DatumGetInt64(oe_result(0, 1, &c->counted_end.isnull));
		count_to.value = DatumGetInt64(oe_result(0, 2, &count_to.isnull));
	}
	if (c->counted_end.isnull || count_to.isnull || count_to.value <= c->counted_end.value)
		return;

	count_to = batch_end(c, c->counted_end, count_to);
	values[1] = Int64GetDatum(c->counted_end.value);
	values[2] = Int64GetDatum(count_to.value);
	oe_run_plan(&plans[PLAN_COUNT_KEYS], values, NULL, SPI_OK_INSERT);
	values[1] = Int64GetDatum(count_to.value);
	oe_run_plan(&plans[PLAN_SET_COUNTED], values, NULL, SPI_OK_UPDATE);
	c->more = true;
	c->changed = true;
	c->counted_end = count_to;
}

/*
 * The runs of a global stream to delete: from the oldest run to the first
 * that must stay, or that is not counted, at most "batch" events, the last
 * run in part.  Leaves them in SPI_tuptable.
 */
static void
global_runs(const Compaction *c, MaybeSeq read_from)
{
	Datum		values[3] = {Int32GetDatum(c->stream->stream_id)};
	char		nulls[3] = {' ', ' ', ' '};
	MaybeSeq	delete_from = seq_of(PLAN_OLDEST_START, values, NULL);
	MaybeSeq	delete_to;

	values[1] = Int64GetDatum(read_from.value);
	nulls[1] = read_from.isnull ? 'n' : ' ';
	values[2] = TimestampTzGetDatum(c->kept_since);
	delete_to = least_of(c->counted_end, seq_of(PLAN_KEPT_START, values, nulls));
	delete_to = batch_end(c, delete_from, delete_to);

	values[1] = Int64GetDatum(delete_to.value);
	nulls[1] = delete_to.isnull ? 'n' : ' ';
	oe_run_plan(&plans[PLAN_GLOBAL_RUNS], values, nulls, SPI_OK_SELECT);
}

/* The runs of a per-key stream to delete, into SPI_tuptable. */
static void
per_key_runs(const Compaction *c, MaybeSeq read_from, MaybeSeq newest)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = Int32GetDatum(c->stream->stream_id);
	values[1] = Int64GetDatum(read_from.value);
	nulls[1] = read_from.isnull ? 'n' : ' ';
	values[2] = Int64GetDatum(c->batch);
	values[3] = TimestampTzGetDatum(c->kept_since);
	values[4] = Int64GetDatum(newest.value);
	nulls[4] = newest.isnull ? 'n' : ' ';
	oe_run_plan(&plans[PLAN_PER_KEY_RUNS], values, nulls, SPI_OK_SELECT);
}

/*
 * Delete the events of the runs in "runs" (lane, seq_start, seq_end,
 * delivery, emptied; by delivery), and the runs they empty, but the
 * stream's newest, which is shortened instead.
 */
static void
delete_runs(Compaction *c, SPITupleTable *runs, uint64 nruns, MaybeSeq newest)
{
	Datum		values[4] = {Int32GetDatum(c->stream->stream_id)};
	bool		isnull;
	bool		emptied = false;
	int64		delivery = 0;

	for (uint64 i = 0; i < nruns; i++)
	{
		HeapTuple	row = runs->vals[i];
		Datum		seq_end = SPI_getbinval(row, runs->tupdesc, 3, &isnull);

		delivery = DatumGetInt64(SPI_getbinval(row, runs->tupdesc, 4, &isnull));
		emptied = DatumGetBool(SPI_getbinval(row, runs->tupdesc, 5, &isnull));
		values[1] = SPI_getbinval(row, runs->tupdesc, 1, &isnull);
		values[2] = SPI_getbinval(row, runs->tupdesc, 2, &isnull);
		values[3] = seq_end;
		oe_run_plan(&plans[PLAN_DELETE_EVENTS], values, NULL, SPI_OK_DELETE);
		c->deleted += (int64) SPI_processed;

		values[1] = Int64GetDatum(delivery);
		values[2] = seq_end;
		if (emptied && !newest.isnull && delivery != newest.value)
			oe_run_plan(&plans[PLAN_DELETE_RUN], values, NULL, SPI_OK_DELETE);
		else
			oe_run_plan(&plans[PLAN_SHORTEN_RUN], values, NULL, SPI_OK_UPDATE);
	}
	values[1] = Int64GetDatum(c->deleted);
	oe_run_plan(&plans[PLAN_ADD_DELETED], values, NULL, SPI_OK_INSERT);
	/* done when the newest run was emptied; else there may be more */
	c->more = c->more || !emptied || newest.isnull || delivery != newest.value;
}

/* Part 2: delete released events past the retention that all have read. */
static void
delete_released(Compaction *c)
{
	Datum		id = Int32GetDatum(c->stream->stream_id);
	MaybeSeq	read_from = seq_of(PLAN_READ_FROM, &id, NULL);

	/* the newest run stays, emptied: release steps number the next after it */
	MaybeSeq	newest = seq_of(PLAN_NEWEST, &id, NULL);

	if (c->stream->per_key)
		per_key_runs(c, read_from, newest);
	else
		global_runs(c, read_from);
	if (SPI_processed > 0)
	{
		delete_runs(c, SPI_tuptable, SPI_processed, newest);
		c->changed = true;
	}
}

/* Part 3: the stream's older rejections leave unprocessed. */
static void
delete_dead_letters(Compaction *c)
{
	Datum		values[4];
	bool		isnull;
	int64		rejected;

	values[0] = Int32GetDatum(c->stream->stream_id);
	values[1] = CStringGetTextDatum(c->stream->name);
	values[2] = TimestampTzGetDatum(c->rejected_since);
	values[3] = Int64GetDatum(c->batch);
	oe_run_plan(&plans[PLAN_DEAD_LETTERS], values, NULL, SPI_OK_SELECT);
	rejected = DatumGetInt64(oe_result(0, 1, &isnull));
	if (rejected > 0)
	{
		values[1] = Int64GetDatum(rejected);
		oe_run_plan(&plans[PLAN_ADD_DEAD_LETTERS], values, NULL, SPI_OK_INSERT);
		c->changed = true;
	}
	c->more = c->more || rejected >= c->batch;
}

/* The body of a compaction step (see the banner); returns events deleted. */
static int64
compact_body(OeStepRun *run, void *arg)
{
	Compaction *c = arg;

	c->stream = &run->stream;
	read_settings(c);
	c->counted_end.isnull = true;
	if (!run->stream.per_key)
		count_released(c);
	if (c->retains)
		delete_released(c);
	if (c->retains_rejected)
		delete_dead_letters(c);
	return c->deleted;
}

static const OeStepKind compaction_step = {.body = compact_body};

/*
 * The stream of that id, as the catalog cache knows it; false if there is
 * none (the step's lock then tells whether it is still there).
 */
static bool
stream_of_id(int32 stream_id, OeStream *stream)
{
	Datum		id = Int32GetDatum(stream_id);
	OeInternalScope scope;
	char	   *name = NULL;
	bool		isnull;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&plans[PLAN_STREAM], &id, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		name = TextDatumGetCString(oe_result(0, 1, &isnull));
	oe_internal_end(&scope);
	return name != NULL && oe_lookup_stream(name, stream) && stream->stream_id == stream_id;
}

/* The error for a transaction whose snapshot compaction cannot use (banner). */
static void
check_isolation(void)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("compaction cannot run in a %s transaction",
						IsolationIsSerializable() ? "serializable" : "repeatable read"),
				 errdetail("Compaction must see the consumers' positions as committed once it holds the stream's lock; this transaction's snapshot may predate a subscription whose unread events it would delete."),
				 errhint("Call ordered_events.compact() in a READ COMMITTED transaction, or let the background worker compact: it always uses READ COMMITTED.")));
}

/*
 * One batch of compaction of the stream (see the banner), in the caller's
 * transaction: the number of events deleted; *more if there may be more to
 * do.  What compact_stream() and the worker (worker.c) run.
 */
int64
oe_compact(const OeStream *stream, bool *more)
{
	Compaction	c;

	check_isolation();
	memset(&c, 0, sizeof(c));
	c.clock = GetCurrentTimestamp();
	(void) oe_run_step(stream, &compaction_step, &c);
	*more = c.more;
	return c.deleted;
}

/*
 * Every batch of compaction that is due for the stream, by hand, in the
 * caller's transaction (see the banner), batches of "batch" events, all at
 * one clock: the number of events deleted.  Stops when a batch says there
 * is no more, or changed nothing (so that it cannot loop without
 * progress).
 */
static int64
compact_due(const OeStream *stream, int64 batch)
{
	TimestampTz clock = GetCurrentTimestamp();
	int64		deleted = 0;
	Compaction	c;

	do
	{
		CHECK_FOR_INTERRUPTS();
		memset(&c, 0, sizeof(c));
		c.clock = clock;
		c.hand_batch = batch;
		(void) oe_run_step(stream, &compaction_step, &c);
		deleted += c.deleted;
	} while (c.more && c.changed);
	return deleted;
}

/*
 * compact_stream(stream_id integer, OUT deleted bigint, OUT more boolean)
 *
 * oe_compact() of the stream of that id; (0, false) for a stream that does
 * not exist.
 */
PG_FUNCTION_INFO_V1(oe_compact_stream);
Datum
oe_compact_stream(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	TupleDesc	desc;
	Datum		values[2] = {Int64GetDatum(0), BoolGetDatum(false)};
	bool		nulls[2] = {false, false};
	bool		more = false;

	check_isolation();			/* for a stream that does not exist too */
	if (!PG_ARGISNULL(0) && stream_of_id(PG_GETARG_INT32(0), &stream))
		values[0] = Int64GetDatum(oe_compact(&stream, &more));
	values[1] = BoolGetDatum(more);

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "compact_stream() must return a record");
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * compact_due(stream_id integer, batch integer DEFAULT NULL) RETURNS bigint
 *
 * compact_due() of the stream of that id, in batches of "batch" events
 * (NULL: HAND_BATCH), what compact() runs: the events deleted; 0 for a
 * stream that does not exist.  Tests give a smaller batch.
 */
PG_FUNCTION_INFO_V1(oe_compact_due);
Datum
oe_compact_due(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	int64		deleted = 0;
	int64		batch = PG_ARGISNULL(1) ? HAND_BATCH : PG_GETARG_INT32(1);

	if (batch < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a compaction batch must be at least 1 event"),
				 errhint("Pass NULL for the batch of compact().")));
	check_isolation();			/* for a stream that does not exist too */
	if (!PG_ARGISNULL(0) && stream_of_id(PG_GETARG_INT32(0), &stream))
		deleted = compact_due(&stream, batch);
	PG_RETURN_INT64(deleted);
}
