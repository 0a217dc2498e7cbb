/* test_jwt.c - table-driven tests of the JWT parser and JWK reader (jwt.c): accepted and
 * refused tokens, every truncation point of a valid token, base64url strictness and P-256
 * JWKs. Inputs are exactly-sized heap copies, so ASan sees any overread. */
#include <stdlib.h>
#include <string.h>
#include "../jwt.h"

#include "check.h"

static char *exact(const char *s, size_t n)
{
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    memcpy(p, s, n);
    return p;
}

static void b64url(const char *in, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = strlen(in), o = 0;
    const unsigned char *s = (const unsigned char *)in;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[o++] = a[v >> 18 & 63], out[o++] = a[v >> 12 & 63];
        if (i + 1 < n) out[o++] = a[v >> 6 & 63];
        if (i + 2 < n) out[o++] = a[v & 63];
    }
    out[o] = '\0';
}

/* "<b64url(header)>.<b64url(claims)>.<sig>" into out. */
static void token(const char *header, const char *claims, const char *sig, char *out)
{
    char h[512], c[512];
    b64url(header, h);
    b64url(claims, c);
    sprintf(out, "%s.%s.%s", h, c, sig);
}

static int parse(const char *tok, const char *alg, struct wi_jwt *t, struct wi_err *err)
{
    size_t n = strlen(tok);
    char *p = exact(tok, n);
    int r = wi_jwt_parse(p, n, alg, t, err);
    if (!r) CHECK(t->signing_input.p == p && t->signing_input.n < n, "signing input borrows the token");
    free(p);
    return r;
}

static void test_tokens(void)
{
    static const struct {
        const char *header, *claims, *sig, *alg;
        int code; /* 0: accepted */
    } cases[] = {
        {"{\"alg\":\"HS256\",\"typ\":\"JWT\"}", "{\"iat\":1}", "AAAA", "HS256", 0},
        {"{\"alg\":\"ES256\",\"kid\":\"k1\"}", "{}", "AAAA", "ES256", 0},
        {" {\"alg\":\"HS256\"} ", "\n{\"a\":[1,{\"b\":2}]}", "AA", "HS256", 0},
        {"{\"alg\":\"none\"}", "{}", "AAAA", "HS256", WI_JWT_E_ALG},
        {"{\"alg\":\"HS256\"}", "{}", "AAAA", "ES256", WI_JWT_E_ALG},
        {"{\"alg\":\"hs256\"}", "{}", "AAAA", "HS256", WI_JWT_E_ALG},
        {"{\"alg\":\"HS256 \"}", "{}", "AAAA", "HS256", WI_JWT_E_ALG},
        {"{\"alg\":\"HS\\u00325\\u0036\"}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED}, /* escaped */
        {"{\"alg\":\"HS256\",\"alg\":\"none\"}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"none\",\"alg\":\"HS256\"}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":1}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"typ\":\"JWT\"}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\",\"kid\":7}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\",\"crit\":[\"b64\"]}", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"[\"alg\",\"HS256\"]", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"", "{}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"}", "[1]", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"}", "{\"iat\":}", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"}", "{}x", "AAAA", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"}", "{}", "AAA=", "HS256", WI_JWT_E_MALFORMED},  /* padding */
        {"{\"alg\":\"HS256\"}", "{}", "AA+/", "HS256", WI_JWT_E_MALFORMED},  /* base64, not url */
        {"{\"alg\":\"HS256\"}", "{}", "AB", "HS256", WI_JWT_E_MALFORMED},    /* trailing bits */
        {"{\"alg\":\"HS256\"}", "{}", "A", "HS256", WI_JWT_E_MALFORMED},     /* 6 bits */
        {"{\"alg\":\"HS256\"}", "{}", "", "HS256", WI_JWT_E_MALFORMED},
        {"{\"alg\":\"HS256\"}", "{}", "AA.AA", "HS256", WI_JWT_E_MALFORMED}, /* four parts */
    };
    char tok[2048];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct wi_jwt t;
        struct wi_err err = {0};
        token(cases[i].header, cases[i].claims, cases[i].sig, tok);
        int r = parse(tok, cases[i].alg, &t, &err);
        CHECK(cases[i].code ? r == -1 && err.code == cases[i].code : r == 0, "case %zu: r=%d code=%d %s", i, r,
              err.code, err.msg);
        if (!r && cases[i].code == 0)
            CHECK(t.alg.n == strlen(cases[i].alg) && !memcmp(t.alg.p, cases[i].alg, t.alg.n), "case %zu: alg", i);
    }
    struct wi_jwt t;
    token("{\"alg\":\"ES256\",\"kid\":\"key-2\"}", "{\"request_body_sha256\":\"ab\"}", "AAAA", tok);
    CHECK(!parse(tok, "ES256", &t, NULL) && t.kid.n == 5 && !memcmp(t.kid.p, "key-2", 5) && t.sig_n == 3 &&
              t.claims_n == strlen("{\"request_body_sha256\":\"ab\"}"),
          "kid, claims and signature decoded");
    token("{\"alg\":\"HS256\"}", "{}", "AAAA", tok);
    CHECK(!parse(tok, "HS256", &t, NULL) && !t.kid.p, "no kid: absent");
    char big[WI_JWT_KID_MAX + 64];
    sprintf(big, "{\"alg\":\"ES256\",\"kid\":\"%0*d\"}", WI_JWT_KID_MAX + 1, 0);
    token(big, "{}", "AAAA", tok);
    CHECK(parse(tok, "ES256", &t, NULL) == -1, "a kid longer than WI_JWT_KID_MAX is refused");
    CHECK(parse("..", "HS256", &t, NULL) == -1 && parse("", "HS256", &t, NULL) == -1 && parse("abc", "HS256", &t, NULL) == -1,
          "no parts");
}

