/* search.h: the highest Server rate whose run is VALID, found by trials.
 *
 * A search is a sequence of Server runs, each at a rate this module chooses and each
 * judged VALID or not by the caller (a real run at the configured minimum duration). It
 * brackets first: from the start rate it doubles while runs are VALID, or halves while they
 * are not, until a VALID rate lies below an INVALID one; then it bisects between them until
 * they are within the relative tolerance of each other. The answer is the highest rate
 * whose run was VALID. Validity is taken to fall as the rate rises; a noisy verdict near
 * the edge only moves the answer within the bracket it leaves. It runs nothing itself:
 * the caller (one loop, for `load` and `infer` alike) runs each trial and reports it. */
#ifndef LB_LOADGEN_SEARCH_H
#define LB_LOADGEN_SEARCH_H

#include <stdbool.h>

typedef struct {
    double start_qps; /* the first rate tried, > 0 */
    double rel_tol;   /* stop when (invalid - valid) / invalid <= this, > 0 */
    double min_qps;   /* halving stops here: no VALID rate at or above it (answer NaN) */
    double max_qps;   /* doubling stops here: VALID at the top (answer max_qps) */
    int max_trials;   /* runs at most */
} lb_search_params;

lb_search_params lb_search_default_params(double start_qps);

typedef struct {
    lb_search_params p;
    double valid_qps;   /* highest VALID rate so far; NaN: none */
    double invalid_qps; /* lowest not-VALID rate so far; NaN: none */
    double next_qps;    /* the rate of the next trial */
    int trials;
    bool done;
} lb_search;

void lb_search_init(lb_search *s, const lb_search_params *p);
/* The next rate to run; false when the search is over. */
bool lb_search_next(lb_search *s, double *qps);
/* The verdict of the run at qps (the rate lb_search_next gave). */
void lb_search_report(lb_search *s, double qps, bool valid);
/* The highest VALID rate found; NaN when none was. */
double lb_search_result(const lb_search *s);

#endif
