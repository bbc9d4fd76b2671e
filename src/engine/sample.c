/* sample.c: the sampler of sample.h, without sorting the vocabulary.
 *
 * The order is the one sample.h defines (scaled logit, larger first, ties by smaller id);
 * each kind of cut finds its candidates in time proportional to V and sorts at most a few
 * of them, because a full sort of Llama 3's 128,256 logits took about 10 ms a token on the
 * thread that drives the engine:
 * - no cut: one pass for the largest logit, one for the sum, and a walk in id order to
 *   the drawn mass (no candidate array at all);
 * - top_k up to HEAP_K (with or without top_p): a min-heap of the k best seen so far,
 *   filled in one pass (almost every logit is rejected by one comparison with the heap's
 *   root), then sorted: the top_p cut and the draw walk that sorted prefix;
 * - top_p alone: one pass adds each weight to a histogram over the scaled logit's float
 *   bits (order-preserving buckets); from the top, the bucket where the mass reaches
 *   top_p is the only one whose candidates are ordered (select_mass), and the draw walks
 *   the vocabulary in id order up to the last token kept;
 * - a larger top_k: quickselect (partition around a median of three; what is left after
 *   2 log2 V partitions is sorted, partition_budget) moves the k best to
 *   the front, unordered, and a top_p cut among them is select_mass: partition, keep the
 *   part before the pivot whole when its mass does not reach what is missing, else look
 *   inside it.
 * Where the kept tokens are not sorted the draw walks them in the order they lie: the same
 * tokens with the same probabilities as a walk in the sorted order, not the same token for
 * a given seed (sample.h says what a seed reproduces). Weights are exp(v - max) in double,
 * recomputed where needed rather than stored (the scratch holds the candidates). A
 * temperature too small for the logits over it to stay finite decodes greedily. A NaN
 * logit (a model that overflowed) counts as -inf: never chosen while any other token is a
 * number, where a NaN in the comparisons and the sums would pick the least likely token
 * every time. */
#include "engine/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* Largest top_k cut by the heap; above it quickselect, whose passes cost more a logit but
 * do not grow with k. */
#define HEAP_K 1024
/* Ranges this small are sorted rather than partitioned further. */
#define SMALL_RANGE 32
/* top_p's mass histogram: buckets of 2^-3 of an octave of the scaled logit. */
#define MASS_BUCKET_BITS 12

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
    float v; /* the scaled logit, -inf for NaN */
    int32_t id;
} cand;

/* Whether a comes before b in the order: the larger value, then the smaller id. */
static inline bool before(cand a, cand b) {
    return a.v > b.v || (a.v == b.v && a.id < b.id);
}

static int cmp_cand(const void *a, const void *b) {
    return before(*(const cand *)a, *(const cand *)b) ? -1 : 1;
}

static inline float scaled(const float *logits, int32_t i, float temperature) {
    const float v = logits[i] / temperature;
    return isnan(v) ? -INFINITY : v;
}

static inline double weight(float v, double mx) {
    return exp(v - mx);
}

static inline void swap(cand *c, int32_t i, int32_t j) {
    cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Partitions c[lo..hi) (at least 3) around the median of its first, middle and last:
 * returns the pivot's index p, with c[lo..p) before it and c[p+1..hi) after it. The loop
 * is branch-free (swap always, advance when before), as half its comparisons go each way. */
static int32_t partition(cand *c, int32_t lo, int32_t hi) {
    const int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(c[mid], c[lo])) swap(c, lo, mid);
    if (before(c[last], c[lo])) swap(c, lo, last);
    if (before(c[last], c[mid])) swap(c, mid, last);
    swap(c, mid, last);
    const cand piv = c[last];
    int32_t p = lo;
    for (int32_t i = lo; i < last; i++) {
        const cand x = c[i];
        c[i] = c[p];
        c[p] = x;
        p += before(x, piv);
    }
    swap(c, p, last);
    return p;
}

/* How many partitions a range of n may take before what is left is sorted instead:
 * quickselect is linear on average, but structured logits (a valley, ascending runs, equal
 * values in id order) make the median of three a poor pivot again and again, quadratic
 * (seconds a token at Llama 3's vocabulary); past 2 log2 n partitions qsort's n log n
 * bounds it. */
