/* model_gpu.c: the transformer on one CUDA device (model/model_gpu.h).
 *
 * One layout function carves every buffer out of an arena; it runs once on a sizing arena
 * (to learn the total) and once on the real one. Forward, backward and the optimizer are
 * straight-line sequences of kernel launches and cuBLASLt calls on one stream, following
 * model/model.h's description of a layer; backward keeps a single residual-gradient buffer
 * that the norm backward kernels add into (llm.c's scheme), so a residual add costs
 * nothing in backward. The choices timed on the first step are model_gpu_tune.c's, the
 * step's CUDA graph model_gpu_graph.c's. */
#ifdef LB_HAVE_CUDA

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/check.h"
#include "kernels/act.cuh"
#include "kernels/attention.cuh"
#include "kernels/embed.cuh"
#include "kernels/loss.cuh"
#include "kernels/norm.cuh"
#include "kernels/rope.cuh"
#include "model/lora_gpu.h"
#include "model/model_gpu_impl.h"
#include "model/ref.h"

#define OOM_HINT  "try a smaller --batch or --recompute"
#define ONES_COLS 8 /* ln2's ones column and the zeros after it (lb_model_gpu's ld2) */

/* linear_fwd's and linear_bwd's operands stored feature-major ([features, BT], row stride
 * BT) instead of token-major */
enum { COLS_INP = 1, COLS_DOUT = 2 };

/* whether fch, fact and dfch are stored feature-major ([F, BT], row stride BT) */
static bool hidden_cols(const lb_model_gpu *m) {
    return m->gelu_src == LB_GELU_PRODUCT_CUDNN;
}
/* the row stride of such a tensor with `width` features */
static int64_t hidden_ld(const lb_model_gpu *m, int64_t width) {
    return hidden_cols(m) ? m->BT : width;
}

/* whether the output head's working copy is a padded one of its own (m->lm_w); with
 * external_params the products read the bound head, its padding rows whatever follows it
 * (with adapters external_params is theirs: the frozen head stays the model's) */
static bool head_apart(const lb_model_gpu *m) {
    return m->Vp != m->V && (m->lora != NULL || !m->p.external_params);
}

static void set_dims(lb_model_gpu *m, const lb_model_config *cfg, const lb_model_gpu_params *p) {
    m->cfg = *cfg;
    m->p = *p;
    lb_model_param_offsets(cfg, &m->off);
    m->n_params = m->off.total;
    m->B = p->B, m->T = p->T, m->BT = (int64_t)p->B * p->T;
    m->C = cfg->d_model, m->L = cfg->n_layer, m->NH = cfg->n_head, m->NKV = cfg->n_kv_head;
    m->HD = lb_model_head_dim(cfg), m->Q = lb_model_qkv_dim(cfg), m->F = lb_model_mlp_in_dim(cfg);
    m->H = cfg->d_ff, m->V = cfg->vocab_size, m->Vp = (cfg->vocab_size + 63) / 64 * 64;
    m->dt = p->precision == LB_PREC_BF16   ? LB_DT_BF16
            : p->precision == LB_PREC_FP16 ? LB_DT_F16
                                           : LB_DT_F32;
    m->es = lb_dtype_bytes(m->dt);
    m->gdt = p->lora.rank > 0 ? LB_DT_F32 : m->dt;
    m->gs = lb_dtype_bytes(m->gdt);
    m->llama = cfg->family == LB_FAMILY_LLAMA;
    m->n_seg = lb_model_param_layout(cfg, NULL, 0);
    /* the 1-D tensors, whose gradients are summed in fp32 first; none with adapters (a
     * frozen base) */
    m->n_small_t = 0, m->n_small = 0;
    if (p->lora.rank == 0) lb_model_vector_params(cfg, &m->n_small_t, &m->n_small);
    /* the ones column needs a bias and rows that stay 16-byte aligned (C % 8: every
     * parameter offset, so the split's packed gradients, then 16-byte aligned too) */
    m->ld2 = !m->llama && cfg->linear_bias && m->C % 8 == 0 && p->lora.rank == 0 /* frozen: no
                                                                                  * bias gradient */
                 ? (m->C + ONES_COLS + 63) / 64 * 64
                 : m->C;
}

/* Columns of the MLP input's weight-gradient product: C + ONES_COLS with ln2's ones
 * column, else C. */
static int64_t mlp_in_cols(const lb_model_gpu *m) {
    return m->ld2 != m->C ? m->C + ONES_COLS : m->C;
}

/* Split scratch for the largest product of a step in the run's fp32 mode (none in 16-bit
 * runs): each linear map (IC -> OC) runs forward (BT x OC x IC), input gradient
 * (BT x IC x OC) and weight gradient (OC x IC x BT). */
static size_t split_need(const lb_model_gpu *m) {
    if (m->dt != LB_DT_F32) return 0;
    const int64_t maps[6][2] = {{m->C, m->Q}, {m->C, m->C},  {m->C, m->F},
                                {m->H, m->C}, {m->C, m->Vp}, {mlp_in_cols(m), m->F}};
    lb_blas_fp32_mode mode = m->p.fp32_mode;
    size_t need = 0;
    for (int i = 0; i < 6; i++) {
        int64_t ic = maps[i][0], oc = maps[i][1];
        size_t b[3] = {lb_blas_gemm_scratch_bytes(mode, m->BT, oc, ic),
                       lb_blas_gemm_scratch_bytes(mode, m->BT, ic, oc),
                       lb_blas_gemm_scratch_bytes(mode, oc, ic, m->BT)};
        for (int j = 0; j < 3; j++)
            if (b[j] > need) need = b[j];
    }
    return need;
}

#define TAKE(ptr, name, bytes)                                                                     \
    do {                                                                                           \
        void *tmp_;                                                                                \
        LB_TRY(lb_gpu_arena_alloc(a, name, (size_t)(bytes), &tmp_, err));                          \
        *(void **)&(ptr) = tmp_;                                                                   \
    } while (0)

static void *W(lb_model_gpu *m, int64_t off);

/* The frozen base in the working type (its projections in NF4 apart) and the adapters'
 * pieces. */
static lb_status layout_frozen(lb_model_gpu *m, lb_gpu_arena *a, lb_err *err) {
    TAKE(m->params, "param.base", (size_t)lb_lora_gpu_base_elems(m->lora) * m->es);
    return lb_lora_gpu_carve(m->lora, a, err);
}

static lb_status layout(lb_model_gpu *m, lb_gpu_arena *a, lb_err *err) {
    size_t es = m->es, np = (size_t)m->n_params, BT = (size_t)m->BT, C = (size_t)m->C;
    size_t L = (size_t)m->L, keep = m->p.recompute ? 1 : L;
    if (m->lora) {
        LB_TRY(layout_frozen(m, a, err));
    } else {
        bool own_opt = !m->p.external_optimizer;
        if (own_opt) TAKE(m->master, "param.master", np * 4);
        if (m->p.external_params)
            m->params = NULL;
        else if (m->dt != LB_DT_F32 || !own_opt)
            TAKE(m->params, "param.work", np * es);
        else
            m->params = m->master;
        if (!m->p.external_grads) TAKE(m->grads, "param.grad", np * m->gs);
        TAKE(m->small, "param.grad_small", (size_t)m->n_small * 4);
        if (own_opt) {
            TAKE(m->m, "opt.m", np * 4);
            TAKE(m->v, "opt.v", np * 4);
            TAKE(m->seg_start, "opt.seg_start", (size_t)m->n_seg * 8);
            TAKE(m->seg_flags, "opt.seg_flags", (size_t)m->n_seg * 4);
        }
    }
    if (head_apart(m)) TAKE(m->lm_w, "param.lm_head_padded", (size_t)m->Vp * C * es);
    TAKE(m->opt, "opt.state", sizeof(lb_gpu_optstate));
    if (m->llama) {
        TAKE(m->inv_freq, "rope.inv_freq", (size_t)m->HD / 2 * 4);
        TAKE(m->rope_cs, "rope.table", (size_t)m->T * m->HD * 4);
    }
    TAKE(m->tokens, "data.tokens", 4 * BT * 4);
    if (m->n_small_t > 0)
        TAKE(m->small_runs, "data.small_runs", (size_t)m->n_small_t * sizeof(lb_adamw_grad_run));
    TAKE(m->loss_slots, "data.loss_slots", (size_t)(n_slots(m) + 1) * 4);
    TAKE(m->encoded, "act.encoded", BT * C * es);
    TAKE(m->res2, "act.res2", L * BT * C * es);
    TAKE(m->res3, "act.res3", L * BT * C * es);
    TAKE(m->ln1, "act.ln1", keep * BT * C * es);
    TAKE(m->ln2, "act.ln2", keep * BT * (size_t)m->ld2 * es);
    if (m->ld2 != m->C)
        TAKE(m->aug_grad, "grad.mlp_in_with_bias", (size_t)m->F * mlp_in_cols(m) * 4);
    if (!m->llama) {
        TAKE(m->ln1_mean, "act.ln1_mean", L * BT * 4);
        TAKE(m->ln2_mean, "act.ln2_mean", L * BT * 4);
        TAKE(m->lnf_mean, "act.lnf_mean", BT * 4);
    }
    TAKE(m->ln1_rstd, "act.ln1_rstd", L * BT * 4);
    TAKE(m->ln2_rstd, "act.ln2_rstd", L * BT * 4);
    TAKE(m->lnf_rstd, "act.lnf_rstd", BT * 4);
    TAKE(m->qkv, "act.qkv", L * BT * (size_t)m->Q * es);
    TAKE(m->atty, "act.atty", L * BT * C * es);
    TAKE(m->lse, "act.lse", L * BT * (size_t)m->NH * 4);
    TAKE(m->fch, "act.mlp_in", L * BT * (size_t)m->F * es);
    TAKE(m->fact, "act.mlp_act", keep * BT * (size_t)m->H * es);
    TAKE(m->lnf, "act.lnf", BT * C * es);
    TAKE(m->logits, "act.logits", BT * (size_t)m->Vp * es);
    TAKE(m->losses, "act.losses", BT * 4);
    TAKE(m->dres, "grad.residual", BT * C * es);
    TAKE(m->dc, "grad.width_c", BT * C * es);
    TAKE(m->dqkv, "grad.qkv", BT * (size_t)m->Q * es);
    TAKE(m->dfch, "grad.mlp_in", BT * (size_t)m->F * es);
    TAKE(m->dact, "grad.mlp_act", BT * (size_t)m->H * es);
    TAKE(m->attn_scratch, "scratch.attention",
         lb_attention_scratch_bytes(m->B, m->T, m->NH, m->HD));
    size_t dnn_bytes = m->dnn ? lb_cudnn_attn_workspace_bytes(m->dnn) : 0;
    if (m->gelu_dnn && lb_cudnn_gelu_workspace_bytes(m->gelu_dnn) > dnn_bytes)
        dnn_bytes = lb_cudnn_gelu_workspace_bytes(m->gelu_dnn);
    if (dnn_bytes > 0) TAKE(m->dnn_ws, "scratch.cudnn", dnn_bytes);
    if (m->dnn) TAKE(m->trial_dbias, "scratch.attention_trial_bias", (size_t)m->Q * 4);
    TAKE(m->blas_ws, "scratch.cublaslt", LB_BLAS_WORKSPACE_BYTES);
    m->split_bytes = split_need(m);
    if (m->split_bytes > 0) TAKE(m->split_scratch, "scratch.fp32_products", m->split_bytes);
    m->targets = m->tokens + BT;
    m->keys = m->tokens + 2 * BT;
    m->key_rows = m->tokens + 3 * BT;
    return LB_OK;
}

