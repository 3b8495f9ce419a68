#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data already on the GPU: EVP in device mode (bench/devmem_bench) beside the raw batch kernel
# (bench/kernel_bench) for the same sizes on GPU 0, with issue 36's targets; stream-ordered device
# mode (256 MiB in 1 MiB updates on one stream) beside the synchronous figure, and 16 threads x 16
# KiB synchronous, with issue 51's targets; a table and a CSV.
# usage: bench/devmem.sh [build-dir] [seconds a cell]   (BENCH_OUT: the CSV, default $build/devmem.csv)
# Needs a build with -Dcuda=enabled on a GPU machine (tests/gpu/run.sh runs it as step devmem-bench).
set -euo pipefail
build=${1:-build}
secs=${2:-2}
out=${BENCH_OUT:-$build/devmem.csv}
updates="1 4 16 64 256"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for u in $updates; do
  # 256 MiB as messages of u MiB: the kernel alone, CUDA events around it, no copies.
  "$build/bench/kernel_bench" 256 $((u * 1024)) 5 | grep '^CSV,' >> "$raw"
done
# GPUPROV_STATS: gpuprov's stats lines at exit (batches, mean batch, the GPU's time per batch) on stderr.
GPUPROV_STATS=1 "$build/bench/devmem_bench" --module-dir "$build/provider" --seconds "$secs" --updates "${updates// /,}" --stream 1 \
  | tee -a "$raw"
python3 - "$raw" "$out" <<'PY'
import csv, sys
raw, out = sys.argv[1], sys.argv[2]
kernel, evp, threads, streams = {}, [], [], []
for line in open(raw):
    f = line.strip().split(',')
    if f[0] == 'CSV':             # CSV,gpu,cipher,total MiB,message bytes,ms,GB/s,copy ceiling GB/s
        kernel[(f[2], int(f[4]))] = float(f[6])
    elif f[0] == 'DEVMEM_LARGE':  # DEVMEM_LARGE,gpu,cipher,buffer MiB,update MiB,GB/s
        evp.append((f[1], f[2], int(f[3]), int(f[4]), float(f[5])))
    elif f[0] == 'DEVMEM_THREADS':  # DEVMEM_THREADS,gpu,cipher,threads,message KiB,GB/s
        threads.append((f[1], f[2], int(f[3]), int(f[4]), float(f[5])))
    elif f[0] == 'DEVMEM_STREAM':   # DEVMEM_STREAM,gpu,cipher,buffer MiB,update MiB,GB/s,synchronous GB/s
        streams.append((f[1], f[2], int(f[3]), int(f[4]), float(f[5]), float(f[6])))
floor = {'AES-256-GCM': 280.0, 'AES-128-CTR': 550.0, 'ChaCha20-Poly1305': 550.0}
rows = []
print('\n| cipher | buffer | update | EVP device mode, GB/s | kernel_bench, GB/s | EVP / kernel | target (>= 90%, >= floor) |')
print('|---|---|---|---|---|---|---|')
for gpu, c, buf, upd, g in evp:
    k = kernel.get((c, upd << 20))
    ratio = g / k if k else float('nan')
    ok = k is not None and ratio >= 0.90 and g >= floor.get(c, 0.0)
    print(f'| {c} | {buf} MiB | {upd} MiB | {g:.1f} | {k if k else float("nan"):.1f} | {ratio:.2f} | '
          f'{"met" if ok else "MISSED"} (floor {floor.get(c, 0):.0f}) |')
    rows.append(['large', gpu, c, buf, upd, f'{g:.2f}', f'{k:.2f}' if k else '', f'{ratio:.3f}'])
# Issue 51 (H200): stream-ordered 256 MiB in 1 MiB updates; 16 threads x 16 KiB synchronous.
stream_floor = {'AES-256-GCM': 150.0, 'AES-128-CTR': 250.0, 'ChaCha20-Poly1305': 250.0}
if streams:
    print('\n| cipher | buffer | update | stream-ordered, GB/s | synchronous, GB/s | kernel_bench, GB/s | target (issue 51) |')
    print('|---|---|---|---|---|---|---|')
for gpu, c, buf, upd, g, sync in streams:
    k = kernel.get((c, upd << 20))
    floor_gbs = stream_floor.get(c, 0.0)
    print(f'| {c} | {buf} MiB | {upd} MiB | {g:.1f} | {sync:.1f} | {k if k else float("nan"):.1f} | '
          f'{"met" if g >= floor_gbs else "MISSED"} (>= {floor_gbs:.0f}) |')
    rows.append(['stream', gpu, c, buf, upd, f'{g:.2f}', f'{k:.2f}' if k else '', f'{sync:.2f}'])
for gpu, c, n, kib, g in threads:
    print(f'\n{n} threads x {kib} KiB {c}, synchronous: {g:.1f} GB/s (issue 51: {"met" if g >= 10.0 else "MISSED"}, '
          f'target >= 10; issue 36: {"met" if g >= 25.0 else "MISSED"}, target >= 25)')
    rows.append(['threads', gpu, c, n, kib, f'{g:.2f}', '', ''])
with open(out, 'w', newline='') as fh:
    w = csv.writer(fh)
    # stream rows: the last column is the synchronous GB/s of the same cell, not a ratio
    w.writerow(['cell', 'gpu', 'cipher', 'buffer_mib_or_threads', 'update_mib_or_msg_kib', 'evp_gbs', 'kernel_gbs', 'ratio'])
    w.writerows(rows)
print(f'CSV: {out}')
PY
