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

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
SIZES=${SIZES:-500B 50KB 115KB}
MODES=${MODES:-keepalive close}
SERVERS=${SERVERS:-modus nginx}
MODUS_ARGS=${MODUS_ARGS:-}
NGINX_BIN=${NGINX_BIN:-nginx}
NGINX_EXTRA=${NGINX_EXTRA:-}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$STAMP}

CLK_TCK=$(getconf CLK_TCK)

BENCH_TAG=static.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"   # log, die, units, CPU accounting, noise guard, wrk runs

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
[ "$ROUNDS" -ge 1 ] || die "ROUNDS must be >= 1"

DUR_S=$(to_seconds "$DURATION")
WARM_S=$(to_seconds "$WARMUP")

mkdir -p "$RESULTS_DIR"
WORK=$(mktemp -d /tmp/modus-static.XXXXXX)
DOCROOT=$WORK/www
mkdir -p "$DOCROOT"

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
    local port user_line="" conf=$WORK/nginx.conf
    port=$(free_port 18180)
    LOG_OF[nginx]=$WORK/nginx-access.log
    mkdir -p "$WORK/nginx-tmp"
    if [ "$(id -u)" -eq 0 ]; then user_line="user root;"; fi
    local mime=/etc/nginx/mime.types
    local mime_line="include $mime;"
    [ -r "$mime" ] || mime_line="types { text/plain txt; }"
    cat >"$conf" <<EOF
# generated by bench/static.sh
$user_line
worker_processes 1;
daemon off;
master_process on;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
worker_rlimit_nofile 16384;

events {
    worker_connections 8192;
}

http {
    $mime_line
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    access_log ${LOG_OF[nginx]};
    client_body_temp_path $WORK/nginx-tmp/body;
    proxy_temp_path $WORK/nginx-tmp/proxy;
    fastcgi_temp_path $WORK/nginx-tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx-tmp/uwsgi;
    scgi_temp_path $WORK/nginx-tmp/scgi;

    server {
        listen 127.0.0.1:$port;
        root $DOCROOT;
        $NGINX_EXTRA
        location / { }
    }
}
EOF
    cp "$conf" "$RESULTS_DIR/nginx.conf"
    "$NGINX_BIN" -t -q -p "$WORK" -e "$WORK/nginx-error.log" -c "$conf" \
        || { cat "$WORK/nginx-error.log" >&2 2>/dev/null || true; die "nginx -t failed"; }
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
for s in $SERVERS; do
    for sz in $SIZES; do
        url="http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$sz]}"
        code=$(curl -sS --max-time 5 -o "$WORK/check" -w '%{http_code}' "$url") || die "$s: GET $url failed"
        [ "$code" = 200 ] || die "$s: GET $url answered $code"
        cmp -s "$WORK/check" "$DOCROOT/${FILE_OF[$sz]}" || die "$s: GET $url returned different bytes"
        code=$(curl -sS --max-time 5 -H 'Connection: close' -o "$WORK/check" -w '%{http_code}' "$url") \
            || die "$s: GET $url (Connection: close) failed"
        [ "$code" = 200 ] || die "$s: GET $url (Connection: close) answered $code"
    done
done
log "pre-flight ok: every server serves every file byte-exactly"

# ---------------------------------------------------------------- measurement

CSV=$RESULTS_DIR/runs.csv
echo "round,case,server,req_per_s,p99_ms,requests,socket_errors,non_2xx_3xx,server_ticks,server_us_per_req,cpu${SERVER_CPU}_busy_pct,cpu${LOAD_CPU}_busy_pct,other_jobs_pct,log_lines" >"$CSV"

declare -A RPS=() P99=() USR=() BUSY_S=() BUSY_L=() ERRS=() NOISY_OF=()
CASES=()
for sz in $SIZES; do for m in $MODES; do CASES+=("$sz/$m"); done; done

