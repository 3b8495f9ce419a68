/* SPDX-License-Identifier: Apache-2.0 */
/* The copy crew (batching/copy_crew.h): every byte lands, pieces in order, many callers at once,
 * no crew at all, and a forked child that starts its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "batching/copy_crew.h"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

/* One run of `len` bytes in pieces of `piece`, consumed piece by piece as the cuda executor does,
 * then checked byte for byte (and the bytes around dst untouched). The destination starts `skew`
 * bytes past a 16-byte boundary (streaming stores go by 16 bytes after a head) and the source
 * `skew` % 2 bytes further. */
static void one_run(gp_copy_crew *cr, size_t len, size_t piece, uint32_t seed, size_t skew, unsigned flags)
{
    uint8_t *src_mem = malloc(len + 2), *dst_mem = malloc(len + 96), *src = src_mem + 1 + skew % 2,
            *dst = dst_mem + skew;
    gp_copy_run run;

    assert_non_null(src_mem);
    assert_non_null(dst_mem);
    fill(src, len, seed);
    memset(dst, 0xEE, len + 64);
    assert_int_equal(gp_copy_start(cr, &run, dst + 32, src, len, piece, flags), 1);
    for (size_t k = 0; k < run.npieces; k++) {
        size_t off, n;

        gp_copy_wait_piece(&run, k);
        gp_copy_piece_range(&run, k, &off, &n);
        assert_memory_equal(dst + 32 + off, src + off, n);   /* piece k is there once waited for */
    }
    gp_copy_finish(cr, &run);
    gp_copy_finish(cr, &run);   /* twice is harmless */
    assert_memory_equal(dst + 32, src, len);
    for (size_t i = 0; i < 32; i++) {
        assert_int_equal(dst[i], 0xEE);
        assert_int_equal(dst[32 + len + i], 0xEE);
    }
    free(src_mem);
    free(dst_mem);
}

static void test_sizes(void **state)
{
    static const size_t lens[] = { 0, 1, 15, 4096, 65536 + 7, 1u << 20, (3u << 20) + 123 };
    static const size_t pieces[] = { 0, 1000, 4096, 65536, 1u << 20 };
    gp_copy_crew cr;

    (void)state;
    for (int threads = 0; threads <= 3; threads += 3) {
        gp_copy_crew_init(&cr, threads);
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
            for (size_t j = 0; j < sizeof(pieces) / sizeof(pieces[0]); j++)
                if (pieces[j] == 0 || lens[i] / pieces[j] < 5000)
                    for (size_t skew = 0; skew < 32; skew += 7)
                        for (unsigned flags = 0; flags <= (GP_COPY_STREAMING | GP_COPY_NO_LINGER); flags++)
                            one_run(&cr, lens[i], pieces[j], (uint32_t)(i * 31 + j), skew, flags);
        gp_copy_crew_stop(&cr);
    }
}

/* Runs that send their helpers to sleep (GP_COPY_NO_LINGER) and runs that let them linger, in
 * turns, with pauses between them longer than a linger: each run is whole, and the crew's
 * finish waits out every helper a sleeping crew woke for it. */
static void test_no_linger(void **state)
{
    const size_t len = 4u << 20, piece = 65536;
    uint8_t *src = malloc(len), *dst = malloc(len);
    gp_copy_crew cr;

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    gp_copy_crew_init(&cr, 3);
    for (int i = 0; i < 12; i++) {
        const unsigned flags = i % 3 == 2 ? 0 : GP_COPY_NO_LINGER;
        const struct timespec pause = { 0, 2000000 };   /* past GP_COPY_LINGER_NS: asleep by now */
        gp_copy_run run;

        fill(src, len, (uint32_t)i + 77);
        memset(dst, 0, len);
        assert_int_equal(gp_copy_start(&cr, &run, dst, src, len, piece, flags), 1);
        gp_copy_finish(&cr, &run);
        assert_memory_equal(dst, src, len);
        nanosleep(&pause, NULL);
    }
    gp_copy_crew_stop(&cr);
    free(src);
    free(dst);
}

