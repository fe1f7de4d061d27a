#!/usr/bin/env bash
# bench/counts.sh — what a server does per request, counted: system calls
# (each kind), segments handed to loopback in the server's context
# (net:net_dev_xmit: on loopback it also runs the receiver's TCP), context
# switches, from `perf stat` tracepoints over the server's threads, divided
# by wrk's requests. Counts do not move with a busy machine the way times
# do, and a KVM guest without hardware counters still has tracepoints
# (BENCHMARKS.md, "Performance round 3"). The server's CPU time per request
# (/proc/PID/stat, 10 ms ticks) is printed too, with the load average and
# how many cargo processes ran: a time figure wants a quiet machine.
#
# The server on CPU 0 with its access log on, `wrk -t1 -c50` on CPU 1: 1 s
# warm-up, then SECONDS of counting.
#
# Usage:
#   bench/counts.sh event /50k.bin ka            # modus serve --model event (target/release/modus)
#   bench/counts.sh nginx /500b.bin close        # nginx as the lab's nginx-tuned
#   BIN=/tmp/modus-before bench/counts.sh event /500b.bin close 4
#   SERVE_ARGS="--schedule srpt" bench/counts.sh event /1m.bin ka
#   bench/counts.sh lighttpd /1m.bin ka          # lighttpd as the lab's lighttpd
#
# Arguments: SERVER (a modus model, nginx or lighttpd), PATH (/500b.bin, /50k.bin,
# /115k.bin, /1m.bin of `modus workload fixed`), ka|close, [SECONDS, 4].
# Needs perf, wrk, bc (and nginx or lighttpd for those); root, for the
# tracepoints. sched:sched_waking counts the wake-ups the server's threads
# make: on loopback the server's send runs the client's receive, so each
# time the client has caught up and sleeps, the next segment wakes it
# (BENCHMARKS.md, "1 MB keep-alive follows the client's wake-ups").
#
# Why this is not a lab spec: the lab measures time and CPU per point; these
# are kernel tracepoint counts of one server's threads, beside wrk.
set -euo pipefail
who=$1 path=$2 mode=$3 secs=${4:-4}
bin=${BIN:-target/release/modus}
port=${PORT:-18080}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" workload fixed --out "$work/root" >/dev/null
hdr=()
[ "$mode" = close ] && hdr=(-H "Connection: close")
if [ "$who" = nginx ]; then
    user=""
    [ "$(id -u)" = 0 ] && user="user root;"
    cat >"$work/nginx.conf" <<EOF
$user
worker_processes 1; daemon off; pid $work/nginx.pid; error_log $work/error.log warn;
events { worker_connections 10000; }
http {
    default_type application/octet-stream; sendfile on; tcp_nopush on; keepalive_requests 100000000;
    open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s; open_file_cache_errors on;
    access_log $work/access.log combined buffer=64k flush=1s;
    client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
    server { listen 127.0.0.1:$port; root $work/root; location / { } }
}
EOF
    taskset -c 0 nginx -p "$work" -c "$work/nginx.conf" &
    sleep 0.5
    pid=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
    stop() { kill "$(cat "$work/nginx.pid")"; }
elif [ "$who" = lighttpd ]; then
    cat >"$work/lighttpd.conf" <<EOF
server.document-root = "$work/root"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$work/error.log"
server.max-keep-alive-requests = 100000000
server.max-fds = 20000
server.max-connections = 10240
mimetype.assign = ( "" => "application/octet-stream" )
server.modules += ( "mod_accesslog" )
accesslog.filename = "$work/access.log"
EOF
    taskset -c 0 lighttpd -D -f "$work/lighttpd.conf" &
    pid=$!
    sleep 0.5
    stop() { kill "$pid"; }
else
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
    taskset -c 0 "$bin" serve ${SERVE_ARGS:-} --model "$who" --listen "127.0.0.1:$port" --max-keepalive-requests 100000000 \
        --access-log "$work/access.log" "$work/root" >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    stop() { kill "$pid"; }
fi
taskset -c 1 wrk -t1 -c50 -d1s "${hdr[@]}" "http://127.0.0.1:$port$path" >/dev/null
calls="epoll_wait epoll_pwait sendfile64 writev write sendmsg sendto recvfrom read accept4 close setsockopt"
calls="$calls openat newfstat statx epoll_ctl shutdown futex io_uring_enter"
ev="raw_syscalls:sys_enter,context-switches,sched:sched_waking,net:net_dev_xmit"
for c in $calls; do ev="$ev,syscalls:sys_enter_$c"; done
threads=$(ls "/proc/$pid/task" | paste -sd,)
c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
perf stat -x, -e "$ev" -t "$threads" -o "$work/perf.out" -- sleep "$secs" &
perf_pid=$!
out=$(taskset -c 1 wrk -t1 -c50 "-d${secs}s" "${hdr[@]}" "http://127.0.0.1:$port$path")
wait "$perf_pid"
c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
reqs=$(echo "$out" | awk '/requests in/ {print $1}')
cpu=$(echo "scale=2; ($c1 - $c0) * 10000 / $reqs" | bc)
echo "$who $path $mode: $reqs requests in ${secs}s; server CPU $cpu µs/req" \
    "(load average $(cut -d' ' -f1 /proc/loadavg), $(pgrep -c cargo || true) cargo)"
awk -F, -v n="$reqs" '$1 ~ /^[0-9]/ && $1 > 0 {printf "  %-36s %9.3f /req\n", $3, $1 / n}' "$work/perf.out"
stop
wait 2>/dev/null || true
