/* SPDX-License-Identifier: Apache-2.0 */
/* The machine-wide counts of a GPU (batching/policy/share.c) across forked processes; the host executor plays the GPU. */
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/provider.h>

#include "gptest.h"
#include "batching/engine.h"
#include "batching/core/core.h"
#include "batching/exec_cpu.h"
#include "batching/exec_host.h"
#include "batching/policy/internal.h"
#include "provider/provctx.h"

#define MIB ((size_t)1 << 20)
#define CHILDREN 3

typedef struct {
    OSSL_LIB_CTX *lib;
    OSSL_PROVIDER *dflt;
    gp_engine *e;
    gp_key *key;            /* AES-256-GCM */
} fixture;

/* The counts' key of this test run: no other process (another test, another run) shares it. */
static void share_key(char *out, size_t n, const char *what)
{
    snprintf(out, n, "test-%d-%s", (int)getpid(), what);
}

/* Knobs of an engine whose GPU side is the host executor, sharing its counts under `key`: every
 * message of 64 KiB and up goes to the GPU side unless the machine's counts say it is full. */
static void knobs(gp_knobs *k, const char *key, int machine_share, int streams)
{
    gp_knobs_load(k, NULL, NULL);
    k->backend = GP_BACKEND_HYBRID;
    k->hybrid_gpu_host = 1;
    k->min_gpu_bytes = 65536;
    k->lone_gpu_bytes = 65536;
    k->gpu_share = 1.0;
    k->streams = streams;
    k->machine_share = machine_share;
    snprintf(k->calib_cache, sizeof(k->calib_cache), "off");
    snprintf(k->test.share_key, sizeof(k->test.share_key), "%s", key);
}

static void setup_with(fixture *f, const gp_knobs *k)
{
    uint8_t raw[32];

    f->lib = OSSL_LIB_CTX_new();
    f->dflt = OSSL_PROVIDER_load(f->lib, "default");
    assert_non_null(f->dflt);
    f->e = gp_engine_new(k, f->lib);
    assert_non_null(f->e);
    gptest_rand_bytes(raw, sizeof(raw));
    f->key = gp_key_new(f->e, GP_ALG_AES_GCM, raw, 32);
    assert_non_null(f->key);
}

static void teardown(fixture *f)
{
    gp_key_free(f->key);
    gp_engine_free(f->e);
    OSSL_PROVIDER_unload(f->dflt);
    OSSL_LIB_CTX_free(f->lib);
}

/* One message of `len` bytes through the engine; the executor it ran on (NULL: it failed). */
static const gp_executor *one(fixture *f, size_t len)
{
    uint8_t iv[12] = { 0 }, tag[16], *buf = calloc(1, len);
    gp_msg *m = gp_msg_new(f->e);
    const gp_executor *x = NULL;

    if (buf != NULL && m != NULL && gp_msg_start(m, f->key, iv, 12, 1) && gp_msg_crypt(m, buf, buf, len)
        && gp_msg_tag(m, tag))
        x = m->exec;
    gp_msg_free(m);
    free(buf);
    return x;
}

/* The last engine of a test: its segment is this test run's alone, and goes with it. */
static void teardown_last(fixture *f)
{
    if (f->e->policy.share.name[0] != '\0')
        (void)shm_unlink(f->e->policy.share.name);
    teardown(f);
}

static gp_share_counts others(fixture *f)
{
    gp_share_counts c;

    assert_int_equal(gp_share_others_now(&f->e->policy, &c), 1);
    return c;
}

/* Children of this test: each runs a message on the GPU side (all of them before any holds
 * anything), then, once told on `hold`, holds one batch of `len` bytes in flight (as a batch
 * running there would) until `go` closes. */
typedef struct kids {
    pid_t pid[CHILDREN];
    int ready[2], hold[2], go[2];
} kids;

