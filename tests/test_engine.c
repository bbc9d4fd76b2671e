/* The engine on the CPU backend: the KV block pool, the scheduler (join and leave,
 * chunked prefill, preemption, every block free at the end, a prompt passed over by
 * shorter ones in one step at most, a Server-like mixed stream served with bounded waits
 * and every block free at the end), the logits of a paged forward against model.h's
 * reference forward, greedy generation against recomputing the whole sequence each token,
 * the same output alone and inside a large mixed batch under a small cache, a cache of
 * more blocks than it counts refused, the logits of a whole context, and the sampler's
 * distributions (greedy at a temperature too small to divide by, a NaN logit never chosen
 * by it or the CPU's greedy, top_p keeping at least the likeliest token, every mode's
 * draws against a reference that sorts, ties at the cuts' edges included). */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/kvcache.h"
#include "engine/sched.h"
#include "model/model.h"

#if defined(__SANITIZE_ADDRESS__)
/* Under AddressSanitizer an allocation that cannot be served returns NULL, as glibc's does,
 * instead of ending the program: test_engine_a_cpu_cache_too_big_for_memory_is_named makes
 * one. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

static void test_kv_blocks_hand_out_each_block_once(void **state) {
    (void)state;
    lb_kv_blocks kv;
    lb_err err;
    assert_int_equal(lb_kvcache_init(&kv, 4, 16, &err), LB_OK);
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        int32_t b = lb_kvcache_take(&kv);
        assert_true(b >= 0 && b < 4);
        assert_false(seen & (1 << b));
        seen |= 1 << b;
    }
    assert_int_equal(lb_kvcache_take(&kv), -1);
    lb_kvcache_give(&kv, 2);
    assert_int_equal(kv.n_free, 1);
    assert_int_equal(lb_kvcache_take(&kv), 2);
    assert_int_equal(lb_kvcache_blocks_for(&kv, 17), 2);
    assert_int_equal(lb_kvcache_blocks_for(&kv, 16), 1);
    lb_kvcache_free(&kv);
}

static void seq_init(lb_seq *q, int64_t id, int32_t n_prompt, int32_t max_new) {
    memset(q, 0, sizeof *q);
    q->id = id;
    q->n_prompt = n_prompt;
    q->max_new = max_new;
    lb_err err;
    for (int32_t i = 0; i < n_prompt; i++)
        assert_int_equal(lb_sched_seq_push(q, i % 7, &err), LB_OK);
}

static const lb_seq *waiting_head(const lb_sched *s) {
    return s->waiting[s->head];
}

static int32_t take_of(const lb_sched *s, const lb_seq *q) {
    for (int32_t i = 0; i < s->n_step; i++)
        if (s->step_seq[i] == q) return s->step_take[i];
    return 0;
}

static void test_sched_chunks_prefill_and_puts_decodes_first(void **state) {
    (void)state;
    lb_sched s;
    lb_err err;
    lb_sched_params p = {.max_seqs = 4, .step_tokens = 10, .max_ctx = 64};
    assert_int_equal(lb_sched_init(&s, &p, 64, 4, &err), LB_OK);
    lb_seq a, b;
    seq_init(&a, 0, 3, 4);
    seq_init(&b, 1, 25, 4);
    assert_int_equal(lb_sched_add(&s, &a, &err), LB_OK);
    assert_int_equal(lb_sched_add(&s, &b, &err), LB_OK);
    assert_int_equal(lb_sched_plan(&s), 2);
    assert_int_equal(take_of(&s, &a), 3); /* a's whole prompt */
    assert_int_equal(take_of(&s, &b), 7); /* the rest of the budget: a chunk of b */
    lb_sched_advance(&s);
    assert_int_equal(lb_sched_seq_push(&a, 5, &err), LB_OK); /* a sampled */
    assert_int_equal(lb_sched_plan(&s), 2);
    assert_int_equal(s.step_seq[0], &a); /* the decode first */
    assert_int_equal(take_of(&s, &a), 1);
    assert_int_equal(take_of(&s, &b), 9);
    lb_sched_advance(&s);
    assert_int_equal(b.n_computed, 16);
    assert_int_equal(b.n_blocks, 4);
    lb_sched_finish(&s, &a);
    lb_sched_finish(&s, &b);
    assert_int_equal(s.kv.n_free, 64);
    lb_sched_seq_free(&a);
    lb_sched_seq_free(&b);
    lb_sched_free(&s);
}

/* A prompt that fits a step but not what is left of this one waits, while a later one
 * that fits whole goes first; with no prompt tokens in a step the head is cut. */
static void test_sched_admits_whole_prompts_first_fit(void **state) {
    (void)state;
    lb_sched s;
    lb_err err;
    lb_sched_params p = {.max_seqs = 8, .step_tokens = 10, .max_ctx = 64};
    assert_int_equal(lb_sched_init(&s, &p, 64, 4, &err), LB_OK);
    lb_seq a, b, c, d;
    seq_init(&a, 0, 6, 4);
    seq_init(&b, 1, 7, 4);
    seq_init(&c, 2, 3, 4);
    seq_init(&d, 3, 9, 4);
    lb_seq *all[4] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; i++)
        assert_int_equal(lb_sched_add(&s, all[i], &err), LB_OK);
    /* a whole; b (7) does not fit the 4 left, c (3) does; 1 token stays unused */
    assert_int_equal(lb_sched_plan(&s), 2);
    assert_int_equal(take_of(&s, &a), 6);
    assert_int_equal(take_of(&s, &c), 3);
    assert_int_equal(b.state, LB_SEQ_WAITING);
    assert_int_equal(s.n_waiting, 2);
    assert_ptr_equal(waiting_head(&s), &b); /* b keeps its place ahead of d */
    lb_sched_advance(&s);
    assert_int_equal(lb_sched_seq_push(&a, 1, &err), LB_OK);
    assert_int_equal(lb_sched_seq_push(&c, 1, &err), LB_OK);
    /* two decodes, b whole (7); d (9) does not fit the 1 left and nothing else does */
    assert_int_equal(lb_sched_plan(&s), 3);
    assert_int_equal(take_of(&s, &b), 7);
    assert_int_equal(d.state, LB_SEQ_WAITING);
    lb_sched_advance(&s);
    for (int i = 0; i < 3; i++) /* a, b and c sampled */
        assert_int_equal(lb_sched_seq_push(all[i], 1, &err), LB_OK);
    /* three decodes and no prompt tokens: d is cut to the 7 left */
    assert_int_equal(lb_sched_plan(&s), 4);
    assert_int_equal(take_of(&s, &d), 7);
    for (int i = 0; i < 4; i++) {
        lb_sched_finish(&s, all[i]);
        lb_sched_seq_free(all[i]);
    }
    assert_int_equal(s.kv.n_free, 64);
    lb_sched_free(&s);
}

