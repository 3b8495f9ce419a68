/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmarks' CUDA runtime calls: one that fails prints the program, the call and the error, and exits. */
#ifndef GP_BENCH_CUDA_CHECK_H
#define GP_BENCH_CUDA_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        cudaError_t err_ = (call);                                                                  \
        if (err_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, #call,                   \
                    cudaGetErrorString(err_));                                                      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#endif
