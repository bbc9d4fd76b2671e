/* runctl.c: begin, work, finish: the stored-run lifecycle behind runctl.h. */
#include "cli/runctl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comminfo.h"
#include "core/clock.h"
#include "core/provenance.h"
#include "core/signals.h"
#include "core/utf8text.h"
#include "gpu/devinfo.h"
#include "store/store.h"

/* What the host says, merged under anything the command already put in r->provenance. */
static lb_status fill_provenance(lb_result *r, int argc, char **argv, lb_err *err) {
    json_t *p = lb_provenance_collect(argc, argv);
    if (p == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to collect provenance");
    lb_devinfo_add(p);
    lb_comminfo_add(p);
    if (r->provenance != NULL && json_object_update(p, r->provenance) != 0) {
        json_decref(p);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to collect provenance");
    }
    json_decref(r->provenance);
    r->provenance = p;
    return LB_OK;
}

/* Each non-empty line of LB_RUNCTL_TAGS_ENV, appended to r's tags. */
static lb_status add_env_tags(lb_result *r, lb_err *err) {
    const char *env = getenv(LB_RUNCTL_TAGS_ENV);
    for (const char *p = env; p != NULL && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0 && lb_result_add_tag(r, p, n) != LB_OK)
            return lb_fail(err, LB_ERR_NOMEM, "no memory for the run's tags");
        p = nl ? nl + 1 : p + n;
    }
    return LB_OK;
}

static void set_outcome(lb_result *r, lb_status work_status, const lb_err *work_err) {
    if (work_status == LB_ERR_INTERRUPTED || lb_signals_interrupted()) {
        int signo = lb_signals_received();
        r->status = LB_RUN_INTERRUPTED;
        if (work_status == LB_ERR_INTERRUPTED && work_err->msg[0])
            snprintf(r->failure, sizeof r->failure, "%s", work_err->msg);
        else
            snprintf(r->failure, sizeof r->failure, "interrupted by %s",
                     signo == SIGINT    ? "SIGINT"
                     : signo == SIGTERM ? "SIGTERM"
                     : signo == SIGPIPE ? "SIGPIPE (the reader of the output went away)"
                                        : "a signal");
    } else if (work_status != LB_OK) {
        r->status = LB_RUN_FAILED;
        snprintf(r->failure, sizeof r->failure, "%s",
                 work_err->msg[0] ? work_err->msg : lb_status_name(work_status));
    } else {
        r->status = LB_RUN_OK;
        r->failure[0] = '\0';
    }
    /* the sentence may quote outside bytes (a file name, a server's reply) or end cut inside a
     * character; the result's JSON (--json, an export) takes UTF-8 only */
    lb_utf8text_repair(r->failure);
}

/* The finish could not be written: the whole result goes to a side file, the row is marked
 * failed where it can still be updated, and err says where the result is. */
static void keep_aside(lb_store *store, int64_t run_id, const lb_result *r, const lb_err *why,
                       lb_err *err) {
    char side[LB_STORE_PATH_BYTES + 64];
    lb_err side_err = {{0}};
    if (lb_store_keep_aside(store, run_id, r, side, sizeof side, &side_err) != LB_OK) {
        lb_fail(err, LB_ERR_DB, "run %lld (%s) could not be stored: %s; nor kept in a file: %s",
                (long long)run_id, lb_result_status_name(r->status), why->msg, side_err.msg);
        return;
    }
    lb_err reason = {{0}}, mark_err = {{0}};
    lb_fail(&reason, LB_ERR_DB, "the finished result could not be stored (%s); it is in %s",
            why->msg, side);
    lb_store_run_mark(store, run_id, LB_RUN_FAILED, reason.msg, &mark_err);
    lb_fail(err, LB_ERR_DB,
            "run %lld (%s) could not be stored: %s; the whole result is in %s: store it with "
            "'llmbench results import %s'",
            (long long)run_id, lb_result_status_name(r->status), why->msg, side, side);
}

/* A second signal ends the process at once: the run is marked interrupted first, through a
 * connection of its own (the main thread may be inside its own). */
typedef struct {
    char path[LB_STORE_PATH_BYTES];
    int64_t run_id;
} last_words;

static void mark_interrupted(void *ctx, int signo) {
    const last_words *w = ctx;
    lb_store *s = NULL;
    lb_err err = {{0}};
    if (lb_store_open(w->path, &s, &err) == LB_OK)
        lb_store_run_mark(s, w->run_id, LB_RUN_INTERRUPTED,
                          signo == SIGTERM ? "a second SIGTERM ended the process before the "
                                             "samples were stored"
                                           : "a second SIGINT ended the process before the "
                                             "samples were stored",
                          &err);
    lb_store_close(s);
}

lb_status lb_runctl_run(const lb_cli_common *common, int argc, char **argv, lb_result *r,
                        lb_runctl_work_fn work, void *ctx, int64_t *run_id, lb_err *err) {
    *run_id = -1;
    lb_store *store = NULL;
    LB_TRY(lb_store_open(common->db_path, &store, err));
    lb_status status = fill_provenance(r, argc, argv, err);
    if (status == LB_OK) status = add_env_tags(r, err);
    if (status == LB_OK) {
        r->start_wall_s = lb_clock_wall_s();
        r->status = LB_RUN_RUNNING;
        status = lb_store_run_begin(store, r, run_id, err);
    }
    if (status != LB_OK) {
        lb_store_close(store);
        return status;
    }

    last_words words = {.run_id = *run_id};
    snprintf(words.path, sizeof words.path, "%s", lb_store_path(store));
    lb_signals_set_last_words(mark_interrupted, &words);
    lb_err work_err = {{0}};
    lb_status work_status = work(ctx, r, &work_err);
    r->end_wall_s = lb_clock_wall_s();
    set_outcome(r, work_status, &work_err);

    lb_err store_err = {{0}};
    status = lb_store_run_finish(store, *run_id, r, &store_err);
    if (status != LB_OK) {
        keep_aside(store, *run_id, r, &store_err, err);
        status = LB_ERR_DB;
    } else {
        if (common->verbosity >= 0)
            fprintf(stderr, "llmbench: stored run %lld (%s) in %s\n", (long long)*run_id,
                    lb_result_status_name(r->status), lb_store_path(store));
        status = r->status == LB_RUN_OK            ? LB_OK
                 : r->status == LB_RUN_INTERRUPTED ? LB_ERR_INTERRUPTED
                                                   : work_status;
        if (status != LB_OK) lb_fail(err, status, "%s", r->failure);
    }
    lb_signals_set_last_words(NULL, NULL);
    lb_store_close(store);
    return status;
}