static void test_sched_preempts_the_newest_when_blocks_run_out(void **state) {
    (void)state;
    lb_sched s;
    lb_err err;
    lb_sched_params p = {.max_seqs = 4, .step_tokens = 64, .max_ctx = 16};
    /* 4 blocks of 4 tokens: two sequences of 8 fill the cache */
    assert_int_equal(lb_sched_init(&s, &p, 4, 4, &err), LB_OK);
    lb_seq a, b, big;
    seq_init(&big, 9, 14, 4);
    assert_int_equal(lb_sched_add(&s, &big, &err), LB_ERR_USAGE); /* 18 > max_ctx 16 */
    assert_non_null(strstr(err.msg, "context of 16"));
    lb_sched_seq_free(&big);
    seq_init(&a, 0, 8, 8);
    seq_init(&b, 1, 8, 8);
    assert_int_equal(lb_sched_add(&s, &a, &err), LB_OK);
    assert_int_equal(lb_sched_add(&s, &b, &err), LB_OK);
    assert_int_equal(lb_sched_plan(&s), 2);
    lb_sched_advance(&s);
    assert_int_equal(s.kv.n_free, 0);
    {
        assert_int_equal(lb_sched_seq_push(&a, 1, &err), LB_OK);
        assert_int_equal(lb_sched_seq_push(&b, 1, &err), LB_OK);
    }
    /* a needs a fifth block: b, the newest, is preempted and waits at the head */
    assert_int_equal(lb_sched_plan(&s), 1);
    assert_int_equal(s.step_seq[0], &a);
    assert_int_equal(b.state, LB_SEQ_WAITING);
    assert_int_equal(b.n_computed, 0);
    assert_int_equal(b.preempted, 1);
    assert_int_equal(s.preemptions, 1);
    lb_sched_advance(&s);
    lb_sched_finish(&s, &a);
    /* b comes back and recomputes its prompt and its generated token */
    assert_int_equal(lb_sched_plan(&s), 1);
    assert_int_equal(take_of(&s, &b), 9);
    lb_sched_finish(&s, &b);
    assert_int_equal(s.kv.n_free, 4);
    lb_sched_seq_free(&a);
    lb_sched_seq_free(&b);
    lb_sched_free(&s);
}

/* Drives requests through the scheduler alone, a step at a time: request i (id i) is
 * added at step arrive[i] (in index order within a step); a planned sequence that has
 * computed all its tokens "samples" one and ends after max_new. first[i] gets the step of
 * request i's first token. Checks that no request is admitted ahead of a waiting one that
 * was passed over in an earlier step. Returns the steps run until every request ended, -1
 * if the scheduler planned nothing while some were pending. */
static int64_t run_stream(lb_sched *s, lb_seq *seq, const int64_t *arrive, int64_t *first, int n) {
    lb_err err;
    int added = 0, done = 0;
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        first[i] = -1;
    for (; done < n; t++) {
        while (added < n && arrive[added] <= t)
            assert_int_equal(lb_sched_add(s, &seq[added++], &err), LB_OK);
        /* the queue before the step: nothing may be admitted ahead of one passed over */
        static lb_seq *queue[4096];
        static bool was_passed[4096];
        const int32_t n_queue = s->n_waiting < 4096 ? s->n_waiting : 4096;
        for (int32_t k = 0; k < n_queue; k++) {
            queue[k] = s->waiting[(s->head + k) % s->cap_waiting];
            was_passed[k] = queue[k]->passed;
        }
        if (lb_sched_plan(s) == 0 && added == n) return -1;
        bool blocked = false;
        for (int32_t k = 0; k < n_queue; k++) {
            if (queue[k]->state == LB_SEQ_RUNNING) assert_false(blocked);
            blocked |= was_passed[k] && queue[k]->state == LB_SEQ_WAITING;
        }
        lb_sched_advance(s);
        const int32_t n_step = s->n_step;
        lb_seq *planned[64];
        assert_true(n_step <= 64);
        memcpy(planned, s->step_seq, (size_t)n_step * sizeof *planned);
        for (int32_t k = 0; k < n_step; k++) {
            lb_seq *q = planned[k];
            if (q->n_computed != q->n_tokens) continue;
            assert_int_equal(lb_sched_seq_push(q, 1, &err), LB_OK);
            if (first[q->id] < 0) first[q->id] = t;
            if (q->n_tokens - q->n_prompt == q->max_new) {
                lb_sched_finish(s, q);
                done++;
            }
        }
    }
    return t;
}

/* A prompt that fits a step but not what the decodes leave, under a steady stream of
 * short prompts that do: passed over once, it is admitted (cut to what is left) the next
 * step, however long the stream. */
