#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build kernel_bench from a gpuprov source tree with extra nvcc flags, outside Meson, so several
# kernel variants (copies of kernels/ with a change each, or other build options) can be built side
# by side and timed in one GPU session.
# usage: bench/kernel_variant.sh SOURCE_DIR OUTPUT [nvcc flags...]
#   GPU_SM (default 90) and GPU_MIN_BLOCKS (default 4, as -Dgpu_min_blocks) as in the Meson build;
#   GPU_DEFS: defines for both the kernel and kernel_bench (e.g. -DGP_AES_TT_NARROW_ONLY,
#     -DGP_GHASH_MMA for the tensor-core GHASH of build option ghash_mma (on in the Meson build:
#     pass it to compare with the provider's kernel), or -DGP_PHASE_PROBE for the lone launches'
#     phase stamps, kernels/probe.h);
#   GPU_UNIT_BYTES (default 2048, as -Dunit_bytes)
#   e.g. bench/kernel_variant.sh . /tmp/kb_a && bench/kernel_variant.sh ../variant /tmp/kb_b
#        /tmp/kb_a 256 16 10; /tmp/kb_b 256 16 10
set -euo pipefail
src=$(cd "$1" && pwd)
out=$2
shift 2
sm=${GPU_SM:-90}
min_blocks=${GPU_MIN_BLOCKS:-4}
unit=${GPU_UNIT_BYTES:-2048}
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
nvcc -gencode=arch=compute_${sm},code=sm_${sm} -DGP_UNIT_BYTES=${unit}u -DGP_KERNEL_MIN_BLOCKS=$min_blocks -O3 -lineinfo ${GPU_DEFS:-} \
     -Xcompiler -fPIC,-fno-exceptions,-fno-threadsafe-statics "$@" -I"$src/kernels" -c "$src/kernels/batch_kernel.cu" -o "$out.o"
gcc -O2 -std=gnu11 -D_GNU_SOURCE -DGP_UNIT_BYTES=${unit}u ${GPU_DEFS:-} -I"$src" -I"$src/kernels" -I"$cuda/include" \
    "$src/bench/kernel_bench.c" "$out.o" -L"$cuda/lib64" -lcudart -lm -o "$out"
rm -f "$out.o"
echo "kernel_variant: $out from $src ($*)"
