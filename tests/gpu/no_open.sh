#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A process whose messages the cached calibration keeps on the CPU opens no GPU (issue 52, item 2); one whose messages it sends there does.
#
# usage: tests/gpu/no_open.sh [build-dir] [seconds]
# With a fresh calibration cache (XDG_CACHE_HOME in a temporary directory), config/gpuprov.cnf,
# backend auto and GPUPROV_STATS=1:
#   1. `openssl speed -async_jobs 8 -bytes 1048576 -evp aes-256-gcm` opens the GPU (its stats:
#      "gpuprov warm-up: open") and, where neither the machine's calibration nor this host's
#      class's priors give numbers, measures and writes the user's cache; its "gpuprov hybrid:"
#      lines show the numbers the later processes route by;
#   2. the issue's case, one thread streaming 1 MiB AES-256-GCM updates: where the known
#      lone_gpu_bytes is above 1 MiB (the hybrid line of step 1 says), the process must say "gpu
#      not opened", print no "warm-up: open" line and never appear in nvidia-smi's compute
#      processes (polled every 0.2 s during the run); where the cache sends lone 1 MiB messages to
#      the GPU, it must open it;
#   3. one thread streaming 1 MiB ChaCha20-Poly1305, the same check by its cached numbers.
# Prints one PASS or FAIL line per check and exits 1 on any FAIL.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
secs=${2:-2}
moddir=$build/provider
[ -f "$moddir/gpuprov.so" ] || { echo "no-open: $moddir/gpuprov.so not built"; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "no-open: no GPU"; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for v in $(compgen -e); do case $v in GPUPROV_*) unset "$v" ;; esac; done
gp() { env XDG_CACHE_HOME="$tmp/cache" OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" GPUPROV_STATS=1 "$@"; }
check() { if [ "$1" = 1 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

gp openssl speed -mr -elapsed -seconds "$secs" -bytes 1048576 -async_jobs 8 -evp aes-256-gcm > "$tmp/fill.log" 2>&1
grep -q '^gpuprov warm-up: open' "$tmp/fill.log"; check $((! $?)) "async jobs open the GPU"
grep '^gpuprov hybrid:' "$tmp/fill.log"

# lone CIPHER ALG-NAME: one thread's 1 MiB stream, checked against the cached lone_gpu_bytes.
lone() {
  local log=$tmp/lone-$1.log pid seen=0 lone_bytes want
  gp openssl speed -mr -elapsed -seconds "$secs" -bytes 1048576 -evp "$1" > "$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qx "$pid" && seen=1
    sleep 0.2
  done
  wait "$pid"
  lone_bytes=$(sed -n "s/^gpuprov hybrid: $2 .*lone_gpu_bytes \([0-9a-z]*\).*/\1/p" "$tmp/fill.log" | head -1)
  if [ "$lone_bytes" = never ] || { [ -n "$lone_bytes" ] && [ "$lone_bytes" -gt 1048576 ]; }; then want=closed; else want=open; fi
  grep -E '^gpuprov (warm-up|stats)' "$log"
  if [ "$want" = closed ]; then
    grep -q '^gpuprov warm-up: gpu not opened' "$log" && ! grep -q '^gpuprov warm-up: open' "$log" && [ $seen = 0 ]
    check $((! $?)) "$1, one thread, 1 MiB, cached lone_gpu_bytes $lone_bytes: no GPU opened, no CUDA context, the stats say why"
  else
    grep -q '^gpuprov warm-up: open' "$log"
    check $((! $?)) "$1, one thread, 1 MiB, cached lone_gpu_bytes $lone_bytes: the GPU opens"
  fi
}
lone aes-256-gcm aes-gcm
lone chacha20-poly1305 chacha20-poly1305
exit $fail