static void test_sched_a_passed_over_prompt_waits_a_bounded_time(void **state) {
    (void)state;
    const int lens[2] = {100, 1000};
    for (int r = 0; r < 2; r++) {
        const int n = lens[r] + 1, at = 10; /* the long prompt is request `at` */
        lb_sched s;
        lb_err err;
        lb_sched_params p = {.max_seqs = 16, .step_tokens = 16, .max_ctx = 64};
        assert_int_equal(lb_sched_init(&s, &p, 256, 4, &err), LB_OK);
        lb_seq *seq = calloc((size_t)n, sizeof *seq);
        int64_t *arrive = calloc((size_t)n, sizeof *arrive);
        int64_t *first = calloc((size_t)n, sizeof *first);
        assert_non_null(seq);
        assert_non_null(arrive);
        assert_non_null(first);
        /* a short prompt (4 tokens, 4 to generate) each step: 3 decodes run beside each
         * one, leaving 13 tokens; the long one (14) arrives at step 10, before that step's
         * short one */
        for (int i = 0; i < n; i++) {
            seq_init(&seq[i], i, i == at ? 14 : 4, i == at ? 2 : 4);
            arrive[i] = i <= at ? i : i - 1;
        }
        int64_t steps = run_stream(&s, seq, arrive, first, n);
        assert_true(steps > 0);
        print_message("      %d short prompts: the long one's first token %lld steps after it "
                      "arrived; %lld steps in all\n",
                      lens[r], (long long)(first[at] - arrive[at]), (long long)steps);
        assert_in_range(first[at] - arrive[at], 1, 3);
        assert_int_equal(s.kv.n_free, 256);
        for (int i = 0; i < n; i++)
            lb_sched_seq_free(&seq[i]);
        free(seq);
        free(arrive);
        free(first);
        lb_sched_free(&s);
    }
}

/* Server-like load: a request each step, mixed prompts (a fifth of them 28 to 31 tokens,
 * near the step's budget of 32), a cache small enough to preempt. Every request is served
 * within a bounded time of its arrival, all end soon after the last arrives, and every
 * block is free. */
static void test_sched_mixed_stream_serves_every_request_and_frees_every_block(void **state) {
    (void)state;
    const int n = 2000;
    lb_sched s;
    lb_err err;
    lb_sched_params p = {.max_seqs = 8, .step_tokens = 32, .max_ctx = 64};
    assert_int_equal(lb_sched_init(&s, &p, 40, 4, &err), LB_OK);
    lb_seq *seq = calloc((size_t)n, sizeof *seq);
    int64_t *arrive = calloc((size_t)n, sizeof *arrive);
    int64_t *first = calloc((size_t)n, sizeof *first);
    assert_non_null(seq);
    assert_non_null(arrive);
    assert_non_null(first);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        int32_t prompt = i % 5 == 4 ? 28 + (int32_t)(x >> 28) % 4 : 2 + (int32_t)(x >> 24) % 8;
        seq_init(&seq[i], i, prompt, 1 + (int32_t)(x >> 16) % 12);
        arrive[i] = i;
    }
    int64_t steps = run_stream(&s, seq, arrive, first, n);
    int64_t worst = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(seq[i].state, LB_SEQ_DONE);
        assert_int_equal(seq[i].n_tokens - seq[i].n_prompt, seq[i].max_new);
        if (first[i] - arrive[i] > worst) worst = first[i] - arrive[i];
    }
    print_message("      %d requests: %lld steps, the longest wait for a first token %lld steps, "
                  "%lld preemptions\n",
                  n, (long long)steps, (long long)worst, (long long)s.preemptions);
    assert_in_range(steps, n, n + 20);
    assert_in_range(worst, 0, 20);
    assert_true(s.preemptions > 0);
    assert_int_equal(s.n_running, 0);
    assert_int_equal(s.n_waiting, 0);
    assert_int_equal(s.kv.n_free, 40);
    for (int i = 0; i < n; i++)
        lb_sched_seq_free(&seq[i]);
    free(seq);
    free(arrive);
    free(first);
    lb_sched_free(&s);
}

/* ---- the engine against the reference ---- */

static void read_model(void *ctx, const lb_param_tensor *t, lb_gpu_dtype dt, void *dst) {
    const lb_model *m = ctx;
    assert_int_equal(dt, LB_DT_F32);
    memcpy(dst, m->params + t->offset, (size_t)t->numel * sizeof(float));
}

typedef struct {
    lb_model m;
    lb_weights w;
} ref;

static void ref_init(ref *r, int T) {
    lb_model_config cfg;
    lb_err err;
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &err), LB_OK);
    assert_int_equal(lb_model_init(&r->m, &cfg, 1, T, 11, &err), LB_OK);
    /* larger weights than the init's, so the logits differ clearly between tokens */
    for (int64_t i = 0; i < r->m.n_params; i++)
        r->m.params[i] *= 4.0f;
    r->w = (lb_weights){.cfg = cfg, .ctx = &r->m, .read = read_model};
}

static lb_engine_params cpu_params(void) {
    lb_engine_params p = lb_engine_default_params();
    p.device = LB_ENGINE_CPU;
    p.block_size = 4;
    p.max_seqs = 8;
    p.step_tokens = 32;
    p.max_ctx = 64;
    return p;
}

/* A CPU engine (cpu_params) over a fresh reference model of 64 positions. */
static lb_engine *open_cpu_engine(ref *r) {
    ref_init(r, 64);
    lb_engine_params p = cpu_params();
    lb_engine *e;
    lb_err err;
    assert_int_equal(lb_engine_open(&e, &p, &r->w, &err), LB_OK);
    return e;
}

