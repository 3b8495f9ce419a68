#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Many processes, one GPU (issue 52): `openssl speed -multi N` with N = the cores and twice the cores,
# the default provider against gpuprov's default configuration (config/gpuprov.cnf, backend auto),
# each cell beside an A/A (the default provider against itself in the same run), interleaved, medians
# of three. Optionally with CUDA MPS started for the run (--mps; docs/performance.md, "CUDA MPS").
# Prints one table: per cell the default's GB/s, A/A, gpuprov/default, the processes that opened the
# GPU and the share of operations the GPU ran, and whether the cell meets its target (every cell >= 0.97x;
# ChaCha20-Poly1305 1 MiB at N = cores >= 1.2x); a cell whose A/A is off by more than 3% is "noisy".
#
# usage: bench/multi.sh [--build DIR] [--seconds S] [--reps R] [--multi N,M] [--ciphers C,..]
#                       [--sizes B,..] [--mps] [--out DIR] [--env "VAR=VALUE ..."]
#   --build    the build whose provider/gpuprov.so is measured (default: build)
#   --seconds  seconds of each speed run (default 3)
#   --reps     runs of each configuration per cell, interleaved (default 3)
#   --multi    the -multi values (default: nproc and 2 x nproc)
#   --mps      start nvidia-cuda-mps-control -d for the run (pipe and log directories under --out),
#              stop it at the end; every run (default provider's too) sees the same environment
#   --env      more variables for the gpuprov runs, e.g. "GPUPROV_MACHINE_SHARE=8"
#   --out      logs, the calibration cache and multi.csv (default: BUILD/multi)
# The gpuprov runs read the hybrid policy's measurements from a cache of the run's own (--out/cache),
# filled first by one `speed -async_jobs 8` run, as on a machine where gpuprov has already run once.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build secs=3 reps=3 mps=0 out='' extra=''
ncpu=$(nproc)
multis="$ncpu,$((2 * ncpu))" ciphers=aes-256-gcm,aes-128-ctr,chacha20-poly1305 sizes=16384,1048576,16777216
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --multi) multis=$2; shift 2 ;;
    --ciphers) ciphers=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --mps) mps=1; shift ;;
    --out) out=$2; shift 2 ;;
    --env) extra=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "multi: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/multi}
mkdir -p "$out"
out=$(cd "$out" && pwd)
moddir=$build/provider
[ -f "$moddir/gpuprov.so" ] || { echo "multi: $moddir/gpuprov.so not built" >&2; exit 2; }
IFS=, read -ra multi_list <<< "$multis"
IFS=, read -ra cipher_list <<< "$ciphers"
IFS=, read -ra size_list <<< "$sizes"
read -ra extra_env <<< "$extra"

