# Shared helpers of the benchmarks.  Sourced by bench/run and the figure
# scripts; expects the PG* variables of a running cluster and BENCH_OUT.

DB=${BENCH_DB:-bench}
psql_bench() { psql -X -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

# Milliseconds one SQL command takes, from psql's \timing.
time_sql() {
    psql_bench -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
}

# median and spread (min..max) of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
spread() { sort -g | awk 'NR==1{min=$1} {max=$1} END {printf "%s..%s", min, max}'; }

# report FIGURE OURS BASELINE UNIT TARGET_OP TARGET SPREAD_OURS SPREAD_BASE
#   ratio = ours / baseline; verdict compares the ratio with the target.
report() {
    local ratio verdict
    ratio=$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.3f", (b == 0) ? 0 : a / b}')
    verdict=$(awk -v r="$ratio" -v op="$5" -v t="$6" \
        'BEGIN {ok = (op == ">=") ? r >= t : r <= t; print ok ? "PASS" : "MISS"}')
    printf '%s\t%s %s\t%s %s\t%s\t%s %s\t%s\t%s | %s\n' \
        "$1" "$2" "$4" "$3" "$4" "$ratio" "$5" "$6" "$verdict" "${7:-}" "${8:-}" >> "$BENCH_OUT"
    printf '  %-46s ours %s %s, baseline %s %s, ratio %s (target %s %s) %s\n' \
        "$1" "$2" "$4" "$3" "$4" "$ratio" "$5" "$6" "$verdict"
}

# rounds: quick runs fewer and shorter rounds
if [ "${BENCH_MODE:-quick}" = full ]; then
    ROUNDS=5; PGBENCH_SECONDS=15; BULK_ROWS=1000000; IDLE_KEYS=1000000
else
    ROUNDS=3; PGBENCH_SECONDS=5; BULK_ROWS=200000; IDLE_KEYS=100000
fi

# set_worker on|off: the background worker of the bench database
set_worker() {
    psql_bench -c "ALTER SYSTEM SET ordered_events.enabled = $1" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 0.5
}