static void test_engine_logits_match_the_reference_forward(void **state) {
    (void)state;
    const int T = 23;
    ref r;
    ref_init(&r, T);
    lb_engine *e;
    lb_err err;
    lb_engine_params p = cpu_params();
    p.max_seqs = 32; /* a row of logits for each of the 23 positions */
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_OK);
    int32_t tok[23];
    for (int i = 0; i < T; i++)
        tok[i] = (i * 37 + 5) % 128;
    const int V = 128;
    float *got = malloc((size_t)T * V * sizeof *got);
    assert_int_equal(lb_engine_logits(e, tok, T, got, &err), LB_OK);
    assert_int_equal(lb_model_forward(&r.m, tok, NULL, 1, T, NULL, NULL), LB_OK);
    double worst = 0;
    for (int i = 0; i < T * V; i++) {
        double d = fabs(got[i] - r.m.acts.logits[i]) / (1e-4 + 1e-4 * fabs(r.m.acts.logits[i]));
        if (d > worst) worst = d;
    }
    if (worst > 1.0) fail_msg("logits differ by %.2f of the tolerance", worst);
    int32_t nf, nt;
    lb_engine_kv_blocks(e, &nf, &nt);
    assert_int_equal(nf, nt);
    free(got);
    lb_engine_close(e);
    lb_model_free(&r.m);
}

/* lb_engine_logits takes up to max_ctx tokens, as it says: a prompt filling the whole
 * context has logits at every position (it was refused as max_ctx + 1 tokens, counting a
 * token to generate that it never samples). */
static void test_engine_logits_of_a_whole_context(void **state) {
    (void)state;
    ref r;
    ref_init(&r, 64);
    lb_engine_params p = cpu_params(); /* max_ctx 64 */
    p.max_seqs = 64;
    p.step_tokens = 64;
    lb_engine *e;
    lb_err err;
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_OK);
    enum { T = 64, V = 128 };
    int32_t tok[T];
    for (int i = 0; i < T; i++)
        tok[i] = (i * 29 + 3) % V;
    float *got = malloc((size_t)T * V * sizeof *got);
    lb_status st = lb_engine_logits(e, tok, T, got, &err);
    if (st != LB_OK) fail_msg("%s", err.msg);
    assert_int_equal(lb_model_forward(&r.m, tok, NULL, 1, T, NULL, NULL), LB_OK);
    for (int i = 0; i < T * V; i++)
        assert_true(fabs(got[i] - r.m.acts.logits[i]) <= 1e-4 + 1e-4 * fabs(r.m.acts.logits[i]));
    assert_int_equal(lb_engine_logits(e, tok, T - 1, got, &err), LB_OK);
    int32_t nf, nt;
    lb_engine_kv_blocks(e, &nf, &nt);
    assert_int_equal(nf, nt);
    free(got);
    lb_engine_close(e);
    lb_model_free(&r.m);
}

/* Greedy tokens by recomputing the whole sequence with the reference each step. */
static void reference_greedy(ref *r, const int32_t *prompt, int n, int n_new, int32_t *out) {
    int32_t seq[64];
    memcpy(seq, prompt, (size_t)n * sizeof *seq);
    for (int k = 0; k < n_new; k++) {
        assert_int_equal(lb_model_forward(&r->m, seq, NULL, 1, n + k, NULL, NULL), LB_OK);
        const float *row = r->m.acts.logits + (size_t)(n + k - 1) * 128;
        int32_t best = 0;
        for (int v = 1; v < 128; v++)
            if (row[v] > row[best]) best = v;
        seq[n + k] = out[k] = best;
    }
}

/* Runs requests to the end; out[r] gets request r's tokens. */
static void run_all(lb_engine *e, int n_req, const int32_t (*prompts)[40], const int *lens,
                    const int *n_new, int32_t (*out)[40]) {
    lb_err err;
    int64_t ids[128];
    int got[128] = {0};
    for (int i = 0; i < n_req; i++) {
        lb_engine_request rq = {.sampling = lb_sample_default(), .max_tokens = n_new[i]};
        assert_int_equal(lb_engine_submit(e, prompts[i], lens[i], &rq, &ids[i], &err), LB_OK);
    }
    int guard = 0;
    while (lb_engine_pending(e) > 0 && guard++ < 10000) {
        const lb_engine_event *ev;
        int32_t n;
        assert_int_equal(lb_engine_step(e, &ev, &n, &err), LB_OK);
        for (int32_t k = 0; k < n; k++)
            for (int i = 0; i < n_req; i++)
                if (ids[i] == ev[k].id) {
                    out[i][got[i]++] = ev[k].token;
                    assert_int_equal(ev[k].done != LB_FINISH_NONE, got[i] == n_new[i]);
                }
    }
    for (int i = 0; i < n_req; i++)
        assert_int_equal(got[i], n_new[i]);
}

