# bench/lib.sh — shell functions shared by the scripts in bench/. Source it; do not run it.
#
# The sourcing script sets BENCH_TAG (the prefix of its log lines) before sourcing, and before calling
# the functions below, the variables they read:
#   SERVER_CPU LOAD_CPU CONNS CLK_TCK RESULTS_DIR WORK DOCROOT REPO
#   NOISE_PCT QUIET_TIMEOUT RETRY_NOISY NOISE_BUDGET SPENT_ON_NOISE RETRIED NOISY DUR_S WARM_S
# and the associative arrays some of them fill (PID_OF PORT_OF LOG_OF FILE_OF and the per-cell arrays of
# measure_round), plus the array STARTED of servers to stop on exit.
# shellcheck shell=bash
# shellcheck disable=SC2034  # measure_run and make_docroot set variables the sourcing script reads
# shellcheck disable=SC2004  # PID_OF, FILE_OF, NOISY_OF …: associative arrays the sourcing script declares

BENCH_TAG=${BENCH_TAG:-bench}

# Every model of `modus serve --model`, in the registry's order (the order the tables list them):
# `modus models --names` of MODUS_BIN, else of the release build, else of `cargo run` — so a model
# added to the registry is measured with no edit here.
registry_models() {
    local bin=${MODUS_BIN:-${REPO:-.}/target/release/modus}
    { [ -x "$bin" ] && "$bin" models --names 2>/dev/null; } \
        || (cd "${REPO:-.}" && cargo run --release -q -p modus -- models --names)
}
ALL_MODELS=$(registry_models | paste -sd' ') || { echo "bench: cannot list the models (modus models --names)" >&2; exit 2; }
[ -n "$ALL_MODELS" ] || { echo "bench: modus models --names listed nothing" >&2; exit 2; }

log() { printf '[%s] %s\n' "$BENCH_TAG" "$*" >&2; }
die() { log "error: $*"; exit 2; }

# ---------------------------------------------------------------- units and statistics

# "10s" / "2m" / "1h" / "5" -> seconds (integer)
to_seconds() {
    local v=$1
    case $v in
        *ms) echo 1 ;;
        *s) echo "${v%s}" ;;
        *m) echo $(( ${v%m} * 60 )) ;;
        *h) echo $(( ${v%h} * 3600 )) ;;
        *) echo "$v" ;;
    esac
}

# "500B" / "50KB" / "115K" / "2048" -> bytes
to_bytes() {
    local v=$1
    case $v in
        *KB|*kB|*K|*k) v=${v%B}; echo $(( ${v%[Kk]} * 1024 )) ;;
        *MB|*M) v=${v%B}; echo $(( ${v%M} * 1024 * 1024 )) ;;
        *B) echo "${v%B}" ;;
        *) echo "$v" ;;
    esac
}

# "500B" -> "500 B", "50KB" -> "50 KB"
size_label() {
    local v=$1
    case $v in
        *KB) echo "${v%KB} KB" ;;
        *B) echo "${v%B} B" ;;
        *) echo "$v" ;;
    esac
}

# wrk latency ("812.00us", "1.23ms", "2.00s", "1.00m") -> milliseconds
latency_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) n = n / 1000
        else if (v ~ /ms$/) n = n
        else if (v ~ /m$/) n = n * 60000
        else if (v ~ /h$/) n = n * 3600000
        else if (v ~ /s$/) n = n * 1000
        printf "%.3f", n
    }'
}

