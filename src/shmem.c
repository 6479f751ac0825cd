/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared state of the background workers, the wake-up at commit, and the
 *	  worker_status() view over it.  Every access to a worker slot, by the
 *	  launcher, a database worker or the DROP DATABASE hook, goes through
 *	  the functions here.
 *
 * One slot per served database: the launcher claims it, the database's
 * release worker fills in its pid and latch and its counters.  One slot per
 * processing worker (a fixed array of OE_MAX_PROCESS_WORKERS): the release
 * worker of its database claims it, under a new generation number that it
 * gives the worker it registers; the worker takes the slot only if the
 * generation still matches, and frees it as it exits.  Everything in a
 * slot is protected by the extension's LWLock; a processing worker also
 * adds what it applied to its database's slot, under that lock.
 *
 * Live counters: a processing worker counts the handler calls of its
 * running step in process memory (oe_slot_note_applied(), no lock) and
 * publishes them at most every OE_PUBLISH_MS, so that processed_total moves
 * during a long step; when the step ends, the count it published is
 * replaced by what the step applied if it committed, or dropped if it
 * rolled back.  The rates are over a true window: from the latest sample
 * at least a minute old, or from the worker's start, when the slot keeps
 * the totals as they were (a worker that restarts loses no minute).
 *
 * A transaction that wrote events sets the latch of its database's worker
 * when it commits, so a filled gap is released within milliseconds.  Without
 * shared_preload_libraries there is no shared state: the wake-up does
 * nothing and worker_status() raises an error.
 *
 * The stopped calls (handler.c) are a small array under the same LWLock:
 * a process whose handler call ran past its limit and grace period adds
 * one as it exits (in a before_shmem_exit callback, not in the timeout's
 * signal handler), and the next processing step of that consumer partition,
 * in any backend, reads it and forgets it when its transaction commits.
 * Shared memory lasts as long as the postmaster: a process exit keeps the
 * records, a crash restart (or a server restart) forgets them.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

OeShared   *oe_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* This transaction wrote events: wake the worker at commit. */
static bool events_written = false;

/* In a database or processing worker: its slot. */
static OeWorkerSlot *my_slot = NULL;

/* A processing worker publishes its running step's count at most this often. */
#define OE_PUBLISH_MS		200

/* In a processing worker: handler calls of the running step, and when last published. */
static int64 step_calls = 0;
static TimestampTz step_published_at = 0;

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(OeShared));
	RequestNamedLWLockTranche("ordered_events", 1);
}

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	oe_shared = ShmemInitStruct("ordered_events", sizeof(OeShared), &found);
	if (!found)
	{
		memset(oe_shared, 0, sizeof(OeShared));
		oe_shared->lock = &(GetNamedLWLockTranche("ordered_events"))->lock;
		SpinLockInit(&oe_shared->arrival_lock);
		oe_wait_shmem_init(oe_shared);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Set the latch of the worker serving a database, if it has one. */
static void
wake_worker(Oid dboid)
{
	if (oe_shared == NULL)
		return;
	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_MAX_DATABASES; i++)
	{
		OeWorkerSlot *slot = &oe_shared->slots[i];

		if (slot->in_use && slot->dboid == dboid && slot->latch != NULL)
			SetLatch(slot->latch);
	}
	LWLockRelease(oe_shared->lock);
}

/*
 * Set the latches of the running processing workers of a database: events
 * were released for them to apply.  Cheap: a shared lock over a small array.
 */
void
oe_wake_process_workers(Oid dboid)
{
	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
	{
		OeWorkerSlot *slot = &oe_shared->procs[i];

		if (slot->in_use && slot->dboid == dboid && slot->latch != NULL)
			SetLatch(slot->latch);
	}
	LWLockRelease(oe_shared->lock);
}

/* The slot of the release worker of a database, or NULL.  Call with the slots locked. */
static OeWorkerSlot *
database_slot(Oid dboid)
{
	for (int i = 0; i < OE_MAX_DATABASES; i++)
		if (oe_shared->slots[i].in_use && oe_shared->slots[i].dboid == dboid)
			return &oe_shared->slots[i];
	return NULL;
}

/*
 * Start a slot's rates afresh: a sample of its totals now, the base of
 * its rates until a later one is a minute old.
 */
static void
restart_samples(OeWorkerSlot *slot, TimestampTz now)
{
	slot->samples[0].at = now;
	slot->samples[0].released_total = slot->released_total;
	slot->samples[0].processed_total = slot->processed_total;
	slot->nsamples = 1;
	slot->next_sample = 1 % OE_RATE_SAMPLES;
}

