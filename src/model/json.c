/*
 * json.c -- the recursive-descent reader of json.h.  Nodes are chained on
 * `all` from the root so that one walk frees them; depth is bounded so a
 * hostile file cannot exhaust the stack.
 */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    const char *s, *end;
    int line;
    const char *line_start;
    char *err;
    size_t cap;
    int failed;
    xc__json_t *root;
} parser_t;

static void fail(parser_t *p, const char *what)
{
    if (p->failed) return;
    p->failed = 1;
    snprintf(p->err, p->cap, "line %d, column %d: %s", p->line,
             (int)(p->s - p->line_start) + 1, what);
}

static void skip_ws(parser_t *p)
{
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '\n') {
            p->line++;
            p->line_start = p->s + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        p->s++;
    }
}

static xc__json_t *node(parser_t *p, int type)
{
    xc__json_t *n = calloc(1, sizeof *n);
    if (!n) {
        fail(p, "out of memory");
        return NULL;
    }
    n->type = type;
    n->line = p->line;
    n->col = (int)(p->s - p->line_start) + 1;
    if (p->root) {
        n->all = p->root->all;
        p->root->all = n;
    } else {
        p->root = n;
    }
    return n;
}

/* A string literal at p->s (the opening quote), NUL-terminated copy. */
static char *string(parser_t *p)
{
    p->s++; /* opening quote */
    size_t cap = 16, n = 0;
    char *out = malloc(cap);
    if (!out) {
        fail(p, "out of memory");
        return NULL;
    }
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20) {
            fail(p, "control character inside a string");
            break;
        }
        if (c == '\\') {
            if (p->s >= p->end) break;
            char e = *p->s++;
            switch (e) {
            case '"': case '\\': case '/': break;
            case 'b': e = '\b'; break;
            case 'f': e = '\f'; break;
            case 'n': e = '\n'; break;
            case 'r': e = '\r'; break;
            case 't': e = '\t'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = p->s < p->end ? *p->s++ : 0;
                    int d = h >= '0' && h <= '9' ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) {
                        fail(p, "bad \\u escape");
                        break;
                    }
                    v = v * 16 + (unsigned)d;
                }
                e = v < 0x80 ? (char)v : '?';
                break;
            }
            default: fail(p, "bad escape in a string");
            }
            c = (unsigned char)e;
        }
        if (p->failed) break;
        if (n + 2 > cap) {
            char *m = realloc(out, cap *= 2);
            if (!m) {
                fail(p, "out of memory");
                break;
            }
            out = m;
        }
        out[n++] = (char)c;
    }
    if (!p->failed && p->s >= p->end) fail(p, "unterminated string");
    if (p->failed) {
        free(out);
        return NULL;
    }
    p->s++; /* closing quote */
    out[n] = 0;
    return out;
}

static xc__json_t *value(parser_t *p, int depth);

static xc__json_t *container(parser_t *p, int depth, int obj)
{
    xc__json_t *n = node(p, obj ? XC__J_OBJ : XC__J_ARR), **tail = n ? &n->child : NULL;
    if (!n) return NULL;
    p->s++; /* [ or { */
    skip_ws(p);
    if (p->s < p->end && *p->s == (obj ? '}' : ']')) {
        p->s++;
        return n;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(p);
        if (obj) {
            if (p->s >= p->end || *p->s != '"') {
                fail(p, "expected a member name in double quotes");
                return NULL;
            }
            if (!(key = string(p))) return NULL;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':') {
                free(key);
                fail(p, "expected ':' after a member name");
                return NULL;
            }
            p->s++;
        }
        xc__json_t *v = value(p, depth + 1);
        if (!v) {
            free(key);
            return NULL;
        }
        v->key = key;
        *tail = v;
        tail = &v->next;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == (obj ? '}' : ']')) {
            p->s++;
            return n;
        }
        fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        return NULL;
    }
}

static int word(parser_t *p, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n)) return 0;
    p->s += n;
    return 1;
}

