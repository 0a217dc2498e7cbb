/* canon.h - Didit V2 canonical JSON: byte-identical to Python
 * json.dumps(shorten_floats(json.loads(body)), sort_keys=True, separators=(",", ":"),
 * ensure_ascii=False) encoded as UTF-8. */
#ifndef WI_CANON_H
#define WI_CANON_H

#include <stddef.h>
#include "wi_err.h"

/* Canonicalizes the JSON text p[0..n): keys sorted by code point (the last of duplicate
 * keys wins), integral floats printed as integers, other floats like Python repr, integers
 * with every digit, strings escaped like Python with non-ASCII kept literal.
 * Returns 0 and stores a malloc'd buffer (free with wi_canon_free) in *out and its length
 * in *out_n; or -1 and fills *err (WI_JSON_E_* for bad input, WI_ERR_NOMEM). Borrows p. */
int wi_canon_didit(const char *p, size_t n, char **out, size_t *out_n, struct wi_err *err);

/* Frees a buffer returned by wi_canon_didit. Accepts NULL. */
void wi_canon_free(char *buf);

#endif
