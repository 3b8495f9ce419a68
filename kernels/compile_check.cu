/* SPDX-License-Identifier: Apache-2.0 */
/* Device build of the kernel headers: proves nvcc compiles the same code the host executor runs. */
#include "msg_unit.h"

/*
 * One thread per message, each running its requests' unit function. The cuda executor (the GPU
 * engine issue) replaces this with the batched launch; until then CI builds it so the shared kernel
 * code keeps compiling as CUDA C++ for every target architecture.
 */
extern "C" __global__ void gp_compile_check_kernel(gp_msg_state *states, const gp_key_sched *keys,
                                                   const uint8_t *in, uint8_t *out,
                                                   const size_t *lens, unsigned int nmsg)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < nmsg)
        gp_msg_run(&states[i], &keys[i], GP_OP_ENCRYPT, in, out, lens[i]);
}
