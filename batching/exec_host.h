/* SPDX-License-Identifier: Apache-2.0 */
/* The host executor (exec_host.c): its worker pool, which the engine holds and stops. */
#ifndef GP_EXEC_HOST_H
#define GP_EXEC_HOST_H

#include "batching/host_pool.h"

/* Stop the pool's workers: gp_engine_free, whether or not the host executor was opened (the
 * messages that fall back to it from a failed executor run there without an opening). */
void gp_host_pool_stop(gp_host_pool *p);

#endif
