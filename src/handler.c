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
 * after each call.  An error it raises belongs to its event: the event
 * goes to unprocessed (exception_thrown), the key's state stays as it was,
 * the next event goes on.  Errors are caught by subtransactions, one per
 * batch, not one per event: the batch's calls run in one; after an error,
 * the events before the failing one run again in a new one (the rollback
 * undid them), then the rest from the failing one on.  An error raised by
 * the first call of a subtransaction is that event's for good, and so is
 * at once a call past its time limit (another call would cost another
 * limit).  A cancel that is not a timeout is not the handler's: it ends
 * the step, which changes nothing, even if the handler caught it and
 * returned.
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
 * without calling the handler, and forgets the record when it commits.
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

#include <signal.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
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
	bool		skip;			/* its error is final: not called again */
	Datum		result;			/* jsonb */
	bool		has_result;
} BatchEvent;

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
	HTAB	   *keys;			/* KeyStates by key */
	int			attempt;
	char	   *error;			/* what the last failed attempt's handler raised */
	bool		error_final;	/* ... a time limit: not to be called again */

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
	step->error_final = ours;
	return psprintf("SQLSTATE %s: %s%s", unpack_sql_state(edata->sqlerrcode), edata->message,
					edata->sqlerrcode == ERRCODE_QUERY_CANCELED && ours ?
					psprintf(" (%s)", limit_text(step)) : "");
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
			if (step->events[i].skip)
				continue;		/* a dead letter already */
			CHECK_FOR_INTERRUPTS();
			call_handler(step, &step->events[i]);
			oe_slot_note_applied(1);
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
		else if (step->error_final)
		{
			/* Its limit struck: its own error, not worth another limit. */
			step->events[failed].error = step->error;
			step->events[failed].skip = true;
			to = failed;		/* again, up to it */
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
				e->skip = true;
				e->error = MemoryContextStrdup(step->cxt, stopped_detail(&calls[c]));
				found = true;
			}
		}
		if (found || step->nevents < step->requested)
			forget_at_commit(&calls[c]);
	}
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

	switch (event)
	{
		case XACT_EVENT_COMMIT:
			foreach(lc, stopped_to_forget)
				oe_forget_stopped_call(&((StoppedToForget *) lfirst(lc))->call);
			/* FALLTHROUGH */
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			list_free_deep(stopped_to_forget);
			stopped_to_forget = NIL;
			session_advisory_used = false;
			break;
		default:
			break;
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
	HASHCTL		ctl;

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
				 errhint("Read its events with ordered_events.read().")));
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
