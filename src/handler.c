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
 * objects, no PREPARE, no cursor WITH HOLD, no LISTEN), with search_path
 * "pg_catalog, pg_temp", and its GUC changes (SET, set_config()) undone
 * after each call.  An error it raises is a failed attempt of its event;
 * the key's state stays as it was.  The consumer's failure policy says
 * what follows: until max_attempts calls have failed, the event is
 * retried after retry_delay * 2^(n-1); then on_error 'dead_letter' sends
 * it to unprocessed (exception_thrown) and the key goes on, or 'hold'
 * holds it until redrive() or skip_held().  While an event waits, its key
 * waits: the key's later events are parked behind it (handler_parked),
 * every other key goes on.  A step applies the parked events of the keys
 * that are due first, in their order, then the partition's next events.
 * A cancel that is not a timeout is not the handler's: it ends the step,
 * which changes nothing, even if the handler caught it and returned.
 *
 * Errors are caught by subtransactions of several calls, not one per
 * event: after an error, the calls before it in its subtransaction run
 * again (the rollback undid them), and the next subtransactions are as
 * short as the step's error rate asks (about a quarter of the events
 * between two errors), so that events that raise are not paid for by the
 * others: at 15 % errors a handler is called about 1.05 times per event.
 *
 * Time limit.  A call may take the consumer's handler_timeout, at most the
 * server's ordered_events.handler_timeout (the DBA's ceiling), lowered by
 * the function's own setting of it.  At the limit the call is cancelled
 * (through the statement timeout), and again every OE_RECANCEL_MS while
 * it runs on; a call that ends past its limit, by an error or by returning
 * after it caught the cancel, is its event's error (57014).  A call that
 * has not returned a grace period after its limit is stopped for good: the
 * timeout handler sets ProcDiePending, so the next CHECK_FOR_INTERRUPTS
 * raises a FATAL that no exception block catches, and the process exits
 * (the worker, whom the launcher starts again, or the session that called
 * process()).  On its way out, a before_shmem_exit callback records the
 * call in shared memory (shmem.c, "stopped calls"); the next step of that
 * consumer partition, in whatever backend, makes the event a dead letter
 * without calling the handler, and forgets the record when it commits
 * (reset_consumer() forgets them too: the rebuild calls the handler again).
 * Signal handlers here only set flags: everything else happens in normal
 * context.  A crash restart of the server forgets the records.
 *
 * Re-entrancy.  A backend knows the steps it is running (active_step, a
 * stack: a handler may call process() of another consumer).  A handler
 * that calls process() or read() of a consumer being processed, or
 * anything else that calls check_not_in_step(), gets 55006 for its event.
 *
 * Session state.  A handler's session-level advisory locks do not outlive
 * its call: they are released after each call in which the handler used
 * the session-level advisory lock functions.  process() in a session that
 * holds advisory locks of its own cannot tell them from the handler's, so
 * there those functions are refused (42501), and the session's locks stay
 * as they were.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include <math.h>
#include <signal.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

/* A call past its limit is cancelled again this often (ms). */
#define OE_RECANCEL_MS		100

/*
 * The grace period after the limit before a call is stopped for good: the
 * limit again, at least 1 s (time to roll back what it did) and at most
 * 5 s.
 */
#define OE_GRACE_MIN_MS		1000
#define OE_GRACE_MAX_MS		5000

enum
{
	PLAN_DEFINE,
	PLAN_OUTPUT_ALIGNMENT,
	PLAN_TAKE_PARKED,
	PLAN_UNPARK,
	PLAN_FORGET_DEAD_LETTER
};

