/* test_citus_node.c - the direct batches' node addressing: --citus-node entries and the conninfo
 * a worker node is reached with (the coordinator's parameters, host and port replaced). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "citus/citus_node.h"
#include "minitest.h"

/* The value of keyword in conninfo ci as libpq parses it, copied into buf ("" when absent). */
static const char *param(const char *ci, const char *keyword, char *buf, size_t n)
{
    PQconninfoOption *opts = PQconninfoParse(ci, NULL), *o;

    buf[0] = '\0';
    for (o = opts; o && o->keyword; o++)
        if (!strcmp(o->keyword, keyword) && o->val)
            snprintf(buf, n, "%s", o->val);
    PQconninfoFree(opts);
    return buf;
}

int main(void)
{
    char *good[] = {"w1=10.0.0.5", "w2:5433=db2.internal:6432", "w3=h:7"};
    char *bad[][1] = {{"w1"}, {"=h"}, {"w1="}, {"w1:=h"}, {"w1:0=h"}, {"w1:x=h"}, {"w1=h:"}, {"w1=h:70000"}, {"w1=h:1x"}};
    struct wi_err e;
    const char *host;
    size_t host_len;
    int port;
    char *ci, buf[128];
    size_t i;

    /* Entries: checked whole, matched by name and (when given) port. */
    CHECK(wi_citus_node_override(good, 3, NULL, 0, NULL, NULL, NULL, &e) == 0);
    CHECK(wi_citus_node_override(NULL, 0, "w1", 5432, &host, &host_len, &port, &e) == 0);
    CHECK(wi_citus_node_override(good, 3, "w1", 5432, &host, &host_len, &port, &e) == 1);
    CHECK(host_len == 8 && !memcmp(host, "10.0.0.5", 8) && port == 5432);
    CHECK(wi_citus_node_override(good, 3, "w2", 5433, &host, &host_len, &port, &e) == 1);
    CHECK(host_len == 12 && !memcmp(host, "db2.internal", 12) && port == 6432);
    CHECK(wi_citus_node_override(good, 3, "w2", 5432, &host, &host_len, &port, &e) == 0); /* another port */
    CHECK(wi_citus_node_override(good, 3, "w", 5432, &host, &host_len, &port, &e) == 0);  /* a prefix */
    CHECK(wi_citus_node_override(good, 3, "w3", 5432, &host, &host_len, &port, &e) == 1 && port == 7);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(wi_citus_node_override(bad[i], 1, NULL, 0, NULL, NULL, NULL, &e) < 0 && strstr(e.msg, "#1"));
        CHECK(wi_citus_node_override(bad[i], 1, "w1", 5432, &host, &host_len, &port, &e) < 0);
    }

    /* The coordinator's parameters kept, host and port replaced, hostaddr dropped, quotes escaped. */
    CHECK((ci = wi_citus_node_conninfo("host=/tmp/s,c2 hostaddr=1.2.3.4 port=5432 user=app dbname=inbox password='p\\'w d\\\\' "
                                       "sslmode=require", "10.0.0.5", 8, 6432, &e)) != NULL);
    CHECK(!strcmp(param(ci, "host", buf, sizeof buf), "10.0.0.5"));
    CHECK(!strcmp(param(ci, "port", buf, sizeof buf), "6432"));
    CHECK(!strcmp(param(ci, "hostaddr", buf, sizeof buf), ""));
    CHECK(!strcmp(param(ci, "user", buf, sizeof buf), "app") && !strcmp(param(ci, "dbname", buf, sizeof buf), "inbox"));
    CHECK(!strcmp(param(ci, "password", buf, sizeof buf), "p'w d\\"));
    CHECK(!strcmp(param(ci, "sslmode", buf, sizeof buf), "require"));
    free(ci);
    CHECK((ci = wi_citus_node_conninfo("postgresql://app:s3cret@coord:5432/inbox?application_name=x", "db2.internal:6432", 12, 6432,
                                       &e)) != NULL);
    CHECK(!strcmp(param(ci, "host", buf, sizeof buf), "db2.internal") && !strcmp(param(ci, "port", buf, sizeof buf), "6432"));
    CHECK(!strcmp(param(ci, "password", buf, sizeof buf), "s3cret") && !strcmp(param(ci, "application_name", buf, sizeof buf), "x"));
    free(ci);
    CHECK(wi_citus_node_conninfo("host='unterminated password=s3cret", "h", 1, 1, &e) == NULL && !strstr(e.msg, "s3cret"));
    DONE("test_citus_node");
}
