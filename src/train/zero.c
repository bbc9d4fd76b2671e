/* zero.c: buckets, pieces and ZeRO's formulas (see zero.h). */
#include "train/zero.h"

#include <stdbool.h>
#include <stdlib.h>

int lb_zero_model_units(const lb_model_config *cfg, int64_t *bounds) {
    lb_param_offsets o;
    lb_model_param_offsets(cfg, &o);
    int L = cfg->n_layer;
    bounds[0] = 0;
    for (int l = 0; l <= L; l++)
        bounds[1 + l] = o.layers + (int64_t)l * o.layer_numel;
    bounds[L + 2] = o.total;
    return L + 2;
}

void lb_zero_plan_free(lb_zero_plan *p) {
    if (p == NULL) return;
    free(p->unit_start);
    free(p->buckets);
    free(p->bucket_of_unit);
    *p = (lb_zero_plan){0};
}

lb_status lb_zero_plan_init(lb_zero_plan *p, const int64_t *bounds, int n_units,
                            int64_t bucket_elems, int ranks, int64_t align, lb_err *err) {
    *p = (lb_zero_plan){0};
    if (n_units < 1 || ranks < 1 || align < 1 || bucket_elems < 0 || bounds[0] != 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "bucket plan: %d units over %d ranks, align %lld, bucket %lld elements: "
                       "expected at least one unit and rank, align >= 1, bucket >= 0",
                       n_units, ranks, (long long)align, (long long)bucket_elems);
    for (int u = 0; u < n_units; u++)
        if (bounds[u + 1] <= bounds[u])
            return lb_fail(err, LB_ERR_USAGE, "bucket plan: unit %d is empty or out of order", u);
    p->ranks = ranks;
    p->n_units = n_units;
    p->unit_start = malloc(((size_t)n_units + 1) * sizeof *p->unit_start);
    p->buckets = calloc((size_t)n_units, sizeof *p->buckets);
    p->bucket_of_unit = malloc((size_t)n_units * sizeof *p->bucket_of_unit);
    if (!p->unit_start || !p->buckets || !p->bucket_of_unit) {
        lb_zero_plan_free(p);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for a bucket plan");
    }
    for (int u = 0; u <= n_units; u++)
        p->unit_start[u] = bounds[u];
    const int64_t quantum = (int64_t)ranks * align;
    int nb = 0;
    for (int u = 0; u < n_units;) {
        int hi = u;
        while (hi + 1 < n_units && bucket_elems > 0 && bounds[hi + 2] - bounds[u] <= bucket_elems)
            hi++;
        lb_zero_bucket *b = &p->buckets[nb];
        b->start = bounds[u];
        b->end = bounds[hi + 1];
        b->padded = (b->end - b->start + quantum - 1) / quantum * quantum;
        b->piece = b->padded / ranks;
        b->shard_offset = p->shard_elems;
        b->unit_lo = u;
        b->unit_hi = hi;
        p->shard_elems += b->piece;
        if (b->padded > p->max_padded) p->max_padded = b->padded;
        for (int k = u; k <= hi; k++)
            p->bucket_of_unit[k] = nb;
        nb++;
        u = hi + 1;
    }
    p->n_buckets = nb;
    return LB_OK;
}

int64_t lb_zero_send_elems(const lb_zero_plan *p, lb_zero_stage s) {
    const lb_zero_bucket *last = &p->buckets[p->n_buckets - 1];
    bool past = last->start + last->padded > p->unit_start[p->n_units];
    return (s == LB_ZERO_1 || s == LB_ZERO_2) && past ? last->padded : 0;
}

void lb_zero_other_slots(const lb_zero_plan *p, int64_t out[2]) {
    out[0] = out[1] = 0;
    for (int b = 1; b < p->n_buckets; b++)
        if (p->buckets[b].padded > out[b % 2]) out[b % 2] = p->buckets[b].padded;
}

/* Elements unit u's gather needs: its bucket padded, and the head's padding rows. */
static int64_t gather_need(const lb_zero_plan *p, int u, int head_unit, int64_t head_pad) {
    return p->buckets[p->bucket_of_unit[u]].padded + (u == head_unit ? head_pad : 0);
}

bool lb_zero_adds(lb_zero_stage s, int64_t grad_accum) {
    return s >= LB_ZERO_2 && grad_accum > 1;
}

bool lb_zero_rows(const lb_zero_plan *p, const lb_model_config *cfg, int64_t grad_accum) {
    return grad_accum == 1 && p->buckets[0].unit_hi == 0 && !cfg->tied_embeddings;
}

