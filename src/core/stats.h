/* stats.h: summary statistics over a sample of doubles.
 *
 * Percentiles use linear interpolation between closest ranks (numpy's default,
 * method="linear"): for sorted x[0..n-1] and q in [0,100], h = (n-1)q/100,
 * p = x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]). Standard deviation is the
 * sample one (n-1 denominator). The bootstrap confidence interval of the median resamples
 * with a fixed-seed generator so the same data always give the same interval. None of
 * these functions keep the input; those that sort work on a copy. */
#ifndef LB_CORE_STATS_H
#define LB_CORE_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n;
    double mean;
    double median;
    double std; /* sample standard deviation; 0 when n < 2 */
    double min;
    double max;
} lb_stats_summary;

double lb_stats_mean(const double *x, size_t n);
double lb_stats_std(const double *x, size_t n);
/* q in [0,100]; returns NaN for n == 0. */
double lb_stats_percentile(const double *x, size_t n, double q);
/* Same, on data already sorted ascending (no copy). */
double lb_stats_percentile_sorted(const double *sorted, size_t n, double q);
/* MLPerf LoadGen's percentile (loadgen/results.cc): the sample at index floor(n q / 100) of
 * data sorted ascending, the largest for q >= 100; NaN for n == 0. No interpolation, so
 * it is always a measured value and never below numpy's. */
double lb_stats_percentile_rank_sorted(const double *sorted, size_t n, double q);
double lb_stats_median(const double *x, size_t n);
lb_stats_summary lb_stats_summarize(const double *x, size_t n);

/* Percentile bootstrap CI of the median: `resamples` resamples, confidence level `conf`
 * (e.g. 0.95), generator seeded with `seed`. Writes NaN to both bounds for n == 0. */
void lb_stats_median_ci(const double *x, size_t n, int resamples, double conf, uint64_t seed,
                        double *lo, double *hi);

#endif
