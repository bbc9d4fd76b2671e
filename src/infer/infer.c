/* infer.c: the in-process scenario loop of infer.h.
 *
 * One thread alternates between issuing the queries that are due and running one engine
 * step; when the engine is idle and the next query is not yet due it sleeps until then.
 * Engine request ids are handed out in submit order, so query_of[id] maps an event back
 * to its query. */
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
#include "model/hf_tokenizer.h"

#define PROGRESS_NS     500000000LL
#define FAILURES_LOGGED 5

typedef struct {
    int32_t *ids; /* owned */
    int32_t n;
} prompt;

typedef struct {
    const lb_infer_params *p;
    const lb_dataset *ds;
    prompt *prompts; /* [ds->n] */
    lb_query *q;
    size_t n_q, cap_q, next, n_planned;
    int64_t *query_of; /* engine id -> query */
    size_t cap_ids;
    int64_t inflight, completed, failed, logged;
    int64_t t0;
    bool open_loop;
    int64_t slots;
    double target_qps;
    /* per query while in flight: its gaps; per sample in accuracy mode: the output */
    float **gap_v;
    uint32_t *gap_n, *gap_cap;
    int32_t **out_ids;
    int32_t *out_n;
    float *gaps; /* every query's gaps in query order, gathered at the end */
    uint32_t *order;
    size_t order_pos;
    lb_rng sample_rng;
    lb_status oom;
} run;

static lb_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return LB_OK;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (n == NULL) return LB_ERR_NOMEM;
    memset((char *)n + *cap * elem, 0, (c - *cap) * elem);
    *p = n;
    *cap = c;
    return LB_OK;
}

static lb_status reserve_queries(run *R, size_t need) {
    size_t cap = R->cap_q;
    LB_TRY(grow((void **)&R->q, &cap, need, sizeof *R->q));
    cap = R->cap_q;
    LB_TRY(grow((void **)&R->gap_v, &cap, need, sizeof *R->gap_v));
    cap = R->cap_q;
    LB_TRY(grow((void **)&R->gap_n, &cap, need, sizeof *R->gap_n));
    cap = R->cap_q;
    LB_TRY(grow((void **)&R->gap_cap, &cap, need, sizeof *R->gap_cap));
    R->cap_q = cap;
    return LB_OK;
}

static uint32_t next_sample(run *R) {
    size_t n = R->ds->n;
    if (R->p->lg.mode == LB_MODE_ACCURACY) return (uint32_t)(R->order_pos++ % n);
    if (R->order_pos == n) R->order_pos = 0;
    if (R->order_pos == 0)
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)lb_rng_below(&R->sample_rng, i + 1);
            uint32_t t = R->order[i];
            R->order[i] = R->order[j];
            R->order[j] = t;
        }
    return R->order[R->order_pos++];
}

static int64_t queries_wanted(const run *R) {
    if (R->p->lg.mode == LB_MODE_ACCURACY) return (int64_t)R->ds->n;
    return R->p->lg.min_queries > 0 ? R->p->lg.min_queries : (int64_t)R->ds->n;
}

static lb_status plan_open_loop(run *R) {
    const lb_loadgen_params *lg = &R->p->lg;
    int64_t want = queries_wanted(R);
    double min_ns = lg->mode == LB_MODE_ACCURACY ? 0.0 : lg->min_duration_s * 1e9;
    lb_rng rng;
    lb_rng_seed(&rng, lg->schedule_seed);
    double t = 0.0;
    size_t n = 0;
    while ((int64_t)n < want ||
           (lg->scenario == LB_SCENARIO_SERVER && lg->mode != LB_MODE_ACCURACY && t < min_ns)) {
        LB_TRY(reserve_queries(R, n + 1));
        lb_query *x = &R->q[n];
        memset(x, 0, sizeof *x);
        if (lg->scenario == LB_SCENARIO_SERVER) {
            x->scheduled_ns = (int64_t)t;
            t += -log(1.0 - lb_rng_uniform(&rng)) / R->target_qps * 1e9;
        }
        x->sample = next_sample(R);
        x->scheduled_send = true;
        n++;
    }
    R->n_planned = n;
    return LB_OK;
}

