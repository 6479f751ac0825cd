/*-------------------------------------------------------------------------
 *
 * ordered_events.h
 *	  Internal interface shared by the modules of the ordered_events extension.
 *
 * Every internal symbol starts with "oe_".  The SQL objects live in the fixed
 * schema "ordered_events"; see the files of src/sql/ for the tables.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ORDERED_EVENTS_H
#define ORDERED_EVENTS_H

#include "postgres.h"

#include "access/genam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "nodes/pg_list.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/acl.h"
#include "utils/jsonb.h"
#include "utils/snapshot.h"
#include "utils/tuplestore.h"

#define OE_SCHEMA			"ordered_events"
#define OE_MAX_KEY_BYTES	1024

/* Column numbers of ordered_events.event_store; catalog.c checks them at load. */
#define Anum_oe_event_stream_id		1
#define Anum_oe_event_lane			2
#define Anum_oe_event_last_event	3
#define Anum_oe_event_seq			4
#define Anum_oe_event_event_ts		5
#define Anum_oe_event_alignment_ts	6
#define Anum_oe_event_received_at	7
#define Anum_oe_event_arrival		8
#define Anum_oe_event_key			9
#define Anum_oe_event_payload		10
#define Natts_oe_event				10

/* Column numbers of ordered_events.lane_release_log. */
#define Anum_oe_log_stream_id		1
#define Anum_oe_log_lane			2
#define Anum_oe_log_seq_start		3
#define Anum_oe_log_seq_end			4
#define Anum_oe_log_released_at		5
#define Anum_oe_log_delivery		6
#define Natts_oe_log				6

/* ordered_events.progress: the columns read directly, the first eight checked */
#define Anum_oe_progress_stream_id		1
#define Anum_oe_progress_lane			2
#define Anum_oe_progress_range_end		3
#define Anum_oe_progress_last_event_seq	8
#define Nchecked_oe_progress			8

/* Column numbers of ordered_events.unprocessed. */
#define Anum_oe_unprocessed_stream		1
#define Anum_oe_unprocessed_seq			2
#define Anum_oe_unprocessed_key			3
#define Anum_oe_unprocessed_payload		4
#define Anum_oe_unprocessed_event_ts	5
#define Anum_oe_unprocessed_reason		6
#define Anum_oe_unprocessed_detail		7
#define Anum_oe_unprocessed_received_at 8
#define Anum_oe_unprocessed_consumer	9
#define Natts_oe_unprocessed			9

/* Columns of ordered_events.handler_state and handler_result (handler.c). */
#define Anum_oe_state_consumer_id		1
#define Anum_oe_state_key				2
#define Anum_oe_state_state				3
#define Anum_oe_state_last_stream_id	4
#define Anum_oe_state_last_seq			5
#define Anum_oe_state_processed_count	6
#define Anum_oe_state_error_count		7
#define Anum_oe_state_updated_at		8
#define Anum_oe_state_attempts			9
#define Anum_oe_state_next_attempt_at	10
#define Anum_oe_state_held_since		11
#define Anum_oe_state_last_error		12
#define Anum_oe_state_parked			13
#define Natts_oe_state					13

#define Anum_oe_result_consumer_id		1
#define Anum_oe_result_position			2
#define Anum_oe_result_stream_id		3
#define Anum_oe_result_seq				4
#define Anum_oe_result_key				5
#define Anum_oe_result_result			6
#define Anum_oe_result_produced_at		7
#define Natts_oe_result					7

#define Anum_oe_parked_consumer_id		1
#define Anum_oe_parked_key				2
#define Anum_oe_parked_position			3
#define Anum_oe_parked_stream_id		4
#define Anum_oe_parked_seq				5
#define Anum_oe_parked_arrival			6
#define Anum_oe_parked_payload			7
#define Anum_oe_parked_event_ts			8
#define Anum_oe_parked_alignment_ts		9
#define Anum_oe_parked_last_event		10
#define Anum_oe_parked_received_at		11
#define Anum_oe_parked_dead_letter		12
#define Anum_oe_parked_parked_at		13
#define Natts_oe_parked					13

/* The labels of ordered_events.outcome, in declaration order. */
typedef enum OeOutcome
{
	OE_ACCEPTED,
	OE_DUPLICATE,
	OE_BEFORE_INITIAL_SEQUENCE,
	OE_SEQUENCE_ID_OUTSIDE_VALID_RANGE,
	OE_AFTER_LAST_EVENT,
	OE_GAP_SKIPPED,
	OE_EXCEPTION_THROWN,
	OE_NUM_OUTCOMES
} OeOutcome;

