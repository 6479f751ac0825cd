/*-------------------------------------------------------------------------
 *
 * delivery.c
 *	  What a release step records for consumers: the stream's delivery
 *	  order, and the totals that consumers' pools are measured against.
 *
 * Delivery order.  Every run a step releases in a lane is a row of
 * lane_release_log, numbered by "delivery" in the order consumers read.  A
 * global stream has one run per step, in seq order.  A per-key stream
 * delivers step after step; inside a step, each lane's events together in
 * seq order, the lanes by the alignment_ts of their first event released in
 * the step, then by lane (C collation).  A step collects its runs, merges
 * the runs of a lane it visited twice, numbers them after the stream's last
 * delivery and logs them in one statement.  No event row moves.
 *
 * Totals.  release_totals holds, per stream, the count and summed lag
 * (event_ts - alignment_ts, microseconds) of its released events, for every
 * partition count that its consumers use (1 always), per partition.  A
 * consumer's pool is these totals minus what it took out, so that nothing
 * counts a pool row by row.  The walk (lane.c) counts each event it
 * releases here; the step adds its counts at the end.
 *
 * Runs inside the step's transaction and internal-query scope, under the
 * stream's release lock (release.c).  subscribe() adds a partition count
 * under the same lock, so a step sees every count from its start to its end.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* A run of a lane that a step released: [start, end). */
typedef struct OeRun
{
	text	   *lane;
	int64		start;
	int64		end;
	bool		has_events;		/* skips alone release no event */
	TimestampTz first_alignment;	/* of its first event, if it has one */
} OeRun;

enum
{
	PLAN_PARTITION_COUNTS,
	PLAN_LAST_DELIVERY,
	PLAN_LOG,
	PLAN_ADD_TOTALS,
	PLAN_CONSUMERS
};

static OePlan plans[] = {
	[PLAN_PARTITION_COUNTS] = {
		"SELECT partitions FROM ordered_events.release_totals "
		"WHERE stream_id = $1 AND partition = 0 ORDER BY partitions",
		1, {INT4OID}
	},
	[PLAN_LAST_DELIVERY] = {
		"SELECT max(delivery) FROM ordered_events.lane_release_log WHERE stream_id = $1",
		1, {INT4OID}
	},
	[PLAN_LOG] = {
		"INSERT INTO ordered_events.lane_release_log "
		"(stream_id, lane, seq_start, seq_end, released_at, delivery) "
		"SELECT $1, r.lane, r.seq_start, r.seq_end, pg_catalog.clock_timestamp(), $2 + r.n "
		"FROM ROWS FROM (pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::bigint[]), "
		"  pg_catalog.unnest($5::bigint[])) WITH ORDINALITY AS r(lane, seq_start, seq_end, n)",
		5, {INT4OID, INT8OID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID}
	},
	[PLAN_ADD_TOTALS] = {
		"UPDATE ordered_events.release_totals t "
		"SET released_count = t.released_count + a.released_count, "
		"  lag_sum = t.lag_sum + a.lag_sum "
		"FROM ROWS FROM (pg_catalog.unnest($2::integer[]), pg_catalog.unnest($3::integer[]), "
		"  pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::numeric[])) "
		"  AS a(partitions, partition, released_count, lag_sum) "
		"WHERE t.stream_id = $1 AND t.partitions = a.partitions AND t.partition = a.partition",
		5, {INT4OID, INT4ARRAYOID, INT4ARRAYOID, INT8ARRAYOID, TEXTARRAYOID}
	},
	/* the consumers of the stream (wake_consumers()) */
	[PLAN_CONSUMERS] = {
		"SELECT c.consumer, c.partitions, c.consumer_id, c.handler IS NOT NULL "
		"FROM ordered_events.subscription s "
		"JOIN ordered_events.consumer_def c ON c.consumer_id = s.consumer_id "
		"WHERE s.stream_id = $1 AND s.partition = 0 ORDER BY c.consumer",
		1, {INT4OID}
	},
};