/* Add a sample of a slot's totals if the latest is a second old.  Call with the slots locked. */
static void
take_sample(OeWorkerSlot *s, TimestampTz now)
{
	OeRateSample *sample;

	if (s->nsamples > 0 &&
		now - s->samples[(s->next_sample + OE_RATE_SAMPLES - 1) % OE_RATE_SAMPLES].at <
		USECS_PER_SEC)
		return;
	sample = &s->samples[s->next_sample];
	sample->at = now;
	sample->released_total = s->released_total;
	sample->processed_total = s->processed_total + s->pending_processed;
	s->next_sample = (s->next_sample + 1) % OE_RATE_SAMPLES;
	s->nsamples = Min(s->nsamples + 1, OE_RATE_SAMPLES);
}

/* Transaction callback: wake the worker when a transaction that wrote events commits. */
static void
wake_at_commit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && events_written)
		wake_worker(MyDatabaseId);
	if (oe_xact_ended(event))
		events_written = false;
}

/*
 * Called from _PG_init.  Shared memory only exists when the library is
 * preloaded; the commit callback is harmless without it.
 */
void
oe_shmem_init(void)
{
	if (process_shared_preload_libraries_in_progress)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = shmem_startup;
	}
	RegisterXactCallback(wake_at_commit, NULL);
}

/* Remember that the current transaction wrote events. */
void
oe_note_events_written(void)
{
	events_written = true;
}

/*
 * wake_worker() returns void: the worker looks for work when this
 * transaction commits (redrive(), skip_held()).
 */
PG_FUNCTION_INFO_V1(oe_wake_worker);
Datum
oe_wake_worker(PG_FUNCTION_ARGS)
{
	oe_note_events_written();
	PG_RETURN_VOID();
}

/*
 * At the exit of a database worker: its slot shows no running worker.  A
 * processing worker's slot is freed.
 */
static void
leave_slot(int code, Datum arg)
{
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	if (my_slot->pid == MyProcPid)
	{
		if (my_slot->process)
			memset(my_slot, 0, sizeof(*my_slot));
		else
		{
			my_slot->pid = 0;
			my_slot->latch = NULL;
		}
	}
	LWLockRelease(oe_shared->lock);
}

/*
 * Ask the processing workers of a database to leave (SIGTERM); a slot
 * whose worker has not started yet is freed, and its worker will not take
 * it.  Call with the slots locked exclusively.
 */
static void
stop_process_workers(Oid dboid, bool dropping)
{
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
	{
		OeWorkerSlot *slot = &oe_shared->procs[i];

		if (!slot->in_use || slot->dboid != dboid)
			continue;
		if (slot->pid != 0)
		{
			slot->dropping = slot->dropping || dropping;
			kill(slot->pid, SIGTERM);
		}
		else
			memset(slot, 0, sizeof(*slot));
	}
}

/*
 * The launcher's accessors.  It holds the slots' lock across one
 * reconciliation (oe_lock_slots() ... oe_unlock_slots()), so that the
 * DROP DATABASE hook sees a slot either before or after it.
 */
void
oe_lock_slots(void)
{
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
}

void
oe_unlock_slots(void)
{
	LWLockRelease(oe_shared->lock);
}

/*
 * Free the slots of databases not in oids[0..n-1]; their numbers go into
 * freed[], the count is returned.  Call with the slots locked.
 */
int
oe_free_unserved_slots(const Oid *oids, int n, int *freed)
{
	int			nfreed = 0;

	for (int i = 0; i < OE_MAX_DATABASES; i++)
	{
		OeWorkerSlot *slot = &oe_shared->slots[i];
		bool		wanted = false;

		if (!slot->in_use)
			continue;
		for (int j = 0; j < n; j++)
			wanted |= (oids[j] == slot->dboid);
		if (!wanted)
		{
			stop_process_workers(slot->dboid, false);
			memset(slot, 0, sizeof(*slot));
			freed[nfreed++] = i;
		}
	}
	return nfreed;
}

/*
 * The slot of a served database, claimed for it if it has none.  The
 * caller has freed the slots of unserved databases, so there is a free one.
 * Call with the slots locked.
 */