/* gap_policy of a stream */
typedef enum OeGapPolicy
{
	OE_GAP_WAIT,
	OE_GAP_TIMEOUT,
	OE_GAP_FENCE
} OeGapPolicy;

/* A stream's definition, as cached by catalog.c. */
typedef struct OeStream
{
	char		name[NAMEDATALEN];	/* hash key; names are at most 63 bytes */
	int32		stream_id;
	bool		per_key;		/* sequencing 'per_key': a lane per key */
	int64		initial_sequence;
	int32		max_release_batch;
	OeGapPolicy gap_policy;
	int64		skipped_through;	/* highest skipped seq, PG_INT64_MIN if none */
	bool		retains_events; /* a retention may have deleted released events */
	bool		sharded;		/* a global stream whose range a router sets */
	Oid			fence_seq;		/* sequence append() takes seqs from */
	Oid			owner;			/* the role that created it */
	Acl		   *acl;			/* what its owner granted; read from the
								 * cache entry only (see catalog.c) */
	Oid			priv_role;		/* the role priv_mask was worked out for */
	AclMode		priv_mask;		/* ... its privileges on the stream */
} OeStream;

/* The privileges of a stream, as the bits of stream_def.acl (privileges.c). */
#define OE_PRIV_WRITE		ACL_INSERT
#define OE_PRIV_READ		ACL_SELECT

/* The OIDs of the extension's objects in the current database. */
typedef struct OeRelations
{
	Oid			extension;		/* pg_extension row */
	Oid			owner;			/* owner of the tables: internal queries run as it */
	Oid			event;
	Oid			event_pkey;
	Oid			event_last_event_idx;
	Oid			key_arrivals;
	Oid			unprocessed;
	Oid			stream_def;
	Oid			gap_skips;
	Oid			lane_release_log;
	Oid			lane_release_log_delivery_key;
	Oid			progress;
	Oid			progress_pkey;
	Oid			arrival_seq;
	Oid			outcome_type;
	Oid			handler_state;
	Oid			handler_state_pkey;
	Oid			handler_result;
	Oid			result_position_seq;
	Oid			handler_parked;
	Oid			parked_position_seq;
	Oid			event_type;		/* composite ordered_events.event */
	Oid			step_type;		/* composite ordered_events.step */
} OeRelations;

/* An event as a producer hands it over (ingest() or a row of inbox). */
typedef struct OeEvent
{
	int64		seq;
	text	   *key;
	void	   *payload;		/* jsonb as given, maybe packed or toasted: it
								 * is only stored; NULL for SQL NULL */
	TimestampTz event_ts;
	TimestampTz alignment_ts;
	bool		last_event;
} OeEvent;

/* A run of skipped seqs, inclusive. */
typedef struct OeSkipRun
{
	int64		start;
	int64		end;
	const char *reason;			/* set for runs this step adds */
} OeSkipRun;

/*
 * A run of stored backlog blocks (backlog.c): every seq first..last had
 * arrived when a release step stored them, so none can arrive any more.
 */
typedef struct OeIsland
{
	int64		first;
	int64		last;
} OeIsland;

/* The released events of a stream for one partition count (delivery.c). */
typedef struct OeTotals
{
	int32		partitions;
	int64	   *count;			/* per partition */
	int128	   *lag;			/* per partition: summed lags, microseconds */
} OeTotals;

/* One release step of a stream, as delivery.c records it. */
typedef struct OeStep
{
	const OeStream *stream;
	int			ntotals;
	OeTotals   *totals;			/* one per partition count in release_totals,
								 * NULL until the step releases an event */
	bool		partitioned;	/* a count above 1: events need their partition */
	List	   *runs;			/* OeRelease of each lane the step moved */
	bool		fed_handlers;	/* a consumer with a handler got events */
} OeStep;

/*
 * One lane being released: the one sequence of a global stream (lane ''),
 * or one key of a per-key stream (lane = the key).  See lane.c.
 */
