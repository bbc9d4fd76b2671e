/* rng.c: the project's one random generator (core/rng.h): xoshiro256** seeded through
 * splitmix64, as their authors recommend. */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void lb_rng_seed(lb_rng *rng, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&st);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t lb_rng_next(lb_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lb_rng_uniform(lb_rng *rng) {
    return (double)(lb_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t lb_rng_below(lb_rng *rng, uint64_t n) {
    if (n == 0) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do {
        r = lb_rng_next(rng);
    } while (r >= limit);
    return r % n;
}

double lb_rng_normal(lb_rng *rng) {
    double u1 = lb_rng_uniform(rng), u2 = lb_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double lb_rng_gamma(lb_rng *rng, double shape) {
    if (!(shape > 0) || isinf(shape)) return NAN; /* no such distribution: nothing is drawn */
    if (shape < 1.0) {
        double u = lb_rng_uniform(rng);
        return lb_rng_gamma(rng, shape + 1.0) * pow(u > 0 ? u : 0x1.0p-53, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = lb_rng_normal(rng), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = lb_rng_uniform(rng);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
        if (u > 0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}