static void test_engine_greedy_equals_recomputing_and_alone_equals_batched(void **state) {
    (void)state;
    ref r;
    ref_init(&r, 64);
    enum { N_REQ = 64 };
    int32_t prompts[N_REQ][40], alone[N_REQ][40], batched[N_REQ][40];
    int lens[N_REQ], n_new[N_REQ];
    lb_rng rng;
    lb_rng_seed(&rng, 3);
    for (int i = 0; i < N_REQ; i++) {
        lens[i] = 1 + (int)lb_rng_below(&rng, 30);
        n_new[i] = 1 + (int)lb_rng_below(&rng, 10);
        for (int k = 0; k < lens[i]; k++)
            prompts[i][k] = (int32_t)lb_rng_below(&rng, 128);
    }
    lb_err err;
    lb_engine *e;
    lb_engine_params p = cpu_params();
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_OK);
    /* the first few alone against recomputation with the reference */
    for (int i = 0; i < N_REQ; i++) {
        run_all(e, 1, &prompts[i], &lens[i], &n_new[i], &alone[i]);
        if (i < 6) {
            int32_t want[40];
            reference_greedy(&r, prompts[i], lens[i], n_new[i], want);
            for (int k = 0; k < n_new[i]; k++)
                assert_int_equal(alone[i][k], want[k]);
        }
    }
    lb_engine_close(e);
    /* all at once: 8 sequences a step, 32 tokens a step, a cache of 96 tokens (two full
     * sequences' worth), so prefills are chunked and sequences preempted */
    p.kv_tokens = 96;
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_OK);
    run_all(e, N_REQ, prompts, lens, n_new, batched);
    for (int i = 0; i < N_REQ; i++)
        for (int k = 0; k < n_new[i]; k++)
            if (alone[i][k] != batched[i][k])
                fail_msg("request %d token %d: %d alone, %d batched", i, k, alone[i][k],
                         batched[i][k]);
    const lb_engine_info *info = lb_engine_get_info(e);
    assert_true(info->preemptions > 0);
    int32_t nf, nt;
    lb_engine_kv_blocks(e, &nf, &nt);
    assert_int_equal(nf, nt);
    assert_int_equal(nt, 24);
    /* a request longer than the cache is refused with the limit */
    int32_t longp[40] = {0};
    lb_engine_request rq = {.sampling = lb_sample_default(), .max_tokens = 60};
    int64_t id;
    assert_int_equal(lb_engine_submit(e, longp, 40, &rq, &id, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "context of 64"));
    lb_engine_close(e);
    lb_model_free(&r.m);
}

static void test_engine_stops_at_eos_unless_told_to_ignore_it(void **state) {
    (void)state;
    ref r;
    lb_err err;
    lb_engine *e = open_cpu_engine(&r);
    int32_t prompt[3] = {1, 2, 3}, first[8];
    int n3 = 3, n8 = 8;
    run_all(e, 1, (const int32_t(*)[40])prompt, &n3, &n8, (int32_t(*)[40])first);
    /* the third generated token as eos: the request ends there */
    for (int ignore = 0; ignore < 2; ignore++) {
        lb_engine_request rq = {.sampling = lb_sample_default(),
                                .max_tokens = 8,
                                .eos_ids = &first[2],
                                .n_eos = 1,
                                .ignore_eos = ignore};
        int64_t id;
        assert_int_equal(lb_engine_submit(e, prompt, 3, &rq, &id, &err), LB_OK);
        int n_tok = 0;
        lb_finish last = LB_FINISH_NONE;
        while (lb_engine_pending(e) > 0) {
            const lb_engine_event *ev;
            int32_t n;
            assert_int_equal(lb_engine_step(e, &ev, &n, &err), LB_OK);
            n_tok += n;
            if (n) last = ev[n - 1].done;
        }
        int want = 3;
        for (int k = 0; k < 2; k++)
            if (first[k] == first[2]) want = k + 1; /* an earlier equal token stops first */
        assert_int_equal(n_tok, ignore ? 8 : want);
        assert_int_equal(last, ignore ? LB_FINISH_LENGTH : LB_FINISH_STOP);
    }
    lb_engine_close(e);
    lb_model_free(&r.m);
}

/* A request naming more end-of-sequence ids than the engine keeps is refused, not cut to
 * the first ones (it went on past the ninth). */
static void test_engine_refuses_more_eos_ids_than_it_keeps(void **state) {
    (void)state;
    ref r;
    lb_err err;
    lb_engine *e = open_cpu_engine(&r);
    int32_t prompt[3] = {1, 2, 3}, eos[LB_ENGINE_MAX_EOS + 1];
    for (int i = 0; i <= LB_ENGINE_MAX_EOS; i++)
        eos[i] = 100 + i;
    lb_engine_request rq = {.sampling = lb_sample_default(),
                            .max_tokens = 4,
                            .eos_ids = eos,
                            .n_eos = LB_ENGINE_MAX_EOS + 1};
    int64_t id;
    assert_int_equal(lb_engine_submit(e, prompt, 3, &rq, &id, &err), LB_ERR_USAGE);
    if (strstr(err.msg, "names 9 end-of-sequence ids; the engine takes 0 to 8") == NULL)
        fail_msg("%s", err.msg);
    assert_int_equal(lb_engine_pending(e), 0);
    rq.n_eos = LB_ENGINE_MAX_EOS;
    assert_int_equal(lb_engine_submit(e, prompt, 3, &rq, &id, &err), LB_OK);
    assert_int_equal(lb_engine_pending(e), 1);
    lb_engine_close(e);
    lb_model_free(&r.m);
}

/* Steps are counted by kind (with prompt tokens, decodes only) and timed; warming up an
 * idle engine changes nothing it generates, a busy one refuses. */
static void test_engine_counts_steps_by_kind_and_warms_up_only_idle(void **state) {
    (void)state;
    ref r;
    lb_err err;
    lb_engine *e = open_cpu_engine(&r);
    int32_t prompts[2][40] = {{5, 6, 7, 8}, {9, 10}}, cold[2][40], warm[2][40];
    int lens[2] = {4, 2}, n_new[2] = {6, 3};
    run_all(e, 2, prompts, lens, n_new, cold);
    const lb_engine_info *info = lb_engine_get_info(e);
    /* both prompts fit one step; then two decode steps of both, three of the first alone */
    assert_int_equal(info->prefill_steps, 1);
    assert_int_equal(info->decode_steps, 5);
    assert_int_equal(info->prefill_steps + info->decode_steps, info->steps);
    assert_true(info->prefill_ns > 0 && info->decode_ns > 0);
    assert_int_equal(info->prepare_ns, 0); /* the CPU prepares nothing */
    assert_int_equal(lb_engine_warmup(e, 40, &err), LB_OK);
    run_all(e, 2, prompts, lens, n_new, warm);
    for (int i = 0; i < 2; i++)
        assert_memory_equal(cold[i], warm[i], (size_t)n_new[i] * sizeof(int32_t));
    lb_engine_request rq = {.sampling = lb_sample_default(), .max_tokens = 2};
    int64_t id;
    assert_int_equal(lb_engine_submit(e, prompts[0], 4, &rq, &id, &err), LB_OK);
    assert_int_equal(lb_engine_warmup(e, 40, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "busy"));
    lb_engine_close(e);
    lb_model_free(&r.m);
}

