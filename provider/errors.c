/* SPDX-License-Identifier: Apache-2.0 */
/* Errors raised through the core, with gpuprov's reason strings. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include <openssl/err.h>

#include "errors.h"

/* Core functions: error raising is process-wide, so these are too. */
static OSSL_FUNC_core_new_error_fn *core_new_error;
static OSSL_FUNC_core_set_error_debug_fn *core_set_error_debug;
static OSSL_FUNC_core_vset_error_fn *core_vset_error;

/* The core packs a reason without a library into the library number it gave the provider, whose
 * strings are reason_strings below; that needs the handle of a live instance (any one: they all
 * serve the same table). Without one (more than GP_MAX_INSTANCES loaded), ERR_LIB_PROV is used
 * and the printed strings are OpenSSL's own PROV ones. */
#define GP_MAX_INSTANCES 16
static pthread_mutex_t instances_lock = PTHREAD_MUTEX_INITIALIZER;
static const OSSL_CORE_HANDLE *instances[GP_MAX_INSTANCES];
/* The first live one, kept apart so that raising an error takes no lock. */
static _Atomic(const OSSL_CORE_HANDLE *) raise_handle;

/* Under instances_lock, after a change to instances. */
static void raise_handle_update(void)
{
    const OSSL_CORE_HANDLE *h = NULL;

    for (int i = 0; i < GP_MAX_INSTANCES && h == NULL; i++)
        h = instances[i];
    atomic_store_explicit(&raise_handle, h, memory_order_release);
}

static void instance_add(const OSSL_CORE_HANDLE *handle)
{
    pthread_mutex_lock(&instances_lock);
    for (int i = 0; i < GP_MAX_INSTANCES; i++) {
        if (instances[i] == NULL) {
            instances[i] = handle;
            break;
        }
    }
    raise_handle_update();
    pthread_mutex_unlock(&instances_lock);
}

static void instance_remove(const OSSL_CORE_HANDLE *handle)
{
    pthread_mutex_lock(&instances_lock);
    for (int i = 0; i < GP_MAX_INSTANCES; i++)
        if (instances[i] == handle)
            instances[i] = NULL;
    raise_handle_update();
    pthread_mutex_unlock(&instances_lock);
}

void gp_raise(const char *file, int line, const char *func, int reason)
{
    const OSSL_CORE_HANDLE *handle = atomic_load_explicit(&raise_handle, memory_order_acquire);

    if (core_new_error == NULL)
        return;
    core_new_error(handle);
    core_set_error_debug(handle, file, line, func);
    core_vset_error(handle, handle != NULL ? (uint32_t)reason : ERR_PACK(ERR_LIB_PROV, 0, reason),
                    NULL, NULL);
}

/* A call of the core's vset_error with a format: its va_list needs a variadic frame. */
static void vset_error_data(const OSSL_CORE_HANDLE *handle, uint32_t reason, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    core_vset_error(handle, reason, fmt, ap);
    va_end(ap);
}

void gp_raise_pipe(const char *file, int line, const char *func, int reason, size_t pipe)
{
    const OSSL_CORE_HANDLE *handle = atomic_load_explicit(&raise_handle, memory_order_acquire);

    if (core_new_error == NULL)
        return;
    core_new_error(handle);
    core_set_error_debug(handle, file, line, func);
    vset_error_data(handle, handle != NULL ? (uint32_t)reason : ERR_PACK(ERR_LIB_PROV, 0, reason), "pipe %zu", pipe);
}

