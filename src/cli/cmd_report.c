/* cmd_report.c: `llmbench report [SPEC...] --out DIR`: an HTML page with charts and a
 * Markdown file of stored runs (report/report.h), chosen by id, id list, sweep name, or
 * time window. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "history/select.h"
#include "report/report.h"
#include "store/store.h"

/* A group named by its ids ("12,13,12") named again by those it kept ("12,13"). */
static void relabel_ids(lb_run_group *grp) {
    if (!grp->by_ids) return; /* a sweep's cell, a benchmark */
    size_t len = 0;
    grp->label[0] = '\0';
    for (size_t i = 0; i < grp->n && len < sizeof grp->label; i++)
        len += (size_t)snprintf(grp->label + len, sizeof grp->label - len, "%s%lld", i ? "," : "",
                                (long long)grp->ids[i]);
}

/* Grows *sweep_of (one entry per group of set) to set's groups, the new ones cells of sweep
 * (NULL: none). */
static lb_status name_new_cells(const char ***sweep_of, const lb_run_set *set, size_t n_had,
                                const char *sweep, lb_err *err) {
    const char **names = realloc(*sweep_of, (set->n_groups + 1) * sizeof *names);
    if (names == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to load runs");
    *sweep_of = names;
    for (size_t g = n_had; g < set->n_groups; g++)
        names[g] = sweep;
    return LB_OK;
}

/* Each run once: a run named twice ("12 12", "12,12", or an id and a --since window that
 * holds it) would count twice in its configuration's median and in the page's run count.
 * Its first mention keeps it; a group left with no run goes, one named by ids is named by
 * those it kept; sweep_of (per group) follows the groups. */
static void drop_repeats(lb_run_set *set, const char **sweep_of) {
    size_t n_groups = 0;
    for (size_t g = 0; g < set->n_groups; g++) {
        lb_run_group *grp = &set->groups[g];
        size_t kept = 0;
        for (size_t i = 0; i < grp->n; i++) {
            bool seen = false;
            for (size_t h = 0; h < n_groups && !seen; h++)
                for (size_t j = 0; j < set->groups[h].n && !seen; j++)
                    seen = set->groups[h].ids[j] == grp->ids[i];
            for (size_t j = 0; j < kept && !seen; j++)
                seen = grp->ids[j] == grp->ids[i];
            if (seen) {
                lb_result_free(grp->runs[i]);
                continue;
            }
            grp->runs[kept] = grp->runs[i];
            grp->ids[kept++] = grp->ids[i];
        }
        if (kept < grp->n) {
            grp->n = kept;
            relabel_ids(grp);
        }
        if (kept == 0) {
            free(grp->runs);
            free(grp->ids);
        } else {
            sweep_of[n_groups] = sweep_of[g];
            set->groups[n_groups++] = *grp;
        }
    }
    set->n_groups = n_groups;
}

int lb_cmd_report(int argc, char **argv) {
    lb_report_params p = lb_report_default_params();
    const char *out = NULL;
    double since_h = 0;
    const lb_arg_spec specs[] = {
        {"--out", LB_ARG_STRING, &out, "DIR",
         "folder for report.html, report.md and chart-N.svg (created; required)"},
        {"--since", LB_ARG_DOUBLE, &since_h, "HOURS",
         "the ok runs of the last HOURS hours (with or instead of SPECs)", 1e-3, 1e7},
        {"--title", LB_ARG_STRING, &p.title, "TEXT", "the page's title (default llmbench report)"},
        {"--threshold", LB_ARG_DOUBLE, &p.threshold_pct, "PCT",
         "smallest history change called a regression, in percent (default 3)", 0, 1000},
    };
    const lb_cli_command cmd = {
        .command = "report",
        .uses_db = true,
        .usage = "[SPEC...] --out DIR [options]",
        .summary = "Writes a report of stored runs: report.html (self-contained: charts as inline "
                   "SVG, no scripts or network), report.md with the same tables, and each chart "
                   "as chart-N.svg. A SPEC is a run id (12), a list of repeats (12,13,14) or a "
                   "sweep's name (one configuration per cell; 'NAME: cell' beside other SPECs). "
                   "The page holds an executive "
                   "summary of findings computed from the runs, key metrics per configuration, "
                   "charts (throughput with the spread of repeats, loss and step times, latency "
                   "CDFs, TTFT/TPOT against QPS, GPU use, scaling, each benchmark's history with "
                   "change points) and every run's provenance. A run named twice is reported "
                   "once.",
        LB_ARG_SPECS(specs),
        .max_positional = LB_ARGS_MAX_POSITIONAL,
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (out == NULL) {
        lb_args_usage_error("report", "--out DIR is required (the folder to write the report to)");
        return 2;
    }
    if (a.n_pos == 0 && since_h == 0) {
        lb_args_usage_error("report", "name the runs: run ids, a sweep's name, or --since HOURS");
        return 2;
    }
    p.out_dir = out;
    lb_err err = {{0}};
    lb_store *s = NULL;
    lb_run_set all = {0}, one = {0};
    const char **sweep_of = NULL; /* per group of all: the sweep it is a cell of, or NULL */
    bool several = a.n_pos + (since_h > 0) > 1; /* cells named by their sweep */
    lb_status st = lb_store_open_read(a.common.db_path, &s, &err);
    for (int i = 0; st == LB_OK && i < a.n_pos; i++) {
        size_t n_had = all.n_groups;
        st = lb_select_runs(s, a.pos[i], &one, &err);
        bool cells = st == LB_OK && one.sweep && several;
        if (st == LB_OK) st = lb_select_take(&all, &one, &err);
        if (st == LB_OK) st = name_new_cells(&sweep_of, &all, n_had, cells ? a.pos[i] : NULL, &err);
        lb_select_free(&one);
    }
    if (st == LB_OK && since_h > 0) {
        size_t n_had = all.n_groups;
        st = lb_select_since(s, lb_clock_wall_s() - since_h * 3600.0, &one, &err);
        if (st == LB_OK) st = lb_select_take(&all, &one, &err);
        if (st == LB_OK) st = name_new_cells(&sweep_of, &all, n_had, NULL, &err);
        lb_select_free(&one);
    }
    if (st == LB_OK) drop_repeats(&all, sweep_of);
    p.sweep_of = sweep_of;
    if (st == LB_OK && all.n_groups == 0)
        st = lb_fail(&err, LB_ERR_USAGE, "no ok run in the last %g hours in %s", since_h,
                     lb_store_path(s));
    char html[4200];
    if (st == LB_OK) st = lb_report_write(s, &all, &p, html, sizeof html, &err);
    lb_select_free(&all);
    free(sweep_of);
    lb_store_close(s);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench report: %s\n", err.msg);
        return lb_status_exit_code(st);
    }
    if (a.common.json) {
        /* the paths as JSON strings: a folder may hold quotes or backslashes */
        char md[4200];
        snprintf(md, sizeof md, "%s/report.md", out);
        json_t *doc = json_pack("{s:s, s:s}", "html", html, "markdown", md);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(doc);
    } else
        printf("report: %s (and %s/report.md)\n", html, out);
    return 0;
}
