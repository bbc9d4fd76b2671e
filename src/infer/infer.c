/* infer.c: the built-in engine as a system under test of the scenario engine (infer.h).
 *
 * lb_loadgen_run_sut runs the scenario; this file answers its queries. Prompts are token
 * ids made before t0. serve() runs one engine step when anything is pending (each token
 * of the step is reported at the step's end, the moment a server could have sent it) and
 * otherwise sleeps until the scenario's next deadline. Engine request ids are handed out
 * in submit order, so live[id] holds a query's state while it runs. */
#include "infer/infer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/utf8text.h"
#include "model/hf_tokenizer.h"

typedef struct {
    int32_t *ids; /* owned */
    int32_t n;
} prompt;

typedef struct {
    uint64_t tag;
    uint32_t sample;
    bool active;
    int64_t start_ns, first_ns;
    uint32_t *out; /* the generated ids */
    size_t n_out, cap_out;
} live;

typedef struct {
    const lb_infer_params *p;
    const lb_dataset *ds;
    lb_pool_callbacks cb;
    void *user;
    prompt *prompts; /* [ds->n] */
    live *live;      /* by engine request id */
    size_t cap_live;
    lb_replica rep;
    bool keep_text;
    char broken[160];       /* an engine step failed: every query after fails with this */
    int64_t warmup_left;    /* warm-up queries (the first submitted) not submitted yet;
                               below 0 once a timed query came */
    lb_engine_info at_open; /* the engine's counts when the first timed query came */
} engine_sut;

/* A signal before t0 (while the engine loaded, the prompts were made or the engine warmed
 * up) ends the preparation there: the run is stored interrupted with nothing measured. */
static lb_status stop_if_interrupted(lb_err *err) {
    if (!lb_signals_interrupted()) return LB_OK;
    return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted before the run began");
}

