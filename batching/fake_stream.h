/* SPDX-License-Identifier: Apache-2.0 */
/* Test builds: a stand-in for a CUDA stream, a FIFO of work that one host thread runs in order (fake_stream.c). */
#ifndef GP_FAKE_STREAM_H
#define GP_FAKE_STREAM_H

#include <stdint.h>

/*
 * The host executor's stand-in for stream-ordered device mode (batching/exec_host.c, test hook
 * host_devmem) queues its work on these, as the cuda executor would on a cudaStream_t: the suites
 * make them with gpuprov_test_stream_new (exported by the test module alone,
 * provider/test-module/gpuprov-test.map) and hand gpuprov the pointer's value as the stream. A
 * stream's items run one after another on its own thread, in the order they were queued, the
 * suites' own items ("the caller's earlier work") among them.
 */
typedef struct gp_fake_stream gp_fake_stream;
typedef void gp_fake_work(void *arg);

/* The live stream whose handle is `handle`, or NULL (not one made here, or freed). */
gp_fake_stream *gp_fake_stream_find(uint64_t handle);
/* Queue fn(arg) after everything queued before; 0: out of memory (nothing queued). */
int gp_fake_stream_enqueue(gp_fake_stream *s, gp_fake_work *fn, void *arg);

/* The suites' face (exported by the test module). hold != 0: the stream's thread runs nothing
 * until it is released (so that a suite sees a call return before its work ran). */
__attribute__((visibility("default"))) void *gpuprov_test_stream_new(void);
__attribute__((visibility("default"))) void gpuprov_test_stream_free(void *s);
__attribute__((visibility("default"))) void gpuprov_test_stream_sync(void *s);
__attribute__((visibility("default"))) void gpuprov_test_stream_hold(void *s, int hold);
__attribute__((visibility("default"))) int gpuprov_test_stream_enqueue(void *s, void (*fn)(void *), void *arg);

#endif