/* The lag of an event in microseconds; none if a time is infinite. */
int128
oe_lag(TimestampTz event_ts, TimestampTz alignment_ts)
{
	if (TIMESTAMP_NOT_FINITE(event_ts) || TIMESTAMP_NOT_FINITE(alignment_ts))
		return 0;
	return (int128) event_ts - (int128) alignment_ts;
}

/* An int128 in decimal, for a numeric parameter. */
char *
oe_int128_out(int128 value)
{
	char		digits[48];
	int			pos = sizeof(digits);
	bool		negative = value < 0;
	uint128		rest = negative ? -(uint128) value : (uint128) value;

	digits[--pos] = '\0';
	do
	{
		digits[--pos] = '0' + (int) (rest % 10);
		rest /= 10;
	} while (rest > 0);
	if (negative)
		digits[--pos] = '-';
	return pstrdup(&digits[pos]);
}

/* Start a step. */
void
oe_step_begin(OeStep *step, const OeStream *stream)
{
	memset(step, 0, sizeof(*step));
	step->stream = stream;
}

/*
 * Read the partition counts the stream's totals keep: at the first event
 * the step releases, so that a step that releases none pays nothing.
 */
static void
load_partition_counts(OeStep *step)
{
	Datum		id = Int32GetDatum(step->stream->stream_id);

	oe_run_plan(&plans[PLAN_PARTITION_COUNTS], &id, NULL, SPI_OK_SELECT);
	step->ntotals = (int) SPI_processed;
	step->totals = palloc0(sizeof(OeTotals) * Max(step->ntotals, 1));
	for (int i = 0; i < step->ntotals; i++)
	{
		OeTotals   *totals = &step->totals[i];
		bool		isnull;

		totals->partitions = DatumGetInt32(oe_result(i, 1, &isnull));
		totals->count = palloc0(sizeof(int64) * totals->partitions);
		totals->lag = palloc0(sizeof(int128) * totals->partitions);
		step->partitioned |= totals->partitions > 1;
	}
}

/*
 * Count an event the walk releases in the lane (the slot holds its row),
 * before lane->released counts it.
 */
void
oe_step_count_event(OeLane *lane, TupleTableSlot *slot)
{
	OeStep	   *step = lane->step;
	bool		isnull;
	TimestampTz alignment_ts;
	int128		lag;
	uint64		hash = 0;

	if (step == NULL)
		return;
	if (step->totals == NULL)
		load_partition_counts(step);
	alignment_ts = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_event_alignment_ts, &isnull));
	lag = oe_lag(DatumGetTimestampTz(slot_getattr(slot, Anum_oe_event_event_ts, &isnull)),
				 alignment_ts);
	if (lane->released == 0)
		lane->first_alignment = alignment_ts;

	if (step->partitioned)
	{
		if (!lane->hash_valid)
		{
			lane->lane_hash = oe_key_hash(DatumGetTextPP(slot_getattr(slot, Anum_oe_event_key,
																	  &isnull)));
			/* A per-key lane is one key: its hash holds for every event. */
			lane->hash_valid = step->stream->per_key;
		}
		hash = lane->lane_hash;
	}
	for (int i = 0; i < step->ntotals; i++)
	{
		OeTotals   *totals = &step->totals[i];
		int32		partition = oe_partition_of(hash, totals->partitions);

		totals->count[partition]++;
		totals->lag[partition] += lag;
	}
}

/* Note the run the step released in the lane, if it moved. */
void
oe_step_add_run(const OeLane *lane)
{
	OeRun	   *run;

	if (lane->step == NULL || lane->range_end == lane->start)
		return;
	run = palloc(sizeof(OeRun));
	run->lane = lane->lane;
	run->start = lane->start;
	run->end = lane->range_end;
	run->has_events = lane->released > 0;
	run->first_alignment = lane->first_alignment;
	lane->step->runs = lappend(lane->step->runs, run);
}

