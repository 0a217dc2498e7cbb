/* reconcile_cmd.c - the `reconcile` command: walks the endpoints named by a bare --endpoint
 * NAME (defined elsewhere as --endpoint NAME=PROVIDER:SCOPE ...) and prints what each did. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <string.h>

#include "pg/schema.h"

int wi_rc_command(const struct wi_config *cfg, FILE *out, FILE *errout)
{
    int named = 0, rc = 0;

    for (int i = 0; i < cfg->endpoints.n; i++) {
        const char *name = cfg->endpoints.v[i];
        struct wi_rc_endpoint ep;
        struct wi_rc_counts c;
        struct wi_err err;
        int r;

        if (strchr(name, '='))
            continue; /* a definition */
        named++;
        if (wi_rc_endpoint_find(cfg, name, &ep, &err) < 0) {
            fprintf(errout, "webhook-inbox-sidecar reconcile: %s\n", err.msg);
            return 2;
        }
        r = wi_reconcile(cfg->database_url, &ep, cfg->since, NULL, &c, &err);
        if (r > 0) {
            char marked[40] = "";
            if (ep.api->mode == WI_RC_REDELIVER)
                snprintf(marked, sizeof marked, " marked=%ld", c.marked);
            fprintf(out, "reconcile %s: pages=%ld listed=%ld recovered=%ld skipped=%ld waits=%ld%s%s\n", ep.name,
                    c.pages, c.listed, c.recovered, c.skipped, c.waits, marked,
                    c.resumed ? " (resumed a walk stopped before)" : "");
        } else if (r == 0) {
            fprintf(errout, "webhook-inbox-sidecar reconcile: endpoint %s: another sidecar is walking it; try later\n",
                    ep.name);
            rc = 1;
        } else {
            const char *problem = wi_schema_err_problem(&err);
            int again = err.code != WI_ERR_ARG && err.code != WI_RC_ERR_LOOP;
            fprintf(errout, "webhook-inbox-sidecar reconcile: endpoint %s: %s%s%s (pages=%ld recovered=%ld%s)\n",
                    ep.name, problem ? problem : "", problem ? ": " : "", err.msg, c.pages, c.recovered,
                    again ? "; run it again to resume" : "");
            if (err.code == WI_ERR_ARG)
                rc = 2;
            else if (err.code == WI_RC_ERR_LOOP && rc != 2)
                rc = 3;
            else if (rc == 0)
                rc = 1;
        }
        wi_rc_endpoint_clear(&ep);
    }
    if (!named) {
        fprintf(errout, "webhook-inbox-sidecar reconcile: name the endpoint: --endpoint NAME "
                        "(defined by --endpoint NAME=PROVIDER:SCOPE ... or in the config file)\n");
        return 2;
    }
    return rc;
}