typedef struct OeLane
{
	const OeStream *stream;
	OeStep	   *step;			/* the release step, NULL when only looking */
	text	   *lane;
	int64		start;			/* range_end when loaded */
	int64		range_end;		/* first seq not released */
	TimestampTz max_event_ts;	/* largest event_ts released */
	bool		max_event_ts_valid;
	int64		seen_gap;		/* gap a step saw before, or PG_INT64_MIN */
	int64		seen_gap_end;	/* ... seen_gap..seen_gap_end was missing */
	bool		seen_gap_expired;	/* ... for longer than gap_timeout */
	TimestampTz seen_gap_at;	/* ... since then (when seen_gap is set) */
	bool		has_fence;		/* fence_seq and fence_xid are set */
	int64		fence_seq;
	FullTransactionId fence_xid;
	bool		completed;		/* a step passed the lane's last event before */
	List	   *runs;			/* OeSkipRuns ending at or after range_end, by start */
	List	   *new_runs;		/* OeSkipRuns this step adds */
	bool		has_backlog;	/* progress.backlog_end is set (backlog.c) */
	int64		backlog_end;	/* ... the first seq its summary did not see */
	List	   *islands;		/* OeIslands from range_end on, by first */
	struct OeKeysPassed *passed_keys;	/* what the step forgets of them
										 * (backlog_keys.c), NULL until then */

	/* what the step did */
	int64		released;
	int64		last_released;	/* the highest seq released, when released > 0 */
	int64		skipped;		/* seqs skip_gap() declared lost */
	bool		gap;			/* stopped at a missing seq, a later one arrived */
	int64		gap_end;		/* ... and range_end..gap_end is missing */
	bool		fence_recorded; /* read a new fence */
	bool		last_event;		/* passed the lane's last event */
	bool		more;			/* stopped by the limit at a releasable event */
	TimestampTz first_alignment;	/* alignment_ts of the first event released */
	bool		hash_valid;		/* lane_hash holds for every event of the lane */
	uint64		lane_hash;		/* a per-key lane: its key's partition hash */
} OeLane;

/*
 * A step of the engine (step.c) under way: the stream's definition as read
 * under its release lock, what it releases, and the NOTIFY to queue.
 */
typedef struct OeStepRun
{
	OeStream	stream;
	OeStep		step;
	char	   *notify;			/* the payload, NULL for none */
} OeStepRun;

/* What a kind of step does inside the engine's skeleton. */
typedef struct OeStepKind
{
	bool		settle;			/* settle the skipped runs first (gap_policy.c) */
	bool		skip_sharded;	/* a sharded stream: do nothing, return 0 */
	bool		must_exist;		/* a stream dropped meanwhile is an error */
	int64		(*body) (OeStepRun *run, void *arg);
} OeStepKind;

/* A consumer, as read() and process() see it (consumer_read.c). */
typedef struct OeConsumer
{
	const char *name;
	int32		consumer_id;
	int32		partitions;
	int32		partition;		/* the one being read */
	const char *handler;		/* signature, NULL without a handler */
	Oid			handler_fn;		/* the function of that signature now, if any */
	Oid			owner;			/* its owner, InvalidOid for none (0.2's
								 * consumers without a handler); a handler
								 * runs as this role */
	Oid			handler_owner;	/* who owned the handler at creation */
	text	   *output_stream;	/* derived events go there; NULL: results */
	bool		align_processing;	/* alignment 'processing' */
	int			handler_timeout_ms; /* its own handler_timeout, -1: none */
	bool		on_error_hold;	/* on_error 'hold', else 'dead_letter' */
	int32		max_attempts;	/* failed calls of an event before on_error */
	int64		retry_delay_us; /* before the first retry, doubled at each */
	Oid			reader;			/* who reads its streams ('read'): the owner,
								 * or the caller of a consumer without one */
	bool		locked;			/* this transaction holds its partition's lock */
	bool		lease;			/* delivery 'lease': read by receive() (lease.c) */
} OeConsumer;

/*
 * An event a consumer takes, handed to an OeEventSink.  Its pointers are
 * valid during the call only.
 */
typedef struct OeReadEvent
{
	int32		stream_id;
	text	   *stream;
	int64		seq;
	text	   *key;
	Datum		payload;		/* jsonb, detoasted */
	bool		payload_null;
	bool		last_event;
	TimestampTz event_ts;
	TimestampTz alignment_ts;
	TimestampTz stabilized_ts;
	TimestampTz received_at;
	TimestampTz released_at;
	int64		arrival;
	int64		delivery;		/* its release log row's delivery number */
} OeReadEvent;

typedef void (*OeEventSink) (const OeReadEvent *event, void *arg);