void lb_zero_gather_sizes(const lb_zero_plan *p, int lo, int hi, int head_unit, int64_t head_pad,
                          lb_zero_gathers *out) {
    *out = (lb_zero_gathers){.head_unit = head_unit, .head_pad = head_pad};
    for (int u = 0; u < p->n_units; u++) {
        int64_t n = gather_need(p, u, head_unit, head_pad);
        if (n > out->size[0]) out->size[0] = n;
        if (u >= lo && u < hi && n > out->size[1]) out->size[1] = n;
    }
    out->size[2] = out->size[1];
}

void lb_zero_model_gathers(const lb_zero_plan *p, const lb_model_config *cfg, bool adapters,
                           lb_zero_gathers *out) {
    int n = p->n_units;
    if (adapters) {
        lb_zero_gather_sizes(p, 0, n, -1, 0, out);
        return;
    }
    int64_t V = cfg->vocab_size, Vp = (V + 63) / 64 * 64;
    lb_zero_gather_sizes(p, 1, n - 1, cfg->tied_embeddings ? 0 : n - 1, (Vp - V) * cfg->d_model,
                         out);
}

bool lb_zero_gather_big(const lb_zero_plan *p, const lb_zero_gathers *g, int u) {
    return gather_need(p, u, g->head_unit, g->head_pad) > g->size[1];
}

void lb_zero_piece(const lb_zero_plan *p, int b, int rank, int64_t *lo, int64_t *hi) {
    const lb_zero_bucket *k = &p->buckets[b];
    int64_t a = k->start + (int64_t)rank * k->piece, e = a + k->piece;
    *lo = a < k->end ? a : k->end;
    *hi = e < k->end ? e : k->end;
}

int lb_zero_shard_segments(const lb_zero_plan *p, int rank, const lb_param_tensor *t, int n_tensors,
                           int64_t *start, lb_zero_seg *kind, int cap) {
    int n = 0, i = 0;
    for (int b = 0; b < p->n_buckets; b++) {
        int64_t lo, hi, at = p->buckets[b].shard_offset;
        lb_zero_piece(p, b, rank, &lo, &hi);
        while (i > 0 && t[i - 1].offset + t[i - 1].numel > lo)
            i--;
        for (; i < n_tensors && t[i].offset < hi; i++) {
            if (t[i].offset + t[i].numel <= lo) continue;
            int64_t a = t[i].offset > lo ? t[i].offset : lo;
            if (n < cap)
                start[n] = at + (a - lo),
                kind[n] = t[i].decay ? LB_ZERO_SEG_DECAY : LB_ZERO_SEG_PLAIN;
            n++;
        }
        if (hi - lo < p->buckets[b].piece) {
            if (n < cap) start[n] = at + (hi - lo), kind[n] = LB_ZERO_SEG_PAD;
            n++;
        }
    }
    return n;
}

/* Bytes per parameter of parameters, gradients and optimizer state. */
static void per_param(lb_precision prec, double *kp, double *kg, double *ko) {
    bool wide = prec == LB_PREC_FP32;
    *kp = wide ? 4 : 2;
    *kg = wide ? 4 : 2;
    *ko = wide ? 8 : 12;
}

double lb_zero_state_bytes(lb_zero_stage s, lb_precision prec, double n_params, int ranks) {
    double kp, kg, ko, P = n_params, N = ranks;
    per_param(prec, &kp, &kg, &ko);
    switch (s) {
    case LB_ZERO_0: return (kp + kg + ko) * P;
    case LB_ZERO_1: return (kp + kg) * P + ko * P / N;
    case LB_ZERO_2: return kp * P + (kg + ko) * P / N;
    default: return (kp + kg + ko) * P / N;
    }
}

double lb_zero_traffic_bytes(lb_zero_stage s, lb_precision prec, double n_params, int ranks) {
    double b = prec == LB_PREC_FP32 ? 4 : 2, times = s == LB_ZERO_3 ? 3 : 2;
    return times * (ranks - 1) / (double)ranks * n_params * b;
}

double lb_zero_adapter_traffic_bytes(lb_zero_stage s, lb_precision prec, double n, int ranks) {
    double b = prec == LB_PREC_FP32 ? 4 : 2, f = (ranks - 1) / (double)ranks;
    switch (s) {
    case LB_ZERO_0: return 2 * f * 4 * n;
    case LB_ZERO_3: return f * (4 + 2 * b) * n;
    default: return f * (4 + b) * n;
    }
}

double lb_zero_ring_bytes(lb_zero_coll c, double bytes, int ranks) {
    double f = (ranks - 1) / (double)ranks;
    return c == LB_ZERO_ALL_REDUCE ? 2 * f * bytes : f * bytes;
}
