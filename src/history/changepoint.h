/* changepoint.h: where a benchmark's history changed level, and not where it was noisy.
 *
 * E-divisive with means (Matteson and James, 2014; the method Apache Otava, formerly
 * Hunter, applies to performance histories): in a segment, the split tau and the end kappa
 * of its right side that maximise the energy distance between x[start..tau-1] and
 * x[tau..kappa-1], scaled by m k / (m + k), give a candidate split at tau (searching kappa
 * too finds a level that changed and came back: 100, then 200, then 100 again); it is kept
 * when it is significant against permutations of the values within their segments, each
 * permutation searched the same way (fixed seed, so the same history always gives the same
 * answer); segments are split again until no candidate is significant. A side is never
 * shorter than min_size, so one noisy night cannot form a segment of its own. O(n^2) per
 * candidate search. */
#ifndef LB_HISTORY_CHANGEPOINT_H
#define LB_HISTORY_CHANGEPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
    size_t min_size;     /* the shortest segment (default 3) */
    int permutations;    /* permutations per significance test (default 199) */
    double significance; /* keep a split when its permutation p-value is at most this (0.01) */
    uint64_t seed;       /* permutation generator seed */
} lb_changepoint_params;

lb_changepoint_params lb_changepoint_default_params(void);

/* Change points of x[0..n-1] (no NaN): each the index where a new segment starts,
 * ascending, written to cps (room for cap; n / min_size is always enough). A Ctrl-C
 * (core/signals.h) during the search is LB_ERR_INTERRUPTED, with no change point. */
lb_status lb_changepoint_find(const double *x, size_t n, const lb_changepoint_params *p,
                              size_t *cps, size_t *n_cps, size_t cap, lb_err *err);

#endif
