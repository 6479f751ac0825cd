/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The lease mode of a consumer (delivery 'lease'): receive(), ack() and
 *	  nack(), at-least-once delivery for work done outside the database
 *	  (docs/consuming.md, "Work outside the database: the lease mode").
 *
 * receive() takes the next events of a consumer partition's pool as read()
 * does (oe_consumer_take(), which moves the position past them) and leases
 * them: they are delivered again, with attempt + 1, unless ack() consumes
 * them before their visibility runs out.  What is out is kept in
 * ordered_events.lease, one row per batch, its events in arrays written
 * once (slot i is element i + 1) and a bit string "done" whose bit i is set
 * once event i is acknowledged or has moved on:
 *  - 'leased': what one receive() delivered; receipt = batch * 65536 + slot;
 *  - 'returned': what nack() gave back, due again at visible_until;
 *  - 'waiting': events taken from the pool while an earlier event of their
 *	  key was out, delivered in their order once it is not.
 * An event's payload stays in event_store and is read again by (stream,
 * lane, seq) to deliver it again; retention keeps it: each subscription's
 * leased_delivery is the release log row of the oldest event of the
 * stream that is out or waiting (as of the partition's last receive()).
 *
 * Per-key order: at most one event of a key (over all the consumer's
 * streams, as handler states are per key) is leased or returned at a time;
 * the key's later events wait, at most LEASE_MAX_WAITING a partition (a
 * receive() takes no new events beyond that).  An event whose last attempt
 * ran out at the consumer's max_attempts becomes a dead letter
 * (exception_thrown, "not acknowledged"), and its key goes on.
 *
 * One receive() delivers, in this order: the events whose visibility ran
 * out (or that nack() returned), oldest first, with attempt + 1 and a new
 * receipt (the old one then acknowledges nothing); the waiting events whose
 * key is free, in their order; new events of the pool.
 *
 * Concurrency: receive() first locks the partition as read() does (its
 * subscription rows), so two receive()s of a partition run one after the
 * other and the second sees what the first leased.  The rows it changes it
 * locks (FOR UPDATE) and reads again, so that an ack() committed meanwhile
 * stays: an acknowledged event is never delivered again.  ack() and nack()
 * lock the rows of their receipts' batches only; an ack() that commits
 * while a receive() runs may leave its key blocked until the next one.
 * A receive() commits its leases at once: in autocommit with its
 * statement; inside a transaction block in a background worker of its own
 * (lease_worker.c), so that a rollback of the caller cannot take back what
 * it was given.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/detoast.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varbit.h"

/* Events one batch holds at most: the slot is the receipt's low 16 bits. */
#define LEASE_SLOTS			65536
#define LEASE_SLOT_BITS		16

/* Waiting events a partition holds at most (banner). */
#define LEASE_MAX_WAITING	10000

/* The columns of receive()'s rows. */
#define RECEIVE_COLUMNS		10

/* The arrays of a lease row, in the order of the table's columns. */
enum
{
	ARR_STREAM,
	ARR_SEQ,
	ARR_KEY,
	ARR_DELIVERY,
	ARR_STABILIZED,
	ARR_RELEASED,
	ARR_ATTEMPT,
	NARRAYS
};

static const Oid array_types[NARRAYS] = {
	INT4OID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID
};

enum
{
	PLAN_SUBSCRIPTIONS,
	PLAN_ROWS,
	PLAN_LOCK_ROWS,
	PLAN_EVENTS,
	PLAN_NEXT_BATCH,
	PLAN_INSERT,
	PLAN_SET_DONE,
	PLAN_DELETE,
	PLAN_FLOORS,
	PLAN_RECEIPT_ROW
};

