/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  Per-backend cache of the extension's relation OIDs, the outcome enum
 *	  and the stream definitions; what makes a valid stream name and key.
 *
 * The hot paths (ingest, release) must not look a stream up in a table on
 * every call.  Every backend caches what it has read.  A statement trigger
 * on ordered_events.stream_def (and gap_skips) sends a relcache
 * invalidation for stream_def at commit of any change; an invalidation of
 * any of our relations (REINDEX CONCURRENTLY gives an index a new OID, DROP
 * EXTENSION removes them all) or a cache reset bumps cache_epoch, and the
 * whole cache is rebuilt at the start of the next lookup.  The callback may
 * run at any lock acquisition, so it only bumps the counter.
 *
 * A rebuild is atomic: the new relation OIDs and an empty stream hash are
 * built aside and swapped in only when complete, so an error in the middle
 * (the extension was dropped) leaves the old cache, still marked stale.  An
 * invalidation that arrives during a rebuild or a stream read makes the
 * caller go round again.  Lookups hand out copies, never pointers into the
 * hash table.
 *
 * A stream missing from the cache is read with the latest snapshot, so a
 * backend that waited for a concurrent drop_stream() sees the drop.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

static const char *const outcome_names[OE_NUM_OUTCOMES] = {
	"accepted",
	"duplicate",
	"before_initial_sequence",
	"sequence_id_outside_valid_range",
	"after_last_event",
	"gap_skipped",
	"exception_thrown",
};

/* The labels of ordered_events.gap_policy, as OeGapPolicy numbers them. */
static const char *const gap_policy_names[] = {
	[OE_GAP_WAIT] = "wait",
	[OE_GAP_TIMEOUT] = "timeout",
	[OE_GAP_FENCE] = "fence",
};

static uint64 cache_epoch = 1;	/* bumped by each invalidation that concerns us */
static uint64 built_epoch = 0;	/* the epoch the cache was built in */
static OeRelations relations;
static OeRelations building;	/* a rebuild in progress: its OIDs count too */
static Oid	outcome_oids[OE_NUM_OUTCOMES];
static HTAB *stream_cache = NULL;
static MemoryContext stream_cache_cxt = NULL;	/* the hash and the acls */

static OePlan stream_plan = {
	"SELECT d.stream_id, d.sequencing = 'per_key', d.initial_sequence, "
	"  d.max_release_batch, d.gap_policy::text, "
	"  (SELECT max(g.gap_end) FROM ordered_events.gap_skips g "
	"    WHERE g.stream_id = d.stream_id), "
	"  pg_catalog.to_regclass(pg_catalog.format('ordered_events.fence_seq_%s', d.stream_id)), "
	"  d.retains_events, d.sharded, d.owner, d.acl "
	"FROM ordered_events.stream_def d WHERE d.stream = $1",
	1, {TEXTOID}
};

/* True if relid is one of the relations in *rels. */
static bool
is_our_relation(const OeRelations *rels, Oid relid)
{
	return relid == rels->event || relid == rels->event_pkey ||
		relid == rels->event_last_event_idx || relid == rels->key_arrivals ||
		relid == rels->unprocessed || relid == rels->stream_def ||
		relid == rels->gap_skips || relid == rels->lane_release_log ||
		relid == rels->lane_release_log_delivery_key || relid == rels->arrival_seq ||
		relid == rels->progress || relid == rels->progress_pkey;
}

/*
 * Relcache callback: an invalidation of one of our relations (or of all)
 * makes the cache stale.  Runs at any lock acquisition: only counts.
 */
static void
relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || is_our_relation(&relations, relid) ||
		is_our_relation(&building, relid))
		cache_epoch++;
}

/*
 * Syscache callback of roles and role memberships: the privileges kept
 * for roles may have changed.
 */
static void
role_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	cache_epoch++;
}

/* Called from _PG_init. */
void
oe_catalog_init(void)
{
	CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, role_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, role_callback, (Datum) 0);
}

static void
error_not_installed(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension \"ordered_events\" is not installed in this database"),
			 errhint("Run CREATE EXTENSION ordered_events.")));
}

/*
 * The OID of one of our relations.  A missing one means the installed SQL
 * objects are of another version than this library (0.1 had no table
 * "event_store"): say so, rather than fail on a table of the wrong shape.
 */