/*
 * A prepared statement of the extension's own, kept for the backend.
 * cursor_options CURSOR_OPT_GENERIC_PLAN: for a hot query whose best plan
 * does not depend on its parameters, which the plan cache would otherwise
 * plan again at every execution (a fifth of read() was planning).  Not for
 * a query with a LIMIT parameter: its generic plan may sort a whole table.
 */
typedef struct OePlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[16];
	int			cursor_options;
	SPIPlanPtr	plan;
} OePlan;

/* One served database, in shared memory (see shmem.c). */
#define OE_MAX_DATABASES	64
/* Processing workers at most, server-wide (max_processing_workers' ceiling). */
#define OE_MAX_PROCESS_WORKERS	64
#define OE_ERROR_LEN		256

/* A worker's totals at one moment, for its rates over the last minute. */
typedef struct OeRateSample
{
	TimestampTz at;
	int64		released_total;
	int64		processed_total;
} OeRateSample;

#define OE_RATE_SAMPLES		64	/* at most one a second */

/*
 * A worker's slot: a database's release worker (in OeShared.slots, claimed
 * by the launcher) or a processing worker of one consumer partition (in
 * OeShared.procs, claimed by its database's release worker).
 */
typedef struct OeWorkerSlot
{
	bool		in_use;			/* claimed by the launcher or a release worker */
	bool		dropping;		/* DROP DATABASE asked the worker to leave */
	bool		process;		/* a processing worker's slot */
	uint32		generation;		/* a processing slot's claim, told its worker */
	int32		partition;		/* a processing worker's partition */
	TimestampTz launched_at;	/* a processing slot's registration */
	int64		pending_processed;	/* applied by the running step, not committed */
	TimestampTz idle_since;		/* a processing worker with nothing to apply */
	bool		stop_requested; /* ... asked to leave its place to another */
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	pid_t		pid;			/* 0 when no worker runs */
	Latch	   *latch;
	char		state[32];
	TimestampTz started_at;
	TimestampTz last_cycle_at;
	int64		cycles;
	int64		released_total;
	int64		processed_total;
	int64		last_cycle_usecs;	/* how long the last cycle took */
	char		current_stream[NAMEDATALEN];	/* '' when none */
	char		current_consumer[NAMEDATALEN];	/* '' when none */
	OeRateSample samples[OE_RATE_SAMPLES];	/* a ring, by time */
	int			nsamples;
	int			next_sample;
	char		last_error[OE_ERROR_LEN];
} OeWorkerSlot;

/* A block of arrival numbers shared by the sessions of a database (arrival.c). */
#define OE_ARRIVAL_BLOCK	1024	/* numbers per value of arrival_seq */
#define OE_ARRIVAL_BLOCKS	64		/* databases with a shared block */

typedef struct OeArrivalBlock
{
	Oid			dboid;
	Oid			seq;			/* its arrival_seq */
	int64		next;			/* the next number to take */
	int64		limit;			/* the first number beyond the block */
} OeArrivalBlock;

/*
 * A handler call that did not return within its limit and a grace period,
 * so its process was stopped (handler.c): the next processing step of its
 * consumer partition makes the event a dead letter instead of calling the
 * handler again.  Kept in shared memory, so a process exit keeps it; a
 * crash restart of the server forgets it.
 */
#define OE_STOPPED_CALLS	64

typedef struct OeStoppedCall
{
	bool		in_use;
	Oid			dboid;
	int32		consumer_id;
	int32		partition;
	int32		stream_id;
	int64		seq;
	int64		arrival;		/* with seq: the event, also of a per-key stream */
	int32		timeout_ms;		/* the call's limit */
	int32		waited_ms;		/* how long it ran before it was stopped */
	bool		worker;			/* a worker was stopped, not a session */
	TimestampTz stopped_at;
} OeStoppedCall;

/* Waiting reads (wait.c): a generation and a condition variable per channel. */
#define OE_WAIT_CHANNELS	64	/* a consumer waits on one of these, by hash */
#define OE_MAX_WAIT_SECS	3600	/* the longest wait of read() and receive() */
/* The longest consumer name whose channel "ordered_events.<consumer>" fits in a name. */
#define OE_MAX_CHANNEL_CONSUMER	(NAMEDATALEN - 1 - 15)

typedef struct OeWaitChannel
{
	pg_atomic_uint64 generation;	/* commits of transactions that released */
	ConditionVariable released;
} OeWaitChannel;

