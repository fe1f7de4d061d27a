#!/usr/bin/env bash
# bench/compress.sh — compressed responses: modus --compress against nginx with gzip_static (precompressed
# .gz files) and nginx with gzip on (encoding every response), measured in the same run, interleaved.
#
# What it measures, per server (the median of ROUNDS): a 50 KB HTML page over keep-alive connections with
# `Accept-Encoding: br, gzip` (what a browser sends over plain HTTP, less deflate), requests/s and server
# CPU µs per request, and the bytes of the body each sends:
#   * modus          --model event --compress br,zstd,gzip: brotli, made once and kept in the cache;
#   * modus-identity --model event, no --compress: the same page unencoded, for what encoding costs;
#   * nginx-static   gzip_static on, index.html.gz made beforehand by `gzip -9` (nginx cannot send br
#                    without a third-party module);
#   * nginx-gzip     gzip on, gzip_comp_level 1 (nginx's default; text/html is always among gzip_types),
#                    gzip_vary on: encodes every response.
#
# Usage:
#   bench/compress.sh                         # 5 s per measurement, 3 rounds (about 2 minutes)
#   DURATION=2s ROUNDS=1 bench/compress.sh    # smoke run
#
# Environment knobs (defaults in brackets):
#   DURATION    measured run                              [5s]
#   ROUNDS      interleaved rounds; medians are reported  [3]
#   CONNS       keep-alive connections                    [50]
#   SERVERS     which of the servers above               ["modus modus-identity nginx-static nginx-gzip"]
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   SERVER_CPU / LOAD_CPU   the servers' CPU and the generator's [0 / 1]
#   NOISE_PCT / QUIET_TIMEOUT / RETRY_NOISY   the noise guard of bench/lib.sh [5 / 60 / 2]
#   BENCH_MD    markdown file to update, "off" to skip    [<repo>/BENCHMARKS.md]
#   RESULTS_DIR raw output directory                      [<repo>/bench/results/<timestamp>-compress]
#
# The generator is `modus load -H 'Accept-Encoding: br, gzip'` (pinned to LOAD_CPU). Server CPU µs/request
# = (utime+stime of the server's process tree after − before the measured run) ÷ the responses it got.
# Every server has one worker on SERVER_CPU, no access log and no limit on requests per connection.
# Before measuring, each server's answer is checked: the coding it says, and the body decoded back to the page (`gzip -d`, `brotli -d`: apt-get
# install brotli).
# Exit status: 0 on success, 1 if a run saw errors, 2 on a setup failure.
#
# Why this is not a lab spec: Its load sends `Accept-Encoding` and its figure includes the body bytes
# each server sends, decoded and checked; the lab's `modus load` sends no extra headers (run.rs:
# measure), it records no body size, and its nginx runs the lab's one configuration (peers.rs; `args`
# are refused for peers), so nginx's gzip and gzip_static cannot be asked for.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=compress
# shellcheck source=bench/lib.sh
. "$SCRIPT_DIR/lib.sh"

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
SERVERS=${SERVERS:-modus modus-identity nginx-static nginx-gzip}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$(date -u +%Y%m%dT%H%M%SZ)-compress}
AE='Accept-Encoding: br, gzip'
pin_and_noise_defaults
DUR_S=$(to_seconds "$DURATION")
make_workdir compress
chmod 755 "$WORK"
declare -A PID_OF=() PORT_OF=() FILE_OF=() RESULT=() CODING_OF=() BYTES_OF=()
STARTED=()
FAILED=0

