/*-------------------------------------------------------------------------
 *
 * ordered_events.h
 *	  Internal interface shared by the modules of the ordered_events extension.
 *
 * Every internal symbol starts with "oe_".  The SQL objects live in the fixed
 * schema "ordered_events"; see ordered_events--*.sql for the tables.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ORDERED_EVENTS_H
#define ORDERED_EVENTS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/jsonb.h"

#define OE_SCHEMA			"ordered_events"
#define OE_MAX_KEY_BYTES	1024

/* Column numbers of ordered_events.events; catalog.c checks them at load. */
#define Anum_oe_events_stream_id	1
#define Anum_oe_events_seq			2
#define Anum_oe_events_event_ts		3
#define Anum_oe_events_alignment_ts 4
#define Anum_oe_events_received_at	5
#define Anum_oe_events_key			6
#define Anum_oe_events_payload		7
#define Natts_oe_events				7
/* ordered_events.key_events has the same columns, then last_event. */
#define Anum_oe_key_events_last_event 8
#define Natts_oe_key_events			8

/* The labels of ordered_events.outcome, in declaration order. */
typedef enum OeOutcome
{
	OE_ACCEPTED,
	OE_DUPLICATE,
	OE_BEFORE_INITIAL_SEQUENCE,
	OE_SEQUENCE_ID_OUTSIDE_VALID_RANGE,
	OE_AFTER_LAST_EVENT,
	OE_GAP_SKIPPED,
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
	bool		per_key;
	int64		initial_sequence;
	int32		max_release_batch;
	OeGapPolicy gap_policy;
	int64		skipped_through;	/* highest skipped seq, PG_INT64_MIN if none */
	Oid			fence_seq;		/* sequence append() takes seqs from */
} OeStream;

/* The OIDs of the extension's objects in the current database. */
typedef struct OeRelations
{
	Oid			extension;		/* pg_extension row */
	Oid			owner;			/* owner of the tables: internal queries run as it */
	Oid			events;
	Oid			events_pkey;
	Oid			key_events;
	Oid			key_events_pkey;
	Oid			key_events_last_event_idx;
	Oid			key_arrivals;
	Oid			stream_def;
	Oid			outcome_type;
} OeRelations;

/* An event as a producer hands it over (ingest() or a row of inbox). */
typedef struct OeEvent
{
	int64		seq;
	text	   *key;
	Jsonb	   *payload;		/* NULL for SQL NULL */
	TimestampTz event_ts;
	TimestampTz alignment_ts;
	bool		last_event;
} OeEvent;

/* One served database, in shared memory (see shmem.c). */
#define OE_MAX_DATABASES	64
#define OE_ERROR_LEN		256

typedef struct OeWorkerSlot
{
	bool		in_use;			/* claimed by the launcher */
	bool		dropping;		/* DROP DATABASE asked the worker to leave */
	Oid			dboid;
	char		dbname[NAMEDATALEN];
	pid_t		pid;			/* 0 when no worker runs */
	Latch	   *latch;
	char		state[32];
	TimestampTz started_at;
	TimestampTz last_cycle_at;
	int64		cycles;
	int64		released_total;
	char		last_error[OE_ERROR_LEN];
} OeWorkerSlot;

typedef struct OeShared
{
	LWLock	   *lock;
	OeWorkerSlot slots[OE_MAX_DATABASES];
} OeShared;

/* GUCs (ordered_events.c) */
extern char *oe_databases;
extern int	oe_naptime;
extern bool oe_enabled;

/* The caller's identity while an internal query runs (internal_query.c). */
typedef struct OeInternalScope
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} OeInternalScope;

/* catalog.c */
extern void oe_catalog_init(void);
extern bool oe_lock_extension(void);
extern const OeRelations *oe_relations(void);
extern bool oe_lookup_stream(const char *name, OeStream *stream);
extern OeStream oe_stream_or_error(text *name);
extern List *oe_all_streams(void);
extern List *oe_stream_names(const char *query, MemoryContext result_context);
extern Datum oe_outcome_datum(OeOutcome outcome);
extern const char *oe_outcome_name(OeOutcome outcome);

/* internal_query.c */
extern const char *const oe_safe_search_path;
extern void oe_internal_begin(OeInternalScope *scope);
extern void oe_internal_end(OeInternalScope *scope);
extern SPIPlanPtr oe_prepare_kept(const char *query, int nargs, Oid *argtypes);

/* ingest.c */
extern void oe_check_key(const OeStream *stream, text *key, const int64 *seq);

/* table_insert.c */
extern bool oe_insert_unique(Oid relid, Datum *values, bool *isnull);
extern void oe_insert_row(Oid relid, Datum *values, bool *isnull);

/* release.c */
extern int64 oe_release_stream(const OeStream *stream);

/* shmem.c */
extern OeShared *oe_shared;
extern void oe_shmem_init(void);
extern void oe_note_events_written(void);

/* worker.c */
extern void oe_worker_init(void);

#endif							/* ORDERED_EVENTS_H */