static OePlan plans[] = {
	[PLAN_DEFINE] = {
		"SELECT ordered_events.define_consumer($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
		11, {TEXTOID, INT4OID, REGPROCEDUREOID, TEXTOID, TEXTOID, INTERVALOID,
		TEXTOID, INT4OID, INTERVALOID, TEXTOID, REGROLEOID}
	},
	/*
	 * The parked events of the partition's keys that are due at $3, in
	 * their order: a prefix of each key's.
	 */
	[PLAN_TAKE_PARKED] = {
		"SELECT p.position, p.key, p.stream_id, d.stream, p.seq, p.arrival, p.payload, "
		"  p.event_ts, p.alignment_ts, p.last_event, p.received_at, p.dead_letter "
		"FROM (SELECT k.key FROM ordered_events.handler_state k "
		"      WHERE k.consumer_id = $1 AND k.parked > 0 AND k.held_since IS NULL "
		"        AND k.next_attempt_at <= $3 "
		"        AND ($4 = 1 OR ordered_events.key_partition(k.key, $4) = $2) "
		"      ORDER BY k.next_attempt_at LIMIT $5) k "
		"CROSS JOIN LATERAL (SELECT * FROM ordered_events.handler_parked q "
		"      WHERE q.consumer_id = $1 AND q.key = k.key ORDER BY q.position LIMIT $5) p "
		"JOIN ordered_events.stream_def d ON d.stream_id = p.stream_id "
		"ORDER BY p.position LIMIT $5",
		5, {INT4OID, INT4OID, TIMESTAMPTZOID, INT4OID, INT4OID}, CURSOR_OPT_GENERIC_PLAN
	},
	/* Parked events that were applied or became dead letters. */
	[PLAN_UNPARK] = {
		"DELETE FROM ordered_events.handler_parked p "
		"WHERE p.consumer_id = $1 AND (p.key, p.position) IN "
		"  (SELECT * FROM unnest($2::text[], $3::bigint[]))",
		3, {INT4OID, TEXTARRAYOID, INT8ARRAYOID}
	},
	/* The dead letter of a re-driven event, once it is applied or fails again for good. */
	[PLAN_FORGET_DEAD_LETTER] = {
		"DELETE FROM ordered_events.unprocessed u "
		"WHERE u.consumer = $1 AND u.stream = $2 AND u.seq = $3 AND u.key = $4 "
		"  AND u.reason = 'exception_thrown'",
		4, {TEXTOID, TEXTOID, INT8OID, TEXTOID}
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
	text	   *key;			/* hash key (a pointer; see oe_key_table()) */
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

	/* its wait (see the banner), as the row had it and the step leaves it */
	int32		attempts;		/* failed calls of its first parked event */
	bool		has_next_attempt;
	TimestampTz next_attempt_at;
	bool		held;
	TimestampTz held_since;
	char	   *last_error;		/* NULL: none */
	int32		parked;			/* its events in handler_parked */
	int32		parked_ahead;	/* ... of those, the ones the batch has not */
	bool		took_parked;	/* the batch has its first parked events */
	bool		blocked;		/* one of its events failed in this step and waits: */
	int			blocked_at;		/* ... its index in the batch */
} KeyState;

/* What became of an event of the batch. */
typedef enum EventFate
{
	FATE_NONE,					/* not decided yet */
	FATE_APPLIED,
	FATE_DEAD,					/* failed for good: a dead letter */
	FATE_RETRY,					/* failed: called again after a delay */
	FATE_HELD,					/* failed for good: held */
	FATE_PARKED					/* not called: its key waits */
} EventFate;

/* One event of the step's batch, and what its handler call gave. */
typedef struct BatchEvent
{
	OeReadEvent event;			/* copied into the step's context */
	KeyState   *key;
	EventFate	fate;
	char	   *error;			/* the handler's error, NULL if none */
	bool		failed_before;	/* a stopped call: its error is known, no call */
	int32		prior_attempts; /* its failed calls before this step */
	int			called_in;		/* the attempt that called it */
	Datum		result;			/* jsonb */
	bool		has_result;
	bool		from_parked;	/* taken from handler_parked, at: */
	int64		parked_position;
	bool		dead_letter;	/* ... a dead letter that redrive() queued */
} BatchEvent;

/* Applied or dead: the event is done with. */
#define EVENT_DONE(e) ((e)->fate == FATE_APPLIED || (e)->fate == FATE_DEAD)

/* The longest a retry waits. */
#define OE_MAX_RETRY_WAIT_US	(INT64CONST(30) * USECS_PER_DAY)

/* Where a step's time limit comes from, for its dead letters. */
typedef enum LimitSource
{
	LIMIT_SERVER,				/* ordered_events.handler_timeout */
	LIMIT_CONSUMER,				/* the consumer's handler_timeout */
	LIMIT_FUNCTION				/* the function's own setting of the GUC */
} LimitSource;

/* A processing step. */
typedef struct Step
{
	const OeConsumer *consumer;
	struct Step *outer_step;	/* the step whose handler called process() */
	bool		in_worker;
	MemoryContext cxt;			/* lives as long as the step */
	MemoryContext call_cxt;		/* reset after each handler call */
	BatchEvent *events;
	int			nevents;
	int			max_events;		/* room in events */
	int32		requested;		/* the most events the step takes */
	int			nparked;		/* the first nparked events come from handler_parked */
	TimestampTz now;			/* when the step began, for the waits */
	HTAB	   *keys;			/* KeyStates by key */
	int			attempt;
	char	   *error;			/* what the last failed attempt's handler raised */
	int			settled;		/* events decided, and of those failed: */
	int			failures;

	/* the handler */
	FmgrInfo	flinfo;
	TupleDesc	event_desc;
	int			server_ms;		/* the server's limit for this caller; 0: none */
	int			timeout_ms;		/* the limit of a call; 0: none */
	LimitSource timeout_source;
	int			grace_ms;		/* then how long before it is stopped */

	/* the session's advisory locks when the step began (see the banner) */
	bool		holds_advisory;

	/* the call running, if any, and its limit */
	BatchEvent *call_event;
	TimestampTz call_started;
	TimestampTz deadline;		/* of the call's limit, when timeout_ms > 0 */
	TimestampTz stop_at;		/* ... and of its grace period */

	/* the statement timeout as it was before a handler call */
	bool		timeout_set_for_call;	/* the call's timeouts are armed */
	bool		timeout_set;	/* ... and its statement timeout */
	bool		outer_active;
	TimestampTz outer_at;
} Step;

/* The steps this backend runs, innermost first (see the banner). */
static Step *active_step = NULL;

/*
 * Set by the signal handlers, read in normal context.  A cancel signal
 * that came before any limit of the running calls is a cancel by request;
 * one at or after it may be the statement timeout's own.
 */
static volatile sig_atomic_t cancel_requested = false;
static volatile sig_atomic_t stop_requested = false;

/* Written in normal context while no limit timeout can fire; read by them. */
static TimestampTz timeouts_from = 0;	/* earliest limit of the running calls */
static TimestampTz stop_calls_at = 0;	/* earliest end of their grace periods */

static bool backend_set_up = false;	/* see setup_backend() */
static TimeoutId recancel_timeout;
static pqsigfunc prev_sigint_handler = NULL;

/* The handlers of a transaction used session-level advisory locks. */
static bool session_advisory_used = false;

/* Stopped calls whose dead letters this transaction writes. */
typedef struct StoppedToForget
{
	OeStoppedCall call;
	SubTransactionId subid;
} StoppedToForget;

static List *stopped_to_forget = NIL;

static object_access_hook_type prev_object_access_hook = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;

/* A copy of a varlena datum in the current memory context, detoasted. */
static Datum
copy_varlena(Datum value)
{
	return PointerGetDatum(PG_DETOAST_DATUM_COPY(value));
}

/* Add an event to the batch, copied into the step's context. */
static BatchEvent *
add_event(Step *step, const OeReadEvent *event)
{
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
	return e;
}

/* oe_consumer_take()'s sink: add the event to the batch. */
static void
collect_event(const OeReadEvent *event, void *arg)
{
	(void) add_event(arg, event);
}

/*
 * The parked events of the partition's keys that are due, at most
 * max_events, first in the batch (see the banner).
 */
static void
take_parked(Step *step, int32 max_events)
{
	const OeConsumer *c = step->consumer;
	Datum		values[5];

	values[0] = Int32GetDatum(c->consumer_id);
	values[1] = Int32GetDatum(c->partition);
	values[2] = TimestampTzGetDatum(step->now);
	values[3] = Int32GetDatum(c->partitions);
	values[4] = Int32GetDatum(max_events);
	oe_run_plan(&plans[PLAN_TAKE_PARKED], values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		OeReadEvent event = {0};
		BatchEvent *e;
		bool		isnull;

		event.key = DatumGetTextPP(oe_result(i, 2, &isnull));
		event.stream_id = DatumGetInt32(oe_result(i, 3, &isnull));
		event.stream = DatumGetTextPP(oe_result(i, 4, &isnull));
		event.seq = DatumGetInt64(oe_result(i, 5, &isnull));
		event.arrival = DatumGetInt64(oe_result(i, 6, &isnull));
		event.payload = oe_result(i, 7, &event.payload_null);
		event.event_ts = DatumGetTimestampTz(oe_result(i, 8, &isnull));
		event.alignment_ts = DatumGetTimestampTz(oe_result(i, 9, &isnull));
		event.last_event = DatumGetBool(oe_result(i, 10, &isnull));
		event.received_at = DatumGetTimestampTz(oe_result(i, 11, &isnull));
		e = add_event(step, &event);
		e->from_parked = true;
		e->parked_position = DatumGetInt64(oe_result(i, 1, &isnull));
		e->dead_letter = DatumGetBool(oe_result(i, 12, &isnull));
	}
	step->nparked = step->nevents;
}

/* qsort comparator of KeyStates by key, in the order of handler_state_pkey (C). */
static int
compare_keys(const void *a, const void *b)
{
	const text *ka = (*(KeyState *const *) a)->key;
	const text *kb = (*(KeyState *const *) b)->key;
	int			la = VARSIZE_ANY_EXHDR(ka);
	int			lb = VARSIZE_ANY_EXHDR(kb);
	int			c = memcmp(VARDATA_ANY(ka), VARDATA_ANY(kb), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * The states the keys of the batch had before the step: each key's row,
 * fetched through the primary key, the keys in its order.  As SQL, "key =
 * ANY ($2)" in a generic plan that scanned a small table compared every
 * row with every key: half of a step of 1,000 events over 1,000 keys.  The
 * snapshot is the one SPI would take, after our own earlier writes.
 */
static void
load_states(Step *step)
{
	const OeRelations *rels = oe_relations();
	long		nkeys = hash_get_num_entries(step->keys);
	KeyState  **keys = palloc(sizeof(KeyState *) * nkeys);
	HASH_SEQ_STATUS seq;
	KeyState   *ks;
	int			n = 0;
	Relation	heap;
	Relation	index;
	TupleTableSlot *slot;
	IndexScanDesc scan;
	ScanKeyData skeys[2];

	hash_seq_init(&seq, step->keys);
	while ((ks = hash_seq_search(&seq)) != NULL)
		keys[n++] = ks;
	qsort(keys, n, sizeof(KeyState *), compare_keys);

	CommandCounterIncrement();
	PushCopiedSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	heap = table_open(rels->handler_state, AccessShareLock);
	index = index_open(rels->handler_state_pkey, AccessShareLock);
	slot = table_slot_create(heap, NULL);
	scan = index_beginscan(heap, index, GetActiveSnapshot(), 2, 0);
	for (int i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		state;
		Datum		value;

		ks = keys[i];
		ScanKeyInit(&skeys[0], 1, BTEqualStrategyNumber, F_INT4EQ,
					Int32GetDatum(step->consumer->consumer_id));
		ScanKeyInit(&skeys[1], 2, BTEqualStrategyNumber, F_TEXTEQ, PointerGetDatum(ks->key));
		skeys[1].sk_collation = C_COLLATION_OID;
		index_rescan(scan, skeys, 2, NULL, 0);
		if (!index_getnext_slot(scan, ForwardScanDirection, slot))
			continue;
		state = slot_getattr(slot, Anum_oe_state_state, &isnull);
		ks->state_null = isnull;
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(step->cxt);

			ks->state = copy_varlena(state);
			MemoryContextSwitchTo(old);
		}
		ks->has_row = true;
		ks->tid = slot->tts_tid;
		ks->processed = DatumGetInt64(slot_getattr(slot, Anum_oe_state_processed_count, &isnull));
		ks->errors = DatumGetInt64(slot_getattr(slot, Anum_oe_state_error_count, &isnull));
		ks->attempts = DatumGetInt32(slot_getattr(slot, Anum_oe_state_attempts, &isnull));
		ks->next_attempt_at = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_state_next_attempt_at,
																&isnull));
		ks->has_next_attempt = !isnull;
		ks->held_since = DatumGetTimestampTz(slot_getattr(slot, Anum_oe_state_held_since,
														   &isnull));
		ks->held = !isnull;
		value = slot_getattr(slot, Anum_oe_state_last_error, &isnull);
		ks->last_error = isnull ? NULL : MemoryContextStrdup(step->cxt, TextDatumGetCString(value));
		ks->parked = DatumGetInt32(slot_getattr(slot, Anum_oe_state_parked, &isnull));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	PopActiveSnapshot();
	pfree(keys);

	/* The parked events of a key that the batch does not have come first. */
	hash_seq_init(&seq, step->keys);
	while ((ks = hash_seq_search(&seq)) != NULL)
		ks->parked_ahead = ks->parked;
	for (int j = 0; j < step->nparked; j++)
	{
		BatchEvent *e = &step->events[j];

		/* the row's attempts are its first parked event's */
		if (!e->key->took_parked)
			e->prior_attempts = e->key->attempts;
		e->key->parked_ahead--;
		e->key->took_parked = true;
	}
}

/*
 * The function's own setting of ordered_events.handler_timeout (ALTER
 * FUNCTION ... SET), in ms; -1 if it has none; 0 if it has one that does
 * not lower the limit (0 or unreadable).
 */
static int
function_timeout_of(HeapTuple proc_tuple)
{
	static const char prefix[] = "ordered_events.handler_timeout=";
	bool		isnull;
	Datum		config = SysCacheGetAttr(PROCOID, proc_tuple, Anum_pg_proc_proconfig, &isnull);
	ArrayType  *array;
	Datum	   *items;
	int			nitems;
	int			timeout_ms = -1;
	int			own;

	if (isnull)
		return timeout_ms;
	array = DatumGetArrayTypeP(config);
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &items, NULL, &nitems);
	for (int i = 0; i < nitems; i++)
	{
		char	   *item = TextDatumGetCString(items[i]);

		if (strncmp(item, prefix, sizeof(prefix) - 1) == 0)
			timeout_ms = parse_int(item + sizeof(prefix) - 1, &own, GUC_UNIT_MS, NULL) ?
				Max(own, 0) : 0;
	}
	return timeout_ms;
}

