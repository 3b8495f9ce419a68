#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per message_bench operation under callgrind (a message per op in openssl speed's call patterns): the default provider against gpuprov, per function where they differ.
#
# usage: bench/message_cost.sh [BUILD_DIR] [CIPHER] [BYTES] [PATTERN] [TOP]
#   defaults: build AES-256-GCM 16384 speed35 15. PATTERN is bench/message_bench's (speed35: what
#   OpenSSL 3.5's `speed -evp CIPHER` does per op). Each configuration runs twice, N1 and N2
#   operations, and the difference divided by N2 - N1 is the cost of one operation, set-up
#   cancelled. Prints the totals, gpuprov.so's own share, its TOP functions, and the TOP functions
#   whose instructions differ most ("default gpuprov difference object function"). gpuprov runs
#   with config/gpuprov.cnf and the caller's GPUPROV_* knobs: on a host without a GPU that is
#   passthrough; GPUPROV_HYBRID_GPU=host makes the host executor stand in for a GPU, so that small
#   messages take the cpu lane as on a GPU host. The libcrypto is the one the binary finds
#   (LD_LIBRARY_PATH for another release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; cipher=${2:-AES-256-GCM}; bytes=${3:-16384}; pattern=${4:-speed35}; top=${5:-15}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/bench/message_bench
if [ "$bytes" -ge 4096 ]; then n1=200; n2=1200; else n1=2000; n2=12000; fi
command -v valgrind >/dev/null || { echo "message_cost: valgrind is not installed" >&2; exit 1; }
[ -x "$bench" ] || { echo "message_cost: $bench not built (ninja -C $build bench/message_bench)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'openssl_conf = openssl_init\n[openssl_init]\nproviders = p\n[p]\ndefault = d\n[d]\nactivate = 1\n' >"$tmp/stock.cnf"

run() {   # CONF N OUT
  OPENSSL_CONF=$1 OPENSSL_MODULES=$build/provider valgrind --tool=callgrind --callgrind-out-file="$tmp/$3" \
    "$bench" "$cipher" "$bytes" 1 "$pattern" "$2" >"$tmp/$3.out" 2>"$tmp/$3.err" || { cat "$tmp/$3.err" >&2; exit 1; }
  python3 "$root/bench/callgrind_sum.py" --functions "$tmp/$3" > "$tmp/$3.fn"
}
run "$tmp/stock.cnf" $n1 d1; run "$tmp/stock.cnf" $n2 d2
run "$root/config/gpuprov.cnf" $n1 g1; run "$root/config/gpuprov.cnf" $n2 g2
python3 "$root/bench/callgrind_diff.py" "$tmp" $((n2 - n1)) "$top" message_cost "$cipher $bytes B $pattern, $(sed 's/ [A-Z].*//' "$tmp/d2.out")" "an op" --own --min 0.5
