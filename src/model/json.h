/*
 * json.h -- a small JSON reader for the profile files: the whole text is
 * parsed into a tree of nodes (objects, arrays, numbers, strings, true,
 * false, null) held in one allocation-per-node arena freed at once.  Enough
 * JSON for configuration files (RFC 8259 syntax; \u escapes outside ASCII
 * become '?'), with a message giving line and column of the first syntax
 * error.  Not a general-purpose library: no writer, no streaming.
 */
#ifndef XC_MODEL_JSON_H
#define XC_MODEL_JSON_H

#include "../core/common.h"

enum xc__json_type { XC__J_NULL, XC__J_BOOL, XC__J_NUM, XC__J_STR, XC__J_ARR, XC__J_OBJ };

typedef struct xc__json {
    int type;
    double num;            /* XC__J_NUM, and XC__J_BOOL (0/1) */
    char *str;             /* XC__J_STR */
    char *key;             /* member name when inside an object */
    struct xc__json *child, *next; /* first element / member; next sibling */
    int line, col;         /* where the value starts */
    struct xc__json *all;  /* every node, for freeing */
} xc__json_t;

/* Parse `len` bytes.  On a syntax error returns NULL and writes "line L,
 * column C: <what>" into err. */
XC__HIDDEN xc__json_t *xc__json_parse(const char *text, size_t len, char *err, size_t cap);
XC__HIDDEN void xc__json_free(xc__json_t *root);
/* The whole of file `path` (at most `max` bytes) in a malloc'd buffer,
 * its length in *len; NULL with "cannot open: ...", "too large or out of
 * memory" or "read error: ..." in err. */
XC__HIDDEN char *xc__read_file(const char *path, size_t max, size_t *len, char *err, size_t cap);
/* Member `key` of an object (NULL if absent or not an object). */
XC__HIDDEN const xc__json_t *xc__json_get(const xc__json_t *obj, const char *key);

#endif