typedef struct OeShared
{
	LWLock	   *lock;
	OeWorkerSlot slots[OE_MAX_DATABASES];
	OeWorkerSlot procs[OE_MAX_PROCESS_WORKERS];
	uint32		next_generation;	/* under lock */
	slock_t		arrival_lock;	/* protects the arrival blocks */
	int			arrival_victim; /* the entry a new database takes next */
	OeArrivalBlock arrival[OE_ARRIVAL_BLOCKS];
	OeStoppedCall stopped[OE_STOPPED_CALLS];	/* under lock */
	OeWaitChannel wait[OE_WAIT_CHANNELS];
} OeShared;

/* GUCs (ordered_events.c) */
extern char *oe_databases;
extern int	oe_naptime;
extern bool oe_enabled;
extern int	oe_handler_timeout;
extern int	oe_max_processing_workers;
extern int	oe_vacuum_after;

/* The caller's identity while an internal query runs (internal_query.c). */
typedef struct OeInternalScope
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} OeInternalScope;

/* arrival.c */
extern int64 oe_next_arrival(void);

/* catalog.c */
extern void oe_catalog_init(void);
extern bool oe_lock_extension(void);
extern char *oe_extension_version(Oid extension);
extern const OeRelations *oe_relations(void);
extern bool oe_lookup_stream(const char *name, OeStream *stream);
extern OeStream oe_stream_or_error(text *name);
extern List *oe_all_streams(void);
extern List *oe_stream_names(const char *query, MemoryContext result_context);
extern AclMode oe_stream_privileges(const OeStream *stream, Oid role);
extern Datum oe_outcome_datum(OeOutcome outcome);
extern const char *oe_outcome_name(OeOutcome outcome);

/* privileges.c */
extern const char *oe_role_name(Oid role);
extern bool oe_acts_as_owner(Oid role, Oid owner);
extern void oe_check_owner(Oid role, Oid owner, const char *kind, const char *name);
extern bool oe_stream_privilege(const OeStream *stream, Oid role, AclMode mode);
extern void oe_check_stream_privilege(const OeStream *stream, Oid role, AclMode mode);

/* internal_query.c */
extern const char *const oe_safe_search_path;
extern void oe_internal_begin(OeInternalScope *scope, Oid owner);
extern void oe_internal_end(OeInternalScope *scope);
extern void oe_run_plan(OePlan *plan, Datum *values, const char *nulls, int expected);
extern void oe_run_plan_latest(OePlan *plan, Datum *values, const char *nulls);
extern void oe_run_plan_snapshot(OePlan *plan, Datum *values, const char *nulls,
								 Snapshot snapshot);
extern Datum oe_result(uint64 row, int col, bool *isnull);
extern Datum oe_array(Datum *elems, bool *nulls, int n, Oid elemtype);

/* table_insert.c */
extern bool oe_insert_unique(Oid relid, Datum *values, bool *isnull,
							 bool (*keep) (void *arg), void *arg);
extern void oe_insert_row(Oid relid, Datum *values, bool *isnull);
extern void oe_update_row(Oid relid, ItemPointer tid, Datum *values, bool *isnull);

/* dead_letter.c */
extern void oe_dead_letter(const char *stream, int64 seq, text *key, void *payload,
						   TimestampTz event_ts, OeOutcome reason, const char *detail,
						   TimestampTz received_at, const char *consumer);
extern void oe_dead_letter_row(const char *stream, uint64 row, OeOutcome reason,
							   const char *detail);

/* wait.c */
extern void oe_wait_init(void);
extern void oe_wait_shmem_init(OeShared *shared);
extern void oe_note_released(int32 consumer_id);
extern TimestampTz oe_wait_deadline(const Interval *wait, const char *function);
extern uint64 oe_release_generation(int32 consumer_id);
extern bool oe_wait_for_release(int32 consumer_id, uint64 seen, TimestampTz deadline);

/* consumer_read.c */
extern int32 oe_consumer_args(FunctionCallInfo fcinfo, const char *takes);
extern void oe_consumer_lookup(Datum name, int32 partition, OeConsumer *consumer);
extern void oe_check_partition(const OeConsumer *consumer);
extern bool oe_consumer_lock_nowait(const char *consumer, int32 partition);
extern void oe_consumer_lock(OeConsumer *consumer);
extern int32 oe_consumer_take(const OeConsumer *consumer, int32 max_events, bool consume,
							  OeEventSink sink, void *arg);

