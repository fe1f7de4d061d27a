#!/usr/bin/env bash
# bench/tls.sh — HTTPS: modus (--model event) against nginx and h2o, same certificate, same core, access
# logs on, measured in the same run, interleaved.
#
# What it measures, per server (the median of ROUNDS):
#   * TLS 1.3 keep-alive, 500 B and 115 KB files: requests/s and server CPU µs per request;
#   * full handshakes per second: `--close` (a connection, and a full handshake, per request — the
#     generator keeps no session tickets), with an ECDSA P-256 and an RSA 2048 certificate;
#   * modus over plain HTTP at 500 B keep-alive, for what TLS costs it per request.
#
# Usage:
#   bench/tls.sh                         # 5 s per measurement, 3 rounds (about 5 minutes)
#   DURATION=2s ROUNDS=1 bench/tls.sh    # smoke run
#   SERVERS='modus nginx' bench/tls.sh
#
# Environment knobs (defaults in brackets):
#   DURATION    measured run                              [5s]
#   ROUNDS      interleaved rounds; medians are reported  [3]
#   CONNS       keep-alive connections                    [50]
#   HS_CONNS    connections at once in the handshake runs [50]
#   SERVERS     modus, nginx and/or h2o (a missing peer is skipped) ["modus nginx h2o"]
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   SERVER_CPU / LOAD_CPU   the servers' CPU and the generator's [0 / 1]
#   BENCH_MD    markdown file to update, "off" to skip    [<repo>/BENCHMARKS.md]
#   RESULTS_DIR raw output directory                      [<repo>/bench/results/<timestamp>-tls]
#
# The generator is `modus load` (rustls, pinned to LOAD_CPU). Server CPU µs/request = (utime+stime of the
# server's process tree after − before the measured run) ÷ the responses it got. Every server has one
# worker on SERVER_CPU: modus event with one loop, nginx worker_processes 1, h2o num-threads 1.
# Exit status: 0 on success, 1 if a run saw errors, 2 on a setup failure.
#
# Why this is not a lab spec: It measures HTTPS (keep-alive over TLS, full handshakes per second); the
# lab requests `http://` only (run.rs: measure) and its peer configurations have no TLS.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=tls
# shellcheck source=bench/lib.sh
. "$SCRIPT_DIR/lib.sh"

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
HS_CONNS=${HS_CONNS:-50}
SERVERS=${SERVERS:-modus nginx h2o}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$(date -u +%Y%m%dT%H%M%SZ)-tls}
pin_and_noise_defaults
make_workdir tls
chmod 755 "$WORK"
declare -A PID_OF=() PORT_OF=() FILE_OF=() RESULT=()
STARTED=()
FAILED=0

cleanup() {
    local name
    for name in "${STARTED[@]}"; do stop_pid "${PID_OF[$name]:-}" "$name"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

make_docroot "$DOCROOT" 500B 115KB
chmod -R a+rX "$DOCROOT"
ensure_modus_bin

# The certificates: one ECDSA P-256 and one RSA 2048, for localhost and 127.0.0.1.
for kind in ecdsa rsa; do make_cert "$kind"; done

# wait_https PORT PID NAME: until https://127.0.0.1:PORT/500B.txt answers (or the server died)
wait_https() {
    local i
    for i in $(seq 1 150); do
        if curl -sk -o /dev/null --max-time 2 "https://127.0.0.1:$1/500B.txt"; then return 0; fi
        kill -0 "$2" 2>/dev/null || { cat "$RESULTS_DIR/$3.stderr" >&2; die "$3 exited at startup"; }
        sleep 0.1
    done
    die "$3 does not answer on https://127.0.0.1:$1 after 15 s"
}

# start NAME CERT: starts server NAME (modus, modus-plain, nginx, h2o) with certificate CERT
start() {
    local name=$1 cert=$2 port conf
    port=$(free_port $((20000 + RANDOM % 20000)))
    case $name in
        modus)
            taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --model event --tls-listen "127.0.0.1:$port" \
                --tls-cert "$WORK/$cert.crt" --tls-key "$WORK/$cert.key" --access-log "$WORK/modus-access.log" \
                --error-log "$WORK/modus-error.log" ;;
        modus-plain)
            taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --model event --listen "127.0.0.1:$port" \
                --access-log "$WORK/modus-plain-access.log" --error-log "$WORK/modus-plain-error.log" ;;
        nginx)
            conf=$WORK/nginx-$cert.conf
            mkdir -p "$WORK/nginx-tmp"
            cat >"$conf" <<EOF
