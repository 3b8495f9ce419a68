/* SPDX-License-Identifier: Apache-2.0 */
/* gpuprov's reason codes and how provider code raises them. */
#ifndef GP_ERRORS_H
#define GP_ERRORS_H

#include <stddef.h>

#include <openssl/core.h>
#include <openssl/core_dispatch.h>
#include <openssl/crypto.h>

/* Reason codes; their strings are served through OSSL_FUNC_PROVIDER_GET_REASON_STRINGS. */
enum gp_reason {
    GP_R_INVALID_KEY_LENGTH = 100,
    GP_R_INVALID_IV_LENGTH,
    GP_R_INVALID_TAG_LENGTH,
    GP_R_TAG_NOT_AVAILABLE,
    GP_R_TAG_NOT_NEEDED,
    GP_R_TAG_NOT_SET,
    GP_R_TAG_MISMATCH,
    GP_R_NO_KEY_SET,
    GP_R_NO_IV_SET,
    GP_R_MESSAGE_FINISHED,
    GP_R_AAD_AFTER_DATA,
    GP_R_MESSAGE_TOO_LONG,
    GP_R_LENGTH_TOO_LARGE,
    GP_R_OUTPUT_BUFFER_TOO_SMALL,
    GP_R_INVALID_TLS_AAD,
    GP_R_INVALID_TLS_RECORD,
    GP_R_TOO_MANY_RECORDS,
    GP_R_INVALID_PARAMETER,
    GP_R_EXECUTOR_FAILURE,
    GP_R_RANDOM_FAILURE,
    GP_R_OUT_OF_MEMORY,
    GP_R_TLS_MODE,
    GP_R_INVALID_MEMORY_MODE,
    GP_R_MEMORY_MODE_MID_MESSAGE,
    GP_R_NO_DEVICE_MEMORY_EXECUTOR,
    GP_R_NOT_DEVICE_MEMORY,
    GP_R_PAST_ALLOCATION_END,
    GP_R_GPU_NOT_OPEN,
    GP_R_BUFFERS_ON_TWO_GPUS,
    GP_R_DEVICE_MEMORY_GPU_FAILURE,
    GP_R_DEVICE_MEMORY_TLS,
    GP_R_DEVICE_MEMORY_AAD,
    GP_R_NEW_IV_NEEDED,
    GP_R_MESSAGE_IN_PROGRESS,
    GP_R_TLS_MAC_NOT_SUPPORTED,
    GP_R_INVALID_STREAM,
    GP_R_STREAM_WITHOUT_DEVICE_MODE,
    GP_R_STREAM_MID_MESSAGE,
    GP_R_NO_STREAM_EXECUTOR,
    GP_R_BAD_STREAM,
    GP_R_PIPE_COUNT,
    GP_R_PIPE_COUNT_CHANGED,
    GP_R_PIPE_NOT_INITIALISED,
    GP_R_PIPE_CONTEXT,
    GP_R_PIPE_NULL_ARRAY,
    GP_R_PIPE_NULL_BUFFER,
    GP_R_PIPE_MIXED_MEMORY,
    GP_R_PIPE_NO_AAD,
    GP_R_PIPE_FAILED,
};

/* Raise an error through the core, with file/line/function, as ERR_raise does in OpenSSL. */
void gp_raise(const char *file, int line, const char *func, int reason);
#define GP_RAISE(reason) gp_raise(OPENSSL_FILE, OPENSSL_LINE, OPENSSL_FUNC, (reason))

/* The same, with the error's data naming pipe `pipe` of a pipeline call ("pipe 3"). */
void gp_raise_pipe(const char *file, int line, const char *func, int reason, size_t pipe);
#define GP_RAISE_PIPE(reason, pipe) gp_raise_pipe(OPENSSL_FILE, OPENSSL_LINE, OPENSSL_FUNC, (reason), (pipe))

/* One error for several pipes of a pipeline call that failed alike, its data naming them all
 * ("pipe 3", "pipes 0, 5, 17"): OpenSSL's error queue keeps only its last 16 entries. */
void gp_raise_pipes(const char *file, int line, const char *func, int reason, const size_t *pipes, size_t n);
#define GP_RAISE_PIPES(reason, pipes, n) gp_raise_pipes(OPENSSL_FILE, OPENSSL_LINE, OPENSSL_FUNC, (reason), (pipes), (n))

/* The error of an update refused for its lengths (over INT_MAX, or more than the output holds). */
void gp_raise_update_refused(size_t outsize, size_t inl);

/* At provider init: take the core's error functions from `in` and let `handle` raise; 0 if the
 * core lacks them. At teardown, gp_errors_release(handle). */
int gp_errors_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in);
void gp_errors_release(const OSSL_CORE_HANDLE *handle);
/* The reason strings (OSSL_FUNC_PROVIDER_GET_REASON_STRINGS). */
const OSSL_ITEM *gp_reason_strings(void);

#endif
