#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds gpuprov and runs every test suite that this machine can run, then the same suites again
# under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded engine and async tests under
# ThreadSanitizer, the differential fuzz target for a bounded time, then on a GPU machine the gpu
# suite, then the suites and the fuzz target against OpenSSL 3.5 LTS. The README's test command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tests/install-deps.sh

# Wycheproof vectors (C2SP/wycheproof, testvectors_v1): WYCHEPROOF_DIR, else ../shared/vectors/wycheproof,
# else a shallow clone from GitHub; without them the Wycheproof tests report "skipped".
wp=${WYCHEPROOF_DIR:-}
if [ -z "$wp" ] && [ -f "$root/../shared/vectors/wycheproof/aes_gcm_test.json" ]; then
  wp="$root/../shared/vectors/wycheproof"
fi
if [ -z "$wp" ]; then
  if [ ! -f build-vectors/wycheproof/testvectors_v1/aes_gcm_test.json ]; then
    git clone -q --depth 1 https://github.com/C2SP/wycheproof build-vectors/wycheproof 2>/dev/null || true
  fi
  [ -f build-vectors/wycheproof/testvectors_v1/aes_gcm_test.json ] && wp="$root/build-vectors/wycheproof/testvectors_v1"
fi
[ -n "$wp" ] && wp=$(cd "$wp" && pwd) || echo "run-all: no Wycheproof vectors found: those tests will be skipped"
echo "run-all: Wycheproof vectors: ${wp:-none}"

# Suites: unit, kat, evp, integration, cli (gpu needs a GPU: tests/gpu/run.sh).
no_gpu="--no-suite gpu"

meson setup build --reconfigure -Dwycheproof_dir="$wp" >/dev/null 2>&1 || meson setup build -Dwycheproof_dir="$wp"
ninja -C build
meson test -C build $no_gpu --print-errorlogs --num-processes 2

# Sanitizers: the module and the tests are instrumented; the stock openssl binary used by the cli
# tests is not, so those tests preload the runtimes for it (tests/integration/meson.build).
meson setup build-asan --reconfigure -Dcuda=disabled -Dwycheproof_dir="$wp" -Db_sanitize=address,undefined \
  -Db_lundef=false -Dc_args=-fno-sanitize-recover=all >/dev/null 2>&1 \
  || meson setup build-asan -Dcuda=disabled -Dwycheproof_dir="$wp" -Db_sanitize=address,undefined \
       -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-asan $no_gpu --print-errorlogs --num-processes 2 --timeout-multiplier 4
# ThreadSanitizer over the tests that run many threads through one engine (the queue, the host
# pool, the async dispatcher and its fork handlers), the key table's threaded case and routing
# from the first request (a caller waiting for the warm-up thread), the hybrid policy's calibration
# (two threads running batches at once); only what they need is built (the test module, provider/test-module, whose hooks they set).
# die_after_fork=0: the async test forks a multi-threaded process on purpose (its child starts its
# own dispatcher).
meson setup build-tsan --reconfigure -Dcuda=disabled -Db_sanitize=thread -Db_lundef=false >/dev/null 2>&1 \
  || meson setup build-tsan -Dcuda=disabled -Db_sanitize=thread -Db_lundef=false
ninja -C build-tsan tests/unit/test_engine tests/unit/test_key_table tests/unit/test_copy_crew tests/evp/evp-async \
  tests/evp/evp-route tests/unit/test_hybrid provider/test-module/gpuprov.so
TSAN_OPTIONS=halt_on_error=1:die_after_fork=0 \
  meson test -C build-tsan --no-rebuild engine-host key-table copy-crew async-host async-host-unwatch-race route-auto \
  hybrid --print-errorlogs --timeout-multiplier 4
# The differential fuzz target (tests/fuzz: clang, libFuzzer + ASan + UBSan, its own build dir)
# on each of the host and cpu executors; any difference or sanitizer report fails. A fixed seed
# (FUZZ_SEED), a fresh corpus and a fixed number of executions make a CI run walk exactly the
# inputs a developer's run of the same tree walked, however fast the machine (FUZZ_SECONDS bounds
# the time); longer campaigns with other seeds run apart (tests/fuzz/README.md).
for ex in host cpu; do
  runs=${FUZZ_RUNS:-$([ $ex = host ] && echo 70000 || echo 200000)}
  FUZZ_FRESH=1 FUZZ_RUNS=$runs FUZZ_ARGS="-seed=${FUZZ_SEED:-2} ${FUZZ_ARGS:-}" \
    bash tests/fuzz/run.sh "$ex" "${FUZZ_SECONDS:-150}"
done
# The gpu suite (every test through the cuda executor, then compute-sanitizer) where there is a GPU;
# without one, tests/gpu/run.sh says so and skips.
GPU_STEPS=${GPU_STEPS:-setup build gpu-suite memcheck memcheck-engine racecheck} \
  WYCHEPROOF_DIR="$wp" bash tests/gpu/run.sh build-gpu
# The unit, kat, evp and integration suites, the fuzz regressions and the fixed walk again against
# OpenSSL 3.5 LTS, built from Debian 13's source package into build-openssl35/ (minutes the first
# time, reused after; tests/openssl-lts.sh). OPENSSL_LTS=0 leaves it out (developers; CI runs it).
if [ "${OPENSSL_LTS:-1}" != 0 ]; then
  WYCHEPROOF_DIR="$wp" bash tests/openssl-lts.sh
else
  echo "run-all: OPENSSL_LTS=0: the suites against OpenSSL 3.5 LTS are left out"
fi
echo "run-all: all suites passed (plain, ASan+UBSan, TSan for the engine and async tests, fuzz_evp_diff; gpu where present; OpenSSL 3.5 LTS unless OPENSSL_LTS=0)"
