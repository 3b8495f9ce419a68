#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The gpu suite on a GPU machine: build with nvcc, run every test through the cuda executor, then
# again under compute-sanitizer (memcheck, racecheck), then a short openssl speed comparison.
# The suites load the test module ($build/provider/test-module/gpuprov.so: the GPUPROV_TEST_* hooks
# tests/meson.build sets), the speed and evp-bench steps the production one ($build/provider).
# The pipeline steps need OpenSSL 3.5 at run time (OPENSSL35_PREFIX, below).
# Steps not in the default list: trust (the gpu suite's exhaustion, GPU-loss and device=all cases
# alone; tests/gpu/trust.sh), soak (bench/soak.sh for SOAK_MINUTES, default 2 here; its RESULTS
# section only with SOAK_RESULTS=1), multi (the suite's cases on the last GPU and on all, alone;
# tests/gpu/multi.sh) and multi-speed (every GPU against one: tests/gpu/multi_speed.sh).
# GPU_SUITE_JOBS: the gpu suite's tests at once (1; the multi-GPU and trust cases run alone anyway).
# usage: tests/gpu/run.sh [build-dir]    (WYCHEPROOF_DIR, GPU_SM, OUT, GPU_MESON_ARGS optional;
#        e.g. GPU_MESON_ARGS=-Dghash_mma=true for the tensor-core GHASH, -Dexperiments=true for the
#        settled experiments' A/B switches GPUPROV_LONE_LAUNCH, GPUPROV_SMALL_REFS, GPUPROV_SPREAD)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu: no NVIDIA GPU on this machine: the gpu suite is skipped (it needs one)"
  exit 0
fi
build=${1:-build-gpu}
out=${OUT:-$build}
mkdir -p "$out"
wp=${WYCHEPROOF_DIR:-$root/../shared/vectors/wycheproof}
[ -f "$wp/aes_gcm_test.json" ] || { echo "gpu: no Wycheproof vectors at $wp"; wp=""; }
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) | $(nvcc --version | tail -1) | $(openssl version)"

# GPU images often lack nginx (the tls suite's server): GPU_NGINX_DEB may name Debian packages (space
# separated: `nginx` holds the binary, `nginx-common` its files; Debian 12's nginx-light is now an
# empty transitional package) to unpack into a private prefix (unpacking packages into / can break the image).
if ! command -v nginx >/dev/null 2>&1 && [ -n "${GPU_NGINX_DEB:-}" ]; then
  mkdir -p /tmp/gpuprov-nginx
  for deb in $GPU_NGINX_DEB; do
    [ -f "$deb" ] && dpkg -x "$deb" /tmp/gpuprov-nginx || echo "gpu: GPU_NGINX_DEB: cannot unpack $deb"
  done
  export PATH="/tmp/gpuprov-nginx/usr/sbin:$PATH"
  command -v nginx >/dev/null 2>&1 || echo "gpu: no nginx binary in GPU_NGINX_DEB ($GPU_NGINX_DEB): the tls cases will skip"
fi

status=0
steps=${GPU_STEPS:-setup build gpu-suite memcheck memcheck-multi memcheck-engine racecheck kernel-bench speed evp-bench devmem-bench pipeline memcheck-pipeline pipeline-bench checkpoint-bench}   # a subset saves device time
step() {   # step NAME COMMAND...: run, log to $out/NAME.log, remember failures
  local name=$1; shift
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name: $*"
  if "$@" > "$out/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (see $name.log)"; tail -40 "$out/$name.log"; status=1; fi
}

reconf=""; [ -d "$build/meson-private" ] && reconf="--reconfigure"
step setup meson setup "$build" $reconf -Dcuda=enabled -Dgpu_sm="${GPU_SM:-80,89,90}" -Dwycheproof_dir="$wp" ${GPU_MESON_ARGS:-}
step build ninja -C "$build"
step gpu-suite meson test -C "$build" --suite gpu --print-errorlogs --num-processes "${GPU_SUITE_JOBS:-1}"
# The large-message, chunk, piece, device-mode and soak cases on the host's last GPU and on all
# (a subset of gpu-suite; each skips on a host with one GPU).
step multi meson test -C "$build" --suite multi --print-errorlogs --num-processes "${GPU_SUITE_JOBS:-1}"
# Device mode alone (a subset of gpu-suite, for GPU_STEPS): the tests and both examples.
step devmem meson test -C "$build" devmem-cuda devmem-cuda-auto devmem-cuda-all devmem-cuda-fault stream-cuda stream-cuda-all \
  devmem-threads-cuda example-gpu-encrypt example-python-gpu python-checkpoint-demo-gpu \
  --print-errorlogs --num-processes 1
step trust meson test -C "$build" --suite trust --print-errorlogs --num-processes 1
cat "$out/trust.log" 2>/dev/null | grep -E '^ *[0-9]+/[0-9]+ ' || true
step soak env SOAK_MINUTES="${SOAK_MINUTES:-2}" SOAK_RESULTS="${SOAK_RESULTS:-0}" SOAK_OUT="$out/soak" bash bench/soak.sh "$build"
cat "$out/soak.log" 2>/dev/null | tail -30
# Under the sanitizers: everything but the long differential runs (their 300 KiB messages take a
# single GPU thread each until the unit split arrives).
sanitized=${GPU_SANITIZED:-kat-cuda wycheproof-cuda badinput-cuda async-cuda load-cuda devmem-cuda stream-cuda}
step memcheck env GPTEST_DEVMEM_QUICK=1 meson test -C "$build" $sanitized --print-errorlogs --num-processes 1 --timeout-multiplier 20 \
  --wrapper "compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20"