static int
compare_lanes(const text *a, const text *b)
{
	int			len_a = VARSIZE_ANY_EXHDR(a);
	int			len_b = VARSIZE_ANY_EXHDR(b);
	int			cmp = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(len_a, len_b));

	return cmp != 0 ? cmp : (len_a > len_b) - (len_a < len_b);
}

/* Runs by lane, then start: a lane's runs of one step side by side. */
static int
compare_lane_order(const ListCell *a, const ListCell *b)
{
	const OeRun *ra = lfirst(a);
	const OeRun *rb = lfirst(b);
	int			cmp = compare_lanes(ra->lane, rb->lane);

	return cmp != 0 ? cmp : (ra->start > rb->start) - (ra->start < rb->start);
}

/*
 * Runs in delivery order: by the alignment_ts of their first event, then
 * lane; runs that released no event (skips) last, by lane.
 */
static int
compare_delivery_order(const ListCell *a, const ListCell *b)
{
	const OeRun *ra = lfirst(a);
	const OeRun *rb = lfirst(b);

	if (ra->has_events != rb->has_events)
		return ra->has_events ? -1 : 1;
	if (ra->has_events && ra->first_alignment != rb->first_alignment)
		return ra->first_alignment < rb->first_alignment ? -1 : 1;
	return compare_lanes(ra->lane, rb->lane);
}

/* Merge the runs of a lane the step visited more than once. */
static List *
merge_lane_runs(List *runs)
{
	List	   *merged = NIL;
	OeRun	   *last = NULL;
	ListCell   *lc;

	list_sort(runs, compare_lane_order);
	foreach(lc, runs)
	{
		OeRun	   *run = lfirst(lc);

		if (last != NULL && compare_lanes(last->lane, run->lane) == 0)
		{
			if (!last->has_events && run->has_events)
				last->first_alignment = run->first_alignment;
			last->has_events |= run->has_events;
			last->end = run->end;
			continue;
		}
		merged = lappend(merged, run);
		last = run;
	}
	return merged;
}

/* Log the step's runs in delivery order, after the stream's last delivery. */
static void
log_runs(OeStep *step)
{
	int			n;
	Datum	   *lanes;
	Datum	   *starts;
	Datum	   *ends;
	Datum		values[5];
	bool		isnull;
	int			i = 0;
	ListCell   *lc;

	if (step->stream->per_key)
	{
		step->runs = merge_lane_runs(step->runs);
		list_sort(step->runs, compare_delivery_order);
	}
	n = list_length(step->runs);
	lanes = palloc(sizeof(Datum) * n);
	starts = palloc(sizeof(Datum) * n);
	ends = palloc(sizeof(Datum) * n);
	foreach(lc, step->runs)
	{
		OeRun	   *run = lfirst(lc);

		lanes[i] = PointerGetDatum(run->lane);
		starts[i] = Int64GetDatum(run->start);
		ends[i] = Int64GetDatum(run->end);
		i++;
	}

	values[0] = Int32GetDatum(step->stream->stream_id);
	oe_run_plan(&plans[PLAN_LAST_DELIVERY], values, NULL, SPI_OK_SELECT);
	values[1] = oe_result(0, 1, &isnull);
	if (isnull)
		values[1] = Int64GetDatum(0);
	values[2] = oe_array(lanes, NULL, n, TEXTOID);
	values[3] = oe_array(starts, NULL, n, INT8OID);
	values[4] = oe_array(ends, NULL, n, INT8OID);
	oe_run_plan(&plans[PLAN_LOG], values, NULL, SPI_OK_INSERT);
}