/* Token ids of every sample before t0. */
static lb_status make_prompts(engine_sut *E, lb_err *err) {
    const lb_infer_params *p = E->p;
    const lb_dataset *ds = E->ds;
    E->prompts = calloc(ds->n, sizeof *E->prompts);
    if (E->prompts == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the prompts");
    int32_t vocab = lb_engine_config(p->engine)->vocab_size;
    for (size_t i = 0; i < ds->n; i++) {
        LB_TRY(stop_if_interrupted(err));
        const lb_sample *s = &ds->samples[i];
        prompt *pr = &E->prompts[i];
        if (p->tok == NULL) {
            if (s->input_tokens < 1)
                return lb_fail(err, LB_ERR_USAGE,
                               "sample %zu has no token count; without a tokenizer the prompts "
                               "are random ids and need one (synthetic or cnn_eval data)",
                               i);
            pr->ids = malloc((size_t)s->input_tokens * sizeof *pr->ids);
            if (pr->ids == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
            lb_rng rng;
            lb_rng_seed(&rng, p->lg.sample_seed * 1000003u + i);
            for (int32_t k = 0; k < s->input_tokens; k++)
                pr->ids[k] = (int32_t)lb_rng_below(&rng, (uint64_t)vocab);
            pr->n = s->input_tokens;
            continue;
        }
        char *text = NULL;
        size_t len = strlen(s->prompt);
        if (p->chat) {
            lb_chat_message m = {"user", s->prompt, len};
            LB_TRY(lb_hf_tokenizer_chat_llama3(&m, 1, &text, &len, err));
        }
        uint32_t *ids = NULL;
        size_t n = 0;
        lb_status st = lb_tokenizer_encode(p->tok, text ? text : s->prompt, len, &ids, &n, err);
        free(text);
        if (st != LB_OK) return st;
        bool bos = p->bos_id >= 0 && !p->chat;
        pr->ids = malloc((n + 1) * sizeof *pr->ids);
        if (pr->ids == NULL) {
            free(ids);
            return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        }
        if (bos) pr->ids[pr->n++] = p->bos_id;
        for (size_t k = 0; k < n; k++)
            pr->ids[pr->n++] = (int32_t)ids[k];
        free(ids);
    }
    return LB_OK;
}

/* Makes the NUL-terminated t UTF-8, as JSON (generated.jsonl) needs, and *len its length:
 * a character that the end cuts short (--max-tokens stopped inside its bytes) is dropped,
 * every other byte that starts no character becomes '?'. The text ends at a NUL byte a
 * token decoded to: it goes on as a C string. */
static void make_utf8(char *t, size_t *len) {
    *len = strlen(t);
    for (size_t i = *len > 3 ? *len - 3 : 0; i < *len; i++)
        if (lb_utf8text_char_len(t + i, *len - i) < 0) {
            *len = i;
            t[i] = '\0';
            break;
        }
    lb_utf8text_repair(t);
}

/* The generated ids as text (a trailing end-of-sequence id left out), token by token, made
 * UTF-8 (make_utf8): an id the tokenizer lacks (a model's unused rows) and a special token
 * add nothing, as MLPerf's evaluation decodes with skip_special_tokens. Without a
 * tokenizer, "". */
static char *decode_text(const engine_sut *E, const uint32_t *ids, size_t n, size_t *len) {
    const lb_infer_params *p = E->p;
    for (int k = 0; n > 0 && k < p->n_eos && !p->lg.request.ignore_eos; k++)
        if (ids[n - 1] == (uint32_t)p->eos_ids[k]) {
            n--;
            break;
        }
    size_t cap = 64;
    char *t = malloc(cap);
    *len = 0;
    if (t == NULL) return NULL;
    for (size_t k = 0; p->tok != NULL && k < n; k++) {
        char *piece = NULL;
        size_t pl = 0;
        lb_err ignored;
        if (lb_tokenizer_is_special(p->tok, ids[k]) ||
            lb_tokenizer_decode(p->tok, &ids[k], 1, &piece, &pl, &ignored) != LB_OK)
            continue;
        if (*len + pl + 1 > cap) {
            while (*len + pl + 1 > cap)
                cap *= 2;
            char *g = realloc(t, cap);
            if (g == NULL) {
                free(piece);
                free(t);
                return NULL;
            }
            t = g;
        }
        memcpy(t + *len, piece, pl);
        *len += pl;
        free(piece);
    }
    t[*len] = '\0';
    make_utf8(t, len);
    return t;
}

/* Ends query l with outcome error `why` (LB_QERR_NONE: completed) at t. */
static void finish(engine_sut *E, live *l, lb_qerr why, const char *detail, int64_t t) {
    lb_http_outcome o;
    memset(&o, 0, sizeof o);
    o.req.tag = l->tag;
    o.error = why;
    snprintf(o.detail, sizeof o.detail, "%s", detail ? detail : "");
    o.start_ns = o.sent_ns = l->start_ns;
    o.first_ns = l->first_ns ? l->first_ns : t;
    o.done_ns = t;
    o.prompt_tokens = E->prompts[l->sample].n;
    o.completion_tokens = (int64_t)l->n_out;
    o.n_chunks = (int32_t)l->n_out;
    o.token_ids = l->out;
    o.n_token_ids = l->n_out;
    char *text = NULL;
    if (why == LB_QERR_NONE && E->keep_text) {
        text = decode_text(E, l->out, l->n_out, &o.text_len);
        o.text = text;
    }
    l->active = false;
    E->rep.inflight--;
    if (why == LB_QERR_NONE)
        E->rep.completed++;
    else
        E->rep.failed++;
    E->cb.on_done(E->user, &o);
    free(text);
    free(l->out);
    l->out = NULL;
    l->n_out = l->cap_out = 0;
}

static void fail_all(engine_sut *E, lb_qerr why, const char *detail) {
    int64_t t = lb_clock_now_ns();
    for (size_t i = 0; i < E->cap_live; i++)
        if (E->live[i].active) {
            lb_engine_cancel(E->p->engine, (int64_t)i);
            finish(E, &E->live[i], why, detail, t);
        }
}

static lb_status engine_open(void *self, const lb_loadgen_params *lg, const lb_dataset *ds,
                             const lb_pool_callbacks *cb, void *user, lb_err *err) {
    engine_sut *E = self;
    E->ds = ds;
    E->cb = *cb;
    E->user = user;
    E->keep_text = lg->mode == LB_MODE_ACCURACY;
    snprintf(E->rep.url, sizeof E->rep.url, "%s", E->p->sut_name ? E->p->sut_name : "engine");
    snprintf(E->rep.shown, sizeof E->rep.shown, "%s", E->rep.url);
    LB_TRY(make_prompts(E, err));
    /* what the first steps of each kind would prepare inside the run, before t0 */
    int32_t longest = 0;
    for (size_t i = 0; i < ds->n; i++)
        if (E->prompts[i].n > longest) longest = E->prompts[i].n;
    LB_TRY(stop_if_interrupted(err));
    LB_TRY(lb_engine_warmup(E->p->engine, longest, err));
    LB_TRY(stop_if_interrupted(err)); /* a GPU's warm-up takes seconds */
    E->at_open = *lb_engine_get_info(E->p->engine);
    E->warmup_left = lg->warmup_queries;
    return LB_OK;
}

/* A request the engine refuses (longer than its context or cache) fails at once with the
 * engine's reason, as a server's 400 would. */
static lb_status engine_submit(void *self, uint64_t tag, uint32_t sample, lb_err *err) {
    (void)err;
    engine_sut *E = self;
    const lb_infer_params *p = E->p;
    const lb_sample *s = &E->ds->samples[sample];
    const prompt *pr = &E->prompts[sample];
    lb_engine_request rq = {.sampling = p->sampling,
                            .max_tokens = s->max_tokens > 0 ? s->max_tokens : p->lg.max_tokens,
                            .ignore_eos = p->lg.request.ignore_eos,
                            .eos_ids = p->eos_ids,
                            .n_eos = p->n_eos};
    rq.sampling.seed = p->sampling.seed + tag;
    /* the warm-up queries all ended before the first timed one: their steps are not the run's */
    if (E->warmup_left-- == 0) E->at_open = *lb_engine_get_info(p->engine);
    live refused = {.tag = tag, .sample = sample, .active = true, .start_ns = lb_clock_now_ns()};
    E->rep.sent++;
    E->rep.inflight++;
    if (E->broken[0] != '\0') {
        finish(E, &refused, LB_QERR_OTHER, E->broken, refused.start_ns);
        return LB_OK;
    }
    int64_t id;
    lb_err why = {{0}};
    if (lb_engine_submit(p->engine, pr->ids, pr->n, &rq, &id, &why) != LB_OK) {
        finish(E, &refused, LB_QERR_HTTP_4XX, why.msg, refused.start_ns);
        return LB_OK;
    }
    if ((size_t)id >= E->cap_live) {
        size_t cap = E->cap_live ? E->cap_live : 1024;
        while (cap <= (size_t)id)
            cap *= 2;
        live *v = realloc(E->live, cap * sizeof *v);
        if (v == NULL) {
            lb_engine_cancel(p->engine, id);
            finish(E, &refused, LB_QERR_OTHER, "out of memory", refused.start_ns);
            return LB_OK;
        }
        memset(v + E->cap_live, 0, (cap - E->cap_live) * sizeof *v);
        E->live = v;
        E->cap_live = cap;
    }
    E->live[id] = refused;
    return LB_OK;
}

static void sleep_until(int64_t t_abs) {
    int64_t d = t_abs - lb_clock_now_ns();
    if (d <= 0) return;
    struct timespec ts = {.tv_sec = d / 1000000000LL, .tv_nsec = d % 1000000000LL};
    nanosleep(&ts, NULL);
}

static void engine_serve(void *self, int64_t until_ns) {
    engine_sut *E = self;
    if (lb_engine_pending(E->p->engine) == 0) {
        sleep_until(until_ns);
        return;
    }
    const lb_engine_event *ev;
    int32_t n;
    lb_err err = {{0}};
    if (lb_engine_step(E->p->engine, &ev, &n, &err) != LB_OK) {
        snprintf(E->broken, sizeof E->broken, "engine step failed: %.130s", err.msg);
        fail_all(E, LB_QERR_OTHER, E->broken);
        return;
    }
    int64_t t = lb_clock_now_ns();
    for (int32_t k = 0; k < n; k++) {
        if ((size_t)ev[k].id >= E->cap_live || !E->live[ev[k].id].active) continue;
        live *l = &E->live[ev[k].id];
        if (l->n_out == l->cap_out) {
            size_t cap = l->cap_out ? 2 * l->cap_out : 64;
            uint32_t *v = realloc(l->out, cap * sizeof *v);
            if (v == NULL) {
                lb_engine_cancel(E->p->engine, ev[k].id);
                finish(E, l, LB_QERR_OTHER, "out of memory", t);
                continue;
            }
            l->out = v;
            l->cap_out = cap;
        }
        l->out[l->n_out++] = (uint32_t)ev[k].token;
        if (l->first_ns == 0) l->first_ns = t;
        E->cb.on_token(E->user, l->tag, t);
        if (ev[k].done != LB_FINISH_NONE) finish(E, l, LB_QERR_NONE, NULL, t);
    }
}

static void engine_abort_all(void *self, lb_qerr why) {
    fail_all(self, why, "interrupted");
}

static const lb_replica *engine_replicas(void *self, size_t *n) {
    *n = 1;
    return &((engine_sut *)self)->rep;
}

static void engine_close(void *self) {
    engine_sut *E = self;
    fail_all(E, LB_QERR_INTERRUPTED, "closed"); /* none after a whole run */
    if (E->prompts)
        for (size_t i = 0; i < E->ds->n; i++)
            free(E->prompts[i].ids);
    free(E->prompts);
    free(E->live);
    E->prompts = NULL;
    E->live = NULL;
    E->cap_live = 0;
}

static const lb_sut_ops engine_ops = {.open = engine_open,
                                      .submit = engine_submit,
                                      .serve = engine_serve,
                                      .abort_all = engine_abort_all,
                                      .preconnect = NULL,
                                      .replicas = engine_replicas,
                                      .close = engine_close};

/* The sampler's float f as the shortest decimal that reads back as f: --top-p 0.9 is 0.9
 * in the record, as the options give it, not the widened float's 0.8999999761581421. */
static double as_given(float f) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        double d = strtod(text, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

lb_status lb_infer_run(const lb_infer_params *p, const lb_dataset *ds, lb_result *out,
                       lb_loadgen_report *report, lb_err *err) {
    engine_sut E;
    memset(&E, 0, sizeof E);
    E.p = p;
    lb_sut sut = {&engine_ops, &E};
    lb_status st = lb_loadgen_run_sut(&p->lg, ds, &sut, out, report, err);
    if (!report->summarized) return st;
    json_object_set_new(out->config, "sut", json_string(p->sut_name ? p->sut_name : "engine"));
    const lb_engine_info *info = lb_engine_get_info(p->engine);
    json_object_set_new(
        out->config, "engine",
        json_pack("{s:s, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:f, s:i, s:f, s:b}", "backend",
                  info->backend, "weight_bytes", (json_int_t)info->weight_bytes, "kv_tokens",
                  (json_int_t)info->kv_tokens, "kv_bytes", (json_int_t)info->kv_bytes, "block_size",
                  info->block_size, "max_seqs", info->max_seqs, "step_tokens", info->step_tokens,
                  "max_ctx", info->max_ctx, "top_p", as_given(p->sampling.top_p), "top_k",
                  p->sampling.top_k, "temperature", as_given(p->sampling.temperature), "chat",
                  p->chat));
    lb_result_set_metric(out, "engine_kv_tokens", (double)info->kv_tokens, "tokens");
    lb_result_set_metric(out, "engine_weight_bytes", (double)info->weight_bytes, "bytes");
    /* this run's steps (a QPS search runs one engine through several); a run that no timed
     * query reached (a signal during the warm-up) has none, the warm-up's left out */
    if (E.warmup_left >= 0) E.at_open = *info;
    const lb_engine_info *b = &E.at_open;
    lb_result_set_metric(out, "engine_preemptions", (double)(info->preemptions - b->preemptions),
                         "count");
    lb_result_set_metric(out, "engine_steps", (double)(info->steps - b->steps), "count");
    const int64_t pre_n = info->prefill_steps - b->prefill_steps;
    const int64_t dec_n = info->decode_steps - b->decode_steps;
    const double pre_s = (double)(info->prefill_ns - b->prefill_ns) / 1e9;
    const double dec_s = (double)(info->decode_ns - b->decode_ns) / 1e9;
    const double prep_s = (double)(info->prepare_ns - b->prepare_ns) / 1e9;
    lb_result_set_metric(out, "engine_prefill_steps", (double)pre_n, "count");
    lb_result_set_metric(out, "engine_prefill_seconds", pre_s, "s");
    lb_result_set_metric(out, "engine_decode_steps", (double)dec_n, "count");
    lb_result_set_metric(out, "engine_decode_seconds", dec_s, "s");
    lb_result_set_metric(out, "engine_prepare_seconds", prep_s, "s");
    LB_INFO("engine steps: %lld with prompt tokens in %.3f s, %lld of decodes only in %.3f s; "
            "%.3f s of them preparing a kind of step the first time",
            (long long)pre_n, pre_s, (long long)dec_n, dec_s, prep_s);
    return st;
}
