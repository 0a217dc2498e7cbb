/* test_metrics.c - the Prometheus rendering of the process counters: label values escaped,
 * at most WI_METRICS_MAX_TYPES event types then "other", histograms cumulative with
 * le="+Inf" equal to _count, the inbox and outbox gauges only when they were read, the
 * deliverer's counters per destination, and the reconcile walks per endpoint. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minitest.h"
#include "observability/metrics.h"

static char *render(const struct wi_metrics_gauges *g)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    wi_metrics_render(f, g);
    fclose(f);
    return buf;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (; (hay = strstr(hay, needle)) != NULL; hay++)
        n++;
    return n;
}

int main(void)
{
    struct wi_metrics_gauges g = {1, 0.5, 7, 2, 1, 3, 12.5};
    char type[32], *out;
    int i;

    wi_metrics_event("a\"b\\c\nd", "done", 0.2);
    wi_metrics_event("a\"b\\c\nd", "done", 0.2); /* control character: counted as "other" */
    wi_metrics_event("invoice.paid", "done", 2);
    wi_metrics_event("invoice.paid", "retry", -1);
    wi_metrics_event("invoice.paid", "waiting", -1); /* not an outcome of handled_total */
    wi_metrics_event("other", "quarantined", -1);      /* a real type named "other" shares the overflow row */
    wi_metrics_event("q\"uote\\d", "done", 1);
    wi_metrics_event("\xff\xfe", "done", 1);            /* not UTF-8 */
    for (i = 0; i < 250; i++) {
        snprintf(type, sizeof type, "t%d", i);
        wi_metrics_event(type, "done", 100);
    }
    wi_metrics_batch(4, 0.02);
    out = render(&g);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"invoice.paid\",outcome=\"done\"} 1\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"invoice.paid\",outcome=\"retry\"} 1\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"q\\\"uote\\\\d\",outcome=\"done\"} 1\n") != NULL);
    CHECK(strstr(out, "outcome=\"waiting\"") == NULL);
    CHECK(strstr(out, "\xff") == NULL && strstr(out, "a\"b") == NULL);
    /* invoice.paid, q"uote\d and t0..t197 fill the 200 rows; t198, t199.., the bad ones go to other */
    CHECK(strstr(out, "event_type=\"t197\",outcome=\"done\"} 1\n") != NULL);
    CHECK(strstr(out, "event_type=\"t198\"") == NULL);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"other\",outcome=\"done\"} 55\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"other\",outcome=\"quarantined\"} 1\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handled_total{event_type=\"other\",outcome=\"retry\"}") == NULL);
    /* receipt_to_done: 0.2, 0.2, 2, 1, 1, 250 x 100 */
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_bucket{le=\"0.25\"} 2\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_bucket{le=\"1\"} 4\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_bucket{le=\"300\"} 255\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_bucket{le=\"+Inf\"} 255\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_count 255\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handler_duration_seconds_bucket{le=\"0.005\"} 4\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_handler_duration_seconds_count 4\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_batch_duration_seconds_count 1\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_events_pending 7\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_oldest_pending_age_seconds 12.5\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_stats_up 1\n") != NULL);

    /* The outbox: per destination gauges only when read, label values escaped; the
     * deliverer's counters' HELP and TYPE always (no series here: no deliverer ran). */
    CHECK(strstr(out, "webhook_inbox_effects_stats_up 0\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_effects_pending") == NULL);
    CHECK(strstr(out, "# TYPE webhook_inbox_effects_total counter\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_effects_total{") == NULL);
    free(out);
    g.outbox_valid = 1;
    g.ndests = 2;
    snprintf(g.dests[0].name, sizeof g.dests[0].name, "app_kyc");
    g.dests[0].pending = 4;
    g.dests[0].oldest_pending_age_s = 61.5;
    g.dests[0].quarantined = 2;
    snprintf(g.dests[1].name, sizeof g.dests[1].name, "q\"x\\y\nz"); /* not a valid name: escaped anyway */
    out = render(&g);
    CHECK(strstr(out, "webhook_inbox_effects_stats_up 1\n") != NULL);
    CHECK(strstr(out, "# TYPE webhook_inbox_effects_pending gauge\nwebhook_inbox_effects_pending{destination=\"app_kyc\"} 4\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_effects_oldest_pending_age_seconds{destination=\"app_kyc\"} 61.5\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_effects_quarantined{destination=\"app_kyc\"} 2\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_effects_quarantined{destination=\"q\\\"x\\\\y\\nz\"} 0\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_events_pending 7\n") != NULL);
    free(out);

    g.valid = 0;
    g.outbox_valid = 0;
    out = render(&g);
    CHECK(strstr(out, "webhook_inbox_stats_up 0\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_events_pending") == NULL);
    CHECK(strstr(out, "# TYPE webhook_inbox_reconnects_total counter\nwebhook_inbox_reconnects_total 0\n") != NULL);
    free(out);

    /* Reconcile walks: HELP and TYPE before any endpoint; a declared endpoint at 0 for every
     * result; walks and recovered events counted; past WI_METRICS_MAX_ENDPOINTS, or a name
     * that cannot be a label, "other". */
    out = render(NULL);
    CHECK(strstr(out, "# TYPE webhook_inbox_reconcile_walks_total counter\n# HELP") != NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_walks_total{") == NULL);
    CHECK(strstr(out, "# TYPE webhook_inbox_reconcile_recovered_total counter\n") != NULL);
    free(out);
    wi_metrics_reconcile_endpoint("billing");
    out = render(NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_walks_total{endpoint=\"billing\",result=\"complete\"} 0\n"
                      "webhook_inbox_reconcile_walks_total{endpoint=\"billing\",result=\"failed\"} 0\n"
                      "webhook_inbox_reconcile_walks_total{endpoint=\"billing\",result=\"locked\"} 0\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_recovered_total{endpoint=\"billing\"} 0\n") != NULL);
    free(out);
    wi_metrics_reconcile_endpoint("billing"); /* declared twice: one row */
    wi_metrics_reconcile("billing", WI_M_RC_COMPLETE, 3);
    wi_metrics_reconcile("billing", WI_M_RC_FAILED, 2); /* the pages committed before the failure count */
    wi_metrics_reconcile("billing", WI_M_RC_FAILED, 0);
    wi_metrics_reconcile("gh", WI_M_RC_LOCKED, 0);
    wi_metrics_reconcile("billing", WI_M_RC_RESULTS, 9); /* not a result: ignored */
    out = render(NULL);
    CHECK(strstr(out, "{endpoint=\"billing\",result=\"complete\"} 1\n") != NULL);
    CHECK(strstr(out, "{endpoint=\"billing\",result=\"failed\"} 2\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_recovered_total{endpoint=\"billing\"} 5\n") != NULL);
    CHECK(strstr(out, "{endpoint=\"gh\",result=\"locked\"} 1\n") != NULL);
    CHECK(strstr(out, "endpoint=\"other\"") == NULL);
    CHECK(count(out, "endpoint=\"billing\"") == 4); /* declared twice: one row (3 results, recovered) */
    free(out);
    for (i = 0; i < WI_METRICS_MAX_ENDPOINTS; i++) {
        snprintf(type, sizeof type, "e%d", i);
        wi_metrics_reconcile(type, WI_M_RC_COMPLETE, 1);
    }
    wi_metrics_reconcile("bad\nname", WI_M_RC_FAILED, 4);
    out = render(NULL);
    CHECK(strstr(out, "{endpoint=\"e61\",result=\"complete\"} 1\n") != NULL); /* billing, gh, e0..e61 fill 64 */
    CHECK(strstr(out, "endpoint=\"e62\"") == NULL);
    CHECK(strstr(out, "{endpoint=\"other\",result=\"complete\"} 2\n") != NULL);
    CHECK(strstr(out, "{endpoint=\"other\",result=\"failed\"} 1\n") != NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_recovered_total{endpoint=\"other\"} 6\n") != NULL);
    CHECK(strstr(out, "bad") == NULL);
    free(out);

    /* Deliveries per destination: a declared destination at 0 for every outcome; past
     * WI_METRICS_MAX_DESTS, or a name that cannot be a label, "other" (shown once it counted). */
    wi_metrics_effect_destination("app_kyc");
    wi_metrics_effect_destination("app_kyc");
    wi_metrics_effect("app_kyc", WI_M_EF_DELIVERED);
    wi_metrics_effect("app_kyc", WI_M_EF_DELIVERED);
    wi_metrics_effect("app_kyc", WI_M_EF_RETRY);
    wi_metrics_effect("mailer", WI_M_EF_QUARANTINED);
    wi_metrics_effect("app_kyc", WI_M_EF_RESULTS); /* not an outcome: ignored */
    out = render(NULL);
    CHECK(strstr(out, "webhook_inbox_effects_total{destination=\"app_kyc\",outcome=\"delivered\"} 2\n"
                      "webhook_inbox_effects_total{destination=\"app_kyc\",outcome=\"retry\"} 1\n"
                      "webhook_inbox_effects_total{destination=\"app_kyc\",outcome=\"quarantined\"} 0\n"
                      "webhook_inbox_effects_total{destination=\"app_kyc\",outcome=\"lease_lost\"} 0\n") != NULL);
    CHECK(strstr(out, "{destination=\"mailer\",outcome=\"quarantined\"} 1\n") != NULL);
    CHECK(count(out, "destination=\"app_kyc\",outcome") == 4);
    CHECK(strstr(out, "destination=\"other\"") == NULL);
    free(out);
    for (i = 0; i < WI_METRICS_MAX_DESTS; i++) {
        snprintf(type, sizeof type, "d%d", i);
        wi_metrics_effect(type, WI_M_EF_DELIVERED);
    }
    wi_metrics_effect("Bad Name\n", WI_M_EF_LEASE_LOST);
    out = render(NULL);
    CHECK(strstr(out, "{destination=\"d97\",outcome=\"delivered\"} 1\n") != NULL); /* app_kyc, mailer, d0..d97 */
    CHECK(strstr(out, "destination=\"d98\"") == NULL);
    CHECK(strstr(out, "{destination=\"other\",outcome=\"delivered\"} 2\n") != NULL);
    CHECK(strstr(out, "{destination=\"other\",outcome=\"lease_lost\"} 1\n") != NULL);
    CHECK(strstr(out, "Bad") == NULL);
    free(out);

    wi_metrics_reset();
    out = render(NULL);
    CHECK(strstr(out, "webhook_inbox_effects_total{") == NULL);
    CHECK(strstr(out, "webhook_inbox_reconcile_walks_total{") == NULL);
    CHECK(strstr(out, "webhook_inbox_stats_up") == NULL);
    CHECK(strstr(out, "webhook_inbox_effects_stats_up") == NULL);
    CHECK(strstr(out, "event_type=") == NULL);
    CHECK(strstr(out, "webhook_inbox_receipt_to_done_seconds_count 0\n") != NULL);
    free(out);
    DONE("test_metrics");
}
