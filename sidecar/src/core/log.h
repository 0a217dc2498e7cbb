/* log.h - the sidecar's logging vocabulary: one key=value line per record on stderr. */
#ifndef WI_LOG_H
#define WI_LOG_H

#include <stddef.h>

enum { WI_LOG_DEBUG = 0, WI_LOG_INFO = 1, WI_LOG_WARN = 2, WI_LOG_ERROR = 3 };

/* Sets the minimum level written (default WI_LOG_INFO). Thread-safe. */
void wi_log_set_level(int level);
int wi_log_enabled(int level);

/* Each call writes one line "ts=... level=... msg=<msg> <fmt...>\n" with a single write(2),
 * so lines from several threads never interleave. fmt carries pre-built key=value pairs. */
void log_info(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_warn(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));  /* appends errno */
void log_warnx(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_errorx(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3))); /* not fatal */
void log_debug(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fatal(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* Rate limit for repeated lines: returns 1 when the line keyed by key (e.g. a message name
 * plus an event type) was not allowed within the last `seconds` in this process, and
 * records now; else 0. Remembers the 64 most recent keys (by hash). Thread-safe. */
int wi_log_every(const char *key, double seconds);

/* Writes v into buf as a log value: bare if it is [A-Za-z0-9._:/@*+-]+, else double-quoted
 * with \" \\ and control characters escaped; truncated to fit (at most max input bytes).
 * Returns buf. Never fails. */
const char *wi_log_quote(char *buf, size_t bufsz, const char *v, size_t max);

/* A quoted log value for a message, in a compound literal buffer that lives until the end of
 * the enclosing block: log_warnx("x", "error=%s", WI_LOG_Q(err.msg)). */
#define WI_LOG_Q(v) wi_log_quote((char[240]){0}, 240, (v), 200)

#endif
