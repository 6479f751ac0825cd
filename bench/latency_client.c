/*
 * latency_client.c -- end-to-end latency probes for bench/latency.sh and
 * bench/pgq.sh.  Not part of the extension; compiled by the scripts into
 * bench/out/ with  gcc -O2 -I$(pg_config --includedir) ... -lpq.
 *
 *   latency_client notify STREAM FIRST_SEQ TRIALS WARMUP SAMPLES_FILE
 *     ordered_events: one connection LISTENs on channel ordered_events.
 *     Per trial another connection (autocommit) ingests seq N+1 of global
 *     stream STREAM (pending: N is missing), then the gap-filling seq N, and
 *     takes t0 right after that COMMIT returns.  The listener waits
 *     (select() on PQsocket, PQconsumeInput, PQnotifies) for the worker's
 *     NOTIFY '<STREAM>:<range_end>' with range_end >= N + 2 and takes t1.
 *
 *   latency_client read STREAM CONSUMER FIRST_SEQ TRIALS WARMUP SAMPLES_FILE
 *     A waiting read: per trial the producer ingests seq N+1 (pending), the
 *     reader sends read(CONSUMER, 100, 0, wait => '10 s') and the producer
 *     waits until pg_stat_activity shows it sleeping (wait_event_type
 *     'Extension'), then commits the gap-filling seq N and takes t0; t1 is
 *     when the read's rows arrive.  The worker's release step commits and
 *     its commit wakes the read (src/wait.c).
 *
 *   latency_client pgq QUEUE CONSUMER TRIALS WARMUP SAMPLES_FILE MAX_SPACING_MS POLL_MS
 *     PgQ: per trial sleep a random 0..MAX_SPACING_MS (so the probe lands
 *     at a random phase of the ticker cycle), insert one event with
 *     pgq.insert_event() (autocommit) and take t0 when the COMMIT returns.
 *     The consumer connection polls pgq.next_batch() every POLL_MS, reads
 *     every batch it gets with pgq.get_batch_events(), finishes it, and
 *     takes t1 when a batch holds the probe.  PgQ has no wake-up, so
 *     polling is what its consumers do; a 1 ms poll is its best case.
 *
 * Both connect with the PG* environment (dbname from BENCH_DB, default
 * bench).  The latencies (ms) of the measured trials, warm-up excluded, go
 * to SAMPLES_FILE one per line; stdout gets one summary line:
 *   n=1000 p50=1.234 p95=2.345 p99=3.456 max=9.876 timeouts=0
 * A trial that waits more than 10 s (30 s for pgq) counts as a timeout with
 * that latency; three timeouts in a row abort (exit 2): the worker or the
 * ticker is not running.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
die(PGconn *conn, const char *what)
{
	fprintf(stderr, "latency_client: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

static PGconn *
connect_db(void)
{
	const char *db = getenv("BENCH_DB");
	char		conninfo[256];
	PGconn	   *conn;

	snprintf(conninfo, sizeof(conninfo), "dbname=%s application_name=latency_client",
			 db && *db ? db : "bench");
	conn = PQconnectdb(conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
		die(conn, "connect");
	return conn;
}

/* Run a command; die unless it returns the expected status. */
static PGresult *
exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "latency_client: %s: %s", sql, PQerrorMessage(conn));
		exit(1);
	}
	return res;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array */
static double
pct(const double *v, int n, double p)
{
	int			rank = (int) ceil(p / 100.0 * n);

	if (rank < 1)
		rank = 1;
	return v[rank - 1];
}

/* The latencies of the measured trials, and the timeouts. */
typedef struct Trials
{
	double	   *lat;
	int			n;
	int			timeouts;
	int			in_a_row;		/* consecutive timeouts */
} Trials;

/*
 * Record trial number t (t1 < 0: it timed out after timeout_ms); warm-up
 * trials are not kept.  Returns false after three timeouts in a row.
 */
static bool
record_trial(Trials *tr, int t, int warmup, double t0, double t1, double timeout_ms)
{
	if (t1 < 0)
	{
		tr->timeouts++;
		t1 = t0 + timeout_ms;
		if (++tr->in_a_row >= 3)
			return false;
	}
	else
		tr->in_a_row = 0;
	if (t >= warmup)
		tr->lat[tr->n++] = t1 - t0;
	return true;
}

static void
summarize(double *lat, int n, int timeouts, const char *samples_file)
{
	FILE	   *f = fopen(samples_file, "w");

	if (!f)
	{
		perror(samples_file);
		exit(1);
	}
	for (int i = 0; i < n; i++)
		fprintf(f, "%.3f\n", lat[i]);
	fclose(f);
	qsort(lat, n, sizeof(double), cmp_double);
	printf("n=%d p50=%.3f p95=%.3f p99=%.3f max=%.3f timeouts=%d\n",
		   n, pct(lat, n, 50), pct(lat, n, 95), pct(lat, n, 99), lat[n - 1], timeouts);
}

/*
 * Wait until a notification on 'ordered_events' names STREAM with a
 * range_end >= want.  Returns the arrival time, or -1 after timeout_ms.
 */
