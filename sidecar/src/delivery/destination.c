/* destination.c - `--destination NAME=URL [key=value ...]`: parsing, the list, and
 * credentials from the environment or the config file. */
#define _POSIX_C_SOURCE 200809L
#include "delivery/destination.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/duration.h"
#include "hmac.h"

#define CONCURRENCY_MAX 1024
#define TIMEOUT_MAX_S 3600.0

/* Wipes a secret string before freeing it; accepts NULL. */
static void free_secret(char *s)
{
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = '\0';
        free(s);
    }
}

void wi_dest_clear(struct wi_dest *d)
{
    if (!d)
        return;
    free(d->url);
    free_secret(d->token);
    free_secret(d->secret);
    memset(d, 0, sizeof *d);
}

static int valid_name(const char *s, size_t n)
{
    size_t i;
    if (n < 1 || n > WI_DEST_NAME_MAX || !(s[0] >= 'a' && s[0] <= 'z'))
        return 0;
    for (i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

int wi_dest_name_ok(const char *name)
{
    return name && valid_name(name, strlen(name));
}

/* Length of the authority (userinfo@host:port) at a[0..n): up to '/', '?' or '#'. */
static size_t authority_len(const char *a, size_t n)
{
    size_t i = 0;
    while (i < n && a[i] != '/' && a[i] != '?' && a[i] != '#')
        i++;
    return i;
}

const char *wi_dest_path(const char *url, size_t *len)
{
    const char *a = strstr(url, "://"), *p;
    size_t n;
    a = a ? a + 3 : url;
    p = a + authority_len(a, strlen(a));
    for (n = 0; p[n] && p[n] != '?' && p[n] != '#'; n++)
        ;
    if (!n || p[0] != '/') {
        *len = 1;
        return "/";
    }
    *len = n;
    return p;
}

/* 1 when the authority a[0..n) names a loopback host (localhost, 127.0.0.1, [::1]). */
static int loopback_host(const char *a, size_t n)
{
    static const char *const names[] = {"localhost", "127.0.0.1", "[::1]", NULL};
    const char *close;
    size_t hl = 0;
    int i;

    if (n > 0 && a[0] == '[')
        hl = (close = memchr(a, ']', n)) ? (size_t)(close - a) + 1 : 0;
    else
        while (hl < n && a[hl] != ':')
            hl++;
    for (i = 0; names[i]; i++)
        if (strlen(names[i]) == hl && strncasecmp(a, names[i], hl) == 0)
            return 1;
    return 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Parses a duration slice through the shared parser (bounded copy). */
static int duration(const char *v, size_t n, double *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    if (wi_duration_parse(buf, out) < 0 || *out <= 0 || *out > TIMEOUT_MAX_S)
        return -1;
    return 0;
}

static int option(struct wi_dest *d, const char *k, size_t kl, const char *v, size_t vl, int secrets_allowed,
                  struct wi_err *err)
{
#define KEY(s) (kl == sizeof(s) - 1 && memcmp(k, s, kl) == 0)
#define VAL(s) (vl == sizeof(s) - 1 && memcmp(v, s, vl) == 0)
    if (KEY("concurrency")) {
        long c = 0;
        size_t i;
        for (i = 0; i < vl && i < 6 && v[i] >= '0' && v[i] <= '9'; i++)
            c = c * 10 + (v[i] - '0');
        if (vl == 0 || i != vl || c < 1 || c > CONCURRENCY_MAX)
            return wi_err_set(err, WI_ERR_ARG, "destination %s: concurrency must be an integer in 1..%d", d->name,
                              CONCURRENCY_MAX);
        d->concurrency = (int)c;
    } else if (KEY("timeout") || KEY("connect_timeout")) {
        double *field = KEY("timeout") ? &d->timeout : &d->connect_timeout;
        if (duration(v, vl, field) < 0)
            return wi_err_set(err, WI_ERR_ARG, "destination %s: %.*s must be a positive duration up to 1h", d->name,
                              (int)kl, k);
    } else if (KEY("sign")) {
        if (VAL("standard_webhooks"))
            d->sign = WI_DEST_SIGN_STANDARD_WEBHOOKS;
        else if (VAL("none"))
            d->sign = WI_DEST_SIGN_NONE;
        else
            return wi_err_set(err, WI_ERR_ARG, "destination %s: sign must be standard_webhooks or none", d->name);
    } else if (KEY("allow_http")) {
        if (VAL("true"))
            d->allow_http = 1;
        else if (VAL("false"))
            d->allow_http = 0;
        else
            return wi_err_set(err, WI_ERR_ARG, "destination %s: allow_http must be true or false", d->name);
    } else if (KEY("token") || KEY("secret")) {
        char **field = KEY("token") ? &d->token : &d->secret;
        if (!secrets_allowed)
            return wi_err_set(err, WI_ERR_ARG,
                              "destination %s: %.*s= only in the config file or WEBHOOK_INBOX_DEST_<NAME>_%s (a flag "
                              "would show it in ps)",
                              d->name, (int)kl, k, KEY("token") ? "TOKEN" : "SECRET");
        if (vl == 0)
            return wi_err_set(err, WI_ERR_ARG, "destination %s: empty %.*s", d->name, (int)kl, k);
        free_secret(*field);
        if (!(*field = dup_n(v, vl)))
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    } else {
        return wi_err_set(err, WI_ERR_ARG, "destination %s: unknown option %.*s", d->name, (int)(kl > 40 ? 40 : kl), k);
    }
    return 0;
#undef KEY
#undef VAL
}

int wi_dest_parse(const char *spec, size_t len, int secrets_allowed, struct wi_dest *out, struct wi_err *err)
{
    const char *p = spec, *end = spec + len, *tok, *eq;
    size_t tl, i;
    int remote_http = 0;

    memset(out, 0, sizeof *out);
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    tok = p;
    while (p < end && *p != ' ' && *p != '\t')
        p++;
    tl = (size_t)(p - tok);
    eq = memchr(tok, '=', tl);
    if (!eq || !valid_name(tok, (size_t)(eq - tok)))
        return wi_err_set(err, WI_ERR_ARG, "destination must be NAME=URL with NAME matching [a-z][a-z0-9_]{0,62}");
    memcpy(out->name, tok, (size_t)(eq - tok));
    out->name[eq - tok] = '\0';
    /* The app's Ruby handler runs wait in the outbox under this name for the Ruby worker
     * (db/009); a deliverer leasing them too would run a handler twice. */
    if (!strcmp(out->name, WI_DEST_RESERVED_RUBY))
        return wi_err_set(err, WI_ERR_ARG, "destination name '%s' is reserved for the app's Ruby handler runs: "
                          "choose another name", WI_DEST_RESERVED_RUBY);
    {
        const char *url = eq + 1;
        size_t ul = (size_t)(tok + tl - url);
        int https = ul > 8 && strncasecmp(url, "https://", 8) == 0;
        int http = !https && ul > 7 && strncasecmp(url, "http://", 7) == 0;
        const char *auth;
        size_t alen;
        for (i = 0; i < ul; i++)
            if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f)
                break;
        if ((!https && !http) || i != ul || ul > 2048) {
            wi_err_set(err, WI_ERR_ARG, "destination %s: the URL must be http(s)://..., at most 2048 bytes, no spaces",
                       out->name);
            goto fail;
        }
        auth = url + (https ? 8 : 7);
        alen = authority_len(auth, ul - (size_t)(auth - url));
        if (memchr(auth, '@', alen)) {
            wi_err_set(err, WI_ERR_ARG, "destination %s: no credentials in the URL (use the token)", out->name);
            goto fail;
        }
        if (http && !loopback_host(auth, alen))
            remote_http = 1;
        if (!(out->url = dup_n(url, ul))) {
            wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end)
            break;
        tok = p;
        while (p < end && *p != ' ' && *p != '\t')
            p++;
        tl = (size_t)(p - tok);
        eq = memchr(tok, '=', tl);
        if (!eq) {
            wi_err_set(err, WI_ERR_ARG, "destination %s: options are key=value", out->name);
            goto fail;
        }
        if (option(out, tok, (size_t)(eq - tok), eq + 1, (size_t)(tok + tl - eq - 1), secrets_allowed, err) < 0)
            goto fail;
    }
    if (remote_http && !out->allow_http) {
        wi_err_set(err, WI_ERR_ARG, "destination %s: plain http:// only to a loopback host, or with allow_http=true",
                   out->name);
        goto fail;
    }
    return 0;
fail:
    wi_dest_clear(out);
    return -1;
}

int wi_dest_list_put(struct wi_dest_list *l, struct wi_dest *d, struct wi_err *err)
{
    struct wi_dest *v;
    int i;

    for (i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, d->name) == 0) {
            wi_dest_clear(&l->v[i]);
            l->v[i] = *d;
            memset(d, 0, sizeof *d);
            return 0;
        }
    if (!(v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v))) {
        wi_dest_clear(d);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    l->v = v;
    l->v[l->n++] = *d;
    memset(d, 0, sizeof *d);
    return 0;
}

static int from_env(struct wi_dest *d, const char *what, char **field, struct wi_err *err)
{
    char name[WI_DEST_NAME_MAX + 40];
    const char *v;
    size_t i, n = (size_t)snprintf(name, sizeof name, "WEBHOOK_INBOX_DEST_");

    for (i = 0; d->name[i] && n + 1 < sizeof name; i++)
        name[n++] = (char)toupper((unsigned char)d->name[i]);
    snprintf(name + n, sizeof name - n, "_%s", what);
    if (!(v = getenv(name)) || !*v)
        return 0;
    free_secret(*field);
    if (!(*field = strdup(v)))
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    return 0;
}

int wi_dest_list_resolve(struct wi_dest_list *l, struct wi_err *err)
{
    int i;
    for (i = 0; i < l->n; i++) {
        struct wi_dest *d = &l->v[i];
        size_t j;
        if (from_env(d, "TOKEN", &d->token, err) < 0 || from_env(d, "SECRET", &d->secret, err) < 0)
            return -1;
        if (d->token)
            for (j = 0; d->token[j]; j++)
                if ((unsigned char)d->token[j] < 0x20 || d->token[j] == 0x7f)
                    return wi_err_set(err, WI_ERR_ARG, "destination %s: the token holds a control character", d->name);
        if (d->sign == WI_DEST_SIGN_STANDARD_WEBHOOKS) {
            unsigned char key[256];
            long kl;
            if (!d->secret)
                return wi_err_set(err, WI_ERR_ARG,
                                  "destination %s: sign=standard_webhooks needs a secret "
                                  "(WEBHOOK_INBOX_DEST_<NAME>_SECRET or secret= in the config file)",
                                  d->name);
            kl = strncmp(d->secret, "whsec_", 6) == 0 ? wi_b64_decode(d->secret + 6, strlen(d->secret) - 6, key, sizeof key)
                                                       : -1;
            memset(key, 0, sizeof key);
            if (kl < 1)
                return wi_err_set(err, WI_ERR_ARG, "destination %s: the signing secret must be whsec_<base64>", d->name);
        }
    }
    return 0;
}

const struct wi_dest *wi_dest_list_find(const struct wi_dest_list *l, const char *name)
{
    int i;
    for (i = 0; l && i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0)
            return &l->v[i];
    return NULL;
}

static int str_eq(const char *a, const char *b)
{
    return (a == NULL) == (b == NULL) && (!a || strcmp(a, b) == 0);
}

int wi_dest_list_equal(const struct wi_dest_list *a, const struct wi_dest_list *b)
{
    int i;
    if (a->n != b->n)
        return 0;
    for (i = 0; i < a->n; i++) {
        const struct wi_dest *x = &a->v[i], *y = wi_dest_list_find(b, a->v[i].name);
        if (!y || !str_eq(x->url, y->url) || !str_eq(x->token, y->token) || !str_eq(x->secret, y->secret) ||
            x->sign != y->sign || x->concurrency != y->concurrency || x->timeout != y->timeout ||
            x->connect_timeout != y->connect_timeout || x->allow_http != y->allow_http)
            return 0;
    }
    return 1;
}

void wi_dest_list_free(struct wi_dest_list *l)
{
    int i;
    if (!l)
        return;
    for (i = 0; i < l->n; i++)
        wi_dest_clear(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

void wi_dest_print_masked_url(const char *url, FILE *out)
{
    const char *auth = strstr(url, "://"), *p, *at;
    size_t alen;

    if (!auth) {
        fputs("(hidden: not a URL)", out);
        return;
    }
    auth += 3;
    alen = strcspn(auth, "/?#");
    at = memchr(auth, '@', alen);
    fwrite(url, 1, (size_t)(auth - url), out);
    if (at) { /* userinfo: wi_dest_parse refuses it; never printed all the same */
        fputs("*****@", out);
        alen -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    p = auth + alen + strcspn(auth + alen, "?#"); /* the path is printed */
    fwrite(auth, 1, (size_t)(p - auth), out);
    if (*p == '?') {
        for (p++, fputc('?', out); *p && *p != '#';) {
            size_t n = strcspn(p, "&#"), k = strcspn(p, "=&#");
            if (k < n)
                fwrite(p, 1, k + 1, out); /* name= */
            if (n)
                fputs("*****", out);
            p += n;
            if (*p == '&')
                fputc(*p++, out);
        }
    }
    if (*p == '#')
        fputs("#*****", out);
}

void wi_dest_list_print(const struct wi_dest_list *l, FILE *out)
{
    int i;
    for (i = 0; l && i < l->n; i++) {
        const struct wi_dest *d = &l->v[i];
        fprintf(out, "destination = %s=", d->name);
        wi_dest_print_masked_url(d->url, out);
        if (d->concurrency)
            fprintf(out, " concurrency=%d", d->concurrency);
        if (d->timeout > 0)
            fprintf(out, " timeout=%gs", d->timeout);
        if (d->connect_timeout > 0)
            fprintf(out, " connect_timeout=%gs", d->connect_timeout);
        if (d->sign == WI_DEST_SIGN_STANDARD_WEBHOOKS)
            fputs(" sign=standard_webhooks", out);
        if (d->allow_http)
            fputs(" allow_http=true", out);
        fprintf(out, "%s%s  # restart to change\n", d->token ? " token=*****" : "", d->secret ? " secret=*****" : "");
    }
}
