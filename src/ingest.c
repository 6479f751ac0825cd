/*-------------------------------------------------------------------------
 *
 * ingest.c
 *	  Writing events: ingest() for one event, the inbox view's INSTEAD OF
 *	  trigger for INSERT ... SELECT, multi-row VALUES and COPY.
 *
 * Both paths go through oe_ingest_event(), which classifies the event and
 * does one insert statement: into ordered_events.events (global streams) or
 * key_events plus key_arrivals (per-key streams) when it is accepted, into
 * ordered_events.unprocessed otherwise.  A duplicate is detected by the
 * primary key with ON CONFLICT DO NOTHING, never by a prior lookup that
 * could race: of two sessions inserting the same seq, the second waits for
 * the first to end, then either conflicts (duplicate) or inserts.
 *
 * Locking: every ingest takes RowExclusiveLock on the events table before it
 * looks up the stream.  drop_stream() takes SHARE ROW EXCLUSIVE on it, so an
 * ingest either finishes before the drop or, having waited, sees the drop.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/xact.h"
#include "commands/sequence.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

static SPIPlanPtr insert_event_plan = NULL;
static SPIPlanPtr insert_key_event_plan = NULL;
static SPIPlanPtr why_rejected_plan = NULL;
static SPIPlanPtr skipped_plan = NULL;
static SPIPlanPtr insert_unprocessed_plan = NULL;

static SPIPlanPtr
prepare_kept(const char *query, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(query, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/* The parameters $1..$8 of the event inserts, in table column order. */
static void
event_params(const OeStream *stream, const OeEvent *event,
			 Datum *values, char *nulls)
{
	memset(nulls, ' ', Natts_oe_key_events);
	values[Anum_oe_events_stream_id - 1] = Int32GetDatum(stream->stream_id);
	values[Anum_oe_events_seq - 1] = Int64GetDatum(event->seq);
	values[Anum_oe_events_event_ts - 1] = TimestampTzGetDatum(event->event_ts);
	values[Anum_oe_events_alignment_ts - 1] = TimestampTzGetDatum(event->alignment_ts);
	values[Anum_oe_events_received_at - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[Anum_oe_events_key - 1] = PointerGetDatum(event->key);
	values[Anum_oe_events_payload - 1] = PointerGetDatum(event->payload);
	if (event->payload == NULL)
		nulls[Anum_oe_events_payload - 1] = 'n';
	values[Anum_oe_key_events_last_event - 1] = BoolGetDatum(event->last_event);
}

static Oid	event_argtypes[Natts_oe_key_events] = {
	INT4OID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TEXTOID, JSONBOID, BOOLOID
};

/* Insert into events; false if the seq is already there. */
static bool
insert_event(const OeStream *stream, const OeEvent *event)
{
	Datum		values[Natts_oe_key_events];
	char		nulls[Natts_oe_key_events];

	if (insert_event_plan == NULL)
		insert_event_plan = prepare_kept(
			"INSERT INTO ordered_events.events "
			"(stream_id, seq, event_ts, alignment_ts, received_at, key, payload) "
			"VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
			Natts_oe_events, event_argtypes);

	event_params(stream, event, values, nulls);
	if (SPI_execute_plan(insert_event_plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "inserting into %s.events failed", OE_SCHEMA);
	return SPI_processed == 1;
}

/*
 * Insert into key_events, and note the key in key_arrivals for the next
 * release step, in one statement.  Nothing is inserted if the key already
 * has the seq, or was completed by a last event below it.
 */
static bool
insert_key_event(const OeStream *stream, const OeEvent *event)
{
	Datum		values[Natts_oe_key_events];
	char		nulls[Natts_oe_key_events];

	if (insert_key_event_plan == NULL)
		insert_key_event_plan = prepare_kept(
			"WITH accepted AS ("
			"  INSERT INTO ordered_events.key_events "
			"  (stream_id, seq, event_ts, alignment_ts, received_at, key, payload, last_event) "
			"  SELECT $1, $2, $3, $4, $5, $6, $7, $8 "
			"  WHERE NOT EXISTS (SELECT FROM ordered_events.key_events l "
			"    WHERE l.stream_id = $1 AND l.key = $6 AND l.last_event AND l.seq < $2) "
			"  ON CONFLICT DO NOTHING "
			"  RETURNING stream_id, key) "
			"INSERT INTO ordered_events.key_arrivals (stream_id, key, arrived_at) "
			"SELECT stream_id, key, $5 FROM accepted",
			Natts_oe_key_events, event_argtypes);

	event_params(stream, event, values, nulls);
	if (SPI_execute_plan(insert_key_event_plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "inserting into %s.key_events failed", OE_SCHEMA);
	return SPI_processed == 1;
}

/*
 * Why insert_key_event() inserted nothing: the seq is already there, or the
 * key's last event is below it.  Sets *detail.
 */
static OeOutcome
why_key_event_rejected(const OeStream *stream, const OeEvent *event, char **detail)
{
	Datum		values[3];
	bool		isnull;
	Datum		last_seq;

	if (why_rejected_plan == NULL)
	{
		Oid			argtypes[3] = {INT4OID, TEXTOID, INT8OID};

		why_rejected_plan = prepare_kept(
			"SELECT min(seq) FROM ordered_events.key_events "
			"WHERE stream_id = $1 AND key = $2 AND last_event AND seq < $3 "
			"AND NOT EXISTS (SELECT FROM ordered_events.key_events d "
			"  WHERE d.stream_id = $1 AND d.key = $2 AND d.seq = $3)",
			3, argtypes);
	}
	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(event->key);
	values[2] = Int64GetDatum(event->seq);
	if (SPI_execute_plan(why_rejected_plan, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading %s.key_events failed", OE_SCHEMA);
	last_seq = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
	{
		*detail = psprintf("Seq " INT64_FORMAT " was already received for this key.",
						   event->seq);
		return OE_DUPLICATE;
	}
	*detail = psprintf("The last event of this key is seq " INT64_FORMAT ".",
					   DatumGetInt64(last_seq));
	return OE_AFTER_LAST_EVENT;
}

/*
 * If the event's seq lies in a skipped run of its sequence, return the
 * reason of the skip; otherwise NULL.
 */
static char *
skip_reason(const OeStream *stream, const OeEvent *event)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	char	   *reason = NULL;

	if (skipped_plan == NULL)
	{
		Oid			argtypes[3] = {INT4OID, TEXTOID, INT8OID};

		skipped_plan = prepare_kept(
			"SELECT reason FROM ordered_events.gap_skips "
			"WHERE stream_id = $1 AND key IS NOT DISTINCT FROM $2 "
			"AND gap_end >= $3 AND gap_start <= $3 LIMIT 1",
			3, argtypes);
	}
	values[0] = Int32GetDatum(stream->stream_id);
	values[1] = PointerGetDatum(event->key);
	if (!stream->per_key)
		nulls[1] = 'n';
	values[2] = Int64GetDatum(event->seq);
	if (SPI_execute_plan(skipped_plan, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading %s.gap_skips failed", OE_SCHEMA);
	if (SPI_processed == 1)
		reason = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	return reason;
}

/* Record a rejected event in unprocessed with its reason. */
static void
insert_unprocessed(const OeStream *stream, const OeEvent *event,
				   OeOutcome reason, const char *detail)
{
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	if (insert_unprocessed_plan == NULL)
	{
		Oid			argtypes[7] = {
			TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TEXTOID, TEXTOID
		};

		insert_unprocessed_plan = prepare_kept(
			"INSERT INTO ordered_events.unprocessed "
			"(stream, seq, key, payload, event_ts, reason, detail) "
			"VALUES ($1, $2, $3, $4, $5, $6::ordered_events.outcome, $7)",
			7, argtypes);
	}

	values[0] = CStringGetTextDatum(stream->name);
	values[1] = Int64GetDatum(event->seq);
	values[2] = PointerGetDatum(event->key);
	values[3] = PointerGetDatum(event->payload);
	if (event->payload == NULL)
		nulls[3] = 'n';
	values[4] = TimestampTzGetDatum(event->event_ts);
	values[5] = CStringGetTextDatum(oe_outcome_name(reason));
	values[6] = CStringGetTextDatum(detail);

	if (SPI_execute_plan(insert_unprocessed_plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "inserting into %s.unprocessed failed", OE_SCHEMA);
}

/*
 * Accept one event into its stream, or record it in unprocessed.  The
 * caller has locked the events table (see the banner) and looked the stream
 * up after that.  Returns what happened to the event.
 */
OeOutcome
oe_ingest_event(const OeStream *stream, const OeEvent *event)
{
	OeOutcome	outcome;
	char	   *detail = NULL;
	char	   *skipped;

	if (VARSIZE_ANY_EXHDR(event->key) > OE_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("key of %zu bytes is too long", VARSIZE_ANY_EXHDR(event->key)),
				 errdetail("Stream \"%s\", seq " INT64_FORMAT ".", stream->name, event->seq),
				 errhint("A key has at most %d bytes; use a hash of a longer identifier.",
						 OE_MAX_KEY_BYTES)));
	if (event->last_event && !stream->per_key)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("last_event is only valid on per-key streams"),
				 errdetail("Stream \"%s\" has global sequencing.", stream->name),
				 errhint("Leave last_event false: a global stream never ends.")));

	SPI_connect();
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
	{
		if (insert_key_event(stream, event))
			outcome = OE_ACCEPTED;
		else
			outcome = why_key_event_rejected(stream, event, &detail);
	}
	else if (insert_event(stream, event))
		outcome = OE_ACCEPTED;
	else
	{
		outcome = OE_DUPLICATE;
		detail = psprintf("Seq " INT64_FORMAT " was already received.", event->seq);
	}

	if (outcome != OE_ACCEPTED)
		insert_unprocessed(stream, event, outcome, detail);
	SPI_finish();
	oe_note_events_written();
	return outcome;
}

void
oe_error_null_argument(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("%s must not be null", name),
			 errhint("Every event needs a stream, a seq and a key.")));
}

/*
 * Look the stream up for writing; see the banner for the lock.  Pending
 * invalidations are read even when this transaction already holds the lock,
 * so a skip committed meanwhile is seen (its highest skipped seq).  "caller"
 * is ingest or append, which serve different gap policies.
 */
static OeStream
stream_for_ingest(text *name, bool append)
{
	OeStream	stream;

	LockRelationOid(oe_relations()->events, RowExclusiveLock);
	AcceptInvalidationMessages();
	stream = oe_stream_or_error(name);

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
		oe_error_null_argument("stream");
	if (PG_ARGISNULL(1))
		oe_error_null_argument("seq");
	if (PG_ARGISNULL(2))
		oe_error_null_argument("key");

	event.seq = PG_GETARG_INT64(1);
	event.key = PG_GETARG_TEXT_PP(2);
	event.payload = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);
	event.event_ts = PG_ARGISNULL(4) ? GetCurrentTransactionStartTimestamp()
		: PG_GETARG_TIMESTAMPTZ(4);
	event.alignment_ts = PG_ARGISNULL(5) ? GetCurrentTimestamp()
		: PG_GETARG_TIMESTAMPTZ(5);
	event.last_event = PG_ARGISNULL(6) ? false : PG_GETARG_BOOL(6);

	stream = stream_for_ingest(PG_GETARG_TEXT_PP(0), false);
	PG_RETURN_DATUM(oe_outcome_datum(oe_ingest_event(&stream, &event)));
}

/*
 * append(stream, key, payload, event_ts) returns bigint
 *
 * For fence streams: take the stream's next seq and write the event with it.
 * The transaction gets its xid before it takes the seq, so that the fence
 * (release.c) can tell from running xids alone who may still hold a seq.
 */
PG_FUNCTION_INFO_V1(oe_append);
Datum
oe_append(PG_FUNCTION_ARGS)
{
	OeStream	stream;
	OeEvent		event;
	OeOutcome	outcome;

	if (PG_ARGISNULL(0))
		oe_error_null_argument("stream");
	if (PG_ARGISNULL(1))
		oe_error_null_argument("key");

	event.key = PG_GETARG_TEXT_PP(1);
	event.payload = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	event.event_ts = PG_ARGISNULL(3) ? GetCurrentTransactionStartTimestamp()
		: PG_GETARG_TIMESTAMPTZ(3);
	event.alignment_ts = GetCurrentTimestamp();
	event.last_event = false;

	stream = stream_for_ingest(PG_GETARG_TEXT_PP(0), true);
	(void) GetTopTransactionId();
	event.seq = nextval_internal(stream.fence_seq, false);

	outcome = oe_ingest_event(&stream, &event);
	if (outcome != OE_ACCEPTED)
		elog(ERROR, "seq " INT64_FORMAT " allocated for stream \"%s\" was not accepted: %s",
			 event.seq, stream.name, oe_outcome_name(outcome));
	PG_RETURN_INT64(event.seq);
}

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
	HeapTuple	row;
	TupleDesc	desc;
	OeStream	stream;
	OeEvent		event;
	Datum		value;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_INSTEAD(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		elog(ERROR, "oe_inbox_insert: must be fired INSTEAD OF INSERT");

	row = trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);

	value = heap_getattr(row, INBOX_STREAM, desc, &isnull);
	if (isnull)
		oe_error_null_argument("stream");
	stream = stream_for_ingest(DatumGetTextPP(value), false);

	value = heap_getattr(row, INBOX_SEQ, desc, &isnull);
	if (isnull)
		oe_error_null_argument("seq");
	event.seq = DatumGetInt64(value);

	value = heap_getattr(row, INBOX_KEY, desc, &isnull);
	if (isnull)
		oe_error_null_argument("key");
	event.key = DatumGetTextPP(value);

	value = heap_getattr(row, INBOX_PAYLOAD, desc, &isnull);
	event.payload = isnull ? NULL : DatumGetJsonbP(value);

	value = heap_getattr(row, INBOX_EVENT_TS, desc, &isnull);
	event.event_ts = isnull ? GetCurrentTransactionStartTimestamp()
		: DatumGetTimestampTz(value);

	value = heap_getattr(row, INBOX_ALIGNMENT_TS, desc, &isnull);
	event.alignment_ts = isnull ? GetCurrentTimestamp() : DatumGetTimestampTz(value);

	value = heap_getattr(row, INBOX_LAST_EVENT, desc, &isnull);
	event.last_event = isnull ? false : DatumGetBool(value);

	if (oe_ingest_event(&stream, &event) != OE_ACCEPTED)
		return PointerGetDatum(NULL);
	return PointerGetDatum(row);
}
