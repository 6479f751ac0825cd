/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  Background workers: a launcher, one worker per served database that
 *	  releases events continuously, and processing workers that apply
 *	  handler consumers' events, one per consumer partition with work.
 *
 * The launcher is a static worker connected to no database.  Every naptime,
 * and whenever its configuration is reloaded or one of its workers starts or
 * stops, it compares ordered_events.databases with the workers it runs:
 * it starts a worker for each listed database that exists and has none (a
 * worker that died, was terminated or crashed comes back this way), and
 * stops the workers of databases no longer listed.
 *
 * A database worker (kind 'release' in worker_status) sleeps on its
 * latch, which a committing transaction that wrote events sets (shmem.c),
 * or for naptime.  Each cycle runs one release step for every stream with
 * a releasable event, oldest waiting event first, each in its own
 * transaction bounded by max_release_batch, so one huge backlog cannot
 * starve the other streams; after a step that released events it sets the
 * latches of its database's processing workers.  Then it makes sure a
 * processing worker runs for every partition of a handler consumer with
 * events to apply (consumers_with_work(), the one waiting longest first),
 * at most ordered_events.max_processing_workers at once server-wide; the
 * others wait for a later cycle.  It never applies an event itself, nor
 * waits for a processing worker: a slow handler delays no release.  Last,
 * it compacts every stream with released events to count or events to
 * delete (oe_compact(), compaction.c), a batch per transaction, and calls
 * the cycle hooks that other extensions registered
 * (ordered_events.cycle_hook: a router's combine step of its sharded
 * streams), each in its own transaction.  Once its compactions deleted
 * ordered_events.vacuum_after events since its last vacuum, plus a fifth
 * of what event_store holds, it vacuums event_store and lane_release_log
 * at the end of the cycle, as VACUUM does, in transactions of vacuum's own
 * (vacuum_deleted()): the space of deleted events is reused at once,
 * whatever autovacuum's timing.  An error in one stream is
 * caught, logged once, shown in worker_status while it lasts, and the
 * cycle goes on.  A database without the extension is checked quietly
 * every naptime.
 *
 * A processing worker (kind 'process') serves one consumer partition: it
 * runs one processing step (handler.c) per transaction until a step
 * applies nothing, then sleeps on its latch (set by a release of its
 * database) or for naptime (a retry may fall due).  It exits once it has
 * had nothing to apply for OE_PROCESS_IDLE_MS, or earlier when a partition
 * waits for a place among max_processing_workers, when its consumer or
 * partition is gone, when its database is no longer served or is being
 * dropped, or when ordered_events.enabled is off; its release worker
 * starts it again when there is work.  Its errors are logged once and
 * shown in its worker_status row, as a release worker's.
 *
 * Transactions and locks: every unit of work is a READ COMMITTED
 * transaction, whatever default_transaction_isolation the database or the
 * server sets, so that what it reads after taking its locks is the latest
 * committed state (compaction depends on it).  A unit first takes the
 * extension's lock (DROP EXTENSION waits for it), then, without waiting,
 * the lock of what it works on: a stream's release lock (its stream_def
 * row) for a release step or a compaction, a consumer partition's
 * subscription rows for a processing step.  Another transaction holding
 * it, a release(), skip_gap(), subscribe() or process() by hand, is a
 * normal situation: the unit is left to the next cycle, with no error and
 * no wait.  Any other lock the unit waits for is bounded by the worker's
 * lock_timeout (OE_WORKER_LOCK_TIMEOUT), after which it fails like any
 * error; a handler's own waits are bounded by its handler_timeout instead
 * (handler.c).
 *
 * DROP DATABASE waits only a few seconds for other sessions to leave, and
 * does not ask background workers to: an object-access hook, run by the
 * dropping backend before that wait, terminates our workers of the
 * database, release and processing, and the launcher starts no worker in a
 * database whose drop is in progress.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/vacuum.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

/* A worker waits this long for a lock before it gives up on a stream. */
#define OE_WORKER_LOCK_TIMEOUT	"1s"

/* The most events one processing step of a processing worker applies. */
#define OE_PROCESS_BATCH		1000

/*
 * A processing worker with nothing to apply for this long exits: a fork
 * costs more than a sleeping worker, a worker slot less than a fork.
 */
#define OE_PROCESS_IDLE_MS		10000

/* A processing slot whose worker has not started after this long is freed. */
#define OE_PROCESS_START_MS		10000

/*
 * The worker vacuums once it deleted ordered_events.vacuum_after events
 * plus this fraction of the rows event_store holds (autovacuum's default
 * autovacuum_vacuum_scale_factor): each vacuum reads the whole of every
 * index of the table, so a table that holds many events is vacuumed less
 * often, as autovacuum would.
 */
#define OE_VACUUM_SCALE_FACTOR	0.2

PGDLLEXPORT void oe_launcher_main(Datum arg);
PGDLLEXPORT void oe_database_worker_main(Datum arg);
PGDLLEXPORT void oe_process_worker_main(Datum arg);

static object_access_hook_type prev_object_access_hook = NULL;

/*
 * DROP DATABASE hook: ask the worker of the database to leave, before the
 * dropping backend waits for other sessions to disconnect.
 */
static void
drop_database_hook(ObjectAccessType access, Oid classId, Oid objectId,
				   int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (access == OAT_DROP && classId == DatabaseRelationId && oe_shared != NULL)
		oe_slots_database_dropping(objectId);
}

