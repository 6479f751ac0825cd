/*-------------------------------------------------------------------------
 *
 * dead_letter.c
 *	  Recording an event that will never be released in
 *	  ordered_events.unprocessed, with its reason: the one place that
 *	  writes dead letters, for ingest (rejections), for release steps
 *	  (late events of skipped runs, events after a key's last one) and for
 *	  handlers (an event whose handler raised an error).
 *
 * The row goes straight to the table (table_insert.c), so the caller needs
 * no privilege on it and nobody else can write it: a producer cannot forge
 * a dead letter.  It is part of the caller's transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * Record one dead letter.  payload (a jsonb datum) may be NULL; detail is a
 * sentence; consumer names the handler consumer whose handler raised, NULL
 * for the stream's own rejections.
 */
void
oe_dead_letter(const char *stream, int64 seq, text *key, void *payload,
			   TimestampTz event_ts, OeOutcome reason, const char *detail,
			   TimestampTz received_at, const char *consumer)
{
	Datum		values[Natts_oe_unprocessed];
	bool		isnull[Natts_oe_unprocessed] = {0};

	values[Anum_oe_unprocessed_stream - 1] = CStringGetTextDatum(stream);
	values[Anum_oe_unprocessed_seq - 1] = Int64GetDatum(seq);
	values[Anum_oe_unprocessed_key - 1] = PointerGetDatum(key);
	values[Anum_oe_unprocessed_payload - 1] = PointerGetDatum(payload);
	isnull[Anum_oe_unprocessed_payload - 1] = (payload == NULL);
	values[Anum_oe_unprocessed_event_ts - 1] = TimestampTzGetDatum(event_ts);
	values[Anum_oe_unprocessed_reason - 1] = oe_outcome_datum(reason);
	values[Anum_oe_unprocessed_detail - 1] = CStringGetTextDatum(detail);
	values[Anum_oe_unprocessed_received_at - 1] = TimestampTzGetDatum(received_at);
	if (consumer != NULL)
		values[Anum_oe_unprocessed_consumer - 1] = CStringGetTextDatum(consumer);
	isnull[Anum_oe_unprocessed_consumer - 1] = (consumer == NULL);
	oe_insert_row(oe_relations()->unprocessed, values, isnull);
}

/*
 * Record row "row" of the last SPI result, an event taken out of the event
 * table (columns seq, key, payload, event_ts, received_at), as a dead
 * letter.  detail may be NULL: then it says which seq committed late.
 */
void
oe_dead_letter_row(const char *stream, uint64 row, OeOutcome reason, const char *detail)
{
	bool		isnull;
	int64		seq = DatumGetInt64(oe_result(row, 1, &isnull));
	text	   *key = DatumGetTextPP(oe_result(row, 2, &isnull));
	Datum		payload = oe_result(row, 3, &isnull);
	void	   *jsonb = isnull ? NULL : DatumGetPointer(payload);
	TimestampTz event_ts = DatumGetTimestampTz(oe_result(row, 4, &isnull));
	TimestampTz received_at = DatumGetTimestampTz(oe_result(row, 5, &isnull));

	if (detail == NULL)
		detail = psprintf("Seq " INT64_FORMAT " committed after it was skipped.", seq);
	oe_dead_letter(stream, seq, key, jsonb, event_ts, reason, detail, received_at, NULL);
}