static bool closed_loop_wants(const run *R, int64_t t) {
    int64_t issued = (int64_t)R->next;
    if (R->p->lg.mode == LB_MODE_ACCURACY) return issued < (int64_t)R->ds->n;
    return issued < queries_wanted(R) || (double)t < R->p->lg.min_duration_s * 1e9;
}

static void fail_query(run *R, size_t i, uint8_t qerr, int64_t now, const char *why) {
    lb_query *x = &R->q[i];
    x->finished = true;
    x->error = qerr;
    x->done_ns = now;
    R->failed++;
    if (R->logged++ < FAILURES_LOGGED)
        LB_WARN("query %zu (sample %u) failed: %s", i, x->sample, why);
}

static void issue(run *R, size_t i, int64_t now) {
    lb_query *x = &R->q[i];
    const lb_infer_params *p = R->p;
    x->issued = true;
    x->attempts = 1;
    x->replica = 0;
    if (!R->open_loop) x->scheduled_ns = now;
    x->sent_ns = x->handover_ns = now;
    const lb_sample *s = &R->ds->samples[x->sample];
    const prompt *pr = &R->prompts[x->sample];
    x->input_tokens = pr->n;
    lb_engine_request rq = {.sampling = p->sampling,
                            .max_tokens = s->max_tokens > 0 ? s->max_tokens : p->lg.max_tokens,
                            .ignore_eos = p->lg.request.ignore_eos,
                            .eos_ids = p->eos_ids,
                            .n_eos = p->n_eos};
    rq.sampling.seed = p->sampling.seed + i;
    int64_t id;
    lb_err err;
    if (lb_engine_submit(p->engine, pr->ids, pr->n, &rq, &id, &err) != LB_OK) {
        fail_query(R, i, LB_QERR_HTTP_4XX, now, err.msg);
        return;
    }
    size_t cap = R->cap_ids;
    if (grow((void **)&R->query_of, &cap, (size_t)id + 1, sizeof *R->query_of) != LB_OK) {
        R->oom = LB_ERR_NOMEM;
        return;
    }
    R->cap_ids = cap;
    R->query_of[id] = (int64_t)i;
    R->inflight++;
}

static void on_token(run *R, const lb_engine_event *ev, int64_t t) {
    size_t i = (size_t)R->query_of[ev->id];
    lb_query *x = &R->q[i];
    if (x->n_chunks > 0) {
        if (R->gap_n[i] == R->gap_cap[i]) {
            uint32_t cap = R->gap_cap[i] ? 2 * R->gap_cap[i] : 64;
            float *v = realloc(R->gap_v[i], cap * sizeof *v);
            if (v == NULL) {
                R->oom = LB_ERR_NOMEM;
                return;
            }
            R->gap_v[i] = v;
            R->gap_cap[i] = cap;
        }
        R->gap_v[i][R->gap_n[i]++] = (float)((double)(t - x->last_ns) / 1e6);
    } else {
        x->first_ns = t;
    }
    x->last_ns = t;
    x->n_chunks++;
    if (R->out_ids != NULL) {
        uint32_t smp = x->sample;
        int32_t *o = realloc(R->out_ids[smp], (size_t)(R->out_n[smp] + 1) * sizeof *o);
        if (o == NULL) {
            R->oom = LB_ERR_NOMEM;
            return;
        }
        o[R->out_n[smp]++] = ev->token;
        R->out_ids[smp] = o;
    }
    if (ev->done == LB_FINISH_NONE) return;
    x->finished = true;
    x->done_ns = t;
    R->inflight--;
    R->completed++;
    lb_err e;
    lb_loadgen_query_count_output(x, x->n_chunks, true, NULL, NULL, 0, &e);
}

/* Every completed query's gaps into one array in query order (gap0, n_gaps). */
static lb_status gather_gaps(run *R) {
    size_t total = 0;
    for (size_t i = 0; i < R->next; i++)
        if (R->q[i].finished && R->q[i].error == LB_QERR_NONE) total += R->gap_n[i];
    R->gaps = malloc((total ? total : 1) * sizeof *R->gaps);
    if (R->gaps == NULL) return LB_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < R->next; i++) {
        bool ok = R->q[i].finished && R->q[i].error == LB_QERR_NONE;
        R->q[i].gap0 = (uint32_t)k;
        R->q[i].n_gaps = ok ? R->gap_n[i] : 0;
        if (ok && R->gap_n[i] > 0) memcpy(R->gaps + k, R->gap_v[i], R->gap_n[i] * sizeof *R->gaps);
        k += R->q[i].n_gaps;
    }
    return LB_OK;
}

