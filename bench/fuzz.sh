#!/usr/bin/env bash
# bench/fuzz.sh — coverage-guided fuzzing of the parsers network bytes go through (fuzz/: cargo-fuzz,
# libFuzzer): the request-head parser (whole vs its own prefixes), the chunked decoder (whole vs cut vs
# byte by byte), path normalisation (never out of the root), Range evaluation (every range inside the
# file), the CGI response-head parser, the director's response head (what it writes parses again, one
# framing), and `modus load`'s response parser (whole vs cut).
#
# Usage:
#   bench/fuzz.sh                       # every target for FUZZ_SECONDS (default 3600 / number of targets)
#   FUZZ_SECONDS=10 bench/fuzz.sh       # what .ci/run does: a bounded smoke run of each
#   TARGETS="chunked range" bench/fuzz.sh
#
# Needs cargo-fuzz (installed here if missing) and runs on stable Rust with RUSTC_BOOTSTRAP=1 (cargo-fuzz
# passes -Z flags). Seeds are fuzz/corpus/TARGET/seed-*; what a run adds to the corpus stays local
# (.gitignore). A crash stops the script with exit status 1 and leaves the input in fuzz/artifacts/TARGET/:
# turn it into a regression test of the crate it broke.
#
# Why this is not a lab spec: It fuzzes parsers with cargo-fuzz: no server runs and nothing is measured
# per request.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO/fuzz"
ALL="request_head chunked resolve range cgi_head director_response load_response"
TARGETS=${TARGETS:-$ALL}
count=$(wc -w <<<"$TARGETS")
FUZZ_SECONDS=${FUZZ_SECONDS:-$((3600 / count))}
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo fuzz build -O
for t in $TARGETS; do
    echo "== fuzz $t for ${FUZZ_SECONDS}s"
    # Runs on a copy of the seeds, so a CI run leaves the tree as it found it.
    work=$(mktemp -d)
    cp -r "corpus/$t/." "$work/"
    if ! cargo fuzz run -O "$t" "$work" -- -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 >"$work.log" 2>&1; then
        tail -n 40 "$work.log"
        echo "fuzz: $t found a crash (input in fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    grep -E '^stat::number_of_executed_units|^Done' "$work.log" | tail -n 1
    rm -rf "$work" "$work.log"
done
