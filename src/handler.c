/*-------------------------------------------------------------------------
 *
 * handler.c
 *	  Handler consumers: create_consumer(), process(), and the processing
 *	  step the worker runs for each partition with events to apply.
 *
 * A processing step takes the partition's next events in merged order
 * (consumer_read.c: it locks the partition's subscription rows and moves
 * its positions past them), loads the state of their keys, applies each
 * event in turn to the handler, fn(state, event) returning (state, result),
 * and writes the keys' new states, the results (or derived events) and the
 * dead letters.  All of it is in the caller's transaction, so it commits
 * with the positions or not at all: each event is applied exactly once.
 * A key belongs to one partition, and a partition is processed by one
 * transaction at a time, so the states read at the start stay current.
 *
 * The handler is user code.  It runs as the role that created the
 * consumer, in a security-restricted context (no SET ROLE, no temporary
 * objects), with search_path "pg_catalog, pg_temp", its GUC changes undone
 * after each call, and for at most ordered_events.handler_timeout.  An
 * error it raises belongs to its event: the event goes to unprocessed
 * (exception_thrown), the key's state stays as it was, the next event goes
 * on.  Errors are caught by subtransactions, one per batch, not one per
 * event: the batch's calls run in one; after an error, the events before
 * the failing one run again in a new one (the rollback undid them), then
 * the rest from the failing one on.  An error raised by the first call of
 * a subtransaction is that event's for good.  A cancel that is not a
 * timeout is not the handler's: it ends the step, which changes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

enum
{
	PLAN_DEFINE,
	PLAN_LOAD_STATES,
	PLAN_OUTPUT_ALIGNMENT
};

static OePlan plans[] = {
	[PLAN_DEFINE] = {
		"SELECT ordered_events.define_consumer($1, $2, $3, $4, $5, $6, $7)",
		7, {TEXTOID, INT4OID, REGPROCEDUREOID, TEXTOID, TEXTOID, INTERVALOID, REGROLEOID}
	},
	/* The row of each key that has one, to update in place. */
	[PLAN_LOAD_STATES] = {
		"SELECT key, state, ctid, processed_count, error_count "
		"FROM ordered_events.handler_state WHERE consumer_id = $1 AND key = ANY ($2)",
		2, {INT4OID, TEXTARRAYOID}
	},

	/* The output stream's last alignment_ts, which 'processing' never goes below. */
	[PLAN_OUTPUT_ALIGNMENT] = {
		"SELECT e.alignment_ts FROM ordered_events.event_store e "
		"WHERE e.stream_id = $1 AND e.lane = '' ORDER BY e.seq DESC LIMIT 1",
		1, {INT4OID}
	},
};

/* The state of one key during a step. */
typedef struct KeyState
{
	text	   *key;			/* hash key (a pointer; see key_hash) */
	Datum		state;			/* jsonb, as of the last attempt that held */
	bool		state_null;
	int			attempt;		/* the attempt that set attempt_state */
	Datum		attempt_state;
	bool		attempt_state_null;

	/* its row, and its counts with what the step did */
	bool		has_row;
	ItemPointerData tid;
	int32		last_stream_id;
	int64		last_seq;
	int64		processed;
	int64		errors;
} KeyState;

/* One event of the step's batch, and what its handler call gave. */
typedef struct BatchEvent
{
	OeReadEvent event;			/* copied into the step's context */
	KeyState   *key;
	char	   *error;			/* the handler's error, NULL if none */
	Datum		result;			/* jsonb */
	bool		has_result;
} BatchEvent;

/* A processing step. */
typedef struct Step
{
	const OeConsumer *consumer;
	MemoryContext cxt;			/* lives as long as the step */
	MemoryContext call_cxt;		/* reset after each handler call */
	BatchEvent *events;
	int			nevents;
	int			max_events;		/* room in events */
	HTAB	   *keys;			/* KeyStates by key */
	int			attempt;
	char	   *error;			/* what the last failed attempt's handler raised */

	/* the handler */
	FmgrInfo	flinfo;
	TupleDesc	event_desc;
	int			timeout_ms;		/* its handler_timeout; 0: none */

	/* the statement timeout as it was before a handler call */
	bool		timeout_set;	/* a call's limit is armed */
	bool		outer_active;
	TimestampTz outer_at;
	TimestampTz deadline;		/* of the call's limit */
} Step;

