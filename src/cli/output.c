/* output.c: result tables and JSON documents on stdout. */
#include "cli/output.h"

#include <math.h>
#include <string.h>

void lb_output_format_value(char *buf, size_t cap, double value, const char *unit) {
    if (!isfinite(value)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    if (strcmp(unit, "bytes") == 0) {
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        int k = 0;
        /* a value that rounds to 1024 as printed ("%.0f", then "%.2f") takes the next unit */
        while (fabs(value) >= (k == 0 ? 1023.5 : 1023.995) && k < 4) {
            value /= 1024.0;
            k++;
        }
        snprintf(buf, cap, k == 0 ? "%.0f %s" : "%.2f %s", value, units[k]);
        return;
    }
    /* FLOP/s, GFLOP/s, TFLOP/s: the SI prefix that keeps the number below 1000. */
    size_t ulen = strlen(unit);
    if (ulen >= 6 && ulen <= 7 && strcmp(unit + ulen - 6, "FLOP/s") == 0) {
        static const char prefixes[] = " kMGTPE";
        const char *at = ulen == 7 ? strchr(prefixes + 1, unit[0]) : prefixes;
        if (at != NULL) {
            int k = (int)(at - prefixes);
            /* as printed ("%.2f"): 999.996 would read 1000.00 in this prefix, 1.00 in the next */
            while (fabs(value) >= 999.995 && k < 6) {
                value /= 1000.0;
                k++;
            }
            while (value != 0.0 && fabs(value) < 0.999995 && k > 0) {
                value *= 1000.0;
                k--;
            }
            snprintf(buf, cap, k == 0 ? "%.2f FLOP/s" : "%.2f %cFLOP/s", value, prefixes[k]);
            return;
        }
    }
    double a = fabs(value);
    const char *fmt =
        a == 0.0 || (a >= 0.01 && a < 1e9) ? (a >= 1000 ? "%.1f %s" : "%.4g %s") : "%.4e %s";
    snprintf(buf, cap, fmt, value, unit);
}

void lb_output_result_table(FILE *f, const lb_result *r, int64_t run_id) {
    fprintf(f, "run %lld  %s  %s  %s\n", (long long)run_id, r->kind, r->name,
            lb_result_status_name(r->status));
    if (r->failure[0] != '\0') fprintf(f, "  reason: %s\n", r->failure);
    for (size_t i = 0; i < r->n_metrics; i++) {
        char v[64];
        lb_output_format_value(v, sizeof v, r->metrics[i].value, r->metrics[i].unit);
        fprintf(f, "  %-26s %s\n", r->metrics[i].name, v);
    }
}

void lb_output_result_json(FILE *f, const lb_result *r, int64_t run_id) {
    json_t *doc = lb_result_to_json(r);
    json_object_set_new(doc, "id", run_id >= 0 ? json_integer(run_id) : json_null());
    json_dumpf(doc, f, JSON_INDENT(2));
    fputc('\n', f);
    json_decref(doc);
}

void lb_output_loadgen_progress(lb_progress *prog, const char *label,
                                const lb_loadgen_progress *p) {
    char total[32] = "";
    if (p->planned >= 0) snprintf(total, sizeof total, "/%lld", (long long)p->planned);
    char eta[32];
    lb_progress_format_eta(eta, sizeof eta, p->eta_s);
    lb_progress_update(prog, false,
                       "%s: %lld%s done, %lld failed, %lld in flight, %.1f/s, %.0f s elapsed, "
                       "ETA %s",
                       label, (long long)(p->completed + p->failed), total, (long long)p->failed,
                       (long long)p->inflight, p->rate_per_s, p->elapsed_s, eta);
}
