/* SPDX-License-Identifier: Apache-2.0 */
/* Prints how many GPUs the CUDA runtime sees (CUDA_VISIBLE_DEVICES applied): 0 where it sees none. */
#include <stdio.h>

#include <cuda_runtime_api.h>

int main(void)
{
    int n = 0;

    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    printf("%d\n", n);
    return 0;
}
