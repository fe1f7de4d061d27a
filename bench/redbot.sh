#!/usr/bin/env bash
# bench/redbot.sh — REDbot ("lint for HTTP") on the answers of a configured modus: compression, precompressed
# files, Cache-Control rules and an error page, as README's "Compression" configures them. REDbot fetches
# each URL, then probes it again with Accept-Encoding: gzip, a Range, If-None-Match and If-Modified-Since,
# and notes what it finds at the levels GOOD, INFO, WARN and BAD. The script fails if any note on any
# URL is WARN or BAD, but one: RANGE_CL_FULL on a file of 96 bytes or less (robots.txt here). REDbot asks
# for `bytes=0-N` with N the file's length — one past its last byte, so the whole file — and modus answers
# a satisfiable range covering the whole file with a 206, as nginx does (crates/server/tests/conformance/
# range.rs, assert_whole); REDbot then warns that the 206 is as long as the 200. Listed, not failed.
#
# Usage:
#   bench/redbot.sh                 # installs REDbot into a throw-away venv (pip install redbot)
#   REDBOT=/path/to/redbot bench/redbot.sh
#
# Environment knobs (defaults in brackets):
#   REDBOT      a redbot command already installed; unset = pip install redbot into WORK/venv
#   MODUS_BIN   modus binary; unset = cargo build --release -p modus
#   BENCH_MD    markdown file to update, "off" to skip    [<repo>/BENCHMARKS.md]
#   RESULTS_DIR raw output directory                      [<repo>/bench/results/<timestamp>-redbot]
#
# Exit status: 0 if REDbot warned of nothing, 1 if it warned, 2 on a setup failure (REDbot not installable:
# no network to PyPI, say).
#
# Why this is not a lab spec: It lints responses with REDbot (a protocol check, GOOD/WARN/BAD notes),
# under no load.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=redbot
# shellcheck source=bench/lib.sh
. "$SCRIPT_DIR/lib.sh"

BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$(date -u +%Y%m%dT%H%M%SZ)-redbot}
make_workdir redbot
declare -A PID_OF=() PORT_OF=()
STARTED=()

cleanup() {
    local name
    for name in "${STARTED[@]}"; do stop_pid "${PID_OF[$name]:-}" "$name"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${REDBOT:-}" ]; then
    log "installing REDbot (python3 -m venv, pip install redbot)"
    python3 -m venv "$WORK/venv" >"$RESULTS_DIR/pip.log" 2>&1 \
        && "$WORK/venv/bin/pip" install redbot >>"$RESULTS_DIR/pip.log" 2>&1 \
        || { tail -n 20 "$RESULTS_DIR/pip.log" >&2; die "REDbot could not be installed (pip install redbot; see $RESULTS_DIR/pip.log)"; }
    REDBOT=$WORK/venv/bin/redbot
fi
REDBOT_VERSION=$("$(dirname "$REDBOT")/python" -c 'import importlib.metadata as m; print(m.version("redbot"))' 2>/dev/null || echo "?")

# The site: a page, a stylesheet and a script under /assets/ (long-lived), a precompressed script, an
# image (never encoded), a small text file (below --compress-min-size), the 404 page.
make_docroot "$DOCROOT" 500B
mkdir -p "$DOCROOT/assets" "$DOCROOT/errors"
python3 - "$DOCROOT" <<'EOF'
import sys, zlib, struct
root = sys.argv[1]
rows = "".join(f"<p>Paragraph {i}: modus serves this page compressed, once.</p>\n" for i in range(80))
open(f"{root}/index.html", "w").write(
    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>demo</title>"
    "<link rel=\"stylesheet\" href=\"/assets/site.css\"><script src=\"/assets/app.js\"></script></head>"
    f"<body>{rows}<img src=\"/assets/logo.png\" alt=\"logo\"></body></html>\n")
open(f"{root}/assets/site.css", "w").write("".join(f".c{i} {{ margin: {i}px; color: #333; }}\n" for i in range(60)))
open(f"{root}/assets/app.js", "w").write("".join(f"function f{i}(x) {{ return x + {i}; }}\n" for i in range(80)))
open(f"{root}/robots.txt", "w").write("User-agent: *\nAllow: /\n")
open(f"{root}/errors/404.html", "w").write("<!doctype html><title>Not found</title><p>Nothing here.</p>\n")
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + bytes(range(96)) for _ in range(32)))) \
    + chunk(b"IEND", b"")