static OePlan plans[] = {
	[PLAN_SUBSCRIPTIONS] = {
		"SELECT s.stream_id, d.stream, d.sequencing = 'per_key', s.leased_delivery "
		"FROM ordered_events.subscription s "
		"JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id "
		"WHERE s.consumer_id = $1 AND s.partition = $2",
		2, {INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_ROWS] = {
		"SELECT batch, state, visible_until, done, stream_ids, seqs, keys, deliveries, "
		"  stabilized, released, attempts "
		"FROM ordered_events.lease WHERE consumer_id = $1 AND partition = $2 ORDER BY batch",
		2, {INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_LOCK_ROWS] = {
		"SELECT batch, done FROM ordered_events.lease "
		"WHERE batch = ANY ($1) ORDER BY batch FOR UPDATE",
		1, {INT8ARRAYOID}, CURSOR_OPT_GENERIC_PLAN
	},
	/* the events by (stream, lane, seq), as the i-th elements of $1..$3 */
	[PLAN_EVENTS] = {
		"SELECT u.i, e.payload, e.event_ts, e.alignment_ts, e.received_at "
		"FROM ROWS FROM (pg_catalog.unnest($1::integer[]), pg_catalog.unnest($2::text[]), "
		"  pg_catalog.unnest($3::bigint[])) WITH ORDINALITY AS u(stream_id, lane, seq, i) "
		"JOIN ordered_events.event_store e ON e.stream_id = u.stream_id "
		"  AND e.lane = u.lane COLLATE \"C\" AND e.seq = u.seq",
		3, {INT4ARRAYOID, TEXTARRAYOID, INT8ARRAYOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_NEXT_BATCH] = {
		"SELECT pg_catalog.nextval('ordered_events.lease_batch_seq')",
		0, {0}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_INSERT] = {
		"INSERT INTO ordered_events.lease (batch, consumer_id, partition, state, "
		"  visible_until, done, stream_ids, seqs, keys, deliveries, stabilized, released, "
		"  attempts) "
		"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
		13, {INT8OID, INT4OID, INT4OID, TEXTOID, TIMESTAMPTZOID, VARBITOID, INT4ARRAYOID,
		INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID,
		INT4ARRAYOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_SET_DONE] = {
		"UPDATE ordered_events.lease SET done = $2 WHERE batch = $1",
		2, {INT8OID, VARBITOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_DELETE] = {
		"DELETE FROM ordered_events.lease WHERE batch = $1",
		1, {INT8OID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_FLOORS] = {
		"UPDATE ordered_events.subscription s SET leased_delivery = a.floor "
		"FROM ROWS FROM (pg_catalog.unnest($3::integer[]), pg_catalog.unnest($4::bigint[])) "
		"  AS a(stream_id, floor) "
		"WHERE s.consumer_id = $1 AND s.partition = $2 AND s.stream_id = a.stream_id",
		4, {INT4OID, INT4OID, INT4ARRAYOID, INT8ARRAYOID}, CURSOR_OPT_GENERIC_PLAN
	},
	/* the batch of a receipt, for ack() and nack() */
	[PLAN_RECEIPT_ROW] = {
		"SELECT partition, state = 'leased', done, stream_ids, seqs, keys, deliveries, "
		"  stabilized, released, attempts "
		"FROM ordered_events.lease WHERE batch = $1 AND consumer_id = $2 FOR UPDATE",
		2, {INT8OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
};

/* An event out or waiting, as a lease row holds it. */
typedef struct LeaseEvent
{
	int32		stream_id;
	int64		seq;
	text	   *key;
	int64		delivery;
	TimestampTz stabilized_ts;
	TimestampTz released_at;
	int32		attempt;		/* deliveries so far; 0 while waiting */
} LeaseEvent;

/* A row of ordered_events.lease. */
typedef struct LeaseRow
{
	int64		batch;
	char		state;			/* 'l'eased, 'r'eturned, 'w'aiting */
	TimestampTz visible_until;
	VarBit	   *done;
	int32		n;
	LeaseEvent *events;
	bool		changed;		/* done has bits to write */
} LeaseRow;

/* A subscription of the partition. */
typedef struct Subscription
{
	int32		stream_id;
	text	   *stream;
	bool		per_key;
	bool		floor_null;		/* leased_delivery as stored */
	int64		floor;
	bool		new_floor_null; /* ... and as this receive() leaves it */
	int64		new_floor;
} Subscription;

/* What a receive() knows of a key. */
typedef struct KeyInfo
{
	text	   *key;
	int32		out;			/* its events leased or returned */
	bool		waiting;		/* one of its events waits */
	struct KeyInfo *next;		/* another key of the same hash */
} KeyInfo;

typedef struct KeyBucket
{
	uint64		hash;
	KeyInfo    *first;
} KeyBucket;

/* An event to deliver again, or to make a dead letter. */
typedef struct Pending
{
	LeaseRow   *row;
	int32		slot;
} Pending;

/* A batch being built: the events a receive() delivers, or leaves waiting. */
typedef struct Batch
{
	int64		batch;			/* 0 until numbered */
	int32		n;
	int32		size;
	LeaseEvent *events;
} Batch;

/* One try of a receive() under way. */
typedef struct Receive
{
	const OeReceiveArgs *args;
	OeConsumer	consumer;
	TimestampTz now;
	TimestampTz visible_until;
	Tuplestorestate *rows;
	TupleDesc	desc;
	List	   *subscriptions;
	LeaseRow   *lease_rows;
	int			nrows;
	HTAB	   *keys;
	int32		waiting;		/* events waiting, kept and new */
	Batch		delivered;
	Batch		new_waiting;
} Receive;

/* Bit i of a done string. */
static inline bool
done_bit(const VarBit *done, int32 i)
{
	return (VARBITS(done)[i / BITS_PER_BYTE] & (0x80 >> (i % BITS_PER_BYTE))) != 0;
}

static inline void
set_done_bit(VarBit *done, int32 i)
{
	VARBITS(done)[i / BITS_PER_BYTE] |= (0x80 >> (i % BITS_PER_BYTE));
}

/* A done string of n bits, none set. */
static VarBit *
new_done(int32 n)
{
	VarBit	   *done = palloc0(VARBITTOTALLEN(n));

	SET_VARSIZE(done, VARBITTOTALLEN(n));
	VARBITLEN(done) = n;
	return done;
}

static bool
all_done(const VarBit *done)
{
	for (int32 i = 0; i < VARBITLEN(done); i++)
		if (!done_bit(done, i))
			return false;
	return true;
}

static bool
text_equal(const text *a, const text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* The entry of a key, made if new ("key" must outlive the receive). */
static KeyInfo *
key_info(Receive *rc, text *key)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
										   VARSIZE_ANY_EXHDR(key), 0);
	bool		found;
	KeyBucket  *bucket = hash_search(rc->keys, &hash, HASH_ENTER, &found);
	KeyInfo    *info;

	if (!found)
		bucket->first = NULL;
	for (info = bucket->first; info != NULL; info = info->next)
		if (text_equal(info->key, key))
			return info;
	info = palloc0(sizeof(KeyInfo));
	info->key = key;
	info->next = bucket->first;
	bucket->first = info;
	return info;
}

static Subscription *
subscription_of(const Receive *rc, int32 stream_id)
{
	ListCell   *lc;

	foreach(lc, rc->subscriptions)
	{
		Subscription *s = lfirst(lc);

		if (s->stream_id == stream_id)
			return s;
	}
	return NULL;
}

/* The number of a new batch. */
static int64
next_batch(void)
{
	bool		isnull;

	oe_run_plan(&plans[PLAN_NEXT_BATCH], NULL, NULL, SPI_OK_SELECT);
	return DatumGetInt64(oe_result(0, 1, &isnull));
}

static void
batch_add(Batch *b, const LeaseEvent *event)
{
	if (b->n == b->size)
	{
		b->size = Max(16, b->size * 2);
		b->events = b->events == NULL ? palloc(sizeof(LeaseEvent) * b->size) :
			repalloc(b->events, sizeof(LeaseEvent) * b->size);
	}
	b->events[b->n++] = *event;
}

/* The subscriptions of the partition. */
static void
load_subscriptions(Receive *rc)
{
	Datum		values[2] = {Int32GetDatum(rc->consumer.consumer_id),
	Int32GetDatum(rc->consumer.partition)};

	oe_run_plan(&plans[PLAN_SUBSCRIPTIONS], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Subscription *s = palloc0(sizeof(Subscription));
		bool		isnull;
		Datum		floor;

		s->stream_id = DatumGetInt32(oe_result(i, 1, &isnull));
		s->stream = DatumGetTextPCopy(oe_result(i, 2, &isnull));
		s->per_key = DatumGetBool(oe_result(i, 3, &isnull));
		floor = oe_result(i, 4, &isnull);
		s->floor_null = isnull;
		s->floor = isnull ? 0 : DatumGetInt64(floor);
		s->new_floor_null = true;
		rc->subscriptions = lappend(rc->subscriptions, s);
	}
}

/*
 * The events of a lease row from its arrays (columns first .. first + 6 of
 * the last SPI result's row i).
 */
static LeaseEvent *
row_events(uint64 i, int first, int32 *n)
{
	Datum	   *elems[NARRAYS];
	int			nelems = 0;
	LeaseEvent *events;

	for (int a = 0; a < NARRAYS; a++)
	{
		bool		isnull;
		ArrayType  *array = DatumGetArrayTypePCopy(oe_result(i, first + a, &isnull));
		int16		typlen;
		bool		typbyval;
		char		typalign;

		get_typlenbyvalalign(array_types[a], &typlen, &typbyval, &typalign);
		deconstruct_array(array, array_types[a], typlen, typbyval, typalign,
						  &elems[a], NULL, &nelems);
	}
	events = palloc(sizeof(LeaseEvent) * Max(nelems, 1));
	for (int e = 0; e < nelems; e++)
	{
		events[e].stream_id = DatumGetInt32(elems[ARR_STREAM][e]);
		events[e].seq = DatumGetInt64(elems[ARR_SEQ][e]);
		events[e].key = DatumGetTextPP(elems[ARR_KEY][e]);
		events[e].delivery = DatumGetInt64(elems[ARR_DELIVERY][e]);
		events[e].stabilized_ts = DatumGetTimestampTz(elems[ARR_STABILIZED][e]);
		events[e].released_at = DatumGetTimestampTz(elems[ARR_RELEASED][e]);
		events[e].attempt = DatumGetInt32(elems[ARR_ATTEMPT][e]);
	}
	*n = nelems;
	return events;
}

/* The arrays of a lease row, as parameters values[0..6]. */
static void
events_arrays(const LeaseEvent *events, int32 n, Datum *values)
{
	Datum	   *elems[NARRAYS];

	for (int a = 0; a < NARRAYS; a++)
		elems[a] = palloc(sizeof(Datum) * Max(n, 1));
	for (int e = 0; e < n; e++)
	{
		elems[ARR_STREAM][e] = Int32GetDatum(events[e].stream_id);
		elems[ARR_SEQ][e] = Int64GetDatum(events[e].seq);
		elems[ARR_KEY][e] = PointerGetDatum(events[e].key);
		elems[ARR_DELIVERY][e] = Int64GetDatum(events[e].delivery);
		elems[ARR_STABILIZED][e] = TimestampTzGetDatum(events[e].stabilized_ts);
		elems[ARR_RELEASED][e] = TimestampTzGetDatum(events[e].released_at);
		elems[ARR_ATTEMPT][e] = Int32GetDatum(events[e].attempt);
	}
	for (int a = 0; a < NARRAYS; a++)
		values[a] = oe_array(elems[a], NULL, n, array_types[a]);
}

/* Write a new lease row. */
static void
insert_row(int32 consumer_id, int32 partition, int64 batch, const char *state,
		   TimestampTz visible_until, const LeaseEvent *events, int32 n)
{
	Datum		values[13];
	char		nulls[13];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(batch);
	values[1] = Int32GetDatum(consumer_id);
	values[2] = Int32GetDatum(partition);
	values[3] = CStringGetTextDatum(state);
	values[4] = TimestampTzGetDatum(visible_until);
	if (strcmp(state, "waiting") == 0)
		nulls[4] = 'n';
	values[5] = PointerGetDatum(new_done(n));
	events_arrays(events, n, values + 6);
	oe_run_plan(&plans[PLAN_INSERT], values, nulls, SPI_OK_INSERT);
}

/* Write back a row's done bits, or delete it once every bit is set. */
static void
save_done(int64 batch, VarBit *done)
{
	Datum		values[2] = {Int64GetDatum(batch), PointerGetDatum(done)};

	if (all_done(done))
		oe_run_plan(&plans[PLAN_DELETE], values, NULL, SPI_OK_DELETE);
	else
		oe_run_plan(&plans[PLAN_SET_DONE], values, NULL, SPI_OK_UPDATE);
}

/* The partition's lease rows, by batch. */
static void
load_rows(Receive *rc)
{
	Datum		values[2] = {Int32GetDatum(rc->consumer.consumer_id),
	Int32GetDatum(rc->consumer.partition)};

	oe_run_plan(&plans[PLAN_ROWS], values, NULL, SPI_OK_SELECT);
	rc->nrows = (int) SPI_processed;
	rc->lease_rows = palloc0(sizeof(LeaseRow) * Max(rc->nrows, 1));
	for (int i = 0; i < rc->nrows; i++)
	{
		LeaseRow   *row = &rc->lease_rows[i];
		bool		isnull;
		Datum		until;

		row->batch = DatumGetInt64(oe_result(i, 1, &isnull));
		row->state = TextDatumGetCString(oe_result(i, 2, &isnull))[0];
		until = oe_result(i, 3, &isnull);
		row->visible_until = isnull ? DT_NOEND : DatumGetTimestampTz(until);
		row->done = DatumGetVarBitPCopy(oe_result(i, 4, &isnull));
		row->events = row_events(i, 5, &row->n);
	}
}

/* A row whose events a receive() may move: due again, or waiting. */
static bool
movable(const Receive *rc, const LeaseRow *row)
{
	return row->state == 'w' || row->visible_until <= rc->now;
}

/*
 * Lock the rows this receive() may change and read their done bits again:
 * what ack() committed meanwhile stays acknowledged.  A row gone meanwhile
 * was acknowledged whole.
 */
static void
lock_movable_rows(Receive *rc)
{
	Datum	   *batches = palloc(sizeof(Datum) * Max(rc->nrows, 1));
	int			n = 0;
	int			j = 0;
	Datum		array;

	for (int i = 0; i < rc->nrows; i++)
		if (movable(rc, &rc->lease_rows[i]))
			batches[n++] = Int64GetDatum(rc->lease_rows[i].batch);
	if (n == 0)
		return;
	array = oe_array(batches, NULL, n, INT8OID);
	oe_run_plan(&plans[PLAN_LOCK_ROWS], &array, NULL, SPI_OK_SELECT);
	for (int i = 0; i < rc->nrows; i++)
	{
		LeaseRow   *row = &rc->lease_rows[i];
		bool		isnull;

		if (!movable(rc, row))
			continue;
		if (j < SPI_processed && DatumGetInt64(oe_result(j, 1, &isnull)) == row->batch)
			row->done = DatumGetVarBitPCopy(oe_result(j++, 2, &isnull));
		else
		{
			for (int32 e = 0; e < row->n; e++)
				set_done_bit(row->done, e);
		}
	}
}

/* Count what is out and what waits, per key. */
static void
count_keys(Receive *rc)
{
	for (int i = 0; i < rc->nrows; i++)
	{
		LeaseRow   *row = &rc->lease_rows[i];

		for (int32 e = 0; e < row->n; e++)
		{
			if (done_bit(row->done, e))
				continue;
			if (row->state == 'w')
				rc->waiting++;
			else
				key_info(rc, row->events[e].key)->out++;
		}
	}
}

/* A row leaves event "slot" behind. */
static void
move_on(LeaseRow *row, int32 slot)
{
	set_done_bit(row->done, slot);
	row->changed = true;
}

/* Append one of receive()'s rows. */
static void
put_row(Receive *rc, const LeaseEvent *event, const Subscription *s, Datum payload,
		bool payload_null, TimestampTz event_ts, TimestampTz alignment_ts)
{
	Datum		values[RECEIVE_COLUMNS];
	bool		nulls[RECEIVE_COLUMNS] = {0};

	values[0] = PointerGetDatum(s->stream);
	values[1] = Int64GetDatum(event->seq);
	values[2] = PointerGetDatum(event->key);
	values[3] = payload;
	nulls[3] = payload_null;
	values[4] = TimestampTzGetDatum(event_ts);
	values[5] = TimestampTzGetDatum(alignment_ts);
	values[6] = TimestampTzGetDatum(event->stabilized_ts);
	values[7] = TimestampTzGetDatum(event->released_at);
	values[8] = Int64GetDatum((rc->delivered.batch << LEASE_SLOT_BITS) + rc->delivered.n);
	values[9] = Int32GetDatum(event->attempt);
	tuplestore_putvalues(rc->rows, rc->desc, values, nulls);
}

/* Deliver an event: a row of the result, a slot of the new batch. */
static void
deliver(Receive *rc, const LeaseEvent *event, const Subscription *s, Datum payload,
		bool payload_null, TimestampTz event_ts, TimestampTz alignment_ts)
{
	put_row(rc, event, s, payload, payload_null, event_ts, alignment_ts);
	batch_add(&rc->delivered, event);
}

/*
 * Deliver (attempt + 1) or make dead letters of the events in "list", read
 * back from event_store; those no longer there, and those of streams the
 * partition no longer subscribes to, just leave their rows.
 */
static void
fetch_and_deliver(Receive *rc, Pending *list, int n, bool *dead)
{
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *lanes = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *seqs = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[3];
	SPITupleTable *found;
	HeapTuple  *by_list;

	if (n == 0)
		return;
	for (int i = 0; i < n; i++)
	{
		LeaseEvent *event = &list[i].row->events[list[i].slot];
		Subscription *s = subscription_of(rc, event->stream_id);

		ids[i] = Int32GetDatum(event->stream_id);
		lanes[i] = s->per_key ? PointerGetDatum(event->key) : CStringGetTextDatum("");
		seqs[i] = Int64GetDatum(event->seq);
	}
	values[0] = oe_array(ids, NULL, n, INT4OID);
	values[1] = oe_array(lanes, NULL, n, TEXTOID);
	values[2] = oe_array(seqs, NULL, n, INT8OID);
	oe_run_plan(&plans[PLAN_EVENTS], values, NULL, SPI_OK_SELECT);
	found = SPI_tuptable;
	by_list = palloc0(sizeof(HeapTuple) * n);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		i = DatumGetInt64(SPI_getbinval(found->vals[r], found->tupdesc, 1, &isnull));

		by_list[i - 1] = found->vals[r];
	}

	/* in the order of the list: the query's rows come in any order */
	for (int i = 0; i < n; i++)
	{
		LeaseEvent	event = list[i].row->events[list[i].slot];
		Subscription *s = subscription_of(rc, event.stream_id);
		HeapTuple	tuple = by_list[i];
		bool		isnull;
		bool		payload_null;
		Datum		payload;

		move_on(list[i].row, list[i].slot);
		if (tuple == NULL)
		{
			key_info(rc, event.key)->out--;
			continue;
		}
		payload = SPI_getbinval(tuple, found->tupdesc, 2, &payload_null);
		if (!payload_null && VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(payload)))
			payload = PointerGetDatum(detoast_external_attr((struct varlena *)
															DatumGetPointer(payload)));
		if (dead[i])
		{
			oe_dead_letter(text_to_cstring(s->stream), event.seq, event.key,
						   payload_null ? NULL : DatumGetPointer(payload),
						   DatumGetTimestampTz(SPI_getbinval(tuple, found->tupdesc, 3, &isnull)),
						   OE_EXCEPTION_THROWN, "not acknowledged",
						   DatumGetTimestampTz(SPI_getbinval(tuple, found->tupdesc, 5, &isnull)),
						   rc->consumer.name);
			key_info(rc, event.key)->out--;
			continue;
		}
		event.attempt++;
		deliver(rc, &event, s, payload, payload_null,
				DatumGetTimestampTz(SPI_getbinval(tuple, found->tupdesc, 3, &isnull)),
				DatumGetTimestampTz(SPI_getbinval(tuple, found->tupdesc, 4, &isnull)));
	}
	SPI_freetuptable(found);
}

/* qsort: rows due again, oldest first (by visible_until, then batch). */
static int
compare_due(const void *a, const void *b)
{
	const LeaseRow *ra = *(LeaseRow *const *) a;
	const LeaseRow *rb = *(LeaseRow *const *) b;

	if (ra->visible_until != rb->visible_until)
		return ra->visible_until < rb->visible_until ? -1 : 1;
	return ra->batch < rb->batch ? -1 : ra->batch > rb->batch ? 1 : 0;
}

/*
 * First the events due again, oldest first: delivered with attempt + 1,
 * or dead letters after the consumer's max_attempts.
 */
static void
deliver_due(Receive *rc)
{
	LeaseRow  **due = palloc(sizeof(LeaseRow *) * Max(rc->nrows, 1));
	int			ndue = 0;
	Pending    *list;
	bool	   *dead;
	int			n = 0;
	int			total = 0;
	int32		room = rc->args->max_events;

	for (int i = 0; i < rc->nrows; i++)
		if (rc->lease_rows[i].state != 'w' && movable(rc, &rc->lease_rows[i]))
		{
			due[ndue++] = &rc->lease_rows[i];
			total += rc->lease_rows[i].n;
		}
	if (ndue == 0)
		return;
	qsort(due, ndue, sizeof(LeaseRow *), compare_due);
	list = palloc(sizeof(Pending) * total);
	dead = palloc(sizeof(bool) * total);
	for (int i = 0; i < ndue; i++)
		for (int32 e = 0; e < due[i]->n; e++)
		{
			LeaseEvent *event = &due[i]->events[e];

			if (done_bit(due[i]->done, e))
				continue;
			if (subscription_of(rc, event->stream_id) == NULL)
			{
				/* unsubscribed: forgotten with the position */
				move_on(due[i], e);
				key_info(rc, event->key)->out--;
				continue;
			}
			dead[n] = event->attempt >= rc->consumer.max_attempts;
			if (!dead[n] && room == 0)
				continue;		/* the next receive() */
			if (!dead[n])
				room--;
			list[n].row = due[i];
			list[n++].slot = e;
		}
	fetch_and_deliver(rc, list, n, dead);
}

/*
 * Then the waiting events whose key is free, in their order: each key's
 * first only, so that its later ones stay behind it.
 */
static void
deliver_waiting(Receive *rc)
{
	Pending    *list = palloc(sizeof(Pending) * Max(rc->waiting, 1));
	bool	   *dead = palloc0(sizeof(bool) * Max(rc->waiting, 1));
	int			n = 0;
	int32		room = rc->args->max_events - rc->delivered.n;

	for (int i = 0; i < rc->nrows; i++)
	{
		LeaseRow   *row = &rc->lease_rows[i];

		if (row->state != 'w')
			continue;
		for (int32 e = 0; e < row->n; e++)
		{
			LeaseEvent *event = &row->events[e];
			KeyInfo    *key;

			if (done_bit(row->done, e))
				continue;
			if (subscription_of(rc, event->stream_id) == NULL)
			{
				move_on(row, e);
				rc->waiting--;
				continue;
			}
			key = key_info(rc, event->key);
			if (key->out > 0 || key->waiting || room == 0)
			{
				key->waiting = true;
				continue;
			}
			key->out++;
			room--;
			rc->waiting--;
			list[n].row = row;
			list[n++].slot = e;
		}
	}
	fetch_and_deliver(rc, list, n, dead);	/* attempt 0 + 1 */
}

/* oe_consumer_take()'s sink: deliver a new event, or keep it waiting. */
static void
take_event(const OeReadEvent *event, void *arg)
{
	Receive    *rc = arg;
	LeaseEvent	lease;
	KeyInfo    *key;
	Subscription *s = subscription_of(rc, event->stream_id);

	if (s == NULL)
	{
		/* subscribed since load_subscriptions(): no leased_delivery yet */
		s = palloc0(sizeof(Subscription));
		s->stream_id = event->stream_id;
		s->stream = DatumGetTextPCopy(PointerGetDatum(event->stream));
		s->floor_null = s->new_floor_null = true;
		rc->subscriptions = lappend(rc->subscriptions, s);
	}
	lease.stream_id = event->stream_id;
	lease.seq = event->seq;
	lease.key = DatumGetTextPCopy(PointerGetDatum(event->key));
	lease.delivery = event->delivery;
	lease.stabilized_ts = event->stabilized_ts;
	lease.released_at = event->released_at;
	key = key_info(rc, lease.key);
	if (key->out > 0 || key->waiting)
	{
		lease.attempt = 0;
		key->waiting = true;
		rc->waiting++;
		batch_add(&rc->new_waiting, &lease);
		return;
	}
	lease.attempt = 1;
	key->out++;
	deliver(rc, &lease, s, event->payload, event->payload_null, event->event_ts,
			event->alignment_ts);
}

/*
 * Last, new events of the pool, while there is room for them: at most
 * max_events delivered, and at most max_events more waiting (and
 * LEASE_MAX_WAITING in all), so that a receive() costs what it returns.
 */
static void
take_new(Receive *rc)
{
	for (;;)
	{
		int32		n = Min(rc->args->max_events - rc->delivered.n,
							Min(LEASE_MAX_WAITING - rc->waiting,
								rc->args->max_events - rc->new_waiting.n));

		if (n <= 0)
			return;
		if (oe_consumer_take(&rc->consumer, n, true, take_event, rc) < n)
			return;
	}
}

/* The new floors of the partition's subscriptions: oldest delivery out. */
static void
save_floors(Receive *rc)
{
	int			n = list_length(rc->subscriptions);
	Datum	   *ids = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *floors = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));
	Datum		values[4];
	int			changed = 0;
	ListCell   *lc;

	for (int i = 0; i < rc->nrows; i++)
		for (int32 e = 0; e < rc->lease_rows[i].n; e++)
		{
			LeaseEvent *event = &rc->lease_rows[i].events[e];
			Subscription *s;

			if (done_bit(rc->lease_rows[i].done, e) ||
				(s = subscription_of(rc, event->stream_id)) == NULL)
				continue;
			if (s->new_floor_null || event->delivery < s->new_floor)
				s->new_floor = event->delivery;
			s->new_floor_null = false;
		}
	for (int b = 0; b < 2; b++)
	{
		Batch	   *batch = b == 0 ? &rc->delivered : &rc->new_waiting;

		for (int32 e = 0; e < batch->n; e++)
		{
			Subscription *s = subscription_of(rc, batch->events[e].stream_id);

			if (s->new_floor_null || batch->events[e].delivery < s->new_floor)
				s->new_floor = batch->events[e].delivery;
			s->new_floor_null = false;
		}
	}
	foreach(lc, rc->subscriptions)
	{
		Subscription *s = lfirst(lc);

		if (s->new_floor_null == s->floor_null &&
			(s->floor_null || s->new_floor == s->floor))
			continue;
		ids[changed] = Int32GetDatum(s->stream_id);
		floors[changed] = Int64GetDatum(s->new_floor);
		nulls[changed++] = s->new_floor_null;
	}
	if (changed == 0)
		return;
	values[0] = Int32GetDatum(rc->consumer.consumer_id);
	values[1] = Int32GetDatum(rc->consumer.partition);
	values[2] = oe_array(ids, NULL, changed, INT4OID);
	values[3] = oe_array(floors, nulls, changed, INT8OID);
	oe_run_plan(&plans[PLAN_FLOORS], values, NULL, SPI_OK_UPDATE);
}

/* Write what the receive() changed. */
static void
save_rows(Receive *rc)
{
	for (int i = 0; i < rc->nrows; i++)
		if (rc->lease_rows[i].changed)
			save_done(rc->lease_rows[i].batch, rc->lease_rows[i].done);
	if (rc->delivered.n > 0)
		insert_row(rc->consumer.consumer_id, rc->consumer.partition, rc->delivered.batch,
				   "leased", rc->visible_until, rc->delivered.events, rc->delivered.n);
	if (rc->new_waiting.n > 0)
		insert_row(rc->consumer.consumer_id, rc->consumer.partition, next_batch(),
				   "waiting", 0, rc->new_waiting.events, rc->new_waiting.n);
	save_floors(rc);
}

/*
 * The consumer of a receive(), ack() or nack(), if "caller" (the role
 * that called, not the internal scope's) may use it.  Call inside an
 * internal scope.
 */
static void
lease_consumer(Oid caller, Datum name, int32 partition, OeConsumer *consumer,
			   const char *function)
{
	oe_consumer_lookup(name, partition, consumer);
	oe_check_owner(caller, consumer->owner, "consumer", consumer->name);
	oe_check_not_in_step(consumer->consumer_id);
	consumer->reader = OidIsValid(consumer->owner) ? consumer->owner : caller;
	if (!consumer->lease)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" does not have delivery 'lease'", consumer->name),
				 errdetail("%s is for consumers created with delivery => 'lease'.", function),
				 consumer->handler != NULL ?
				 errhint("The extension applies its events to its handler; see ordered_events.process().") :
				 errhint("Use ordered_events.read(): its events are consumed by the reading transaction.")));
}

