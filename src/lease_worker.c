/*-------------------------------------------------------------------------
 *
 * lease_worker.c
 *	  receive() inside a transaction block: the receive runs in a
 *	  background worker of its own, in a transaction that commits before
 *	  the rows come back, so that a rollback of the caller's transaction
 *	  cannot take back leases whose events the caller was given (a receive()
 *	  "commits its leases at once, also inside the caller's transaction").
 *
 * As pg_background and parallel query do it: the caller makes a dynamic
 * shared memory segment with the arguments and a message queue, starts a
 * dynamic background worker and reads the queue.  The worker connects to
 * the caller's database as the caller's authenticated user (a role that may
 * log in), takes the caller's current user and security context, runs
 * oe_receive_events() in a READ COMMITTED transaction, commits, and only
 * then sends the rows, then a last message.  An error is sent as an
 * ErrorResponse (pq_redirect_to_shm_mq()) and raised again by the caller.
 *
 * The worker sees what is committed, not what the caller's transaction
 * changed.  It may wait for a lock the caller's transaction holds (an
 * ack() of a batch the worker must deliver again, a subscribe() of the
 * consumer in the same transaction): the lock manager cannot see that the
 * caller waits for the worker, so every deadlock_timeout the caller looks
 * whether the worker waits for it, and if so raises 40P01 and stops the
 * worker.  An error or a cancel of the caller stops the worker too; if it
 * had not committed yet, nothing was leased, else the events come back
 * when their visibility runs out.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "libpq/pqformat.h"
#include "libpq/pqmq.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shm_mq.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

/* The queue from the worker to the caller; longer messages are split. */
#define QUEUE_SIZE	65536

/* The messages of the worker, besides ErrorResponse and NoticeResponse. */
#define MSG_ROW		'D'
#define MSG_DONE	'C'

/* What the caller hands the worker, at the start of the segment. */
typedef struct ReceiveTask
{
	Oid			database;
	Oid			authenticated_user;
	Oid			current_user;
	int			sec_context;
	int32		max_events;
	int32		partition;
	Interval	visibility;
	Interval	wait;
	Size		queue_offset;
	char		consumer[FLEXIBLE_ARRAY_MEMBER];
} ReceiveTask;

PGDLLEXPORT void oe_receive_worker_main(Datum arg);

/*
 * Fail with 40P01 if the worker waits for a lock of this backend: it would
 * wait for ever, for a transaction that waits for it.
 */
static void
check_not_waiting_for_us(BackgroundWorkerHandle *handle)
{
	pid_t		pid;
	ArrayType  *blockers;
	Datum	   *pids;
	int			n;

	if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STARTED)
		return;
	blockers = DatumGetArrayTypeP(DirectFunctionCall1(pg_blocking_pids, Int32GetDatum(pid)));
	deconstruct_array(blockers, INT4OID, 4, true, TYPALIGN_INT, &pids, NULL, &n);
	for (int i = 0; i < n; i++)
		if (DatumGetInt32(pids[i]) == MyProcPid)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
					 errmsg("receive() waits for a lock of the calling transaction"),
					 errdetail("Inside a transaction block receive() runs in a transaction of its own, in process %d, which waits for a lock this transaction holds.",
							   (int) pid),
					 errhint("Call receive() before ack(), nack() or changes of the consumer in the transaction, or outside a transaction block.")));
}

/* Raise again an error or a notice of the worker, at most an ERROR. */
static void
rethrow(StringInfo msg)
{
	ErrorData	edata;

	pq_parse_errornotice(msg, &edata);
	edata.elevel = Min(edata.elevel, ERROR);
	if (edata.context != NULL)
		edata.context = psprintf("%s\nbackground worker of receive()", edata.context);
	else
		edata.context = pstrdup("background worker of receive()");
	ThrowErrorData(&edata);
}

/* Read the worker's messages into "rows" until its last one. */
static void
read_messages(shm_mq_handle *mqh, BackgroundWorkerHandle *handle, Tuplestorestate *rows)
{
	for (;;)
	{
		Size		nbytes;
		void	   *data;
		shm_mq_result res = shm_mq_receive(mqh, &nbytes, &data, true);
		StringInfoData msg;

		if (res == SHM_MQ_WOULD_BLOCK)
		{
			int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									   Max(DeadlockTimeout, 1), PG_WAIT_EXTENSION);

			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			if (rc & WL_TIMEOUT)
				check_not_waiting_for_us(handle);
			continue;
		}
		if (res != SHM_MQ_SUCCESS)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("the background worker of receive() exited before it was done"),
					 errhint("See the server log.")));
		msg.data = data;
		msg.len = (int) nbytes;
		msg.maxlen = (int) nbytes;
		msg.cursor = 0;
		switch (pq_getmsgbyte(&msg))
		{
			case MSG_ROW:
				{
					Size		len = nbytes - 1;
					MinimalTuple tuple = palloc(len);

					HeapTuple	row;

					memcpy(tuple, msg.data + 1, len);
					row = heap_tuple_from_minimal_tuple(tuple);
					tuplestore_puttuple(rows, row);
					heap_freetuple(row);
					pfree(tuple);
					break;
				}
			case 'E':
			case 'N':
				rethrow(&msg);
				break;
			case MSG_DONE:
				return;
			default:
				break;			/* ParameterStatus and the like */
		}
	}
}

