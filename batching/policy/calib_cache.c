/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid policy's measurements persisted between processes, keyed by GPU, driver, CPU, build and OpenSSL. */
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
 * What may be reused: numbers measured with the same GPU(s) and driver, CPU and cores' code class,
 * gpuprov build, OpenSSL and the knobs that shape the GPU path (device, streams). All of them are
 * in the key, which the file holds in full (its name carries only the key's hash); a file whose key
 * differs, whose writer is not trusted (trusted()), that fails any range check, or whose entry is
 * older than GP_CALIB_MAX_AGE_S (the user's own) is ignored, and the policy measures again and
 * rewrites the user's. The machine's file (gpuprov-calibrate --system) is read where the user's has
 * no entry for an algorithm, and only ever written by that tool. Nothing read from
 * the file can do more than set numbers a measurement could have set (each is range-checked).
 * Writing is a temp file renamed over the old one (rename(2) is atomic within a directory), so a
 * reader sees a whole file or the previous one; any failure to write is silent.
 */

/* Measurements older than this are measured again (a firmware update, a changed BIOS
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

/* The key of the numbers this process would measure with `gpu`; 0 when it cannot be known. The
 * driver's version and the cores' code class (which OPENSSL_ia32cap may narrow) are in it: either
 * changes what a measurement finds. */
static int cache_key(gp_policy *p, const gp_executor *gpu, char *out, size_t n)
{
    build_id_find b = { .addr = (const void *)cache_key, .hex = "none" };
    char cpu[320], g[1024], driver[64];
    int len;

    if (gpu == p->ops->host)
        snprintf(g, sizeof(g), "the host executor (threads %d)", p->knobs->host_threads);
    else if (!gp_machine_gpus(g, sizeof(g)))
        return 0;
    (void)dl_iterate_phdr(build_id_cb, &b);
    gp_machine_cpu(cpu, sizeof(cpu));
    gp_machine_driver(driver, sizeof(driver));
    len = snprintf(out, n, "gpuprov %s build %s; %s; cpu %s, code %s; gpu %s; driver %s; device %d streams %d",
                   GPUPROV_VERSION, b.hex, OpenSSL_version(OPENSSL_VERSION), cpu, gp_machine_cpu_class(), g,
                   driver, p->knobs->device, p->knobs->streams);
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

/* The directory of the user's cache (knob calib_cache) or the machine's (knob calib_system); 0
 * when it is off or unknown. */
static int cache_dir(gp_policy *p, gp_calib_where where, char *out, size_t n)
{
    const char *knob = where == GP_CALIB_SYSTEM ? p->knobs->calib_system : p->knobs->calib_cache;
    int len;

    if (strcmp(knob, "off") == 0)
        return 0;
    if (knob[0] != '/') {
        if (where == GP_CALIB_USER)
            return gp_settings_user_cache_dir(out, n);
        knob = GPUPROV_SYSTEM_CALIB_DIR;
    }
    len = snprintf(out, n, "%s", knob);
    return len > 0 && (size_t)len < n;
}

/* The machine's directory is the one being written (gpuprov-calibrate --system points the user's
 * cache at it): its files must be readable by every user. */
static int is_system_dir(gp_policy *p, const char *dir)
{
    char sys[512];

    return cache_dir(p, GP_CALIB_SYSTEM, sys, sizeof(sys)) && strcmp(sys, dir) == 0;
}

static int cache_file_in(gp_policy *p, const gp_executor *gpu, gp_calib_where where, char *path, size_t n,
                         char *key, size_t keyn)
{
    char dir[512];
    int len;

    if (!cache_dir(p, where, dir, sizeof(dir)) || !cache_key(p, gpu, key, keyn))
        return 0;
    len = snprintf(path, n, "%s/calib-%016llx.txt", dir, (unsigned long long)key_hash(key));
    return len > 0 && (size_t)len < n;
}

int gp_calib_cache_file(gp_policy *p, const gp_executor *gpu, char *path, size_t n, char *key, size_t keyn)
{
    return cache_file_in(p, gpu, GP_CALIB_USER, path, n, key, keyn);
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

/* One "alg" line into out[alg]; 0 when anything in it is out of range, older than max_age
 * seconds, or the alg repeats. */
static int parse_alg_line(const char *line, gp_calib_numbers out[5], time_t now, long long max_age)
{
    unsigned alg, keylen;
    long long at;
    double cpu, gpu, rt, share, batch = 0;
    char mn[32], lone[32];
    int used = -1, more = -1;
    gp_calib_numbers c = { 0 };

    if (sscanf(line, "alg %u keylen %u at %lld cpu_gbps %lf gpu_gbps %lf rt_us %lf min_gpu_bytes %31s "
                     "lone_gpu_bytes %31s gpu_share %lf%n", &alg, &keylen, &at, &cpu, &gpu, &rt, mn, lone,
               &share, &used) != 9 || used < 0)
        return 0;
    /* batch_gbps, last: absent from files written before it was measured (then not known). */
    if (line[used] != '\0'
        && (sscanf(line + used, " batch_gbps %lf%n", &batch, &more) != 1 || more < 0 || line[used + more] != '\0'
            || !isfinite(batch) || batch < 0 || batch > 1e4))   /* 0: not known */
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
    if (at <= 0 || (long long)now < at || (long long)now - at > max_age)
        return 0;
    c.have = 1;
    c.keylen = keylen;
    c.at = at;
    c.cpu_gbps = cpu;
    c.gpu_gbps = gpu;
    c.gpu_rt_us = rt;
    c.gpu_share = share;
    c.batch_gbps = batch;
    out[alg] = c;
    return 1;
}

/*
 * Who may have written a cache file the policy trusts: the user's own is this user's; the
 * machine's is root's or this user's, and neither it nor its directory may be writable by group
 * or others (anyone who could replace it could steer where this user's messages run).
 */
static int trusted(const struct stat *st, gp_calib_where where)
{
    if (where == GP_CALIB_USER)
        return st->st_uid == geteuid();
    return (st->st_uid == 0 || st->st_uid == geteuid()) && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

int gp_calib_cache_read_from(gp_policy *p, const gp_executor *gpu, gp_calib_where where, gp_calib_numbers out[5])
{
    char path[1024], key[2048], buf[GP_CALIB_MAX_FILE + 1], *line, *next;
    gp_calib_numbers got[5] = { 0 };
    struct stat st;
    ssize_t len;
    int fd, n = 0, ended = 0, ok_dir;
    time_t now = time(NULL);
    /* The user's cache is the policy's own measurement, redone after a while (driver or firmware
     * updates the key does not see); the machine's is an administrator's, kept until replaced. */
    const long long max_age = where == GP_CALIB_USER ? GP_CALIB_MAX_AGE_S : (long long)1 << 40;

    memset(out, 0, 5 * sizeof(out[0]));
    if (!cache_file_in(p, gpu, where, path, sizeof(path), key, sizeof(key)))
        return 0;
    if (where == GP_CALIB_SYSTEM) {
        char *slash = strrchr(path, '/');

        *slash = '\0';
        ok_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode) && trusted(&st, where);
        *slash = '/';
        if (!ok_dir)
            return 0;
    }
    if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return 0;
    /* Only a regular file whose writer is trusted (a directory others may write must not steer
     * routing). */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trusted(&st, where) || st.st_size > GP_CALIB_MAX_FILE) {
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
        } else if (!parse_alg_line(line, got, now, max_age)) {
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

int gp_calib_cache_read(gp_policy *p, const gp_executor *gpu, gp_calib_numbers out[5])
{
    return gp_calib_cache_read_from(p, gpu, GP_CALIB_USER, out);
}

static void put_size(char *buf, size_t n, size_t v)
{
    if (v == GP_KNOB_CALIBRATE)
        snprintf(buf, n, "never");
    else
        snprintf(buf, n, "%zu", v);
}

/* mkdir -p for the cache directory: mode 0700 for a user's (measurements are nobody else's
 * business), 0755 for the machine's (every user reads it). */
static int make_dirs(const char *dir, mode_t mode)
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
        if (mkdir(p, mode) != 0 && errno != EEXIST)
            return 0;
        p[i] = dir[i];
    }
    return 1;
}

int gp_calib_cache_write(gp_policy *p, const gp_executor *gpu, const gp_calib_numbers in[5])
{
    char path[1024], key[2048], tmp[1100], *slash;
    FILE *f;
    int fd, ok, shared;

    if (!gp_calib_cache_file(p, gpu, path, sizeof(path), key, sizeof(key)))
        return 0;
    slash = strrchr(path, '/');
    *slash = '\0';
    shared = is_system_dir(p, path);
    ok = make_dirs(path, shared ? 0755 : 0700);
    *slash = '/';
    if (!ok)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    (void)unlink(tmp);   /* left by an earlier process with this pid that died writing */
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, shared ? 0644 : 0600)) < 0)
        return 0;
    if (shared)
        (void)fchmod(fd, 0644);   /* whatever the umask took */
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
                "lone_gpu_bytes %s gpu_share %.17g batch_gbps %.17g\n", a, in[a].keylen, (long long)in[a].at,
                in[a].cpu_gbps, in[a].gpu_gbps, in[a].gpu_rt_us, mn, lone, in[a].gpu_share, in[a].batch_gbps);
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
