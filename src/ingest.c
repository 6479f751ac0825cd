/*-------------------------------------------------------------------------
 *
 * ingest.c
 *	  Writing events: ingest() for one event, the inbox view's INSTEAD OF
 *	  trigger for INSERT ... SELECT, multi-row VALUES and COPY.
 *
 * Both paths go through ingest_event(), which classifies the event and
 * inserts it into ordered_events.event_store, in its lane (plus a row of
 * key_arrivals for a per-key stream), when it is accepted, directly (see
 * table_insert.c); into ordered_events.unprocessed otherwise (dead_letter.c).
 * A duplicate is detected by the primary key with the protocol of ON
 * CONFLICT DO NOTHING, never by a prior lookup that could race: of two
 * sessions inserting the same seq, the second waits for the first to end,
 * then either conflicts (duplicate) or inserts.
 *
 * Skips: an ingest takes its xid, then reads pending invalidations, which
 * tell it about committed skips (the stream cache holds each stream's
 * highest skipped seq), and rejects a seq that lies in a skipped run.  A
 * skip that committed too late to be seen is settled (gap_policy.c) only
 * after this transaction has ended, which is why the xid comes first.
 *
 * Retention: once a stream's released events may have been deleted
 * (stream_def.retains_events), a primary key no longer tells a retried old
 * seq from a new one, the lane's range does: an event below its lane's
 * range_end is not accepted again (not_retired()).  The same holds for a
 * sharded stream, whose range passes the seqs other shards hold.
 *
 * Locking: every ingest takes RowExclusiveLock on the event table before it
 * looks up the stream.  drop_stream() takes SHARE ROW EXCLUSIVE on it, so an
 * ingest either finishes before the drop or, having waited, sees the drop.
 * An append also takes its stream's fence lock (gap_policy.c), shared, for
 * its (sub)transaction, before it takes a seq; nothing waits for it.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

static OePlan skipped_plan = {
	"SELECT reason FROM ordered_events.gap_skips "
	"WHERE stream_id = $1 AND lane = $2 AND gap_end >= $3 AND gap_start <= $3 LIMIT 1",
	3, {INT4OID, TEXTOID, INT8OID}
};

static char *skip_reason(const OeStream *stream, const OeEvent *event);

/* An event being inserted, and why it is not accepted after all. */
typedef struct Insertion
{
	const OeStream *stream;
	const OeEvent *event;
	OeOutcome	outcome;
	char	   *detail;
} Insertion;

/*
 * The "keep" check of an event of a stream whose released events a
 * retention may have deleted: a seq the lane's range already passed is not
 * new, even when no row holds it any more; nor is a seq after the lane's
 * released last event.  The range is read with the latest snapshot once
 * the event's index entry is in (see table_insert.c), so a deletion that
 * let the insert through is seen with the release before it.
 */
static bool
not_retired(void *arg)
{
	Insertion  *ins = arg;
	const OeEvent *event = ins->event;
	const OeRelations *rels = oe_relations();
	Relation	heap = table_open(rels->progress, AccessShareLock);
	Relation	index = index_open(rels->progress_pkey, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	IndexScanDesc scan = index_beginscan(heap, index, snapshot, 2, 0);
	ScanKeyData keys[2];
	int64		range_end = PG_INT64_MIN;
	int64		last_event_seq = PG_INT64_MAX;

	ScanKeyInit(&keys[0], Anum_oe_progress_stream_id, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(ins->stream->stream_id));
	ScanKeyInit(&keys[1], Anum_oe_progress_lane, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(oe_lane_of(ins->stream, event->key)));
	keys[1].sk_collation = C_COLLATION_OID;
	index_rescan(scan, keys, 2, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		value;

		range_end = DatumGetInt64(slot_getattr(slot, Anum_oe_progress_range_end, &isnull));
		value = slot_getattr(slot, Anum_oe_progress_last_event_seq, &isnull);
		if (!isnull)
			last_event_seq = DatumGetInt64(value);
	}
	index_endscan(scan);
	UnregisterSnapshot(snapshot);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);

	if (event->seq < range_end)
	{
		char	   *skipped = skip_reason(ins->stream, event);

		ins->outcome = skipped ? OE_GAP_SKIPPED : OE_DUPLICATE;
		ins->detail = skipped ?
			psprintf("Seq " INT64_FORMAT " arrived after it was skipped (%s).", event->seq, skipped) :
			psprintf("Seq " INT64_FORMAT " was already released.", event->seq);
		return false;
	}
	if (event->seq > last_event_seq)
	{
		ins->outcome = OE_AFTER_LAST_EVENT;
		ins->detail = psprintf("The last event of this key is seq " INT64_FORMAT ".",
							   last_event_seq);
		return false;
	}
	return true;
}