/*
 * A call's time limit: the consumer's handler_timeout, capped by the
 * server's (when it has one), or the server's; then the function's own
 * setting if that is lower.  A consumer's owner may shorten the limit,
 * never lengthen or lift it.
 */
static void
choose_limit(Step *step, HeapTuple proc_tuple)
{
	const OeConsumer *c = step->consumer;
	int			own = c->handler_timeout_ms;
	int			fn = function_timeout_of(proc_tuple);

	/*
	 * Calling a function that sets this PGC_SUSET parameter fails for a
	 * role that may not set it (since 0.3): the step's error, so that the
	 * events wait rather than all become dead letters.
	 */
	if (fn >= 0 && !superuser_arg(c->owner) &&
		pg_parameter_aclcheck("ordered_events.handler_timeout", c->owner, ACL_SET) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("handler %s of consumer \"%s\" sets ordered_events.handler_timeout, which role %s may not set",
						c->handler, c->name, GetUserNameFromId(c->owner, false)),
				 errdetail("Only a superuser, or a role granted SET on it, may set ordered_events.handler_timeout."),
				 errhint("Remove the setting with ALTER FUNCTION %s RESET ordered_events.handler_timeout; "
						 "the consumer's own handler_timeout lowers its limit instead.",
						 c->handler)));

	step->timeout_ms = step->server_ms;
	step->timeout_source = LIMIT_SERVER;
	if (own > 0 && (step->timeout_ms <= 0 || own < step->timeout_ms))
	{
		step->timeout_ms = own;
		step->timeout_source = LIMIT_CONSUMER;
	}
	if (fn > 0 && (step->timeout_ms <= 0 || fn < step->timeout_ms))
	{
		step->timeout_ms = fn;
		step->timeout_source = LIMIT_FUNCTION;
	}
	step->grace_ms = Min(Max(step->timeout_ms, OE_GRACE_MIN_MS), OE_GRACE_MAX_MS);
}

