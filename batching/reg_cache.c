/* SPDX-License-Identifier: Apache-2.0 */
/* The registration cache: tracked regions, registered entries, and the relocation hooks that drop them (reg_cache.h). */

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "batching/reg_cache.h"

/*
 * Every table is a fixed array in this module's own data: nothing here allocates (or calls out at
 * all) while it holds the lock, since a hook may run in a thread that holds an allocator's lock (an allocator that
 * calls madvise or munmap through its relocations), and an allocation under our lock would then
 * wait for that thread. Where a table is full the cache only declines: an untracked region is
 * never registered, an entry that finds no room is not made.
 */
#define TRACK_MAX 4096             /* tracked regions */
#define ENTRY_MAX 128              /* registrations, live or awaiting their unregistration */
#define SIGHT_MAX 16               /* ranges seen once, the newest replacing the oldest */

typedef struct region {
    uintptr_t start, end;
} region;

enum entry_state { E_FREE = 0, E_PENDING, E_LIVE, E_DEAD, E_UNREG };

typedef struct entry {
    uintptr_t start, end;          /* page-aligned */
    int state;                     /* enum entry_state */
    int spoiled;                   /* E_PENDING: a hook dropped its range while it was registered */
    unsigned uses;                 /* gp_reg_use holds */
    uint64_t last;                 /* the lookup clock at its last use (LRU) */
} entry;

/* The functions the hooks stand in for, as every object's call would otherwise reach them. */
typedef struct real_fns {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void (*free)(void *);
    size_t (*usable_size)(void *);
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    int (*munmap)(void *, size_t);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    int (*madvise)(void *, size_t, int);
    void *(*sbrk)(intptr_t);
    int (*brk)(void *);
    /* optional: absent from some C libraries (then no object can call them) */
    void (*free_sized)(void *, size_t);
    void (*free_aligned_sized)(void *, size_t, size_t);
    void *(*shmat)(int, const void *, int);
} real_fns;

static struct {
    pthread_mutex_t lock;
    region track[TRACK_MAX];       /* sorted by start, disjoint */
    size_t ntrack;
    atomic_size_t ntrack_pub;      /* ntrack, read without the lock by free's quick filter */
    entry ent[ENTRY_MAX];
    region sight[SIGHT_MAX];
    size_t sight_next;
    uint64_t clock;
    size_t pinned, max_bytes;
    gp_reg_ops ops;
    int on;
    gp_reg_counts n;
} rc = { .lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP };

static real_fns real;
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;   /* patching, one at a time */
static int hooks_state;            /* 0: not tried; 1: installed everywhere; -1: refused */
static uintptr_t page_size;
/* Set while this thread is inside the cache's own calls into ops (the driver): a hook there defers. */
static __thread int in_ops;

static uintptr_t page_down(uintptr_t a)
{
    return a & ~(page_size - 1);
}

static uintptr_t page_up(uintptr_t a)
{
    return (a + page_size - 1) & ~(page_size - 1);
}

static int overlaps(uintptr_t s1, uintptr_t e1, uintptr_t s2, uintptr_t e2)
{
    return s1 < e2 && s2 < e1;
}

/* ---- tracked regions (under rc.lock) ---- */