/* lease.c: the arguments of a receive() */
typedef struct OeReceiveArgs
{
	const char *consumer;
	int32		max_events;
	int32		partition;
	Interval	visibility;		/* how long the leases last */
	Interval	wait;
} OeReceiveArgs;

extern TupleDesc oe_receive_desc(void);
extern int32 oe_receive_events(const OeReceiveArgs *args, Tuplestorestate *rows,
							   TupleDesc desc);

/* lease_worker.c */
extern void oe_receive_in_worker(const OeReceiveArgs *args, Tuplestorestate *rows);

/* handler.c */
extern void oe_handler_init(void);
extern int64 oe_process_partition(const char *consumer, int32 partition, int32 max_events);
extern void oe_check_not_in_step(int32 consumer_id);

/* delivery.c */
extern void oe_step_begin(OeStep *step, const OeStream *stream);
extern void oe_step_count_event(OeLane *lane, TupleTableSlot *slot);
extern void oe_step_add_run(const OeLane *lane);
extern void oe_step_finish(OeStep *step);
extern int128 oe_lag(TimestampTz event_ts, TimestampTz alignment_ts);
extern char *oe_int128_out(int128 value);

/* args.c */
extern void oe_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name);
extern OeStream oe_stream_arg(FunctionCallInfo fcinfo, int argno);

/* keys.c */
extern void oe_check_key(const OeStream *stream, text *key, const int64 *seq);
extern void oe_check_key_of(const char *stream, text *key, const int64 *seq);
extern text *oe_lane_of(const OeStream *stream, text *key);
extern uint64 oe_key_hash(text *key);
extern struct HTAB *oe_key_table(const char *name, long nelem, Size entrysize,
								  MemoryContext cxt);

/* The partition of a key's hash among "partitions" (key_partition()). */
static inline int32
oe_partition_of(uint64 hash, int32 partitions)
{
	return (int32) (hash % (uint64) partitions);
}

/* lane.c */
/*
 * A scan of a lane's events in seq order, from a seq on; with "jump", a
 * stored island comes as one run instead of its events (backlog.c).
 */
typedef struct OeLaneScan
{
	Relation	heap;
	Relation	index;
	TupleTableSlot *slot;		/* the event of the last run, if not an island */
	IndexScanDesc scan;
	const OeLane *lane;
	ListCell   *next_island;	/* NULL without "jump" */
} OeLaneScan;

extern void oe_lane_scan_begin(OeLaneScan *ls, const OeLane *lane, Snapshot snapshot,
							   int64 from, bool jump);
extern bool oe_lane_scan_next(OeLaneScan *ls, int64 *first, int64 *last,
							  const OeIsland **island);
extern void oe_lane_scan_end(OeLaneScan *ls);
extern void oe_load_lane(OeLane *lane, const OeStream *stream, text *lane_key, OeStep *step);
extern void oe_walk_lane(OeLane *lane, int64 limit, Snapshot snapshot);
extern void oe_walk_lane_through(OeLane *lane, int64 through, Snapshot snapshot);
extern void oe_add_runs(OeLane *lane);
extern void oe_save_lane(OeLane *lane);
extern void oe_unskipped_parts(OeLane *lane, int64 from, int64 to,
							   void (*emit) (OeLane *lane, int64 start, int64 end, void *arg),
							   void *arg);
extern void oe_lane_holes(OeLane *lane, Snapshot snapshot, int64 through, bool past_last,
						  void (*emit) (OeLane *lane, int64 start, int64 end, void *arg),
						  void *arg);

/* gaps.c */
extern List *oe_waiting_lanes(const OeStream *stream, Snapshot snapshot);

/* backlog.c */
extern void oe_backlog_load(OeLane *lane);
extern bool oe_backlog_update(OeLane *lane, Snapshot snapshot);
extern void oe_backlog_forget(const OeLane *lane);

