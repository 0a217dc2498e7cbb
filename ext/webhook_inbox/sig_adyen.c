/* sig_adyen.c - Adyen: each notification item carries its own HMAC-SHA256 over eight of its
 * fields joined by ':'; the rest of an item (eventDate, reason, additionalData) is unsigned.
 * Each item is its own event, identified by its signed fields alone (wi_sig_event.items). */
#include "sig_adyen.h"

#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "sig_engine.h"

/* The item fields signed, in order; "amount" stands for its value and currency. */
enum { PSP, ORIG, MERCHANT, REF, AMOUNT, EVENT, SUCCESS, ADDITIONAL, NFIELDS };
static const char *const names[NFIELDS] = {"pspReference", "originalReference", "merchantAccountCode",
                                           "merchantReference", "amount", "eventCode", "success", "additionalData"};

#define LIVE_MAX 16 /* bytes of the unsigned top-level "live" string an item's document keeps */
#define DOC_HEAD "{\"live\":"
#define DOC_ITEMS "\"notificationItems\":["
#define DOC_TAIL "]}"
#define DOC_EXTRA (sizeof DOC_HEAD + LIVE_MAX + 3 + sizeof DOC_ITEMS + sizeof DOC_TAIL) /* bytes of a
                                                                    document beyond its item */

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

/* Where one delivery's items go: the event's block (items[], then the text area *o writes
 * to) and a scratch buffer for one item's signed string. */
struct work {
    struct wi_sig_item *items;
    size_t n;     /* distinct items so far */
    char *o;      /* next free byte of the text area */
    char *signed_buf;
    struct wi_slice live; /* the "live" member as JSON text, or absent */
};

/* Verifies one item (text: {"NotificationRequestItem":{...}}) against the secrets and fills
 * *it: its id and type into w->o (advanced), its document. Returns 0 or -1. */
static int item(const struct wi_sig_verifier *v, struct wi_slice text, struct work *w, struct wi_sig_item *it,
                struct wi_err *err)
{
    static const char *const wrap[] = {"NotificationRequestItem"};
    static const char *const money[] = {"value", "currency"};
    static const char *const extra[] = {"hmacSignature"};
    struct wi_json_field nri, f[NFIELDS], amt[2] = {{0}}, hs = {0};
    struct wi_sig_group g;
    char sig[128], *buf = w->signed_buf;
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

    /* id "pspReference:eventCode:success" and type eventCode, as signed (unescaped) */
    size_t psp = at[ORIG] - 1, code = at[SUCCESS] - 1 - at[EVENT], succ = at[NFIELDS + 1] - at[SUCCESS];
    char *id = w->o;
    memcpy(id, buf, psp);
    id[psp] = ':';
    memcpy(id + psp + 1, buf + at[EVENT], code);
    id[psp + 1 + code] = ':';
    memcpy(id + psp + 2 + code, buf + at[SUCCESS], succ);
    it->id = (struct wi_slice){id, psp + 2 + code + succ};
    it->type = (struct wi_slice){id + psp + 1, code};
    w->o += it->id.n;
    if (v->cfg.id_from_body) { /* the id is the SHA-256 of the item's signed string */
        unsigned char d[32];
        if (wi_sha256(buf, o, d, err)) return -1;
        wi_hex_encode(d, 32, w->o);
        it->id = (struct wi_slice){w->o, 64};
        w->o += 64;
    }
    it->text = text;
    return 0;
}

/* Writes item it's stored document at w->o: {"live":<live>,"notificationItems":[<item>]}
 * (no "live" when the body has none). */
static void document(struct work *w, struct wi_sig_item *it)
{
    char *d = w->o;
    size_t n = 1;
    d[0] = '{';
    if (w->live.p) {
        memcpy(d, DOC_HEAD, sizeof DOC_HEAD - 1), n = sizeof DOC_HEAD - 1;
        memcpy(d + n, w->live.p, w->live.n), n += w->live.n;
        d[n++] = ',';
    }
    memcpy(d + n, DOC_ITEMS, sizeof DOC_ITEMS - 1), n += sizeof DOC_ITEMS - 1;
    memcpy(d + n, it->text.p, it->text.n), n += it->text.n;
    memcpy(d + n, DOC_TAIL, sizeof DOC_TAIL - 1), n += sizeof DOC_TAIL - 1;
    it->doc = (struct wi_slice){d, n};
    w->o += n;
}

static int seen(const struct work *w, struct wi_slice id)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->items[i].id.n == id.n && !memcmp(w->items[i].id.p, id.p, id.n)) return 1;
    return 0;
}

