#!/usr/bin/env bash
# bench/callgrind.sh — user-space instructions per keep-alive request: the
# deterministic figure refactors and performance work are judged by (wall
# clock on this shared 2-core VM drifts by ±8 %; instruction counts by well
# under 1 %). valgrind runs `modus serve` (release build) on a one-file
# docroot; `modus load` sends REQUESTS keep-alive GETs; the whole process's
# instruction count (start-up and stop included, as in BENCHMARKS.md's
# figures) is divided by REQUESTS.
#
# Usage:
#   bench/callgrind.sh                       # event, 20,000 × 500 B, 3 runs
#   bench/callgrind.sh path/to/modus         # another build (e.g. a worktree of an older commit)
#   MODEL=amped RUNS=1 bench/callgrind.sh
#
# Environment knobs: MODEL [event]  REQUESTS [20000]  CONNS [10]  SIZE [500]  RUNS [3]
#   MODUS_ARGS extra `modus serve` arguments [""] (the access log stays on, to a file)
# Needs valgrind (apt-get install -y valgrind).
#
# Why this is not a lab spec: It counts instructions under valgrind; the lab starts `modus serve` only
# under taskset, a memory cgroup or `ip netns exec` (run.rs: pinned_in) and measures time, CPU and
# memory, so it has no way to run a server under a tool and no instruction-count metric.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODUS_BIN=${1:-$REPO/target/release/modus}
MODEL=${MODEL:-event}
REQUESTS=${REQUESTS:-20000}
CONNS=${CONNS:-10}
SIZE=${SIZE:-500}
RUNS=${RUNS:-3}
MODUS_ARGS=${MODUS_ARGS:-}

command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install -y valgrind)" >&2; exit 2; }
if [[ $# -eq 0 ]]; then (cd "$REPO" && cargo build --release -q -p modus); fi
[[ -x $MODUS_BIN ]] || { echo "callgrind.sh: no executable $MODUS_BIN" >&2; exit 2; }

work=$(mktemp -d)
server=
cleanup() {
    [[ -n $server ]] && kill -KILL "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root"
head -c "$SIZE" /dev/zero | tr '\0' 'x' > "$work/root/file.bin"

for run in $(seq 1 "$RUNS"); do
    : > "$work/stdout"
    # shellcheck disable=SC2086 # MODUS_ARGS is a list of arguments
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$run" \
        "$MODUS_BIN" serve "$work/root" --model "$MODEL" --listen 127.0.0.1:0 \
        --access-log "$work/access.log" --error-log "$work/error.log" $MODUS_ARGS \
        > "$work/stdout" 2> "$work/valgrind.log" &
    server=$!
    for _ in $(seq 1 600); do
        grep -q '^listening on ' "$work/stdout" && break
        kill -0 "$server" 2>/dev/null || { cat "$work/valgrind.log" >&2; exit 2; }
        sleep 0.1
    done
    addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$work/stdout")
    [[ -n $addr ]] || { echo "callgrind.sh: the server printed no address" >&2; exit 2; }
    "$MODUS_BIN" load "http://$addr/file.bin" -c "$CONNS" -n "$REQUESTS" > "$work/load.txt"
    kill -TERM "$server"
    wait "$server" || true
    server=
    total=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$work/cg.$run")
    awk -v t="$total" -v n="$REQUESTS" -v r="$run" -v m="$MODEL" \
        'BEGIN { printf "run %d: %s, %d requests: %.1fM instructions, %.0f per request\n", r, m, n, t / 1e6, t / n }'
done
