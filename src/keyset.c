/*-------------------------------------------------------------------------
 *
 * keyset.c
 *	  Keyset reads of the views released and pending: read by stream (and
 *	  key) with a lower seq bound and a LIMIT, an index range of
 *	  event_store_pkey (stream_id, lane, seq) in seq order.
 *
 * The views join stream_def by name to event_store by stream_id.  The
 * planner cannot carry the order of the event scan through a nested loop
 * from the one stream_def row, so a query like
 *   SELECT * FROM released WHERE stream = 'a' AND seq > 2 ORDER BY seq LIMIT 100
 * sorted every event of the stream.  Each branch of the views (see
 * src/sql/release.sql) therefore also states its bounds through two
 * functions of the stream's name:
 *   e.stream_id = read_stream_id(d.stream, 'global', d.stream_id)
 *   e.seq < lane_range_end(d.stream, '', coalesce(p.range_end, ...))
 * Called, they return their last argument ("known": the value the row
 * already has; the lookup is for a NULL one).  A caller must pass as known
 * what the lookup would return (the views pass the row's own stream_id and
 * range_end): the planner may use either.  Their planner support
 * function (SupportRequestSimplify) replaces, in their arguments, a column
 * that a top-level condition of the query's WHERE equates with a constant
 * ("d.stream = 'a'": a user's condition, pushed down into the branch) by
 * that constant, and "known" by NULL once the others are constants.  The
 * call then has no column left: a pseudo-constant, evaluated once when
 * the scan starts, so the stream's id is a constant of the event scan's
 * equivalence class (its sort key is redundant) and the range bound is an
 * index bound.
 *
 * Why the substitution is exact: every row the query returns satisfies
 * each top-level conjunct of its WHERE, so on those rows the column equals
 * the constant (text equality with a deterministic collation is identity)
 * and the call's value is unchanged; a row for which they differ fails
 * that conjunct whatever the call returns, and the functions raise no
 * error.  With the substituted arguments a call computes by lookup what
 * "known" carries for those rows: the stream's id, or the lane's
 * range_end.  Nothing depends on the data at planning time, so a cached
 * plan stays right (a Param is substituted as a constant is: a generic
 * plan looks the stream up when it runs).  Without the substitution (no
 * such condition: the whole view), the views read as before, the calls
 * returning what they are given.
 *
 * The lookups see the query's snapshot, and what the current role may not
 * read is NULL: so no row, as the views' may_read_stream() gives.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/pathnodes.h"
#include "nodes/supportnodes.h"
#include "optimizer/optimizer.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

/*
 * The value that a top-level conjunct "var = value" of the query's WHERE
 * gives var, or NULL: value is a Const, a Param or a column of an outer
 * query level, var a text column of this level, and the equality text's
 * with a deterministic collation.
 */
static Node *
equated_value(Node *quals, Var *var)
{
	if (quals == NULL)
		return NULL;
	if (IsA(quals, List))
	{
		ListCell   *lc;

		foreach(lc, (List *) quals)
		{
			Node	   *value = equated_value(lfirst(lc), var);

			if (value != NULL)
				return value;
		}
		return NULL;
	}
	if (is_andclause(quals))
		return equated_value((Node *) ((BoolExpr *) quals)->args, var);
	if (IsA(quals, OpExpr))
	{
		OpExpr	   *op = (OpExpr *) quals;

		if (op->opno == TextEqualOperator && list_length(op->args) == 2 &&
			OidIsValid(op->inputcollid) && get_collation_isdeterministic(op->inputcollid))
		{
			for (int side = 0; side < 2; side++)
			{
				Node	   *mine = strip_implicit_coercions(list_nth(op->args, side));
				Node	   *other = strip_implicit_coercions(list_nth(op->args, 1 - side));

				if (!equal(mine, var))
					continue;
				if (exprType(other) != TEXTOID)
					continue;
				if ((IsA(other, Const) && !((Const *) other)->constisnull) ||
					IsA(other, Param) ||
					(IsA(other, Var) && ((Var *) other)->varlevelsup > 0))
					return other;
			}
		}
	}
	return NULL;
}

