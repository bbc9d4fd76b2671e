/* cmd_sweep.c: `llmbench sweep FILE`: an experiment matrix run as stored runs, resumed
 * when run again, and one aggregated table at the end (sweep/sweep.h does the work; this
 * file parses options, keeps the sweep's own run through runctl and prints the table). */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/runctl.h"
#include "core/proc.h"
#include "history/bench.h"
#include "store/store.h"
#include "sweep/sweep.h"

typedef struct {
    const lb_sweep_matrix *m;
    lb_sweep_params params;
} sweep_ctx;

static lb_status work(void *ctx, lb_result *r, lb_err *err) {
    sweep_ctx *c = ctx;
    lb_store *store = NULL;
    LB_TRY(lb_store_open(c->params.db_path, &store, err));
    lb_status st = lb_sweep_run(c->m, &c->params, store, r, err);
    lb_store_close(store);
    return st;
}

static const char *cell_metric_unit(const lb_result *r, const char *name) {
    for (size_t i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0) return r->metrics[i].unit;
    return "";
}

static double cell_stat(const lb_result *r, size_t cell, const char *metric, const char *stat) {
    char name[LB_NAME_BYTES];
    snprintf(name, sizeof name, "c%zu/%s/%s", cell, metric, stat);
    return lb_result_metric(r, name);
}

static void print_table(const lb_result *r, int64_t run_id) {
    const char *command = json_string_value(json_object_get(r->config, "command"));
    size_t n_keys = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(command ? command : "", &n_keys);
    json_t *cells = json_object_get(r->config, "cells");
    printf("sweep %s (run %lld, %s)\n", r->name, (long long)run_id,
           lb_result_status_name(r->status));
    printf("%-36s %-20s %-8s %4s %12s %12s %12s %12s\n", "cell", "metric", "unit", "n", "median",
           "std", "min", "max");
    size_t i;
    json_t *c;
    json_array_foreach(cells, i, c) {
        const char *label = json_string_value(json_object_get(c, "label"));
        bool any = false;
        for (size_t k = 0; k < n_keys; k++) {
            double n = cell_stat(r, i, keys[k].metric, "n");
            if (isnan(n)) continue;
            char name[LB_NAME_BYTES];
            snprintf(name, sizeof name, "c%zu/%s/median", i, keys[k].metric);
            printf("%-36s %-20s %-8s %4.0f %12.5g %12.4g %12.5g %12.5g\n", any ? "" : label,
                   keys[k].metric, cell_metric_unit(r, name), n,
                   cell_stat(r, i, keys[k].metric, "median"),
                   cell_stat(r, i, keys[k].metric, "std"), cell_stat(r, i, keys[k].metric, "min"),
                   cell_stat(r, i, keys[k].metric, "max"));
            any = true;
        }
        if (!any) printf("%-36s (no ok run)\n", label);
        size_t j;
        json_t *f;
        json_array_foreach(json_object_get(c, "failed"), j, f)
            printf("%-36s FAILED repeat %lld: %s\n", "",
                   (long long)json_integer_value(json_object_get(f, "repeat")),
                   json_string_value(json_object_get(f, "reason")));
    }
}

/* {"id", "name", "status", "failure", "command", "cells": [{... "metrics": {m: {median, std,
 * min, max, n, unit}}}]}: the table for machines. */
