/* wi_err.h - the one error record every pure-C module fills: a numeric code and a short
 * message. Messages never contain secrets or payload bytes. */
#ifndef WI_ERR_H
#define WI_ERR_H

#include <stdarg.h>
#include <stdio.h>

/* Generic codes shared by every module. Module-specific codes use their own range:
 * sig/json/canon 100-199, store 200-299, sidecar 300-399. */
enum {
    WI_ERR_OK = 0,     /* no error */
    WI_ERR_NOMEM = 1,  /* allocation failed */
    WI_ERR_ARG = 2,    /* invalid argument or configuration */
    WI_ERR_CRYPTO = 3, /* OpenSSL failed */
    WI_ERR_IO = 4      /* system or network error */
};

#define WI_ERR_MSG_MAX 160

/* Invariant: msg is always NUL-terminated; code == WI_ERR_OK means msg is "". */
struct wi_err {
    int code;                 /* WI_ERR_* or a module code */
    char msg[WI_ERR_MSG_MAX]; /* human-readable, no secrets, no payload */
};

/* Resets *e to "no error". Accepts NULL. */
static inline void wi_err_clear(struct wi_err *e)
{
    if (e) {
        e->code = WI_ERR_OK;
        e->msg[0] = '\0';
    }
}

/* Sets code and a printf-formatted message (truncated to fit). Accepts NULL e.
 * Returns -1 so callers can write `return wi_err_set(err, ...);`. */
static inline int wi_err_set(struct wi_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int wi_err_set(struct wi_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
