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
 * ordered_events.lease, one row per batch: its events, written once
 * (encoded in one bytea, see encode_events()), and a bit string "done"
 * whose bit i is set once event i is acknowledged or has moved on:
 *  - 'leased': what one receive() delivered; receipt = batch * 65536 + slot;
 *  - 'returned': what nack() gave back, due again at visible_until;
 *  - 'waiting': events taken from the pool while an earlier event of their
 *	  key was out, delivered in their order once it is not.
 * An event's payload stays in event_store and is read again by (stream,
 * lane, seq) to deliver it again; retention keeps it: each row holds, for
 * each stream of its events, the oldest release log row (delivery) among
 * them (streams, floors), below which retention may delete.
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
 * stays: an acknowledged event is never delivered again.  ack() locks the
 * rows of its receipts' batches only (an ack() that commits while a
 * receive() runs may leave its key blocked until the next one); nack(),
 * which adds rows, first locks their partitions as receive() does.
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
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
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

/* The version of the encoding of a batch's events (encode_events()). */
#define EVENTS_FORMAT		1

enum
{
	PLAN_CONSUMER,
	PLAN_SUBSCRIPTIONS,
	PLAN_ROWS,
	PLAN_LOCK_ROWS,
	PLAN_EVENTS,
	PLAN_SET_DONE,
	PLAN_DELETE,
	PLAN_ACK_WHOLE,
	PLAN_PARTITIONS,
	PLAN_RECEIPT_ROW
};

