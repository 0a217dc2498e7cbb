/* form.h - application/x-www-form-urlencoded bodies and URL query strings: pairs split on
 * '&', name and value on the first '=', '+' and %XX decoded; and the sorted form Twilio
 * signs. Pure C; the iterator returns slices into the caller's buffer and allocates nothing. */
#ifndef WI_FORM_H
#define WI_FORM_H

#include <stddef.h>
#include "sig_slice.h"
#include "wi_err.h"

/* Iterator over the pairs of s[0..n). */
struct wi_form_iter {
    const char *p;   /* next unread byte */
    const char *end; /* one past the last byte */
};

/* Starts iterating s[0..n) (s may be NULL when n == 0). */
void wi_form_init(struct wi_form_iter *it, const char *s, size_t n);

/* Returns 1 and fills name and value with the next pair, still encoded (a pair without '='
 * has an empty value), or 0 at the end. Empty items ("a=1&&b=2") are skipped. */
int wi_form_next(struct wi_form_iter *it, struct wi_slice *name, struct wi_slice *value);

/* Decodes s ('+' is a space, %XX a byte) into out, which has room for s.n bytes. Returns
 * the decoded length, or -1 on a '%' not followed by two hex digits. */
long wi_form_decode(struct wi_slice s, char *out);

/* The still-encoded value of the first pair whose decoded name is name (NUL-terminated),
 * or an absent slice. A pair whose name does not decode is skipped. */
struct wi_slice wi_form_find(const char *s, size_t n, const char *name);

/* The most pairs a signed form may have (Rack's QueryParser params_limit, 4096): a provider
 * sends a few dozen, and sorting more would be a pre-key cost an attacker chooses. */
#define WI_FORM_MAX_PAIRS 4096

/* One decoded pair; name and value point into the buffer wi_form_sorted_pairs returns. */
struct wi_form_pair {
    const char *name, *value;
    size_t nlen, vlen;
};

/* Every pair of s[0..n) decoded and sorted by name then value (bytewise), at most
 * WI_FORM_MAX_PAIRS of them (more: bad_code). Returns 0 and sets
 * *pairs and *np, *buf owning the decoded bytes (both malloc'd, caller frees; NULL when
 * n == 0), or -1 and fills *err (WI_ERR_NOMEM, or code bad_code: a malformed %-escape). */
int wi_form_sorted_pairs(const char *s, size_t n, struct wi_form_pair **pairs, size_t *np, char **buf,
                         int bad_code, struct wi_err *err);

/* Twilio's signed form: every pair decoded, sorted by name then value (bytewise), exact
 * duplicates dropped, written as name+value one after another. Returns 0 and sets *out
 * (malloc'd, caller frees; NULL when n == 0) and *outn, or -1 and fills *err
 * (WI_ERR_NOMEM, or code bad_code: a malformed %-escape). Allocates O(n). */
int wi_form_sorted(const char *s, size_t n, char **out, size_t *outn, int bad_code, struct wi_err *err);

/* Copies url[0..n) to out (room for n bytes) with the %XX escapes of the characters in keep
 * decoded (HubSpot decodes ":/?@!$'()*,;" in the URI it signs). Returns the new length. */
size_t wi_url_unescape(const char *url, size_t n, const char *keep, char *out);

#endif