static Oid
relation_oid(Oid schema, const char *name)
{
	Oid			relid = get_relname_relid(name, schema);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the objects of extension \"ordered_events\" are not those of library version %s",
						OE_LIBRARY_VERSION),
				 errdetail("Relation %s.%s is missing.", OE_SCHEMA, name),
				 errhint("Run ALTER EXTENSION ordered_events UPDATE.")));
	return relid;
}

/* The owner of a relation: internal queries run as the owner of stream_def. */
static Oid
relation_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* Fail unless a table has the columns, at the positions, the C code writes. */
static void
check_columns(Oid relid, const char *const *names, int ncolumns)
{
	for (int i = 0; i < ncolumns; i++)
		if (get_attnum(relid, names[i]) != i + 1)
			elog(ERROR, "column %s of %s.%s is not at position %d",
				 names[i], OE_SCHEMA, get_rel_name(relid), i + 1);
}

/* The relations the library needs, by name, and where OeRelations keeps them. */
static const struct
{
	const char *name;
	size_t		offset;
}			our_relations[] =
{
	{"event_store", offsetof(OeRelations, event)},
	{"event_store_pkey", offsetof(OeRelations, event_pkey)},
	{"event_store_last_event_idx", offsetof(OeRelations, event_last_event_idx)},
	{"key_arrivals", offsetof(OeRelations, key_arrivals)},
	{"unprocessed", offsetof(OeRelations, unprocessed)},
	{"stream_def", offsetof(OeRelations, stream_def)},
	{"gap_skips", offsetof(OeRelations, gap_skips)},
	{"lane_release_log", offsetof(OeRelations, lane_release_log)},
	{"lane_release_log_delivery_key", offsetof(OeRelations, lane_release_log_delivery_key)},
	{"progress", offsetof(OeRelations, progress)},
	{"progress_pkey", offsetof(OeRelations, progress_pkey)},
	{"arrival_seq", offsetof(OeRelations, arrival_seq)},
	{"handler_state", offsetof(OeRelations, handler_state)},
	{"handler_state_pkey", offsetof(OeRelations, handler_state_pkey)},
	{"handler_result", offsetof(OeRelations, handler_result)},
	{"result_position_seq", offsetof(OeRelations, result_position_seq)},
	{"handler_parked", offsetof(OeRelations, handler_parked)},
	{"parked_position_seq", offsetof(OeRelations, parked_position_seq)},
};

static Oid *
relation_field(OeRelations *rels, int i)
{
	return (Oid *) ((char *) rels + our_relations[i].offset);
}

/* Whether stream_def has its column acl: 0.3's streams have privileges. */
static bool
has_stream_acl(Oid stream_def)
{
	return get_attnum(stream_def, "acl") != InvalidAttrNumber;
}

