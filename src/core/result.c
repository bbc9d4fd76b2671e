/* result.c: growable metric and series arrays, and the JSON form of a result. */
#include "core/result.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

lb_result *lb_result_new(const char *kind, const char *name) {
    lb_result *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    copy_name(r->kind, sizeof r->kind, kind);
    copy_name(r->name, sizeof r->name, name);
    r->tags = json_array();
    r->config = json_object();
    r->provenance = json_object();
    r->status = LB_RUN_RUNNING;
    return r;
}

void lb_result_free(lb_result *r) {
    if (r == NULL) return;
    json_decref(r->tags);
    json_decref(r->config);
    json_decref(r->provenance);
    for (size_t i = 0; i < r->n_series; i++)
        free(r->series[i].values);
    free(r->series);
    free(r->metrics);
    free(r);
}

lb_status lb_result_set_metric(lb_result *r, const char *name, double value, const char *unit) {
    for (size_t i = 0; i < r->n_metrics; i++) {
        if (strcmp(r->metrics[i].name, name) == 0) {
            r->metrics[i].value = value;
            copy_name(r->metrics[i].unit, LB_UNIT_BYTES, unit);
            return LB_OK;
        }
    }
    if (r->n_metrics == r->cap_metrics) {
        size_t cap = r->cap_metrics ? r->cap_metrics * 2 : 16;
        lb_metric *m = realloc(r->metrics, cap * sizeof *m);
        if (m == NULL) return LB_ERR_NOMEM;
        r->metrics = m;
        r->cap_metrics = cap;
    }
    lb_metric *m = &r->metrics[r->n_metrics++];
    copy_name(m->name, LB_NAME_BYTES, name);
    copy_name(m->unit, LB_UNIT_BYTES, unit);
    m->value = value;
    return LB_OK;
}

double lb_result_metric(const lb_result *r, const char *name) {
    for (size_t i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0) return r->metrics[i].value;
    return NAN;
}

const lb_series *lb_result_find_series(const lb_result *r, const char *name) {
    for (size_t i = 0; i < r->n_series; i++)
        if (strcmp(r->series[i].name, name) == 0) return &r->series[i];
    return NULL;
}

lb_series *lb_result_series(lb_result *r, const char *name, const char *unit) {
    lb_series *found = (lb_series *)lb_result_find_series(r, name);
    if (found != NULL) return found;
    if (r->n_series == r->cap_series) {
        size_t cap = r->cap_series ? r->cap_series * 2 : 8;
        lb_series *s = realloc(r->series, cap * sizeof *s);
        if (s == NULL) return NULL;
        r->series = s;
        r->cap_series = cap;
    }
    lb_series *s = &r->series[r->n_series++];
    memset(s, 0, sizeof *s);
    copy_name(s->name, LB_NAME_BYTES, name);
    copy_name(s->unit, LB_UNIT_BYTES, unit);
    return s;
}

lb_status lb_result_series_push(lb_series *s, double value) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        double *v = realloc(s->values, cap * sizeof *v);
        if (v == NULL) return LB_ERR_NOMEM;
        s->values = v;
        s->cap = cap;
    }
    s->values[s->n++] = value;
    return LB_OK;
}

static const char *const status_names[] = {"running", "ok", "failed", "interrupted"};

const char *lb_result_status_name(lb_run_status status) {
    return (unsigned)status < 4 ? status_names[status] : "unknown";
}

int lb_result_status_parse(const char *name) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, status_names[i]) == 0) return i;
    return -1;
}

/* JSON has no NaN or infinity: such a value becomes null. */
static json_t *number(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *lb_result_to_json(const lb_result *r) {
    json_t *metrics = json_array();
    for (size_t i = 0; i < r->n_metrics; i++)
        json_array_append_new(metrics,
                              json_pack("{s:s, s:o, s:s}", "name", r->metrics[i].name, "value",
                                        number(r->metrics[i].value), "unit", r->metrics[i].unit));
    json_t *series = json_object();
    for (size_t i = 0; i < r->n_series; i++) {
        json_t *values = json_array();
        for (size_t k = 0; k < r->series[i].n; k++)
            json_array_append_new(values, number(r->series[i].values[k]));
        json_object_set_new(series, r->series[i].name,
                            json_pack("{s:s, s:o}", "unit", r->series[i].unit, "values", values));
    }
    return json_pack("{s:s, s:s, s:O, s:s, s:s, s:o, s:o, s:O, s:O, s:o, s:o}", "kind", r->kind,
                     "name", r->name, "tags", r->tags, "status", lb_result_status_name(r->status),
                     "failure", r->failure, "start_wall_s", number(r->start_wall_s), "end_wall_s",
                     number(r->end_wall_s), "config", r->config, "provenance", r->provenance,
                     "metrics", metrics, "series", series);
}