/* Called from _PG_init when the library is preloaded. */
void
oe_worker_init(void)
{
	BackgroundWorker worker;

	prev_object_access_hook = object_access_hook;
	object_access_hook = drop_database_hook;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "ordered_events", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "oe_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "ordered_events launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "ordered_events launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * Launcher
 */

/* Launcher-local: the handle of the worker of each slot. */
static BackgroundWorkerHandle *handles[OE_MAX_DATABASES];
static TimestampTz last_start[OE_MAX_DATABASES];

/*
 * The OID of a database, or InvalidOid.  The launcher is connected to no
 * database, so it cannot open the indexes of pg_database before some backend
 * has written the shared relcache init file: it scans the heap, as the
 * autovacuum launcher does.
 */
static Oid
database_oid(const char *name)
{
	Relation	rel = table_open(DatabaseRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, NULL);
	HeapTuple	tuple;
	Oid			dboid = InvalidOid;

	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		if (strcmp(NameStr(db->datname), name) == 0)
		{
			dboid = db->oid;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return dboid;
}

/* True if a DROP DATABASE of dboid holds the database lock right now. */
static bool
database_is_being_dropped(Oid dboid)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, dboid, 0);
	if (LockAcquire(&tag, AccessShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, AccessShareLock, false);
	return false;
}

/* Launcher: register the dynamic worker of a slot, for database dbname. */
static void
start_worker(int slotno, const char *dbname)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "ordered_events", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "oe_database_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "ordered_events worker for %s", dbname);
	strlcpy(worker.bgw_type, "ordered_events worker", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	worker.bgw_notify_pid = MyProcPid;

	last_start[slotno] = GetCurrentTimestamp();
	if (!RegisterDynamicBackgroundWorker(&worker, &handles[slotno]))
	{
		handles[slotno] = NULL;
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start the ordered_events worker for database \"%s\"",
						dbname),
				 errhint("Raise max_worker_processes: the launcher and every served database need one each.")));
	}
}

/* Launcher: terminate the worker of a slot, if it runs. */
static void
stop_worker(int slotno)
{
	if (handles[slotno] != NULL)
	{
		TerminateBackgroundWorker(handles[slotno]);
		pfree(handles[slotno]);
		handles[slotno] = NULL;
	}
}

/* Launcher: true if the worker of a slot runs (or is starting). */
static bool
worker_running(int slotno)
{
	pid_t		pid;

	return handles[slotno] != NULL &&
		GetBackgroundWorkerPid(handles[slotno], &pid) != BGWH_STOPPED;
}

/*
 * The OIDs of the databases named (InvalidOid for one not created yet), at
 * most OE_MAX_DATABASES, and whether each is being dropped; returns how
 * many.
 */
static int
served_databases(List *names, Oid *oids, bool *dropping)
{
	int			n = 0;
	ListCell   *lc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	foreach(lc, names)
	{
		if (n == OE_MAX_DATABASES)
		{
			ereport(WARNING,
					(errmsg("ordered_events serves at most %d databases", OE_MAX_DATABASES),
					 errhint("Shorten ordered_events.databases.")));
			break;
		}
		oids[n] = database_oid(lfirst(lc));
		dropping[n] = OidIsValid(oids[n]) && database_is_being_dropped(oids[n]);
		n++;
	}
	CommitTransactionCommand();
	return n;
}

/* Bring the running workers in line with ordered_events.databases. */
static void
reconcile_workers(void)
{
	char	   *raw = pstrdup(oe_enabled ? oe_databases : "");
	List	   *names = NIL;
	Oid			oids[OE_MAX_DATABASES];
	bool		dropping[OE_MAX_DATABASES];
	int			freed[OE_MAX_DATABASES];
	int			nfreed;
	int			nnames;

	if (!SplitGUCList(raw, ',', &names))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in ordered_events.databases"),
				 errhint("Use a comma-separated list of database names.")));
		names = NIL;
	}

	nnames = served_databases(names, oids, dropping);
	oe_lock_slots();

	/* Stop the workers of databases no longer served. */
	nfreed = oe_free_unserved_slots(oids, nnames, freed);
	for (int i = 0; i < nfreed; i++)
		stop_worker(freed[i]);

	/* Start a worker for every served database that has none. */
	for (int j = 0; j < nnames; j++)
	{
		int			slotno;

		if (!OidIsValid(oids[j]))
			continue;			/* not created yet: checked again next time */
		slotno = oe_slot_of_database(oids[j], list_nth(names, j));
		if (worker_running(slotno))
			continue;
		/* Restart a failing worker at most once a second. */
		if (!TimestampDifferenceExceeds(last_start[slotno], GetCurrentTimestamp(), 1000))
			continue;
		if (dropping[j])
			continue;
		oe_slot_starting(slotno);
		if (handles[slotno] != NULL)
		{
			pfree(handles[slotno]);
			handles[slotno] = NULL;
		}
		start_worker(slotno, list_nth(names, j));
	}
	oe_unlock_slots();

	list_free(names);
	pfree(raw);
}

/* Entry point of the launcher: reconcile the workers every naptime. */
void
oe_launcher_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("ordered_events launcher");
	ereport(LOG, (errmsg("ordered_events launcher started")));

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		reconcile_workers();

		/* Woken by a reload, or when a worker starts or stops. */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 oe_naptime, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * Database worker
 */

static OeWorkerSlot *my_slot = NULL;
static Oid	version_checked_for = InvalidOid;	/* the extension last checked */

/*
 * Per-worker memory of which units of work failed last time, to log once:
 * what failed, and the phase whose unit it is (-1 for a listing).
 */
typedef struct FailingUnit
{
	char	   *what;
	int			phase;
} FailingUnit;

static List *failing_units = NIL;
static int	running_phase = -1;	/* the phase whose steps run now */

