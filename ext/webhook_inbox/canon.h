/* canon.h - Didit V2 canonical JSON: byte-identical to Python
 * json.dumps(shorten_floats(json.loads(body)), sort_keys=True, separators=(",", ":"),
 * ensure_ascii=False) encoded as UTF-8, with its cost bounded by the input size. */
#ifndef WI_CANON_H
#define WI_CANON_H

#include <stddef.h>
#include "wi_err.h"

/* Canonicalization failure codes beyond the WI_JSON_E_* syntax codes. */
enum {
    WI_CANON_E_TOO_LARGE = 130, /* the output would exceed max_out */
    WI_CANON_E_INTERRUPTED      /* *cancel became nonzero */
};

/* The output limit the verifier applies to an n-byte body: twice the input plus 4 KiB.
 * Whitespace, escapes and Didit's own printing only shrink a body; what grows is a number
 * written with an exponent that prints in full ("1e308" is 309 digits), so a sender's body
 * stays far below this while an adversarial one is refused after a bounded amount of work.
 * Always >= n + 4096 and never overflows for n <= SIZE_MAX / 4. */
#define WI_CANON_GROWTH 2
#define WI_CANON_SLACK 4096
#define WI_CANON_MAX_OUT(n) ((size_t)(n) * WI_CANON_GROWTH + WI_CANON_SLACK)

/* Canonicalizes the JSON text p[0..n): keys sorted by code point (the last of duplicate
 * keys wins), integral floats printed as integers, other floats like Python repr, integers
 * with every digit, strings escaped like Python with non-ASCII kept literal.
 * Work and memory are linear in n: numbers print in time proportional to their digits, and
 * the output stops at max_out bytes (WI_CANON_E_TOO_LARGE). cancel (may be NULL) is polled
 * while working; once nonzero the call fails with WI_CANON_E_INTERRUPTED.
 * Returns 0 and stores a malloc'd buffer (free with wi_canon_free) in *out and its length
 * in *out_n; or -1 and fills *err (WI_JSON_E_* for bad input, WI_CANON_E_*, WI_ERR_NOMEM).
 * Borrows p. */
int wi_canon_didit(const char *p, size_t n, size_t max_out, const _Atomic int *cancel, char **out,
                   size_t *out_n, struct wi_err *err);

/* Frees a buffer returned by wi_canon_didit. Accepts NULL. */
void wi_canon_free(char *buf);

#endif
