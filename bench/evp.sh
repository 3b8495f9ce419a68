#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The standard EVP benchmark matrix: build/bench/evp_bench for AES-256-GCM, AES-128-CTR and
# ChaCha20-Poly1305 at 16 B, 1 KiB and 16 KiB on 1 and 16 threads, the default provider against
# gpuprov on each executor this host has (cuda where nvidia-smi shows a GPU, host, cpu); prints the
# table, writes CSV.
# usage: bench/evp.sh [build-dir] [seconds-per-cell]
#   CSV: $BENCH_OUT or build-dir/bench/evp.csv; thread counts: $EVP_THREADS (default 1,16);
#   async jobs per thread: $EVP_JOBS (default 0, synchronous calls); how threads wait for their
#   jobs: $EVP_WAIT (poll, the default, epoll or callback; $EVP_WAIT_FDS is its earlier name)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
secs=${2:-2}
threads=${EVP_THREADS:-1,16}
jobs=${EVP_JOBS:-0}
moddir="$build/provider"
bench="$build/bench/evp_bench"
[ -f "$moddir/gpuprov.so" ] || { echo "evp: $moddir/gpuprov.so not built" >&2; exit 1; }
[ -x "$bench" ] || { echo "evp: $bench not built" >&2; exit 1; }
out=${BENCH_OUT:-$build/bench/evp.csv}
mkdir -p "$(dirname "$out")"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  providers=default,gpuprov:cuda,gpuprov:host,gpuprov:cpu
else
  providers=default,gpuprov:host,gpuprov:cpu
  echo "evp: no GPU on this host: comparing gpuprov's host and cpu executors with the default provider"
fi

# evp_bench loads each provider into its own library context (no config file involved) and sets
# GPUPROV_BACKEND for each gpuprov instance itself; it fails a cell whose output differs from the
# default provider's, and exits non-zero if any cell failed.
exec "$bench" --threads "$threads" --jobs "$jobs" --wait "${EVP_WAIT:-${EVP_WAIT_FDS:-poll}}" --sizes 16,1024,16384 \
  --ciphers aes-256-gcm,aes-128-ctr,chacha20-poly1305 --seconds "$secs" \
  --providers "$providers" --module-dir "$moddir" --csv "$out"
