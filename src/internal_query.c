/*-------------------------------------------------------------------------
 *
 * internal_query.c
 *	  Running the extension's own SQL: as the owner of its tables, with a
 *	  pinned search_path, in a restricted security context.
 *
 * Every SPI query of the C code runs between oe_internal_begin() and
 * oe_internal_end(), whoever calls: a producer's ingest(), an operator's
 * release(), the superuser worker.  Inside,
 *  - search_path is "pg_catalog, pg_temp", so an operator or function that
 *	  a role created in public or pg_temp (say public.||(text, integer), an
 *	  exact match that would beat pg_catalog's polymorphic one) is never
 *	  chosen, and the plans kept for the backend are planned in one path;
 *  - the current user is the owner of the extension's tables, as for the
 *	  checks of a foreign key, so the functions' EXECUTE privilege is the
 *	  only gate: producers need no rights on the internal tables and cannot
 *	  forge their rows;
 *  - SECURITY_RESTRICTED_OPERATION forbids what no query of ours needs.
 * No user code runs inside: the queries read and write only our tables.
 *
 * An error inside needs no cleanup here: the abort of the (sub)transaction
 * restores the user, the security context and the GUC nesting level.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "miscadmin.h"
#include "utils/array.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

/* The search_path of every internal query and of the worker. */
const char *const oe_safe_search_path = "pg_catalog, pg_temp";

/*
 * Connect to SPI as "owner", the owner of the extension's tables
 * (oe_relations()->owner), with the safe search_path.
 */
void
oe_internal_begin(OeInternalScope *scope, Oid owner)
{
	GetUserIdAndSecContext(&scope->save_userid, &scope->save_sec_context);
	SetUserIdAndSecContext(owner, scope->save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	scope->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", oe_safe_search_path,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/* Leave the scope of oe_internal_begin(): back to the caller's user and path. */
void
oe_internal_end(OeInternalScope *scope)
{
	SPI_finish();
	AtEOXact_GUC(true, scope->save_nestlevel);
	SetUserIdAndSecContext(scope->save_userid, scope->save_sec_context);
}

/*
 * Prepare a plan of the extension at first use, inside a scope, so that it
 * is planned with the safe search_path, and keep it for the backend (the
 * plan cache replans it after invalidations).  plan->cursor_options may
 * ask for a generic plan (see OePlan).
 */
static SPIPlanPtr
prepared(OePlan *plan)
{
	if (plan->plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(plan->sql, plan->nargs, plan->argtypes,
										   plan->cursor_options);

		if (p == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		plan->plan = p;
	}
	return plan->plan;
}

/* Run a plan; "nulls" may be NULL.  Fails unless SPI returns "expected". */
void
oe_run_plan(OePlan *plan, Datum *values, const char *nulls, int expected)
{
	int			rc = SPI_execute_plan(prepared(plan), values, nulls, false, 0);

	if (rc != expected)
		elog(ERROR, "internal query failed: %s", SPI_result_code_string(rc));
}

/* Run a read-only plan with the given snapshot. */
void
oe_run_plan_snapshot(OePlan *plan, Datum *values, const char *nulls, Snapshot snapshot)
{
	if (SPI_execute_snapshot(prepared(plan), values, nulls, snapshot,
							 InvalidSnapshot, true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "internal query failed: %s", plan->sql);
}

/*
 * Run a read-only plan with the latest snapshot, so that it sees what
 * committed since the transaction's snapshot (a REPEATABLE READ caller's
 * too).
 */
void
oe_run_plan_latest(OePlan *plan, Datum *values, const char *nulls)
{
	oe_run_plan_snapshot(plan, values, nulls, GetLatestSnapshot());
}

/* Column "col" of row "row" of the last result; sets *isnull. */
Datum
oe_result(uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * A one-dimensional array of n elements of type elemtype, as a parameter;
 * "nulls" may be NULL when no element is.
 */
Datum
oe_array(Datum *elems, bool *nulls, int n, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			lbound = 1;

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, &n, &lbound, elemtype,
											  typlen, typbyval, typalign));
}
