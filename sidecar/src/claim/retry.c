/* retry.c - charging one transient failure (webhook_inbox_charge_failure), jitter numbers
 * and the reconnect backoff. */
#define _POSIX_C_SOURCE 200809L
#include "claim/retry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct wi_pg_stmt wi_retry_stmt = {
    "wi_charge_failure", "SELECT new_status, retry_in_ms"
                         " FROM webhook_inbox_charge_failure($1, $2, $3::int, $4, $5::int, $6::bigint, $7::bigint)"};

double wi_retry_uniform(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return (double)(x >> 11) / 9007199254740992.0; /* 2^53 */
}

double wi_retry_backoff(double *delay, uint64_t *state)
{
    double nap = *delay * (0.5 + wi_retry_uniform(state) / 2);
    *delay = *delay * 2 > WI_RECONNECT_MAX_S ? WI_RECONNECT_MAX_S : *delay * 2;
    return nap;
}

int wi_retry_charge(struct wi_pg *pg, struct wi_event *e, const char *error, const struct wi_policy *p,
                    struct wi_err *err)
{
    char att[16], max[16], base[24], cap[24];
    const char *params[7];
    char *detail = strdup(error ? error : "");
    PGresult *res;

    if (!detail)
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    snprintf(att, sizeof att, "%d", e->attempts);
    snprintf(max, sizeof max, "%d", p->max_attempts);
    snprintf(base, sizeof base, "%lld", p->backoff_base_ms);
    snprintf(cap, sizeof cap, "%lld", p->backoff_cap_ms);
    params[0] = e->scope;
    params[1] = e->event_id;
    params[2] = att;
    params[3] = detail;
    params[4] = max;
    params[5] = base;
    params[6] = cap;
    res = wi_pg_exec(pg, wi_retry_stmt.name, 7, params, PGRES_TUPLES_OK, err);
    if (!res) {
        free(detail);
        return -1;
    }
    free(e->detail);
    e->detail = detail;
    e->charged = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
    snprintf(e->result, sizeof e->result, "%s",
             !e->charged ? "" : !strcmp(PQgetvalue(res, 0, 0), "quarantined") ? "quarantined" : "retry");
    e->retry_in_ms = e->charged && !PQgetisnull(res, 0, 1) ? atoll(PQgetvalue(res, 0, 1)) : -1;
    PQclear(res);
    return 0;
}