/* Warn once per installation if its SQL objects are of another version. */
static void
check_extension_version(void)
{
	char	   *installed;

	if (version_checked_for == oe_relations()->extension)
		return;
	version_checked_for = oe_relations()->extension;
	installed = oe_extension_version(version_checked_for);
	if (strcmp(installed, OE_LIBRARY_VERSION) != 0)
		ereport(WARNING,
				(errmsg("ordered_events library version %s differs from the extension version %s installed in database \"%s\"",
						OE_LIBRARY_VERSION, installed, my_slot->dbname),
				 errhint("Run ALTER EXTENSION ordered_events UPDATE in that database.")));
}

/*
 * Remember or forget that a unit of work is failing; true if that changed.
 * When none is failing any more, worker_status forgets the last error.
 */
static bool
note_failing(const char *name, bool failing)
{
	ListCell   *lc;
	MemoryContext old;
	FailingUnit *unit;

	foreach(lc, failing_units)
	{
		unit = lfirst(lc);
		if (strcmp(unit->what, name) == 0)
		{
			if (!failing)
			{
				pfree(unit->what);
				pfree(unit);
				failing_units = foreach_delete_current(failing_units, lc);
				/* worker_status shows an error while something fails. */
				if (failing_units == NIL)
					oe_slot_set_error("%s", "");
			}
			return !failing;
		}
	}
	if (!failing)
		return false;
	old = MemoryContextSwitchTo(TopMemoryContext);
	unit = palloc(sizeof(FailingUnit));
	unit->what = pstrdup(name);
	unit->phase = running_phase;
	failing_units = lappend(failing_units, unit);
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * A unit of work failed: abort its transaction, log the error when the
 * unit starts failing, and show it in worker_status.  "what" says what
 * failed, as in "could not <what>"; "unit" names it in worker_status.
 * Call in PG_CATCH.  The names are copied before the error state is
 * flushed: a string made in PG_CATCH lives in ErrorContext, which
 * FlushErrorState() resets (and the LOG line below would reuse).
 */
static void
work_failed(const char *what, const char *unit, MemoryContext cycle_context)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cycle_context);
	what = pstrdup(what);
	unit = pstrdup(unit);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();

	if (note_failing(what, true))
		ereport(LOG,
				(errmsg("ordered_events could not %s: %s", what, edata->message),
				 edata->hint ? errhint("%s", edata->hint) :
				 errhint("The worker retries every cycle; see ordered_events.worker_status.")));
	oe_slot_set_error("%s: %s", unit, edata->message);
	FreeErrorData(edata);
}

/* The memory context that was current when a unit of work began. */
static MemoryContext work_caller_context = NULL;

/*
 * Start a unit of work: a transaction that holds the extension lock first,
 * so that DROP EXTENSION waits for it or it for the drop, never both.
 * Returns false, in a transaction, if the extension is not installed.
 */
static bool
begin_work(void)
{
	work_caller_context = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	return oe_lock_extension();
}

/*
 * Commit a unit of work begun by begin_work(), and go back to the caller's
 * memory context (a commit leaves TopMemoryContext current, where what the
 * cycle allocates next would stay for good).
 */
static void
end_work(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(work_caller_context);
}

/*
 * Run a unit of work in a transaction of its own (begin_work()): "work",
 * if the extension is installed; an error is the unit's (work_failed()),
 * "what" and "unit" as there.  Returns false after an error, when what
 * "work" left in its argument does not count.  *installed (if not NULL)
 * tells whether the extension is installed; after an error, true: the
 * unit failed, not the installation.
 */
static bool
run_unit(const char *what, const char *unit, void (*work) (void *arg), void *arg,
		 MemoryContext cycle_context, bool *installed)
{
	volatile bool ok = true;
	volatile bool found = true;

	PG_TRY();
	{
		found = begin_work();
		if (found)
			work(arg);
		end_work();
		note_failing(what, false);
	}
	PG_CATCH();
	{
		work_failed(what, unit, cycle_context);
		ok = false;
		found = true;
	}
	PG_END_TRY();
	if (installed != NULL)
		*installed = found;
	return ok;
}

/* What a cycle's steps added up. */
typedef struct CycleTotals
{
	int64		released;
	int64		deleted;		/* events compaction deleted */
} CycleTotals;

static OePlan lock_stream_plan = {
	"SELECT FROM ordered_events.stream_def WHERE stream_id = $1 "
	"FOR NO KEY UPDATE SKIP LOCKED",
	1, {INT4OID}
};

/*
 * Take a stream's release lock (its stream_def row, see release.c) without
 * waiting.  False if another transaction holds it, a release() or a
 * skip_gap() by hand or a subscribe() in an open transaction, say, or if
 * the stream is gone: the worker leaves the stream to the next cycle
 * rather than wait.  The release step or compaction that follows takes the
 * lock again, and has it at once.
 */
static bool
lock_stream_nowait(const OeStream *stream)
{
	Datum		id = Int32GetDatum(stream->stream_id);
	OeInternalScope scope;
	bool		locked;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&lock_stream_plan, &id, NULL, SPI_OK_SELECT);
	locked = SPI_processed > 0;
	oe_internal_end(&scope);
	return locked;
}

/* What a release step of a stream is called in the log ("could not <what>"). */
static char *
release_what(const void *unit)
{
	return psprintf("release stream \"%s\"", (const char *) unit);
}

/* What release_work() leaves for release_step(). */
typedef struct ReleaseWork
{
	const char *name;
	int64		released;
	bool		full;			/* a whole batch: the stream may have more */
} ReleaseWork;

static void
release_work(void *arg)
{
	ReleaseWork *w = arg;
	OeStream	stream;

	if (oe_lookup_stream(w->name, &stream) && lock_stream_nowait(&stream))
	{
		w->released = oe_release_stream(&stream);
		w->full = w->released > 0 && w->released >= stream.max_release_batch;
	}
}

