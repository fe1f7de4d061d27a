#!/usr/bin/env bash
# bench/direct.sh — paper 002's figures 5/6 on this machine (issue 6, "Benchmark (not a test)"):
# throughput and latency against the number of concurrent clients for a backend alone and the same
# backend behind `modus direct`, with a CGI-heavy mix that overloads the backend.
#
# Usage:
#   bench/direct.sh                     # full run: CLIENTS 10 → 2000, 20 s per point
#   bench/direct.sh smoke               # proves the pipeline end to end: 2 client counts, 3 s per point,
#                                       # results in RESULTS_DIR only (BENCHMARKS.md untouched)
#
# Backends (SERVERS, any subset):
#   apache-prefork          Debian's Apache httpd, mpm_prefork + mod_cgi (bench/models.sh's configuration)
#   apache-prefork+direct   the same behind `modus direct`
#   prefork                 `modus serve --model prefork` (sized like Apache prefork)
#   prefork+direct          the same behind `modus direct`
#
# Environment knobs (defaults in brackets):
#   CLIENTS        closed-loop client counts        ["10 50 100 200 500 1000 2000"; smoke: "10 200"]
#   DURATION       measured time per point           [20s; smoke: 3s]
#   WARMUP         unmeasured warm-up per point      [5s; smoke: 1s]
#   UNLOADED       client count of the "unloaded" reference point [1]
#   SPIN_MS        CPU ms each CGI request burns (the bundled cgi-spin, papers' CPU-bound CGI) [10]
#   CGI_WEIGHT     weight of the CGI URL in the mix; the static 500 B file has weight 100-CGI_WEIGHT [50]
#   DIRECTOR_ARGS  extra `modus direct` flags        ["--max-backend-conns 16 --backend-conns 8
#                                                      --queue 8192 --queue-timeout 20ms --max-conns-per-ip 0"]
#                  (a short queue wait: the latency target is about admitted requests; every client is
#                  127.0.0.1, hence no per-address cap)
#   TIMEOUT        per-request timeout of the load generator [30s]
#   SERVERS        backends to run                   [all four]
#   SERVER_CPU     CPU for the backend (and its CGI scripts)   [1]
#   LOAD_CPU       CPU for the load generator and the director [0]
#   MODUS_BIN      modus binary; unset = cargo build --release -p modus
#   BENCH_MD       markdown file to update, "off" to skip [<repo>/BENCHMARKS.md; smoke: off]
#   RESULTS_DIR    raw output directory              [<repo>/bench/results/direct-<timestamp>]
#
# On a 2-core machine the director shares LOAD_CPU with the load generator (the paper ran it on a machine
# of its own); the backend alone gets the same pinning, so both sides pay for the generator alike.
#
# Per point it records: total responses/s, admitted responses/s (status 200), busy-page share (503),
# other 5xx (the director's own 502/504, backend 500s), errors (timeouts, resets), and p50/p99 of the admitted requests' latency from `modus load --timeline`
# (status 200 only: the busy page is fast and would flatter the percentiles). Plot data: plot.csv.
#
# Checks (issue 6's targets), for each backend behind the director:
#   peak       best admitted req/s of the backend alone over all client counts
#   overload   the first client count ≥ 4 × the smallest count at which the backend alone reached 95 % of
#              its peak: admitted req/s behind the director there ≥ 95 % of peak
#   latency    p99 of admitted requests at that point ≤ 2 × the backend alone's p99 at UNLOADED clients
#   overhead   at UNLOADED clients, director req/s ≥ 90 % and p50 ≤ 110 % of the backend alone
#
# Needs curl, taskset, python3, apache2 (installed with apt-get when missing and running as root).
# Exit status: 0 when the runs completed (whatever the checks say; they are reported), 2 on a setup failure.
#
# Why this is not a lab spec: Its latencies are those of the admitted requests only (status 200,
# filtered from `modus load --timeline`, the fast 503 busy page left out), and it counts the director's
# own 502/504 apart; the lab's p50/p99 are over every answer and its only answer classes are goodput
# (2xx) and busy (503). `lab/paper002-director.toml` runs the same comparison (a backend alone, behind
# `modus direct`, behind HAProxy) in open loop.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=direct.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

MODE=${1:-full}
case $MODE in full|smoke) ;; *) die "unknown mode '$MODE' (full, smoke)" ;; esac
if [ "$MODE" = smoke ]; then
    CLIENTS=${CLIENTS:-"10 200"}; DURATION=${DURATION:-3s}; WARMUP=${WARMUP:-1s}; BENCH_MD=${BENCH_MD:-off}
