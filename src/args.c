/*-------------------------------------------------------------------------
 *
 * args.c
 *	  Checks of SQL functions' arguments shared by the C functions: the
 *	  errors for a NULL, and for a stream argument that names none.
 *
 * No state and no locks; the messages live here once.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

/* The argument's error for a NULL. */
void
oe_check_not_null(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("Pass a value, or leave out an argument that has a default.")));
}

/*
 * The stream named by argument "argno" of a SQL function, or the error for
 * a NULL or unknown stream: the one place of these messages for the
 * functions whose only key is the stream.
 */
OeStream
oe_stream_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream must not be null"),
				 errhint("Name a stream; see ordered_events.streams for the existing ones.")));
	return oe_stream_or_error(PG_GETARG_TEXT_PP(argno));
}