int
oe_slot_of_database(Oid dboid, const char *dbname)
{
	int			free_slot = -1;
	OeWorkerSlot *slot;

	for (int i = 0; i < OE_MAX_DATABASES; i++)
	{
		if (oe_shared->slots[i].in_use && oe_shared->slots[i].dboid == dboid)
			return i;
		if (!oe_shared->slots[i].in_use && free_slot < 0)
			free_slot = i;
	}
	Assert(free_slot >= 0);
	slot = &oe_shared->slots[free_slot];
	memset(slot, 0, sizeof(*slot));
	slot->in_use = true;
	slot->dboid = dboid;
	strlcpy(slot->dbname, dbname, NAMEDATALEN);
	strlcpy(slot->state, "starting", sizeof(slot->state));
	return free_slot;
}

/*
 * A worker is about to start for the slot: forget a drop of its database
 * that did not happen.  Call with the slots locked.
 */
void
oe_slot_starting(int slotno)
{
	oe_shared->slots[slotno].dropping = false;
}

/*
 * DROP DATABASE of dboid: its worker must leave now and none may start.
 */
void
oe_slots_database_dropping(Oid dboid)
{
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < OE_MAX_DATABASES; i++)
	{
		OeWorkerSlot *slot = &oe_shared->slots[i];

		if (slot->in_use && slot->dboid == dboid)
		{
			slot->dropping = true;
			if (slot->pid != 0)
				kill(slot->pid, SIGTERM);
		}
	}
	stop_process_workers(dboid, true);
	LWLockRelease(oe_shared->lock);
}

/*
 * In a database worker: take over slot "slotno" that the launcher filled
 * in.  Returns NULL if the slot was given up meanwhile (the database is no
 * longer served, or is being dropped); the worker then exits.
 */
OeWorkerSlot *
oe_claim_slot(int slotno)
{
	OeWorkerSlot *slot = &oe_shared->slots[slotno];

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	if (!slot->in_use || slot->dropping)
	{
		LWLockRelease(oe_shared->lock);
		return NULL;
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->started_at = GetCurrentTimestamp();
	restart_samples(slot, slot->started_at);
	LWLockRelease(oe_shared->lock);
	my_slot = slot;
	before_shmem_exit(leave_slot, (Datum) 0);
	return slot;
}

/*
 * In a release worker: true if a processing worker of a consumer partition
 * of its database runs or is starting.
 */
bool
oe_process_slot_running(Oid dboid, const char *consumer, int32 partition)
{
	bool		running = false;

	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS && !running; i++)
	{
		OeWorkerSlot *slot = &oe_shared->procs[i];

		running = slot->in_use && slot->dboid == dboid && slot->partition == partition &&
			strcmp(slot->current_consumer, consumer) == 0;
	}
	LWLockRelease(oe_shared->lock);
	return running;
}

/*
 * In a release worker: claim a processing slot for a consumer partition of
 * its database, unless "limit" slots are in use server-wide (then -1).
 * Returns the slot's number, and in *generation the claim to give the
 * worker.
 */
int
oe_claim_process_slot(Oid dboid, const char *dbname, const char *consumer,
					  int32 partition, int limit, uint32 *generation)
{
	int			used = 0;
	int			free_slot = -1;
	OeWorkerSlot *slot;

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
	{
		if (oe_shared->procs[i].in_use)
			used++;
		else if (free_slot < 0)
			free_slot = i;
	}
	if (used >= limit || free_slot < 0)
	{
		LWLockRelease(oe_shared->lock);
		return -1;
	}
	slot = &oe_shared->procs[free_slot];
	memset(slot, 0, sizeof(*slot));
	slot->in_use = true;
	slot->process = true;
	slot->generation = ++oe_shared->next_generation;
	slot->dboid = dboid;
	strlcpy(slot->dbname, dbname, NAMEDATALEN);
	strlcpy(slot->current_consumer, consumer, NAMEDATALEN);
	slot->partition = partition;
	strlcpy(slot->state, "starting", sizeof(slot->state));
	slot->launched_at = GetCurrentTimestamp();
	*generation = slot->generation;
	LWLockRelease(oe_shared->lock);
	return free_slot;
}

/* Free a processing slot whose worker did not start (if the claim still holds). */
void
oe_free_process_slot(int slotno, uint32 generation)
{
	OeWorkerSlot *slot = &oe_shared->procs[slotno];

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	if (slot->in_use && slot->generation == generation && slot->pid == 0)
		memset(slot, 0, sizeof(*slot));
	LWLockRelease(oe_shared->lock);
}

/*
 * The processing slots of a database whose worker has not started: their
 * numbers, claims and registration times; returns how many.
 */
