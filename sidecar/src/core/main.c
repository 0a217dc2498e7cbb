/* main.c - webhook-inbox-sidecar: subcommands, configuration, signals and the main loop
 * that supervises the worker threads. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "admin/audit.h"
#include "admin/flow_admin.h"
#include "admin/migrate.h"
#include "admin/outbox_admin.h"
#include "admin/requeue.h"
#include "claim/listener.h"
#include "claim/worker.h"
#include "core/config.h"
#include "core/log.h"
#include "delivery/outbox.h"
#include "observability/exporter.h"
#include "observability/metrics.h"
#include "pg/schema.h"
#include "observability/notify.h"
#include "observability/otlp.h"
#include "reconcile/reconcile.h"
#include "retention/prune.h"
#include "retention/retention.h"

static volatile sig_atomic_t got_term, got_hup;
static int sig_pipe[2] = {-1, -1};

/* Signal handlers only set flags and poke the self-pipe; a second SIGTERM/SIGINT exits now. */
static void on_term(int sig)
{
    int saved = errno; /* the interrupted poll() must still see its EINTR */
    (void)sig;
    if (got_term)
        _exit(1);
    got_term = 1;
    (void)!write(sig_pipe[1], "t", 1);
    errno = saved;
}

static void on_hup(int sig)
{
    int saved = errno;
    (void)sig;
    got_hup = 1;
    (void)!write(sig_pipe[1], "h", 1);
    errno = saved;
}

static void usage(FILE *out)
{
    fputs("usage: webhook-inbox-sidecar COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  run       process pending inbox events (--once: drain what is due, then exit)\n"
          "  migrate   apply the embedded schema (idempotent, advisory-locked); migrate --citus: and\n"
          "            the Citus layout (inbox distributed by source_scope; see docs/capacity.md)\n"
          "  stats     pending count, oldest pending age, attempts, quarantined, done, latency p50/p95/p99,\n"
          "            events waiting for a route (--json)\n"
          "  requeue   quarantined -> pending with attempts reset (--id SCOPE/ID, --event-id, --type, --scope, --all;\n"
          "            --replay: done -> pending, with a filter; recorded in webhook_inbox_actions with --actor;\n"
          "            outbox effects: --effects with --operation-id ID, --destination NAME (or both), or --all)\n"
          "  prune     retention: empty done events and delete delivered effects older than --older-than\n"
          "            (>= 3d; optional --scope; keys kept --remember-pruned more, 30d by default);\n"
          "            run --retain 30d does it on a schedule\n"
          "  pause     hold a route (--type PATTERN), a scope (--scope) or a destination (--destination NAME):\n"
          "            its events (effects) stay pending, uncharged; recorded in webhook_inbox_actions (--actor)\n"
          "  resume    let it go again, optionally at --rate N events/s (over all sidecars; routes, destinations)\n"
          "  reconcile recover what a provider sent and the inbox lacks, from its API (--endpoint NAME, --since 72h;\n"
          "            endpoints defined by --endpoint NAME=PROVIDER:SCOPE ...); run --reconcile NAME=1h does it on a schedule\n"
          "  notify    notify --test: a test message to each --notify destination, delivered by a running sidecar;\n"
          "            run --notify NAME tells that destination when an operational condition starts or clears\n"
          "\n"
          "options (flag > environment > --config file > default):\n",
          out);
    wi_config_usage(out);
    fputs("\nsignals (run): TERM/INT finish the transaction in flight and exit 0 (twice: exit now);\n"
          "HUP re-reads the configuration (a bad one is ignored, the old one kept).\n",
          out);
}