/* The first tracked region that ends after a. */
static size_t track_find(uintptr_t a)
{
    size_t lo = 0, hi = rc.ntrack;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (rc.track[mid].end <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void track_publish(void)
{
    atomic_store_explicit(&rc.ntrack_pub, rc.ntrack, memory_order_release);
}

/* Entries overlapping [s, e) leave the lookups: live ones await their unregistration, a pending one
 * is spoiled (its registrar unregisters it). */
static size_t entries_drop(uintptr_t s, uintptr_t e)
{
    size_t dropped = 0;

    for (size_t i = 0; i < ENTRY_MAX; i++) {
        entry *en = &rc.ent[i];

        if (!overlaps(en->start, en->end, s, e))
            continue;
        if (en->state == E_LIVE) {
            en->state = E_DEAD;
            rc.pinned -= en->end - en->start;
            rc.n.invalidated++;
            dropped++;
        } else if (en->state == E_PENDING) {
            en->spoiled = 1;
            dropped++;
        }
    }
    for (size_t i = 0; i < SIGHT_MAX; i++)
        if (overlaps(rc.sight[i].start, rc.sight[i].end, s, e))
            rc.sight[i].start = rc.sight[i].end = 0;
    return dropped;
}

/* Tracked regions overlapping [s, e) are forgotten, and every entry their pages hold dropped. */
static size_t track_drop(uintptr_t s, uintptr_t e)
{
    size_t i = track_find(s), j = i, dropped = 0;

    while (j < rc.ntrack && rc.track[j].start < e) {
        dropped += entries_drop(page_down(rc.track[j].start), page_up(rc.track[j].end));
        j++;
    }
    if (j > i) {
        memmove(&rc.track[i], &rc.track[j], (rc.ntrack - j) * sizeof(region));
        rc.ntrack -= j - i;
        track_publish();
    }
    return dropped;
}

/* A new live region: whatever the table still held there was freed or unmapped unseen, so it goes,
 * and its entries with it. No room: the region stays untracked (never registered). */
static size_t track_add(uintptr_t s, uintptr_t e)
{
    size_t dropped = track_drop(s, e), i;

    if (rc.ntrack == TRACK_MAX)
        return dropped;
    i = track_find(s);
    memmove(&rc.track[i + 1], &rc.track[i], (rc.ntrack - i) * sizeof(region));
    rc.track[i] = (region){ s, e };
    rc.ntrack++;
    track_publish();
    return dropped;
}

/* The tracked region holding all of [s, e), or NULL. */
static const region *track_holding(uintptr_t s, uintptr_t e)
{
    size_t i = track_find(s);

    return i < rc.ntrack && rc.track[i].start <= s && e <= rc.track[i].end ? &rc.track[i] : NULL;
}

/* ---- unregistration, outside the lock ---- */

/* Unregister every dropped entry no lookup holds. Not from inside ops (a hook run by the driver):
 * those wait for the next call that may. */
static void drain(void)
{
    for (;;) {
        entry *en = NULL;
        gp_reg_ops ops;

        pthread_mutex_lock(&rc.lock);
        for (size_t i = 0; i < ENTRY_MAX && en == NULL; i++)
            if (rc.ent[i].state == E_DEAD && rc.ent[i].uses == 0)
                en = &rc.ent[i];
        if (en != NULL)
            en->state = E_UNREG;
        ops = rc.ops;
        pthread_mutex_unlock(&rc.lock);
        if (en == NULL)
            return;
        if (ops.unreg != NULL) {
            in_ops = 1;
            ops.unreg(ops.arg, (void *)en->start, en->end - en->start);
            in_ops = 0;
        }
        pthread_mutex_lock(&rc.lock);
        rc.n.unregistered++;
        memset(en, 0, sizeof(*en));
        pthread_mutex_unlock(&rc.lock);
    }
}

/* The object a hook was called from: the driver (libcuda) and this module's own calls into it
 * defer their unregistrations (the driver is not re-entered from inside itself); any other caller
 * has them done before its call proceeds, so that no stale registration outlives the call. */
static int may_call_driver(const void *caller)
{
    Dl_info info;

    if (in_ops || rc.ops.unreg == NULL)
        return 0;
    if (caller != NULL && dladdr(caller, &info) != 0 && info.dli_fname != NULL
        && strstr(info.dli_fname, "libcuda") != NULL)
        return 0;
    return 1;
}

/* A hook's work before the real call: [s, e) is about to change (drop its entries; `forget`: and
 * stop tracking it); then, where the caller allows, the dropped entries are unregistered. */
static void about_to_change(uintptr_t s, uintptr_t e, int forget, const void *caller)
{
    size_t dropped;

    /* Entries live only inside tracked regions: with none, nothing here can be registered. */
    if (e <= s || atomic_load_explicit(&rc.ntrack_pub, memory_order_acquire) == 0)
        return;
    pthread_mutex_lock(&rc.lock);
    dropped = (forget ? track_drop(s, e) : 0) + entries_drop(page_down(s), page_up(e));
    pthread_mutex_unlock(&rc.lock);
    if (dropped > 0 && may_call_driver(caller))
        drain();
}

/* ---- the hooks ---- */

#define CALLER __builtin_return_address(0)

static void track_block(void *p, size_t n)
{
    if (p != NULL && n >= GP_REG_TRACK_MIN) {
        size_t dropped;

        pthread_mutex_lock(&rc.lock);
        dropped = track_add((uintptr_t)p, (uintptr_t)p + n);
        pthread_mutex_unlock(&rc.lock);
        (void)dropped;   /* stale entries of memory reused unseen: unregistered at the next get */
    }
}

/* A block that may be tracked: its usable size is at least the tracking bound. Without the
 * allocator's usable-size call, every block is looked up. */
static int maybe_tracked(void *p)
{
    if (p == NULL || atomic_load_explicit(&rc.ntrack_pub, memory_order_acquire) == 0)
        return 0;
    return real.usable_size == NULL || real.usable_size(p) >= GP_REG_TRACK_MIN;
}

static void untrack_block(void *p, const void *caller)
{
    uintptr_t s = (uintptr_t)p, e;
    size_t i, dropped = 0;

    pthread_mutex_lock(&rc.lock);
    i = track_find(s);
    if (i < rc.ntrack && rc.track[i].start == s) {
        e = rc.track[i].end;
        dropped = track_drop(s, e);
    }
    pthread_mutex_unlock(&rc.lock);
    if (dropped > 0 && may_call_driver(caller))
        drain();
}

static void *hk_malloc(size_t n)
{
    void *p = real.malloc(n);

    track_block(p, n);
    return p;
}

static void *hk_calloc(size_t k, size_t n)
{
    void *p = real.calloc(k, n);

    if (p != NULL && n != 0 && k <= SIZE_MAX / n)
        track_block(p, k * n);
    return p;
}

static void hk_free(void *p)
{
    if (maybe_tracked(p))
        untrack_block(p, CALLER);
    real.free(p);
}

static void hk_free_sized(void *p, size_t n)
{
    if (maybe_tracked(p))
        untrack_block(p, CALLER);
    real.free_sized(p, n);
}

static void hk_free_aligned_sized(void *p, size_t align, size_t n)
{
    if (maybe_tracked(p))
        untrack_block(p, CALLER);
    real.free_aligned_sized(p, align, n);
}

static void *hk_realloc(void *p, size_t n)
{
    if (maybe_tracked(p))
        untrack_block(p, CALLER);
    p = real.realloc(p, n);
    track_block(p, n);
    return p;
}

static void *hk_reallocarray(void *p, size_t k, size_t n)
{
    if (maybe_tracked(p))
        untrack_block(p, CALLER);
    p = real.reallocarray(p, k, n);
    if (p != NULL && n != 0 && k <= SIZE_MAX / n)
        track_block(p, k * n);
    return p;
}

static int hk_posix_memalign(void **out, size_t align, size_t n)
{
    int r = real.posix_memalign(out, align, n);

    if (r == 0)
        track_block(*out, n);
    return r;
}

static void *hk_aligned_alloc(size_t align, size_t n)
{
    void *p = real.aligned_alloc(align, n);

    track_block(p, n);
    return p;
}

static void *hk_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p;

    /* MAP_FIXED replaces whatever was mapped there without an munmap. */
    if ((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE))
        about_to_change((uintptr_t)addr, (uintptr_t)addr + len, 1, CALLER);
    p = real.mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE
        && (prot & (PROT_READ | PROT_WRITE)) == (PROT_READ | PROT_WRITE) && len >= GP_REG_TRACK_MIN) {
        pthread_mutex_lock(&rc.lock);
        (void)track_add((uintptr_t)p, page_up((uintptr_t)p + len));
        pthread_mutex_unlock(&rc.lock);
    }
    return p;
}