int
oe_process_slots_of(Oid dboid, int *slotnos, uint32 *generations, pid_t *pids,
					TimestampTz *launched)
{
	int			n = 0;

	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
	{
		OeWorkerSlot *slot = &oe_shared->procs[i];

		if (!slot->in_use || slot->dboid != dboid)
			continue;
		slotnos[n] = i;
		generations[n] = slot->generation;
		pids[n] = slot->pid;
		launched[n] = slot->launched_at;
		n++;
	}
	LWLockRelease(oe_shared->lock);
	return n;
}

/*
 * In a processing worker: take slot "slotno" under the claim "generation".
 * NULL if the slot was freed or claimed again meanwhile, or its database is
 * being dropped: the worker then exits.
 */
OeWorkerSlot *
oe_take_process_slot(int slotno, uint32 generation)
{
	OeWorkerSlot *slot = &oe_shared->procs[slotno];

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	if (!slot->in_use || slot->generation != generation || slot->dropping || slot->pid != 0)
	{
		LWLockRelease(oe_shared->lock);
		return NULL;
	}
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->started_at = GetCurrentTimestamp();
	restart_samples(slot, slot->started_at);
	LWLockRelease(oe_shared->lock);
	my_slot = slot;
	before_shmem_exit(leave_slot, (Datum) 0);
	return slot;
}

/*
 * In a processing worker: since when it has had nothing to apply (0: it
 * has work).  Returns false if it was asked to leave its place: it exits.
 */
bool
oe_slot_set_idle_since(TimestampTz idle_since)
{
	bool		stay;

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	my_slot->idle_since = idle_since;
	stay = !my_slot->stop_requested;
	LWLockRelease(oe_shared->lock);
	return stay;
}

/*
 * In a release worker whose partitions wait for a processing worker: ask
 * the processing worker idle longest, of any database, to exit and leave
 * its place.  False if none is idle.
 */
bool
oe_stop_idle_process_worker(void)
{
	OeWorkerSlot *victim = NULL;

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
	{
		OeWorkerSlot *slot = &oe_shared->procs[i];

		if (slot->in_use && slot->pid != 0 && slot->idle_since != 0 &&
			!slot->stop_requested &&
			(victim == NULL || slot->idle_since < victim->idle_since))
			victim = slot;
	}
	if (victim != NULL)
	{
		victim->stop_requested = true;
		SetLatch(victim->latch);
	}
	LWLockRelease(oe_shared->lock);
	return victim != NULL;
}

/*
 * In a processing worker: whether its database is still served (its
 * release worker's slot is claimed, and no DROP DATABASE is under way).
 */
bool
oe_database_served(Oid dboid)
{
	OeWorkerSlot *slot;
	bool		served;

	LWLockAcquire(oe_shared->lock, LW_SHARED);
	slot = database_slot(dboid);
	served = slot != NULL && !slot->dropping && !my_slot->dropping;
	LWLockRelease(oe_shared->lock);
	return served;
}

/* In a database worker: what it is doing, for worker_status and ps. */
void
oe_slot_set_state(const char *state)
{
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	strlcpy(my_slot->state, state, sizeof(my_slot->state));
	LWLockRelease(oe_shared->lock);
	pgstat_report_activity(STATE_RUNNING, state);
}

/* In a database worker: its latest error, for worker_status ("": none). */
void
oe_slot_set_error(const char *fmt,...)
{
	va_list		args;

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	va_start(args, fmt);
	vsnprintf(my_slot->last_error, OE_ERROR_LEN, fmt, args);
	va_end(args);
	LWLockRelease(oe_shared->lock);
}

/* In a database worker: the stream it releases or the consumer it processes. */
void
oe_slot_set_current(const char *stream, const char *consumer)
{
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	strlcpy(my_slot->current_stream, stream ? stream : "", NAMEDATALEN);
	strlcpy(my_slot->current_consumer, consumer ? consumer : "", NAMEDATALEN);
	LWLockRelease(oe_shared->lock);
}

/*
 * In a release worker: a cycle that began at "started" ended.  The totals
 * are sampled at most once a second, for the rates over the last minute.
 */
void
oe_slot_count_cycle(TimestampTz started)
{
	TimestampTz now = GetCurrentTimestamp();
	OeWorkerSlot *s = my_slot;

	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	s->cycles++;
	s->last_cycle_usecs = now - started;
	s->last_cycle_at = now;
	take_sample(s, now);
	LWLockRelease(oe_shared->lock);
}

