/* dp.c: data-parallel steps with ZeRO stages 0-3 on the CPU reference (see dp.h).
 *
 * What trains is one flat array: the model's parameters, or with adapters on a frozen base
 * the adapters' (model/lora.h's layer-major layout, one unit a layer, one decayed tensor).
 * Buffers: its params and grads stay whole (they are the working copies the reference ops
 * read and write); stages 1-3 add this rank's shard of the gradient, of the
 * fp32 master parameters and of AdamW's m and v, and one staging buffer as long as the
 * largest padded bucket, through which a bucket goes into a reduce-scatter (zero padding
 * after its real end) and comes out of an all-gather. A failure inside the model's hook is
 * kept (the first one) and returned by lb_dp_step; the remaining hooks of the pass do
 * nothing. */
#include "train/dp.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "model/lora.h"
#include "model/ref.h"

struct lb_dp {
    lb_model *m;
    float *params, *grads;          /* what trains: the model's, or its adapters' */
    int64_t n_params;               /* elements of both */
    const lb_param_tensor *tensors; /* their tensors, for weight decay */
    int n_tensors;
    lb_param_tensor adapters; /* the adapters as one decayed tensor */
    int unit_shift;           /* the model's unit u is the plan's u - unit_shift */
    lb_comm *c;               /* NULL: one rank */
    lb_dp_params p;
    int rank, ranks;
    lb_zero_plan plan;
    float *g_shard, *p_shard, *m_shard, *v_shard; /* [plan.shard_elems], stages 1-3 */
    float *staging;                               /* [plan.max_padded] */
    float *piece;                                 /* [largest piece] */
    bool last_micro;                              /* gradients leave in this micro-batch */
    lb_status st;                                 /* first failure inside the hook */
    lb_err err;
    int64_t comm_ns;
    double sent_bytes;
};

/* ---- collectives, timed and counted; with one rank they are copies ---- */

static lb_status all_reduce(lb_dp *d, void *buf, size_t n, lb_comm_dtype t, lb_comm_op op,
                            lb_err *err) {
    if (d->c == NULL) return LB_OK;
    int64_t t0 = lb_clock_now_ns();
    lb_status st = lb_comm_all_reduce(d->c, buf, buf, n, t, op, NULL, err);
    d->comm_ns += lb_clock_now_ns() - t0;
    d->sent_bytes +=
        lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, (double)(n * lb_comm_dtype_bytes(t)), d->ranks);
    return st;
}

/* Bucket b's gradient averaged over ranks; this rank's piece added into its shard. */
static lb_status reduce_scatter_bucket(lb_dp *d, int b, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    int64_t len = k->end - k->start;
    memcpy(d->staging, d->grads + k->start, (size_t)len * sizeof(float));
    memset(d->staging + len, 0, (size_t)(k->padded - len) * sizeof(float));
    if (d->c == NULL) {
        memcpy(d->piece, d->staging, (size_t)k->piece * sizeof(float));
    } else {
        int64_t t0 = lb_clock_now_ns();
        LB_TRY(lb_comm_reduce_scatter(d->c, d->staging, d->piece, (size_t)k->piece, LB_COMM_FP32,
                                      LB_COMM_AVG, NULL, err));
        d->comm_ns += lb_clock_now_ns() - t0;
        d->sent_bytes +=
            lb_zero_ring_bytes(LB_ZERO_REDUCE_SCATTER, (double)k->padded * 4, d->ranks);
    }
    float *g = d->g_shard + k->shard_offset;
    for (int64_t i = 0; i < k->piece; i++)
        g[i] += d->piece[i];
    return LB_OK;
}

/* Every rank's master piece of bucket b into the model's parameters. */
static lb_status all_gather_bucket(lb_dp *d, int b, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    const float *mine = d->p_shard + k->shard_offset;
    if (d->c == NULL) {
        memcpy(d->staging, mine, (size_t)k->piece * sizeof(float));
    } else {
        int64_t t0 = lb_clock_now_ns();
        LB_TRY(
            lb_comm_all_gather(d->c, mine, d->staging, (size_t)k->piece, LB_COMM_FP32, NULL, err));
        d->comm_ns += lb_clock_now_ns() - t0;
        d->sent_bytes += lb_zero_ring_bytes(LB_ZERO_ALL_GATHER, (double)k->padded * 4, d->ranks);
    }
    memcpy(d->params + k->start, d->staging, (size_t)(k->end - k->start) * sizeof(float));
    return LB_OK;
}

