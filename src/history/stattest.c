/* stattest.c: the Mann-Whitney U test and the Hodges-Lehmann interval (stattest.h). */
#include "history/stattest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

double lb_stattest_normal_sf(double z) {
    return 0.5 * erfc(z / sqrt(2.0));
}

/* Bisection on erfc: 60 halvings reach double precision, and it is called a few times. */
double lb_stattest_normal_quantile(double p) {
    double lo = -40.0, hi = 40.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (1.0 - lb_stattest_normal_sf(mid) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

typedef struct {
    double v;
    int from_b;
} tagged;

static int cmp_tagged(const void *x, const void *y) {
    double a = ((const tagged *)x)->v, b = ((const tagged *)y)->v;
    return (a > b) - (a < b);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The finite values of x, sorted, in a new array. */
static double *sorted_finite(const double *x, size_t n, size_t *out_n) {
    double *s = malloc((n ? n : 1) * sizeof *s);
    if (s == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) s[k++] = x[i];
    qsort(s, k, sizeof *s, cmp_double);
    *out_n = k;
    return s;
}

/* At most LB_HL_MAX_N evenly spaced order statistics of sorted s (in place). */
static size_t thin(double *s, size_t n) {
    if (n <= LB_HL_MAX_N) return n;
    for (size_t i = 0; i < LB_HL_MAX_N; i++)
        s[i] = s[(size_t)((double)i * (double)(n - 1) / (LB_HL_MAX_N - 1) + 0.5)];
    return LB_HL_MAX_N;
}

/* Two-sided exact p-value of U = u (an integer, no ties) for sizes m and n: twice the
 * share of orderings of the pooled sample whose U is at least as far from m * n / 2. c holds
 * for each i <= m the number of orderings of i values of A and j of B giving each U, built
 * up one j at a time: the largest of them is A's, or B's above all i of A's (U + i).
 * Returns -1 when out of memory. */
static double exact_p(size_t m, size_t n, double u) {
    if (m > n) {
        size_t t = m;
        m = n, n = t;
    }
    size_t width = m * n + 1;
    double *c = calloc((m + 1) * width, sizeof *c);
    if (c == NULL) return -1.0;
    for (size_t i = 0; i <= m; i++)
        c[i * width] = 1.0;
    for (size_t j = 1; j <= n; j++)
        for (size_t i = 0; i <= m; i++)
            for (size_t v = width; v-- > 0;)
                c[i * width + v] =
                    (v >= i ? c[i * width + v - i] : 0.0) + (i > 0 ? c[(i - 1) * width + v] : 0.0);
    double far = fmax(u, (double)(m * n) - u), tail = 0.0, total = 0.0;
    for (size_t v = 0; v < width; v++) {
        total += c[m * width + v];
        if ((double)v >= far) tail += c[m * width + v];
    }
    free(c);
    return fmin(1.0, 2.0 * tail / total);
}

double lb_stattest_mwu_min_p(size_t n_a, size_t n_b) {
    if (n_a * n_b <= LB_MWU_EXACT_MAX_MN) {
        double orderings = 1.0; /* C(n_a + n_b, n_a) */
        for (size_t i = 1; i <= n_a; i++)
            orderings = orderings * (double)(n_b + i) / (double)i;
        return fmin(1.0, 2.0 / orderings);
    }
    double na = (double)n_a, nb = (double)n_b;
    double sd = sqrt(na * nb * (na + nb + 1.0) / 12.0);
    if (sd == 0.0) return 1.0;
    return fmin(1.0, 2.0 * lb_stattest_normal_sf((na * nb / 2.0 - 0.5) / sd));
}

lb_status lb_stattest_mwu(const double *a, size_t n_a, const double *b, size_t n_b, double conf,
                          lb_mwu_result *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    size_t na = 0, nb = 0;
    double *sa = sorted_finite(a, n_a, &na), *sb = sorted_finite(b, n_b, &nb);
    tagged *all = malloc((na + nb + 1) * sizeof *all);
    if (sa == NULL || sb == NULL || all == NULL) {
        free(sa), free(sb), free(all);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the rank test");
    }
    if (na < 2 || nb < 2) {
        free(sa), free(sb), free(all);
        return lb_fail(err, LB_ERR_USAGE, "a rank test needs 2 values a side (got %zu and %zu)", na,
                       nb);
    }
    out->n_a = na;
    out->n_b = nb;
    out->median_a = lb_stats_percentile_sorted(sa, na, 50);
    out->median_b = lb_stats_percentile_sorted(sb, nb, 50);
    for (size_t i = 0; i < na; i++)
        all[i] = (tagged){sa[i], 0};
    for (size_t i = 0; i < nb; i++)
        all[na + i] = (tagged){sb[i], 1};
    size_t n = na + nb;
    qsort(all, n, sizeof *all, cmp_tagged);
    double rank_b = 0.0, ties = 0.0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && all[j].v == all[i].v)
            j++;
        double rank = 0.5 * ((double)i + 1.0 + (double)j); /* average of ranks i+1 .. j */
        double t = (double)(j - i);
        ties += t * t * t - t;
        for (size_t k = i; k < j; k++)
            if (all[k].from_b) rank_b += rank;
        i = j;
    }
    double dna = (double)na, dnb = (double)nb, dn = (double)n;
    out->u = rank_b - dnb * (dnb + 1.0) / 2.0;
    double mean = dna * dnb / 2.0;
    double var = dna * dnb / 12.0 * ((dn + 1.0) - ties / (dn * (dn - 1.0)));
    double d = out->u - mean;
    double cc = d > 0 ? -0.5 : d < 0 ? 0.5 : 0.0;
    out->z = var > 0 ? (d + cc) / sqrt(var) : 0.0;
    if (ties == 0 && na * nb <= LB_MWU_EXACT_MAX_MN) {
        out->p = exact_p(na, nb, out->u);
        if (out->p < 0) {
            free(sa), free(sb), free(all);
            return lb_fail(err, LB_ERR_NOMEM, "no memory for the rank test's exact p-value");
        }
    } else {
        out->p = var > 0 ? fmin(1.0, 2.0 * lb_stattest_normal_sf(fabs(out->z))) : 1.0;
    }

    /* Hodges-Lehmann on (thinned) samples */
    size_t ta = thin(sa, na), tb = thin(sb, nb);
    size_t nd = ta * tb;
    double *diff = malloc(nd * sizeof *diff);
    if (diff == NULL) {
        free(sa), free(sb), free(all);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the shift's interval");
    }
    for (size_t i = 0; i < ta; i++)
        for (size_t j = 0; j < tb; j++)
            diff[i * tb + j] = sb[j] - sa[i];
    qsort(diff, nd, sizeof *diff, cmp_double);
    out->shift = lb_stats_percentile_sorted(diff, nd, 50);
    double zc = lb_stattest_normal_quantile(0.5 + conf / 2.0);
    double dta = (double)ta, dtb = (double)tb;
    double ca = floor(dta * dtb / 2.0 - zc * sqrt(dta * dtb * (dta + dtb + 1.0) / 12.0));
    if (ca < 1.0) ca = 1.0;
    size_t k = (size_t)ca;
    out->lo = diff[k - 1];
    out->hi = diff[nd - k];
    free(diff);
    free(sa), free(sb), free(all);
    return LB_OK;
}