static int hk_munmap(void *addr, size_t len)
{
    about_to_change((uintptr_t)addr, page_up((uintptr_t)addr + len), 1, CALLER);
    return real.munmap(addr, len);
}

static void *hk_mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
    void *new_addr = NULL;

    if (flags & MREMAP_FIXED) {
        va_list ap;

        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
        about_to_change((uintptr_t)new_addr, page_up((uintptr_t)new_addr + newlen), 1, CALLER);
    }
    /* The old range moves or changes size: forgotten whole (a remapped region is not tracked). */
    about_to_change((uintptr_t)old, page_up((uintptr_t)old + (oldlen > 0 ? oldlen : 1)), 1, CALLER);
    return (flags & MREMAP_FIXED) ? real.mremap(old, oldlen, newlen, flags, new_addr)
                                  : real.mremap(old, oldlen, newlen, flags);
}

/* The advice that never changes which page backs an address; every other one may (DONTNEED, FREE,
 * REMOVE, the ones a newer kernel adds). */
static int advice_keeps_pages(int advice)
{
    switch (advice) {
    case MADV_NORMAL: case MADV_RANDOM: case MADV_SEQUENTIAL: case MADV_WILLNEED:
    case MADV_DONTFORK: case MADV_DOFORK: case MADV_DONTDUMP: case MADV_DODUMP:
    case MADV_HUGEPAGE: case MADV_NOHUGEPAGE:
        return 1;
    default:
        return 0;
    }
}

