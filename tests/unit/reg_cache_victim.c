/* SPDX-License-Identifier: Apache-2.0 */
/* A library test_reg_cache dlopens after the cache opened: its calls must pass through the hooks too. */
#include <stdlib.h>
#include <sys/mman.h>

int victim_munmap(void *p, size_t len);
void *victim_malloc(size_t n);
void victim_free(void *p);

__attribute__((visibility("default"))) int victim_munmap(void *p, size_t len)
{
    return munmap(p, len);
}

__attribute__((visibility("default"))) void *victim_malloc(size_t n)
{
    return malloc(n);
}

__attribute__((visibility("default"))) void victim_free(void *p)
{
    free(p);
}