/*
 * One try of receive(): deliver what is due again, what waited, then new
 * events, at most max_events, into "rows".  Returns how many it delivered;
 * *next_due is when the earliest lease of the partition runs out
 * (DT_NOEND if none is out).
 */
static int32
receive_try(const OeReceiveArgs *args, Tuplestorestate *rows, TupleDesc desc,
			TimestampTz *next_due)
{
	Oid			caller = GetUserId();
	OeInternalScope scope;
	Receive    *rc = palloc0(sizeof(Receive));
	HASHCTL		ctl = {0};
	int32		delivered;

	rc->args = args;
	rc->rows = rows;
	rc->desc = desc;
	oe_internal_begin(&scope, oe_relations()->owner);
	lease_consumer(caller, CStringGetTextDatum(args->consumer), args->partition, &rc->consumer,
				   "receive()");
	oe_consumer_lock(&rc->consumer);
	rc->now = GetCurrentTimestamp();
	rc->visible_until = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
																TimestampTzGetDatum(rc->now),
																IntervalPGetDatum(&args->visibility)));
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(KeyBucket);
	ctl.hcxt = CurrentMemoryContext;
	rc->keys = hash_create("ordered_events lease keys", 256, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* numbered first: its receipts go into the rows as they are made */
	rc->delivered.batch = next_batch();
	load_subscriptions(rc);
	load_rows(rc);
	lock_movable_rows(rc);
	count_keys(rc);
	deliver_due(rc);
	deliver_waiting(rc);
	take_new(rc);
	save_rows(rc);

	*next_due = rc->delivered.n > 0 ? rc->visible_until : DT_NOEND;
	for (int i = 0; i < rc->nrows; i++)
		if (rc->lease_rows[i].state != 'w' && !all_done(rc->lease_rows[i].done))
			*next_due = Min(*next_due, rc->lease_rows[i].visible_until);
	delivered = rc->delivered.n;
	oe_internal_end(&scope);
	return delivered;
}

