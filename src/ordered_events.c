/*-------------------------------------------------------------------------
 *
 * ordered_events.c
 *	  Module initialisation and configuration of the ordered_events extension.
 *
 * _PG_init stays thin: it defines the GUCs and lets each module register
 * what it needs.  Shared memory and the background workers exist only when
 * the library is in shared_preload_libraries; without it every SQL function
 * still works and release() is called by hand.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

char	   *oe_databases = NULL;
int			oe_naptime = 1000;
bool		oe_enabled = true;
int			oe_handler_timeout = 10000;
int			oe_max_processing_workers = 4;
int			oe_vacuum_after = 10000;

/* The GUCs, all reloadable; the prefix ordered_events. is reserved. */
static void
define_gucs(void)
{
	DefineCustomStringVariable("ordered_events.databases",
							   "Databases whose events the background worker releases.",
							   "A comma-separated list of database names.",
							   &oe_databases,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("ordered_events.naptime",
							"Time between two release cycles when no commit wakes the worker.",
							NULL,
							&oe_naptime,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("ordered_events.enabled",
							 "Whether the background worker releases events.",
							 NULL,
							 &oe_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("ordered_events.handler_timeout",
							"Longest time one handler call may take before it is cancelled.",
							"The event then goes to unprocessed as exception_thrown. 0 means no limit. "
							"It is the server's ceiling: a consumer's own handler_timeout and a "
							"handler function's own setting may lower it, not raise it. Only a "
							"superuser (or a role granted SET on it) may change it, also for a "
							"session; process() run by any other role uses the server's value "
							"(postgresql.conf, ALTER SYSTEM, ALTER DATABASE or ALTER ROLE), never "
							"a value SET in the session.",
							&oe_handler_timeout,
							10000, 0, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("ordered_events.max_processing_workers",
							"Most processing workers that apply handler consumers' events at once, server-wide.",
							"One worker per consumer partition with events to apply; the others "
							"wait for one to finish. Each takes one of max_worker_processes.",
							&oe_max_processing_workers,
							4, 0, OE_MAX_PROCESS_WORKERS,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("ordered_events.vacuum_after",
							"Events a release worker's retention deletes before it vacuums the tables it deleted from.",
							"The worker vacuums event_store and lane_release_log once it deleted this "
							"many events since its last vacuum, plus a fifth of the rows event_store "
							"holds. 0: never (autovacuum alone).",
							&oe_vacuum_after,
							10000, 0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("ordered_events");
}

void
_PG_init(void)
{
	/* pg_upgrade must not see a worker write to the databases it moves. */
	if (IsBinaryUpgrade)
		return;

	define_gucs();
	oe_catalog_init();
	oe_shmem_init();
	oe_wait_init();
	oe_handler_init();
	if (process_shared_preload_libraries_in_progress)
		oe_worker_init();
}
