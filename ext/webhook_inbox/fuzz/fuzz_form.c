/* fuzz_form.c - libFuzzer entry point for the form-urlencoded parser (form.c): the pair
 * iterator and decoder, Twilio's sorted form, the query lookup and HubSpot's partial URI
 * unescaping, over the same input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../form.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *end = s + size;
    struct wi_form_iter it;
    struct wi_slice k, v;
    struct wi_err err;
    char *buf = malloc(size ? size : 1), *out = NULL;
    size_t on = 0, total = 0;
    if (!buf) return 0;
    wi_form_init(&it, s, size);
    while (wi_form_next(&it, &k, &v)) {
        if (k.p < s || k.p + k.n > end || v.p < s || v.p + v.n > end) abort();
        long kl = wi_form_decode(k, buf), vl = wi_form_decode(v, buf);
        if (kl > (long)k.n || vl > (long)v.n) abort(); /* decoding never lengthens */
        if (kl >= 0 && vl >= 0) total += (size_t)kl + (size_t)vl;
    }
    if (wi_form_sorted(s, size, &out, &on, 999, &err) == 0) {
        if (on > total) abort(); /* at most every decoded pair once */
    } else if (err.code != 999 || out) {
        abort();
    }
    free(out);
    struct wi_slice f = wi_form_find(s, size, "bodySHA256");
    if (f.p && (f.p < s || f.p + f.n > end)) abort();
    if (wi_url_unescape(s, size, ":/?@!$'()*,;", buf) > size) abort();
    free(buf);
    return 0;
}
