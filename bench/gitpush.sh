#!/usr/bin/env bash
# bench/gitpush.sh — a large `git push` over smart HTTP through `git http-backend` run as a CGI script,
# on every model (issue 16, item 4). git sends a pack larger than its http.postBuffer (1 MiB) as a
# chunked request body; modus reads a chunked body whole before the script starts (the script is told
# CONTENT_LENGTH, RFC 3875 §4.1.2) and past 64 KiB keeps it in an unnamed temp file. The figure is the
# server's peak resident memory (the largest VmHWM among its own processes; the script's memory is the
# script's) during a push of SIZE of incompressible data: the target is under 64 MiB. Each push is then
# checked by cloning the repository back over HTTP and comparing the commit.
#
# Usage:
#   bench/gitpush.sh                              # every model, 200 MiB
#   MODELS='event pool' SIZE=50 bench/gitpush.sh  # SIZE in MiB
#
# Knobs: MODELS [all 9] SIZE [200] MODUS_BIN [target/release/modus, built if missing], BENCH_MD
#        [<repo>/BENCHMARKS.md; off], TMPDIR (where modus spools bodies; a tmpfs counts as memory, but
#        not the server's).
#
# Why this is not a lab spec: Its load is one `git push` through git http-backend (a chunked request
# body) and its figure the server's peak resident memory (VmHWM); the lab's load is `modus load` (GET or
# HEAD, no bodies) and it reads PSS after the run, not a peak.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=gitpush.sh
# shellcheck source=bench/lib.sh
source "$SCRIPT_DIR/lib.sh"

MODELS=${MODELS:-$ALL_MODELS}
SIZE=${SIZE:-200}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
MODUS=${MODUS_BIN:-$REPO/target/release/modus}
[ -x "$MODUS" ] || (cd "$REPO" && cargo build --release -q)
command -v git >/dev/null || die "git is not installed (apt-get install git)"
BACKEND="$(git --exec-path)/git-http-backend"
[ -x "$BACKEND" ] || die "no git-http-backend in $(git --exec-path)"

WORK=$(mktemp -d /tmp/modus-gitpush.XXXXXX)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# The repository to push: one commit holding SIZE MiB that no compression shrinks.
log "making a $SIZE MiB repository"
git init -q "$WORK/src"
head -c "$((SIZE << 20))" /dev/urandom >"$WORK/src/blob.bin"
git -C "$WORK/src" add blob.bin
git -C "$WORK/src" -c user.name=bench -c user.email=bench@localhost commit -qm "$SIZE MiB"
want=$(git -C "$WORK/src" rev-parse HEAD)

# CGI scripts get a clean environment: the wrapper says where the repositories are.
mkdir -p "$WORK/cgi" "$WORK/www"
cat >"$WORK/cgi/git" <<EOF
#!/bin/sh
GIT_PROJECT_ROOT=$WORK/repos GIT_HTTP_EXPORT_ALL=1 exec $BACKEND
EOF
chmod +x "$WORK/cgi/git"

# peak_rss PID: the largest VmHWM (kB) among PID and its descendants running the same program (the process
# models' children; a CGI script is not the server).
peak_rss() {
    local pids=$1 more=$1 p peak=0 hwm comm
    comm=$(cat /proc/"$1"/comm 2>/dev/null)
    while [ -n "$more" ]; do
        local next=
        for p in $more; do next="$next $(cat /proc/"$p"/task/*/children 2>/dev/null)"; done
        more=
        for p in $next; do
            [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$comm" ] && { pids="$pids $p"; more="$more $p"; }
        done
    done
    for p in $pids; do
        hwm=$(awk '/^VmHWM:/ { print $2 }' /proc/"$p"/status 2>/dev/null || echo 0)
        [ "${hwm:-0}" -gt "$peak" ] && peak=$hwm
    done
    echo "$peak"
}

rows=()
failed=0
for model in $MODELS; do
    rm -rf "$WORK/repos" "$WORK/back"
    git init -q --bare "$WORK/repos/r.git"
    git -C "$WORK/repos/r.git" config http.receivepack true
    "$MODUS" serve "$WORK/www" --model "$model" --listen 127.0.0.1:0 --access-log off \
        --cgi-dir "$WORK/cgi" --max-body 1GiB --cgi-timeout 5m >"$WORK/out" 2>"$WORK/err" &
    SERVER_PID=$!
    for _ in $(seq 100); do grep -q '^listening on' "$WORK/out" 2>/dev/null && break; sleep 0.1; done
    addr=$(awk '/^listening on/ { print $3; exit }' "$WORK/out")
    [ -n "$addr" ] || die "$model did not start: $(cat "$WORK/err")"
    url="http://$addr/cgi-bin/git/r.git"
    # Children (process models) exist now: the baseline is the idle server.
    idle=$(peak_rss "$SERVER_PID")
    start=$(date +%s.%N)
    peak=$idle
    git -C "$WORK/src" push -q "$url" HEAD:refs/heads/main 2>"$WORK/push.err" &
    push=$!
    while kill -0 "$push" 2>/dev/null; do
        p=$(peak_rss "$SERVER_PID")
        [ "$p" -gt "$peak" ] && peak=$p
        sleep 0.2
    done
    status=ok
    wait "$push" || status="push failed: $(tail -1 "$WORK/push.err")"
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    p=$(peak_rss "$SERVER_PID")
    [ "$p" -gt "$peak" ] && peak=$p
    if [ "$status" = ok ]; then
        git clone -q --bare "$url" "$WORK/back" 2>"$WORK/clone.err" || status="clone failed: $(tail -1 "$WORK/clone.err")"
        [ "$status" != ok ] || [ "$(git -C "$WORK/back" rev-parse main)" = "$want" ] || status="clone differs"
    fi
    kill "$SERVER_PID" && wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    verdict=$([ "$status" = ok ] && [ "$peak" -lt 65536 ] && echo pass || echo FAIL)
    [ "$verdict" = pass ] || failed=1
    log "$model: $secs s, peak RSS $((peak / 1024)) MiB (idle $((idle / 1024)) MiB), $status: $verdict"
    rows+=("| $model | $secs | $((idle / 1024)) | $((peak / 1024)) | $status | $verdict |")
done

table=$(
    printf '| model | push s | idle RSS MiB | peak RSS MiB | push and clone | < 64 MiB |\n'
    printf '|---|---|---|---|---|---|\n'
    printf '%s\n' "${rows[@]}"
)
printf '%s\n' "$table"
if [ "$BENCH_MD" != off ]; then
    {
        printf '`bench/gitpush.sh` (SIZE=%s MiB, %s, git %s): a push through `git http-backend` as CGI,\n' \
            "$SIZE" "$(date -u +%Y-%m-%d)" "$(git --version | awk '{ print $3 }')"
        printf 'the pack sent as a chunked request body; the server'"'"'s peak resident memory.\n\n%s\n' "$table"
    } >"$WORK/block.md"
    replace_md_block "$BENCH_MD" gitpush "$WORK/block.md"
fi
exit "$failed"
