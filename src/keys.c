/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Event keys: their limit, the lane a key's event goes to, the hash
 *	  that picks a key's consumer partition (key_partition()), and the hash
 *	  tables of per-key state that steps keep (oe_key_table()).
 *
 * No state but the one empty lane text; no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_collation.h"
#include "common/hashfn.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* Fail unless the key fits; seq, if known, goes into the detail. */
void
oe_check_key(const OeStream *stream, text *key, const int64 *seq)
{
	oe_check_key_of(stream->name, key, seq);
}

/* The same check for a stream known by its name only (a router's batch). */
void
oe_check_key_of(const char *stream, text *key, const int64 *seq)
{
	if (VARSIZE_ANY_EXHDR(key) > OE_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("key of %zu bytes is too long", VARSIZE_ANY_EXHDR(key)),
				 seq ? errdetail("Stream \"%s\", seq " INT64_FORMAT ".", stream, *seq)
				 : errdetail("Stream \"%s\".", stream),
				 errhint("A key has at most %d bytes; use a hash of a longer identifier.",
						 OE_MAX_KEY_BYTES)));
}

/* The lane of an event of the stream with this key: '' or the key. */
text *
oe_lane_of(const OeStream *stream, text *key)
{
	static text *global_lane = NULL;

	if (stream->per_key)
		return key;
	if (global_lane == NULL)
	{
		global_lane = (text *) MemoryContextAlloc(TopMemoryContext, VARHDRSZ);
		SET_VARSIZE(global_lane, VARHDRSZ);
	}
	return global_lane;
}

/* The hash key_partition() takes a key's partition from. */
uint64
oe_key_hash(text *key)
{
	return (uint64) DatumGetInt64(DirectFunctionCall2Coll(hashtextextended, C_COLLATION_OID,
														  PointerGetDatum(key),
														  Int64GetDatum(0)))
		& (uint64) PG_INT64_MAX;
}

/*
 * key_partition(key text, partitions integer) returns integer
 */
PG_FUNCTION_INFO_V1(oe_key_partition);
Datum
oe_key_partition(PG_FUNCTION_ARGS)
{
	int32		partitions;

	oe_check_not_null(fcinfo, 0, "key");
	oe_check_not_null(fcinfo, 1, "partitions");
	partitions = PG_GETARG_INT32(1);
	if (partitions < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for partitions: %d", partitions),
				 errhint("Use a positive number of partitions.")));
	PG_RETURN_INT32(oe_partition_of(oe_key_hash(PG_GETARG_TEXT_PP(0)), partitions));
}

/* Hash tables by key: the entry's first field is the key, a text pointer. */
static uint32
key_hash(const void *key, Size keysize)
{
	const text *t = *(text *const *) key;

	return hash_bytes((const unsigned char *) VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

static int
key_match(const void *key1, const void *key2, Size keysize)
{
	const text *a = *(text *const *) key1;
	const text *b = *(text *const *) key2;

	if (VARSIZE_ANY_EXHDR(a) != VARSIZE_ANY_EXHDR(b))
		return 1;
	return memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a));
}

/*
 * A hash table of entries of entrysize bytes whose first field is a key
 * (text *), in memory context cxt: the per-key state of a step.
 */
HTAB *
oe_key_table(const char *name, long nelem, Size entrysize, MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(text *);
	ctl.entrysize = entrysize;
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = cxt;
	return hash_create(name, nelem, &ctl, HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}
