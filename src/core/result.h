/* result.h: what every workload returns: the run's description, raw samples and summary.
 *
 * A workload (train, infer, load, comm) fills an lb_result and returns it; it never opens
 * the database or prints tables (DESIGN.md). The CLI stores the result (store/store.h)
 * and prints it. Raw samples are named series of doubles (every step time, every loss,
 * every query's latencies), so each summary metric can be recomputed from them; summary
 * metrics are (name, value, unit) triples computed by the functions in docs/METRICS.md.
 *
 * Ownership: the result owns every JSON object and array it holds; lb_result_free frees
 * them. Series values are copied in. */
#ifndef LB_CORE_RESULT_H
#define LB_CORE_RESULT_H

#include <jansson.h>
#include <stddef.h>

#include "core/status.h"

#define LB_NAME_BYTES 64
#define LB_UNIT_BYTES 24

typedef enum {
    LB_RUN_RUNNING = 0, /* begun, not finished (a crash leaves it so) */
    LB_RUN_OK,
    LB_RUN_FAILED,
    LB_RUN_INTERRUPTED,
} lb_run_status;

typedef struct {
    char name[LB_NAME_BYTES];
    char unit[LB_UNIT_BYTES];
    double value;
} lb_metric;

typedef struct {
    char name[LB_NAME_BYTES];
    char unit[LB_UNIT_BYTES];
    double *values;
    size_t n, cap;
} lb_series;

typedef struct {
    char kind[16];      /* "train", "infer", "load", "comm" */
    char name[128];     /* user-chosen or derived ("gpt2-124m-cpu-fp32") */
    json_t *tags;       /* array of strings */
    json_t *config;     /* object: every option that shaped the run */
    json_t *provenance; /* object: core/provenance.h, plus gpu/devinfo.h */
    lb_metric *metrics;
    size_t n_metrics, cap_metrics;
    lb_series *series;
    size_t n_series, cap_series;
    lb_run_status status;
    char failure[LB_ERR_MSG_BYTES];  /* why it failed or was interrupted; "" when ok */
    double start_wall_s, end_wall_s; /* seconds since the epoch */
} lb_result;

/* Returns a new result with empty tags, config and provenance objects; NULL on no memory.
 * kind and name are cut to their fields between characters and made UTF-8 ('?' for a byte
 * that starts no character), so that the result can be written as JSON. */
lb_result *lb_result_new(const char *kind, const char *name);
void lb_result_free(lb_result *r);

/* Appends the len bytes at tag to r's tags, made UTF-8 as names are. LB_ERR_NOMEM. */
lb_status lb_result_add_tag(lb_result *r, const char *tag, size_t len);

/* Metric and series names (and units) are stored as kind and name are: cut to fit
 * LB_NAME_BYTES (LB_UNIT_BYTES) between characters and made UTF-8. Every lookup below cuts
 * and repairs the name it is given the same way, so a name finds what it stored even when
 * it was cut, and names that agree up to the cut are one metric or series. */

/* Adds or replaces a summary metric. */
lb_status lb_result_set_metric(lb_result *r, const char *name, double value, const char *unit);
/* The metric's value, or NaN when absent. */
double lb_result_metric(const lb_result *r, const char *name);

/* Finds the series of this name or creates it. Returns NULL on no memory. The pointer is
 * valid until the next call that creates a series. */
lb_series *lb_result_series(lb_result *r, const char *name, const char *unit);
const lb_series *lb_result_find_series(const lb_result *r, const char *name);
lb_status lb_result_series_push(lb_series *s, double value);

const char *lb_result_status_name(lb_run_status status);
/* Parses "running", "ok", "failed", "interrupted"; returns -1 for anything else. */
int lb_result_status_parse(const char *name);

/* v as a JSON number (new reference); JSON has no NaN or infinity, so such a value is null. */
json_t *lb_result_json_number(double v);

/* What kind of JSON value v is, in words for a message: "an object", "an array", "a string",
 * "an integer", "a real number", "a boolean" or "null". */
const char *lb_result_json_kind(const json_t *v);

/* The whole result as JSON (new reference): kind, name, tags, status, failure, start and
 * end times, config, provenance, metrics [{name,value,unit}], series {name:{unit,values}}. */
json_t *lb_result_to_json(const lb_result *r);

/* The result that lb_result_to_json wrote (a null number reads back as NaN). A document of
 * another shape is LB_ERR_FORMAT with a sentence naming the field (what names the
 * document, e.g. its file); *out (caller frees with lb_result_free) is NULL then. */
lb_status lb_result_from_json(const json_t *doc, const char *what, lb_result **out, lb_err *err);

#endif