# median of the arguments (numeric); "nan" if none
median() {
    if [ "$#" -eq 0 ]; then echo nan; return; fi
    printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
        END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# med_of ARRAYNAME KEY: median of the space-separated values stored under KEY; "nan" if none
med_of() {
    local -n arr=$1
    local vals=${arr[$2]:-}
    # shellcheck disable=SC2086  # word splitting intended: space-separated list
    if [ -z "$vals" ]; then echo nan; else median $vals; fi
}

fmt_int() { awk -v v="$1" 'BEGIN { if (v == "nan" || v == "") print "—"; else printf "%.0f", v }'; }
fmt_2() { awk -v v="$1" 'BEGIN { if (v == "nan" || v == "") print "—"; else printf "%.2f", v }'; }
fmt_1() { awk -v v="$1" 'BEGIN { if (v == "nan" || v == "") print "—"; else printf "%.1f", v }'; }

# case_label CASE [short]: "500B/close" -> "500 B `Connection: close`" ("500 B close" with short),
# "500B/keepalive" -> "500 B keep-alive"; models.sh heads its tables' rows and columns so.
case_label() {
    local sz=${1%/*} mode=${1#*/}
    if [ "$mode" = close ]; then
        if [ -n "${2:-}" ]; then echo "$(size_label "$sz") close"; else echo "$(size_label "$sz") \`Connection: close\`"; fi
    else echo "$(size_label "$sz") keep-alive"; fi
}

# ---------------------------------------------------------------- settings every measuring script shares

# The run knobs of bench/models.sh (static.sh's, before it became lab/static.toml)
file_run_defaults() {
    DURATION=${DURATION:-10s}
    WARMUP=${WARMUP:-1s}
    ROUNDS=${ROUNDS:-3}
    CONNS=${CONNS:-50}
    SIZES=${SIZES:-500B 50KB 115KB}
    MODES=${MODES:-keepalive close}
}

# Pinning and noise-guard knobs with the defaults every measuring script shares (one place keeps them
# equal), CLK_TCK, and the noise guard's counters at zero.
# A script with other defaults (load.sh) sets those knobs before calling this.
pin_and_noise_defaults() {
    SERVER_CPU=${SERVER_CPU:-0}
    LOAD_CPU=${LOAD_CPU:-1}
    NOISE_PCT=${NOISE_PCT:-5}
    QUIET_TIMEOUT=${QUIET_TIMEOUT:-60}
    RETRY_NOISY=${RETRY_NOISY:-2}
    NOISE_BUDGET=${NOISE_BUDGET:-900}
    CLK_TCK=$(getconf CLK_TCK)
    SPENT_ON_NOISE=0 RETRIED=0 NOISY=0
}

# Checks ROUNDS and sets DUR_S / WARM_S, the whole seconds measure_run's noise arithmetic needs.
run_lengths() {
    [ "$ROUNDS" -ge 1 ] || die "ROUNDS must be >= 1"
    DUR_S=$(to_seconds "$DURATION")
    WARM_S=$(to_seconds "$WARMUP")
}

# make_workdir NAME: RESULTS_DIR created, WORK a new /tmp/modus-NAME.XXXXXX (the caller's cleanup removes
# it) and DOCROOT=$WORK/www, so every script's temp files and docroot are laid out alike.
make_workdir() {
    mkdir -p "$RESULTS_DIR"
    WORK=$(mktemp -d "/tmp/modus-$1.XXXXXX")
    DOCROOT=$WORK/www
}

# ---------------------------------------------------------------- processes, ports, CPU accounting

# first free TCP port on 127.0.0.1 at or above $1
free_port() {
    local p=$1
    while [ "$p" -lt 65000 ]; do
        if [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]; then echo "$p"; return; fi
        p=$((p + 1))
    done
    die "no free port"
}

# PIDs of a process and all its descendants (one `ps` call: cheap even for 100 prefork children)
pid_tree() {
    { ps -e -o pid=,ppid= 2>/dev/null || true; } | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END { q[1] = root; n = 1; i = 1
              while (i <= n) { p = q[i++]; print p; m = split(kids[p], a, " "); for (j = 1; j <= m; j++) q[++n] = a[j] } }'
}

# tree_kb PID FILE FIELD: sum over a process tree of a "FIELD: N kB" line of /proc/<member>/FILE
tree_kb() {
    local pid total=0 v
    for pid in $(pid_tree "$1"); do
        v=$(awk -v k="$3" '$1 == k { print $2 }' "/proc/$pid/$2" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# Proportional set size of a process tree in KiB: sum of Pss over /proc/PID/smaps_rollup of every member
tree_pss_kb() { tree_kb "$1" smaps_rollup Pss:; }

# Resident set size of a process tree in KiB (sum of VmRSS; shared pages counted once per process)
tree_rss_kb() { tree_kb "$1" status VmRSS:; }

# user and system clock ticks of a process tree: "UTIME STIME" (each including reaped children's:
# utime+cutime, stime+cstime, fields 14-17 of /proc/PID/stat). Covers all threads (live and exited) of
# each process and children reaped by a member.
tree_ut_st() {
    local pid stat rest u=0 k=0
    local -a f
    for pid in $(pid_tree "$1"); do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        rest=${stat##*) }
        read -r -a f <<<"$rest"
        # f[0] is field 3 (state), so field 14 is f[11]
        u=$((u + f[11] + f[13])); k=$((k + f[12] + f[14]))
    done
    echo "$u $k"
}

# clock ticks used by a process tree: utime+stime+cutime+cstime of every member
tree_ticks() {
    local u k
    read -r u k < <(tree_ut_st "$1")
    echo $((u + k))
}

# clock ticks used by all user-space processes on the machine (kernel threads excluded).
# Minus this script's own tree (servers, wrk, helpers) it measures other jobs competing for the CPUs.
all_user_ticks() {
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '
        { pid = $1; sub(/^.*\) /, "")
          # now $1 = field 3 (state), $2 = field 4 (ppid), $12..$15 = fields 14..17
          if (pid != 2 && $2 != 2) t += $12 + $13 + $14 + $15 }
        END { print t + 0 }'
}

# Wait (up to QUIET_TIMEOUT s) until other jobs use less than NOISE_PCT % of a core over 1 s.
wait_quiet() {
    local waited=0 a0 o0 a1 o1 pct
    while :; do
        a0=$(all_user_ticks); o0=$(tree_ticks $$)
        sleep 1
        a1=$(all_user_ticks); o1=$(tree_ticks $$)
        pct=$(( ((a1 - a0) - (o1 - o0)) * 100 / CLK_TCK ))
        if [ "$pct" -lt "$NOISE_PCT" ]; then
            if [ "$waited" -gt 0 ]; then log "quiet again after ${waited} s"; fi
            return 0
        fi
        if [ "$waited" -ge "$QUIET_TIMEOUT" ] || [ "$SPENT_ON_NOISE" -ge "$NOISE_BUDGET" ]; then
            log "other jobs still use ${pct}% of a core after ${waited} s; measuring anyway"
            return 0
        fi
        if [ "$waited" -eq 0 ]; then log "other jobs use ${pct}% of a core; waiting up to ${QUIET_TIMEOUT} s for quiet"; fi
        waited=$((waited + 1))
        SPENT_ON_NOISE=$((SPENT_ON_NOISE + 1))
    done
}

# "busy total" jiffies of one CPU from /proc/stat
cpu_jiffies() {
    awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

# wait until PID exits (up to $2 seconds); returns 1 on timeout
wait_exit() {
    local pid=$1 limit=$2 i=0
    while kill -0 "$pid" 2>/dev/null; do
        # reap if it is our child
        if [ "$i" -ge $((limit * 10)) ]; then return 1; fi
        sleep 0.1
        i=$((i + 1))
    done
    wait "$pid" 2>/dev/null || true
}

stop_pid() {
    local pid=$1 name=$2
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_exit "$pid" 10; then
        log "$name (pid $pid) did not stop within 10 s of SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_exit "$pid" 5 || true
    fi
}

# ---------------------------------------------------------------- peer servers: nginx, Apache httpd

APACHE_BIN=/usr/sbin/apache2
APACHE_MODS=/usr/lib/apache2/modules

# wait_http PORT PID NAME [ERRFILE]: waits (up to 15 s) until 127.0.0.1:PORT answers GET /500B.txt —
# answers, not merely listens: Apache and nginx listen before their children serve. Dies, with ERRFILE
# on stderr, if PID exits first or nothing answers.
wait_http() {
    local port=$1 pid=$2 name=$3 errfile=${4:-} i
    for i in $(seq 1 150); do
        if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/500B.txt"; then return 0; fi
        kill -0 "$pid" 2>/dev/null || { cat "$errfile" >&2 2>/dev/null || true; die "$name exited at startup (see $RESULTS_DIR)"; }
        sleep 0.1
    done
    cat "$errfile" >&2 2>/dev/null || true
    die "$name does not answer on 127.0.0.1:$port after 15 s"
}

# launch_server NAME PORT ERRFILE CMD...: starts CMD (pinned by the caller: taskset, setsid) in the
# background with its output in RESULTS_DIR/NAME.stdout and .stderr, records it in PID_OF and STARTED so
# the caller's cleanup stops it, waits until it answers on PORT and sets PORT_OF.
launch_server() {
    local name=$1 port=$2 errfile=$3
    shift 3
    "$@" >"$RESULTS_DIR/$name.stdout" 2>"$RESULTS_DIR/$name.stderr" </dev/null &
    PID_OF[$name]=$!
    STARTED+=("$name")
    wait_http "$port" "${PID_OF[$name]}" "$name" "$errfile"
    PORT_OF[$name]=$port
}

# nginx_conf PORT ACCESS_LOG NOFILE CONNECTIONS SERVER_EXTRA [HTTP_DIRECTIVE...]: prints an nginx.conf
# for one worker (+ master, in the foreground) serving DOCROOT on 127.0.0.1:PORT, its pid file, error log
# (WORK/nginx-error.log) and temp files in WORK so that it writes no system path; as root it runs as
# root to read the docroot. ACCESS_LOG is a file or "off"; SERVER_EXTRA goes into server{}, each
# HTTP_DIRECTIVE into http{}. The values that differ between the scripts are the parameters.
nginx_conf() {
    local port=$1 access_log=$2 nofile=$3 worker_conns=$4 server_extra=$5 user_line="" http_extra="" d
    shift 5
    for d in "$@"; do http_extra+="    $d"$'\n'; done
    [ "$(id -u)" -eq 0 ] && user_line="user root;"
    mkdir -p "$WORK/nginx-tmp"
    cat <<EOF
# generated by bench/lib.sh (nginx_conf) for $BENCH_TAG
$user_line
worker_processes 1;
daemon off;
master_process on;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
worker_rlimit_nofile $nofile;
events { worker_connections $worker_conns; }
http {
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    access_log $access_log;
    client_body_temp_path $WORK/nginx-tmp/body;
    proxy_temp_path $WORK/nginx-tmp/proxy;
    fastcgi_temp_path $WORK/nginx-tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx-tmp/uwsgi;
    scgi_temp_path $WORK/nginx-tmp/scgi;
$http_extra    server {
        listen 127.0.0.1:$port;
        root $DOCROOT;
        $server_extra
        location / { }
    }
}
EOF
}

# the http{} directive giving nginx MIME types: Debian's file, else text/plain for the .txt files served
nginx_mime() {
    if [ -r /etc/nginx/mime.types ]; then echo "include /etc/nginx/mime.types;"; else echo "types { text/plain txt; }"; fi
}

# check_nginx_conf CONF [NGINX_BIN]: nginx -t on CONF (as nginx_conf wrote it), dying with its error log
check_nginx_conf() {
    "${2:-nginx}" -t -q -p "$WORK" -e "$WORK/nginx-error.log" -c "$1" \
        || { cat "$WORK/nginx-error.log" >&2 2>/dev/null || true; die "nginx -t failed"; }
}

# Apache MPM sizing: Debian's for worker and event; prefork sized as modus prefork is (StartServers included)
apache_sizing() {
    case $1 in
        prefork) printf '%s\n' "StartServers 60" "MinSpareServers 10" "MaxSpareServers 60" "MaxRequestWorkers 128" "MaxConnectionsPerChild 0" ;;
        worker|event) printf '%s\n' "StartServers 3" "ThreadsPerChild 25" "MinSpareThreads 25" "MaxSpareThreads 75" "ThreadLimit 64" "MaxRequestWorkers 150" "MaxConnectionsPerChild 0" ;;
    esac
}

# launch_apache NAME MPM PORT KEEPALIVE_TIMEOUT ACCESS_LOG CGI_MODULE: Apache httpd from Debian's apache2
# package with a generated standalone config in WORK/NAME (its ServerRoot: run dir, pid file, error.log),
# serving DOCROOT on 127.0.0.1:PORT; the config is checked with apache2 -t and kept as
# RESULTS_DIR/NAME.conf. ACCESS_LOG "" = none. CGI_MODULE cgi or cgid serves CGI_DIR under /cgi-bin/,
# "" = no CGI. As root the children run as www-data (Apache refuses root), so WORK and DOCROOT must be
# world-readable. Started under setsid: on shutdown Apache (prefork) signals its whole process group;
# stopped by PID. Sets what launch_server sets.
launch_apache() {
    local name=$1 mpm=$2 port=$3 kt=$4 access_log=$5 cgi_mod=$6 dir=$WORK/$1 run_user="" conf
    conf=$dir/httpd.conf
    mkdir -p "$dir/run"
    chmod 755 "$dir"
    if [ "$(id -u)" -eq 0 ]; then run_user=$'User www-data\nGroup www-data'; fi
    {
        cat <<EOF
# generated by bench/lib.sh (launch_apache) for $BENCH_TAG
ServerRoot $dir
DefaultRuntimeDir $dir/run
PidFile $dir/httpd.pid
Mutex file:$dir/run default
LoadModule mpm_${mpm}_module $APACHE_MODS/mod_mpm_${mpm}.so
LoadModule authz_core_module $APACHE_MODS/mod_authz_core.so
LoadModule mime_module $APACHE_MODS/mod_mime.so
$run_user
ServerName 127.0.0.1
Listen 127.0.0.1:$port
$(apache_sizing "$mpm")
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout $kt
EnableSendfile On
EnableMMAP On
HostnameLookups Off
TypesConfig /etc/mime.types
ErrorLog $dir/error.log
LogLevel warn
EOF
        if [ -n "$access_log" ]; then
            echo 'LogFormat "%h %l %u %t \"%r\" %>s %O \"%{Referer}i\" \"%{User-Agent}i\"" combined'
            echo "CustomLog $access_log combined"
        fi
        cat <<EOF
DocumentRoot $DOCROOT
<Directory />
    AllowOverride None
    Require all denied
</Directory>
<Directory $DOCROOT>
    AllowOverride None
    Options None
    Require all granted
</Directory>
EOF
        if [ -n "$cgi_mod" ]; then
            cat <<EOF
LoadModule alias_module $APACHE_MODS/mod_alias.so
LoadModule ${cgi_mod}_module $APACHE_MODS/mod_${cgi_mod}.so
ScriptAlias /cgi-bin/ $CGI_DIR/
<Directory $CGI_DIR>
    AllowOverride None
    Options +ExecCGI
    Require all granted
</Directory>
EOF
        fi
    } >"$conf"
    cp "$conf" "$RESULTS_DIR/$name.conf"
    "$APACHE_BIN" -t -f "$conf" >"$RESULTS_DIR/$name-check.txt" 2>&1 || { cat "$RESULTS_DIR/$name-check.txt" >&2; die "$name: apache2 -t failed"; }
    launch_server "$name" "$port" "$dir/error.log" setsid taskset -c "$SERVER_CPU" "$APACHE_BIN" -f "$conf" -DFOREGROUND
}

# ---------------------------------------------------------------- docroot, modus, wrk

# make_docroot DIR SIZES...: deterministic ASCII files "<size>.txt"; fills the associative array FILE_OF
# (declared by the caller) with size -> file name.
make_docroot() {
    local dir=$1 sz bytes name
    shift
    mkdir -p "$dir"
    for sz in "$@"; do
        bytes=$(to_bytes "$sz")
        name="$sz.txt"
        awk -v n="$bytes" 'BEGIN {
            line = "modus static benchmark: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
            s = line "\n"
            while (length(s) < n) s = s s
            printf "%s", substr(s, 1, n)
        }' >"$dir/$name"
        [ "$(stat -c %s "$dir/$name")" -eq "$bytes" ] || die "could not create $name"
        FILE_OF[$sz]=$name
    done
}

# make_cert ecdsa|rsa: a throw-away certificate for localhost and 127.0.0.1 (ECDSA P-256 or RSA 2048),
# valid two days, as WORK/KIND.crt and WORK/KIND.key (bench/tls.sh, bench/testssl.sh)
make_cert() {
    local kind=$1 newkey
    case $kind in
        ecdsa) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
        rsa) newkey=(-newkey rsa:2048) ;;
        *) die "make_cert: no key type $kind" ;;
    esac
    openssl req -x509 "${newkey[@]}" -nodes -days 2 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$WORK/$kind.key" -out "$WORK/$kind.crt" 2>/dev/null || die "openssl could not make the $kind certificate"
}

