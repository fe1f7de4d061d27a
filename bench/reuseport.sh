#!/usr/bin/env bash
# bench/reuseport.sh — how evenly `event`'s loops share the connections (issue 17 §4): one listener
# shared by every loop (EPOLLEXCLUSIVE, the default) against one listener per loop (`--reuseport`,
# SO_REUSEPORT: the kernel picks a loop per connection by address hash).
#
# Usage:
#   bench/reuseport.sh                          # 2 loops, keep-alive and close, 3 rounds of 5 s
#   WORKERS=4 ROUNDS=1 DURATION=2s bench/reuseport.sh
#
# Per run: requests/s (modus load), each loop's share of the requests served (`served` of the loops in
# /status.json's scoreboard: a loop serves what it accepted), the spread max/min of the loops' counts,
# and the server's CPU µs per request. The server runs on SERVER_CPU (all its loops), `modus load` on
# LOAD_CPU. Knobs: WORKERS [2] CONNS [50] DURATION [5s] ROUNDS [3] SERVER_CPU [0] LOAD_CPU [1]
# MODUS_BIN, BENCH_MD [<repo>/BENCHMARKS.md, off to skip], RESULTS_DIR.
#
# Why this is not a lab spec: Its figure is how the requests spread over event's loops (each loop's
# `served` in /status.json's scoreboard); the lab reads only the per-phase totals from /status.json
# (probe.rs: Timing::from_status). The two servers (with and without `--reuseport`) and the connection
# axis would fit a spec; a per-loop spread metric is what is missing.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=reuseport.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

WORKERS=${WORKERS:-2}
CONNS=${CONNS:-50}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
CLK_TCK=$(getconf CLK_TCK)
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/reuseport-$(date -u +%Y%m%dT%H%M%SZ)}
command -v curl >/dev/null || die "needs curl"
command -v python3 >/dev/null || die "needs python3 (reads /status.json)"

make_workdir reuseport
trap 'rm -rf "$WORK"; [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null; true' EXIT
declare -A FILE_OF
make_docroot "$DOCROOT" 500B
ensure_modus_bin

# run LISTENERS MODE ROUND: one server, one load run; appends a row to $RESULTS_DIR/runs.tsv
run() {
    local listeners=$1 mode=$2 round=$3 port admin out err flags=() close=() line t0 t1 report
    port=$(free_port 18400)
    admin=$(free_port $((port + 1)))
    [ "$listeners" = per-loop ] && flags=(--reuseport)
    [ "$mode" = close ] && close=(--close)
    out=$RESULTS_DIR/server-$listeners-$mode-$round.out
    err=$RESULTS_DIR/server-$listeners-$mode-$round.err
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --model event --workers "$WORKERS" "${flags[@]}" \
        --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" --access-log off >"$out" 2>"$err" &
    SPID=$!
    line=$(wait_modus_listening "$SPID" "$out" "$err")
    log "$listeners $mode round $round: $line"
    t0=$(tree_ticks "$SPID")
    report=$RESULTS_DIR/load-$listeners-$mode-$round.json
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/500B.txt" -c "$CONNS" -d "$DURATION" \
        "${close[@]}" --json >"$report" 2>"$RESULTS_DIR/load-$listeners-$mode-$round.err"
    t1=$(tree_ticks "$SPID")
    curl -s "http://127.0.0.1:$admin/status.json" >"$RESULTS_DIR/status-$listeners-$mode-$round.json"
    stop_pid "$SPID" modus
    SPID=
    python3 - "$report" "$RESULTS_DIR/status-$listeners-$mode-$round.json" "$((t1 - t0))" "$CLK_TCK" \
        "$listeners" "$mode" "$round" >>"$RESULTS_DIR/runs.tsv" <<'EOF'
import json, sys
load, status, ticks, hz, listeners, mode, rnd = sys.argv[1:]
r = json.load(open(load))
served = [w["served"] for w in json.load(open(status))["workers"]["scoreboard"]]
total = sum(served) or 1
requests = r["requests"]
us = int(ticks) / int(hz) * 1e6 / max(requests, 1)
print("\t".join([listeners, mode, rnd, f"{r['throughput_rps']:.0f}", ",".join(f"{s / total:.3f}" for s in served),
                 f"{max(served) / max(min(served), 1):.2f}", f"{us:.1f}"]))
EOF
}

: >"$RESULTS_DIR/runs.tsv"
for round in $(seq 1 "$ROUNDS"); do
    for mode in keepalive close; do
        for listeners in shared per-loop; do
            run "$listeners" "$mode" "$round"
        done
    done
done

summary=$RESULTS_DIR/summary.tmp
{
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), modus git $(git_rev_label), $(machine_label): \`WORKERS=$WORKERS ROUNDS=$ROUNDS DURATION=$DURATION bench/reuseport.sh\` — \`event --workers $WORKERS\` on CPU $SERVER_CPU, \`modus load -c $CONNS\` on CPU $LOAD_CPU, 500 B; medians of $ROUNDS rounds (shares: the round with the median spread)."
    echo
    python3 - "$RESULTS_DIR/runs.tsv" <<'EOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
print("| listeners | connections | req/s | each loop's share of requests | spread (max/min) | server CPU µs/req |")
print("|---|---|---:|---|---:|---:|")
for mode in ("keepalive", "close"):
    for listeners in ("shared", "per-loop"):
        runs = [r for r in rows if r[0] == listeners and r[1] == mode]
        if not runs:
            continue
        by_spread = sorted(runs, key=lambda r: float(r[5]))
        mid = by_spread[(len(runs) - 1) // 2]
        label = "one shared (`EPOLLEXCLUSIVE`)" if listeners == "shared" else "one per loop (`--reuseport`)"
        conns = "keep-alive" if mode == "keepalive" else "`--close`"
        rps = statistics.median(float(r[3]) for r in runs)
        us = statistics.median(float(r[6]) for r in runs)
        print(f"| {label} | {conns} | {rps:,.0f} | {mid[4]} | {mid[5]} | {us:.1f} |")
EOF
} >"$summary"
publish_block "$summary" reuseport
