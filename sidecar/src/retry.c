/* retry.c - backoff (exponential, equal jitter, capped) and recording a transient failure. */
#define _POSIX_C_SOURCE 200809L
#include "retry.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const struct wi_pg_stmt wi_retry_stmt = {
    "wi_record_failure", "SELECT webhook_inbox_record_failure($1, $2, $3::int, $4::bigint, $5, $6::int)"};

double wi_retry_delay(int failures, double base, double cap, double u)
{
    double d;
    if (failures < 0)
        failures = 0;
    if (u < 0)
        u = 0;
    if (u >= 1)
        u = 0.999999;
    /* 2^62 * base overflows nothing in double, but stop early: the cap wins long before. */
    d = failures >= 62 ? cap : base * ldexp(1.0, failures);
    if (d > cap || !isfinite(d))
        d = cap;
    return d / 2 + u * (d / 2);
}

double wi_retry_uniform(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return (double)(x >> 11) / 9007199254740992.0; /* 2^53 */
}

int wi_retry_record(struct wi_pg *pg, const char *scope, const char *event_id, int seen_attempts, long long delay_ms,
                    const char *error, int max_attempts, char status[16], struct wi_err *err)
{
    char att[16], delay[24], max[16];
    const char *params[6];
    PGresult *res;

    snprintf(att, sizeof att, "%d", seen_attempts);
    snprintf(delay, sizeof delay, "%lld", delay_ms);
    snprintf(max, sizeof max, "%d", max_attempts);
    params[0] = scope;
    params[1] = event_id;
    params[2] = att;
    params[3] = delay;
    params[4] = error ? error : "";
    params[5] = max;
    res = wi_pg_exec(pg, wi_retry_stmt.name, 6, params, PGRES_TUPLES_OK, err);
    if (!res)
        return -1;
    snprintf(status, 16, "%s", PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return 0;
}