static void kid_main(fixture *f, kids *k, size_t len)
{
    gp_request r = { .kind = GP_REQ_CRYPT, .len = len };
    size_t counted;
    char c = 1;

    close(k->ready[0]);
    close(k->hold[1]);
    close(k->go[1]);
    /* The engine its parent made, as `openssl speed -multi`'s children have it. Two siblings'
     * messages in flight at that moment fill the GPU (streams 2): this one goes to the cpu, and
     * the next one tries again. */
    for (int i = 0; one(f, 65536) != &gp_exec_host; i++)
        if (i == 1000)
            _exit(3);
    if (write(k->ready[1], &c, 1) != 1 || read(k->hold[0], &c, 1) != 1)
        _exit(6);
    counted = gp_share_begin(&f->e->policy, &gp_exec_host, &r, 1);
    if (counted != len + 1)
        _exit(4);
    if (write(k->ready[1], &c, 1) != 1)
        _exit(5);
    while (read(k->go[0], &c, 1) > 0)
        ;
    gp_share_end(&f->e->policy, counted);
    _exit(0);
}

/* A byte from a child, within 10 s (a child that failed leaves its siblings holding the pipe). */
static int read_byte(int fd)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    char c;

    return poll(&pfd, 1, 10000) == 1 && read(fd, &c, 1) == 1;
}

static void kids_start(fixture *f, kids *k, size_t len)
{

    assert_int_equal(pipe(k->ready), 0);
    assert_int_equal(pipe(k->hold), 0);
    assert_int_equal(pipe(k->go), 0);
    for (int i = 0; i < CHILDREN; i++) {
        k->pid[i] = fork();
        assert_true(k->pid[i] >= 0);
        if (k->pid[i] == 0)
            kid_main(f, k, len);
    }
    close(k->ready[1]);
    close(k->hold[0]);
    close(k->go[0]);
    for (int i = 0; i < CHILDREN; i++)
        assert_true(read_byte(k->ready[0]));
    for (int i = 0; i < CHILDREN; i++)
        assert_int_equal(write(k->hold[1], "h", 1), 1);
    for (int i = 0; i < CHILDREN; i++)
        assert_true(read_byte(k->ready[0]));
    close(k->hold[1]);
}

