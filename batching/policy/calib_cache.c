/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid policy's measurements persisted between processes, keyed by GPU, CPU, build and OpenSSL. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "batching/base/base.h"
#include "batching/policy/internal.h"

#ifndef GPUPROV_VERSION
# define GPUPROV_VERSION "unknown"
#endif

/*
 * Why: a process measures the policy in its warm-up, after the GPU opens, and a message is routed
 * at its first data request; a process whose every message starts before that (each job of
 * `openssl speed` streams one message) would keep all of them on the CPU. With the numbers of an
 * earlier process on the same machine the first message is routed as a measured one would be.
 *
 * What may be reused: numbers measured with the same GPU(s), CPU, gpuprov build, OpenSSL and the
 * knobs that shape the GPU path (device, streams). All of them are in the key, which the file
 * holds in full (its name carries only the key's hash); a file whose key differs, that is not a
 * regular file of this user, that fails any range check, or whose entry is older than
 * GP_CALIB_MAX_AGE_S is ignored, and the policy measures again and rewrites it. Nothing read from
 * the file can do more than set numbers a measurement could have set (each is range-checked).
 * Writing is a temp file renamed over the old one (rename(2) is atomic within a directory), so a
 * reader sees a whole file or the previous one; any failure to write is silent.
 */

/* Measurements older than this are measured again (a driver or firmware update, a changed BIOS
 * setting, a card that moved: none of them changes the key). */
#define GP_CALIB_MAX_AGE_S (7 * 24 * 3600)
/* A file longer than this is no cache of ours. */
#define GP_CALIB_MAX_FILE 8192
#define GP_CALIB_MAGIC "gpuprov-calibration 1"

/* The ELF build id of the object holding this code: every rebuild of gpuprov changes it. */
typedef struct build_id_find {
    const void *addr;
    char hex[2 * 40 + 1];
} build_id_find;

static int build_id_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    build_id_find *f = arg;
    uintptr_t a = (uintptr_t)f->addr;
    int mine = 0;

    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

        if (ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz)
            mine = 1;
    }
    if (!mine)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uint8_t *p, *end;

        if (ph->p_type != PT_NOTE)
            continue;
        p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        end = p + ph->p_memsz;
        while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const size_t name_room = ((size_t)n->n_namesz + 3) & ~(size_t)3;
            const uint8_t *desc;

            /* ELF notes: header, name and descriptor, each padded to 4 bytes (gABI, "Note Section") */
            if ((size_t)(end - p) - sizeof(*n) < name_room
                || (size_t)(end - p) - sizeof(*n) - name_room < n->n_descsz)
                break;
            desc = p + sizeof(*n) + name_room;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_descsz > 0 && n->n_descsz <= 40) {
                for (size_t j = 0; j < n->n_descsz; j++)
                    snprintf(f->hex + 2 * j, 3, "%02x", desc[j]);
                return 1;
            }
            if ((size_t)(end - desc) < (((size_t)n->n_descsz + 3) & ~(size_t)3))
                break;
            p = desc + (((size_t)n->n_descsz + 3) & ~(size_t)3);
        }
    }
    return 1;
}

/* Replace what could break the file's line format (the key is one line of printable text). */
static void printable(char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            *s = '_';
}

/* The CPU: /proc/cpuinfo's first "model name" and the CPUs online. */
static void cpu_identity(char *out, size_t n)
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

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The GPUs the driver reports (/proc/driver/nvidia/gpus/<bus>/information: model, UUID, bus), in
 * bus order, and CUDA_VISIBLE_DEVICES, which picks among them: known before the GPU is opened,
 * which the decision to wait for it needs. 0 when the driver shows none (no cache then).
 */
static int gpu_identity(char *out, size_t n)
{
    static const char dir[] = "/proc/driver/nvidia/gpus";
    char *names[64];
    size_t nn = 0, used = 0;
    struct dirent *d;
    DIR *dp = opendir(dir);
    const char *vis = gp_settings_cuda_visible();

    if (dp == NULL)
        return 0;
    while ((d = readdir(dp)) != NULL && nn < 64)
        if (d->d_name[0] != '.' && (names[nn] = strdup(d->d_name)) != NULL)
            nn++;
    closedir(dp);
    qsort(names, nn, sizeof(names[0]), cmp_names);
    out[0] = '\0';
    for (size_t i = 0; i < nn; i++) {
        char path[512], line[256];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s/information", dir, names[i]);
        if ((f = fopen(path, "r")) != NULL) {
            while (fgets(line, sizeof(line), f) != NULL)
                if (strncmp(line, "Model:", 6) == 0 || strncmp(line, "GPU UUID:", 9) == 0
                    || strncmp(line, "Bus Location:", 13) == 0) {
                    line[strcspn(line, "\n")] = '\0';
                    if (used < n)
                        used += (size_t)snprintf(out + used, n - used, "%s%s", used ? "; " : "", line);
                }
            fclose(f);
        }
        free(names[i]);
    }
    if (used == 0 || used >= n)
        return 0;
    snprintf(out + used, n - used, "; visible %s", vis != NULL ? vis : "all");
    return 1;
}