static int hk_madvise(void *addr, size_t len, int advice)
{
    if (!advice_keeps_pages(advice))
        about_to_change((uintptr_t)addr, page_up((uintptr_t)addr + len), 0, CALLER);
    return real.madvise(addr, len, advice);
}

static void *hk_sbrk(intptr_t incr)
{
    if (incr < 0) {
        const uintptr_t end = (uintptr_t)real.sbrk(0);

        about_to_change(end - (uintptr_t)-incr, end, 1, CALLER);
    }
    return real.sbrk(incr);
}

/* SHM_REMAP maps a segment over whatever was at addr, without an munmap. */
static void *hk_shmat(int id, const void *addr, int flags)
{
    struct shmid_ds ds;

    if ((flags & SHM_REMAP) && addr != NULL && shmctl(id, IPC_STAT, &ds) == 0)
        about_to_change((uintptr_t)addr, page_up((uintptr_t)addr + ds.shm_segsz), 1, CALLER);
    return real.shmat(id, addr, flags);
}

static int hk_brk(void *addr)
{
    const uintptr_t end = (uintptr_t)real.sbrk(0);

    if ((uintptr_t)addr < end)
        about_to_change((uintptr_t)addr, end, 1, CALLER);
    return real.brk(addr);
}

/* ---- relocation patching ---- */

typedef struct hook {
    const char *name;
    void *fn;                      /* the hook */
    void **real;                   /* where its real function is kept */
    int optional;                  /* may be absent from the C library (then nothing calls it) */
} hook;

static const hook hooks[] = {
    { "malloc", (void *)hk_malloc, (void **)&real.malloc, 0 },
    { "calloc", (void *)hk_calloc, (void **)&real.calloc, 0 },
    { "realloc", (void *)hk_realloc, (void **)&real.realloc, 0 },
    { "reallocarray", (void *)hk_reallocarray, (void **)&real.reallocarray, 0 },
    { "posix_memalign", (void *)hk_posix_memalign, (void **)&real.posix_memalign, 0 },
    { "aligned_alloc", (void *)hk_aligned_alloc, (void **)&real.aligned_alloc, 0 },
    { "free", (void *)hk_free, (void **)&real.free, 0 },
    { "mmap", (void *)hk_mmap, (void **)&real.mmap, 0 },
    { "mmap64", (void *)hk_mmap, (void **)&real.mmap, 0 },
    { "munmap", (void *)hk_munmap, (void **)&real.munmap, 0 },
    { "mremap", (void *)hk_mremap, (void **)&real.mremap, 0 },
    { "madvise", (void *)hk_madvise, (void **)&real.madvise, 0 },
    { "sbrk", (void *)hk_sbrk, (void **)&real.sbrk, 0 },
    { "brk", (void *)hk_brk, (void **)&real.brk, 0 },
    { "free_sized", (void *)hk_free_sized, (void **)&real.free_sized, 1 },
    { "free_aligned_sized", (void *)hk_free_aligned_sized, (void **)&real.free_aligned_sized, 1 },
    { "shmat", (void *)hk_shmat, (void **)&real.shmat, 1 },
};
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct patch_walk {
    int foreign;                   /* a slot held a function neither real nor its own object's stub */
    int patched;
    unsigned long long adds;       /* the loader's count of objects loaded so far */
} patch_walk;

