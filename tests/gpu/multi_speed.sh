#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every GPU against one (issue 49): `openssl speed -elapsed -async_jobs 32` at 1 and 16 MiB for
# ChaCha20-Poly1305, AES-256-GCM and AES-128-CTR with the production module ($build/provider,
# config/gpuprov.cnf, backend cuda) on device 0, the last device and all, beside the default
# provider in the same run; each gpuprov run's stats are read (fallbacks must be 0: nothing re-ran
# on the host). Then bench/evp_bench, 16 threads x 16 MiB, on device 0 and all. Prints a table last.
# usage: tests/gpu/multi_speed.sh [build-dir] [seconds]
#   logs and CSV under $OUT (default build-dir/multi-speed); MULTI_SIZES (1048576,16777216),
#   MULTI_JOBS (32), MULTI_EXTRA_ENV="VAR=VALUE ...": one more column, device all with those knobs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
secs=${2:-2}
out=${OUT:-$build/multi-speed}
mkdir -p "$out"
moddir=$build/provider
[ -f "$moddir/gpuprov.so" ] || { echo "multi-speed: $moddir/gpuprov.so not built"; exit 2; }
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU')
[ "$ngpu" -ge 2 ] || { echo "multi-speed: $ngpu GPU(s): nothing to compare"; exit 0; }
last=$((ngpu - 1))
jobs=${MULTI_JOBS:-32}
IFS=, read -ra sizes <<< "${MULTI_SIZES:-1048576,16777216}"
ciphers=(chacha20-poly1305 aes-256-gcm aes-128-ctr)
configs=(default 0 "$last" all)
[ -n "${MULTI_EXTRA_ENV:-}" ] && configs+=(all+)
csv=$out/multi-speed.csv
echo "multi-speed: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs) | $(openssl version)" \
     "| $(nproc) CPUs | ${secs}s a run, -async_jobs $jobs${MULTI_EXTRA_ENV:+ | all+: $MULTI_EXTRA_ENV}"
echo "cipher,size,config,bytes_per_s,fallbacks,cuda_ops" > "$csv"

# One run: "BYTES_PER_S FALLBACKS CUDA_OPS" (- where gpuprov printed no stats).
run_speed() {   # cipher size config
  local log=$out/speed-$1-$2-$3.log extra=()
  [ "$3" = all+ ] && read -ra extra <<< "$MULTI_EXTRA_ENV"
  if [ "$3" = default ]; then
    OPENSSL_CONF=/dev/null openssl speed -mr -elapsed -seconds "$secs" -bytes "$2" -async_jobs "$jobs" -evp "$1" \
      > "$log" 2>&1
  else
    env OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" GPUPROV_BACKEND=cuda GPUPROV_STATS=1 \
        GPUPROV_DEVICE="${3%+}" "${extra[@]}" \
      openssl speed -mr -elapsed -seconds "$secs" -bytes "$2" -async_jobs "$jobs" -evp "$1" > "$log" 2>&1
  fi
  awk -F: '/^\+F:/ { v = $4 } END { printf "%s", v == "" ? 0 : v }' "$log"
  for k in fallbacks cuda_ops; do
    printf ' %s' "$(grep -o "^gpuprov stats:.* $k=[0-9]*" "$log" | grep -o "$k=[0-9]*" | cut -d= -f2 | head -1 | grep . || echo -)"
  done
  echo
}

declare -A bps fb
status=0
for size in "${sizes[@]}"; do
  for c in "${ciphers[@]}"; do
    for cfg in "${configs[@]}"; do
      read -r v f o <<< "$(run_speed "$c" "$size" "$cfg")"
      bps[$c,$size,$cfg]=$v
      fb[$c,$size,$cfg]=$f
      echo "$c,$size,$cfg,$v,$f,$o" >> "$csv"
      if [ "$cfg" != default ] && { [ "$f" != 0 ] || [ "$o" = - ] || [ "$o" = 0 ]; }; then
        echo "multi-speed: $c $size device=$cfg: fallbacks=$f cuda_ops=$o (log: speed-$c-$size-$cfg.log)"
        grep -h '^gpuprov: ' "$out/speed-$c-$size-$cfg.log" | head -3
        status=1
      fi
    done
  done
done

# evp_bench: 16 threads, each its own context, 16 MiB a TLS-record-like operation (re-init, AAD, update,
# final, tag), out of place; timed after its warm-up (the CUDA open is outside the figures).
for dev in 0 all; do
  GPUPROV_DEVICE=$dev GPUPROV_STATS=1 "$build/bench/evp_bench" --threads 16 --sizes 16777216 \
    --ciphers chacha20-poly1305,aes-256-gcm,aes-128-ctr --seconds "$secs" --providers default,gpuprov:cuda \
    --module-dir "$moddir" --csv "$out/evp-$dev.csv" > "$out/evp-$dev.log" 2>&1 || status=1
  grep -h -o 'fallbacks=[0-9]*' "$out/evp-$dev.log" | grep -qv 'fallbacks=0$' && { echo "multi-speed: evp_bench device=$dev fell back"; status=1; }
done

gb() { awk -v v="$1" 'BEGIN { printf "%.2f", v / 1e9 }'; }
echo
echo "openssl speed -elapsed -async_jobs $jobs, GB/s (gpuprov: backend cuda; fallbacks after each figure)"
printf '| %-17s | %-6s | %-7s | %-11s | %-11s | %-11s |%s ratio all/0 |\n' cipher size default device=0 "device=$last" all \
  "$([ -n "${MULTI_EXTRA_ENV:-}" ] && printf ' %-11s |' all+)"
for size in "${sizes[@]}"; do
  for c in "${ciphers[@]}"; do
    row=$(printf '| %-17s | %-6s | %-7s |' "$c" "$((size >> 20)) MiB" "$(gb "${bps[$c,$size,default]}")")
    for cfg in "${configs[@]:1}"; do
      row+=$(printf ' %-11s |' "$(gb "${bps[$c,$size,$cfg]}") (${fb[$c,$size,$cfg]})")
    done
    row+=$(awk -v a="${bps[$c,$size,all]}" -v o="${bps[$c,$size,0]}" 'BEGIN { printf " %.2fx |", (o > 0 ? a / o : 0) }')
    echo "$row"
  done
done
echo
echo "evp_bench, 16 threads x 16 MiB (GB/s; fallbacks from the stats line):"
for dev in 0 all; do
  echo "device=$dev: $(grep -h -o 'fallbacks=[0-9]*' "$out/evp-$dev.log" | sort | uniq -c | xargs)"
  sed -n '/^provider executor/,/^$/p' "$out/evp-$dev.log" | grep -v '^gpuprov stats' | grep .
done
exit $status