static void report_progress(run *R, int64_t now, int64_t *last_tick, int64_t *last_done) {
    const lb_loadgen_params *lg = &R->p->lg;
    if (lg->progress == NULL || now - *last_tick < PROGRESS_NS) return;
    int64_t done = R->completed + R->failed;
    lb_loadgen_progress pr = {.issued = (int64_t)R->next,
                              .completed = R->completed,
                              .failed = R->failed,
                              .inflight = R->inflight,
                              .planned = R->open_loop ? (int64_t)R->n_planned : -1,
                              .elapsed_s = (double)now / 1e9,
                              .eta_s = NAN};
    pr.rate_per_s = (double)(done - *last_done) / ((double)(now - *last_tick) / 1e9);
    if (pr.planned >= 0 && pr.rate_per_s > 0)
        pr.eta_s = (double)(pr.planned - done) / pr.rate_per_s;
    lg->progress(lg->progress_user, &pr);
    *last_tick = now;
    *last_done = done;
}

static void sleep_until(int64_t t_abs) {
    int64_t d = t_abs - lb_clock_now_ns();
    if (d <= 0) return;
    struct timespec ts = {.tv_sec = d / 1000000000LL, .tv_nsec = d % 1000000000LL};
    nanosleep(&ts, NULL);
}

/* The scenario's loop; returns true when interrupted. */
static bool run_loop(run *R, lb_status *st, lb_err *err) {
    const lb_loadgen_params *lg = &R->p->lg;
    bool stopping = false;
    int64_t drain_deadline = 0, last_tick = 0, last_done = 0;
    R->t0 = lb_clock_now_ns();
    for (;;) {
        int64_t now = lb_clock_now_ns() - R->t0;
        if (!stopping && lb_signals_interrupted()) {
            stopping = true;
            drain_deadline = now + (int64_t)(lg->drain_s * 1e9);
            LB_WARN("interrupted: no new queries; running %lld in flight for up to %.0f s",
                    (long long)R->inflight, lg->drain_s);
        }
        if (!stopping) {
            if (R->open_loop) {
                while (R->next < R->n_planned && R->q[R->next].scheduled_ns <= now)
                    issue(R, R->next++, now);
            } else {
                while (R->inflight < R->slots && closed_loop_wants(R, now)) {
                    if (reserve_queries(R, R->next + 1) != LB_OK) {
                        R->oom = LB_ERR_NOMEM;
                        break;
                    }
                    memset(&R->q[R->next], 0, sizeof R->q[0]);
                    R->q[R->next].sample = next_sample(R);
                    issue(R, R->next++, now);
                }
            }
        }
        bool more = !stopping && R->oom == LB_OK &&
                    (R->open_loop ? R->next < R->n_planned : closed_loop_wants(R, now));
        if ((!more && R->inflight == 0) || R->oom != LB_OK) break;
        if (stopping && now >= drain_deadline) {
            for (size_t i = 0; i < R->next; i++)
                if (R->q[i].issued && !R->q[i].finished) {
                    R->q[i].error = LB_QERR_INTERRUPTED;
                    R->q[i].finished = true;
                    R->q[i].done_ns = now;
                    R->failed++;
                }
            break;
        }
        if (lb_engine_pending(R->p->engine) > 0) {
            const lb_engine_event *ev;
            int32_t n;
            if ((*st = lb_engine_step(R->p->engine, &ev, &n, err)) != LB_OK) break;
            int64_t t = lb_clock_now_ns() - R->t0;
            for (int32_t k = 0; k < n; k++)
                on_token(R, &ev[k], t);
        } else if (more && R->open_loop) {
            int64_t due = R->q[R->next].scheduled_ns, wake = now + PROGRESS_NS;
            sleep_until(R->t0 + (due < wake ? due : wake));
        }
        report_progress(R, lb_clock_now_ns() - R->t0, &last_tick, &last_done);
    }
    return stopping;
}