/* A dynamic entry's address: glibc relocates them in place on most targets, not on all. */
static uintptr_t dyn_addr(uintptr_t base, uintptr_t v)
{
    return v < base ? v + base : v;
}

static void patch_slot(void **slot, void *fn, uintptr_t relro_s, uintptr_t relro_e)
{
    const uintptr_t pg = page_down((uintptr_t)slot);
    const int in_relro = (uintptr_t)slot >= relro_s && (uintptr_t)slot < relro_e;

    if (in_relro && mprotect((void *)pg, page_size, PROT_READ | PROT_WRITE) != 0)
        return;
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    if (in_relro)
        (void)mprotect((void *)pg, page_size, PROT_READ);
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
#if defined(R_JUMP_SLOT)
    patch_walk *pw = arg;
    const uintptr_t base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0, relro_s = 0, relro_e = 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *rel[2] = { NULL, NULL };
    size_t relsz[2] = { 0, 0 };

    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        pw->adds = info->dlpi_adds;
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "linux-vdso") != NULL)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_LOAD) {
            if (base + ph->p_vaddr < lo)
                lo = base + ph->p_vaddr;
            if (base + ph->p_vaddr + ph->p_memsz > hi)
                hi = base + ph->p_vaddr + ph->p_memsz;
        } else if (ph->p_type == PT_GNU_RELRO) {
            relro_s = page_down(base + ph->p_vaddr);
            relro_e = page_up(base + ph->p_vaddr + ph->p_memsz);
        }
    }
    if (dyn == NULL)
        return 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_addr(base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_addr(base, dyn->d_un.d_ptr); break;
        case DT_JMPREL: rel[0] = (const ElfW(Rela) *)dyn_addr(base, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: relsz[0] = dyn->d_un.d_val; break;
        case DT_RELA: rel[1] = (const ElfW(Rela) *)dyn_addr(base, dyn->d_un.d_ptr); break;
        case DT_RELASZ: relsz[1] = dyn->d_un.d_val; break;
        default: break;
        }
    }
    if (symtab == NULL || strtab == NULL)
        return 0;
    for (int t = 0; t < 2; t++) {
        for (size_t k = 0; rel[t] != NULL && k < relsz[t] / sizeof(ElfW(Rela)); k++) {
            const ElfW(Rela) *r = &rel[t][k];
            const unsigned type = (unsigned)ELF64_R_TYPE(r->r_info), si = (unsigned)ELF64_R_SYM(r->r_info);
            const char *name;

            if ((type != R_JUMP_SLOT && type != R_GLOB_DAT) || si == 0)
                continue;
            name = strtab + symtab[si].st_name;
            for (size_t h = 0; h < NHOOKS; h++) {
                void **slot, *cur;

                if (strcmp(name, hooks[h].name) != 0)
                    continue;
                if (*hooks[h].real == NULL)   /* an optional one this C library lacks */
                    break;
                slot = (void **)(base + r->r_offset);
                cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
                if (cur == hooks[h].fn)
                    break;
                /* Bound to the real function, or not yet bound (lazy binding: the object's own
                 * PLT stub); anything else is another library's hook, which ours would cut out. */
                if (cur != *hooks[h].real && !((uintptr_t)cur >= lo && (uintptr_t)cur < hi)) {
                    pw->foreign = 1;
                    break;
                }
                patch_slot(slot, hooks[h].fn, relro_s, relro_e);
                pw->patched++;
                break;
            }
        }
    }
#else
    (void)info, (void)size;
    ((patch_walk *)arg)->foreign = 1;   /* no relocation types known for this target */
#endif
    return 0;
}

/* The loader's count of objects loaded at the last patching (0: none yet). */
static atomic_ullong patched_adds;

static int hooks_patch_all(void)
{
    patch_walk pw = { 0, 0, 0 };

    pthread_mutex_lock(&hooks_lock);
    dl_iterate_phdr(patch_object, &pw);
    if (pw.foreign)
        hooks_state = -1;
    atomic_store(&patched_adds, pw.adds);
    pthread_mutex_unlock(&hooks_lock);
    return !pw.foreign;
}

