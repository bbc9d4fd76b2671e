/* search.c: bracket, then bisect (search.h). */
#include "loadgen/search.h"

#include <math.h>

lb_search_params lb_search_default_params(double start_qps) {
    return (lb_search_params){.start_qps = start_qps,
                              .rel_tol = 0.05,
                              .min_qps = start_qps / 1024.0,
                              .max_qps = start_qps * 1024.0,
                              .max_trials = 16};
}

void lb_search_init(lb_search *s, const lb_search_params *p) {
    s->p = *p;
    s->valid_qps = NAN;
    s->invalid_qps = NAN;
    s->next_qps = p->start_qps;
    s->trials = 0;
    s->done = !(p->start_qps > 0) || p->max_trials < 1;
}

bool lb_search_next(lb_search *s, double *qps) {
    if (s->done) return false;
    *qps = s->next_qps;
    return true;
}

void lb_search_report(lb_search *s, double qps, bool valid) {
    s->trials++;
    if (valid && !(qps <= s->valid_qps)) s->valid_qps = qps;
    if (!valid && !(qps >= s->invalid_qps)) s->invalid_qps = qps;
    bool have_valid = !isnan(s->valid_qps), have_invalid = !isnan(s->invalid_qps);
    if (have_valid && have_invalid) {
        if ((s->invalid_qps - s->valid_qps) / s->invalid_qps <= s->p.rel_tol)
            s->done = true;
        else
            s->next_qps = 0.5 * (s->valid_qps + s->invalid_qps);
    } else if (have_valid) { /* every run VALID so far: double, up to the top */
        if (s->valid_qps >= s->p.max_qps)
            s->done = true;
        else
            s->next_qps = fmin(2.0 * s->valid_qps, s->p.max_qps);
    } else { /* none VALID so far: halve, down to the floor */
        if (s->invalid_qps <= s->p.min_qps)
            s->done = true;
        else
            s->next_qps = fmax(0.5 * s->invalid_qps, s->p.min_qps);
    }
    if (s->trials >= s->p.max_trials) s->done = true;
}

double lb_search_result(const lb_search *s) {
    return s->valid_qps;
}
