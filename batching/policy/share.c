/* SPDX-License-Identifier: Apache-2.0 */
/* The machine-wide counts of a GPU: what this user's processes hold open and in flight there, in shared memory. */
/*
 * Each process that loads gpuprov decides alone where its messages run; processes that share a GPU
 * (nginx workers, `openssl speed -multi`) would each send it work as if it had the GPU to itself,
 * and together time-slice it while the cores that could have done the work sit in copies
 * (docs/performance.md, "Many processes, one GPU"). Here they share, through one segment per GPU
 * and user (shm_open "/gpuprov-UID-HASH", mode 0600), a slot per process: its pid and start time,
 * whether it holds the GPU open, and the batches and bytes it has in flight there. The hybrid
 * policy sends a message to the GPU only while the other processes hold fewer batches in flight
 * than the GPU runs at once (gp_share_full), and the warm-up opens the GPU only while fewer than
 * knob machine_share others hold it open (gp_share_may_open).
 *
 * Invariants: the segment holds counters, never data or keys, and only this user's processes can
 * map it (its owner and mode are checked at each mapping; one that is not this user's alone is
 * refused, and the process then decides alone). Everything is lock-free atomics, so nothing a
 * process dies holding can block the others: a slot whose process is gone (kill(pid, 0) fails, or
 * the pid now names a process started at another time) is taken back by whoever next looks, and
 * its counts stop counting at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batching/base/base.h"
#include "batching/policy/internal.h"

#define SHARE_VERSION 1u
/* A slot's `open`. */
#define SHARE_CLAIMS 1
#define SHARE_HOLDS 2
/* How often a process looks for slots of dead processes, at most (it reads the slots more often). */
#define SHARE_SWEEP_NS 100000000ull

/* One process's slot: a cache line of its own, written by its owner at each batch. A slot counts
 * while pid and start are both set: a process taking it sets pid first and start last, one giving
 * it back (or taking back a dead one's) clears start first. */
typedef struct share_slot {
    _Atomic int32_t pid;          /* 0: free */
    _Atomic int32_t open;         /* SHARE_HOLDS: holds the GPU open; SHARE_CLAIMS: about to */
    _Atomic uint64_t start;       /* its start time + 1 (/proc/PID/stat, field 22); 0: not counting */
    _Atomic int64_t batches;      /* batches in flight on the GPU */
    _Atomic int64_t bytes;        /* their bytes */
    _Atomic uint64_t delivered;   /* bytes its batches have run there, in all */
    _Atomic uint64_t done;        /* batches run there, in all */
    char pad[16];
} share_slot;

struct gp_share_seg {
    _Atomic uint32_t version;     /* 0 in a new segment; SHARE_VERSION once a process has mapped it */
    _Atomic int32_t high;         /* slots [0, high) have been taken at some time */
    char pad[56];
    share_slot slot[GP_SHARE_SLOTS];
};

_Static_assert(sizeof(share_slot) == 64, "a slot is a cache line");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared counters must be lock-free: a process may die in the middle of any update");

/* The executor whose batches are counted: the one that plays the GPU's part (warm.c's gp_warm_gpu). */
static const gp_executor *share_gpu(gp_policy *p)
{
    return p->knobs->hybrid_gpu_host ? p->ops->host : p->ops->cuda;
}

/* The key of the GPUs counted here: the cuda executor's (gp_machine_gpu_key); the host executor
 * standing in for a GPU shares only under the fake UUID a test names. How many GPUs it names, 0 if
 * none. */
static int share_key(gp_policy *p, char *key, size_t n)
{
    if (p->knobs->hybrid_gpu_host) {
#if GP_TEST_HOOKS
        if (p->knobs->test.share_key[0] != '\0') {
            snprintf(key, n, "host:%s", p->knobs->test.share_key);
            return 1;
        }
#endif
        return 0;
    }
    return p->ops->cuda != NULL ? gp_machine_gpu_key(p, key, n) : 0;
}

/* FNV-1a, 64 bits: the segment's name from the key (names are short; the key is not secret). */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* The start time of process `pid` + 1 (clock ticks after boot, /proc/PID/stat field 22); 0 if it
 * cannot be read. The comm field (2) may hold spaces and parentheses: count from the last ')'. */
static uint64_t proc_start(pid_t pid)
{
    char path[64], buf[1024], *q;
    unsigned long long v;
    size_t len;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    if ((q = strrchr(buf, ')')) == NULL)
        return 0;
    /* After ')': field 3 (state) ... field 22 (starttime), the 20th. */
    for (int field = 3; field < 22; field++) {
        q = strchr(q + 1, ' ');
        if (q == NULL)
            return 0;
    }
    if (sscanf(q + 1, "%llu", &v) != 1)
        return 0;
    return (uint64_t)v + 1;
}