/*
 * A step that began at "started" ended: in a release worker, a release
 * step that committed, having released so many events; in a processing
 * worker, a processing step, having applied so many events if it
 * committed (0 after a rollback).  A processing step is a processing
 * worker's cycle; what it applied counts for its database's release row
 * too, which sums up the database's processing workers, past and present.
 * The count the step published while it ran goes.
 */
void
oe_slot_count_step(int64 released, int64 processed, TimestampTz started)
{
	TimestampTz now = GetCurrentTimestamp();
	OeWorkerSlot *s = my_slot;

	step_calls = 0;
	step_published_at = now;
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	s->released_total += released;
	s->processed_total += processed;
	s->pending_processed = 0;
	if (s->process)
	{
		OeWorkerSlot *db = database_slot(s->dboid);

		if (db != NULL)
			db->processed_total += processed;
		s->cycles++;
		s->last_cycle_usecs = now - started;
		s->last_cycle_at = now;
	}
	take_sample(s, now);
	LWLockRelease(oe_shared->lock);
}

/*
 * A handler call of the running processing step finished (handler.c), n
 * events: counted in process memory, published for worker_status at most
 * every OE_PUBLISH_MS, so that a long step shows its progress.  A no-op
 * outside a processing worker.
 */
void
oe_slot_note_applied(int64 n)
{
	TimestampTz now;

	if (my_slot == NULL || !my_slot->process)
		return;
	step_calls += n;
	now = GetCurrentTimestamp();
	if (now - step_published_at < OE_PUBLISH_MS * INT64CONST(1000))
		return;
	step_published_at = now;
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	my_slot->pending_processed = step_calls;
	my_slot->last_cycle_at = now;	/* its last activity */
	take_sample(my_slot, now);
	LWLockRelease(oe_shared->lock);
}

/*
 * Record a handler call whose process is being stopped.  If every entry is
 * taken, the oldest record goes (its event would be called once more).
 * Returns false without shared memory.  Call in normal context (an exit
 * callback), never in a signal handler.
 */
bool
oe_add_stopped_call(const OeStoppedCall *call)
{
	OeStoppedCall *victim = NULL;
	OeStoppedCall forgotten = {0};

	if (oe_shared == NULL)
		return false;
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < OE_STOPPED_CALLS; i++)
	{
		OeStoppedCall *entry = &oe_shared->stopped[i];

		if (!entry->in_use)
		{
			victim = entry;
			break;
		}
		if (victim == NULL || entry->stopped_at < victim->stopped_at)
			victim = entry;
	}
	if (victim->in_use)
		forgotten = *victim;
	*victim = *call;
	victim->in_use = true;
	LWLockRelease(oe_shared->lock);
	if (forgotten.in_use)
		ereport(LOG,
				(errmsg("ordered_events forgot the stopped handler call of seq " INT64_FORMAT " of stream %d for consumer %d: more than %d are recorded",
						forgotten.seq, forgotten.stream_id, forgotten.consumer_id,
						OE_STOPPED_CALLS),
				 errdetail("The handler will be called for that event again.")));
	return true;
}

/*
 * The stopped calls recorded for a consumer partition, at most max_calls
 * of them, copied into calls[]; returns how many.
 */
int
oe_stopped_calls_of(Oid dboid, int32 consumer_id, int32 partition,
					OeStoppedCall *calls, int max_calls)
{
	int			n = 0;

	if (oe_shared == NULL)
		return 0;
	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_STOPPED_CALLS && n < max_calls; i++)
	{
		OeStoppedCall *entry = &oe_shared->stopped[i];

		if (entry->in_use && entry->dboid == dboid &&
			entry->consumer_id == consumer_id && entry->partition == partition)
			calls[n++] = *entry;
	}
	LWLockRelease(oe_shared->lock);
	return n;
}

/* Forget a stopped call, once its dead letter committed. */
void
oe_forget_stopped_call(const OeStoppedCall *call)
{
	if (oe_shared == NULL)
		return;
	LWLockAcquire(oe_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < OE_STOPPED_CALLS; i++)
	{
		OeStoppedCall *entry = &oe_shared->stopped[i];

		if (entry->in_use && entry->dboid == call->dboid &&
			entry->consumer_id == call->consumer_id &&
			entry->partition == call->partition &&
			entry->stream_id == call->stream_id && entry->seq == call->seq &&
			entry->arrival == call->arrival)
			entry->in_use = false;
	}
	LWLockRelease(oe_shared->lock);
}

/* An interval of so many microseconds. */
static Interval *
microseconds_interval(int64 usecs)
{
	Interval   *interval = palloc0(sizeof(Interval));

	interval->time = usecs;
	return interval;
}