static xc__json_t *value(parser_t *p, int depth)
{
    skip_ws(p);
    if (depth > MAX_DEPTH) {
        fail(p, "nested too deeply");
        return NULL;
    }
    if (p->s >= p->end) {
        fail(p, "unexpected end of file");
        return NULL;
    }
    char c = *p->s;
    if (c == '{' || c == '[') return container(p, depth, c == '{');
    xc__json_t *n;
    if (c == '"') {
        if (!(n = node(p, XC__J_STR))) return NULL;
        n->str = string(p);
        return n->str ? n : NULL;
    }
    if (c == 't' || c == 'f' || c == 'n') {
        if (!(n = node(p, c == 'n' ? XC__J_NULL : XC__J_BOOL))) return NULL;
        if (word(p, "true")) n->num = 1;
        else if (!word(p, "false") && !word(p, "null")) {
            fail(p, "unknown word (expected true, false or null)");
            return NULL;
        }
        return n;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        /* JSON's number grammar, checked before strtod (which accepts more). */
        const char *q = p->s;
        if (q < p->end && *q == '-') q++;
        if (q >= p->end || *q < '0' || *q > '9') goto bad_number;
        if (*q == '0') q++;
        else while (q < p->end && *q >= '0' && *q <= '9') q++;
        if (q < p->end && *q == '.') {
            q++;
            if (q >= p->end || *q < '0' || *q > '9') goto bad_number;
            while (q < p->end && *q >= '0' && *q <= '9') q++;
        }
        if (q < p->end && (*q == 'e' || *q == 'E')) {
            q++;
            if (q < p->end && (*q == '+' || *q == '-')) q++;
            if (q >= p->end || *q < '0' || *q > '9') goto bad_number;
            while (q < p->end && *q >= '0' && *q <= '9') q++;
        }
        char buf[64];
        size_t len = (size_t)(q - p->s);
        if (len >= sizeof buf) goto bad_number;
        memcpy(buf, p->s, len);
        buf[len] = 0;
        if (!(n = node(p, XC__J_NUM))) return NULL;
        n->num = strtod(buf, NULL);
        p->s = q;
        return n;
    bad_number:
        fail(p, "malformed number");
        return NULL;
    }
    fail(p, "unexpected character (expected a value)");
    return NULL;
}

xc__json_t *xc__json_parse(const char *text, size_t len, char *err, size_t cap)
{
    parser_t p = {.s = text, .end = text + len, .line = 1, .line_start = text, .err = err,
                  .cap = cap};
    if (cap) err[0] = 0;
    xc__json_t *v = value(&p, 0);
    if (v) {
        skip_ws(&p);
        if (p.s < p.end) fail(&p, "unexpected text after the end of the document");
    }
    if (p.failed) {
        xc__json_free(p.root);
        return NULL;
    }
    return p.root;
}

void xc__json_free(xc__json_t *root)
{
    if (!root) return;
    xc__json_t *n = root->all;
    while (n) {
        xc__json_t *next = n->all;
        free(n->str);
        free(n->key);
        free(n);
        n = next;
    }
    free(root->str);
    free(root->key);
    free(root);
}

const xc__json_t *xc__json_get(const xc__json_t *obj, const char *key)
{
    if (!obj || obj->type != XC__J_OBJ) return NULL;
    const xc__json_t *found = NULL;
    for (const xc__json_t *m = obj->child; m; m = m->next)
        if (m->key && !strcmp(m->key, key)) found = m; /* the last one wins, as usual */
    return found;
}

char *xc__read_file(const char *path, size_t max, size_t *len, char *err, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, cap, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t size = 4096, n = 0;
    char *buf = malloc(size);
    while (buf) {
        if (n == size) {
            char *m = size < max ? realloc(buf, size * 2) : NULL;
            if (!m) break;
            buf = m;
            size *= 2;
        }
        size_t got = fread(buf + n, 1, size - n, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf || n == size) {
        snprintf(err, cap, "too large or out of memory");
        free(buf), buf = NULL;
    } else if (ferror(f)) {
        snprintf(err, cap, "read error: %s", strerror(errno));
        free(buf), buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}