typedef struct {
    gp_copy_run *run;
    uint8_t *src;
    size_t fail_at;
    atomic_int asked;
} lazy_source;

/* The source's piece k appears only when asked for (as a GPU's copy back lands); one piece fails. */
static int lazy_ready(void *arg, size_t k)
{
    lazy_source *ls = arg;
    size_t off, n;

    atomic_fetch_add(&ls->asked, 1);
    if (k == ls->fail_at)
        return 0;
    gp_copy_piece_range(ls->run, k, &off, &n);
    fill(ls->src + off, n, (uint32_t)k + 7);
    return 1;
}

static void test_ready(void **state)
{
    const size_t len = (1u << 20) + 100, piece = 65536;
    uint8_t *src = calloc(1, len), *dst = malloc(len), *want = malloc(len);
    gp_copy_crew cr;

    (void)state;
    assert_true(src && dst && want);
    for (int threads = 0; threads <= 3; threads += 3) {
        for (size_t fail_at = 3; fail_at <= 1000; fail_at += 997) {   /* piece 3 fails; then none */
            gp_copy_run run;
            lazy_source ls = { &run, src, fail_at, 0 };
            size_t npieces = (len + piece - 1) / piece;

            gp_copy_crew_init(&cr, threads);
            memset(src, 0, len);
            memset(dst, 0xEE, len);
            assert_int_equal(gp_copy_start_when(&cr, &run, dst, src, len, piece, 0, lazy_ready, &ls), 1);
            assert_int_equal(gp_copy_finish(&cr, &run), fail_at >= npieces);
            assert_int_equal(atomic_load(&ls.asked), (int)npieces);
            for (size_t k = 0; k < npieces; k++) {
                size_t off = k * piece, n = k + 1 < npieces ? piece : len - off;

                fill(want + off, n, (uint32_t)k + 7);
                if (k == fail_at) {
                    for (size_t i = 0; i < n; i++)
                        assert_int_equal(dst[off + i], 0xEE);   /* a failed piece is not copied */
                } else {
                    assert_memory_equal(dst + off, want + off, n);
                }
            }
            gp_copy_crew_stop(&cr);
        }
    }
    free(src);
    free(dst);
    free(want);
}

typedef struct {
    gp_copy_crew *cr;
    int id;
} caller;

static void *caller_main(void *arg)
{
    caller *c = arg;

    for (int i = 0; i < 40; i++)
        one_run(c->cr, (size_t)(64 * 1024 + (c->id * 7919 + i * 104729) % (512 * 1024)), 16384,
                (uint32_t)(c->id * 1000 + i), (size_t)i % 16, (unsigned)i % 2 ? GP_COPY_STREAMING : 0);
    return NULL;
}

/* Several callers' runs at once share the crew; each gets its own bytes. */
static void test_many_callers(void **state)
{
    gp_copy_crew cr;
    pthread_t t[6];
    caller c[6];

    (void)state;
    gp_copy_crew_init(&cr, 2);
    for (int i = 0; i < 6; i++) {
        c[i] = (caller){ &cr, i };
        assert_int_equal(pthread_create(&t[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    gp_copy_crew_stop(&cr);
}

/* A child forked after the crew started has none of its threads: it starts its own. */
static void test_fork(void **state)
{
    gp_copy_crew cr;
    pid_t pid;
    int status = 0;

    (void)state;
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer cannot follow a child of a threaded parent that starts threads itself ("dup
     * thread with used id"): the plain and ASan builds run this case. */
    skip();
#endif
    gp_copy_crew_init(&cr, 2);
    one_run(&cr, 1u << 20, 65536, 1, 0, GP_COPY_STREAMING);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        one_run(&cr, 1u << 20, 65536, 2, 3, GP_COPY_STREAMING);
        gp_copy_crew_stop(&cr);
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    one_run(&cr, 1u << 20, 65536, 3, 0, 0);
    gp_copy_crew_stop(&cr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_no_linger),
        cmocka_unit_test(test_ready),
        cmocka_unit_test(test_many_callers),
        cmocka_unit_test(test_fork),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