static int nonblock_pipe(int fds[2])
{
    if (pipe(fds) < 0)
        return -1;
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

static void reload(struct wi_runtime *rt, int argc, char **argv)
{
    struct wi_config fresh;
    struct wi_err err;

    if (wi_config_load(&fresh, argc, argv, &err) < 0) {
        log_warnx("config_reload_failed", "error=%s note=\"keeping the old configuration\"", WI_LOG_Q(err.msg));
        return;
    }
    pthread_mutex_lock(&rt->lock);
    wi_config_apply_reload(&rt->cfg, &fresh);
    wi_log_set_level(rt->cfg.log_level);
    pthread_mutex_unlock(&rt->lock);
    log_info("config_reloaded", "batch_size=%d max_attempts=%d unrouted=%s", fresh.batch_size, fresh.max_attempts,
             wi_config_unrouted_name(fresh.unrouted));
    wi_config_free(&fresh);
}

static int cmd_run(struct wi_config *cfg, int argc, char **argv)
{
    struct wi_runtime rt;
    struct wi_worker *workers;
    struct wi_exporter *exporter = NULL;
    struct wi_retention *retention = NULL;
    struct wi_rc_sched *reconciler = NULL;
    struct wi_notify *notifier = NULL;
    struct wi_err err;
    struct wi_outbox *outbox = NULL;
    struct wi_listener *listener = NULL;
    int stop_pipe[2], i, started = 0, rc;
    long ticks = 0, last_seen = 0;
    sigset_t all, old;
    struct sigaction sa;

    memset(&rt, 0, sizeof rt);
    if (nonblock_pipe(sig_pipe) < 0 || nonblock_pipe(stop_pipe) < 0)
        fatal("pipe_failed", "error=%d", errno);
    pthread_mutex_init(&rt.lock, NULL);
    wi_wake_init(&rt.claims);
    rt.cfg = *cfg; /* takes ownership of the strings */
    memset(cfg, 0, sizeof *cfg);
    rt.stop_fd = stop_pipe[0];
    rt.wake_fd = sig_pipe[1];

    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);

    workers = calloc((size_t)rt.cfg.concurrency, sizeof *workers);
    if (!workers)
        fatal("out_of_memory", NULL);
    log_info("starting", "concurrency=%d batch_size=%d once=%d", rt.cfg.concurrency, rt.cfg.batch_size, rt.cfg.once);

    /* Trace spans (only with --otlp-endpoint): started before the threads that add them. */
    if (rt.cfg.otlp_endpoint && *rt.cfg.otlp_endpoint) {
        if (wi_otlp_start(rt.cfg.otlp_endpoint, rt.cfg.otlp_queue, &err) < 0)
            log_errorx("otlp_failed", "error=%s note=\"running without trace spans\"", WI_LOG_Q(err.msg));
        else
            log_info("otlp_on", "queue=%d", rt.cfg.otlp_queue); /* the URL may hold credentials: not logged */
    }
    /* The outbox's deliverer (only with --destination): its own thread and connection. */
    if (rt.cfg.destinations.n > 0 && !(outbox = wi_outbox_start(&rt)))
        fatal("outbox_failed", "note=\"destinations are configured but the deliverer could not start\"");

    /* Workers never see signals: only this thread runs the handlers. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (rt.cfg.metrics_listen && *rt.cfg.metrics_listen &&
        !(exporter = wi_exporter_start(rt.cfg.metrics_listen, rt.cfg.database_url, &rt.cfg.destinations, &err))) {
        log_errorx("metrics_listen_failed", "error=%s", WI_LOG_Q(err.msg));
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        free(workers);
        rc = 2;
        goto out;
    }
    if (rt.cfg.retain > 0 && rt.cfg.once)
        log_info("retention_off", "note=\"--retain is ignored with --once (use the prune command)\"");
    else if (rt.cfg.retain > 0 &&
             !(retention = wi_retention_start(rt.cfg.database_url, rt.cfg.retain, rt.cfg.remember_pruned,
                                              rt.cfg.retain_interval, &err)))
        log_errorx("retention_failed", "error=%s note=\"running without scheduled retention\"", WI_LOG_Q(err.msg));
    if (rt.cfg.reconciles.n > 0 && !rt.cfg.once && !(reconciler = wi_rc_sched_start(&rt.cfg, &err)))
        log_errorx("reconcile_failed", "error=%s note=\"running without scheduled reconcile\"", WI_LOG_Q(err.msg));
    if (rt.cfg.notifies.n > 0 && !rt.cfg.once && !(notifier = wi_notify_start(&rt.cfg, &err)))
        log_errorx("notify_failed", "error=%s note=\"running without operational notifications\"", WI_LOG_Q(err.msg));
    for (i = 0; i < rt.cfg.concurrency; i++) {
        workers[i].id = i + 1;
        workers[i].rt = &rt;
        atomic_fetch_add(&rt.alive, 1);
        if (pthread_create(&workers[i].thread, NULL, wi_worker_main, &workers[i]) != 0) {
            atomic_fetch_sub(&rt.alive, 1);
            log_warnx("thread_failed", "worker=%d", i + 1);
            break;
        }
        started++;
    }
    /* --once workers stop at the first empty claim: nothing to wake them. */
    if (!rt.cfg.once && !(listener = wi_listener_start(&rt)))
        log_warnx("thread_failed", "thread=listener note=\"workers look for events every --poll-interval\"");
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    while (atomic_load(&rt.alive) > 0) {
        struct pollfd p = {sig_pipe[0], POLLIN, 0};
        char buf[64];
        if (poll(&p, 1, 1000) < 0 && errno != EINTR)
            break;
        if (++ticks % 60 == 0) { /* about once a minute: a summary line, when something happened */
            long seen = wi_metrics_get(WI_M_DONE) + wi_metrics_get(WI_M_QUARANTINED) + wi_metrics_get(WI_M_RETRY) +
                        wi_metrics_get(WI_M_WAITING) + wi_metrics_get(WI_M_RECONNECTS);
            if (seen != last_seen)
                wi_metrics_log_summary();
            last_seen = seen;
        }
        while (read(sig_pipe[0], buf, sizeof buf) > 0)
            ;
        if (got_term && !atomic_load(&rt.stopping)) {
            log_info("stopping", "note=\"finishing the transaction in flight\"");
            atomic_store(&rt.stopping, 1);
            (void)!write(stop_pipe[1], "s", 1);
            wi_wake_stop(&rt.claims);
        }
        if (got_hup) {
            got_hup = 0;
            reload(&rt, argc, argv);
        }
    }
    for (i = 0; i < started; i++)
        pthread_join(workers[i].thread, NULL);
    if (listener) { /* also when no worker could start: the listener needs the stop */
        atomic_store(&rt.stopping, 1);
        (void)!write(stop_pipe[1], "s", 1);
        wi_listener_stop(listener);
    }
    wi_outbox_join(outbox);
    wi_retention_stop(retention); /* a delete batch in flight finishes first */
    wi_rc_sched_stop(reconciler); /* a page in flight commits first */
    wi_notify_stop(notifier);     /* a check in flight commits first */
    wi_otlp_stop();               /* the spans of the work above, sent once more */
    wi_exporter_stop(exporter);   /* serves the final counts until the workers are done */
    wi_metrics_log_summary();
    rc = atomic_load(&rt.failed) ? 1 : 0;
    free(workers);
out:
    wi_metrics_reset();
    wi_config_free(&rt.cfg);
    wi_wake_destroy(&rt.claims);
    pthread_mutex_destroy(&rt.lock);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    close(sig_pipe[0]);
    close(sig_pipe[1]);
    return rc;
}

