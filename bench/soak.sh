#!/usr/bin/env bash
# bench/soak.sh — each model for a long run at 80 % of its measured capacity (issue 16, item 7): a SURGE
# document set with a CGI script in the mix, open-loop load, and the server's resident memory, open
# descriptors and threads (processes for the process models) sampled every SAMPLE seconds. Passes when
# no request failed, the memory outside the file caches (PSS of the tree less what the caches hold in
# memory) shows a growth over time of less than 5 % after the warm-up (the first WARM share of the run),
# and the descriptors per thread other than the files the caches hold open stayed flat (within what the
# load's own connections can add). The growth is the time term of a least-squares fit of that memory on
# time and on the number of threads, over every sample after the warm-up, relative to the fitted level
# at the warm-up's end: the thread term takes what the workers a model adds or retires under load hold
# (a process model's children; `per-request`'s threads, one per request in flight), so they are not
# taken for a leak, and all samples count, so one sample taken while a script ran does not decide. The
# caches' own numbers come from the server's /status.json (`--admin`):
#
# Usage:
#   bench/soak.sh                                   # every model, 30 minutes each (4.5 hours)
#   MODELS='event pool' DURATION=5m bench/soak.sh
#
# Knobs: MODELS [all 9] DURATION [30m] SAMPLE [10] WARM [0.2 of the run] CONNS [64] CGI_SHARE [5 (%)]
#        CACHE [4MiB: --cache-size, so that the caches turn over]
#        SERVER_CPU [0] LOAD_CPU [1] MODUS_BIN, BENCH_MD [<repo>/BENCHMARKS.md; off], RESULTS_DIR,
#        NOISE_PCT [5: other jobs' share of a core over the run from which a run that fell behind its
#        rate (the generator dropped requests) is reported as inconclusive rather than failed].
# The load is `modus load --mix` (the SURGE stream's 400 most requested documents, weighted by their
# share of the stream, plus /cgi-bin/hello at CGI_SHARE %) at -R = 0.8 × the closed-loop rate a 10 s
# calibration run (after 10 s of warm-up) measured with CONNS connections.
#
# Why this is not a lab spec: It runs each model for 30 minutes at 80 % of a capacity measured first,
# sampling memory, descriptors and threads every SAMPLE seconds and judging their growth; the lab reads
# a server once before and once after each point, and its open-loop rates are fixed in the spec, not
# derived from an earlier measurement.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=soak.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

MODELS=${MODELS:-$ALL_MODELS}
DURATION=${DURATION:-30m}
SAMPLE=${SAMPLE:-10}
WARM=${WARM:-0.2}
CONNS=${CONNS:-64}
CGI_SHARE=${CGI_SHARE:-5}
# Small, so that the caches turn over for the whole run (a prefork child has one each); the verdict leaves
# out what they hold, which /status.json reports.
CACHE=${CACHE:-4MiB}
pin_and_noise_defaults
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/soak-$(date -u +%Y%m%dT%H%M%SZ)}
DUR_S=$(to_seconds "$DURATION")
command -v python3 >/dev/null || die "needs python3"

make_workdir soak
SPID=
trap 'stop_pid "$SPID" modus; rm -rf "$WORK"' EXIT
ensure_modus_bin

log "making the SURGE document set and the mix"
"$MODUS_BIN" workload surge --out "$WORK/surge" --files 2000 --requests 100000 --max-size 1048576 >/dev/null
mkdir -p "$WORK/cgi"
printf '#!/bin/sh\nprintf '"'"'Content-Type: text/plain\\r\\n\\r\\nhello from CGI, %%s\\n'"'"' "$QUERY_STRING"\n' >"$WORK/cgi/hello"
chmod +x "$WORK/cgi/hello"
python3 - "$WORK/surge/stream.txt" "$CGI_SHARE" >"$WORK/mix.txt" <<'EOF'
import collections, sys
counts = collections.Counter()
for line in open(sys.argv[1]):
    fields = line.split()
    if fields and not fields[0].startswith("#"):
        counts[next(f for f in fields if f.startswith("/"))] += 1
top = counts.most_common(400)
total = sum(n for _, n in top)
cgi = float(sys.argv[2]) / 100
for url, n in top:
    print(f"{(1 - cgi) * n / total * 10000:.2f} {url}")
print(f"{cgi * 10000:.2f} /cgi-bin/hello?soak")
EOF

