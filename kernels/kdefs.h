/* SPDX-License-Identifier: Apache-2.0 */
/* Portable qualifiers so the same kernel headers compile under gcc (host executor) and nvcc (cuda). */
#ifndef GP_KDEFS_H
#define GP_KDEFS_H

#include <stddef.h>
#include <stdint.h>

/* Blocks of 256 threads per SM the kernel's register budget must allow (build option
 * gpu_min_blocks): 2 caps a thread at 128 registers (the lanes need no more: ptxas -v reports
 * their use), 3 at 80, 4 at 64. The default is 4: a few spills in the lanes, but 32 warps per SM
 * to cover the table lookups' and loads' latency; the default build's figures are in
 * bench/RESULTS.md, "Device-resident kernels" (bench/kernel_variant.sh compares the others). */
#ifndef GP_KERNEL_MIN_BLOCKS
# define GP_KERNEL_MIN_BLOCKS 4
#endif

#if defined(__CUDACC__)
# define GP_KFN static inline __host__ __device__
# define GP_KCONST __device__ __constant__
# define GP_KTABLE __device__ const   /* global memory: loaded by lanes, not broadcast */
#else
# define GP_KFN static inline
# define GP_KCONST static const
# define GP_KTABLE static const
#endif

/* Keep the next loop rolled on the GPU (register pressure), or unroll it fully (straight-line
 * code, constant indices); no effect on the host build. */
#if defined(__CUDACC__)
# define GP_NO_UNROLL _Pragma("unroll 1")
# define GP_UNROLL _Pragma("unroll")
#else
# define GP_NO_UNROLL
# define GP_UNROLL
#endif

/*
 * A load of data another thread block wrote during this launch (the finisher reading partial MACs
 * and the lead's state): on the GPU it goes to L2 (ld.global.cg), since an SM's L1 is not coherent
 * with other SMs' writes; on the host a plain load.
 */
#if defined(__CUDA_ARCH__)
# define GP_LOAD_SHARED(p) __ldcg(p)
#else
# define GP_LOAD_SHARED(p) (*(p))
#endif

/* Byte-order helpers: every multi-byte field the specs define is read through these. */
GP_KFN uint32_t gp_load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

GP_KFN void gp_store_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

GP_KFN uint64_t gp_load_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

GP_KFN void gp_store_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

GP_KFN void gp_store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

GP_KFN uint32_t gp_load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

GP_KFN void gp_store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Byte swap of a 32-bit word (a big-endian word <-> a little-endian load of the same bytes). */
GP_KFN uint32_t gp_bswap32(uint32_t v)
{
#if defined(__CUDA_ARCH__)
    return __byte_perm(v, 0, 0x0123);
#else
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
#endif
}

/* Kernels call no libc (device code has none): byte loops instead of memcpy/memset. */
GP_KFN void gp_bytes_copy(uint8_t *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

/* Cleanse secrets: stores the compiler cannot drop as dead. On the GPU, volatile byte stores; on
 * the host, memset and an empty asm that may read the memory (explicit_bzero's trick), a few
 * instructions per 32 bytes where the byte loop took 4 per byte (~1000 for a message state, on
 * the caller's thread at every message start). */
GP_KFN void gp_state_wipe(void *p, size_t n)
{
#if defined(__CUDA_ARCH__) || !(defined(__GNUC__) || defined(__clang__))
    volatile uint8_t *v = (volatile uint8_t *)p;

    for (size_t i = 0; i < n; i++)
        v[i] = 0;
#else
    __builtin_memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory");
#endif
}

#endif