user root;
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000000;
    access_log $WORK/nginx-access.log;
    client_body_temp_path $WORK/nginx-tmp/body;
    proxy_temp_path $WORK/nginx-tmp/proxy;
    fastcgi_temp_path $WORK/nginx-tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx-tmp/uwsgi;
    scgi_temp_path $WORK/nginx-tmp/scgi;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate $WORK/$cert.crt;
        ssl_certificate_key $WORK/$cert.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $DOCROOT;
        location / { }
    }
}
EOF
            taskset -c "$SERVER_CPU" nginx -p "$WORK" -e "$WORK/nginx-error.log" -c "$conf" ;;
        h2o)
            conf=$WORK/h2o-$cert.conf
            cat >"$conf" <<EOF
user: nobody
num-threads: 1
error-log: $WORK/h2o-error.log
access-log: $WORK/h2o-access.log
listen:
  host: 127.0.0.1
  port: $port
  ssl:
    certificate-file: $WORK/$cert.crt
    key-file: $WORK/$cert.key
    minimum-version: TLSv1.2
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        file.dir: $DOCROOT
EOF
            taskset -c "$SERVER_CPU" h2o -c "$conf" ;;
    esac >"$RESULTS_DIR/$name.stdout" 2>"$RESULTS_DIR/$name.stderr" </dev/null &
    PID_OF[$name]=$!
    STARTED+=("$name")
    if [ "$name" = modus-plain ]; then
        wait_http "$port" "${PID_OF[$name]}" "$name" "$RESULTS_DIR/$name.stderr"
    else
        wait_https "$port" "${PID_OF[$name]}" "$name"
    fi
    PORT_OF[$name]=$port
}

stop() {
    stop_pid "${PID_OF[$1]}" "$1"
    unset "PID_OF[$1]"
    local kept=() n
    for n in "${STARTED[@]}"; do [ "$n" = "$1" ] || kept+=("$n"); done
    STARTED=("${kept[@]}")
}

# measure NAME CASE ROUND: one warm-up second, then the measured run; records "rps cpu_us hs_per_s"
measure() {
    local name=$1 case=$2 round=$3 scheme=https file args=() out t0 t1 rps hs req cpu errors
    case $case in
        ka500) file=500B.txt; args=(-c "$CONNS") ;;
        ka115) file=115KB.txt; args=(-c "$CONNS") ;;
        hs-*) file=500B.txt; args=(-c "$HS_CONNS" --close) ;;
    esac
    [ "$name" = modus-plain ] && scheme=http
    local url="$scheme://127.0.0.1:${PORT_OF[$name]}/$file"
    [ "$scheme" = https ] && args+=(-k)
    wait_quiet
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "$url" "${args[@]}" -d 1s >/dev/null 2>&1 || true
    out=$RESULTS_DIR/$name-$case-$round.json
    t0=$(tree_ticks "${PID_OF[$name]}")
    taskset -c "$LOAD_CPU" "$MODUS_BIN" load "$url" "${args[@]}" -d "$DURATION" --json >"$out" 2>"$out.stderr" || true
    t1=$(tree_ticks "${PID_OF[$name]}")
    read -r rps hs req errors < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["throughput_rps"], r.get("tls_handshakes_per_s", 0), r["requests"], r["errors"])' "$out")
    cpu=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", (n > 0) ? t * 1e6 / hz / n : 0 }')
    if [ "$errors" != 0 ]; then
        log "$name $case round $round: $errors errors (see $out)"
        FAILED=1
    fi
    RESULT[$name/$case]+=" $rps/$cpu/$hs"
    log "$name $case round $round: $(fmt_int "$rps") req/s, $cpu µs CPU/req, $(fmt_int "$hs") handshakes/s"
}

