/*-------------------------------------------------------------------------
 *
 * ordered_events.c
 *	  Module initialisation of the ordered_events extension.
 *
 * _PG_init stays thin: each module registers what it needs.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	oe_catalog_init();
}