/* Is the process of a slot (pid, start) still there? A pid that names a process started at
 * another time is a new process reusing it (`full`: look at the start time too, which costs a read
 * of /proc). What cannot be read counts as there. */
static int slot_alive(pid_t pid, uint64_t start, int full)
{
    uint64_t now;

    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    now = full && start > 1 ? proc_start(pid) : 0;   /* 1: its owner could not read its own */
    return now == 0 || now == start;
}

/*
 * Take back the slots of processes that are gone. `force`: every slot, now, pid reuse included
 * (opening, taking a slot, a full look); else at most every SHARE_SWEEP_NS, and only the slots
 * that count (batches in flight, the GPU held open) by kill() alone: a pid reused since is caught
 * at the next forced sweep.
 */
static void share_sweep(gp_share *s, int force)
{
    struct gp_share_seg *seg = s->seg;
    uint64_t now = gp_now_ns(), last = atomic_load_explicit(&s->swept_ns, memory_order_relaxed);
    const int high = atomic_load_explicit(&seg->high, memory_order_acquire);

    if (!force && (now - last < SHARE_SWEEP_NS
                   || !atomic_compare_exchange_strong(&s->swept_ns, &last, now)))
        return;
    for (int i = 0; i < high && i < GP_SHARE_SLOTS; i++) {
        share_slot *sl = &seg->slot[i];
        int32_t pid = atomic_load_explicit(&sl->pid, memory_order_acquire);
        uint64_t start = atomic_load_explicit(&sl->start, memory_order_acquire);

        if (pid == 0 || (!force && atomic_load(&sl->batches) <= 0 && atomic_load(&sl->open) == 0)
            || slot_alive(pid, start, force))
            continue;
        /* Stop counting first (start), then free it (pid); whoever wins each step does it. A
         * process that died between taking a slot and setting its start leaves start 0: freed
         * by the pid alone. */
        if (start != 0 && !atomic_compare_exchange_strong(&sl->start, &start, 0))
            continue;
        atomic_compare_exchange_strong(&sl->pid, &pid, 0);
    }
}

/* Map the segment of this machine's GPU for this user into s->seg; 0 if there is none to share or
 * it cannot be trusted. */
static int share_map(gp_policy *p, gp_share *s)
{
    char key[1024];
    struct stat st;
    void *m;
    int fd;
    uint32_t v = 0;

    if ((s->gpus = share_key(p, key, sizeof(key))) <= 0)
        return 0;
    snprintf(s->name, sizeof(s->name), "/gpuprov-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)fnv1a(key));
    fd = shm_open(s->name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    /* This user's alone: another user who made the name first (to see these counts or to fill
     * them) is refused, and so is one this user opened up to others. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0
        || (st.st_size != 0 && st.st_size != (off_t)sizeof(struct gp_share_seg))
        || (st.st_size == 0 && (fchmod(fd, 0600) != 0   /* whatever the umask took away */
                                || ftruncate(fd, sizeof(struct gp_share_seg)) != 0))) {
        close(fd);
        return 0;
    }
    m = mmap(NULL, sizeof(struct gp_share_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    s->seg = m;
    /* A new segment reads all zero: every slot free. One of another layout is not touched. */
    if (!atomic_compare_exchange_strong(&s->seg->version, &v, SHARE_VERSION) && v != SHARE_VERSION) {
        munmap(m, sizeof(struct gp_share_seg));
        s->seg = NULL;
        return 0;
    }
    return 1;
}

/* A free slot for this process: its index, or -1 when every slot is taken by a live process. */
static int share_take_slot(gp_share *s)
{
    struct gp_share_seg *seg = s->seg;
    const int32_t me = (int32_t)getpid();
    const uint64_t start = proc_start(me);

    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < GP_SHARE_SLOTS; i++) {
            share_slot *sl = &seg->slot[i];
            int32_t free_pid = 0, high;

            if (atomic_load_explicit(&sl->pid, memory_order_relaxed) != 0
                || !atomic_compare_exchange_strong(&sl->pid, &free_pid, me))
                continue;
            atomic_store(&sl->open, 0);
            atomic_store(&sl->batches, 0);
            atomic_store(&sl->bytes, 0);
            atomic_store(&sl->delivered, 0);
            atomic_store(&sl->done, 0);
            /* Unreadable /proc: a start no other process can match, so only kill() decides. */
            atomic_store_explicit(&sl->start, start != 0 ? start : 1, memory_order_release);
            high = atomic_load(&seg->high);
            while (high < i + 1 && !atomic_compare_exchange_weak(&seg->high, &high, i + 1))
                ;
            return i;
        }
        share_sweep(s, 1);
    }
    return -1;
}

