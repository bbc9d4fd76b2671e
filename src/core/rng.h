/* rng.h: a small fast generator (splitmix64 seeded xoshiro256**) shared by everything that
 * needs reproducible randomness: synthetic data, sampling, the bootstrap of core/stats.h.
 * The same seed gives the same sequence on every machine; not for cryptography. */
#ifndef LB_CORE_RNG_H
#define LB_CORE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} lb_rng;

void lb_rng_seed(lb_rng *rng, uint64_t seed);
uint64_t lb_rng_next(lb_rng *rng);
double lb_rng_uniform(lb_rng *rng);             /* [0,1) */
uint64_t lb_rng_below(lb_rng *rng, uint64_t n); /* [0,n), unbiased */
double lb_rng_normal(lb_rng *rng);              /* standard normal (Box-Muller) */
/* Gamma(shape, 1) (Marsaglia and Tsang; shape < 1 through Gamma(shape + 1) U^(1/shape)):
 * mean shape, variance shape. A shape that is not a positive finite number (0, negative,
 * infinite, NaN) has no such distribution: NaN, and rng is left as it was. */
double lb_rng_gamma(lb_rng *rng, double shape);

#endif