/* Wait for a child; its exit status (128 + signal if killed). */
static int kid_wait_pid(pid_t pid)
{
    int st = 0;

    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int kid_wait(kids *k, int i)
{
    return kid_wait_pid(k->pid[i]);
}

/* The sum over processes, a killed child's slot taken back, and the routing flip while siblings
 * hold the GPU full. */
static void test_sum_reclaim_route(void **state)
{
    fixture f;
    gp_knobs k;
    kids kd;
    gp_share_counts c;
    char key[64];

    (void)state;
    share_key(key, sizeof(key), "sum");
    knobs(&k, key, 8, 2);   /* the GPU runs 2 batches at once */
    setup_with(&f, &k);
    assert_ptr_equal(one(&f, 65536), &gp_exec_host);   /* alone: the GPU side */
    c = others(&f);
    assert_int_equal(c.procs, 0);
    assert_int_equal(c.batches, 0);

    kids_start(&f, &kd, MIB);
    c = others(&f);
    assert_int_equal(c.procs, CHILDREN);
    assert_int_equal(c.batches, CHILDREN);
    assert_int_equal(c.bytes, CHILDREN * MIB);
    /* Each child's message ran as batches on the GPU side, which the engine counted (run_on). */
    assert_true(c.done >= CHILDREN);
    /* Three batches in flight elsewhere, the GPU runs two: this process's messages go to the cpu,
     * and a stream on the cpu lane would not leave it. */
    assert_ptr_equal(one(&f, 65536), &gp_exec_cpu);
    assert_int_equal(gp_hybrid_gpu_eligible(&f.e->policy, GP_ALG_AES_GCM, MIB), 0);

    /* A child killed with a batch in flight: its slot stops counting at the next look. */
    assert_int_equal(kill(kd.pid[0], SIGKILL), 0);
    assert_int_equal(kid_wait(&kd, 0), 128 + SIGKILL);
    c = others(&f);
    assert_int_equal(c.procs, CHILDREN - 1);
    assert_int_equal(c.batches, CHILDREN - 1);
    assert_int_equal(c.bytes, (CHILDREN - 1) * MIB);
    assert_ptr_equal(one(&f, 65536), &gp_exec_cpu);   /* two still fill it */

    /* The others end their batches and exit: the GPU has room again. */
    close(kd.go[1]);
    for (int i = 1; i < CHILDREN; i++)
        assert_int_equal(kid_wait(&kd, i), 0);
    close(kd.ready[0]);
    c = others(&f);
    assert_int_equal(c.procs, 0);
    assert_int_equal(c.batches, 0);
    assert_ptr_equal(one(&f, 65536), &gp_exec_host);
    assert_int_equal(gp_hybrid_gpu_eligible(&f.e->policy, GP_ALG_AES_GCM, MIB), 1);
    assert_true(atomic_load(&f.e->policy.share.full_to_cpu) >= 2);
    teardown_last(&f);
}

/* Slots given back: a process that exits cleanly (engine freed) counts no more; one engine per
 * process in a row takes and gives back without leaking slots. */
static void test_release(void **state)
{
    fixture a, b;
    gp_knobs k;
    char key[64];

    (void)state;
    share_key(key, sizeof(key), "release");
    knobs(&k, key, 8, 4);
    setup_with(&a, &k);
    for (int i = 0; i < GP_SHARE_SLOTS + 16; i++) {
        setup_with(&b, &k);
        assert_ptr_equal(one(&b, 65536), &gp_exec_host);
        assert_int_equal(others(&a).procs, 1);
        teardown(&b);
    }
    assert_int_equal(others(&a).procs, 0);
    teardown_last(&a);
}

/* The segment is this user's alone: named by the uid, mode 0600; one another user made or one
 * opened to others is refused (the process decides alone); knob machine_share 0 maps nothing. */
static void test_isolation(void **state)
{
    fixture f;
    gp_knobs k;
    char key[64], prefix[64], path[128];
    struct stat st;
    int fd;

    (void)state;
    share_key(key, sizeof(key), "iso");
    knobs(&k, key, 8, 4);
    setup_with(&f, &k);
    assert_ptr_equal(one(&f, 65536), &gp_exec_host);
    (void)others(&f);
    snprintf(prefix, sizeof(prefix), "/gpuprov-%u-", (unsigned)geteuid());
    assert_int_equal(strncmp(f.e->policy.share.name, prefix, strlen(prefix)), 0);
    snprintf(path, sizeof(path), "/dev/shm%s", f.e->policy.share.name);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    if (geteuid() == 0) {
        /* Another user cannot open it. */
        pid_t pid = fork();
        int status = 0;

        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0)
                _exit(2);
            _exit(shm_open(f.e->policy.share.name, O_RDWR, 0) < 0 && errno == EACCES ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    /* Opened to the group and others: the next process refuses it and decides alone. */
    fd = shm_open(f.e->policy.share.name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    close(fd);
    {
        fixture g;

        setup_with(&g, &k);
        assert_ptr_equal(one(&g, 65536), &gp_exec_host);
        assert_int_equal(gp_share_full(&g.e->policy), 0);
        assert_int_equal(gp_share_may_open(&g.e->policy), 1);
        assert_int_equal(atomic_load(&g.e->policy.share.state), -1);
        teardown(&g);
    }
    assert_int_equal(shm_unlink(f.e->policy.share.name), 0);
    teardown(&f);

    /* Off: nothing mapped, nothing named. */
    share_key(key, sizeof(key), "off");
    knobs(&k, key, 0, 4);
    setup_with(&f, &k);
    assert_ptr_equal(one(&f, 65536), &gp_exec_host);
    assert_int_equal(gp_share_full(&f.e->policy), 0);
    assert_int_equal(f.e->policy.share.name[0], '\0');
    assert_null(f.e->policy.share.seg);
    teardown(&f);
}

/* Processes claiming the GPU at the same instant settle without a round in which all of them back
 * off: at least one holds it, and a latecomer finds room exactly when fewer than machine_share do. */
static void test_open_race(void **state)
{
    enum { RACERS = 8, LIMIT = 2 };
    fixture f;
    gp_knobs k;
    char key[64], c = 0;
    int ready[2], go[2], holders = 0;
    pid_t pid[RACERS];

    (void)state;
    share_key(key, sizeof(key), "race");
    knobs(&k, key, LIMIT, 4);
    setup_with(&f, &k);
    assert_int_equal(others(&f).procs, 0);   /* the parent's slot, taken before the fork */
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    for (int i = 0; i < RACERS; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            gp_share_counts cc;

            close(ready[0]);
            close(go[1]);
            /* Take the slot first, so that only the claims race. */
            if (!gp_share_others_now(&f.e->policy, &cc) || write(ready[1], &c, 1) != 1)
                _exit(3);
            while (read(go[0], &c, 1) > 0)
                ;
            c = (char)gp_share_may_open(&f.e->policy);
            /* Hold the slot (and the GPU, if it got it) until the parent has counted. */
            if (write(ready[1], &c, 1) != 1)
                _exit(3);
            pause();
            _exit(0);
        }
    }
    close(ready[1]);
    close(go[0]);
    for (int i = 0; i < RACERS; i++)
        assert_true(read_byte(ready[0]));
    close(go[1]);   /* all claim now */
    for (int i = 0; i < RACERS; i++) {
        struct pollfd pfd = { .fd = ready[0], .events = POLLIN };

        assert_int_equal(poll(&pfd, 1, 10000), 1);
        assert_int_equal(read(ready[0], &c, 1), 1);
        holders += c;
    }
    print_message("%d of %d racers hold the GPU open (machine_share %d)\n", holders, RACERS, LIMIT);
    assert_true(holders >= 1);
    assert_int_equal(others(&f).open, holders);
    assert_int_equal(gp_share_may_open(&f.e->policy), holders < LIMIT);
    for (int i = 0; i < RACERS; i++) {
        kill(pid[i], SIGKILL);
        (void)kid_wait_pid(pid[i]);
    }
    close(ready[0]);
    teardown_last(&f);
}

/* The warm-up of a process whose siblings already hold the GPU open (knob machine_share of them)
 * opens nothing and keeps its work on the cpu; once a sibling is gone (killed: its slot is taken
 * back) it opens. */
static void test_warm_refused(void **state)
{
    fixture f, s;
    gp_knobs k;
    char key[64], c = 1;
    int ready[2], go[2], status = 0;
    pid_t pid;

    (void)state;
    share_key(key, sizeof(key), "warm");
    knobs(&k, key, 1, 4);
    k.test.cpus_free = 1;   /* this machine's load must not decide the test */
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        setup_with(&s, &k);
        if (gp_share_may_open(&s.e->policy) != 1 || write(ready[1], &c, 1) != 1)
            _exit(1);
        while (read(go[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    assert_true(read_byte(ready[0]));

    k.backend = GP_BACKEND_AUTO;
    setup_with(&f, &k);
    assert_int_equal(gp_warm_start(&f.e->policy, 1), 0);
    usleep(500 * 1000);                                    /* two looks */
    assert_int_equal(atomic_load(&f.e->policy.warm.done), 0);
    assert_int_equal(atomic_load(&f.e->policy.warm.opening), -1);
    assert_true(atomic_load(&f.e->policy.share.open_refused) >= 1);
    pthread_mutex_lock(&f.e->open_lock);
    assert_int_equal(f.e->opened[GP_EXEC_HOST], 0);
    pthread_mutex_unlock(&f.e->open_lock);
    assert_ptr_equal(one(&f, MIB), &gp_exec_cpu);          /* nothing waits for it */
    assert_int_equal(others(&f).open, 1);

    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(go[1]);
    close(ready[0]);
    for (int i = 0; i < 3000 && !atomic_load(&f.e->policy.warm.done); i++)
        usleep(1000);
    assert_int_equal(atomic_load(&f.e->policy.warm.done), 1);
    assert_int_equal(others(&f).open, 0);
    assert_ptr_equal(one(&f, MIB), &gp_exec_host);
    teardown_last(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_reclaim_route),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_isolation),
        cmocka_unit_test(test_open_race),
        cmocka_unit_test(test_warm_refused),
    };

    gptest_rand_seed();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