/* Blocks are counted in int32_t: a cache of more is refused, not wrapped (2^32 + 1 blocks
 * wrapped to 1 block, a cache of 4 tokens reported as what was asked). */
static void test_engine_refuses_a_cache_of_more_blocks_than_it_counts(void **state) {
    (void)state;
    ref r;
    ref_init(&r, 64);
    lb_engine_params p = cpu_params();
    p.kv_tokens = ((int64_t)1 << 34) + 4; /* 2^32 + 1 blocks of 4 tokens */
    lb_engine *e = NULL;
    lb_err err;
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_ERR_USAGE);
    assert_null(e);
    if (strstr(err.msg, "a KV cache of 17179869188 tokens") == NULL ||
        strstr(err.msg, "--block-size") == NULL)
        fail_msg("%s", err.msg);
    lb_model_free(&r.m);
}

/* A cache the host cannot hold is LB_ERR_NOMEM naming its size and the option that sets it
 * (the sizes were read from the backend after it was freed). */
static void test_engine_a_cpu_cache_too_big_for_memory_is_named(void **state) {
    (void)state;
    ref r;
    ref_init(&r, 64);
    lb_engine_params p = cpu_params();
    p.block_size = 4096;
    p.kv_tokens = (int64_t)1 << 42; /* 2^30 blocks: 2 PiB of keys and values */
    lb_engine *e = NULL;
    lb_err err;
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_ERR_NOMEM);
    assert_null(e);
    if (strstr(err.msg, "2097152.0 GiB of cache for 4398046511104 tokens") == NULL ||
        strstr(err.msg, "--kv-tokens") == NULL)
        fail_msg("%s", err.msg);
    lb_model_free(&r.m);
}

static void test_sample_follows_temperature_top_k_and_top_p(void **state) {
    (void)state;
    const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    double z = 0, prob[4];
    for (int i = 0; i < 4; i++)
        z += exp(logits[i]);
    for (int i = 0; i < 4; i++)
        prob[i] = exp(logits[i]) / z;
    float scratch[8];
    lb_rng rng;
    lb_rng_seed(&rng, 5);
    lb_sampling s = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    const int N = 40000;
    int count[4] = {0};
    for (int i = 0; i < N; i++)
        count[lb_sample_token(logits, 4, &s, &rng, scratch)]++;
    for (int i = 0; i < 4; i++) {
        double sd = sqrt(prob[i] * (1 - prob[i]) / N);
        if (fabs((double)count[i] / N - prob[i]) > 5 * sd)
            fail_msg("token %d drawn %.4f, expected %.4f", i, (double)count[i] / N, prob[i]);
    }
    s.top_k = 2;
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++)
        count[lb_sample_token(logits, 4, &s, &rng, scratch)]++;
    assert_int_equal(count[2] + count[3], 0);
    double p0 = prob[0] / (prob[0] + prob[1]);
    assert_true(fabs((double)count[0] / N - p0) < 5 * sqrt(p0 * (1 - p0) / N));
    s.top_k = 0;
    s.top_p = 0.5f; /* token 0 alone holds 0.64 */
    for (int i = 0; i < 100; i++)
        assert_int_equal(lb_sample_token(logits, 4, &s, &rng, scratch), 0);
    s.temperature = 0.0f;
    assert_int_equal(lb_sample_token(logits, 4, &s, &rng, scratch), 0);
    /* the same seed, the same draws */
    s = (lb_sampling){.temperature = 2.0f, .top_k = 0, .top_p = 1.0f};
    lb_rng a, b;
    lb_rng_seed(&a, 9);
    lb_rng_seed(&b, 9);
    for (int i = 0; i < 50; i++)
        assert_int_equal(lb_sample_token(logits, 4, &s, &a, scratch),
                         lb_sample_token(logits, 4, &s, &b, scratch));
}

/* A temperature so small (subnormal) that the logits over it overflow is greedy: the
 * largest logit, never the draw from infinities that picks the least likely. */
static void test_sample_a_subnormal_temperature_is_greedy(void **state) {
    (void)state;
    const float logits[4] = {-1.0f, 0.5f, 3.0f, -2.0f};
    float scratch[8];
    lb_rng rng;
    lb_rng_seed(&rng, 3);
    const float temps[] = {1e-40f, 1e-45f, 1e-38f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        lb_sampling s = {.temperature = temps[t], .top_k = 0, .top_p = 1.0f};
        for (int i = 0; i < 20; i++)
            assert_int_equal(lb_sample_token(logits, 4, &s, &rng, scratch), 2);
        s.top_k = 3;
        s.top_p = 0.9f;
        assert_int_equal(lb_sample_token(logits, 4, &s, &rng, scratch), 2);
    }
}

/* A NaN logit (an overflowed model) is never chosen: sampling draws from the other tokens
 * as if it were -inf (where the NaN in the sort and sums drew the least likely token every
 * time), and greedy takes the largest number even when the NaN comes first. */