/* The row type of receive(), for a tuplestore of its rows. */
TupleDesc
oe_receive_desc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(RECEIVE_COLUMNS);
	static const struct
	{
		const char *name;
		Oid			type;
	}			columns[RECEIVE_COLUMNS] = {
		{"stream", TEXTOID}, {"seq", INT8OID}, {"key", TEXTOID}, {"payload", JSONBOID},
		{"event_ts", TIMESTAMPTZOID}, {"alignment_ts", TIMESTAMPTZOID},
		{"stabilized_ts", TIMESTAMPTZOID}, {"released_at", TIMESTAMPTZOID},
		{"receipt", INT8OID}, {"attempt", INT4OID}
	};

	for (int i = 0; i < RECEIVE_COLUMNS; i++)
		TupleDescInitEntry(desc, i + 1, columns[i].name, columns[i].type, -1, 0);
	return desc;
}

/*
 * The events of a receive(), in the current transaction: one try, and
 * with a "wait", tries again until it delivers or the wait is over.
 * Returns how many events it delivered.
 */
int32
oe_receive_events(const OeReceiveArgs *args, Tuplestorestate *rows, TupleDesc desc)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "ordered_events receive",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	TimestampTz next_due;
	int32		delivered;

	delivered = receive_try(args, rows, desc, &next_due);

	/*
	 * The waiting receive (DESIGN 8.3, "Waiting reads") goes here: while
	 * delivered == 0 and args->wait is not over, sleep until a release puts
	 * events into the partition or next_due, whichever comes first, then
	 * try again.
	 */
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return delivered;
}

