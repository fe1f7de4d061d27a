#!/usr/bin/env bash
# bench/cgi-children.sh — what a CGI script inherits and what its children can hold (issue 34, items 2
# and 6), for every model and every binary given.
#
# Each server is started the way a shell starts a background job (INT and QUIT ignored) with a CGI
# directory of three scripts:
#   sig.sh     prints its SigBlk and SigIgn (/proc/self/status)
#   kill.sh    `sleep 3 & kill -TERM $!; wait $!` and prints the exit status: 143 at once when
#              SIGTERM reaches the child, 0 after 3 s when it is blocked or ignored
#   bg.sh      writes its answer, starts `sleep 20 &` that keeps stdout open, and exits 0
# and reports per model: the masks, kill.sh's status and time, and bg.sh's time and curl's exit
# status (18: a truncated body), under --cgi-timeout 10s.
#
# Usage: BINS="/path/to/old/modus target/release/modus" bench/cgi-children.sh
# Environment: BINS [target/release/modus], MODELS [every model], PORT [18651]. Loopback only.
set -uo pipefail
cd "$(dirname "$0")/.."
BINS=${BINS:-target/release/modus}
# Every model the last of BINS (the build under test) registers.
MODELS=${MODELS:-$("${BINS##* }" models --names | paste -sd' ')}
PORT=${PORT:-18651}
work=$(mktemp -d)
trap 'pkill -f "cgi-children-site" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/cgi-children-site" "$work/cgi"
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\ngrep -E "^Sig(Blk|Ign):" /proc/self/status | tr "\\n\\t" "  "\n' > "$work/cgi/sig.sh"
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\nsleep 3 & kill -TERM $!; wait $!; echo "rc=$?"\n' > "$work/cgi/kill.sh"
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\necho before\nsleep 20 &\nexit 0\n' > "$work/cgi/bg.sh"
chmod +x "$work/cgi/"*.sh
printf '%-22s %-12s %-58s %-16s %s\n' binary model "masks" "kill.sh" "bg.sh (time, curl rc)"
for bin in $BINS; do
    for model in $MODELS; do
        sh -c 'trap "" INT QUIT; exec "$0" "$@"' "$bin" serve "$work/cgi-children-site" --model "$model" \
            --cgi-dir "$work/cgi" --cgi-timeout 10s --listen "127.0.0.1:$PORT" --access-log off \
            >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
        masks=$(curl -s "http://127.0.0.1:$PORT/cgi-bin/sig.sh")
        kill_out=$(curl -s -w ' %{time_total}s' "http://127.0.0.1:$PORT/cgi-bin/kill.sh" | tr '\n' ' ')
        bg=$(curl -s -o /dev/null -w '%{time_total}s' "http://127.0.0.1:$PORT/cgi-bin/bg.sh"; echo " rc=$?")
        printf '%-22s %-12s %-58s %-16s %s\n' "$(basename "$(dirname "$bin")")/$(basename "$bin")" "$model" "$masks" "$kill_out" "$bg"
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        pkill -f "cgi-children-site" 2>/dev/null; sleep 0.3
    done
done