fi
CLIENTS=${CLIENTS:-"10 50 100 200 500 1000 2000"}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-5s}
UNLOADED=${UNLOADED:-1}
SPIN_MS=${SPIN_MS:-10}
CGI_WEIGHT=${CGI_WEIGHT:-50}
DIRECTOR_ARGS=${DIRECTOR_ARGS:-"--max-backend-conns 16 --backend-conns 8 --queue 8192 --queue-timeout 20ms --max-conns-per-ip 0"}
TIMEOUT=${TIMEOUT:-30s}
SERVERS=${SERVERS:-"apache-prefork apache-prefork+direct prefork prefork+direct"}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/direct-$(date -u +%Y%m%dT%H%M%SZ)}

for s in $SERVERS; do
    case $s in apache-prefork|apache-prefork+direct|prefork|prefork+direct) ;;
        *) die "SERVERS: unknown '$s' (apache-prefork, apache-prefork+direct, prefork, prefork+direct)" ;;
    esac
done
command -v python3 >/dev/null || die "needs python3"
command -v curl >/dev/null || die "needs curl"
if [[ " $SERVERS " == *" apache-prefork"* ]] && ! [ -x "$APACHE_BIN" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        log "installing apache2 (apt-get)"
        { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends apache2; } \
            >"${TMPDIR:-/tmp}/direct-apt.log" 2>&1 || { tail -n 20 "${TMPDIR:-/tmp}/direct-apt.log" >&2; die "apt-get install apache2 failed"; }
    else
        die "apache2 missing — install with: apt-get update && apt-get install -y apache2"
    fi
fi

mkdir -p "$RESULTS_DIR"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -gt 5000 ] || log "warning: only $(ulimit -n) descriptors; 2000 clients need more"
WORK=$(mktemp -d /tmp/modus-direct.XXXXXX)
chmod 755 "$WORK"   # Apache's children run as www-data and must reach the docroot and the script
DOCROOT=$WORK/www
CGI_DIR=$WORK/cgi-bin
declare -A FILE_OF=() PID_OF=() PORT_OF=() ADMIN_OF=()
STARTED=()
cleanup() {
    local s
    for s in "${STARTED[@]}"; do stop_pid "${PID_OF[$s]:-}" "$s"; done
    find "$WORK" -maxdepth 2 -name 'error.log' -size +0 2>/dev/null | while read -r f; do
        cp "$f" "$RESULTS_DIR/$(basename "$(dirname "$f")")-error.log" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ensure_modus_bin
make_docroot "$DOCROOT" 500B
chmod -R a+rX "$DOCROOT"
mkdir -p "$CGI_DIR"
cp "$(dirname "$MODUS_BIN")/cgi-spin" "$CGI_DIR/spin" || die "no cgi-spin next to $MODUS_BIN (cargo build --release -p modus builds it)"
chmod 755 "$CGI_DIR" "$CGI_DIR/spin"

# Apache prefork + mod_cgi, configured as bench/models.sh does (its `cgi` action) but with no access log.
start_apache() {
    local port
    port=$(free_port 18900)
    launch_apache apache-prefork prefork "$port" 5 "" cgi
}

# start_modus NAME CPU ARGS...: a modus subcommand pinned to CPU, listening on an ephemeral port;
# sets PID_OF, PORT_OF and, when it has an admin listener, ADMIN_OF.
start_modus() {
    local name=$1 cpu=$2 line addr
    shift 2
    taskset -c "$cpu" "$MODUS_BIN" "$@" >"$RESULTS_DIR/$name.stdout" 2>"$RESULTS_DIR/$name.stderr" &
    PID_OF[$name]=$!
    STARTED+=("$name")
    line=$(wait_modus_listening "${PID_OF[$name]}" "$RESULTS_DIR/$name.stdout" "$RESULTS_DIR/$name.stderr") || exit 2
    addr=$(awk '{ print $3 }' <<<"$line")
    PORT_OF[$name]=${addr##*:}
    ADMIN_OF[$name]=$(tr ' ' '\n' <<<"$line" | sed -n 's/^admin=//p')
    wait_http "${PORT_OF[$name]}" "${PID_OF[$name]}" "$name"
}

# modus prefork sized like Apache prefork above, StartServers included.
start_modus_prefork() {
    start_modus prefork "$SERVER_CPU" serve "$DOCROOT" --listen 127.0.0.1:0 --model prefork \
        --start-servers 60 --min-spare 10 --max-spare 60 --max-clients 128 \
        --max-keepalive-requests 100000000 --cgi-dir "$CGI_DIR"
}

# start_director NAME BACKEND_PORT: `modus direct` on LOAD_CPU with an admin listener.
start_director() {
    local -a argv=()
    read -r -a argv <<<"$DIRECTOR_ARGS"
    start_modus "$1" "$LOAD_CPU" direct --listen 127.0.0.1:0 --backend "127.0.0.1:$2" \
        --admin 127.0.0.1:0 "${argv[@]}"
}

MIX=$WORK/mix.txt
printf '%s /cgi-bin/spin?ms=%s\n%s /500B.txt\n' "$CGI_WEIGHT" "$SPIN_MS" "$((100 - CGI_WEIGHT))" >"$MIX"
cp "$MIX" "$RESULTS_DIR/mix.txt"

# measure NAME CLIENTS: one closed-loop run; appends a row to points.csv.
measure() {
    local name=$1 c=$2 port=${PORT_OF[$1]} tag="$1-c$2" limit
    limit=$(( $(to_seconds "$DURATION") + $(to_seconds "$WARMUP") + $(to_seconds "$TIMEOUT") + 60 ))
    log "$name: $c clients, $DURATION"
    timeout "$limit" taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/500B.txt" --mix "$MIX" \
        -c "$c" -d "$DURATION" --warmup "$WARMUP" --timeout "$TIMEOUT" --json \
        --timeline "$RESULTS_DIR/$tag.timeline.csv" >"$RESULTS_DIR/$tag.json" 2>"$RESULTS_DIR/$tag.stderr" \
        || log "warning: modus load exited non-zero for $tag (see $RESULTS_DIR/$tag.stderr)"
    if [ -n "${ADMIN_OF[$name]:-}" ]; then
        curl -s --max-time 5 "http://${ADMIN_OF[$name]}/status.json" >"$RESULTS_DIR/$tag.director.json" || true
    fi
    python3 - "$name" "$c" "$RESULTS_DIR/$tag.json" "$RESULTS_DIR/$tag.timeline.csv" >>"$RESULTS_DIR/points.csv" <<'EOF'
import csv, json, sys
name, clients, report, timeline = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    r = json.load(open(report))
except Exception:
    print(f"{name},{clients},nan,nan,nan,nan,nan,nan,nan,nan")
    sys.exit(0)
d = r["duration_s"] or float("nan")
status = {int(k): v for k, v in r.get("status", {}).items()}
total = sum(status.values())
ok = status.get(200, 0)
busy = status.get(503, 0)
# 5xx other than the busy page (the director's own 502/504, the backend's
# 500s): neither admitted (200 only) nor busy, shown in their own column.
other_5xx = sum(v for k, v in status.items() if 500 <= k <= 599 and k != 503)
lat = []
with open(timeline) as f:
    for row in csv.DictReader(f):
        if row["status"] == "200" and not row["error"]:
            lat.append(int(row["end_us"]) - int(row["actual_us"]))
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] / 1000 if lat else float("nan")
share = busy / total if total else float("nan")
# Transport errors only (timeouts, resets, refused): 5xx answers are counted by status, the busy page above.
errors = sum(v for k, v in r.get("errors_by_kind", {}).items() if not k.startswith("status_"))
print(f"{name},{clients},{total / d:.1f},{ok / d:.1f},{q(0.5):.2f},{q(0.99):.2f},{share:.4f},{other_5xx},{errors},{total}")
EOF
}

echo "backend,clients,rps,admitted_rps,p50_ms_200,p99_ms_200,busy_share,other_5xx,errors,responses" >"$RESULTS_DIR/points.csv"
for s in $SERVERS; do
    base=${s%+direct}
    case $base in
        apache-prefork) start_apache ;;
        prefork) start_modus_prefork ;;
    esac
    body=$(curl -sS --max-time 10 "http://127.0.0.1:${PORT_OF[$base]}/cgi-bin/spin?ms=1") || die "$base: CGI failed"
    case $body in "spun 1 ms"*) ;; *) die "$base: /cgi-bin/spin answered: $body" ;; esac
    if [ "$s" != "$base" ]; then start_director "$s" "${PORT_OF[$base]}"; fi
    log "$s: port ${PORT_OF[$s]}"
    for c in $UNLOADED $CLIENTS; do measure "$s" "$c"; done
    if [ "$s" != "$base" ]; then stop_pid "${PID_OF[$s]}" "$s"; fi
    stop_pid "${PID_OF[$base]}" "$base"
    sleep 1