#define SHARE_CLAIMING 0x80000000u

/* The segment with this process's slot (s->slot, -1: none); NULL where the counts are off, or while
 * another thread of this process maps the segment or takes the slot. */
static struct gp_share_seg *share_ready(gp_policy *p)
{
    gp_share *s = &p->share;
    const unsigned want = gp_fork_generation() + 1;
    unsigned g = atomic_load_explicit(&s->gen, memory_order_acquire);

    if (g == want)
        return atomic_load_explicit(&s->state, memory_order_relaxed) > 0 ? s->seg : NULL;
    if (g == (want | SHARE_CLAIMING) || !atomic_compare_exchange_strong(&s->gen, &g, want | SHARE_CLAIMING))
        return NULL;
    /* A forked child keeps its parent's mapping and takes a slot of its own. */
    if (atomic_load(&s->state) == 0)
        atomic_store(&s->state, p->knobs->machine_share > 0 && share_map(p, s) ? 1 : -1);
    if (atomic_load(&s->state) > 0)
        s->slot = share_take_slot(s);
    atomic_store_explicit(&s->gen, want, memory_order_release);
    return atomic_load(&s->state) > 0 ? s->seg : NULL;
}

/* The other processes' counts (slots of this process's other engines included). */
typedef struct share_sum {
    int64_t procs, open, batches, bytes, done;
} share_sum;

static share_sum share_others(const gp_share *s)
{
    const struct gp_share_seg *seg = s->seg;
    const int high = atomic_load_explicit(&seg->high, memory_order_acquire);
    share_sum sum = { 0 };

    for (int i = 0; i < high && i < GP_SHARE_SLOTS; i++) {
        const share_slot *sl = &seg->slot[i];
        int64_t b, n;

        if (i == s->slot || atomic_load_explicit(&sl->pid, memory_order_relaxed) == 0
            || atomic_load_explicit(&sl->start, memory_order_acquire) == 0)
            continue;
        sum.procs++;
        sum.open += atomic_load_explicit(&sl->open, memory_order_relaxed) == SHARE_HOLDS;
        /* Read apart from their updates: never below zero. */
        b = atomic_load_explicit(&sl->batches, memory_order_relaxed);
        n = atomic_load_explicit(&sl->bytes, memory_order_relaxed);
        sum.batches += b > 0 ? b : 0;
        sum.bytes += n > 0 ? n : 0;
        sum.done += (int64_t)atomic_load_explicit(&sl->done, memory_order_relaxed);
    }
    return sum;
}

/* The others hold the GPU full: as many batches in flight as it runs at once (knob streams, the
 * slots a process keeps in flight per GPU, times the GPUs counted), or that many batches' worth of
 * bytes. */
static int share_sum_full(gp_policy *p, const share_sum *sum)
{
    const int64_t batches = (p->knobs->streams > 0 ? p->knobs->streams : 1)
                            * (p->share.gpus > 0 ? p->share.gpus : 1);
    const int64_t batch_bytes = p->knobs->max_batch_bytes > 0 ? (int64_t)p->knobs->max_batch_bytes : 1 << 20;

    return sum->batches >= batches || sum->bytes >= batches * batch_bytes;
}

int gp_share_full(gp_policy *p)
{
    struct gp_share_seg *seg;
    share_sum sum;

    if (p->knobs->machine_share == 0 || (seg = share_ready(p)) == NULL)
        return 0;
    share_sweep(&p->share, 0);
    sum = share_others(&p->share);
    if (!share_sum_full(p, &sum))
        return 0;
    atomic_fetch_add_explicit(&p->share.full_to_cpu, 1, memory_order_relaxed);
    return 1;
}

int gp_share_others_now(gp_policy *p, gp_share_counts *out)
{
    share_sum sum;

    memset(out, 0, sizeof(*out));
    if (p->knobs->machine_share == 0 || share_ready(p) == NULL)
        return 0;
    share_sweep(&p->share, 1);
    sum = share_others(&p->share);
    *out = (gp_share_counts){ sum.procs, sum.open, sum.batches, sum.bytes, sum.done };
    return 1;
}

/*
 * The openers ahead of slot `me`: the slots that hold the GPU open, and those that claim it with a
 * lower index. Processes claiming at the same instant thus settle by index: the lowest always
 * finds room if there is any (no round where all of them back off), and since each one stores its
 * claim before it counts (sequentially consistent), of two racers at least one sees the other.
 * One that counted before a racer of a lower index stored its claim may hold beside it: processes
 * starting together may exceed knob machine_share by a few, never wait on each other.
 */
