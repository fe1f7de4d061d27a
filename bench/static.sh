#!/usr/bin/env bash
# bench/static.sh — static-file throughput, p99 latency and server CPU per request:
# modus (--model pool) against nginx, measured in the same run, interleaved.
#
# Usage:
#   bench/static.sh                              # full run: 10 s per measurement, 3 rounds
#   DURATION=2s ROUNDS=1 bench/static.sh         # smoke run
#   SERVERS=nginx DURATION=2s ROUNDS=1 bench/static.sh
#   MODUS_ARGS='--threads 64' bench/static.sh
#
# Environment knobs (defaults in brackets):
#   DURATION    wrk duration per measured run            [10s]
#   WARMUP      wrk warm-up before every measured run    [1s]   (0 disables)
#   ROUNDS      interleaved rounds; medians are reported [3]
#   CONNS       wrk connections                          [50]
#   SIZES       file sizes, B or KB (1 KB = 1024 B)      ["500B 50KB 115KB"]
#   MODES       keepalive and/or close                   ["keepalive close"]
#   SERVERS     modus and/or nginx                       ["modus nginx"]
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   MODUS_ARGS  extra arguments for `modus serve`        [""]
#   NGINX_BIN   nginx binary                             [nginx]
#   NGINX_EXTRA directives added to nginx's server{} block, e.g. 'open_file_cache max=100;' [""]
#   SERVER_CPU  CPU the servers are pinned to            [0]
#   LOAD_CPU    CPU wrk is pinned to                     [1]
#   NOISE_PCT   other jobs' CPU use (% of a core) that counts as noise [5]
#   QUIET_TIMEOUT  before each run, wait up to this many s for other jobs to go quiet [60]
#   RETRY_NOISY    re-measure a run up to this many times if it was noisy [2]
#   NOISE_BUDGET   total s the whole run may spend waiting and re-measuring [900]
#   BENCH_MD    markdown file to update, "off" to skip   [<repo>/BENCHMARKS.md]
#   RESULTS_DIR raw output directory                     [<repo>/bench/results/<timestamp>]
#
# Server CPU µs/request = (utime+stime of the server's process tree, /proc/PID/stat fields 14-17,
# after − before) ÷ requests wrk completed.  For nginx that is master + worker.
# Shared functions (CPU accounting, noise guard, wrk runs, report helpers) live in bench/lib.sh.
# Exit status: 0 on success, 1 if any run saw socket errors or non-2xx/3xx answers (rows marked),
# 2 on a setup failure.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

SERVERS=${SERVERS:-modus nginx}
MODUS_ARGS=${MODUS_ARGS:-}
NGINX_BIN=${NGINX_BIN:-nginx}
NGINX_EXTRA=${NGINX_EXTRA:-}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$STAMP}

BENCH_TAG=static.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"   # log, die, units, CPU accounting, noise guard, wrk runs
file_run_defaults
pin_and_noise_defaults

# ---------------------------------------------------------------- checks

command -v wrk >/dev/null || die "wrk not found (apt-get install -y wrk)"
command -v taskset >/dev/null || die "taskset not found"
command -v curl >/dev/null || die "curl not found"
[ "$(nproc)" -gt "$LOAD_CPU" ] || log "warning: CPU $LOAD_CPU does not exist here; pinning will fail"
case " $SERVERS " in *" nginx "*) command -v "$NGINX_BIN" >/dev/null || die "nginx not found (apt-get install -y nginx)";; esac
for m in $MODES; do
    case $m in keepalive|close) ;; *) die "MODES: unknown mode '$m' (keepalive, close)";; esac
done
for s in $SERVERS; do
    case $s in modus|nginx) ;; *) die "SERVERS: unknown server '$s' (modus, nginx)";; esac
done
run_lengths
make_workdir static

MODUS_PID=
NGINX_PID=
cleanup() {
    stop_pid "$MODUS_PID" modus
    stop_pid "$NGINX_PID" nginx
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- docroot

# Deterministic ASCII content; the same files are served by both servers.
declare -A FILE_OF=()
# shellcheck disable=SC2086  # word splitting intended: space-separated list
make_docroot "$DOCROOT" $SIZES

# ---------------------------------------------------------------- servers

declare -A PORT_OF=() PID_OF=() LOG_OF=()
ALL_ARGS_MODUS=""
NGINX_CMD=""

start_modus() {
    ensure_modus_bin
    local port extra
    local -a extra_args=()
    port=$(free_port 18080)
    read -r -a extra_args <<<"$MODUS_ARGS"
    # Lift the keep-alive request cap, as for nginx (keepalive_requests), unless MODUS_ARGS sets it.
    case " $MODUS_ARGS " in
        *" --max-keepalive-requests"*) ;;
        *) extra_args=(--max-keepalive-requests 100000000 "${extra_args[@]}") ;;
    esac
    LOG_OF[modus]=$WORK/modus-access.log
    extra=${extra_args[*]:-}
    ALL_ARGS_MODUS="serve DOCROOT --listen 127.0.0.1:$port --model pool --access-log ACCESS_LOG${extra:+ $extra}"
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --model pool \
        --access-log "${LOG_OF[modus]}" "${extra_args[@]}" \
        >"$RESULTS_DIR/modus.stdout" 2>"$RESULTS_DIR/modus.stderr" &
    MODUS_PID=$!
    local line addr
    line=$(wait_modus_listening "$MODUS_PID" "$RESULTS_DIR/modus.stdout" "$RESULTS_DIR/modus.stderr") || exit 2
    addr=$(awk '{ print $3 }' <<<"$line")
    PORT_OF[modus]=${addr##*:}
    PID_OF[modus]=$MODUS_PID
    log "modus: $line"
}

