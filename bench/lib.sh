# Shared helpers of the benchmarks.  Sourced by bench/run and the figure
# scripts; expects the PG* variables of a running cluster and BENCH_OUT.

DB=${BENCH_DB:-bench}
psql_bench() { psql -X -q -v ON_ERROR_STOP=1 -d "$DB" "$@"; }

# Milliseconds one SQL command takes, from psql's \timing.
time_sql() {
    psql_bench -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
}

# build_latency_client: bench/latency_client.c into $out (bench/out), built
# next to the old binary and renamed, so that a concurrent run keeps its copy
build_latency_client() {
    out=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/out
    mkdir -p "$out"
    gcc -O2 -Wall -o "$out/latency_client.$$" "$(dirname "${BASH_SOURCE[0]}")/latency_client.c" \
        -I"$(pg_config --includedir)" -lpq -lm
    mv -f "$out/latency_client.$$" "$out/latency_client"
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

# Figures that compare one query on two databases of the same shapes, one
# big (BIG_DB, N) and one small (BASE_DB, BASE): bench/monitoring.sh and
# bench/backlog.sh.  They set RUNS, SLOW_MS, SLOW_BUDGET_MS and tmp, and
# define psql_db DB ARGS.

# db_times DB SQL WARM RUNS: RUNS \timing milliseconds of SQL in one session,
# after one untimed run if WARM is 1; @N@ in SQL is the events of DB's side
db_times() {
    local db=$1 sql=$2 warm=$3 runs=$4
    if [ "$db" = "$BIG_DB" ]; then sql=${sql//@N@/$N}; else sql=${sql//@N@/$BASE}; fi
    {
        echo '\o /dev/null'
        # as docs/monitoring.md sets up a monitoring role: short queries over big
        # tables are not worth JIT-compiling
        echo 'SET jit = off;'
        [ "$warm" = 1 ] && echo "$sql;"
        echo '\timing on'
        for _ in $(seq "$runs"); do echo "$sql;"; done
    } > "$tmp/q.sql"
    psql_db "$db" -f "$tmp/q.sql" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}

# db_figure FIGURE SQL: medians on both sides, ratio <= 2 and <= 10 ms on the big one
db_figure() {
    local name=$1 sql=$2 first ours=() base=() runs m_ours m_base ratio verdict
    first=$(db_times "$BIG_DB" "$sql" 0 1)
    if awk -v t="$first" -v s="$SLOW_MS" 'BEGIN {exit !(t > s)}'; then
        runs=$(awk -v t="$first" -v b="$SLOW_BUDGET_MS" -v r="$RUNS" \
                   'BEGIN {n = int(b / t); print (n < 3) ? 3 : (n > r) ? r : n}')
        ours=("$first")
        mapfile -t -O 1 ours < <(db_times "$BIG_DB" "$sql" 0 $((runs - 1)))
        mapfile -t base < <(db_times "$BASE_DB" "$sql" 1 "$RUNS")
    else
        for _ in 1 2; do
            mapfile -t -O "${#ours[@]}" ours < <(db_times "$BIG_DB" "$sql" 1 $((RUNS / 2)))
            mapfile -t -O "${#base[@]}" base < <(db_times "$BASE_DB" "$sql" 1 $((RUNS / 2)))
        done
    fi
    m_ours=$(printf '%s\n' "${ours[@]}" | median)
    m_base=$(printf '%s\n' "${base[@]}" | median)
    ratio=$(awk -v a="$m_ours" -v b="$m_base" 'BEGIN {printf "%.3f", (b == 0) ? 0 : a / b}')
    # PASS needs both targets: the ratio and the absolute time at N
    verdict=$(awk -v r="$ratio" -v a="$m_ours" 'BEGIN {
        v = (r <= 2 && a <= 10) ? "PASS" : "MISS"
        if (v == "MISS") v = v " (" ((r > 2) ? "ratio" : "") ((r > 2 && a > 10) ? ", " : "") ((a > 10) ? "10 ms" : "") ")"
        print v }')
    printf '%s\t%s ms\t%s ms\t%s\t%s\t%s\t%s (%s runs) | %s (%s runs)\n' \
        "$name" "$m_ours" "$m_base" "$ratio" "<= 2, <= 10 ms" "$verdict" \
        "$(printf '%s\n' "${ours[@]}" | spread)" "${#ours[@]}" \
        "$(printf '%s\n' "${base[@]}" | spread)" "${#base[@]}" >> "$BENCH_OUT"
    printf '  %-56s ours %s ms, baseline %s ms, ratio %s (target <= 2, <= 10 ms) %s\n' \
        "$name" "$m_ours" "$m_base" "$ratio" "$verdict"
}

# One long-lived psql session NAME, fed through a fifo in $tmp: open_session
# starts it with \timing on and runs SETUP-SQL (a PREPARE, say);
# session_sql runs SQL there and prints the sum of the \timing of its
# statements (from sending to the result, as pgbench measures);
# close_session ends it.
open_session() {   # NAME SETUP-SQL: sets the fds of the session NAME
    local in=$tmp/$1.in out=$tmp/$1.out
    mkfifo "$in" "$out"
    psql_bench -At -f "$in" > "$out" 2>&1 &
    eval "exec {${1}_r}<\"\$out\" {${1}_w}>\"\$in\""
    session_sql "$1" "\\timing on
$2" >/dev/null
}
close_session() {   # NAME
    eval "exec {${1}_w}>&- {${1}_r}<&-"
}
session_sql() {   # NAME SQL
    local r w line total=0
    eval "r=\$${1}_r w=\$${1}_w"
    printf '%s\n\\echo __done\n' "$2" >&"$w"
    while IFS= read -r line <&"$r"; do
        case $line in
            __done) echo "$total"; return 0 ;;
            Time:*) total=$(awk -v a="$total" -v b="${line#Time: }" 'BEGIN {print a + b}') ;;
            ERROR:*|psql:*) echo "session $1: $line" >&2 ;;
        esac
    done
    echo "session $1 ended" >&2
    return 1
}

# The columns of event g for a LATERAL subquery (key, payload, event_ts,
# alignment_ts), over KEYS keys (1,000 if not given): alignment_ts one
# millisecond apart in g order, event_ts up to 99 ms earlier (so the bias is
# not zero), a small payload.
events_of() {   # [KEYS]
    echo "'k' || (g % ${1:-1000}) AS key, jsonb_build_object('n', g) AS payload,
          '2026-01-01'::timestamptz + g * interval '1 ms' - (g % 100) * interval '1 ms' AS event_ts,
          '2026-01-01'::timestamptz + g * interval '1 ms' AS alignment_ts"
}
release_all() {   # STREAM: release steps until nothing is left
    psql_bench -c "DO \$\$ BEGIN WHILE ordered_events.release('$1') > 0 LOOP COMMIT; END LOOP; END \$\$"
}
