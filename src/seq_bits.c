/*-------------------------------------------------------------------------
 *
 * seq_bits.c
 *	  The seqs a shard holds, as a bitmap: what each shard of a sharded
 *	  stream ships to its router's combine step, and the router's union of
 *	  them (docs/sharding.md, "The combine step").
 *
 * A combine step asks every shard which seqs of a window it holds, from
 * the global range's end on, and unites the answers.  The seqs of one key
 * group are spread over the window with the other shards' in between, so
 * as runs a shard's answer has about as many runs as events, and uniting
 * runs costs the router per event.  As bitmaps of the same window, one
 * bit a seq, the answers unite by OR, a byte at a time, and the union of
 * every shard's is mostly one run: the router's work per event is a
 * fraction of a byte.
 *
 * The format: bit i (byte i / 8, bit i % 8, least significant first) is
 * set if the shard holds seq from_seq + i; the bytes end at the last one
 * with a bit set, so a shard holding nothing of the window ships nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "ordered_events.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/multirangetypes.h"
#include "utils/rangetypes.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

/* The widest window a call may ask: a bitmap of 16 MB. */
#define OE_MAX_SEQ_BITS (128 * 1024 * 1024)

/*
 * shard_seq_bits(stream text, from_seq bigint, span integer,
 *				  OUT seqs bytea, OUT next_seq bigint)
 *
 * The seqs from_seq .. from_seq + span - 1 this shard holds of a sharded
 * stream, committed as of the statement's snapshot, as a bitmap (see the
 * banner); next_seq is the first seq it holds from from_seq + span on
 * (NULL: none).  Reads at most span events and one more.
 */
PG_FUNCTION_INFO_V1(oe_shard_seq_bits);
Datum
oe_shard_seq_bits(PG_FUNCTION_ARGS)
{
	OeStream	stream = oe_stream_arg(fcinfo, 0);
	int64		from;
	int32		span;
	int64		window_end;
	OeLane		lane;
	OeLaneScan	ls;
	int64		first;
	int64		last;
	const OeIsland *island;
	bytea	   *bits;
	int64		used = 0;		/* bytes up to the last one with a bit set */
	bool		have_next = false;
	int64		next_seq = 0;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	oe_check_not_null(fcinfo, 1, "from_seq");
	oe_check_not_null(fcinfo, 2, "span");
	from = PG_GETARG_INT64(1);
	span = PG_GETARG_INT32(2);
	if (span < 1 || span > OE_MAX_SEQ_BITS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("span must be between 1 and %d", OE_MAX_SEQ_BITS),
				 errdetail("It is %d.", span),
				 errhint("The router passes the stream's max_release_batch: the most seqs a combine step looks at.")));
	if (!stream.sharded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is not sharded", stream.name),
				 errhint("Only a sharded stream is combined by a router.")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "shard_seq_bits() must return a record");
	window_end = from > PG_INT64_MAX - span ? PG_INT64_MAX : from + span;

	bits = palloc0(VARHDRSZ + (span + 7) / 8);
	memset(&lane, 0, sizeof(lane));
	lane.stream = &stream;
	lane.lane = oe_lane_of(&stream, NULL);
	oe_lane_scan_begin(&ls, &lane, GetActiveSnapshot(), from, false);
	while (oe_lane_scan_next(&ls, &first, &last, &island))
	{
		int64		i = first - from;

		CHECK_FOR_INTERRUPTS();
		if (first >= window_end)
		{
			have_next = true;
			next_seq = first;
			break;
		}
		VARDATA(bits)[i / 8] |= (char) (1 << (i % 8));
		used = i / 8 + 1;
	}
	oe_lane_scan_end(&ls);
	SET_VARSIZE(bits, VARHDRSZ + used);

	values[0] = PointerGetDatum(bits);
	values[1] = Int64GetDatum(next_seq);
	nulls[1] = !have_next;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * seq_bits_runs(from_seq bigint, seqs bytea[]) returns int8multirange
 *
 * The seqs any of the bitmaps holds (shard_seq_bits() of every shard from
 * the same from_seq), as runs.  A NULL element holds nothing.  Reads
 * nothing: PUBLIC may call it.
 */
