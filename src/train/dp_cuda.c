/* dp_cuda.c: ZeRO stages 0-3 over NCCL for the GPU model, buckets reduced and (stage 3)
 * units' parameters gathered on a communication stream while the model computes (see
 * dp_cuda.h). */
#ifdef LB_HAVE_CUDA

#include "train/dp_cuda.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "gpu/arena.h"
#include "gpu/check.h"
#include "gpu/graph.cuh"
#include "kernels/act.cuh"
#include "kernels/adamw.cuh"
#include "kernels/embed.cuh"
#include "model/lora.h"
#include "train/dp_steps_cuda.h"

#define PIECE_ALIGN 64 /* elements: every piece starts 128 bytes apart or more */
#define N_GATHER    3  /* stage 3: gather buffers (the unit in use, the next, the last) */

struct lb_dp_cuda {
    lb_model_gpu *m;
    lb_comm *c; /* NULL: one rank (adapters: collectives are copies) */
    bool whole; /* one rank, every parameter training: the shard is the whole model, in the
                 * model's own arrays */
    lb_dp_cuda_params p;
    lb_model_config cfg;
    int rank, ranks;
    cudaStream_t model_stream, comm_stream;
    lb_zero_plan plan;
    bool lora;                /* what trains is the model's adapters (p.lora) */
    lb_lora_config lc;        /* theirs */
    int unit_shift;           /* the model's unit u is the plan's u - unit_shift */
    lb_param_tensor *tensors; /* the layout of what trains, in flat order */
    int n_tensors;
    lb_gpu_dtype wt;          /* the working type */
    size_t es;                /* its bytes */
    lb_gpu_dtype rt;          /* the gradients' and the buckets' (the model's gradient type: wt,
                               * adapters fp32) */
    size_t rs;                /* its bytes */
    bool adds;                /* stages 2-3 with several micro-batches a step: each one's
                               * reduce-scatter lands in the piece buffer and is added into an
                               * fp32 shard gradient */
    lb_gpu_dtype gt;          /* the shard gradient's: fp32 where it adds, else rt (the one
                               * reduce-scatter a step writes it) */
    size_t gs;                /* its bytes */
    cudaEvent_t ready;        /* on the model's stream: what the communication stream waits for */
    cudaEvent_t joined;       /* on the communication stream: its part of the step is done */
    cudaEvent_t send_free[2]; /* on the communication stream: send (stage 1, index 0) or
                               * bucket buffer i (stages 2-3) was read */
    bool send_waits[2];       /* send_free[i] was recorded after a reduce-scatter this step */
    lb_dp_steps_cuda steps;   /* events and sent bytes a step */
    int64_t step;
    int micro;
    bool started; /* this step's first collective has begun */
    /* stages 1-3: this rank's shard and the buffers, in one arena */
    lb_gpu_arena arena;
    float *master, *mom, *vel; /* [shard_elems] fp32 */
    void *grad;                /* [shard_elems] gt */
    void *work;                /* [shard_elems] working type (fp32: master) */
    int64_t *seg_start;
    int32_t *seg_flags;
    int n_seg;
    void *send;  /* reduce type: the last bucket's, where its padding runs past the
                  * array's end (lb_zero_send_elems); NULL: none */
    void *piece; /* [largest piece] reduce type: a reduce-scatter's result, added into the
                  * shard gradient (adds; else NULL: the reduce-scatter writes the shard) */
    void *bucket0_grads, *bucket_grads[2]; /* stages 2-3: whole buckets' gradients, padded */
    /* stages 1-2, several ranks, every parameter training: the parameters gathered on the
     * communication stream */
    cudaEvent_t *bucket_gathered; /* [n_buckets]: bucket's gather into the working copy done */
    cudaEvent_t *bucket_updated;  /* [n_buckets], on the model's stream: the optimizer updated
                                   * this rank's piece of the bucket */
    int head_bucket;              /* the bucket holding the output head (tied: wte's) */
    bool head_fresh;              /* the padded head's copy holds the gathered head */
    /* several ranks, every parameter training, one micro-batch a step, the embeddings a
     * bucket alone, an untied head: their gradients from every rank's rows (embed_rows) */
    bool rows;
    lb_param_offsets off;
    int B, T;                 /* a rank's micro-batch */
    int32_t *ids_all;         /* [ranks x B x T]: every rank's token ids, in rank order */
    int32_t *keys, *key_rows; /* [ranks x B x T]: those ids sorted, and each one's row */
    void *rows_all;           /* [ranks x B x T x C] working type: every rank's rows */
    void *sort_tmp;           /* [sort_bytes] */
    size_t sort_bytes;
    cudaEvent_t rows_in; /* on the communication stream: rows_all holds every rank's */
    /* stage 3: units' working copies gathered into N_GATHER buffers, used in the order seq
     * (model_gpu.h's parameter hook) */
    void *gather[N_GATHER];
    lb_zero_gathers gathers;   /* their sizes, elements */
    int gather_unit[N_GATHER]; /* the unit a buffer holds, -1: none */
    int64_t gather_used[N_GATHER];
    cudaEvent_t gathered[N_GATHER]; /* on the communication stream: the gather is done */
    cudaEvent_t released[N_GATHER]; /* on the model's stream: its last use is enqueued */
    bool released_waits[N_GATHER];  /* released[k] was recorded this step */
    int *seq, n_seq, pos, cur;
    int64_t clock;
    /* the step as a CUDA graph (one micro-batch a step) */
    bool capturing;                      /* the step's work is being captured */
    bool graph_failed;                   /* a capture failed: every step kernel by kernel */
    int64_t steps_run;                   /* lb_dp_cuda_train_step calls so far */
    cudaGraph_t graph;                   /* the captured step, whose nodes name exec's */
    cudaGraphExec_t exec;                /* NULL: none */
    lb_gpu_adamw_params graph_ap;        /* the optimizer settings it holds */
    cudaGraphNode_t ev_node[LB_DP_EV_N]; /* its records of the step's events (NULL: none) */
    double graph_sent;                   /* the bytes its collectives send */
};

/* Records ev on s: inside a capture as an event record node (a plain record there would
 * only order streams), which each launch records anew (the step's events: each launch
 * points it at its own step's). */
static cudaError_t mark(const lb_dp_cuda *d, cudaEvent_t ev, cudaStream_t s) {
    return cudaEventRecordWithFlags(ev, s, d->capturing ? cudaEventRecordExternal : 0);
}

static lb_comm_dtype comm_type(lb_gpu_dtype t) {
    return t == LB_DT_F32 ? LB_COMM_FP32 : t == LB_DT_F16 ? LB_COMM_FP16 : LB_COMM_BF16;
}

void lb_dp_cuda_model_params(lb_zero_stage stage, int ranks, bool lora, lb_model_gpu_params *gp) {
    bool whole = ranks == 1 && !lora;
    gp->external_optimizer = stage >= LB_ZERO_1;
    gp->external_grads = stage >= LB_ZERO_2 && !whole;
    gp->external_params = stage >= LB_ZERO_3 && !whole;
}

/* The model's stream waits for what the communication stream enqueued so far (in a capture:
 * the communication stream joins the model's). */
static lb_status join(lb_dp_cuda *d, lb_err *err) {
    LB_CUDA_TRY(err, cudaEventRecord(d->joined, d->comm_stream));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->joined, 0));
    return LB_OK;
}

/* What the model's stream enqueued so far is what the communication stream waits for; the
 * step's first collective marks its start. */
static lb_status hand_over(lb_dp_cuda *d, cudaEvent_t start_ev, lb_err *err) {
    LB_CUDA_TRY(err, cudaEventRecord(d->ready, d->model_stream));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->comm_stream, d->ready, 0));
    if (!d->started) LB_CUDA_TRY(err, mark(d, start_ev, d->comm_stream));
    d->started = true;
    return LB_OK;
}

/* ---- stage 0 -------------------------------------------------------------------------- */

/* Bucket b's gradients all-reduced (averaged) in place on the communication stream: one
 * contiguous run of the model's array. A bucket is written again only in the next step's
 * backward, after the model's stream waited for this step's communication. */
