/* changepoint.c: E-divisive with means behind changepoint.h.
 *
 * With the within sums W(s, t) = sum_{s <= i < j < t} |x_i - x_j| of a segment, the distance
 * across a split tau of x[0..kappa-1] is W(0, kappa) - W(0, tau) - W(tau, kappa). The sums
 * for every pair (tau, kappa) are grown as running sums while kappa moves right, so one
 * search over both costs O(L^2) for a segment of length L. */
#include "history/changepoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/signals.h"
#include "core/stats.h"

lb_changepoint_params lb_changepoint_default_params(void) {
    return (lb_changepoint_params){
        .min_size = 3, .permutations = 199, .significance = 0.01, .seed = 7};
}

/* The best split of x[0..L-1] and its statistic: the left side x[0..tau-1] against the right
 * side x[tau..kappa-1], the scaled energy distance maximised over the split tau and the end
 * kappa of the right side, so a change that is undone later in the segment (a level that
 * returns) is seen as clearly as a step; *best_t = tau, 0 when no split is allowed. kappa
 * grows by one value at a time: col[tau] = W(tau, kappa) gains the distances from x[kappa - 1]
 * to x[tau..kappa-2], a running sum over tau from the right, and w0[t] = W(0, t) is col[0] as
 * it was at kappa = t; inv[i] = 1 / i (inv[0] = 0). O(L^2) time, O(L) room. */
static double best_split(const double *x, size_t L, size_t min_size, double *w0, double *col,
                         const double *inv, size_t *best_t) {
    *best_t = 0;
    if (min_size == 0) min_size = 1; /* a side holds one value at least */
    if (L < 2 * min_size) return 0.0;
    double best = -INFINITY;
    w0[0] = 0.0;
    for (size_t kappa = 1; kappa <= L; kappa++) {
        /* q = m k / (m + k) * (2 cross / (m k) - W_left / C(m, 2) - W_right / C(k, 2))
         *   = 2 / kappa * (W(0, kappa) - cost), with cross = W(0, kappa) - W_left - W_right and
         * cost = W_left (1 + k / (m - 1)) + W_right (1 + m / (k - 1)): the best tau has the
         * least cost (the smallest tau of equal ones) */
        double v = x[kappa - 1], add = 0.0, least = INFINITY;
        size_t at = 0;
        col[kappa - 1] = 0.0;
        for (size_t tau = kappa; tau-- > 0;) { /* tau = kappa - 1: a right side of one value */
            if (tau < kappa - 1) {
                add += fabs(x[tau] - v);
                col[tau] += add;
            }
            if (tau < min_size || tau + min_size > kappa) continue;
            double m = (double)tau, k = (double)(kappa - tau);
            double cost =
                w0[tau] * (1.0 + k * inv[tau - 1]) + col[tau] * (1.0 + m * inv[kappa - tau - 1]);
            if (cost <= least) {
                least = cost;
                at = tau;
            }
        }
        w0[kappa] = col[0];
        double q = 2.0 * inv[kappa] * (w0[kappa] - least);
        if (at != 0 && q > best) {
            best = q;
            *best_t = at;
        }
    }
    return best;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* The largest best-split statistic over the segments bounded by bounds[0..nb-1]
 * (bounds[0] = 0, bounds[nb-1] = n); its segment start and split into *seg, *t. */
static double best_over_segments(const double *x, const size_t *bounds, size_t nb, size_t min_size,
                                 double *w0, double *col, const double *inv, size_t *seg,
                                 size_t *t) {
    double best = -INFINITY;
    *t = 0;
    for (size_t s = 0; s + 1 < nb; s++) {
        size_t split = 0;
        double q =
            best_split(x + bounds[s], bounds[s + 1] - bounds[s], min_size, w0, col, inv, &split);
        if (split != 0 && q > best) {
            best = q;
            *seg = bounds[s];
            *t = bounds[s] + split;
        }
    }
    return best;
}

lb_status lb_changepoint_find(const double *x, size_t n, const lb_changepoint_params *p,
                              size_t *cps, size_t *n_cps, size_t cap, lb_err *err) {
    *n_cps = 0;
    size_t *bounds = malloc((n + 2) * sizeof *bounds);
    double *w0 = malloc((n + 1) * sizeof *w0), *col = malloc((n + 1) * sizeof *col);
    double *inv = malloc((n + 1) * sizeof *inv), *perm = malloc((n ? n : 1) * sizeof *perm);
    if (bounds == NULL || w0 == NULL || col == NULL || inv == NULL || perm == NULL) {
        free(bounds), free(w0), free(col), free(inv), free(perm);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to find change points");
    }
    inv[0] = 0.0; /* a side of one value has no pair, so no within distance */
    for (size_t i = 1; i <= n; i++)
        inv[i] = 1.0 / (double)i;
    size_t nb = 2;
    bounds[0] = 0;
    bounds[1] = n;
    lb_rng rng;
    lb_rng_seed(&rng, p->seed);
    lb_status st = LB_OK;
    for (;;) {
        size_t seg = 0, t = 0;
        double observed = best_over_segments(x, bounds, nb, p->min_size, w0, col, inv, &seg, &t);
        if (t == 0 || *n_cps >= cap) break;
        int at_least = 0;
        for (int r = 0; r < p->permutations; r++) {
            /* a long history's search takes a while: Ctrl-C ends it with no answer */
            if (lb_signals_interrupted()) {
                st = lb_fail(err, LB_ERR_INTERRUPTED,
                             "interrupted: the change points of %zu values were not found", n);
                break;
            }
            memcpy(perm, x, n * sizeof *perm);
            for (size_t s = 0; s + 1 < nb; s++) /* shuffle within each segment */
                for (size_t i = bounds[s + 1] - 1; i > bounds[s]; i--) {
                    size_t j = bounds[s] + (size_t)lb_rng_below(&rng, i - bounds[s] + 1);
                    double tmp = perm[i];
                    perm[i] = perm[j];
                    perm[j] = tmp;
                }
            size_t ps = 0, pt = 0;
            if (best_over_segments(perm, bounds, nb, p->min_size, w0, col, inv, &ps, &pt) >=
                observed)
                at_least++;
        }
        double pvalue = (at_least + 1.0) / (p->permutations + 1.0);
        if (st != LB_OK || pvalue > p->significance) break;
        bounds[nb++] = t;
        qsort(bounds, nb, sizeof *bounds, cmp_size);
        cps[(*n_cps)++] = t;
    }
    if (st != LB_OK) *n_cps = 0;
    qsort(cps, *n_cps, sizeof *cps, cmp_size);
    free(bounds), free(w0), free(col), free(inv), free(perm);
    return st;
}