read -r -a SERVER_LIST <<<"$SERVERS"
total_runs=$(( ROUNDS * ${#CASES[@]} * ${#SERVER_LIST[@]} ))
run_no=0
NOISY=0
RETRIED=0
NOISE_PCT=${NOISE_PCT:-5}
QUIET_TIMEOUT=${QUIET_TIMEOUT:-60}
RETRY_NOISY=${RETRY_NOISY:-2}
NOISE_BUDGET=${NOISE_BUDGET:-900}
SPENT_ON_NOISE=0
T0=$(date +%s)
log "measuring: $total_runs runs of $DURATION (+$WARMUP warm-up) — about $(( total_runs * (DUR_S + WARM_S + 1) / 60 + 1 )) min"

for round in $(seq 1 "$ROUNDS"); do
    # alternate the server order every round so neither always goes first
    order=("${SERVER_LIST[@]}")
    if [ $((round % 2)) -eq 0 ] && [ "${#SERVER_LIST[@]}" -eq 2 ]; then
        order=("${SERVER_LIST[1]}" "${SERVER_LIST[0]}")
    fi
    for c in "${CASES[@]}"; do
        sz=${c%/*}; mode=${c#*/}
        for s in "${order[@]}"; do
            run_no=$((run_no + 1))
            url="http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$sz]}"
            raw="$RESULTS_DIR/r$round-$sz-$mode-$s.txt"
            measure_run "$s" "$c" "$round" "$url" "$raw" "${PID_OF[$s]}"
            lines=$(wc -l <"${LOG_OF[$s]}" 2>/dev/null || echo 0)
            : >"${LOG_OF[$s]}" 2>/dev/null || true   # keep the temp dir small; both logs opened for append

            key="$s|$c"
            RPS[$key]="${RPS[$key]:-} $rps"
            P99[$key]="${P99[$key]:-} $p99"
            USR[$key]="${USR[$key]:-} $us_req"
            BUSY_S[$key]="${BUSY_S[$key]:-} $busy_s"
            BUSY_L[$key]="${BUSY_L[$key]:-} $busy_l"
            ERRS[$key]=$(( ${ERRS[$key]:-0} + sockerr + non2xx ))
            echo "$round,$c,$s,$rps,$p99,$reqs,$sockerr,$non2xx,$dticks,$us_req,$busy_s,$busy_l,$other,$lines" >>"$CSV"
            log "[$run_no/$total_runs] round $round $c $s: $rps req/s, p99 $p99 ms, $us_req µs/req CPU," \
                "cpu$SERVER_CPU $busy_s%, cpu$LOAD_CPU $busy_l%, others $other%, errors $sockerr, non-2xx/3xx $non2xx"
        done
    done
done
ELAPSED=$(( $(date +%s) - T0 ))

# ---------------------------------------------------------------- report

has() { case " $SERVERS " in *" $1 "*) return 0 ;; esac; return 1; }

any_err=0
TABLE=$WORK/table.md
{
    echo "| case | modus req/s | nginx req/s | ratio | modus p99 ms | nginx p99 ms | modus µs/req CPU | nginx µs/req CPU |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for c in "${CASES[@]}"; do
        sz=${c%/*}; mode=${c#*/}
        if [ "$mode" = close ]; then label="$(size_label "$sz") \`Connection: close\`"; else label="$(size_label "$sz") keep-alive"; fi
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
        sz=${c%/*}; mode=${c#*/}
        if [ "$mode" = close ]; then label="$(size_label "$sz") close"; else label="$(size_label "$sz") keep-alive"; fi
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

cp "$BLOCK" "$RESULTS_DIR/summary.md"

if [ "$BENCH_MD" != off ]; then
    if [ ! -f "$BENCH_MD" ]; then
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
    if ! grep -q '<!-- static:begin -->' "$BENCH_MD"; then
        printf '\n<!-- static:begin -->\n<!-- static:end -->\n' >>"$BENCH_MD"
    fi
    replace_md_block "$BENCH_MD" static "$BLOCK"
    log "updated $BENCH_MD"
fi

echo
cat "$BLOCK"
log "raw results in $RESULTS_DIR"

if [ "$any_err" -ne 0 ]; then
    log "FAILED: some runs reported socket errors or non-2xx/3xx answers (rows marked)"
    exit 1
fi
