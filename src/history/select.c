/* select.c: run specs into loaded runs (select.h). */
#include "history/select.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/signals.h"
#include "core/utf8text.h"
#include "history/bench.h"

/* LB_ERR_INTERRUPTED once Ctrl-C came: loading many runs with their samples takes a while. */
static lb_status check_interrupted(lb_err *err) {
    return lb_signals_interrupted()
               ? lb_fail(err, LB_ERR_INTERRUPTED, "interrupted while loading the runs")
               : LB_OK;
}

/* Appends run r (taking it over; freed here when it cannot be kept). */
static lb_status append(lb_run_group *g, lb_result *r, int64_t id, lb_err *err) {
    lb_result **runs = realloc(g->runs, (g->n + 1) * sizeof *runs);
    if (runs) g->runs = runs;
    int64_t *ids = runs ? realloc(g->ids, (g->n + 1) * sizeof *ids) : NULL;
    if (ids) g->ids = ids;
    if (ids == NULL) {
        lb_result_free(r);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to load runs");
    }
    g->runs[g->n] = r;
    g->ids[g->n++] = id;
    return LB_OK;
}

static lb_run_group *add_group(lb_run_set *set, const char *label) {
    lb_run_group *g = realloc(set->groups, (set->n_groups + 1) * sizeof *g);
    if (g == NULL) return NULL;
    set->groups = g;
    g = &set->groups[set->n_groups++];
    memset(g, 0, sizeof *g);
    snprintf(g->label, sizeof g->label, "%s", label);
    return g;
}

static bool all_ids(const char *spec) {
    for (const char *p = spec; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != ',') return false;
    return spec[0] != '\0';
}

static lb_status select_ids(lb_store *s, const char *spec, lb_run_set *out, lb_err *err) {
    lb_run_group *g = add_group(out, spec);
    if (g == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to load runs");
    g->by_ids = true;
    for (const char *p = spec; *p;) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(p, &end, 10);
        if (end == p || errno != 0 || id <= 0)
            return lb_fail(err, LB_ERR_USAGE,
                           "'%s' is not a run id, a list of ids (12,13) or a sweep name", spec);
        LB_TRY(check_interrupted(err));
        bool exists = false;
        LB_TRY(lb_store_run_exists(s, id, &exists, err));
        if (!exists)
            return lb_fail(err, LB_ERR_USAGE,
                           "run %lld does not exist in %s (see 'llmbench results list')", id,
                           lb_store_path(s));
        lb_result *r = NULL;
        LB_TRY(lb_store_run_load(s, id, &r, err));
        if (strcmp(r->kind, "sweep") == 0) {
            lb_status st = lb_fail(err, LB_ERR_USAGE,
                                   "run %lld is the table of sweep '%s', not a run of its cells: "
                                   "name the sweep ('%s') to use its cells",
                                   id, r->name, r->name);
            lb_result_free(r);
            return st;
        }
        LB_TRY(append(g, r, id, err));
        p = *end == ',' ? end + 1 : end;
        if (*end == ',' && *p == '\0')
            return lb_fail(err, LB_ERR_USAGE,
                           "'%s' ends with a comma: a list of ids is written 12,13,14", spec);
    }
    return LB_OK;
}

static const char *cell_of(const lb_result *r) {
    size_t i;
    json_t *t;
    json_array_foreach(r->tags, i, t) {
        const char *text = json_string_value(t);
        if (text && strncmp(text, "sweep-cell:", 11) == 0) return text + 11;
    }
    return "all";
}

/* The runs of list[0..n-1] (newest first), oldest first, of ok runs not of kind sweep, into
 * groups: by sweep cell, or by benchmark ("name [key]"). */
static lb_status group_runs(lb_store *s, const lb_store_run_info *list, size_t n, bool by_cell,
                            lb_run_set *out, lb_err *err) {
    static char identity[LB_BENCH_ID_BYTES];
    for (size_t i = n; i-- > 0;) {
        if (strcmp(list[i].kind, "sweep") == 0) continue;
        LB_TRY(check_interrupted(err));
        lb_result *r = NULL;
        LB_TRY(lb_store_run_load(s, list[i].id, &r, err));
        char label[256], key[13];
        if (by_cell) { /* cut between characters: a label is a JSON string in compare --json */
            const char *cell = cell_of(r);
            snprintf(label, sizeof label, "%.*s", (int)lb_utf8text_cut_len(cell, sizeof label - 1),
                     cell);
        } else {
            lb_bench_identity(r, identity, sizeof identity);
            lb_bench_key(identity, key);
            snprintf(label, sizeof label, "%s [%s]", r->name, key);
        }
        lb_run_group *g = NULL;
        for (size_t k = 0; k < out->n_groups; k++)
            if (strcmp(out->groups[k].label, label) == 0) g = &out->groups[k];
        if (g == NULL && (g = add_group(out, label)) == NULL) {
            lb_result_free(r);
            return lb_fail(err, LB_ERR_NOMEM, "no memory to load runs");
        }
        LB_TRY(append(g, r, list[i].id, err));
    }
    return LB_OK;
}

lb_status lb_select_runs(lb_store *s, const char *spec, lb_run_set *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", spec);
    if (all_ids(spec)) return select_ids(s, spec, out, err);
    char tag[160];
    snprintf(tag, sizeof tag, "sweep:%s", spec);
    lb_store_filter f = lb_store_default_filter();
    f.tag = tag;
    f.status = LB_RUN_OK;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    LB_TRY(lb_store_list(s, &f, &list, &n, err));
    out->sweep = true;
    lb_status st = group_runs(s, list, n, true, out, err);
    free(list);
    if (st == LB_OK && out->n_groups == 0)
        st = lb_fail(err, LB_ERR_USAGE,
                     "'%s' is neither a run id nor the name of a sweep with ok runs in %s", spec,
                     lb_store_path(s));
    return st;
}

lb_status lb_select_since(lb_store *s, double since_wall_s, lb_run_set *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    lb_store_filter f = lb_store_default_filter();
    f.status = LB_RUN_OK;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    LB_TRY(lb_store_list(s, &f, &list, &n, err));
    size_t keep = 0; /* in id order, which an imported run's old start does not follow */
    for (size_t i = 0; i < n; i++)
        if (list[i].start_wall_s >= since_wall_s) list[keep++] = list[i];
    lb_status st = group_runs(s, list, keep, false, out, err);
    free(list);
    return st;
}

lb_status lb_select_take(lb_run_set *into, lb_run_set *from, lb_err *err) {
    lb_run_group *g = realloc(into->groups, (into->n_groups + from->n_groups + 1) * sizeof *g);
    if (g == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to load runs");
    into->sweep = into->n_groups == 0 ? from->sweep : into->sweep && from->sweep;
    memcpy(g + into->n_groups, from->groups, from->n_groups * sizeof *g);
    into->groups = g;
    into->n_groups += from->n_groups;
    free(from->groups);
    from->groups = NULL;
    from->n_groups = 0;
    return LB_OK;
}

void lb_select_free(lb_run_set *set) {
    if (set == NULL) return;
    for (size_t g = 0; g < set->n_groups; g++) {
        for (size_t i = 0; i < set->groups[g].n; i++)
            lb_result_free(set->groups[g].runs[i]);
        free(set->groups[g].runs);
        free(set->groups[g].ids);
    }
    free(set->groups);
    memset(set, 0, sizeof *set);
}