/*
 * Insert an event into its lane.  Returns OE_ACCEPTED, or the reason it was
 * not inserted with *detail.
 */
static OeOutcome
insert_event(const OeStream *stream, const OeEvent *event, char **detail)
{
	Insertion	ins = {stream, event, OE_DUPLICATE, NULL};
	/* a sharded stream's range passes seqs held on other shards */
	bool		check = (stream->retains_events || stream->sharded) &&
		stream->gap_policy != OE_GAP_FENCE;
	Datum		values[Natts_oe_event];
	bool		isnull[Natts_oe_event] = {0};

	values[Anum_oe_event_stream_id - 1] = Int32GetDatum(stream->stream_id);
	values[Anum_oe_event_lane - 1] = PointerGetDatum(oe_lane_of(stream, event->key));
	values[Anum_oe_event_last_event - 1] = BoolGetDatum(event->last_event);
	values[Anum_oe_event_seq - 1] = Int64GetDatum(event->seq);
	values[Anum_oe_event_event_ts - 1] = TimestampTzGetDatum(event->event_ts);
	values[Anum_oe_event_alignment_ts - 1] = TimestampTzGetDatum(event->alignment_ts);
	values[Anum_oe_event_received_at - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[Anum_oe_event_arrival - 1] = Int64GetDatum(oe_next_arrival());
	values[Anum_oe_event_key - 1] = PointerGetDatum(event->key);
	values[Anum_oe_event_payload - 1] = PointerGetDatum(event->payload);
	isnull[Anum_oe_event_payload - 1] = (event->payload == NULL);
	if (oe_insert_unique(oe_relations()->event, values, isnull,
						 check ? not_retired : NULL, &ins))
		return OE_ACCEPTED;
	if (ins.detail != NULL)
		*detail = ins.detail;
	else if (stream->per_key)
		*detail = psprintf("Seq " INT64_FORMAT " was already received for this key.", event->seq);
	else
		*detail = psprintf("Seq " INT64_FORMAT " was already received.", event->seq);
	return ins.outcome;
}

/*
 * The key's last event below the event's seq, if any: then the key is
 * complete and the event comes after it.  Sees committed rows and this
 * transaction's own, also those of the current command (a COPY's rows).
 */
static bool
key_completed_below(const OeStream *stream, const OeEvent *event, int64 *last_seq)
{
	const OeRelations *rels = oe_relations();
	Relation	heap = table_open(rels->event, AccessShareLock);
	Relation	index = index_open(rels->event_last_event_idx, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan = index_beginscan(heap, index, SnapshotSelf, 2, 0);
	ScanKeyData keys[2];
	bool		found = false;

	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
				Int32GetDatum(stream->stream_id));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(event->key));
	keys[1].sk_collation = C_COLLATION_OID;
	index_rescan(scan, keys, 2, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		int64		seq = DatumGetInt64(slot_getattr(slot, Anum_oe_event_seq, &isnull));

		if (seq < event->seq && (!found || seq < *last_seq))
		{
			*last_seq = seq;
			found = true;
		}
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	return found;
}

/*
 * Accept an event of a per-key stream into its key's lane, and note the key
 * in key_arrivals for the next release step.  Returns the outcome; sets
 * *detail for a rejection.
 */
static OeOutcome
insert_key_event(const OeStream *stream, const OeEvent *event, char **detail)
{
	int64		last_seq = 0;
	OeOutcome	outcome;
	Datum		values[3];
	bool		isnull[3] = {0};

	if (key_completed_below(stream, event, &last_seq))
	{
		*detail = psprintf("The last event of this key is seq " INT64_FORMAT ".", last_seq);
		return OE_AFTER_LAST_EVENT;
	}
	outcome = insert_event(stream, event, detail);
	if (outcome != OE_ACCEPTED)
		return outcome;

	/* key_arrivals (stream_id, key, arrived_at) */
	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(event->key);
	values[2] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	oe_insert_row(oe_relations()->key_arrivals, values, isnull);
	return OE_ACCEPTED;
}

/*
 * If the event's seq lies in a skipped run of its lane, return the reason
 * of the skip; otherwise NULL.
 */
static char *
skip_reason(const OeStream *stream, const OeEvent *event)
{
	MemoryContext caller = CurrentMemoryContext;
	Datum		values[3];
	char	   *reason = NULL;
	OeInternalScope scope;

	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(oe_lane_of(stream, event->key));
	values[2] = Int64GetDatum(event->seq);
	oe_internal_begin(&scope, oe_relations()->owner);
	/* A skip committed after a REPEATABLE READ snapshot counts. */
	oe_run_plan_latest(&skipped_plan, values, NULL);
	if (SPI_processed == 1)
		reason = MemoryContextStrdup(caller, SPI_getvalue(SPI_tuptable->vals[0],
														  SPI_tuptable->tupdesc, 1));
	oe_internal_end(&scope);
	return reason;
}

/*
 * Accept one event into its stream, or record it in unprocessed.  The
 * caller has locked the event table (see the banner) and looked the stream
 * up after that.  Returns what happened to the event.
 */
static OeOutcome
ingest_event(const OeStream *stream, const OeEvent *event)
{
	OeOutcome	outcome;
	char	   *detail = NULL;
	char	   *skipped;

	oe_check_key(stream, event->key, &event->seq);
	if (event->last_event && !stream->per_key)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("last_event is only valid on per-key streams"),
				 errdetail("Stream \"%s\" has global sequencing.", stream->name),
				 errhint("Leave last_event false: a global stream never ends.")));

	if (event->seq < stream->initial_sequence)
	{
		outcome = OE_BEFORE_INITIAL_SEQUENCE;
		detail = psprintf("The stream starts at seq " INT64_FORMAT ".",
						  stream->initial_sequence);
	}
	else if (event->seq == PG_INT64_MAX)
	{
		outcome = OE_SEQUENCE_ID_OUTSIDE_VALID_RANGE;
		detail = psprintf("Seq " INT64_FORMAT " has no successor.", event->seq);
	}
	/* Only a seq at or below the highest skipped one needs the ledger. */
	else if (event->seq <= stream->skipped_through &&
			 (skipped = skip_reason(stream, event)) != NULL)
	{
		outcome = OE_GAP_SKIPPED;
		detail = psprintf("Seq " INT64_FORMAT " arrived after it was skipped (%s).",
						  event->seq, skipped);
	}
	else if (stream->per_key)
		outcome = insert_key_event(stream, event, &detail);
	else
		outcome = insert_event(stream, event, &detail);

	if (outcome != OE_ACCEPTED)
		oe_dead_letter(stream->name, event->seq, event->key, event->payload, event->event_ts,
					   outcome, detail, GetCurrentTransactionStartTimestamp(), NULL);
	/* A sharded stream's range is its router's: the worker has nothing to do for it. */
	if (!stream->sharded)
		oe_note_events_written();
	return outcome;
}