static void test_sample_never_chooses_a_nan_logit(void **state) {
    (void)state;
    const float rows[2][4] = {{1.0f, NAN, 3.0f, 2.0f}, {NAN, 1.0f, 3.0f, 2.0f}};
    const float finite[4] = {1.0f, 0.0f, 3.0f, 2.0f}; /* index 1 unused in row 0 */
    float scratch[8];
    lb_rng rng;
    lb_rng_seed(&rng, 7);
    const int N = 20000;
    for (int r = 0; r < 2; r++) {
        const int nan_at = r == 0 ? 1 : 0;
        assert_int_equal(lb_sample_argmax(rows[r], 4), 2);
        double z = 0, prob[4] = {0};
        for (int i = 0; i < 4; i++)
            if (i != nan_at) z += exp(r == 0 ? finite[i] : rows[r][i]);
        for (int i = 0; i < 4; i++)
            if (i != nan_at) prob[i] = exp(r == 0 ? finite[i] : rows[r][i]) / z;
        for (int k = 0; k < 2; k++) {
            lb_sampling s = {.temperature = 1.0f, .top_k = k ? 2 : 0, .top_p = 1.0f};
            int count[4] = {0};
            for (int i = 0; i < N; i++)
                count[lb_sample_token(rows[r], 4, &s, &rng, scratch)]++;
            assert_int_equal(count[nan_at], 0);
            const double p2 = k ? exp(3.0) / (exp(3.0) + exp(2.0)) : prob[2];
            if (fabs((double)count[2] / N - p2) > 5 * sqrt(p2 * (1 - p2) / N))
                fail_msg("row %d top_k %d: token 2 drawn %.4f, expected %.4f", r, s.top_k,
                         (double)count[2] / N, p2);
        }
    }
}

/* top_p keeps the smallest set reaching it, and never less than the likeliest token: a
 * top_p of 0 (or below the top token's share) draws that token, not what lies before the
 * candidates (the old loop kept none and returned candidate -1). */
static void test_sample_top_p_keeps_at_least_the_likeliest(void **state) {
    (void)state;
    const float logits[4] = {0.5f, 2.0f, 1.0f, -1.0f};
    /* the scratch sits after two floats that read as a candidate of id 77 */
    float buf[2 + 8];
    const int32_t poison = 77;
    buf[0] = 10.0f;
    memcpy(&buf[1], &poison, sizeof poison);
    lb_rng rng;
    lb_rng_seed(&rng, 1);
    const float ps[] = {0.0f, -1.0f, 1e-7f, 0.3f};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        lb_sampling s = {.temperature = 1.0f, .top_k = 0, .top_p = ps[k]};
        for (int i = 0; i < 20; i++)
            assert_int_equal(lb_sample_token(logits, 4, &s, &rng, buf + 2), 1);
    }
}

/* ---- the sampler against a reference that sorts the whole vocabulary ---- */

