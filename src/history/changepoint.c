/* changepoint.c: E-divisive with means behind changepoint.h.
 *
 * For a segment of length L the within sums W(s, t) = sum_{s <= i < j < t} |x_i - x_j| are
 * built incrementally from the left and from the right, so every split's statistic comes
 * from one O(L^2) pass: cross(t) = W(s, e) - W(s, t) - W(t, e). */
#include "history/changepoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/stats.h"

lb_changepoint_params lb_changepoint_default_params(void) {
    return (lb_changepoint_params){
        .min_size = 3, .permutations = 199, .significance = 0.01, .seed = 7};
}

/* The best split of x[0..L-1] and its statistic; *best_t = 0 when none is allowed. */
static double best_split(const double *x, size_t L, size_t min_size, double *left, double *right,
                         size_t *best_t) {
    *best_t = 0;
    if (L < 2 * min_size) return 0.0;
    /* left[t] = W(0, t), right[t] = W(t, L) */
    left[0] = 0.0;
    for (size_t t = 1; t <= L; t++) {
        double add = 0.0;
        for (size_t i = 0; i + 1 < t; i++)
            add += fabs(x[i] - x[t - 1]);
        left[t] = left[t - 1] + add;
    }
    right[L] = 0.0;
    for (size_t t = L; t-- > 0;) {
        double add = 0.0;
        for (size_t j = t + 1; j < L; j++)
            add += fabs(x[t] - x[j]);
        right[t] = right[t + 1] + add;
    }
    double total = left[L], best = -INFINITY;
    for (size_t t = min_size; t + min_size <= L; t++) {
        double m = (double)t, k = (double)(L - t);
        double cross = total - left[t] - right[t];
        double e = 2.0 * cross / (m * k) - left[t] / (m * (m - 1.0) / 2.0) -
                   right[t] / (k * (k - 1.0) / 2.0);
        double q = m * k / (m + k) * e;
        if (q > best) {
            best = q;
            *best_t = t;
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
                                 double *left, double *right, size_t *seg, size_t *t) {
    double best = -INFINITY;
    *t = 0;
    for (size_t s = 0; s + 1 < nb; s++) {
        size_t split = 0;
        double q =
            best_split(x + bounds[s], bounds[s + 1] - bounds[s], min_size, left, right, &split);
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
    double *left = malloc((n + 1) * sizeof *left), *right = malloc((n + 1) * sizeof *right);
    double *perm = malloc((n ? n : 1) * sizeof *perm);
    if (bounds == NULL || left == NULL || right == NULL || perm == NULL) {
        free(bounds), free(left), free(right), free(perm);
        return lb_fail(err, LB_ERR_NOMEM, "no memory to find change points");
    }
    size_t nb = 2;
    bounds[0] = 0;
    bounds[1] = n;
    lb_rng rng;
    lb_rng_seed(&rng, p->seed);
    for (;;) {
        size_t seg = 0, t = 0;
        double observed = best_over_segments(x, bounds, nb, p->min_size, left, right, &seg, &t);
        if (t == 0 || *n_cps >= cap) break;
        int at_least = 0;
        for (int r = 0; r < p->permutations; r++) {
            memcpy(perm, x, n * sizeof *perm);
            for (size_t s = 0; s + 1 < nb; s++) /* shuffle within each segment */
                for (size_t i = bounds[s + 1] - 1; i > bounds[s]; i--) {
                    size_t j = bounds[s] + (size_t)lb_rng_below(&rng, i - bounds[s] + 1);
                    double tmp = perm[i];
                    perm[i] = perm[j];
                    perm[j] = tmp;
                }
            size_t ps = 0, pt = 0;
            if (best_over_segments(perm, bounds, nb, p->min_size, left, right, &ps, &pt) >=
                observed)
                at_least++;
        }
        double pvalue = (at_least + 1.0) / (p->permutations + 1.0);
        if (pvalue > p->significance) break;
        bounds[nb++] = t;
        qsort(bounds, nb, sizeof *bounds, cmp_size);
        cps[(*n_cps)++] = t;
    }
    qsort(cps, *n_cps, sizeof *cps, cmp_size);
    free(bounds), free(left), free(right), free(perm);
    return LB_OK;
}
