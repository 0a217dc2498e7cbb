/* json_skip.h - skipping a nested JSON container fast: bracket matching outside strings,
 * 64 bytes at a time, without validating. Pure C. */
#ifndef WI_JSON_SKIP_H
#define WI_JSON_SKIP_H

/* Given p at '{' or '[', returns one past the bracket that closes it, or NULL when the text
 * ends first (an unterminated string counts as unterminated). Brackets inside strings do
 * not count; a string ends at a '"' preceded by an even number of backslashes. Nothing
 * else is checked (the scan's WI_JSON_STOP_EARLY contract). Reads only p[0..end). */
const char *wi_json_skip_container(const char *p, const char *end);

/* The same without the AVX2 path, whatever the CPU (SSE2 or bytes): for the tests. */
const char *wi_json_skip_portable(const char *p, const char *end);

#endif
