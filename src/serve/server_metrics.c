/* server_metrics.c: the histograms and the /metrics text behind server_metrics.h. */
#include "serve/server_metrics.h"

#include <stdlib.h>

static const double bounds_s[LB_SERVER_LATENCY_BOUNDS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
};

void lb_server_metrics_observe(lb_server_latency *h, int64_t ns) {
    double s = (double)ns / 1e9;
    size_t i = 0;
    while (i < LB_SERVER_LATENCY_BOUNDS && s > bounds_s[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns > 0 ? (uint64_t)ns : 0, memory_order_relaxed);
}

static void histogram(FILE *f, lb_metrics_text_format format, const char *labels, const char *name,
                      const char *help, const lb_server_latency *h) {
    uint64_t counts[LB_SERVER_LATENCY_BOUNDS + 1];
    for (size_t i = 0; i <= LB_SERVER_LATENCY_BOUNDS; i++)
        counts[i] =
            atomic_load_explicit(&((lb_server_latency *)h)->counts[i], memory_order_relaxed);
    double sum_s =
        (double)atomic_load_explicit(&((lb_server_latency *)h)->sum_ns, memory_order_relaxed) / 1e9;
    lb_metrics_text_family(f, format, name, "histogram", "seconds", help);
    lb_metrics_text_histogram(f, name, labels, bounds_s, counts, LB_SERVER_LATENCY_BOUNDS, sum_s);
}

void lb_server_metrics_write(FILE *f, lb_metrics_text_format format, const char *model,
                             const lb_server_stats *st, const lb_server_latency *duration,
                             const lb_server_latency *ttft) {
    /* The labels of every sample: model="...", escaped once. */
    char *labels = NULL;
    size_t labels_len = 0;
    FILE *l = open_memstream(&labels, &labels_len);
    if (l == NULL) return;
    fputs("model=\"", l);
    lb_metrics_text_label_value(l, model);
    fputc('"', l);
    fclose(l);

    const struct {
        const char *name, *help; /* name without _total */
        uint64_t value;
    } counters[] = {
        {"serve_requests", "completion requests received", st->requests},
        {"serve_streamed_requests", "completion requests that asked for a stream", st->streamed},
        {"serve_completed_requests", "completion requests answered in full, as asked",
         st->completed},
        {"serve_fault_requests", "completion requests given the configured fault (serve --fault)",
         st->faults},
        {"serve_aborted_requests",
         "completion requests ended early (client gone, shutdown, server error)", st->aborted},
        {"serve_client_errors", "requests answered 4xx after their head was read, on any path",
         st->client_errors},
        {"serve_busy_requests",
         "requests answered 503 for the body memory budget (serve --max-body-memory)", st->busy},
        {"serve_malformed_requests",
         "requests refused for a malformed head (one JSON error, connection closed)",
         st->malformed},
        {"serve_output_tokens", "output tokens sent", st->tokens},
        {"serve_refused_connections",
         "connections refused at the connection limit (serve --max-connections)", st->over_limit},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        lb_metrics_text_family(f, format, counters[i].name, "counter", NULL, counters[i].help);
        lb_metrics_text_name(f, counters[i].name);
        fprintf(f, "_total{%s} %llu\n", labels, (unsigned long long)counters[i].value);
    }

    lb_metrics_text_family(f, format, "serve_closed_connections", "counter", NULL,
                           "connections closed by a deadline: idle (serve --idle-timeout) or "
                           "slow to send a request (serve --read-timeout)");
    lb_metrics_text_name(f, "serve_closed_connections");
    fprintf(f, "_total{%s,reason=\"idle\"} %llu\n", labels, (unsigned long long)st->idle_closed);
    lb_metrics_text_name(f, "serve_closed_connections");
    fprintf(f, "_total{%s,reason=\"slow\"} %llu\n", labels, (unsigned long long)st->slow_closed);

    lb_metrics_text_family(f, format, "serve_in_flight_requests", "gauge", NULL,
                           "completion requests not yet ended");
    lb_metrics_text_name(f, "serve_in_flight_requests");
    fprintf(f, "{%s} %llu\n", labels, (unsigned long long)st->in_flight);

    histogram(f, format, labels, "serve_request_duration_seconds",
              "completion requests answered in full: from the arrival of the head to the end",
              duration);
    histogram(f, format, labels, "serve_time_to_first_token_seconds",
              "streamed completion requests: from the arrival of the head to the first token",
              ttft);
    lb_metrics_text_end(f, format);
    free(labels);
}