/*
 * One release step for one stream (unit: its name), by run_unit().  Another
 * transaction holding the stream's lock leaves it to the next cycle.
 * Returns true if the step released a whole batch: the stream may have
 * more.
 */
static bool
release_step(void *unit, CycleTotals *totals, MemoryContext cycle_context)
{
	ReleaseWork w = {unit, 0, false};
	TimestampTz started = GetCurrentTimestamp();

	oe_slot_set_current(unit, NULL);
	if (!run_unit(release_what(unit), psprintf("stream %s", (const char *) unit),
				  release_work, &w, cycle_context, NULL))
		return false;
	if (w.released > 0)
	{
		/* worker_status counts it now, and its consumers apply it now */
		oe_slot_count_step(w.released, 0, started);
		oe_wake_process_workers(MyDatabaseId);
	}
	totals->released += w.released;
	return w.full;
}

/* What a compaction batch of a stream is called in the log ("could not <what>"). */
static char *
compact_what(const void *unit)
{
	return psprintf("compact stream \"%s\"", (const char *) unit);
}

/* What compact_work() leaves for compact_step(). */
typedef struct CompactWork
{
	const char *name;
	int64		deleted;
	bool		more;
} CompactWork;

static void
compact_work(void *arg)
{
	CompactWork *w = arg;
	OeStream	stream;

	if (oe_lookup_stream(w->name, &stream) && lock_stream_nowait(&stream))
		w->deleted = oe_compact(&stream, &w->more);
}

/*
 * One batch of compaction (counting and retention, see compaction.c) for
 * one stream (unit: its name), by run_unit(), like release_step(), also in
 * leaving a stream whose lock is held to the next cycle.  What it deleted
 * counts towards the next vacuum (vacuum_deleted()).  Returns true if the
 * stream may have more.
 */
static bool
compact_step(void *unit, CycleTotals *totals, MemoryContext cycle_context)
{
	CompactWork w = {unit, 0, false};

	oe_slot_set_current(unit, NULL);
	if (!run_unit(compact_what(unit), psprintf("stream %s", (const char *) unit),
				  compact_work, &w, cycle_context, NULL))
		return false;
	totals->deleted += w.deleted;
	return w.more;
}

static OePlan hook_call_plan = {
	"SELECT call FROM ordered_events.cycle_hooks() WHERE hook OPERATOR(pg_catalog.=) $1",
	1, {TEXTOID}
};

/* What a call of a cycle hook is called in the log ("could not <what>"). */
static char *
hook_what(const void *unit)
{
	return psprintf("run the cycle hook %s", (const char *) unit);
}

/* What hook_work() leaves for hook_step(). */
typedef struct HookWork
{
	const char *hook;
	bool		more;
} HookWork;

static void
hook_work(void *arg)
{
	HookWork   *w = arg;
	Datum		name = CStringGetTextDatum(w->hook);
	OeInternalScope scope;
	bool		isnull;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&hook_call_plan, &name, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		char	   *call = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (SPI_execute(call, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "calling the cycle hook %s failed", w->hook);
		w->more = DatumGetInt64(oe_result(0, 1, &isnull)) > 0 && !isnull;
	}
	oe_internal_end(&scope);
}

/*
 * One call of a cycle hook that another extension registered (unit: the
 * hook's name, see ordered_events.cycle_hooks()), by run_unit(), as the
 * extension's owner.  The hook is looked up again: its extension may have
 * been dropped since the listing.  Returns true if the hook did something
 * (its result is positive): it may have more, which the next cycle calls
 * for at once.
 */
static bool
hook_step(void *unit, CycleTotals *totals, MemoryContext cycle_context)
{
	HookWork	w = {unit, false};

	return run_unit(hook_what(unit), unit, hook_work, &w, cycle_context, NULL) && w.more;
}

/* Whether a commit set the latch since it was last reset; does not wait. */
static bool
latch_is_set(void)
{
	return (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 0,
					  PG_WAIT_EXTENSION) & WL_LATCH_SET) != 0;
}

/* A handler consumer's partition with events to apply. */
typedef struct ConsumerPartition
{
	char	   *consumer;
	int32		partition;
} ConsumerPartition;

/* What consumers_work() leaves for list_consumers_with_work(). */
typedef struct ListWork
{
	const char *query;			/* for list_names() */
	MemoryContext cycle_context;
	List	   *units;
} ListWork;