/* backlog_keys.c */
typedef struct OeKeyRuns OeKeyRuns;
typedef struct OeKeysPassed OeKeysPassed;
extern OeKeyRuns *oe_keys_begin(const OeLane *lane);
extern void oe_keys_note(OeKeyRuns *runs, TupleTableSlot *slot, int64 seq);
extern void oe_keys_end_block(OeKeyRuns *runs, int64 block, bool stored);
extern void oe_keys_store(const OeLane *lane, OeKeyRuns *runs);
extern void oe_keys_released(OeLane *lane, TupleTableSlot *slot, int64 seq);
/* What a step's range passed of a lane's stored blocks (backlog.c). */
typedef struct OeKeysPass
{
	int64		from_block;		/* the first block wholly beyond the range before */
	int64		kept_block;		/* ... and after the step */
	int64		tail_last;		/* the last seq of the blocks it forgets */
	int64		kept_first;		/* the seqs of the kept block (none if first > last) */
	int64		kept_last;
} OeKeysPass;
extern void oe_keys_pass(OeLane *lane, Snapshot snapshot, const OeKeysPass *pass);
extern void oe_keys_forget(const OeLane *lane);

/* gap_policy.c */
extern bool oe_gap_expired(TimestampTz first_seen, Interval *gap_timeout, TimestampTz now);
extern int64 oe_policy_skip_end(OeLane *lane, int64 gap_end, Snapshot snapshot,
								const char **reason);
extern bool oe_stored_xid(Datum value, bool isnull, FullTransactionId *xid);
extern void oe_settle_runs(const OeStream *stream);
extern void oe_fence_lock(const OeStream *stream);

/* ingest.c */
extern OeStream oe_stream_for_append(text *name, Oid writer);
extern int64 oe_append_event(const OeStream *stream, OeEvent *event);

/* step.c */
extern bool oe_lock_stream(OeStream *stream);
extern int64 oe_run_step(const OeStream *stream, const OeStepKind *kind, void *arg);
extern void oe_step_notify(OeStepRun *run, const OeLane *lane);

/* release.c */
extern int64 oe_release_global_body(OeStepRun *run, void *arg);
extern int64 oe_release_lane(OeStep *step, text *key, int64 limit, Snapshot snapshot,
							 bool *more);
extern void oe_note_arrival(const OeStream *stream, text *key);
extern int64 oe_release_stream(const OeStream *stream);

/* compaction.c */
extern int64 oe_compact(const OeStream *stream, bool *more);

/*
 * Whether a transaction callback's event ends the transaction (or hands it
 * to a prepared one): where the state a transaction noted is forgotten.
 */
static inline bool
oe_xact_ended(XactEvent event)
{
	return event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE;
}

/* shmem.c */
extern OeShared *oe_shared;
extern void oe_shmem_init(void);
extern void oe_note_events_written(void);
extern void oe_lock_slots(void);
extern void oe_unlock_slots(void);
extern int	oe_free_unserved_slots(const Oid *oids, int n, int *freed);
extern int	oe_slot_of_database(Oid dboid, const char *dbname);
extern void oe_slot_starting(int slotno);
extern void oe_slots_database_dropping(Oid dboid);
extern OeWorkerSlot *oe_claim_slot(int slotno);
extern void oe_slot_set_state(const char *state);
extern void oe_slot_set_error(const char *fmt,...) pg_attribute_printf(1, 2);
extern void oe_slot_count_cycle(TimestampTz started);
extern void oe_slot_set_current(const char *stream, const char *consumer);
extern void oe_slot_count_step(int64 released, int64 processed, TimestampTz started);
extern void oe_slot_note_applied(int64 n);
extern int	oe_claim_process_slot(Oid dboid, const char *dbname, const char *consumer,
								  int32 partition, int limit, uint32 *generation);
extern void oe_free_process_slot(int slotno, uint32 generation);
extern bool oe_process_slot_running(Oid dboid, const char *consumer, int32 partition);
extern int	oe_process_slots_of(Oid dboid, int *slotnos, uint32 *generations,
								pid_t *pids, TimestampTz *launched);
extern void oe_wake_process_workers(Oid dboid);
extern OeWorkerSlot *oe_take_process_slot(int slotno, uint32 generation);
extern bool oe_database_served(Oid dboid);
extern bool oe_slot_set_idle_since(TimestampTz idle_since);
extern bool oe_stop_idle_process_worker(void);
extern bool oe_add_stopped_call(const OeStoppedCall *call);
extern int	oe_stopped_calls_of(Oid dboid, int32 consumer_id, int32 partition,
								OeStoppedCall *calls, int max_calls);
extern void oe_forget_stopped_call(const OeStoppedCall *call);

/* worker.c */
extern void oe_worker_init(void);

#endif							/* ORDERED_EVENTS_H */