/* Hash and match of KeyState keys: the texts they point to. */
static uint32
key_hash(const void *key, Size keysize)
{
	const text *t = *(text *const *) key;

	return hash_bytes((const unsigned char *) VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

static int
key_match(const void *key1, const void *key2, Size keysize)
{
	const text *a = *(text *const *) key1;
	const text *b = *(text *const *) key2;

	if (VARSIZE_ANY_EXHDR(a) != VARSIZE_ANY_EXHDR(b))
		return 1;
	return memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a));
}

/* A copy of a varlena datum in the current memory context, detoasted. */
static Datum
copy_varlena(Datum value)
{
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
}

/* oe_consumer_take()'s sink: add the event to the batch. */
static void
collect_event(const OeReadEvent *event, void *arg)
{
	Step	   *step = arg;
	MemoryContext old = MemoryContextSwitchTo(step->cxt);
	BatchEvent *e;
	KeyState   *ks;
	bool		found;

	if (step->nevents == step->max_events)
	{
		step->max_events *= 2;
		step->events = repalloc(step->events, sizeof(BatchEvent) * step->max_events);
	}
	e = &step->events[step->nevents++];
	memset(e, 0, sizeof(*e));

	e->event = *event;
	e->event.stream = (text *) DatumGetPointer(copy_varlena(PointerGetDatum(event->stream)));
	e->event.key = (text *) DatumGetPointer(copy_varlena(PointerGetDatum(event->key)));
	if (!event->payload_null)
		e->event.payload = copy_varlena(event->payload);
	ks = hash_search(step->keys, &e->event.key, HASH_ENTER, &found);
	if (!found)
	{
		memset(ks, 0, sizeof(*ks));
		ks->key = e->event.key;
		ks->state_null = true;
	}
	e->key = ks;
	MemoryContextSwitchTo(old);
}

/* The states the keys of the batch had before the step. */
static void
load_states(Step *step)
{
	long		nkeys = hash_get_num_entries(step->keys);
	Datum	   *keys = palloc(sizeof(Datum) * nkeys);
	Datum		values[2];
	HASH_SEQ_STATUS seq;
	KeyState   *ks;
	int			n = 0;

	hash_seq_init(&seq, step->keys);
	while ((ks = hash_seq_search(&seq)) != NULL)
		keys[n++] = PointerGetDatum(ks->key);
	values[0] = Int32GetDatum(step->consumer->consumer_id);
	values[1] = oe_array(keys, NULL, n, TEXTOID);
	oe_run_plan(&plans[PLAN_LOAD_STATES], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		text	   *key = DatumGetTextPP(oe_result(i, 1, &isnull));
		Datum		state = oe_result(i, 2, &isnull);

		ks = hash_search(step->keys, &key, HASH_FIND, NULL);
		if (ks == NULL)
			elog(ERROR, "handler state of an unknown key");
		ks->state_null = isnull;
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(step->cxt);

			ks->state = copy_varlena(state);
			MemoryContextSwitchTo(old);
		}
		ks->has_row = true;
		ks->tid = *(ItemPointer) DatumGetPointer(oe_result(i, 3, &isnull));
		ks->processed = DatumGetInt64(oe_result(i, 4, &isnull));
		ks->errors = DatumGetInt64(oe_result(i, 5, &isnull));
	}
}

/*
 * The handler's time limit: ordered_events.handler_timeout, or the
 * function's own setting of it (ALTER FUNCTION ... SET) if that is lower:
 * a handler's owner may shorten its limit, never lengthen or lift it.
 */
static int
handler_timeout_of(HeapTuple proc_tuple)
{
	static const char prefix[] = "ordered_events.handler_timeout=";
	bool		isnull;
	Datum		config = SysCacheGetAttr(PROCOID, proc_tuple, Anum_pg_proc_proconfig, &isnull);
	ArrayType  *array;
	Datum	   *items;
	int			nitems;
	int			timeout_ms = oe_handler_timeout;
	int			own;

	if (isnull)
		return timeout_ms;
	array = DatumGetArrayTypeP(config);
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &items, NULL, &nitems);
	for (int i = 0; i < nitems; i++)
	{
		char	   *item = TextDatumGetCString(items[i]);

		if (strncmp(item, prefix, sizeof(prefix) - 1) == 0 &&
			parse_int(item + sizeof(prefix) - 1, &own, GUC_UNIT_MS, NULL) &&
			own > 0 && (timeout_ms <= 0 || own < timeout_ms))
			timeout_ms = own;
	}
	return timeout_ms;
}