static void
error_null_argument(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("%s must not be null", name),
			 errhint("Every event needs a stream, a seq and a key.")));
}

/*
 * Look the stream up for writing; see the banner for the lock.  Pending
 * invalidations are read even when this transaction already holds the lock,
 * so a skip committed meanwhile is seen (its highest skipped seq).  "append"
 * says whether append() or ingest() writes, which serve different gap
 * policies; "writer" is the role that must have 'write' on the stream.
 */
static OeStream
stream_for_ingest(text *name, bool append, Oid writer)
{
	OeStream	stream;

	/* The direct inserts bypass the executor's check; before taking an xid. */
	PreventCommandIfReadOnly(append ? "append()" : "ingest()");

	/*
	 * The xid first: a skip this ingest cannot see yet (its invalidation is
	 * not read yet) is settled only after this transaction ends.
	 */
	(void) GetTopTransactionId();
	LockRelationOid(oe_relations()->event, RowExclusiveLock);
	AcceptInvalidationMessages();
	stream = oe_stream_or_error(name);
	oe_check_stream_privilege(&stream, writer, OE_PRIV_WRITE);

	if (append && stream.gap_policy != OE_GAP_FENCE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("append() is only for streams with gap_policy 'fence'"),
				 errdetail("Stream \"%s\" has gap_policy '%s'.", stream.name,
						   stream.gap_policy == OE_GAP_TIMEOUT ? "timeout" : "wait"),
				 errhint("Use ordered_events.ingest() with the event's own seq.")));
	if (!append && stream.gap_policy == OE_GAP_FENCE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("stream \"%s\" takes events from append() only", stream.name),
				 errdetail("Its gap_policy 'fence' relies on the stream allocating every seq."),
				 errhint("Use ordered_events.append(stream, key, payload), which returns the seq.")));
	return stream;
}

