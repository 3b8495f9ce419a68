#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per message under callgrind: gpuprov's pipeline calls (32 messages each, host memory) against the default provider's messages one by one.
#
# usage: bench/pipeline_cost.sh [BUILD_DIR] [CIPHER] [BYTES] [TOP]
#   defaults: build AES-256-GCM 16384 15. bench/pipeline_bench --calls N --side S runs N untimed
#   calls of one side (a pipeline call of 32 messages, or 32 messages one after another on one
#   context); each side runs twice, N1 and N2 calls, and the difference divided by 32 (N2 - N1) is
#   the cost of one message, set-up and the bench's check cancelled. Prints both totals, gpuprov.so's
#   own share and its TOP functions, and the TOP functions whose instructions differ most. The
#   caller's GPUPROV_* knobs hold: on a host without a GPU, GPUPROV_BACKEND=auto with
#   GPUPROV_HYBRID_GPU=host is what a GPU host runs while the GPU is not opened (pipes routed to
#   the cpu executor at their start); GPUPROV_BACKEND=cpu the plain cpu executor. The libcrypto is
#   the one the binary finds (LD_LIBRARY_PATH: the pipeline API needs 3.5).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}; cipher=${2:-AES-256-GCM}; bytes=${3:-16384}; top=${4:-15}
case $build in /*) ;; *) build=$root/$build ;; esac
bench=$build/bench/pipeline_bench
if [ "$bytes" -ge 4096 ]; then n1=5; n2=35; else n1=50; n2=350; fi
command -v valgrind >/dev/null || { echo "pipeline_cost: valgrind is not installed" >&2; exit 1; }
[ -x "$bench" ] || { echo "pipeline_cost: $bench not built (ninja -C $build bench/pipeline_bench)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

run() {   # SIDE N OUT
  valgrind --tool=callgrind --callgrind-out-file="$tmp/$3" "$bench" --module-dir "$build/provider" --part host \
    --ciphers "$cipher" --msg-bytes "$bytes" --calls "$2" --side "$1" >"$tmp/$3.out" 2>"$tmp/$3.err" \
    || { cat "$tmp/$3.err" "$tmp/$3.out" >&2; exit 1; }
  python3 "$root/bench/callgrind_sum.py" --functions "$tmp/$3" > "$tmp/$3.fn"
}
run default $n1 d1; run default $n2 d2
run gpuprov $n1 g1; run gpuprov $n2 g2
python3 "$root/bench/callgrind_diff.py" "$tmp" $((32 * (n2 - n1))) "$top" pipeline_cost "$cipher, 32 x $bytes B, $(head -1 "$tmp/d2.out" | sed 's/^pipeline_bench: //; s/ [0-9]* [A-Z][a-z][a-z] [0-9]*,.*//')" "a message" --own --min 0.5
