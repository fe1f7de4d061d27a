#!/usr/bin/env bash
# bench/reload.sh — SIGHUP reloads under load (issue 16, item 2): each model serves from a config file
# while `modus load -c CONNS` runs open loop at 80 % of the capacity a calibration run measured, and
# RELOADS SIGHUPs arrive one a second, each after the config file was rewritten to the other of two
# document roots (same files, so every answer stays 200 while the configuration really changes). Passes
# when no request failed, the error log confirms every reload, and no log line was lost across the
# generations' log handovers: the access log has exactly as many lines as the server answered requests
# (`requests_total` of its /status.json, which carries on across generations, read once it has settled
# after the load), and at least one for every response the generator counted.
#
# Usage:
#   bench/reload.sh                                 # every model
#   MODELS='event prefork' RELOADS=20 bench/reload.sh
#
# Then (issue 34, item 4) `wrk -t2 -cCONNS` with a reload every WRK_EVERY s, each model and nginx
# (`nginx -s reload`) in the same run: wrk does not re-send, so a request cut by a reload is a read
# error; `modus load`'s re-sends count as failures in the first table too.
#
# Knobs: MODELS [all 9] RELOADS [10] CONNS [50] SHARE [0.8 of capacity] SIZE [500B]
#        LOAD_PHASE [1; 0 = the wrk phase only] WRK_RELOADS [5] WRK_EVERY [2 s]
#        SERVER_CPU [0] LOAD_CPU [1] MODUS_BIN, BENCH_MD [<repo>/BENCHMARKS.md; off], RESULTS_DIR.
# The calibration (3 s warm-up, 5 s measured, closed loop) asks for /SIZE.txt?calibrate and the measured
# run for /SIZE.txt, so the access-log lines of the measured run are told apart by their target.
#
# Why this is not a lab spec: the lab measures steady states; this sends signals on a schedule during a
# run and judges the server's own logs against the generator's count.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=reload.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

MODELS=${MODELS:-$ALL_MODELS}
RELOADS=${RELOADS:-10}
CONNS=${CONNS:-50}
SHARE=${SHARE:-0.8}
SIZE=${SIZE:-500B}
pin_and_noise_defaults
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/reload-$(date -u +%Y%m%dT%H%M%SZ)}
LOAD_PHASE=${LOAD_PHASE:-1}
WRK_RELOADS=${WRK_RELOADS:-5}
WRK_EVERY=${WRK_EVERY:-2}

make_workdir reload
SPID=
NPID=
trap 'stop_pid "$SPID" modus; [ -z "$NPID" ] || kill -QUIT "$NPID" 2>/dev/null; rm -rf "$WORK"' EXIT
ensure_modus_bin
declare -A FILE_OF
make_docroot "$WORK/a" "$SIZE"
make_docroot "$WORK/b" "$SIZE"
FILE=${FILE_OF[$SIZE]}

# config ROOT: the config file, pointing at ROOT
config() { printf 'root = "%s"\n' "$1" >"$WORK/modus.toml"; }

