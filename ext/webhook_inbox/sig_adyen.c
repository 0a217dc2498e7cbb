/* sig_adyen.c - Adyen: each notification item carries its own HMAC-SHA256 over eight of its
 * fields joined by ':'; the rest of an item (eventDate, reason, additionalData) is unsigned. */
#include "sig_adyen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "sig_engine.h"

/* The item fields signed, in order; "amount" stands for its value and currency. */
enum { PSP, ORIG, MERCHANT, REF, AMOUNT, EVENT, SUCCESS, ADDITIONAL, NFIELDS };
static const char *const names[NFIELDS] = {"pspReference", "originalReference", "merchantAccountCode",
                                           "merchantReference", "amount", "eventCode", "success", "additionalData"};

/* The members of object text named in want[0..n) into f (a key twice: WI_SIG_E_DUPLICATE_KEY). */
static int members(struct wi_slice text, const char *const *want, struct wi_json_field *f, size_t n,
                   struct wi_err *err)
{
    for (size_t i = 0; i < n; i++) memset(&f[i], 0, sizeof f[i]), f[i].name = want[i];
    if (wi_json_scan(text.p, text.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, n, NULL, err))
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "a notification item is not JSON");
    return wi_sig_unique(f, n, err);
}

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int is_object(struct wi_slice s) { return s.p && s.n && s.p[0] == '{'; }

/* Appends f's value as Adyen signs it (a string unescaped, a number's text, else nothing). */
static size_t put(char *o, const struct wi_json_field *f)
{
    if (f->kind == WI_JSON_STRING && f->escaped) return wi_json_unescape(f->value.p, f->value.n, o);
    if (f->kind != WI_JSON_STRING && f->kind != WI_JSON_NUMBER) return 0;
    memcpy(o, f->value.p, f->value.n);
    return f->value.n;
}

/* Verifies one item (the text of {"NotificationRequestItem":{...}}) against the secrets;
 * buf has room for the item's length plus 16. The signed eventCode, and for the id the
 * pspReference and success, go to ev when first is set. Returns 0 or -1. */
static int item(const struct wi_sig_verifier *v, struct wi_slice text, char *buf, int first, int *same_type,
                struct wi_sig_event *ev, struct wi_err *err)
{
    static const char *const wrap[] = {"NotificationRequestItem"};
    static const char *const money[] = {"value", "currency"};
    static const char *const extra[] = {"hmacSignature"};
    struct wi_json_field nri, f[NFIELDS], amt[2] = {{0}}, hs = {0};
    struct wi_sig_group g;
    char sig[128];
    size_t o = 0, at[NFIELDS + 2];
    int r;

    if (members(text, wrap, &nri, 1, err)) return -1;
    if (nri.kind != WI_JSON_OTHER || !is_object(nri.value))
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "a notification item has no NotificationRequestItem object");
    if (members(nri.value, names, f, NFIELDS, err)) return -1;
    if (is_object(f[AMOUNT].value) && members(f[AMOUNT].value, money, amt, 2, err)) return -1;
    if (!is_object(f[ADDITIONAL].value)) hs.kind = WI_JSON_ABSENT;
    else if (members(f[ADDITIONAL].value, extra, &hs, 1, err)) return -1;
    if (hs.kind != WI_JSON_STRING)
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "a notification item has no additionalData.hmacSignature");
    if (hs.value.n >= sizeof sig) return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "hmacSignature is not base64 HMAC-SHA256");
    size_t sl = put(sig, &hs);
    memset(&g, 0, sizeof g);
    if (!wi_sig_offer(v, &g, (struct wi_slice){sig, sl}, WI_SIG_BASE64, 0))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "hmacSignature is not base64 HMAC-SHA256");
    for (int i = PSP; i <= SUCCESS; i++) { /* buf: the signed string; at[i]: where field i starts */
        if (i) buf[o++] = ':';
        at[i] = o;
        if (i == AMOUNT) {
            o += put(buf + o, &amt[0]);
            buf[o++] = ':';
            at[NFIELDS] = o;
            o += put(buf + o, &amt[1]);
        } else {
            o += put(buf + o, &f[i]);
        }
    }
    at[NFIELDS + 1] = o;
    g.parts[0] = (struct wi_slice){buf, o};
    g.nparts = 1;
    if ((r = wi_sig_match(v, &g, NULL, err)) < 0) return -1;
    if (!r) return wi_sig_mismatch(err);
    /* the eventCode as signed: at[EVENT] .. the ':' before success */
    struct wi_slice code = {buf + at[EVENT], at[SUCCESS] - 1 - at[EVENT]};
    if (first) {
        size_t psp = at[ORIG] - 1, succ = at[NFIELDS + 1] - at[SUCCESS];
        *same_type = code.n && code.n < sizeof ev->type_copy;
        if (*same_type) memcpy(ev->type_copy, code.p, code.n), ev->type_copy[code.n] = '\0';
        if (psp && psp + code.n + succ + 2 < sizeof ev->id_copy)
            snprintf(ev->id_copy, sizeof ev->id_copy, "%.*s:%.*s:%.*s", (int)psp, buf, (int)code.n, code.p, (int)succ,
                     buf + at[SUCCESS]);
    } else if (*same_type && (code.n != strlen(ev->type_copy) || memcmp(code.p, ev->type_copy, code.n))) {
        *same_type = 0;
    }
    return 0;
}

int wi_sig_adyen(const struct wi_sig_verifier *v, const struct wi_sig_request *req, struct wi_sig_event *ev,
                 struct wi_err *err)
{
    static const char *const top[] = {"notificationItems"};
    struct wi_json_field items;
    char *buf = NULL;
    size_t n = 0;
    int rc = -1, same_type = 0;

    if (members(req->body, top, &items, 1, err)) return -1;
    if (items.kind != WI_JSON_OTHER || !items.value.p || items.value.p[0] != '[')
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "body has no notificationItems array");
    if (!(buf = malloc(items.value.n + 16))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    const char *end = items.value.p + items.value.n - 1, *p = ws(items.value.p + 1, end); /* inside [ ] */
    while (p < end) {
        const char *e = wi_json_value_end(p, end);
        if (!e) goto not_array;
        if (item(v, (struct wi_slice){p, (size_t)(e - p)}, buf, n == 0, &same_type, ev, err)) goto out;
        n++;
        if ((p = ws(e, end)) == end) break;
        if (*p != ',' || (p = ws(p + 1, end)) == end) goto not_array; /* not a comma, or a trailing one */
    }
    if (!n) {
        wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "notificationItems is empty: nothing is signed");
        goto out;
    }
    if (n == 1 && ev->id_copy[0]) ev->id = (struct wi_slice){ev->id_copy, strlen(ev->id_copy)};
    if (same_type) ev->type = (struct wi_slice){ev->type_copy, strlen(ev->type_copy)};
    rc = 0;
    goto out;
not_array:
    wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "notificationItems is not a JSON array");
out:
    free(buf);
    return rc;
}