static lb_status all_reduce_bucket(lb_dp_cuda *d, int b, cudaEvent_t start_ev, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    char *at = (char *)lb_model_gpu_grads(d->m) + (size_t)k->start * d->rs;
    int64_t n = k->end - k->start;
    LB_TRY(hand_over(d, start_ev, err));
    LB_TRY(lb_comm_all_reduce(d->c, at, at, (size_t)n, comm_type(d->rt), LB_COMM_AVG,
                              d->comm_stream, err));
    d->steps.sent[d->step] +=
        lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, (double)n * (double)d->rs, d->ranks);
    return LB_OK;
}

/* ---- stages 1-2 ----------------------------------------------------------------------- */

/* Where bucket b's gradients are: the model's array, or at stages 2-3 its bucket buffer
 * (the embeddings' bucket its own, the others taking turns by parity). At stages 0-1 the
 * padding after a bucket is the next bucket's first elements. */
static void *bucket_slots(lb_dp_cuda *d, int b) {
    if (d->p.stage < LB_ZERO_2)
        return (char *)lb_model_gpu_grads(d->m) + (size_t)d->plan.buckets[b].start * d->rs;
    return b == 0 ? d->bucket0_grads : d->bucket_grads[b % 2];
}

/* Stages 2-3: bucket b's units point at its buffer, cleared (the padding after them too) on
 * the model's stream. */
static lb_status bind_bucket(lb_dp_cuda *d, int b, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    char *slots = bucket_slots(d, b);
    for (int u = k->unit_lo; u <= k->unit_hi; u++)
        lb_model_gpu_bind_grads(d->m, u + d->unit_shift,
                                slots + (size_t)(d->plan.unit_start[u] - k->start) * d->rs);
    LB_CUDA_TRY(err, cudaMemsetAsync(slots, 0, (size_t)k->padded * d->rs, d->model_stream));
    return LB_OK;
}

/* recv (count elements a rank) = the average over ranks of send's block of this rank, in the
 * reduce type. */
static lb_status reduce_scatter(lb_dp_cuda *d, const void *send, void *recv, int64_t count,
                                cudaStream_t s, lb_err *err) {
    if (d->c == NULL) {
        LB_CUDA_TRY(
            err, cudaMemcpyAsync(recv, send, (size_t)count * d->rs, cudaMemcpyDeviceToDevice, s));
        return LB_OK;
    }
    return lb_comm_reduce_scatter(d->c, send, recv, (size_t)count, comm_type(d->rt), LB_COMM_AVG, s,
                                  err);
}

/* recv (ranks x count elements of type t) = every rank's send, in rank order. */
static lb_status all_gather(lb_dp_cuda *d, const void *send, void *recv, int64_t count,
                            lb_gpu_dtype t, cudaStream_t s, lb_err *err) {
    if (d->c == NULL) {
        LB_CUDA_TRY(err, cudaMemcpyAsync(recv, send, (size_t)count * lb_dtype_bytes(t),
                                         cudaMemcpyDeviceToDevice, s));
        return LB_OK;
    }
    return lb_comm_all_gather(d->c, send, recv, (size_t)count, comm_type(t), s, err);
}

/* Bucket b reduce-scattered on the communication stream into this rank's piece of the
 * gradient shard (or, where micro-batches add, into the piece buffer, widened into the
 * shard or added there): at stage 1 from the model's array in place, its padding summing
 * the next bucket's first elements into the shard's padding, which the optimizer leaves
 * out (LB_ZERO_SEG_PAD; a bucket whose padding would run past the array's end is copied
 * into the send buffer first); at stages 2-3 from its bucket buffer, whose next bucket
 * (b - 2, bound when bucket b - 1 is done, so the collective has a bucket's compute to
 * finish) waits for it. The model's stream writes the array again only in the next step's
 * backward, after it waited for this step's communication. */
static lb_status reduce_scatter_bucket(lb_dp_cuda *d, int b, cudaEvent_t start_ev, lb_err *err) {
    const lb_zero_bucket *k = &d->plan.buckets[b];
    int nb = d->plan.n_buckets;
    const void *from = bucket_slots(d, b);
    bool through_send = d->p.stage == LB_ZERO_1 && b == nb - 1 && d->send != NULL;
    int j = through_send ? 0 : b % 2; /* send_free's index: the send buffer's, or the bucket
                                       * buffer's (stages 2-3) */
    if (through_send) {
        /* the gather of the step before wrote send last (the model's stream waited for it
         * before the forward read this bucket) */
        if (d->send_waits[j])
            LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->send_free[j], 0));
        size_t real = (size_t)(k->end - k->start) * d->rs;
        LB_CUDA_TRY(
            err, cudaMemcpyAsync(d->send, from, real, cudaMemcpyDeviceToDevice, d->model_stream));
        LB_CUDA_TRY(err, cudaMemsetAsync((char *)d->send + real, 0,
                                         (size_t)k->padded * d->rs - real, d->model_stream));
        from = d->send;
    }
    LB_TRY(hand_over(d, start_ev, err));
    /* the step's first piece of this bucket is written, later micro-batches' (stages 2-3) add
     * to it: every shard element is some bucket's, so the shard needs no clearing */
    void *to = (char *)d->grad + (size_t)k->shard_offset * d->gs;
    LB_TRY(reduce_scatter(d, from, d->adds ? d->piece : to, k->piece, d->comm_stream, err));
    d->steps.sent[d->step] +=
        lb_zero_ring_bytes(LB_ZERO_REDUCE_SCATTER, (double)k->padded * (double)d->rs, d->ranks);
    if (through_send || d->p.stage >= LB_ZERO_2) {
        LB_CUDA_TRY(err, cudaEventRecord(d->send_free[j], d->comm_stream));
        d->send_waits[j] = true;
    }
    if (d->adds && d->micro == 0)
        LB_TRY(lb_act_convert(to, LB_DT_F32, d->piece, d->rt, k->piece, d->comm_stream, err));
    else if (d->adds)
        LB_TRY(lb_act_accumulate(to, d->piece, d->rt, k->piece, d->comm_stream, err));
    /* bucket b - 1 takes the buffer bucket b + 1 left (b - 1 >= 1; the last two buckets'
     * were bound before backward) */
    if (d->p.stage >= LB_ZERO_2 && b - 1 >= 1 && b + 1 <= nb - 1) {
        LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->send_free[(b - 1) % 2], 0));
        LB_TRY(bind_bucket(d, b - 1, err));
    }
    return LB_OK;
}

/* ---- the embeddings' rows ------------------------------------------------------------ */

/* Backward's first hook (the final norm and the head): every rank's token ids gathered and
 * sorted on the communication stream, long before the rows come. */
static lb_status gather_ids(lb_dp_cuda *d, cudaEvent_t start_ev, lb_err *err) {
    const int32_t *ids;
    int B, T;
    (void)lb_model_gpu_embed_rows(d->m, &ids, &B, &T);
    int n = B * T;
    LB_TRY(hand_over(d, start_ev, err));
    LB_TRY(
        lb_comm_all_gather(d->c, ids, d->ids_all, (size_t)n, LB_COMM_INT32, d->comm_stream, err));
    d->steps.sent[d->step] +=
        lb_zero_ring_bytes(LB_ZERO_ALL_GATHER, (double)d->ranks * n * 4, d->ranks);
    return lb_embed_sort_ids(d->keys, d->key_rows, d->ids_all, d->ranks * n, d->cfg.vocab_size,
                             d->sort_tmp, d->sort_bytes, d->comm_stream, err);
}

/* Where this rank keeps tensor elements [0, numel) of the tensor at flat offset `at`: the
 * part [*lo, *hi) in the model's gradient array (stage 0, all of it) or in this rank's
 * piece of the embeddings' bucket in the gradient shard (stages 1-3), element e at
 * (*dst)[e - *lo]. */
