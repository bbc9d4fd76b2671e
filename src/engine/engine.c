/* engine.c: requests, the step loop and sampling around a backend (engine.h).
 *
 * A step: the scheduler plans (sched.h); the batch is laid out in the planned order
 * (each sequence's tokens contiguous, its block table one row); the backend runs it;
 * every sequence whose cached tokens reached its known tokens samples one token (the
 * backend's argmax when greedy, lb_sample_token on its logits row otherwise) and ends at
 * max_tokens or an end-of-sequence id. */
#include "engine/engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine/sched.h"

typedef struct {
    lb_seq seq;
    lb_sampling sampling;
    lb_rng rng;
    int32_t eos[LB_ENGINE_MAX_EOS];
    int n_eos;
    bool ignore_eos;
} request;

struct lb_engine {
    lb_engine_params p;
    lb_model_config cfg;
    lb_backend *be;
    lb_sched sched;
    lb_engine_info info;
    int64_t next_id;
    request **reqs; /* every pending request */
    int32_t n_reqs, cap_reqs;
    /* step buffers, sized for step_tokens tokens and max_seqs sequences */
    int32_t *tokens, *pos, *seq_of, *block_table, *out_token, *argmax;
    uint8_t *out_full;
    int32_t max_blocks;
    float *logits; /* [max_seqs, V] */
    void *scratch; /* sampling */
    lb_engine_event *events;
};

void lb_engine_family_ids(const lb_model_config *cfg, int32_t *bos_id, int32_t *eos_ids,
                          int *n_eos) {
    static const int32_t llama3_eos[] = {128001, 128008, 128009};
    *bos_id = -1;
    *n_eos = 0;
    if (cfg->family == LB_FAMILY_LLAMA && cfg->vocab_size > 128009) {
        *bos_id = 128000;
        for (size_t i = 0; i < sizeof llama3_eos / sizeof llama3_eos[0]; i++)
            eos_ids[(*n_eos)++] = llama3_eos[i];
    }
}

lb_engine_params lb_engine_default_params(void) {
    return (lb_engine_params){.device = LB_ENGINE_GPU,
                              .block_size = 16,
                              .max_seqs = 256,
                              .step_tokens = 8192,
                              .max_ctx = 0,
                              .kv_tokens = 0,
                              .gpu_memory_fraction = 0.9,
                              .device_index = 0};
}

void lb_engine_random_tensor(const lb_model_config *cfg, const lb_param_tensor *t, uint64_t seed,
                             float *dst) {
    (void)cfg;
    if (t->ndim == 1) {
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] = 1.0f;
        return;
    }
    lb_rng rng;
    lb_rng_seed(&rng, seed ^ ((uint64_t)t->offset * 0x9e3779b97f4a7c15ull));
    for (int64_t i = 0; i < t->numel; i++)
        dst[i] = (float)(0.02 * lb_rng_normal(&rng));
}