static double
wait_notify(PGconn *listener, const char *stream, long long want, double deadline)
{
	size_t		len = strlen(stream);
	int			sock = PQsocket(listener);

	for (;;)
	{
		PGnotify   *n;
		double		left;
		fd_set		rfds;
		struct timeval tv;

		if (!PQconsumeInput(listener))
			die(listener, "consume input");
		while ((n = PQnotifies(listener)) != NULL)
		{
			int			hit = strcmp(n->relname, "ordered_events") == 0 &&
				strncmp(n->extra, stream, len) == 0 && n->extra[len] == ':' &&
				atoll(n->extra + len + 1) >= want;

			PQfreemem(n);
			if (hit)
				return now_ms();
		}
		left = deadline - now_ms();
		if (left <= 0)
			return -1;
		FD_ZERO(&rfds);
		FD_SET(sock, &rfds);
		tv.tv_sec = (long) (left / 1000);
		tv.tv_usec = (long) (fmod(left, 1000.0) * 1000);
		if (select(sock + 1, &rfds, NULL, NULL, &tv) < 0 && errno != EINTR)
		{
			perror("select");
			exit(1);
		}
	}
}

static int
run_notify(int argc, char **argv)
{
	const char *stream;
	long long	seq;
	int			trials,
				warmup;
	Trials		tr = {0};
	PGconn	   *listener,
			   *producer;
	const char *ingest = "SELECT ordered_events.ingest($1, $2::bigint, 'k', '{\"n\": 1}')::text";

	if (argc != 7)
	{
		fprintf(stderr, "usage: latency_client notify STREAM FIRST_SEQ TRIALS WARMUP SAMPLES_FILE\n");
		return 1;
	}
	stream = argv[2];
	seq = atoll(argv[3]);
	trials = atoi(argv[4]);
	warmup = atoi(argv[5]);
	tr.lat = calloc(trials, sizeof(double));

	listener = connect_db();
	producer = connect_db();
	PQclear(exec_ok(listener, "LISTEN ordered_events", 0, NULL));

	for (int t = 0; t < warmup + trials; t++, seq += 2)
	{
		char		s_hi[32],
					s_lo[32];
		const char *p_hi[2] = {stream, s_hi};
		const char *p_lo[2] = {stream, s_lo};
		PGresult   *res;
		double		t0,
					t1;

		snprintf(s_lo, sizeof(s_lo), "%lld", seq);
		snprintf(s_hi, sizeof(s_hi), "%lld", seq + 1);

		/* seq N+1 first: pending behind the gap at N */
		res = exec_ok(producer, ingest, 2, p_hi);
		if (strcmp(PQgetvalue(res, 0, 0), "accepted") != 0)
		{
			fprintf(stderr, "latency_client: ingest %s: %s\n", s_hi, PQgetvalue(res, 0, 0));
			return 1;
		}
		PQclear(res);
		/* the gap-filling seq N; autocommit, so t0 is right after its COMMIT */
		res = exec_ok(producer, ingest, 2, p_lo);
		t0 = now_ms();
		if (strcmp(PQgetvalue(res, 0, 0), "accepted") != 0)
		{
			fprintf(stderr, "latency_client: ingest %s: %s\n", s_lo, PQgetvalue(res, 0, 0));
			return 1;
		}
		PQclear(res);

		t1 = wait_notify(listener, stream, seq + 2, t0 + 10000);
		if (!record_trial(&tr, t, warmup, t0, t1, 10000))
		{
			fprintf(stderr, "latency_client: no NOTIFY for 3 trials in a row: is the worker running?\n");
			return 2;
		}
	}
	summarize(tr.lat, tr.n, tr.timeouts, argv[6]);
	PQfinish(listener);
	PQfinish(producer);
	return 0;
}