void gp_raise_pipes(const char *file, int line, const char *func, int reason, const size_t *pipes, size_t n)
{
    const OSSL_CORE_HANDLE *handle = atomic_load_explicit(&raise_handle, memory_order_acquire);
    char text[8 + 4 * 64];   /* "pipes " and up to EVP_MAX_PIPES numbers of at most two digits, ", " each */
    size_t len;

    if (core_new_error == NULL || n == 0)
        return;
    len = (size_t)snprintf(text, sizeof(text), n == 1 ? "pipe" : "pipes");
    for (size_t i = 0; i < n && len < sizeof(text); i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%zu", i == 0 ? " " : ", ", pipes[i]);
    core_new_error(handle);
    core_set_error_debug(handle, file, line, func);
    vset_error_data(handle, handle != NULL ? (uint32_t)reason : ERR_PACK(ERR_LIB_PROV, 0, reason), "%s", text);
}

static const OSSL_ITEM reason_strings[] = {
    { GP_R_INVALID_KEY_LENGTH, "invalid key length" },
    { GP_R_INVALID_IV_LENGTH, "invalid iv length" },
    { GP_R_INVALID_TAG_LENGTH, "invalid tag length" },
    { GP_R_TAG_NOT_AVAILABLE, "tag not available (encrypt final not done, or decrypting)" },
    { GP_R_TAG_NOT_NEEDED, "tag cannot be set when encrypting" },
    { GP_R_TAG_NOT_SET, "decrypt final without an expected tag" },
    { GP_R_TAG_MISMATCH, "tag verification failed" },
    { GP_R_NO_KEY_SET, "no key set" },
    { GP_R_NO_IV_SET, "no iv set" },
    { GP_R_MESSAGE_FINISHED, "message already finished: re-initialise with a new iv" },
    { GP_R_AAD_AFTER_DATA, "aad after data" },
    { GP_R_MESSAGE_TOO_LONG, "message exceeds the mode's limit for one iv" },
    { GP_R_LENGTH_TOO_LARGE, "length larger than INT_MAX" },
    { GP_R_OUTPUT_BUFFER_TOO_SMALL, "output buffer too small" },
    { GP_R_INVALID_TLS_AAD, "invalid tls aad" },
    { GP_R_INVALID_TLS_RECORD, "invalid tls record (too short or not in place)" },
    { GP_R_TOO_MANY_RECORDS, "too many records for one key" },
    { GP_R_INVALID_PARAMETER, "invalid parameter" },
    { GP_R_EXECUTOR_FAILURE, "executor failure" },
    { GP_R_RANDOM_FAILURE, "random generator failure" },
    { GP_R_OUT_OF_MEMORY, "out of memory" },
    { GP_R_TLS_MODE, "operation not allowed in tls record mode" },
    { GP_R_INVALID_MEMORY_MODE, "gpuprov-memory must be \"host\" or \"device\"" },
    { GP_R_MEMORY_MODE_MID_MESSAGE, "gpuprov-memory cannot change in the middle of a message: re-initialise first" },
    { GP_R_NO_DEVICE_MEMORY_EXECUTOR, "device memory needs a usable GPU (cuda executor): none here, it failed, or backend is cpu or host" },
    { GP_R_NOT_DEVICE_MEMORY, "device mode: buffer is not CUDA device or managed memory (a host pointer, or a freed or foreign allocation)" },
    { GP_R_PAST_ALLOCATION_END, "device mode: length runs past the end of the buffer's CUDA allocation" },
    { GP_R_GPU_NOT_OPEN, "device mode: buffer is on a GPU gpuprov does not use (knob device)" },
    { GP_R_BUFFERS_ON_TWO_GPUS, "device mode: in and out are on different GPUs" },
    { GP_R_DEVICE_MEMORY_GPU_FAILURE, "device mode: the GPU failed, and device memory has no CPU fallback; the message stays where its last good update left it" },
    { GP_R_DEVICE_MEMORY_TLS, "device mode: tls record mode (TLS1_AAD, TLS1_IV_FIXED) is not available" },
    { GP_R_DEVICE_MEMORY_AAD, "device mode: AAD must be host memory (only the data updates' in and out are device memory)" },
    { GP_R_NEW_IV_NEEDED, "the key, iv length or direction changed in the middle of a message: set a new iv" },
    { GP_R_MESSAGE_IN_PROGRESS, "TLS1_IV_FIXED in the middle of a message: finish it or set a new iv first" },
    { GP_R_TLS_MAC_NOT_SUPPORTED, "tls mac-then-encrypt records (TLS_VERSION with TLS_MAC_SIZE) are not supported" },
    { GP_R_INVALID_STREAM, "gpuprov-cuda-stream must be an unsigned integer of 8 bytes or less (a cudaStream_t's value; 0: synchronous)" },
    { GP_R_STREAM_WITHOUT_DEVICE_MODE, "gpuprov-cuda-stream needs device mode: set gpuprov-memory = \"device\" first (or in the same call)" },
    { GP_R_STREAM_MID_MESSAGE, "gpuprov-cuda-stream cannot change in the middle of a message: re-initialise first" },
    { GP_R_NO_STREAM_EXECUTOR, "stream-ordered device mode needs the cuda executor (or the test build's host stand-in)" },
    { GP_R_BAD_STREAM, "stream-ordered device mode: the stream is not a CUDA stream of the GPU that holds the buffers" },
    { GP_R_PIPE_COUNT, "pipeline: numpipes must be 1 to 32 (EVP_MAX_PIPES)" },
    { GP_R_PIPE_COUNT_CHANGED, "pipeline: numpipes differs from the init's (OpenSSL 3.5's EVP_CipherPipeline*Init with a cipher on a context already initialised resets it: pass cipher NULL to initialise again)" },
    { GP_R_PIPE_NOT_INITIALISED, "pipeline call on a context not initialised for one (EVP_CipherPipelineEncryptInit or EVP_CipherPipelineDecryptInit)" },
    { GP_R_PIPE_CONTEXT, "context initialised for a pipeline: use the pipeline calls, or initialise it again" },
    { GP_R_PIPE_NULL_ARRAY, "pipeline: an array argument is NULL" },
    { GP_R_PIPE_NULL_BUFFER, "pipeline: a pipe's buffer is NULL" },
    { GP_R_PIPE_MIXED_MEMORY, "pipeline: host and device buffers mixed in one call (device mode takes CUDA memory in every pipe)" },
    { GP_R_PIPE_NO_AAD, "pipeline: an update with out == NULL passes AAD, which only AEAD ciphers take" },
    { GP_R_PIPE_FAILED, "pipeline: the pipe failed earlier in this message: initialise the pipeline again" },
    { 0, NULL }
};

int gp_errors_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in)
{
    for (const OSSL_DISPATCH *f = in; f->function_id != 0; f++) {
        switch (f->function_id) {
        case OSSL_FUNC_CORE_NEW_ERROR:
            core_new_error = OSSL_FUNC_core_new_error(f);
            break;
        case OSSL_FUNC_CORE_SET_ERROR_DEBUG:
            core_set_error_debug = OSSL_FUNC_core_set_error_debug(f);
            break;
        case OSSL_FUNC_CORE_VSET_ERROR:
            core_vset_error = OSSL_FUNC_core_vset_error(f);
            break;
        default:
            break;
        }
    }
    if (core_new_error == NULL || core_set_error_debug == NULL || core_vset_error == NULL)
        return 0;
    instance_add(handle);
    return 1;
}

void gp_errors_release(const OSSL_CORE_HANDLE *handle)
{
    instance_remove(handle);
}

const OSSL_ITEM *gp_reason_strings(void)
{
    return reason_strings;
}

void gp_raise_update_refused(size_t outsize, size_t inl)
{
    if (inl > INT_MAX)
        GP_RAISE(GP_R_LENGTH_TOO_LARGE);
    else if (outsize < inl)
        GP_RAISE(GP_R_OUTPUT_BUFFER_TOO_SMALL);
}