/* The step's limit, as its dead letters name it. */
static char *
limit_text(const Step *step)
{
	if (step->timeout_source == LIMIT_CONSUMER)
		return psprintf("handler_timeout of consumer \"%s\" is %d ms",
						step->consumer->name, step->timeout_ms);
	return psprintf("ordered_events.handler_timeout is %d ms", step->timeout_ms);
}

/*
 * The server's ordered_events.handler_timeout for the calling role: the
 * session's value for a superuser, who may SET it; for anyone else the
 * value the session started with (postgresql.conf, ALTER SYSTEM, or ALTER
 * DATABASE / ALTER ROLE ... SET, which for this PGC_SUSET setting only a
 * superuser or a role granted SET on it can make), never a value set
 * since.  Call as the calling role.
 */
static int
server_timeout_for_caller(void)
{
	const char *reset;
	int			value;

	if (superuser())
		return oe_handler_timeout;
	reset = GetConfigOptionResetString("ordered_events.handler_timeout");
	if (reset == NULL || !parse_int(reset, &value, GUC_UNIT_MS, NULL))
		elog(ERROR, "cannot read the reset value of ordered_events.handler_timeout");
	return value;
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
	choose_limit(step, tuple);
	if (proc->proowner != c->handler_owner)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("handler %s of consumer \"%s\" is owned by another role than when the consumer was created",
						c->handler, c->name),
				 errdetail("It belongs to %s now, to %s then.",
						   oe_role_name(proc->proowner), oe_role_name(c->handler_owner)),
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
 * Timeout handler, in signal context: a call runs past its limit.  Cancel
 * it again, or, once its grace period is over, stop the process.  Only
 * flags are set here; the exit callback records the call.
 */
static void
recancel_handler(void)
{
	if (GetCurrentTimestamp() >= stop_calls_at)
	{
		stop_requested = true;
		ProcDiePending = true;
	}
	else
		QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/*
 * SIGINT, in signal context: note a cancel that came while calls run and
 * before any of their limits (then it is a cancel by request, not a
 * statement timeout), and do what the signal does anyway.
 */
static void
handler_sigint(SIGNAL_ARGS)
{
	int			save_errno = errno;

	if (GetCurrentTimestamp() < timeouts_from)
		cancel_requested = true;
	errno = save_errno;
	prev_sigint_handler(postgres_signal_arg);
}

/*
 * Arm the recancel timeout for the calls running now, innermost and outer
 * ones: from the earliest limit on, every OE_RECANCEL_MS, until the
 * earliest end of a grace period.  No call running: none.
 */
static void
set_call_timeouts(void)
{
	TimestampTz first_limit = DT_NOEND;
	TimestampTz from = DT_NOEND;
	TimestampTz stop = DT_NOEND;
	bool		running = false;

	for (Step *s = active_step; s != NULL; s = s->outer_step)
	{
		if (s->call_event == NULL || !s->timeout_set_for_call)
			continue;
		running = true;
		if (s->timeout_ms > 0)
		{
			first_limit = Min(first_limit, s->deadline);
			stop = Min(stop, s->stop_at);
		}
		if (s->outer_active)
			from = Min(from, s->outer_at);
	}
	if (get_timeout_active(recancel_timeout))
		disable_timeout(recancel_timeout, false);
	timeouts_from = running ? Min(from, first_limit) : 0;
	stop_calls_at = stop;
	if (first_limit != DT_NOEND)
		enable_timeout_every(recancel_timeout,
							 TimestampTzPlusMilliseconds(first_limit, OE_RECANCEL_MS),
							 OE_RECANCEL_MS);
}

/*
 * A call begins: arm its limit through the statement timeout, so that the
 * handler is cancelled like a statement (an earlier statement timeout of
 * the caller stays as it is), and the recancel timeout.
 */
static void
begin_call(Step *step, BatchEvent *e)
{
	TimestampTz now = GetCurrentTimestamp();

	if (step->outer_step == NULL)
		cancel_requested = false;
	step->call_event = e;
	step->call_started = now;
	step->outer_active = get_timeout_active(STATEMENT_TIMEOUT);
	if (step->outer_active)
		step->outer_at = get_timeout_finish_time(STATEMENT_TIMEOUT);
	if (step->timeout_ms > 0)
	{
		step->deadline = TimestampTzPlusMilliseconds(now, step->timeout_ms);
		step->stop_at = TimestampTzPlusMilliseconds(step->deadline, step->grace_ms);
		if (!(step->outer_active && step->outer_at <= step->deadline))
		{
			enable_timeout_at(STATEMENT_TIMEOUT, step->deadline);
			step->timeout_set = true;
		}
	}
	step->timeout_set_for_call = true;
	set_call_timeouts();
}

/*
 * The call returned or raised: disarm its limit, put the caller's
 * statement timeout back.  The call is still judged as its event's
 * (call_event) until the caller clears call_event.
 */
static void
disarm_call(Step *step)
{
	if (!step->timeout_set_for_call)
		return;
	step->timeout_set_for_call = false;
	if (step->timeout_set)
	{
		step->timeout_set = false;
		if (step->outer_active && step->outer_at > GetCurrentTimestamp())
			enable_timeout_at(STATEMENT_TIMEOUT, step->outer_at);
		else
			disable_timeout(STATEMENT_TIMEOUT, true);	/* keep a cancel's reason */
	}
	set_call_timeouts();
}

/*
 * After a call that returned: past its limit it is its event's error, even
 * if the handler caught the cancel; a cancel by request that the handler
 * caught still ends the step.
 */
static void
check_call_end(Step *step)
{
	if (step->timeout_ms > 0 && GetCurrentTimestamp() >= step->deadline)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("handler returned after its time limit")));
	if (cancel_requested)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling statement due to user request"),
				 errdetail("Handler %s caught the cancel and returned.",
						   step->consumer->handler)));
}

/*
 * The session-level advisory locks the handler took go after its call, if
 * the handlers of this transaction used them and the session held none of
 * its own when the step began (else they were refused, see
 * handler_object_access()).
 */
