/* stats.c: the statistics behind every summary metric (see stats.h for conventions). */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lb_stats_mean(const double *x, size_t n) {
    if (n == 0) return NAN;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s / (double)n;
}

double lb_stats_std(const double *x, size_t n) {
    if (n < 2) return 0.0;
    double m = lb_stats_mean(x, n), ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (x[i] - m) * (x[i] - m);
    return sqrt(ss / (double)(n - 1));
}

double lb_stats_percentile_sorted(const double *sorted, size_t n, double q) {
    if (n == 0) return NAN;
    if (q <= 0.0) return sorted[0];
    if (q >= 100.0) return sorted[n - 1];
    double h = (double)(n - 1) * q / 100.0;
    size_t lo = (size_t)floor(h);
    double frac = h - (double)lo;
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

double lb_stats_percentile_rank_sorted(const double *sorted, size_t n, double q) {
    if (n == 0) return NAN;
    double at = floor((double)n * (q / 100.0)); /* LoadGen's sample_count * percentile */
    return sorted[at <= 0 ? 0 : at >= (double)n ? n - 1 : (size_t)at];
}

double lb_stats_percentile(const double *x, size_t n, double q) {
    if (n == 0) return NAN;
    double *copy = malloc(n * sizeof *copy);
    if (copy == NULL) return NAN;
    memcpy(copy, x, n * sizeof *copy);
    qsort(copy, n, sizeof *copy, cmp_double);
    double p = lb_stats_percentile_sorted(copy, n, q);
    free(copy);
    return p;
}

double lb_stats_median(const double *x, size_t n) {
    return lb_stats_percentile(x, n, 50.0);
}

lb_stats_summary lb_stats_summarize(const double *x, size_t n) {
    lb_stats_summary s = {.n = n, .mean = NAN, .median = NAN, .std = 0.0, .min = NAN, .max = NAN};
    if (n == 0) return s;
    s.mean = lb_stats_mean(x, n);
    s.std = lb_stats_std(x, n);
    s.median = lb_stats_median(x, n);
    s.min = s.max = x[0];
    for (size_t i = 1; i < n; i++) {
        if (x[i] < s.min) s.min = x[i];
        if (x[i] > s.max) s.max = x[i];
    }
    return s;
}

void lb_stats_median_ci(const double *x, size_t n, int resamples, double conf, uint64_t seed,
                        double *lo, double *hi) {
    *lo = *hi = NAN;
    if (n == 0 || resamples <= 0) return;
    double *sample = malloc(n * sizeof *sample);
    double *medians = malloc((size_t)resamples * sizeof *medians);
    if (sample == NULL || medians == NULL) {
        free(sample);
        free(medians);
        return;
    }
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (int r = 0; r < resamples; r++) {
        for (size_t i = 0; i < n; i++)
            sample[i] = x[lb_rng_below(&rng, n)];
        qsort(sample, n, sizeof *sample, cmp_double);
        medians[r] = lb_stats_percentile_sorted(sample, n, 50.0);
    }
    qsort(medians, (size_t)resamples, sizeof *medians, cmp_double);
    double tail = (1.0 - conf) / 2.0 * 100.0;
    *lo = lb_stats_percentile_sorted(medians, (size_t)resamples, tail);
    *hi = lb_stats_percentile_sorted(medians, (size_t)resamples, 100.0 - tail);
    free(sample);
    free(medians);
}