available=()
for s in $SERVERS; do
    case $s in
        nginx | h2o) command -v "$s" >/dev/null || { log "$s is not installed: skipped (apt-get install $s)"; continue; } ;;
    esac
    available+=("$s")
done

for cert in ecdsa rsa; do
    names=("${available[@]}")
    cases=(hs-$cert)
    if [ "$cert" = ecdsa ]; then
        cases=(ka500 ka115 hs-$cert)
        [[ " ${available[*]} " == *" modus "* ]] && names+=(modus-plain)
    fi
    for n in "${names[@]}"; do start "$n" "$cert"; done
    for round in $(seq 1 "$ROUNDS"); do
        # Interleaved: every server once per case per round, in an order that turns each round.
        for c in "${cases[@]}"; do
            for n in $(printf '%s\n' "${names[@]}" | awk -v r="$round" '{ a[NR] = $0 } END { for (i = 0; i < NR; i++) print a[(i + r) % NR + 1] }'); do
                [ "$n" = modus-plain ] && [ "$c" != ka500 ] && continue
                measure "$n" "$c" "$round"
            done
        done
    done
    for n in "${names[@]}"; do stop "$n"; done
done

# field I of the slash-separated triples stored for NAME/CASE: their median
med() {
    # shellcheck disable=SC2086  # word splitting intended
    median $(for v in ${RESULT[$1/$2]:-}; do cut -d/ -f"$3" <<<"$v"; done)
}

block=$(mktemp)
{
    echo "Measured $(date -u +%Y-%m-%d) by \`bench/tls.sh\` (DURATION=$DURATION ROUNDS=$ROUNDS CONNS=$CONNS"
    echo "HS_CONNS=$HS_CONNS), modus $(git_rev_label), $(machine_label); servers on CPU $SERVER_CPU, \`modus load\`"
    echo "on CPU $LOAD_CPU; access logs on; medians of $ROUNDS interleaved rounds."
    echo
    echo "| server | 500 B keep-alive req/s | CPU µs/req | 115 KB keep-alive req/s | CPU µs/req | full handshakes/s ECDSA P-256 | RSA 2048 |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for n in "${available[@]}"; do
        echo "| $n $( [ "$n" = modus ] && echo "(event)") | $(fmt_int "$(med "$n" ka500 1)") | $(fmt_2 "$(med "$n" ka500 2)") | $(fmt_int "$(med "$n" ka115 1)") | $(fmt_2 "$(med "$n" ka115 2)") | $(fmt_int "$(med "$n" hs-ecdsa 3)") | $(fmt_int "$(med "$n" hs-rsa 3)") |"
    done
    if [[ " ${available[*]} " == *" modus "* ]]; then
        echo "| modus (event), plain HTTP | $(fmt_int "$(med modus-plain ka500 1)") | $(fmt_2 "$(med modus-plain ka500 2)") | | | | |"
    fi
    echo
    best() { # best peer's median of CASE field I
        local v m=0 p
        for p in nginx h2o; do
            v=$(med "$p" "$1" "$2"); [ "$v" = nan ] && continue
            m=$(awk -v a="$m" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
        done
        echo "$m"
    }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0 || a == "nan") print "—"; else printf "%.2f×", a / b }'; }
    echo "Against the targets: 500 B keep-alive $(ratio "$(med modus ka500 1)" "$(best ka500 1)") the best peer (target ≥ 1.0×);"
    echo "115 KB keep-alive $(ratio "$(med modus ka115 1)" "$(best ka115 1)") (≥ 1.0×); full handshakes ECDSA"
    echo "$(ratio "$(med modus hs-ecdsa 3)" "$(med nginx hs-ecdsa 3)") nginx, RSA $(ratio "$(med modus hs-rsa 3)" "$(med nginx hs-rsa 3)") (≥ 0.9×);"
    echo "TLS costs modus event $(ratio "$(med modus ka500 2)" "$(med modus-plain ka500 2)") its plain-HTTP CPU per 500 B request (≤ 2×)."
} >"$block"
publish_block "$block" tls
rm -f "$block"
exit "$FAILED"