static void
release_handler_locks(const Step *step)
{
	if (session_advisory_used && !step->holds_advisory)
		LockReleaseSession(USER_LOCKMETHOD);
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
	begin_call(step, e);
	result = FunctionCallInvoke(fcinfo);
	disarm_call(step);
	CHECK_FOR_INTERRUPTS();		/* a limit that struck as the call returned */
	check_call_end(step);
	step->call_event = NULL;
	release_handler_locks(step);
	AtEOXact_GUC(false, save_nestlevel);	/* undo its SETs, as index builds do */
	SetUserIdAndSecContext(save_userid, save_sec_context);

	/* A NULL step is a NULL state and no result. */
	MemoryContextSwitchTo(step->cxt);
	e->called_in = step->attempt;
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

/* The attempt held: its calls are applied, and its states become the keys' states. */
static void
keep_attempt(Step *step, int from, int to)
{
	for (int i = from; i < to; i++)
	{
		BatchEvent *e = &step->events[i];
		KeyState   *ks = e->key;

		if (e->fate == FATE_NONE && e->called_in == step->attempt)
		{
			e->fate = FATE_APPLIED;
			step->settled++;
		}
		if (ks->attempt == step->attempt)
		{
			ks->state = ks->attempt_state;
			ks->state_null = ks->attempt_state_null;
			ks->attempt = 0;
		}
	}
}

/*
 * The call of the batch's event i failed (its error in e->error): the
 * failure policy decides what follows, for the event and its key (see the
 * banner).  A key that waits parks its events after i.
 */
static void
fail_event(Step *step, int i)
{
	const OeConsumer *c = step->consumer;
	BatchEvent *e = &step->events[i];
	KeyState   *ks = e->key;
	int			attempts = e->prior_attempts + 1;

	ks->errors++;
	step->settled++;
	step->failures++;
	if (attempts < c->max_attempts || c->on_error_hold)
	{
		ks->blocked = true;
		ks->blocked_at = i;
		ks->attempts = attempts;
		ks->last_error = e->error;
	}
	if (attempts < c->max_attempts)
	{
		double		wait = (double) c->retry_delay_us * pow(2.0, attempts - 1);

		e->fate = FATE_RETRY;
		ks->has_next_attempt = true;
		ks->next_attempt_at = step->now + (int64) Min(wait, (double) OE_MAX_RETRY_WAIT_US);
	}
	else if (c->on_error_hold)
	{
		e->fate = FATE_HELD;
		ks->held = true;
		ks->held_since = step->now;
		ks->has_next_attempt = false;
	}
	else
		e->fate = FATE_DEAD;
}

/*
 * The error as its event's dead letter says it, or NULL if it is not the
 * handler's.  A cancel is only if it is a timeout of a call ("in_call": it
 * was raised during one, or as it returned): ours, or the caller's
 * statement_timeout that struck inside the handler; a cancel by request,
 * or between calls, ends the step.
 */
static char *
handler_error(Step *step, ErrorData *edata, bool in_call)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		ours = in_call && step->timeout_ms > 0 && now >= step->deadline;
	bool		outer = in_call && step->outer_active && now >= step->outer_at;

	if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED && !ours && !outer)
		return NULL;
	return psprintf("SQLSTATE %s: %s%s", unpack_sql_state(edata->sqlerrcode), edata->message,
					edata->sqlerrcode == ERRCODE_QUERY_CANCELED && ours ?
					psprintf(" (%s)", limit_text(step)) : "");
}

/*
 * Apply the undecided events from..to-1 in one subtransaction: an event of
 * a key that waits is parked instead, and a stopped call fails without a
 * call.  Returns -1 if every call returned; otherwise the index of the
 * event whose handler raised, after rolling the subtransaction back, with
 * the error in step->error.
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
			BatchEvent *e = &step->events[i];

			if (e->fate != FATE_NONE)
				continue;
			if ((e->key->blocked && i > e->key->blocked_at) ||
				(!e->from_parked && e->key->parked_ahead > 0))
				e->fate = FATE_PARKED;
			else if (e->failed_before)
				fail_event(step, i);
			else
			{
				CHECK_FOR_INTERRUPTS();
				call_handler(step, e);
				oe_slot_note_applied(1);
			}
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(old);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		bool		in_call = step->call_event != NULL;

		disarm_call(step);
		step->call_event = NULL;
		MemoryContextSwitchTo(step->cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		release_handler_locks(step);	/* a rollback keeps session locks */
		MemoryContextSwitchTo(old);
		CurrentResourceOwner = oldowner;
		MemoryContextReset(step->call_cxt);
		MemoryContextSwitchTo(step->cxt);
		step->error = handler_error(step, edata, in_call);
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

/*
 * Apply every event of the batch, in order; see the banner for errors.
 * After a failure, the calls before it run again from "from", and the
 * subtransactions hold a quarter of the events the step decided per
 * failure: a call that fails costs about a quarter of its share again.
 */
