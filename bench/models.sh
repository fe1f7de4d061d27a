#!/usr/bin/env bash
# bench/models.sh — every modus concurrency model against nginx, lighttpd, h2o and Apache httpd's
# prefork / worker / event MPMs, in the same run (issue 3, "Benchmark (not a test)").
#
# Usage:
#   bench/models.sh                     # static files: req/s, p99, server CPU µs/request (10 s, 3 rounds)
#   DURATION=2s ROUNDS=1 SERVERS='event nginx' bench/models.sh        # smoke run
#   bench/models.sh idle                # PSS per idle keep-alive connection, 10,000 of them open
#   SERVERS='event nginx' bench/models.sh idle
#   bench/models.sh syscalls            # syscalls per keep-alive 500 B request (strace -c -f), evidence
#   bench/models.sh cgi                 # CGI (issue 4): spin?ms=10 and a trivial script at 8 and 50 clients,
#                                       # modus models vs Apache mod_cgi/mod_cgid and lighttpd mod_cgi
#
# Servers (SERVERS, any subset, in this order by default):
#   modus models: per-request pool staged prefork worker perchild event amped uring
#   peers:        nginx lighttpd h2o apache-prefork apache-worker apache-event
# Idle mode default: event amped pool nginx lighttpd h2o. CGI mode default: every modus model, lighttpd and
# the three Apache MPMs (nginx and h2o run no CGI).
#
# Environment knobs (defaults in brackets):
#   DURATION ROUNDS WARMUP CONNS SIZES MODES   bench/lib.sh's file_run_defaults [10s 3 1s 50 "500B 50KB 115KB" "keepalive close"]
#   PREWARM     keep-alive load on each server before the first measured run [6s]
#   SERVERS     servers to run                         [all 14; idle: "event amped pool nginx lighttpd h2o"]
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   MODUS_ARGS  extra arguments for every `modus serve` [""]
#   IDLE_CONNS  idle keep-alive connections (idle mode) [10000]
#   CGI_CASES   CGI mode: SCRIPT/CONNECTIONS cases ["spin10/8 spin10/50 spin0/8 spin0/50"];
#               spinN = the bundled cgi-spin computing N ms of CPU (the papers' CGI workload); spin0 = trivial
#   SERVER_CPU LOAD_CPU NOISE_PCT QUIET_TIMEOUT RETRY_NOISY NOISE_BUDGET   bench/lib.sh's pin_and_noise_defaults [0 1 5 60 2 900]
#   BENCH_MD    markdown file to update, "off" to skip  [<repo>/BENCHMARKS.md]
#   RESULTS_DIR raw output directory                    [<repo>/bench/results/models-<timestamp>]
#
# Server CPU µs/request = (utime+stime+cutime+cstime of the server's whole process tree, /proc/PID/stat,
# after − before) ÷ requests wrk completed.  Every server is started under `taskset -c SERVER_CPU`, so all
# its processes and threads run on that core; wrk runs on LOAD_CPU.
# Needs wrk, curl, taskset, python3 (idle), strace (syscalls), nginx, lighttpd, h2o, apache2:
#   apt-get install -y wrk nginx lighttpd h2o apache2
# (Debian's packages; the script starts none of their system services and writes its own configs.)
# Exit status: 0 on success, 1 if a run saw socket errors / non-2xx answers (marked) or an idle run
# could not hold its connections, 2 on a setup failure.
#
# Why this is not a lab spec: Every server writes an access log to a file (lighttpd at its leanest fair
# setup: mod_accesslog and nothing else) and the load is wrk, with each core's utilisation read from
# /proc/stat to show which side was saturated; the lab runs every server without an access log from its
# own peer configurations, drives `modus load`, and has no per-core utilisation. Its `idle` mode (10,000
# idle keep-alive connections held by a Python client) and `syscalls` mode (strace -c -f) have no lab
# equivalent at all.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=models.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

ACTION=${1:-bench}
case $ACTION in bench|idle|syscalls|cgi) ;; *) die "unknown action '$ACTION' (bench, idle, syscalls, cgi)";; esac

MODUS_MODELS=$ALL_MODELS
PEERS="nginx lighttpd h2o apache-prefork apache-worker apache-event"
file_run_defaults
# load on every server once before the first measured run: modus prefork grows from --min-spare 10 children
# by 1, 2, 4, 8, 16 … a second (as Apache does), so 50 keep-alive connections need about 5 s of it
PREWARM=${PREWARM:-6s}
case $ACTION in
    idle) SERVERS=${SERVERS:-event amped pool nginx lighttpd h2o} ;;
    syscalls) SERVERS=${SERVERS:-event pool prefork worker nginx lighttpd h2o apache-event} ;;
    cgi) SERVERS=${SERVERS:-$MODUS_MODELS lighttpd apache-prefork apache-worker apache-event} ;;
    *) SERVERS=${SERVERS:-$MODUS_MODELS $PEERS} ;;
esac
MODUS_ARGS=${MODUS_ARGS:-}
IDLE_CONNS=${IDLE_CONNS:-10000}
CGI_CASES=${CGI_CASES:-spin10/8 spin10/50 spin0/8 spin0/50}
pin_and_noise_defaults
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/models-$ACTION-$STAMP}
# idle mode: keep-alive timeouts long enough to hold 10,000 connections while they are opened and measured
IDLE_TIMEOUT_S=300

is_modus() { case " $MODUS_MODELS " in *" $1 "*) return 0 ;; esac; return 1; }
has() { case " $SERVERS " in *" $1 "*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------- checks

missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need wrk wrk; need curl curl; need taskset util-linux; need setsid util-linux
for s in $SERVERS; do
    case " $MODUS_MODELS " in *" $s "*) continue ;; esac
    case $s in
        nginx) [ "$ACTION" != cgi ] || die "nginx runs no CGI"; need nginx nginx ;;
        lighttpd) need lighttpd lighttpd ;;
        h2o) [ "$ACTION" != cgi ] || die "h2o runs no CGI here"; need h2o h2o ;;
        apache-prefork|apache-worker|apache-event)
            [ -x "$APACHE_BIN" ] && [ -r "$APACHE_MODS/mod_mpm_${s#apache-}.so" ] || missing+=(apache2) ;;
        *) die "SERVERS: unknown server '$s' (models: $MODUS_MODELS; peers: $PEERS)" ;;
    esac