cleanup() {
    local name
    for name in "${STARTED[@]}"; do stop_pid "${PID_OF[$name]:-}" "$name"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# The page: 50 KB of HTML, paragraphs of words drawn from a small vocabulary by a fixed-seed generator,
# so it compresses about as a real page does (4–6×), not as a repeated line would (100×).
make_docroot "$DOCROOT" 500B
awk 'BEGIN {
    srand(19)
    n = split("the of and to in is for on that with as by this from at are be or an it not which have " \
        "server request response file cache header client connection model thread event loop process " \
        "static content encoding compression brotli gzip bytes memory kernel socket", w, " ")
    s = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>modus compression benchmark</title>\n" \
        "<link rel=\"stylesheet\" href=\"/style.css\"></head>\n<body>\n<main class=\"content\">\n"
    for (p = 1; length(s) < 51200 - 400; p++) {
        s = s "<section id=\"s" p "\"><h2>Section " p "</h2>\n<p class=\"lead\">"
        k = 40 + int(rand() * 80)
        for (i = 0; i < k; i++) s = s w[1 + int(rand() * n)] (i % 13 == 12 ? ".\n" : " ")
        s = s "</p>\n<ul><li><a href=\"/page/" p "\">more</a></li><li><a href=\"/page/" p "#top\">top</a></li></ul></section>\n"
    }
    s = s "</main>\n</body></html>\n"
    while (length(s) < 51200) s = s " "
    printf "%s", substr(s, 1, 51200)
}' >"$DOCROOT/index.html"
gzip -9 -k -n "$DOCROOT/index.html"
touch -r "$DOCROOT/index.html" "$DOCROOT/index.html.gz"
chmod -R a+rX "$DOCROOT"
PAGE_BYTES=$(stat -c %s "$DOCROOT/index.html")
ensure_modus_bin

# start NAME: starts server NAME on a free port, waits until it answers
start() {
    local name=$1 port conf
    port=$(free_port $((20000 + RANDOM % 20000)))
    case $name in
        modus | modus-identity)
            local extra=()
            [ "$name" = modus ] && extra=(--compress br,zstd,gzip)
            launch_server "$name" "$port" "$RESULTS_DIR/$name.stderr" taskset -c "$SERVER_CPU" "$MODUS_BIN" serve \
                "$DOCROOT" --model event --listen "127.0.0.1:$port" --access-log off \
                --error-log "$WORK/$name-error.log" --max-keepalive-requests 100000000 "${extra[@]}" ;;
        nginx-static | nginx-gzip)
            local directives=("gzip_vary on;")
            if [ "$name" = nginx-static ]; then directives+=("gzip_static on;"); else directives+=("gzip on;"); fi
            conf=$WORK/$name.conf
            nginx_conf "$port" off 16384 8192 "" "$(nginx_mime)" "${directives[@]}" \
                | sed -e "s#$WORK/nginx.pid#$WORK/$name.pid#" -e "s#$WORK/nginx-error.log#$WORK/$name-error.log#" >"$conf"
            cp "$conf" "$RESULTS_DIR/$name.conf"
            check_nginx_conf "$conf"
            launch_server "$name" "$port" "$WORK/$name-error.log" taskset -c "$SERVER_CPU" nginx -p "$WORK" \
                -e "$WORK/$name-error.log" -c "$conf" ;;
        *) die "no server $name" ;;
    esac
}

# check NAME: the coding NAME sends the page in, and that its body decodes to the page
check() {
    local name=$1 url coding
    url="http://127.0.0.1:${PORT_OF[$name]}/index.html"
    coding=$(curl -sS --max-time 5 -H "$AE" -D "$WORK/$name.head" -o "$WORK/$name.body" "$url" -w '%{content_type}' >/dev/null \
        && awk -F': ' 'tolower($1) == "content-encoding" { gsub(/\r/, "", $2); print $2 }' "$WORK/$name.head")
    case ${coding:-identity} in
        br) command -v brotli >/dev/null || die "brotli is not installed, to check $name's body (apt-get install brotli)"
            brotli -dc <"$WORK/$name.body" >"$WORK/$name.plain" ;;
        gzip) gzip -dc <"$WORK/$name.body" >"$WORK/$name.plain" ;;
        identity) cp "$WORK/$name.body" "$WORK/$name.plain" ;;
        *) die "$name answered with coding $coding" ;;
    esac
    cmp -s "$WORK/$name.plain" "$DOCROOT/index.html" || die "$name: the body does not decode to the page"
    CODING_OF[$name]=${coding:-identity}
    BYTES_OF[$name]=$(stat -c %s "$WORK/$name.body")
    log "$name sends the page as ${CODING_OF[$name]}, ${BYTES_OF[$name]} bytes"
}

