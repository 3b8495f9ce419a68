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
python3 - "$tmp" $((32 * (n2 - n1))) "$top" "$cipher, 32 x $bytes B, $(head -1 "$tmp/d2.out" | sed 's/^pipeline_bench: //; s/ [0-9]* [A-Z][a-z][a-z] [0-9]*,.*//')" <<'PY'
import sys
tmp, n, top, what = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def load(name):
    d = {}
    for line in open(f"{tmp}/{name}.fn"):
        c, o, f = line.rstrip("\n").split(" ", 2)
        d[(o, f)] = d.get((o, f), 0) + int(c)
    return d
d1, d2, g1, g2 = (load(x) for x in ("d1", "d2", "g1", "g2"))
keys = set(d1) | set(d2) | set(g1) | set(g2)
dd = {k: (d2.get(k, 0) - d1.get(k, 0)) / n for k in keys}
gg = {k: (g2.get(k, 0) - g1.get(k, 0)) / n for k in keys}
td, tg = sum(dd.values()), sum(gg.values())
own = {k: v for k, v in gg.items() if k[0] == "gpuprov.so"}
print(f"pipeline_cost: {what}: default one by one {td:.0f} instructions a message, gpuprov pipeline {tg:.0f} "
      f"({100 * (tg - td) / td:+.2f}%, {tg - td:+.0f}), of them {sum(own.values()):.0f} in gpuprov.so")
print("gpuprov.so's own, a message:")
for k in sorted(own, key=lambda k: -own[k])[:top]:
    if own[k] >= 0.5:
        print(f"{own[k]:10.1f}  {k[1]}")
print("differences (default gpuprov difference object function):")
for k in sorted(keys, key=lambda k: -abs(gg[k] - dd[k]))[:top]:
    if abs(gg[k] - dd[k]) >= 0.5:
        print(f"{dd[k]:10.1f} {gg[k]:10.1f} {gg[k] - dd[k]:+9.1f}  {k[0]} {k[1]}")
PY
