/* sig_header.h - parsers for signature header values: "k=v" lists (Stripe "t=..,v1=..",
 * Paddle "ts=..;h1=..", Standard Webhooks "v1,<b64> v1,<b64>"), prefixes, timestamps.
 * They return slices into the caller's buffer, allocate nothing, never read past n. */
#ifndef WI_SIG_HEADER_H
#define WI_SIG_HEADER_H

#include <stddef.h>
#include <stdint.h>
#include "sig_slice.h"

/* Iterator over items separated by sep, each "key<eq>value". Items are trimmed of
 * spaces and tabs; empty items are skipped. */
struct wi_kv_iter {
    const char *p;   /* next unread byte */
    const char *end; /* one past the last byte */
    char sep;        /* item separator: ',' ';' or ' ' */
    char eq;         /* key/value separator: '=' or ',' */
};

/* Starts iterating s[0..n). */
void wi_kv_init(struct wi_kv_iter *it, const char *s, size_t n, char sep, char eq);

/* Returns 1 and fills key/value with the next item (value.p == NULL when the item has no
 * eq), or 0 at the end. The key ends at the first eq; the value is the rest. */
int wi_kv_next(struct wi_kv_iter *it, struct wi_slice *key, struct wi_slice *value);

/* 1 when s equals the NUL-terminated lit exactly. */
int wi_slice_eq(struct wi_slice s, const char *lit);

/* If s starts with the NUL-terminated prefix, returns 1 and stores the rest in *rest;
 * else returns 0. */
int wi_slice_strip_prefix(struct wi_slice s, const char *prefix, struct wi_slice *rest);

/* Trims spaces and tabs at both ends. */
struct wi_slice wi_slice_trim(struct wi_slice s);

/* Parses a unix timestamp: 1 to 18 ASCII digits, nothing else. Returns 0 and sets *out,
 * or -1. */
int wi_parse_unix_ts(struct wi_slice s, int64_t *out);

#endif