/* An interval argument that must be at least 0. */
static void
check_interval(FunctionCallInfo fcinfo, int argno, const char *name, const char *hint)
{
	Interval   *value;
	Interval	zero = {0};

	oe_check_not_null(fcinfo, argno, name);
	value = PG_GETARG_INTERVAL_P(argno);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(value),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for %s: %s", name,
						DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(value)))),
				 errhint("%s", hint)));
}

/*
 * receive(consumer text, max_events integer DEFAULT 1000, partition integer
 * DEFAULT 0, visibility interval DEFAULT '30 s', wait interval DEFAULT
 * '0 s') returns table (stream, seq, key, payload, event_ts, alignment_ts,
 * stabilized_ts, released_at, receipt, attempt)
 */
PG_FUNCTION_INFO_V1(oe_receive);
Datum
oe_receive(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OeReceiveArgs args = {0};

	args.max_events = oe_consumer_args(fcinfo, "receive() returns");
	if (args.max_events > LEASE_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for max_events: %d", args.max_events),
				 errhint("Use 1 to %d: the most events receive() returns.", LEASE_SLOTS)));
	check_interval(fcinfo, 3, "visibility",
				   "Use an interval of at least 0: how long the events are leased before they are delivered again.");
	check_interval(fcinfo, 4, "wait",
				   "Use an interval of at least 0: how long receive() waits for events when there are none.");
	args.consumer = text_to_cstring(PG_GETARG_TEXT_PP(0));
	args.partition = PG_GETARG_INT32(2);
	args.visibility = *PG_GETARG_INTERVAL_P(3);
	args.wait = *PG_GETARG_INTERVAL_P(4);
	PreventCommandIfReadOnly("receive()");

	InitMaterializedSRF(fcinfo, 0);
	if (IsTransactionBlock())
		oe_receive_in_worker(&args, rsinfo->setResult);
	else
		(void) oe_receive_events(&args, rsinfo->setResult, rsinfo->setDesc);
	return (Datum) 0;
}