/* Add the step's counts to release_totals. */
static void
add_totals(OeStep *step)
{
	int			size = 0;
	int			n = 0;
	Datum	   *partition_counts;
	Datum	   *partitions;
	Datum	   *counts;
	Datum	   *lags;
	Datum		values[5];

	for (int i = 0; i < step->ntotals; i++)
		size += step->totals[i].partitions;
	partition_counts = palloc(sizeof(Datum) * size);
	partitions = palloc(sizeof(Datum) * size);
	counts = palloc(sizeof(Datum) * size);
	lags = palloc(sizeof(Datum) * size);
	for (int i = 0; i < step->ntotals; i++)
	{
		OeTotals   *totals = &step->totals[i];

		for (int p = 0; p < totals->partitions; p++)
		{
			if (totals->count[p] == 0)
				continue;
			partition_counts[n] = Int32GetDatum(totals->partitions);
			partitions[n] = Int32GetDatum(p);
			counts[n] = Int64GetDatum(totals->count[p]);
			lags[n] = CStringGetTextDatum(oe_int128_out(totals->lag[p]));
			n++;
		}
	}
	if (n == 0)
		return;

	values[0] = Int32GetDatum(step->stream->stream_id);
	values[1] = oe_array(partition_counts, NULL, n, INT4OID);
	values[2] = oe_array(partitions, NULL, n, INT4OID);
	values[3] = oe_array(counts, NULL, n, INT8OID);
	values[4] = oe_array(lags, NULL, n, TEXTOID);
	oe_run_plan(&plans[PLAN_ADD_TOTALS], values, NULL, SPI_OK_UPDATE);
}

/* The step's counts for a partition count, or NULL. */
static const OeTotals *
totals_for(const OeStep *step, int32 partitions)
{
	for (int i = 0; i < step->ntotals; i++)
		if (step->totals[i].partitions == partitions)
			return &step->totals[i];
	return NULL;
}

/*
 * Wake each consumer of the stream that the step gave unread events, at
 * commit: its waiting reads (wait.c), and a NOTIFY on
 * "ordered_events.<consumer>" with the partitions that got events ('0,3');
 * notes whether a consumer with a handler got some (step.c wakes the worker).
 * A consumer name longer than OE_MAX_CHANNEL_CONSUMER bytes makes no
 * channel name: that consumer has only the shared channel.
 */
static void
wake_consumers(OeStep *step)
{
	Datum		id = Int32GetDatum(step->stream->stream_id);
	uint64		n;
	SPITupleTable *rows;

	oe_run_plan(&plans[PLAN_CONSUMERS], &id, NULL, SPI_OK_SELECT);
	n = SPI_processed;
	rows = SPI_tuptable;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	row = rows->vals[i];
		bool		isnull;
		char	   *consumer = TextDatumGetCString(SPI_getbinval(row, rows->tupdesc, 1, &isnull));
		int32		partitions = DatumGetInt32(SPI_getbinval(row, rows->tupdesc, 2, &isnull));
		const OeTotals *totals = totals_for(step, partitions);
		StringInfoData woken;

		if (totals == NULL)
			continue;
		initStringInfo(&woken);
		for (int p = 0; p < totals->partitions; p++)
			if (totals->count[p] > 0)
				appendStringInfo(&woken, "%s%d", woken.len > 0 ? "," : "", p);
		if (woken.len == 0)
			continue;
		oe_note_released(DatumGetInt32(SPI_getbinval(row, rows->tupdesc, 3, &isnull)));
		if (DatumGetBool(SPI_getbinval(row, rows->tupdesc, 4, &isnull)))
			step->fed_handlers = true;
		if (strlen(consumer) <= OE_MAX_CHANNEL_CONSUMER)
			Async_Notify(psprintf("ordered_events.%s", consumer), woken.data);
	}
	SPI_freetuptable(rows);
}

/*
 * End a step: log its runs in delivery order and add its counts; if it
 * released events, wake their consumers at commit (their channels and the
 * waiting reads, wait.c).
 */
void
oe_step_finish(OeStep *step)
{
	if (step->runs == NIL)
		return;
	log_runs(step);
	add_totals(step);
	if (step->totals != NULL)
		wake_consumers(step);
}
