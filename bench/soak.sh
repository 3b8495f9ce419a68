#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The soak on a GPU host: tests/soak/soak for SOAK_MINUTES of mixed traffic under CUDA faults, its
# CSV into bench/data/ and its summary into bench/RESULTS.md ("Soak").
# usage: bench/soak.sh [build-dir]    (default build-gpu: a build with -Dcuda=enabled; built here if needed)
#   SOAK_MINUTES (15), SOAK_EPOCH_SECONDS (3), SOAK_THREADS (8 sync), SOAK_ASYNC_THREADS (4),
#   SOAK_JOBS (16 a thread), SOAK_MAX_BYTES (16 MiB), SOAK_DEVICE (0, or all), SOAK_SEED,
#   SOAK_DEVMEM_THREADS (1: threads whose messages are GPU buffers, gpuprov-memory = device),
#   SOAK_RESULTS=0: leave bench/RESULTS.md and bench/data/ alone (a smoke run; always so without a
#   GPU), SOAK_OUT (build-dir/soak).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build-gpu}
out=${SOAK_OUT:-$build/soak}
minutes=${SOAK_MINUTES:-15}
mkdir -p "$out"
ninja -C "$build" tests/soak/soak provider/test-module/gpuprov.so >/dev/null || { echo "soak: build failed"; exit 2; }
build=$(cd "$build" && pwd)

gpu=none
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
case "$gpu" in *H200*) tag=h200 ;; *H100*) tag=h100 ;; none) tag=nogpu ;; *) tag=gpu ;; esac
seconds=$(python3 -c "print(int(float('$minutes') * 60))")
echo "soak: ${minutes} min on $gpu ($(openssl version)), device ${SOAK_DEVICE:-0}; log: $out/soak.log"

# The test module (its CUDA fault hooks); the hybrid policy sends three quarters of every size to
# the GPU and the rest to the cpu executor, so both serve and both are checked.
env OPENSSL_MODULES="$build/provider/test-module" GPUPROV_BACKEND=hybrid GPUPROV_MIN_GPU_BYTES=0 \
    GPUPROV_LONE_GPU_BYTES=0 GPUPROV_GPU_SHARE=0.75 GPUPROV_DEVICE="${SOAK_DEVICE:-0}" \
    GPUPROV_TEST_GHASH_MMA_ANY_BATCH=1 \
  "$build/tests/soak/soak" --seconds "$seconds" --epoch-seconds "${SOAK_EPOCH_SECONDS:-3}" \
    --threads "${SOAK_THREADS:-8}" --async-threads "${SOAK_ASYNC_THREADS:-4}" --jobs "${SOAK_JOBS:-16}" \
    --devmem-threads "${SOAK_DEVMEM_THREADS:-1}" \
    --max-bytes "${SOAK_MAX_BYTES:-16777216}" --seed "${SOAK_SEED:-0x5EED5EED}" \
    --csv "$out/soak.csv" --markdown "$out/soak.md" > "$out/soak.out" 2> "$out/soak.log"
rc=$?
cat "$out/soak.out"
echo "soak: gpuprov log lines: $(grep -c '^gpuprov: ' "$out/soak.log")" \
     "(a CUDA failure logs once per process; the first is: $(grep -m1 '^gpuprov: ' "$out/soak.log" || echo none))"
grep -E '^soak: (WRONG|LOST|HUNG)' "$out/soak.log" | head -20

# Only a run on a GPU goes into bench/RESULTS.md (without one nothing was faulted).
if [ "${SOAK_RESULTS:-1}" = 1 ] && [ "$gpu" != none ] && [ -f "$out/soak.md" ]; then
  mkdir -p bench/data
  cp "$out/soak.csv" "bench/data/soak-$tag.csv"
  SOAK_MD="$out/soak.md" SOAK_OUT_FILE="$out/soak.out" SOAK_TAG="$tag" SOAK_MINUTES="$minutes" \
    SOAK_CMD="SOAK_MINUTES=$minutes SOAK_DEVICE=${SOAK_DEVICE:-0} bash bench/soak.sh ${1:-build-gpu}" python3 - <<'EOF'
import os, sys, time
sys.path.insert(0, "bench")
import benchlib
h = benchlib.host_info()
sites = [l[len("soak: site "):].rstrip() for l in open(os.environ["SOAK_OUT_FILE"]) if l.startswith("soak: site ")]
failed = [s for s in sites if not s.endswith("failed_in=0")]
never = [s.split()[0] + " " + s.split()[1] for s in sites if s.endswith("failed_in=0")]
text = ["<!-- soak:begin -->",
        benchlib.wrap_prose(f"{time.strftime('%Y-%m-%d')}, {h['gpu']}, {h['host_cpu']} ({h['cores']} cores), "
                            f"{benchlib.short_version(h['openssl'])}, gpuprov {h['gpuprov_commit']}: "
                            f"`{os.environ['SOAK_CMD']}`. Each epoch loads gpuprov (the test module) anew and arms one "
                            "CUDA fault: the next call site (a file of the cuda executor and a line) in turn, once, "
                            "or (every sixth epoch) every call from a random point on; every message is checked "
                            "against the default provider. Per epoch: bench/data/soak-" + os.environ["SOAK_TAG"] + ".csv."),
        "", open(os.environ["SOAK_MD"]).read().rstrip("\n"), "",
        benchlib.wrap_prose(f"Call sites made to fail at least once: {len(failed)} of {len(sites)}. "
                            + ("Reached but never failed (reached only after another failure, or not within the "
                               "calls skipped): " + ", ".join(never) + "." if never else "")),
        "<!-- soak:end -->"]
benchlib.write_section(benchlib.ROOT / "bench" / "RESULTS.md", "<!-- soak:begin -->", "<!-- soak:end -->",
                       "\n".join(text) + "\n", heading="## Soak: mixed traffic under CUDA faults (bench/soak.sh)")
print("soak: bench/RESULTS.md (Soak) and bench/data/soak-" + os.environ["SOAK_TAG"] + ".csv written")
EOF
fi
exit $rc
