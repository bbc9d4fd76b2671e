/* early_stop.c: the binomial tail and the searches behind early_stop.h. */
#include "loadgen/early_stop.h"

#include <math.h>

double lb_early_stop_binomial_cdf(int64_t t, int64_t n, double q) {
    if (t < 0) return 0.0;
    if (t >= n) return 1.0;
    if (q <= 0.0) return 1.0;
    if (q >= 1.0) return 0.0;
    /* log of each term C(n,x) q^x (1-q)^(n-x), summed relative to the largest. */
    double lq = log(q), lr = log1p(-q), lnf = lgamma((double)n + 1.0);
    double max_l = -INFINITY;
    for (int64_t x = 0; x <= t; x++) {
        double l = lnf - lgamma((double)x + 1.0) - lgamma((double)(n - x) + 1.0) + (double)x * lq +
                   (double)(n - x) * lr;
        if (l > max_l) max_l = l;
    }
    double sum = 0.0;
    for (int64_t x = 0; x <= t; x++) {
        double l = lnf - lgamma((double)x + 1.0) - lgamma((double)(n - x) + 1.0) + (double)x * lq +
                   (double)(n - x) * lr;
        sum += exp(l - max_l);
    }
    double v = exp(max_l + log(sum));
    return v > 1.0 ? 1.0 : v;
}

static bool passes(int64_t h, int64_t t, double p, double c) {
    return lb_early_stop_binomial_cdf(t, h + t, 1.0 - p) < 1.0 - c;
}

int64_t lb_early_stop_min_passing(int64_t t, double p, double c) {
    /* The tail falls as h grows: double hi until it passes, then bisect. */
    int64_t lo = 0, hi = 1;
    while (!passes(hi, t, p, c)) {
        lo = hi;
        hi *= 2;
        if (hi > ((int64_t)1 << 40)) return hi;
    }
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (passes(mid, t, p, c))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

lb_early_stop lb_early_stop_check(const double *latencies, size_t n, double bound, double p,
                                  double c) {
    int64_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += latencies[i] > bound;
    int64_t h = lb_early_stop_min_passing(t, p, c);
    return (lb_early_stop){
        .ok = (int64_t)n >= h + t, .n = (int64_t)n, .t = t, .needed = h + t, .estimate = NAN};
}

lb_early_stop lb_early_stop_estimate(const double *sorted, size_t n, double p, double c) {
    int64_t nn = (int64_t)n;
    int64_t need1 = lb_early_stop_min_passing(1, p, c) + 1;
    lb_early_stop r = {.ok = false, .n = nn, .t = 0, .needed = need1, .estimate = NAN};
    if (nn < need1) return r;
    /* h(t) + t grows with t and exceeds t / (1 - p): find the largest t with
     * h(t) + t <= n, below n (1 - p) + 1. */
    int64_t lo = 1, hi = (int64_t)((double)nn * (1.0 - p)) + 1;
    if (hi > nn) hi = nn;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (lb_early_stop_min_passing(mid, p, c) + mid <= nn)
            lo = mid;
        else
            hi = mid - 1;
    }
    r.ok = true;
    r.t = lo;
    r.estimate = sorted[nn - lo];
    return r;
}
