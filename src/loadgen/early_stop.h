/* early_stop.h: MLPerf's early-stopping criterion, from the binomial distribution.
 *
 * A run of n queries of which t missed a latency bound tells, with confidence c, that
 * the true fraction of misses is below 1 - p (p = 0.99 for a p99 bound) when seeing t or
 * fewer misses among n queries would be unlikely were the miss rate exactly 1 - p:
 *     P(X <= t) < 1 - c,  X ~ Binomial(n, 1 - p).
 * MLPerf phrases it with h = n - t queries under the bound: h(t) is the smallest h with
 * P(Binomial(h + t, 1 - p) <= t) < 1 - c, and a Server run passes when n >= h(t) + t
 * (MLPerf uses c = 0.99, no tolerance). For scenarios without a bound (SingleStream,
 * fixed concurrency) the same test gives a conservative percentile estimate: the largest
 * t with h(t) + t <= n says the t-th slowest query bounds the p-th percentile with
 * confidence c. The binomial tail is summed exactly in log space (lgamma), which is
 * accurate for any n this tool will see and costs O(t) per evaluation. */
#ifndef LB_LOADGEN_EARLY_STOP_H
#define LB_LOADGEN_EARLY_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* P(X <= t) for X ~ Binomial(n, q). */
double lb_early_stop_binomial_cdf(int64_t t, int64_t n, double q);

/* The smallest h >= 0 with P(Binomial(h + t, 1 - p) <= t) < 1 - c. */
int64_t lb_early_stop_min_passing(int64_t t, double p, double c);

typedef struct {
    bool ok;         /* enough queries for the bound to hold with confidence c */
    int64_t n;       /* queries processed */
    int64_t t;       /* queries over the bound */
    int64_t needed;  /* queries the run needed: h(t) + t (Server's check), h(1) + 1 for an
                      * estimate (any estimate at all; LoadGen's "at least N queries") */
    double estimate; /* percentile estimate (early_stop_estimate), NaN when not enough */
} lb_early_stop;

/* Server rule: latencies[0..n) against `bound` (same unit), percentile p, confidence c. */
lb_early_stop lb_early_stop_check(const double *latencies, size_t n, double bound, double p,
                                  double c);

/* Percentile estimate: sorted[0..n) ascending. ok false when n < h(1) + 1. */
lb_early_stop lb_early_stop_estimate(const double *sorted, size_t n, double p, double c);

#endif
