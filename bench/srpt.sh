#!/usr/bin/env bash
# bench/srpt.sh — connection scheduling on a real bottleneck (paper 004, issue 15):
# `modus serve --schedule fifo` against `--schedule srpt` behind a 100 Mbit/s
# link, under an open-loop SURGE load at several utilisations ρ.
#
# The bottleneck is built for real: a server network namespace and a client
# namespace joined by a veth pair (addresses 10.200.0.1/.2, which exist only
# inside the two namespaces), the server's side shaped by `htb` with the
# classes README documents ("Scheduling the outgoing link"): class k of SRPT
# is SO_PRIORITY 0x10001 + k → leaf 1:(k+1), prio k, and 1:1 is the default,
# so handshakes and ACKs go first. Needs root, `ip` and `tc`; skips with a
# message otherwise.
#
# Load: `modus workload surge` (heavy-tailed sizes, Zipf popularity), replayed
# by `modus load --workload … -R RATE --arrivals poisson`, where RATE makes
# the offered bytes ρ × the link's measured capacity. Reported per ρ and
# schedule: mean and p99 response time, mean slowdown (response time ÷ the
# response's transmission time on an idle link), and the mean response time
# of the smallest 50 %, the next 40 %, the next 9 % and the largest 1 % of
# requests by size. Response time is from the intended send time (the open
# loop's schedule) to the last byte, so a lagging generator cannot hide
# queueing.
#
# `bench/srpt.sh loop` measures the other bottleneck SRPT orders: one event
# loop's CPU (no root needed). One `event` worker on CPU 0, `modus load` on
# CPU 1 with more connections than the loop serves at once (-c 256, closed
# loop), 90 % 500 B and 10 % 115 KB requests: mean and p99 response time of
# each size and throughput, fifo against srpt, ROUNDS rounds of DURATION.
#
# `bench/srpt.sh disk` measures the third bottleneck, the disk, when the
# documents do not fit in memory (paper 004's own case): `amped` with a
# memory cgroup (v1) limit of MEMORY on the server, so its page cache holds a
# quarter of the SURGE document set, and `--cache-size` well below it; a
# closed loop of 64 connections replays the whole SURGE stream on loopback,
# so every schedule serves the same requests: the stream is not stationary
# (its stack model leaves the rarely requested documents to its end: the
# first 45 % of the requests touch 313 of the 6,000 documents, 26 MB, the
# whole stream all of them, 404 MB), so runs of a fixed duration at different
# throughputs would compare different document sets, and did.
# Reported for fifo and srpt-group: bytes read from the disk per request
# (`/proc/PID/io` read_bytes of the server), requests/s, mean and p99
# response time. The documents' pages are dropped (`POSIX_FADV_DONTNEED`)
# before every run. Needs root and the memory cgroup.
# amped's warm-ahead (crates/models/src/amped.rs, "Large files"): WARM=BYTES
# sets the window its helpers read ahead of the loop's `sendfile`
# (MODUS_AMPED_WARM, default 8388608), WARM_AHEAD=1 warms every window as the
# reply is sent, not only the first (MODUS_AMPED_WARM_AHEAD), READAHEAD=0 turns the
# kernel's own read-ahead off for the files the helpers warm
# (MODUS_AMPED_READAHEAD; it reads up to read_ahead_kb per file past any read,
# see /sys/block/*/queue/read_ahead_kb). All are recorded in disk-setup.txt.
# E.g. warm as you send in 256 KiB windows: WARM=262144 WARM_AHEAD=1.
#
# Usage: bench/srpt.sh                 # as root
#        bench/srpt.sh loop
#        bench/srpt.sh disk             # as root
# Environment: RHOS ["0.5 0.7 0.8 0.9 0.95"]  ROUNDS [3]  DURATION [20] (s)
#   LINK [100mbit]  MODEL [event]  FILES [2000]  OUT [bench/results/srpt-TIMESTAMP]
#   SRPT_ARGS [""] more `modus serve` flags for the srpt runs (e.g. "--srpt-max-wait 500ms")
#   disk only: DISK_FILES [6000]  MEMORY [a quarter of the document set] (bytes)
#     DISK_REQUESTS [400000] (the stream's length; every run replays all of it)
#     CACHE [4MiB] the server's --cache-size
#     DISK_SCHEDULES ["fifo srpt srpt-group"]  WARM, WARM_AHEAD, READAHEAD (above)
#
# What the lab does instead, and what stays here. The lab now runs the link and the memory cases as
# experiments that `modus lab run papers` includes: `lab/paper004-link.toml` (the same link: network
# namespaces, htb at 100 Mbit/s with this script's class per SRPT priority — netns.rs builds it so —
# fifo against srpt, open-loop SURGE at ρ 0.5 … 0.95; mean, p99, throughput, link use) and
# `lab/paper004-srpt.toml` (amped in a memory cgroup below the SURGE documents, fifo / srpt /
# srpt-group, SURGE users with OFF times across 210; mean, p99, disk bytes per request). Run those for
# the mean response time and the verdicts. This script stays for what the lab cannot measure:
# - the link case's response time BY SIZE CLASS (smallest 50 %, next 40 %, next 9 %, largest 1 %) and
#   the mean SLOWDOWN, computed from `modus load --timeline` per request: the lab keeps per-point
#   aggregates only, so it cannot show that SRPT's gain on the small responses costs the largest little;
# - the disk case's replay of the WHOLE stream (a fixed number of requests, so every schedule serves
#   the same documents: the SURGE stream is not stationary, and the lab's points last a fixed time)
#   and amped's warm-ahead knobs (MODUS_AMPED_WARM*, READAHEAD), which are environment, not flags;
# - the loop case's mean response time per size (500 B and 115 KB apart).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
RHOS=${RHOS:-"0.5 0.7 0.8 0.9 0.95"}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20}
LINK=${LINK:-100mbit}
MODEL=${MODEL:-event}
FILES=${FILES:-2000}
OUT=${OUT:-$REPO/bench/results/srpt-$(date +%Y%m%d-%H%M%S)}
SRV=modus-srpt-srv
CLI=modus-srpt-cli
SRV_IP=10.200.0.1
CLI_IP=10.200.0.2
PORT=8080

