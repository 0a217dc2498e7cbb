/* json.h - a non-allocating JSON scanner: validates RFC 8259 JSON, extracts top-level
 * string/number fields as slices into the caller's buffer, and tells whether PostgreSQL
 * jsonb would accept the text. Shared token helpers for canon.c. */
#ifndef WI_JSON_H
#define WI_JSON_H

#include <stddef.h>
#include "sig_slice.h"
#include "wi_err.h"

enum {
    WI_JSON_E_SYNTAX = 120, /* not JSON (or trailing bytes after the value) */
    WI_JSON_E_DEPTH,        /* nesting deeper than WI_JSON_MAX_DEPTH */
    WI_JSON_E_UTF8,         /* invalid UTF-8 inside a string */
    WI_JSON_E_SURROGATE     /* a \u escape names a lone UTF-16 surrogate */
};

#define WI_JSON_MAX_DEPTH 512

enum wi_json_kind { WI_JSON_ABSENT = 0, WI_JSON_STRING, WI_JSON_NUMBER, WI_JSON_OTHER };

/* One top-level member to look for. name is filled by the caller; the rest by the scan. */
struct wi_json_field {
    const char *name;      /* in: key to find (compared to the raw, unescaped key bytes) */
    int kind;              /* out: enum wi_json_kind of the first member with that key */
    struct wi_slice value; /* out: string contents between the quotes (escapes kept), the
                              number's text, or an object's or array's whole text */
    int escaped;           /* out: 1 when the string holds backslash escapes */
    int duplicate;         /* out: 1 when the scan met the key again at the top level (a
                              scan with STOP_EARLY alone may stop before) */
};

/* Scan flags. */
#define WI_JSON_STOP_EARLY 1u /* extraction only: return once every field is found and skip
                                 nested containers without validating them */
#define WI_JSON_DUPLICATES 2u /* with STOP_EARLY: scan the whole top level anyway, to mark
                                 fields whose key occurs twice (jsonb keeps the last one) */

/* Flags reported by wi_json_string_end. */
#define WI_JSON_S_ESCAPED 1u   /* the string holds backslash escapes */
#define WI_JSON_S_NUL 2u       /* it holds \u0000 */
#define WI_JSON_S_SURROGATE 4u /* it holds a lone surrogate escape */

/* Validates p[0..n) as one JSON value (surrounding whitespace allowed) and fills the
 * fields found at the top level of an object (the first occurrence of a key wins; a key
 * written with escapes matches the name it decodes to, as it does for jsonb).
 * Returns 0, or -1 and fills *err (code WI_JSON_E_*). Borrows p; allocates nothing.
 * With WI_JSON_STOP_EARLY the document is not fully validated (nested containers are only
 * bracket-matched) and 0 is returned as soon as all fields are found. *jsonb_unsafe (may
 * be NULL) is set to 1 when the document holds \u0000, a lone surrogate escape or a number
 * PostgreSQL numeric cannot hold. */
int wi_json_scan(const char *p, size_t n, unsigned flags, struct wi_json_field *fields,
                 size_t nfields, int *jsonb_unsafe, struct wi_err *err);

/* Given p at (or before whitespace and) one JSON value, returns one past its end, or NULL
 * when the value is not valid JSON (it is fully validated) or deeper than WI_JSON_MAX_DEPTH.
 * Lets a caller walk an array's elements. */
const char *wi_json_value_end(const char *p, const char *end);

/* 1 when p[0..n) is valid JSON that PostgreSQL jsonb accepts (valid UTF-8, no \u0000, no
 * lone surrogate escapes, numbers within numeric's range), else 0. */
int wi_json_jsonb_safe(const char *p, size_t n);

/* Given p just after an opening quote, returns a pointer to the closing quote, or NULL
 * when the string is invalid (control character, bad escape, invalid UTF-8, unterminated)
 * and sets *code to a WI_JSON_E_* value. ORs WI_JSON_S_* bits into *sflags. */
const char *wi_json_string_end(const char *p, const char *end, unsigned *sflags, int *code);

/* Given p at a number's first character, returns one past its end or NULL when it is not
 * a JSON number. *is_int is 1 when it has neither fraction nor exponent. */
const char *wi_json_number_end(const char *p, const char *end, int *is_int);

/* Decodes the escapes of a string body that wi_json_string_end accepted into out (at
 * least n bytes; the result never grows). Surrogate pairs become one 4-byte UTF-8
 * sequence. Returns the decoded length. */
size_t wi_json_unescape(const char *s, size_t n, char *out);

#endif
