/* SPDX-License-Identifier: Apache-2.0 */
/* What machine the policy's numbers belong to: its CPU, the code class of its cores, its GPUs and their driver. */
#include <cpuid.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/base/base.h"
#include "batching/policy/internal.h"

/*
 * Everything here is read without opening CUDA (the driver's /proc files, cpuid): the policy asks
 * before the GPU is open, to decide whether a first message should wait for it.
 */

void gp_machine_cpu(char *out, size_t n)
{
    char line[512], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            snprintf(model, sizeof(model), "%s", colon + 1 + (colon[1] == ' '));
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    snprintf(out, n, "%s x%ld", model, gp_online_cpus());
}

/*
 * OPENSSL_ia32cap ("[~]A[:[~]B]", OPENSSL_ia32cap(3)) changes what the default provider's code
 * sees: A the CPUID.1 words, B the CPUID.7 words (EBX low, ECX high); `~` clears the bits named,
 * else the value replaces the word. Applied to the leaf-7 words, which name the wide code paths.
 */
static void apply_ia32cap(uint32_t *ebx7, uint32_t *ecx7)
{
    const char *env = getenv("OPENSSL_ia32cap");
    const char *b;
    unsigned long long v;
    char *end;
    int clear;

    if (env == NULL || (b = strchr(env, ':')) == NULL)
        return;
    b++;
    clear = *b == '~';
    errno = 0;
    v = strtoull(b + clear, &end, 0);
    if (errno != 0 || end == b + clear)
        return;
    if (clear) {
        *ebx7 &= ~(uint32_t)v;
        *ecx7 &= ~(uint32_t)(v >> 32);
    } else {
        *ebx7 = (uint32_t)v;
        *ecx7 = (uint32_t)(v >> 32);
    }
}

const char *gp_machine_cpu_class(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned int a, b, c, d;
    uint32_t ebx7, ecx7;

    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
        return "other";
    ebx7 = b;
    ecx7 = c;
    apply_ia32cap(&ebx7, &ecx7);
    /* What OpenSSL 3's fastest AES-GCM and ChaCha20 paths need: AVX512F (CPUID.7:EBX bit 16),
     * AVX512VL (bit 31), AVX512BW (bit 30), VAES (ECX bit 9), VPCLMULQDQ (ECX bit 10); AVX2 is
     * EBX bit 5 (Intel SDM vol. 2A, CPUID leaf 07H). */
    if ((ebx7 & (1u << 16)) && (ebx7 & (1u << 30)) && (ebx7 & (1u << 31)) && (ecx7 & (1u << 9))
        && (ecx7 & (1u << 10)))
        return "vaes-avx512";
    if (ebx7 & (1u << 5))
        return "avx2";
#endif
    return "other";
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The driver's GPU directories, sorted (bus order); their number, at most `max`. */
static size_t gpu_dirs(char **names, size_t max)
{
    DIR *dp = opendir("/proc/driver/nvidia/gpus");
    struct dirent *d;
    size_t nn = 0;

    if (dp == NULL)
        return 0;
    while ((d = readdir(dp)) != NULL && nn < max)
        if (d->d_name[0] != '.' && (names[nn] = strdup(d->d_name)) != NULL)
            nn++;
    closedir(dp);
    qsort(names, nn, sizeof(names[0]), cmp_names);
    return nn;
}

/* The value of "Field:" in GPU `name`'s information file, into out; 0 if absent. */
static int gpu_field(const char *name, const char *field, char *out, size_t n)
{
    char path[512], line[256];
    const size_t flen = strlen(field);
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", name);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            const char *v = line + flen + 1;

            v += strspn(v, " \t");
            snprintf(out, n, "%s", v);
            out[strcspn(out, "\n")] = '\0';
            found = 1;
        }
    fclose(f);
    return found;
}

int gp_machine_gpus(char *out, size_t n)
{
    char *names[64];
    size_t nn = gpu_dirs(names, 64), used = 0;
    const char *vis = gp_settings_cuda_visible();

    out[0] = '\0';
    for (size_t i = 0; i < nn; i++) {
        static const char *const fields[] = { "Model", "GPU UUID", "Bus Location" };

        for (size_t k = 0; k < 3; k++) {
            char v[200];

            if (gpu_field(names[i], fields[k], v, sizeof(v)) && used < n)
                used += (size_t)snprintf(out + used, n - used, "%s%s: %s", used ? "; " : "", fields[k], v);
        }
        free(names[i]);
    }
    if (used == 0 || used >= n)
        return 0;
    snprintf(out + used, n - used, "; visible %s", vis != NULL ? vis : "all");
    return 1;
}

int gp_machine_gpu_model(gp_policy *p, char *out, size_t n)
{
    char *names[64], model[200];
    size_t nn;
    int same = 1;

#if GP_TEST_HOOKS
    if (p->knobs->test.gpu_model[0] != '\0') {
        snprintf(out, n, "%s", p->knobs->test.gpu_model);
        return 1;
    }
#else
    (void)p;
#endif
    nn = gpu_dirs(names, 64);
    out[0] = '\0';
    for (size_t i = 0; i < nn; i++) {
        if (!gpu_field(names[i], "Model", model, sizeof(model)))
            same = 0;
        else if (out[0] == '\0')
            snprintf(out, n, "%s", model);
        else if (strcmp(out, model) != 0)
            same = 0;
        free(names[i]);
    }
    return nn > 0 && same && out[0] != '\0';
}

void gp_machine_driver(char *out, size_t n)
{
    char line[512];
    FILE *f = fopen("/proc/driver/nvidia/version", "r");

    snprintf(out, n, "unknown");
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ..." : the first line */
    if (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *v = strstr(line, "Kernel Module");

        if (v != NULL) {
            v += strlen("Kernel Module");
            v += strspn(v, " \t");
            snprintf(out, n, "%.*s", (int)strcspn(v, " \t\n"), v);
        }
    }
    if (f != NULL)
        fclose(f);
}

int gp_machine_gpu_key(gp_policy *p, char *out, size_t n)
{
    char *names[64], uuid[200];
    size_t nn = gpu_dirs(names, 64), used = 0;
    const char *vis = gp_settings_cuda_visible();
    int any = 0;

    out[0] = '\0';
    /* Every GPU the driver reports, in bus order, then which of them CUDA may see and which the
     * executor takes: processes configured alike on a host count on the same GPUs. */
    for (size_t i = 0; i < nn; i++) {
        if (gpu_field(names[i], "GPU UUID", uuid, sizeof(uuid)) && used < n) {
            used += (size_t)snprintf(out + used, n - used, "%s,", uuid);
            any = 1;
        }
        free(names[i]);
    }
    if (!any || used >= n)
        return 0;
    snprintf(out + used, n - used, "visible %s; device %d", vis != NULL ? vis : "all", p->knobs->device);
    if (p->knobs->device != GP_DEVICE_ALL)
        return 1;
    /* device = all: the GPUs CUDA may see (a CUDA_VISIBLE_DEVICES list stops at its first entry
     * that names no GPU, as CUDA reads it; counted here by its entries, at most the driver's). */
    if (vis == NULL)
        return (int)nn;
    {
        size_t listed = vis[0] != '\0';

        for (const char *c = vis; *c != '\0'; c++)
            listed += *c == ',';
        return (int)(listed == 0 ? 0 : listed < nn ? listed : nn);
    }
}