/*
 * Run a receive() in a background worker of its own and put its rows into
 * "rows" (receive()'s row type).
 */
void
oe_receive_in_worker(const OeReceiveArgs *args, Tuplestorestate *rows)
{
	Size		name_len = strlen(args->consumer) + 1;
	Size		offset = MAXALIGN(offsetof(ReceiveTask, consumer) + name_len);
	dsm_segment *seg;
	ReceiveTask *task;
	shm_mq	   *mq;
	shm_mq_handle *mqh;
	BackgroundWorker worker = {0};
	BackgroundWorkerHandle *handle;

	if (InSecurityRestrictedOperation())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("receive() cannot start a transaction of its own within a security-restricted operation"),
				 errhint("Call it outside a transaction block.")));

	seg = dsm_create(offset + QUEUE_SIZE, 0);
	task = dsm_segment_address(seg);
	task->database = MyDatabaseId;
	task->authenticated_user = GetAuthenticatedUserId();
	GetUserIdAndSecContext(&task->current_user, &task->sec_context);
	task->max_events = args->max_events;
	task->partition = args->partition;
	task->visibility = args->visibility;
	task->wait = args->wait;
	task->queue_offset = offset;
	memcpy(task->consumer, args->consumer, name_len);
	mq = shm_mq_create((char *) task + offset, QUEUE_SIZE);
	shm_mq_set_receiver(mq, MyProc);

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "ordered_events", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "oe_receive_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "ordered_events receive for PID %d", MyProcPid);
	strlcpy(worker.bgw_type, "ordered_events receive", BGW_MAXLEN);
	worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(seg));
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start a background worker for receive()"),
				 errdetail("Inside a transaction block receive() runs in a transaction of its own, in a background worker."),
				 errhint("Raise max_worker_processes, or call receive() outside a transaction block.")));

	mqh = shm_mq_attach(mq, seg, handle);
	PG_TRY();
	{
		read_messages(mqh, handle, rows);
	}
	PG_CATCH();
	{
		TerminateBackgroundWorker(handle);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dsm_detach(seg);
}

/* Send the rows the receive() made, once it committed, then the last message. */
static void
send_rows(shm_mq_handle *mqh, Tuplestorestate *rows, TupleDesc desc)
{
	TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	char		type = MSG_ROW;
	shm_mq_iovec iov[2];

	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		should_free;
		MinimalTuple tuple = ExecFetchSlotMinimalTuple(slot, &should_free);

		iov[0].data = &type;
		iov[0].len = 1;
		iov[1].data = (const char *) tuple;
		iov[1].len = tuple->t_len;
		if (shm_mq_sendv(mqh, iov, 2, false, true) != SHM_MQ_SUCCESS)
			proc_exit(0);		/* the caller is gone */
		if (should_free)
			pfree(tuple);
	}
	type = MSG_DONE;
	(void) shm_mq_send(mqh, 1, &type, false, true);
}

/* Entry point of a receive() worker (the segment's handle in arg). */
void
oe_receive_worker_main(Datum arg)
{
	dsm_segment *seg;
	ReceiveTask *task;
	shm_mq	   *mq;
	shm_mq_handle *mqh;
	OeReceiveArgs args = {0};
	Tuplestorestate *rows;
	TupleDesc	desc;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	CurrentResourceOwner = ResourceOwnerCreate(NULL, "ordered_events receive");
	seg = dsm_attach(DatumGetUInt32(arg));
	if (seg == NULL)
		proc_exit(0);			/* the caller is gone */
	task = dsm_segment_address(seg);
	mq = (shm_mq *) ((char *) task + task->queue_offset);
	shm_mq_set_sender(mq, MyProc);
	mqh = shm_mq_attach(mq, seg, NULL);
	pq_redirect_to_shm_mq(seg, mqh);

	BackgroundWorkerInitializeConnectionByOid(task->database, task->authenticated_user, 0);
	SetUserIdAndSecContext(task->current_user, task->sec_context);
	pgstat_report_appname("ordered_events receive");
	/* what committed before each statement: see oe_consumer_take() */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_SESSION);
	args.consumer = pstrdup(task->consumer);
	args.max_events = task->max_events;
	args.partition = task->partition;
	args.visibility = task->visibility;
	args.wait = task->wait;
	/* kept past the commit, its files too */
	MemoryContextSwitchTo(TopMemoryContext);
	rows = tuplestore_begin_heap(false, true, work_mem);

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "receive()");
		MemoryContextSwitchTo(TopMemoryContext);
		desc = oe_receive_desc();
		MemoryContextSwitchTo(CurTransactionContext);
		(void) oe_receive_events(&args, rows, desc);
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		/* to the caller, and to the log */
		EmitErrorReport();
		proc_exit(0);
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);
	send_rows(mqh, rows, desc);
	proc_exit(0);
}