/* cuDNN's GELU product plans where the GELU is fused (else cuBLASLt's epilogue only), and
 * its attention plans where the choice allows them (else the built-in kernels). */
static lb_status open_cudnn(lb_model_gpu *m, lb_err *err) {
    m->gelu_src = LB_GELU_PRODUCT_CUBLASLT;
    m->attn_src[0] = m->attn_src[1] = LB_GPU_ATTN_BUILTIN;
    lb_err why;
    if (fuse_gelu(m) && m->ld2 != m->C &&
        m->p.gelu_product != LB_GELU_PRODUCT_CUBLASLT) { /* feature-major fch and
                                                          * dfch need the ones column */
        if (lb_cudnn_gelu_init(&m->gelu_dnn, m->BT, m->F, m->C, m->ld2, true, m->dt, &why) == LB_OK)
            m->gelu_src = m->p.gelu_product == LB_GELU_PRODUCT_CUDNN ? LB_GELU_PRODUCT_CUDNN
                                                                     : LB_GELU_PRODUCT_AUTO;
        else
            LB_DEBUG("MLP input product: cuBLASLt's GELU epilogue (%s)", why.msg);
    }
    lb_gpu_attn_choice c = m->p.attention;
    if (c == LB_GPU_ATTN_CUDNN && (m->dt == LB_DT_F32 || m->p.attn_scalar))
        return lb_fail(err, LB_ERR_USAGE, "cuDNN attention needs --precision bf16 or fp16");
    if (c == LB_GPU_ATTN_BUILTIN || m->dt == LB_DT_F32 || m->p.attn_scalar) return LB_OK;
    if (lb_cudnn_attn_init(&m->dnn, m->B, m->T, m->NH, m->NKV, m->HD, m->dt, true, &why) != LB_OK) {
        if (c == LB_GPU_ATTN_CUDNN)
            return lb_fail(err, LB_ERR_UNSUPPORTED, "--attention cudnn: %s", why.msg);
        LB_INFO("attention: built-in kernels (%s)", why.msg);
        return LB_OK;
    }
    m->attn_src[0] = m->attn_src[1] = c == LB_GPU_ATTN_CUDNN ? LB_GPU_ATTN_CUDNN : LB_GPU_ATTN_AUTO;
    return LB_OK;
}

static lb_status reset_optimizer(lb_model_gpu *m, lb_err *err) {
    if (m->lora) {
        LB_TRY(lb_lora_gpu_reset_moments(m->lora, m->stream, err));
    } else if (m->m != NULL) {
        LB_CUDA_TRY(err, cudaMemsetAsync(m->m, 0, (size_t)m->n_params * 4, m->stream));
        LB_CUDA_TRY(err, cudaMemsetAsync(m->v, 0, (size_t)m->n_params * 4, m->stream));
    }
    lb_gpu_optstate st;
    memset(&st, 0, sizeof st);
    st.loss_scale = m->dt == LB_DT_F16 ? 65536.0f : 1.0f;
    LB_CUDA_TRY(err, cudaMemcpyAsync(m->opt, &st, sizeof st, cudaMemcpyHostToDevice, m->stream));
    return LB_OK;
}

/* The working copy from the master weights: params, and the padded head's first V rows
 * (its padding rows stay zero). */
static lb_status sync_working_copy(lb_model_gpu *m, lb_err *err) {
    if (m->params != m->master)
        LB_TRY(lb_act_convert(m->params, m->dt, m->master, LB_DT_F32, m->n_params, m->stream, err));
    if (!head_apart(m)) return LB_OK; /* the products read the head itself */
    return lb_act_convert(m->lm_w, m->dt, m->master + m->off.lm_head, LB_DT_F32,
                          (int64_t)m->V * m->C, m->stream, err);
}

/* Llama's RoPE frequencies and its cos/sin table on the device. */
static lb_status rope_tables(lb_model_gpu *m, lb_err *err) {
    if (!m->llama) return LB_OK;
    float f[512];
    lb_ref_rope_freqs(&m->cfg, f);
    LB_CUDA_TRY(err, cudaMemcpyAsync(m->inv_freq, f, (size_t)m->HD / 2 * 4, cudaMemcpyHostToDevice,
                                     m->stream));
    return lb_rope_table(m->rope_cs, m->inv_freq, m->T, m->HD, m->stream, err);
}

/* First element of unit u (train/zero.h's units: 0 the embeddings, 1 + l layer l, L + 1
 * the final norm and an untied head) and the unit holding element off. */
static int64_t unit_first(const lb_model_gpu *m, int u) {
    return u == 0 ? 0 : m->off.layers + (int64_t)(u - 1) * m->off.layer_numel;
}
static int unit_of(const lb_model_gpu *m, int64_t off) {
    if (off < m->off.layers) return 0;
    int64_t l = (off - m->off.layers) / m->off.layer_numel;
    return l < m->L ? 1 + (int)l : m->L + 1;
}

/* A layer matrix: its gradient is written whole by its weight-gradient product. */
static bool layer_matrix(const lb_param_tensor *t) {
    return t->layer >= 0 && t->ndim == 2;
}

lb_gpu_dtype lb_model_gpu_grad_type(const lb_model_gpu *m) {
    return m->gdt;
}

/* Unit by unit (units come in flat order), the runs that write the fp32 sums of the 1-D
 * tensors into their slots: adjacent tensors one run. */
static void plan_small_runs(lb_model_gpu *m, const lb_param_tensor *t, lb_adamw_grad_run *runs) {
    int nr = 0, u_last = -1;
    int64_t at = 0;
    for (int i = 0; i < m->n_seg; i++) {
        m->t_off[i] = t[i].offset;
        m->small_at[i] = -1;
        if (t[i].ndim != 1) continue;
        int u = unit_of(m, t[i].offset);
        int64_t dense = t[i].offset - unit_first(m, u);
        m->small_at[i] = at;
        lb_adamw_grad_run *r = nr > 0 ? &runs[nr - 1] : NULL;
        if (r != NULL && u == u_last && r->slot + r->n == at && r->dense + r->n == dense) {
            r->n += t[i].numel;
        } else {
            for (int v = u_last + 1; v <= u; v++)
                m->unit_run[v] = nr;
            runs[nr++] = (lb_adamw_grad_run){at, dense, t[i].numel};
            u_last = u;
        }
        at += t[i].numel;
    }
    for (int v = u_last + 1; v <= m->L + 2; v++)
        m->unit_run[v] = nr;
    for (int u = 0; u < m->L + 2; u++)
        for (int r = m->unit_run[u]; r < m->unit_run[u + 1]; r++)
            if (runs[r].n > m->unit_longest[u]) m->unit_longest[u] = runs[r].n;
}

/* The optimizer's segment table, the 1-D tensors' runs, and the gradients cleared before a
 * step: those no product writes whole, outside the 1-D tensors (wte when untied, wpe). */