static void
apply_all(Step *step)
{
	int			from = 0;

	while (from < step->nevents)
	{
		int			size = step->nevents - from;
		int			to;
		int			failed;

		if (step->failures > 0)
			size = Min(size, Max(1, step->settled / (4 * step->failures)));
		to = from + size;
		failed = attempt(step, from, to);
		if (failed < 0)
			from = to;
		else
		{
			step->events[failed].error = step->error;
			fail_event(step, failed);
		}
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
		KeyState   *ks = e->key;

		if (e->fate != FATE_PARKED)
		{
			ks->last_stream_id = e->event.stream_id;
			ks->last_seq = e->event.seq;
		}
		if (EVENT_DONE(e))
			ks->processed++;
		if (e->from_parked && EVENT_DONE(e))
			ks->parked--;
		else if (!e->from_parked && !EVENT_DONE(e))
			ks->parked++;
	}

	values[Anum_oe_state_consumer_id - 1] = Int32GetDatum(step->consumer->consumer_id);
	values[Anum_oe_state_updated_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	hash_seq_init(&seq, step->keys);
	while ((ks = hash_seq_search(&seq)) != NULL)
	{
		/*
		 * A key whose wait the step decided, and that waits for nothing
		 * now, is due at once if it has parked events left; a key whose
		 * first parked event the step did not take waits as it did.
		 */
		if (!ks->blocked && !ks->held && (ks->took_parked || ks->parked_ahead == 0))
		{
			ks->has_next_attempt = ks->parked > 0;
			ks->next_attempt_at = step->now;
			ks->attempts = 0;
			ks->last_error = NULL;
		}
		values[Anum_oe_state_key - 1] = PointerGetDatum(ks->key);
		values[Anum_oe_state_state - 1] = ks->state;
		isnull[Anum_oe_state_state - 1] = ks->state_null;
		values[Anum_oe_state_last_stream_id - 1] = Int32GetDatum(ks->last_stream_id);
		values[Anum_oe_state_last_seq - 1] = Int64GetDatum(ks->last_seq);
		values[Anum_oe_state_processed_count - 1] = Int64GetDatum(ks->processed);
		values[Anum_oe_state_error_count - 1] = Int64GetDatum(ks->errors);
		values[Anum_oe_state_attempts - 1] = Int32GetDatum(ks->attempts);
		values[Anum_oe_state_next_attempt_at - 1] = TimestampTzGetDatum(ks->next_attempt_at);
		isnull[Anum_oe_state_next_attempt_at - 1] = !ks->has_next_attempt;
		values[Anum_oe_state_held_since - 1] = TimestampTzGetDatum(ks->held_since);
		isnull[Anum_oe_state_held_since - 1] = !ks->held;
		values[Anum_oe_state_last_error - 1] =
			ks->last_error ? CStringGetTextDatum(ks->last_error) : (Datum) 0;
		isnull[Anum_oe_state_last_error - 1] = ks->last_error == NULL;
		values[Anum_oe_state_parked - 1] = Int32GetDatum(ks->parked);
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

		if (e->fate != FATE_APPLIED || !e->has_result)
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

		if (e->fate != FATE_APPLIED || !e->has_result)
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

/*
 * The events whose handler failed for good under 'dead_letter' go to
 * unprocessed.
 */
static void
save_dead_letters(Step *step)
{
	for (int i = 0; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];

		if (e->fate != FATE_DEAD)
			continue;
		oe_dead_letter(text_to_cstring(e->event.stream), e->event.seq, e->event.key,
					   e->event.payload_null ? NULL : DatumGetPointer(e->event.payload),
					   e->event.event_ts, OE_EXCEPTION_THROWN, e->error,
					   e->event.received_at, step->consumer->name);
	}
}

/*
 * The parked events the step is done with go from handler_parked, and with
 * a re-driven one its old dead letter; the events the step took that wait
 * are parked, in their order.
 */
static void
save_parked(Step *step)
{
	const OeRelations *rels = oe_relations();
	Datum		values[Natts_oe_parked];
	bool		isnull[Natts_oe_parked] = {0};
	Datum	   *keys = palloc(sizeof(Datum) * (step->nparked + 1));
	Datum	   *positions = palloc(sizeof(Datum) * (step->nparked + 1));
	int			ndone = 0;

	for (int i = 0; i < step->nparked; i++)
	{
		BatchEvent *e = &step->events[i];

		if (!EVENT_DONE(e))
			continue;
		keys[ndone] = PointerGetDatum(e->event.key);
		positions[ndone++] = Int64GetDatum(e->parked_position);
		if (e->dead_letter)
		{
			Datum		args[4];

			args[0] = CStringGetTextDatum(step->consumer->name);
			args[1] = PointerGetDatum(e->event.stream);
			args[2] = Int64GetDatum(e->event.seq);
			args[3] = PointerGetDatum(e->event.key);
			oe_run_plan(&plans[PLAN_FORGET_DEAD_LETTER], args, NULL, SPI_OK_DELETE);
		}
	}
	if (ndone > 0)
	{
		Datum		args[3];

		args[0] = Int32GetDatum(step->consumer->consumer_id);
		args[1] = oe_array(keys, NULL, ndone, TEXTOID);
		args[2] = oe_array(positions, NULL, ndone, INT8OID);
		oe_run_plan(&plans[PLAN_UNPARK], args, NULL, SPI_OK_DELETE);
	}

	values[Anum_oe_parked_consumer_id - 1] = Int32GetDatum(step->consumer->consumer_id);
	values[Anum_oe_parked_dead_letter - 1] = BoolGetDatum(false);
	values[Anum_oe_parked_parked_at - 1] = TimestampTzGetDatum(step->now);
	for (int i = step->nparked; i < step->nevents; i++)
	{
		BatchEvent *e = &step->events[i];

		if (EVENT_DONE(e))
			continue;
		values[Anum_oe_parked_key - 1] = PointerGetDatum(e->event.key);
		values[Anum_oe_parked_position - 1] =
			Int64GetDatum(nextval_internal(rels->parked_position_seq, false));
		values[Anum_oe_parked_stream_id - 1] = Int32GetDatum(e->event.stream_id);
		values[Anum_oe_parked_seq - 1] = Int64GetDatum(e->event.seq);
		values[Anum_oe_parked_arrival - 1] = Int64GetDatum(e->event.arrival);
		values[Anum_oe_parked_payload - 1] = e->event.payload;
		isnull[Anum_oe_parked_payload - 1] = e->event.payload_null;
		values[Anum_oe_parked_event_ts - 1] = TimestampTzGetDatum(e->event.event_ts);
		values[Anum_oe_parked_alignment_ts - 1] = TimestampTzGetDatum(e->event.alignment_ts);
		values[Anum_oe_parked_last_event - 1] = BoolGetDatum(e->event.last_event);
		values[Anum_oe_parked_received_at - 1] = TimestampTzGetDatum(e->event.received_at);
		oe_insert_row(rels->handler_parked, values, isnull);
	}
}

/*
 * Stopped calls (see the banner)
 */

/* A stopped call's dead letter. */
static char *
stopped_detail(const OeStoppedCall *call)
{
	return psprintf("SQLSTATE 57014: handler did not return within %d ms, past its limit of %d ms; %s",
					call->waited_ms, call->timeout_ms,
					call->worker ? "its worker was stopped"
					: "the session that called process() was stopped");
}

/* Forget a stopped call when the transaction commits (see stopped_xact_callback). */
static void
forget_at_commit(const OeStoppedCall *call)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	StoppedToForget *entry = palloc(sizeof(StoppedToForget));

	entry->call = *call;
	entry->subid = GetCurrentSubTransactionId();
	stopped_to_forget = lappend(stopped_to_forget, entry);
	MemoryContextSwitchTo(old);
}

/*
 * The stopped calls of the step's partition: an event of the batch that
 * one of them names is a dead letter, not called again.  A record whose
 * event is not in a batch that took fewer events than it could is stale
 * (that event was applied, or is no longer read): it goes too.
 */
static void
take_stopped_calls(Step *step)
{
	OeStoppedCall calls[16];
	int			ncalls;

	ncalls = oe_stopped_calls_of(MyDatabaseId, step->consumer->consumer_id,
								 step->consumer->partition, calls, lengthof(calls));
	for (int c = 0; c < ncalls; c++)
	{
		bool		found = false;

		for (int i = 0; i < step->nevents && !found; i++)
		{
			BatchEvent *e = &step->events[i];

			if (e->event.stream_id == calls[c].stream_id && e->event.seq == calls[c].seq &&
				e->event.arrival == calls[c].arrival)
			{
				e->failed_before = true;
				e->error = MemoryContextStrdup(step->cxt, stopped_detail(&calls[c]));
				found = true;
			}
		}
		if (found || step->nevents < step->requested)
			forget_at_commit(&calls[c]);
	}
}

/*
 * forget_stopped_calls(consumer_id integer, partitions integer) returns
 * void: reset_consumer() forgets the stopped calls of every partition of
 * the consumer when its transaction commits, so that the rebuild calls the
 * handler for those events again instead of making them dead letters.
 * Called once the partitions are locked: a step stopped before recorded its
 * call on its way out, before its locks went, and none runs until the end
 * of this transaction.
 */
PG_FUNCTION_INFO_V1(oe_forget_stopped_calls);
Datum
oe_forget_stopped_calls(PG_FUNCTION_ARGS)
{
	int32		consumer_id = PG_GETARG_INT32(0);
	int32		partitions = PG_GETARG_INT32(1);

	for (int32 partition = 0; partition < partitions; partition++)
	{
		OeStoppedCall calls[OE_STOPPED_CALLS];
		int			ncalls;

		ncalls = oe_stopped_calls_of(MyDatabaseId, consumer_id, partition, calls,
									 lengthof(calls));
		for (int c = 0; c < ncalls; c++)
			forget_at_commit(&calls[c]);
	}
	PG_RETURN_VOID();
}

/*
 * Exit callback: the process exits during calls past their limits (stopped
 * by recancel_handler(), or terminated meanwhile).  Record each such call,
 * so that no step calls the handler for that event again.  Runs in normal
 * context, before the transaction is rolled back and its locks released:
 * the next step of the partition, which waits for them, sees the record.
 */
static void
record_stopped_calls(int code, Datum arg)
{
	TimestampTz now = GetCurrentTimestamp();

	for (Step *s = active_step; s != NULL; s = s->outer_step)
	{
		OeStoppedCall call = {0};

		if (s->call_event == NULL || s->timeout_ms <= 0 || now < s->deadline)
			continue;
		call.dboid = MyDatabaseId;
		call.consumer_id = s->consumer->consumer_id;
		call.partition = s->consumer->partition;
		call.stream_id = s->call_event->event.stream_id;
		call.seq = s->call_event->event.seq;
		call.arrival = s->call_event->event.arrival;
		call.timeout_ms = s->timeout_ms;
		call.waited_ms = (int32) Min((now - s->call_started) / 1000, PG_INT32_MAX);
		call.worker = IsBackgroundWorker;
		call.stopped_at = now;
		if (!oe_add_stopped_call(&call))
			ereport(LOG,
					(errmsg("ordered_events could not record the stopped call of handler %s of consumer \"%s\"",
							s->consumer->handler, s->consumer->name),
					 errdetail("Without ordered_events in shared_preload_libraries there is no shared memory: the next step calls the handler for that event again.")));
	}
	active_step = NULL;
}

/*
 * emit_log_hook: the FATAL that stops the process says why.  Runs in the
 * error's memory context.
 */
static void
explain_stop(ErrorData *edata)
{
	if (stop_requested && edata->elevel == FATAL &&
		edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN && edata->detail == NULL)
	{
		TimestampTz now = GetCurrentTimestamp();

		/* the call whose grace period ended (an outer one's may end first) */
		for (Step *s = active_step; s != NULL; s = s->outer_step)
		{
			if (s->call_event == NULL || s->timeout_ms <= 0 || now < s->stop_at)
				continue;
			edata->detail = psprintf("Handler %s of consumer \"%s\" did not return within %d ms after its limit of %d ms; "
									 "the event (seq " INT64_FORMAT " of stream %s) %s.",
									 s->consumer->handler, s->consumer->name, s->grace_ms,
									 s->timeout_ms, s->call_event->event.seq,
									 text_to_cstring(s->call_event->event.stream),
									 oe_shared != NULL ? "becomes a dead letter"
									 : "will be applied again: without shared_preload_libraries nothing records it");
			break;
		}
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * Transaction callbacks: the stopped calls whose dead letters a
 * transaction wrote are forgotten when it commits; an abort keeps them, and
 * so does PREPARE TRANSACTION (the next step finds them stale if it
 * commits).  The handlers' use of session-level advisory locks is per
 * transaction too.
 */
static void
handler_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT)
		foreach(lc, stopped_to_forget)
			oe_forget_stopped_call(&((StoppedToForget *) lfirst(lc))->call);
	if (oe_xact_ended(event))
	{
		list_free_deep(stopped_to_forget);
		stopped_to_forget = NIL;
		session_advisory_used = false;
	}
}

static void
handler_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	/* what this subtransaction or one of its committed children noted */
	foreach(lc, stopped_to_forget)
	{
		StoppedToForget *entry = lfirst(lc);

		if (entry->subid >= mySubid)
		{
			stopped_to_forget = foreach_delete_current(stopped_to_forget, lc);
			pfree(entry);
		}
	}
}