static void
consumers_work(void *arg)
{
	ListWork   *w = arg;
	OeInternalScope scope;

	oe_internal_begin(&scope, oe_relations()->owner);
	if (SPI_execute("SELECT consumer, partition FROM ordered_events.consumers_with_work()",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "listing the consumers with work failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(w->cycle_context);
		ConsumerPartition *cp = palloc(sizeof(ConsumerPartition));
		bool		isnull;

		cp->consumer = TextDatumGetCString(oe_result(i, 1, &isnull));
		cp->partition = DatumGetInt32(oe_result(i, 2, &isnull));
		w->units = lappend(w->units, cp);
		MemoryContextSwitchTo(old);
	}
	oe_internal_end(&scope);
}

/*
 * The handler consumers' partitions with events to apply (see
 * consumers_with_work() in src/sql/handlers.sql), in cycle_context, as
 * ConsumerPartitions.  False if the extension is not installed.
 */
static bool
list_consumers_with_work(MemoryContext cycle_context, List **partitions)
{
	ListWork	w = {NULL, cycle_context, NIL};
	bool		installed;

	if (!run_unit("list the consumers with work", "listing consumers", consumers_work, &w,
				  cycle_context, &installed))
		w.units = NIL;
	*partitions = w.units;
	return installed;
}

static void
names_work(void *arg)
{
	ListWork   *w = arg;

	check_extension_version();
	w->units = oe_stream_names(w->query, w->cycle_context);
}

/*
 * The names a query lists (streams or cycle hooks, see src/sql/), in
 * cycle_context; false if the extension is not installed.  An error is
 * recorded like a unit's, "unit" naming the listing in worker_status.
 */
static bool
list_names(const char *query, const char *what, const char *unit,
		   MemoryContext cycle_context, List **names)
{
	ListWork	w = {query, cycle_context, NIL};
	bool		installed;

	if (!run_unit(what, unit, names_work, &w, cycle_context, &installed))
		w.units = NIL;
	*names = w.units;
	return installed;
}

static bool
list_streams_with_work(MemoryContext cycle_context, List **streams)
{
	return list_names("SELECT stream FROM ordered_events.streams_with_work()",
					  "list the streams with work", "listing streams", cycle_context, streams);
}

static bool
list_streams_to_compact(MemoryContext cycle_context, List **streams)
{
	return list_names("SELECT stream FROM ordered_events.streams_to_compact()",
					  "list the streams to compact", "listing streams", cycle_context, streams);
}

static bool
list_cycle_hooks(MemoryContext cycle_context, List **hooks)
{
	return list_names("SELECT hook FROM ordered_events.cycle_hooks()",
					  "list the cycle hooks", "listing cycle hooks", cycle_context, hooks);
}

/*
 * A phase of the cycle: its units of work, listed in a transaction of
 * their own (false if the extension is not installed), and one step of a
 * unit, in a transaction of its own (true if the unit may have more).
 */
typedef struct WorkerPhase
{
	const char *state;			/* worker_status state while it runs */
	bool		(*list_units) (MemoryContext cycle_context, List **units);
	bool		(*run_step) (void *unit, CycleTotals *totals, MemoryContext cycle_context);
	char	   *(*describe) (const void *unit);	/* "what" of a unit's failure */
	bool		one_round;		/* a unit with more waits for the next cycle */
} WorkerPhase;

/*
 * Release first (the processing workers are started after it, see
 * run_cycle()); then count and delete; last, the hooks of other extensions
 * (a router's combine step polls its shards once a cycle).
 */
static const WorkerPhase phases[] = {
	{"releasing", list_streams_with_work, release_step, release_what, false},
	{"compacting", list_streams_to_compact, compact_step, compact_what, false},
	{"combining", list_cycle_hooks, hook_step, hook_what, true},
};

/*
 * Run a phase over its units: a step of each, then more rounds of one step
 * each for the units that may have more, until none is left or a commit
 * sets the latch (new work may wait elsewhere: the next cycle looks
 * first).  A one_round phase leaves its units with more to the next cycle.
 * Returns true if some unit may have more work right away.
 */
static bool
run_phase(const WorkerPhase *phase, List *units, CycleTotals *totals,
		  MemoryContext cycle_context)
{
	while (units != NIL)
	{
		List	   *busy = NIL;
		ListCell   *lc;

		foreach(lc, units)
		{
			CHECK_FOR_INTERRUPTS();
			if (phase->run_step(lfirst(lc), totals, cycle_context))
				busy = lappend(busy, lfirst(lc));
		}
		units = busy;
		if (units != NIL && (phase->one_round || latch_is_set()))
			return true;
	}
	return false;
}

/*
 * Forget the failures of a phase's units that its listing no longer names
 * (a stream or consumer dropped, a hook whose extension was dropped, a
 * unit with nothing left to do): no step of theirs will succeed to clear
 * them, and worker_status would show their error for good.
 */
static void
forget_vanished_units(int phase, List *units)
{
	List	   *vanished = NIL;
	ListCell   *lc;

	foreach(lc, failing_units)
	{
		FailingUnit *failing = lfirst(lc);
		bool		listed = false;
		ListCell   *uc;

		/* a failed listing names nothing: forget nothing after it */
		if (failing->phase == -1)
			return;
		if (failing->phase != phase)
			continue;
		foreach(uc, units)
			listed = listed || strcmp(phases[phase].describe(lfirst(uc)), failing->what) == 0;
		if (!listed)
			vanished = lappend(vanished, pstrdup(failing->what));
	}
	foreach(lc, vanished)
		(void) note_failing(lfirst(lc), false);
}

/*
 * Processing workers, as their database's release worker sees them
 */

/* Release-worker-local: the handle of the worker of each processing slot, and its claim. */
static BackgroundWorkerHandle *proc_handles[OE_MAX_PROCESS_WORKERS];
static uint32 proc_generations[OE_MAX_PROCESS_WORKERS];

/*
 * Whether partitions waited for a processing worker yet (logged once per
 * release worker; worker_status shows it after each such cycle), and
 * whether the last registration failed (warned once until one succeeds).
 */
static bool processing_limited = false;
static bool processing_start_failed = false;

/*
 * Free the processing slots of this database whose worker will not start:
 * its registration is gone (the postmaster could not fork it, or it failed
 * before it took the slot), or, for a slot that an earlier release worker
 * claimed, it has not started for OE_PROCESS_START_MS.
 */
static void
reap_process_slots(void)
{
	int			slotnos[OE_MAX_PROCESS_WORKERS];
	uint32		generations[OE_MAX_PROCESS_WORKERS];
	pid_t		pids[OE_MAX_PROCESS_WORKERS];
	TimestampTz launched[OE_MAX_PROCESS_WORKERS];
	int			n = oe_process_slots_of(MyDatabaseId, slotnos, generations, pids, launched);
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < n; i++)
	{
		int			slotno = slotnos[i];
		bool		ours = proc_handles[slotno] != NULL &&
			proc_generations[slotno] == generations[i];
		pid_t		pid;

		if (pids[i] != 0)
			continue;
		if (ours ? GetBackgroundWorkerPid(proc_handles[slotno], &pid) == BGWH_STOPPED :
			TimestampDifferenceExceeds(launched[i], now, OE_PROCESS_START_MS))
			oe_free_process_slot(slotno, generations[i]);
	}
}

