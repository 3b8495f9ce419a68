#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `openssl speed` for AES-256-GCM, AES-128-CTR and ChaCha20-Poly1305: the default provider against
# gpuprov (loaded through config/gpuprov.cnf) on each executor this host has; prints a table of
# throughput and ratios, writes CSV.
# usage: bench/speed.sh [build-dir] [seconds-per-size]   (CSV: $BENCH_OUT or build-dir/bench/speed.csv)
# SPEED_ASYNC_JOBS=N runs the gpuprov columns with -async_jobs N (jobs pause in gpuprov and share
# batches; the default provider's column stays synchronous, as it gains nothing from jobs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
secs=${2:-1}
moddir="$build/provider"
[ -f "$moddir/gpuprov.so" ] || { echo "speed: $moddir/gpuprov.so not built" >&2; exit 1; }
out=${BENCH_OUT:-$build/bench/speed.csv}
mkdir -p "$(dirname "$out")"
ciphers=(aes-256-gcm aes-128-ctr chacha20-poly1305)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  device="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  backends=(cuda host cpu)
else
  device="none"
  backends=(cpu host)
  echo "speed: no GPU on this host: comparing gpuprov's cpu and host executors with the default provider"
fi
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
async=()
mode=sync
if [ -n "${SPEED_ASYNC_JOBS:-}" ]; then
  async=(-async_jobs "$SPEED_ASYNC_JOBS")
  mode="gpuprov with -async_jobs $SPEED_ASYNC_JOBS"
fi
echo "speed: $(openssl version) | CPU: $cpu_model | GPU: $device | ${secs}s per size, 1 process, $mode"

# One run: prints "+H" sizes and "+F" bytes/s lines (openssl speed -mr); a run that produced no
# figures shows its stderr and counts as zero rather than stopping the table.
errlog="$(dirname "$out")/speed-stderr.log"
: > "$errlog"
run_speed() {   # $1 cipher, $2 backend or "default"
  local res
  if [ "$2" = default ]; then
    res=$(OPENSSL_CONF=/dev/null openssl speed -mr -seconds "$secs" -evp "$1" 2>>"$errlog") || true
  else
    # The user's way in: config/gpuprov.cnf prefers gpuprov and pins the DRBG to the default
    # provider (`-propquery provider=gpuprov` would also steer speed's own DRBG fetch to gpuprov,
    # which 3.0.13 then fails on).
    res=$(OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" GPUPROV_BACKEND="$2" \
      openssl speed -mr -seconds "$secs" "${async[@]}" -evp "$1" 2>>"$errlog") || true
  fi
  if ! grep -q '^+F' <<<"$res"; then
    echo "speed: no figures from $1 on $2; stderr:" >&2
    tail -5 "$errlog" >&2
  fi
  printf '%s\n' "$res"
}

echo "cipher,size,config,bytes_per_s,ratio_vs_default,device" > "$out"
printf '\n%-18s %7s %12s' cipher size "default MB/s"
for b in "${backends[@]}"; do printf ' %18s' "gpuprov/$b"; done
printf '\n'
for c in "${ciphers[@]}"; do
  ref=$(run_speed "$c" default)
  sizes=($(echo "$ref" | awk -F: '/^\+H/ {for (i = 2; i <= NF; i++) print $i}'))
  refv=($(echo "$ref" | awk -F: '/^\+F/ {for (i = 4; i <= NF; i++) print $i}'))
  declare -A got=()
  for b in "${backends[@]}"; do
    vals=($(run_speed "$c" "$b" | awk -F: '/^\+F/ {for (i = 4; i <= NF; i++) print $i}'))
    for i in "${!sizes[@]}"; do got[$b,$i]=${vals[$i]:-0}; done
  done
  for i in "${!sizes[@]}"; do
    printf '%-18s %7s %12.1f' "$c" "${sizes[$i]}" "$(awk -v v="${refv[$i]}" 'BEGIN {print v / 1e6}')"
    echo "$c,${sizes[$i]},default,${refv[$i]},1.000,$device" >> "$out"
    for b in "${backends[@]}"; do
      v=${got[$b,$i]}
      r=$(awk -v v="$v" -v d="${refv[$i]}" 'BEGIN {print (d > 0 ? v / d : 0)}')
      printf ' %10.1f (%4.2fx)' "$(awk -v v="$v" 'BEGIN {print v / 1e6}')" "$r"
      printf '%s,%s,gpuprov-%s,%s,%.3f,%s\n' "$c" "${sizes[$i]}" "$b" "$v" "$r" "$device" >> "$out"
    done
    printf '\n'
  done
  unset got
done
echo
echo "speed: CSV written to $out"