if [ "$mps" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || { echo "multi: --mps: no nvidia-cuda-mps-control" >&2; exit 2; }
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "multi: nvidia-cuda-mps-control -d failed" >&2; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
fi

gp_env=(OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$moddir" GPUPROV_STATS=1
        GPUPROV_CALIB_CACHE="$out/cache" "${extra_env[@]}")
mkdir -p "$out/cache"
# Fill the cache: one process with async jobs opens the GPU and measures every algorithm.
env "${gp_env[@]}" openssl speed -elapsed -seconds 2 -bytes 1048576 -async_jobs 8 -evp aes-256-gcm \
  > "$out/prime.log" 2>&1 || echo "multi: the priming run failed (see $out/prime.log)" >&2

# One run: "BYTES_PER_S OPENED GPU_PERCENT" (OPENED: processes whose warm-up opened the GPU;
# GPU_PERCENT: the share of gpuprov's operations, summed over the processes' stats lines, that ran
# on the GPU; - for the default provider).
run_speed() {   # config cipher size multi rep
  local log=$out/speed-$2-$3-m$4-$1-r$5.log
  local cmd=(openssl speed -mr -elapsed -seconds "$secs" -bytes "$3" -multi "$4" -evp "$2")
  if [ "$1" = gpuprov ]; then
    env "${gp_env[@]}" timeout $((3 * secs + 120)) "${cmd[@]}" > "$log" 2>&1
  else
    env -u OPENSSL_MODULES OPENSSL_CONF=/dev/null timeout $((3 * secs + 120)) "${cmd[@]}" > "$log" 2>&1
  fi
  awk -F: '/^\+F:/ { v = $4 } END { printf "%s", v == "" ? 0 : v }' "$log"
  if [ "$1" = gpuprov ]; then
    awk '/^gpuprov warm-up: open/ { opened++ }
         /^gpuprov stats:/ { for (i = 1; i <= NF; i++) { split($i, kv, "=");
                               if (kv[1] == "ops") ops += kv[2]; if (kv[1] == "cuda_ops") cuda += kv[2] } }
         END { printf " %d %s\n", opened, (ops > 0 ? sprintf("%.0f", 100 * cuda / ops) : "-") }' "$log"
  else
    echo " - -"
  fi
}

csv=$out/multi.csv
echo "cipher,size,multi,rep,config,bytes_per_s,opened,gpu" > "$csv"
echo "multi: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs) |" \
     "$(openssl version) | $ncpu CPUs | ${secs}s a run, $reps reps | MPS $([ "$mps" = 1 ] && echo on || echo off)" \
     "${extra:+| $extra}"
# The three configurations in a rotating order, so that none always runs first or last.
orders=("default gpuprov default2" "gpuprov default2 default" "default2 default gpuprov")
declare -A rate opened gpu
for m in "${multi_list[@]}"; do
  for size in "${size_list[@]}"; do
    for c in "${cipher_list[@]}"; do
      for ((r = 0; r < reps; r++)); do
        for cfg in ${orders[$((r % 3))]}; do
          read -r v o g <<< "$(run_speed "${cfg%2}" "$c" "$size" "$m" "$r$([ "$cfg" = default2 ] && echo b)")"
          rate[$c,$size,$m,$cfg,$r]=$v
          opened[$c,$size,$m,$cfg,$r]=$o
          gpu[$c,$size,$m,$cfg,$r]=$g
          echo "$c,$size,$m,$r,$cfg,$v,$o,$g" >> "$csv"
        done
      done
    done
  done
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print NR ? (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) : 0 }'; }

status=0
printf '\n%-18s %9s %6s %9s %6s %9s %7s %7s %5s  %s\n' cipher size multi "default" "A/A" gpuprov "gp/def" opened "gpu%" verdict
for m in "${multi_list[@]}"; do
  for size in "${size_list[@]}"; do
    for c in "${cipher_list[@]}"; do
      d=() d2=() g=() op=() gp=()
      for ((r = 0; r < reps; r++)); do
        d+=("${rate[$c,$size,$m,default,$r]}")
        d2+=("${rate[$c,$size,$m,default2,$r]}")
        g+=("${rate[$c,$size,$m,gpuprov,$r]}")
        op+=("${opened[$c,$size,$m,gpuprov,$r]}")
        gp+=("${gpu[$c,$size,$m,gpuprov,$r]/-/0}")
      done
      md=$(median "${d[@]}") md2=$(median "${d2[@]}") mg=$(median "${g[@]}") mo=$(median "${op[@]}")
      mgp=$(median "${gp[@]}")
      read -r aa ab <<< "$(awk -v a="$md" -v b="$md2" -v g="$mg" 'BEGIN { if (a > 0) printf "%.3f %.3f", b / a, g / a; else print "0 0" }')"
      want=0.97
      [ "$c" = chacha20-poly1305 ] && [ "$size" = 1048576 ] && [ "$m" = "$ncpu" ] && want=1.2
      verdict=$(awk -v aa="$aa" -v ab="$ab" -v w="$want" 'BEGIN {
        v = ab >= w ? "ok" : "LOW"; if (aa < 0.97 || aa > 1.03) v = v " (noisy: A/A off by more than 3%)";
        printf "%s (target %.2fx)", v, w }')
      case $verdict in LOW*) status=1 ;; esac
      printf '%-18s %9s %6s %9.2f %6.3f %9.2f %7.3f %7s %5s  %s\n' "$c" "$size" "$m" \
        "$(awk -v x="$md" 'BEGIN { print x / 1e9 }')" "$aa" "$(awk -v x="$mg" 'BEGIN { print x / 1e9 }')" "$ab" "$mo" \
        "$mgp" "$verdict"
    done
  done
done
echo "multi: GB/s are medians of $reps runs (openssl speed -elapsed, the sum over the -multi children);"
echo "       opened: processes whose warm-up opened the GPU; gpu%: their operations on the GPU (medians);"
echo "       logs and $csv under $out"
exit $status