/* The key of the numbers this process would measure with `gpu`; 0 when it cannot be known. */
static int cache_key(gp_policy *p, const gp_executor *gpu, char *out, size_t n)
{
    build_id_find b = { .addr = (const void *)cache_key, .hex = "none" };
    char cpu[320], g[1024];
    int len;

    if (gpu == p->ops->host)
        snprintf(g, sizeof(g), "the host executor (threads %d)", p->knobs->host_threads);
    else if (!gpu_identity(g, sizeof(g)))
        return 0;
    (void)dl_iterate_phdr(build_id_cb, &b);
    cpu_identity(cpu, sizeof(cpu));
    len = snprintf(out, n, "gpuprov %s build %s; %s; cpu %s; gpu %s; device %d streams %d",
                   GPUPROV_VERSION, b.hex, OpenSSL_version(OPENSSL_VERSION), cpu, g, p->knobs->device,
                   p->knobs->streams);
    if (len < 0 || (size_t)len >= n)
        return 0;
    printable(out);
    return 1;
}

/* 64-bit FNV-1a: the file's name only (the file holds the whole key). */
static uint64_t key_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* The cache directory per the knob calib_cache; 0 when it is off or unknown. */
static int cache_dir(gp_policy *p, char *out, size_t n)
{
    const char *knob = p->knobs->calib_cache;
    int len;

    if (strcmp(knob, "off") == 0)
        return 0;
    if (knob[0] != '/')
        return gp_settings_user_cache_dir(out, n);
    len = snprintf(out, n, "%s", knob);
    return len > 0 && (size_t)len < n;
}

int gp_calib_cache_file(gp_policy *p, const gp_executor *gpu, char *path, size_t n, char *key, size_t keyn)
{
    char dir[512];
    int len;

    if (!cache_dir(p, dir, sizeof(dir)) || !cache_key(p, gpu, key, keyn))
        return 0;
    len = snprintf(path, n, "%s/calib-%016llx.txt", dir, (unsigned long long)key_hash(key));
    return len > 0 && (size_t)len < n;
}

/* Is v a finite number in (lo, hi]? */
static int in_range(double v, double lo, double hi)
{
    return isfinite(v) && v > lo && v <= hi;
}

/* "never" or a byte count up to 2^40 (the knobs' range). */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v;

    if (strcmp(s, "never") == 0) {
        *out = GP_KNOB_CALIBRATE;
        return 1;
    }
    if (s[0] < '0' || s[0] > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > (1ull << 40))
        return 0;
    *out = (size_t)v;
    return 1;
}

/* One "alg" line into out[alg]; 0 when anything in it is out of range, or the alg repeats. */
static int parse_alg_line(const char *line, gp_calib_numbers out[5], time_t now)
{
    unsigned alg, keylen;
    long long at;
    double cpu, gpu, rt, share;
    char mn[32], lone[32];
    int used = -1;
    gp_calib_numbers c = { 0 };

    if (sscanf(line, "alg %u keylen %u at %lld cpu_gbps %lf gpu_gbps %lf rt_us %lf min_gpu_bytes %31s "
                     "lone_gpu_bytes %31s gpu_share %lf%n", &alg, &keylen, &at, &cpu, &gpu, &rt, mn, lone,
               &share, &used) != 9 || used < 0 || line[used] != '\0')
        return 0;
    if (alg < 1 || alg > 4 || out[alg].have || !(keylen == 16 || keylen == 24 || keylen == 32))
        return 0;
    /* Rates a PCIe link or a core could reach, a round trip under 10 s, a share in [0, 1]. */
    if (!in_range(cpu, 0, 1e4) || !in_range(gpu, 0, 1e4) || !in_range(rt, 0, 1e7)
        || !isfinite(share) || share < 0 || share > 1)
        return 0;
    if (!parse_size(mn, &c.min_gpu_bytes) || !parse_size(lone, &c.lone_gpu_bytes))
        return 0;
    /* Measured within the age limit, and not in the future (a clock set back: measure again). */
    if (at <= 0 || (long long)now < at || (long long)now - at > GP_CALIB_MAX_AGE_S)
        return 0;
    c.have = 1;
    c.keylen = keylen;
    c.at = at;
    c.cpu_gbps = cpu;
    c.gpu_gbps = gpu;
    c.gpu_rt_us = rt;
    c.gpu_share = share;
    out[alg] = c;
    return 1;
}