static int
compare_receipts(const void *a, const void *b)
{
	int64		ra = *(const int64 *) a;
	int64		rb = *(const int64 *) b;

	return ra < rb ? -1 : ra > rb ? 1 : 0;
}

/* The receipts of an ack() or nack(), sorted, without duplicates. */
static int64 *
receipts_arg(FunctionCallInfo fcinfo, int *n)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	int64	   *receipts;
	int			nelems;
	int			m = 0;

	oe_check_not_null(fcinfo, 1, "receipts");
	array = PG_GETARG_ARRAYTYPE_P(1);
	deconstruct_array(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &elems, &nulls, &nelems);
	receipts = palloc(sizeof(int64) * Max(nelems, 1));
	for (int i = 0; i < nelems; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("receipts must not hold a null"),
					 errhint("Pass the receipts receive() returned.")));
		receipts[i] = DatumGetInt64(elems[i]);
	}
	qsort(receipts, nelems, sizeof(int64), compare_receipts);
	for (int i = 0; i < nelems; i++)
		if (m == 0 || receipts[i] != receipts[m - 1])
			receipts[m++] = receipts[i];
	*n = m;
	return receipts;
}

/*
 * Settle the receipts of one batch: set their done bits; for nack() (when
 * "returned" is set) the events go to a 'returned' row, due at *returned.
 * Returns how many receipts it settled.
 */