start_nginx() {
    local port conf=$WORK/nginx.conf
    port=$(free_port 18180)
    LOG_OF[nginx]=$WORK/nginx-access.log
    nginx_conf "$port" "${LOG_OF[nginx]}" 16384 8192 "$NGINX_EXTRA" "$(nginx_mime)" "keepalive_timeout 75s;" >"$conf"
    cp "$conf" "$RESULTS_DIR/nginx.conf"
    check_nginx_conf "$conf" "$NGINX_BIN"
    NGINX_CMD="taskset -c $SERVER_CPU nginx -p WORK -e WORK/nginx-error.log -c WORK/nginx.conf"
    taskset -c "$SERVER_CPU" "$NGINX_BIN" -p "$WORK" -e "$WORK/nginx-error.log" -c "$conf" \
        >"$RESULTS_DIR/nginx.stdout" 2>"$RESULTS_DIR/nginx.stderr" &
    NGINX_PID=$!
    local i
    for i in $(seq 1 100); do
        if [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && [ -n "$(ps -o pid= --ppid "$NGINX_PID" 2>/dev/null)" ]; then
            break
        fi
        kill -0 "$NGINX_PID" 2>/dev/null || { cat "$WORK/nginx-error.log" >&2 2>/dev/null || true; die "nginx exited at startup"; }
        sleep 0.1
    done
    [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] || die "nginx is not listening on $port"
    PORT_OF[nginx]=$port
    PID_OF[nginx]=$NGINX_PID
    log "nginx: listening on 127.0.0.1:$port pid=$NGINX_PID (master) + worker $(ps -o pid= --ppid "$NGINX_PID" | tr -d ' ')"
}

for s in $SERVERS; do "start_$s"; done

# ---------------------------------------------------------------- pre-flight

# Every server must answer 200 with the exact bytes, with and without keep-alive.
for s in $SERVERS; do check_serves_files "$s"; done
log "pre-flight ok: every server serves every file byte-exactly"

# ---------------------------------------------------------------- measurement

measure_file_cases 0

# ---------------------------------------------------------------- report

has() { case " $SERVERS " in *" $1 "*) return 0 ;; esac; return 1; }

any_err=0
TABLE=$WORK/table.md
{
    echo "| case | modus req/s | nginx req/s | ratio | modus p99 ms | nginx p99 ms | modus µs/req CPU | nginx µs/req CPU |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for c in "${CASES[@]}"; do
        label=$(case_label "$c")
        mark=""
        for s in modus nginx; do
            if has "$s" && [ "${ERRS[$s|$c]:-0}" -gt 0 ]; then
                mark="$mark **ERRORS: $s ${ERRS[$s|$c]}**"; any_err=1
            fi
        done
        for s in modus nginx; do
            if has "$s" && [ "${NOISY_OF[$s|$c]:-0}" -gt 0 ]; then mark="$mark †"; break; fi
        done
        m_rps=nan; n_rps=nan; m_p99=nan; n_p99=nan; m_us=nan; n_us=nan
        if has modus; then m_rps=$(med_of RPS "modus|$c"); m_p99=$(med_of P99 "modus|$c"); m_us=$(med_of USR "modus|$c"); fi
        if has nginx; then n_rps=$(med_of RPS "nginx|$c"); n_p99=$(med_of P99 "nginx|$c"); n_us=$(med_of USR "nginx|$c"); fi
        ratio=$(awk -v a="$m_rps" -v b="$n_rps" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "—"; else printf "%.2f", a / b }')
        echo "| $label$mark | $(fmt_int "$m_rps") | $(fmt_int "$n_rps") | $ratio | $(fmt_2 "$m_p99") | $(fmt_2 "$n_p99") | $(fmt_1 "$m_us") | $(fmt_1 "$n_us") |"
    done
} >"$TABLE"