/* Stage 3: a bucket's parameters are not this rank's to keep. */
static void release_bucket(lb_dp *d, int b) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    for (int64_t i = k->start; i < k->end; i++)
        d->params[i] = NAN;
}

/* ---- the model's hook ---- */

static void keep(lb_dp *d, lb_status st) {
    if (st != LB_OK && d->st == LB_OK) d->st = st;
}

/* The buckets a unit reads: its own, and under a tied head wte's. */
static int buckets_read(const lb_dp *d, int unit, int out[2]) {
    int n = 0;
    out[n++] = d->plan.bucket_of_unit[unit];
    if (d->m->lora == NULL && unit == d->plan.n_units - 1 && d->m->cfg.tied_embeddings &&
        d->plan.bucket_of_unit[0] != out[0])
        out[n++] = d->plan.bucket_of_unit[0];
    return n;
}

static void gradient_complete(lb_dp *d, int b) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    switch (d->p.stage) {
    case LB_ZERO_0:
        if (d->last_micro)
            keep(d, all_reduce(d, d->grads + k->start, (size_t)(k->end - k->start), LB_COMM_FP32,
                               LB_COMM_AVG, &d->err));
        break;
    case LB_ZERO_1:
        if (d->last_micro) keep(d, reduce_scatter_bucket(d, b, &d->err));
        break;
    default:
        keep(d, reduce_scatter_bucket(d, b, &d->err));
        memset(d->grads + k->start, 0, (size_t)(k->end - k->start) * sizeof(float));
        break;
    }
}

static void on_unit(void *ctx, lb_model_event ev, int unit) {
    lb_dp *d = ctx;
    unit -= d->unit_shift;
    /* with adapters the embeddings and the head hold nothing that trains */
    if (d->st != LB_OK || unit < 0 || unit >= d->plan.n_units) return;
    int read[2], n = buckets_read(d, unit, read);
    bool stage3 = d->p.stage == LB_ZERO_3;
    if (ev == LB_MODEL_FORWARD_BEGIN || ev == LB_MODEL_BACKWARD_BEGIN) {
        for (int i = 0; stage3 && i < n && d->st == LB_OK; i++)
            keep(d, all_gather_bucket(d, read[i], &d->err));
        return;
    }
    for (int i = 0; stage3 && i < n; i++)
        release_bucket(d, read[i]);
    int b = d->plan.bucket_of_unit[unit];
    if (ev == LB_MODEL_BACKWARD_END && d->plan.buckets[b].unit_lo == unit) gradient_complete(d, b);
}

/* ---- set-up ---- */

void lb_dp_free(lb_dp *d) {
    if (d == NULL) return;
    if (d->m != NULL) lb_model_set_hook(d->m, NULL, NULL);
    lb_zero_plan_free(&d->plan);
    free(d->g_shard);
    free(d->p_shard);
    free(d->m_shard);
    free(d->v_shard);
    free(d->staging);
    free(d->piece);
    free(d);
}

/* Unit boundaries of what trains into bounds (n_layer + 3 room); how many units. */
static int train_units(const lb_dp *d, int64_t *bounds) {
    const lb_lora *a = d->m->lora;
    if (a == NULL) return lb_zero_model_units(&d->m->cfg, bounds);
    const int L = d->m->cfg.n_layer;
    for (int l = 0; l <= L; l++)
        bounds[l] = (int64_t)l * a->off.layer_numel;
    return L;
}