static int64_t share_openers_ahead(const gp_share *s, int me)
{
    const struct gp_share_seg *seg = s->seg;
    const int high = atomic_load(&seg->high);
    int64_t n = 0;

    for (int i = 0; i < high && i < GP_SHARE_SLOTS; i++) {
        const share_slot *sl = &seg->slot[i];
        int32_t open;

        if (i == me || atomic_load(&sl->pid) == 0 || atomic_load(&sl->start) == 0)
            continue;
        open = atomic_load(&sl->open);
        n += open == SHARE_HOLDS || (open == SHARE_CLAIMS && i < me);
    }
    return n;
}

int gp_share_may_open(gp_policy *p)
{
    gp_share *s = &p->share;
    struct gp_share_seg *seg;
    share_slot *mine;
    share_sum sum;

    if (p->knobs->machine_share == 0)
        return 1;
    if ((seg = share_ready(p)) == NULL)
        return atomic_load(&s->state) < 0;   /* off: decide alone; still claiming: look again later */
    if (s->slot < 0)
        return 0;   /* every slot taken by live processes: the GPU has sharers enough */
    mine = &seg->slot[s->slot];
    if (atomic_load(&mine->open) == SHARE_HOLDS)
        return 1;
    share_sweep(s, 1);
    sum = share_others(s);
    if (sum.open < p->knobs->machine_share && !share_sum_full(p, &sum)) {
        atomic_store(&mine->open, SHARE_CLAIMS);
        if (share_openers_ahead(s, s->slot) < p->knobs->machine_share) {
            atomic_store(&mine->open, SHARE_HOLDS);
            return 1;
        }
        atomic_store(&mine->open, 0);
    }
    atomic_fetch_add_explicit(&s->open_refused, 1, memory_order_relaxed);
    return 0;
}

void gp_share_not_open(gp_policy *p)
{
    gp_share *s = &p->share;

    if (s->seg != NULL && s->slot >= 0 && atomic_load(&s->gen) == gp_fork_generation() + 1)
        atomic_store(&s->seg->slot[s->slot].open, 0);
}

size_t gp_share_begin(gp_policy *p, const gp_executor *x, const gp_request *reqs, size_t n)
{
    struct gp_share_seg *seg;
    share_slot *sl;
    size_t bytes = 0;

    if (p->knobs->machine_share == 0 || x != share_gpu(p) || (seg = share_ready(p)) == NULL
        || p->share.slot < 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        bytes += reqs[i].len;
    sl = &seg->slot[p->share.slot];
    atomic_fetch_add_explicit(&sl->batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->bytes, (int64_t)bytes, memory_order_relaxed);
    return bytes + 1;
}

void gp_share_end(gp_policy *p, size_t counted)
{
    share_slot *sl;

    /* The slot this process had when the batch began: a fork in between leaves the child none of
     * its parent's batches to end. */
    if (counted == 0 || p->share.seg == NULL || p->share.slot < 0)
        return;
    sl = &p->share.seg->slot[p->share.slot];
    atomic_fetch_sub_explicit(&sl->batches, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&sl->bytes, (int64_t)(counted - 1), memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->delivered, counted - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->done, 1, memory_order_relaxed);
}

void gp_share_release(gp_policy *p)
{
    gp_share *s = &p->share;

    if (s->seg == NULL)
        return;
    if (atomic_load(&s->gen) == gp_fork_generation() + 1 && s->slot >= 0) {
        share_slot *sl = &s->seg->slot[s->slot];

        atomic_store(&sl->start, 0);
        atomic_store(&sl->open, 0);
        atomic_store_explicit(&sl->pid, 0, memory_order_release);
    }
    munmap(s->seg, sizeof(struct gp_share_seg));
    s->seg = NULL;
    s->slot = -1;
    atomic_store(&s->state, -1);
}

void gp_share_print(gp_policy *p)
{
    gp_share *s = &p->share;
    share_sum sum;
    const share_slot *mine;

    if (p->knobs->machine_share == 0 || atomic_load(&s->gen) != gp_fork_generation() + 1 || s->seg == NULL
        || atomic_load(&s->state) <= 0 || s->slot < 0)
        return;
    sum = share_others(s);
    mine = &s->seg->slot[s->slot];
    gp_log_line("gpuprov share: %s: %lld other processes (%lld holding the GPU open, %lld batches in flight);"
                " this process %s, %llu batches (%.1f MB) on the GPU; the GPU full %llu times (messages"
                " to the cpu), opening refused %llu times\n",
                s->name, (long long)sum.procs, (long long)sum.open, (long long)sum.batches,
                atomic_load(&mine->open) == SHARE_HOLDS ? "holds it open" : "does not hold it open",
                (unsigned long long)atomic_load(&mine->done), atomic_load(&mine->delivered) / 1e6,
                (unsigned long long)atomic_load(&s->full_to_cpu),
                (unsigned long long)atomic_load(&s->open_refused));
}
