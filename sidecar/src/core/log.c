/* log.c - key=value log lines on stderr, one write(2) per line, values quoted for parsers. */
#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = WI_LOG_INFO;

void wi_log_set_level(int level) { atomic_store(&min_level, level); }
int wi_log_enabled(int level) { return level >= atomic_load(&min_level); }

static void emit(int level, const char *msg, int with_errno, int saved_errno, const char *fmt, va_list ap)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[2048];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int r;

    if (!wi_log_enabled(level))
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    r = snprintf(line + n, sizeof line - n, ".%03ldZ level=%s msg=%s", ts.tv_nsec / 1000000L, names[level], msg);
    n += r > 0 ? (size_t)r : 0;
    if (fmt && *fmt && n < sizeof line - 1) {
        line[n++] = ' ';
        r = vsnprintf(line + n, sizeof line - n, fmt, ap);
        n += r > 0 ? (size_t)r : 0;
    }
    if (n >= sizeof line - 1)
        n = sizeof line - 2;
    if (with_errno) {
        char eb[256];
        char q[300];
        r = snprintf(line + n, sizeof line - n, " error=%s", wi_log_quote(q, sizeof q, strerror_r(saved_errno, eb, sizeof eb) == 0 ? eb : "?", 200));
        n += r > 0 ? (size_t)r : 0;
        if (n >= sizeof line - 1)
            n = sizeof line - 2;
    }
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}

#define DEFINE_LOG(name, level, with_errno)                             \
    void name(const char *msg, const char *fmt, ...)                    \
    {                                                                   \
        int saved = errno;                                              \
        va_list ap;                                                     \
        va_start(ap, fmt);                                              \
        emit(level, msg, with_errno, saved, fmt, ap);                   \
        va_end(ap);                                                     \
        errno = saved;                                                  \
    }

DEFINE_LOG(log_info, WI_LOG_INFO, 0)
DEFINE_LOG(log_warn, WI_LOG_WARN, 1)
DEFINE_LOG(log_warnx, WI_LOG_WARN, 0)
DEFINE_LOG(log_debug, WI_LOG_DEBUG, 0)
DEFINE_LOG(log_errorx, WI_LOG_ERROR, 0)

/* Recent rate-limited keys: FNV-1a hash and when each was last allowed (monotonic seconds).
 * A hash collision only makes two keys share one limit. */
#define EVERY_SLOTS 64
static struct {
    uint64_t hash;
    double at;
} every[EVERY_SLOTS];
static pthread_mutex_t every_lock = PTHREAD_MUTEX_INITIALIZER;

int wi_log_every(const char *key, double seconds)
{
    uint64_t h = 14695981039346656037ull;
    double now;
    int i, oldest = 0, allow = 1;
    const char *p;

    for (p = key ? key : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h |= 1; /* 0 marks an empty slot */
    now = wi_clock_s();
    pthread_mutex_lock(&every_lock);
    for (i = 0; i < EVERY_SLOTS; i++) {
        if (every[i].hash == h)
            break;
        if (every[oldest].hash && (!every[i].hash || every[i].at < every[oldest].at))
            oldest = i; /* an empty slot, else the least recently allowed key */
    }
    if (i < EVERY_SLOTS) {
        if (now - every[i].at < seconds)
            allow = 0;
        else
            every[i].at = now;
    } else {
        every[oldest].hash = h;
        every[oldest].at = now;
    }
    pthread_mutex_unlock(&every_lock);
    return allow;
}

void fatal(const char *msg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(WI_LOG_ERROR, msg, 0, 0, fmt, ap);
    va_end(ap);
    exit(1);
}

static int bare(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '*' || c == '+' || c == '-';
}

const char *wi_log_quote(char *buf, size_t bufsz, const char *v, size_t max)
{
    size_t i, n = 0, len;
    int plain = 1;

    if (bufsz < 8) {
        if (bufsz)
            buf[0] = '\0';
        return buf;
    }
    if (!v)
        v = "";
    len = strnlen(v, max);
    for (i = 0; i < len; i++)
        if (!bare((unsigned char)v[i]))
            plain = 0;
    if (len == 0)
        plain = 0;
    if (plain) {
        if (len > bufsz - 1)
            len = bufsz - 1;
        memcpy(buf, v, len);
        buf[len] = '\0';
        return buf;
    }
    buf[n++] = '"';
    for (i = 0; i < len && n + 6 < bufsz; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '"' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(buf + n, bufsz - n, "\\x%02x", c);
        } else {
            buf[n++] = (char)c;
        }
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}