static OePlan plans[] = {
	[PLAN_CONSUMER] = {
		"SELECT consumer_id, partitions, owner, delivery = 'lease', handler IS NOT NULL, "
		"  max_attempts "
		"FROM ordered_events.consumer_def WHERE consumer = $1",
		1, {TEXTOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_SUBSCRIPTIONS] = {
		"SELECT s.stream_id, d.stream, d.sequencing = 'per_key' "
		"FROM ordered_events.subscription s "
		"JOIN ordered_events.stream_def d ON d.stream_id = s.stream_id "
		"WHERE s.consumer_id = $1 AND s.partition = $2",
		2, {INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_ROWS] = {
		"SELECT batch, state, visible_until, done, events "
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
	[PLAN_SET_DONE] = {
		"UPDATE ordered_events.lease SET done = $2 WHERE batch = $1",
		2, {INT8OID, VARBITOID}, CURSOR_OPT_GENERIC_PLAN
	},
	[PLAN_DELETE] = {
		"DELETE FROM ordered_events.lease WHERE batch = $1",
		1, {INT8OID}, CURSOR_OPT_GENERIC_PLAN
	},
	/*
	 * ack() of every receipt of a batch none of whose events is settled
	 * yet (done all zeros, $3): the common case, in one statement
	 */
	[PLAN_ACK_WHOLE] = {
		"DELETE FROM ordered_events.lease "
		"WHERE batch = $1 AND consumer_id = $2 AND state = 'leased' AND done = $3",
		3, {INT8OID, INT4OID, VARBITOID}, CURSOR_OPT_GENERIC_PLAN
	},
	/* the partitions of batches, in order */
	[PLAN_PARTITIONS] = {
		"SELECT DISTINCT partition FROM ordered_events.lease "
		"WHERE batch = ANY ($1) AND consumer_id = $2 ORDER BY partition",
		2, {INT8ARRAYOID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
	/* the batch of a receipt, for ack() and nack() */
	[PLAN_RECEIPT_ROW] = {
		"SELECT partition, state = 'leased', done, events "
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
} Subscription;

/* What a receive() knows of a key: an entry of a KeyTable. */
typedef struct KeyInfo
{
	text	   *key;			/* outlives the receive() */
	uint32		hash;
	char		status;			/* simplehash's */
	int32		out;			/* its events leased or returned */
	bool		waiting;		/* one of its events waits */
} KeyInfo;

static inline uint32
key_hash(const text *key)
{
	return (uint32) hash_bytes_extended((const unsigned char *) VARDATA_ANY(key),
										VARSIZE_ANY_EXHDR(key), 0);
}

static inline bool
text_equal(const text *a, const text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

#define SH_PREFIX		keytable
#define SH_ELEMENT_TYPE KeyInfo
#define SH_KEY_TYPE		text *
#define SH_KEY			key
#define SH_HASH_KEY(tb, k) key_hash(k)
#define SH_EQUAL(tb, a, b) text_equal(a, b)
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) a->hash
#define SH_SCOPE		static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

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
	keytable_hash *keys;
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

/* The entry of a key, made if new ("key" must outlive the receive). */
static KeyInfo *
key_info(Receive *rc, text *key)
{
	bool		found;
	KeyInfo    *info = keytable_insert(rc->keys, key, &found);

	if (!found)
	{
		info->out = 0;
		info->waiting = false;
	}
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

/* The lease table and its sequence, kept for the backend. */
typedef struct LeaseObjects
{
	Oid			extension;		/* the extension they were looked up in */
	Oid			lease;
	Oid			batch_seq;
} LeaseObjects;

static const LeaseObjects *
lease_objects(void)
{
	static LeaseObjects objects;
	const OeRelations *rels = oe_relations();

	if (objects.extension != rels->extension)
	{
		Oid			schema = get_namespace_oid(OE_SCHEMA, false);

		objects.lease = get_relname_relid("lease", schema);
		objects.batch_seq = get_relname_relid("lease_batch_seq", schema);
		if (!OidIsValid(objects.lease) || !OidIsValid(objects.batch_seq))
			elog(ERROR, "table %s.lease or its sequence is missing", OE_SCHEMA);
		objects.extension = rels->extension;
	}
	return &objects;
}

/* The number of a new batch. */
static int64
next_batch(void)
{
	return nextval_internal(lease_objects()->batch_seq, true);
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

		s->stream_id = DatumGetInt32(oe_result(i, 1, &isnull));
		s->stream = DatumGetTextPCopy(oe_result(i, 2, &isnull));
		s->per_key = DatumGetBool(oe_result(i, 3, &isnull));
		rc->subscriptions = lappend(rc->subscriptions, s);
	}
}

/*
 * A varint at buf->data + buf->len, which has room for it (10 bytes);
 * zigzag (see put_delta()) for signed values.
 */
static inline void
put_varint(StringInfo buf, uint64 value)
{
	char	   *p = buf->data + buf->len;

	while (value >= 0x80)
	{
		*p++ = (char) ((value & 0x7F) | 0x80);
		value >>= 7;
	}
	*p++ = (char) value;
	buf->len = p - buf->data;
}

/* value - before, zigzagged: small either way; wraps as uint64 does. */
static inline void
put_delta(StringInfo buf, int64 value, int64 before)
{
	uint64		d = (uint64) value - (uint64) before;

	put_varint(buf, (d << 1) ^ (uint64) ((int64) d >> 63));
}

static uint64
get_varint(const char **p, const char *end)
{
	uint64		value = 0;

	for (int shift = 0; shift < 64; shift += 7)
	{
		uint8		byte;

		if (*p >= end)
			break;
		byte = (uint8) *(*p)++;
		value |= (uint64) (byte & 0x7F) << shift;
		if ((byte & 0x80) == 0)
			return value;
	}
	elog(ERROR, "the events of a lease row are damaged");
	return 0;					/* keep compiler quiet */
}

static int64
get_delta(const char **p, const char *end, int64 before)
{
	uint64		z = get_varint(p, end);

	return (int64) ((uint64) before + ((z >> 1) ^ (~(z & 1) + 1)));
}

/*
 * The events of a batch as one bytea: a format byte, the count, then each
 * event as varints, most of them the difference from the event before
 * (stream, seq, delivery, stabilized_ts, released_at), the key with its
 * length, the attempt.  About 13 bytes an event where arrays of the same
 * took 50: the row's one toasted value is a quarter of the size, which is
 * what a receive() and an ack() write and delete (bench/lease.sh).
 */
static bytea *
encode_events(const LeaseEvent *events, int32 n)
{
	StringInfoData buf;
	LeaseEvent	before = {0};

	initStringInfo(&buf);
	enlargeStringInfo(&buf, VARHDRSZ + 11);
	buf.len = VARHDRSZ;
	buf.data[buf.len++] = EVENTS_FORMAT;
	put_varint(&buf, (uint64) n);
	for (int32 e = 0; e < n; e++)
	{
		const LeaseEvent *event = &events[e];
		int			keylen = VARSIZE_ANY_EXHDR(event->key);

		enlargeStringInfo(&buf, 7 * 10 + keylen);
		put_delta(&buf, event->stream_id, before.stream_id);
		put_delta(&buf, event->seq, before.seq);
		put_varint(&buf, keylen);
		memcpy(buf.data + buf.len, VARDATA_ANY(event->key), keylen);
		buf.len += keylen;
		put_delta(&buf, event->delivery, before.delivery);
		put_delta(&buf, event->stabilized_ts, before.stabilized_ts);
		put_delta(&buf, event->released_at, before.released_at);
		put_varint(&buf, (uint64) event->attempt);
		before = *event;
	}
	SET_VARSIZE(buf.data, buf.len);
	return (bytea *) buf.data;
}

/* The events of encode_events(); their keys point into "data". */
static LeaseEvent *
decode_events(bytea *data, int32 *n)
{
	const char *p = VARDATA_ANY(data);
	const char *end = p + VARSIZE_ANY_EXHDR(data);
	LeaseEvent	before = {0};
	LeaseEvent *events;
	uint64		count;

	if (p >= end || *p++ != EVENTS_FORMAT)
		elog(ERROR, "the events of a lease row have an unknown format");
	count = get_varint(&p, end);
	if (count > LEASE_SLOTS)
		elog(ERROR, "the events of a lease row are damaged");
	events = palloc(sizeof(LeaseEvent) * Max(count, 1));
	for (uint64 e = 0; e < count; e++)
	{
		LeaseEvent *event = &events[e];
		uint64		len;
		text	   *key;

		event->stream_id = (int32) get_delta(&p, end, before.stream_id);
		event->seq = get_delta(&p, end, before.seq);
		len = get_varint(&p, end);
		if (len > (uint64) (end - p))
			elog(ERROR, "the events of a lease row are damaged");
		key = palloc(VARHDRSZ + len);
		SET_VARSIZE(key, VARHDRSZ + len);
		memcpy(VARDATA(key), p, len);
		p += len;
		event->key = key;
		event->delivery = get_delta(&p, end, before.delivery);
		event->stabilized_ts = get_delta(&p, end, before.stabilized_ts);
		event->released_at = get_delta(&p, end, before.released_at);
		event->attempt = (int32) get_varint(&p, end);
		before = *event;
	}
	*n = (int32) count;
	return events;
}

/*
 * The streams of the events, and for each the oldest release log row
 * among them, as parameters values[0..1]: retention keeps from there.
 */
static void
events_floors(const LeaseEvent *events, int32 n, Datum *values)
{
	Datum	   *streams = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *floors = palloc(sizeof(Datum) * Max(n, 1));
	int			nstreams = 0;

	for (int32 e = 0; e < n; e++)
	{
		int			i;

		for (i = 0; i < nstreams; i++)
			if (DatumGetInt32(streams[i]) == events[e].stream_id)
				break;
		if (i == nstreams)
		{
			streams[nstreams] = Int32GetDatum(events[e].stream_id);
			floors[nstreams++] = Int64GetDatum(events[e].delivery);
		}
		else if (events[e].delivery < DatumGetInt64(floors[i]))
			floors[i] = Int64GetDatum(events[e].delivery);
	}
	values[0] = oe_array(streams, NULL, nstreams, INT4OID);
	values[1] = oe_array(floors, NULL, nstreams, INT8OID);
}

/*
 * Write a new lease row, straight to the table (table_insert.c): one a
 * receive(), on its hot path.  Its CHECK constraints hold by construction.
 */
static void
insert_row(int32 consumer_id, int32 partition, int64 batch, const char *state,
		   TimestampTz visible_until, const LeaseEvent *events, int32 n)
{
	Datum		values[9];
	bool		isnull[9] = {0};

	values[0] = Int64GetDatum(batch);
	values[1] = Int32GetDatum(consumer_id);
	values[2] = Int32GetDatum(partition);
	values[3] = CStringGetTextDatum(state);
	values[4] = TimestampTzGetDatum(visible_until);
	isnull[4] = strcmp(state, "waiting") == 0;
	values[5] = PointerGetDatum(new_done(n));
	events_floors(events, n, values + 6);
	values[8] = PointerGetDatum(encode_events(events, n));
	oe_insert_row(lease_objects()->lease, values, isnull);
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
		row->events = decode_events(DatumGetByteaPCopy(oe_result(i, 5, &isnull)), &row->n);
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
put_row(Receive *rc, const LeaseEvent *event, text *stream, Datum payload,
		bool payload_null, TimestampTz event_ts, TimestampTz alignment_ts)
{
	Datum		values[RECEIVE_COLUMNS];
	bool		nulls[RECEIVE_COLUMNS] = {0};

	values[0] = PointerGetDatum(stream);
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
deliver(Receive *rc, const LeaseEvent *event, text *stream, Datum payload,
		bool payload_null, TimestampTz event_ts, TimestampTz alignment_ts)
{
	put_row(rc, event, stream, payload, payload_null, event_ts, alignment_ts);
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
		deliver(rc, &event, s->stream, payload, payload_null,
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
	deliver(rc, &lease, event->stream, event->payload, event->payload_null, event->event_ts,
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
}

/*
 * The consumer of a receive(), ack() or nack(), if "caller" (the role
 * that called, not the internal scope's) may use it, and "partition" is
 * one of its.  Call inside an internal scope.  Its own query, not
 * oe_consumer_lookup()'s, which reads what handlers need, through
 * consumer_or_error(): a third of an ack() (bench/lease.sh).
 */
static void
lease_consumer(Oid caller, const char *name, int32 partition, OeConsumer *consumer,
			   const char *function)
{
	Datum		value = CStringGetTextDatum(name);
	bool		isnull;
	bool		handler;

	oe_run_plan(&plans[PLAN_CONSUMER], &value, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)		/* as consumer_or_error() */
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer \"%s\" does not exist", name),
				 errhint("Create it with ordered_events.create_consumer(); the view ordered_events.consumers lists the consumers.")));
	memset(consumer, 0, sizeof(*consumer));
	consumer->name = name;
	consumer->consumer_id = DatumGetInt32(oe_result(0, 1, &isnull));
	consumer->partitions = DatumGetInt32(oe_result(0, 2, &isnull));
	value = oe_result(0, 3, &isnull);
	consumer->owner = isnull ? InvalidOid : DatumGetObjectId(value);
	consumer->lease = DatumGetBool(oe_result(0, 4, &isnull));
	handler = DatumGetBool(oe_result(0, 5, &isnull));
	consumer->max_attempts = DatumGetInt32(oe_result(0, 6, &isnull));
	consumer->partition = partition;
	consumer->handler_timeout_ms = -1;
	oe_check_partition(consumer);
	oe_check_owner(caller, consumer->owner, "consumer", consumer->name);
	oe_check_not_in_step(consumer->consumer_id);
	consumer->reader = OidIsValid(consumer->owner) ? consumer->owner : caller;
	if (!consumer->lease)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" does not have delivery 'lease'", consumer->name),
				 errdetail("%s is for consumers created with delivery => 'lease'.", function),
				 handler ?
				 errhint("The extension applies its events to its handler; see ordered_events.process().") :
				 errhint("Use ordered_events.read(): its events are consumed by the reading transaction.")));
}

/*
 * One try of receive(): deliver what is due again, what waited, then new
 * events, at most max_events, into "rows".  Returns how many it delivered;
 * *next_due is when the earliest lease of the partition runs out
 * (DT_NOEND if none is out), *consumer_id the consumer's; *changed
 * whether it wrote anything (dead letters, events left waiting).
 */
static int32
receive_try(const OeReceiveArgs *args, Tuplestorestate *rows, TupleDesc desc,
			TimestampTz *next_due, int32 *consumer_id, bool *changed)
{
	Oid			caller = GetUserId();
	OeInternalScope scope;
	Receive    *rc = palloc0(sizeof(Receive));
	int32		delivered;

	rc->args = args;
	rc->rows = rows;
	rc->desc = desc;
	oe_internal_begin(&scope, oe_relations()->owner);
	lease_consumer(caller, args->consumer, args->partition, &rc->consumer, "receive()");
	oe_consumer_lock(&rc->consumer);
	rc->now = GetCurrentTimestamp();
	rc->visible_until = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
																TimestampTzGetDatum(rc->now),
																IntervalPGetDatum(&args->visibility)));
	rc->keys = keytable_create(CurrentMemoryContext, Max(args->max_events, 64), NULL);

	/* numbered first: its receipts go into the rows as they are made */
	rc->delivered.batch = next_batch();
	load_rows(rc);
	if (rc->nrows > 0)
		load_subscriptions(rc);	/* for the events of the rows */
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
	*consumer_id = rc->consumer.consumer_id;
	*changed = rc->new_waiting.n > 0;
	for (int i = 0; i < rc->nrows; i++)
		*changed |= rc->lease_rows[i].changed;
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
 *
 * Waiting (wait.c): each try runs in a subtransaction, rolled back when it
 * delivered nothing, so that the sleep after it holds no lock of the
 * partition (another receive(), subscribe(), drop_stream() go on).  It
 * sleeps until a release gives the consumer events, an ack() or nack() of
 * the consumer commits (a key may be free, an event returned), or the
 * earliest lease out runs out, whichever comes first.  A try that
 * delivered nothing but wrote something (dead letters, events left
 * waiting) is kept, and ends the wait: it returns nothing.
 */
int32
oe_receive_events(const OeReceiveArgs *args, Tuplestorestate *rows, TupleDesc desc)
{
	MemoryContext outer = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	MemoryContext cxt = AllocSetContextCreate(outer, "ordered_events receive",
											  ALLOCSET_DEFAULT_SIZES);
	TimestampTz deadline = oe_wait_deadline(&args->wait, "receive()");
	TimestampTz next_due;
	int32		consumer_id = 0;
	bool		changed;
	int32		delivered;

	MemoryContextSwitchTo(cxt);
	if (deadline == 0)
		delivered = receive_try(args, rows, desc, &next_due, &consumer_id, &changed);
	else
	{
		for (;;)
		{
			/* read before the try's snapshot; the first try finds the consumer */
			bool		known = consumer_id != 0;
			uint64		seen = known ? oe_release_generation(consumer_id) : 0;

			BeginInternalSubTransaction(NULL);
			MemoryContextSwitchTo(cxt);
			delivered = receive_try(args, rows, desc, &next_due, &consumer_id, &changed);
			if (delivered > 0 || changed)
			{
				ReleaseCurrentSubTransaction();
				CurrentResourceOwner = owner;
				break;
			}
			RollbackAndReleaseCurrentSubTransaction();
			CurrentResourceOwner = owner;
			MemoryContextSwitchTo(cxt);
			MemoryContextReset(cxt);
			if (!known)
				continue;
			if (!oe_wait_for_release(consumer_id, seen, Min(deadline, next_due)) &&
				GetCurrentTimestamp() >= deadline)
				break;
		}
	}
	MemoryContextSwitchTo(outer);
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

	/* receipts sorted without duplicates: slots 0 .. n - 1 are n of them */
	if (returned == NULL && (receipts[0] & (LEASE_SLOTS - 1)) == 0 &&
		(receipts[n - 1] & (LEASE_SLOTS - 1)) == n - 1)
	{
		Datum		whole[3] = {values[0], values[1], PointerGetDatum(new_done(n))};

		oe_run_plan(&plans[PLAN_ACK_WHOLE], whole, NULL, SPI_OK_DELETE);
		if (SPI_processed == 1)
			return n;
	}
	oe_run_plan(&plans[PLAN_RECEIPT_ROW], values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0 || !DatumGetBool(oe_result(0, 2, &isnull)))
		return 0;				/* gone, or not leased: a stale receipt */
	partition = DatumGetInt32(oe_result(0, 1, &isnull));
	done = DatumGetVarBitPCopy(oe_result(0, 3, &isnull));
	if (returned != NULL)
		events = decode_events(DatumGetByteaPCopy(oe_result(0, 4, &isnull)), &nevents);
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

/*
 * nack() first locks the partitions of its receipts' batches, as receive()
 * does, in their order: the rows it adds are new, and a receive() in
 * progress, which read the partition's rows before, would not see them
 * (it could deliver a later event of their keys).  ack() only sets bits,
 * which a receive() reads again under the lock of the rows it changes.
 */
static void
lock_partitions(OeConsumer *consumer, const int64 *receipts, int n)
{
	Datum	   *batches = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[2];
	int			nbatches = 0;
	int32	   *partitions;
	uint64		npartitions;

	for (int i = 0; i < n; i++)
		if (receipts[i] >= 0 &&
			(nbatches == 0 ||
			 DatumGetInt64(batches[nbatches - 1]) != receipts[i] >> LEASE_SLOT_BITS))
			batches[nbatches++] = Int64GetDatum(receipts[i] >> LEASE_SLOT_BITS);
	values[0] = oe_array(batches, NULL, nbatches, INT8OID);
	values[1] = Int32GetDatum(consumer->consumer_id);
	oe_run_plan(&plans[PLAN_PARTITIONS], values, NULL, SPI_OK_SELECT);
	npartitions = SPI_processed;
	partitions = palloc(sizeof(int32) * Max(npartitions, 1));
	for (uint64 i = 0; i < npartitions; i++)
	{
		bool		isnull;

		partitions[i] = DatumGetInt32(oe_result(i, 1, &isnull));
	}
	for (uint64 i = 0; i < npartitions; i++)
	{
		consumer->partition = partitions[i];
		consumer->locked = false;
		oe_consumer_lock(consumer);
	}
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
	lease_consumer(caller, text_to_cstring(PG_GETARG_TEXT_PP(0)), 0, &consumer, function);
	if (returned != NULL)
		lock_partitions(&consumer, receipts, n);
	for (int i = 0; i < n;)
	{
		int64		batch = receipts[i] >> LEASE_SLOT_BITS;
		int			first = i;

		while (i < n && receipts[i] >> LEASE_SLOT_BITS == batch)
			i++;
		if (receipts[first] >= 0)
			settled += settle_batch(&consumer, batch, receipts + first, i - first, returned);
	}
	if (settled > 0)
		oe_note_released(consumer.consumer_id);	/* wake its waiting receive()s */
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

/*
 * lease_events(events bytea, done bit varying) returns table (slot
 * integer, stream_id integer, seq bigint, key text, attempt integer): the
 * events of a lease row not done yet, for the view leases.
 */
PG_FUNCTION_INFO_V1(oe_lease_events);
Datum
oe_lease_events(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VarBit	   *done = PG_GETARG_VARBIT_P(1);
	LeaseEvent *events;
	int32		n;

	InitMaterializedSRF(fcinfo, 0);
	events = decode_events(PG_GETARG_BYTEA_PP(0), &n);
	for (int32 e = 0; e < n; e++)
	{
		Datum		values[5];
		bool		nulls[5] = {0};

		if (e < VARBITLEN(done) && done_bit(done, e))
			continue;
		values[0] = Int32GetDatum(e);
		values[1] = Int32GetDatum(events[e].stream_id);
		values[2] = Int64GetDatum(events[e].seq);
		values[3] = PointerGetDatum(events[e].key);
		values[4] = Int32GetDatum(events[e].attempt);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