/* A role's name for a message. */
static const char *
role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name != NULL ? psprintf("role %s", name) : "a dropped role";
}

/*
 * The handler's function, checked again now: it may have been dropped,
 * replaced (by its owner: a function of the same name by another role is
 * refused) or revoked since the consumer was created.  Errors here are the
 * step's, not an event's: the events wait until the cause is fixed.
 */
static void
open_handler(Step *step)
{
	const OeConsumer *c = step->consumer;
	Oid			fn = c->handler_fn;
	HeapTuple	tuple;
	Form_pg_proc proc;

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("handler %s of consumer \"%s\" does not exist", c->handler, c->name),
				 errhint("Create the function again, or drop the consumer.")));
	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	step->timeout_ms = handler_timeout_of(tuple);
	if (proc->proowner != c->handler_owner)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("handler %s of consumer \"%s\" is owned by another role than when the consumer was created",
						c->handler, c->name),
				 errdetail("It belongs to %s now, to %s then.",
						   role_name(proc->proowner), role_name(c->handler_owner)),
				 errhint("If the function was replaced on purpose, drop the consumer and create it again.")));
	if (proc->prorettype != oe_relations()->step_type || proc->proretset ||
		proc->proisstrict || proc->prokind != PROKIND_FUNCTION)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %s of consumer \"%s\" is not a handler any more",
						c->handler, c->name),
				 errdetail("A handler returns one ordered_events.step and is not STRICT."),
				 errhint("Replace the function with one of that shape, or drop the consumer.")));
	ReleaseSysCache(tuple);
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(c->owner)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the role that created consumer \"%s\" does not exist", c->name),
				 errhint("Drop the consumer and create it again as an existing role.")));
	if (pg_proc_aclcheck(fn, c->owner, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", c->handler),
				 errdetail("Consumer \"%s\" runs it as role %s.", c->name,
						   GetUserNameFromId(c->owner, false)),
				 errhint("Grant EXECUTE on the function to that role again.")));

	fmgr_info_cxt(fn, &step->flinfo, step->cxt);
	step->event_desc = lookup_rowtype_tupdesc_copy(oe_relations()->event_type, -1);
	BlessTupleDesc(step->event_desc);
}

/*
 * Arm ordered_events.handler_timeout for one call, through the statement
 * timeout, so that the handler is cancelled like a statement; an earlier
 * statement timeout of the caller stays as it is.
 */
static void
arm_timeout(Step *step)
{
	step->outer_active = get_timeout_active(STATEMENT_TIMEOUT);
	if (step->outer_active)
		step->outer_at = get_timeout_finish_time(STATEMENT_TIMEOUT);
	if (step->timeout_ms <= 0)
		return;
	step->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), step->timeout_ms);
	if (step->outer_active && step->outer_at <= step->deadline)
		return;
	enable_timeout_at(STATEMENT_TIMEOUT, step->deadline);
	step->timeout_set = true;
}

/* Put the caller's statement timeout back. */
static void
disarm_timeout(Step *step)
{
	if (!step->timeout_set)
		return;
	step->timeout_set = false;
	if (step->outer_active && step->outer_at > GetCurrentTimestamp())
		enable_timeout_at(STATEMENT_TIMEOUT, step->outer_at);
	else
		disable_timeout(STATEMENT_TIMEOUT, true);	/* keep a cancel's reason */
}

/*
 * Call the handler for one event, as the consumer's owner; an error
 * propagates.  The new state counts for the attempt only until
 * keep_attempt().
 */