lb_status lb_dp_init(lb_dp **out, lb_model *m, lb_comm *c, const lb_dp_params *p, lb_err *err) {
    *out = NULL;
    if (p->grad_accum < 1 || p->stage < LB_ZERO_0 || p->stage > LB_ZERO_3 || p->bucket_elems < 0)
        return lb_fail(err, LB_ERR_USAGE,
                       "data parallel: stage %d, %d micro-batches, buckets of %lld elements: "
                       "expected stage 0-3, at least one micro-batch, buckets >= 0",
                       (int)p->stage, p->grad_accum, (long long)p->bucket_elems);
    lb_dp *d = calloc(1, sizeof *d);
    if (d == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    d->m = m;
    d->c = c;
    d->p = *p;
    d->rank = c ? lb_comm_rank(c) : 0;
    d->ranks = c ? lb_comm_size(c) : 1;
    if (m->lora != NULL) {
        d->params = m->lora->params;
        d->grads = m->lora->grads;
        d->n_params = m->lora->off.total;
        d->adapters = (lb_param_tensor){.offset = 0, .numel = d->n_params, .decay = 1};
        d->tensors = &d->adapters;
        d->n_tensors = 1;
        d->unit_shift = 1;
    } else {
        d->params = m->params;
        d->grads = m->grads;
        d->n_params = m->n_params;
        d->tensors = m->layout;
        d->n_tensors = m->n_tensors;
    }
    int64_t *bounds = malloc(((size_t)m->cfg.n_layer + 3) * sizeof *bounds);
    if (bounds == NULL) {
        lb_dp_free(d);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    }
    int n_units = train_units(d, bounds);
    lb_status st = lb_zero_plan_init(&d->plan, bounds, n_units,
                                     p->stage == LB_ZERO_3 ? 0 : p->bucket_elems, d->ranks, 1, err);
    free(bounds);
    if (st != LB_OK) {
        lb_dp_free(d);
        return st;
    }
    int64_t piece = 0;
    for (int b = 0; b < d->plan.n_buckets; b++)
        if (d->plan.buckets[b].piece > piece) piece = d->plan.buckets[b].piece;
    size_t shard = (size_t)d->plan.shard_elems;
    d->staging = malloc((size_t)d->plan.max_padded * sizeof(float));
    d->piece = malloc((size_t)piece * sizeof(float));
    bool sharded = p->stage != LB_ZERO_0;
    if (sharded) {
        d->g_shard = calloc(shard, sizeof(float));
        d->p_shard = calloc(shard, sizeof(float));
        d->m_shard = calloc(shard, sizeof(float));
        d->v_shard = calloc(shard, sizeof(float));
    }
    if (!d->staging || !d->piece ||
        (sharded && (!d->g_shard || !d->p_shard || !d->m_shard || !d->v_shard))) {
        lb_dp_free(d);
        return lb_fail(err, LB_ERR_NOMEM, "out of host memory for a %zu-element shard", shard);
    }
    for (int b = 0; sharded && b < d->plan.n_buckets; b++) {
        int64_t lo, hi;
        lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
        memcpy(d->p_shard + d->plan.buckets[b].shard_offset, d->params + lo,
               (size_t)(hi - lo) * sizeof(float));
    }
    for (int b = 0; p->stage == LB_ZERO_3 && b < d->plan.n_buckets; b++)
        release_bucket(d, b);
    lb_model_set_hook(m, on_unit, d);
    *out = d;
    return LB_OK;
}

int64_t lb_dp_shard_elems(const lb_dp *d) {
    return d->plan.shard_elems;
}

/* ---- the optimizer step ---- */

/* Stage 0's AdamW moments m (first) or v: the model's, or its adapters'. */
static float *moments(const lb_dp *d, bool first) {
    const lb_lora *a = d->m->lora;
    if (a != NULL) return first ? a->m : a->v;
    return first ? d->m->m : d->m->v;
}

static void scale(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

/* AdamW over flat elements [lo, hi), whose state lives at param, grad, m, v (element lo at
 * index 0), split at tensor boundaries for weight decay. */
static void adamw_range(const lb_dp *d, int64_t lo, int64_t hi, float *param, const float *grad,
                        float *mo, float *vo, const lb_adamw_params *o, float clip, int step) {
    for (int i = 0; i < d->n_tensors; i++) {
        const lb_param_tensor *t = &d->tensors[i];
        int64_t a = t->offset > lo ? t->offset : lo;
        int64_t e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= e) continue;
        int64_t j = a - lo;
        lb_ref_adamw_update(param + j, grad + j, mo + j, vo + j, e - a, o->lr, o->beta1, o->beta2,
                            o->eps, t->decay ? o->weight_decay : 0.0f, clip, step);
    }
}

lb_status lb_dp_gather_params(lb_dp *d, lb_err *err) {
    if (d->p.stage != LB_ZERO_3) return LB_OK;
    for (int b = 0; b < d->plan.n_buckets; b++)
        LB_TRY(all_gather_bucket(d, b, err));
    return LB_OK;
}

lb_status lb_dp_step(lb_dp *d, const int32_t *inputs, const int32_t *targets, int B, int T,
                     const lb_adamw_params *opt, int step, lb_dp_step_info *info, lb_err *err) {
    lb_model *m = d->m;
    const int K = d->p.grad_accum;
    const bool sharded = d->p.stage != LB_ZERO_0;
    d->comm_ns = 0;
    d->sent_bytes = 0;
    if (sharded) memset(d->g_shard, 0, (size_t)d->plan.shard_elems * sizeof(float));
    lb_model_zero_grad(m);
    double loss = 0.0;
    for (int k = 0; k < K && d->st == LB_OK; k++) {
        size_t off = (size_t)k * (size_t)B * (size_t)T;
        float l = 0.0f;
        d->last_micro = k == K - 1;
        /* the model's own failure (the reference's scratch) is kept only when no hook of
         * this step failed first: a hook's status and sentence go together */
        lb_err own = {{0}};
        lb_status ms = lb_model_forward(m, inputs + off, targets + off, B, T, &l, &own);
        if (ms == LB_OK && d->st == LB_OK) ms = lb_model_backward(m, &own);
        if (ms != LB_OK && d->st == LB_OK) d->st = ms, d->err = own;
        loss += l;
    }
    if (d->st != LB_OK) {
        lb_status st = d->st;
        if (err != NULL) *err = d->err;
        d->st = LB_OK;
        return st;
    }
    /* loss and squared norm: [0] loss, [1] sum of squares of this rank's part */
    double sums[2] = {loss / K, 0.0};
    float inv_k = 1.0f / (float)K;
    if (!sharded) {
        if (K > 1) scale(d->grads, d->n_params, inv_k);
        for (int b = 0; b < d->plan.n_buckets; b++) {
            int64_t lo, hi;
            lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
            sums[1] += lb_ref_sum_squares(d->grads + lo, hi - lo);
        }
    } else {
        if (K > 1) scale(d->g_shard, d->plan.shard_elems, inv_k);
        sums[1] = lb_ref_sum_squares(d->g_shard, d->plan.shard_elems);
    }
    LB_TRY(all_reduce(d, &sums[0], 1, LB_COMM_FP64, LB_COMM_AVG, err));
    LB_TRY(all_reduce(d, &sums[1], 1, LB_COMM_FP64, LB_COMM_SUM, err));
    double norm = sqrt(sums[1]);
    float clip = lb_ref_clip_scale(norm, opt->grad_clip);
    if (!sharded) {
        adamw_range(d, 0, d->n_params, d->params, d->grads, moments(d, true), moments(d, false),
                    opt, clip, step);
    } else {
        for (int b = 0; b < d->plan.n_buckets; b++) {
            int64_t lo, hi, so = d->plan.buckets[b].shard_offset;
            lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
            adamw_range(d, lo, hi, d->p_shard + so, d->g_shard + so, d->m_shard + so,
                        d->v_shard + so, opt, clip, step);
        }
        for (int b = 0; d->p.stage != LB_ZERO_3 && b < d->plan.n_buckets; b++)
            LB_TRY(all_gather_bucket(d, b, err));
    }
    info->loss = (float)sums[0];
    info->grad_norm = (float)norm;
    info->comm_ms = (double)d->comm_ns / 1e6;
    info->sent_bytes = d->sent_bytes;
    return LB_OK;
}