/*
 * Session state: advisory locks (see the banner)
 */

/* The session-level advisory lock functions. */
static bool
is_session_advisory_function(Oid fn)
{
	switch (fn)
	{
		case F_PG_ADVISORY_LOCK_INT8:
		case F_PG_ADVISORY_LOCK_SHARED_INT8:
		case F_PG_TRY_ADVISORY_LOCK_INT8:
		case F_PG_TRY_ADVISORY_LOCK_SHARED_INT8:
		case F_PG_ADVISORY_UNLOCK_INT8:
		case F_PG_ADVISORY_UNLOCK_SHARED_INT8:
		case F_PG_ADVISORY_LOCK_INT4_INT4:
		case F_PG_ADVISORY_LOCK_SHARED_INT4_INT4:
		case F_PG_TRY_ADVISORY_LOCK_INT4_INT4:
		case F_PG_TRY_ADVISORY_LOCK_SHARED_INT4_INT4:
		case F_PG_ADVISORY_UNLOCK_INT4_INT4:
		case F_PG_ADVISORY_UNLOCK_SHARED_INT4_INT4:
		case F_PG_ADVISORY_UNLOCK_ALL:
			return true;
		default:
			return false;
	}
}

/*
 * Whether this backend holds an advisory lock (session or transaction
 * level): its lock table entries of the user lock method, read as
 * LockReleaseAll() reads them, one partition at a time.
 */
static bool
session_holds_advisory_locks(void)
{
	for (int i = 0; i < NUM_LOCK_PARTITIONS; i++)
	{
		LWLock	   *partition_lock = LockHashPartitionLockByIndex(i);
		SHM_QUEUE  *proc_locks = &MyProc->myProcLocks[i];
		PROCLOCK   *proclock;
		bool		found = false;

		LWLockAcquire(partition_lock, LW_SHARED);
		proclock = (PROCLOCK *) SHMQueueNext(proc_locks, proc_locks,
											 offsetof(PROCLOCK, procLink));
		while (proclock != NULL && !found)
		{
			found = PROCLOCK_LOCKMETHOD(*proclock) == USER_LOCKMETHOD && proclock->holdMask != 0;
			proclock = (PROCLOCK *) SHMQueueNext(proc_locks, &proclock->procLink,
												 offsetof(PROCLOCK, procLink));
		}
		LWLockRelease(partition_lock);
		if (found)
			return true;
	}
	return false;
}

/*
 * object_access_hook: a handler prepares a call of a session-level advisory
 * lock function (checked where its EXECUTE privilege is: when the call is
 * prepared).  Note it, so that its locks are released after the call; or
 * refuse it where the session holds advisory locks of its own.
 */