/*
 * ingest(stream, seq, key, payload, event_ts, alignment_ts, last_event)
 *		returns ordered_events.outcome
 */
PG_FUNCTION_INFO_V1(oe_ingest);
Datum
oe_ingest(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	OeEvent		event;

	if (PG_ARGISNULL(0))
		error_null_argument("stream");
	if (PG_ARGISNULL(1))
		error_null_argument("seq");
	if (PG_ARGISNULL(2))
		error_null_argument("key");

	event.seq = PG_GETARG_INT64(1);
	event.key = PG_GETARG_TEXT_PP(2);
	event.payload = PG_ARGISNULL(3) ? NULL : PG_GETARG_POINTER(3);
	event.event_ts = PG_ARGISNULL(4) ? GetCurrentTransactionStartTimestamp()
		: PG_GETARG_TIMESTAMPTZ(4);
	event.alignment_ts = PG_ARGISNULL(5) ? GetCurrentTimestamp()
		: PG_GETARG_TIMESTAMPTZ(5);
	event.last_event = PG_ARGISNULL(6) ? false : PG_GETARG_BOOL(6);

	stream = stream_for_ingest(PG_GETARG_TEXT_PP(0), false, GetUserId());
	PG_RETURN_DATUM(oe_outcome_datum(ingest_event(&stream, &event)));
}

/*
 * A fence stream, looked up for appending to it as "writer" (see
 * stream_for_ingest).
 */
OeStream
oe_stream_for_append(text *name, Oid writer)
{
	return stream_for_ingest(name, true, writer);
}

/*
 * Take the fence stream's next seq and write the event with it; returns the
 * seq.  append() and handlers' derived events (handler.c) come here.
 */
int64
oe_append_event(const OeStream *stream, OeEvent *event)
{
	OeOutcome	outcome;

	oe_check_key(stream, event->key, NULL);

	/*
	 * The stream's fence lock, then the xid (stream_for_ingest() took it
	 * already; asked again so that this function does not depend on it),
	 * then the seq.  The fence (gap_policy.c) relies on both coming before
	 * the seq: a transaction that holds a seq the fence read as allocated
	 * has an xid below the fence's, and is among the lock's holders until it
	 * ends (or the subtransaction that took the lock aborts, which kills the
	 * seq).  Their order between them does not matter.
	 */
	oe_fence_lock(stream);
	(void) GetTopTransactionId();
	event->seq = nextval_internal(stream->fence_seq, false);
	if (event->seq == PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED),
				 errmsg("stream \"%s\" has no seqs left", stream->name),
				 errdetail("Seq %lld has no successor.", (long long) PG_INT64_MAX),
				 errhint("Create a new stream for the producers to append to.")));

	outcome = ingest_event(stream, event);
	if (outcome == OE_GAP_SKIPPED)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("seq %lld of stream \"%s\" was skipped by a concurrent skip_gap()",
						(long long) event->seq, stream->name),
				 errhint("Retry the transaction: append() then takes a seq above the skipped ones.")));
	if (outcome != OE_ACCEPTED)
		elog(ERROR, "seq " INT64_FORMAT " allocated for stream \"%s\" was not accepted: %s",
			 event->seq, stream->name, oe_outcome_name(outcome));
	return event->seq;
}

