/* SPDX-License-Identifier: Apache-2.0 */
/* Reader for the known-answer stanza files in tests/kat (evp_test-like "Key = hex" lines). */
#ifndef KAT_FILE_H
#define KAT_FILE_H

#include <stddef.h>

typedef struct kat_buf {
    unsigned char *p;   /* never NULL once read: an empty value is a 1-byte allocation, len 0 */
    size_t len;
    int present;
} kat_buf;

typedef struct kat_vec {
    char name[160];     /* "Name =", or "file:line" when absent */
    char where[160];    /* "file:line" of the stanza's first line, for messages */
    char cipher[64];
    kat_buf key, iv, aad, tag, pt, ct;
    int expect_tag_mismatch;   /* "Result = TAG_MISMATCH": decryption must fail */
} kat_vec;

/* Appends every stanza of `path` to *vecs (realloc'd; *n updated). Returns 0, or -1 after printing
 * the reason (unreadable file, unknown keyword, bad hex, missing field). */
int kat_file_read(const char *path, kat_vec **vecs, size_t *n);

void kat_vecs_free(kat_vec *vecs, size_t n);

#endif