static void
call_handler(Step *step, BatchEvent *e)
{
	LOCAL_FCINFO(fcinfo, 2);
	KeyState   *ks = e->key;
	Datum		values[7];
	bool		nulls[7] = {0};
	Datum		result;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	MemoryContext old = MemoryContextSwitchTo(step->call_cxt);

	values[0] = PointerGetDatum(e->event.stream);
	values[1] = Int64GetDatum(e->event.seq);
	values[2] = PointerGetDatum(e->event.key);
	values[3] = e->event.payload;
	nulls[3] = e->event.payload_null;
	values[4] = TimestampTzGetDatum(e->event.event_ts);
	values[5] = TimestampTzGetDatum(e->event.alignment_ts);
	values[6] = BoolGetDatum(e->event.last_event);

	InitFunctionCallInfoData(*fcinfo, &step->flinfo, 2, InvalidOid, NULL, NULL);
	if (ks->attempt == step->attempt)
	{
		fcinfo->args[0].value = ks->attempt_state;
		fcinfo->args[0].isnull = ks->attempt_state_null;
	}
	else
	{
		fcinfo->args[0].value = ks->state;
		fcinfo->args[0].isnull = ks->state_null;
	}
	fcinfo->args[1].value = HeapTupleGetDatum(heap_form_tuple(step->event_desc, values, nulls));
	fcinfo->args[1].isnull = false;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(step->consumer->owner, save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	arm_timeout(step);
	result = FunctionCallInvoke(fcinfo);
	disarm_timeout(step);
	CHECK_FOR_INTERRUPTS();		/* a limit that struck as the call returned */
	AtEOXact_GUC(false, save_nestlevel);	/* undo its SETs, as index builds do */
	SetUserIdAndSecContext(save_userid, save_sec_context);

	/* A NULL step is a NULL state and no result. */
	MemoryContextSwitchTo(step->cxt);
	ks->attempt = step->attempt;
	ks->attempt_state_null = true;
	e->has_result = false;
	if (!fcinfo->isnull)
	{
		HeapTupleHeader tuple = DatumGetHeapTupleHeader(result);
		bool		isnull;
		Datum		value;

		value = GetAttributeByNum(tuple, 1, &isnull);
		ks->attempt_state_null = isnull;
		if (!isnull)
			ks->attempt_state = copy_varlena(value);
		value = GetAttributeByNum(tuple, 2, &isnull);
		e->has_result = !isnull;
		if (!isnull)
			e->result = copy_varlena(value);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(step->call_cxt);
}

/* The attempt held: its states become the keys' states. */
static void
keep_attempt(Step *step, int from, int to)
{
	for (int i = from; i < to; i++)
	{
		KeyState   *ks = step->events[i].key;

		if (ks->attempt == step->attempt)
		{
			ks->state = ks->attempt_state;
			ks->state_null = ks->attempt_state_null;
			ks->attempt = 0;
		}
	}
}

/*
 * The error as its event's dead letter says it, or NULL if it is not the
 * handler's.  A cancel is only if it is a timeout: ours, or the caller's
 * statement_timeout that struck inside the handler; a cancel by request
 * ends the step.
 */
static char *
handler_error(Step *step, ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		ours = step->timeout_ms > 0 && now >= step->deadline;

	if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED &&
		!ours && !(step->outer_active && now >= step->outer_at))
		return NULL;
	return psprintf("SQLSTATE %s: %s%s", unpack_sql_state(edata->sqlerrcode), edata->message,
					edata->sqlerrcode == ERRCODE_QUERY_CANCELED && ours ?
					psprintf(" (ordered_events.handler_timeout is %d ms)", step->timeout_ms) :
					"");
}

/*
 * Apply events from..to-1 in one subtransaction.  Returns -1 if every call
 * returned; otherwise the index of the event whose handler raised, after
 * rolling the subtransaction back, with the error in step->error.
 */
static int
attempt(Step *step, int from, int to)
{
	MemoryContext old = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile int i = from;
	int			failed = -1;

	step->attempt++;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(old);
	PG_TRY();
	{
		for (; i < to; i++)
		{
			CHECK_FOR_INTERRUPTS();
			call_handler(step, &step->events[i]);
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(old);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		disarm_timeout(step);
		MemoryContextSwitchTo(step->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(old);
		CurrentResourceOwner = oldowner;
		MemoryContextReset(step->call_cxt);
		MemoryContextSwitchTo(step->cxt);
		step->error = handler_error(step, edata);
		MemoryContextSwitchTo(old);
		if (step->error == NULL)
			ReThrowError(edata);
		FreeErrorData(edata);
		failed = i;
	}
	PG_END_TRY();
	if (failed < 0)
		keep_attempt(step, from, to);
	return failed;
}

/* Apply every event of the batch, in order; see the banner for errors. */
static void
apply_all(Step *step)
{
	int			from = 0;
	int			to = step->nevents;

	while (from < step->nevents)
	{
		int			failed = attempt(step, from, to);

		if (failed < 0)
		{
			from = to;			/* all held */
			to = step->nevents;
		}
		else if (failed == from)
		{
			/* The first event raised, alone: that error is its own. */
			step->events[from++].error = step->error;
			to = step->nevents;
		}
		else
			to = failed;		/* again, up to the event that raised */
	}
}

/*
 * Write each key's new state and counts, and the results in processing
 * order.  The rows go straight to the tables (table_insert.c): as SQL,
 * these writes were two thirds of a step (bench/handlers.sh, figure 10a).
 * Nobody else writes a key's row meanwhile: its partition is locked.
 */
static void
save_states(Step *step)
{
	const OeRelations *rels = oe_relations();
	Datum		values[Natts_oe_state];
	bool		isnull[Natts_oe_state] = {0};
	HASH_SEQ_STATUS seq;
	KeyState   *ks;

	for (int i = 0; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];

		e->key->last_stream_id = e->event.stream_id;
		e->key->last_seq = e->event.seq;
		e->key->processed++;
		if (e->error != NULL)
			e->key->errors++;
	}

	values[Anum_oe_state_consumer_id - 1] = Int32GetDatum(step->consumer->consumer_id);
	values[Anum_oe_state_updated_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	hash_seq_init(&seq, step->keys);
	while ((ks = hash_seq_search(&seq)) != NULL)
	{
		values[Anum_oe_state_key - 1] = PointerGetDatum(ks->key);
		values[Anum_oe_state_state - 1] = ks->state;
		isnull[Anum_oe_state_state - 1] = ks->state_null;
		values[Anum_oe_state_last_stream_id - 1] = Int32GetDatum(ks->last_stream_id);
		values[Anum_oe_state_last_seq - 1] = Int64GetDatum(ks->last_seq);
		values[Anum_oe_state_processed_count - 1] = Int64GetDatum(ks->processed);
		values[Anum_oe_state_error_count - 1] = Int64GetDatum(ks->errors);
		if (ks->has_row)
			oe_update_row(rels->handler_state, &ks->tid, values, isnull);
		else
			oe_insert_row(rels->handler_state, values, isnull);
	}
}

static void
save_results(Step *step)
{
	const OeRelations *rels = oe_relations();
	Datum		values[Natts_oe_result];
	bool		isnull[Natts_oe_result] = {0};

	values[Anum_oe_result_consumer_id - 1] = Int32GetDatum(step->consumer->consumer_id);
	values[Anum_oe_result_produced_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	for (int i = 0; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];

		if (e->error != NULL || !e->has_result)
			continue;
		values[Anum_oe_result_position - 1] =
			Int64GetDatum(nextval_internal(rels->result_position_seq, false));
		values[Anum_oe_result_stream_id - 1] = Int32GetDatum(e->event.stream_id);
		values[Anum_oe_result_seq - 1] = Int64GetDatum(e->event.seq);
		values[Anum_oe_result_key - 1] = PointerGetDatum(e->event.key);
		values[Anum_oe_result_result - 1] = e->result;
		oe_insert_row(rels->handler_result, values, isnull);
	}
}

/*
 * Append the results, in processing order, to the output stream as derived
 * events: the parent's key and event_ts, and its alignment_ts or the
 * step's time.
 */
static void
derive_events(Step *step, TimestampTz step_start)
{
	OeStream	output = oe_stream_for_append(step->consumer->output_stream,
												  step->consumer->owner);
	TimestampTz processing_ts = step_start;

	if (step->consumer->align_processing)
	{
		Datum		id = Int32GetDatum(output.stream_id);

		oe_run_plan(&plans[PLAN_OUTPUT_ALIGNMENT], &id, NULL, SPI_OK_SELECT);
		if (SPI_processed > 0)
		{
			bool		isnull;
			TimestampTz last = DatumGetTimestampTz(oe_result(0, 1, &isnull));

			processing_ts = Max(processing_ts, last);
		}
	}

	for (int i = 0; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];
		OeEvent		derived;

		if (e->error != NULL || !e->has_result)
			continue;
		derived.key = e->event.key;
		derived.payload = DatumGetPointer(e->result);
		derived.event_ts = e->event.event_ts;
		derived.alignment_ts = step->consumer->align_processing ? processing_ts
			: e->event.alignment_ts;
		derived.last_event = false;
		(void) oe_append_event(&output, &derived);
	}
}

/* The events whose handler raised go to unprocessed. */
static void
save_dead_letters(Step *step)
{
	for (int i = 0; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];

		if (e->error == NULL)
			continue;
		oe_dead_letter(text_to_cstring(e->event.stream), e->event.seq, e->event.key,
					   e->event.payload_null ? NULL : DatumGetPointer(e->event.payload),
					   e->event.event_ts, OE_EXCEPTION_THROWN, e->error,
					   e->event.received_at, step->consumer->name);
	}
}

/*
 * Apply the batch without the worker's short lock_timeout, which guards
 * the worker's own queries: a handler that waits for a lock is bounded by
 * its handler_timeout, and a passing lock conflict is no dead letter.
 */
static void
apply_all_in_worker(Step *step)
{
	int			save_nestlevel = NewGUCNestLevel();

	(void) set_config_option("lock_timeout", "0", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	apply_all(step);
	AtEOXact_GUC(true, save_nestlevel);
}

/*
 * One processing step of a handler consumer's partition: at most
 * max_events events.  Call inside an internal scope.  Returns the number of
 * events applied, errors included.
 */
static int64
process_step(const OeConsumer *consumer, int32 max_events, bool in_worker)
{
	TimestampTz step_start = GetCurrentTimestamp();
	Step		step = {0};
	HASHCTL		ctl;

	step.consumer = consumer;
	step.cxt = AllocSetContextCreate(CurrentMemoryContext, "ordered_events processing step",
									 ALLOCSET_DEFAULT_SIZES);
	step.call_cxt = AllocSetContextCreate(step.cxt, "ordered_events handler call",
										  ALLOCSET_DEFAULT_SIZES);
	step.max_events = Min(max_events, 1024);
	step.events = MemoryContextAlloc(step.cxt, sizeof(BatchEvent) * step.max_events);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(text *);
	ctl.entrysize = sizeof(KeyState);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = step.cxt;
	step.keys = hash_create("ordered_events handler keys", Min(max_events, 1024), &ctl,
							HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);

	open_handler(&step);
	(void) oe_consumer_take(consumer, max_events, true, collect_event, &step);
	if (step.nevents > 0)
	{
		load_states(&step);
		if (in_worker)
			apply_all_in_worker(&step);
		else
			apply_all(&step);
		save_states(&step);
		if (consumer->output_stream != NULL)
			derive_events(&step, step_start);
		else
			save_results(&step);
		save_dead_letters(&step);
	}
	MemoryContextDelete(step.cxt);
	return step.nevents;
}

/*
 * One processing step of a partition of the named handler consumer, which
 * "caller" must own.
 */
static int64
process_named(Datum name, int32 partition, int32 max_events, bool in_worker, Oid caller)
{
	OeInternalScope scope;
	OeConsumer	consumer;
	int64		applied;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_consumer_lookup(name, partition, &consumer);
	oe_check_owner(caller, consumer.owner, "consumer", consumer.name);
	consumer.reader = consumer.owner;
	if (consumer.handler == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" has no handler", consumer.name),
				 errhint("Read its events with ordered_events.read().")));
	applied = process_step(&consumer, max_events, in_worker);
	oe_internal_end(&scope);
	return applied;
}