static int64
settle_batch(const OeConsumer *consumer, int64 batch, const int64 *receipts, int n,
			 const TimestampTz *returned)
{
	Datum		values[2] = {Int64GetDatum(batch), Int32GetDatum(consumer->consumer_id)};
	bool		isnull;
	VarBit	   *done;
	LeaseEvent *events = NULL;
	Batch		back = {0};
	int32		partition;
	int32		nevents;

	oe_run_plan(&plans[PLAN_RECEIPT_ROW], values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0 || !DatumGetBool(oe_result(0, 2, &isnull)))
		return 0;				/* gone, or not leased: a stale receipt */
	partition = DatumGetInt32(oe_result(0, 1, &isnull));
	done = DatumGetVarBitPCopy(oe_result(0, 3, &isnull));
	if (returned != NULL)
		events = row_events(0, 4, &nevents);
	for (int i = 0; i < n; i++)
	{
		int32		slot = (int32) (receipts[i] & (LEASE_SLOTS - 1));

		if (slot >= VARBITLEN(done) || done_bit(done, slot))
			continue;
		set_done_bit(done, slot);
		if (returned != NULL)
			batch_add(&back, &events[slot]);
		else
			back.n++;
	}
	if (back.n == 0)
		return 0;
	save_done(batch, done);
	if (returned != NULL)
		insert_row(consumer->consumer_id, partition, next_batch(), "returned", *returned,
				   back.events, back.n);
	return back.n;
}

