/* synthetic.c: the synthetic token source behind synthetic.h.
 *
 * Per request it keeps only when token 0 is due, the spacing, how many tokens are left and
 * a generator: a pull is a comparison and, when due, one generator step and a short
 * format. Nothing is allocated per request (the state lives in the server's stream
 * memory). */
#include "serve/synthetic.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

typedef struct {
    int64_t ttft_ns;
    int64_t tpot_ns;
    uint64_t seed;
    /* slots: when each frees (ns), under the lock: requests start on many threads */
    pthread_mutex_t lock;
    int64_t *slot_free_ns;
    int64_t n_slots;
} synth_ctx;

typedef struct {
    int64_t first_due_ns; /* when token 0 is due */
    int64_t tpot_ns;
    int64_t next; /* index of the next token */
    int64_t n;    /* tokens to generate */
    lb_rng rng;
} synth_stream;

lb_synthetic_params lb_synthetic_default_params(void) {
    return (lb_synthetic_params){.ttft_ms = 0.0, .tpot_ms = 0.0, .seed = 1};
}

static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int64_t lb_synthetic_count_words(const char *text, size_t len) {
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < len; i++) {
        bool space = is_space((unsigned char)text[i]);
        if (!space && !in_word) words++;
        in_word = !space;
    }
    return words;
}

static lb_status synth_start(void *ctx, const lb_token_request *req, void *stream,
                             int64_t *prompt_tokens, lb_err *err) {
    (void)err;
    const synth_ctx *c = ctx;
    synth_stream *s = stream;
    /* FNV-1a over the prompt's bytes (its text, or its ids), started from the server seed. */
    const unsigned char *b = req->ids ? (const void *)req->ids : (const void *)req->prompt;
    size_t n = req->ids ? req->n_ids * sizeof *req->ids : req->prompt_len;
    uint64_t h = 1469598103934665603ULL ^ c->seed;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    lb_rng_seed(&s->rng, h);
    int64_t begin = req->arrival_ns;
    if (c->n_slots > 0) { /* the slot that frees first; the request holds it to its end */
        synth_ctx *mc = ctx;
        pthread_mutex_lock(&mc->lock);
        int64_t k = 0;
        for (int64_t i = 1; i < mc->n_slots; i++)
            if (mc->slot_free_ns[i] < mc->slot_free_ns[k]) k = i;
        if (mc->slot_free_ns[k] > begin) begin = mc->slot_free_ns[k];
        int64_t rest = req->max_tokens > 1 ? (req->max_tokens - 1) * c->tpot_ns : 0;
        mc->slot_free_ns[k] = begin + c->ttft_ns + rest;
        pthread_mutex_unlock(&mc->lock);
    }
    s->first_due_ns = begin + c->ttft_ns;
    s->tpot_ns = c->tpot_ns;
    s->next = 0;
    s->n = req->max_tokens;
    *prompt_tokens =
        req->ids ? (int64_t)req->n_ids : lb_synthetic_count_words(req->prompt, req->prompt_len);
    return LB_OK;
}

static lb_token_state synth_next(void *ctx, void *stream, int64_t now_ns, char *text, size_t *len,
                                 int64_t *due_ns) {
    (void)ctx;
    synth_stream *s = stream;
    if (s->next >= s->n) return LB_TOKEN_END;
    int64_t due = s->first_due_ns + s->next * s->tpot_ns;
    if (due > now_ns) {
        *due_ns = due;
        return LB_TOKEN_LATER;
    }
    /* "tok<N> " written by hand: this runs once per token. */
    char digits[8];
    int nd = 0;
    for (uint32_t v = (uint32_t)lb_rng_below(&s->rng, 100000); nd == 0 || v > 0; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    memcpy(text, "tok", 3);
    for (int i = 0; i < nd; i++)
        text[3 + i] = digits[nd - 1 - i];
    text[3 + nd] = ' ';
    *len = (size_t)(4 + nd);
    s->next++;
    return LB_TOKEN_READY;
}

static void synth_done(void *ctx, void *stream) {
    (void)ctx;
    (void)stream;
}

lb_status lb_synthetic_init(const lb_synthetic_params *params, lb_token_source *src, lb_err *err) {
    if (!(params->ttft_ms >= 0.0) || !(params->tpot_ms >= 0.0) || !isfinite(params->ttft_ms) ||
        !isfinite(params->tpot_ms))
        return lb_fail(err, LB_ERR_USAGE,
                       "synthetic timing must be finite and >= 0 ms, got ttft %g, tpot %g",
                       params->ttft_ms, params->tpot_ms);
    if (params->slots < 0)
        return lb_fail(err, LB_ERR_USAGE, "synthetic slots must be >= 0 (0: no limit), got %lld",
                       (long long)params->slots);
    synth_ctx *c = calloc(1, sizeof *c);
    if (c) c->slot_free_ns = calloc(params->slots > 0 ? (size_t)params->slots : 1, sizeof(int64_t));
    if (!c || !c->slot_free_ns) {
        free(c);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the synthetic token source");
    }
    c->n_slots = params->slots;
    pthread_mutex_init(&c->lock, NULL);
    c->ttft_ns = (int64_t)llround(params->ttft_ms * 1e6);
    c->tpot_ns = (int64_t)llround(params->tpot_ms * 1e6);
    c->seed = params->seed;
    *src = (lb_token_source){
        .name = "synthetic",
        .ctx = c,
        .stream_bytes = sizeof(synth_stream),
        .start = synth_start,
        .next = synth_next,
        .done = synth_done,
    };
    return LB_OK;
}

void lb_synthetic_free(lb_token_source *src) {
    if (!src) return;
    synth_ctx *c = src->ctx;
    if (c) {
        pthread_mutex_destroy(&c->lock);
        free(c->slot_free_ns);
    }
    free(src->ctx);
    src->ctx = NULL;
}
