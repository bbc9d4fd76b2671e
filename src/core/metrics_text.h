/* metrics_text.h: the text exposition formats of Prometheus (0.0.4) and OpenMetrics (1.0),
 * written the one way llmbench writes them: every family named llmbench_<name> (characters
 * other than [a-zA-Z0-9_:] become '_'), label values escaped, counters' samples ending in
 * _total, histograms as cumulative _bucket{le=...} with _sum and _count.
 *
 * The two formats differ only in a few lines, which the format argument decides: OpenMetrics
 * names a counter family without _total, has # UNIT lines and ends with # EOF; Prometheus
 * text names the counter with _total and has neither. `results export --format openmetrics`
 * (history/openmetrics.h) and `serve`'s /metrics write through these. */
#ifndef LB_CORE_METRICS_TEXT_H
#define LB_CORE_METRICS_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    LB_METRICS_TEXT_PROMETHEUS,  /* text/plain; version=0.0.4 */
    LB_METRICS_TEXT_OPENMETRICS, /* application/openmetrics-text; version=1.0.0 */
} lb_metrics_text_format;

/* The Content-Type of format. */
const char *lb_metrics_text_content_type(lb_metrics_text_format format);

/* llmbench_<name>, sanitized. */
void lb_metrics_text_name(FILE *f, const char *name);
/* A label value with \, " and newlines escaped. */
void lb_metrics_text_label_value(FILE *f, const char *value);

/* A family's head: # TYPE, # UNIT (OpenMetrics, when unit is not NULL; name must then end
 * in _<unit>) and # HELP. type is "gauge", "counter" or "histogram"; a counter's name is
 * given without _total. */
void lb_metrics_text_family(FILE *f, lb_metrics_text_format format, const char *name,
                            const char *type, const char *unit, const char *help);

/* A histogram's samples: llmbench_<name>_bucket{labels,le="B"} for each upper bound of
 * bounds[0..n) and +Inf, then _sum and _count. counts[i] holds the observations in
 * (bounds[i-1], bounds[i]], counts[n] those above the last bound; labels is the text
 * inside the braces (already escaped), "" for none. Bounds and the sum are written with
 * the digits that read back as the same double (NaN, +Inf, -Inf where not finite). */
void lb_metrics_text_histogram(FILE *f, const char *name, const char *labels, const double *bounds,
                               const uint64_t *counts, size_t n, double sum);

/* Ends the exposition (# EOF for OpenMetrics). */
void lb_metrics_text_end(FILE *f, lb_metrics_text_format format);

#endif