/*
 * One processing step of a partition of a handler consumer, for the worker;
 * in the caller's transaction.
 */
int64
oe_process_partition(const char *name, int32 partition, int32 max_events)
{
	return process_named(CStringGetTextDatum(name), partition, max_events, true,
						 GetUserId());
}

/*
 * process(consumer text, max_events integer DEFAULT 1000, partition integer
 * DEFAULT 0) returns bigint
 */
PG_FUNCTION_INFO_V1(oe_process);
Datum
oe_process(PG_FUNCTION_ARGS)
{
	int32		max_events = oe_consumer_args(fcinfo, "process() applies");

	PreventCommandIfReadOnly("process()");
	PG_RETURN_INT64(process_named(PG_GETARG_DATUM(0), PG_GETARG_INT32(2), max_events, false,
								  GetUserId()));
}

/*
 * create_consumer(consumer text, partitions integer, handler regprocedure,
 * output_stream text, alignment text, handler_timeout interval) returns void
 *
 * The calling role becomes the handler's owner; define_consumer() does
 * the rest as the owner of the extension's tables.
 */
PG_FUNCTION_INFO_V1(oe_create_consumer);
Datum
oe_create_consumer(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	OeInternalScope scope;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};

	oe_check_not_null(fcinfo, 0, "consumer");
	oe_check_not_null(fcinfo, 1, "partitions");
	oe_check_not_null(fcinfo, 4, "alignment");
	for (int i = 0; i < 6; i++)
	{
		values[i] = PG_GETARG_DATUM(i);
		if (PG_ARGISNULL(i))
			nulls[i] = 'n';
	}
	values[6] = ObjectIdGetDatum(caller);

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&plans[PLAN_DEFINE], values, nulls, SPI_OK_SELECT);
	oe_internal_end(&scope);
	PG_RETURN_VOID();
}