static void *rows_target(const lb_dp_cuda *d, int64_t at, int64_t numel, int64_t *lo, int64_t *hi) {
    if (d->p.stage == LB_ZERO_0) {
        *lo = 0;
        *hi = numel;
        return (char *)lb_model_gpu_grads(d->m) + (size_t)at * d->rs;
    }
    int64_t plo, phi;
    lb_zero_piece(&d->plan, 0, d->rank, &plo, &phi);
    int64_t a = at > plo ? at : plo, e = at + numel < phi ? at + numel : phi;
    *lo = a - at;
    *hi = e > a ? e - at : *lo;
    return (char *)d->grad + (size_t)(d->plan.buckets[0].shard_offset + (a - plo)) * d->gs;
}

/* Backward's last hook: every rank's gradient rows of the embedding's output gathered on
 * the communication stream, then the first layer's bucket sent there, held back since
 * its hook (nothing ran between the two hooks), while the model's stream adds the
 * embeddings' gradients (over every rank's rows in rank order, averaged: one rank with the
 * global batch computes the same sums) where this rank keeps them: the sums run beside the
 * bucket's collective instead of after it. */
static lb_status embed_rows(lb_dp_cuda *d, cudaEvent_t start_ev, lb_err *err) {
    const int32_t *ids;
    int B, T, C = d->cfg.d_model;
    const void *dout = lb_model_gpu_embed_rows(d->m, &ids, &B, &T);
    int64_t n = (int64_t)B * T;
    cudaStream_t s = d->model_stream;
    LB_TRY(hand_over(d, start_ev, err));
    LB_TRY(lb_comm_all_gather(d->c, dout, d->rows_all, (size_t)(n * C), comm_type(d->wt),
                              d->comm_stream, err));
    d->steps.sent[d->step] += lb_zero_ring_bytes(
        LB_ZERO_ALL_GATHER, (double)d->ranks * (double)(n * C) * (double)d->es, d->ranks);
    LB_CUDA_TRY(err, cudaEventRecord(d->rows_in, d->comm_stream));
    LB_TRY(d->p.stage == LB_ZERO_0 ? all_reduce_bucket(d, 1, start_ev, err)
                                   : reduce_scatter_bucket(d, 1, start_ev, err));
    /* stage 0: the slots were cleared before the step; 1-3: the piece is cleared here */
    LB_CUDA_TRY(err, cudaStreamWaitEvent(s, d->rows_in, 0));
    if (d->p.stage != LB_ZERO_0)
        LB_CUDA_TRY(
            err, cudaMemsetAsync((char *)d->grad + (size_t)d->plan.buckets[0].shard_offset * d->gs,
                                 0, (size_t)d->plan.buckets[0].piece * d->gs, s));
    /* stage 0: the model's gradients; 1-3: the shard's */
    lb_gpu_dtype gt = d->p.stage == LB_ZERO_0 ? d->rt : d->gt;
    int64_t wte_lo, wte_hi, wpe_lo = 0, wpe_hi = 0;
    void *dwte = rows_target(d, d->off.wte, (int64_t)d->cfg.vocab_size * C, &wte_lo, &wte_hi);
    void *dwpe =
        d->off.wpe >= 0 ? rows_target(d, d->off.wpe, (int64_t)T * C, &wpe_lo, &wpe_hi) : NULL;
    return lb_embed_backward_sorted(dwte, wte_lo, wte_hi, dwpe, wpe_lo, wpe_hi, d->rows_all,
                                    d->keys, d->key_rows, d->ranks * B, T, C, 1.0f / d->ranks,
                                    d->wt, gt, s, err);
}

static lb_status on_grads(void *ctx, int unit, lb_err *err) {
    lb_dp_cuda *d = ctx;
    bool last_micro = d->micro == d->p.grad_accum - 1;
    if (!last_micro && d->p.stage < LB_ZERO_2) return LB_OK; /* the model adds them up */
    unit -= d->unit_shift;
    if (unit < 0 || unit >= d->plan.n_units) return LB_OK; /* a unit without adapters */
    int b = d->plan.bucket_of_unit[unit];
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    bool last = unit == 0;
    if (last && last_micro) LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_COMPUTE_END], d->model_stream));
    if (d->rows && unit == d->plan.n_units - 1) LB_TRY(gather_ids(d, ev[LB_DP_EV_COMM_START], err));
    if (d->rows && last)
        LB_TRY(embed_rows(d, ev[LB_DP_EV_COMM_START], err));
    else if (d->plan.buckets[b].unit_lo == unit && !(d->rows && b == 1)) /* b 1: embed_rows */
        LB_TRY(d->p.stage == LB_ZERO_0 ? all_reduce_bucket(d, b, ev[LB_DP_EV_COMM_START], err)
                                       : reduce_scatter_bucket(d, b, ev[LB_DP_EV_COMM_START], err));
    if (!last || !last_micro) return LB_OK;
    /* the optimizer waits for every bucket */
    LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_COMM_END], d->comm_stream));
    return join(d, err);
}

/* ---- stage 3 -------------------------------------------------------------------------- */

/* A buffer other than `keep` for unit u's gather: buffer 0 for a unit larger than the
 * others hold; else an empty one, else the least recently used, of buffers 1 and 2 where
 * buffer 0 is larger (it stays the large units'), else of all three. -1: none (a large unit
 * while buffer 0 is in use, which the model's order of uses never asks: the embeddings and
 * the head are far apart, and a tied head's second use finds its unit still there). */
static int pick_buffer(const lb_dp_cuda *d, int keep, int u) {
    if (lb_zero_gather_big(&d->plan, &d->gathers, u)) return keep == 0 ? -1 : 0;
    int best = -1;
    for (int k = d->gathers.size[0] > d->gathers.size[1] ? 1 : 0; k < N_GATHER; k++) {
        if (k == keep) continue;
        if (d->gather_unit[k] < 0) return k;
        if (best < 0 || d->gather_used[k] < d->gather_used[best]) best = k;
    }
    return best;
}

static int resident(const lb_dp_cuda *d, int unit) {
    for (int k = 0; k < N_GATHER; k++)
        if (d->gather_unit[k] == unit) return k;
    return -1;
}

/* Unit u's working copy (bucket u: one unit a bucket) all-gathered on the communication
 * stream into a buffer other than `keep` (pick_buffer) once the model's last use of what
 * it held is done; *out (NULL: not wanted): that buffer. */
static lb_status gather_unit(lb_dp_cuda *d, int u, int keep, int *out, lb_err *err) {
    const lb_zero_bucket *b = &d->plan.buckets[u];
    int k = pick_buffer(d, keep, u);
    if (k < 0)
        return lb_fail(err, LB_ERR_RUNTIME,
                       "ZeRO 3 needs unit %d's large gather buffer while unit %d uses it", u,
                       d->gather_unit[keep]);
    if (out != NULL) *out = k;
    /* a record of a step before came before this step's start, which the communication
     * stream waited for */
    if (d->released_waits[k])
        LB_CUDA_TRY(err, cudaStreamWaitEvent(d->comm_stream, d->released[k], 0));
    if (!d->started)
        LB_CUDA_TRY(err, mark(d, lb_dp_steps_cuda_events(&d->steps, d->step)[LB_DP_EV_COMM_START],
                              d->comm_stream));
    d->started = true;
    LB_TRY(all_gather(d, (char *)d->work + (size_t)b->shard_offset * d->es, d->gather[k], b->piece,
                      d->wt, d->comm_stream, err));
    d->steps.sent[d->step] +=
        lb_zero_ring_bytes(LB_ZERO_ALL_GATHER, (double)b->padded * (double)d->es, d->ranks);
    LB_CUDA_TRY(err, cudaEventRecord(d->gathered[k], d->comm_stream));
    d->gather_unit[k] = u;
    d->gather_used[k] = ++d->clock;
    return LB_OK;
}

/* The model is about to read unit's parameters: they are gathered (or were, by the prefetch
 * of the use before), the model's stream waits for them, they are bound, and the next use's
 * unit is gathered into another buffer meanwhile. */