log() { printf '[srpt] %s\n' "$*" >&2; }
skip() { log "skipped: $*"; exit 0; }

# by_schedule CSV COL,COL,... [A/B:COL ...]: the mean of each column per
# schedule, as a Markdown table (schedules in the order first run), then
# the ratio of schedule A's mean COL to B's for each A/B:COL given.
by_schedule() {
    python3 - "$@" <<'PY'
import csv, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
cols = sys.argv[2].split(",")
by = defaultdict(list)
for r in rows:
    by[r["schedule"]].append(r)
mean = lambda sched, c: sum(float(r[c]) for r in by[sched]) / len(by[sched])
print("| schedule | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for sched in dict.fromkeys(r["schedule"] for r in rows):
    print(f"| {sched} | " + " | ".join(f"{mean(sched, c):.0f}" for c in cols) + " |")
ratios = [spec for spec in sys.argv[3:] if all(s in by for s in spec.split(":")[0].split("/"))]
if ratios:
    print()
for spec in ratios:
    (a, b), c = spec.split(":")[0].split("/"), spec.split(":")[1]
    print(f"{c}: {a}/{b} {mean(a, c) / max(mean(b, c), 1e-9):.3f}")
PY
}

if [[ ${1:-} == disk ]]; then
    [[ $(id -u) -eq 0 ]] || skip "needs root (a memory cgroup)"
    CG=/sys/fs/cgroup/memory/modus-srpt-disk
    [[ -d /sys/fs/cgroup/memory ]] || skip "needs the cgroup v1 memory controller"
    command -v python3 >/dev/null || skip "needs python3"
    (cd "$REPO" && cargo build --release -q -p modus)
    MODUS=$REPO/target/release/modus
    mkdir -p "$OUT"
    WORK=$(mktemp -d)
    DISK_FILES=${DISK_FILES:-6000}
    trap 'rmdir "$CG" 2>/dev/null; rm -rf "$WORK"' EXIT
    "$MODUS" workload surge --out "$WORK/w" --files "$DISK_FILES" --requests "${DISK_REQUESTS:-400000}" > /dev/null
    docset=$(du -sb "$WORK/w/docs" | cut -f1)
    MEMORY=${MEMORY:-$((docset / 4))}
    log "document set $docset bytes; the server's memory limit $MEMORY bytes"
    mkdir -p "$CG"
    echo "$MEMORY" > "$CG/memory.limit_in_bytes"
    [[ -n ${WARM:-} ]] && export MODUS_AMPED_WARM=$WARM
    [[ -n ${WARM_AHEAD:-} ]] && export MODUS_AMPED_WARM_AHEAD=$WARM_AHEAD
    [[ -n ${READAHEAD:-} ]] && export MODUS_AMPED_READAHEAD=$READAHEAD
    echo "docset_bytes=$docset memory_limit=$MEMORY files=$DISK_FILES" \
        "warm=${MODUS_AMPED_WARM:-default} warm_ahead=${MODUS_AMPED_WARM_AHEAD:-default}" \
        "readahead=${MODUS_AMPED_READAHEAD:-default}" "cache_size=${CACHE:-4MiB}" \
        "requests=${DISK_REQUESTS:-400000} floor_bytes_per_request=$((docset / ${DISK_REQUESTS:-400000}))" \
        "read_ahead_kb=$(cat /sys/block/*/queue/read_ahead_kb 2>/dev/null | sort -u | tr '\n' ' ')" \
        > "$OUT/disk-setup.txt"
    echo "round,schedule,requests,rps,mean_us,p99_us,errors,read_bytes,read_bytes_per_request" > "$OUT/disk.csv"
    for round in $(seq 1 "$ROUNDS"); do
        for schedule in ${DISK_SCHEDULES:-fifo srpt srpt-group}; do
            # Written pages are dirty until written back, and dirty pages
            # cannot be dropped: sync first.
            sync
            python3 - "$WORK/w/docs" <<'PY'
import os, sys
for base, _, files in os.walk(sys.argv[1]):
    for name in files:
        fd = os.open(os.path.join(base, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
            # shellcheck disable=SC2046 # SRPT_ARGS is a list of flags
            taskset -c 0 "$MODUS" serve "$WORK/w/docs" --model amped --workers 1 --helpers 8 \
                --listen 127.0.0.1:0 --access-log off --cache-size "${CACHE:-4MiB}" --schedule "$schedule" \
                $([[ $schedule != fifo ]] && echo "${SRPT_ARGS:-}") > "$WORK/server.out" 2>/dev/null &
            pid=$!
            echo "$pid" > "$CG/cgroup.procs"
            for _ in $(seq 1 100); do grep -q '^listening on ' "$WORK/server.out" && break; sleep 0.05; done
            addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$WORK/server.out")
            before=$(awk '/^read_bytes/ { print $2 }' "/proc/$pid/io")
            taskset -c 1 "$MODUS" load "http://$addr/" --workload "$WORK/w" -c 64 \
                --json > "$WORK/load.json" 2>/dev/null || true
            after=$(awk '/^read_bytes/ { print $2 }' "/proc/$pid/io")
            kill -TERM "$pid"; wait "$pid" || true
            row=$(python3 - "$WORK/load.json" "$((after - before))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
read = int(sys.argv[2])
lat = r["latency_us"]
n = max(r["requests"], 1)
print(f"{r['requests']},{r['throughput_rps']:.0f},{lat['mean']:.0f},{lat['p99']},{r['errors']},{read},{read / n:.0f}")
PY
)
            echo "$round,$schedule,$row" >> "$OUT/disk.csv"
            log "disk round $round $schedule: $row"
        done
    done
    by_schedule "$OUT/disk.csv" rps,mean_us,p99_us,errors,read_bytes_per_request \
        srpt-group/fifo:read_bytes_per_request srpt-group/srpt:read_bytes_per_request | tee "$OUT/disk.md"
    exit 0
fi

if [[ ${1:-} == loop ]]; then
    command -v python3 >/dev/null || skip "needs python3 for the statistics"
    (cd "$REPO" && cargo build --release -q -p modus)
    MODUS=$REPO/target/release/modus
    mkdir -p "$OUT"
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    mkdir -p "$WORK/root"
    head -c 500 /dev/zero | tr '\0' 's' > "$WORK/root/small.bin"
    head -c 117760 /dev/zero | tr '\0' 'l' > "$WORK/root/large.bin"
    printf '90 /small.bin\n10 /large.bin\n' > "$WORK/mix.txt"
    echo "round,schedule,rps,small_mean_us,small_p99_us,large_mean_us,large_p99_us,errors" > "$OUT/loop.csv"
    for round in $(seq 1 "$ROUNDS"); do
        for schedule in fifo srpt; do
            taskset -c 0 "$MODUS" serve "$WORK/root" --model event --workers 1 --listen 127.0.0.1:0 \
                --access-log off --schedule "$schedule" > "$WORK/server.out" 2>/dev/null &
            pid=$!
            for _ in $(seq 1 100); do grep -q '^listening on ' "$WORK/server.out" && break; sleep 0.05; done
            addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$WORK/server.out")
            taskset -c 1 "$MODUS" load "http://$addr/" --mix "$WORK/mix.txt" -c 256 -d "${DURATION}s" \
                --warmup 2s --json > "$WORK/load.json" 2>/dev/null || true
            kill -TERM "$pid"; wait "$pid" || true
            row=$(python3 - "$WORK/load.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["per_class"]
s, l = c["/small.bin"]["latency_us"], c["/large.bin"]["latency_us"]
print(f"{r['throughput_rps']:.0f},{s['mean']:.0f},{s['p99']},{l['mean']:.0f},{l['p99']},{r['errors']}")
PY
)
            echo "$round,$schedule,$row" >> "$OUT/loop.csv"
            log "loop round $round $schedule: $row"
        done
    done
    by_schedule "$OUT/loop.csv" rps,small_mean_us,small_p99_us,large_mean_us,large_p99_us,errors \
        fifo/srpt:small_mean_us srpt/fifo:rps | tee "$OUT/loop.md"
    exit 0
fi

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces and tc)"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (iproute2)"
command -v python3 >/dev/null || skip "needs python3 for the statistics"

(cd "$REPO" && cargo build --release -q -p modus)
MODUS=$REPO/target/release/modus
mkdir -p "$OUT"
WORK=$(mktemp -d)
server=

cleanup() {
    [[ -n $server ]] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    ip netns del "$SRV" 2>/dev/null || true
    ip netns del "$CLI" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# ------------------------------------------------------------ the bottleneck
ip netns del "$SRV" 2>/dev/null || true
ip netns del "$CLI" 2>/dev/null || true
ip netns add "$SRV" || skip "cannot create network namespaces here"
ip netns add "$CLI"
ip link add veth-srpt-s type veth peer name veth-srpt-c
ip link set veth-srpt-s netns "$SRV"
ip link set veth-srpt-c netns "$CLI"
ip -n "$SRV" addr add "$SRV_IP/24" dev veth-srpt-s
ip -n "$CLI" addr add "$CLI_IP/24" dev veth-srpt-c
for ns in "$SRV" "$CLI"; do ip -n "$ns" link set lo up; done
ip -n "$SRV" link set veth-srpt-s up
ip -n "$CLI" link set veth-srpt-c up

# README's lines, with IF=veth-srpt-s and RATE=$LINK.
tc -n "$SRV" qdisc add dev veth-srpt-s root handle 1: htb default 1
tc -n "$SRV" class add dev veth-srpt-s parent 1: classid 1:100 htb rate "$LINK" ceil "$LINK" quantum 60000
for k in 0 1 2 3 4 5 6 7; do
    tc -n "$SRV" class add dev veth-srpt-s parent 1:100 classid "1:$((k + 1))" htb rate 1mbit ceil "$LINK" prio "$k"
done
tc -n "$SRV" qdisc show dev veth-srpt-s > "$OUT/qdisc.txt"
tc -n "$SRV" class show dev veth-srpt-s > "$OUT/classes.txt"

# ------------------------------------------------------------ the workload
log "making a SURGE workload of $FILES files"
"$MODUS" workload surge --out "$WORK/w" --files "$FILES" --requests 200000 > /dev/null
# Bytes on the wire per request: the file plus a response head of ~240 bytes.
mean_bytes=$(awk '!/^#/ { n++; s += $4 } END { printf "%.0f", s / n + 240 }' "$WORK/w/stream.txt")

start_server() {
    ip netns exec "$SRV" taskset -c 0 "$MODUS" serve "$WORK/w/docs" --model "$MODEL" \
        --listen "$SRV_IP:$PORT" --access-log off --schedule "$@" > "$WORK/server.out" 2> "$WORK/server.err" &
    server=$!
    for _ in $(seq 1 100); do
        grep -q '^listening on ' "$WORK/server.out" && return
        sleep 0.05
    done
    cat "$WORK/server.err" >&2
    exit 2
}
stop_server() {
    kill -TERM "$server"
    wait "$server" || true
    server=
}

# ------------------------------------------------------------ link capacity
log "measuring the link's capacity"
big=$(awk '!/^#/ && $4 > 1000000 { print $5; exit }' "$WORK/w/stream.txt")
[[ -n $big ]] || big=$(awk '!/^#/ { print $5; exit }' "$WORK/w/stream.txt")
start_server fifo
ip netns exec "$CLI" taskset -c 1 "$MODUS" load "http://$SRV_IP:$PORT$big" --allow-remote -c 4 -d 5s --json \
    > "$WORK/capacity.json"
stop_server
capacity=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["bytes_per_s"]))' "$WORK/capacity.json")
log "capacity $capacity bytes/s; mean response $mean_bytes bytes"
echo "capacity_bytes_per_s=$capacity mean_response_bytes=$mean_bytes link=$LINK model=$MODEL" > "$OUT/setup.txt"

# ------------------------------------------------------------ the runs
echo "round,rho,schedule,rate,requests,errors,mean_ms,p99_ms,mean_slowdown,small50_ms,mid40_ms,large9_ms,top1_ms" \
    > "$OUT/runs.csv"
for round in $(seq 1 "$ROUNDS"); do
    for rho in $RHOS; do
        rate=$(python3 -c "print(max(1, round($rho * $capacity / $mean_bytes)))")
        for schedule in fifo srpt; do
            if [[ $schedule == srpt ]]; then
                # shellcheck disable=SC2086 # SRPT_ARGS is a list of flags
                start_server srpt ${SRPT_ARGS:-}
            else
                start_server fifo
            fi
            timeline="$OUT/timeline-r$round-rho$rho-$schedule.csv"
            ip netns exec "$CLI" taskset -c 1 "$MODUS" load "http://$SRV_IP:$PORT/" --allow-remote \
                --workload "$WORK/w" -R "$rate" --arrivals poisson -d "${DURATION}s" --timeout 60s \
                --timeline "$timeline" > "$WORK/load.txt" 2>&1 || true
            stop_server
            row=$(python3 - "$timeline" "$capacity" <<'EOF'
import csv, sys
path, capacity = sys.argv[1], float(sys.argv[2])
rows = [r for r in csv.DictReader(open(path))]
ok = [r for r in rows if r["status"] == "200" and r["end_us"]]
errors = len(rows) - len(ok)
rt = sorted((int(r["end_us"]) - int(r["intended_us"])) / 1000 for r in ok)
def q(sorted_values, f):
    return sorted_values[min(len(sorted_values) - 1, int(f * len(sorted_values)))]
# Size groups by rank (ties split by arrival), so each holds its share.
by_size = sorted(ok, key=lambda r: int(r["bytes"]))
n = len(by_size)
groups = {k: [] for k in ("small50", "mid40", "large9", "top1")}
slowdowns = []
for rank, r in enumerate(by_size):
    t = (int(r["end_us"]) - int(r["intended_us"])) / 1000
    b = int(r["bytes"])
    slowdowns.append(t / max(b / capacity * 1000, 1e-6))
    g = "small50" if rank < 0.5 * n else "mid40" if rank < 0.9 * n else "large9" if rank < 0.99 * n else "top1"
    groups[g].append(t)
mean = lambda v: sum(v) / len(v) if v else float("nan")
print(f"{len(ok)},{errors},{mean(rt):.2f},{q(rt, 0.99):.2f},{mean(slowdowns):.1f},"
      + ",".join(f"{mean(groups[k]):.2f}" for k in ("small50", "mid40", "large9", "top1")))
EOF
)
            echo "$round,$rho,$schedule,$rate,$row" >> "$OUT/runs.csv"
            log "round $round ρ=$rho $schedule: $row"
        done
    done
done

# ------------------------------------------------------------ the table
python3 - "$OUT/runs.csv" <<'EOF' | tee "$OUT/summary.md"
import csv, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
cells = defaultdict(list)
for r in rows:
    cells[(r["rho"], r["schedule"])].append(r)
mean = lambda v: sum(v) / len(v)
cols = ["mean_ms", "p99_ms", "mean_slowdown", "small50_ms", "mid40_ms", "large9_ms", "top1_ms"]
print("| ρ | schedule | requests | errors | " + " | ".join(cols) + " |")
print("|---|---|---|---|" + "---|" * len(cols))
for (rho, schedule), rs in sorted(cells.items()):
    vals = [mean([float(r[c]) for r in rs]) for c in cols]
    reqs = sum(int(r["requests"]) for r in rs)
    errs = sum(int(r["errors"]) for r in rs)
    print(f"| {rho} | {schedule} | {reqs} | {errs} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
print()
for rho in sorted({r["rho"] for r in rows}):
    f, s = cells.get((rho, "fifo")), cells.get((rho, "srpt"))
    if f and s:
        ratio = lambda c: mean([float(r[c]) for r in f]) / max(mean([float(r[c]) for r in s]), 1e-9)
        print(f"ρ={rho}: fifo/srpt mean {ratio('mean_ms'):.2f}×, slowdown {ratio('mean_slowdown'):.2f}×, "
              f"top 1 % {1 / ratio('top1_ms'):.2f}× of fifo's time under srpt")
EOF
log "results in $OUT"
