/* stattest.h: is B different from A, beyond the noise of both?
 *
 * The Mann-Whitney U test (Wilcoxon rank-sum) on two samples of raw measurements (step
 * times, latencies): no normality assumed, robust to the long right tails timings have.
 * Ties get average ranks and the variance its tie correction. The p-value is two-sided:
 * exact when no value occurs twice and n_a * n_b <= LB_MWU_EXACT_MAX_MN (twice the tail of
 * U's null distribution, every ordering of the two samples counted; 3 against 3 apart gives
 * 2/20 = 0.1), from the normal approximation with continuity correction otherwise (with
 * ties the exact null distribution depends on the tie pattern, and the tie-corrected normal
 * approximation is used whatever the sizes; with few values it can be below the exact
 * permutation p-value). The size of the change is the Hodges-Lehmann
 * estimate of the shift (the median of all differences b - a) with its distribution-free
 * confidence interval (the order statistics of those differences at the U test's
 * critical value). Samples longer than LB_HL_MAX_N are thinned to that many evenly spaced
 * order statistics for the estimate and interval only; the test uses every value. */
#ifndef LB_HISTORY_STATTEST_H
#define LB_HISTORY_STATTEST_H

#include <stddef.h>

#include "core/status.h"

#define LB_HL_MAX_N 1000
/* The largest n_a * n_b whose p-value is exact (50 against 50; at most about 10^7 steps). */
#define LB_MWU_EXACT_MAX_MN 2500

typedef struct {
    size_t n_a, n_b;
    double median_a, median_b;
    double u;      /* U statistic of sample B */
    double z;      /* standardised U (normal approximation); positive when B tends larger */
    double p;      /* two-sided p-value */
    double shift;  /* Hodges-Lehmann estimate of b - a */
    double lo, hi; /* its confidence interval at level conf */
} lb_mwu_result;

/* NaN values are left out. Needs at least 2 values a side: LB_ERR_USAGE otherwise. */
lb_status lb_stattest_mwu(const double *a, size_t n_a, const double *b, size_t n_b, double conf,
                          lb_mwu_result *out, lb_err *err);

/* The p-value lb_stattest_mwu gives with n_a and n_b values when the two samples are apart
 * and no value occurs twice (2 / C(n_a + n_b, n_a) where exact): when it is not below alpha,
 * such data cannot be called a change, and a "no change" verdict would claim what the test
 * cannot see. At alpha 0.01 it takes 5 values against 5 (or 4 against 6, 3 against 9, 2
 * against 19). */
double lb_stattest_mwu_min_p(size_t n_a, size_t n_b);

/* Upper tail of the standard normal, 1 - Phi(z). */
double lb_stattest_normal_sf(double z);
/* The standard normal quantile Phi^-1(p), 0 < p < 1. */
double lb_stattest_normal_quantile(double p);

#endif