/*
 * Register the processing worker of a claimed slot; false (the slot freed)
 * if the postmaster has no room for it.
 */
static bool
register_process_worker(int slotno, uint32 generation, const ConsumerPartition *cp)
{
	BackgroundWorker worker;
	MemoryContext old;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "ordered_events", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "oe_process_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "ordered_events processing %s/%d in %s",
			 cp->consumer, cp->partition, my_slot->dbname);
	strlcpy(worker.bgw_type, "ordered_events processing", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &generation, sizeof(generation));
	/* its exit wakes this worker, which may start the next one waiting */
	worker.bgw_notify_pid = MyProcPid;

	if (proc_handles[slotno] != NULL)
	{
		pfree(proc_handles[slotno]);
		proc_handles[slotno] = NULL;
	}
	/* the handle outlives the cycle */
	old = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &proc_handles[slotno]);
	MemoryContextSwitchTo(old);
	if (!registered)
	{
		proc_handles[slotno] = NULL;
		oe_free_process_slot(slotno, generation);
		if (!processing_start_failed)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start an ordered_events processing worker for consumer \"%s\" in database \"%s\"",
							cp->consumer, my_slot->dbname),
					 errhint("Raise max_worker_processes: the launcher, every served database and up to ordered_events.max_processing_workers processing workers need one each.")));
		processing_start_failed = true;
		return false;
	}
	proc_generations[slotno] = generation;
	return true;
}

/*
 * Make sure a processing worker runs for every handler consumer partition
 * with events to apply, the one waiting longest first, within
 * max_processing_workers.  Never waits for a worker.  Returns how many
 * partitions wait for a free processing worker; the first time some do,
 * says so in the log (once per release worker).  For each, the processing worker idle longest (if
 * any) is asked to exit and make way.
 */
static int
start_processing_workers(MemoryContext cycle_context)
{
	List	   *units;
	ListCell   *lc;
	int			waiting = 0;
	bool		failed = false;

	reap_process_slots();
	if (!list_consumers_with_work(cycle_context, &units))
		return 0;
	foreach(lc, units)
	{
		ConsumerPartition *cp = lfirst(lc);
		uint32		generation;
		int			slotno;

		if (oe_process_slot_running(MyDatabaseId, cp->consumer, cp->partition))
			continue;
		if (failed)
		{
			waiting++;
			continue;
		}
		slotno = oe_claim_process_slot(MyDatabaseId, my_slot->dbname, cp->consumer,
									   cp->partition, oe_max_processing_workers,
									   &generation);
		if (slotno < 0)
			waiting++;
		else if (!register_process_worker(slotno, generation, cp))
		{
			failed = true;		/* no room: the next cycle tries again */
			waiting++;
		}
	}
	if (!failed)
		processing_start_failed = false;
	/* Idle processing workers make way; their exits wake this worker. */
	for (int i = 0; i < waiting && !failed; i++)
		if (!oe_stop_idle_process_worker())
			break;
	if (waiting > 0 && !processing_limited && !failed)
		ereport(LOG,
				(errmsg("ordered_events: %d handler consumer partitions of database \"%s\" wait for a processing worker",
						waiting, my_slot->dbname),
				 errdetail("ordered_events.max_processing_workers (%d) are busy.",
						   oe_max_processing_workers),
				 errhint("Raise ordered_events.max_processing_workers (and max_worker_processes) to process more partitions at once.")));
	processing_limited = processing_limited || waiting > 0;
	return waiting;
}

/*
 * Vacuum
 */

/* Events this worker's compactions deleted since its last vacuum. */
static int64 deleted_since_vacuum = 0;

/* The rows a table holds, as its last vacuum or analyze counted; 0 if none did. */
static double
table_rows(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	double		rows = 0;

	if (HeapTupleIsValid(tuple))
	{
		rows = Max(((Form_pg_class) GETSTRUCT(tuple))->reltuples, 0);
		ReleaseSysCache(tuple);
	}
	return rows;
}

/*
 * VACUUM event_store and lane_release_log, the tables retention deletes
 * from, once this worker's compactions deleted ordered_events.vacuum_after
 * events since its last vacuum, plus OE_VACUUM_SCALE_FACTOR of the rows
 * event_store holds; never with vacuum_after = 0.  Called between units of
 * work, in no transaction: vacuum() commits the transaction that looked
 * the tables up, vacuums each table in a transaction of its own (as a
 * VACUUM command does: not FULL, SKIP_LOCKED, so that a table autovacuum
 * or a VACUUM by hand is vacuuming right now is left to it, and with
 * TRUNCATE false), and leaves a transaction open, which is committed
 * here.  The worker's table statistics are sent first, so that its
 * deletes are not counted as dead rows after the vacuum removed them.  Its waits check for
 * interrupts, so that DROP DATABASE and a fast shutdown terminate it as
 * any unit of work; its cost is throttled by vacuum_cost_delay, as a
 * VACUUM command's (0 by default).  An error is recorded as a unit's
 * (work_failed()), under "vacuum", and the next cycle tries again.
 */