/* Read the OIDs of the extension's objects into *rels and outcomes[]. */
static void
read_relations(OeRelations *rels, Oid *outcomes)
{
	static const char *const event_columns[Natts_oe_event] = {
		"stream_id", "lane", "last_event", "seq", "event_ts", "alignment_ts",
		"received_at", "arrival", "key", "payload"
	};
	static const char *const progress_columns[Nchecked_oe_progress] = {
		"stream_id", "lane", "range_end", "released_count", "last_released_seq",
		"counted_end", "max_event_ts", "last_event_seq"
	};
	static const char *const log_columns[Natts_oe_log] = {
		"stream_id", "lane", "seq_start", "seq_end", "released_at", "delivery"
	};
	static const char *const unprocessed_columns[Natts_oe_unprocessed] = {
		"stream", "seq", "key", "payload", "event_ts", "reason", "detail", "received_at",
		"consumer"
	};
	static const char *const state_columns[Natts_oe_state] = {
		"consumer_id", "key", "state", "last_stream_id", "last_seq", "processed_count",
		"error_count", "updated_at", "attempts", "next_attempt_at", "held_since", "last_error",
		"parked"
	};
	static const char *const result_columns[Natts_oe_result] = {
		"consumer_id", "position", "stream_id", "seq", "key", "result", "produced_at"
	};
	static const char *const parked_columns[Natts_oe_parked] = {
		"consumer_id", "key", "position", "stream_id", "seq", "arrival", "payload", "event_ts",
		"alignment_ts", "last_event", "received_at", "dead_letter", "parked_at"
	};
	Oid			schema;

	memset(rels, 0, sizeof(*rels));
	rels->extension = get_extension_oid("ordered_events", true);
	schema = get_namespace_oid(OE_SCHEMA, true);
	if (!OidIsValid(rels->extension) || !OidIsValid(schema))
		error_not_installed();

	for (int i = 0; i < lengthof(our_relations); i++)
		*relation_field(rels, i) = relation_oid(schema, our_relations[i].name);
	rels->owner = relation_owner(rels->stream_def);
	if (!has_stream_acl(rels->stream_def))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the objects of extension \"ordered_events\" are not those of library version %s",
						OE_LIBRARY_VERSION),
				 errdetail("Column %s.stream_def.acl is missing.", OE_SCHEMA),
				 errhint("Run ALTER EXTENSION ordered_events UPDATE.")));
	rels->outcome_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
										 CStringGetDatum("outcome"),
										 ObjectIdGetDatum(schema));
	rels->event_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
									   CStringGetDatum("event"), ObjectIdGetDatum(schema));
	rels->step_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
									  CStringGetDatum("step"), ObjectIdGetDatum(schema));
	check_columns(rels->event, event_columns, Natts_oe_event);
	check_columns(rels->unprocessed, unprocessed_columns, Natts_oe_unprocessed);
	check_columns(rels->lane_release_log, log_columns, Natts_oe_log);
	check_columns(rels->progress, progress_columns, Nchecked_oe_progress);
	check_columns(rels->handler_state, state_columns, Natts_oe_state);
	check_columns(rels->handler_result, result_columns, Natts_oe_result);
	check_columns(rels->handler_parked, parked_columns, Natts_oe_parked);

	for (int i = 0; i < OE_NUM_OUTCOMES; i++)
	{
		outcomes[i] = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
									  ObjectIdGetDatum(rels->outcome_type),
									  CStringGetDatum(outcome_names[i]));
		if (!OidIsValid(outcomes[i]))
			elog(ERROR, "label \"%s\" of %s.outcome is missing",
				 outcome_names[i], OE_SCHEMA);
	}
}

/*
 * Rebuild the cache if an invalidation arrived since it was built; see the
 * banner.  On error the old cache stays, and stays stale.
 */
static void
refresh_cache(void)
{
	while (built_epoch != cache_epoch)
	{
		uint64		epoch = cache_epoch;
		Oid			outcomes[OE_NUM_OUTCOMES];
		HASHCTL		ctl;
		MemoryContext cxt;

		read_relations(&building, outcomes);

		cxt = AllocSetContextCreate(CacheMemoryContext, "ordered_events streams",
									ALLOCSET_SMALL_SIZES);
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = NAMEDATALEN;
		ctl.entrysize = sizeof(OeStream);
		ctl.hcxt = cxt;

		/* Complete: swap it in. */
		relations = building;
		memset(&building, 0, sizeof(building));
		memcpy(outcome_oids, outcomes, sizeof(outcome_oids));
		if (stream_cache_cxt != NULL)
			MemoryContextDelete(stream_cache_cxt);
		stream_cache_cxt = cxt;
		stream_cache = hash_create("ordered_events streams", 16, &ctl,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		built_epoch = epoch;
	}
}

/*
 * Whether the installed objects are those this library reads, looked at
 * without raising: false only when one it needs is missing (the objects of
 * an older version, before ALTER EXTENSION UPDATE).  A valid cache fits.
 */
static bool
objects_fit(void)
{
	Oid			schema = get_namespace_oid(OE_SCHEMA, true);
	Oid			stream_def;

	if (built_epoch == cache_epoch || !OidIsValid(schema))
		return true;			/* up to date, or read_relations() says what is wrong */
	for (int i = 0; i < lengthof(our_relations); i++)
		if (!OidIsValid(get_relname_relid(our_relations[i].name, schema)))
			return false;
	stream_def = get_relname_relid("stream_def", schema);
	return has_stream_acl(stream_def);
}

/* The version of an installed extension (pg_extension.extversion), palloc'd. */
char *
oe_extension_version(Oid extension)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	char	   *version = NULL;
	bool		isnull;
	Datum		value;

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extension));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		value = heap_getattr(tuple, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);
		if (!isnull)
			version = TextDatumGetCString(value);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version != NULL ? version : pstrdup("?");
}