/* ack() and nack(): "returned" is NULL for ack(). */
static int64
settle(FunctionCallInfo fcinfo, const char *function, const TimestampTz *returned)
{
	Oid			caller = GetUserId();
	OeInternalScope scope;
	OeConsumer	consumer;
	int64	   *receipts;
	int			n;
	int64		settled = 0;

	oe_check_not_null(fcinfo, 0, "consumer");
	receipts = receipts_arg(fcinfo, &n);
	PreventCommandIfReadOnly(function);

	oe_internal_begin(&scope, oe_relations()->owner);
	lease_consumer(caller, PG_GETARG_DATUM(0), 0, &consumer, function);
	for (int i = 0; i < n;)
	{
		int64		batch = receipts[i] >> LEASE_SLOT_BITS;
		int			first = i;

		while (i < n && receipts[i] >> LEASE_SLOT_BITS == batch)
			i++;
		if (receipts[first] >= 0)
			settled += settle_batch(&consumer, batch, receipts + first, i - first, returned);
	}
	oe_internal_end(&scope);
	return settled;
}

/*
 * ack(consumer text, receipts bigint[]) returns bigint: consume the leased
 * events of the receipts, in the caller's transaction; returns how many.
 * A receipt of an event acknowledged, returned or delivered again since,
 * or of no event of the consumer, acknowledges nothing.
 */
PG_FUNCTION_INFO_V1(oe_ack);
Datum
oe_ack(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(settle(fcinfo, "ack()", NULL));
}

/*
 * nack(consumer text, receipts bigint[], delay interval DEFAULT '0 s')
 * returns bigint: give the leased events back, to be delivered again
 * (attempt + 1) once "delay" has passed; returns how many.
 */
PG_FUNCTION_INFO_V1(oe_nack);
Datum
oe_nack(PG_FUNCTION_ARGS)
{
	TimestampTz returned;

	check_interval(fcinfo, 2, "delay",
				   "Use an interval of at least 0: how long the events stay away before they are delivered again.");
	returned = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													   TimestampTzGetDatum(GetCurrentTimestamp()),
													   PG_GETARG_DATUM(2)));
	PG_RETURN_INT64(settle(fcinfo, "nack()", &returned));
}
