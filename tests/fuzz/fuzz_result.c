/* fuzz_result.c: lb_result_from_json (core/result.h) on arbitrary bytes, parsed as
 * `llmbench results import` parses a file (json_loadb, flags 0).
 *
 * Refused: the status is LB_ERR_FORMAT, *out is NULL, and the message is one line that
 * starts with the document's name. Accepted: the result is what the header describes: kind,
 * name, failure, and every metric's and series' name and unit NUL-terminated within their
 * buffers, metric and series names not empty, every value finite or NaN (a null). And it
 * survives the trip a result takes through a file kept aside by a run and imported again:
 * lb_result_to_json, written compact (as store.c keeps it) and read back with import's
 * flags, gives a result equal to the first, field by field, whose lb_result_to_json is
 * json_equal to the first one. Not here: the store, which test_store covers. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/result.h"
#include "fuzz.h"

#define WHAT "fuzz.json"

/* A NUL within cap bytes; not empty where nonempty. */
static void check_text(const char *s, size_t cap, bool nonempty) {
    size_t n = strnlen(s, cap);
    FUZZ_CHECK(n < cap);
    if (nonempty) FUZZ_CHECK(n > 0);
}

/* Finite, or NaN: a JSON null. Never an infinity. */
static void check_value(double v) {
    FUZZ_CHECK(!isinf(v));
}

static bool same_value(double a, double b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static void check_result(const lb_result *r) {
    check_text(r->kind, sizeof r->kind, false);
    check_text(r->name, sizeof r->name, false);
    check_text(r->failure, sizeof r->failure, false);
    FUZZ_CHECK(r->status >= LB_RUN_RUNNING && r->status <= LB_RUN_INTERRUPTED);
    FUZZ_CHECK(json_is_array(r->tags) && json_is_object(r->config));
    FUZZ_CHECK(json_is_object(r->provenance));
    check_value(r->start_wall_s);
    check_value(r->end_wall_s);
    FUZZ_CHECK(r->n_metrics <= r->cap_metrics && (r->n_metrics == 0 || r->metrics != NULL));
    for (size_t i = 0; i < r->n_metrics; i++) {
        check_text(r->metrics[i].name, LB_NAME_BYTES, true);
        check_text(r->metrics[i].unit, LB_UNIT_BYTES, false);
        check_value(r->metrics[i].value);
        for (size_t j = 0; j < i; j++) /* a name twice: the later value replaces */
            FUZZ_CHECK(strcmp(r->metrics[j].name, r->metrics[i].name) != 0);
    }
    FUZZ_CHECK(r->n_series <= r->cap_series && (r->n_series == 0 || r->series != NULL));
    for (size_t i = 0; i < r->n_series; i++) {
        const lb_series *s = &r->series[i];
        check_text(s->name, LB_NAME_BYTES, true);
        check_text(s->unit, LB_UNIT_BYTES, false);
        FUZZ_CHECK(s->n <= s->cap && (s->n == 0 || s->values != NULL));
        for (size_t k = 0; k < s->n; k++)
            check_value(s->values[k]);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(r->series[j].name, s->name) != 0);
    }
}

static void check_same(const lb_result *a, const lb_result *b) {
    FUZZ_CHECK(strcmp(a->kind, b->kind) == 0 && strcmp(a->name, b->name) == 0);
    FUZZ_CHECK(a->status == b->status && strcmp(a->failure, b->failure) == 0);
    FUZZ_CHECK(same_value(a->start_wall_s, b->start_wall_s));
    FUZZ_CHECK(same_value(a->end_wall_s, b->end_wall_s));
    FUZZ_CHECK(json_equal(a->tags, b->tags) && json_equal(a->config, b->config));
    FUZZ_CHECK(json_equal(a->provenance, b->provenance));
    FUZZ_CHECK(a->n_metrics == b->n_metrics && a->n_series == b->n_series);
    for (size_t i = 0; i < a->n_metrics; i++) {
        FUZZ_CHECK(strcmp(a->metrics[i].name, b->metrics[i].name) == 0);
        FUZZ_CHECK(strcmp(a->metrics[i].unit, b->metrics[i].unit) == 0);
        FUZZ_CHECK(same_value(a->metrics[i].value, b->metrics[i].value));
    }
    for (size_t i = 0; i < a->n_series; i++) {
        const lb_series *s = lb_result_find_series(b, a->series[i].name);
        FUZZ_CHECK(s != NULL && strcmp(s->unit, a->series[i].unit) == 0);
        FUZZ_CHECK(s->n == a->series[i].n);
        for (size_t k = 0; k < s->n; k++)
            FUZZ_CHECK(same_value(s->values[k], a->series[i].values[k]));
    }
}

/* lb_result_from_json on doc; checks a refusal and returns NULL, or returns the result. */
static lb_result *read_result(const json_t *doc) {
    lb_result *r = (lb_result *)&r; /* not NULL, so that a refusal must clear it */
    lb_err err = {{0}};
    lb_status st = lb_result_from_json(doc, WHAT, &r, &err);
    if (st == LB_OK) {
        FUZZ_CHECK(r != NULL);
        check_result(r);
        return r;
    }
    FUZZ_CHECK(st == LB_ERR_FORMAT && r == NULL);
    FUZZ_CHECK(strncmp(err.msg, WHAT, strlen(WHAT)) == 0);
    FUZZ_CHECK(strchr(err.msg, '\n') == NULL && strchr(err.msg, '\r') == NULL);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    if (doc == NULL) return 0;
    lb_result *r1 = read_result(doc);
    json_decref(doc);
    if (r1 == NULL) return 0;

    json_t *doc1 = lb_result_to_json(r1);
    FUZZ_CHECK(doc1 != NULL);
    FUZZ_CHECK(json_array_size(json_object_get(doc1, "metrics")) == r1->n_metrics);
    FUZZ_CHECK(json_object_size(json_object_get(doc1, "series")) == r1->n_series);
    char *text = json_dumps(doc1, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    json_t *back = json_loadb(text, strlen(text), 0, NULL);
    free(text);
    FUZZ_CHECK(back != NULL && json_equal(back, doc1));
    lb_result *r2 = read_result(back);
    json_decref(back);
    FUZZ_CHECK(r2 != NULL);
    check_same(r1, r2);
    json_t *doc2 = lb_result_to_json(r2);
    FUZZ_CHECK(doc2 != NULL && json_equal(doc1, doc2));
    json_decref(doc2);
    json_decref(doc1);
    lb_result_free(r2);
    lb_result_free(r1);
    return 0;
}