static lb_status on_params(void *ctx, int unit, bool backward, lb_err *err) {
    lb_dp_cuda *d = ctx;
    unit -= d->unit_shift;
    if (unit < 0 || unit >= d->plan.n_units) return LB_OK; /* a unit without adapters */
    if (d->pos >= d->n_seq || d->seq[d->pos] != unit)
        return lb_fail(err, LB_ERR_RUNTIME,
                       "the model read unit %d's parameters (%s) where ZeRO 3 planned unit %d",
                       unit, backward ? "backward" : "forward",
                       d->pos < d->n_seq ? d->seq[d->pos] : -1);
    if (d->cur >= 0) {
        LB_CUDA_TRY(err, cudaEventRecord(d->released[d->cur], d->model_stream));
        d->released_waits[d->cur] = true;
    }
    int k = resident(d, unit);
    if (k < 0) LB_TRY(gather_unit(d, unit, d->cur, &k, err));
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->gathered[k], 0));
    lb_model_gpu_bind_params(d->m, unit + d->unit_shift, d->gather[k]);
    d->cur = k;
    d->gather_used[k] = ++d->clock;
    d->pos++;
    if (d->pos < d->n_seq && resident(d, d->seq[d->pos]) < 0)
        LB_TRY(gather_unit(d, d->seq[d->pos], k, NULL, err));
    return LB_OK;
}

/* The order a micro-batch reads the units in (model_gpu.h's parameter hook); adapters:
 * their layers up in forward, down in backward. */
static int plan_uses(const lb_dp_cuda *d, const lb_model_config *cfg, int *seq) {
    int L = cfg->n_layer, n = 0;
    if (d->lora) {
        for (int l = 0; l < L; l++)
            seq[n++] = l;
        for (int l = L - 1; l >= 0; l--)
            seq[n++] = l;
        return n;
    }
    bool tied = cfg->tied_embeddings;
    for (int u = 0; u <= L + 1; u++)
        seq[n++] = u;
    if (tied) seq[n++] = 0, seq[n++] = 0;
    seq[n++] = L + 1;
    for (int u = L; u >= 1; u--)
        seq[n++] = u;
    return n;
}

void lb_dp_cuda_begin_step(lb_dp_cuda *d, int64_t step) {
    d->step = step;
    d->started = false;
    for (int i = 0; i < 2; i++)
        d->send_waits[i] = false;
    for (int k = 0; k < N_GATHER; k++)
        d->released_waits[k] = false;
}

lb_status lb_dp_cuda_begin_micro(lb_dp_cuda *d, int micro, lb_err *err) {
    d->micro = micro;
    d->pos = 0;
    if (d->whole) return LB_OK;
    /* stage 3: the step's gathers read the shard after the optimizer before updated it (in a
     * capture, the communication stream joins it here) */
    if (d->p.stage == LB_ZERO_3 && micro == 0) {
        LB_CUDA_TRY(err, cudaEventRecord(d->ready, d->model_stream));
        LB_CUDA_TRY(err, cudaStreamWaitEvent(d->comm_stream, d->ready, 0));
    }
    if (d->p.stage < LB_ZERO_2) return LB_OK;
    int nb = d->plan.n_buckets;
    /* the micro-batch before's last collectives read the buffers (the step before's: the
     * model's stream waited for all of them) */
    for (int i = 0; micro > 0 && i < 2; i++)
        if (d->send_waits[i])
            LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->send_free[i], 0));
    if (!d->rows) LB_TRY(bind_bucket(d, 0, err)); /* rows: the model writes none there */
    for (int b = nb - 1; b >= nb - 2 && b >= 1; b--)
        LB_TRY(bind_bucket(d, b, err));
    return LB_OK;
}

/* After the optimizer: the updated working copy of every bucket's pieces gathered into the
 * model's in flat order, straight into place (a bucket's padding lands on the next bucket's
 * first elements, which its own gather overwrites after; only a bucket whose padding would
 * run past the array's end goes through the send buffer). With every parameter training the
 * gathers run on the communication stream, each once its bucket is updated, an event after
 * each for the next forward's wait (wait_gathered), and the run's last step waits for the
 * whole gather; adapters are gathered on the model's stream. */
static lb_status gather_params(lb_dp_cuda *d, lb_err *err) {
    char *work = lb_model_gpu_working(d->m);
    int64_t total = d->plan.unit_start[d->plan.n_units];
    bool overlap = d->bucket_gathered != NULL;
    cudaStream_t s = overlap ? d->comm_stream : d->model_stream;
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    for (int b = 0; b < d->plan.n_buckets; b++) {
        const lb_zero_bucket *k = &d->plan.buckets[b];
        if (overlap) LB_CUDA_TRY(err, cudaStreamWaitEvent(s, d->bucket_updated[b], 0));
        if (b == 0) LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_GATHER_START], s));
        if (b == 0 && !overlap) LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_WAIT_START], s));
        char *to = work + (size_t)k->start * d->es;
        bool direct = k->start + k->padded <= total;
        LB_TRY(all_gather(d, (char *)d->work + (size_t)k->shard_offset * d->es,
                          direct ? to : d->send, k->piece, d->wt, s, err));
        d->steps.sent[d->step] +=
            lb_zero_ring_bytes(LB_ZERO_ALL_GATHER, (double)k->padded * (double)d->es, d->ranks);
        if (!direct) {
            LB_CUDA_TRY(err, cudaMemcpyAsync(to, d->send, (size_t)(k->end - k->start) * d->es,
                                             cudaMemcpyDeviceToDevice, s));
            LB_CUDA_TRY(err, cudaEventRecord(d->send_free[0], s));
        }
        if (overlap) LB_CUDA_TRY(err, cudaEventRecord(d->bucket_gathered[b], s));
    }
    LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_GATHER_END], s));
    if (!overlap) { /* on the model's stream: all of it waited for */
        LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_WAIT_END], s));
        return lb_model_gpu_working_written(d->m, err);
    }
    d->head_fresh = false;
    if (d->step == d->p.n_steps - 1)
        LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, ev[LB_DP_EV_GATHER_END], 0));
    return LB_OK;
}

/* Stages 1-2, every parameter training, the parameter hook: before the first micro-batch's
 * forward reads a unit, the model's stream waits for its bucket's gather (the first wait,
 * the embeddings', between the step's wait events), and once the head's bucket is in, the
 * padded head's copy is refreshed from it. */
static lb_status wait_gathered(void *ctx, int unit, bool backward, lb_err *err) {
    lb_dp_cuda *d = ctx;
    if (backward || d->micro > 0) return LB_OK;
    int b = d->plan.bucket_of_unit[unit];
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    bool first = d->pos++ == 0;
    if (first) LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_WAIT_START], d->model_stream));
    /* the gather ran after the step before, outside its graph: a capture waits for its
     * latest record when the graph runs */
    LB_CUDA_TRY(err, cudaStreamWaitEvent(d->model_stream, d->bucket_gathered[b],
                                         d->capturing ? cudaEventWaitExternal : 0));
    if (first) LB_CUDA_TRY(err, mark(d, ev[LB_DP_EV_WAIT_END], d->model_stream));
    if (b == d->head_bucket && !d->head_fresh) {
        LB_TRY(lb_model_gpu_working_written(d->m, err));
        d->head_fresh = true;
    }
    return LB_OK;
}

