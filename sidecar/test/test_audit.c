/* test_audit.c - wi_audit_actor(): --actor as given, else $USER@hostname ("unknown" for a
 * part that is not known), always terminated and cut to the buffer. (The audit rows
 * themselves: spec/sidecar/cli_spec.rb and retention_spec.rb, against PostgreSQL.) */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin/audit.h"
#include "minitest.h"

int main(void)
{
    char buf[64], host[256], want[320], tiny[8];

    wi_audit_actor("ops@example.com", buf, sizeof buf);
    CHECK(!strcmp(buf, "ops@example.com"));

    CHECK(gethostname(host, sizeof host) == 0);
    host[sizeof host - 1] = '\0';
    setenv("USER", "deploy", 1);
    wi_audit_actor("", buf, sizeof buf); /* an empty flag is no actor */
    strcpy(want, "deploy@");
    strncat(want, host, sizeof want - strlen(want) - 1);
    CHECK(!strncmp(buf, want, sizeof buf - 1));

    unsetenv("USER");
    wi_audit_actor(NULL, buf, sizeof buf);
    CHECK(!strncmp(buf, "unknown@", 8));

    wi_audit_actor("a-much-longer-actor-name", tiny, sizeof tiny);
    CHECK(!strcmp(tiny, "a-much-"));
    DONE("test_audit");
}
