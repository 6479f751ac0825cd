/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  Per-backend cache of the extension's relation OIDs, the outcome enum
 *	  and the stream definitions.
 *
 * The hot paths (ingest, release) must not look a stream up in a table on
 * every call.  Every backend caches what it has read; a statement trigger on
 * ordered_events.stream_def sends a relcache invalidation for that table at
 * commit of any change, and our relcache callback then marks the whole cache
 * stale.  The callback may run at any lock acquisition, so it only sets a
 * flag: the cache is rebuilt at the start of the next lookup, and lookups
 * hand out copies, never pointers into the hash table.
 *
 * A stream missing from the cache is read with the latest snapshot, so a
 * backend that waited for a concurrent drop_stream() sees the drop.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

static const char *const outcome_names[OE_NUM_OUTCOMES] = {
	"accepted",
	"duplicate",
	"before_initial_sequence",
	"sequence_id_outside_valid_range",
	"after_last_event",
	"gap_skipped",
};

static bool cache_stale = true;
static OeRelations relations;
static Oid	outcome_oids[OE_NUM_OUTCOMES];
static HTAB *stream_cache = NULL;
static SPIPlanPtr stream_plan = NULL;

static void
relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == relations.stream_def)
		cache_stale = true;
}

void
oe_catalog_init(void)
{
	CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
}

static Oid
relation_oid(Oid schema, const char *name)
{
	Oid			relid = get_relname_relid(name, schema);

	if (!OidIsValid(relid))
		elog(ERROR, "relation %s.%s is missing", OE_SCHEMA, name);
	return relid;
}

/* Fail if an events table does not have the columns the C code assumes. */
static void
check_events_columns(Oid events)
{
	static const struct
	{
		const char *name;
		AttrNumber	attnum;
	}			columns[] = {
		{"stream_id", Anum_oe_events_stream_id},
		{"seq", Anum_oe_events_seq},
		{"event_ts", Anum_oe_events_event_ts},
		{"alignment_ts", Anum_oe_events_alignment_ts},
		{"received_at", Anum_oe_events_received_at},
		{"key", Anum_oe_events_key},
		{"payload", Anum_oe_events_payload},
	};

	for (int i = 0; i < lengthof(columns); i++)
		if (get_attnum(events, columns[i].name) != columns[i].attnum)
			elog(ERROR, "column %s of %s.%s is not at position %d",
				 columns[i].name, OE_SCHEMA, get_rel_name(events), columns[i].attnum);
}