# The multi-GPU cases under memcheck (the wrapper script's processes followed): device mode quick,
# the large messages through their in-place test (slices, pieces and chunks in one update each).
step memcheck-multi env GPTEST_DEVMEM_QUICK=1 GPTEST_DIFF_ONLY=test_large_in_place meson test -C "$build" \
  devmem-cuda-last-gpu devmem-cuda-all-gpus stream-cuda-last-gpu stream-cuda-all-gpus diff-cuda-large-last-gpu diff-cuda-large-all-gpus diff-cuda-chunks-last-gpu \
  diff-cuda-chunks-all-gpus --print-errorlogs --num-processes "${GPU_SUITE_JOBS:-1}" --timeout-multiplier 20 \
  --wrapper "compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20"
# The engine test injects a real CUDA launch error on purpose: API errors are expected there, memory
# errors are not.
step memcheck-engine meson test -C "$build" engine-cuda --print-errorlogs --num-processes 1 --timeout-multiplier 20 \
  --wrapper "compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20"
step racecheck meson test -C "$build" ${GPU_RACECHECKED:-engine-cuda} --print-errorlogs --num-processes 1 --timeout-multiplier 20 \
  --wrapper "compute-sanitizer --tool racecheck --target-processes all --error-exitcode 99 --print-limit 20"
cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
step kernel-bench sh -c "'$build/bench/kernel_bench' 256 16 10 && '$build/bench/kernel_bench' 256 1024 10 && '$build/bench/kernel_bench' 64 1 10"
cat "$out/kernel-bench.log" 2>/dev/null
step speed env BENCH_OUT="$out/speed.csv" bash bench/speed.sh "$build" "${SPEED_SECONDS:-1}"
cat "$out/speed.log" 2>/dev/null | tail -24
step evp-bench env BENCH_OUT="$out/evp.csv" EVP_THREADS="${EVP_THREADS:-1,16}" bash bench/evp.sh "$build" "${EVP_SECONDS:-1}"
cat "$out/evp-bench.log" 2>/dev/null | tail -60
step multi-speed env OUT="$out/multi-speed" bash tests/gpu/multi_speed.sh "$build" "${MULTI_SECONDS:-2}"
cat "$out/multi-speed.log" 2>/dev/null | sed -n '/^openssl speed -elapsed/,$p'
# Data already on the GPU: EVP in device mode beside the raw kernel, with issue 36's targets.
step devmem-bench env BENCH_OUT="$out/devmem.csv" bash bench/devmem.sh "$build" "${DEVMEM_SECONDS:-2}"
cat "$out/devmem-bench.log" 2>/dev/null | sed -n '/^| cipher/,$p'
# OpenSSL 3.5's pipeline API (provider/pipeline.c): its tests on the GPU, under memcheck, and
# bench/pipeline_bench, with a 3.5 libcrypto taken at run time from OPENSSL35_PREFIX (default
# build-openssl35/prefix, what tests/openssl-lts.sh builds: carry it over, or unpack Debian 13's
# libssl3t64 there); the build stays against this machine's headers. Without it the steps say so.
ossl35=${OPENSSL35_PREFIX:-$root/build-openssl35/prefix}
with35() {   # with35 COMMAND...: run under the 3.5 libcrypto, or fail saying there is none
  [ -f "$ossl35/lib/libcrypto.so.3" ] || { echo "no OpenSSL 3.5 in $ossl35 (OPENSSL35_PREFIX): the pipeline API is not there to test"; return 1; }
  LD_LIBRARY_PATH="$ossl35/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}
step pipeline with35 meson test -C "$build" pipeline-cuda pipeline-hybrid-cuda pipeline-devmem-cuda pipeline-stream-cuda \
  pipeline-stream-cuda-slices --print-errorlogs --num-processes 1
grep -hE "skipped: needs|wycheproof through pipes" "$build/meson-logs/testlog.txt" 2>/dev/null | sort | uniq -c
step memcheck-pipeline with35 env GPTEST_PIPE_QUICK=1 meson test -C "$build" pipeline-cuda pipeline-devmem-cuda pipeline-stream-cuda \
  --print-errorlogs --num-processes 1 --timeout-multiplier 20 \
  --wrapper "compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20"
step pipeline-bench with35 env GPUPROV_STATS=1 "$build/bench/pipeline_bench" --module-dir "$build/provider"
grep -E "^pipeline_bench|GB/s|gpuprov (stats|hybrid)" "$out/pipeline-bench.log" 2>/dev/null
# python/gpuprov_tensors.py with PyTorch (else CuPy; neither: it says so and passes): the
# checkpoint example's demo, and bench/checkpoint_bench.py's ResNet-50 and LLM-like sets through
# pipeline and per-tensor calls against .cpu() + the default provider, under the 3.5 libcrypto.
step checkpoint-bench with35 env OPENSSL_MODULES="$build/provider" sh -c \
  "python3 python/examples/encrypted_checkpoint.py demo && python3 bench/checkpoint_bench.py --csv '$out/checkpoint.csv'"
grep -E "^checkpoint_bench|^encrypted_checkpoint|^[a-z0-9]+: |GB/s|not available" "$out/checkpoint-bench.log" 2>/dev/null
[ $status -eq 0 ] && echo "gpu: all steps passed" || echo "gpu: some steps FAILED"
exit $status
