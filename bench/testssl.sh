#!/usr/bin/env bash
# bench/testssl.sh — an independent audit of modus's HTTPS listener with testssl.sh (Debian's
# `testssl.sh` package): protocols, cipher categories, forward secrecy, server defaults, HTTP
# headers and the known vulnerabilities (Heartbleed, ROBOT, POODLE, BEAST, LUCKY13, …).
#
# Usage:
#   bench/testssl.sh                     # modus --model event, ECDSA P-256 and RSA 2048 certificates
#   MODEL=prefork bench/testssl.sh
#
# It makes a throw-away certificate per key type (openssl), serves the embedded demo site with it and
# --hsts 1y, and runs `testssl -p -s -f -U -S -h`. A finding counts against modus when testssl marks
# it NOT ok, VULNERABLE, or offered where it should not be; what only concerns the throw-away
# certificate (self-signed: no chain of trust, no CRL or OCSP URI, a short validity) is listed apart.
# The findings go to BENCHMARKS.md's "testssl" block (BENCH_MD=off to skip).
# Exit status: 0 when nothing counts against modus, 1 otherwise, 2 on a setup failure.
#
# Why this is not a lab spec: It audits the HTTPS listener with testssl.sh: a protocol check under no
# load.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
BENCH_TAG=testssl
# shellcheck source=bench/lib.sh
. "$SCRIPT_DIR/lib.sh"

MODEL=${MODEL:-event}
BENCH_MD=${BENCH_MD:-$REPO/BENCHMARKS.md}
RESULTS_DIR=${RESULTS_DIR:-$REPO/bench/results/$(date -u +%Y%m%dT%H%M%SZ)-testssl}
command -v testssl >/dev/null || die "testssl is not installed (apt-get install testssl.sh)"
make_workdir testssl
ensure_modus_bin
PID=""
trap 'stop_pid "$PID" modus; rm -rf "$WORK"' EXIT

# Lines that are about the certificate the script made, not about the server.
CERT_ONLY='Chain of trust|neither CRL nor OCSP|expires < 30 days'
against=0
block=$(mktemp)
{
    echo "Audited $(date -u +%Y-%m-%d) by \`bench/testssl.sh\` (testssl.sh $(dpkg-query -W -f='${Version}' testssl.sh 2>/dev/null || echo '(version unknown)')),"
    echo "modus $(git_rev_label) \`--model $MODEL --hsts 1y\`, a throw-away certificate per key type."
    echo
    echo "| certificate | protocols | findings against modus | about the throw-away certificate only |"
    echo "|---|---|---|---|"
} >"$block"
for kind in ecdsa rsa; do
    make_cert "$kind"
    "$MODUS_BIN" serve --model "$MODEL" --tls-listen 127.0.0.1:0 --tls-cert "$WORK/$kind.crt" \
        --tls-key "$WORK/$kind.key" --hsts 1y --access-log off >"$WORK/out" 2>"$WORK/err" &
    PID=$!
    line=$(wait_modus_listening "$PID" "$WORK/out" "$WORK/err")
    addr=$(awk '{ print $3 }' <<<"$line")
    report=$RESULTS_DIR/testssl-$kind.txt
    log "testssl against $addr ($kind)"
    testssl --quiet --color 0 --warnings off --ip one -p -s -f -U -S -h "$addr" >"$report" 2>&1 || true
    stop_pid "$PID" modus
    PID=""
    grep -q "Testing vulnerabilities" "$report" || die "testssl did not finish (see $report)"
    protocols=$(awk '/^ (SSLv|TLS 1)/ && /offered/ && !/not offered/ { sub(/^ /, ""); sub(/ +offered.*/, ""); printf "%s%s", sep, $0; sep = ", " }' "$report")
    findings=$(grep -E 'NOT ok|VULNERABLE|\(NOT ok\)|not OK' "$report" | grep -Ev "$CERT_ONLY" | sed 's/^ *//; s/  */ /g' | paste -sd ';' - || true)
    cert_only=$(grep -E "$CERT_ONLY" "$report" | sed 's/^ *//; s/  */ /g' | paste -sd ';' - || true)
    # What a well-configured server must show; a missing line counts against modus too.
    for want in 'SSLv2 +not offered' 'SSLv3 +not offered' 'TLS 1 +not offered' 'TLS 1.1 +not offered' \
        'NULL ciphers.*not offered' 'Export ciphers.*not offered' 'LOW: 64 Bit.*not offered' \
        'Triple DES Ciphers.*not offered' 'Obsolete CBC ciphers.*not offered' 'PFS is offered \(OK\)' \
        'Strict Transport Security +[0-9]+ day' 'Heartbleed.*not vulnerable' 'CCS .*not vulnerable' \
        'Ticketbleed.*not vulnerable' 'ROBOT +(Server does not support|not vulnerable)' \
        'Secure Client-Initiated Renegotiation +not vulnerable' 'CRIME, TLS.*not vulnerable' \
        'BREACH.*(no HTTP compression|not vulnerable)' 'POODLE, SSL.*not vulnerable' 'SWEET32.*not vulnerable' \
        'FREAK.*not vulnerable' 'DROWN.*not vulnerable' 'LOGJAM.*not vulnerable' 'BEAST.*not vulnerable' \
        'LUCKY13.*not vulnerable' 'RC4 \(CVE.*no RC4 ciphers'; do
        grep -Eq "$want" "$report" || findings+="${findings:+;}missing: $want"
    done
    [ -n "$findings" ] && against=1
    echo "| $kind | $protocols | ${findings:-none} | ${cert_only:-none} |" >>"$block"
done
{
    echo
    echo "A run counts as clean when testssl marks nothing NOT ok or VULNERABLE beyond the certificate's own"
    echo "lines and every check the script asks for is there: no SSLv2/SSLv3/TLS 1.0/1.1; no NULL, export,"
    echo "64-bit, 3DES or CBC suites; forward secrecy; HSTS; not vulnerable to Heartbleed, CCS, Ticketbleed,"
    echo "ROBOT, client renegotiation, CRIME, BREACH, POODLE, SWEET32, FREAK, DROWN, LOGJAM, BEAST, LUCKY13, RC4."
    echo "Raw reports: the results directory."
} >>"$block"
publish_block "$block" testssl
rm -f "$block"
exit "$against"