typedef struct {
    double v;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

/* sample.h's distribution by its definition: sort (ties by id), cut to top_k, softmax,
 * cut to the smallest prefix reaching top_p, renormalise. prob[V] gets each token's. */
static void reference_probs(const float *logits, int32_t V, const lb_sampling *s, double *prob) {
    ref_cand *c = malloc((size_t)V * sizeof *c);
    assert_non_null(c);
    for (int32_t i = 0; i < V; i++)
        c[i] = (ref_cand){(double)(logits[i] / s->temperature), i};
    qsort(c, (size_t)V, sizeof *c, ref_cmp);
    int32_t n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double z = 0;
    for (int32_t i = 0; i < n; i++)
        z += exp(c[i].v - c[0].v);
    if (s->top_p < 1.0f) {
        double acc = 0;
        int32_t keep = 0;
        do
            acc += exp(c[keep++].v - c[0].v) / z;
        while (keep < n && acc < s->top_p);
        n = keep;
    }
    double zk = 0;
    for (int32_t i = 0; i < n; i++)
        zk += exp(c[i].v - c[0].v);
    memset(prob, 0, (size_t)V * sizeof *prob);
    for (int32_t i = 0; i < n; i++)
        prob[c[i].id] = exp(c[i].v - c[0].v) / zk;
    free(c);
}

/* Draws n tokens and checks them against reference_probs: a token the reference never
 * draws is never drawn; each token of probability above 1% and the rest lumped together
 * are within 5 standard deviations. */
static void check_draws(const char *what, const float *logits, int32_t V, const lb_sampling *s,
                        int n) {
    double *prob = malloc((size_t)V * sizeof *prob);
    int *count = calloc((size_t)V, sizeof *count);
    void *scratch = malloc((size_t)V * 2 * sizeof(float));
    assert_true(prob && count && scratch);
    reference_probs(logits, V, s, prob);
    lb_rng rng;
    lb_rng_seed(&rng, s->seed);
    for (int i = 0; i < n; i++) {
        int32_t t = lb_sample_token(logits, V, s, &rng, scratch);
        assert_true(t >= 0 && t < V);
        if (prob[t] == 0) fail_msg("%s: drew token %d, which is cut", what, t);
        count[t]++;
    }
    double rest_p = 0;
    int rest_n = 0;
    for (int32_t i = 0; i < V; i++) {
        if (prob[i] <= 0.01) {
            rest_p += prob[i];
            rest_n += count[i];
            continue;
        }
        const double sd = sqrt(prob[i] * (1 - prob[i]) / n);
        if (fabs((double)count[i] / n - prob[i]) > 5 * sd + 1e-12)
            fail_msg("%s: token %d drawn %.4f, expected %.4f", what, i, (double)count[i] / n,
                     prob[i]);
    }
    const double sd = sqrt(rest_p * (1 - rest_p) / n);
    if (fabs((double)rest_n / n - rest_p) > 5 * sd + 1e-12)
        fail_msg("%s: the tokens below 1%% drawn %.4f, expected %.4f", what, (double)rest_n / n,
                 rest_p);
    free(prob);
    free(count);
    free(scratch);
}

/* Each way of cutting (none, top_k by a heap or by selection, top_p over the vocabulary or
 * within top_k) draws the distribution of the definition, with ties at the cut's edge
 * broken by id, on a vocabulary larger than the heap's limit. */
static void test_sample_distribution_matches_the_definition_in_every_mode(void **state) {
    (void)state;
    enum { V = 1200 };
    static float lg[V];
    /* heavy tokens, three tied at ln 2 (ids 17, 600, 1150), over a tail of 1,195 */
    for (int i = 0; i < V; i++)
        lg[i] = -6.0f - (float)(i % 7) * 0.5f;
    lg[1000] = logf(4.0f);
    lg[17] = lg[600] = lg[1150] = logf(2.0f);
    lg[300] = 0.0f;
    const struct {
        const char *what;
        lb_sampling s;
    } modes[] = {
        {"temperature 1", {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1}},
        {"temperature 0.7", {.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .seed = 2}},
        {"top_k 3 (a tie at the edge)",
         {.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .seed = 3}},
        {"top_k 50", {.temperature = 1.0f, .top_k = 50, .top_p = 1.0f, .seed = 4}},
        {"top_k 1100", {.temperature = 1.0f, .top_k = 1100, .top_p = 1.0f, .seed = 5}},
        {"top_p 0.75 (a tie at the edge)",
         {.temperature = 1.0f, .top_k = 0, .top_p = 0.75f, .seed = 6}},
        {"top_p 0.9", {.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .seed = 7}},
        {"top_p 0.99", {.temperature = 0.5f, .top_k = 0, .top_p = 0.99f, .seed = 8}},
        {"top_k 3 + top_p 0.6", {.temperature = 1.0f, .top_k = 3, .top_p = 0.6f, .seed = 9}},
        {"top_k 50 + top_p 0.9", {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .seed = 10}},
        {"top_k 1150 + top_p 0.75",
         {.temperature = 1.0f, .top_k = 1150, .top_p = 0.75f, .seed = 11}},
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        check_draws(modes[m].what, lg, V, &modes[m].s, 10000);

    /* top_k by selection with a tie of 1,199 at its edge: the smaller ids are kept */
    for (int i = 0; i < V; i++)
        lg[i] = 0.0f;
    lg[1000] = 3.0f;
    const lb_sampling s = {.temperature = 1.0f, .top_k = 1100, .top_p = 1.0f, .seed = 12};
    check_draws("top_k 1100 of a tie", lg, V, &s, 10000);
    const lb_sampling p = {.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 13};
    check_draws("top_p 0.5 of a tie", lg, V, &p, 10000);
}

/* The CPU backend's greedy choice skips a NaN logit like the sampler's: with the head's
 * row of token 0 NaN, greedy generation is the reference's largest number each step (the
 * backend's own argmax stayed on the NaN at index 0 and generated token 0 every time). */
static void test_engine_greedy_skips_a_nan_logit(void **state) {
    (void)state;
    ref r;
    ref_init(&r, 64);
    const int C = r.m.cfg.d_model;
    for (int i = 0; i < C; i++) /* lm_head row 0 */
        r.m.params[r.m.off.lm_head + i] = NAN;
    lb_engine_params p = cpu_params();
    lb_engine *e;
    lb_err err;
    assert_int_equal(lb_engine_open(&e, &p, &r.w, &err), LB_OK);
    int32_t prompt[5] = {3, 17, 9, 44, 2}, got[40], seq[64];
    int n = 5, n_new = 6;
    run_all(e, 1, (const int32_t(*)[40])prompt, &n, &n_new, (int32_t(*)[40])got);
    memcpy(seq, prompt, sizeof prompt);
    for (int k = 0; k < n_new; k++) {
        assert_int_equal(lb_model_forward(&r.m, seq, NULL, 1, n + k, NULL, NULL), LB_OK);
        const float *row = r.m.acts.logits + (size_t)(n + k - 1) * 128;
        assert_true(isnan(row[0]));
        seq[n + k] = lb_sample_argmax(row, 128);
        assert_int_not_equal(seq[n + k], 0);
        assert_int_equal(got[k], seq[n + k]);
    }
    lb_engine_close(e);
    lb_model_free(&r.m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_blocks_hand_out_each_block_once),
        cmocka_unit_test(test_sched_chunks_prefill_and_puts_decodes_first),
        cmocka_unit_test(test_sched_admits_whole_prompts_first_fit),
        cmocka_unit_test(test_sched_preempts_the_newest_when_blocks_run_out),
        cmocka_unit_test(test_sched_a_passed_over_prompt_waits_a_bounded_time),
        cmocka_unit_test(test_sched_mixed_stream_serves_every_request_and_frees_every_block),
        cmocka_unit_test(test_engine_logits_match_the_reference_forward),
        cmocka_unit_test(test_engine_logits_of_a_whole_context),
        cmocka_unit_test(test_engine_greedy_equals_recomputing_and_alone_equals_batched),
        cmocka_unit_test(test_engine_stops_at_eos_unless_told_to_ignore_it),
        cmocka_unit_test(test_engine_refuses_more_eos_ids_than_it_keeps),
        cmocka_unit_test(test_engine_counts_steps_by_kind_and_warms_up_only_idle),
        cmocka_unit_test(test_engine_refuses_a_cache_of_more_blocks_than_it_counts),
        cmocka_unit_test(test_engine_a_cpu_cache_too_big_for_memory_is_named),
        cmocka_unit_test(test_sample_follows_temperature_top_k_and_top_p),
        cmocka_unit_test(test_sample_a_subnormal_temperature_is_greedy),
        cmocka_unit_test(test_sample_never_chooses_a_nan_logit),
        cmocka_unit_test(test_sample_top_p_keeps_at_least_the_likeliest),
        cmocka_unit_test(test_sample_distribution_matches_the_definition_in_every_mode),
        cmocka_unit_test(test_engine_greedy_skips_a_nan_logit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