/*
 * The same, from the conditions that hold on every row the query returns:
 * those of its WHERE and of its inner joins, and of the left side of a
 * left, semi or anti join (a NOT EXISTS becomes one: the WHERE then sits
 * below it), never of a side that an outer join may fill with NULLs.
 */
static Node *
equated_in_jointree(Node *jtnode, Var *var)
{
	Node	   *value = NULL;

	if (jtnode == NULL)
		return NULL;
	if (IsA(jtnode, FromExpr))
	{
		FromExpr   *f = (FromExpr *) jtnode;
		ListCell   *lc;

		value = equated_value(f->quals, var);
		foreach(lc, f->fromlist)
		{
			if (value != NULL)
				break;
			value = equated_in_jointree(lfirst(lc), var);
		}
	}
	else if (IsA(jtnode, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) jtnode;

		switch (j->jointype)
		{
			case JOIN_INNER:
				value = equated_value(j->quals, var);
				if (value == NULL)
					value = equated_in_jointree(j->rarg, var);
				/* FALLTHROUGH */
			case JOIN_LEFT:
			case JOIN_SEMI:
			case JOIN_ANTI:
				if (value == NULL)
					value = equated_in_jointree(j->larg, var);
				break;
			default:
				break;
		}
	}
	return value;
}

/* True if expr has no column of this query level (nor anything volatile). */
static bool
pseudo_constant(Node *expr)
{
	return !contain_vars_of_level(expr, 0) && !contain_volatile_functions(expr);
}

/*
 * keyset_support(internal) returns internal: the planner support function
 * of read_stream_id() and lane_range_end() (see the header comment).
 */
PG_FUNCTION_INFO_V1(oe_keyset_support);
Datum
oe_keyset_support(PG_FUNCTION_ARGS)
{
	Node	   *rawreq = (Node *) PG_GETARG_POINTER(0);
	SupportRequestSimplify *req;
	FuncExpr   *call;
	PlannerInfo *root;
	List	   *args = NIL;
	ListCell   *lc;
	bool		changed = false;
	bool		constant = true;
	int			n;

	if (!IsA(rawreq, SupportRequestSimplify))
		PG_RETURN_POINTER(NULL);
	req = (SupportRequestSimplify *) rawreq;
	call = req->fcall;
	root = req->root;
	if (root == NULL || root->parse == NULL || root->parse->jointree == NULL ||
		list_length(call->args) < 2)
		PG_RETURN_POINTER(NULL);

	/* every argument but "known", the last */
	n = list_length(call->args);
	foreach(lc, call->args)
	{
		Node	   *arg = lfirst(lc);

		if (foreach_current_index(lc) == n - 1)
			break;
		if (IsA(arg, Var) && ((Var *) arg)->varlevelsup == 0 &&
			((Var *) arg)->vartype == TEXTOID)
		{
			Node	   *value = equated_in_jointree((Node *) root->parse->jointree, (Var *) arg);

			if (value != NULL)
			{
				arg = copyObject(value);
				changed = true;
			}
		}
		if (!pseudo_constant(arg))
			constant = false;
		args = lappend(args, arg);
	}
	if (!changed || !constant)
		PG_RETURN_POINTER(NULL);	/* as written: the calls return "known" */

	/* known := NULL: look the value up, once, when the scan starts */
	args = lappend(args, makeNullConst(exprType(llast(call->args)), -1, InvalidOid));
	call = (FuncExpr *) copyObject(call);
	call->args = args;
	PG_RETURN_POINTER(call);
}

/*
 * A lookup's result, kept for the call site (fn_extra) for the rest of the
 * query: every row of a scan asks the same.
 */
typedef struct Lookup
{
	char	   *stream;
	char	   *arg;
	bool		isnull;
	int64		value;
} Lookup;

static Lookup *
cached(FunctionCallInfo fcinfo, const char *stream, const char *arg)
{
	Lookup	   *entry = fcinfo->flinfo->fn_extra;

	if (entry != NULL && strcmp(entry->stream, stream) == 0 && strcmp(entry->arg, arg) == 0)
		return entry;
	return NULL;
}