# sample PID ADMIN: "PSS_KB FDS TASKS CACHE_MEMORY_KB CACHE_FILES" of the server's process tree (tasks:
# threads of every process; PSS, not RSS, so pages the process models' children share are counted once)
# and of its caches, summed over the processes, from the admin listener ADMIN's /status.json
sample() {
    local pid fds=0 tasks=0 n cache
    for pid in $(pid_tree "$1"); do
        n=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) && fds=$((fds + n))
        n=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0) && tasks=$((tasks + ${n:-0}))
    done
    # A scrape that fails is tried twice more; a sample still without the caches' numbers is left out
    # of the verdict, and the row says how many were.
    cache=$(python3 -c 'import json, sys, time, urllib.request
for attempt in range(3):
    try:
        c = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/status.json", timeout=5))["cache"]
        print(c["memory_bytes"] // 1024, c["open_files"])
        break
    except Exception as e:
        print(f"soak.sh: /status.json: {e!r}", file=sys.stderr)
        time.sleep(0.2)
else:
    print("-1 -1")' "$2")
    echo "$(tree_pss_kb "$1") $fds $tasks $cache"
}

soak() {
    local model=$1 port admin out err line rate report samples t=0
    port=$(free_port 18500)
    admin=127.0.0.1:$(free_port $((port + 1)))
    out=$RESULTS_DIR/$model.server.out err=$RESULTS_DIR/$model.server.err
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$WORK/surge/docs" --model "$model" --listen "127.0.0.1:$port" \
        --cgi-dir "$WORK/cgi" --cache-size "$CACHE" --admin "$admin" --access-log "$RESULTS_DIR/$model.access.log" >"$out" 2>"$err" &
    SPID=$!
    line=$(wait_modus_listening "$SPID" "$out" "$err")
    log "$model: $line"
    # Capacity after a warm-up: a process model grows its children under load (1, 2, 4… a second).
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/" --mix "$WORK/mix.txt" -c "$CONNS" -d 10s \
        --warmup 10s --json >"$RESULTS_DIR/$model.calibration.json" 2>/dev/null
    rate=$(python3 -c "import json,sys; print(int(0.8 * json.load(open(sys.argv[1]))['throughput_rps']))" \
        "$RESULTS_DIR/$model.calibration.json")
    log "$model: capacity $((rate * 10 / 8)) req/s, soaking at $rate req/s for $DURATION"
    samples=$RESULTS_DIR/$model.samples.csv
    echo "t_s,pss_kb,fds,tasks,cache_memory_kb,cache_files" >"$samples"
    report=$RESULTS_DIR/$model.load.json
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/" --mix "$WORK/mix.txt" -c "$CONNS" \
        -R "$rate" -d "$DURATION" --json >"$report" 2>"$RESULTS_DIR/$model.load.err" &
    local lpid=$!
    local all0 ours0 all1 ours1 others_pct
    all0=$(all_user_ticks) ours0=$(tree_ticks $$)
    while kill -0 "$lpid" 2>/dev/null; do
        echo "$t,$(sample "$SPID" "$admin" | tr ' ' ',')" >>"$samples"
        sleep "$SAMPLE"
        t=$((t + SAMPLE))
    done
    wait "$lpid" || true
    all1=$(all_user_ticks) ours1=$(tree_ticks $$)
    # What other jobs took, in % of one core over the run: a soak is only a verdict on the server when
    # nothing else competed for the cores (idle-priority builds still take the cycles the 20 % headroom
    # leaves, and share the caches).
    others_pct=$(( ((all1 - all0) - (ours1 - ours0)) * 100 / CLK_TCK / DUR_S ))
    stop_pid "$SPID" modus
    SPID=
    python3 - "$model" "$report" "$samples" "$WARM" "$rate" "$CONNS" "$others_pct" "$NOISE_PCT" \
        >>"$RESULTS_DIR/rows.md" <<'EOF'
import csv, json, statistics, sys
model, report, samples, warm, rate, conns, others_pct, noise_pct = sys.argv[1:]
r = json.load(open(report))
rows = [{k: int(v) for k, v in row.items()} for row in csv.DictReader(open(samples))]
# Samples whose /status.json scrape failed three times (cache numbers -1).
unscraped = sum(1 for row in rows if row["cache_files"] < 0)
rows = [row for row in rows if row["cache_files"] >= 0]
after = [row for row in rows if row["t_s"] >= float(warm) * rows[-1]["t_s"]] or rows
# The caches are left out: they are bounded (`--cache-size` per process), and in a process model each
# child's fills with its share of the stream for most of the run.
for row in rows:
    row["pss_outside_kb"] = row["pss_kb"] - row["cache_memory_kb"]
    row["fds_outside"] = row["fds"] - row["cache_files"]
# Per task (thread) for the descriptors, so that workers the model adds under load are not taken for a
# leak.
per = lambda row, k: row[k] / max(row["tasks"], 1)


def least_squares(xs, ys):
    """Coefficients of y ~ xs (rows of regressors, the first 1), by the normal equations."""
    n = len(xs[0])
    m = [[sum(x[i] * x[j] for x in xs) for j in range(n)] + [sum(x[i] * y for x, y in zip(xs, ys))] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [a - f * b for a, b in zip(m[r], m[i])]
    return [m[i][n] / m[i][i] for i in range(n)]


# Memory: its growth over time with the thread count held at its mean (see the header).
ys = [row["pss_outside_kb"] for row in after]
t_first, t_last = after[0]["t_s"], after[-1]["t_s"]
mean_tasks = statistics.mean(row["tasks"] for row in after)
if len({row["tasks"] for row in after}) > 1:
    base, per_task, per_s = least_squares([[1, row["tasks"], row["t_s"]] for row in after], ys)
else:
    (base, per_s), per_task = least_squares([[1, row["t_s"]] for row in after], ys), 0.0
level = base + per_task * mean_tasks + per_s * t_first
trend_kb = per_s * (t_last - t_first)
growth = trend_kb / level * 100 if level else 0.0
fds = [row["fds_outside"] for row in after]
fds_per = [per(row, "fds_outside") for row in after]
tasks = [row["tasks"] for row in after]
cache_mb = [row["cache_memory_kb"] / 1024 for row in after]
cache_files = [row["cache_files"] for row in after]
# Flat: what each task holds varies by no more than the load's connections could spread over the fewest tasks.
flat = max(fds_per) - min(fds_per) <= 1 + 2 * int(conns) / max(min(tasks), 1)
ok = r["errors"] == 0 and growth < 5 and flat
# Requests the generator dropped (its queue full) mean the server fell behind the rate; with other jobs
# on the machine that says nothing about the server.
behind = r.get("dropped", 0) > 0 or r.get("generator_fell_behind", False)
busy = int(others_pct) >= int(noise_pct)
if ok:
    verdict = "pass"
elif busy and behind and growth < 5 and flat and r["errors"] == r.get("dropped", 0):
    verdict = f"inconclusive: fell behind its rate while other jobs took {others_pct} % of a core"
else:
    verdict = "**fail**"
if unscraped:
    verdict += f" ({unscraped} samples without /status.json)"
# The tree's PSS for the row: the medians of the first and the last few samples.
k = max(1, min(5, len(after) // 4))
tot0 = statistics.median(row["pss_kb"] for row in after[:k])
tot1 = statistics.median(row["pss_kb"] for row in after[-k:])
print(f"| {model} | {rate} | {r['requests']:,} | {r['errors']} | {tot0:,.0f} → {tot1:,.0f} "
      f"| {cache_mb[0]:.1f} → {cache_mb[-1]:.1f} MiB, {min(cache_files)}–{max(cache_files)} files "
      f"| {growth:+.1f} % ({trend_kb:+,.0f} kB of {level:,.0f}) | {min(fds)}–{max(fds)} ({'flat' if flat else 'growing'}) "
      f"| {min(tasks)}–{max(tasks)} | {others_pct} % | {verdict} |")

EOF
    tail -n 1 "$RESULTS_DIR/rows.md" >&2
}

: >"$RESULTS_DIR/rows.md"
for model in $MODELS; do
    soak "$model"
done

summary=$RESULTS_DIR/summary.tmp
{
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), modus git $(git_rev_label), $(machine_label): \`MODELS='$MODELS' DURATION=$DURATION bench/soak.sh\` — each model on CPU $SERVER_CPU (\`--cache-size $CACHE --admin\`) serving a SURGE set (2,000 files up to 1 MiB) with a CGI script, \`modus load --mix\` (the 400 most requested documents by their stream share, /cgi-bin/hello at $CGI_SHARE %) open loop at 80 % of the closed-loop rate measured with $CONNS connections, on CPU $LOAD_CPU; samples every ${SAMPLE} s; after the first $(python3 -c "print(int(float('$WARM') * 100))") % of the run, the growth of the memory outside the caches is fitted on time and threads over every sample, and the descriptors per thread must stay within what the load's connections can add."
    echo
    echo "| model | rate (req/s) | requests | errors | PSS after warm-up → end (kB) | caches: memory, open files | PSS outside the caches: growth after warm-up | fds outside the caches | threads | other jobs' CPU | verdict |"
    echo "|---|---:|---:|---:|---|---|---|---|---|---:|---|"
    cat "$RESULTS_DIR/rows.md"
} >"$summary"
publish_block "$summary" soak