/* AdamW on the shard (stages 1-3), and at stage 3 the gathered units marked stale. */
static lb_status optimize(lb_dp_cuda *d, const lb_gpu_adamw_params *p, lb_err *err) {
    if (d->p.stage == LB_ZERO_0) return LB_OK;
    lb_gpu_optstate *os = lb_model_gpu_optstate(d->m);
    lb_gpu_adamw_params q = *p;
    q.dynamic_scaling = d->wt == LB_DT_F16;
    if (q.growth_interval <= 0) q.growth_interval = 2000;
    lb_gpu_segments sg = {d->seg_start, d->seg_flags, d->n_seg, d->plan.shard_elems,
                          (d->whole ? d->rt : d->gt) != LB_DT_F32};
    cudaStream_t s = d->model_stream;
    /* one rank: the model's gradients read and its working copy (the head's apart one
     * included) written in place, the three launches of the model's own optimizer */
    const void *grads = d->whole ? lb_model_gpu_grads(d->m) : d->grad;
    lb_gpu_lp_apart head;
    bool apart = d->whole && lb_model_gpu_head_apart(d->m, &head);
    LB_TRY(lb_adamw_grad_sumsq(os, grads, d->wt, &sg, s, err));
    if (d->c != NULL) {
        LB_TRY(
            lb_comm_all_reduce(d->c, &os->sumsq, &os->sumsq, 1, LB_COMM_FP64, LB_COMM_SUM, s, err));
        d->steps.sent[d->step] += lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, 8, d->ranks);
    }
    void *lp = d->wt == LB_DT_F32 ? NULL : d->work;
    if (d->bucket_updated == NULL)
        LB_TRY(lb_adamw(d->master, lp, apart ? &head : NULL, d->wt, grads, d->mom, d->vel, &sg, 0,
                        sg.n, &q, os, s, err));
    /* stages 1-2 with the gathers on the communication stream: bucket by bucket in flat
     * order, each bucket's gather waiting for its own update, so the embeddings', which the
     * next forward reads first, travel while the rest is updated */
    for (int b = 0; d->bucket_updated != NULL && b < d->plan.n_buckets; b++) {
        const lb_zero_bucket *k = &d->plan.buckets[b];
        LB_TRY(lb_adamw(d->master, lp, NULL, d->wt, grads, d->mom, d->vel, &sg, k->shard_offset,
                        k->shard_offset + k->piece, &q, os, s, err));
        LB_CUDA_TRY(err, mark(d, d->bucket_updated[b], s));
    }
    LB_TRY(lb_adamw_finish(os, &q, s, err));
    if (d->whole) return LB_OK;
    if (d->p.stage == LB_ZERO_3) {
        /* every gathered unit is stale now; the next step's gathers read the updated shard
         * (lb_dp_cuda_begin_micro) */
        for (int k = 0; k < N_GATHER; k++)
            d->gather_unit[k] = -1;
        d->cur = -1;
    }
    return LB_OK;
}

/* Stages 1-2 (not one rank with every parameter training): the updated working copy
 * gathered. */
static lb_status gather_updated(lb_dp_cuda *d, lb_err *err) {
    if (d->whole || (d->p.stage != LB_ZERO_1 && d->p.stage != LB_ZERO_2)) return LB_OK;
    return gather_params(d, err);
}

lb_status lb_dp_cuda_optimizer(lb_dp_cuda *d, const lb_gpu_adamw_params *p, lb_err *err) {
    LB_TRY(optimize(d, p, err));
    return gather_updated(d, err);
}

/* ---- the step as a CUDA graph --------------------------------------------------------- */

typedef struct {
    lb_dp_cuda *d;
    const lb_gpu_adamw_params *p;
} step_body;

/* A step's work after its batch upload and before stages 1-2's gather: the micro-batch with
 * its collectives, the optimizer, and the communication stream joined back. */
static lb_status enqueue_step(void *ctx, cudaStream_t s, lb_err *err) {
    const step_body *b = ctx;
    lb_dp_cuda *d = b->d;
    (void)s; /* the model's stream */
    LB_TRY(lb_dp_cuda_begin_micro(d, 0, err));
    LB_TRY(lb_model_gpu_micro(d->m, 0, 1, d->p.stage == LB_ZERO_0 ? b->p : NULL, err));
    LB_TRY(optimize(d, b->p, err));
    return d->whole ? LB_OK : join(d, err);
}

static void drop_graph(lb_dp_cuda *d) {
    if (d->exec) cudaGraphExecDestroy(d->exec);
    if (d->graph) cudaGraphDestroy(d->graph);
    d->exec = NULL;
    d->graph = NULL;
}

/* The graph's event record nodes, each matched to the kind of step event it records (it
 * was captured recording the current step's). */
static lb_status find_event_nodes(lb_dp_cuda *d, lb_err *err) {
    size_t n = 0;
    LB_CUDA_TRY(err, cudaGraphGetNodes(d->graph, NULL, &n));
    cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes);
    if (nodes == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    lb_status st = LB_OK;
    if (cudaGraphGetNodes(d->graph, nodes, &n) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "cudaGraphGetNodes failed");
    for (int k = 0; k < LB_DP_EV_N; k++)
        d->ev_node[k] = NULL;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        enum cudaGraphNodeType type;
        cudaEvent_t e = NULL;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess ||
            type != cudaGraphNodeTypeEventRecord ||
            cudaGraphEventRecordNodeGetEvent(nodes[i], &e) != cudaSuccess)
            continue;
        for (int k = 0; k < LB_DP_EV_N; k++)
            if (e == ev[k]) d->ev_node[k] = nodes[i];
    }
    free(nodes);
    return st;
}

/* The step (lb_dp_cuda_begin_step was called) captured into d->exec, this layer's host side
 * left as after the step; a capture that fails is no error: nothing of it ran, the host side
 * is as before, and every step runs kernel by kernel. */
static void capture(lb_dp_cuda *d, const lb_gpu_adamw_params *p) {
    lb_dp_cuda saved = *d;
    double sent = d->steps.sent[d->step];
    step_body b = {d, p};
    char why[LB_ERR_MSG_BYTES];
    lb_err e;
    d->capturing = true;
    bool ok = lb_gpu_graph_capture(d->model_stream, enqueue_step, &b, &d->graph, &d->exec, why,
                                   sizeof why);
    d->capturing = false;
    if (ok && find_event_nodes(d, &e) != LB_OK) {
        snprintf(why, sizeof why, "%s", e.msg);
        drop_graph(d);
        ok = false;
    }
    if (ok) { /* the host side is as after the step, the launch's to do */
        d->graph_ap = *p;
        d->graph_sent = d->steps.sent[d->step] - sent;
        d->steps.sent[d->step] = sent;
        return;
    }
    *d = saved;
    d->graph_failed = true;
    LB_INFO("training steps run kernel by kernel: capturing one as a CUDA graph failed (%s)", why);
}

/* The graph launched for the current step: its event records pointed at the step's events,
 * its bytes counted, and the launch watched under the communicator's deadline. */
static lb_status launch(lb_dp_cuda *d, lb_err *err) {
    cudaEvent_t *ev = lb_dp_steps_cuda_events(&d->steps, d->step);
    for (int k = 0; k < LB_DP_EV_N; k++)
        if (d->ev_node[k] != NULL)
            LB_CUDA_TRY(err, cudaGraphExecEventRecordNodeSetEvent(d->exec, d->ev_node[k], ev[k]));
    LB_CUDA_TRY(err, cudaGraphLaunch(d->exec, d->model_stream));
    d->steps.sent[d->step] += d->graph_sent;
    /* what the step's captured calls did on the host (as they did when it was captured) */
    if (d->p.stage == LB_ZERO_3) {
        for (int k = 0; k < N_GATHER; k++)
            d->gather_unit[k] = -1;
        d->cur = -1;
    }
    d->head_fresh = true;
    if (d->c == NULL) return LB_OK;
    char what[64];
    snprintf(what, sizeof what, "the CUDA graph of step %lld", (long long)d->step);
    return lb_comm_watch(d->c, d->model_stream, what, err);
}

lb_status lb_dp_cuda_train_step(lb_dp_cuda *d, const int32_t *inputs, const int32_t *targets,
                                int slot, const lb_gpu_adamw_params *p, lb_err *err) {
    if (d->p.grad_accum != 1)
        return lb_fail(err, LB_ERR_USAGE, "a step of %d micro-batches is not one train step",
                       d->p.grad_accum);
    LB_TRY(lb_model_gpu_upload(d->m, inputs, targets, slot, err));
    if (d->exec != NULL && !lb_adamw_params_same(&d->graph_ap, p)) drop_graph(d);
    /* the first step runs directly: it prepares and times every product (host waits) */
    bool first = d->steps_run++ == 0;
    if (d->exec == NULL && !first && !d->graph_failed && !d->p.no_graph) capture(d, p);
    step_body b = {d, p};
    if (d->exec != NULL)
        LB_TRY(launch(d, err));
    else
        LB_TRY(enqueue_step(&b, d->model_stream, err));
    LB_TRY(lb_model_gpu_keep_loss(d->m, slot, err));
    return gather_updated(d, err);
}