PG_FUNCTION_INFO_V1(oe_seq_bits_runs);
Datum
oe_seq_bits_runs(PG_FUNCTION_ARGS)
{
	int64		from;
	ArrayType  *array;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	int64		width = 0;
	uint8	   *all;
	TypeCacheEntry *typcache;
	RangeType **ranges;
	int			nranges = 0;
	int			max_ranges = 16;
	int64		run_start = -1;

	oe_check_not_null(fcinfo, 0, "from_seq");
	oe_check_not_null(fcinfo, 1, "seqs");
	from = PG_GETARG_INT64(0);
	array = PG_GETARG_ARRAYTYPE_P(1);
	deconstruct_array(array, BYTEAOID, -1, false, TYPALIGN_INT, &elems, &elem_nulls, &n);

	/* OR the bitmaps into one as wide as the widest */
	for (int k = 0; k < n; k++)
		if (!elem_nulls[k])
		{
			elems[k] = PointerGetDatum(PG_DETOAST_DATUM_PACKED(elems[k]));
			width = Max(width, VARSIZE_ANY_EXHDR(DatumGetPointer(elems[k])));
		}
	if (width > OE_MAX_SEQ_BITS / 8)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a bitmap of seqs must not be longer than %d bytes", OE_MAX_SEQ_BITS / 8),
				 errdetail("One is %lld bytes.", (long long) width),
				 errhint("Pass the bitmaps shard_seq_bits() returned for the same from_seq.")));
	all = palloc0(width + 1);	/* a zero byte past the end closes the last run */
	for (int k = 0; k < n; k++)
		if (!elem_nulls[k])
		{
			const uint8 *b = (const uint8 *) VARDATA_ANY(DatumGetPointer(elems[k]));
			int64		len = VARSIZE_ANY_EXHDR(DatumGetPointer(elems[k]));

			for (int64 i = 0; i < len; i++)
				all[i] |= b[i];
		}

	/* the runs, a byte at a time where a byte is all one or the other */
	typcache = lookup_type_cache(INT8RANGEOID, TYPECACHE_RANGE_INFO);
	ranges = palloc(max_ranges * sizeof(RangeType *));
	for (int64 byte = 0; byte <= width; byte++)
	{
		uint8		b = all[byte];

		if ((b == 0 && run_start < 0) || (b == 0xFF && run_start >= 0))
			continue;
		for (int bit = 0; bit < 8; bit++)
		{
			int64		i = byte * 8 + bit;
			bool		held = (b >> bit) & 1;

			if (held && run_start < 0)
				run_start = i;
			else if (!held && run_start >= 0)
			{
				RangeBound lower = {.infinite = false, .inclusive = true, .lower = true};
				RangeBound upper = {.infinite = false, .inclusive = false, .lower = false};

				if (from > 0 && i > PG_INT64_MAX - from)
					ereport(ERROR,
							(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
							 errmsg("seqs must not reach past the largest seq"),
							 errdetail("A bitmap from seq " INT64_FORMAT " holds seq " INT64_FORMAT " and more.",
									   from, PG_INT64_MAX),
							 errhint("Pass the bitmaps shard_seq_bits() returned for the same from_seq.")));
				lower.val = Int64GetDatum(from + run_start);
				upper.val = Int64GetDatum(from + i);
				if (nranges == max_ranges)
				{
					max_ranges *= 2;
					ranges = repalloc(ranges, max_ranges * sizeof(RangeType *));
				}
				ranges[nranges++] = make_range(typcache, &lower, &upper, false);
				run_start = -1;
			}
		}
	}
	PG_RETURN_MULTIRANGE_P(make_multirange(INT8MULTIRANGEOID, typcache, nranges, ranges));
}