done
[ "$ACTION" = idle ] && need python3 python3
[ "$ACTION" = syscalls ] && need strace strace
if [ "${#missing[@]}" -gt 0 ]; then
    # shellcheck disable=SC2207
    missing=($(printf '%s\n' "${missing[@]}" | sort -u))
    die "missing: ${missing[*]} — install with: apt-get update && apt-get install -y ${missing[*]}"
fi
for m in $MODES; do
    case $m in keepalive|close) ;; *) die "MODES: unknown mode '$m' (keepalive, close)";; esac
done
run_lengths
[ "$(nproc)" -gt "$LOAD_CPU" ] || log "warning: CPU $LOAD_CPU does not exist here; pinning will fail"

make_workdir models
chmod 755 "$WORK"   # Apache's children run as www-data and must reach the docroot
CGI_DIR=$WORK/cgi-bin   # cgi mode: the bundled cgi-spin, copied so Apache's www-data children may run it

declare -A PORT_OF=() PID_OF=() LOG_OF=() CMD_OF=() SET_OF=()
STARTED=()
cleanup() {
    local s
    for s in "${STARTED[@]}"; do stop_server "$s"; done
    # keep the servers' error logs with the raw results
    find "$WORK" -maxdepth 2 -name '*error.log' -size +0 2>/dev/null | while read -r f; do
        cp "$f" "$RESULTS_DIR/$(basename "$(dirname "$f")")-$(basename "$f")" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

declare -A FILE_OF=()
# shellcheck disable=SC2086  # word splitting intended
make_docroot "$DOCROOT" $SIZES 500B
chmod -R a+rX "$DOCROOT"

# ---------------------------------------------------------------- servers

# modus settings per model (stated in the report). Beyond these: the keep-alive request cap is lifted.
modus_model_args() {
    case $1 in
        per-request) echo "" ;;                                                 # --max-threads 4096 (default)
        pool) if [ "$ACTION" = idle ]; then echo "--threads $((IDLE_CONNS + 100))"; else echo ""; fi ;;  # 128 threads
        staged) echo "" ;;                                                      # read=2,data=2,cgi=4,write=2,log=1
        prefork) echo "--start-servers 60 --min-spare 10 --max-spare 60 --max-clients 128" ;;
        worker) echo "--threads-per-child 25 --min-spare 25 --max-spare 75 --max-clients 150" ;;  # Apache worker's Debian sizing
        perchild) echo "--processes 2 --threads-per-child 64 --min-spare 5 --max-spare 60 --max-clients 128" ;;
        event) echo "--workers 1" ;;
        amped) echo "--workers 1" ;;                                            # --helpers 4 (default)
    esac
}

# what the defaults not on the command line amount to, for the report
modus_model_note() {
    case $1 in
        per-request) echo "a thread per connection, \`--max-threads 4096\` (default)" ;;
        pool) if [ "$ACTION" = idle ]; then echo "one thread per connection held"; else echo "\`--threads 128 --queue 1024\` (defaults)"; fi ;;
        staged) echo "\`--stage-threads read=2,data=2,cgi=4,write=2,log=1\` (default)" ;;
        prefork) echo "sized like Apache prefork below, StartServers included" ;;
        worker) echo "Apache worker's sizing below" ;;
        perchild) echo "2 processes × up to 64 threads" ;;
        event) echo "one epoll loop" ;;
        amped) echo "one epoll loop, \`--helpers 4\` (default)" ;;
    esac
}