/*
 * Log, once per installation and version, that this library waits for the
 * update of the objects: the one thing to do.
 */
static void
log_update_needed(Oid extension)
{
	static Oid	logged_for = InvalidOid;
	static char logged_version[NAMEDATALEN] = "";
	char	   *version = oe_extension_version(extension);

	if (logged_for == extension && strcmp(logged_version, version) == 0)
		return;
	logged_for = extension;
	strlcpy(logged_version, version, sizeof(logged_version));
	ereport(LOG,
			(errmsg("ordered_events does not work in database \"%s\" until extension \"ordered_events\" is updated",
					get_database_name(MyDatabaseId)),
			 errdetail("The installed extension is version %s, the library version %s.",
					   version, OE_LIBRARY_VERSION),
			 errhint("Run ALTER EXTENSION ordered_events UPDATE in that database.")));
}

/*
 * Lock the extension against DROP EXTENSION until the transaction ends;
 * false if it is not installed (or was dropped while we waited).  Taken
 * before any of our tables, DROP EXTENSION waits for the holder instead of
 * deadlocking with it.  The worker's way in: it also returns false, having
 * logged once what to do, while the installed objects are of an older
 * version, so that the worker waits for the update rather than log the
 * same error at every step of every cycle.
 */
bool
oe_lock_extension(void)
{
	Oid			extension = get_extension_oid("ordered_events", true);

	if (!OidIsValid(extension))
		return false;
	LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);
	if (get_extension_oid("ordered_events", true) != extension)
		return false;
	if (!objects_fit())
	{
		log_update_needed(extension);
		return false;
	}
	return true;
}

/* The OIDs of the extension's objects, up to date. */
const OeRelations *
oe_relations(void)
{
	refresh_cache();
	return &relations;
}

/* The value of ordered_events.outcome for an outcome. */
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

/* The policy of a label of ordered_events.gap_policy; a label we do not know is an error. */
static OeGapPolicy
gap_policy_from_name(const char *name)
{
	for (int i = 0; i < lengthof(gap_policy_names); i++)
		if (strcmp(name, gap_policy_names[i]) == 0)
			return (OeGapPolicy) i;
	elog(ERROR, "unknown gap_policy \"%s\"", name);
	return OE_GAP_WAIT;			/* keep compiler quiet */
}

/*
 * Read one stream definition with the latest snapshot (in a parallel query,
 * which cannot take one, with its own); false if missing.
 */
static bool
read_stream(const char *name, OeStream *stream)
{
	Datum		arg = CStringGetTextDatum(name);
	OeInternalScope scope;
	bool		found;

	oe_internal_begin(&scope, oe_relations()->owner);
	/* A view's may_read_stream() may run in a parallel query's leader. */
	if (IsInParallelMode())
		oe_run_plan(&stream_plan, &arg, NULL, SPI_OK_SELECT);
	else
		oe_run_plan_latest(&stream_plan, &arg, NULL);
	found = (SPI_processed == 1);
	if (found)
	{
		bool		isnull;
		Datum		value;

		memset(stream, 0, sizeof(*stream));
		strlcpy(stream->name, name, NAMEDATALEN);
		stream->stream_id = DatumGetInt32(oe_result(0, 1, &isnull));
		stream->per_key = DatumGetBool(oe_result(0, 2, &isnull));
		stream->initial_sequence = DatumGetInt64(oe_result(0, 3, &isnull));
		stream->max_release_batch = DatumGetInt32(oe_result(0, 4, &isnull));
		stream->gap_policy =
			gap_policy_from_name(TextDatumGetCString(oe_result(0, 5, &isnull)));
		value = oe_result(0, 6, &isnull);
		stream->skipped_through = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		value = oe_result(0, 7, &isnull);
		stream->fence_seq = isnull ? InvalidOid : DatumGetObjectId(value);
		stream->retains_events = DatumGetBool(oe_result(0, 8, &isnull));
		stream->sharded = DatumGetBool(oe_result(0, 9, &isnull));
		stream->owner = DatumGetObjectId(oe_result(0, 10, &isnull));
		value = oe_result(0, 11, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(stream_cache_cxt);

			stream->acl = DatumGetAclPCopy(value);
			MemoryContextSwitchTo(old);
		}
	}
	oe_internal_end(&scope);
	return found;
}

