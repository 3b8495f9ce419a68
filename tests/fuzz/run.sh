#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds fuzz_evp_diff (clang, libFuzzer + ASan + UBSan) and runs it on one executor for a bounded time.
# usage: tests/fuzz/run.sh EXECUTOR SECONDS [BUILD_DIR]
#   EXECUTOR: host, cpu, hybrid (host as the GPU side), cuda, hybrid-cuda (the last two need a GPU)
#   BUILD_DIR: default build-fuzz (build-fuzz-cuda for cuda and hybrid-cuda)
#   FUZZ_JOBS=N runs N fuzzing processes at once (libFuzzer -fork); FUZZ_ARGS adds libFuzzer flags;
#   FUZZ_RUNS=N stops after N executions (SECONDS still bounds the time); FUZZ_FRESH=1 starts from
#   tests/fuzz/corpus alone, as a fresh clone does (what earlier runs found is set aside).
#   FUZZ_BIN_DIR=DIR: run DIR/fuzz_evp_diff with the module DIR/gpuprov.so, built elsewhere (a GPU host
#   without clang: build build-fuzz-cuda on a machine with it and copy the two files over).
# First replays tests/fuzz/regress/ (inputs that found bugs), then fuzzes from tests/fuzz/corpus/
# plus what earlier runs in BUILD_DIR found. Exit status 0 only if no difference and no sanitizer
# report; a failing input is left in BUILD_DIR/fuzz-artifacts-EXECUTOR/ and its decoded call
# sequence is printed. The last line gives the executions (libFuzzer's final stats).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
ex=${1:?usage: tests/fuzz/run.sh EXECUTOR SECONDS [BUILD_DIR]}
secs=${2:?usage: tests/fuzz/run.sh EXECUTOR SECONDS [BUILD_DIR]}
case "$ex" in
  host|cpu|hybrid) build=${3:-build-fuzz}; cuda=disabled ;;
  cuda|hybrid-cuda) build=${3:-build-fuzz-cuda}; cuda=enabled ;;
  *) echo "fuzz: unknown executor $ex (host, cpu, hybrid, cuda, hybrid-cuda)" >&2; exit 2 ;;
esac
if [ -n "${FUZZ_BIN_DIR:-}" ]; then
  prebuilt=$(cd "$FUZZ_BIN_DIR" && pwd)
  [ -x "$prebuilt/fuzz_evp_diff" ] && [ -f "$prebuilt/gpuprov.so" ] \
    || { echo "fuzz: FUZZ_BIN_DIR needs fuzz_evp_diff and gpuprov.so (the test module)" >&2; exit 2; }
  mkdir -p "$build"
  bin="$prebuilt/fuzz_evp_diff"
  export GPUPROV_FUZZ_MODULE_DIR="$prebuilt"
else
  command -v clang >/dev/null || { echo "fuzz: clang is needed (tests/install-deps.sh installs it)" >&2; exit 2; }
  # The module and the target carry ASan, UBSan and libFuzzer's coverage hooks (meson.build: fuzz).
  opts=(-Dfuzz=true -Dcuda=$cuda -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all)
  if [ -d "$build/meson-private" ]; then
    meson setup "$build" --reconfigure "${opts[@]}" >/dev/null
  else
    CC=clang meson setup "$build" "${opts[@]}" >/dev/null
  fi
  ninja -C "$build" provider/test-module/gpuprov.so tests/fuzz/fuzz_evp_diff >/dev/null
  bin="$build/tests/fuzz/fuzz_evp_diff"
  # The test module: the GPUPROV_TEST_* hooks below exist only there (batching/settings.c).
  export GPUPROV_FUZZ_MODULE_DIR="$root/$build/provider/test-module"
fi