static void print_json(const lb_result *r, int64_t run_id) {
    const char *command = json_string_value(json_object_get(r->config, "command"));
    size_t n_keys = 0;
    const lb_key_metric *keys = lb_bench_key_metrics(command ? command : "", &n_keys);
    json_t *cells = json_deep_copy(json_object_get(r->config, "cells"));
    size_t i;
    json_t *c;
    json_array_foreach(cells, i, c) {
        json_t *metrics = json_object();
        for (size_t k = 0; k < n_keys; k++) {
            double n = cell_stat(r, i, keys[k].metric, "n");
            if (isnan(n)) continue;
            char name[LB_NAME_BYTES];
            snprintf(name, sizeof name, "c%zu/%s/median", i, keys[k].metric);
            json_object_set_new(metrics, keys[k].metric,
                                json_pack("{s:f, s:f, s:f, s:f, s:I, s:s}", "median",
                                          cell_stat(r, i, keys[k].metric, "median"), "std",
                                          cell_stat(r, i, keys[k].metric, "std"), "min",
                                          cell_stat(r, i, keys[k].metric, "min"), "max",
                                          cell_stat(r, i, keys[k].metric, "max"), "n",
                                          (json_int_t)n, "unit", cell_metric_unit(r, name)));
        }
        json_object_set_new(c, "metrics", metrics);
    }
    json_t *doc = json_pack("{s:I, s:s, s:s, s:s, s:s?, s:o}", "id", (json_int_t)run_id, "name",
                            r->name, "status", lb_result_status_name(r->status), "failure",
                            r->failure, "command", command, "cells", cells);
    json_dumpf(doc, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(doc);
}

/* --dry-run: the plan, as lines or JSON; returns the exit code. The database (NULL: none
 * taken as done, --again) is only read (a missing one holds no run yet): a dry run creates
 * and writes nothing. */
static int print_plan(const lb_sweep_matrix *m, const char *db, bool json, lb_err *err) {
    lb_store *store = NULL;
    json_t *plan = NULL;
    lb_status st = db && access(db, F_OK) == 0 ? lb_store_open_read(db, &store, err) : LB_OK;
    if (st == LB_OK) st = lb_sweep_plan(m, store, &plan, err);
    lb_store_close(store);
    if (st != LB_OK) return lb_status_exit_code(st);
    if (json) {
        json_dumpf(plan, stdout, JSON_INDENT(2));
        printf("\n");
    }
    size_t i, todo = 0;
    json_t *item;
    json_array_foreach(plan, i, item) {
        json_t *run = json_object_get(item, "run");
        todo += json_is_null(run);
        if (json) continue;
        printf("%-36s repeat %lld: ", json_string_value(json_object_get(item, "label")),
               (long long)json_integer_value(json_object_get(item, "repeat")));
        if (!json_is_null(run)) {
            printf("stored as run %lld\n", (long long)json_integer_value(run));
            continue;
        }
        printf("llmbench %s", m->command);
        size_t k;
        json_t *arg;
        json_array_foreach(json_object_get(item, "args"), k, arg) {
            putchar(' '); /* as a shell word, so the line pasted runs what the cell runs */
            lb_proc_sh_word(stdout, json_string_value(arg), LB_PROC_SH_BARE_PLAIN);
        }
        printf("\n");
    }
    if (!json) printf("%zu of %zu to run\n", todo, json_array_size(plan));
    json_decref(plan);
    return 0;
}

int lb_cmd_sweep(int argc, char **argv) {
    bool quiet_cells = false, dry_run = false, again = false;
    const lb_arg_spec specs[] = {
        {"--no-progress", LB_ARG_FLAG, &quiet_cells, NULL, "no line on stderr per cell x repeat"},
        {"--dry-run", LB_ARG_FLAG, &dry_run, NULL,
         "check the file and list each cell x repeat (stored already, or the command it would "
         "run); run nothing"},
        {"--again", LB_ARG_FLAG, &again, NULL,
         "run every cell x repeat, those stored as ok before too: a new round, which the "
         "table then holds (a scheduled sweep needs it)"},
    };
    const lb_cli_command cmd = {
        .command = "sweep",
        .uses_db = true,
        .usage = "FILE [options]",
        .summary =
            "Runs an experiment matrix: the command of FILE (YAML or JSON: name, command, "
            "repeats, options, axes) once per cell of the crossed axes and per repeat, each as "
            "a stored run tagged sweep:NAME, sweep-cell:LABEL and sweep-run:NAME/FINGERPRINT/rK. "
            "Run again, it resumes: a cell x repeat already stored as ok is not run again "
            "(with --again every one runs). A "
            "failed cell does not stop the others. Ends with one table of median, std, min and "
            "max over the repeats of each key metric per cell, stored as a run of kind sweep. "
            "One sweep of a name runs on a database at a time: a second one is refused at once "
            "(the lock DB.sweep-NAME.lock beside the database). "
            "Exit 0 when every cell x repeat is ok, 1 when some failed or the same sweep is "
            "already running, 2 for a bad file or a "
            "cell whose command line its command refuses (nothing runs), 130 when interrupted (run "
            "it again to resume; a round of --again goes on without --again, with the runs "
            "stored).\n\n"
            "example (YAML):\n"
            "  name: zero-x-precision\n"
            "  command: train\n"
            "  repeats: 3\n"
            "  options: {model: gpt2-124m, batch: 32, seq: 128, steps: 50}\n"
            "  axes: {zero: [0, 1, 2, 3], precision: [fp16, fp32]}",
        LB_ARG_SPECS(specs),
        .min_positional = 1,
        .max_positional = 1,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;

    lb_err err = {{0}};
    lb_sweep_matrix m;
    lb_status st = lb_sweep_matrix_read(a.pos[0], &m, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench sweep: %s\n", err.msg);
        lb_sweep_matrix_free(&m);
        return st == LB_ERR_USAGE || st == LB_ERR_FORMAT ? 2 : lb_status_exit_code(st);
    }
    char exe[4096], db[LB_STORE_PATH_BYTES], log_name[] = "/tmp/llmbench-sweep-XXXXXX";
    char log_path[32];
    int log_fd = -1;
    if (lb_proc_self_exe(exe, sizeof exe, &err) != LB_OK ||
        lb_store_resolve_path(a.common.db_path, db, sizeof db, &err) != LB_OK ||
        (log_fd = mkostemp(log_name, O_CLOEXEC)) < 0) {
        fprintf(stderr, "llmbench sweep: %s\n",
                err.msg[0] ? err.msg : "cannot make a log file in /tmp");
        lb_sweep_matrix_free(&m);
        return 1;
    }
    /* The children's stderr goes to a file without a name, reached through our descriptor
     * (a child opens it between fork and exec): nothing is left in /tmp however the sweep
     * ends, a second Ctrl-C's immediate exit included. */
    unlink(log_name);
    snprintf(log_path, sizeof log_path, "/dev/fd/%d", log_fd);
    sweep_ctx ctx = {.m = &m, .params = lb_sweep_default_params()};
    ctx.params.exe = exe;
    ctx.params.db_path = db;
    ctx.params.check_env = LB_ARGS_CHECK_ENV "=1";
    ctx.params.check_inputs_env = LB_ARGS_CHECK_ENV "=" LB_ARGS_CHECK_INPUTS;
    ctx.params.tags_env = LB_RUNCTL_TAGS_ENV;
    ctx.params.log_path = log_path;
    ctx.params.progress = !quiet_cells && a.common.verbosity >= 0;
    ctx.params.again = again;
    /* a dry run writes nothing and may look while the sweep runs */
    int lock = -1;
    st = dry_run ? LB_OK : lb_sweep_lock(&m, db, &lock, &err);
    if (st == LB_OK) st = lb_sweep_check(&m, &ctx.params, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench sweep: %s\n", err.msg);
        lb_sweep_unlock(lock);
        close(log_fd);
        lb_sweep_matrix_free(&m);
        return lb_status_exit_code(st);
    }
    if (dry_run) {
        rc = print_plan(&m, again ? NULL : db, a.common.json, &err);
        close(log_fd);
        lb_sweep_matrix_free(&m);
        if (rc != 0) fprintf(stderr, "llmbench sweep: %s\n", err.msg);
        return rc;
    }
    lb_result *r = lb_result_new("sweep", m.name);
    if (r == NULL) {
        fprintf(stderr, "llmbench sweep: out of memory\n");
        lb_sweep_unlock(lock);
        close(log_fd);
        lb_sweep_matrix_free(&m);
        return 1;
    }
    int64_t run_id = -1;
    a.common.db_path = db;
    st = lb_runctl_run(&a.common, argc + 1, argv - 1, r, work, &ctx, &run_id, &err);
    if (st == LB_OK || st == LB_ERR_RUNTIME) {
        if (a.common.json)
            print_json(r, run_id);
        else
            print_table(r, run_id);
    }
    if (st != LB_OK) fprintf(stderr, "llmbench sweep: %s\n", err.msg);
    lb_sweep_unlock(lock);
    close(log_fd);
    lb_result_free(r);
    lb_sweep_matrix_free(&m);
    return lb_status_exit_code(st);
}