/* pause / resume (flow_admin.c): prints what it held or made due. Returns the exit code. */
static int cmd_flow(const struct wi_config *cfg, int resume)
{
    const char *cmd = resume ? "resume" : "pause";
    struct wi_flow_target t;
    struct wi_err err;
    char actor[512];
    long n;

    if (!resume && cfg->rate) {
        fprintf(stderr, "webhook-inbox-sidecar pause: --rate is resume's (resume --rate N lets it go at N events/s)\n");
        return 2;
    }
    if (wi_flow_target(cfg->type, cfg->scope, cfg->effects_destination, &t, &err) < 0) {
        fprintf(stderr, "webhook-inbox-sidecar %s: %s\n", cmd, err.msg);
        return 2;
    }
    wi_audit_actor(cfg->actor, actor, sizeof actor);
    n = resume ? wi_flow_resume(cfg->database_url, &t, cfg->rate, actor, &err) : wi_flow_pause(cfg->database_url, &t, actor, &err);
    if (n < 0) {
        const char *problem = wi_schema_err_problem(&err);
        if (problem)
            fprintf(stderr, "webhook-inbox-sidecar %s: %s (%s)\n", cmd, problem, err.msg);
        else
            fprintf(stderr, "webhook-inbox-sidecar %s: %s\n", cmd, err.msg);
        return err.code == WI_ERR_ARG ? 2 : 1;
    }
    if (resume)
        printf("resumed %s %s%s%s%s (%ld due now)\n", t.kind, t.target, cfg->rate ? " at " : "", cfg->rate ? cfg->rate : "",
               cfg->rate ? "/s" : "", n);
    else
        printf("paused %s %s (%ld pending held)\n", t.kind, t.target, n);
    return 0;
}