static void
handler_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					  int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (access != OAT_FUNCTION_EXECUTE || active_step == NULL ||
		active_step->call_event == NULL || !is_session_advisory_function(objectId))
		return;
	for (Step *s = active_step; s != NULL; s = s->outer_step)
		if (s->holds_advisory)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("a handler cannot use session-level advisory locks in a session that holds advisory locks"),
					 errdetail("process() of consumer \"%s\" was called by a session holding advisory locks: "
							   "the handler's could not be told from them to be released after its call.",
							   s->consumer->name),
					 errhint("Use pg_advisory_xact_lock() in the handler, or call process() from a session that holds no advisory lock.")));
	session_advisory_used = true;
}

/*
 * What a backend sets up at its first processing step: the recancel
 * timeout, the SIGINT wrapper, the exit callback.
 */
static void
setup_backend(void)
{
	pqsigfunc	prev;

	if (backend_set_up)
		return;
	recancel_timeout = RegisterTimeout(USER_TIMEOUT, recancel_handler);
	prev = pqsignal(SIGINT, handler_sigint);
	if (prev == SIG_ERR || prev == SIG_IGN || prev == SIG_DFL)
		(void) pqsignal(SIGINT, prev);	/* nothing to wrap: no cancel is told apart */
	else
		prev_sigint_handler = prev;
	before_shmem_exit(record_stopped_calls, (Datum) 0);
	backend_set_up = true;
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
process_step(const OeConsumer *consumer, int32 max_events, bool in_worker, int server_ms)
{
	TimestampTz step_start = GetCurrentTimestamp();
	Step		step = {0};

	setup_backend();
	step.consumer = consumer;
	step.in_worker = in_worker;
	step.server_ms = server_ms;
	step.requested = max_events;
	step.cxt = AllocSetContextCreate(CurrentMemoryContext, "ordered_events processing step",
									 ALLOCSET_DEFAULT_SIZES);
	step.call_cxt = AllocSetContextCreate(step.cxt, "ordered_events handler call",
										  ALLOCSET_DEFAULT_SIZES);
	step.max_events = Min(max_events, 1024);
	step.events = MemoryContextAlloc(step.cxt, sizeof(BatchEvent) * step.max_events);
	step.keys = oe_key_table("ordered_events handler keys", Min(max_events, 1024),
							 sizeof(KeyState), step.cxt);

	open_handler(&step);
	step.now = GetCurrentTimestamp();
	take_parked(&step, max_events);
	if (step.nparked < max_events)
		(void) oe_consumer_take(consumer, max_events - step.nparked, true, collect_event, &step);
	take_stopped_calls(&step);
	if (step.nevents > 0)
	{
		load_states(&step);
		/* The worker holds no advisory lock of its own. */
		step.holds_advisory = !in_worker && session_holds_advisory_locks();
		step.outer_step = active_step;
		active_step = &step;
		PG_TRY();
		{
			if (in_worker)
				apply_all_in_worker(&step);
			else
				apply_all(&step);
		}
		PG_FINALLY();
		{
			active_step = step.outer_step;
			if (in_worker)
				LockReleaseSession(USER_LOCKMETHOD);	/* even what C code took */
		}
		PG_END_TRY();
		save_states(&step);
		if (consumer->output_stream != NULL)
			derive_events(&step, step_start);
		else
			save_results(&step);
		save_parked(&step);		/* first: it forgets re-driven dead letters */
		save_dead_letters(&step);
	}
	MemoryContextDelete(step.cxt);
	return step.nevents;
}

/*
 * One processing step of a partition of the named handler consumer, which
 * "caller" must own; server_ms is the server's handler_timeout.
 */
static int64
process_named(Datum name, int32 partition, int32 max_events, bool in_worker, int server_ms,
			  Oid caller)
{
	OeInternalScope scope;
	OeConsumer	consumer;
	int64		applied;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_consumer_lookup(name, partition, &consumer);
	oe_check_owner(caller, consumer.owner, "consumer", consumer.name);
	oe_check_not_in_step(consumer.consumer_id);
	consumer.reader = consumer.owner;
	if (consumer.handler == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" has no handler", consumer.name),
				 consumer.lease ?
				 errhint("Receive its events with ordered_events.receive().") :
				 errhint("Read its events with ordered_events.read().")));
	/* the worker took the lock without waiting (oe_consumer_lock_nowait) */
	consumer.locked = in_worker;
	oe_consumer_lock(&consumer);	/* before its parked events are read */
	applied = process_step(&consumer, max_events, in_worker, server_ms);
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
						 oe_handler_timeout, GetUserId());
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
								  server_timeout_for_caller(), GetUserId()));
}

/*
 * Raise 55006 if a step of this backend is processing the consumer: a
 * handler that calls process(), read() (or what else calls this) of its
 * own consumer, or of the consumer of a step that called it.
 */
void
oe_check_not_in_step(int32 consumer_id)
{
	for (Step *s = active_step; s != NULL; s = s->outer_step)
		if (s->consumer->consumer_id == consumer_id)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("consumer \"%s\" is being processed by this transaction",
							s->consumer->name),
					 errdetail("Its handler %s is running.", s->consumer->handler),
					 errhint("A handler cannot process, read, change or drop its own consumer; "
							 "do that in another transaction.")));
}

/*
 * check_not_in_step(consumer_id integer) returns void: the same check, for
 * the SQL functions that change or drop a consumer.
 */
PG_FUNCTION_INFO_V1(oe_check_not_in_step_sql);
Datum
oe_check_not_in_step_sql(PG_FUNCTION_ARGS)
{
	oe_check_not_in_step(PG_GETARG_INT32(0));
	PG_RETURN_VOID();
}

/*
 * create_consumer(consumer text, partitions integer, handler regprocedure,
 * output_stream text, alignment text, handler_timeout interval, on_error
 * text, max_attempts integer, retry_delay interval, delivery text) returns
 * void
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
	Datum		values[11];
	char		nulls[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	oe_check_not_null(fcinfo, 0, "consumer");
	oe_check_not_null(fcinfo, 1, "partitions");
	oe_check_not_null(fcinfo, 4, "alignment");
	oe_check_not_null(fcinfo, 6, "on_error");
	oe_check_not_null(fcinfo, 8, "retry_delay");
	oe_check_not_null(fcinfo, 9, "delivery");
	for (int i = 0; i < 10; i++)
	{
		values[i] = PG_GETARG_DATUM(i);
		if (PG_ARGISNULL(i))
			nulls[i] = 'n';		/* max_attempts NULL: the default of its delivery */
	}
	values[10] = ObjectIdGetDatum(caller);

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&plans[PLAN_DEFINE], values, nulls, SPI_OK_SELECT);
	oe_internal_end(&scope);
	PG_RETURN_VOID();
}

/*
 * Called from _PG_init: the hooks and transaction callbacks of handler
 * steps, in every backend that loads the library.
 */
void
oe_handler_init(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = handler_object_access;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = explain_stop;
	RegisterXactCallback(handler_xact_callback, NULL);
	RegisterSubXactCallback(handler_subxact_callback, NULL);
}