start_modus_model() {
    local model=$1 port line addr args
    local -a argv=()
    ensure_modus_bin
    port=$(free_port 18300)
    args="$(modus_model_args "$model") --max-keepalive-requests 100000000"
    args=${args# }
    [ "$ACTION" = idle ] && args="$args --keepalive-timeout ${IDLE_TIMEOUT_S}s"
    [ "$ACTION" = cgi ] && args="$args --cgi-dir $CGI_DIR"
    [ -n "$MODUS_ARGS" ] && args="$args $MODUS_ARGS"
    read -r -a argv <<<"$args"
    LOG_OF[$model]=$WORK/$model-access.log
    taskset -c "$SERVER_CPU" "$MODUS_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" --model "$model" \
        --access-log "${LOG_OF[$model]}" "${argv[@]}" \
        >"$RESULTS_DIR/$model.stdout" 2>"$RESULTS_DIR/$model.stderr" &
    PID_OF[$model]=$!
    STARTED+=("$model")
    line=$(wait_modus_listening "${PID_OF[$model]}" "$RESULTS_DIR/$model.stdout" "$RESULTS_DIR/$model.stderr") || exit 2
    addr=$(awk '{ print $3 }' <<<"$line")
    PORT_OF[$model]=${addr##*:}
    CMD_OF[$model]="taskset -c $SERVER_CPU modus serve DOCROOT --listen 127.0.0.1:PORT --model $model --access-log FILE ${args//$CGI_DIR/WORK\/cgi-bin}"
    SET_OF[$model]="$(modus_model_note "$model"); \`--defer-accept 1s\` (default: TCP_DEFER_ACCEPT, as h2o)"
}

start_nginx() {
    local port conf=$WORK/nginx.conf kt=75s
    port=$(free_port 18400)
    [ "$ACTION" = idle ] && kt=${IDLE_TIMEOUT_S}s
    LOG_OF[nginx]=$WORK/nginx-access.log
    # 16384 connections: nginx starts closing idle keep-alive connections when fewer than 1/16 of its
    # slots are free, and idle mode holds 10,000
    nginx_conf "$port" "${LOG_OF[nginx]}" 20000 16384 "" "$(nginx_mime)" "keepalive_timeout $kt;" >"$conf"
    cp "$conf" "$RESULTS_DIR/nginx.conf"
    check_nginx_conf "$conf"
    launch_server nginx "$port" "$WORK/nginx-error.log" \
        taskset -c "$SERVER_CPU" nginx -p "$WORK" -e "$WORK/nginx-error.log" -c "$conf"
    CMD_OF[nginx]="taskset -c $SERVER_CPU nginx -p WORK -c WORK/nginx.conf"
    SET_OF[nginx]="worker_processes 1; worker_connections 16384; sendfile on; tcp_nopush on; keepalive_requests 100000000; keepalive_timeout $kt; access_log (combined, unbuffered); no open_file_cache; listen without \`deferred\` (default)"
}

start_lighttpd() {
    local port conf=$WORK/lighttpd.conf idle=5
    port=$(free_port 18500)
    [ "$ACTION" = idle ] && idle=$IDLE_TIMEOUT_S
    LOG_OF[lighttpd]=$WORK/lighttpd-access.log
    local cgi_conf="" modules='"mod_accesslog"'
    if [ "$ACTION" = cgi ]; then
        modules='"mod_alias", "mod_cgi", "mod_accesslog"'
        cgi_conf="alias.url = ( \"/cgi-bin/\" => \"$CGI_DIR/\" )
\$HTTP[\"url\"] =~ \"^/cgi-bin/\" { cgi.assign = ( \"\" => \"\" ) }"
    fi
    cat >"$conf" <<EOF
# generated by bench/models.sh
server.modules = ( $modules )
server.document-root = "$DOCROOT"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$WORK/lighttpd-error.log"
accesslog.filename = "${LOG_OF[lighttpd]}"
server.max-keep-alive-requests = 100000000
server.max-keep-alive-idle = $idle
server.max-fds = 20000
server.max-connections = 10240
mimetype.assign = ( ".txt" => "text/plain", "" => "application/octet-stream" )
$cgi_conf
EOF
    cp "$conf" "$RESULTS_DIR/lighttpd.conf"
    lighttpd -tt -f "$conf" >"$RESULTS_DIR/lighttpd-check.txt" 2>&1 || { cat "$RESULTS_DIR/lighttpd-check.txt" >&2; die "lighttpd -tt failed"; }
    launch_server lighttpd "$port" "$WORK/lighttpd-error.log" taskset -c "$SERVER_CPU" lighttpd -D -f "$conf"
    CMD_OF[lighttpd]="taskset -c $SERVER_CPU lighttpd -D -f WORK/lighttpd.conf"
    local cgi_note=''
    [ "$ACTION" = cgi ] && cgi_note=' mod_cgi (fork+exec per request) under /cgi-bin/;'
    SET_OF[lighttpd]="1 process (default); mod_accesslog (CLF);$cgi_note server.max-keep-alive-requests = 100000000; server.max-keep-alive-idle = $idle; server.max-fds = 20000; server.max-connections = 10240; network backend: default (sendfile); server.defer-accept 0 (default)"
}

start_h2o() {
    local port conf=$WORK/h2o.conf timeout=10
    port=$(free_port 18600)
    [ "$ACTION" = idle ] && timeout=$IDLE_TIMEOUT_S
    LOG_OF[h2o]=$WORK/h2o-access.log
    cat >"$conf" <<EOF
# generated by bench/models.sh
user: root
pid-file: $WORK/h2o.pid
error-log: $WORK/h2o-error.log
num-threads: 1
max-connections: 10240
http1-request-timeout: $timeout
listen:
  host: 127.0.0.1
  port: $port
hosts:
  default:
    access-log: ${LOG_OF[h2o]}
    paths:
      /:
        file.dir: $DOCROOT
EOF
    [ "$(id -u)" -eq 0 ] || sed -i '/^user: root$/d' "$conf"
    cp "$conf" "$RESULTS_DIR/h2o.conf"
    h2o -t -c "$conf" >"$RESULTS_DIR/h2o-check.txt" 2>&1 || { cat "$RESULTS_DIR/h2o-check.txt" >&2; die "h2o -t failed"; }
    launch_server h2o "$port" "$WORK/h2o-error.log" taskset -c "$SERVER_CPU" h2o -c "$conf"
    CMD_OF[h2o]="taskset -c $SERVER_CPU h2o -c WORK/h2o.conf"
    SET_OF[h2o]="num-threads: 1; max-connections: 10240; http1-request-timeout: $timeout; access-log (default combined format); no per-connection request cap; TCP_DEFER_ACCEPT 1 s (built in)"
}

# Apache httpd with bench/lib.sh's config (launch_apache); mod_cgi or mod_cgid in cgi mode.
start_apache() {
    local name=$1 mpm=${1#apache-} port kt=5 cgi_mod=""
    port=$(free_port 18700)
    [ "$ACTION" = idle ] && kt=$IDLE_TIMEOUT_S
    LOG_OF[$name]=$WORK/$name/access.log
    if [ "$ACTION" = cgi ]; then
        # Debian's choice: mod_cgi under prefork, mod_cgid (a fork server) under the threaded MPMs
        cgi_mod=cgi
        [ "$mpm" = prefork ] || cgi_mod=cgid
    fi
    launch_apache "$name" "$mpm" "$port" "$kt" "${LOG_OF[$name]}" "$cgi_mod"
    CMD_OF[$name]="setsid taskset -c $SERVER_CPU apache2 -f WORK/$name/httpd.conf -DFOREGROUND"
    local cgi_note=''
    [ "$ACTION" = cgi ] && cgi_note=" mod_$cgi_mod + ScriptAlias /cgi-bin/;"
    SET_OF[$name]="mpm_$mpm: $(apache_sizing "$mpm" | paste -sd ';' | sed 's/;/; /g');$cgi_note KeepAlive On; MaxKeepAliveRequests 0 (unlimited); KeepAliveTimeout $kt; EnableSendfile On; CustomLog combined; AcceptFilter http data (Linux default: TCP_DEFER_ACCEPT 30 s)"
}

start_server() {
    local s=$1
    if is_modus "$s"; then start_modus_model "$s"
    else
        case $s in
            nginx) start_nginx ;;
            lighttpd) start_lighttpd ;;
            h2o) start_h2o ;;
            apache-*) start_apache "$s" ;;
        esac
    fi
    log "$s: 127.0.0.1:${PORT_OF[$s]} pid ${PID_OF[$s]} ($(pid_tree "${PID_OF[$s]}" | wc -l) processes)"
}

