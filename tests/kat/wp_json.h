/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal JSON reader (RFC 8259 subset: no surrogate pairs) for the Wycheproof vector files. */
#ifndef WP_JSON_H
#define WP_JSON_H

#include <stddef.h>

typedef enum { WJ_NULL, WJ_BOOL, WJ_NUM, WJ_STR, WJ_ARR, WJ_OBJ } wj_type;

typedef struct wj_value {
    wj_type type;
    int boolean;               /* WJ_BOOL */
    double num;                /* WJ_NUM */
    char *str;                 /* WJ_STR, NUL-terminated UTF-8 */
    size_t n;                  /* WJ_ARR / WJ_OBJ: number of items */
    struct wj_value *items;    /* WJ_ARR / WJ_OBJ: the values */
    char **keys;               /* WJ_OBJ: the member names, parallel to items */
} wj_value;

/* Parses a whole file. NULL on error, with a message (and byte offset) in err. */
wj_value *wj_parse_file(const char *path, char *err, size_t errlen);
void wj_free(wj_value *v);

/* Member `key` of an object (first match), or NULL when v is no object or lacks it. */
const wj_value *wj_get(const wj_value *v, const char *key);
/* Member `key` as a string / an integer; NULL / -1 when absent or of another type. */
const char *wj_get_str(const wj_value *v, const char *key);
long wj_get_int(const wj_value *v, const char *key);

#endif
