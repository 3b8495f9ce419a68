/* SPDX-License-Identifier: Apache-2.0 */
/* Reader for the known-answer stanza files in tests/kat (evp_test-like "Key = hex" lines). */
#include "kat_file.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptest.h"

static char *trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static void vec_clear(kat_vec *v)
{
    kat_buf *bufs[] = { &v->key, &v->iv, &v->aad, &v->tag, &v->pt, &v->ct };

    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]->p);
    memset(v, 0, sizeof(*v));
}

static int set_hex(kat_buf *b, const char *val, const char *where, const char *kw)
{
    if (b->present) {
        fprintf(stderr, "%s: %s given twice\n", where, kw);
        return -1;
    }
    b->p = gptest_unhex(val, &b->len);
    if (b->p == NULL) {
        fprintf(stderr, "%s: bad hex for %s\n", where, kw);
        return -1;
    }
    b->present = 1;
    return 0;
}

/* A stanza needs Cipher, Key, IV, Plaintext and Ciphertext of equal length; AAD defaults to empty. */
static int vec_check(kat_vec *v)
{
    if (v->cipher[0] == '\0' || !v->key.present || !v->iv.present || !v->pt.present
        || !v->ct.present) {
        fprintf(stderr, "%s: stanza lacks Cipher, Key, IV, Plaintext or Ciphertext\n", v->where);
        return -1;
    }
    if (v->pt.len != v->ct.len) {
        fprintf(stderr, "%s: Plaintext and Ciphertext lengths differ\n", v->where);
        return -1;
    }
    if (v->expect_tag_mismatch && !v->tag.present) {
        fprintf(stderr, "%s: Result = TAG_MISMATCH without a Tag\n", v->where);
        return -1;
    }
    if (!v->aad.present) {
        if (set_hex(&v->aad, "", v->where, "AAD") != 0)
            return -1;
        v->aad.present = 0;   /* remember that the file gave none */
    }
    if (v->name[0] == '\0')
        snprintf(v->name, sizeof(v->name), "%s", v->where);
    return 0;
}

static int push(kat_vec **vecs, size_t *n, kat_vec *v)
{
    kat_vec *nv = realloc(*vecs, (*n + 1) * sizeof(**vecs));

    if (nv == NULL)
        return -1;
    *vecs = nv;
    (*vecs)[(*n)++] = *v;
    memset(v, 0, sizeof(*v));
    return 0;
}

int kat_file_read(const char *path, kat_vec **vecs, size_t *n)
{
    FILE *f = fopen(path, "r");
    const char *base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, in_stanza = 0, rc = -1;
    kat_vec cur;

    memset(&cur, 0, sizeof(cur));
    if (f == NULL) {
        perror(path);
        return -1;
    }
    for (;;) {
        ssize_t got = getline(&line, &cap, f);
        char *s, *eq, *kw, *val;
        char where[160];

        lineno++;
        s = got < 0 ? NULL : trim(line);
        if (s == NULL || *s == '\0') {   /* a blank line or EOF ends a stanza */
            if (in_stanza && (vec_check(&cur) != 0 || push(vecs, n, &cur) != 0))
                goto end;
            in_stanza = 0;
            if (s == NULL)
                break;
            continue;
        }
        if (*s == '#')
            continue;
        snprintf(where, sizeof(where), "%s:%d", base, lineno);
        if (!in_stanza) {
            vec_clear(&cur);
            snprintf(cur.where, sizeof(cur.where), "%s", where);
            in_stanza = 1;
        }
        eq = strchr(s, '=');
        if (eq == NULL) {
            fprintf(stderr, "%s: expected 'Keyword = value'\n", where);
            goto end;
        }
        *eq = '\0';
        kw = trim(s);
        val = trim(eq + 1);
        if (strcmp(kw, "Name") == 0) {
            snprintf(cur.name, sizeof(cur.name), "%s", val);
        } else if (strcmp(kw, "Cipher") == 0) {
            snprintf(cur.cipher, sizeof(cur.cipher), "%s", val);
        } else if (strcmp(kw, "Result") == 0) {
            if (strcmp(val, "TAG_MISMATCH") != 0) {
                fprintf(stderr, "%s: unknown Result '%s'\n", where, val);
                goto end;
            }
            cur.expect_tag_mismatch = 1;
        } else {
            kat_buf *b = strcmp(kw, "Key") == 0 ? &cur.key
                       : strcmp(kw, "IV") == 0 ? &cur.iv
                       : strcmp(kw, "AAD") == 0 ? &cur.aad
                       : strcmp(kw, "Tag") == 0 ? &cur.tag
                       : strcmp(kw, "Plaintext") == 0 ? &cur.pt
                       : strcmp(kw, "Ciphertext") == 0 ? &cur.ct : NULL;

            if (b == NULL) {
                fprintf(stderr, "%s: unknown keyword '%s'\n", where, kw);
                goto end;
            }
            if (set_hex(b, val, where, kw) != 0)
                goto end;
        }
    }
    rc = 0;
end:
    vec_clear(&cur);
    free(line);
    fclose(f);
    return rc;
}

void kat_vecs_free(kat_vec *vecs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        vec_clear(&vecs[i]);
    free(vecs);
}