static int
run_read(int argc, char **argv)
{
	const char *stream,
			   *consumer;
	long long	seq;
	int			trials,
				warmup;
	Trials		tr = {0};
	PGconn	   *reader,
			   *producer;
	PGresult   *res;
	char		reader_pid[32];
	const char *p_pid[1] = {reader_pid};
	const char *ingest = "SELECT ordered_events.ingest($1, $2::bigint, 'k', '{\"n\": 1}')::text";

	if (argc != 8)
	{
		fprintf(stderr, "usage: latency_client read STREAM CONSUMER FIRST_SEQ TRIALS WARMUP SAMPLES_FILE\n");
		return 1;
	}
	stream = argv[2];
	consumer = argv[3];
	seq = atoll(argv[4]);
	trials = atoi(argv[5]);
	warmup = atoi(argv[6]);
	tr.lat = calloc(trials, sizeof(double));

	reader = connect_db();
	producer = connect_db();
	res = exec_ok(reader, "SELECT pg_backend_pid()", 0, NULL);
	snprintf(reader_pid, sizeof(reader_pid), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	for (int t = 0; t < warmup + trials; t++, seq += 2)
	{
		char		s_hi[32],
					s_lo[32];
		const char *p_hi[2] = {stream, s_hi};
		const char *p_lo[2] = {stream, s_lo};
		const char *p_read[1] = {consumer};
		double		t0,
					t1;
		bool		sleeping = false;

		snprintf(s_lo, sizeof(s_lo), "%lld", seq);
		snprintf(s_hi, sizeof(s_hi), "%lld", seq + 1);
		PQclear(exec_ok(producer, ingest, 2, p_hi));

		if (!PQsendQueryParams(reader,
							   "SELECT count(*) FROM ordered_events.read($1, 100, 0, wait => '10 s')",
							   1, NULL, p_read, NULL, NULL, 0))
			die(reader, "send read");
		for (int i = 0; i < 100000 && !sleeping; i++)
		{
			res = exec_ok(producer,
						  "SELECT wait_event_type = 'Extension' FROM pg_catalog.pg_stat_activity "
						  "WHERE pid = $1::integer", 1, p_pid);
			sleeping = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
			PQclear(res);
		}
		if (!sleeping)
		{
			fprintf(stderr, "latency_client: the read does not sleep\n");
			return 2;
		}

		PQclear(exec_ok(producer, ingest, 2, p_lo));
		t0 = now_ms();
		res = PQgetResult(reader);
		t1 = now_ms();
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die(reader, "read");
		if (atoi(PQgetvalue(res, 0, 0)) < 1)
			t1 = -1;			/* it waited 10 s for nothing */
		PQclear(res);
		while ((res = PQgetResult(reader)) != NULL)
			PQclear(res);
		if (!record_trial(&tr, t, warmup, t0, t1, 10000))
		{
			fprintf(stderr, "latency_client: no read woken for 3 trials in a row: is the worker running?\n");
			return 2;
		}
	}
	summarize(tr.lat, tr.n, tr.timeouts, argv[7]);
	PQfinish(reader);
	PQfinish(producer);
	return 0;
}

static int
run_pgq(int argc, char **argv)
{
	const char *queue,
			   *consumer;
	int			trials,
				warmup,
				spacing_ms,
				poll_ms;
	Trials		tr = {0};
	PGconn	   *cons,
			   *producer;

	if (argc != 9)
	{
		fprintf(stderr, "usage: latency_client pgq QUEUE CONSUMER TRIALS WARMUP SAMPLES_FILE MAX_SPACING_MS POLL_MS\n");
		return 1;
	}
	queue = argv[2];
	consumer = argv[3];
	trials = atoi(argv[4]);
	warmup = atoi(argv[5]);
	spacing_ms = atoi(argv[7]);
	poll_ms = atoi(argv[8]);
	tr.lat = calloc(trials, sizeof(double));
	srandom((unsigned) getpid());

	cons = connect_db();
	producer = connect_db();

	for (int t = 0; t < warmup + trials; t++)
	{
		char		probe[32];
		const char *p_ins[2] = {queue, probe};
		const char *p_next[2] = {queue, consumer};
		double		t0,
					t1 = -1;

		if (spacing_ms > 0)
			usleep((useconds_t) (random() % (spacing_ms * 1000L + 1)));
		snprintf(probe, sizeof(probe), "probe %d %d", (int) getpid(), t);
		PQclear(exec_ok(producer, "SELECT pgq.insert_event($1, 'probe', $2)", 2, p_ins));
		t0 = now_ms();

		while (t1 < 0)
		{
			PGresult   *res = exec_ok(cons, "SELECT pgq.next_batch($1, $2)", 2, p_next);

			if (PQgetisnull(res, 0, 0))
			{
				PQclear(res);
				if (now_ms() - t0 > 30000)
					break;
				usleep(poll_ms * 1000);
				continue;
			}
			else
			{
				char		batch[32];
				const char *p_batch[2] = {batch, probe};
				PGresult   *found;
				int			hit;

				snprintf(batch, sizeof(batch), "%s", PQgetvalue(res, 0, 0));
				PQclear(res);
				found = exec_ok(cons,
								"SELECT count(*) FROM pgq.get_batch_events($1::bigint) "
								"WHERE ev_type = 'probe' AND ev_data = $2", 2, p_batch);
				hit = atoi(PQgetvalue(found, 0, 0)) > 0;
				PQclear(found);
				if (hit)
					t1 = now_ms();
				PQclear(exec_ok(cons, "SELECT pgq.finish_batch($1::bigint)", 1, p_batch));
			}
		}
		if (!record_trial(&tr, t, warmup, t0, t1, 30000))
		{
			fprintf(stderr, "latency_client: no batch for 3 trials in a row: is pgqd running?\n");
			return 2;
		}
	}
	summarize(tr.lat, tr.n, tr.timeouts, argv[6]);
	PQfinish(cons);
	PQfinish(producer);
	return 0;
}

int
main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && strcmp(argv[1], "notify") == 0)
		return run_notify(argc, argv);
	if (argc > 1 && strcmp(argv[1], "read") == 0)
		return run_read(argc, argv);
	if (argc > 1 && strcmp(argv[1], "pgq") == 0)
		return run_pgq(argc, argv);
	fprintf(stderr, "usage: latency_client notify|read|pgq ...\n");
	return 1;
}