static int read_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1;   /* the first object says it */
}

/*
 * Objects loaded since the last patching (dlopen, and the libraries it pulls in) call free and
 * munmap through relocations of their own, which the hooks did not see until now: they are
 * patched, and every entry is dropped, since their code may have freed registered memory unseen
 * (a later lookup registers again). Not by hooking dlopen: glibc's dlopen takes its caller's
 * address for the caller's RUNPATH and namespace, and a hook would become that caller. Without
 * the loader's count (size too small), every lookup would patch: the cache stays off instead.
 */
static int objects_settled(void)
{
    unsigned long long adds = 0;

    dl_iterate_phdr(read_adds, &adds);
    if (adds == 0)
        return 0;
    if (adds == atomic_load(&patched_adds))
        return 1;
    if (!hooks_patch_all()) {
        pthread_mutex_lock(&rc.lock);
        rc.on = 0;
        (void)entries_drop(0, UINTPTR_MAX);
        pthread_mutex_unlock(&rc.lock);
        return 0;
    }
    pthread_mutex_lock(&rc.lock);
    (void)entries_drop(0, UINTPTR_MAX);
    pthread_mutex_unlock(&rc.lock);
    return 1;
}

/* ---- fork ---- */

/* The tables are whole in the child: fork waits for the lock. It is recursive because the prepare
 * handlers registered before this one run after it, in this thread, and may free or unmap: their
 * hooks then find the lock already theirs. Nothing here calls out while holding it. */
static void at_prepare(void)
{
    pthread_mutex_lock(&hooks_lock);
    pthread_mutex_lock(&rc.lock);
}

/* The parent drops every entry (the kernel may give a pinned page to the child at the parent's next
 * write, on kernels that do not copy pinned pages at fork); their unregistration runs at its next
 * get. */
static void at_parent(void)
{
    for (size_t i = 0; i < ENTRY_MAX; i++) {
        if (rc.ent[i].state == E_LIVE) {
            rc.ent[i].state = E_DEAD;
            rc.pinned -= rc.ent[i].end - rc.ent[i].start;
        } else if (rc.ent[i].state == E_PENDING) {
            rc.ent[i].spoiled = 1;
        }
    }
    pthread_mutex_unlock(&rc.lock);
    pthread_mutex_unlock(&hooks_lock);
}

/* The child never calls the driver its parent opened: it forgets the entries, and the cache is off
 * until the child's own executor opens it. Its memory is its parent's, so the tracking holds. */
static void at_child(void)
{
    pthread_mutexattr_t attr;

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rc.lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_mutex_init(&hooks_lock, NULL);
    memset(rc.ent, 0, sizeof(rc.ent));
    memset(rc.sight, 0, sizeof(rc.sight));
    memset(&rc.ops, 0, sizeof(rc.ops));
    rc.on = 0;
    rc.pinned = 0;
}

/* ---- installing ---- */

/* dl_iterate_phdr lists the program first: whether this code is in one of its segments. */
static int first_holds_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    const uintptr_t self = (uintptr_t)first_holds_self;

    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

        if (ph->p_type == PT_LOAD && self >= info->dlpi_addr + ph->p_vaddr
            && self < info->dlpi_addr + ph->p_vaddr + ph->p_memsz)
            *(int *)arg = 1;
    }
    return 1;   /* the first object only */
}

/* Linked into the program itself (the unit tests): nothing to pin. */
static int in_main_program(void)
{
    int in = 0;

    dl_iterate_phdr(first_holds_self, &in);
    return in;
}

