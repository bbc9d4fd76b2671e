/* sample.c: the sampler of sample.h. Candidates are sorted by logit (ties by id), so the
 * top-k and top-p cuts are prefixes of one order; sums run in double. A temperature too
 * small for the logits over it to stay finite decodes greedily. A NaN logit (a model that
 * overflowed) counts as -inf: never chosen while any other token is a number, where a NaN
 * in the sort and the sums would pick the least likely token every time. */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>

lb_sampling lb_sample_default(void) {
    return (lb_sampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
}

int32_t lb_sample_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

typedef struct {
    float v;
    int32_t id;
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

int32_t lb_sample_token(const float *logits, int32_t V, const lb_sampling *s, lb_rng *rng,
                        void *scratch) {
    if (lb_sampling_greedy(s)) return lb_sample_argmax(logits, V);
    cand *c = scratch;
    for (int32_t i = 0; i < V; i++) {
        const float v = logits[i] / s->temperature;
        c[i] = (cand){isnan(v) ? -INFINITY : v, i};
    }
    qsort(c, (size_t)V, sizeof *c, cmp_cand);
    /* A temperature so small (1e-40, subnormal) that the largest logit over it overflows
     * puts all the mass on that logit: greedy, where exp(inf - inf) would draw from NaNs. */
    if (isinf(c[0].v)) return lb_sample_argmax(logits, V);
    int32_t n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double sum = 0.0, mx = c[0].v;
    for (int32_t i = 0; i < n; i++)
        sum += exp(c[i].v - mx);
    if (s->top_p < 1.0f) {
        double acc = 0.0;
        int32_t keep = 0;
        do /* the likeliest token at least, whatever top_p (0 would keep none) */
            acc += exp(c[keep++].v - mx);
        while (keep < n && acc < s->top_p * sum);
        n = keep;
        sum = acc;
    }
    double u = lb_rng_uniform(rng) * sum, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp(c[i].v - mx);
        if (u < acc) return c[i].id;
    }
    return c[n - 1].id;
}