static int partition_budget(int32_t n) {
    int depth = 0;
    for (; n > 1; n >>= 1)
        depth++;
    return 2 * depth;
}

/* Moves the k best of c[0..n) to c[0..k), unordered (0 < k < n). */
static void select_k(cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n;
    for (int left = partition_budget(n); hi - lo >= SMALL_RANGE && left > 0; left--) {
        const int32_t p = partition(c, lo, hi);
        if (p == k || p == k - 1) return;
        if (p < k)
            lo = p + 1;
        else
            hi = p;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand);
}

/* The k best of the scaled logits into c[0..k), sorted (0 < k <= HEAP_K, k < V): a heap
 * whose root is the worst kept, replaced by any logit before it. Logits come in id order,
 * so one equal to the root's value comes after it, and a larger value is the whole test. */
static void heap_top_k(const float *logits, int32_t V, float temperature, int32_t k, cand *c) {
    for (int32_t i = 0; i < V; i++) {
        const cand x = {scaled(logits, i, temperature), i};
        int32_t at;
        if (i < k) { /* sift up */
            at = i;
            while (at > 0 && before(c[(at - 1) / 2], x)) {
                c[at] = c[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else {
            if (!(x.v > c[0].v)) continue;
            at = 0; /* sift down from the root */
            for (;;) {
                int32_t ch = 2 * at + 1;
                if (ch >= k) break;
                if (ch + 1 < k && before(c[ch], c[ch + 1])) ch++;
                if (!before(x, c[ch])) break;
                c[at] = c[ch];
                at = ch;
            }
        }
        c[at] = x;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

/* The smallest prefix of c[0..n)'s order whose mass, added to before (the mass of what
 * comes before them all, less than target), reaches target (at least one candidate),
 * moved to c[0..m), unordered; *mass gets before + its mass. */
static int32_t select_mass(cand *c, int32_t n, double mx, double before_mass, double target,
                           double *mass) {
    int32_t lo = 0, hi = n; /* c[0..lo) are kept, of mass acc < target; the end is in (lo, hi] */
    double acc = before_mass;
    for (int left = partition_budget(n); hi - lo >= SMALL_RANGE && left > 0; left--) {
        const int32_t p = partition(c, lo, hi);
        double upper = 0.0;
        for (int32_t i = lo; i < p; i++)
            upper += weight(c[i].v, mx);
        if (p > lo && acc + upper >= target) {
            hi = p;
            continue;
        }
        acc += upper + weight(c[p].v, mx);
        lo = p + 1;
        if (acc >= target || lo == hi) {
            *mass = acc;
            return lo;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand);
    do /* the likeliest token at least, whatever top_p (0 would keep none) */
        acc += weight(c[lo++].v, mx);
    while (lo < hi && acc < target);
    *mass = acc;
    return lo;
}

/* A draw from c[0..n) by weight, sum their total. */
static int32_t draw(const cand *c, int32_t n, double mx, double sum, lb_rng *rng) {
    const double u = lb_rng_uniform(rng) * sum;
    double acc = 0.0;
    int32_t last = c[0].id;
    for (int32_t i = 0; i < n; i++) {
        const double w = weight(c[i].v, mx);
        if (w > 0.0) {
            acc += w;
            last = c[i].id;
            if (u < acc) break;
        }
    }
    return last; /* past the end only by rounding: the last token of any weight */
}

/* An order-preserving bucket of a scaled logit: the top 12 bits of its float with the
 * sign flipped (negative ones all bits flipped), -0 as +0. A larger bucket holds only
 * larger values. */
static inline uint32_t bucket(float v) {
    union {
        float f;
        uint32_t u;
    } b = {v + 0.0f};
    return (b.u & 0x80000000u ? ~b.u : b.u | 0x80000000u) >> (32 - MASS_BUCKET_BITS);
}

/* top_p alone over the whole vocabulary: one pass adds every weight into the bucket of
 * its value, the buckets from the top find the one where the mass reaches top_p, its
 * candidates alone are ordered by select_mass, and the draw walks the vocabulary in id
 * order taking the tokens up to the last one kept. */
static int32_t draw_top_p(const float *logits, int32_t V, float temperature, double mx, float top_p,
                          cand *c, lb_rng *rng) {
    double mass[1 << MASS_BUCKET_BITS] = {0}; /* 32 KiB of stack */
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) {
        const float v = scaled(logits, i, temperature);
        const double w = weight(v, mx);
        sum += w;
        mass[bucket(v)] += w;
    }
    uint32_t lowest = 0; /* the lowest bucket of any weight: where rounding would run out */
    while (mass[lowest] == 0.0)
        lowest++;
    const double target = top_p * sum;
    double acc = 0.0;
    uint32_t b = (1u << MASS_BUCKET_BITS) - 1;
    for (;; b--) { /* the top bucket of any weight at least, whatever top_p */
        if (mass[b] > 0.0 && (acc + mass[b] >= target || b == lowest)) break;
        acc += mass[b];
    }
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        const float v = scaled(logits, i, temperature);
        if (bucket(v) == b) c[n++] = (cand){v, i};
    }
    double kept = 0.0;
    const int32_t m = select_mass(c, n, mx, acc, target, &kept);
    cand edge = c[0]; /* the last kept in the order */
    for (int32_t i = 1; i < m; i++)
        if (before(edge, c[i])) edge = c[i];
    const double u = lb_rng_uniform(rng) * kept;
    double run = 0.0;
    int32_t last = edge.id;
    for (int32_t i = 0; i < V; i++) {
        const float v = scaled(logits, i, temperature);
        if (v < edge.v || (v == edge.v && i > edge.id)) continue;
        const double w = weight(v, mx);
        if (w > 0.0) {
            run += w;
            last = i;
            if (u < run) break;
        }
    }
    return last; /* past the end only by rounding: the last token kept */
}

/* No cut: a draw over the whole vocabulary in id order. */
static int32_t draw_all(const float *logits, int32_t V, float temperature, double mx, lb_rng *rng) {
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++)
        sum += weight(scaled(logits, i, temperature), mx);
    const double u = lb_rng_uniform(rng) * sum;
    double acc = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < V; i++) {
        const double w = weight(scaled(logits, i, temperature), mx);
        if (w > 0.0) {
            acc += w;
            last = i;
            if (u < acc) break;
        }
    }
    return last;
}

int32_t lb_sample_token(const float *logits, int32_t V, const lb_sampling *s, lb_rng *rng,
                        void *scratch) {
    if (lb_sampling_greedy(s)) return lb_sample_argmax(logits, V);
    const float t = s->temperature;
    float top = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        const float v = logits[i] / t;
        top = v > top ? v : top; /* a NaN never wins */
    }
    /* A temperature so small (1e-40, subnormal) that the largest logit over it overflows
     * puts all the mass on that logit: greedy, where exp(inf - inf) would draw from NaNs;
     * so does a row without a number above -inf. */
    if (!isfinite(top)) return lb_sample_argmax(logits, V);
    const double mx = top;
    const int32_t k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    const bool cut_p = s->top_p < 1.0f;
    if (k == V && !cut_p) return draw_all(logits, V, t, mx, rng);
    cand *c = scratch;
    if (k == V) return draw_top_p(logits, V, t, mx, s->top_p, c, rng);
    if (k <= HEAP_K) { /* sorted: the top_p cut is a prefix walk */
        heap_top_k(logits, V, t, k, c);
        double sum = 0.0;
        for (int32_t i = 0; i < k; i++)
            sum += weight(c[i].v, mx);
        int32_t n = k;
        if (cut_p) {
            double acc = 0.0;
            int32_t keep = 0;
            do /* the likeliest token at least, whatever top_p (0 would keep none) */
                acc += weight(c[keep++].v, mx);
            while (keep < n && acc < s->top_p * sum);
            n = keep;
            sum = acc;
        }
        return draw(c, n, mx, sum, rng);
    }
    for (int32_t i = 0; i < V; i++)
        c[i] = (cand){scaled(logits, i, t), i};
    if (k < V) select_k(c, V, k);
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++)
        sum += weight(c[i].v, mx);
    int32_t n = k;
    if (cut_p) n = select_mass(c, k, mx, 0.0, s->top_p * sum, &sum);
    return draw(c, n, mx, sum, rng);
}
