/* sample.h: choosing the next token from a row of logits.
 *
 * Greedy (temperature 0) is the first largest logit; so is a temperature so small that the
 * largest logit divided by it overflows (a subnormal one), and a row with no logit above
 * -inf. Otherwise the logits are divided by the temperature, cut to the top_k largest (0:
 * all), softmaxed, cut to the smallest set of most likely tokens whose probability reaches
 * top_p (1: all; the likeliest token at least, whatever top_p), renormalised, and one
 * token is drawn with the request's own generator. Both cuts follow one order: the scaled
 * logit, larger first, ties by the smaller id, so they are exact among equal logits. A
 * NaN logit counts as -inf: never chosen while any other is a number. The cost is
 * proportional to the vocabulary (no sort of it; sample.c).
 *
 * What a seed reproduces: the same seed, the same logits (bit for bit) and the same
 * parameters draw the same tokens with this build, whatever else is in the batch (each
 * request has its own generator and draws once a token). Not promised: the same tokens
 * across llmbench versions (the order in which the kept tokens are walked is the
 * implementation's), nor where the logits themselves differ in their last bits (another
 * device, another batch shape on the GPU). Not here: repetition or frequency penalties,
 * min_p, logit bias. */
#ifndef LB_ENGINE_SAMPLE_H
#define LB_ENGINE_SAMPLE_H

#include <stdint.h>

#include "core/rng.h"

typedef struct {
    float temperature; /* 0: greedy */
    int32_t top_k;     /* 0: no cut */
    float top_p;       /* in (0, 1]; 1: no cut */
    uint64_t seed;     /* the request's generator */
} lb_sampling;

lb_sampling lb_sample_default(void); /* greedy */

static inline int lb_sampling_greedy(const lb_sampling *s) {
    return !(s->temperature > 0.0f);
}

/* The first index of the largest of x[0..n). */
int32_t lb_sample_argmax(const float *x, int32_t n);

/* One token from logits[0..V) as above; scratch holds 2 V floats' worth (caller's). */
int32_t lb_sample_token(const float *logits, int32_t V, const lb_sampling *s, lb_rng *rng,
                        void *scratch);

#endif