done
cp "$RESULTS_DIR/points.csv" "$RESULTS_DIR/plot.csv"

# ---------------------------------------------------------------- report and checks
python3 - "$RESULTS_DIR/points.csv" "$UNLOADED" "$MODE" >"$RESULTS_DIR/report.md" <<'EOF'
import csv, sys
path, unloaded, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = list(csv.DictReader(open(path)))
f = lambda x: float(x) if x not in ("", "nan") else float("nan")
by = {}
for r in rows:
    by.setdefault(r["backend"], {})[int(r["clients"])] = {k: f(v) for k, v in r.items() if k not in ("backend", "clients")}
print("| backend | clients | req/s | admitted req/s (200) | p50 admitted ms | p99 admitted ms | busy pages | other 5xx | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, pts in by.items():
    for c in sorted(pts):
        p = pts[c]
        print(f"| {b} | {c}{' (unloaded)' if c == unloaded else ''} | {p['rps']:.0f} | {p['admitted_rps']:.0f} | {p['p50_ms_200']:.2f} | {p['p99_ms_200']:.2f} | {100 * p['busy_share']:.1f} % | {p['other_5xx']:.0f} | {p['errors']:.0f} |")
print()
for base in ("apache-prefork", "prefork"):
    alone, direct = by.get(base), by.get(base + "+direct")
    if not alone or not direct:
        continue
    loaded = {c: p for c, p in alone.items() if c != unloaded}
    if not loaded:
        continue
    peak = max(p["admitted_rps"] for p in loaded.values())
    sat = min(c for c, p in loaded.items() if p["admitted_rps"] >= 0.95 * peak)
    over = [c for c in sorted(direct) if c >= 4 * sat and c != unloaded]
    print(f"**{base}**: peak alone {peak:.0f} admitted req/s, reached (95 %) at {sat} clients.")
    if over:
        o = over[0]
        d = direct[o]
        ok_t = d["admitted_rps"] >= 0.95 * peak
        print(f"- throughput at {o} clients (≥ 4 × {sat}) behind the director: {d['admitted_rps']:.0f} = {100 * d['admitted_rps'] / peak:.0f} % of peak (target ≥ 95 %): {'met' if ok_t else 'NOT met'}")
        if unloaded in alone:
            u99 = alone[unloaded]["p99_ms_200"]
            ok_l = d["p99_ms_200"] <= 2 * u99
            print(f"- p99 of admitted requests there: {d['p99_ms_200']:.2f} ms vs unloaded p99 {u99:.2f} ms alone (target ≤ 2×): {'met' if ok_l else 'NOT met'}")
    else:
        print(f"- no measured client count ≥ 4 × {sat}: overload target not checked")
    if unloaded in alone and unloaded in direct:
        a, d = alone[unloaded], direct[unloaded]
        ok_o = d["admitted_rps"] >= 0.9 * a["admitted_rps"] and d["p50_ms_200"] <= 1.1 * a["p50_ms_200"]
        print(f"- overhead at {unloaded} client(s): {d['admitted_rps']:.0f} vs {a['admitted_rps']:.0f} req/s, p50 {d['p50_ms_200']:.2f} vs {a['p50_ms_200']:.2f} ms (target ≤ 10 %): {'met' if ok_o else 'NOT met'}")
    print()
EOF
cat "$RESULTS_DIR/report.md"

if [ "$BENCH_MD" != off ]; then
    block=$(mktemp "${TMPDIR:-/tmp}/direct-md.XXXXXX")
    {
        echo "Run $(date -u +%Y-%m-%d) on $(machine_label), revision $(git_rev_label), by \`bench/direct.sh\`."
        echo "Mix: \`$(paste -sd ';' "$RESULTS_DIR/mix.txt" | sed 's/;/; /')\` (weight URL); $DURATION per point after $WARMUP warm-up;"
        echo "backend on CPU $SERVER_CPU, load generator and director on CPU $LOAD_CPU; director flags \`$DIRECTOR_ARGS\`."
        echo "Plot data: \`$(basename "$RESULTS_DIR")/plot.csv\`."
        echo
        cat "$RESULTS_DIR/report.md"
    } >"$block"
    replace_md_block "$BENCH_MD" direct "$block"
    rm -f "$block"
    log "updated $BENCH_MD"
fi
log "raw results in $RESULTS_DIR"