/* Token ids of every sample before t0. */
static lb_status make_prompts(run *R, lb_err *err) {
    const lb_infer_params *p = R->p;
    const lb_dataset *ds = R->ds;
    R->prompts = calloc(ds->n, sizeof *R->prompts);
    if (R->prompts == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the prompts");
    int32_t vocab = lb_engine_config(p->engine)->vocab_size;
    for (size_t i = 0; i < ds->n; i++) {
        const lb_sample *s = &ds->samples[i];
        prompt *pr = &R->prompts[i];
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

static void free_run(run *R) {
    if (R->prompts)
        for (size_t i = 0; i < R->ds->n; i++)
            free(R->prompts[i].ids);
    free(R->prompts);
    for (size_t i = 0; i < R->cap_q; i++)
        free(R->gap_v ? R->gap_v[i] : NULL);
    free(R->gap_v);
    free(R->gap_n);
    free(R->gap_cap);
    free(R->q);
    free(R->query_of);
    free(R->gaps);
    free(R->order);
    if (R->out_ids)
        for (size_t i = 0; i < R->ds->n; i++)
            free(R->out_ids[i]);
    free(R->out_ids);
    free(R->out_n);
}

/* Accuracy mode: the generated ids of every sample as text (the end-of-sequence id left
 * out), NULL where the sample failed. */
static lb_status decode_texts(run *R, char ***texts, lb_err *err) {
    const lb_infer_params *p = R->p;
    *texts = calloc(R->ds->n, sizeof **texts);
    if (*texts == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < R->ds->n; i++) {
        int32_t n = R->out_n[i];
        if (n == 0) continue;
        for (int k = 0; k < p->n_eos && !p->lg.request.ignore_eos; k++)
            if (R->out_ids[i][n - 1] == p->eos_ids[k]) {
                n--;
                break;
            }
        if (p->tok == NULL) {
            (*texts)[i] = strdup("");
            continue;
        }
        /* token by token: an id the tokenizer lacks (a model's unused rows) adds nothing */
        size_t len = 0, cap = 64;
        char *t = malloc(cap);
        if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        for (int32_t k = 0; k < n; k++) {
            char *piece = NULL;
            size_t pl = 0;
            uint32_t id = (uint32_t)R->out_ids[i][k];
            lb_err ignored;
            if (lb_tokenizer_decode(p->tok, &id, 1, &piece, &pl, &ignored) != LB_OK) continue;
            if (len + pl + 1 > cap) {
                while (len + pl + 1 > cap)
                    cap *= 2;
                char *g = realloc(t, cap);
                if (g == NULL) {
                    free(piece);
                    free(t);
                    return lb_fail(err, LB_ERR_NOMEM, "out of memory");
                }
                t = g;
            }
            memcpy(t + len, piece, pl);
            len += pl;
            free(piece);
        }
        t[len] = '\0';
        (*texts)[i] = t;
    }
    return LB_OK;
}

lb_status lb_infer_run(const lb_infer_params *p, const lb_dataset *ds, lb_result *out,
                       lb_loadgen_report *report, lb_err *err) {
    const lb_loadgen_params *lg = &p->lg;
    memset(report, 0, sizeof *report);
    if (ds->n == 0) return lb_fail(err, LB_ERR_USAGE, "the dataset has no samples");
    if (lg->scenario == LB_SCENARIO_SERVER && !(lg->qps > 0))
        return lb_fail(err, LB_ERR_USAGE, "the Server scenario needs --qps > 0");
    run R;
    memset(&R, 0, sizeof R);
    R.p = p;
    R.ds = ds;
    lb_status st = make_prompts(&R, err);
    R.order = st == LB_OK ? malloc(ds->n * sizeof *R.order) : NULL;
    if (st == LB_OK && R.order == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; R.order && i < ds->n; i++)
        R.order[i] = (uint32_t)i;
    if (st == LB_OK && lg->mode == LB_MODE_ACCURACY) {
        R.out_ids = calloc(ds->n, sizeof *R.out_ids);
        R.out_n = calloc(ds->n, sizeof *R.out_n);
        if (R.out_ids == NULL || R.out_n == NULL) st = lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    lb_loadgen_summary *s = &report->summary;
    R.open_loop = lg->scenario == LB_SCENARIO_OFFLINE || lg->scenario == LB_SCENARIO_SERVER;
    R.slots = lg->scenario == LB_SCENARIO_SINGLE_STREAM ? 1 : lg->concurrency;
    R.target_qps = lg->scenario == LB_SCENARIO_SERVER ? lg->qps : 0;
    lb_rng_seed(&R.sample_rng, lg->sample_seed);
    if (st == LB_OK && R.open_loop && plan_open_loop(&R) != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory for the query schedule");
    if (st != LB_OK) {
        free_run(&R);
        return st;
    }
    json_decref(out->config);
    out->config = lb_loadgen_config_json(lg, ds);
    json_object_set_new(out->config, "sut", json_string(p->sut_name ? p->sut_name : "engine"));
    const lb_engine_info *info = lb_engine_get_info(p->engine);
    json_object_set_new(
        out->config, "engine",
        json_pack("{s:s, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:f, s:i, s:f, s:b}", "backend",
                  info->backend, "weight_bytes", (json_int_t)info->weight_bytes, "kv_tokens",
                  (json_int_t)info->kv_tokens, "kv_bytes", (json_int_t)info->kv_bytes, "block_size",
                  info->block_size, "max_seqs", info->max_seqs, "step_tokens", info->step_tokens,
                  "max_ctx", info->max_ctx, "top_p", (double)p->sampling.top_p, "top_k",
                  p->sampling.top_k, "temperature", (double)p->sampling.temperature, "chat",
                  p->chat));
    out->start_wall_s = lb_clock_wall_s();
    lb_status run_st = LB_OK;
    bool interrupted = run_loop(&R, &run_st, err);
    out->end_wall_s = lb_clock_wall_s();
    if (run_st != LB_OK) st = run_st;
    if (st == LB_OK && R.oom != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory while recording");
    s->scenario = lg->scenario;
    s->mode = lg->mode;
    s->target_qps = R.target_qps;
    s->concurrency = R.open_loop ? 0 : R.slots;
    s->constraints = lg->constraints;
    s->min_duration_s = lg->mode == LB_MODE_ACCURACY ? 0 : lg->min_duration_s;
    s->min_queries = queries_wanted(&R);
    s->max_inflight = 0;
    s->streamed = true;
    s->sample_seed = lg->sample_seed;
    s->schedule_seed = lg->schedule_seed;
    s->n_samples = ds->n;
    s->n_replicas = 1;
    snprintf(s->replicas[0].url, sizeof s->replicas[0].url, "%s",
             p->sut_name ? p->sut_name : "engine");
    s->replicas[0].sent = (int64_t)R.next;
    s->replicas[0].completed = R.completed;
    s->replicas[0].failed = R.failed;
    if (st == LB_OK && gather_gaps(&R) != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory while recording queries");
    if (st == LB_OK && lb_loadgen_summarize(R.q, R.next, R.gaps, NULL, 0, s) != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory summarizing");
    char **texts = NULL;
    if (st == LB_OK && lg->mode == LB_MODE_ACCURACY) {
        st = decode_texts(&R, &texts, err);
        if (st == LB_OK) st = lb_loadgen_score_accuracy(ds, texts, s, out, err);
    }
    if (st == LB_OK &&
        (lb_loadgen_summary_to_result(s, out) != LB_OK ||
         lb_loadgen_add_series(R.q, R.next, R.gaps, true, NULL, NULL, NULL, 0, out) != LB_OK))
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory storing the result");
    if (st == LB_OK) {
        lb_result_set_metric(out, "engine_kv_tokens", (double)info->kv_tokens, "tokens");
        lb_result_set_metric(out, "engine_weight_bytes", (double)info->weight_bytes, "bytes");
        lb_result_set_metric(out, "engine_preemptions", (double)info->preemptions, "count");
        lb_result_set_metric(out, "engine_steps", (double)info->steps, "count");
    }
    if (st == LB_OK && interrupted) {
        out->status = LB_RUN_INTERRUPTED;
        snprintf(out->failure, sizeof out->failure, "interrupted by signal %d",
                 lb_signals_received());
        st = lb_fail(err, LB_ERR_INTERRUPTED, "%s", out->failure);
    } else if (st == LB_OK) {
        out->status = LB_RUN_OK;
    }
    if (st == LB_OK || st == LB_ERR_INTERRUPTED) {
        report->summarized = true;
        if (texts) {
            report->texts = texts;
            report->n_texts = ds->n;
            texts = NULL;
        }
    }
    if (texts)
        for (size_t i = 0; i < ds->n; i++)
            free(texts[i]);
    free(texts);
    free_run(&R);
    return st;
}