static int hooks_install(void)
{
    int state;

    pthread_mutex_lock(&hooks_lock);
    state = hooks_state;
    if (state == 0) {
        page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < NHOOKS; i++)
            if (*hooks[i].real == NULL)
                *hooks[i].real = dlsym(RTLD_DEFAULT, hooks[i].name);
        real.usable_size = (size_t (*)(void *))dlsym(RTLD_DEFAULT, "malloc_usable_size");
        /* The hooks forward to every one of these; one missing: nothing is patched. */
        state = 1;
        for (size_t i = 0; i < NHOOKS; i++)
            if (*hooks[i].real == NULL && !hooks[i].optional)
                state = -1;
        /* The hooks stay in every object's tables for the life of the process: this module must
         * stay loaded too (a dlclose would leave them pointing at nothing). */
        if (state == 1 && !in_main_program()) {
            Dl_info self;

            if (dladdr((void *)hooks_install, &self) == 0 || self.dli_fname == NULL
                || dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == NULL)
                state = -1;
        }
        if (state == 1 && pthread_atfork(at_prepare, at_parent, at_child) != 0)
            state = -1;
        hooks_state = state;
    }
    pthread_mutex_unlock(&hooks_lock);
    if (state == 1 && !hooks_patch_all())
        state = -1;
    return state == 1;
}

/* ---- the cache ---- */

int gp_reg_cache_hooks(void)
{
    return hooks_install();
}

int gp_reg_cache_open(const gp_reg_ops *ops, size_t max_bytes)
{
    if (!hooks_install())
        return 0;
    pthread_mutex_lock(&rc.lock);
    rc.ops = *ops;
    rc.max_bytes = max_bytes;
    rc.on = 1;
    pthread_mutex_unlock(&rc.lock);
    return 1;
}

void gp_reg_cache_close(void)
{
    pthread_mutex_lock(&rc.lock);
    rc.on = 0;
    (void)entries_drop(0, UINTPTR_MAX);
    pthread_mutex_unlock(&rc.lock);
    /* The ops stay: an entry a lookup still holds (a wave that failed) is unregistered at its put. */
    drain();
}

int gp_reg_cache_on(void)
{
    int on;

    pthread_mutex_lock(&rc.lock);
    on = rc.on;
    pthread_mutex_unlock(&rc.lock);
    return on;
}

static entry *entry_holding(uintptr_t s, uintptr_t e)
{
    for (size_t i = 0; i < ENTRY_MAX; i++)
        if (rc.ent[i].state == E_LIVE && rc.ent[i].start <= s && e <= rc.ent[i].end)
            return &rc.ent[i];
    return NULL;
}

/* A range seen once before: its second sighting registers it. */
static int sighted(uintptr_t s, uintptr_t e)
{
    for (size_t i = 0; i < SIGHT_MAX; i++)
        if (rc.sight[i].start <= s && e <= rc.sight[i].end && rc.sight[i].end != 0)
            return 1;
    rc.sight[rc.sight_next] = (region){ s, e };
    rc.sight_next = (rc.sight_next + 1) % SIGHT_MAX;
    return 0;
}

/* Room for `need` more pinned bytes: the least recently used entries no lookup holds go (to be
 * unregistered by the caller's drain). 0: not enough of them. */
static int make_room(size_t need)
{
    while (rc.pinned + need > rc.max_bytes) {
        entry *old = NULL;

        for (size_t i = 0; i < ENTRY_MAX; i++)
            if (rc.ent[i].state == E_LIVE && rc.ent[i].uses == 0 && (old == NULL || rc.ent[i].last < old->last))
                old = &rc.ent[i];
        if (old == NULL)
            return 0;
        old->state = E_DEAD;
        rc.pinned -= old->end - old->start;
    }
    return 1;
}