UTIL=$WORK/util.md
{
    echo "| case | modus: server core / load core busy % | nginx: server core / load core busy % |"
    echo "|---|---:|---:|"
    for c in "${CASES[@]}"; do
        label=$(case_label "$c" short)
        cells=""
        for s in modus nginx; do
            if has "$s"; then
                cells="$cells | $(fmt_int "$(med_of BUSY_S "$s|$c")") / $(fmt_int "$(med_of BUSY_L "$s|$c")")"
            else
                cells="$cells | —"
            fi
        done
        echo "| $label$cells |"
    done
} >"$UTIL"

NGINX_VER=$({ "$NGINX_BIN" -v 2>&1 || true; } | sed -n '1s/^nginx version: //p')
WRK_VER=$({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $2 }')   # wrk -v exits 1
MODUS_VER="modus not run"
if has modus; then
    MODUS_VER=$({ "$MODUS_BIN" --version 2>/dev/null || true; } | head -n 1)
    MODUS_VER=${MODUS_VER:-modus (version unknown)}
fi
CMDLINE="DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS CONNS=$CONNS SIZES='$SIZES' MODES='$MODES' SERVERS='$SERVERS'"
[ -n "$MODUS_ARGS" ] && CMDLINE="$CMDLINE MODUS_ARGS='$MODUS_ARGS'"
CMDLINE="$CMDLINE bench/static.sh"
wrk_cmd="taskset -c $LOAD_CPU wrk -t1 -c$CONNS -d$DURATION --latency [-H 'Connection: close'] URL"

BLOCK=$WORK/block.md
{
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') — $(machine_label)"
    echo
    echo "- $NGINX_VER; wrk $WRK_VER; $MODUS_VER, git $(git_rev_label)"
    echo "- command: \`$CMDLINE\` ($ELAPSED s)"
    if has modus; then echo "- modus: \`taskset -c $SERVER_CPU modus $ALL_ARGS_MODUS\`"; fi
    if has nginx; then echo "- nginx: \`$NGINX_CMD\` — 1 worker (+ master), \`sendfile on; tcp_nopush on; keepalive_requests 100000000;\`, access log on (combined format, unbuffered)"; fi
    if [ "$WARM_S" -gt 0 ]; then warm_txt="$WARMUP warm-up before every run"; else warm_txt="no warm-up"; fi
    echo "- load: \`$wrk_cmd\`, $warm_txt; $ROUNDS interleaved round(s), server order alternating; medians of the rounds"
    echo "- files: $(for sz in $SIZES; do printf '%s (%s bytes) ' "$(size_label "$sz")" "$(to_bytes "$sz")"; done)— 1 KB = 1024 B, same docroot for both servers"
    echo "- raw wrk output: \`bench/results/$(basename "$RESULTS_DIR")/\` (git-ignored)"
    echo
    cat "$TABLE"
    echo
    if [ "$NOISY" -gt 0 ]; then echo "† at least one run of this case had other jobs using ≥ $NOISE_PCT % of a core."; echo; fi
    echo "ratio = modus req/s ÷ nginx req/s. µs/req CPU = busy time of the server's processes (all threads; nginx master + worker) ÷ requests completed."
    echo
    echo "Core utilisation during the measured runs (median; server core = CPU $SERVER_CPU, load core = CPU $LOAD_CPU). A load core near 100 % with a server core below it means the generator, not the server, set the req/s."
    echo
    cat "$UTIL"
    echo
    echo "Each run waits until other jobs use < $NOISE_PCT % of a core (up to $QUIET_TIMEOUT s) and is re-measured (up to $RETRY_NOISY times) if they used more during it, within a budget of $NOISE_BUDGET s; $RETRIED run(s) were re-measured, $SPENT_ON_NOISE s spent."
    if [ "$NOISY" -gt 0 ]; then
        echo
        echo "**$NOISY of $total_runs runs had other jobs using ≥ $NOISE_PCT % of a core (column \`other_jobs_pct\` in \`runs.csv\`): treat those figures with care.**"
    fi
    if [ "$any_err" -ne 0 ]; then
        echo
        echo "**Some runs reported socket errors or non-2xx/3xx answers — see \`runs.csv\` in the raw output.**"
    fi
} >"$BLOCK"

if [ "$BENCH_MD" != off ] && [ ! -f "$BENCH_MD" ]; then
    cat >"$BENCH_MD" <<'EOF'
# Benchmarks

## Static files: modus vs nginx

`bench/static.sh` serves the same three files (500 B, 50 KB, 115 KB — the sizes used in the papers modus
re-examines) from modus (`--model pool`) and from nginx, with keep-alive and with `Connection: close`, in the
same run, and reports requests/s, p99 latency and server CPU time per request.

<!-- static:begin -->
<!-- static:end -->
EOF
fi
publish_block "$BLOCK" static

if [ "$any_err" -ne 0 ]; then
    log "FAILED: some runs reported socket errors or non-2xx/3xx answers (rows marked)"
    exit 1
fi