static int by_id(const void *a, const void *b)
{
    const struct wi_slice *x = *(const struct wi_slice *const *)a, *y = *(const struct wi_slice *const *)b;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Several distinct items: the delivery's own id is the SHA-256 of their ids sorted bytewise,
 * each followed by '\n' (so neither order, repetition nor spacing changes it); its type the
 * eventCode every item shares, else none. */
static int delivery_id(struct work *w, struct wi_sig_event *ev, struct wi_err *err)
{
    const struct wi_slice *ids[WI_SIG_ADYEN_MAX_ITEMS];
    unsigned char d[32];
    size_t n = 0;
    int same = 1;
    for (size_t i = 0; i < w->n; i++) {
        ids[i] = &w->items[i].id;
        same &= w->items[i].type.n == w->items[0].type.n &&
                !memcmp(w->items[i].type.p, w->items[0].type.p, w->items[0].type.n);
    }
    qsort(ids, w->n, sizeof *ids, by_id);
    for (size_t i = 0; i < w->n; i++) { /* the scratch buffer holds them all (see wi_sig_adyen) */
        memcpy(w->signed_buf + n, ids[i]->p, ids[i]->n);
        n += ids[i]->n;
        w->signed_buf[n++] = '\n';
    }
    if (wi_sha256(w->signed_buf, n, d, err)) return -1;
    wi_hex_encode(d, 32, ev->body_sha256);
    if (same && w->items[0].type.n) ev->type = w->items[0].type;
    return 0;
}

/* The top-level "live" member's text: absent, or a string of at most LIVE_MAX bytes (Adyen
 * sends "true" or "false"); anything else is refused, so an item's document stays small. */
static int live_text(const struct wi_json_field *f, struct wi_slice *out, struct wi_err *err)
{
    *out = (struct wi_slice){NULL, 0};
    if (f->kind == WI_JSON_ABSENT) return 0;
    if (f->kind != WI_JSON_STRING || f->value.n > LIVE_MAX)
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "live is not a string of at most %d bytes", LIVE_MAX);
    *out = (struct wi_slice){f->value.p - 1, f->value.n + 2}; /* with its quotes */
    return 0;
}

int wi_sig_adyen(const struct wi_sig_verifier *v, const struct wi_sig_request *req, struct wi_sig_event *ev,
                 struct wi_err *err)
{
    static const char *const top[] = {"notificationItems", "live"};
    struct wi_json_field f[2];
    struct work w = {0};
    size_t raw = 0;
    char *block = NULL;

    if (members(req->body, top, f, 2, err) || live_text(&f[1], &w.live, err)) return -1;
    struct wi_json_field *items = &f[0];
    if (items->kind != WI_JSON_OTHER || !items->value.p || items->value.p[0] != '[')
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "body has no notificationItems array");
    /* One block: the items, then the text area (per item at most its text for the id plus
     * 64 for a hashed id, and its text plus DOC_EXTRA for its document), then the scratch
     * buffer (one item's signed string: its text plus 16; or every id, sorted). */
    size_t len = items->value.n, cap = WI_SIG_ADYEN_MAX_ITEMS;
    size_t text = 2 * len + cap * (64 + DOC_EXTRA), scratch = len + 16 + cap * 65;
    if (!(block = malloc(cap * sizeof *w.items + text + scratch))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    w.items = (struct wi_sig_item *)block;
    w.o = block + cap * sizeof *w.items;
    w.signed_buf = w.o + text;

    const char *end = items->value.p + len - 1, *p = ws(items->value.p + 1, end); /* inside [ ] */
    while (p < end) {
        const char *e = wi_json_value_end(p, end);
        struct wi_sig_item *it = &w.items[w.n];
        char *mark = w.o;
        if (!e) goto not_array;
        if (++raw > WI_SIG_ADYEN_MAX_ITEMS) {
            wi_err_set(err, WI_SIG_E_TOO_MANY_ITEMS, "notificationItems holds more than %d items", WI_SIG_ADYEN_MAX_ITEMS);
            goto fail;
        }
        if (item(v, (struct wi_slice){p, (size_t)(e - p)}, &w, it, err)) goto fail;
        if (seen(&w, it->id)) w.o = mark; /* the same event again: stored once */
        else document(&w, it), w.n++;
        if ((p = ws(e, end)) == end) break;
        if (*p != ',' || (p = ws(p + 1, end)) == end) goto not_array; /* not a comma, or a trailing one */
    }
    if (!w.n) {
        wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "notificationItems is empty: nothing is signed");
        goto fail;
    }
    if (w.n == 1) { /* the delivery is its one event (the id as signed, or hashed: id_from_body) */
        if (v->cfg.id_from_body) memcpy(ev->body_sha256, w.items[0].id.p, 64), ev->body_sha256[64] = '\0';
        else ev->id = w.items[0].id;
        if (w.items[0].type.n) ev->type = w.items[0].type;
    } else if (delivery_id(&w, ev, err)) {
        goto fail;
    }
    ev->items = w.items;
    ev->nitems = w.n;
    return 0;
not_array:
    wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "notificationItems is not a JSON array");
fail:
    free(block);
    return -1;
}