/* append(stream, key, payload, event_ts) returns bigint: for fence streams. */
PG_FUNCTION_INFO_V1(oe_append);
Datum
oe_append(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	OeEvent		event;

	if (PG_ARGISNULL(0))
		error_null_argument("stream");
	if (PG_ARGISNULL(1))
		error_null_argument("key");

	event.key = PG_GETARG_TEXT_PP(1);
	event.payload = PG_ARGISNULL(2) ? NULL : PG_GETARG_POINTER(2);
	event.event_ts = PG_ARGISNULL(3) ? GetCurrentTransactionStartTimestamp()
		: PG_GETARG_TIMESTAMPTZ(3);
	event.alignment_ts = GetCurrentTimestamp();
	event.last_event = false;

	stream = stream_for_ingest(PG_GETARG_TEXT_PP(0), true, GetUserId());
	PG_RETURN_INT64(oe_append_event(&stream, &event));
}

/* The stream of the previous row of an inbox statement. */
typedef struct InboxStream
{
	text	   *name;
	OeStream	stream;
} InboxStream;

/* Column numbers of the inbox view. */
enum
{
	INBOX_STREAM = 1,
	INBOX_SEQ,
	INBOX_KEY,
	INBOX_PAYLOAD,
	INBOX_EVENT_TS,
	INBOX_ALIGNMENT_TS,
	INBOX_LAST_EVENT
};

/*
 * INSTEAD OF INSERT trigger of the inbox view.  Returns the row for an
 * accepted event and NULL for a rejected one, so the tag of an INSERT (not
 * of a COPY, which counts every row) and RETURNING show the accepted rows.
 */
PG_FUNCTION_INFO_V1(oe_inbox_insert);
Datum
oe_inbox_insert(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	InboxStream *last = fcinfo->flinfo->fn_extra;
	Datum	   *values;
	bool	   *isnull;
	text	   *name;
	OeStream	stream;
	OeEvent		event;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_INSTEAD(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"inbox_insert\" must be fired INSTEAD OF INSERT"),
				 errhint("It is the trigger of the view ordered_events.inbox only.")));

	/* The row's values, as the trigger manager's slot holds them. */
	slot_getallattrs(trigdata->tg_trigslot);
	values = trigdata->tg_trigslot->tts_values;
	isnull = trigdata->tg_trigslot->tts_isnull;
	if (isnull[INBOX_STREAM - 1])
		error_null_argument("stream");
	if (isnull[INBOX_SEQ - 1])
		error_null_argument("seq");
	if (isnull[INBOX_KEY - 1])
		error_null_argument("key");

	/*
	 * The rows of one statement usually share their stream: look it up once.
	 * The statement's transaction holds the lock that drop_stream() waits
	 * for, so the stream cannot go away meanwhile.
	 */
	name = DatumGetTextPP(values[INBOX_STREAM - 1]);
	if (last != NULL && VARSIZE_ANY(name) == VARSIZE_ANY(last->name) &&
		memcmp(VARDATA_ANY(name), VARDATA_ANY(last->name), VARSIZE_ANY_EXHDR(name)) == 0)
		stream = last->stream;
	else
	{
		stream = stream_for_ingest(name, false, GetUserId());
		if (last == NULL)
			fcinfo->flinfo->fn_extra = last =
				MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(InboxStream));
		else
			pfree(last->name);
		last->name = (text *) MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, VARSIZE_ANY(name));
		memcpy(last->name, name, VARSIZE_ANY(name));
		last->stream = stream;
	}

	event.seq = DatumGetInt64(values[INBOX_SEQ - 1]);
	event.key = DatumGetTextPP(values[INBOX_KEY - 1]);
	event.payload = isnull[INBOX_PAYLOAD - 1] ? NULL : DatumGetPointer(values[INBOX_PAYLOAD - 1]);
	event.event_ts = isnull[INBOX_EVENT_TS - 1] ? GetCurrentTransactionStartTimestamp()
		: DatumGetTimestampTz(values[INBOX_EVENT_TS - 1]);
	event.alignment_ts = isnull[INBOX_ALIGNMENT_TS - 1] ? GetCurrentTimestamp()
		: DatumGetTimestampTz(values[INBOX_ALIGNMENT_TS - 1]);
	event.last_event = !isnull[INBOX_LAST_EVENT - 1] &&
		DatumGetBool(values[INBOX_LAST_EVENT - 1]);

	if (ingest_event(&stream, &event) != OE_ACCEPTED)
		return PointerGetDatum(NULL);
	return PointerGetDatum(trigdata->tg_trigtuple);
}