/*
 * A slot's events per second over the last minute: from the latest sample
 * at least a minute old, or the oldest (the worker's start, until the ring
 * wraps), to now.  Call with the slots locked.
 */
static void
slot_rates(const OeWorkerSlot *s, TimestampTz now, double *released, double *processed)
{
	OeRateSample base = {s->started_at, s->released_total,
	s->processed_total + s->pending_processed};
	double		seconds;

	for (int i = 0; i < s->nsamples; i++)
	{
		/* oldest first */
		const OeRateSample *sample =
			&s->samples[(s->next_sample + OE_RATE_SAMPLES - s->nsamples + i) % OE_RATE_SAMPLES];

		if (i == 0 || sample->at <= now - 60 * USECS_PER_SEC)
			base = *sample;
	}
	seconds = (double) (now - base.at) / USECS_PER_SEC;
	*released = seconds > 0 ? (s->released_total - base.released_total) / seconds : 0;
	*processed = seconds > 0 ?
		(s->processed_total + s->pending_processed - base.processed_total) / seconds : 0;
}

/* worker_loaded() returns boolean: whether the library is preloaded. */
PG_FUNCTION_INFO_V1(oe_worker_loaded);
Datum
oe_worker_loaded(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(oe_shared != NULL);
}

/* One row of worker_status() for a slot (kind 'release' or 'process'). */
static void
put_slot_row(ReturnSetInfo *rsinfo, const OeWorkerSlot *slot, TimestampTz now)
{
	Datum		values[16];
	bool		nulls[16] = {0};
	double		released_rate;
	double		processed_rate;
	bool		stopped = (slot->pid == 0);

	values[0] = CStringGetTextDatum(slot->dbname);
	values[1] = Int32GetDatum(slot->pid);
	nulls[1] = stopped;
	values[2] = CStringGetTextDatum(!stopped ? slot->state :
									slot->process ? "starting" : "stopped");
	values[3] = TimestampTzGetDatum(slot->started_at);
	nulls[3] = (slot->started_at == 0);
	values[4] = TimestampTzGetDatum(slot->last_cycle_at);
	nulls[4] = (slot->last_cycle_at == 0);
	values[5] = Int64GetDatum(slot->cycles);
	values[6] = Int64GetDatum(slot->released_total);
	values[7] = CStringGetTextDatum(slot->last_error);
	nulls[7] = (slot->last_error[0] == '\0');
	values[8] = Int64GetDatum(slot->processed_total + slot->pending_processed);
	values[9] = CStringGetTextDatum(slot->current_stream);
	nulls[9] = (stopped || slot->current_stream[0] == '\0');
	values[10] = CStringGetTextDatum(slot->current_consumer);
	nulls[10] = ((stopped && !slot->process) || slot->current_consumer[0] == '\0');
	values[11] = IntervalPGetDatum(microseconds_interval(slot->last_cycle_usecs));
	nulls[11] = (slot->last_cycle_at == 0);
	slot_rates(slot, now, &released_rate, &processed_rate);
	values[12] = Float8GetDatum(released_rate);
	values[13] = Float8GetDatum(processed_rate);
	nulls[12] = nulls[13] = stopped;
	values[14] = CStringGetTextDatum(slot->process ? "process" : "release");
	values[15] = Int32GetDatum(slot->partition);
	nulls[15] = !slot->process;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * worker_status() returns one row per worker: each served database's
 * release worker, then the processing workers.  Columns: database, pid,
 * state, started_at, last_cycle_at, cycles, released_total, last_error,
 * processed_total, current_stream, current_consumer, last_cycle_duration,
 * released_per_second, processed_per_second, kind, partition.
 */
PG_FUNCTION_INFO_V1(oe_worker_status);
Datum
oe_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();

	if (oe_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the ordered_events background worker is not loaded"),
				 errhint("Add ordered_events to shared_preload_libraries in postgresql.conf and restart the server.")));

	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(oe_shared->lock, LW_SHARED);
	for (int i = 0; i < OE_MAX_DATABASES; i++)
		if (oe_shared->slots[i].in_use)
			put_slot_row(rsinfo, &oe_shared->slots[i], now);
	for (int i = 0; i < OE_MAX_PROCESS_WORKERS; i++)
		if (oe_shared->procs[i].in_use)
			put_slot_row(rsinfo, &oe_shared->procs[i], now);
	LWLockRelease(oe_shared->lock);
	return (Datum) 0;
}
