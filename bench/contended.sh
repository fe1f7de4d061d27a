#!/usr/bin/env bash
# bench/contended.sh — the test suites on a machine whose cores are all busy (issue 34, item 10): a test that
# passes on a quiet machine and fails on a busy one is a bug (in the server, or in the test) until shown
# otherwise, so this runs the suites N times while spinning processes keep every core saturated, and counts
# every failure by test name. The figure that matters is the total: it must be 0.
#
# Usage:
#   bench/contended.sh                 # N runs of the conformance suite under SPINNERS busy loops
#   N=3 SUITES="conformance corpus" bench/contended.sh
#
# Environment knobs (defaults in brackets):
#   N          runs of each suite                                              [5]
#   SUITES     integration-test targets of the `modus` package, run in turn   [conformance]
#   SPINNERS   busy-loop processes started next to the tests                  [the number of cores]
#   NICE       niceness of the spinners and of the tests alike (equal shares: the tests get about
#              half the CPU they would alone, more with others' load)         [10]
#   MAX_TIME   a bound on the spinners' life, whatever happens to this script [7200 s]
#   TEST_ARGS  extra arguments to the test harness, e.g. a filter              [none]
#   RESULTS_DIR  raw output of every run                                       [<repo>/bench/results/contended-<timestamp>]
#
# The spinners are this script's own children, killed on exit (and bounded by `timeout` even if this
# script is killed with SIGKILL). The tests are built once, before the spinners start.
#
# Output: a line per run (passed, failed, time), then the summary — runs, tests run, failures, and each
# failing test with how many runs it failed in. Exit status 1 if any test failed or a run did not finish,
# 2 on a setup failure.

set -u
cd "$(dirname "$0")/.." || exit 2

N=${N:-5}
SUITES=${SUITES:-conformance}
SPINNERS=${SPINNERS:-$(nproc)}
NICE=${NICE:-10}
MAX_TIME=${MAX_TIME:-7200}
TEST_ARGS=${TEST_ARGS:-}
RESULTS_DIR=${RESULTS_DIR:-bench/results/contended-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESULTS_DIR" || exit 2

for suite in $SUITES; do
    echo "building the $suite tests" >&2
    nice -n "$NICE" cargo test -q -p modus --test "$suite" --no-run 2>"$RESULTS_DIR/build-$suite.txt" || {
        cat "$RESULTS_DIR/build-$suite.txt" >&2
        exit 2
    }
done

spinners=()
stop_spinners() {
    for pid in "${spinners[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for pid in "${spinners[@]}"; do
        wait "$pid" 2>/dev/null
    done
    spinners=()
}
running=""
trap stop_spinners EXIT
# The run in progress goes too (its servers are killed by the harness only when it ends normally).
trap '[ -n "$running" ] && kill "$running" 2>/dev/null; stop_spinners; exit 130' INT TERM
for _ in $(seq "$SPINNERS"); do
    nice -n "$NICE" timeout "$MAX_TIME" sh -c 'while :; do :; done' &
    spinners+=($!)
done
echo "$SPINNERS spinners at nice $NICE; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The kernel's count of connections it aborted with a reset, machine-wide (other jobs' too): a failure
# that comes with TCPAbortOnMemory (orphaned sockets reset when TCP memory runs out) or TCPAbortOnClose
# (closed with unread input) points at the reset's cause.
COUNTERS="TCPAbortOnClose TCPAbortOnData TCPAbortOnMemory TCPAbortOnTimeout ListenOverflows"
tcp_counters() {
    awk -v want="$COUNTERS" 'BEGIN { n = split(want, w, " ") }
        /^TcpExt:/ { if (!seen) { for (i = 2; i <= NF; i++) col[$i] = i; seen = 1 } else for (j = 1; j <= n; j++) printf "%s ", $(col[w[j]]) }
        END { print "" }' /proc/net/netstat
}
counter_delta() {
    local -a a b
    read -ra a <<<"$1"
    read -ra b <<<"$2"
    local -a names
    read -ra names <<<"$COUNTERS"
    local out="" i
    for i in "${!names[@]}"; do
        out+="${names[$i]} +$((b[i] - a[i])) "
    done
    echo "$out"
}

runs=0
tests=0
unfinished=0
failed_file="$RESULTS_DIR/failed.txt"
: >"$failed_file"
for suite in $SUITES; do
    for i in $(seq "$N"); do
        out="$RESULTS_DIR/$suite-$i.txt"
        start=$(date +%s)
        before=$(tcp_counters)
        # shellcheck disable=SC2086 # TEST_ARGS is a word list on purpose
        nice -n "$NICE" cargo test -q -p modus --test "$suite" -- $TEST_ARGS >"$out" 2>&1 &
        running=$!
        wait "$running"
        rc=$?
        running=""
        secs=$(($(date +%s) - start))
        runs=$((runs + 1))
        result=$(grep -E '^test result:' "$out" | tail -1)
        passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$result")
        failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$result")
        # The harness lists the failing tests after its last "failures:" line, four spaces in (an
        # earlier one heads their captured output).
        awk '/^failures:$/ { buf = "" } /^    [A-Za-z_][A-Za-z0-9_:]*$/ { buf = buf $1 "\n" }
             END { printf "%s", buf }' "$out" |
            sort -u | sed "s/^/$suite /" >>"$failed_file"
        if [ -z "$result" ]; then
            unfinished=$((unfinished + 1))
            echo "$suite run $i: did not finish (rc $rc, ${secs}s); see $out"
            echo "$suite (run $i did not finish: rc $rc)" >>"$failed_file"
        else
            tests=$((tests + passed + failed))
            echo "$suite run $i: $passed passed, $failed failed (${secs}s, load average $(cut -d' ' -f1 /proc/loadavg))"
        fi
        echo "  kernel, machine-wide: $(counter_delta "$before" "$(tcp_counters)")"
    done
done
stop_spinners

failures=$(wc -l <"$failed_file")
echo
echo "contended: $runs runs of [$SUITES] at $(git describe --always --dirty 2>/dev/null) with $SPINNERS spinners: $tests tests run, $failures failures, $unfinished unfinished runs"
if [ "$failures" -gt 0 ]; then
    echo "failing tests (runs failed in):"
    sort "$failed_file" | uniq -c | sort -rn | sed 's/^/  /'
    echo "(raw output: $RESULTS_DIR)"
    exit 1
fi
exit 0