bool lb_dp_cuda_uses_graph(const lb_dp_cuda *d) {
    return d->exec != NULL;
}

lb_status lb_dp_cuda_get_params(lb_dp_cuda *d, float *host, lb_err *err) {
    if (d->p.stage == LB_ZERO_0)
        return d->lora ? lb_model_gpu_get_lora(d->m, host, false, err)
                       : lb_model_gpu_get_params(d->m, host, err);
    float *buf = NULL;
    if (cudaMalloc((void **)&buf, (size_t)d->plan.max_padded * 4) != cudaSuccess) {
        cudaGetLastError();
        return lb_fail(err, LB_ERR_NOMEM, "no device memory to gather the master weights");
    }
    lb_status st = LB_OK;
    for (int b = 0; b < d->plan.n_buckets && st == LB_OK; b++) {
        const lb_zero_bucket *k = &d->plan.buckets[b];
        st = all_gather(d, d->master + k->shard_offset, buf, k->piece, LB_DT_F32, d->model_stream,
                        err);
        if (st == LB_OK && cudaMemcpyAsync(host + k->start, buf, (size_t)(k->end - k->start) * 4,
                                           cudaMemcpyDeviceToHost, d->model_stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the master weights out");
        if (st == LB_OK && cudaStreamSynchronize(d->model_stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "gathering the master weights failed");
    }
    cudaFree(buf);
    return st;
}

/* ---- set-up --------------------------------------------------------------------------- */

/* The shard and the buffers, carved from a (sizing or real) arena: the embeddings' rows'
 * buffers (any stage); stages 1-3 the shard and the buffers (one rank with every parameter
 * training: master weights and moments only, and in fp32 the master is the model's working
 * copy). */
static lb_status layout(lb_dp_cuda *d, lb_gpu_arena *a, lb_err *err) {
    size_t n = (size_t)d->plan.shard_elems, es = d->es;
    int64_t most_piece = 0, other[2];
    for (int b = 0; b < d->plan.n_buckets; b++) {
        const lb_zero_bucket *k = &d->plan.buckets[b];
        if (k->piece > most_piece) most_piece = k->piece;
    }
    void *p = NULL;
#define CARVE(field, name, bytes)                                                                  \
    do {                                                                                           \
        LB_TRY(lb_gpu_arena_alloc(a, name, (size_t)(bytes), &p, err));                             \
        *(void **)&(field) = p;                                                                    \
    } while (0)
    if (d->rows) {
        size_t all = (size_t)d->ranks * (size_t)d->B * (size_t)d->T;
        CARVE(d->ids_all, "zero.rows_ids", all * 4);
        CARVE(d->keys, "zero.rows_ids", all * 4);
        CARVE(d->key_rows, "zero.rows_ids", all * 4);
        CARVE(d->rows_all, "zero.rows", all * (size_t)d->cfg.d_model * es);
        CARVE(d->sort_tmp, "zero.rows_sort", d->sort_bytes);
    }
    if (d->p.stage == LB_ZERO_0) return LB_OK;
    if (d->whole && d->wt == LB_DT_F32)
        d->master = lb_model_gpu_working(d->m);
    else
        CARVE(d->master, "zero.master", n * 4);
    CARVE(d->mom, "zero.m", n * 4);
    CARVE(d->vel, "zero.v", n * 4);
    CARVE(d->seg_start, "zero.seg_start", (size_t)d->n_seg * 8);
    CARVE(d->seg_flags, "zero.seg_flags", (size_t)d->n_seg * 4);
    if (d->whole) {
        d->work = lb_model_gpu_working(d->m);
        return LB_OK;
    }
    CARVE(d->grad, "zero.grad", n * d->gs);
    if (d->wt != LB_DT_F32)
        CARVE(d->work, "zero.work", n * es);
    else
        d->work = d->master;
    int64_t send = lb_zero_send_elems(&d->plan, d->p.stage);
    if (send > 0) CARVE(d->send, "zero.send", (size_t)send * d->rs);
    if (d->adds) CARVE(d->piece, "zero.piece", (size_t)most_piece * d->rs);
    if (d->p.stage >= LB_ZERO_2) {
        const lb_zero_bucket *k0 = &d->plan.buckets[0];
        if (!d->rows) CARVE(d->bucket0_grads, "zero.bucket_grad", (size_t)k0->padded * d->rs);
        lb_zero_other_slots(&d->plan, other);
        for (int i = 0; i < 2; i++)
            if (other[i] > 0)
                CARVE(d->bucket_grads[i], "zero.bucket_grad", (size_t)other[i] * d->rs);
    }
    for (int i = 0; d->p.stage == LB_ZERO_3 && i < N_GATHER; i++)
        CARVE(d->gather[i], "zero.gather", (size_t)d->gathers.size[i] * es);
#undef CARVE
    return LB_OK;
}

/* The segment table of the shard on the device (train/zero.h's shard segments; one rank
 * with every parameter training: the model's tensors). */
static lb_status upload_segments(lb_dp_cuda *d, lb_err *err) {
    int64_t *start = malloc((size_t)d->n_seg * sizeof *start);
    lb_zero_seg *kind = malloc((size_t)d->n_seg * sizeof *kind);
    int32_t *flags = malloc((size_t)d->n_seg * sizeof *flags);
    lb_status st = LB_OK;
    if (!start || !kind || !flags) {
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for the shard's segments");
    } else {
        lb_zero_shard_segments(&d->plan, d->rank, d->tensors, d->n_tensors, start, kind, d->n_seg);
        for (int i = 0; i < d->n_seg; i++)
            flags[i] = kind[i] == LB_ZERO_SEG_DECAY ? LB_SEG_DECAY
                       : kind[i] == LB_ZERO_SEG_PAD ? LB_SEG_PAD
                                                    : 0;
        if (cudaMemcpyAsync(d->seg_start, start, (size_t)d->n_seg * 8, cudaMemcpyHostToDevice,
                            d->model_stream) != cudaSuccess ||
            cudaMemcpyAsync(d->seg_flags, flags, (size_t)d->n_seg * 4, cudaMemcpyHostToDevice,
                            d->model_stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the shard's segments to the device");
    }
    free(start);
    free(kind);
    free(flags);
    return st;
}

/* The adapters drawn whole on the host by lb_lora_init's rule (the numbers of the model's
 * own lb_model_gpu_init_lora), the rank's pieces into the master shard and, at stages 1-2,
 * all of them into the model's working copy (through a device buffer outside the arena,
 * freed before returning); synchronises. */
static lb_status draw_adapters(lb_dp_cuda *d, lb_err *err) {
    lb_lora host;
    LB_TRY(lb_lora_init(&host, &d->cfg, &d->lc, 1, d->p.seed, err));
    cudaStream_t s = d->model_stream;
    lb_status st = LB_OK;
    for (int b = 0; b < d->plan.n_buckets && st == LB_OK; b++) {
        int64_t lo, hi;
        lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
        if (lo < hi &&
            cudaMemcpyAsync(d->master + d->plan.buckets[b].shard_offset, host.params + lo,
                            (size_t)(hi - lo) * 4, cudaMemcpyHostToDevice, s) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the adapters to the device");
    }
    float *whole = NULL;
    const size_t n = (size_t)host.off.total;
    if (st == LB_OK && d->p.stage < LB_ZERO_3) {
        if (cudaMalloc((void **)&whole, n * 4) != cudaSuccess) {
            cudaGetLastError();
            whole = NULL;
            st = lb_fail(err, LB_ERR_NOMEM, "no device memory for a %.2f GB buffer of adapters",
                         (double)n * 4 / 1e9);
        }
        if (st == LB_OK &&
            cudaMemcpyAsync(whole, host.params, n * 4, cudaMemcpyHostToDevice, s) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the adapters to the device");
        if (st == LB_OK)
            st = lb_act_convert(lb_model_gpu_working(d->m), d->wt, whole, LB_DT_F32, (int64_t)n, s,
                                err);
    }
    if (cudaStreamSynchronize(s) != cudaSuccess && st == LB_OK)
        st = lb_fail(err, LB_ERR_DEVICE, "drawing the adapters failed");
    cudaFree(whole);
    lb_lora_free(&host);
    return st;
}

/* The rank's pieces of every parameter read from the source into the master shard, tensor
 * by tensor through one host buffer as large as the largest tensor (a tensor lies in one
 * unit, so in one piece of this rank at most, and is read once). */
static lb_status read_shard(lb_dp_cuda *d, lb_err *err) {
    int64_t most = 0;
    for (int i = 0; i < d->n_tensors; i++)
        if (d->tensors[i].numel > most) most = d->tensors[i].numel;
    float *host = malloc((size_t)most * 4);
    if (host == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "no host memory for a %.2f GB tensor", most * 4 / 1e9);
    lb_status st = LB_OK;
    for (int b = 0; b < d->plan.n_buckets && st == LB_OK; b++) {
        int64_t lo, hi;
        lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
        for (int i = 0; i < d->n_tensors && st == LB_OK; i++) {
            const lb_param_tensor *t = &d->tensors[i];
            int64_t a = t->offset > lo ? t->offset : lo;
            int64_t e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
            if (a >= e) continue;
            d->p.src->read(d->p.src->ctx, t, host);
            /* on the model's stream, which reads it, and landed before host is read again */
            if (cudaMemcpyAsync(d->master + d->plan.buckets[b].shard_offset + (a - lo),
                                host + (a - t->offset), (size_t)(e - a) * 4, cudaMemcpyHostToDevice,
                                d->model_stream) != cudaSuccess ||
                cudaStreamSynchronize(d->model_stream) != cudaSuccess)
                st = lb_fail(err, LB_ERR_DEVICE, "could not copy tensor %s in", t->name);
        }
    }
    free(host);
    return st;
}

/* Stages 1-3: the shard's master weights drawn with the model's seed or read from the
 * source (padding 0; adapters: draw_adapters), its working copy from them, moments
 * cleared. */
static lb_status init_shard(lb_dp_cuda *d, lb_err *err) {
    size_t n = (size_t)d->plan.shard_elems;
    cudaStream_t s = d->model_stream;
    LB_CUDA_TRY(err, cudaMemsetAsync(d->master, 0, n * 4, s));
    LB_CUDA_TRY(err, cudaMemsetAsync(d->mom, 0, n * 4, s));
    LB_CUDA_TRY(err, cudaMemsetAsync(d->vel, 0, n * 4, s));
    if (d->lora) LB_TRY(draw_adapters(d, err));
    if (!d->lora && d->p.src != NULL) LB_TRY(read_shard(d, err));
    for (int b = 0; !d->lora && d->p.src == NULL && b < d->plan.n_buckets; b++) {
        int64_t lo, hi;
        lb_zero_piece(&d->plan, b, d->rank, &lo, &hi);
        if (lo < hi)
            LB_TRY(lb_model_gpu_draw_params(d->m, d->master + d->plan.buckets[b].shard_offset, lo,
                                            hi, d->p.seed, err));
    }
    if (d->work != d->master)
        LB_TRY(lb_act_convert(d->work, d->wt, d->master, LB_DT_F32, (int64_t)n, s, err));
    if (d->whole) LB_TRY(lb_model_gpu_working_written(d->m, err));
    LB_CUDA_TRY(err, cudaStreamSynchronize(s));
    return LB_OK;
}

void lb_dp_cuda_free(lb_dp_cuda *d) {
    if (d == NULL) return;
    if (d->m != NULL && !d->whole) {
        lb_model_gpu_set_grad_hook(d->m, NULL, NULL);
        lb_model_gpu_set_param_hook(d->m, NULL, NULL);
        lb_model_gpu_defer_embed(d->m, false);
        for (int u = 0; d->p.stage >= LB_ZERO_2 && u < d->plan.n_units; u++)
            lb_model_gpu_bind_grads(d->m, u + d->unit_shift, NULL);
        for (int u = 0; d->p.stage == LB_ZERO_3 && u < d->plan.n_units; u++)
            lb_model_gpu_bind_params(d->m, u + d->unit_shift, NULL);
    }
    if (d->comm_stream != NULL) cudaStreamSynchronize(d->comm_stream);
    drop_graph(d);
    lb_dp_steps_cuda_free(&d->steps);
    if (d->ready != NULL) cudaEventDestroy(d->ready);
    if (d->joined != NULL) cudaEventDestroy(d->joined);
    if (d->rows_in != NULL) cudaEventDestroy(d->rows_in);
    for (int i = 0; i < 2; i++)
        if (d->send_free[i] != NULL) cudaEventDestroy(d->send_free[i]);
    for (int i = 0; i < N_GATHER; i++) {
        if (d->gathered[i] != NULL) cudaEventDestroy(d->gathered[i]);
        if (d->released[i] != NULL) cudaEventDestroy(d->released[i]);
    }
    for (int b = 0; d->bucket_gathered && d->bucket_updated && b < d->plan.n_buckets; b++) {
        if (d->bucket_gathered[b] != NULL) cudaEventDestroy(d->bucket_gathered[b]);
        if (d->bucket_updated[b] != NULL) cudaEventDestroy(d->bucket_updated[b]);
    }
    free(d->bucket_gathered);
    free(d->bucket_updated);
    if (d->comm_stream != NULL) cudaStreamDestroy(d->comm_stream);
    lb_gpu_arena_free(&d->arena);
    lb_zero_plan_free(&d->plan);
    free(d->seq);
    free(d->tensors);
    free(d);
}

/* The tensors of what trains: the model's layout, or each layer's adapters as one tensor
 * (all 2-D, all decayed, as the model's own optimizer treats them). */
static void set_layout(lb_dp_cuda *d, const lb_model_config *cfg) {
    if (!d->lora) {
        lb_model_param_layout(cfg, d->tensors, d->n_tensors);
        return;
    }
    lb_lora_offsets off;
    lb_lora_offsets_compute(cfg, &d->lc, &off);
    for (int l = 0; l < cfg->n_layer; l++)
        d->tensors[l] = (lb_param_tensor){
            .offset = l * off.layer_numel, .numel = off.layer_numel, .layer = l, .decay = 1};
}

/* Buckets over the units, bucket_bytes of gradients each at most. */
static lb_status plan(lb_dp_cuda *d, const lb_model_config *cfg, lb_err *err) {
    int64_t *bounds = malloc(((size_t)cfg->n_layer + 3) * sizeof *bounds);
    if (bounds == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    /* what trains: every parameter in the model's units, or the adapters one unit a layer */
    int n_units = cfg->n_layer;
    if (d->lora)
        for (int l = 0; l <= cfg->n_layer; l++)
            bounds[l] = d->tensors[0].numel * l;
    else
        n_units = lb_zero_model_units(cfg, bounds);
    /* one rank, every parameter training: shard coordinates are flat ones */
    int64_t align = d->p.stage == LB_ZERO_0 || d->whole ? 1 : PIECE_ALIGN;
    /* stage 3: one unit a bucket, since parameters are gathered unit by unit */
    int64_t cap = d->p.stage == LB_ZERO_3 ? 0 : (int64_t)(d->p.bucket_bytes / (double)d->rs);
    lb_status st = lb_zero_plan_init(&d->plan, bounds, n_units, cap, d->ranks, align, err);
    free(bounds);
    if (st == LB_OK && d->p.stage == LB_ZERO_3)
        lb_zero_model_gathers(&d->plan, cfg, d->lora, &d->gathers);
    return st;
}

/* Whether the embeddings' gradients come from every rank's rows (embed_rows): several
 * ranks at any stage, every parameter training, one micro-batch a step (with more the
 * model adds them up in its slots: the embeddings' bucket travels dense), the embeddings a
 * bucket alone (a bucket holding more goes dense too), and an untied head. A tied head's
 * gradient fills wte's slots whole, so its bucket travels dense anyway: sent at backward's
 * start with the rows gathered at its end, it slowed backward's products by what it
 * saved at the end (docs/PERFORMANCE.md), and it stays dense, sent after the embedding
 * backward. Then the sort's scratch is sized. */
static void plan_rows(lb_dp_cuda *d) {
    d->rows =
        !d->whole && !d->lora && d->ranks > 1 && lb_zero_rows(&d->plan, &d->cfg, d->p.grad_accum);
    if (!d->rows) return;
    lb_model_param_offsets(&d->cfg, &d->off);
    const int32_t *ids;
    (void)lb_model_gpu_embed_rows(d->m, &ids, &d->B, &d->T);
    d->sort_bytes = lb_embed_sort_bytes(d->ranks * d->B * d->T, d->cfg.vocab_size);
}

/* The arena (sized, then allocated) and at stages 1-3 the segment table and the shard. */
static lb_status init_state(lb_dp_cuda *d, lb_err *err) {
    if (d->p.stage >= LB_ZERO_1)
        d->n_seg =
            lb_zero_shard_segments(&d->plan, d->rank, d->tensors, d->n_tensors, NULL, NULL, 0);
    lb_gpu_arena sizing;
    lb_gpu_arena_init_sizing(&sizing);
    lb_status st = layout(d, &sizing, err);
    size_t need = sizing.used_bytes;
    lb_gpu_arena_free(&sizing);
    LB_TRY(st);
    LB_TRY(lb_gpu_arena_init(&d->arena, need, "try a higher --zero stage or more GPUs", err));
    LB_TRY(layout(d, &d->arena, err));
    for (int k = 0; !d->whole && d->p.stage == LB_ZERO_3 && k < N_GATHER; k++)
        LB_CUDA_TRY(err, cudaMemset(d->gather[k], 0, (size_t)d->gathers.size[k] * d->es));
    if (d->p.stage == LB_ZERO_0) return LB_OK;
    LB_TRY(upload_segments(d, err));
    return init_shard(d, err);
}

lb_status lb_dp_cuda_init(lb_dp_cuda **out, lb_model_gpu *m, const lb_model_config *cfg, lb_comm *c,
                          const lb_dp_cuda_params *p, lb_err *err) {
    *out = NULL;
    if (p->stage > LB_ZERO_3 || p->grad_accum < 1 || (c == NULL && p->stage == LB_ZERO_0))
        return lb_fail(err, LB_ERR_USAGE,
                       "data-parallel GPU training runs ZeRO 0-3 (0 with a communicator), with "
                       "one or more micro-batches (got stage %d, %d micro-batches)",
                       (int)p->stage, p->grad_accum);
    lb_dp_cuda *d = calloc(1, sizeof *d);
    if (d == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    d->m = m;
    d->c = c;
    d->p = *p;
    d->cfg = *cfg;
    d->cur = -1;
    for (int k = 0; k < N_GATHER; k++)
        d->gather_unit[k] = -1;
    d->rank = c != NULL ? lb_comm_rank(c) : 0;
    d->ranks = c != NULL ? lb_comm_size(c) : 1;
    d->wt = lb_model_gpu_dtype(m);
    d->es = lb_dtype_bytes(d->wt);
    d->lora = p->lora != NULL;
    if (d->lora) d->lc = *p->lora;
    d->whole = d->ranks == 1 && !d->lora;
    d->unit_shift = d->lora ? 1 : 0;
    d->rt = lb_model_gpu_grad_type(m);
    d->rs = lb_dtype_bytes(d->rt);
    d->adds = lb_zero_adds(p->stage, p->grad_accum);
    d->gt = d->adds ? LB_DT_F32 : d->rt;
    d->gs = lb_dtype_bytes(d->gt);
    d->model_stream = (cudaStream_t)lb_model_gpu_stream(m);
    d->n_tensors = d->lora ? cfg->n_layer : lb_model_param_layout(cfg, NULL, 0);
    d->tensors = calloc((size_t)d->n_tensors, sizeof *d->tensors);
    d->seq = malloc(((size_t)cfg->n_layer + 4) * 2 * sizeof *d->seq);
    lb_status st = LB_OK;
    if (!d->tensors || !d->seq)
        st = lb_fail(err, LB_ERR_NOMEM, "out of host memory for the data-parallel layer");
    if (st == LB_OK) st = lb_dp_steps_cuda_init(&d->steps, p->n_steps, err);
    if (st == LB_OK) {
        set_layout(d, cfg);
        st = plan(d, cfg, err);
    }
    if (st == LB_OK) plan_rows(d);
    if (st == LB_OK && (p->stage >= LB_ZERO_1 || d->rows)) st = init_state(d, err);
    if (st == LB_OK &&
        cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create the communication stream");
    if (st == LB_OK &&
        (cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming) != cudaSuccess ||
         cudaEventCreateWithFlags(&d->joined, cudaEventDisableTiming) != cudaSuccess ||
         cudaEventCreateWithFlags(&d->rows_in, cudaEventDisableTiming) != cudaSuccess))
        st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    for (int i = 0; st == LB_OK && i < 2; i++)
        if (cudaEventCreateWithFlags(&d->send_free[i], cudaEventDisableTiming) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    for (int i = 0; st == LB_OK && i < N_GATHER; i++)
        if (cudaEventCreateWithFlags(&d->gathered[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&d->released[i], cudaEventDisableTiming) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    bool overlap = !d->whole && !d->lora && (p->stage == LB_ZERO_1 || p->stage == LB_ZERO_2);
    if (st == LB_OK && overlap) {
        d->bucket_gathered = calloc((size_t)d->plan.n_buckets, sizeof *d->bucket_gathered);
        d->bucket_updated = calloc((size_t)d->plan.n_buckets, sizeof *d->bucket_updated);
        if (d->bucket_gathered == NULL || d->bucket_updated == NULL)
            st = lb_fail(err, LB_ERR_NOMEM, "out of host memory");
    }
    for (int b = 0; st == LB_OK && overlap && b < d->plan.n_buckets; b++)
        if (cudaEventCreateWithFlags(&d->bucket_gathered[b], cudaEventDisableTiming) !=
                cudaSuccess ||
            cudaEventCreateWithFlags(&d->bucket_updated[b], cudaEventDisableTiming) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA event");
    if (st != LB_OK) {
        lb_dp_cuda_free(d);
        return st;
    }
    d->n_seq = plan_uses(d, cfg, d->seq);
    if (overlap)
        d->head_bucket = d->plan.bucket_of_unit[cfg->tied_embeddings ? 0 : cfg->n_layer + 1];
    d->head_fresh = true; /* the model's working copy and head start alike */
    if (!d->whole) lb_model_gpu_set_grad_hook(m, on_grads, d);
    lb_model_gpu_defer_embed(m, d->rows);
    if (!d->whole && p->stage == LB_ZERO_3) lb_model_gpu_set_param_hook(m, on_params, d);
    if (overlap) lb_model_gpu_set_param_hook(m, wait_gathered, d);
    *out = d;
    return LB_OK;
}

lb_status lb_dp_cuda_step_times(lb_dp_cuda *d, int64_t step, double *comm_ms, double *exposed_ms,
                                lb_err *err) {
    if (d->whole) { /* nothing travels */
        *comm_ms = *exposed_ms = 0;
        return LB_OK;
    }
    /* a run cut short has not waited for its last gather */
    LB_CUDA_TRY(err, cudaStreamSynchronize(d->comm_stream));
    bool gather = d->p.stage == LB_ZERO_1 || d->p.stage == LB_ZERO_2;
    return lb_dp_steps_cuda_times(&d->steps, step, gather, comm_ms, exposed_ms, err);
}

double lb_dp_cuda_sent_bytes(const lb_dp_cuda *d, int64_t step) {
    return d->steps.sent[step];
}

const lb_gpu_arena *lb_dp_cuda_arena(const lb_dp_cuda *d) {
    return &d->arena;
}

#endif