static Lookup *
remember(FunctionCallInfo fcinfo, const char *stream, const char *arg, bool isnull, int64 value)
{
	MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	Lookup	   *entry = fcinfo->flinfo->fn_extra;

	if (entry == NULL)
		entry = palloc0(sizeof(Lookup));
	else
	{
		pfree(entry->stream);
		pfree(entry->arg);
	}
	entry->stream = pstrdup(stream);
	entry->arg = pstrdup(arg);
	entry->isnull = isnull;
	entry->value = value;
	fcinfo->flinfo->fn_extra = entry;
	MemoryContextSwitchTo(old);
	return entry;
}

/* Whether the current role may read the stream (as may_read_stream()). */
static bool
may_read(const char *name)
{
	OeStream	stream;

	return oe_lookup_stream(name, &stream) &&
		oe_stream_privilege(&stream, GetUserId(), OE_PRIV_READ);
}

/* Run a one-column, at most one-row lookup with the query's snapshot. */
static bool
lookup(OePlan *plan, Datum *values, int64 *result, bool is_int4)
{
	OeInternalScope scope;
	bool		isnull = true;

	oe_internal_begin(&scope, oe_relations()->owner);
	oe_run_plan_snapshot(plan, values, NULL, GetActiveSnapshot());
	if (SPI_processed == 1)
	{
		Datum		value = oe_result(0, 1, &isnull);

		if (!isnull)
			*result = is_int4 ? DatumGetInt32(value) : DatumGetInt64(value);
	}
	oe_internal_end(&scope);
	return !isnull;
}

/*
 * The body of both functions below, f(stream text, arg text, known): known
 * if not NULL; else what "plan" finds for (stream, arg), for a role that
 * may read the stream, kept for the call site; NULL if nothing.
 */
static bool
known_or_looked_up(FunctionCallInfo fcinfo, OePlan *plan, bool is_int4, int64 *value)
{
	char	   *stream;
	char	   *arg;
	Lookup	   *entry;

	if (!PG_ARGISNULL(2))
	{
		*value = is_int4 ? PG_GETARG_INT32(2) : PG_GETARG_INT64(2);
		return true;
	}
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		return false;
	stream = text_to_cstring(PG_GETARG_TEXT_PP(0));
	arg = text_to_cstring(PG_GETARG_TEXT_PP(1));
	entry = cached(fcinfo, stream, arg);
	if (entry == NULL)
	{
		Datum		values[2] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)};
		int64		found_value = 0;
		bool		found = may_read(stream) && lookup(plan, values, &found_value, is_int4);

		entry = remember(fcinfo, stream, arg, !found, found_value);
	}
	*value = entry->value;
	return !entry->isnull;
}

static OePlan stream_id_plan = {
	"SELECT d.stream_id FROM ordered_events.stream_def d "
	"WHERE d.stream = $1 AND d.sequencing::text = $2",
	2, {TEXTOID, TEXTOID}
};

/*
 * read_stream_id(stream text, sequencing text, known integer) returns
 * integer: known, if not NULL; else the id of the stream if it has that
 * sequencing and the current role may read it, else NULL.
 */
PG_FUNCTION_INFO_V1(oe_read_stream_id);
Datum
oe_read_stream_id(PG_FUNCTION_ARGS)
{
	int64		id;

	if (!known_or_looked_up(fcinfo, &stream_id_plan, true, &id))
		PG_RETURN_NULL();
	PG_RETURN_INT32((int32) id);
}

static OePlan range_end_plan = {
	"SELECT coalesce(p.range_end, d.initial_sequence) "
	"FROM ordered_events.stream_def d "
	"LEFT JOIN ordered_events.progress p "
	"  ON p.stream_id = d.stream_id AND p.lane = $2 COLLATE \"C\" "
	"WHERE d.stream = $1",
	2, {TEXTOID, TEXTOID}
};

/*
 * lane_range_end(stream text, lane text, known bigint) returns bigint:
 * known, if not NULL; else the first seq of the lane not released (its
 * progress row's range_end, the stream's initial_sequence without one), or
 * NULL for a stream that does not exist or that the role may not read.
 */
PG_FUNCTION_INFO_V1(oe_lane_range_end);
Datum
oe_lane_range_end(PG_FUNCTION_ARGS)
{
	int64		range_end;

	if (!known_or_looked_up(fcinfo, &range_end_plan, false, &range_end))
		PG_RETURN_NULL();
	PG_RETURN_INT64(range_end);
}