int gp_reg_cache_get(const void *p, size_t len, gp_reg_use *use)
{
    const uintptr_t s = (uintptr_t)p, e = s + len;
    uintptr_t rs, re;
    const region *tr;
    entry *en = NULL;
    gp_reg_ops ops;
    int ok;

    use->entry = NULL;
    if (len == 0 || e < s)
        return 0;
    if (!objects_settled()) {
        drain();
        return 0;
    }
    drain();   /* before any registration: the driver never holds two of one address */
    pthread_mutex_lock(&rc.lock);
    if (!rc.on) {
        pthread_mutex_unlock(&rc.lock);
        return 0;
    }
    rc.clock++;
    if ((en = entry_holding(s, e)) != NULL) {
        en->uses++;
        en->last = rc.clock;
        rc.n.hits++;
        use->entry = en;
        pthread_mutex_unlock(&rc.lock);
        return 1;
    }
    rc.n.misses++;
    tr = track_holding(s, e);
    if (tr == NULL || !sighted(s, e)) {
        pthread_mutex_unlock(&rc.lock);
        return 0;
    }
    /* The whole tracked region where it fits half the bound (every part of it then hits), else the
     * range's own pages; page-aligned: each page holds a byte of the live region, so no allocator
     * releases it while the region lives. */
    rs = page_down(tr->start);
    re = page_up(tr->end);
    if (re - rs > rc.max_bytes / 2) {
        rs = page_down(s);
        re = page_up(e);
    }
    /* The driver refuses a registration that overlaps another (neighbouring blocks share a page):
     * the entries it would overlap are merged into it, unless a lookup holds one. */
    for (size_t i = 0; i < ENTRY_MAX; i++) {
        entry *o = &rc.ent[i];

        if ((o->state == E_LIVE || o->state == E_PENDING) && overlaps(o->start, o->end, rs, re)) {
            if (o->state == E_PENDING || o->uses > 0) {
                rc.n.refused++;
                pthread_mutex_unlock(&rc.lock);
                return 0;
            }
        }
    }
    for (size_t i = 0; i < ENTRY_MAX; i++) {
        entry *o = &rc.ent[i];

        if (o->state == E_LIVE && overlaps(o->start, o->end, rs, re)) {
            rs = o->start < rs ? o->start : rs;
            re = o->end > re ? o->end : re;
            o->state = E_DEAD;
            rc.pinned -= o->end - o->start;
        }
    }
    en = NULL;
    if (re - rs <= rc.max_bytes && make_room(re - rs))
        for (size_t i = 0; i < ENTRY_MAX && en == NULL; i++)
            if (rc.ent[i].state == E_FREE)
                en = &rc.ent[i];
    if (en == NULL) {
        rc.n.refused++;
        pthread_mutex_unlock(&rc.lock);
        drain();
        return 0;
    }
    *en = (entry){ .start = rs, .end = re, .state = E_PENDING };
    ops = rc.ops;
    pthread_mutex_unlock(&rc.lock);

    drain();   /* what make_room evicted */
    in_ops = 1;
    ok = ops.reg(ops.arg, (void *)rs, re - rs);
    in_ops = 0;

    pthread_mutex_lock(&rc.lock);
    if (ok && !en->spoiled && rc.on) {
        en->state = E_LIVE;
        en->uses = 1;
        en->last = rc.clock;
        rc.pinned += re - rs;
        rc.n.registered++;
        use->entry = en;
        pthread_mutex_unlock(&rc.lock);
        return 1;
    }
    /* Failed, or its memory changed (or the cache closed) while it was being registered. */
    if (ok) {
        en->state = E_DEAD;
        rc.n.registered++;
    } else {
        memset(en, 0, sizeof(*en));
        rc.n.refused++;
    }
    pthread_mutex_unlock(&rc.lock);
    drain();
    return 0;
}

void gp_reg_cache_put(gp_reg_use *use)
{
    entry *en = use->entry;
    int dead;

    if (en == NULL)
        return;
    use->entry = NULL;
    pthread_mutex_lock(&rc.lock);
    en->uses--;
    dead = en->state == E_DEAD && en->uses == 0;
    pthread_mutex_unlock(&rc.lock);
    if (dead)
        drain();
}

void gp_reg_cache_counts(gp_reg_counts *out)
{
    pthread_mutex_lock(&rc.lock);
    *out = rc.n;
    out->pinned_bytes = rc.pinned;
    out->entries = 0;
    for (size_t i = 0; i < ENTRY_MAX; i++)
        out->entries += rc.ent[i].state == E_LIVE;
    pthread_mutex_unlock(&rc.lock);
}

int gp_reg_cache_tracked(const void *p, size_t len)
{
    int r;

    pthread_mutex_lock(&rc.lock);
    r = track_holding((uintptr_t)p, (uintptr_t)p + len) != NULL;
    pthread_mutex_unlock(&rc.lock);
    return r;
}

int gp_reg_cache_has(const void *p, size_t len)
{
    int r;

    pthread_mutex_lock(&rc.lock);
    r = entry_holding((uintptr_t)p, (uintptr_t)p + len) != NULL;
    pthread_mutex_unlock(&rc.lock);
    return r;
}
