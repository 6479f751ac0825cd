/*-------------------------------------------------------------------------
 *
 * privileges.c
 *	  Who may do what to a stream or a consumer: owners, the 'read' and
 *	  'write' privileges of streams, and the entry point of the SQL
 *	  functions that need to know their caller.
 *
 * Every stream and consumer has an owner, the role that created it.
 * Acting as the owner means having the owner's privileges
 * (has_privs_of_role: a member that inherits them, or a superuser).  A
 * stream's acl (stream_def.acl, an aclitem[]) holds what its owner granted
 * with grant_stream(): 'write' as INSERT, 'read' as SELECT, so that
 * aclmask() resolves role memberships and PUBLIC as for a table.
 *
 * The check is on the path of every ingest: the decision for the current
 * role is kept in the stream's cache entry (catalog.c), which any change of
 * stream_def, of a role or of a role membership invalidates.
 *
 * A SECURITY DEFINER function cannot know who called it.  So the SQL
 * functions that check the caller (create_stream, drop_consumer, ...) are
 * declared LANGUAGE c with oe_call_as_caller: it runs the internal function
 * "<name>_as" with the same arguments and the calling role last, as the
 * owner of the extension's tables (internal_query.c).  The internal
 * functions are not executable by PUBLIC.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

/* The privileges of a stream, as the bits of its acl. */
static AclMode
privilege_of(const char *name)
{
	if (strcmp(name, "write") == 0)
		return OE_PRIV_WRITE;
	if (strcmp(name, "read") == 0)
		return OE_PRIV_READ;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized privilege type: \"%s\"", name),
			 errhint("A stream has the privileges 'read' and 'write'.")));
	return 0;					/* keep compiler quiet */
}

static const char *
privilege_name(AclMode mode)
{
	return mode == OE_PRIV_WRITE ? "write" : "read";
}

/* A role for a message: "role alice", or "a dropped role". */
const char *
oe_role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name != NULL ? psprintf("role %s", name) : "a dropped role";
}

/*
 * True if "role" may act as "owner".  InvalidOid is no owner (a consumer
 * made by 0.2 without a handler): anyone may, as in 0.2.
 */
bool
oe_acts_as_owner(Oid role, Oid owner)
{
	return !OidIsValid(owner) || has_privs_of_role(role, owner);
}

/* Fail unless "role" may act as the owner of the object. */
void
oe_check_owner(Oid role, Oid owner, const char *kind, const char *name)
{
	if (!oe_acts_as_owner(role, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of %s \"%s\"", kind, name),
				 errdetail("It belongs to %s; %s does not have its privileges.",
						   oe_role_name(owner), oe_role_name(role)),
				 errhint("Run this as the owner, or as a member of the owner role.")));
}

/* True if "role" has the privilege "mode" on the stream. */
bool
oe_stream_privilege(const OeStream *stream, Oid role, AclMode mode)
{
	return (oe_stream_privileges(stream, role) & mode) == mode;
}

/* Fail unless "role" has the privilege "mode" on the stream. */
void
oe_check_stream_privilege(const OeStream *stream, Oid role, AclMode mode)
{
	if (!oe_stream_privilege(stream, role, mode))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for stream \"%s\"", stream->name),
				 errdetail("Its privilege '%s' is not granted to %s.",
						   privilege_name(mode), oe_role_name(role)),
				 errhint("Its owner, %s, grants it with ordered_events.grant_stream('%s', '%s', role).",
						 oe_role_name(stream->owner), stream->name, privilege_name(mode))));
}

/*
 * has_stream_privilege(role regrole, stream text, privilege text) returns
 * boolean, and has_stream_privilege(stream text, privilege text) for the
 * current role: as has_table_privilege().
 */
PG_FUNCTION_INFO_V1(oe_has_stream_privilege);
Datum
oe_has_stream_privilege(PG_FUNCTION_ARGS)
{
	bool		with_role = PG_NARGS() == 3;
	int			first = with_role ? 1 : 0;
	OeStream	stream;
	AclMode		mode;
	Oid			role;

	for (int i = 0; i < PG_NARGS(); i++)
		if (PG_ARGISNULL(i))
			PG_RETURN_NULL();
	role = with_role ? PG_GETARG_OID(0) : GetUserId();
	mode = privilege_of(text_to_cstring(PG_GETARG_TEXT_PP(first + 1)));
	stream = oe_stream_or_error(PG_GETARG_TEXT_PP(first));
	PG_RETURN_BOOL(oe_stream_privilege(&stream, role, mode));
}