static lb_status init_tables(lb_model_gpu *m, lb_err *err) {
    if (m->lora) { /* no base gradients to clear or update: the adapters' one segment */
        LB_TRY(lb_lora_gpu_upload_tables(m->lora, m->stream, err));
        return rope_tables(m, err);
    }
    size_t n = (size_t)m->n_seg;
    lb_param_tensor *t = malloc(n * sizeof *t);
    int64_t *start = malloc(n * 8);
    int32_t *flags = malloc(n * 4);
    lb_adamw_grad_run *runs = malloc((n + 1) * sizeof *runs);
    m->t_off = malloc(n * sizeof *m->t_off);
    m->small_at = malloc(n * sizeof *m->small_at);
    m->unit_run = calloc((size_t)m->L + 3, sizeof *m->unit_run);
    m->unit_longest = calloc((size_t)m->L + 2, sizeof *m->unit_longest);
    m->clear = malloc(n * sizeof *m->clear);
    lb_status st = LB_OK;
    if (!t || !start || !flags || !runs || !m->t_off || !m->small_at || !m->unit_run ||
        !m->unit_longest || !m->clear) {
        st = lb_fail(err, LB_ERR_NOMEM, "no host memory for the parameter table");
    } else {
        lb_model_param_layout(&m->cfg, t, m->n_seg);
        for (int i = 0; i < m->n_seg; i++) {
            start[i] = t[i].offset;
            flags[i] = t[i].decay ? LB_SEG_DECAY : 0;
            /* written whole by its product: every layer matrix, and the head (when tied, the
             * head's product writes wte's gradient before the embedding backward adds to
             * it); the 1-D tensors' slots by their runs */
            if (t[i].ndim != 2 || t[i].layer >= 0 || t[i].offset == m->off.lm_head) continue;
            if (m->n_clear > 0 &&
                m->clear[m->n_clear - 1][0] + m->clear[m->n_clear - 1][1] == t[i].offset)
                m->clear[m->n_clear - 1][1] += t[i].numel;
            else
                m->clear[m->n_clear][0] = t[i].offset, m->clear[m->n_clear++][1] = t[i].numel;
        }
        plan_small_runs(m, t, runs);
        int nr = m->unit_run[m->L + 2];
        if ((nr > 0 && cudaMemcpyAsync(m->small_runs, runs, (size_t)nr * sizeof *runs,
                                       cudaMemcpyHostToDevice, m->stream) != cudaSuccess) ||
            (m->seg_start != NULL &&
             (cudaMemcpyAsync(m->seg_start, start, n * 8, cudaMemcpyHostToDevice, m->stream) !=
                  cudaSuccess ||
              cudaMemcpyAsync(m->seg_flags, flags, n * 4, cudaMemcpyHostToDevice, m->stream) !=
                  cudaSuccess)))
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the parameter table to the device");
        /* the copies read host memory freed below */
        if (st == LB_OK && cudaStreamSynchronize(m->stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy the parameter table to the device");
    }
    if (st == LB_OK) st = rope_tables(m, err);
    free(t);
    free(start);
    free(flags);
    free(runs);
    return st;
}

/* Every unit's gradient slots and working copy in the model's own arrays (none with
 * external_grads or external_params: bound later). */
static lb_status init_units(lb_model_gpu *m, lb_err *err) {
    m->unit_grads = calloc((size_t)m->L + 2, sizeof *m->unit_grads);
    m->unit_params = calloc((size_t)m->L + 2, sizeof *m->unit_params);
    if (m->unit_grads == NULL || m->unit_params == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "no host memory for the units");
    for (int u = 0; u < m->L + 2; u++) {
        if (m->grads != NULL)
            m->unit_grads[u] = (char *)m->grads + (size_t)unit_first(m, u) * m->gs;
        if (m->params != NULL && !m->lora)
            m->unit_params[u] = (char *)m->params + (size_t)unit_first(m, u) * m->es;
    }
    return LB_OK;
}

void lb_model_gpu_bind_params(lb_model_gpu *m, int unit, void *working) {
    if (m->lora == NULL)
        m->unit_params[unit] = working;
    else if (unit >= 1 && unit <= m->L)
        lb_lora_gpu_bind_work(m->lora, unit - 1, working);
}

void lb_model_gpu_set_param_hook(lb_model_gpu *m, lb_model_gpu_param_hook fn, void *ctx) {
    m->param_hook = fn;
    m->param_hook_ctx = ctx;
}

/* Kernels that read unit u's parameters come next (forward, or backward): the hook may
 * bind them first. */
static lb_status param_use(lb_model_gpu *m, int unit, bool backward, lb_err *err) {
    return m->param_hook != NULL ? m->param_hook(m->param_hook_ctx, unit, backward, err) : LB_OK;
}

void lb_model_gpu_bind_grads(lb_model_gpu *m, int unit, void *slots) {
    if (m->lora != NULL) {
        if (unit >= 1 && unit <= m->L) lb_lora_gpu_bind_grads(m->lora, unit - 1, slots);
        return;
    }
    m->unit_grads[unit] = slots != NULL ? slots
                          : m->grads != NULL
                              ? (char *)m->grads + (size_t)unit_first(m, unit) * m->gs
                              : NULL;
}

lb_status lb_model_gpu_init(lb_model_gpu **out, const lb_model_config *cfg,
                            const lb_model_gpu_params *p, lb_err *err) {
    *out = NULL;
    if (lb_model_head_dim(cfg) > 1024)
        return lb_fail(err, LB_ERR_UNSUPPORTED, "head size %d is too large",
                       lb_model_head_dim(cfg));
    lb_model_gpu *m = calloc(1, sizeof *m);
    if (m == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the GPU model");
    set_dims(m, cfg, p);
    m->loss_grad_scale = 1.0f / (float)m->BT;
    lb_status st = LB_OK;
    if (p->external_params && !(p->external_optimizer && p->external_grads))
        st = lb_fail(err, LB_ERR_USAGE,
                     "external parameters need an external optimizer and "
                     "external gradients");
    else if (p->lora.rank > 0)
        st = lb_lora_gpu_new(
            &m->lora, cfg, &p->lora, m->BT, m->dt,
            &(lb_lora_gpu_external){p->external_optimizer, p->external_grads, p->external_params},
            err);
    if (st == LB_OK) st = open_cudnn(m, err);
    lb_gpu_arena sizing;
    lb_gpu_arena_init_sizing(&sizing);
    if (st == LB_OK) st = layout(m, &sizing, err);
    size_t need = sizing.used_bytes;
    lb_gpu_arena_free(&sizing);
    if (st == LB_OK) st = lb_gpu_arena_init(&m->arena, need, OOM_HINT, err);
    if (st == LB_OK) st = layout(m, &m->arena, err);
    if (st == LB_OK && cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not create a CUDA stream");
    if (st == LB_OK) {
        lb_blas_params bp = lb_blas_default_params();
        bp.workspace = m->blas_ws, bp.workspace_bytes = LB_BLAS_WORKSPACE_BYTES;
        bp.fp32_mode = m->dt == LB_DT_F32 ? p->fp32_mode : LB_BLAS_FP32_IEEE;
        bp.tune = !p->gemm_heuristic_only;
        bp.split_scratch = m->split_scratch, bp.split_scratch_bytes = m->split_bytes;
        st = lb_blas_init(&m->blas, &bp, err);
    }
    for (int i = 0; st == LB_OK && i < 2; i++) {
        if (cudaMallocHost((void **)&m->host_tok[i], 4 * (size_t)m->BT * 4) != cudaSuccess ||
            cudaEventCreateWithFlags(&m->host_done[i], cudaEventDisableTiming) != cudaSuccess)
            st = lb_fail(err, LB_ERR_NOMEM, "no pinned host memory for token batches");
    }
    if (st == LB_OK && !m->lora &&
        (m->host_count = malloc(((size_t)m->V + 1) * sizeof *m->host_count)) == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "no host memory to sort token ids");
    if (st == LB_OK && head_apart(m) &&
        cudaMemset(m->lm_w, 0, (size_t)m->Vp * m->C * m->es) != cudaSuccess)
        st = lb_fail(err, LB_ERR_DEVICE, "could not clear the padded output head");
    if (st == LB_OK && m->ld2 != m->C) /* the norm forward never writes past column C */
        st = lb_act_ones_column(m->ln2, (m->p.recompute ? 1 : m->L) * m->BT, m->ld2, m->C,
                                (int)(m->ld2 - m->C), m->dt, m->stream, err);
    if (st == LB_OK) st = init_tables(m, err);
    if (st == LB_OK) st = init_units(m, err);
    if (st == LB_OK) st = reset_optimizer(m, err);
    if (st != LB_OK) {
        cudaGetLastError();
        lb_model_gpu_free(m);
        return st;
    }
    *out = m;
    return LB_OK;
}

lb_status lb_model_gpu_plan_bytes(const lb_model_config *cfg, const lb_model_gpu_params *p,
                                  double *state_bytes, double *other_bytes, lb_err *err) {
    if (p->lora.rank > 0)
        return lb_fail(err, LB_ERR_USAGE, "no memory plan for adapters on a frozen base");
    lb_model_gpu *m = calloc(1, sizeof *m);
    if (m == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the GPU model");
    set_dims(m, cfg, p);
    lb_gpu_arena sizing;
    lb_gpu_arena_init_sizing(&sizing);
    lb_status st = layout(m, &sizing, err);
    double state = (double)(lb_gpu_arena_bytes_with_prefix(&sizing, "param.") +
                            lb_gpu_arena_bytes_with_prefix(&sizing, "opt."));
    *state_bytes = state;
    *other_bytes = (double)sizing.used_bytes - state;
    lb_gpu_arena_free(&sizing);
    free(m);
    return st;
}

void lb_model_gpu_free(lb_model_gpu *m) {
    if (m == NULL) return;
    if (m->stream) cudaStreamSynchronize(m->stream);
    if (m->step_graph) cudaGraphExecDestroy(m->step_graph);
    lb_cudnn_attn_free(m->dnn); /* after the graph: its kernels live in the plans */
    lb_cudnn_gelu_free(m->gelu_dnn);
    lb_blas_free(m->blas);
    for (int i = 0; i < 2; i++) {
        if (m->host_tok[i]) cudaFreeHost(m->host_tok[i]);
        if (m->host_done[i]) cudaEventDestroy(m->host_done[i]);
    }
    if (m->stream) cudaStreamDestroy(m->stream);
    lb_gpu_arena_free(&m->arena);
    lb_lora_gpu_free(m->lora);
    free(m->clear);
    free(m->t_off);
    free(m->small_at);
    free(m->unit_run);
    free(m->unit_longest);
    free(m->host_count);
    free(m->unit_grads);
    free(m->unit_params);
    free(m);
}

/* dst (fp32, n elements) = elements at .. at + n - 1 of tensor t's initial values, the
 * reference's rule (model.h): normal(0, 0.02) for matrices, 0.02 / sqrt(2 L) for the
 * residual projections, norm weights 1, biases 0; normals drawn by (seed, element offset),
 * so a tensor drawn in pieces is the tensor drawn whole. */
static lb_status init_tensor(lb_model_gpu *m, float *dst, const lb_param_tensor *t, int64_t at,
                             int64_t n, uint64_t seed, lb_err *err) {
    if (t->ndim == 2) {
        bool resid = strstr(t->name, "attn_out.w") || strstr(t->name, "mlp_out.w");
        float std = resid ? 0.02f / sqrtf(2.0f * (float)m->L) : 0.02f;
        return lb_act_fill_normal(dst, n, std, seed, t->offset + at, m->stream, err);
    }
    const char *dot = strrchr(t->name, '.');
    bool one = strstr(t->name, "norm") && dot && strcmp(dot, ".w") == 0;
    return lb_act_fill(dst, n, one ? 1.0f : 0.0f, m->stream, err);
}

/* The largest tensor of the layout t[0..n), elements. */
static int64_t largest_tensor(const lb_param_tensor *t, int n) {
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        if (t[i].numel > most) most = t[i].numel;
    return most;
}

/* The working copy of a model without master weights (a frozen base; or one whose
 * optimizer, and master, are external) from fp32 values: each tensor drawn by init_tensor,
 * or read from src into one host buffer (the largest tensor) and copied in, through one fp32
 * device buffer outside the arena, into the working copy (a frozen base's projections into
 * NF4 when asked) and the padded head's copy. The device buffer holds the largest layer
 * matrix, which NF4 quantises whole; other tensors (a 128K-token embedding: 2.1 GB in fp32)
 * pass in pieces of that size. */
static lb_status working_set(lb_model_gpu *m, const lb_model_gpu_source *src, uint64_t seed,
                             lb_err *err) {
    lb_param_tensor *t = malloc((size_t)m->n_seg * sizeof *t);
    if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the parameter table");
    lb_model_param_layout(&m->cfg, t, m->n_seg);
    int64_t most = 0;
    for (int i = 0; i < m->n_seg; i++)
        if (layer_matrix(&t[i]) && t[i].numel > most) most = t[i].numel;
    float *buf = NULL, *host = NULL;
    lb_status st = LB_OK;
    if (src != NULL && (host = malloc((size_t)largest_tensor(t, m->n_seg) * 4)) == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "no host memory for a %.2f GB tensor",
                     largest_tensor(t, m->n_seg) * 4 / 1e9);
    if (st == LB_OK && cudaMalloc((void **)&buf, (size_t)most * 4) != cudaSuccess) {
        cudaGetLastError();
        st = lb_fail(err, LB_ERR_NOMEM, "no device memory for a %.2f GB buffer to set up the base",
                     most * 4 / 1e9);
    }
    for (int i = 0; st == LB_OK && i < m->n_seg; i++) {
        /* the pieces of the previous tensor have left the host buffer: the copies below
         * are from pageable memory, which returns once the data is staged */
        if (src != NULL) src->read(src->ctx, &t[i], host);
        for (int64_t at = 0; st == LB_OK && at < t[i].numel; at += most) {
            int64_t n = t[i].numel - at < most ? t[i].numel - at : most;
            if (src != NULL) {
                if (cudaMemcpyAsync(buf, host + at, (size_t)n * 4, cudaMemcpyHostToDevice,
                                    m->stream) != cudaSuccess)
                    st = lb_fail(err, LB_ERR_DEVICE, "could not copy tensor %s in", t[i].name);
            } else {
                st = init_tensor(m, buf, &t[i], at, n, seed, err);
            }
            if (st == LB_OK && m->lora)
                st = lb_lora_gpu_base_set(m->lora, m->params, t[i].offset + at, n, buf, m->stream,
                                          err);
            else if (st == LB_OK)
                st = lb_act_convert((char *)m->params + (size_t)(t[i].offset + at) * m->es, m->dt,
                                    buf, LB_DT_F32, n, m->stream, err);
            if (st == LB_OK && head_apart(m) && t[i].offset == m->off.lm_head)
                st = lb_act_convert((char *)m->lm_w + (size_t)at * m->es, m->dt, buf, LB_DT_F32, n,
                                    m->stream, err);
        }
    }
    /* pieces reuse buf in stream order; the buffer goes once all of them are done */
    if (cudaStreamSynchronize(m->stream) != cudaSuccess && st == LB_OK)
        st = lb_fail(err, LB_ERR_DEVICE, "setting up the frozen base failed");
    cudaFree(buf);
    free(host);
    free(t);
    return st;
}

lb_status lb_model_gpu_init_weights(lb_model_gpu *m, uint64_t seed, lb_err *err) {
    if (m->lora || m->master == NULL) {
        if (m->params != NULL) LB_TRY(working_set(m, NULL, seed, err));
        return reset_optimizer(m, err);
    }
    LB_TRY(lb_model_gpu_draw_params(m, m->master, 0, m->n_params, seed, err));
    LB_TRY(sync_working_copy(m, err));
    return reset_optimizer(m, err);
}

lb_status lb_model_gpu_draw_params(lb_model_gpu *m, float *dst, int64_t lo, int64_t hi,
                                   uint64_t seed, lb_err *err) {
    lb_param_tensor *t = malloc((size_t)m->n_seg * sizeof *t);
    if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the parameter table");
    lb_model_param_layout(&m->cfg, t, m->n_seg);
    lb_status st = LB_OK;
    for (int i = 0; st == LB_OK && i < m->n_seg; i++) {
        int64_t a = t[i].offset > lo ? t[i].offset : lo;
        int64_t b = t[i].offset + t[i].numel < hi ? t[i].offset + t[i].numel : hi;
        if (a < b) st = init_tensor(m, dst + (a - lo), &t[i], a - t[i].offset, b - a, seed, err);
    }
    free(t);
    return st;
}

void *lb_model_gpu_working(lb_model_gpu *m) {
    return m->lora ? lb_lora_gpu_work(m->lora) : m->params;
}
lb_gpu_dtype lb_model_gpu_dtype(const lb_model_gpu *m) {
    return m->dt;
}
lb_gpu_optstate *lb_model_gpu_optstate(lb_model_gpu *m) {
    return m->opt;
}

bool lb_model_gpu_head_apart(lb_model_gpu *m, lb_gpu_lp_apart *out) {
    if (!head_apart(m)) return false;
    *out = (lb_gpu_lp_apart){m->lm_w, m->off.lm_head, m->off.lm_head + (int64_t)m->V * m->C};
    return true;
}

lb_status lb_model_gpu_working_written(lb_model_gpu *m, lb_err *err) {
    /* the products read the head itself, or the adapters were written (the head frozen) */
    if (!head_apart(m) || m->lora) return LB_OK;
    LB_CUDA_TRY(err,
                cudaMemcpyAsync(m->lm_w, (char *)m->params + (size_t)m->off.lm_head * m->es,
                                (size_t)m->V * m->C * m->es, cudaMemcpyDeviceToDevice, m->stream));
    return LB_OK;
}

/* Every tensor from src into the fp32 master weights through one host buffer. */
static lb_status master_set(lb_model_gpu *m, const lb_model_gpu_source *src, lb_err *err) {
    lb_param_tensor *t = malloc((size_t)m->n_seg * sizeof *t);
    if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "no host memory for the parameter table");
    lb_model_param_layout(&m->cfg, t, m->n_seg);
    float *host = malloc((size_t)largest_tensor(t, m->n_seg) * 4);
    lb_status st = host ? LB_OK : lb_fail(err, LB_ERR_NOMEM, "no host memory for a tensor");
    for (int i = 0; st == LB_OK && i < m->n_seg; i++) {
        src->read(src->ctx, &t[i], host);
        /* from pageable memory: returns once the data is staged, so host is free again */
        if (cudaMemcpyAsync(m->master + t[i].offset, host, (size_t)t[i].numel * 4,
                            cudaMemcpyHostToDevice, m->stream) != cudaSuccess)
            st = lb_fail(err, LB_ERR_DEVICE, "could not copy tensor %s in", t[i].name);
    }
    free(host);
    free(t);
    return st;
}

lb_status lb_model_gpu_load_params(lb_model_gpu *m, const lb_model_gpu_source *src, lb_err *err) {
    if (m->lora || m->master == NULL) {
        if (m->params != NULL) LB_TRY(working_set(m, src, 0, err));
    } else {
        LB_TRY(master_set(m, src, err));
        LB_TRY(sync_working_copy(m, err));
    }
    LB_TRY(reset_optimizer(m, err));
    return lb_model_gpu_sync(m, err);
}

static void read_host(void *ctx, const lb_param_tensor *t, float *dst) {
    memcpy(dst, (const float *)ctx + t->offset, (size_t)t->numel * sizeof *dst);
}

lb_status lb_model_gpu_set_params(lb_model_gpu *m, const float *host, lb_err *err) {
    lb_model_gpu_source src = {read_host, (void *)host};
    return lb_model_gpu_load_params(m, &src, err);
}

lb_status lb_model_gpu_sync(lb_model_gpu *m, lb_err *err) {
    LB_CUDA_TRY(err, cudaStreamSynchronize(m->stream));
    return LB_OK;
}

static lb_status copy_out(lb_model_gpu *m, float *host, const void *dev, size_t bytes,
                          lb_err *err) {
    LB_CUDA_TRY(err, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, m->stream));
    return lb_model_gpu_sync(m, err);
}

/* LB_ERR_USAGE unless the model has no adapters (want 0) or has them (want 1). */
static lb_status need_lora(const lb_model_gpu *m, bool want, lb_err *err) {
    if ((m->lora != NULL) == want) return LB_OK;
    return lb_fail(err, LB_ERR_USAGE,
                   want ? "the model has no LoRA adapters"
                        : "the model's base is frozen: it has no fp32 master weights or gradients");
}

static float bits16_to_float(uint16_t h, lb_gpu_dtype dt);

/* n 16-bit values packed from the start of x widened to fp32 in place (from the back:
 * element j's float lies at or after the bytes of the 16-bit values still to read). */
static void widen_in_place(float *x, int64_t n, lb_gpu_dtype dt) {
    for (int64_t j = n - 1; j >= 0; j--) {
        uint16_t h;
        memcpy(&h, (const char *)x + 2 * j, 2);
        x[j] = bits16_to_float(h, dt);
    }
}

lb_status lb_model_gpu_get_params(lb_model_gpu *m, float *host, lb_err *err) {
    LB_TRY(need_lora(m, false, err));
    if (m->params == NULL)
        return lb_fail(err, LB_ERR_USAGE, "the model keeps no parameters (external parameters)");
    if (m->master != NULL) return copy_out(m, host, m->master, (size_t)m->n_params * 4, err);
    LB_TRY(copy_out(m, host, m->params, (size_t)m->n_params * m->es, err));
    if (m->dt != LB_DT_F32) widen_in_place(host, m->n_params, m->dt);
    return LB_OK;
}

lb_status lb_model_gpu_set_lora(lb_model_gpu *m, const float *host, lb_err *err) {
    LB_TRY(need_lora(m, true, err));
    LB_TRY(lb_lora_gpu_set(m->lora, host, m->stream, err));
    LB_TRY(reset_optimizer(m, err));
    return lb_model_gpu_sync(m, err);
}

lb_status lb_model_gpu_init_lora(lb_model_gpu *m, uint64_t seed, lb_err *err) {
    LB_TRY(need_lora(m, true, err));
    LB_TRY(lb_lora_gpu_init_weights(m->lora, seed, m->stream, err));
    return reset_optimizer(m, err);
}

lb_status lb_model_gpu_get_lora(lb_model_gpu *m, float *host, bool grads, lb_err *err) {
    LB_TRY(need_lora(m, true, err));
    LB_TRY(lb_lora_gpu_get(m->lora, host, grads, m->stream, err));
    return lb_model_gpu_sync(m, err);
}

int64_t lb_model_gpu_lora_n_params(const lb_model_gpu *m) {
    return m->lora ? lb_lora_gpu_n_params(m->lora) : 0;
}

lb_model_gpu_memory lb_model_gpu_memory_parts(const lb_model_gpu *m) {
    const lb_gpu_arena *a = &m->arena;
    return (lb_model_gpu_memory){.base = (double)lb_gpu_arena_bytes_with_prefix(a, "param."),
                                 .adapters = (double)lb_gpu_arena_bytes_with_prefix(a, "lora."),
                                 .optimizer = (double)lb_gpu_arena_bytes_with_prefix(a, "opt."),
                                 .activations =
                                     (double)(lb_gpu_arena_bytes_with_prefix(a, "act.") +
                                              lb_gpu_arena_bytes_with_prefix(a, "grad."))};
}
/* an fp16 or bf16 value's bits as a float */
static float bits16_to_float(uint16_t h, lb_gpu_dtype dt) {
    if (dt == LB_DT_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, mant = h & 1023;
    float v = e == 0    ? ldexpf((float)mant, -24)
              : e == 31 ? (mant ? NAN : INFINITY)
                        : ldexpf((float)(mant | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* The gradients as fp32, 16-bit ones widened in place. */
lb_status lb_model_gpu_get_grads(lb_model_gpu *m, float *host, lb_err *err) {
    LB_TRY(need_lora(m, false, err));
    if (m->grads == NULL)
        return lb_fail(err, LB_ERR_USAGE, "the model keeps no gradient array (external gradients)");
    LB_TRY(copy_out(m, host, m->grads, (size_t)m->n_params * m->gs, err));
    if (m->gdt != LB_DT_F32) widen_in_place(host, m->n_params, m->gdt);
    return LB_OK;
}
lb_status lb_model_gpu_read_losses(lb_model_gpu *m, float *host, int n, lb_err *err) {
    return copy_out(m, host, m->loss_slots, (size_t)n * 4, err);
}
lb_status lb_model_gpu_read_optstate(lb_model_gpu *m, lb_gpu_optstate *out, lb_err *err) {
    return copy_out(m, (float *)out, m->opt, sizeof *out, err);
}
void *lb_model_gpu_stream(lb_model_gpu *m) {
    return m->stream;
}
const lb_gpu_arena *lb_model_gpu_arena(const lb_model_gpu *m) {
    return &m->arena;
}
int64_t lb_model_gpu_n_params(const lb_model_gpu *m) {
    return m->n_params;
}

/* ---- building blocks ----------------------------------------------------------------- */

static void *W(lb_model_gpu *m, int64_t off) {
    if (off < 0) return NULL;
    if (m->lora) return (char *)m->params + (size_t)lb_lora_gpu_base_index(m->lora, off) * m->es;
    int u = unit_of(m, off);
    return (char *)m->unit_params[u] + (size_t)(off - unit_first(m, u)) * m->es;
}
/* The output head as its products read it ([Vp, C]). */
static const void *head_w(lb_model_gpu *m) {
    return head_apart(m) ? m->lm_w : W(m, m->off.lm_head);
}
/* The gradient slot of the tensor at off (type gdt); a frozen base (LoRA) has none: NULL. */
static void *G(lb_model_gpu *m, int64_t off) {
    if (off < 0 || m->lora) return NULL;
    int u = unit_of(m, off);
    return (char *)m->unit_grads[u] + (size_t)(off - unit_first(m, u)) * m->gs;
}
/* The fp32 sum of the gradient of the 1-D tensor at off (m->small); NULL as G. */
static float *GS(lb_model_gpu *m, int64_t off) {
    if (off < 0 || m->lora) return NULL;
    int lo = 0, hi = m->n_seg - 1; /* the last tensor starting at or before off */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (m->t_off[mid] <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return m->small_at[lo] < 0 ? NULL : m->small + m->small_at[lo] + (off - m->t_off[lo]);
}
/* A layer matrix at absolute offset off as its product reads it: with NF4, dequantised. */
static lb_status matrix_w(lb_model_gpu *m, int64_t off, const void **w, lb_err *err) {
    if (!m->lora) {
        *w = W(m, off);
        return LB_OK;
    }
    int64_t in_layers = off - m->off.layers;
    return lb_lora_gpu_base_weight(m->lora, m->params, (int)(in_layers / m->off.layer_numel),
                                   in_layers % m->off.layer_numel, w, m->stream, err);
}
/* The adapters at base tensor `which` of layer l, run before its base product (which then
 * adds into their output): forward writes y (rows ldy) = *res + the adapters' output of x
 * (rows ldx) and points *res (the residual the base product adds, NULL: none) at y;
 * backward takes dy (rows ldy), writes dx (*wrote_dx). Nothing where no adapter sits. */
static lb_status lora_fwd(lb_model_gpu *m, int l, lb_lora_tensor which, void *y, int64_t ldy,
                          const void **res, const void *x, int64_t ldx, lb_err *err) {
    if (!m->lora) return LB_OK;
    return lb_lora_gpu_forward(m->lora, m->blas, l, which, y, ldy, res, x, ldx, m->stream, err);
}
static lb_status lora_bwd(lb_model_gpu *m, int l, lb_lora_tensor which, void *dx, bool *wrote_dx,
                          const void *dy, int64_t ldy, const void *x, int64_t ldx, lb_err *err) {
    *wrote_dx = false;
    if (!m->lora) return LB_OK;
    return lb_lora_gpu_backward(m->lora, m->blas, l, which, dx, wrote_dx, dy, ldy, x, ldx,
                                m->accumulate, m->stream, err);
}
static void *at(lb_model_gpu *m, void *base, int64_t index, int64_t row_elems) {
    return (char *)base + (size_t)index * (size_t)m->BT * (size_t)row_elems * m->es;
}

/* out[N, OC] (row stride ldo) = inp[N, IC] W^T + bias (+ residual, same stride) */
static lb_status linear_fwd(lb_model_gpu *m, void *out, int64_t ldo, const void *inp, int64_t lda,
                            unsigned cols, int IC, int OC, int64_t w_off, int64_t b_off,
                            const void *residual, lb_err *err) {
    lb_blas_gemm g;
    memset(&g, 0, sizeof g);
    g.m = m->BT, g.n = OC, g.k = IC;
    g.a = inp, g.lda = lda, g.trans_a = cols & COLS_INP;
    LB_TRY(matrix_w(m, w_off, &g.b, err));
    g.ldb = IC, g.trans_b = true;
    g.ab_type = m->dt;
    g.c = residual, g.beta = 1.0f, g.alpha = 1.0f;
    g.d = out, g.ldd = ldo, g.d_type = m->dt;
    g.epilogue = b_off >= 0 ? LB_EPI_BIAS : LB_EPI_NONE;
    g.bias = W(m, b_off);
    return lb_blas_gemm_run(m->blas, &g, m->stream, err);
}

/* dinp[N, IC] = dout W (when dinp; added to what it holds with add_dinp); dW = dout^T inp (written,
 * not added: a layer matrix gets no other gradient, so its gradient is not cleared before the step;
 * in the gradient type, the working type as autocast's products give it); db (its fp32 sum, GS)
 * += column sums of dout when b_off >= 0. inp's rows are ld_inp apart: with ld_inp > IC (ln2 with
 * its ones column, m->ld2) the weight-gradient product runs over IC + ONES_COLS columns into
 * m->aug_grad and its column IC is the bias gradient (lb_act_split_bias_column); else a separate
 * reduction (cuBLASLt's BGRADB epilogue on the dW product ran as an extra, slower pass on the
 * H200). Callers whose bias gradient came out of the kernel that wrote dout pass b_off -1. */
static lb_status linear_bwd(lb_model_gpu *m, void *dinp, bool add_dinp, const void *dout,
                            int64_t ld_dout, const void *inp, int64_t ld_inp, unsigned cols, int IC,
                            int OC, int64_t w_off, int64_t b_off, lb_err *err) {
    bool dout_cols = cols & COLS_DOUT;
    lb_blas_gemm g;
    memset(&g, 0, sizeof g);
    g.ab_type = m->dt, g.alpha = 1.0f;
    if (dinp != NULL) {
        g.m = m->BT, g.n = IC, g.k = OC;
        g.a = dout, g.lda = ld_dout, g.trans_a = dout_cols;
        LB_TRY(matrix_w(m, w_off, &g.b, err));
        g.ldb = IC;
        g.d = dinp, g.ldd = IC, g.d_type = m->dt;
        if (add_dinp) g.c = dinp, g.beta = 1.0f;
        LB_TRY(lb_blas_gemm_run(m->blas, &g, m->stream, err));
    }
    if (m->lora) return LB_OK; /* frozen: no weight or bias gradient */
    bool with_bias = b_off >= 0 && ld_inp > IC;
    int64_t aug = IC + ONES_COLS;
    memset(&g, 0, sizeof g);
    g.ab_type = m->dt, g.alpha = 1.0f;
    g.m = OC, g.n = with_bias ? aug : IC, g.k = m->BT;
    g.a = dout, g.lda = ld_dout, g.trans_a = !dout_cols;
    g.b = inp, g.ldb = ld_inp, g.trans_b = cols & COLS_INP;
    if (with_bias)
        g.d = m->aug_grad, g.ldd = aug, g.d_type = LB_DT_F32;
    else
        g.d = G(m, w_off), g.ldd = IC, g.d_type = m->gdt;
    if (m->accumulate && !with_bias) g.c = g.d, g.beta = 1.0f;
    LB_TRY(lb_blas_gemm_run(m->blas, &g, m->stream, err));
    if (with_bias)
        return lb_act_split_bias_column(G(m, w_off), m->gdt, GS(m, b_off), m->aug_grad, OC, IC, aug,
                                        m->accumulate, m->stream, err);
    if (b_off >= 0 && dout_cols)
        return lb_fail(err, LB_ERR_RUNTIME, "a bias gradient summed over a feature-major gradient");
    if (b_off >= 0)
        LB_TRY(lb_act_bias_backward(GS(m, b_off), dout, m->BT, OC, ld_dout, m->dt, m->stream, err));
    return LB_OK;
}

static lb_status norm_fwd(lb_model_gpu *m, void *out, int64_t ldo, float *mean, float *rstd,
                          const void *inp, int64_t w_off, int64_t b_off, lb_err *err) {
    if (m->llama)
        return lb_norm_rmsnorm_forward(out, rstd, inp, W(m, w_off), m->BT, m->C, m->cfg.norm_eps,
                                       m->dt, m->stream, err);
    return lb_norm_layernorm_forward(out, ldo, mean, rstd, inp, W(m, w_off), W(m, b_off), m->BT,
                                     m->C, m->cfg.norm_eps, m->dt, m->stream, err);
}

/* m->dres += the norm's input gradient; dsum_off >= 0: that parameter's gradient += the
 * column sums of the new m->dres (a bias whose output gradient it is). A frozen base
 * (LoRA): no weight, bias or dsum gradient at all. */
static lb_status norm_bwd(lb_model_gpu *m, const void *dout, const void *inp, const float *mean,
                          const float *rstd, int64_t w_off, int64_t b_off, int64_t dsum_off,
                          lb_err *err) {
    if (m->llama)
        return lb_norm_rmsnorm_backward(m->dres, GS(m, w_off), GS(m, dsum_off), dout, inp,
                                        W(m, w_off), rstd, m->BT, m->C, m->dt, m->stream, err);
    return lb_norm_layernorm_backward(m->dres, GS(m, w_off), GS(m, b_off), GS(m, dsum_off), dout,
                                      inp, W(m, w_off), mean, rstd, m->BT, m->C, m->dt, m->stream,
                                      err);
}

static lb_status act_fwd(lb_model_gpu *m, void *out, const void *inp, lb_err *err) {
    if (m->llama) return lb_act_swiglu_forward(out, inp, m->BT, m->H, m->dt, m->stream, err);
    return lb_act_gelu_forward(out, inp, m->BT * m->H, m->dt, m->stream, err);
}

lb_status lb_model_gpu_attn_forward(lb_model_gpu *m, bool dnn, void *out, float *lse,
                                    const void *qkv, lb_err *err) {
    if (dnn) return lb_cudnn_attn_forward(m->dnn, out, lse, qkv, m->dnn_ws, m->stream, err);
    return lb_attention_forward(out, lse, qkv, m->B, m->T, m->NH, m->NKV, m->HD, m->dt,
                                m->p.attn_scalar ? LB_ATTN_SCALAR : LB_ATTN_AUTO, m->stream, err);
}

lb_status lb_model_gpu_attn_backward(lb_model_gpu *m, bool dnn, const qkv_bias_grad *bg,
                                     const void *qkv, const void *out, const float *lse,
                                     lb_err *err) {
    if (!dnn)
        return lb_attention_backward(m->dqkv, bg ? bg->dbias : NULL, m->attn_scratch, m->dc, qkv,
                                     out, lse, m->B, m->T, m->NH, m->NKV, m->HD, m->dt,
                                     m->p.attn_scalar ? LB_ATTN_SCALAR : LB_ATTN_AUTO, m->stream,
                                     err);
    LB_TRY(
        lb_cudnn_attn_backward(m->dnn, m->dqkv, m->dc, qkv, out, lse, m->dnn_ws, m->stream, err));
    if (bg == NULL) return LB_OK;
    LB_TRY(lb_act_bias_backward(bg->dbias, m->dqkv, m->BT, m->C, m->Q, m->dt, m->stream, err));
    return lb_act_bias_grad_through(bg->dbias + m->C + m->NKV * m->HD, bg->dproj_b, bg->w_proj,
                                    m->C, m->C, m->HD, m->NH / m->NKV, m->dt, m->stream, err);
}

lb_status lb_model_gpu_gelu_forward(lb_model_gpu *m, bool dnn, const lb_blas_gemm *g, lb_err *err) {
    if (dnn)
        return lb_cudnn_gelu_forward(m->gelu_dnn, g->d, g->aux, g->a, g->b, g->bias, m->dnn_ws,
                                     m->stream, err);
    return lb_blas_gemm_run(m->blas, g, m->stream, err);
}

/* ---- one step --------------------------------------------------------------------------- */

static int64_t lo(lb_model_gpu *m, int l, int64_t rel) {
    return rel < 0 ? -1 : m->off.layers + (int64_t)l * m->off.layer_numel + rel;
}

/* The token embedding's working copy: the padded head when they are one tensor kept apart */
static const void *wte_lp(lb_model_gpu *m) {
    return head_apart(m) && m->off.lm_head == m->off.wte ? m->lm_w : W(m, m->off.wte);
}

static lb_status forward(lb_model_gpu *m, float *loss, lb_err *err) {
    const lb_layer_offsets *o = &m->off.layer;
    int C = m->C;
    LB_TRY(param_use(m, 0, false, err));
    LB_TRY(lb_embed_forward(m->encoded, m->tokens, wte_lp(m), W(m, m->off.wpe), m->B, m->T, C,
                            m->dt, m->stream, err));
    for (int l = 0; l < m->L; l++) {
        LB_TRY(param_use(m, 1 + l, false, err));
        int keep = m->p.recompute ? 0 : l;
        const void *x = l == 0 ? m->encoded : at(m, m->res3, l - 1, C);
        void *ln1 = at(m, m->ln1, keep, C), *ln2 = at(m, m->ln2, keep, m->ld2);
        void *qkv = at(m, m->qkv, l, m->Q), *atty = at(m, m->atty, l, C);
        void *res2 = at(m, m->res2, l, C), *res3 = at(m, m->res3, l, C);
        void *fch = at(m, m->fch, l, m->F), *fact = at(m, m->fact, keep, m->H);
        float *lse = m->lse + (size_t)l * m->BT * m->NH;
        LB_TRY(norm_fwd(m, ln1, C, m->ln1_mean ? m->ln1_mean + l * m->BT : NULL,
                        m->ln1_rstd + l * m->BT, x, lo(m, l, o->norm1_w), lo(m, l, o->norm1_b),
                        err));
        const void *res = NULL; /* what each base product adds (beta 1) */
        LB_TRY(lora_fwd(m, l, LB_LORA_IN_QKV, qkv, m->Q, &res, ln1, C, err));
        LB_TRY(linear_fwd(m, qkv, m->Q, ln1, C, 0, C, m->Q, lo(m, l, o->qkv_w), lo(m, l, o->qkv_b),
                          res, err));
        if (m->llama)
            LB_TRY(lb_rope_forward(qkv, m->rope_cs, m->B, m->T, m->NH, m->NKV, m->HD, m->dt,
                                   m->stream, err));
        if (m->attn_src[0] == LB_GPU_ATTN_AUTO)
            LB_TRY(lb_model_gpu_attn_choose(m, false, NULL, qkv, atty, lse, err));
        LB_TRY(
            lb_model_gpu_attn_forward(m, m->attn_src[0] == LB_GPU_ATTN_CUDNN, atty, lse, qkv, err));
        res = x;
        LB_TRY(lora_fwd(m, l, LB_LORA_IN_ATTN_OUT, res2, C, &res, atty, C, err));
        LB_TRY(linear_fwd(m, res2, C, atty, C, 0, C, C, lo(m, l, o->attn_out_w),
                          lo(m, l, o->attn_out_b), res, err));
        LB_TRY(norm_fwd(m, ln2, m->ld2, m->ln2_mean ? m->ln2_mean + l * m->BT : NULL,
                        m->ln2_rstd + l * m->BT, res2, lo(m, l, o->norm2_w), lo(m, l, o->norm2_b),
                        err));
        if (fuse_gelu(m)) {
            lb_blas_gemm g = {.m = m->BT,
                              .n = m->F,
                              .k = C,
                              .a = ln2,
                              .lda = m->ld2,
                              .b = W(m, lo(m, l, o->mlp_in_w)),
                              .ldb = C,
                              .trans_b = true,
                              .ab_type = m->dt,
                              .d = fact,
                              .ldd = m->F,
                              .d_type = m->dt,
                              .alpha = 1.0f,
                              .epilogue = LB_EPI_GELU_AUX_BIAS,
                              .bias = W(m, lo(m, l, o->mlp_in_b)),
                              .aux = fch};
            if (m->gelu_src == LB_GELU_PRODUCT_AUTO) LB_TRY(lb_model_gpu_gelu_choose(m, &g, err));
            LB_TRY(lb_model_gpu_gelu_forward(m, m->gelu_src == LB_GELU_PRODUCT_CUDNN, &g, err));
        } else {
            res = NULL;
            LB_TRY(lora_fwd(m, l, LB_LORA_IN_MLP_IN, fch, m->F, &res, ln2, m->ld2, err));
            LB_TRY(linear_fwd(m, fch, m->F, ln2, m->ld2, 0, C, m->F, lo(m, l, o->mlp_in_w),
                              lo(m, l, o->mlp_in_b), res, err));
            LB_TRY(act_fwd(m, fact, fch, err));
        }
        res = res2;
        LB_TRY(lora_fwd(m, l, LB_LORA_IN_MLP_OUT, res3, C, &res, fact, m->H, err));
        LB_TRY(linear_fwd(m, res3, C, fact, hidden_ld(m, m->H), hidden_cols(m) ? COLS_INP : 0, m->H,
                          C, lo(m, l, o->mlp_out_w), lo(m, l, o->mlp_out_b), res, err));
    }
    LB_TRY(param_use(m, m->L + 1, false, err));
    LB_TRY(norm_fwd(m, m->lnf, C, m->lnf_mean, m->lnf_rstd, at(m, m->res3, m->L - 1, C),
                    m->off.normf_w, m->off.normf_b, err));
    if (unit_of(m, m->off.lm_head) != m->L + 1) /* a tied head is unit 0's wte */
        LB_TRY(param_use(m, unit_of(m, m->off.lm_head), false, err));
    lb_blas_gemm g = {.m = m->BT,
                      .n = m->Vp,
                      .k = C,
                      .a = m->lnf,
                      .lda = C,
                      .b = head_w(m),
                      .ldb = C,
                      .trans_b = true,
                      .ab_type = m->dt,
                      .d = m->logits,
                      .ldd = m->Vp,
                      .d_type = m->dt,
                      .alpha = 1.0f};
    LB_TRY(lb_blas_gemm_run(m->blas, &g, m->stream, err));
    LB_TRY(lb_loss_softmax_xent(m->logits, m->losses, m->targets, m->BT, m->V, m->Vp,
                                m->loss_grad_scale, m->dt == LB_DT_F16 ? &m->opt->loss_scale : NULL,
                                1, m->dt, m->stream, err));
    return lb_loss_mean(loss, m->losses, m->BT, m->stream, err);
}

void lb_model_gpu_set_grad_hook(lb_model_gpu *m, lb_model_gpu_grad_hook fn, void *ctx) {
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

void lb_model_gpu_defer_embed(lb_model_gpu *m, bool on) {
    m->defer_embed = on;
}

const void *lb_model_gpu_embed_rows(const lb_model_gpu *m, const int32_t **ids, int *B, int *T) {
    *ids = m->tokens;
    *B = m->B;
    *T = m->T;
    return m->dres;
}

void *lb_model_gpu_grads(lb_model_gpu *m) {
    int64_t layer_numel;
    return m->lora ? lb_lora_gpu_grads(m->lora, &layer_numel) : m->grads;
}

/* A unit's gradient kernels are all enqueued (layer l's last one is the norm backward that
 * also writes layer l - 1's MLP output bias, so each unit completes in its own turn): its
 * 1-D tensors' sums written into their slots, then the hook told. */
static lb_status grad_done(lb_model_gpu *m, int unit, lb_err *err) {
    int r0 = m->lora ? 0 : m->unit_run[unit], r1 = m->lora ? 0 : m->unit_run[unit + 1];
    if (r1 > r0)
        LB_TRY(lb_adamw_pack_grads(m->unit_grads[unit], m->small, m->small_runs + r0, r1 - r0,
                                   m->unit_longest[unit], m->gdt, m->stream, err));
    return m->grad_hook != NULL ? m->grad_hook(m->grad_hook_ctx, unit, err) : LB_OK;
}

static lb_status backward(lb_model_gpu *m, lb_err *err) {
    const lb_layer_offsets *o = &m->off.layer;
    int C = m->C;
    LB_TRY(param_use(m, unit_of(m, m->off.lm_head), true, err));
    /* output head over the padded width (padding logits' gradients are zero) */
    lb_blas_gemm gi = {.m = m->BT,
                       .n = C,
                       .k = m->Vp,
                       .a = m->logits,
                       .lda = m->Vp,
                       .b = head_w(m),
                       .ldb = C,
                       .ab_type = m->dt,
                       .d = m->dc,
                       .ldd = C,
                       .d_type = m->dt,
                       .alpha = 1.0f};
    LB_TRY(lb_blas_gemm_run(m->blas, &gi, m->stream, err));
    /* The head's gradient, its V real rows, written (not added) straight into the gradient
     * buffer: the first write of the step there. Rows up to a multiple of 64 in one product,
     * the rest in a second: cuBLASLt picks slow kernels for an odd row count (GPT-2's
     * 50,257 rows in one product cost 0.8 ms more a step at 16x1024 on an H200). */
    int64_t Vq = m->lora ? 0 : m->V / 64 * 64; /* a frozen head: no weight gradient */
    lb_blas_gemm gw = {.m = Vq,
                       .n = C,
                       .k = m->BT,
                       .a = m->logits,
                       .lda = m->Vp,
                       .trans_a = true,
                       .b = m->lnf,
                       .ldb = C,
                       .ab_type = m->dt,
                       .d = G(m, m->off.lm_head),
                       .ldd = C,
                       .d_type = m->gdt,
                       .alpha = 1.0f};
    if (m->accumulate) gw.c = gw.d, gw.beta = 1.0f; /* adds to the earlier micro-batches' */
    if (Vq > 0) LB_TRY(lb_blas_gemm_run(m->blas, &gw, m->stream, err));
    if (!m->lora && Vq < m->V) {
        gw.m = m->V - Vq;
        gw.a = (char *)m->logits + (size_t)Vq * m->es;
        gw.d = G(m, m->off.lm_head + Vq * C);
        if (m->accumulate) gw.c = gw.d;
        LB_TRY(lb_blas_gemm_run(m->blas, &gw, m->stream, err));
    }
    LB_CUDA_TRY(err, cudaMemsetAsync(m->dres, 0, (size_t)m->BT * C * m->es, m->stream));
    if (unit_of(m, m->off.lm_head) != m->L + 1) LB_TRY(param_use(m, m->L + 1, true, err));
    /* The two C-wide biases of a layer (attention and MLP output projections) take their
     * gradients from the norm backward that writes their output's gradient: the last
     * layer's MLP one from the final norm, each layer's attention one from its second
     * norm, the layer below's MLP one from its first. */
    LB_TRY(norm_bwd(m, m->dc, at(m, m->res3, m->L - 1, C), m->lnf_mean, m->lnf_rstd, m->off.normf_w,
                    m->off.normf_b, lo(m, m->L - 1, o->mlp_out_b), err));
    LB_TRY(grad_done(m, m->L + 1, err));
    for (int l = m->L - 1; l >= 0; l--) {
        LB_TRY(param_use(m, 1 + l, true, err));
        int keep = m->p.recompute ? 0 : l;
        const void *x = l == 0 ? m->encoded : at(m, m->res3, l - 1, C);
        void *ln1 = at(m, m->ln1, keep, C), *ln2 = at(m, m->ln2, keep, m->ld2);
        void *qkv = at(m, m->qkv, l, m->Q), *atty = at(m, m->atty, l, C);
        void *res2 = at(m, m->res2, l, C);
        void *fch = at(m, m->fch, l, m->F), *fact = at(m, m->fact, keep, m->H);
        float *lse = m->lse + (size_t)l * m->BT * m->NH;
        const float *ln1_mean = m->ln1_mean ? m->ln1_mean + l * m->BT : NULL;
        const float *ln2_mean = m->ln2_mean ? m->ln2_mean + l * m->BT : NULL;
        const float *ln1_rstd = m->ln1_rstd + l * m->BT, *ln2_rstd = m->ln2_rstd + l * m->BT;
        bool add; /* the adapters wrote the input gradient the base product adds to */
        if (m->p.recompute) {
            LB_TRY(act_fwd(m, fact, fch, err));
            LB_TRY(lb_norm_recompute(ln2, m->ld2, res2, W(m, lo(m, l, o->norm2_w)),
                                     W(m, lo(m, l, o->norm2_b)), ln2_mean, ln2_rstd, m->BT, C,
                                     m->dt, m->stream, err));
        }
        /* MLP */
        if (fuse_gelu(m)) { /* dfch = (dres Wout) * gelu'(fch) in one product */
            const void *w_out = W(m, lo(m, l, o->mlp_out_w));
            lb_blas_gemm g = {.ab_type = m->dt,
                              .d = m->dfch,
                              .d_type = m->dt,
                              .alpha = 1.0f,
                              .epilogue = LB_EPI_DGELU,
                              .aux = fch};
            if (hidden_cols(m)) /* dfch^T = Wout^T dres^T */
                g.m = m->H, g.n = m->BT, g.k = C, g.a = w_out, g.lda = m->H, g.trans_a = true,
                g.b = m->dres, g.ldb = C, g.trans_b = true, g.ldd = m->BT;
            else
                g.m = m->BT, g.n = m->H, g.k = C, g.a = m->dres, g.lda = C, g.b = w_out,
                g.ldb = m->H, g.ldd = m->H;
            LB_TRY(lb_blas_gemm_run(m->blas, &g, m->stream, err));
            LB_TRY(linear_bwd(m, NULL, false, m->dres, C, fact, hidden_ld(m, m->H),
                              hidden_cols(m) ? COLS_INP : 0, m->H, C, lo(m, l, o->mlp_out_w), -1,
                              err));
        } else {
            LB_TRY(lora_bwd(m, l, LB_LORA_IN_MLP_OUT, m->dact, &add, m->dres, C, fact, m->H, err));
            LB_TRY(linear_bwd(m, m->dact, add, m->dres, C, fact, m->H, 0, m->H, C,
                              lo(m, l, o->mlp_out_w), -1, err));
            if (m->llama)
                LB_TRY(lb_act_swiglu_backward(m->dfch, m->dact, fch, m->BT, m->H, m->dt, m->stream,
                                              err));
            else
                LB_TRY(lb_act_gelu_backward(m->dfch, fch, m->dact, m->BT * m->H, m->dt, m->stream,
                                            err));
        }
        LB_TRY(lora_bwd(m, l, LB_LORA_IN_MLP_IN, m->dc, &add, m->dfch, m->F, ln2, m->ld2, err));
        LB_TRY(linear_bwd(m, m->dc, add, m->dfch, hidden_ld(m, m->F), ln2, m->ld2,
                          hidden_cols(m) ? COLS_DOUT : 0, C, m->F, lo(m, l, o->mlp_in_w),
                          lo(m, l, o->mlp_in_b), err));
        LB_TRY(norm_bwd(m, m->dc, res2, ln2_mean, ln2_rstd, lo(m, l, o->norm2_w),
                        lo(m, l, o->norm2_b), lo(m, l, o->attn_out_b), err));
        /* attention */
        LB_TRY(lora_bwd(m, l, LB_LORA_IN_ATTN_OUT, m->dc, &add, m->dres, C, atty, C, err));
        LB_TRY(linear_bwd(m, m->dc, add, m->dres, C, atty, C, 0, C, C, lo(m, l, o->attn_out_w), -1,
                          err));
        /* the qkv bias gradient comes with the attention backward, unless RoPE's backward
         * changes dqkv afterwards (Llama: any qkv bias is summed after it, as before) */
        bool qkv_bias_fused = !m->llama && o->qkv_b >= 0 && o->attn_out_b >= 0 && !m->lora;
        qkv_bias_grad bg = {GS(m, lo(m, l, o->qkv_b)), GS(m, lo(m, l, o->attn_out_b)),
                            W(m, lo(m, l, o->attn_out_w))};
        if (m->attn_src[1] == LB_GPU_ATTN_AUTO)
            LB_TRY(lb_model_gpu_attn_choose(m, true, qkv_bias_fused ? &bg : NULL, qkv, atty, lse,
                                            err));
        LB_TRY(lb_model_gpu_attn_backward(m, m->attn_src[1] == LB_GPU_ATTN_CUDNN,
                                          qkv_bias_fused ? &bg : NULL, qkv, atty, lse, err));
        if (m->llama)
            LB_TRY(lb_rope_backward(m->dqkv, m->rope_cs, m->B, m->T, m->NH, m->NKV, m->HD, m->dt,
                                    m->stream, err));
        if (m->p.recompute)
            LB_TRY(lb_norm_recompute(ln1, C, x, W(m, lo(m, l, o->norm1_w)),
                                     W(m, lo(m, l, o->norm1_b)), ln1_mean, ln1_rstd, m->BT, C,
                                     m->dt, m->stream, err));
        /* under adapters the embedding is frozen: the first layer's input gradient has no use */
        void *dln1 = l > 0 || !m->lora ? m->dc : NULL;
        LB_TRY(lora_bwd(m, l, LB_LORA_IN_QKV, dln1, &add, m->dqkv, m->Q, ln1, C, err));
        LB_TRY(linear_bwd(m, dln1, add, m->dqkv, m->Q, ln1, C, 0, C, m->Q, lo(m, l, o->qkv_w),
                          qkv_bias_fused ? -1 : lo(m, l, o->qkv_b), err));
        if (dln1 != NULL)
            LB_TRY(norm_bwd(m, m->dc, x, ln1_mean, ln1_rstd, lo(m, l, o->norm1_w),
                            lo(m, l, o->norm1_b), l > 0 ? lo(m, l - 1, o->mlp_out_b) : -1, err));
        LB_TRY(grad_done(m, 1 + l, err));
    }
    if (m->lora) return LB_OK; /* a frozen embedding */
    if (!m->defer_embed)
        LB_TRY(lb_embed_backward_sorted(G(m, m->off.wte), 0, (int64_t)m->V * C, G(m, m->off.wpe), 0,
                                        (int64_t)m->T * C, m->dres, m->keys, m->key_rows, m->B,
                                        m->T, C, 1.0f, m->dt, m->gdt, m->stream, err));
    return grad_done(m, 0, err);
}

lb_status lb_model_gpu_upload(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                              int slot, lb_err *err) {
    if (slot < 0 || slot >= n_slots(m))
        return lb_fail(err, LB_ERR_RUNTIME, "loss slot %d out of range", slot);
    int k = m->host_idx;
    m->host_idx ^= 1;
    LB_CUDA_TRY(err, cudaEventSynchronize(m->host_done[k]));
    memcpy(m->host_tok[k], inputs, (size_t)m->BT * 4);
    memcpy(m->host_tok[k] + m->BT, targets, (size_t)m->BT * 4);
    if (!m->lora) /* the embedding backward's order */
        lb_ref_embedding_order(inputs, m->BT, m->V, m->host_count, m->host_tok[k] + 2 * m->BT,
                               m->host_tok[k] + 3 * m->BT);
    LB_CUDA_TRY(err, cudaMemcpyAsync(m->tokens, m->host_tok[k], 4 * (size_t)m->BT * 4,
                                     cudaMemcpyHostToDevice, m->stream));
    LB_CUDA_TRY(err, cudaEventRecord(m->host_done[k], m->stream));
    return LB_OK;
}

static lb_status clear_forward_backward(lb_model_gpu *m, float *loss, lb_err *err) {
    for (int i = 0; m->grads != NULL && !m->accumulate && i < m->n_clear; i++)
        LB_CUDA_TRY(err, cudaMemsetAsync((char *)m->grads + (size_t)m->clear[i][0] * m->gs, 0,
                                         (size_t)m->clear[i][1] * m->gs, m->stream));
    if (m->n_small > 0 && !m->accumulate)
        LB_CUDA_TRY(err, cudaMemsetAsync(m->small, 0, (size_t)m->n_small * 4, m->stream));
    LB_TRY(forward(m, loss, err));
    return backward(m, err);
}

lb_status lb_model_gpu_forward_backward(lb_model_gpu *m, const int32_t *inputs,
                                        const int32_t *targets, int slot, lb_err *err) {
    LB_TRY(lb_model_gpu_upload(m, inputs, targets, slot, err));
    return clear_forward_backward(m, m->loss_slots + slot, err);
}

static lb_status optimizer(lb_model_gpu *m, const lb_gpu_adamw_params *p, lb_err *err) {
    if (m->p.external_optimizer)
        return lb_fail(err, LB_ERR_USAGE, "the model's optimizer is external: it runs none");
    lb_gpu_adamw_params q = *p;
    q.dynamic_scaling = m->dt == LB_DT_F16;
    if (q.growth_interval <= 0) q.growth_interval = 2000;
    if (m->lora) return lb_lora_gpu_optimizer(m->lora, &q, m->opt, m->stream, err);
    lb_gpu_segments sg = {m->seg_start, m->seg_flags, m->n_seg, m->n_params, m->gdt != LB_DT_F32};
    LB_TRY(lb_adamw_grad_sumsq(m->opt, m->grads, m->dt, &sg, m->stream, err));
    lb_gpu_lp_apart head;
    bool apart = lb_model_gpu_head_apart(m, &head);
    LB_TRY(lb_adamw(m->master, m->dt == LB_DT_F32 ? NULL : m->params, apart ? &head : NULL, m->dt,
                    m->grads, m->m, m->v, &sg, 0, sg.n, &q, m->opt, m->stream, err));
    return lb_adamw_finish(m->opt, &q, m->stream, err);
}

lb_status lb_model_gpu_step(lb_model_gpu *m, float *loss, const lb_gpu_adamw_params *p,
                            lb_err *err) {
    LB_TRY(clear_forward_backward(m, loss, err));
    return optimizer(m, p, err);
}

/* The micro-batch's work after its upload, its mean loss to *loss. */
static lb_status micro_work(lb_model_gpu *m, float *loss, int micro, int n_micro,
                            const lb_gpu_adamw_params *p, lb_err *err) {
    m->accumulate = micro > 0 && !m->p.external_grads;
    m->loss_grad_scale = 1.0f / ((float)m->BT * (float)n_micro);
    lb_status st = clear_forward_backward(m, loss, err);
    m->accumulate = false;
    m->loss_grad_scale = 1.0f / (float)m->BT;
    LB_TRY(st);
    if (micro < n_micro - 1 || p == NULL) return LB_OK;
    return optimizer(m, p, err);
}

static lb_status check_micro(int micro, int n_micro, lb_err *err) {
    if (n_micro < 1 || micro < 0 || micro >= n_micro)
        return lb_fail(err, LB_ERR_USAGE, "micro-batch %d of %d: expected 0 to %d", micro, n_micro,
                       n_micro - 1);
    return LB_OK;
}

lb_status lb_model_gpu_train_micro(lb_model_gpu *m, const int32_t *inputs, const int32_t *targets,
                                   int slot, int micro, int n_micro, const lb_gpu_adamw_params *p,
                                   lb_err *err) {
    LB_TRY(check_micro(micro, n_micro, err));
    LB_TRY(lb_model_gpu_upload(m, inputs, targets, slot, err));
    return micro_work(m, m->loss_slots + slot, micro, n_micro, p, err);
}

lb_status lb_model_gpu_micro(lb_model_gpu *m, int micro, int n_micro, const lb_gpu_adamw_params *p,
                             lb_err *err) {
    LB_TRY(check_micro(micro, n_micro, err));
    return micro_work(m, m->loss_slots + n_slots(m), micro, n_micro, p, err);
}

lb_status lb_model_gpu_keep_loss(lb_model_gpu *m, int slot, lb_err *err) {
    if (slot < 0 || slot >= n_slots(m))
        return lb_fail(err, LB_ERR_RUNTIME, "loss slot %d out of range", slot);
    LB_CUDA_TRY(err, cudaMemcpyAsync(m->loss_slots + slot, m->loss_slots + n_slots(m),
                                     sizeof(float), cudaMemcpyDeviceToDevice, m->stream));
    return LB_OK;
}

#endif
