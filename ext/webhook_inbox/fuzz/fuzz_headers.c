/* fuzz_headers.c - libFuzzer target for headers.c: any Rack env entries give either NULL or
 * one JSON object that jsonb accepts (wi_json_jsonb_safe), never more than WI_HEADERS_MAX
 * headers, and never an entry wi_headers_credential calls a credential. Input: records "key\0value\0..." ; a key whose first byte is odd gets the
 * HTTP_ prefix, so most records are headers and the rest exercise the other Rack keys. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../headers.h"
#include "../json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wi_headers h = {0};
    const char *p = (const char *)data, *end = p + size, *json;
    char key[WI_HEADERS_MAX_NAME + 64];
    size_t len;

    while (p < end) {
        const char *k = p, *v, *kz = memchr(p, '\0', (size_t)(end - p));
        size_t klen, vlen, n = 0;
        if (!kz)
            break;
        klen = (size_t)(kz - k);
        v = kz + 1;
        if (v < end) {
            const char *vz = memchr(v, '\0', (size_t)(end - v));
            vlen = (size_t)((vz ? vz : end) - v);
        } else {
            vlen = 0;
        }
        p = v + vlen + 1;
        if (klen && (k[0] & 1)) {
            memcpy(key, "HTTP_", 5);
            n = 5;
        }
        if (klen > sizeof key - n)
            klen = sizeof key - n;
        memcpy(key + n, k, klen);
        {
            int before = h.count, more = wi_headers_add(&h, key, n + klen, v, vlen);
            if (h.count > before && n + klen > 5 && wi_headers_credential(key + 5, n + klen - 5, v, vlen))
                abort(); /* a credential was kept */
            if (!more)
                break;
        }
    }
    json = wi_headers_json(&h, &len);
    if (json) {
        if (len < 2 || json[0] != '{' || json[len - 1] != '}' || strlen(json) != len ||
            !wi_json_jsonb_safe(json, len) || h.count > WI_HEADERS_MAX)
            abort();
    } else if (h.count && !h.failed) {
        abort();
    }
    wi_headers_free(&h);
    return 0;
}