# measure NAME ROUND: one warm-up second, then the measured run; records "rps cpu_us". A run during which
# other jobs used NOISE_PCT % of a core or more is measured again, RETRY_NOISY times at most (the noise
# guard of bench/lib.sh's measure_run); one still noisy is kept and counted in NOISY.
measure() {
    local name=$1 round=$2 out t0 t1 rps req cpu errors attempt=0 a0 o0 a1 o1 other
    local url="http://127.0.0.1:${PORT_OF[$name]}/index.html"
    out=$RESULTS_DIR/$name-$round.json
    while :; do
        attempt=$((attempt + 1))
        wait_quiet
        taskset -c "$LOAD_CPU" "$MODUS_BIN" load "$url" -c "$CONNS" -H "$AE" -d 1s >/dev/null 2>&1 || true
        a0=$(all_user_ticks); o0=$(tree_ticks $$)
        t0=$(tree_ticks "${PID_OF[$name]}")
        taskset -c "$LOAD_CPU" "$MODUS_BIN" load "$url" -c "$CONNS" -H "$AE" -d "$DURATION" --json >"$out" 2>"$out.stderr" || true
        t1=$(tree_ticks "${PID_OF[$name]}")
        a1=$(all_user_ticks); o1=$(tree_ticks $$)
        other=$(( ((a1 - a0) - (o1 - o0)) * 100 / CLK_TCK / DUR_S ))
        [ "$other" -lt "$NOISE_PCT" ] && break
        if [ "$attempt" -le "$RETRY_NOISY" ]; then
            log "other jobs used ${other}% of a core during $name round $round: measuring again"
            RETRIED=$((RETRIED + 1))
            continue
        fi
        log "warning: other jobs used ${other}% of a core during $name round $round (noise)"
        NOISY=$((NOISY + 1))
        break
    done
    read -r rps req errors < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["throughput_rps"], r["requests"], r["errors"])' "$out")
    cpu=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
    if [ "$errors" != 0 ]; then
        log "$name round $round: $errors errors (see $out)"
        FAILED=1
    fi
    RESULT[$name]+=" $rps/$cpu"
    log "$name round $round: $(fmt_int "$rps") req/s, $cpu µs CPU/req"
}

available=()
for s in $SERVERS; do
    case $s in
        nginx-*) command -v nginx >/dev/null || { log "nginx is not installed: $s skipped (apt-get install nginx)"; continue; } ;;
    esac
    available+=("$s")
done
for n in "${available[@]}"; do start "$n"; check "$n"; done
for round in $(seq 1 "$ROUNDS"); do
    # Interleaved: every server once per round, in an order that turns each round.
    for n in $(printf '%s\n' "${available[@]}" | awk -v r="$round" '{ a[NR] = $0 } END { for (i = 0; i < NR; i++) print a[(i + r) % NR + 1] }'); do
        measure "$n" "$round"
    done
done

# field I of the slash-separated pairs stored for NAME: their median
med() {
    # shellcheck disable=SC2086  # word splitting intended
    median $(for v in ${RESULT[$1]:-}; do cut -d/ -f"$2" <<<"$v"; done)
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "nan" || b == "nan") print "—"; else printf "%.2f×", a / b }'; }

block=$(mktemp)
{
    echo "Measured $(date -u +%Y-%m-%d) by \`bench/compress.sh\` (DURATION=$DURATION ROUNDS=$ROUNDS CONNS=$CONNS),"
    echo "modus $(git_rev_label), $(machine_label); servers on CPU $SERVER_CPU, \`modus load\` on CPU $LOAD_CPU;"
    echo "a $PAGE_BYTES-byte HTML page, keep-alive, \`$AE\`; no access logs; medians of $ROUNDS interleaved rounds"
    echo "($RETRIED runs measured again for noise, $NOISY still noisy)."
    echo
    echo "| server | sends | body bytes | req/s | server CPU µs/req |"
    echo "|---|---|---:|---:|---:|"
    for n in "${available[@]}"; do
        echo "| $n | ${CODING_OF[$n]} | ${BYTES_OF[$n]} | $(fmt_int "$(med "$n" 1)") | $(fmt_2 "$(med "$n" 2)") |"
    done
    echo
    echo "modus --compress against nginx gzip_static: $(ratio "$(med modus 1)" "$(med nginx-static 1)") the req/s (target ≥ 1.0×),"
    echo "$(ratio "$(med nginx-static 2)" "$(med modus 2)") less CPU per request; against nginx on-the-fly gzip:"
    echo "$(ratio "$(med modus 1)" "$(med nginx-gzip 1)") the req/s (target ≥ 3×), $(ratio "$(med nginx-gzip 2)" "$(med modus 2)") less CPU per request."
} >"$block"
publish_block "$block" compress
rm -f "$block"
exit "$FAILED"
