#!/usr/bin/env bash
# bench/fuzz.sh — coverage-guided fuzzing of the parsers network bytes go through (fuzz/: cargo-fuzz,
# libFuzzer): the request-head parser (whole vs its own prefixes), the chunked decoder (whole vs cut vs
# byte by byte), path normalisation (never out of the root), Range evaluation (every range inside the
# file), the CGI response-head parser, the director's response head (what it writes parses again, one
# framing), and `modus load`'s response parser (whole vs cut).
#
# Usage:
#   bench/fuzz.sh                       # the nightly run: every target for FUZZ_SECONDS (default 600) each
#   FUZZ_SECONDS=10 bench/fuzz.sh       # what .ci/run does: a bounded smoke run of each
#   TARGETS="chunked range" bench/fuzz.sh
#
# How long is long enough: the director_response target found its first crash (issue 34, item 7) after
# about 70 s of an independent run, so neither CI's 10 s nor the old default of one hour split between
# seven targets (514 s each, and never run) was a run that finds what an 8-minute run finds. The nightly
# default is 10 minutes per target, every target, each run to its end even after another has crashed; its
# results are in BENCHMARKS.md ("Hardening round 2: bytes").
#
# Needs cargo-fuzz (installed here if missing) and runs on stable Rust with RUSTC_BOOTSTRAP=1 (cargo-fuzz
# passes -Z flags). Seeds are fuzz/corpus/TARGET/seed-*; what a run adds to the corpus stays local
# (.gitignore). A crash ends that target's run and leaves the input in fuzz/artifacts/TARGET/ (turn it into a
# regression test of the crate it broke and a seed); the script runs the other targets, then exits with
# status 1. Each target's line says its seconds, executions, coverage and corpus.
#
# Why this is not a lab spec: It fuzzes parsers with cargo-fuzz: no server runs and nothing is measured
# per request.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO/fuzz"
ALL="request_head chunked resolve range cgi_head director_response load_response"
TARGETS=${TARGETS:-$ALL}
FUZZ_SECONDS=${FUZZ_SECONDS:-600}
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo fuzz build -O
failed=""
for t in $TARGETS; do
    echo "== fuzz $t for ${FUZZ_SECONDS}s"
    # Runs on a copy of the seeds, so a CI run leaves the tree as it found it.
    work=$(mktemp -d)
    cp -r "corpus/$t/." "$work/"
    start=$(date +%s)
    if ! cargo fuzz run -O "$t" "$work" -- -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 >"$work.log" 2>&1; then
        tail -n 40 "$work.log"
        echo "fuzz: $t found a crash after $(($(date +%s) - start)) s (input in fuzz/artifacts/$t/)" >&2
        failed="$failed $t"
    fi
    # libFuzzer's own count and time ("Done N runs in S second(s)"): the wall time also holds the
    # build `cargo fuzz run` makes when a source changed since `cargo fuzz build`.
    done_line=$(grep -E '^Done [0-9]+ runs in' "$work.log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$work.log" | tail -n 1)
    echo "$t: ${done_line:-no Done line} ($(($(date +%s) - start)) s wall); last: ${last:-?}"
    rm -rf "$work" "$work.log"
done
[ -z "$failed" ] || { echo "fuzz: crashes in:$failed" >&2; exit 1; }
