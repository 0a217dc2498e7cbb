/* test_http.c - the metrics listener's request-head parser: valid heads complete only at
 * their last byte (every truncation point is "need more"), malformed ones are refused at
 * every length that shows the fault, and the slices point into the buffer. */
#include <string.h>

#include "minitest.h"
#include "observability/http.h"

static const char *const valid[] = {
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9394\r\nAccept: text/plain;version=0.0.4\r\n\r\n",
    "GET /metrics HTTP/1.0\r\n\r\n",
    "HEAD /metrics?x=1 HTTP/1.1\r\nUser-Agent: Prometheus/2.45\r\nX-Empty:\r\n\r\n",
    "GET / HTTP/1.1\nHost: a\n\n",
    "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\nX-Tab: a\tb\r\n\r\n",
    "GET /metrics HTTP/1.1\r\nX-Obs: caf\xc3\xa9\r\n\r\n",
};

/* Each is malformed at its full length (and cannot be completed by more bytes). */
static const char *const bad[] = {
    " GET /metrics HTTP/1.1\r\n\r\n",          /* empty method */
    "GET  /metrics HTTP/1.1\r\n\r\n",          /* empty target */
    "GET metrics HTTP/1.1\r\n\r\n",            /* not origin-form */
    "GET /met rics HTTP/1.1\r\n\r\n",          /* space in the target */
    "GET /metrics HTTP/2.0\r\n\r\n",           /* not HTTP/1.x */
    "GET /metrics HTTP/1.x\r\n\r\n",
    "GET /metrics HTTP/1.1\r\r\n\r\n",         /* CR without LF */
    "GET /metrics HTTP/1.1 \r\n\r\n",
    "GET /metrics HTTP/1.1\r\nHost a\r\n\r\n", /* no colon */
    "GET /metrics HTTP/1.1\r\n: a\r\n\r\n",    /* empty header name */
    "GET /metrics HTTP/1.1\r\nHost: a\r\n continued\r\n\r\n", /* obsolete line folding */
    "GET /metrics HTTP/1.1\r\nX: a\x01z\r\n\r\n", /* control character in a value */
    "GET /m\x7f HTTP/1.1\r\n\r\n",
    "G\xc3\xa9T /metrics HTTP/1.1\r\n\r\n",    /* method not a token */
    "\r\n\r\n",
};

int main(void)
{
    struct wi_http_req req;
    size_t i, n;

    for (i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        size_t len = strlen(valid[i]);
        for (n = 0; n < len; n++)
            CHECK(wi_http_parse(valid[i], n, &req) == 0);
        memset(&req, 0, sizeof req);
        CHECK(wi_http_parse(valid[i], len, &req) == (long)len);
        CHECK(req.method == valid[i] && req.target > valid[i] && req.target + req.target_len < valid[i] + len);
        CHECK(req.target[0] == '/');
    }
    /* Bytes after the head (a pipelined request, a body) are not part of it. */
    {
        const char *two = "GET /metrics HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        CHECK(wi_http_parse(two, strlen(two), &req) == 25);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = strlen(bad[i]);
        int refused = 0;
        for (n = 0; n <= len; n++) {
            long r = wi_http_parse(bad[i], n, &req);
            CHECK(r <= 0);              /* never accepted at any length */
            if (r < 0)
                refused = 1;
            else
                CHECK(!refused);        /* once refused, more bytes never make it "need more" */
        }
        CHECK(refused);
    }

    CHECK(wi_http_parse(valid[0], strlen(valid[0]), &req) > 0);
    CHECK(wi_http_method_is(&req, "GET") && !wi_http_method_is(&req, "GE") && !wi_http_method_is(&req, "GETS"));
    CHECK(wi_http_path_is(&req, "/metrics") && !wi_http_path_is(&req, "/metric") && !wi_http_path_is(&req, "/"));
    CHECK(wi_http_parse(valid[2], strlen(valid[2]), &req) > 0);
    CHECK(wi_http_path_is(&req, "/metrics") && req.minor == 1 && wi_http_method_is(&req, "HEAD"));
    {
        const char *longer = "GET /metricsX HTTP/1.1\r\n\r\n";
        CHECK(wi_http_parse(longer, strlen(longer), &req) > 0 && !wi_http_path_is(&req, "/metrics"));
    }
    DONE("test_http");
}