stop_server() {
    local s=$1 i
    local -a STILL=()
    stop_pid "${PID_OF[$s]:-}" "$s"
    for i in "${!STARTED[@]}"; do [ "${STARTED[$i]}" = "$s" ] || STILL+=("${STARTED[$i]}"); done
    STARTED=("${STILL[@]}")
}

server_version() {
    case $1 in
        nginx) { nginx -v 2>&1 || true; } | sed -n '1s/^nginx version: //p' ;;
        lighttpd) { lighttpd -v 2>&1 || true; } | awk 'NR == 1 { print $1 }' ;;
        h2o) { h2o -v 2>&1 || true; } | awk 'NR == 1 { print "h2o/" $3 }' ;;
        apache-*) { "$APACHE_BIN" -v 2>&1 || true; } | sed -n '1s/^Server version: //p' ;;
        *) { "${MODUS_BIN:-modus}" --version 2>/dev/null || true; } | head -n 1 ;;
    esac
}

versions_line() {
    local parts=() seen=" " v s
    for s in $SERVERS; do
        v=$(server_version "$s")
        case $seen in *" $v "*) ;; *) parts+=("$v"); seen="$seen$v " ;; esac
    done
    parts+=("wrk $({ wrk -v 2>&1 || true; } | awk 'NR == 1 { print $2 }')")
    local IFS=';'
    echo "${parts[*]}" | sed 's/;/; /g'
}

settings_list() {
    local s
    for s in $SERVERS; do
        echo "- **$s**: \`${CMD_OF[$s]}\` — ${SET_OF[$s]}"
    done
}

# ---------------------------------------------------------------- idle mode

idle_client() {
    cat >"$WORK/idle_client.py" <<'EOF'
# Opens N keep-alive connections, sends one GET on each and reads the whole answer, then holds them
# open (idle) until SIGTERM or HOLD seconds. Writes "open N" to READY when all are open.
import resource, signal, socket, sys, time
port, n, path, ready, hold = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: idle-client\r\n\r\n" % path).encode()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(req)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("connection %d closed before the answer's head" % i)
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        sys.exit("connection %d: %r" % (i, head.split(b"\r\n")[0]))
    cl = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            cl = int(v)
    while len(body) < cl:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("connection %d closed mid-body" % i)
        body += chunk
    socks.append(s)
with open(ready, "w") as f:
    f.write("open %d\n" % len(socks))
time.sleep(hold)
EOF
}

run_idle() {
    idle_client
    local TABLE=$WORK/idle-table.md s pss0 pss1 rss0 rss1 est cpid i per fail=0 ok
    local CSV=$RESULTS_DIR/idle.csv
    echo "server,connections,established,pss_before_kb,pss_after_kb,rss_before_kb,rss_after_kb,pss_bytes_per_conn" >"$CSV"
    {
        echo "| server | idle connections held | PSS before, KiB | PSS with them open, KiB | **PSS per idle connection** | RSS per idle connection | target ≤ 0.5 KiB (event, amped) |"
        echo "|---|---:|---:|---:|---:|---:|---|"
    } >"$TABLE"
    local T0
    T0=$(date +%s)
    for s in $SERVERS; do
        start_server "$s"
        # warm-up: every file once, a few new connections, so caches and lazy set-up are in "before"
        for i in 1 2 3 4 5; do
            for sz in $SIZES 500B; do curl -s -o /dev/null --max-time 5 "http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$sz]}" || true; done
        done
        sleep 1
        pss0=$(tree_pss_kb "${PID_OF[$s]}"); rss0=$(tree_rss_kb "${PID_OF[$s]}")
        rm -f "$WORK/ready"
        taskset -c "$LOAD_CPU" python3 "$WORK/idle_client.py" "${PORT_OF[$s]}" "$IDLE_CONNS" /500B.txt "$WORK/ready" 120 \
            >"$RESULTS_DIR/idle-$s.client.txt" 2>&1 &
        cpid=$!
        ok=0
        for i in $(seq 1 900); do   # up to 90 s to open them
            if [ -s "$WORK/ready" ]; then ok=1; break; fi
            kill -0 "$cpid" 2>/dev/null || break
            sleep 0.1
        done
        if [ "$ok" -eq 1 ]; then
            sleep 2
            est=$(ss -Htn state established "( sport = :${PORT_OF[$s]} )" 2>/dev/null | wc -l)
            pss1=$(tree_pss_kb "${PID_OF[$s]}"); rss1=$(tree_rss_kb "${PID_OF[$s]}")
            per=$(( (pss1 - pss0) * 1024 / IDLE_CONNS ))
            local rper=$(( (rss1 - rss0) * 1024 / IDLE_CONNS ))
            local target="—"
            case $s in event|amped) if [ "$per" -le 512 ]; then target="met"; else target="**not met**"; fi ;; esac
            local note=""
            if [ "$est" -lt "$IDLE_CONNS" ]; then note=" (**only $est of $IDLE_CONNS established**)"; fail=1; fi
            echo "| $s | $est$note | $pss0 | $pss1 | **$per B** ($(awk -v b="$per" 'BEGIN { printf "%.2f", b / 1024 }') KiB) | $rper B | $target |" >>"$TABLE"
            echo "$s,$IDLE_CONNS,$est,$pss0,$pss1,$rss0,$rss1,$per" >>"$CSV"
            log "$s: $est connections established; PSS $pss0 → $pss1 KiB: $per B per idle connection (RSS $rper B)"
        else
            log "$s: the client could not open $IDLE_CONNS connections: $(tail -n 2 "$RESULTS_DIR/idle-$s.client.txt" | tr '\n' ' ')"
            echo "| $s | **failed**: $(tail -n 1 "$RESULTS_DIR/idle-$s.client.txt") | $pss0 | — | — | — | — |" >>"$TABLE"
            fail=1
        fi
        stop_pid "$cpid" idle-client
        stop_server "$s"
        sleep 1
    done
    local ELAPSED=$(( $(date +%s) - T0 ))
    local BLOCK=$WORK/idle-block.md
    {
        echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') — $(machine_label)"
        echo
        echo "- $(versions_line); modus git $(git_rev_label)"
        echo "- command: \`SERVERS='$SERVERS' IDLE_CONNS=$IDLE_CONNS bench/models.sh idle\` ($ELAPSED s)"
        echo "- client: \`taskset -c $LOAD_CPU python3 idle_client.py PORT $IDLE_CONNS /500B.txt\` — opens $IDLE_CONNS connections one after another, sends one \`GET /500B.txt\` (HTTP/1.1, keep-alive) on each, reads the whole answer, then leaves them idle (RLIMIT_NOFILE raised to the hard limit, $(ulimit -Hn))"
        echo "- PSS = sum of \`Pss\` in \`/proc/PID/smaps_rollup\` over the server's processes, measured after a warm-up (every file fetched 5 times) and again 2 s after the last connection was open; per connection = difference × 1024 ÷ $IDLE_CONNS. \"held\" = established connections on the server's port (\`ss\`) at the second measurement. Kernel socket memory is not in PSS."
        echo "- every server's idle keep-alive timeout set to $IDLE_TIMEOUT_S s for this run; each server alone on the machine while measured, pinned to CPU $SERVER_CPU"
        echo "- servers:"
        settings_list | sed 's/^/  /'
        echo
        cat "$TABLE"
    } >"$BLOCK"
    publish_block "$BLOCK" idle
    return "$fail"
}

