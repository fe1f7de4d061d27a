#!/usr/bin/env bash
# bench/fulldisk.sh — the access log on a full disk (issue 34, item 5). Each model serves with its access
# log on a small tmpfs while wrk runs; a second into the run a filler file takes every free byte of the
# tmpfs, FULL_S seconds later it is removed, and wrk runs on. Once the load has stopped and the numbers
# have settled, the script compares the server's `requests_total` (its /status.json, --admin) with what
# the file holds and what the server says it dropped (`log_lines_dropped`):
#   whole    lines that are one whole log line each
#   glued    lines holding more than one log line (a cut line with the next glued to it)
#   cut      other broken lines (a line cut short, with nothing after it)
#   dropped  log_lines_dropped
#   miscount requests_total − whole − dropped: 0 when every request is a whole line or counted as dropped
#            (negative: the drop counter counts lines that are in the file)
# Needs root (mount) and wrk.
#
# Usage:
#   bench/fulldisk.sh                                  # every model, this checkout's release binary
#   MODUS_BIN=/work/main/target/release/modus bench/fulldisk.sh   # another binary (the "before")
#   MODELS='event prefork' ROUNDS=3 bench/fulldisk.sh
#
# Knobs: MODELS [all 9] ROUNDS [1: fills per run] RUN_S [8] FULL_S [2] SIZE [32m: the tmpfs]
#        CONNS [8] SERVER_CPU [0] LOAD_CPU [1] MODUS_BIN.
#
# Why this is not a lab spec: it fills a filesystem during a run and judges the server's own log file
# against its own counters; the lab measures steady states.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=fulldisk.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

MODELS=${MODELS:-$ALL_MODELS}
ROUNDS=${ROUNDS:-1}
RUN_S=${RUN_S:-8}
FULL_S=${FULL_S:-2}
SIZE=${SIZE:-32m}
CONNS=${CONNS:-8}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
MODUS_BIN=${MODUS_BIN:-$REPO/target/release/modus}
[ "$(id -u)" = 0 ] || die "needs root to mount a tmpfs"
command -v wrk >/dev/null || die "needs wrk"
[ -x "$MODUS_BIN" ] || die "no $MODUS_BIN (cargo build --release -p modus)"

WORK=$(mktemp -d /tmp/fulldisk.XXXXXX)
MNT=$WORK/fs
mkdir -p "$MNT" "$WORK/root"
printf 'hello\n' >"$WORK/root/hello.txt"
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    mountpoint -q "$MNT" && umount "$MNT"
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
status_json() { curl -s "http://127.0.0.1:$ADMIN/status.json"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

log "binary $MODUS_BIN ($("$MODUS_BIN" --version 2>/dev/null || echo '?')); tmpfs $SIZE; wrk -c $CONNS for ${RUN_S}s; disk full for ${FULL_S}s x $ROUNDS"
printf '%-12s %9s %9s %6s %4s %8s %9s\n' model requests whole glued cut dropped miscount
for model in $MODELS; do
    mount -t tmpfs -o "size=$SIZE" tmpfs "$MNT"
    PORT=$(free_port)
    ADMIN=$(free_port)
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$WORK/root" --model "$model" --listen "127.0.0.1:$PORT" \
        --admin "127.0.0.1:$ADMIN" --access-log "$MNT/access.log" >/dev/null 2>"$WORK/err.log" &
    SERVER=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/hello.txt" && break; sleep 0.1; done
    taskset -c "$LOAD_CPU" wrk -t1 -c "$CONNS" -d "${RUN_S}s" "http://127.0.0.1:$PORT/hello.txt" >"$WORK/wrk.log" 2>&1 &
    WRK=$!
    for _ in $(seq "$ROUNDS"); do
        sleep 1
        dd if=/dev/zero of="$MNT/filler" bs=4k 2>/dev/null || true
        sleep "$FULL_S"
        rm -f "$MNT/filler"
    done
    wait "$WRK"
    # Settled: the same requests_total and drop count twice, a second apart (flushes every 500 ms,
    # process models' children publish every 250 ms).
    last=""
    for _ in $(seq 20); do
        sleep 1
        now=$(status_json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["requests_total"], v["log_lines_dropped"])')
        [ "$now" = "$last" ] && break
        last=$now
    done
    read -r requests dropped <<<"$now"
    read -r whole glued cut < <(python3 - "$MNT/access.log" <<'EOF'
import re, sys
start = re.compile(rb'\d+\.\d+\.\d+\.\d+ - - \[')
whole = glued = cut = 0
for line in open(sys.argv[1], 'rb').read().split(b'\n')[:-1] + [None]:
    if line is None:
        break
    n = len(start.findall(line))
    if n == 1 and start.match(line) and line.endswith(b'"'):
        whole += 1
    elif n > 1:
        glued += 1
    else:
        cut += 1
data = open(sys.argv[1], 'rb').read()
if data and not data.endswith(b'\n'):
    cut += 1
print(whole, glued, cut)
EOF
)
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
    umount "$MNT"
    printf '%-12s %9s %9s %6s %4s %8s %9s\n' "$model" "$requests" "$whole" "$glued" "$cut" "$dropped" \
        "$((requests - whole - dropped))"
done