ROWS=$WORK/rows.md
: >"$ROWS"
for model in $( [ "$LOAD_PHASE" = 1 ] && echo "$MODELS" ); do
    port=$(free_port 18600)
    admin=127.0.0.1:$(free_port $((port + 1)))
    out=$RESULTS_DIR/$model.server.out err=$RESULTS_DIR/$model.server.err alog=$RESULTS_DIR/$model.access.log
    rm -f "$alog"
    config "$WORK/a"
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve --model "$model" --config "$WORK/modus.toml" \
        --listen "127.0.0.1:$port" --admin "$admin" --access-log "$alog" >"$out" 2>"$err" &
    SPID=$!
    log "$model: $(wait_modus_listening "$SPID" "$out" "$err")"
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/$FILE?calibrate" -c "$CONNS" -d 5s \
        --warmup 3s --json >"$RESULTS_DIR/$model.calibration.json" 2>/dev/null
    rate=$(python3 -c "import json,sys; print(int($SHARE * json.load(open(sys.argv[1]))['throughput_rps']))" \
        "$RESULTS_DIR/$model.calibration.json")
    log "$model: $RELOADS reloads under $rate req/s ($SHARE of capacity), $CONNS connections"
    report=$RESULTS_DIR/$model.load.json
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "http://127.0.0.1:$port/$FILE" -c "$CONNS" -R "$rate" \
        -d "$((RELOADS + 2))s" --json >"$report" 2>"$RESULTS_DIR/$model.load.err" &
    lpid=$!
    sleep 1
    for i in $(seq 1 "$RELOADS"); do
        if [ $((i % 2)) -eq 1 ]; then config "$WORK/b"; else config "$WORK/a"; fi
        kill -HUP "$SPID"
        sleep 1
    done
    wait "$lpid" || true
    # What the server says it answered, once two readings 0.5 s apart agree (a process model's children
    # publish their counts every 250 ms).
    answered=$(python3 -c 'import json, sys, time, urllib.request
last = None
for _ in range(60):
    n = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/status.json", timeout=5))["requests_total"]
    if n == last:
        break
    last = n
    time.sleep(0.5)
print(n)' "$admin")
    # SIGTERM: in-flight requests finish and every generation's log buffer is flushed before exit.
    stop_pid "$SPID" modus
    SPID=
    reloaded=$(grep -c "SIGHUP: configuration reloaded" "$err" || true)
    lines=$(grep -c "GET /$FILE HTTP" "$alog" || true)
    all_lines=$(wc -l <"$alog")
    # A request re-sent after a keep-alive close was cut by the server: wrk or a browser would have
    # failed it, so it counts with the errors.
    read -r requests errors resent unfinished < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["requests"], r["errors"], r.get("resent", r.get("retries")) or 0, r.get("unfinished") or 0)' "$report")
    errors=$((errors + resent))
    # Lines lost: requests the server answered without a line. The measured run's lines may exceed the
    # generator's responses by the requests it stopped waiting for at the end (answered, so logged).
    lost=$((answered - all_lines))
    verdict=pass
    if [ "$errors" -ne 0 ] || [ "$reloaded" -ne "$RELOADS" ] || [ "$lost" -ne 0 ] || [ "$lines" -lt "$requests" ] \
        || [ "$lines" -gt $((requests + unfinished)) ]; then
        verdict=fail
    fi
    log "$model: $requests responses, $errors failed ($resent of them re-sent), $reloaded of $RELOADS reloads confirmed," \
        "$answered answered in all and $all_lines log lines: $verdict"
    printf '| %s | %s | %s | %s (%s re-sent) | %s / %s | %s | %s | %s | %s |\n' "$model" "$rate" "$requests" \
        "$errors" "$resent" "$reloaded" "$RELOADS" "$answered" "$all_lines" "$lost" "$verdict" >>"$ROWS"
done

