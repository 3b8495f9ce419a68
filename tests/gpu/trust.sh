#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The gpu suite's trust cases: GPU memory exhausted by another process (at open, when pools grow),
# pinned memory unavailable, the GPU taken away mid-run, and the multi-GPU cases (device=all).
# Each: every message matches the default provider, gpuprov keeps serving, and (where something
# fails) exactly one gpuprov log line says so.
# usage: trust.sh CASE HOG TRUST [EVP_TEST]    (tests/gpu/meson.build passes the binaries)
set -u
case=$1 hog=$2 trust=$3 evp=${4:-}
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU')
if [ "$ngpu" -lt 1 ]; then echo "skipped: no GPU"; exit 77; fi
case $case in multi-*) if [ "$ngpu" -lt 2 ]; then echo "skipped: one GPU"; exit 77; fi ;; esac

tmp=$(mktemp -d)
hogpid=""
cleanup() { [ -n "$hogpid" ] && kill "$hogpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# backend=auto, as deployed, with the hybrid policy told to send every message to the GPU.
auto=(GPUPROV_BACKEND=auto GPUPROV_MIN_GPU_BYTES=0 GPUPROV_LONE_GPU_BYTES=0 GPUPROV_GPU_SHARE=1)
# The cuda executor's files (batching/cuda/), where a call site is a file's name and a line.
src=${GPTEST_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}/batching/cuda

run() {   # run ENV... -- COMMAND...: stdout shown, stderr kept in $tmp/err; sets rc
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  cat "$tmp/out"
}

fail() { echo "FAIL: $*"; echo "--- stderr:"; cat "$tmp/err"; exit 1; }

# Exactly one line from gpuprov (its other output is the stats lines at exit), matching $1 (a basic
# regular expression): a failure's line names the GPU, the call or step and its error, and where
# work goes (batching/engine.c, report_fault).
one_line() {
  local n
  n=$(grep -c '^gpuprov: ' "$tmp/err")
  [ "$n" = 1 ] || fail "$n gpuprov log lines, expected 1"
  grep '^gpuprov: ' "$tmp/err" | grep -q -- "$1" || fail "the log line does not say '$1'"
  echo "log: $(grep '^gpuprov: ' "$tmp/err")"
}

no_line() {   # no_line [EXPECTED]: no gpuprov log line, or only lines that say EXPECTED
  local lines
  lines=$(grep '^gpuprov: ' "$tmp/err" | { if [ -n "${1:-}" ]; then grep -v -- "$1"; else cat; fi; })
  if [ -n "$lines" ]; then fail "gpuprov logged: $lines"; fi
}

# Another process holds all but $1 MiB of device $2's memory; ready when $tmp/held exists.
hog_start() {   # hog_start LEAVE_MIB DEVICE WAIT_FILE
  "$hog" "$1" "$2" "$3" "$tmp/held" &
  hogpid=$!
  if [ "$3" = - ]; then
    for _ in $(seq 600); do [ -f "$tmp/held" ] && return 0; sleep 0.1; done
    fail "the hog never held the memory"
  fi
}

case $case in
hold-at-open)
  # The GPU is full before gpuprov opens it: it serves on the CPU from the start.
  hog_start 16 0 -
  run "${auto[@]}" -- "$trust" --settle-ms 5000
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 0 failed while opening (.*; new messages go to the cpu executor$"
  ;;
hold-on-growth)
  # The GPU served small messages; then another process takes its memory and large messages make
  # gpuprov grow its pools.
  hog_start 8 0 "$tmp/ready"
  run "${auto[@]}" -- "$trust" --want-gpu-first --ready "$tmp/ready" --go "$tmp/held"
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 0 failed (.*; new messages go to the cpu executor$"
  ;;
malloc-on-growth)
  # The same, injected: the pool's device allocation (the cudaMalloc of arena_alloc, which
  # gp_cuda_arena_reserve calls) fails from its first growth on (each slot allocates once at open:
  # `streams` of them).
  site=$(grep -Hn 'cudaMalloc((void \*\*)&c->dev' "$src"/*.c | head -1 | cut -d: -f1,2)
  [ -n "$site" ] || fail "the arenas' cudaMalloc not found in $src"
  run "${auto[@]}" GPUPROV_STREAMS=4 GPUPROV_TEST_CUDA_FAULT_CALL=cudaMalloc \
      GPUPROV_TEST_CUDA_FAULT_FILE="$(basename "${site%:*}")" GPUPROV_TEST_CUDA_FAULT_LINE="${site##*:}" \
      GPUPROV_TEST_CUDA_FAULT_SKIP=4 GPUPROV_TEST_CUDA_FAULT_TIMES=0 -- "$trust" --want-gpu-first
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 0 failed (cudaMalloc: cudaErrorMemoryAllocation"
  ;;
pinned-unavailable)
  # No pinned host memory can be had (every cudaHostAlloc fails).
  run "${auto[@]}" GPUPROV_TEST_CUDA_FAULT_CALL=cudaHostAlloc GPUPROV_TEST_CUDA_FAULT_TIMES=0 -- "$trust" --settle-ms 5000
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 0 failed while opening (cudaHostAlloc.*: cudaErrorMemoryAllocation"
  ;;
taken-away)
  # The GPU served; then every CUDA call fails from its 400th on, as when the device is lost.
  run "${auto[@]}" GPUPROV_TEST_CUDA_FAULT_CALL=any GPUPROV_TEST_CUDA_FAULT_SKIP=400 GPUPROV_TEST_CUDA_FAULT_TIMES=0 \
      -- "$trust" --want-gpu-first
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 0 failed (.*; new messages go to the cpu executor$"
  ;;
multi-diff|multi-async)
  # Every GPU serves (device=all): the EVP differential or async test through the cuda executor
  # (GPTEST_REQUIRE_EXECUTOR=cuda holds the parent to it). The async test's forked children cannot
  # use the CUDA context of their parent, and gpuprov says so in each: that line only.
  run GPUPROV_DEVICE=all -- "$evp"
  [ $rc = 0 ] || fail "$(basename "$evp") exited $rc"
  if [ "$case" = multi-async ]; then no_line 'requested but no usable GPU; using the cpu executor'; else no_line; fi
  ;;
multi-threads)
  run "${auto[@]}" GPUPROV_DEVICE=all -- "$trust" --want-gpu-first --threads 16
  [ $rc = 0 ] || fail "trust exited $rc"
  no_line
  ;;
multi-fault-one)
  # GPU 1 is taken away (every call made on it fails from its 100th on) while GPU 0 is fine.
  run "${auto[@]}" GPUPROV_DEVICE=all GPUPROV_TEST_CUDA_FAULT_CALL=any GPUPROV_TEST_CUDA_FAULT_DEVICE=1 \
      GPUPROV_TEST_CUDA_FAULT_SKIP=100 GPUPROV_TEST_CUDA_FAULT_TIMES=0 -- "$trust" --want-gpu-first --threads 16
  [ $rc = 0 ] || fail "trust exited $rc"
  one_line "GPU 1 failed (.*; new messages go to the cpu executor$"
  ;;
*)
  echo "trust.sh: unknown case $case"; exit 2 ;;
esac
echo "ok: $case"