# ---------------------------------------------------------------- syscalls mode (evidence)

# context switches (voluntary + involuntary) of every thread of a process tree (live threads only)
tree_ctxsw() {
    local pid
    for pid in $(pid_tree "$1"); do
        cat /proc/"$pid"/task/*/status 2>/dev/null || true
    done | awk '/^(non)?voluntary_ctxt_switches:/ { t += $2 } END { print t + 0 }'
}

run_syscalls() {
    local s m pids reqs calls out TABLE=$WORK/sys-table.md sdur=${SYSCALL_DURATION:-2s} cs0 cs1 creqs u0 k0 u1 k1
    local smodes=${SYSCALL_MODES:-keepalive close}
    for s in $SERVERS; do start_server "$s"; done
    : >"$TABLE"
    for m in $smodes; do
        {
            echo
            echo "**500 B, $( [ "$m" = close ] && echo "\`Connection: close\`" || echo keep-alive)**"
            echo
            echo "| server | user µs/req | system µs/req | context switches per request | syscalls per request (strace) | top syscalls (calls per request) |"
            echo "|---|---:|---:|---:|---:|---|"
        } >>"$TABLE"
        for s in $SERVERS; do
            local url="http://127.0.0.1:${PORT_OF[$s]}/500B.txt"
            run_wrk 1s "$url" "$m" "$RESULTS_DIR/sys-$m-$s.warmup" || true
            cs0=$(tree_ctxsw "${PID_OF[$s]}"); read -r u0 k0 < <(tree_ut_st "${PID_OF[$s]}")
            run_wrk "$sdur" "$url" "$m" "$RESULTS_DIR/ctxsw-$m-$s.wrk" || true
            cs1=$(tree_ctxsw "${PID_OF[$s]}"); read -r u1 k1 < <(tree_ut_st "${PID_OF[$s]}")
            creqs=$(awk '/ requests in / { print $1 }' "$RESULTS_DIR/ctxsw-$m-$s.wrk")
            pids=$(pid_tree "${PID_OF[$s]}" | sed 's/^/-p /' | tr '\n' ' ')
            out=$RESULTS_DIR/strace-$m-$s.txt
            # shellcheck disable=SC2086
            timeout 60 strace -c -f $pids -o "$out" 2>/dev/null &
            local spid=$!
            sleep 1
            run_wrk "$sdur" "$url" "$m" "$RESULTS_DIR/sys-$m-$s.wrk" || true
            kill -INT "$spid" 2>/dev/null || true
            wait "$spid" 2>/dev/null || true
            reqs=$(awk '/ requests in / { print $1 }' "$RESULTS_DIR/sys-$m-$s.wrk")
            calls=$(awk '$NF == "total" { print $4 }' "$out")
            local top
            # rows between the two dashed lines: % time, seconds, usecs/call, calls, [errors,] syscall
            top=$(awk -v n="${reqs:-1}" '/^-----/ { sec++; next } sec == 1 && NF >= 5 { printf "%s %.2f\n", $NF, $4 / n }' "$out" \
                | sort -k2 -gr | head -n 7 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')
            echo "| $s | $(awk -v d="$((u1 - u0))" -v n="${creqs:-0}" -v hz="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", d / hz * 1e6 / n; else print "—" }') | $(awk -v d="$((k1 - k0))" -v n="${creqs:-0}" -v hz="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", d / hz * 1e6 / n; else print "—" }') | $(awk -v d="$((cs1 - cs0))" -v n="${creqs:-0}" 'BEGIN { if (n > 0) printf "%.2f", d / n; else print "—" }') | $(awk -v c="${calls:-0}" -v n="${reqs:-0}" 'BEGIN { if (n > 0) printf "%.1f", c / n; else print "—" }') | $top |" >>"$TABLE"
            log "$m $s: ${calls:-0} syscalls for ${reqs:-0} requests"
        done
    done
    {
        echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), modus git $(git_rev_label): \`SERVERS='$SERVERS' bench/models.sh syscalls\` (same settings as above). Per server and mode, \`wrk -t1 -c$CONNS -d$sdur\` on the 500 B file twice: once bare — user and system CPU of the server's process tree and the context switches of its live threads (\`/proc/PID/task/*/status\`; threads that exited during the run are not counted), per request — and once under \`strace -c -f -p <every process of the server>\` (strace slows the server; the counts, not the rates, are the point)."
        cat "$TABLE"
    } >"$RESULTS_DIR/summary.md"
    if [ "$BENCH_MD" != off ]; then
        replace_md_block "$BENCH_MD" syscalls "$RESULTS_DIR/summary.md"
        log "updated $BENCH_MD"
    fi
    cat "$RESULTS_DIR/summary.md"
}

# ---------------------------------------------------------------- bench mode

run_bench() {
    local s
    for s in $SERVERS; do start_server "$s"; done

    # Pre-flight: 200 and the exact bytes, with and without keep-alive; then a short load so process
    # and thread pools have grown before the first measured run.
    for s in $SERVERS; do
        check_serves_files "$s"
        run_wrk "$PREWARM" "http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[${SIZES%% *}]}" keepalive "$RESULTS_DIR/prewarm-$s.txt" || true
        log "$s: pre-flight ok, pre-warmed ($(pid_tree "${PID_OF[$s]}" | wc -l) processes)"
    done

    measure_file_cases 1
    report_bench
}

# Apache MPM each modus model is compared with. The issue names prefork↔prefork, worker↔worker and
# event↔event; the others are paired by what holds a connection: one thread per connection → worker,
# connections parked in epoll between requests → event.
apache_pair() {
    case $1 in
        prefork) echo apache-prefork ;;
        worker|pool|per-request|perchild) echo apache-worker ;;
        event|amped|staged) echo apache-event ;;
    esac
}

# metric_table ARRAY FORMATTER: the medians of ARRAY, a row per server and a column per case under the
# caller's hdr and sep; a cell is marked † if a run of it was noisy and E<n> if it saw errors (which
# sets the caller's any_err)
metric_table() {
    local arr=$1 fmt=$2 cells mark s c
    echo "$hdr"; echo "$sep"
    for s in "${SERVER_LIST[@]}"; do
        cells="| $s |"
        for c in "${CASES[@]}"; do
            mark=""
            [ "${NOISY_OF[$s|$c]:-0}" -gt 0 ] && mark=" †"
            [ "${ERRS[$s|$c]:-0}" -gt 0 ] && { mark="$mark **E${ERRS[$s|$c]}**"; any_err=1; }
            cells="$cells $("$fmt" "$(med_of "$arr" "$s|$c")")$mark |"
        done
        echo "$cells"
    done
}

report_bench() {
    local c s any_err=0 hdr sep
    hdr="| server |"; sep="|---|"
    for c in "${CASES[@]}"; do hdr="$hdr $(case_label "$c" short) |"; sep="$sep---:|"; done
    for s in "${SERVER_LIST[@]}"; do for c in "${CASES[@]}"; do
        [ "${ERRS[$s|$c]:-0}" -gt 0 ] && any_err=1
    done; done

    # targets: event vs the best peer (highest req/s) on every row
    local TGT=$WORK/targets.md peers_here=() p
    for p in $PEERS; do has "$p" && peers_here+=("$p"); done
    {
        echo "| case | event req/s | best peer (req/s) | event ÷ best | ≥ 1.0× | event µs/req | best peer's µs/req | ≤ best peer's | lowest peer µs/req |"
        echo "|---|---:|---|---:|---|---:|---:|---|---|"
        for c in "${CASES[@]}"; do
            local best="" best_r=0 low="" low_u=1e18 r u er eu
            for p in "${peers_here[@]}"; do
                r=$(med_of RPS "$p|$c"); u=$(med_of USR "$p|$c")
                if awk -v a="$r" -v b="$best_r" 'BEGIN { exit !(a > b) }'; then best=$p; best_r=$r; fi
                if awk -v a="$u" -v b="$low_u" 'BEGIN { exit !(a != "nan" && a < b) }'; then low=$p; low_u=$u; fi
            done
            if ! has event || [ -z "$best" ]; then continue; fi
            er=$(med_of RPS "event|$c"); eu=$(med_of USR "event|$c")
            local bu; bu=$(med_of USR "$best|$c")
            local ratio ok1 ok2
            ratio=$(awk -v a="$er" -v b="$best_r" 'BEGIN { printf "%.2f", a / b }')
            ok1=$(awk -v a="$er" -v b="$best_r" 'BEGIN { print (a >= b) ? "met" : "**not met**" }')
            ok2=$(awk -v a="$eu" -v b="$bu" 'BEGIN { print (a <= b) ? "met" : "**not met**" }')
            echo "| $(case_label "$c") | $(fmt_int "$er") | $best ($(fmt_int "$best_r")) | $ratio | $ok1 | $(fmt_1 "$eu") | $(fmt_1 "$bu") | $ok2 | $low $(fmt_1 "$low_u") |"
        done
    } >"$TGT"

    # targets: every model vs its Apache MPM (req/s ratio; target ≥ 1.5)
    local APT=$WORK/apache.md
    {
        local h="| modus model ÷ Apache MPM (req/s) |" sp="|---|"
        for c in "${CASES[@]}"; do h="$h $(case_label "$c" short) |"; sp="$sp---:|"; done
        echo "$h met (≥ 1.5× on every row) |"; echo "$sp---|"
        for s in $MODUS_MODELS; do
            local a; a=$(apache_pair "$s")
            has "$s" && has "$a" || continue
            local row="| $s ÷ $a |" all=1 m v
            for c in "${CASES[@]}"; do
                v=$(awk -v x="$(med_of RPS "$s|$c")" -v y="$(med_of RPS "$a|$c")" 'BEGIN { if (y > 0) printf "%.2f", x / y; else print "nan" }')
                m=""
                if awk -v v="$v" 'BEGIN { exit !(v == "nan" || v < 1.5) }'; then all=0; m="**"; fi
                row="$row $m$v$m |"
            done
            if [ "$all" -eq 1 ]; then row="$row yes |"; else row="$row **no** |"; fi
            echo "$row"
        done
        echo
        echo "Server CPU per request, the same pairs: Apache MPM's µs/req ÷ the model's µs/req (how many times less CPU the model spends per request; what separates servers in rows where wrk sets the pace)"
        echo
        echo "${h/modus model ÷ Apache MPM (req\/s)/Apache MPM ÷ modus model (µs\/req)}"; echo "$sp"
        for s in $MODUS_MODELS; do
            local a; a=$(apache_pair "$s")
            has "$s" && has "$a" || continue
            local row="| $a ÷ $s |" v
            for c in "${CASES[@]}"; do
                v=$(awk -v x="$(med_of USR "$s|$c")" -v y="$(med_of USR "$a|$c")" 'BEGIN { if (x > 0) printf "%.2f", y / x; else print "nan" }')
                row="$row $v |"
            done
            echo "$row"
        done
    } >"$APT"

    local UT=$WORK/util.md
    {
        echo "$hdr"; echo "$sep"
        for s in "${SERVER_LIST[@]}"; do
            local cells="| $s |"
            for c in "${CASES[@]}"; do cells="$cells $(fmt_int "$(med_of BUSY_S "$s|$c")") / $(fmt_int "$(med_of BUSY_L "$s|$c")") |"; done
            echo "$cells"
        done
    } >"$UT"

    local CMDLINE="DURATION=$DURATION WARMUP=$WARMUP PREWARM=$PREWARM ROUNDS=$ROUNDS CONNS=$CONNS SIZES='$SIZES' MODES='$MODES' SERVERS='$SERVERS'"
    [ -n "$MODUS_ARGS" ] && CMDLINE="$CMDLINE MODUS_ARGS='$MODUS_ARGS'"
    CMDLINE="$CMDLINE bench/models.sh"
    local warm_txt="no warm-up"
    [ "$WARM_S" -gt 0 ] && warm_txt="$WARMUP warm-up before every run"
    local BLOCK=$WORK/models-block.md
    {
        echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') — $(machine_label)"
        echo
        echo "- $(versions_line); modus git $(git_rev_label)"
        echo "- command: \`$CMDLINE\` ($ELAPSED s)"
        echo "- load: \`taskset -c $LOAD_CPU wrk -t1 -c$CONNS -d$DURATION --latency [-H 'Connection: close'] URL\`, $warm_txt ($PREWARM of keep-alive load on each server before the first); $ROUNDS round(s), all servers up together, interleaved per case (order reversed every other round); medians of the rounds"
        echo "- files: $(for sz in $SIZES; do printf '%s (%s bytes) ' "$(size_label "$sz")" "$(to_bytes "$sz")"; done)— one docroot for every server; every server writes an access log to a file"
        echo "- servers (all pinned to CPU $SERVER_CPU, every process and thread; WORK is a temp dir):"
        settings_list | sed 's/^/  /'
        echo "- raw output: \`bench/results/$(basename "$RESULTS_DIR")/\` (git-ignored)"
        echo
        echo "**Requests/s** (median)"
        echo
        metric_table RPS fmt_int
        echo
        echo "**Server CPU µs per request** (utime+stime of the server's whole process tree ÷ requests; lower is better)"
        echo
        metric_table USR fmt_1
        echo
        echo "**p99 latency, ms**"
        echo
        metric_table P99 fmt_2
        echo
        echo "**Core utilisation, server core (CPU $SERVER_CPU) / load core (CPU $LOAD_CPU) busy %** — a load core near 100 % with the server core below it means wrk, not the server, set the req/s"
        echo
        cat "$UT"
        echo
        if [ "$NOISY" -gt 0 ]; then echo "† at least one run of this cell had other jobs using ≥ $NOISE_PCT % of a core ($NOISY of $total_runs runs)."; echo; fi
        if [ "$any_err" -ne 0 ]; then echo "**E*n*: wrk saw *n* socket errors or non-2xx/3xx answers in this cell — see \`runs.csv\`.**"; echo; fi
        echo "Each run waits until other jobs use < $NOISE_PCT % of a core (up to $QUIET_TIMEOUT s) and is re-measured (up to $RETRY_NOISY times) if they used more during it, within a budget of $NOISE_BUDGET s; $RETRIED run(s) were re-measured, $SPENT_ON_NOISE s spent."
        echo
        echo "**Target: \`event\` ≥ 1.0× the best peer's req/s and ≤ its CPU per request on every row** (best peer = the peer with the highest req/s in that row)"
        echo
        cat "$TGT"
        echo
        echo "**Target: every other model ≥ 1.5× the Apache MPM that corresponds to it.** The issue pairs prefork↔prefork, worker↔worker, event↔event (\`event\` is the model paired with Apache event); \`pool\`, \`per-request\` and \`perchild\` (one thread per connection) are paired here with Apache worker, \`staged\` and \`amped\` (idle connections parked in epoll) with Apache event."
        echo
        cat "$APT"
    } >"$BLOCK"
    publish_block "$BLOCK" models
    if [ "$any_err" -ne 0 ]; then
        log "FAILED: some runs reported socket errors or non-2xx/3xx answers (cells marked E)"
        return 1
    fi
}

# ---------------------------------------------------------------- cgi mode

cgi_label() { # cgi_label CASE -> "spin 10 ms ×8"
    local script=${1%/*} conns=${1#*/} ms
    ms=${script#spin}
    if [ "$ms" = 0 ]; then echo "trivial ×$conns"; else echo "spin $ms ms ×$conns"; fi
}

run_cgi() {
    local s c ms conns url raw round body
    ensure_modus_bin
    mkdir -p "$CGI_DIR"
    cp "$(dirname "$MODUS_BIN")/cgi-spin" "$CGI_DIR/spin" || die "no cgi-spin next to $MODUS_BIN"
    chmod 755 "$CGI_DIR" "$CGI_DIR/spin"
    for s in $SERVERS; do start_server "$s"; done
    for s in $SERVERS; do
        url="http://127.0.0.1:${PORT_OF[$s]}/cgi-bin/spin?ms=1"
        body=$(curl -sS --max-time 10 "$url") || die "$s: GET $url failed"
        case $body in "spun 1 ms"*) ;; *) die "$s: GET $url answered: $body" ;; esac
    done
    log "pre-flight ok: every server runs the script"

    read -r -a CASES <<<"$CGI_CASES"
    plan_runs
    for round in $(seq 1 "$ROUNDS"); do
        round_order "$round"
        for c in "${CASES[@]}"; do
            ms=${c%/*}; ms=${ms#spin}; conns=${c#*/}
            for s in "${ORDER[@]}"; do
                run_no=$((run_no + 1))
                url="http://127.0.0.1:${PORT_OF[$s]}/cgi-bin/spin?ms=$ms"
                raw="$RESULTS_DIR/r$round-spin$ms-c$conns-$s.txt"
                CONNS=$conns measure_run "$s" "$c" "$round" "$url" "$raw" "${PID_OF[$s]}"
                : >"${LOG_OF[$s]}" 2>/dev/null || true
                record_run "$s" "$c"
                echo "$round,$c,$s,$rps,$p99,$reqs,$sockerr,$non2xx,$dticks,$us_req,$busy_s,$busy_l,$other" >>"$CSV"
                log "[$run_no/$total_runs] round $round $(cgi_label "$c") $s: $rps req/s, p99 $p99 ms, $us_req µs/req CPU" \
                    "(server + scripts), errors $sockerr, non-2xx/3xx $non2xx"
            done
        done
    done
    ELAPSED=$(( $(date +%s) - T0 ))
    report_cgi
}

report_cgi() {
    local c s any_err=0 hdr="| server |" sep="|---|"
    for c in "${CASES[@]}"; do hdr="$hdr $(cgi_label "$c") |"; sep="$sep---:|"; done
    local TGT=$WORK/cgi-targets.md
    {
        echo "| case | best modus model (req/s) | best peer (req/s) | ratio | ≥ 1.2× |"
        echo "|---|---|---|---:|---|"
        for c in "${CASES[@]}"; do
            local bm="" bm_r=0 bp="" bp_r=0 r
            for s in "${SERVER_LIST[@]}"; do
                r=$(med_of RPS "$s|$c")
                if is_modus "$s"; then
                    if awk -v a="$r" -v b="$bm_r" 'BEGIN { exit !(a > b) }'; then bm=$s; bm_r=$r; fi
                elif awk -v a="$r" -v b="$bp_r" 'BEGIN { exit !(a > b) }'; then bp=$s; bp_r=$r; fi
            done
            [ -n "$bm" ] && [ -n "$bp" ] || continue
            echo "| $(cgi_label "$c") | $bm ($(fmt_int "$bm_r")) | $bp ($(fmt_int "$bp_r")) | $(awk -v a="$bm_r" -v b="$bp_r" 'BEGIN { printf "%.2f", a / b }') | $(awk -v a="$bm_r" -v b="$bp_r" 'BEGIN { print (a >= 1.2 * b) ? "met" : "**not met**" }') |"
        done
    } >"$TGT"
    local CMDLINE="DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS CGI_CASES='$CGI_CASES' SERVERS='$SERVERS'"
    [ -n "$MODUS_ARGS" ] && CMDLINE="$CMDLINE MODUS_ARGS='$MODUS_ARGS'"
    CMDLINE="$CMDLINE bench/models.sh cgi"
    local BLOCK=$WORK/cgi-block.md
    {
        echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') — $(machine_label)"
        echo
        echo "- $(versions_line); modus git $(git_rev_label)"
        echo "- command: \`$CMDLINE\` ($ELAPSED s)"
        echo "- load: \`taskset -c $LOAD_CPU wrk -t1 -cN -d$DURATION --latency URL\` (keep-alive), N = the clients in the column; $ROUNDS round(s), servers interleaved per case, medians"
        echo "- script: the bundled \`cgi-spin\` (\`/cgi-bin/spin?ms=N\` burns N ms of CPU time, then prints 40 bytes; \`ms=0\` is the trivial script), one copy served by every server; a script inherits the server's CPU pinning, so scripts and server share CPU $SERVER_CPU"
        echo "- servers (pinned to CPU $SERVER_CPU; WORK is a temp dir):"
        settings_list | sed 's/^/  /'
        echo "- raw output: \`bench/results/$(basename "$RESULTS_DIR")/\` (git-ignored)"
        echo
        echo "**Requests/s** (median)"
        echo
        metric_table RPS fmt_int
        echo
        echo "**CPU µs per request**, server and its scripts (utime+stime+cutime+cstime of the server's process tree ÷ requests; a 10 ms spin is ≥ 10,000 of it)"
        echo
        metric_table USR fmt_1
        echo
        echo "**p99 latency, ms**"
        echo
        metric_table P99 fmt_2
        echo
        if [ "$NOISY" -gt 0 ]; then echo "† at least one run of this cell had other jobs using ≥ $NOISE_PCT % of a core ($NOISY of $total_runs runs)."; echo; fi
        if [ "$any_err" -ne 0 ]; then echo "**E*n*: wrk saw *n* socket errors or non-2xx/3xx answers in this cell — see \`runs.csv\`.**"; echo; fi
        echo "**Target: the best modus model ≥ 1.2× the best peer**"
        echo
        cat "$TGT"
    } >"$BLOCK"
    publish_block "$BLOCK" cgi
    [ "$any_err" -eq 0 ] || { log "FAILED: some runs reported errors (cells marked E)"; return 1; }
}

case $ACTION in
    bench) run_bench ;;
    idle) run_idle ;;
    syscalls) run_syscalls ;;
    cgi) run_cgi ;;
esac
