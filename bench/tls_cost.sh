#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per TLS 1.3 response (bench/tls_cost under callgrind): a server with the default provider against one with gpuprov, per function where they differ.
#
# usage: bench/tls_cost.sh [BUILD_DIR] [SUITE] [BODY] [TOP]
#   defaults: build TLS_AES_256_GCM_SHA384 16384 25. Each configuration runs twice (N1 and N2
#   exchanges of a keep-alive connection: a request read, a response of BODY bytes written through
#   a 16 KiB buffer, as an nginx worker serves it) and the difference divided by N2 - N1 is the cost
#   of one exchange, the handshake and set-up cancelled; the client (the default provider) is the
#   same in both. Prints the totals, gpuprov.so's own share, and the TOP functions whose
#   instructions differ most (self cost, "default gpuprov difference object function").
#   gpuprov runs with config/gpuprov.cnf and no GPUPROV_* knob but those of the caller's
#   environment: on a host without a GPU that is passthrough (0 instructions in gpuprov.so);
#   GPUPROV_HYBRID_GPU=host makes the host executor stand in for a GPU, so that records take the
#   cpu lane as on a GPU host.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; suite=${2:-TLS_AES_256_GCM_SHA384}; body=${3:-16384}; top=${4:-25}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/bench/tls_cost
if [ "$body" -ge 262144 ]; then n1=10; n2=40; else n1=100; n2=600; fi
command -v valgrind >/dev/null || { echo "tls_cost: valgrind is not installed" >&2; exit 1; }
[ -x "$bench" ] || { echo "tls_cost: $bench not built (ninja -C $build bench/tls_cost)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

run() {   # CONF N OUT
  OPENSSL_MODULES=$build/provider valgrind --tool=callgrind --callgrind-out-file="$tmp/$3" \
    "$bench" "$1" "$suite" "$body" "$2" >/dev/null 2>"$tmp/$3.err" || { cat "$tmp/$3.err" >&2; exit 1; }
  python3 "$root/bench/callgrind_sum.py" --functions "$tmp/$3" > "$tmp/$3.fn"
}
run - $n1 d1; run - $n2 d2
run "$root/config/gpuprov.cnf" $n1 g1; run "$root/config/gpuprov.cnf" $n2 g2
python3 "$root/bench/callgrind_diff.py" "$tmp" $((n2 - n1)) "$top" tls_cost "$suite $body B" "an exchange"