/*
 * may_read_stream(stream text) returns boolean: whether the current role
 * may read the stream's events; false for a stream that does not exist.
 * The views released and pending and the policy of unprocessed call it.
 */
PG_FUNCTION_INFO_V1(oe_may_read_stream);
Datum
oe_may_read_stream(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	OeStream	stream;

	PG_RETURN_BOOL(oe_lookup_stream(name, &stream) &&
				   oe_stream_privilege(&stream, GetUserId(), OE_PRIV_READ));
}

/*
 * The internal function a SQL function calls, by its OID, with the query
 * that calls it; kept for the backend.
 */
typedef struct CallerEntry
{
	Oid			fn;				/* hash key */
	SPIPlanPtr	plan;
	Oid			rettype;
	int16		typlen;
	bool		typbyval;
} CallerEntry;

static HTAB *caller_plans = NULL;

static CallerEntry *
caller_entry(Oid fn)
{
	CallerEntry *entry;
	bool		found;
	HeapTuple	tuple;
	Form_pg_proc proc;
	StringInfoData sql;
	Oid		   *argtypes;

	if (caller_plans == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(CallerEntry);
		caller_plans = hash_create("ordered_events caller plans", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS);
	}
	entry = hash_search(caller_plans, &fn, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	argtypes = palloc(sizeof(Oid) * (proc->pronargs + 1));
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s.%s(", OE_SCHEMA,
					 quote_identifier(psprintf("%s_as", NameStr(proc->proname))));
	for (int i = 0; i < proc->pronargs; i++)
	{
		argtypes[i] = proc->proargtypes.values[i];
		appendStringInfo(&sql, "$%d, ", i + 1);
	}
	argtypes[proc->pronargs] = REGROLEOID;
	appendStringInfo(&sql, "$%d)", proc->pronargs + 1);

	entry = hash_search(caller_plans, &fn, HASH_ENTER, &found);
	entry->rettype = proc->prorettype;
	get_typlenbyval(entry->rettype, &entry->typlen, &entry->typbyval);
	entry->plan = SPI_prepare(sql.data, proc->pronargs + 1, argtypes);
	ReleaseSysCache(tuple);
	if (entry->plan == NULL || SPI_keepplan(entry->plan) != 0)
	{
		hash_search(caller_plans, &fn, HASH_REMOVE, NULL);
		elog(ERROR, "preparing \"%s\" failed: %s", sql.data,
			 SPI_result_code_string(SPI_result));
	}
	return entry;
}

/*
 * The body of SQL functions that must know their caller: run "<name>_as"
 * with the arguments and the calling role, as the extension's owner.
 * Returns what it returns (a scalar).
 */
PG_FUNCTION_INFO_V1(oe_call_as_caller);
Datum
oe_call_as_caller(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	int			nargs = PG_NARGS();
	Datum	   *values = palloc(sizeof(Datum) * (nargs + 1));
	char	   *nulls = palloc(nargs + 2);
	OeInternalScope scope;
	CallerEntry *entry;
	Datum		result = (Datum) 0;
	bool		isnull = true;

	for (int i = 0; i < nargs; i++)
	{
		values[i] = PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	values[nargs] = ObjectIdGetDatum(caller);
	nulls[nargs] = ' ';
	nulls[nargs + 1] = '\0';

	oe_internal_begin(&scope, oe_relations()->owner);
	entry = caller_entry(fcinfo->flinfo->fn_oid);
	if (SPI_execute_plan(entry->plan, values, nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "calling the internal function of %u failed", fcinfo->flinfo->fn_oid);
	if (entry->rettype != VOIDOID)
	{
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, entry->typbyval, entry->typlen);
	}
	oe_internal_end(&scope);
	if (isnull)
		PG_RETURN_NULL();
	return result;
}