open(f"{root}/assets/logo.png", "wb").write(png)
EOF
gzip -9 -k -n "$DOCROOT/assets/app.js"
cat >"$WORK/modus.toml" <<'EOF'
compress = "br,zstd,gzip"
precompressed = true
cache-control = ["/assets/*=max-age=31536000, immutable", "*.html=no-cache", "*=max-age=3600"]
error-page = ["404=/errors/404.html"]
EOF
cp "$WORK/modus.toml" "$RESULTS_DIR/modus.toml"
ensure_modus_bin
port=$(free_port $((20000 + RANDOM % 20000)))
launch_server modus "$port" "$RESULTS_DIR/modus.stderr" "$MODUS_BIN" serve "$DOCROOT" --listen "127.0.0.1:$port" \
    --config "$WORK/modus.toml" --access-log off

URLS=(/ /index.html /assets/site.css /assets/app.js /assets/logo.png /robots.txt /500B.txt /missing.html)
warned=0
rows=()
for path in "${URLS[@]}"; do
    out=$RESULTS_DIR/$(tr '/' '_' <<<"${path}").har
    timeout 120 "$REDBOT" -o har "http://127.0.0.1:$port$path" >"$out" 2>"$out.stderr" || die "redbot failed on $path (see $out.stderr)"
    read -r status counts notes excused < <(python3 - "$out" <<'EOF'
import json, sys, collections
har = json.load(open(sys.argv[1]))
entry = har["log"]["entries"][0]
size = entry["response"]["content"]["size"]
count, flagged, excused = collections.Counter(), [], []
def walk(notes):
    for n in notes:
        count[n["level"]] += 1
        if n["level"] in ("WARN", "BAD"):
            name = f'{n["level"]}:{n.get("note_id", "?")}'
            (excused if n.get("note_id") == "RANGE_CL_FULL" and 0 < size <= 96 else flagged).append(name)
        walk(n.get("subnotes", []))
walk(entry.get("_red_messages", []))
counts = "/".join(str(count[l]) for l in ("GOOD", "INFO", "WARN", "BAD"))
print(entry["response"]["status"], counts, ",".join(flagged) or "-", ",".join(excused) or "-")
EOF
)
    log "$path: $status, notes GOOD/INFO/WARN/BAD $counts, warnings $notes, explained $excused"
    [ "$notes" = - ] || warned=1
    explained=""
    [ "$excused" = - ] || explained=" ($excused: a file of 96 bytes or less, see bench/redbot.sh)"
    rows+=("| \`$path\` | $status | $counts | ${notes/-/none}$explained |")
done

block=$(mktemp)
{
    echo "Checked $(date -u +%Y-%m-%d) by \`bench/redbot.sh\` (REDbot $REDBOT_VERSION), modus $(git_rev_label); the"
    echo "configuration is README's \"Compression\" example (\`compress\`, \`precompressed\`, \`cache-control\`, \`error-page\`)."
    echo
    echo "| URL | status | notes GOOD/INFO/WARN/BAD | warnings |"
    echo "|---|---:|---|---|"
    printf '%s\n' "${rows[@]}"
} >"$block"
publish_block "$block" redbot
rm -f "$block"
if [ "$warned" = 1 ]; then log "REDbot warned (see the .har files in $RESULTS_DIR)"; fi
exit "$warned"