/* Every prefix of a valid token is refused (or, cut inside the signature, still a token of
 * a shorter signature), and never read past. */
static void test_truncations(void)
{
    char tok[1024];
    token("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"k\"}", "{\"iat\":1700000000,\"payload_hash\":\"00ff\"}",
          "Zm9vYmFyYmF6cXV4", tok);
    size_t n = strlen(tok), sig_at = (size_t)(strrchr(tok, '.') - tok) + 1;
    for (size_t cut = 0; cut <= n; cut++) {
        struct wi_jwt t;
        struct wi_err err = {0};
        char *p = exact(tok, cut);
        int r = wi_jwt_parse(p, cut, "HS256", &t, &err);
        size_t left = cut > sig_at ? cut - sig_at : 0;
        /* a cut signature of 2 or 3 leftover characters may still decode (zero trailing bits) */
        int may = cut == n || (cut > sig_at && left % 4 != 1);
        if (!may) CHECK(r == -1 && err.code == WI_JWT_E_MALFORMED, "cut at %zu of %zu accepted", cut, n);
        if (!r) CHECK(t.signing_input.n == sig_at - 1 && t.sig_n <= 12, "cut at %zu: signing input", cut);
        free(p);
    }
}

static void test_b64url(void)
{
    static const struct { const char *in; long want; } cases[] = {
        {"", 0}, {"QQ", 1}, {"QUI", 2}, {"QUJD", 3}, {"QR", -1}, {"QUJ", -1}, {"Q", -1}, {"QQ==", -1},
        {"-_-_", 3}, {"+/+/", -1}, {"QU JD", -1},
    };
    unsigned char out[8];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].in);
        char *p = exact(cases[i].in, n);
        long r = wi_b64url_decode(p, n, out, sizeof out);
        CHECK(r == cases[i].want, "b64url %s: %ld", cases[i].in, r);
        free(p);
    }
    CHECK(wi_b64url_decode("QUJD", 4, out, 2) == -1, "output capacity is respected");
}

static void test_jwk(void)
{
    static const char x[] = "\"x\":\"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\"",
                      y[] = "\"y\":\"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0\"";
    unsigned char der[128];
    char kid[WI_JWT_KID_MAX + 1], jwk[512];
    struct wi_err err = {0};

    sprintf(jwk, "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s,\"kid\":\"k1\",\"alg\":\"ES256\",\"expired_at\":null}", x, y);
    CHECK(wi_jwt_jwk_p256(jwk, strlen(jwk), der, sizeof der, kid, &err) == 91 && !strcmp(kid, "k1") &&
              der[0] == 0x30 && der[26] == 0x04,
          "a P-256 JWK: %s", err.msg);
    sprintf(jwk, "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s}", x, y);
    CHECK(wi_jwt_jwk_p256(jwk, strlen(jwk), der, sizeof der, kid, &err) == 91 && !kid[0], "no kid: \"\"");
    static const char *const bad[] = {
        "{\"kty\":\"RSA\",\"crv\":\"P-256\",%s,%s}", "{\"kty\":\"EC\",\"crv\":\"P-384\",%s,%s}",
        "{\"kty\":\"EC\",\"crv\":\"P-256\",%s}%s", "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s,\"alg\":\"ES384\"}",
        "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s,\"kid\":\"\"}", "{\"kty\":\"EC\",\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s}",
        "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s,\"kid\":3}", "[{\"kty\":\"EC\",\"crv\":\"P-256\",%s,%s}]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(jwk, sizeof jwk, bad[i], x, y);
        CHECK(wi_jwt_jwk_p256(jwk, strlen(jwk), der, sizeof der, kid, &err) == -1 && err.code == WI_ERR_ARG &&
                  !strstr(err.msg, "f83O"),
              "bad JWK %zu accepted (or quoted)", i);
    }
    sprintf(jwk, "{\"kty\":\"EC\",\"crv\":\"P-256\",%s,\"y\":\"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a\"}", x);
    CHECK(wi_jwt_jwk_p256(jwk, strlen(jwk), der, sizeof der, kid, &err) == -1, "a 31-byte y is refused");
}

int main(void)
{
    test_tokens();
    test_truncations();
    test_b64url();
    test_jwk();
    printf("test_jwt: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
