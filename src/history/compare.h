/* compare.h: runs A against runs B, metric by metric, deciding better / worse / no change.
 *
 * For each key metric of the kind (bench.h) that both sides have: when the metric has a
 * raw series (step_ms, ttft_ms ...) and every run of both sides holds its samples, the
 * samples of every run of a side are pooled and the Mann-Whitney U test (stattest.h)
 * decides, with the Hodges-Lehmann shift and its interval as the change (in percent of A's
 * median); otherwise (no series, or a run without its samples, such as a run imported
 * without them: the row names that series) the runs' values are the samples, tested when
 * each side has at least 3 runs and shown untested below that. Either
 * way a metric with too few values for the test to reach alpha at all
 * (lb_stattest_mwu_min_p: at alpha 0.01, 5 against 5) is untested, never "no change". A
 * change counts only when it is significant (p < alpha) and at least threshold_pct large:
 * a real but tiny change is "no change". From a median of 0 in A (no failed queries, no
 * wrong elements) no percentage exists: change_pct and its interval are NaN, the change is
 * given in the metric's unit (as history's "+5 from 0"), and any change other than 0
 * counts as past the threshold, however small (0 failures to 5 is a real change; a
 * percentage threshold cannot scale a change from nothing), still only when significant
 * where tested. A worse change of a performance metric is a regression. Pooling treats the steps of
 * several runs as one sample: variation between runs is not modelled (repeats make it visible in
 * the sweep table). */
#ifndef LB_HISTORY_COMPARE_H
#define LB_HISTORY_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/result.h"
#include "core/status.h"

typedef struct {
    double alpha;         /* significance level of the test (default 0.01) */
    double threshold_pct; /* smallest change that counts, in percent (default 3) */
    double conf;          /* confidence level of the interval (default 0.95) */
} lb_compare_params;

lb_compare_params lb_compare_default_params(void);

typedef enum {
    LB_VERDICT_NONE,     /* no change beyond noise and threshold */
    LB_VERDICT_BETTER,   /* significant and large enough, the good way */
    LB_VERDICT_WORSE,    /* significant and large enough, the bad way */
    LB_VERDICT_UNTESTED, /* too few values to test */
} lb_verdict;

typedef struct {
    char metric[LB_NAME_BYTES]; /* the key metric, or its series when that was tested */
    char unit[LB_UNIT_BYTES];
    size_t n_a, n_b;       /* values compared a side */
    double a, b;           /* medians */
    double change;         /* B - A in the metric's unit: the shift estimate when tested */
    double change_pct;     /* change in percent of A's median; NaN when that is 0 */
    double lo_pct, hi_pct; /* its interval (NaN when untested or A's median is 0) */
    double p;              /* NaN when untested */
    lb_verdict verdict;
    const char *word; /* "faster", "slower", "no change", "untested" */
    bool regression;
    /* the series a run had no samples of, so the runs' values were compared instead; "" when
     * the samples were compared or the metric has no series */
    char missing_series[LB_NAME_BYTES];
} lb_compare_row;

/* Compares a[0..na-1] with b[0..nb-1] (runs of one kind). Writes up to cap rows. No
 * common metric is LB_ERR_USAGE with a sentence saying so. */
lb_status lb_compare_runs(lb_result *const *a, size_t na, lb_result *const *b, size_t nb,
                          const lb_compare_params *p, lb_compare_row *rows, size_t *n_rows,
                          size_t cap, lb_err *err);

#endif