# Sets MODUS_BIN: builds modus with cargo unless MODUS_BIN is already set.
ensure_modus_bin() {
    if [ -z "${MODUS_BIN:-}" ]; then
        log "building modus (cargo build --release -p modus)"
        (cd "$REPO" && cargo build --release -p modus) >"$RESULTS_DIR/cargo-build.log" 2>&1 \
            || { tail -n 30 "$RESULTS_DIR/cargo-build.log" >&2; die "cargo build failed"; }
        MODUS_BIN=$REPO/target/release/modus
    fi
    [ -x "$MODUS_BIN" ] || die "MODUS_BIN=$MODUS_BIN is not executable"
}

# wait_modus_listening PID STDOUT_FILE STDERR_FILE: waits for modus' "listening on ADDR ..." line and
# for the port to accept; prints the line.
wait_modus_listening() {
    local pid=$1 out=$2 err=$3 i line="" addr
    for i in $(seq 1 100); do
        line=$(head -n 1 "$out" 2>/dev/null || true)
        case $line in listening\ on*) break ;; esac
        kill -0 "$pid" 2>/dev/null || { cat "$err" >&2; die "modus exited at startup"; }
        sleep 0.1
    done
    case $line in listening\ on*) ;; *) die "modus printed no 'listening on' line within 10 s" ;; esac
    addr=$(awk '{ print $3 }' <<<"$line")
    for i in $(seq 1 50); do
        [ -n "$(ss -Htln "sport = :${addr##*:}" 2>/dev/null)" ] && break
        sleep 0.1
    done
    echo "$line"
}

run_wrk() { # run_wrk DURATION URL MODE OUTFILE
    local dur=$1 url=$2 mode=$3 out=$4 limit
    local -a close_hdr=()
    [ "$mode" = close ] && close_hdr=(-H 'Connection: close')
    limit=$(( $(to_seconds "$dur") + 30 ))
    timeout "$limit" taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"$dur" --latency "${close_hdr[@]}" "$url" >"$out" 2>&1
}

# measure_run SERVER CASE ROUND URL RAWFILE SERVER_PID: one measured wrk run (warm-up first) with the
# noise guard: waits for quiet, re-measures a noisy run (RETRY_NOISY times, within NOISE_BUDGET).
# Sets rps p99 reqs sockerr non2xx dticks us_req busy_s busy_l other.
measure_run() {
    local s=$1 c=$2 round=$3 url=$4 raw=$5 spid=$6 mode=${2#*/}
    local attempt=0 all_before ours_before t_before all_after ours_after t_after
    local bs0 ts0 bl0 tl0 bs1 ts1 bl1 tl1 wrk_rc p99raw
    while :; do
        attempt=$((attempt + 1))
        wait_quiet
        if [ "$WARM_S" -gt 0 ]; then
            run_wrk "$WARMUP" "$url" "$mode" "$raw.warmup" || log "warm-up of $s $c exited non-zero"
        fi
        all_before=$(all_user_ticks); ours_before=$(tree_ticks $$)
        t_before=$(tree_ticks "$spid")
        read -r bs0 ts0 < <(cpu_jiffies "$SERVER_CPU")
        read -r bl0 tl0 < <(cpu_jiffies "$LOAD_CPU")
        wrk_rc=0
        run_wrk "$DURATION" "$url" "$mode" "$raw" || wrk_rc=$?
        t_after=$(tree_ticks "$spid")
        all_after=$(all_user_ticks); ours_after=$(tree_ticks $$)
        read -r bs1 ts1 < <(cpu_jiffies "$SERVER_CPU")
        read -r bl1 tl1 < <(cpu_jiffies "$LOAD_CPU")
        kill -0 "$spid" 2>/dev/null || die "$s died during $c (round $round)"

        rps=$(awk '/^Requests\/sec:/ { print $2 }' "$raw")
        p99raw=$(awk '$1 == "99%" { print $2 }' "$raw")
        reqs=$(awk '/ requests in / { print $1 }' "$raw")
        sockerr=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$raw")
        non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$raw")
        sockerr=${sockerr:-0}; non2xx=${non2xx:-0}
        if [ -z "$rps" ] || [ -z "$reqs" ] || [ -z "$p99raw" ] || [ "$wrk_rc" -ne 0 ]; then
            log "wrk failed for $s $c (round $round, rc=$wrk_rc); see $raw"
            rps=${rps:-0}; reqs=${reqs:-0}; p99raw=${p99raw:-0us}
            sockerr=$((sockerr + 1))
        fi
        p99=$(latency_ms "$p99raw")
        dticks=$((t_after - t_before))
        us_req=$(awk -v t="$dticks" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "nan" }')
        busy_s=$(awk -v b="$((bs1 - bs0))" -v t="$((ts1 - ts0))" 'BEGIN { if (t > 0) printf "%.0f", 100 * b / t; else print "nan" }')
        # CPU used by other jobs during the run, in % of one core
        other=$(awk -v t="$(( (all_after - all_before) - (ours_after - ours_before) ))" -v hz="$CLK_TCK" -v d="$DUR_S" \
            'BEGIN { v = 100 * t / hz / d; if (v < 0) v = 0; printf "%.0f", v }')
        if [ "$other" -lt "$NOISE_PCT" ]; then break; fi
        if [ "$attempt" -le "$RETRY_NOISY" ] && [ "$SPENT_ON_NOISE" -lt "$NOISE_BUDGET" ]; then
            SPENT_ON_NOISE=$((SPENT_ON_NOISE + DUR_S + WARM_S))
            log "other jobs used ${other}% of a core during $s $c (round $round): measuring again"
            RETRIED=$((RETRIED + 1))
            continue
        fi
        NOISY=$((NOISY + 1))
        NOISY_OF[$s|$c]=$(( ${NOISY_OF[$s|$c]:-0} + 1 ))
        log "warning: other jobs used ${other}% of a core during this run (noise)"
        break
    done
    busy_l=$(awk -v b="$((bl1 - bl0))" -v t="$((tl1 - tl0))" 'BEGIN { if (t > 0) printf "%.0f", 100 * b / t; else print "nan" }')
}

# check_serves_files SERVER: every SIZES file on PORT_OF answers 200 with its exact bytes, and 200 with
# `Connection: close`, so that no measured run counts error pages or wrong files.
check_serves_files() {
    local s=$1 sz url code
    for sz in $SIZES; do
        url="http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$sz]}"
        code=$(curl -sS --max-time 5 -o "$WORK/check" -w '%{http_code}' "$url") || die "$s: GET $url failed"
        [ "$code" = 200 ] || die "$s: GET $url answered $code"
        cmp -s "$WORK/check" "$DOCROOT/${FILE_OF[$sz]}" || die "$s: GET $url returned different bytes"
        code=$(curl -sS --max-time 5 -H 'Connection: close' -o "$WORK/check" -w '%{http_code}' "$url") \
            || die "$s: GET $url (Connection: close) failed"
        [ "$code" = 200 ] || die "$s: GET $url (Connection: close) answered $code"
    done
}

# plan_runs [EXTRA_CSV_COLUMN]: before the rounds over CASES × SERVERS — CSV (runs.csv) with its header,
# the per-cell arrays emptied, SERVER_LIST, the run counters, T0, and a line saying how long it will take.
plan_runs() {
    CSV=$RESULTS_DIR/runs.csv
    echo "round,case,server,req_per_s,p99_ms,requests,socket_errors,non_2xx_3xx,server_ticks,server_us_per_req,cpu${SERVER_CPU}_busy_pct,cpu${LOAD_CPU}_busy_pct,other_jobs_pct${1:+,$1}" >"$CSV"
    declare -gA RPS=() P99=() USR=() BUSY_S=() BUSY_L=() ERRS=() NOISY_OF=()
    read -r -a SERVER_LIST <<<"$SERVERS"
    total_runs=$(( ROUNDS * ${#CASES[@]} * ${#SERVER_LIST[@]} ))
    run_no=0; NOISY=0; RETRIED=0; SPENT_ON_NOISE=0
    T0=$(date +%s)
    log "measuring: $total_runs runs of $DURATION (+$WARMUP warm-up) — about $(( total_runs * (DUR_S + WARM_S + 1) / 60 + 1 )) min"
}

# measure_file_cases LINES_IN_LOG: the measured part of models.sh — CASES = every SIZES ×
# MODES, plan_runs, ROUNDS rounds of measure_round in round_order; sets ELAPSED
measure_file_cases() {
    local sz m round
    CASES=()
    for sz in $SIZES; do for m in $MODES; do CASES+=("$sz/$m"); done; done
    plan_runs log_lines
    for round in $(seq 1 "$ROUNDS"); do
        round_order "$round"
        measure_round "$round" "$1" "${ORDER[@]}"
    done
    ELAPSED=$(( $(date +%s) - T0 ))
}

# round_order ROUND: ORDER = SERVER_LIST, reversed in even rounds so that no server always goes first
round_order() {
    local i
    ORDER=("${SERVER_LIST[@]}")
    if [ $(( $1 % 2 )) -eq 0 ]; then
        ORDER=()
        for ((i = ${#SERVER_LIST[@]} - 1; i >= 0; i--)); do ORDER+=("${SERVER_LIST[$i]}"); done
    fi
}

# record_run SERVER CASE: measure_run's figures added to the cell's lists (their medians are reported)
record_run() {
    local key="$1|$2"
    RPS[$key]="${RPS[$key]:-} $rps"
    P99[$key]="${P99[$key]:-} $p99"
    USR[$key]="${USR[$key]:-} $us_req"
    BUSY_S[$key]="${BUSY_S[$key]:-} $busy_s"
    BUSY_L[$key]="${BUSY_L[$key]:-} $busy_l"
    ERRS[$key]=$(( ${ERRS[$key]:-0} + sockerr + non2xx ))
}

# measure_round ROUND LINES_IN_LOG SERVER...: one round of static-file runs, every case of CASES
# ("SIZE/MODE") on every SERVER in the order given: measure_run, the server's access log (LOG_OF) counted
# and emptied, record_run, a runs.csv row (log_lines last) and a progress line, which names the log lines
# too if LINES_IN_LOG is 1.
measure_round() {
    local round=$1 lines_in_log=$2 c sz mode s url raw lines tail=""
    shift 2
    for c in "${CASES[@]}"; do
        sz=${c%/*}; mode=${c#*/}
        for s in "$@"; do
            run_no=$((run_no + 1))
            url="http://127.0.0.1:${PORT_OF[$s]}/${FILE_OF[$sz]}"
            raw="$RESULTS_DIR/r$round-$sz-$mode-$s.txt"
            measure_run "$s" "$c" "$round" "$url" "$raw" "${PID_OF[$s]}"
            lines=$(wc -l <"${LOG_OF[$s]}" 2>/dev/null || echo 0)
            : >"${LOG_OF[$s]}" 2>/dev/null || true   # keep the temp dir small; logs are opened for append
            record_run "$s" "$c"
            echo "$round,$c,$s,$rps,$p99,$reqs,$sockerr,$non2xx,$dticks,$us_req,$busy_s,$busy_l,$other,$lines" >>"$CSV"
            [ "$lines_in_log" = 1 ] && tail=", log lines $lines"
            log "[$run_no/$total_runs] round $round $c $s: $rps req/s, p99 $p99 ms, $us_req µs/req CPU," \
                "cpu$SERVER_CPU $busy_s%, cpu$LOAD_CPU $busy_l%, others $other%, errors $sockerr, non-2xx/3xx $non2xx$tail"
        done
    done
}

# ---------------------------------------------------------------- reporting

# git revision of the repository, with " (dirty tree)" if it has uncommitted changes
git_rev_label() {
    local rev dirty=""
    rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "no commit")
    if [ -n "$(git -C "$REPO" status --porcelain 2>/dev/null | head -n 1)" ]; then dirty=" (dirty tree)"; fi
    echo "$rev$dirty"
}

machine_label() {
    echo "\`nproc\` $(nproc), kernel $(uname -r), $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
}

# publish_block BLOCK NAME: a run's summary kept as RESULTS_DIR/summary.md, put into BENCH_MD's block
# NAME (unless BENCH_MD=off) and printed
publish_block() {
    cp "$1" "$RESULTS_DIR/summary.md"
    if [ "$BENCH_MD" != off ]; then
        replace_md_block "$BENCH_MD" "$2" "$1"
        log "updated $BENCH_MD"
    fi
    echo
    cat "$1"
    log "raw results in $RESULTS_DIR"
}

# replace_md_block FILE NAME BLOCKFILE: replaces what lies between <!-- NAME:begin --> and
# <!-- NAME:end --> in FILE with BLOCKFILE's content (markers appended to FILE if missing).
replace_md_block() {
    local md=$1 name=$2 block=$3 tmp
    if ! grep -q "<!-- $name:begin -->" "$md"; then
        printf '\n<!-- %s:begin -->\n<!-- %s:end -->\n' "$name" "$name" >>"$md"
    fi
    tmp=$(mktemp "${TMPDIR:-/tmp}/bench-md.XXXXXX")
    awk -v f="$block" -v b="<!-- $name:begin -->" -v e="<!-- $name:end -->" '
        index($0, b) { print; while ((getline l < f) > 0) print l; skip = 1; next }
        index($0, e) { skip = 0 }
        !skip { print }
    ' "$md" >"$tmp"
    cat "$tmp" >"$md"
    rm -f "$tmp"
}
