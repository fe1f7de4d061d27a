#!/usr/bin/env bash
# bench/uring.sh — the `uring` model against `event` in the same run (issue 17): system calls per
# request, server CPU µs per request and req/s, for 500 B keep-alive, 115 KB keep-alive and 500 B
# with a new connection per request.
#
# Usage:
#   bench/uring.sh                               # 3 rounds of 5 s per case and model, interleaved
#   ROUNDS=1 DURATION=2s bench/uring.sh          # smoke run
#   MODELS='event uring' MODUS_ARGS='--workers 1' bench/uring.sh
#   MODELS='event uring uring-zc uring-batch' bench/uring.sh   # and uring's two experiments (below)
#   CASES='50KB-keepalive 115KB-keepalive 1MB-keepalive' MODELS='event uring-copy uring-splice uring-sendfile' \
#       bench/uring.sh                           # uring's file paths (MODUS_URING_FILES) against event's sendfile
#   bench/uring.sh profile                       # perf record -g of each model at 500 B keep-alive
#
# Environment knobs (defaults in brackets):
#   ROUNDS DURATION CONNS      rounds, measured time per run, closed-loop connections [3 5s 50]
#   SYSCALL_REQUESTS           requests counted per system-call measurement [20000]
#   MODELS                     models compared [event uring]; also `uring-zc`: uring with
#                              MODUS_URING_ZC_MIN=ZC_MIN, `uring-batch`: MODUS_URING_BATCH_US=BATCH_US, and
#                              `uring-copy`, `uring-splice`, `uring-sendfile`: MODUS_URING_FILES=copy|splice|sendfile
#                              (how files past 16 KiB go out; plain `uring` is its default, splice)
#   CASES                      FILE-keepalive or FILE-close, FILE one of 500B 50KB 115KB 1MB
#                              [500B-keepalive 115KB-keepalive 500B-close]
#   ZC_MIN                     smallest send made zero-copy by `uring-zc` [65536]
#   BATCH_US                   how long `uring-batch`'s waits go on for more completions [50]
#   MODUS_BIN                  modus binary; unset = cargo build --release -p modus
#   MODUS_ARGS                 extra `modus serve` arguments for every model [""]
#   SERVER_CPU LOAD_CPU        cores for the server and for `modus load` [0 1]
#   RESULTS_DIR                raw output [<repo>/bench/results/uring-<timestamp>]
#
# Method: each server runs under `taskset -c SERVER_CPU` (all its threads, io_uring's workers included),
# `modus load` under `taskset -c LOAD_CPU`, both on loopback.
# * CPU µs/request = (utime+stime of the server process, /proc/PID/stat, after − before — every thread,
#   io_uring's io-wq workers included, which run uring-splice's splices) ÷ requests
#   `modus load` completed in the run; req/s = those requests ÷ DURATION. Median of the rounds.
# * System calls per request = `perf stat -e raw_syscalls:sys_enter -p PID` (every thread of the server)
#   over a run of SYSCALL_REQUESTS requests, ÷ those requests; and the same without `newfstatat`, the one
#   `stat` with which the pipeline validates a cached file on every hit, in every model. `strace -c -f`
#   of the 500 B keep-alive run is kept in RESULTS_DIR as the breakdown by call.
# Needs perf, strace, taskset, python3.
# Exit status: 0 on success, 1 if a run saw errors, 2 on a setup failure.
#
# Why this is not a lab spec: Its figures include system calls per request (perf stat on
# raw_syscalls:sys_enter, strace) and a perf profile, and its variants are set by environment variables
# (MODUS_URING_ZC_MIN, MODUS_URING_BATCH_US, MODUS_URING_FILES); the lab has no system-call metric and a
# server in a spec is a model and its flags, with no environment.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=uring.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

ACTION=${1:-bench}
case $ACTION in bench|profile) ;; *) die "unknown action '$ACTION' (bench, profile)" ;; esac

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-50}
SYSCALL_REQUESTS=${SYSCALL_REQUESTS:-20000}
MODELS=${MODELS:-event uring}
MODUS_ARGS=${MODUS_ARGS:-}
ZC_MIN=${ZC_MIN:-65536}
BATCH_US=${BATCH_US:-50}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/uring-$(date +%Y%m%d-%H%M%S)}
CLK_TCK=$(getconf CLK_TCK)

for tool in perf strace taskset python3; do
    command -v "$tool" >/dev/null || die "$tool is needed (apt-get install -y linux-perf strace util-linux python3)"
done
if [ -z "${MODUS_BIN:-}" ]; then
    log "building modus (release)"
    (cd "$REPO" && cargo build --release -p modus >&2) || die "cargo build failed"
    MODUS_BIN=$REPO/target/release/modus
fi
mkdir -p "$RESULTS_DIR"
WORK=$(mktemp -d)
DOCROOT=$WORK/root
mkdir -p "$DOCROOT"
head -c 500 /dev/urandom >"$DOCROOT/500B.bin"
head -c $((50 * 1000)) /dev/urandom >"$DOCROOT/50KB.bin"
head -c $((115 * 1024)) /dev/urandom >"$DOCROOT/115KB.bin"
head -c $((1024 * 1024)) /dev/urandom >"$DOCROOT/1MB.bin"

