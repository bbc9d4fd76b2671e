/* server_metrics.h: the latency histograms of `llmbench serve` and its /metrics text.
 *
 * A histogram is a fixed set of bucket counters (seconds: 0.5 ms to 60 s) and a sum, each an
 * atomic counter, so a worker records an observation without a lock. /metrics writes the
 * server's counters (lb_server_stats) and these histograms through core/metrics_text.h, the
 * writer `results export --format openmetrics` uses, in Prometheus text or OpenMetrics:
 * llmbench_serve_* families, every sample labelled with the served model name.
 *
 * Internal to serve/server.c. */
#ifndef LB_SERVE_SERVER_METRICS_H
#define LB_SERVE_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "core/metrics_text.h"
#include "serve/server.h"

#define LB_SERVER_LATENCY_BOUNDS 16

typedef struct {
    atomic_uint_fast64_t counts[LB_SERVER_LATENCY_BOUNDS + 1]; /* the last: above 60 s */
    atomic_uint_fast64_t sum_ns;
} lb_server_latency;

/* Records one observation of ns nanoseconds. Thread-safe. */
void lb_server_metrics_observe(lb_server_latency *h, int64_t ns);

/* Writes the exposition: st's counters, request durations (completion requests answered in
 * full, from the arrival of their head to their end) and times to the first token (streamed
 * requests, from the arrival of the head to the first token's event). */
void lb_server_metrics_write(FILE *f, lb_metrics_text_format format, const char *model,
                             const lb_server_stats *st, const lb_server_latency *duration,
                             const lb_server_latency *ttft);

#endif
