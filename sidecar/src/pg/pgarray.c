/* pgarray.c - PostgreSQL array literals for text parameters: quoting, escaping, NULLs. */
#include "pg/pgarray.h"

#include <stdlib.h>
#include <string.h>

/* Room for `more` bytes after len, plus '}' and NUL. */
static int reserve(struct wi_pgarray *a, size_t more)
{
    size_t need = a->len + more + 2, cap;
    char *b;

    if (a->nomem)
        return -1;
    if (need <= a->cap)
        return 0;
    for (cap = a->cap ? a->cap : 256; cap < need; cap *= 2)
        ;
    if (!(b = realloc(a->buf, cap))) {
        a->nomem = 1;
        return -1;
    }
    a->buf = b;
    a->cap = cap;
    return 0;
}

void wi_pgarray_reset(struct wi_pgarray *a, size_t keep_bytes)
{
    if (a->cap > keep_bytes) {
        free(a->buf);
        a->buf = NULL;
        a->cap = 0;
    }
    a->len = 0;
    a->n = 0;
    a->nomem = 0;
}

int wi_pgarray_add(struct wi_pgarray *a, const char *s, size_t len)
{
    size_t i, esc = 0;
    char *p;

    if (s)
        for (i = 0; i < len; i++)
            esc += s[i] == '"' || s[i] == '\\';
    /* '{' or ',' then "..." (len + escapes + 2) or NULL */
    if (reserve(a, 1 + (s ? len + esc + 2 : 4)) < 0)
        return -1;
    p = a->buf + a->len;
    *p++ = a->n ? ',' : '{';
    if (!s) {
        memcpy(p, "NULL", 4);
        p += 4;
    } else if (esc == 0) {
        *p++ = '"';
        memcpy(p, s, len);
        p += len;
        *p++ = '"';
    } else {
        *p++ = '"';
        for (i = 0; i < len; i++) {
            if (s[i] == '"' || s[i] == '\\')
                *p++ = '\\';
            *p++ = s[i];
        }
        *p++ = '"';
    }
    a->len = (size_t)(p - a->buf);
    a->n++;
    return 0;
}

int wi_pgarray_add_str(struct wi_pgarray *a, const char *s)
{
    return wi_pgarray_add(a, s, s ? strlen(s) : 0);
}

const char *wi_pgarray_end(struct wi_pgarray *a)
{
    if (reserve(a, 1) < 0)
        return NULL;
    if (a->n == 0)
        a->buf[a->len++] = '{';
    a->buf[a->len] = '}';
    a->buf[a->len + 1] = '\0';
    if (a->n == 0)
        a->len--; /* an add after an empty end starts over with '{' */
    return a->buf;
}

void wi_pgarray_free(struct wi_pgarray *a)
{
    if (!a)
        return;
    free(a->buf);
    a->buf = NULL;
    a->len = a->cap = 0;
    a->n = 0;
}
