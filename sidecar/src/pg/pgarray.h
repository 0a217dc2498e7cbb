/* pgarray.h - PostgreSQL array literals for text parameters ('{"a",NULL,"b\"c"}'): elements
 * double-quoted with '"' and '\' escaped, SQL NULL as an unquoted NULL. One growable buffer,
 * reused from one statement to the next. */
#ifndef WI_PGARRAY_H
#define WI_PGARRAY_H

#include <stddef.h>

/* Invariant: buf[0..len) is '{' followed by n elements separated by ','; the closing '}' and
 * NUL are written by wi_pgarray_end(). After an allocation failure nomem stays set (every
 * later add is ignored) until wi_pgarray_reset(). Zero-initialised = empty. */
struct wi_pgarray {
    char *buf;  /* owned, NULL until the first add */
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated */
    int n;      /* elements added */
    int nomem;  /* an add could not grow buf */
};

/* Empties a; keeps the buffer unless it grew past keep_bytes (then frees it: one large
 * batch does not pin its memory). */
void wi_pgarray_reset(struct wi_pgarray *a, size_t keep_bytes);

/* Appends s[0..len) as one element (any bytes but NUL; the caller makes it valid text in
 * the database's encoding), or NULL when s is NULL. Returns 0, or -1 when out of memory. */
int wi_pgarray_add(struct wi_pgarray *a, const char *s, size_t len);

/* Appends the NUL-terminated s (NULL: SQL NULL). Returns 0 or -1 like wi_pgarray_add. */
int wi_pgarray_add_str(struct wi_pgarray *a, const char *s);

/* The literal, NUL-terminated, valid until the next add or reset; NULL after an allocation
 * failure. Owned by a. */
const char *wi_pgarray_end(struct wi_pgarray *a);

/* Frees the buffer (a itself is the caller's); accepts NULL. */
void wi_pgarray_free(struct wi_pgarray *a);

#endif
