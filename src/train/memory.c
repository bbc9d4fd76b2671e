/* memory.c: the device bytes a GPU training rank holds, term by term (see memory.h and
 * docs/METRICS.md's memory_formula_bytes). */
#include "train/memory.h"

#include <stdlib.h>

#include "gpu/blas/matmul.h"
#include "model/nf4.h"
#include "train/zero.h"

#define ALIGN_ELEMS 64 /* dp_cuda.c's piece alignment, elements */

static double round_up(double n, double to) {
    return (double)(((int64_t)n + (int64_t)to - 1) / (int64_t)to) * to;
}

/* The split scratch of fp32 products (none in 16-bit runs and IEEE/TF32 modes): the largest
 * of every linear map's three products (forward, input gradient, weight gradient). */
static double fp32_split_bytes(lb_blas_fp32_mode mode, const lb_model_config *cfg, int64_t BT,
                               int64_t Vp, int64_t mlp_in_cols) {
    const int64_t C = cfg->d_model, Q = lb_model_qkv_dim(cfg), F = lb_model_mlp_in_dim(cfg);
    const int64_t maps[6][2] = {{C, Q},         {C, C},  {C, F},
                                {cfg->d_ff, C}, {C, Vp}, {mlp_in_cols, F}}; /* [inputs, outputs] */
    double most = 0;
    for (int i = 0; i < 6; i++) {
        int64_t in = maps[i][0], out = maps[i][1];
        double b[3] = {(double)lb_blas_gemm_scratch_bytes(mode, BT, out, in),
                       (double)lb_blas_gemm_scratch_bytes(mode, BT, in, out),
                       (double)lb_blas_gemm_scratch_bytes(mode, out, in, BT)};
        for (int j = 0; j < 3; j++)
            if (b[j] > most) most = b[j];
    }
    return most;
}

/* dp_cuda.c's part on several ranks (with adapters also on one at stages 1-3): at stages
 * 1-3 the shard and the buffers, from the stage's bucket plan over the model's units, or
 * over the layers' adapters (adapter_layer elements a layer; 0: every parameter trains);
 * where the embeddings travel as rows (one micro-batch a step, the embeddings a bucket
 * alone, untied, every parameter training) every rank's gradient rows and token ids, the
 * ids sorted with their rows' indices, and the sort's scratch (about three more int32 a
 * token). */