int gp_calib_cache_read(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5])
{
    char path[1024], key[2048], buf[GP_CALIB_MAX_FILE + 1], *line, *next;
    gp_calib_numbers got[5] = { 0 };
    struct stat st;
    ssize_t len;
    int fd, n = 0, ended = 0;
    time_t now = time(NULL);

    memset(out, 0, 5 * sizeof(out[0]));
    if (!gp_calib_cache_file(p, gpu, path, sizeof(path), key, sizeof(key)))
        return 0;
    if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return 0;
    /* Only a regular file this user owns (a directory others may write must not steer routing). */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_size > GP_CALIB_MAX_FILE) {
        close(fd);
        return 0;
    }
    len = read(fd, buf, GP_CALIB_MAX_FILE + 1);
    close(fd);
    if (len <= 0 || len > GP_CALIB_MAX_FILE || memchr(buf, '\0', (size_t)len) != NULL)
        return 0;
    buf[len] = '\0';
    for (line = buf, n = 0; line != NULL && *line != '\0'; line = next, n++) {
        if ((next = strchr(line, '\n')) == NULL)
            return 0;   /* every line ends: a cut-off file is no file */
        *next++ = '\0';
        if (ended)
            return 0;   /* nothing after "end" */
        if (n == 0) {
            if (strcmp(line, GP_CALIB_MAGIC) != 0)
                return 0;
        } else if (n == 1) {
            if (strncmp(line, "key ", 4) != 0 || strcmp(line + 4, key) != 0)
                return 0;
        } else if (strcmp(line, "end") == 0) {
            ended = 1;
        } else if (!parse_alg_line(line, got, now)) {
            return 0;
        }
    }
    if (!ended)
        return 0;
    n = 0;
    for (int a = 1; a < 5; a++)
        n += got[a].have;
    memcpy(out, got, sizeof(got));
    return n;
}

static void put_size(char *buf, size_t n, size_t v)
{
    if (v == GP_KNOB_CALIBRATE)
        snprintf(buf, n, "never");
    else
        snprintf(buf, n, "%zu", v);
}

/* mkdir -p for the cache directory (mode 0700: measurements are nobody else's business). */
static int make_dirs(const char *dir)
{
    char p[512];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(p))
        return 0;
    memcpy(p, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        p[i] = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return 0;
        p[i] = dir[i];
    }
    return 1;
}

int gp_calib_cache_write(gp_policy *p, const gp_executor *gpu, const gp_calib_numbers in[5])
{
    char path[1024], key[2048], tmp[1100], *slash;
    FILE *f;
    int fd, ok;

    if (!gp_calib_cache_file(p, gpu, path, sizeof(path), key, sizeof(key)))
        return 0;
    slash = strrchr(path, '/');
    *slash = '\0';
    ok = make_dirs(path);
    *slash = '/';
    if (!ok)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    (void)unlink(tmp);   /* left by an earlier process with this pid that died writing */
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
        return 0;
    if ((f = fdopen(fd, "w")) == NULL) {
        close(fd);
        unlink(tmp);
        return 0;
    }
    fprintf(f, "%s\nkey %s\n", GP_CALIB_MAGIC, key);
    for (int a = 1; a < 5; a++) {
        char mn[32], lone[32];

        if (!in[a].have)
            continue;
        put_size(mn, sizeof(mn), in[a].min_gpu_bytes);
        put_size(lone, sizeof(lone), in[a].lone_gpu_bytes);
        /* %.17g: a double read back is the double written */
        fprintf(f, "alg %d keylen %zu at %lld cpu_gbps %.17g gpu_gbps %.17g rt_us %.17g min_gpu_bytes %s "
                "lone_gpu_bytes %s gpu_share %.17g\n", a, in[a].keylen, (long long)in[a].at, in[a].cpu_gbps,
                in[a].gpu_gbps, in[a].gpu_rt_us, mn, lone, in[a].gpu_share);
    }
    fprintf(f, "end\n");
    ok = fflush(f) == 0 && !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return 0;
    }
    return 1;
}