/*
 * Look a stream up by name; copies its definition into *stream.  Returns
 * false if there is no such stream.
 */
bool
oe_lookup_stream(const char *name, OeStream *stream)
{
	if (strlen(name) >= NAMEDATALEN)
		return false;			/* longer than any valid stream name */

	for (;;)
	{
		OeStream   *entry;
		uint64		epoch;
		bool		found;

		refresh_cache();
		entry = hash_search(stream_cache, name, HASH_FIND, NULL);
		if (entry != NULL)
		{
			*stream = *entry;
			return true;
		}

		epoch = cache_epoch;
		found = read_stream(name, stream);
		refresh_cache();
		if (epoch != cache_epoch)
			continue;			/* invalidated while we read: read again */
		if (found)
			*(OeStream *) hash_search(stream_cache, name, HASH_ENTER, NULL) = *stream;
		return found;
	}
}

/*
 * The privileges of "role" on a stream: all of them for a role that acts
 * as its owner, else what its acl grants the role, its groups and PUBLIC.
 * Worked out once per stream and role, in the stream's cache entry.
 */
AclMode
oe_stream_privileges(const OeStream *stream, Oid role)
{
	const AclMode all = OE_PRIV_WRITE | OE_PRIV_READ;
	OeStream   *entry;

	if (stream->priv_role == role && OidIsValid(role))
		return stream->priv_mask;
	refresh_cache();
	entry = hash_search(stream_cache, stream->name, HASH_FIND, NULL);
	if (entry == NULL || entry->stream_id != stream->stream_id)
	{
		OeStream	fresh;

		/* Rebuilt since the caller's lookup: into the cache again. */
		if (!oe_lookup_stream(stream->name, &fresh) || fresh.stream_id != stream->stream_id)
			return 0;			/* dropped meanwhile */
		entry = hash_search(stream_cache, stream->name, HASH_FIND, NULL);
		if (entry == NULL)
			return 0;
	}
	if (entry->priv_role != role || !OidIsValid(role))
	{
		/* Role lookups only queue invalidations: the entry stays. */
		if (has_privs_of_role(role, entry->owner))
			entry->priv_mask = all;
		else if (entry->acl != NULL)
			entry->priv_mask = aclmask(entry->acl, role, entry->owner, all, ACLMASK_ALL);
		else
			entry->priv_mask = 0;
		entry->priv_role = role;
	}
	return entry->priv_mask;
}

/* Look a stream up by name, or raise undefined_object: the one message. */
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
 * stream_id(stream text) returns integer
 *
 * For the SQL functions: the stream's id, or the same errors as the C ones.
 */
PG_FUNCTION_INFO_V1(oe_stream_id);
Datum
oe_stream_id(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(oe_stream_arg(fcinfo, 0).stream_id);
}

/*
 * Run a query whose first column is a stream name; returns the names, in
 * the order of the query, allocated in result_context.
 */
List *
oe_stream_names(const char *query, MemoryContext result_context)
{
	List	   *names = NIL;
	OeInternalScope scope;

	oe_internal_begin(&scope, oe_relations()->owner);
	if (SPI_execute(query, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "listing streams failed: %s", query);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext spi = MemoryContextSwitchTo(result_context);

		names = lappend(names, pstrdup(name));
		MemoryContextSwitchTo(spi);
	}
	oe_internal_end(&scope);
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
 * Trigger on ordered_events.stream_def and gap_skips: make every backend
 * drop its cached stream definitions when this transaction commits.  It
 * needs nothing of the cache itself, so it also works while an update
 * script reshapes the tables.
 */
PG_FUNCTION_INFO_V1(oe_stream_def_changed);
Datum
oe_stream_def_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"stream_def_changed\" must be fired AFTER ... FOR EACH STATEMENT"),
				 errhint("It is a trigger of the extension's own tables only.")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}
