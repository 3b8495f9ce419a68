/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA fault schedule (batching/cuda_fault.h): which calls fail for each setting of the
 * GPUPROV_TEST_CUDA_FAULT_* hooks, and the call-site table the soak walks; no GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#define GP_CUDA_FAULT_TABLE_ONLY 1
#include "batching/cuda_fault.h"

static void arm_in(const char *file, const char *call, const char *line, const char *skip, const char *times,
                   const char *device)
{
    setenv("GPUPROV_TEST_CUDA_FAULT_CALL", call, 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_FILE", file, 1);   /* "": unset, every file */
    setenv("GPUPROV_TEST_CUDA_FAULT_LINE", line, 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_SKIP", skip, 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_TIMES", times, 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_DEVICE", device, 1);
    unsetenv("GPUPROV_TEST_CUDA_FAULT_AT_MS");
    gp_cuda_fault_arm();
}

static void arm(const char *call, const char *line, const char *skip, const char *times, const char *device)
{
    arm_in("", call, line, skip, times, device);
}

/* How many of n calls at (file, line, call, device) fail, and which was the first (-1: none). */
static int fails_in(const char *file, int n, int line, int call, int device, int *first)
{
    int k = 0;

    *first = -1;
    for (int i = 0; i < n; i++)
        if (gp_cuda_fault_hit(file, line, call, device)) {
            if (k++ == 0)
                *first = i;
        }
    return k;
}

static int fails(int n, int line, int call, int device, int *first)
{
    return fails_in("../batching/cuda/device.c", n, line, call, device, first);
}

static void test_none_fails_nothing(void **state)
{
    int first;

    (void)state;
    arm("none", "0", "0", "1", "any");
    assert_int_equal(fails(100, 10, GP_CF_MALLOC, 0, &first), 0);
    assert_false(gp_cuda_fault_by_device());
}

static void test_skip_then_times(void **state)
{
    int first;

    (void)state;
    arm("cudaMalloc", "0", "5", "2", "any");
    assert_int_equal(fails(20, 11, GP_CF_MALLOC, 0, &first), 2);
    assert_int_equal(first, 5);
    /* Other calls never match. */
    assert_int_equal(fails(20, 12, GP_CF_HOST_ALLOC, 0, &first), 0);
}

static void test_line_selects_one_site(void **state)
{
    int first;

    (void)state;
    arm("cudaMalloc", "21", "0", "1", "any");
    assert_int_equal(fails(10, 20, GP_CF_MALLOC, 0, &first), 0);
    assert_int_equal(fails(10, 21, GP_CF_MALLOC, 0, &first), 1);
    assert_int_equal(first, 0);
}

/* A site is a file and a line: the file's name (a path's last part) selects among files with a
 * call on the same line. */
static void test_file_selects_one_site(void **state)
{
    int first;

    (void)state;
    arm_in("plan.c", "cudaMalloc", "21", "0", "0", "any");
    assert_int_equal(fails_in("../batching/cuda/device.c", 10, 21, GP_CF_MALLOC, 0, &first), 0);
    assert_int_equal(fails_in("../batching/cuda/plan.c", 10, 21, GP_CF_MALLOC, 0, &first), 10);
    assert_int_equal(fails_in("plan.c", 10, 21, GP_CF_MALLOC, 0, &first), 10);
    /* the file alone: every line of it */
    arm_in("plan.c", "cudaMalloc", "0", "0", "0", "any");
    assert_int_equal(fails_in("/src/batching/cuda/plan.c", 10, 99, GP_CF_MALLOC, 0, &first), 10);
    assert_int_equal(fails_in("/src/batching/cuda/device.c", 10, 99, GP_CF_MALLOC, 0, &first), 0);
}

/* times 0: every matching call from the skip on (the GPU taken away), whatever the call. */
static void test_any_from_then_on(void **state)
{
    int first;

    (void)state;
    arm("any", "0", "3", "0", "any");
    assert_int_equal(fails(3, 30, GP_CF_SET_DEVICE, 0, &first), 0);
    assert_int_equal(fails(10, 31, GP_CF_LAUNCH_KERNEL, 0, &first), 10);
    assert_int_equal(fails(10, 32, GP_CF_EVENT_QUERY, 0, &first), 10);
}

static void test_device_filter(void **state)
{
    int first;

    (void)state;
    arm("any", "0", "0", "0", "1");
    assert_true(gp_cuda_fault_by_device());
    assert_int_equal(fails(10, 40, GP_CF_LAUNCH_KERNEL, 0, &first), 0);
    assert_int_equal(fails(10, 40, GP_CF_LAUNCH_KERNEL, 1, &first), 10);
}

/* at_ms: calls before that time after the arming neither fail nor count towards the skip (a fault
 * mid-run, whatever the rate of calls); from then on the schedule runs as usual. */
static void test_at_ms(void **state)
{
    const struct timespec pause = { 0, 80 * 1000 * 1000 };
    int first;

    (void)state;
    setenv("GPUPROV_TEST_CUDA_FAULT_CALL", "any", 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_LINE", "0", 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_SKIP", "2", 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_TIMES", "0", 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_DEVICE", "any", 1);
    setenv("GPUPROV_TEST_CUDA_FAULT_AT_MS", "50", 1);
    gp_cuda_fault_arm();
    assert_int_equal(fails(20, 45, GP_CF_MEMCPY_ASYNC, 0, &first), 0);
    nanosleep(&pause, NULL);
    assert_int_equal(fails(10, 45, GP_CF_MEMCPY_ASYNC, 0, &first), 8);
    assert_int_equal(first, 2);
    unsetenv("GPUPROV_TEST_CUDA_FAULT_AT_MS");
}

/* Arming again starts the count anew (each opening of the executor reads the variables). */
static void test_rearm_restarts(void **state)
{
    int first;

    (void)state;
    arm("cudaEventRecord", "0", "2", "1", "any");
    assert_int_equal(fails(5, 50, GP_CF_EVENT_RECORD, 0, &first), 1);
    assert_int_equal(first, 2);
    gp_cuda_fault_arm();
    assert_int_equal(fails(5, 50, GP_CF_EVENT_RECORD, 0, &first), 1);
    assert_int_equal(first, 2);
}

/* The table counts calls and faults per (file, line, call), across armings; a site names its file
 * without the folder. */
static void test_site_table(void **state)
{
    gp_cuda_fault_site t[256];
    size_t n;
    int first, seen = 0;

    (void)state;
    arm("cudaStreamSynchronize", "60", "0", "3", "any");
    (void)fails(4, 60, GP_CF_STREAM_SYNCHRONIZE, 0, &first);
    n = gp_test_cuda_fault_sites(t, 256);
    assert_true(n > 0 && n <= 256);
    for (size_t i = 0; i < n; i++) {
        if (t[i].line != 60)
            continue;
        seen = 1;
        assert_string_equal(t[i].file, "device.c");
        assert_int_equal(t[i].call, GP_CF_STREAM_SYNCHRONIZE);
        assert_string_equal(t[i].name, "cudaStreamSynchronize");
        assert_int_equal(t[i].calls, 4);
        assert_int_equal(t[i].faults, 3);
    }
    assert_true(seen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_fails_nothing),
        cmocka_unit_test(test_skip_then_times),
        cmocka_unit_test(test_line_selects_one_site),
        cmocka_unit_test(test_file_selects_one_site),
        cmocka_unit_test(test_any_from_then_on),
        cmocka_unit_test(test_device_filter),
        cmocka_unit_test(test_at_ms),
        cmocka_unit_test(test_rearm_restarts),
        cmocka_unit_test(test_site_table),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