static void
vacuum_deleted(MemoryContext cycle_context)
{
	static const char *what = "vacuum the tables of ordered_events";
	static MemoryContext vacuum_context = NULL;
	MemoryContext saved_portal_context = PortalContext;
	volatile bool vacuumed = false;

	if (oe_vacuum_after <= 0)
		deleted_since_vacuum = 0;	/* vacuum_after = 0 counts nothing */
	if (oe_vacuum_after <= 0 || deleted_since_vacuum < oe_vacuum_after)
		return;
	pgstat_report_stat(true);
	if (vacuum_context == NULL)
		vacuum_context = AllocSetContextCreate(TopMemoryContext, "ordered_events vacuum",
											   ALLOCSET_DEFAULT_SIZES);
	/* a phase of its own for note_failing(): not a listing's failure */
	running_phase = lengthof(phases);
	PG_TRY();
	{
		bool		installed = begin_work();

		if (installed &&
			deleted_since_vacuum >= oe_vacuum_after +
			OE_VACUUM_SCALE_FACTOR * table_rows(oe_relations()->event))
		{
			const OeRelations *rels = oe_relations();
			VacuumParams params;
			List	   *tables;

			/*
			 * vacuum() keeps what must outlive its transactions in a child
			 * of PortalContext, which a background worker has not: ours,
			 * reset after each vacuum, also after an error.
			 */
			MemoryContextSwitchTo(vacuum_context);
			PortalContext = vacuum_context;
			tables = list_make2(makeVacuumRelation(NULL, rels->event, NIL),
								makeVacuumRelation(NULL, rels->lane_release_log, NIL));
			memset(&params, 0, sizeof(params));
			params.options = VACOPT_VACUUM | VACOPT_PROCESS_TOAST | VACOPT_SKIP_LOCKED;
			params.freeze_min_age = -1;
			params.freeze_table_age = -1;
			params.multixact_freeze_min_age = -1;
			params.multixact_freeze_table_age = -1;
			params.is_wraparound = false;
			params.log_min_duration = -1;
			params.index_cleanup = VACOPTVALUE_UNSPECIFIED;
			/*
			 * No truncation: its ACCESS EXCLUSIVE lock would make writers
			 * wait and cancel a standby's queries, this often; the next
			 * events reuse the pages (autovacuum still truncates).
			 */
			params.truncate = VACOPTVALUE_DISABLED;
			params.nworkers = -1;	/* no parallel workers, as autovacuum */

			oe_slot_set_state("vacuuming");
			oe_slot_set_current(NULL, NULL);
			pgstat_report_activity(STATE_RUNNING,
								   "VACUUM ordered_events.event_store, ordered_events.lane_release_log");
			/* pops begin_work()'s snapshot and commits its transaction */
			vacuum(tables, &params, NULL, true);
			vacuumed = true;
			CommitTransactionCommand();
		}
		else
			end_work();
		MemoryContextSwitchTo(cycle_context);
		if (vacuumed || !installed)
			deleted_since_vacuum = 0;
		note_failing(what, false);
	}
	PG_CATCH();
	{
		PortalContext = saved_portal_context;
		work_failed(what, "vacuum", cycle_context);
	}
	PG_END_TRY();
	running_phase = -1;
	PortalContext = saved_portal_context;
	MemoryContextReset(vacuum_context);
}

/*
 * One cycle: every phase in turn, each even when a commit cut the one
 * before short, and the processing workers started after releasing; then
 * a vacuum if compaction deleted enough (vacuum_deleted()).  Returns true
 * if some unit may have more work right away.
 */
static bool
run_cycle(MemoryContext cycle_context)
{
	CycleTotals totals = {0};
	TimestampTz started = GetCurrentTimestamp();
	bool		more = false;
	int			waiting = 0;

	for (int i = 0; i < lengthof(phases); i++)
	{
		List	   *units;

		if (!phases[i].list_units(cycle_context, &units) && i == 0)
		{
			oe_slot_set_state("waiting for extension");
			return false;
		}
		forget_vanished_units(i, units);
		oe_slot_set_state(phases[i].state);
		oe_slot_set_current(NULL, NULL);
		running_phase = i;
		if (run_phase(&phases[i], units, &totals, cycle_context))
			more = true;
		running_phase = -1;
		if (i == 0)
		{
			oe_slot_set_state("starting processing");
			waiting = start_processing_workers(cycle_context);
		}
	}
	deleted_since_vacuum += totals.deleted;
	vacuum_deleted(cycle_context);
	oe_slot_count_cycle(started);
	oe_slot_set_state(waiting > 0 ? "processing workers busy" : "idle");
	return more;
}

/*
 * The database worker's own settings, as a session's SET makes them: a
 * reload does not undo them, and a nested level (a handler call, see
 * handler.c) may change them and get them back, which it cannot do over
 * PGC_S_OVERRIDE.
 */
