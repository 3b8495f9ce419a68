#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The registration cache on a GPU (tests/gpu/reg_reuse.c): every output matches the default
# provider's; with --want-hits, gpuprov's stats must show that the cache served reads (hits > 0)
# and dropped what changed (invalidated > 0); with GPUPROV_TEST_CUDA_FAULT_CALL=cudaMemcpyAsync,
# the injected failure must have happened. Exits 77 without a GPU.
# usage: reg_reuse.sh REG_REUSE_EXE [--want-hits]
set -uo pipefail
exe=$1
want=${2:-}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
GPUPROV_STATS=1 "$exe" 2>"$log"
rc=$?
cat "$log" >&2
[ "$rc" -eq 0 ] || exit "$rc"
line=$(grep -m1 '^gpuprov cuda: reg_cache ' "$log" || true)
echo "reg_reuse.sh: ${line:-no reg_cache line}"
# An injected DMA failure must have been reached (and its wave re-run on the CPU: the outputs
# matched above).
if [ "${GPUPROV_TEST_CUDA_FAULT_CALL:-}" = cudaMemcpyAsync ]; then
  grep -q -E '^gpuprov: .* failed' "$log" || { echo "reg_reuse.sh: the injected failure was never reached" >&2; exit 1; }
fi
if [ "$want" = --want-hits ]; then
  [[ "$line" =~ hits=([0-9]+).*invalidated=([0-9]+) ]] || { echo "reg_reuse.sh: no reg_cache stats line" >&2; exit 1; }
  [ "${BASH_REMATCH[1]}" -gt 0 ] || { echo "reg_reuse.sh: the cache never hit" >&2; exit 1; }
  [ "${BASH_REMATCH[2]}" -gt 0 ] || { echo "reg_reuse.sh: nothing was invalidated" >&2; exit 1; }
fi
exit 0
