/* result.c: growable metric and series arrays, and the JSON form of a result. */
#include "core/result.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8text.h"

/* Copies src into dst[cap], cut short where it must be between characters and made UTF-8
 * ('?' for a byte that starts no character): jansson writes no string that is not. */
static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = lb_utf8text_cut_len(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
    lb_utf8text_repair(dst);
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

lb_status lb_result_add_tag(lb_result *r, const char *tag, size_t len) {
    char *text = malloc(len + 1);
    if (text == NULL) return LB_ERR_NOMEM;
    memcpy(text, tag, len);
    text[len] = '\0';
    int rc = json_array_append_new(r->tags, json_string(lb_utf8text_repair(text)));
    free(text);
    return rc == 0 ? LB_OK : LB_ERR_NOMEM;
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

/* Metrics and series are looked up by the name as stored (cut and repaired as copy_name
 * makes it), so that the same name given twice finds what it stored the first time. */
lb_status lb_result_set_metric(lb_result *r, const char *name, double value, const char *unit) {
    char key[LB_NAME_BYTES];
    copy_name(key, sizeof key, name);
    for (size_t i = 0; i < r->n_metrics; i++) {
        if (strcmp(r->metrics[i].name, key) == 0) {
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
    char key[LB_NAME_BYTES];
    copy_name(key, sizeof key, name);
    for (size_t i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, key) == 0) return r->metrics[i].value;
    return NAN;
}

const lb_series *lb_result_find_series(const lb_result *r, const char *name) {
    char key[LB_NAME_BYTES];
    copy_name(key, sizeof key, name);
    for (size_t i = 0; i < r->n_series; i++)
        if (strcmp(r->series[i].name, key) == 0) return &r->series[i];
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

json_t *lb_result_json_number(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

const char *lb_result_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

json_t *lb_result_to_json(const lb_result *r) {
    json_t *metrics = json_array();
    for (size_t i = 0; i < r->n_metrics; i++)
        json_array_append_new(metrics,
                              json_pack("{s:s, s:o, s:s}", "name", r->metrics[i].name, "value",
                                        lb_result_json_number(r->metrics[i].value), "unit",
                                        r->metrics[i].unit));
    json_t *series = json_object();
    for (size_t i = 0; i < r->n_series; i++) {
        json_t *values = json_array();
        for (size_t k = 0; k < r->series[i].n; k++)
            json_array_append_new(values, lb_result_json_number(r->series[i].values[k]));
        json_object_set_new(series, r->series[i].name,
                            json_pack("{s:s, s:o}", "unit", r->series[i].unit, "values", values));
    }
    return json_pack("{s:s, s:s, s:O, s:s, s:s, s:o, s:o, s:O, s:O, s:o, s:o}", "kind", r->kind,
                     "name", r->name, "tags", r->tags, "status", lb_result_status_name(r->status),
                     "failure", r->failure, "start_wall_s", lb_result_json_number(r->start_wall_s),
                     "end_wall_s", lb_result_json_number(r->end_wall_s), "config", r->config,
                     "provenance", r->provenance, "metrics", metrics, "series", series);
}

static double number_value(const json_t *v) {
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool is_number_or_null(const json_t *v) {
    return json_is_number(v) || json_is_null(v);
}

/* name as it may go into a one-line message: cut to a name's length, control bytes as '?'. */
static const char *printable(char *buf, const char *name) {
    copy_name(buf, LB_NAME_BYTES, name);
    return lb_status_printable(buf);
}

lb_status lb_result_from_json(const json_t *doc, const char *what, lb_result **out, lb_err *err) {
    *out = NULL;
    const char *kind = json_string_value(json_object_get(doc, "kind"));
    const char *name = json_string_value(json_object_get(doc, "name"));
    const char *status = json_string_value(json_object_get(doc, "status"));
    const char *failure = json_string_value(json_object_get(doc, "failure"));
    json_t *tags = json_object_get(doc, "tags"), *config = json_object_get(doc, "config");
    json_t *prov = json_object_get(doc, "provenance"), *metrics = json_object_get(doc, "metrics");
    json_t *series = json_object_get(doc, "series");
    if (!json_is_object(doc))
        return lb_fail(err, LB_ERR_FORMAT, "%s is not a stored result: it is not a JSON object",
                       what);
    const char *bad = kind == NULL                                           ? "\"kind\""
                      : name == NULL                                         ? "\"name\""
                      : status == NULL || lb_result_status_parse(status) < 0 ? "\"status\""
                      : failure == NULL                                      ? "\"failure\""
                      : !json_is_array(tags)                                 ? "\"tags\""
                      : !json_is_object(config)                              ? "\"config\""
                      : !json_is_object(prov)                                ? "\"provenance\""
                      : !json_is_array(metrics)                              ? "\"metrics\""
                      : !json_is_object(series)                              ? "\"series\""
                      : !is_number_or_null(json_object_get(doc, "start_wall_s"))
                          ? "\"start_wall_s\""
                      : !is_number_or_null(json_object_get(doc, "end_wall_s")) ? "\"end_wall_s\""
                                                                               : NULL;
    if (bad)
        return lb_fail(err, LB_ERR_FORMAT, "%s is not a stored result: %s is missing or wrong",
                       what, bad);
    lb_result *r = lb_result_new(kind, name);
    if (r == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to read %s", what);
    r->status = (lb_run_status)lb_result_status_parse(status);
    copy_name(r->failure, sizeof r->failure, failure);
    r->start_wall_s = number_value(json_object_get(doc, "start_wall_s"));
    r->end_wall_s = number_value(json_object_get(doc, "end_wall_s"));
    json_decref(r->tags);
    json_decref(r->config);
    json_decref(r->provenance);
    r->tags = json_deep_copy(tags);
    r->config = json_deep_copy(config);
    r->provenance = json_deep_copy(prov);
    lb_status st = r->tags && r->config && r->provenance ? LB_OK : LB_ERR_NOMEM;
    size_t i;
    json_t *m;
    json_array_foreach(metrics, i, m) {
        const char *mname = json_string_value(json_object_get(m, "name"));
        const char *unit = json_string_value(json_object_get(m, "unit"));
        if (st != LB_OK) break;
        if (mname == NULL || mname[0] == '\0' || unit == NULL ||
            !is_number_or_null(json_object_get(m, "value"))) {
            lb_result_free(r);
            return lb_fail(err, LB_ERR_FORMAT,
                           "%s: metric %zu is not {name, value, unit} with a non-empty name", what,
                           i);
        }
        st = lb_result_set_metric(r, mname, number_value(json_object_get(m, "value")), unit);
    }
    const char *sname;
    json_t *sv;
    char shown[LB_NAME_BYTES];
    json_object_foreach(series, sname, sv) {
        const char *unit = json_string_value(json_object_get(sv, "unit"));
        json_t *values = json_object_get(sv, "values");
        if (st != LB_OK) break;
        if (sname[0] == '\0') {
            lb_result_free(r);
            return lb_fail(err, LB_ERR_FORMAT, "%s: a series has an empty name", what);
        }
        if (unit == NULL || !json_is_array(values)) {
            lb_result_free(r);
            return lb_fail(err, LB_ERR_FORMAT, "%s: series '%s' is not {unit, values}", what,
                           printable(shown, sname));
        }
        lb_series *ser = lb_result_series(r, sname, unit);
        json_t *v;
        size_t k;
        json_array_foreach(values, k, v) {
            if (ser == NULL || st != LB_OK) break;
            if (!is_number_or_null(v)) {
                lb_result_free(r);
                return lb_fail(err, LB_ERR_FORMAT, "%s: series '%s' value %zu is not a number",
                               what, printable(shown, sname), k);
            }
            st = lb_result_series_push(ser, number_value(v));
        }
        if (ser == NULL) st = LB_ERR_NOMEM;
    }
    if (st != LB_OK) {
        lb_result_free(r);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to read %s", what);
    }
    *out = r;
    return LB_OK;
}
