/* metrics_text.c: the exposition text behind metrics_text.h. */
#include "core/metrics_text.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const char *lb_metrics_text_content_type(lb_metrics_text_format format) {
    return format == LB_METRICS_TEXT_OPENMETRICS
               ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
               : "text/plain; version=0.0.4; charset=utf-8";
}

void lb_metrics_text_name(FILE *f, const char *name) {
    static const char allowed[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:";
    fputs("llmbench_", f);
    for (const char *p = name; *p; p++)
        fputc(strchr(allowed, *p) ? *p : '_', f);
}

void lb_metrics_text_label_value(FILE *f, const char *value) {
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', f), fputc(*p, f);
        else if (*p == '\n')
            fputs("\\n", f);
        else
            fputc(*p, f);
    }
}

void lb_metrics_text_family(FILE *f, lb_metrics_text_format format, const char *name,
                            const char *type, const char *unit, const char *help) {
    bool total = format == LB_METRICS_TEXT_PROMETHEUS && strcmp(type, "counter") == 0;
    fputs("# TYPE ", f);
    lb_metrics_text_name(f, name);
    fprintf(f, "%s %s\n", total ? "_total" : "", type);
    if (unit != NULL && format == LB_METRICS_TEXT_OPENMETRICS) {
        fputs("# UNIT ", f);
        lb_metrics_text_name(f, name);
        fprintf(f, " %s\n", unit);
    }
    fputs("# HELP ", f);
    lb_metrics_text_name(f, name);
    fprintf(f, "%s %s\n", total ? "_total" : "", help);
}

/* v as the formats write a number: the shorter of %.15g and %.17g that reads back as v
 * (%g's six digits make 1234567 and 1234568 the same bound), NaN and infinities as
 * NaN, +Inf and -Inf. */
static void format_number(char *out, size_t cap, double v) {
    if (isnan(v) || isinf(v)) {
        snprintf(out, cap, "%s", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
        return;
    }
    snprintf(out, cap, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, cap, "%.17g", v);
}

void lb_metrics_text_histogram(FILE *f, const char *name, const char *labels, const double *bounds,
                               const uint64_t *counts, size_t n, double sum) {
    const char *sep = labels[0] ? "," : "";
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= n; i++) {
        cumulative += counts[i];
        /* le as OpenMetrics wants a number written (and Prometheus reads): 0.005, 1.0 */
        char le[32] = "+Inf";
        if (i < n) {
            format_number(le, sizeof le, bounds[i]);
            if (strpbrk(le, ".eIN") == NULL) strcat(le, ".0");
        }
        lb_metrics_text_name(f, name);
        fprintf(f, "_bucket{%s%sle=\"%s\"} %llu\n", labels, sep, le,
                (unsigned long long)cumulative);
    }
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    char sum_text[32];
    format_number(sum_text, sizeof sum_text, sum);
    lb_metrics_text_name(f, name);
    fprintf(f, "_sum%s%s%s %s\n", open, labels, close, sum_text);
    lb_metrics_text_name(f, name);
    fprintf(f, "_count%s%s%s %llu\n", open, labels, close, (unsigned long long)cumulative);
}

void lb_metrics_text_end(FILE *f, lb_metrics_text_format format) {
    if (format == LB_METRICS_TEXT_OPENMETRICS) fputs("# EOF\n", f);
}