# The executor's environment, as the test suites run it (tests/meson.build exec_env).
hybrid_knobs=(GPUPROV_BACKEND=hybrid GPUPROV_MIN_GPU_BYTES=256 GPUPROV_LONE_GPU_BYTES=0 GPUPROV_GPU_SHARE=0.5)
case "$ex" in
  host)   envs=(GPUPROV_BACKEND=host GPUPROV_TEST_HOST_INFLIGHT=2 GPUPROV_TEST_HOST_STAGE=1 GPUPROV_TEST_STAGE_ONE_THREAD=1) ;;
  cpu)    envs=(GPUPROV_BACKEND=cpu) ;;
  hybrid) envs=("${hybrid_knobs[@]}" GPUPROV_HYBRID_GPU=host GPUPROV_TEST_HOST_INFLIGHT=2) ;;
  cuda)   envs=(GPUPROV_BACKEND=cuda GPUPROV_TEST_GHASH_MMA_ANY_BATCH=1 GPUPROV_TEST_STAGE_ONE_THREAD=1) ;;
  hybrid-cuda) envs=("${hybrid_knobs[@]}" GPUPROV_HYBRID_GPU=cuda GPUPROV_TEST_GHASH_MMA_ANY_BATCH=1) ;;
esac
# The CUDA runtime maps memory where ASan keeps its shadow gap.
asan=detect_leaks=1:abort_on_error=1
case "$ex" in *cuda) asan="$asan:protect_shadow_gap=0" ;; esac
run() { env "${envs[@]}" ASAN_OPTIONS="$asan" UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$@"; }

# Regression inputs: b-* found differences now matched, d-* differences now refused on purpose (both
# must pass with every difference fatal); f-* show an open finding (fuzz_evp_diff.c finding_name, tests/fuzz/README.md): they must pass as a campaign
# runs them, and are reported, not failed, while they still reproduce the finding.
status=0
for f in tests/fuzz/regress/*; do
  name=$(basename "$f")
  case "$name" in
    b*|d*) if ! run GPUPROV_FUZZ_STRICT=1 "$bin" "$f" >"$build/fuzz-regress.log" 2>&1; then
          echo "fuzz: regression $name FAILED on $ex:"; sed -n '/^====/,/^DIFFERENCE/p;/ERROR:/p' "$build/fuzz-regress.log"; status=1
        fi ;;
    f*) if ! run "$bin" "$f" >"$build/fuzz-regress.log" 2>&1; then
          echo "fuzz: regression $name FAILED on $ex:"; sed -n '/^====/,/^DIFFERENCE/p;/ERROR:/p' "$build/fuzz-regress.log"; status=1
        elif run GPUPROV_FUZZ_STRICT=1 "$bin" "$f" >/dev/null 2>&1; then
          echo "fuzz: $name no longer shows its open finding on $ex (fixed? then drop the entry in fuzz_evp_diff.c and rename it b-...)"
        fi ;;
  esac
done
[ $status -eq 0 ] || exit $status
echo "fuzz: $(ls tests/fuzz/regress | wc -l) regression inputs pass on $ex"

corpus="$build/fuzz-corpus-$ex"
artifacts="$build/fuzz-artifacts-$ex"
[ "${FUZZ_FRESH:-0}" = 1 ] && rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
jobs=()
[ -n "${FUZZ_RUNS:-}" ] && jobs+=(-runs="$FUZZ_RUNS")
[ -n "${FUZZ_JOBS:-}" ] && jobs+=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
echo "fuzz: $ex executor, ${secs}s${FUZZ_RUNS:+ or $FUZZ_RUNS runs}, corpus $corpus (+ tests/fuzz/corpus), artifacts $artifacts"
set +e
run "$bin" -max_total_time="$secs" -print_final_stats=1 -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
  -artifact_prefix="$artifacts/" "${jobs[@]}" ${FUZZ_ARGS:-} "$corpus" tests/fuzz/corpus >"$build/fuzz-$ex.log" 2>&1
rc=$?
set -e
grep -E '^fuzz_evp_diff: (gpuprov|open finding)' "$build/fuzz-$ex.log" || true
if [ $rc -ne 0 ]; then
  sed -n '/^==== fuzz_evp_diff/,/^DIFFERENCE/p' "$build/fuzz-$ex.log"
  grep -E 'ERROR: |SUMMARY: |Test unit written|^Base64' "$build/fuzz-$ex.log" || tail -30 "$build/fuzz-$ex.log"
  echo "fuzz: FAILED on $ex (rc $rc): full log $build/fuzz-$ex.log; replay: GPUPROV_BACKEND=... $bin <artifact>"
  exit 1
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz-$ex.log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$build/fuzz-$ex.log" | tail -1)
echo "fuzz: $ex: no difference in ${secs}s${FUZZ_RUNS:+ or $FUZZ_RUNS runs}: stat::number_of_executed_units: ${execs:-?} (${rate:-?}/s)"