lb_status lb_engine_open(lb_engine **out, const lb_engine_params *pin, const lb_weights *w,
                         lb_err *err) {
    *out = NULL;
    lb_engine_params p = *pin;
    if (p.max_ctx <= 0) p.max_ctx = w->cfg.max_seq < 8192 ? w->cfg.max_seq : 8192;
    if (p.max_ctx > w->cfg.max_seq)
        return lb_fail(err, LB_ERR_USAGE, "--max-ctx %d exceeds the model's context of %d tokens",
                       p.max_ctx, w->cfg.max_seq);
    if (p.block_size < 1 || p.max_seqs < 1 || p.step_tokens < p.max_seqs)
        return lb_fail(err, LB_ERR_USAGE,
                       "the engine needs blocks of at least 1 token, at least 1 sequence and a "
                       "step budget of at least --max-seqs tokens");
    if (p.kv_tokens <= 0 && p.device == LB_ENGINE_CPU)
        p.kv_tokens = (int64_t)p.max_seqs * p.max_ctx;
    if (p.kv_tokens > (int64_t)(INT32_MAX - 1) * p.block_size) /* blocks count in int32_t */
        return lb_fail(err, LB_ERR_USAGE,
                       "a KV cache of %lld tokens (--kv-tokens; on the CPU by default --max-seqs "
                       "x --max-ctx) is more than %d blocks of %d tokens: give fewer tokens or "
                       "a larger --block-size",
                       (long long)p.kv_tokens, INT32_MAX - 1, p.block_size);
    lb_engine *e = calloc(1, sizeof *e);
    if (e == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    e->p = p;
    e->cfg = w->cfg;
    lb_status st = p.device == LB_ENGINE_GPU ? lb_engine_gpu_open(&e->be, w, &p, err)
                                             : lb_engine_cpu_open(&e->be, w, &p, err);
    lb_sched_params sp = {
        .max_seqs = p.max_seqs, .step_tokens = p.step_tokens, .max_ctx = p.max_ctx};
    if (st == LB_OK) st = lb_sched_init(&e->sched, &sp, e->be->n_blocks, p.block_size, err);
    e->max_blocks = (p.max_ctx + p.block_size - 1) / p.block_size;
    int64_t V = w->cfg.vocab_size;
    if (st == LB_OK) {
        size_t T = (size_t)p.step_tokens, S = (size_t)p.max_seqs;
        e->tokens = malloc(T * sizeof(int32_t));
        e->pos = malloc(T * sizeof(int32_t));
        e->seq_of = malloc(T * sizeof(int32_t));
        e->block_table = malloc(S * (size_t)e->max_blocks * sizeof(int32_t));
        e->out_token = malloc(T * sizeof(int32_t));
        e->argmax = malloc(T * sizeof(int32_t));
        e->out_full = malloc(T);
        e->logits = malloc(S * (size_t)V * sizeof(float));
        e->scratch = malloc((size_t)V * 2 * sizeof(float));
        e->events = malloc(S * sizeof *e->events);
        if (!e->tokens || !e->pos || !e->seq_of || !e->block_table || !e->out_token || !e->argmax ||
            !e->out_full || !e->logits || !e->scratch || !e->events)
            st = lb_fail(err, LB_ERR_NOMEM, "out of memory for the engine's step buffers");
    }
    if (st != LB_OK) {
        lb_engine_close(e);
        return st;
    }
    e->info = (lb_engine_info){.backend = e->be->name,
                               .weight_bytes = e->be->weight_bytes,
                               .kv_tokens = (int64_t)e->be->n_blocks * p.block_size,
                               .kv_bytes = e->be->kv_bytes,
                               .block_size = p.block_size,
                               .max_seqs = p.max_seqs,
                               .step_tokens = p.step_tokens,
                               .max_ctx = p.max_ctx};
    *out = e;
    return LB_OK;
}

static void free_request(request *r) {
    lb_sched_seq_free(&r->seq);
    free(r);
}

void lb_engine_close(lb_engine *e) {
    if (e == NULL) return;
    for (int32_t i = 0; i < e->n_reqs; i++)
        free_request(e->reqs[i]);
    free(e->reqs);
    lb_sched_free(&e->sched);
    if (e->be) e->be->close(e->be);
    free(e->tokens);
    free(e->pos);
    free(e->seq_of);
    free(e->block_table);
    free(e->out_token);
    free(e->argmax);
    free(e->out_full);
    free(e->logits);
    free(e->scratch);
    free(e->events);
    free(e);
}

const lb_engine_info *lb_engine_get_info(const lb_engine *e) {
    return &e->info;
}

const lb_model_config *lb_engine_config(const lb_engine *e) {
    return &e->cfg;
}

int32_t lb_engine_pending(const lb_engine *e) {
    return e->n_reqs;
}

void lb_engine_kv_blocks(const lb_engine *e, int32_t *n_free, int32_t *n_total) {
    *n_free = e->sched.kv.n_free;
    *n_total = e->sched.kv.n_blocks;
}

lb_status lb_engine_submit(lb_engine *e, const int32_t *prompt, int32_t n,
                           const lb_engine_request *r, int64_t *id, lb_err *err) {
    if (r->max_tokens < 1) return lb_fail(err, LB_ERR_USAGE, "max_tokens must be at least 1");
    if (r->n_eos < 0 || r->n_eos > LB_ENGINE_MAX_EOS)
        return lb_fail(err, LB_ERR_USAGE,
                       "a request names %d end-of-sequence ids; the engine takes 0 to %d", r->n_eos,
                       LB_ENGINE_MAX_EOS);
    for (int32_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= e->cfg.vocab_size)
            return lb_fail(err, LB_ERR_USAGE,
                           "prompt token %d is id %d, outside the vocabulary of %d", i, prompt[i],
                           e->cfg.vocab_size);
    if (e->n_reqs == e->cap_reqs) {
        int32_t cap = e->cap_reqs ? 2 * e->cap_reqs : 64;
        request **q = realloc(e->reqs, (size_t)cap * sizeof *q);
        if (q == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        e->reqs = q;
        e->cap_reqs = cap;
    }
    request *q = calloc(1, sizeof *q);
    if (q == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    q->seq.id = e->next_id;
    q->seq.user = q;
    q->seq.max_new = r->max_tokens;
    q->seq.n_prompt = n;
    q->sampling = r->sampling;
    lb_rng_seed(&q->rng, r->sampling.seed);
    q->ignore_eos = r->ignore_eos;
    for (int i = 0; i < r->n_eos; i++)
        q->eos[q->n_eos++] = r->eos_ids[i];
    lb_status st = LB_OK;
    for (int32_t i = 0; i < n && st == LB_OK; i++)
        st = lb_sched_seq_push(&q->seq, prompt[i], err);
    if (st == LB_OK) st = lb_sched_add(&e->sched, &q->seq, err);
    if (st != LB_OK) {
        free_request(q);
        return st;
    }
    e->reqs[e->n_reqs++] = q;
    *id = e->next_id++;
    return LB_OK;
}

static void drop(lb_engine *e, request *q) {
    lb_sched_finish(&e->sched, &q->seq);
    for (int32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i] == q) {
            e->reqs[i] = e->reqs[--e->n_reqs];
            break;
        }
    free_request(q);
}

void lb_engine_cancel(lb_engine *e, int64_t id) {
    for (int32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->seq.id == id) {
            drop(e, e->reqs[i]);
            return;
        }
}

/* Lays the planned step out as a batch. */
static void build_batch(lb_engine *e, lb_engine_batch *b) {
    const lb_sched *s = &e->sched;
    int32_t n = 0, n_out = 0;
    for (int32_t k = 0; k < s->n_step; k++) {
        const lb_seq *q = s->step_seq[k];
        int32_t take = s->step_take[k];
        for (int32_t j = 0; j < take; j++) {
            e->tokens[n] = q->tokens[q->n_computed + j];
            e->pos[n] = q->n_computed + j;
            e->seq_of[n] = k;
            n++;
        }
        memcpy(e->block_table + (size_t)k * e->max_blocks, q->blocks,
               (size_t)q->n_blocks * sizeof(int32_t));
        if (q->n_computed + take == q->n_tokens) {
            const request *r = q->user;
            e->out_token[n_out] = n - 1;
            e->out_full[n_out++] = r == NULL || !lb_sampling_greedy(&r->sampling);
        }
    }
    *b = (lb_engine_batch){.n_tokens = n,
                           .tokens = e->tokens,
                           .pos = e->pos,
                           .seq_of = e->seq_of,
                           .n_seqs = s->n_step,
                           .block_table = e->block_table,
                           .max_blocks = e->max_blocks,
                           .n_out = n_out,
                           .out_token = e->out_token,
                           .out_full = e->out_full};
}

lb_status lb_engine_step(lb_engine *e, const lb_engine_event **events, int32_t *n_events,
                         lb_err *err) {
    *events = e->events;
    *n_events = 0;
    const int64_t t0 = lb_clock_now_ns();
    if (lb_sched_plan(&e->sched) == 0) return LB_OK;
    lb_engine_batch b;
    build_batch(e, &b);
    LB_TRY(e->be->forward(e->be, &b, e->argmax, e->logits, err));
    e->info.steps++;
    e->info.forward_tokens += b.n_tokens;
    e->info.preemptions = e->sched.preemptions;
    e->info.prepare_ns = e->be->prepare_ns;
    const bool decodes_only = b.n_tokens == b.n_seqs && b.n_out == b.n_tokens;
    lb_sched_advance(&e->sched);
    /* the planned sequences that sample, in batch order; ending one (drop) changes the
     * running list and frees it, not the step arrays read here */
    int32_t o = 0;
    const int64_t V = e->cfg.vocab_size;
    int32_t n_step = e->sched.n_step;
    for (int32_t k = 0; k < n_step; k++) {
        lb_seq *q = e->sched.step_seq[k];
        if (q->n_computed != q->n_tokens) continue;
        request *r = q->user;
        int32_t tok = b.out_full[o] ? lb_sample_token(e->logits + (size_t)o * V, (int32_t)V,
                                                      &r->sampling, &r->rng, e->scratch)
                                    : e->argmax[o];
        o++;
        LB_TRY(lb_sched_seq_push(q, tok, err));
        lb_finish fin = LB_FINISH_NONE;
        if (q->n_tokens - q->n_prompt >= q->max_new) fin = LB_FINISH_LENGTH;
        for (int i = 0; i < r->n_eos && !r->ignore_eos; i++)
            if (tok == r->eos[i]) fin = LB_FINISH_STOP;
        e->events[(*n_events)++] = (lb_engine_event){q->id, tok, fin};
        if (fin != LB_FINISH_NONE) drop(e, r);
    }
    const int64_t took = lb_clock_now_ns() - t0;
    if (decodes_only) {
        e->info.decode_steps++;
        e->info.decode_ns += took;
    } else {
        e->info.prefill_steps++;
        e->info.prefill_ns += took;
    }
    return LB_OK;
}

lb_status lb_engine_warmup(lb_engine *e, int32_t max_prompt, lb_err *err) {
    if (e->n_reqs > 0) return lb_fail(err, LB_ERR_USAGE, "the engine is busy");
    if (e->be->warmup == NULL) return LB_OK;
    const int64_t before = e->be->prepare_ns, t = lb_clock_now_ns();
    lb_status st = e->be->warmup(e->be, max_prompt, err);
    e->be->prepare_ns = before;
    LB_INFO("engine warm-up (decode graphs, prefill plans up to %d tokens): %.2f s",
            max_prompt < e->p.step_tokens ? max_prompt : e->p.step_tokens,
            (double)(lb_clock_now_ns() - t) / 1e9);
    return st;
}

lb_status lb_engine_logits(lb_engine *e, const int32_t *prompt, int32_t n, float *out,
                           lb_err *err) {
    if (e->n_reqs > 0) return lb_fail(err, LB_ERR_USAGE, "the engine is busy");
    if (n > e->p.step_tokens || n > e->p.max_ctx || n > e->p.max_seqs)
        return lb_fail(err, LB_ERR_USAGE,
                       "%d tokens exceed one step of %d, the context of %d or the %d rows of "
                       "logits a step returns",
                       n, e->p.step_tokens, e->p.max_ctx, e->p.max_seqs);
    lb_seq q = {.id = -1, .n_prompt = n, .max_new = 0}; /* nothing sampled: n may be max_ctx */
    lb_status st = LB_OK;
    for (int32_t i = 0; i < n && st == LB_OK; i++)
        st = lb_sched_seq_push(&q, prompt[i], err);
    int32_t *argmax = malloc((size_t)n * sizeof *argmax);
    if (st == LB_OK && argmax == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = lb_sched_add(&e->sched, &q, err);
    if (st == LB_OK && lb_sched_plan(&e->sched) != 1) {
        lb_sched_finish(&e->sched, &q);
        st = lb_fail(err, LB_ERR_NOMEM, "the KV cache cannot hold %d tokens", n);
    }
    if (st == LB_OK) {
        lb_engine_batch b;
        build_batch(e, &b);
        uint8_t *full = malloc((size_t)n);
        int32_t *rows = malloc((size_t)n * sizeof *rows);
        if (full == NULL || rows == NULL) {
            st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
        } else {
            for (int32_t i = 0; i < n; i++) {
                full[i] = 1;
                rows[i] = i;
            }
            b.n_out = n;
            b.out_token = rows;
            b.out_full = full;
            st = e->be->forward(e->be, &b, argmax, out, err);
        }
        free(full);
        free(rows);
        lb_sched_finish(&e->sched, &q);
    }
    free(argmax);
    lb_sched_seq_free(&q);
    return st;
}

static void read_engine(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    lb_backend *be = ctx;
    be->read(be, t, dt, dst);
}

lb_weights lb_engine_weights(lb_engine *e) {
    return (lb_weights){.cfg = e->cfg, .ctx = e->be, .read = read_engine};
}
