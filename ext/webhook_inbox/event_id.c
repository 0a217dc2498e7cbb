/* event_id.c - the stored key of a long event id (event_id.h), SHA-256 by OpenSSL's EVP. */
#include "event_id.h"

#include <string.h>

#include <openssl/evp.h>

int wi_event_id_hashed(size_t n)
{
    return n > WI_EVENT_ID_MAX;
}

int wi_event_id_hash(const char *id, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    size_t i, p = sizeof WI_EVENT_ID_PREFIX - 1;

    out[0] = '\0';
    if (!EVP_Digest(id, n, md, &len, EVP_sha256(), NULL) || len != 32)
        return -1;
    memcpy(out, WI_EVENT_ID_PREFIX, p);
    for (i = 0; i < 32; i++) {
        out[p++] = hex[md[i] >> 4];
        out[p++] = hex[md[i] & 15];
    }
    out[p] = '\0';
    return 0;
}