# The wrk phase (issue 34, item 4): `wrk -t2 -cCONNS` closed loop, a reload every WRK_EVERY s, each
# model and nginx (`nginx -s reload`) in the same run. wrk does not re-send: a request the server cut
# (a keep-alive connection closed under it) is a read error. Every socket error and non-2xx/3xx
# response counts as a failure.
WRK_ROWS=$WORK/wrk-rows.md
: >"$WRK_ROWS"
# wrk_failures OUT: "requests failed read connect write timeout non2xx"
wrk_failures() {
    python3 -c 'import re, sys
t = open(sys.argv[1]).read()
req = int(re.search(r"(\d+) requests in", t).group(1))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
c, r, w, to = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
n = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
n = int(n.group(1)) if n else 0
print(req, c + r + w + to + n, r, c, w, to, n)' "$1"
}
# wrk_under_reloads NAME RELOAD-COMMAND...: wrk against $port while the command runs every WRK_EVERY s.
wrk_under_reloads() {
    local name=$1 out=$RESULTS_DIR/$1.wrk.txt wpid i
    shift
    taskset -c "$LOAD_CPU" wrk -t2 -c"$CONNS" -d"$((WRK_RELOADS * WRK_EVERY + 2))s" \
        "http://127.0.0.1:$port/$FILE" >"$out" 2>&1 &
    wpid=$!
    sleep 1
    for i in $(seq 1 "$WRK_RELOADS"); do
        "$@"
        sleep "$WRK_EVERY"
    done
    wait "$wpid" || true
    read -r requests failed read connect write timeout non2xx < <(wrk_failures "$out")
    log "$name: wrk $requests responses, $failed failed (read $read, connect $connect, write $write," \
        "timeout $timeout, non-2xx $non2xx) over $WRK_RELOADS reloads"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$requests" "$failed" "$read" "$connect / $write / $timeout" \
        "$(python3 -c "print(f'{$failed / $WRK_RELOADS:.1f}')")" >>"$WRK_ROWS"
}
if command -v wrk >/dev/null; then
    for model in $MODELS; do
        port=$(free_port 18700)
        config "$WORK/a"
        taskset -c "$SERVER_CPU" "$MODUS_BIN" serve --model "$model" --config "$WORK/modus.toml" \
            --listen "127.0.0.1:$port" --access-log off >"$RESULTS_DIR/$model.wrk.server.out" \
            2>"$RESULTS_DIR/$model.wrk.server.err" &
        SPID=$!
        wait_modus_listening "$SPID" "$RESULTS_DIR/$model.wrk.server.out" "$RESULTS_DIR/$model.wrk.server.err" \
            >/dev/null
        wrk_under_reloads "$model" kill -HUP "$SPID"
        stop_pid "$SPID" modus
        SPID=
    done
    if command -v nginx >/dev/null; then
        port=$(free_port 18800)
        mkdir -p "$WORK/nginx/logs"
        user=""
        [ "$(id -u)" = 0 ] && user="user root;"
        cat >"$WORK/nginx/nginx.conf" <<NGINX
$user
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    server { listen 127.0.0.1:$port; root $WORK/a; }
}
NGINX
        nginx=(nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf")
        taskset -c "$SERVER_CPU" "${nginx[@]}" -g 'daemon off;' 2>"$RESULTS_DIR/nginx.err" &
        NPID=$!
        for _ in $(seq 1 50); do
            curl -fs -o /dev/null "http://127.0.0.1:$port/$FILE" && break
            sleep 0.1
        done
        wrk_under_reloads "nginx $(nginx -v 2>&1 | sed 's|.*nginx/||')" "${nginx[@]}" -s reload
        kill -QUIT "$NPID" 2>/dev/null || true
        wait "$NPID" 2>/dev/null || true
        NPID=
    fi
fi

BLOCK=$WORK/block.md
{
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), modus git $(git_rev_label), $(machine_label):"
    echo "\`MODELS='$MODELS' RELOADS=$RELOADS CONNS=$CONNS bench/reload.sh\` — each model on CPU $SERVER_CPU from a"
    echo "config file, \`modus load -c $CONNS\` on CPU $LOAD_CPU open loop at $SHARE of the closed-loop rate, /$FILE;"
    echo "$RELOADS SIGHUPs one a second, the config's root switched between two copies of the site before each."
    echo
    echo "| model | rate (req/s) | responses | failed (errors + re-sent) | reloads confirmed | answered (server, whole run) | access-log lines | lines lost | verdict |"
    echo "|---|---:|---:|---:|---|---:|---:|---:|---|"
    cat "$ROWS"
    if [ -s "$WRK_ROWS" ]; then
        echo
        echo "\`taskset -c $LOAD_CPU wrk -t2 -c$CONNS\` closed loop, $WRK_RELOADS reloads $WRK_EVERY s apart (SIGHUP; nginx:"
        echo "\`nginx -s reload\`), same run; a failure is any socket error or non-2xx/3xx response:"
        echo
        echo "| server | responses | failed | read errors | connect / write / timeout | failed per reload |"
        echo "|---|---:|---:|---:|---|---:|"
        cat "$WRK_ROWS"
    fi
} >"$BLOCK"
publish_block "$BLOCK" reload