int main(int argc, char **argv)
{
    struct wi_config cfg;
    struct wi_err err;
    char actor[512]; /* requeue, prune: --actor or $USER@host (audit.c) */
    const char *cmd = argc > 1 ? argv[1] : "";
    int rc = 0, first, citus = 0;

    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "run") && strcmp(cmd, "migrate") && strcmp(cmd, "stats") && strcmp(cmd, "requeue") &&
        strcmp(cmd, "prune") && strcmp(cmd, "reconcile") && strcmp(cmd, "pause") && strcmp(cmd, "resume") &&
        strcmp(cmd, "notify") && strcmp(cmd, "--print-config")) {
        usage(stderr);
        fprintf(stderr, "\nwebhook-inbox-sidecar: unknown command '%s'\n", cmd);
        return 2;
    }
    first = strcmp(cmd, "--print-config") ? 2 : 1; /* --print-config is allowed without a command */
    if (!strcmp(cmd, "migrate") && argc > 2 && !strcmp(argv[2], "--citus")) { /* migrate's own flag, first */
        citus = 1;
        first = 3;
    }
    if (wi_config_load(&cfg, argc - first, argv + first, &err) < 0) {
        fprintf(stderr, "webhook-inbox-sidecar: %s\n", err.msg);
        return 2;
    }
    wi_log_set_level(cfg.log_level);
    wi_pg_set_notice_hook(wi_metrics_server_notice);
    if (cfg.help) {
        usage(stdout);
        goto out;
    }
    if (cfg.print_config) {
        wi_config_print(&cfg, stdout);
        goto out;
    }

    if (cfg.effects_destination && !(!strcmp(cmd, "requeue") && cfg.effects) && strcmp(cmd, "pause") &&
        strcmp(cmd, "resume")) {
        fprintf(stderr, "webhook-inbox-sidecar: --destination NAME (without =URL) names the effects to requeue: "
                        "requeue --effects --destination NAME; %s\n",
                !strcmp(cmd, "requeue") ? "add --effects" : "a destination to deliver to is --destination NAME=URL");
        rc = 2;
        goto out;
    }
    if (!strcmp(cmd, "run") && cfg.notifies.n > 0) { /* a wrong --notify refuses to start, never runs untold */
        char d[WI_NOTIFY_TARGETS_MAX], f[WI_NOTIFY_TARGETS_MAX], s[WI_NOTIFY_TARGETS_MAX];
        if (wi_notify_targets(&cfg, d, sizeof d, f, sizeof f, s, sizeof s, &err) < 0) {
            fprintf(stderr, "webhook-inbox-sidecar run: %s\n", err.msg);
            rc = 2;
            goto out;
        }
    }
    if (!strcmp(cmd, "run")) {
        rc = cmd_run(&cfg, argc - first, argv + first);
    } else if (!strcmp(cmd, "migrate")) {
        if (wi_migrate(cfg.database_url, citus, stdout, &err) < 0) {
            fprintf(stderr, "webhook-inbox-sidecar migrate: %s\n", err.msg);
            rc = 1;
        }
    } else if (!strcmp(cmd, "stats")) {
        if (wi_metrics_stats(cfg.database_url, cfg.json, stdout, &err) < 0) {
            const char *problem = wi_schema_err_problem(&err);
            if (problem)
                fprintf(stderr, "webhook-inbox-sidecar stats: %s (%s)\n", problem, err.msg);
            else
                fprintf(stderr, "webhook-inbox-sidecar stats: %s\n", err.msg);
            rc = 1;
        }
    } else if (!strcmp(cmd, "requeue") && cfg.effects) {
        long n = wi_outbox_requeue(cfg.database_url, cfg.operation_id, cfg.effects_destination, cfg.all, &err);
        if (n < 0) {
            fprintf(stderr, "webhook-inbox-sidecar requeue: %s\n", err.msg);
            rc = err.code == WI_ERR_ARG ? 2 : 1;
        } else {
            printf("requeued %ld effects\n", n);
        }
    } else if (!strcmp(cmd, "requeue")) {
        const char *scope = cfg.scope, *event_id = cfg.event_id;
        char *split = NULL;
        long n;
        if (cfg.id) {
            char *slash = strchr(cfg.id, '/');
            if (!slash) {
                fprintf(stderr, "webhook-inbox-sidecar requeue: --id must be SCOPE/EVENT_ID\n");
                rc = 2;
                goto out;
            }
            split = strdup(cfg.id);
            if (!split)
                fatal("out_of_memory", NULL);
            split[slash - cfg.id] = '\0';
            scope = split;
            event_id = split + (slash - cfg.id) + 1;
        }
        wi_audit_actor(cfg.actor, actor, sizeof actor);
        n = wi_requeue(cfg.database_url, cfg.replay, scope, event_id, cfg.type, cfg.all, actor, &err);
        free(split);
        if (n < 0) {
            const char *problem = wi_schema_err_problem(&err);
            if (problem)
                fprintf(stderr, "webhook-inbox-sidecar requeue: %s (%s)\n", problem, err.msg);
            else
                fprintf(stderr, "webhook-inbox-sidecar requeue: %s\n", err.msg);
            rc = err.code == WI_ERR_ARG ? 2 : 1;
        } else {
            printf("%s %ld\n", cfg.replay ? "replayed" : "requeued", n);
        }
    } else if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume")) {
        rc = cmd_flow(&cfg, !strcmp(cmd, "resume"));
    } else if (!strcmp(cmd, "notify")) {
        if (!cfg.test) {
            fprintf(stderr, "webhook-inbox-sidecar notify: only notify --test (run --notify NAME sends the real ones)\n");
            rc = 2;
        } else {
            rc = wi_notify_test(&cfg, 15.0, stdout);
        }
    } else if (!strcmp(cmd, "reconcile")) {
        rc = wi_rc_command(&cfg, stdout, stderr);
    } else if (!strcmp(cmd, "prune")) {
        long effects, forgotten, n;
        int audited;
        wi_audit_actor(cfg.actor, actor, sizeof actor);
        n = wi_prune(cfg.database_url, cfg.older_than, cfg.remember_pruned, cfg.scope, actor, &effects, &forgotten,
                     &audited, &err);
        if (n < 0) {
            fprintf(stderr, "webhook-inbox-sidecar prune: %s\n", err.msg);
            rc = err.code == WI_ERR_ARG ? 2 : 1;
        } else {
            printf("pruned %ld (and %ld delivered effects; %ld pruned keys forgotten)\n", n, effects, forgotten);
            if (!audited)
                fprintf(stderr, "webhook-inbox-sidecar prune: not recorded in webhook_inbox_actions "
                                "(the schema is older than v%d: run migrate)\n", WI_AUDIT_PRUNE_SCHEMA);
        }
    }
out:
    wi_config_free(&cfg);
    return rc;
}
