#!/usr/bin/env bash
# bench/timing.sh — what per-phase timing costs (issue 7's target: < 2% throughput on the 500 B
# keep-alive benchmark). Each model runs twice, side by side: timing on (the default) and
# `--no-timing` (counters only, no timestamps); rounds alternate which one goes first.
#
# Usage:
#   bench/timing.sh                                   # full run: 10 s per run, 7 rounds, event and pool
#   DURATION=1s WARMUP=0s ROUNDS=1 bench/timing.sh    # smoke run
#   BENCH_MD=BENCHMARKS.md bench/timing.sh            # also put the table in BENCHMARKS.md (block "timing")
#
# Environment knobs (defaults in brackets):
#   MODELS      modus models to compare                          [event pool]
#   DURATION ROUNDS WARMUP CONNS                                 [10s 7 2s 50]
#   SIZE        file size                                        [500B]
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   MODUS_ARGS  extra arguments for every `modus serve`          [""]
#   SERVER_CPU LOAD_CPU NOISE_PCT QUIET_TIMEOUT RETRY_NOISY NOISE_BUDGET   as in bench/static.sh [0 1 5 60 2 900]
#   BENCH_MD    markdown file to update, "off" to skip           [off]
#   RESULTS_DIR raw output directory                             [<repo>/bench/results/timing-<timestamp>]
#
# Needs wrk, curl, taskset (apt-get install -y wrk curl util-linux).
# Exit status: 0 on success, 1 if a run saw socket errors / non-2xx answers, 2 on a setup failure.
set -euo pipefail

BENCH_TAG=timing
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

MODELS=${MODELS:-event pool}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-7}
WARMUP=${WARMUP:-2s}
CONNS=${CONNS:-50}
SIZE=${SIZE:-500B}
MODUS_ARGS=${MODUS_ARGS:-}
pin_and_noise_defaults
BENCH_MD=${BENCH_MD:-off}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/timing-$STAMP}

for tool in wrk curl taskset; do command -v "$tool" >/dev/null || die "missing $tool (apt-get install -y wrk curl util-linux)"; done
run_lengths

make_workdir timing
declare -A FILE_OF=() PORT_OF=() PID_OF=() NOISY_OF=() RPS=() US=() ERRS=()
make_docroot "$DOCROOT" "$SIZE"
ensure_modus_bin

cleanup() {
    local s
    for s in "${!PID_OF[@]}"; do stop_pid "${PID_OF[$s]}" "$s"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME MODEL [--no-timing]
start() {
    local name=$1 model=$2 port line addr
    shift 2
    local -a extra=("$@")
    local -a user_args=()
    [ -n "$MODUS_ARGS" ] && read -r -a user_args <<<"$MODUS_ARGS"
    port=$(free_port 18600)
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --model "$model" \
        --access-log "$WORK/$name-access.log" --max-keepalive-requests 100000000 \
        "${extra[@]}" "${user_args[@]}" >"$RESULTS_DIR/$name.stdout" 2>"$RESULTS_DIR/$name.stderr" &
    PID_OF[$name]=$!
    line=$(wait_modus_listening "${PID_OF[$name]}" "$RESULTS_DIR/$name.stdout" "$RESULTS_DIR/$name.stderr") || exit 2
    addr=$(awk '{ print $3 }' <<<"$line")
    PORT_OF[$name]=${addr##*:}
    curl -fsS -o /dev/null "http://127.0.0.1:${PORT_OF[$name]}/${FILE_OF[$SIZE]}" || die "$name does not serve the file"
}

for m in $MODELS; do
    start "$m-on" "$m"
    start "$m-off" "$m" --no-timing
done

echo "server,case,round,rps,p99_ms,us_per_req,socket_errors,non2xx,other_cpu_pct" >"$RESULTS_DIR/runs.csv"
any_err=0
for round in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        # Alternate the order so a drifting machine favours neither.
        if [ $((round % 2)) -eq 1 ]; then order="$m-on $m-off"; else order="$m-off $m-on"; fi
        for s in $order; do
            url="http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$SIZE]}"
            measure_run "$s" "$SIZE/keepalive" "$round" "$url" "$RESULTS_DIR/$s-r$round.wrk" "${PID_OF[$s]}"
            log "$s round $round: $rps req/s, $us_req µs/req, p99 $p99 ms"
            echo "$s,$SIZE/keepalive,$round,$rps,$p99,$us_req,$sockerr,$non2xx,$other" >>"$RESULTS_DIR/runs.csv"
            RPS[$s]="${RPS[$s]:-} $rps"
            US[$s]="${US[$s]:-} $us_req"
            ERRS[$s]=$(( ${ERRS[$s]:-0} + sockerr + non2xx ))
            [ $((sockerr + non2xx)) -eq 0 ] || any_err=1
        done
    done
done

TABLE=$RESULTS_DIR/timing.md
{
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), modus git $(git_rev_label), $(machine_label): \`bench/timing.sh\` (MODELS='$MODELS' DURATION=$DURATION ROUNDS=$ROUNDS)."
    echo "Each model twice, both up together on CPU $SERVER_CPU: timing on (default) and \`--no-timing\`; \`taskset -c $LOAD_CPU wrk -t1 -c$CONNS -d$DURATION\` keep-alive on the $SIZE file, $WARMUP warm-up, rounds alternating which goes first; medians."
    echo
    echo "| model | req/s timing on | req/s --no-timing | throughput cost | µs/req on | µs/req off | CPU cost |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for m in $MODELS; do
        on=$(med_of RPS "$m-on"); off=$(med_of RPS "$m-off")
        uon=$(med_of US "$m-on"); uoff=$(med_of US "$m-off")
        cost=$(awk -v a="$on" -v b="$off" 'BEGIN { if (b > 0) printf "%+.1f%%", 100 * (b - a) / b; else print "—" }')
        ucost=$(awk -v a="$uon" -v b="$uoff" 'BEGIN { if (b > 0) printf "%+.1f%%", 100 * (a - b) / b; else print "—" }')
        err=""
        [ "${ERRS[$m-on]:-0}" -eq 0 ] && [ "${ERRS[$m-off]:-0}" -eq 0 ] || err=" (errors: see runs.csv)"
        echo "| $m$err | $(fmt_int "$on") | $(fmt_int "$off") | $cost | $(fmt_2 "$uon") | $(fmt_2 "$uoff") | $ucost |"
    done
    echo
    echo "Throughput cost = (off − on) ÷ off; CPU cost = (on − off) ÷ off, CPU of the server's process tree per request. $NOISY noisy run(s), $RETRIED re-measured."
} >"$TABLE"
cat "$TABLE"
if [ "$BENCH_MD" != off ]; then
    replace_md_block "$BENCH_MD" timing "$TABLE"
    log "updated $BENCH_MD (block \"timing\")"
fi
log "raw results in $RESULTS_DIR"
exit "$any_err"
