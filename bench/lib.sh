# bench/lib.sh — shell functions shared by bench/static.sh and bench/models.sh. Source it; do not run it.
#
# The sourcing script sets BENCH_TAG (the prefix of its log lines) before sourcing, and before calling
# the functions below, the variables they read:
#   SERVER_CPU LOAD_CPU CONNS CLK_TCK RESULTS_DIR WORK DOCROOT REPO
#   NOISE_PCT QUIET_TIMEOUT RETRY_NOISY NOISE_BUDGET SPENT_ON_NOISE RETRIED NOISY DUR_S WARM_S
# shellcheck shell=bash
# shellcheck disable=SC2034  # measure_run and make_docroot set variables the sourcing script reads

BENCH_TAG=${BENCH_TAG:-bench}

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

# Proportional set size of a process tree in KiB: sum of Pss over /proc/PID/smaps_rollup of every member
tree_pss_kb() {
    local pid total=0 v
    for pid in $(pid_tree "$1"); do
        v=$(awk '$1 == "Pss:" { print $2 }' "/proc/$pid/smaps_rollup" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# Resident set size of a process tree in KiB (sum of VmRSS; shared pages counted once per process)
tree_rss_kb() {
    local pid total=0 v
    for pid in $(pid_tree "$1"); do
        v=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

# clock ticks used by a process tree: utime+stime+cutime+cstime (fields 14-17) of every member.
# Covers all threads (live and exited) of each process and children reaped by a member.
tree_ticks() {
    local total=0 pid stat rest
    local -a f
    for pid in $(pid_tree "$1"); do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        rest=${stat##*) }
        read -r -a f <<<"$rest"
        # f[0] is field 3 (state), so field 14 is f[11]
        total=$((total + f[11] + f[12] + f[13] + f[14]))
    done
    echo "$total"
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
    local -a hdr=()
    [ "$mode" = close ] && hdr=(-H 'Connection: close')
    limit=$(( $(to_seconds "$dur") + 30 ))
    timeout "$limit" taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"$dur" --latency "${hdr[@]}" "$url" >"$out" 2>&1
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