declare -A PID_OF PORT_OF
STARTED=()
cleanup() {
    for pid in "${STARTED[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${STARTED[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

start_server() {
    local model=$1 base=$1 env_args=() line out=$WORK/$1.out
    case $model in
        uring-zc) base=uring env_args=("MODUS_URING_ZC_MIN=$ZC_MIN") ;;
        uring-batch) base=uring env_args=("MODUS_URING_BATCH_US=$BATCH_US") ;;
        uring-copy | uring-splice | uring-sendfile) base=uring env_args=("MODUS_URING_FILES=${model#uring-}") ;;
    esac
    # shellcheck disable=SC2086  # MODUS_ARGS: word splitting intended
    env "${env_args[@]}" taskset -c "$SERVER_CPU" "$MODUS_BIN" serve --model "$base" --listen 127.0.0.1:0 \
        --access-log off $MODUS_ARGS "$DOCROOT" >"$out" 2>"$WORK/$model.err" &
    local pid=$!
    STARTED+=("$pid")
    for _ in $(seq 100); do
        line=$(head -n1 "$out" 2>/dev/null || true)
        [ -n "$line" ] && break
        kill -0 "$pid" 2>/dev/null || die "$model did not start: $(cat "$WORK/$model.err")"
        sleep 0.1
    done
    [[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] || die "$model: no address in '$line'"
    PID_OF[$model]=$pid
    PORT_OF[$model]=${BASH_REMATCH[1]}
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# load MODEL CASE ARGS...: runs `modus load` on CASE's URL, prints its JSON
load() {
    local model=$1 case=$2
    shift 2
    local file=${case%%-*} extra=()
    [ "${case#*-}" = close ] && extra=(--close --spread-source)
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load -c "$CONNS" "${extra[@]}" --json "$@" \
        "http://127.0.0.1:${PORT_OF[$model]}/$file.bin"
}

json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

CASES=${CASES:-500B-keepalive 115KB-keepalive 500B-close}
for model in $MODELS; do start_server "$model"; done
log "servers: $(for m in $MODELS; do printf '%s pid %s port %s; ' "$m" "${PID_OF[$m]}" "${PORT_OF[$m]}"; done)"
for model in $MODELS; do
    for case in $CASES; do load "$model" "$case" -d 2s >/dev/null; done
done

if [ "$ACTION" = profile ]; then
    for model in $MODELS; do
        perf record -g -o "$RESULTS_DIR/$model.perf.data" -p "${PID_OF[$model]}" -- sleep 5 2>/dev/null &
        local_perf=$!
        load "$model" 500B-keepalive -d 5s >/dev/null
        wait "$local_perf" || true
        perf report -i "$RESULTS_DIR/$model.perf.data" --no-children --percent-limit 1 --stdio \
            >"$RESULTS_DIR/$model.perf.txt" 2>/dev/null || true
        log "$model: $RESULTS_DIR/$model.perf.txt"
    done
    exit 0
fi

status=0
declare -A CPU RATE SYSCALLS OWN
for round in $(seq "$ROUNDS"); do
    for case in $CASES; do
        for model in $MODELS; do
            pid=${PID_OF[$model]}
            before=$(ticks "$pid")
            out=$(load "$model" "$case" -d "$DURATION")
            after=$(ticks "$pid")
            echo "$out" >"$RESULTS_DIR/$model-$case-$round.json"
            requests=$(json_field requests <<<"$out")
            errors=$(json_field errors <<<"$out")
            [ "$errors" = 0 ] || { log "$model $case: $errors errors"; status=1; }
            us=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
            rate=$(awk -v n="$requests" -v d="$(to_seconds "$DURATION")" 'BEGIN { printf "%.0f", n / d }')
            CPU[$model/$case]="${CPU[$model/$case]:-} $us"
            RATE[$model/$case]="${RATE[$model/$case]:-} $rate"
            log "round $round $case $model: $rate req/s, $us µs CPU/request"
        done
    done
done

for case in $CASES; do
    for model in $MODELS; do
        pid=${PID_OF[$model]}
        perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_newfstatat -x, -o "$WORK/perf.csv" -p "$pid" &
        perf_pid=$!
        sleep 0.5
        load "$model" "$case" -n "$SYSCALL_REQUESTS" >/dev/null
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        calls=$(awk -F, '/raw_syscalls/ { print $1 }' "$WORK/perf.csv")
        stats=$(awk -F, '/newfstatat/ { print $1 }' "$WORK/perf.csv")
        SYSCALLS[$model/$case]=$(awk -v c="$calls" -v n="$SYSCALL_REQUESTS" 'BEGIN { printf "%.3f", c / n }')
        OWN[$model/$case]=$(awk -v c="$calls" -v s="$stats" -v n="$SYSCALL_REQUESTS" 'BEGIN { printf "%.3f", (c - s) / n }')
        log "$case $model: $calls system calls ($stats of them the cache's stat) for $SYSCALL_REQUESTS requests"
    done
done
for model in $MODELS; do
    pid=${PID_OF[$model]}
    tids=$(ls "/proc/$pid/task" | paste -sd,)
    strace -c -f -p "$tids" -o "$RESULTS_DIR/$model-500B-keepalive.strace.txt" &
    strace_pid=$!
    sleep 0.5
    load "$model" 500B-keepalive -n "$SYSCALL_REQUESTS" >/dev/null
    kill -INT "$strace_pid"
    wait "$strace_pid" || true
done

first=${MODELS%% *}
printf '\n| case | model | req/s | CPU µs/request | ×%s CPU | system calls/request | without newfstatat |\n|---|---|---|---|---|---|---|\n' "$first"
for case in $CASES; do
    base=$(med_of CPU "$first/$case")
    for model in $MODELS; do
        cpu=$(med_of CPU "$model/$case")
        ratio=$(awk -v a="$cpu" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$case" "$model" "$(med_of RATE "$model/$case")" "$cpu" \
            "$ratio" "${SYSCALLS[$model/$case]}" "${OWN[$model/$case]}"
    done
done
log "raw results: $RESULTS_DIR"
exit "$status"
