/* sig_slice.h - struct wi_slice: a borrowed (pointer, length) view into a caller's buffer. */
#ifndef WI_SIG_SLICE_H
#define WI_SIG_SLICE_H

#include <stddef.h>

/* A view, never owning: p == NULL means "absent"; p != NULL with n == 0 means "empty". */
struct wi_slice {
    const char *p; /* first byte, or NULL when absent */
    size_t n;      /* length in bytes */
};

#endif
