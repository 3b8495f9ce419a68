#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per TLS-style record (bench/record_bench under callgrind): the default provider's
# against gpuprov's cpu executor, and how many of gpuprov's are its own (in gpuprov.so).
#
# usage: bench/record_cost.sh [BUILD_DIR] [CIPHER] [BYTES] [MODE] [DIR]
#   defaults: build AES-128-GCM 16 tls13 enc. Each configuration runs twice (N1 and N2 records) and
#   the difference divided by N2 - N1 is the cost of one record, set-up and teardown cancelled.
#   gpuprov runs with its default configuration (config/gpuprov.cnf, no GPUPROV_* knobs). On a
#   host without a GPU that is passthrough (0 instructions in gpuprov.so); GPUPROV_HYBRID_GPU=host
#   in the environment makes the host executor stand in for a GPU, which measures the cpu lane as
#   a GPU host runs small records.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; cipher=${2:-AES-128-GCM}; bytes=${3:-16}; mode=${4:-tls13}; dir=${5:-enc}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/bench/record_bench
n1=2000; n2=12000
command -v valgrind >/dev/null || { echo "record_cost: valgrind is not installed" >&2; exit 1; }
[ -x "$bench" ] || { echo "record_cost: $bench not built (ninja -C $build bench/record_bench)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'openssl_conf = openssl_init\n[openssl_init]\nproviders = p\n[p]\ndefault = d\n[d]\nactivate = 1\n' >"$tmp/stock.cnf"

# total and gpuprov.so instructions of one run: "TOTAL OWN"
count() {   # CONF QUERY N
  local out=$tmp/cg.$RANDOM
  OPENSSL_CONF=$1 OPENSSL_MODULES=$build/provider valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bench" "$cipher" "$2" "$bytes" "$mode" "$dir" "$3" >/dev/null 2>"$tmp/err" \
    || { cat "$tmp/err" >&2; exit 1; }
  python3 "$root/bench/callgrind_sum.py" "$out" 'gpuprov\.so$'
}

read -r d1 _ < <(count "$tmp/stock.cnf" "" $n1)
read -r d2 _ < <(count "$tmp/stock.cnf" "" $n2)
read -r g1 o1 < <(count "$root/config/gpuprov.cnf" "" $n1)
read -r g2 o2 < <(count "$root/config/gpuprov.cnf" "" $n2)
awk -v d1="$d1" -v d2="$d2" -v g1="$g1" -v g2="$g2" -v o1="$o1" -v o2="$o2" -v n=$((n2 - n1)) \
    -v what="$cipher $bytes B $mode $dir" 'BEGIN {
  def = (d2 - d1) / n; gp = (g2 - g1) / n; own = (o2 - o1) / n
  printf "record_cost: %s: default %.0f instructions a record, gpuprov %.0f (%+.1f%%), of them %.0f in gpuprov.so (%.1f%% of the default'"'"'s)\n",
         what, def, gp, 100 * (gp - def) / def, own, 100 * own / def }'