static void
set_worker_session(void)
{
	SetConfigOption("lock_timeout", OE_WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_SESSION);
	/* Runs as superuser: no object of public or pg_temp may be chosen. */
	SetConfigOption("search_path", oe_safe_search_path, PGC_SUSET, PGC_S_SESSION);

	/*
	 * Every unit of work reads the latest committed state after its locks,
	 * whatever the database's or the server's default: a compaction under
	 * an older snapshot would miss a new subscription (see the banner of
	 * compaction.c), and REPEATABLE READ fails with
	 * 40001 where a row changed since the snapshot.
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_SESSION);

	/*
	 * Its queries are short index lookups; JIT would only load LLVM into
	 * the worker (figure 7 saw 60 MB once a plan's cost estimate crossed
	 * jit_above_cost).
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_SESSION);
}

/*
 * Entry point of a database worker (slot number in arg): release cycles
 * until terminated, sleeping on its latch between them.
 */
void
oe_database_worker_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	MemoryContext cycle_context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	my_slot = oe_claim_slot(slotno);
	if (my_slot == NULL)
		proc_exit(0);

	BackgroundWorkerInitializeConnection(my_slot->dbname, NULL, 0);
	pgstat_report_appname("ordered_events worker");

	set_worker_session();
	ereport(LOG,
			(errmsg("ordered_events worker started for database \"%s\"", my_slot->dbname)));

	cycle_context = AllocSetContextCreate(TopMemoryContext, "ordered_events cycle",
										  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		MemoryContext old;
		bool		more;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* ordered_events.enabled = off: the launcher stops this worker. */
		old = MemoryContextSwitchTo(cycle_context);
		more = run_cycle(cycle_context);
		MemoryContextSwitchTo(old);
		MemoryContextReset(cycle_context);
		pgstat_report_activity(STATE_IDLE, NULL);
		/* Table statistics, so that autovacuum sees what the cycle deleted. */
		pgstat_report_stat(!more);

		if (!more)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 oe_naptime, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/*
 * Processing worker
 */

/* What a processing step of a consumer partition is called in the log ("could not <what>"). */
static char *
process_what(const void *unit)
{
	const ConsumerPartition *cp = unit;

	return psprintf("process consumer \"%s\" partition %d", cp->consumer, cp->partition);
}

static OePlan consumer_exists_plan = {
	"SELECT FROM ordered_events.consumer_def "
	"WHERE consumer OPERATOR(pg_catalog.=) $1 AND handler IS NOT NULL "
	"AND partitions OPERATOR(pg_catalog.>) $2",
	2, {TEXTOID, INT4OID}
};

/* What process_work() leaves for process_step(). */
typedef struct ProcessWork
{
	const ConsumerPartition *cp;
	int64		applied;
	bool		gone;			/* the consumer, its handler or the partition */
} ProcessWork;

static void
process_work(void *arg)
{
	ProcessWork *w = arg;
	Datum		values[2] = {CStringGetTextDatum(w->cp->consumer),
	Int32GetDatum(w->cp->partition)};
	OeInternalScope scope;

	check_extension_version();
	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan(&consumer_exists_plan, values, NULL, SPI_OK_SELECT);
	w->gone = SPI_processed == 0;
	oe_internal_end(&scope);
	if (!w->gone && oe_consumer_lock_nowait(w->cp->consumer, w->cp->partition))
		w->applied = oe_process_partition(w->cp->consumer, w->cp->partition,
										  OE_PROCESS_BATCH);
}

/*
 * One processing step of the worker's consumer partition, by run_unit().
 * A partition that another transaction holds (a process() by hand) is
 * left for later without waiting.  Returns false after an error; in
 * *applied what the step applied, in *gone whether the consumer partition
 * (or the extension) is gone.
 */
static bool
process_step(const ConsumerPartition *cp, MemoryContext cycle_context, int64 *applied,
			 bool *gone)
{
	ProcessWork w = {cp, 0, false};
	TimestampTz started = GetCurrentTimestamp();
	bool		installed;
	bool		ok;

	oe_slot_set_state("processing");
	ok = run_unit(process_what(cp), psprintf("consumer %s", cp->consumer),
				  process_work, &w, cycle_context, &installed);
	/* a rollback takes back what the step published while it ran */
	oe_slot_count_step(0, ok ? w.applied : 0, started);
	*applied = ok ? w.applied : 0;
	*gone = !installed || (ok && w.gone);
	return ok;
}

/*
 * Entry point of a processing worker (processing slot number in arg, its
 * claim in bgw_extra): processing steps of one consumer partition while
 * there is work, then sleeps, until idle for OE_PROCESS_IDLE_MS or no
 * longer wanted.
 */
void
oe_process_worker_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	uint32		generation;
	MemoryContext cycle_context;
	ConsumerPartition cp;
	TimestampTz idle_since = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	memcpy(&generation, MyBgworkerEntry->bgw_extra, sizeof(generation));
	my_slot = oe_take_process_slot(slotno, generation);
	if (my_slot == NULL)
		proc_exit(0);
	cp.consumer = pstrdup(my_slot->current_consumer);
	cp.partition = my_slot->partition;

	BackgroundWorkerInitializeConnectionByOid(my_slot->dboid, InvalidOid, 0);
	pgstat_report_appname("ordered_events processing");
	set_worker_session();
	ereport(DEBUG1,
			(errmsg("ordered_events processing worker started for consumer \"%s\" partition %d in database \"%s\"",
					cp.consumer, cp.partition, my_slot->dbname)));

	cycle_context = AllocSetContextCreate(TopMemoryContext, "ordered_events step",
										  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		MemoryContext old;
		int64		applied;
		bool		gone;
		bool		ok;
		long		timeout = oe_naptime;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!oe_enabled || !oe_database_served(MyDatabaseId))
			break;

		old = MemoryContextSwitchTo(cycle_context);
		ok = process_step(&cp, cycle_context, &applied, &gone);
		MemoryContextSwitchTo(old);
		MemoryContextReset(cycle_context);
		pgstat_report_activity(STATE_IDLE, NULL);
		pgstat_report_stat(applied == 0);
		if (gone)
			break;
		if (applied > 0)
		{
			if (idle_since != 0 && !oe_slot_set_idle_since(0))
				break;
			idle_since = 0;
			continue;
		}

		/* A failing step is retried every naptime, and is not idleness. */
		if (ok)
		{
			TimestampTz now = GetCurrentTimestamp();
			long		idle_ms;

			if (idle_since == 0)
				idle_since = now;
			/* asked to make way for a partition waiting for a worker */
			if (!oe_slot_set_idle_since(idle_since))
				break;
			idle_ms = (long) ((now - idle_since) / 1000);
			if (idle_ms >= OE_PROCESS_IDLE_MS)
				break;
			timeout = Min(timeout, OE_PROCESS_IDLE_MS - idle_ms);
		}
		oe_slot_set_state("idle");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	ereport(DEBUG1,
			(errmsg("ordered_events processing worker for consumer \"%s\" partition %d in database \"%s\" exits",
					cp.consumer, cp.partition, my_slot->dbname)));
	proc_exit(0);
}
