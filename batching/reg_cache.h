/* SPDX-License-Identifier: Apache-2.0 */
/* The registration cache: callers' reused buffers kept pinned for DMA, dropped before their memory can change. */
#ifndef GP_REG_CACHE_H
#define GP_REG_CACHE_H

#include <stddef.h>
#include <stdint.h>

/*
 * A registration pins pages (cudaHostRegister): the driver keeps the physical pages it found, by
 * virtual address. If the program then unmaps that memory, or remaps it, or hands it back to the
 * kernel (madvise MADV_DONTNEED and the like), and a new mapping appears at the same address, a
 * DMA through the old registration reads and writes the old pages: silent corruption. So an entry
 * must leave the cache before any of that happens, and a range is registered only where every way
 * its memory can change passes through a hook of this unit.
 *
 * The hooks (process-wide, installed once, by rewriting the relocations of every loaded object,
 * as UCX's ucm does) see, before the real call proceeds: munmap, mremap, madvise (every advice but
 * the few that never change a page's mapping), mmap with MAP_FIXED over a range, shmat with
 * SHM_REMAP, brk and sbrk shrinking the heap, free (and C23's free_sized, free_aligned_sized where
 * the C library has them), realloc and reallocarray. Objects loaded later are patched at the next
 * lookup, which first drops every entry (their code may have freed registered memory meanwhile).
 * The hooks also keep the *tracked regions*:
 * what the hooked malloc family returned (blocks of GP_REG_TRACK_MIN bytes and up, until their
 * free or realloc) and the private anonymous mappings the hooked mmap made (until their munmap or
 * mremap). A range is registered only inside one tracked region. Memory the hooks never saw made
 * (a thread's stack, a library's data, shared memory, libc's internal allocations, anything mapped
 * by a raw system call) is never registered, so the ways it can change unseen (thread exit, dlclose,
 * shmdt, glibc's internal munmap) never touch a registration. A malloc'd block's pages change only
 * after the block is freed (an allocator releases only pages that hold no live block's byte), and
 * its free passes through the hook first, which drops every entry that overlaps the block.
 *
 * What stays outside any hook, and what the cache does there: a program whose objects were not
 * patched (the hooks could not be installed, or another library had already rewritten the same
 * relocations: gp_reg_cache_open fails and nothing is registered); memory freed or unmapped by a
 * raw system call, through a pointer to free or munmap taken with dlsym, or by a library loaded
 * after the hooks went in before the next lookup patched it, where that memory is then reused
 * unseen and registered again; memory freed while an EVP call on it is still running (the
 * program's own bug). docs/limitations.md says so.
 *
 * An entry dropped by a hook is at once unreachable by lookups, and unregistered before the
 * hooked call proceeds (so that no registration of the old pages outlives the call: the program's
 * own CUDA calls on new memory at that address would use it), except where the hook runs inside
 * the driver (called from libcuda, or from this unit's own calls into it): those wait for the next
 * lookup, which unregisters every dropped entry before it registers anything, so the driver never
 * holds two registrations of one address. An entry a lookup holds is unregistered at its put.
 * fork: the parent drops every entry (an older kernel moves a pinned page to the child at the
 * parent's next write), the child forgets them (it never calls the driver).
 */

/* The smallest malloc'd block the hooks track (smaller ones are never registered). */
#define GP_REG_TRACK_MIN ((size_t)256 << 10)

typedef struct gp_reg_ops {
    /* Pin [base, base + len) (page-aligned) for DMA. 1: done. Called without the cache's lock. */
    int (*reg)(void *arg, void *base, size_t len);
    /* Unpin what reg pinned. Called without the cache's lock, never inside a hook. */
    void (*unreg)(void *arg, void *base, size_t len);
    void *arg;
} gp_reg_ops;

/* A lookup's hold on an entry: its registration stays while held. */
typedef struct gp_reg_use {
    void *entry;
} gp_reg_use;

/* The cache's counters (gp_reg_cache_counts). */
typedef struct gp_reg_counts {
    uint64_t hits, misses, registered, unregistered, invalidated, refused, pinned_bytes, entries;
} gp_reg_counts;

/*
 * Install the hooks (once per process), so that the memory the program allocates from now on is
 * tracked; the engine does it when it is made (at the provider's load, before the program has
 * made the buffers it will reuse). 1: installed in every loaded object.
 */
int gp_reg_cache_hooks(void);
/*
 * Install the hooks (once per process; they stay, forwarding, after close) and turn the cache on
 * with `ops`, pinning at most `max_bytes` (the least recently used entries go first). 0: the hooks
 * could not be installed where every loaded object's calls pass through them; the cache stays off.
 */
int gp_reg_cache_open(const gp_reg_ops *ops, size_t max_bytes);
/* Off: every entry unregistered (after a GPU failure too: the driver's errors are ignored); one a
 * lookup still holds, at its put. */
void gp_reg_cache_close(void);
/* Whether the cache is on. */
int gp_reg_cache_on(void);

/*
 * [p, p + len) inside a registered range: 1, and *use holds the entry until gp_reg_cache_put (a
 * DMA may read or write p directly meanwhile). 0: not registered (yet). A range inside one
 * tracked region is registered at its second sighting: the whole region where it fits the bound,
 * else the range's pages. The registration runs on the caller's thread.
 */
int gp_reg_cache_get(const void *p, size_t len, gp_reg_use *use);
void gp_reg_cache_put(gp_reg_use *use);

void gp_reg_cache_counts(gp_reg_counts *out);

/* For the tests: whether [p, p + len) lies in one tracked region, and whether an entry covers it. */
int gp_reg_cache_tracked(const void *p, size_t len);
int gp_reg_cache_has(const void *p, size_t len);

#endif
