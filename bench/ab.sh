#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B on a GPU host: this tree's build against another checkout of gpuprov (an earlier commit),
# built with the same options, measured in the same run: the kernel benchmark, the EVP benchmark
# (lone-call latency, 16 threads) and openssl speed -async_jobs 64 forced onto the cuda executor,
# each with GPUPROV_STATS=1 (the stats lines show batch sizes and where a batch's time goes).
# usage: bench/ab.sh OLD_SOURCE_DIR [NEW_BUILD_DIR]      (logs in $OUT or NEW_BUILD_DIR/ab)
# An A/B within one build by the settled experiments' switches (GPUPROV_LONE_LAUNCH=0,
# GPUPROV_SMALL_REFS=N, GPUPROV_SPREAD=0) needs a build with -Dexperiments=true: the module of a
# plain build has none of them (batching/settings.c); AB_MESON_ARGS reach the old tree's build.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old_src=$(cd "$1" && pwd)
new=$(cd "${2:-$root/build-gpu}" && pwd)
out=${OUT:-$new/ab}
mkdir -p "$out"
old="$old_src/build-ab"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "ab: no NVIDIA GPU on this machine: nothing to compare"
  exit 0
fi
(cd "$old_src" && meson setup "$old" -Dcuda=enabled -Dgpu_sm="${GPU_SM:-90}" ${AB_MESON_ARGS:-} >/dev/null && ninja -C "$old" >/dev/null) \
  || { echo "ab: the old tree did not build"; exit 1; }
sz=${AB_SIZES:-16,1024,16384}
for v in old new; do
  b=$old; [ $v = new ] && b=$new
  echo "== $v: kernel_bench 256 MiB in 16 KiB messages, then lone messages"
  "$b/bench/kernel_bench" 256 16 10 2>&1 | tee "$out/kernel-$v.log" | grep -v '^CSV'
  echo "== $v: evp_bench (TLS-like ops: re-init, AAD, update, final, tag), default vs cuda"
  GPUPROV_STATS=1 "$b/bench/evp_bench" --threads 1,16 --sizes "$sz" --seconds 1 \
    --ciphers aes-256-gcm,aes-128-ctr,chacha20-poly1305 --providers default,gpuprov:cuda \
    --module-dir "$b/provider" --csv "$out/evp-$v.csv" > "$out/evp-$v.log" 2>&1
  grep -v '^gpuprov hybrid' "$out/evp-$v.log" | tail -40
  for c in aes-256-gcm aes-128-ctr chacha20-poly1305; do
    echo "== $v: openssl speed -async_jobs 64 -bytes 16384 -evp $c, cuda"
    OPENSSL_CONF="$root/config/gpuprov.cnf" OPENSSL_MODULES="$b/provider" GPUPROV_BACKEND=cuda GPUPROV_STATS=1 \
      timeout 60 openssl speed -elapsed -seconds 2 -bytes 16384 -async_jobs 64 -evp $c 2>&1 \
      | grep -E '^(aes|chacha|ChaCha|AES)|gpuprov (stats|cuda)' | tail -4
  done
done