/* Rebuild the cache if an invalidation arrived since it was built. */
static void
refresh_cache(void)
{
	HASHCTL		ctl;
	Oid			schema;

	if (!cache_stale)
		return;
	/* Cleared first: an invalidation during the rebuild marks it again. */
	cache_stale = false;

	if (stream_cache != NULL)
	{
		hash_destroy(stream_cache);
		stream_cache = NULL;
	}
	memset(&relations, 0, sizeof(relations));

	schema = get_namespace_oid(OE_SCHEMA, true);
	if (!OidIsValid(schema))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"ordered_events\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION ordered_events.")));

	relations.events = relation_oid(schema, "events");
	relations.events_pkey = relation_oid(schema, "events_pkey");
	relations.key_events = relation_oid(schema, "key_events");
	relations.key_events_pkey = relation_oid(schema, "key_events_pkey");
	relations.key_events_last_event_idx = relation_oid(schema, "key_events_last_event_idx");
	relations.key_arrivals = relation_oid(schema, "key_arrivals");
	relations.stream_def = relation_oid(schema, "stream_def");
	relations.outcome_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
											 CStringGetDatum("outcome"),
											 ObjectIdGetDatum(schema));
	check_events_columns(relations.events);
	check_events_columns(relations.key_events);
	if (get_attnum(relations.key_events, "last_event") != Anum_oe_key_events_last_event)
		elog(ERROR, "column last_event of %s.key_events is not at position %d",
			 OE_SCHEMA, Anum_oe_key_events_last_event);

	for (int i = 0; i < OE_NUM_OUTCOMES; i++)
	{
		outcome_oids[i] = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
										  ObjectIdGetDatum(relations.outcome_type),
										  CStringGetDatum(outcome_names[i]));
		if (!OidIsValid(outcome_oids[i]))
			elog(ERROR, "label \"%s\" of %s.outcome is missing",
				 outcome_names[i], OE_SCHEMA);
	}

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = NAMEDATALEN;
	ctl.entrysize = sizeof(OeStream);
	ctl.hcxt = CacheMemoryContext;
	stream_cache = hash_create("ordered_events streams", 16, &ctl,
							   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

const OeRelations *
oe_relations(void)
{
	refresh_cache();
	return &relations;
}

Datum
oe_outcome_datum(OeOutcome outcome)
{
	refresh_cache();
	return ObjectIdGetDatum(outcome_oids[outcome]);
}

const char *
oe_outcome_name(OeOutcome outcome)
{
	return outcome_names[outcome];
}

/*
 * Prepare an SPI statement and keep it for the life of the backend (the
 * plan cache replans it after invalidations).  Call inside SPI_connect().
 */
SPIPlanPtr
oe_prepare_kept(const char *query, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(query, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

/* Read one stream definition with the latest snapshot; false if missing. */
static bool
read_stream(const char *name, OeStream *stream)
{
	Datum		arg = CStringGetTextDatum(name);
	bool		found;

	SPI_connect();
	if (stream_plan == NULL)
	{
		Oid			argtype = TEXTOID;

		stream_plan = oe_prepare_kept(
			"SELECT d.stream_id, d.sequencing = 'per_key', "
			"d.initial_sequence, d.max_release_batch, d.gap_policy, "
			"(SELECT max(g.gap_end) FROM ordered_events.gap_skips g "
			" WHERE g.stream_id = d.stream_id), "
			"pg_catalog.to_regclass('ordered_events.fence_seq_' || d.stream_id) "
			"FROM ordered_events.stream_def d WHERE d.stream = $1",
			1, &argtype);
	}
	if (SPI_execute_snapshot(stream_plan, &arg, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading stream \"%s\" failed", name);

	found = (SPI_processed == 1);
	if (found)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *policy;
		Datum		value;

		memset(stream, 0, sizeof(*stream));
		strlcpy(stream->name, name, NAMEDATALEN);
		stream->stream_id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		stream->per_key = DatumGetBool(SPI_getbinval(tuple, desc, 2, &isnull));
		stream->initial_sequence = DatumGetInt64(SPI_getbinval(tuple, desc, 3, &isnull));
		stream->max_release_batch = DatumGetInt32(SPI_getbinval(tuple, desc, 4, &isnull));
		policy = TextDatumGetCString(SPI_getbinval(tuple, desc, 5, &isnull));
		stream->gap_policy = strcmp(policy, "timeout") == 0 ? OE_GAP_TIMEOUT :
			strcmp(policy, "fence") == 0 ? OE_GAP_FENCE : OE_GAP_WAIT;
		value = SPI_getbinval(tuple, desc, 6, &isnull);
		stream->skipped_through = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		value = SPI_getbinval(tuple, desc, 7, &isnull);
		stream->fence_seq = isnull ? InvalidOid : DatumGetObjectId(value);
	}
	SPI_finish();
	return found;
}

/*
 * Look a stream up by name; copies its definition into *stream.  Returns
 * false if there is no such stream.
 */
bool
oe_lookup_stream(const char *name, OeStream *stream)
{
	OeStream   *entry;
	bool		found;

	refresh_cache();
	if (strlen(name) >= NAMEDATALEN)
		return false;			/* longer than any valid stream name */

	entry = hash_search(stream_cache, name, HASH_FIND, NULL);
	if (entry != NULL)
	{
		*stream = *entry;
		return true;
	}

	if (!read_stream(name, stream))
		return false;

	/* read_stream() took locks, so an invalidation may have replaced the cache. */
	refresh_cache();
	entry = hash_search(stream_cache, name, HASH_ENTER, &found);
	*entry = *stream;
	return true;
}

/* Look a stream up by name, or raise undefined_object. */
OeStream
oe_stream_or_error(text *name)
{
	char	   *cname = text_to_cstring(name);
	OeStream	stream;

	if (!oe_lookup_stream(cname, &stream))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", cname),
				 errhint("Create it with ordered_events.create_stream(), or see ordered_events.streams for the existing ones.")));
	pfree(cname);
	return stream;
}

/*
 * Run a query whose first column is a stream name; returns the names, in
 * the order of the query, allocated in result_context.
 */
List *
oe_stream_names(const char *query, MemoryContext result_context)
{
	List	   *names = NIL;

	SPI_connect();
	if (SPI_execute(query, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "listing streams failed: %s", query);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext spi = MemoryContextSwitchTo(result_context);

		names = lappend(names, pstrdup(name));
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	return names;
}

/* Every stream of the database, by name, as a List of palloc'd OeStream. */
List *
oe_all_streams(void)
{
	List	   *names = oe_stream_names("SELECT stream FROM ordered_events.stream_def "
										"ORDER BY stream", CurrentMemoryContext);
	List	   *streams = NIL;
	ListCell   *lc;

	foreach(lc, names)
	{
		OeStream   *stream = palloc(sizeof(OeStream));

		/* A stream dropped since the listing is simply left out. */
		if (oe_lookup_stream(lfirst(lc), stream))
			streams = lappend(streams, stream);
	}
	list_free_deep(names);
	return streams;
}

/*
 * Trigger on ordered_events.stream_def and gap_skips: make every backend drop
 * its cached stream definitions when this transaction commits.
 */
PG_FUNCTION_INFO_V1(oe_stream_def_changed);
Datum
oe_stream_def_changed(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "oe_stream_def_changed: not called by trigger manager");
	CacheInvalidateRelcacheByRelid(oe_relations()->stream_def);
	return PointerGetDatum(NULL);
}