static lb_status dp_terms(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                          double es, int64_t adapter_layer, lb_train_memory *out, lb_err *err) {
    int64_t *bounds = malloc(((size_t)cfg->n_layer + 3) * sizeof *bounds);
    if (bounds == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of host memory for a bucket plan");
    int n_units = cfg->n_layer;
    if (adapter_layer > 0)
        for (int l = 0; l <= cfg->n_layer; l++)
            bounds[l] = adapter_layer * l;
    else
        n_units = lb_zero_model_units(cfg, bounds);
    const double gb = adapter_layer > 0 ? 4 : es; /* the gradients' bytes: adapters' fp32 */
    /* buckets of --bucket-mib of gradients; at stage 3 one unit each */
    int64_t cap = p->zero == LB_ZERO_3 ? 0 : (int64_t)(p->bucket_mib * 1048576.0 / gb);
    int64_t align = p->zero == LB_ZERO_0 ? 1 : ALIGN_ELEMS;
    lb_zero_plan plan;
    lb_status st = lb_zero_plan_init(&plan, bounds, n_units, cap, ranks, align, err);
    if (st != LB_OK) {
        free(bounds);
        return st;
    }
    double n = (double)plan.shard_elems, most_piece = 0;
    const bool rows = adapter_layer == 0 && lb_zero_rows(&plan, cfg, p->grad_accum);
    const double tokens = (double)ranks * (double)p->batch * (double)p->seq;
    for (int b = 0; b < plan.n_buckets; b++)
        if ((double)plan.buckets[b].piece > most_piece) most_piece = (double)plan.buckets[b].piece;
    free(bounds);
    if (rows) out->buffers = tokens * ((double)cfg->d_model * es + 6 * 4);
    if (p->zero != LB_ZERO_0) {
        const bool wide = p->precision == LB_PREC_FP32;
        /* master, m and v in fp32, the gradient in its own type where one reduce-scatter a
         * step writes it (else fp32, added into through a piece buffer), and the working
         * copy in 16-bit runs */
        const bool adds = lb_zero_adds((lb_zero_stage)p->zero, p->grad_accum);
        out->shard_state = n * (12 + (adds ? 4 : gb) + (wide ? 0 : es));
        int64_t other[2];
        out->buffers += (double)lb_zero_send_elems(&plan, (lb_zero_stage)p->zero) * gb +
                        (adds ? most_piece * gb : 0);
        if (p->zero >= LB_ZERO_2) {
            lb_zero_other_slots(&plan, other);
            out->buffers +=
                gb * (double)(other[0] + other[1] + (rows ? 0 : plan.buckets[0].padded));
        }
        if (p->zero == LB_ZERO_3) {
            lb_zero_gathers g;
            lb_zero_model_gathers(&plan, cfg, adapter_layer > 0, &g);
            out->buffers += (double)(g.size[0] + g.size[1] + g.size[2]) * es;
        }
    }
    lb_zero_plan_free(&plan);
    return LB_OK;
}

/* The frozen base as model_gpu.c and lora_gpu.c carve it: every parameter in the working
 * type, or with NF4 every layer's four projection matrices as each of the family's
 * projections' codes (rounded up to 16 bytes), 8-bit absmax and fp32 scales, with a mean
 * for each of a layer's target slots; the head padded to Vp rows beside it. *dequant: the
 * NF4 scratch, the widest fused matrix in the working type and its blocks' exact absmax
 * (0 without NF4). */
static double frozen_base(const lb_model_config *cfg, bool nf4, double es, double *dequant) {
    const double C = cfg->d_model, L = cfg->n_layer, V = cfg->vocab_size, Vp = round_up(V, 64);
    double bytes = (double)lb_model_param_count(cfg) * es + (Vp != V ? Vp * C * es : 0);
    *dequant = 0;
    if (!nf4) return bytes;
    const double mats = lb_model_qkv_dim(cfg) * C + C * C + lb_model_mlp_in_dim(cfg) * C +
                        C * cfg->d_ff; /* a layer's four matrices, elements */
    double codes = 0;
    int64_t widest = 0;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++) {
        if (!((lb_lora_all_targets(cfg->family) >> t) & 1u)) continue;
        lb_lora_proj pr = lb_lora_projection(cfg, (lb_lora_target)t);
        int64_t n = (int64_t)pr.in * pr.out;
        codes += (double)((lb_nf4_code_bytes(n) + 15) / 16 * 16) + (double)lb_nf4_blocks(n) +
                 4 * (double)lb_nf4_groups(n);
        if ((int64_t)pr.ld_out * pr.in > widest) widest = (int64_t)pr.ld_out * pr.in;
    }
    *dequant = (double)widest * es + 4 * (double)lb_nf4_blocks(widest);
    return bytes + L * (codes - mats * es + 4 * LB_LORA_N_TARGETS);
}

/* Adapters (lc) on a frozen base: the base, the adapters' state in the model's arena and,
 * at stages 1-3 (one rank too), the data-parallel layer's shard and buffers; the
 * intermediates u ([L, targets, BT, r], every target slot) and du ([BT, r] for each target
 * of the most chosen on one base tensor) into *act, the NF4 scratch into *scratch. */
static lb_status adapter_terms(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                               const lb_lora_config *lc, double es, double BT, lb_train_memory *out,
                               double *act, double *scratch, lb_err *err) {
    const lb_zero_stage z = (lb_zero_stage)p->zero;
    lb_lora_offsets off;
    lb_lora_offsets_compute(cfg, lc, &off);
    out->base = frozen_base(cfg, lc->quant == LB_QUANT_NF4, es, scratch);
    /* stage 0: fp32 master, m, v and gradients and the working copy (in fp32 the master);
     * 1: the gradients and the working copy (in fp32 one of its own); 2: the working copy;
     * 3: nothing */
    static const double per_adapter[2][4] = {{18, 6, 2, 0}, {16, 8, 4, 0}};
    out->model_state = per_adapter[p->precision == LB_PREC_FP32][z] * (double)off.total;
    if (z > LB_ZERO_0) LB_TRY(dp_terms(p, cfg, ranks, es, off.layer_numel, out, err));
    int per_tensor[LB_LORA_IN_MLP_OUT + 1] = {0}, most = 0;
    for (int t = 0; t < LB_LORA_N_TARGETS; t++)
        if (off.a[t] >= 0) {
            int n = ++per_tensor[lb_lora_projection(cfg, (lb_lora_target)t).tensor];
            if (n > most) most = n;
        }
    const double r = lc->rank;
    *act = BT * r * es * (cfg->n_layer * (double)LB_LORA_N_TARGETS + most);
    return LB_OK;
}

