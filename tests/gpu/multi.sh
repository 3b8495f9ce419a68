#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The gpu suite's multi-GPU variants (tests/gpu/meson.build): one of the suite's tests run with knob
# device set to the host's last GPU (`last`) or to every GPU (`all`), with the stats on, then its
# counters checked. `clean`: no request fell back to the CPU (every "fallbacks=" the run prints
# reads 0), no CUDA failure was logged, and the GPU served (cuda_ops > 0). `fault` (a CUDA failure
# injected on purpose): the run fell back, and only through that failure: gpuprov's one failure line
# names the injected error (cudaErrorLaunchFailure, batching/cuda_fault.h) and nothing names
# cudaErrorInvalidResourceHandle, the error of a GPU's stream or event used with another GPU current
# (cuda_ops may be 0 there: the fault can hit the first wave, whose requests count as the executor's
# that re-runs them, the cpu or the host executor).
# Device-mode tests put their buffers on the last GPU (GPTEST_DEVMEM_GPU, tests/evp/test_devmem.c).
# Exits 77 ("skipped") with fewer than two GPUs: there the last GPU is device 0, which the suite's
# own cases run.
# usage: multi.sh last|all clean|fault GPU_COUNT -- COMMAND [ARGS...]   (GPU_COUNT: tests/gpu/gpu_count)
set -u
where=$1 check=$2 count=$3
shift 3
[ "${1:-}" = -- ] && shift
ngpu=$("$count" 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -lt 1 ]; then echo "skipped: no GPU"; exit 77; fi
if [ "$ngpu" -lt 2 ]; then echo "skipped: one GPU (its last GPU is device 0, which the suite's own cases run)"; exit 77; fi
last=$((ngpu - 1))
case $where in
  last) export GPUPROV_DEVICE=$last ;;
  all) export GPUPROV_DEVICE=all ;;
  *) echo "multi.sh: where must be last or all, not $where"; exit 2 ;;
esac
export GPUPROV_STATS=${GPUPROV_STATS:-1} GPTEST_DEVMEM_GPU=$last
echo "multi: $ngpu GPUs, GPUPROV_DEVICE=$GPUPROV_DEVICE, device-mode buffers on GPU $last: $(basename "$1") ${*:2}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$@" > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/out"
cat "$tmp/err" >&2
fail() { echo "FAIL ($where, $check): $*"; exit 1; }
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || fail "$(basename "$1") exited $rc"

# Every counter line: gpuprov's stats line at each engine's end, the soak's totals.
grep -h -E '^(gpuprov stats:|soak: gpuprov )' "$tmp/out" "$tmp/err" > "$tmp/stats"
[ -s "$tmp/stats" ] || fail "no stats line (GPUPROV_STATS=1 prints one as each engine ends)"
fallbacks=$(grep -o 'fallbacks=[0-9]*' "$tmp/stats" | cut -d= -f2 | awk '{ s += $1 } END { print s + 0 }')
cuda_ops=$(grep -o 'cuda_ops=[0-9]*' "$tmp/stats" | cut -d= -f2 | awk '{ s += $1 } END { print s + 0 }')
failures=$(grep -h -E '^gpuprov: (GPU [0-9]+|the GPU) failed' "$tmp/err" || true)
echo "multi: $(wc -l < "$tmp/stats") stats lines, cuda_ops=$cuda_ops fallbacks=$fallbacks"
if grep -q cudaErrorInvalidResourceHandle "$tmp/out" "$tmp/err"; then
  fail "a GPU's object was used with another GPU current: $(grep -h -m1 cudaErrorInvalidResourceHandle "$tmp/out" "$tmp/err")"
fi
case $check in
  clean)
    [ "$cuda_ops" -gt 0 ] || fail "the GPU ran nothing (cuda_ops=0)"
    [ -z "$failures" ] || fail "a CUDA failure: $failures"
    [ "$fallbacks" = 0 ] || fail "fallbacks=$fallbacks: requests re-ran on the CPU"
    ;;
  fault)
    [ -n "$failures" ] || fail "the injected CUDA failure was never reached"
    grep -q cudaErrorLaunchFailure <<<"$failures" || fail "not the injected failure: $failures"
    [ "$fallbacks" -gt 0 ] || fail "the failed wave did not fall back (fallbacks=0)"
    ;;
  *) echo "multi.sh: check must be clean or fault, not $check"; exit 2 ;;
esac
echo "ok: $where $check"
