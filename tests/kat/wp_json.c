/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal JSON reader (RFC 8259 subset: no surrogate pairs) for the Wycheproof vector files. */
#include "wp_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WJ_MAX_DEPTH 64

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} parser;

static void clear_value(wj_value *v);

static int fail(parser *p, const char *what)
{
    if (!p->failed)
        snprintf(p->err, p->errlen, "JSON: %s at byte %zu", what, p->pos);
    p->failed = 1;
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t'
                               || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int expect_word(parser *p, const char *w)
{
    size_t n = strlen(w);

    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0)
        return fail(p, "unexpected token");
    p->pos += n;
    return 0;
}

static int hex4(parser *p, unsigned *out)
{
    unsigned v = 0;

    if (p->len - p->pos < 4)
        return fail(p, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(p, "bad \\u escape");
    }
    *out = v;
    return 0;
}

/* p->pos is at the opening quote. The decoded string is never longer than its source. */
static int parse_string(parser *p, char **out)
{
    size_t start = ++p->pos, o = 0;
    char *buf;

    while (p->pos < p->len && p->s[p->pos] != '"')
        p->pos += p->s[p->pos] == '\\' ? 2 : 1;
    if (p->pos >= p->len)
        return fail(p, "unterminated string");
    buf = malloc(p->pos - start + 1);
    if (buf == NULL)
        return fail(p, "out of memory");
    p->pos = start;
    while (p->s[p->pos] != '"') {
        char c = p->s[p->pos++];
        unsigned u;

        if ((unsigned char)c < 0x20) {
            free(buf);
            return fail(p, "control character in string");
        }
        if (c != '\\') {
            buf[o++] = c;
            continue;
        }
        c = p->s[p->pos++];
        switch (c) {
        case '"': case '\\': case '/': buf[o++] = c; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'u':   /* \uXXXX (6 source bytes) becomes at most 3 UTF-8 bytes */
            if (hex4(p, &u) != 0) {
                free(buf);
                return -1;
            }
            if (u >= 0xd800 && u <= 0xdfff) {
                buf[o++] = '?';   /* surrogates: not needed for the vector files */
            } else if (u < 0x80) {
                buf[o++] = (char)u;
            } else if (u < 0x800) {
                buf[o++] = (char)(0xc0 | (u >> 6));
                buf[o++] = (char)(0x80 | (u & 0x3f));
            } else {
                buf[o++] = (char)(0xe0 | (u >> 12));
                buf[o++] = (char)(0x80 | ((u >> 6) & 0x3f));
                buf[o++] = (char)(0x80 | (u & 0x3f));
            }
            break;
        default:
            free(buf);
            return fail(p, "bad escape");
        }
    }
    p->pos++;
    buf[o] = '\0';
    *out = buf;
    return 0;
}

static int parse_number(parser *p, wj_value *v)
{
    char *end;
    const char *start = p->s + p->pos;

    /* The buffer is NUL-terminated (wj_parse_file), so strtod stops inside it. */
    v->num = strtod(start, &end);
    if (end == start)
        return fail(p, "bad number");
    p->pos += (size_t)(end - start);
    v->type = WJ_NUM;
    return 0;
}

static int parse_value(parser *p, wj_value *v, int depth);

static int grow(parser *p, wj_value *v, size_t *cap, int with_keys)
{
    size_t ncap = *cap ? *cap * 2 : 8;
    wj_value *items;

    if (v->n < *cap)
        return 0;
    items = realloc(v->items, ncap * sizeof(*items));
    if (items == NULL)
        return fail(p, "out of memory");
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, ncap * sizeof(*keys));

        if (keys == NULL)
            return fail(p, "out of memory");
        v->keys = keys;
    }
    *cap = ncap;
    return 0;
}

static int parse_container(parser *p, wj_value *v, int depth, int is_obj)
{
    char close = is_obj ? '}' : ']';
    size_t cap = 0;

    v->type = is_obj ? WJ_OBJ : WJ_ARR;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        char *key = NULL;

        if (grow(p, v, &cap, is_obj) != 0)
            return -1;
        skip_ws(p);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, "expected a member name");
            if (parse_string(p, &key) != 0)
                return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(key);
                return fail(p, "expected ':'");
            }
            p->pos++;
            v->keys[v->n] = key;
        }
        memset(&v->items[v->n], 0, sizeof(v->items[0]));
        v->n++;   /* counted before parsing so clear_value frees a half-built item */
        if (parse_value(p, &v->items[v->n - 1], depth + 1) != 0)
            return -1;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser *p, wj_value *v, int depth)
{
    if (depth > WJ_MAX_DEPTH)
        return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, "unexpected end");
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"': v->type = WJ_STR; return parse_string(p, &v->str);
    case 't': v->type = WJ_BOOL; v->boolean = 1; return expect_word(p, "true");
    case 'f': v->type = WJ_BOOL; v->boolean = 0; return expect_word(p, "false");
    case 'n': v->type = WJ_NULL; return expect_word(p, "null");
    default: return parse_number(p, v);
    }
}

wj_value *wj_parse_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    parser p;
    wj_value *v;

    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s", path);
        return NULL;
    }
    do {
        if (len + 65536 + 1 > cap) {
            char *nb = realloc(buf, cap = len + 65536 + 1);

            if (nb == NULL) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, 65536, f);
        len += got;
    } while (got > 0);
    fclose(f);
    buf[len] = '\0';

    memset(&p, 0, sizeof(p));
    p.s = buf;
    p.len = len;
    p.err = err;
    p.errlen = errlen;
    v = calloc(1, sizeof(*v));
    if (v == NULL || parse_value(&p, v, 0) != 0) {
        if (v == NULL)
            snprintf(err, errlen, "out of memory");
        wj_free(v);
        free(buf);
        return NULL;
    }
    skip_ws(&p);
    if (p.pos != p.len) {
        fail(&p, "trailing data");
        wj_free(v);
        v = NULL;
    }
    free(buf);
    return v;
}

static void clear_value(wj_value *v)
{
    for (size_t i = 0; i < v->n; i++) {
        clear_value(&v->items[i]);
        if (v->type == WJ_OBJ)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

void wj_free(wj_value *v)
{
    if (v == NULL)
        return;
    clear_value(v);
    free(v);
}

const wj_value *wj_get(const wj_value *v, const char *key)
{
    if (v == NULL || v->type != WJ_OBJ)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

const char *wj_get_str(const wj_value *v, const char *key)
{
    const wj_value *m = wj_get(v, key);

    return m != NULL && m->type == WJ_STR ? m->str : NULL;
}

long wj_get_int(const wj_value *v, const char *key)
{
    const wj_value *m = wj_get(v, key);

    return m != NULL && m->type == WJ_NUM && m->num >= 0 ? (long)m->num : -1;
}
