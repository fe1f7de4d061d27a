#!/usr/bin/env bash
# bench/compress-stall.sh — does a large file's first encoding stall the other connections of an
# event loop? (issue 32, item 2)
#
# One `modus serve --model event --compress br` on SERVER_CPU; `modus load` sends small requests
# (/small.html, 1 KB) at RATE/s open loop for DURATION on LOAD_CPU while, on the side, curl asks
# for FILES distinct 900 KB JSON files with `Accept-Encoding: br` one after another — each one the
# file's first br request, which brotli (quality 9) encodes. Reported: the small requests' p50,
# p99 and max, and how long each big request took, for every binary given.
#
# Usage:
#   bench/compress-stall.sh                          # the release build of this tree
#   BINS="/tmp/modus-before target/release/modus" bench/compress-stall.sh   # before and after
#
# Environment (defaults in brackets): BINS [target/release/modus], RATE [200], DURATION [10s],
# FILES [8], SERVER_CPU [0], LOAD_CPU [1]. Loopback only; everything is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BINS=${BINS:-target/release/modus}
RATE=${RATE:-200}
DURATION=${DURATION:-10s}
FILES=${FILES:-8}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/site"
head -c 1024 /dev/zero | tr '\0' 'x' > "$work/site/small.html"
python3 - "$work/site" "$FILES" <<'PY'
import json, sys
root, n = sys.argv[1], int(sys.argv[2])
for f in range(n):
    rows = [{"id": i, "file": f, "name": f"row {i} of file {f}", "tags": ["alpha", "beta", str(i % 97)]} for i in range(11000)]
    open(f"{root}/big{f}.json", "w").write(json.dumps(rows))
PY
printf '%-28s %9s %9s %9s %s\n' binary small_p50 small_p99 small_max "big requests (s)"
for bin in $BINS; do
    out="$work/serve.out"
    taskset -c "$SERVER_CPU" "$bin" serve "$work/site" --model event --listen 127.0.0.1:0 --access-log off \
        --compress br --cache-size 256MiB --max-cached-file 4MiB > "$out" 2>/dev/null &
    pids+=($!)
    for _ in $(seq 100); do grep -q "listening on" "$out" 2>/dev/null && break; sleep 0.05; done
    addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$out" | head -1)
    taskset -c "$LOAD_CPU" "$bin" load "http://$addr/small.html" --rate "$RATE" -c 16 -d "$DURATION" --json \
        > "$work/load.json" 2>/dev/null &
    load=$!
    sleep 1
    times=()
    for f in $(seq 0 $((FILES - 1))); do
        t=$(curl -s -o /dev/null -w '%{time_total}' -H 'Accept-Encoding: br' "http://$addr/big$f.json")
        times+=("$t")
    done
    wait "$load" || true
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
    python3 - "$work/load.json" "$bin" "${times[*]}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency_us"]
ms = lambda us: f"{us / 1000:.1f}ms"
print(f"{sys.argv[2]:<28} {ms(lat['p50']):>9} {ms(lat['p99']):>9} {ms(lat['max']):>9} {sys.argv[3]}")
PY
done