lb_status lb_train_memory_formula(const lb_train_params *p, const lb_model_config *cfg, int ranks,
                                  lb_train_memory *out, lb_err *err) {
    *out = (lb_train_memory){0};
    if (ranks < 1) return lb_fail(err, LB_ERR_USAGE, "no memory formula for %d ranks", ranks);
    const bool lora = p->lora_rank > 0;
    lb_lora_config lc;
    if (lora) LB_TRY(lb_train_lora_config(p, cfg, &lc, err));
    const bool gpt2 = cfg->family == LB_FAMILY_GPT2, wide = p->precision == LB_PREC_FP32;
    const lb_zero_stage z = (lb_zero_stage)p->zero;
    const double P = (double)lb_model_param_count(cfg), es = wide ? 4 : 2;
    const double C = cfg->d_model, L = cfg->n_layer, NH = cfg->n_head, H = cfg->d_ff;
    const double HD = lb_model_head_dim(cfg), Q = lb_model_qkv_dim(cfg);
    const double F = lb_model_mlp_in_dim(cfg), V = cfg->vocab_size, Vp = round_up(V, 64);
    const int64_t B = p->batch / p->grad_accum, T = p->seq;
    const double BT = (double)B * (double)T;
    /* GPT-2's ln2 rows carry a ones column (and zeros) for the MLP input's bias gradient;
     * a frozen base has none */
    const bool ones = gpt2 && cfg->linear_bias && cfg->d_model % 8 == 0 && !lora;
    const double ld2 = ones ? round_up(C + 8, 64) : C;
    int n_small_t = 0; /* the 1-D tensors, whose gradients are summed in fp32; none frozen */
    int64_t small = 0;
    double lora_act = 0, nf4_scratch = 0;

    if (lora) {
        LB_TRY(adapter_terms(p, cfg, ranks, &lc, es, BT, out, &lora_act, &nf4_scratch, err));
    } else {
        out->zero_state = lb_zero_state_bytes(z, p->precision, P, ranks);
        /* stage 0: master, m, v in fp32, gradients and a working copy in the working type (in
         * fp32 the master is the working copy); 1 (and one rank at 1-3): the working copy
         * and gradients; 2: the working copy; 3: nothing. Every stage: the 1-D tensors' fp32
         * gradient sums. */
        static const double per_param[2][4] = {{16, 4, 2, 0}, {16, 8, 4, 0}};
        lb_model_vector_params(cfg, &n_small_t, &small);
        const bool whole = ranks == 1 && z > LB_ZERO_0; /* the shard is the whole model */
        out->model_state = per_param[wide][whole ? LB_ZERO_1 : z] * P + 4 * (double)small;
        if (Vp != V && (z < LB_ZERO_3 || whole))
            out->model_state += Vp * C * es; /* the head padded to Vp rows */
        if (whole)
            out->shard_state = (wide ? 8 : 12) * P; /* m, v and a 16-bit run's fp32 master */
        else if (ranks > 1)
            LB_TRY(dp_terms(p, cfg, ranks, es, 0, out, err));
    }

    /* per token: a layer's saved tensors (residual stream after attention and after the
     * MLP, qkv, attention output, MLP input product) and statistics (lse a head, the norms'
     * rstd and GPT-2's mean, fp32); the norm outputs and MLP activation (every layer, or one
     * with --recompute); then the final norm, logits, loss; one layer's gradients; and the
     * adapters' intermediates */
    const double keep = p->recompute ? 1 : L;
    const double saved = (2 * C + Q + C + F) * es + 4 * NH + (gpt2 ? 16 : 8);
    const double kept = (C + ld2 + H) * es;
    const double once = (C + C + Vp) * es + (gpt2 ? 8 : 4) + 4;
    const double grads = (C + C + Q + F + H) * es;
    out->activations = BT * (L * saved + keep * kept + once + grads) + lora_act;

    out->workspace = round_up((double)B * NH * (double)T * 4, 256) + BT * NH * HD * 4 +
                     (double)LB_BLAS_WORKSPACE_BYTES + 16 * BT + 24.0 * n_small_t +
                     4 * (double)((p->warmup + p->steps) * p->grad_accum + 1) + nf4_scratch;
    if (ones) out->workspace += F * (C + 8) * 4;
    if (!gpt2) out->workspace += (double)T * HD * 4 + HD / 2 * 4;
    if (wide)
        out->workspace += fp32_split_bytes(p->fp32_matmul, cfg, (int64_t)BT, (int64_t)Vp,
                                           (int64_t)(ones ? C + 8 : C));
    out->total = out->base + out->model_state + out->shard_state + out->buffers + out->activations +
                 out->workspace;
    return LB_OK;
}
