/* loadgen.c: the scheduler loop behind loadgen.h.
 *
 * One thread: the loop issues every query that is due, then lets the SUT serve (the
 * network, or an engine step) until the next query is due (or a completion frees a slot,
 * or the progress tick comes). Open-loop scenarios (Offline, Server) have their whole
 * schedule drawn before t0; closed-loop ones (SingleStream, concurrency) schedule a query
 * when a slot frees. The HTTP SUT (the end of this file) builds request bodies once per
 * sample before t0, so sending costs no JSON work.
 * Conversations (multi-turn datasets): the schedule and the closed loop start
 * conversations; a turn's next one is queued when it ends and sent first, as soon as the
 * in-flight cap allows (its history is the dataset's, so its body is built before t0).
 * Inter-token gaps of a query are held per query (a retried attempt drops its gaps) and
 * laid out in query order in one run-wide array at the end, for the ITL distribution and
 * the stored series. */
#include "loadgen/loadgen.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "accuracy/rouge.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/provenance.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/utf8text.h"

#define PROGRESS_NS     500000000LL
#define WARMUP_TAG      (UINT64_C(1) << 62) /* marks unrecorded warm-up requests */
#define FAILURES_LOGGED 5

typedef struct {
    float *v;
    uint32_t n, cap;
} gapbuf;

typedef struct {
    const lb_loadgen_params *p;
    const lb_dataset *ds;
    const lb_sut *sut;
    bool sut_open;
    lb_query *q;
    gapbuf *gb;
    size_t n_q, cap_q; /* query records in use (open loop: the schedule, then follow-ups) */
    size_t n_planned;  /* open loop: schedule length */
    size_t next;       /* open loop: next planned query to issue; closed loop: n_q */
    int64_t n_issued;
    int64_t last_issued_ns; /* when the latest query was issued (ns since t0) */
    int64_t planned_turns;  /* open loop: queries the schedule's conversations hold */
    /* conversations: samples whose turn before ended, to send next (a FIFO) */
    uint32_t *pend;
    size_t pend_head, pend_n, pend_cap;
    int64_t t0;
    int64_t inflight, completed, failed, logged;
    int64_t warm_inflight;
    bool open_loop;
    double target_qps;
    int64_t slots; /* closed loop: queries in flight at most */
    /* sample order: the samples that start something (every sample, or conversations'
     * first turns) */
    uint32_t *order;
    size_t n_order, order_pos;
    int64_t set_queries; /* the queries the samples of order start (their turns) */
    bool subset;         /* order holds performance_sample_count of them, not all */
    lb_rng sample_rng;
    /* attempts that failed and were sent again: query index and reason, in time order */
    uint32_t *rs_query;
    uint8_t *rs_error;
    int16_t *rs_replica;
    size_t n_rs, cap_rs;
    float *gaps; /* every query's gaps, in query order (filled at the end) */
    char **texts;
    uint32_t **ids; /* accuracy mode: each sample's token ids, where the SUT gives them */
    size_t *n_ids;
    lb_status oom;
} run;

lb_loadgen_params lb_loadgen_default_params(void) {
    lb_loadgen_params p;
    memset(&p, 0, sizeof p);
    p.scenario = LB_SCENARIO_SERVER;
    p.mode = LB_MODE_PERFORMANCE;
    p.qps = 1.0;
    p.burstiness = 1.0;
    p.concurrency = 1;
    p.min_duration_s = 0.0;
    p.min_queries = 0;
    p.max_inflight = 1024;
    p.max_failed = 0;
    p.preconnect = -1;
    p.sample_seed = 1;
    p.schedule_seed = 2;
    p.qsl_seed = 3;
    p.max_tokens = 128;
    p.constraints = lb_loadgen_constraints_default();
    p.drain_s = 10.0;
    p.request = (lb_openai_request){.api = LB_API_COMPLETIONS,
                                    .model = NULL,
                                    .stream = true,
                                    .ignore_eos = false,
                                    .temperature = 0.0};
    p.pool = lb_pool_default_params();
    return p;
}

void lb_loadgen_report_free(lb_loadgen_report *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n_texts; i++) {
        free(r->texts[i]);
        free(r->ids ? r->ids[i] : NULL);
    }
    free(r->texts);
    free(r->ids);
    free(r->n_ids);
    memset(r, 0, sizeof *r);
}

static lb_status reserve_queries(run *R, size_t need) {
    if (need <= R->cap_q) return LB_OK;
    size_t cap = R->cap_q ? R->cap_q : 1024;
    while (cap < need)
        cap *= 2;
    lb_query *q = realloc(R->q, cap * sizeof *q);
    if (q == NULL) return LB_ERR_NOMEM;
    R->q = q;
    gapbuf *g = realloc(R->gb, cap * sizeof *g);
    if (g == NULL) return LB_ERR_NOMEM;
    R->gb = g;
    memset(R->q + R->cap_q, 0, (cap - R->cap_q) * sizeof *q);
    memset(R->gb + R->cap_q, 0, (cap - R->cap_q) * sizeof *g);
    R->cap_q = cap;
    return LB_OK;
}

static uint32_t next_sample(run *R) {
    size_t n = R->n_order;
    if (R->p->mode == LB_MODE_ACCURACY) return R->order[R->order_pos++ % n];
    if (R->order_pos == n) R->order_pos = 0;
    if (R->order_pos == 0) /* a fresh seeded permutation per pass */
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)lb_rng_below(&R->sample_rng, i + 1);
            uint32_t t = R->order[i];
            R->order[i] = R->order[j];
            R->order[j] = t;
        }
    return R->order[R->order_pos++];
}

static int64_t queries_wanted(const run *R) {
    if (R->p->mode == LB_MODE_ACCURACY) return (int64_t)R->ds->n;
    return R->p->min_queries > 0 ? R->p->min_queries : R->set_queries;
}

/* The next Server gap at the full rate (s): exponential of mean 1/qps, or with burstiness
 * b != 1 Gamma(b) scaled to the same mean (coefficient of variation 1/sqrt(b)). */
static double next_gap_s(lb_rng *rng, double qps, double b) {
    if (b == 1.0) return -log(1.0 - lb_rng_uniform(rng)) / qps;
    return lb_rng_gamma(rng, b) / (b * qps);
}

/* Real time (s) of operational time tau under a linear ramp over r seconds: the rate is
 * qps * t / r until r, so the expected arrivals by t are qps * Lambda(t) with Lambda(t) =
 * t^2 / (2r) before r and t - r/2 after; this inverts Lambda. */
static double ramped_s(double tau, double r) {
    if (r <= 0) return tau;
    return tau <= r / 2 ? sqrt(2.0 * r * tau) : tau + r / 2;
}

/* The queries a sample starts: 1, or the turns of the conversation it opens. */
static int64_t turns_from(const run *R, uint32_t sample) {
    int64_t k = 1;
    for (int32_t t = R->ds->samples[sample].next_turn; t >= 0; t = R->ds->samples[t].next_turn)
        k++;
    return k;
}

/* Open loop: the whole schedule. Server draws gaps at the target rate (next_gap_s), the
 * first query at 0, until both minimums are met: at least min_queries (counting each
 * conversation's turns), and the last one scheduled at or after min_duration (LoadGen's
 * rule; its verdict checks the final query's scheduled time). Offline schedules every
 * query at 0. */
static lb_status plan_open_loop(run *R, uint64_t seed) {
    int64_t want = queries_wanted(R);
    double min_ns = R->p->mode == LB_MODE_ACCURACY ? 0.0 : R->p->min_duration_s * 1e9;
    bool timed = R->p->scenario == LB_SCENARIO_SERVER && R->p->mode != LB_MODE_ACCURACY;
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    double t = 0.0; /* operational time (s): real time before the ramp-up */
    size_t n = 0;
    int64_t turns = 0;
    for (;;) {
        if (turns >= want && (!timed || (n > 0 && (double)R->q[n - 1].scheduled_ns >= min_ns)))
            break;
        if (n == LB_LOADGEN_MAX_QUERIES) return LB_ERR_USAGE;
        LB_TRY(reserve_queries(R, n + 1));
        lb_query *x = &R->q[n];
        memset(x, 0, sizeof *x);
        if (R->p->scenario == LB_SCENARIO_SERVER) {
            x->scheduled_ns = (int64_t)(ramped_s(t, R->p->ramp_up_s) * 1e9);
            t += next_gap_s(&rng, R->target_qps, R->p->burstiness);
        }
        x->sample = next_sample(R);
        x->scheduled_send = true;
        turns += turns_from(R, x->sample);
        n++;
    }
    R->n_planned = R->n_q = n;
    R->planned_turns = turns;
    return LB_OK;
}

/* Closed loop: is another query (a new conversation's first) wanted? Queries issued and
 * queued follow-ups count against the minimum; the duration is met once a query has been
 * issued at or after min_duration (LoadGen's rule: its verdict checks the final query's
 * issue time, so the loop stops only after issuing one that late). */
static bool closed_loop_wants(const run *R) {
    int64_t issued = R->n_issued + (int64_t)R->pend_n;
    if (R->p->mode == LB_MODE_ACCURACY) return R->order_pos < R->n_order;
    return issued < queries_wanted(R) || (double)R->last_issued_ns < R->p->min_duration_s * 1e9;
}

/* Sends query i; one not on a schedule is due now. */
static void issue(run *R, size_t i, int64_t now_rel) {
    lb_query *x = &R->q[i];
    x->issued = true;
    x->attempts = 1;
    x->replica = -1;
    x->input_tokens = -1;
    if (!x->scheduled_send) x->scheduled_ns = now_rel;
    R->inflight++;
    R->n_issued++;
    R->last_issued_ns = now_rel;
    lb_err err;
    if (R->sut->ops->submit(R->sut->self, i, x->sample, &err) != LB_OK) {
        /* the SUT refused at once: count it as a failure of this query and go on. */
        x->finished = true;
        x->error = LB_QERR_OTHER;
        x->sent_ns = x->done_ns = now_rel;
        R->inflight--;
        R->failed++;
        LB_WARN("query %zu could not be sent: %s", i, err.msg);
    }
}

static void on_token(void *user, uint64_t tag, int64_t t_ns) {
    run *R = user;
    if (tag & WARMUP_TAG) return;
    lb_query *x = &R->q[tag];
    int64_t t = t_ns - R->t0;
    if (x->first_ns != 0) {
        gapbuf *g = &R->gb[tag];
        if (g->n == g->cap) {
            uint32_t cap = g->cap ? g->cap * 2 : 64;
            float *v = realloc(g->v, cap * sizeof *v);
            if (v == NULL) {
                R->oom = LB_ERR_NOMEM;
                return;
            }
            g->v = v;
            g->cap = cap;
        }
        g->v[g->n++] = (float)((double)(t - x->last_ns) / 1e6);
    } else {
        x->first_ns = t;
    }
    x->last_ns = t;
}

static void on_retry(void *user, uint64_t tag, const lb_http_outcome *failed) {
    run *R = user;
    if (tag & WARMUP_TAG) return;
    lb_query *x = &R->q[tag];
    x->conns_opened += failed->new_connection;
    if (R->n_rs == R->cap_rs) {
        size_t cap = R->cap_rs ? R->cap_rs * 2 : 256;
        uint32_t *qv = realloc(R->rs_query, cap * sizeof *qv);
        if (qv != NULL) R->rs_query = qv;
        uint8_t *ev = realloc(R->rs_error, cap * sizeof *ev);
        if (ev != NULL) R->rs_error = ev;
        int16_t *rv = realloc(R->rs_replica, cap * sizeof *rv);
        if (rv != NULL) R->rs_replica = rv;
        if (qv == NULL || ev == NULL || rv == NULL) {
            R->oom = LB_ERR_NOMEM;
            return;
        }
        R->cap_rs = cap;
    }
    R->rs_query[R->n_rs] = (uint32_t)tag;
    R->rs_replica[R->n_rs] = (int16_t)failed->req.replica;
    R->rs_error[R->n_rs++] = (uint8_t)failed->error;
    x->first_ns = x->last_ns = 0;
    R->gb[tag].n = 0;
    x->attempts++;
    LB_INFO("query %llu: %s on %d (%s), sent again", (unsigned long long)tag,
            lb_http_qerr_name(failed->error), failed->req.replica, failed->detail);
}

/* Queues a conversation's next turn (a ring buffer that grows). */
static lb_status pend_push(run *R, uint32_t sample) {
    if (R->pend_n == R->pend_cap) {
        size_t cap = R->pend_cap ? 2 * R->pend_cap : 64;
        uint32_t *v = malloc(cap * sizeof *v);
        if (v == NULL) return LB_ERR_NOMEM;
        for (size_t k = 0; k < R->pend_n; k++)
            v[k] = R->pend[(R->pend_head + k) % R->pend_cap];
        free(R->pend);
        R->pend = v;
        R->pend_head = 0;
        R->pend_cap = cap;
    }
    R->pend[(R->pend_head + R->pend_n++) % R->pend_cap] = sample;
    return LB_OK;
}

static void on_done(void *user, const lb_http_outcome *o) {
    run *R = user;
    uint64_t tag = o->req.tag;
    if (tag & WARMUP_TAG) {
        R->warm_inflight--;
        return;
    }
    lb_query *x = &R->q[tag];
    gapbuf *g = &R->gb[tag];
    x->conns_opened += o->new_connection;
    int32_t follow = R->ds->samples[x->sample].next_turn;
    if (follow >= 0 && o->error != LB_QERR_INTERRUPTED && pend_push(R, (uint32_t)follow) != LB_OK)
        R->oom = LB_ERR_NOMEM;
    int64_t now_rel = lb_clock_now_ns() - R->t0;
    x->finished = true;
    x->error = (uint8_t)o->error;
    x->http_status = (int16_t)o->http_status;
    x->replica = (int16_t)o->req.replica;
    x->attempts = (uint8_t)(o->req.attempt + 1);
    x->sent_ns = o->sent_ns ? o->sent_ns - R->t0 : now_rel;
    x->handover_ns = o->start_ns ? o->start_ns - R->t0 : now_rel;
    x->done_ns = o->done_ns ? o->done_ns - R->t0 : now_rel;
    R->inflight--;
    if (o->error != LB_QERR_NONE) {
        R->failed++;
        if (R->logged++ < FAILURES_LOGGED)
            LB_WARN("query %llu (sample %u) failed: %s: %s", (unsigned long long)tag, x->sample,
                    lb_http_qerr_name(o->error), o->detail);
        g->n = 0;
        return;
    }
    R->completed++;
    x->first_ns = o->first_ns - R->t0;
    x->n_chunks = o->n_chunks;
    lb_err cerr;
    if (lb_loadgen_query_count_output(x, o->completion_tokens, R->p->request.stream,
                                      R->p->tokenizer, o->text, o->text_len, o->reasoning,
                                      o->reasoning_len, &cerr) != LB_OK) {
        R->oom = LB_ERR_NOMEM; /* the only way a count fails */
        return;
    }
    x->input_tokens =
        o->prompt_tokens >= 0 ? (int32_t)o->prompt_tokens : R->ds->samples[x->sample].input_tokens;
    if (R->texts != NULL && o->text != NULL && R->texts[x->sample] == NULL) {
        R->texts[x->sample] = strndup(o->text, o->text_len);
        if (R->texts[x->sample] == NULL) R->oom = LB_ERR_NOMEM;
    }
    if (R->ids != NULL && o->token_ids != NULL && R->ids[x->sample] == NULL) {
        uint32_t *v = malloc((o->n_token_ids ? o->n_token_ids : 1) * sizeof *v);
        if (v == NULL) {
            R->oom = LB_ERR_NOMEM;
            return;
        }
        memcpy(v, o->token_ids, o->n_token_ids * sizeof *v);
        R->ids[x->sample] = v;
        R->n_ids[x->sample] = o->n_token_ids;
    }
}

static void report_progress(run *R, int64_t now_rel, int64_t *last_tick, int64_t *last_done) {
    if (R->p->progress == NULL || now_rel - *last_tick < PROGRESS_NS) return;
    int64_t done = R->completed + R->failed;
    lb_loadgen_progress pr = {.issued = R->n_issued,
                              .completed = R->completed,
                              .failed = R->failed,
                              .inflight = R->inflight,
                              .planned = -1,
                              .elapsed_s = (double)now_rel / 1e9,
                              .eta_s = NAN};
    pr.rate_per_s = (double)(done - *last_done) / ((double)(now_rel - *last_tick) / 1e9);
    if (R->open_loop)
        pr.planned = R->planned_turns;
    else if (R->p->mode == LB_MODE_ACCURACY || R->p->min_duration_s <= 0)
        pr.planned = queries_wanted(R);
    if (pr.planned >= 0) pr.eta_s = lb_progress_eta_s((double)(pr.planned - done), pr.rate_per_s);
    if (R->p->scenario == LB_SCENARIO_SERVER && R->open_loop && R->n_planned > 0) {
        double left = (double)(R->q[R->n_planned - 1].scheduled_ns - now_rel) / 1e9;
        if (left > 0 && !(pr.eta_s > left)) pr.eta_s = left;
    } else if (pr.planned < 0) {
        pr.eta_s = R->p->min_duration_s - pr.elapsed_s;
        if (pr.eta_s < 0) pr.eta_s = 0;
    }
    R->p->progress(R->p->progress_user, &pr);
    *last_tick = now_rel;
    *last_done = done;
}

/* The most queries the run may have in flight at once (0 = no limit). */
int64_t lb_loadgen_connection_room(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return LB_LOADGEN_MAX_PRECONNECT;
    int64_t room = (int64_t)rl.rlim_cur - 64; /* standard streams, epoll, timers, the store */
    if (room < 1) room = 1;
    return room < LB_LOADGEN_MAX_PRECONNECT ? room : LB_LOADGEN_MAX_PRECONNECT;
}

static int64_t most_inflight(const lb_loadgen_params *p) {
    if (p->scenario == LB_SCENARIO_SINGLE_STREAM) return 1;
    if (p->scenario == LB_SCENARIO_CONCURRENCY) return p->concurrency;
    return p->max_inflight;
}

/* Opens the connections the first step will need before its t0: p->preconnect, or with
 * -1 as many as it may have in flight (1024 when nothing limits it), at most its planned
 * queries and, in the Server scenario, at most one second of arrivals (64 at least):
 * the rate at which a late connection would matter, without a thousand connections for
 * a run of a few queries a second. */
static lb_status preconnect(run *R, int64_t *opened, lb_err *err) {
    int64_t n = R->p->preconnect;
    if (n < 0) {
        n = most_inflight(R->p);
        if (n <= 0) n = 1024;
        if (R->open_loop && (int64_t)R->n_planned < n) n = (int64_t)R->n_planned;
        int64_t second = (int64_t)ceil(R->target_qps);
        if (second < 64) second = 64;
        if (R->p->scenario == LB_SCENARIO_SERVER && second < n) n = second;
    }
    /* The HTTP client's multi handles take two descriptors each, one per 64 connections the
     * run may have open (sut/http.c). */
    int64_t most = most_inflight(R->p) > 1024 ? most_inflight(R->p) : 1024;
    int64_t room = lb_loadgen_connection_room() - 2 * ((most + 63) / 64);
    if (room < 1) room = 1;
    if (n > room) {
        LB_WARN("opening %lld connections before the run would pass what the open-file limit "
                "leaves room for: opening %lld",
                (long long)n, (long long)room);
        n = room;
    }
    int64_t t = lb_clock_now_ns();
    LB_TRY(R->sut->ops->preconnect(R->sut->self, n, opened, err));
    double ms = (double)(lb_clock_now_ns() - t) / 1e6;
    if (*opened < n)
        LB_WARN("opened %lld of %lld connections before the run (%.0f ms); the rest open as "
                "queries need them",
                (long long)*opened, (long long)n, ms);
    else
        LB_INFO("opened %lld connections before the run (%.0f ms)", (long long)n, ms);
    return LB_OK;
}

/* Sends warmup_queries unrecorded requests, as many at once as the step may have in
 * flight, so the server is warm before the step's t0 (the connections are opened by
 * preconnect). SIGINT stops it as it stops the run: nothing more is sent, the requests
 * in flight get drain_s, then the rest are ended. */
static void warm_up(run *R) {
    const lb_loadgen_params *p = R->p;
    int64_t n = p->warmup_queries, sent = 0, drain_deadline = -1;
    int64_t slots = R->open_loop ? (p->max_inflight > 0 ? p->max_inflight : n) : R->slots;
    R->warm_inflight = 0;
    while ((sent < n && !lb_signals_interrupted()) || R->warm_inflight > 0) {
        while (sent < n && R->warm_inflight < slots && !lb_signals_interrupted()) {
            uint32_t k = (uint32_t)(sent % (int64_t)R->ds->n);
            lb_err err;
            if (R->sut->ops->submit(R->sut->self, WARMUP_TAG | (uint64_t)sent, k, &err) != LB_OK)
                return;
            R->warm_inflight++;
            sent++;
        }
        int64_t now = lb_clock_now_ns(), wake = now + PROGRESS_NS;
        if (lb_signals_interrupted()) {
            if (drain_deadline < 0) drain_deadline = now + (int64_t)(p->drain_s * 1e9);
            if (now >= drain_deadline) {
                R->sut->ops->abort_all(R->sut->self, LB_QERR_INTERRUPTED);
                return;
            }
            if (drain_deadline < wake) wake = drain_deadline;
        }
        R->sut->ops->serve(R->sut->self, wake);
    }
}

/* Lays every completed query's gaps out in query order in R->gaps (gap0, n_gaps of
 * each); a query that did not complete keeps none. */
static lb_status gather_gaps(run *R) {
    size_t total = 0;
    for (size_t i = 0; i < R->n_q; i++) {
        if (!R->q[i].finished || R->q[i].error != LB_QERR_NONE) R->gb[i].n = 0;
        total += R->gb[i].n;
    }
    R->gaps = malloc((total ? total : 1) * sizeof *R->gaps);
    if (R->gaps == NULL) return LB_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < R->n_q; i++) {
        R->q[i].gap0 = (uint32_t)k;
        R->q[i].n_gaps = R->gb[i].n;
        if (R->gb[i].n > 0) memcpy(R->gaps + k, R->gb[i].v, R->gb[i].n * sizeof *R->gaps);
        k += R->gb[i].n;
    }
    return LB_OK;
}

/* Runs the load. Returns true when interrupted. */
static bool run_step(run *R) {
    const lb_loadgen_params *p = R->p;
    bool stopping = false;
    int64_t drain_deadline = 0, last_tick = 0, last_done = 0;
    R->t0 = lb_clock_now_ns();
    for (;;) {
        int64_t now = lb_clock_now_ns() - R->t0;
        if (!stopping && lb_signals_interrupted()) {
            stopping = true;
            drain_deadline = now + (int64_t)(p->drain_s * 1e9);
            LB_WARN("interrupted: no new queries; waiting up to %.0f s for %lld in flight",
                    p->drain_s, (long long)R->inflight);
        }
        if (!stopping) {
            /* conversations' next turns first, as the in-flight cap allows */
            int64_t cap = R->open_loop ? p->max_inflight : R->slots;
            while (R->pend_n > 0 && (cap <= 0 || R->inflight < cap)) {
                if (reserve_queries(R, R->n_q + 1) != LB_OK) {
                    R->oom = LB_ERR_NOMEM;
                    break;
                }
                size_t i = R->n_q++;
                memset(&R->q[i], 0, sizeof R->q[0]);
                R->q[i].sample = R->pend[R->pend_head];
                R->pend_head = (R->pend_head + 1) % R->pend_cap;
                R->pend_n--;
                if (!R->open_loop) R->next = R->n_q;
                issue(R, i, now);
            }
            if (R->open_loop) {
                while (R->next < R->n_planned && R->q[R->next].scheduled_ns <= now &&
                       (p->max_inflight <= 0 || R->inflight < p->max_inflight))
                    issue(R, R->next++, now);
            } else {
                while (R->inflight < R->slots && R->pend_n == 0 && closed_loop_wants(R)) {
                    if (reserve_queries(R, R->n_q + 1) != LB_OK) {
                        R->oom = LB_ERR_NOMEM;
                        break;
                    }
                    size_t i = R->n_q++;
                    memset(&R->q[i], 0, sizeof R->q[0]);
                    R->q[i].sample = next_sample(R);
                    R->next = R->n_q;
                    issue(R, i, now);
                }
            }
        }
        bool more =
            !stopping && R->oom == LB_OK &&
            (R->pend_n > 0 || (R->open_loop ? R->next < R->n_planned : closed_loop_wants(R)));
        if (!more && R->inflight == 0) break;
        if (stopping && now >= drain_deadline) {
            R->sut->ops->abort_all(R->sut->self, LB_QERR_INTERRUPTED);
            break;
        }
        int64_t wake = now + PROGRESS_NS;
        if (stopping && drain_deadline < wake) wake = drain_deadline;
        if (more && R->open_loop && R->next < R->n_planned &&
            (p->max_inflight <= 0 || R->inflight < p->max_inflight)) {
            int64_t due = R->q[R->next].scheduled_ns;
            if (due < wake) wake = due;
        }
        R->sut->ops->serve(R->sut->self, R->t0 + wake);
        report_progress(R, lb_clock_now_ns() - R->t0, &last_tick, &last_done);
    }
    return stopping;
}

/* The samples that start something (every sample, or conversations' first turns). In
 * performance mode with performance_sample_count below their number, only that many of
 * them, drawn with qsl_seed (LoadGen loads such a set with its qsl_rng_seed). */
static lb_status make_order(run *R, lb_err *err) {
    R->order = malloc(R->ds->n * sizeof *R->order);
    if (R->order == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the sample order");
    for (size_t i = 0; i < R->ds->n; i++)
        if (!R->ds->samples[i].follow_up) R->order[R->n_order++] = (uint32_t)i;
    int64_t k = R->p->performance_sample_count;
    if (R->p->mode == LB_MODE_PERFORMANCE && k > 0 && (size_t)k < R->n_order) {
        lb_rng rng;
        lb_rng_seed(&rng, R->p->qsl_seed);
        for (size_t i = 0; i < (size_t)k; i++) { /* the first k of a seeded permutation */
            size_t j = i + (size_t)lb_rng_below(&rng, R->n_order - i);
            uint32_t t = R->order[i];
            R->order[i] = R->order[j];
            R->order[j] = t;
        }
        R->n_order = (size_t)k;
        R->subset = true;
        for (size_t i = 0; i < R->n_order; i++)
            R->set_queries += turns_from(R, R->order[i]);
    } else {
        R->set_queries = (int64_t)R->ds->n;
    }
    return LB_OK;
}

/* ---- the HTTP system under test: the replica pool of p->pool ---- */

typedef struct {
    lb_pool *pool;
    char **bodies; /* one request body per sample, built before t0 */
    size_t *body_len;
    size_t n;
} http_sut;

static lb_status http_open(void *self, const lb_loadgen_params *p, const lb_dataset *ds,
                           const lb_pool_callbacks *cb, void *user, lb_err *err) {
    http_sut *h = self;
    size_t n = ds->n;
    h->bodies = calloc(n, sizeof *h->bodies);
    h->body_len = calloc(n, sizeof *h->body_len);
    if (h->bodies == NULL || h->body_len == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for %zu request bodies", n);
    h->n = n;
    for (size_t i = 0; i < n; i++) {
        const lb_sample *s = &ds->samples[i];
        int32_t mt = s->max_tokens > 0 ? s->max_tokens : p->max_tokens;
        h->bodies[i] = lb_openai_body(&p->request, (const char *const *)s->history, s->n_history,
                                      s->prompt, mt, &h->body_len[i]);
        if (h->bodies[i] == NULL)
            return lb_fail(err, LB_ERR_NOMEM, "out of memory building request %zu", i);
    }
    lb_pool_params pp = p->pool;
    pp.http.stream = p->request.stream;
    pp.http.api = p->request.api;
    pp.http.keep_text = p->mode == LB_MODE_ACCURACY || p->tokenizer != NULL;
    /* The connection cache holds every connection the run may have open at once (libcurl
     * closes the oldest idle one beyond its size, and a closed one must be opened again). */
    int64_t most = most_inflight(p);
    if (p->preconnect > most) most = p->preconnect;
    if (most > pp.http.max_connections) pp.http.max_connections = most;
    return lb_pool_init(&h->pool, &pp, cb, user, err);
}

static lb_status http_submit(void *self, uint64_t tag, uint32_t sample, lb_err *err) {
    http_sut *h = self;
    return lb_pool_submit(h->pool, tag, h->bodies[sample], h->body_len[sample], err);
}

static void http_serve(void *self, int64_t until_ns) {
    lb_pool_run(((http_sut *)self)->pool, until_ns);
}

static void http_abort_all(void *self, lb_qerr why) {
    lb_pool_abort_all(((http_sut *)self)->pool, why);
}

static lb_status http_preconnect(void *self, int64_t n, int64_t *opened, lb_err *err) {
    return lb_pool_preconnect(((http_sut *)self)->pool, n, opened, err);
}

static const lb_replica *http_replicas(void *self, size_t *n) {
    return lb_pool_replicas(((http_sut *)self)->pool, n);
}

static void http_close(void *self) {
    http_sut *h = self;
    lb_pool_free(h->pool);
    for (size_t i = 0; h->bodies && i < h->n; i++)
        free(h->bodies[i]);
    free(h->bodies);
    free(h->body_len);
    memset(h, 0, sizeof *h);
}

static const lb_sut_ops http_ops = {.open = http_open,
                                    .submit = http_submit,
                                    .serve = http_serve,
                                    .abort_all = http_abort_all,
                                    .preconnect = http_preconnect,
                                    .replicas = http_replicas,
                                    .close = http_close};

lb_status lb_loadgen_run(const lb_loadgen_params *p, const lb_dataset *ds, lb_result *out,
                         lb_loadgen_report *report, lb_err *err) {
    http_sut h;
    memset(&h, 0, sizeof h);
    lb_sut sut = {&http_ops, &h};
    return lb_loadgen_run_sut(p, ds, &sut, out, report, err);
}

/* Accuracy mode: ROUGE of every sample's text against its reference (a failed sample
 * scores as an empty text), MLPerf's targets when the whole cnn_eval set was run. */
static lb_status score_accuracy(const lb_dataset *ds, char *const *texts, lb_loadgen_summary *s,
                                lb_result *out, lb_err *err) {
    for (size_t i = 0; i < ds->n; i++)
        if (ds->samples[i].reference == NULL) return LB_OK;
    lb_rouge_params rp = lb_rouge_default_params();
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &rp);
    lb_status st = LB_OK;
    for (size_t i = 0; i < ds->n && st == LB_OK; i++)
        st = lb_rouge_acc_add(&acc, texts[i] ? texts[i] : "", ds->samples[i].reference, NULL, err);
    lb_rouge_targets targets = lb_rouge_targets_mlperf_llama31_8b();
    s->rouge_checked = strcmp(ds->format, "cnn") == 0 && ds->n == 13368;
    if (st == LB_OK) {
        lb_rouge_summary rs = lb_rouge_acc_finish(&acc);
        s->has_rouge = true;
        for (int k = 0; k < 4; k++)
            s->rouge[k] = rs.score[k];
        s->gen_len = rs.gen_len;
        s->gen_num = rs.gen_num;
        s->rouge_pass = s->rouge_checked && lb_rouge_check(&rs, &targets).pass;
        st = lb_rouge_add_to_result(&acc, s->rouge_checked ? &targets : NULL, true, out);
    }
    lb_rouge_acc_free(&acc);
    return st;
}

static void free_run(run *R) {
    if (R->sut_open) R->sut->ops->close(R->sut->self);
    free(R->order);
    free(R->pend);
    for (size_t i = 0; i < R->cap_q; i++)
        free(R->gb ? R->gb[i].v : NULL);
    free(R->gb);
    free(R->q);
    free(R->gaps);
    free(R->rs_query);
    free(R->rs_error);
    free(R->rs_replica);
    if (R->texts)
        for (size_t i = 0; i < R->ds->n; i++)
            free(R->texts[i]);
    free(R->texts);
    if (R->ids)
        for (size_t i = 0; i < R->ds->n; i++)
            free(R->ids[i]);
    free(R->ids);
    free(R->n_ids);
}

/* text as a JSON string, its bytes that are not UTF-8 as '?' (a path or a name typed by
 * the user may hold any bytes, and jansson takes none that are not UTF-8); NULL as null.
 * New reference; NULL when out of memory. */
static json_t *text_json(const char *text) {
    if (text == NULL) return json_null();
    char *copy = strdup(text);
    json_t *j = copy ? json_string(lb_utf8text_repair(copy)) : NULL;
    free(copy);
    return j;
}

json_t *lb_loadgen_config_json(const lb_loadgen_params *p, const lb_dataset *ds) {
    json_t *eps = json_array();
    for (size_t i = 0; i < p->pool.n_endpoints; i++) {
        char shown[1024];
        lb_provenance_mask_url(p->pool.endpoints[i], shown, sizeof shown);
        json_array_append_new(eps, json_string(lb_utf8text_repair(shown)));
    }
    const lb_constraints *c = &p->constraints;
    /* The seeds are unsigned 64-bit (MLPerf's exceed INT64_MAX) and JSON integers here are
     * signed: decimal text keeps them exact, as the summary prints them. */
    char sample_seed[24], schedule_seed[24], qsl_seed[24];
    snprintf(sample_seed, sizeof sample_seed, "%" PRIu64, p->sample_seed);
    snprintf(schedule_seed, sizeof schedule_seed, "%" PRIu64, p->schedule_seed);
    snprintf(qsl_seed, sizeof qsl_seed, "%" PRIu64, p->qsl_seed);
    return json_pack(
        "{s:s, s:s, s:f, s:f, s:f, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:I, s:i, "
        "s:{s:f, s:f, "
        "s:f, s:f, "
        "s:f, s:f},"
        " s:f, s:s, s:o, s:b, s:b, s:f, s:o, s:I, s:I, s:I, s:o, s:o, s:{s:o, s:s, s:I},"
        " s:o}",
        "scenario", lb_loadgen_scenario_name(p->scenario), "mode", lb_loadgen_mode_name(p->mode),
        "qps", p->qps, "burstiness", p->burstiness, "ramp_up_s", p->ramp_up_s, "concurrency",
        (json_int_t)p->concurrency, "min_duration_s", p->min_duration_s, "min_queries",
        (json_int_t)p->min_queries, "max_inflight", (json_int_t)p->max_inflight, "max_failed",
        (json_int_t)p->max_failed, "warmup_queries", (json_int_t)p->warmup_queries, "preconnect",
        (json_int_t)p->preconnect, "sample_seed", sample_seed, "schedule_seed", schedule_seed,
        "qsl_seed", qsl_seed, "performance_sample_count", (json_int_t)p->performance_sample_count,
        "max_tokens", (int)p->max_tokens, "constraints", "ttft_limit_ms", c->ttft_limit_ms,
        "tpot_limit_ms", c->tpot_limit_ms, "percentile", c->percentile, "confidence", c->confidence,
        "slo_ttft_ms", c->slo_ttft_ms, "slo_tpot_ms", c->slo_tpot_ms, "drain_s", p->drain_s, "api",
        lb_openai_api_name(p->request.api), "model", text_json(p->request.model), "stream",
        p->request.stream, "ignore_eos", p->request.ignore_eos, "temperature",
        p->request.temperature, "endpoints", eps, "timeout_ms", (json_int_t)p->pool.http.timeout_ms,
        "retries", (json_int_t)p->pool.retries, "eject_after", (json_int_t)p->pool.eject_after,
        "model_key", text_json(p->model_key), "api_key_env", text_json(p->api_key_env), "dataset",
        "path", text_json(p->dataset_path), "format", ds->format, "samples", (json_int_t)ds->n,
        "tokenizer", text_json(p->tokenizer_path));
}

/* Appends the per-query series to r, then the run's inter-token gaps in query order
 * (query i's are the token_gaps[i] that follow those of queries before it: with
 * first_token_s they give every streamed piece's time) and the resent attempts. */
static lb_status add_series(const lb_query *q, size_t n_q, const float *gaps, bool streamed,
                            const uint32_t *rs_query, const uint8_t *rs_error,
                            const int16_t *rs_replica, size_t n_rs, lb_result *r) {
    static const struct {
        const char *name, *unit;
    } defs[] = {{"scheduled_s", "s"},
                {"handover_s", "s"},
                {"sent_s", "s"},
                {"first_token_s", "s"},
                {"done_s", "s"},
                {"ttft_ms", "ms"},
                {"tpot_ms", "ms"},
                {"latency_ms", "ms"},
                {"queue_ms", "ms"},
                {"itl_max_ms", "ms"},
                {"output_tokens", "tokens"},
                {"input_tokens", "tokens"},
                {"status", "lb_qerr"},
                {"http_status", "code"},
                {"replica", "index"},
                {"attempts", "count"},
                {"connections_opened", "count"},
                {"sample", "index"},
                {"token_gaps", "count"},
                {"token_gap_ms", "ms"},
                {"resent_query", "index"},
                {"resent_error", "lb_qerr"},
                {"resent_replica", "index"}};
    enum { N_DEFS = sizeof defs / sizeof defs[0], N_PER_QUERY = N_DEFS - 4 };
    lb_series *s[N_DEFS];
    for (size_t d = 0; d < N_DEFS; d++)
        if ((s[d] = lb_result_series(r, defs[d].name, defs[d].unit)) == NULL) return LB_ERR_NOMEM;
    /* lb_result_series may move earlier series when it grows: look them up again. */
    for (size_t d = 0; d < N_DEFS; d++)
        s[d] = (lb_series *)lb_result_find_series(r, defs[d].name);
    for (size_t i = 0; i < n_q; i++) {
        const lb_query *x = &q[i];
        if (!x->issued) continue; /* planned, not reached before an interrupt */
        bool ok = x->finished && x->error == LB_QERR_NONE;
        bool timed = ok && streamed; /* TTFT, TPOT, ITL measured */
        double tpot = timed && x->output_tokens > 1
                          ? (double)(x->done_ns - x->first_ns) / 1e6 / (x->output_tokens - 1)
                          : NAN;
        float mx = NAN;
        for (uint32_t k = 0; k < x->n_gaps; k++)
            if (!(gaps[x->gap0 + k] <= mx)) mx = gaps[x->gap0 + k];
        double v[N_PER_QUERY] = {
            (double)x->scheduled_ns / 1e9,
            (double)x->handover_ns / 1e9,
            (double)x->sent_ns / 1e9,
            timed ? (double)x->first_ns / 1e9 : NAN,
            x->finished ? (double)x->done_ns / 1e9 : NAN,
            timed ? (double)(x->first_ns - x->scheduled_ns) / 1e6 : NAN,
            tpot,
            ok ? (double)(x->done_ns - x->scheduled_ns) / 1e6 : NAN,
            (double)(x->sent_ns - x->scheduled_ns) / 1e6,
            mx,
            ok && x->output_tokens >= 0 ? x->output_tokens : NAN,
            x->input_tokens >= 0 ? x->input_tokens : NAN,
            x->finished ? x->error : LB_QERR_INTERRUPTED,
            x->http_status,
            x->replica,
            x->attempts,
            x->conns_opened,
            x->sample,
            x->n_gaps,
        };
        for (size_t d = 0; d < N_PER_QUERY; d++)
            LB_TRY(lb_result_series_push(s[d], v[d]));
        for (uint32_t k = 0; k < x->n_gaps; k++)
            LB_TRY(lb_result_series_push(s[N_PER_QUERY], gaps[x->gap0 + k]));
    }
    /* resent_query: the query's place among the issued ones (the series' index) */
    uint32_t *pos = malloc((n_q ? n_q : 1) * sizeof *pos);
    if (pos == NULL) return LB_ERR_NOMEM;
    for (size_t i = 0, k = 0; i < n_q; i++)
        pos[i] = (uint32_t)(q[i].issued ? k++ : k);
    lb_status st = LB_OK;
    for (size_t i = 0; i < n_rs && st == LB_OK; i++) {
        st = lb_result_series_push(s[N_PER_QUERY + 1], pos[rs_query[i]]);
        if (st == LB_OK) st = lb_result_series_push(s[N_PER_QUERY + 2], rs_error[i]);
        if (st == LB_OK) st = lb_result_series_push(s[N_PER_QUERY + 3], rs_replica[i]);
    }
    free(pos);
    return st;
}

/* The failed-run rule (README): no query completed, or more than max_failed failed after
 * their retries. Writes the sentence into s->failure. */
static void judge_failure(const lb_loadgen_params *p, lb_loadgen_summary *s) {
    char list[200] = "";
    for (int e = 1; e < LB_QERR_COUNT; e++) {
        if (s->failures[e] == 0) continue;
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s %lld", len ? ", " : "",
                 lb_http_qerr_name((lb_qerr)e), (long long)s->failures[e]);
    }
    s->run_failed = true;
    if (s->issued > 0 && s->completed == 0)
        snprintf(s->failure, sizeof s->failure, "none of the %lld queries completed (%s)",
                 (long long)s->issued, list[0] ? list : "unfinished");
    else if (s->failed > p->max_failed)
        snprintf(s->failure, sizeof s->failure,
                 "%lld of %lld queries failed after retries (%s), more than --max-failed %lld",
                 (long long)s->failed, (long long)s->issued, list, (long long)p->max_failed);
    else
        s->run_failed = false;
}

lb_status lb_loadgen_run_sut(const lb_loadgen_params *p, const lb_dataset *ds, const lb_sut *sut,
                             lb_result *out, lb_loadgen_report *report, lb_err *err) {
    if (report != NULL) memset(report, 0, sizeof *report);
    if (ds->n == 0) return lb_fail(err, LB_ERR_USAGE, "the dataset has no samples");
    if (p->scenario == LB_SCENARIO_SERVER && !(p->qps > 0))
        return lb_fail(err, LB_ERR_USAGE, "the Server scenario needs --qps > 0");
    if (!(p->burstiness >= 0.001 && p->burstiness <= 1000))
        return lb_fail(err, LB_ERR_USAGE,
                       "--burstiness %g is no gamma shape to draw arrival gaps with: give one "
                       "from 0.001 to 1000 (1 = Poisson)",
                       p->burstiness);
    if (p->scenario == LB_SCENARIO_CONCURRENCY && p->concurrency < 1)
        return lb_fail(err, LB_ERR_USAGE, "--concurrency must be at least 1");
    run R;
    memset(&R, 0, sizeof R);
    R.p = p;
    R.ds = ds;
    R.sut = sut;
    lb_status st = make_order(&R, err);
    lb_pool_callbacks cb = {.on_token = on_token, .on_retry = on_retry, .on_done = on_done};
    if (st == LB_OK) {
        R.sut_open = true; /* close undoes a partial open too */
        st = sut->ops->open(sut->self, p, ds, &cb, &R, err);
    }
    if (st == LB_OK && p->mode == LB_MODE_ACCURACY &&
        ((R.texts = calloc(ds->n, sizeof *R.texts)) == NULL ||
         (R.ids = calloc(ds->n, sizeof *R.ids)) == NULL ||
         (R.n_ids = calloc(ds->n, sizeof *R.n_ids)) == NULL))
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory for the generated texts");
    R.open_loop = p->scenario == LB_SCENARIO_OFFLINE || p->scenario == LB_SCENARIO_SERVER;
    R.slots = p->scenario == LB_SCENARIO_SINGLE_STREAM ? 1 : p->concurrency;
    R.target_qps = p->scenario == LB_SCENARIO_SERVER ? p->qps : 0;
    lb_rng_seed(&R.sample_rng, p->sample_seed);
    lb_status planned = st == LB_OK && R.open_loop ? plan_open_loop(&R, p->schedule_seed) : LB_OK;
    if (planned == LB_ERR_USAGE)
        st = lb_fail(err, LB_ERR_USAGE,
                     "the schedule would hold more than %d queries, the most one run may hold in "
                     "memory: give a lower --qps, a shorter --min-duration or fewer --min-queries",
                     LB_LOADGEN_MAX_QUERIES);
    else if (planned != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory for the query schedule");
    int64_t preconnected = 0;
    if (st == LB_OK && p->preconnect != 0 && sut->ops->preconnect != NULL)
        st = preconnect(&R, &preconnected, err);
    if (st != LB_OK) {
        free_run(&R);
        return st;
    }
    json_decref(out->config);
    out->config = lb_loadgen_config_json(p, ds);
    if (out->config == NULL) {
        free_run(&R);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the run's options as JSON");
    }
    out->start_wall_s = lb_clock_wall_s();
    int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* wake-ups within a microsecond */

    if (p->warmup_queries > 0) warm_up(&R);
    lb_replica base[LB_POOL_MAX_REPLICAS];
    size_t n_reps;
    const lb_replica *before = sut->ops->replicas(sut->self, &n_reps);
    memcpy(base, before, n_reps * sizeof *base);
    bool interrupted = run_step(&R);
    prctl(PR_SET_TIMERSLACK, (unsigned long)(old_slack > 0 ? old_slack : 50000), 0, 0, 0);
    out->end_wall_s = lb_clock_wall_s();
    lb_loadgen_summary *s = report != NULL ? &report->summary : &(lb_loadgen_summary){0};
    s->scenario = p->scenario;
    s->mode = p->mode;
    s->target_qps = R.target_qps;
    s->concurrency = R.open_loop ? 0 : R.slots;
    s->constraints = p->constraints;
    s->min_duration_s = p->mode == LB_MODE_ACCURACY ? 0 : p->min_duration_s;
    s->min_queries = queries_wanted(&R);
    s->max_inflight = p->max_inflight;
    s->max_failed = p->max_failed;
    s->streamed = p->request.stream;
    s->n_user_pctl = p->n_user_pctl;
    memcpy(s->user_pctl, p->user_pctl, sizeof s->user_pctl);
    s->preconnected = preconnected;
    s->sample_seed = p->sample_seed;
    s->schedule_seed = p->schedule_seed;
    s->qsl_seed = p->qsl_seed;
    s->n_total_samples = ds->n;
    s->n_samples = R.subset ? (size_t)R.set_queries : ds->n; /* samples (turns) both ways */
    /* The run's own counts: what the replicas did in the warm-up is subtracted. */
    const lb_replica *reps = sut->ops->replicas(sut->self, &s->n_replicas);
    memcpy(s->replicas, reps, s->n_replicas * sizeof *reps);
    for (size_t i = 0; i < s->n_replicas; i++) {
        s->replicas[i].sent -= base[i].sent;
        s->replicas[i].completed -= base[i].completed;
        s->replicas[i].failed -= base[i].failed;
    }
    if (R.oom != LB_OK || gather_gaps(&R) != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory while recording queries");
    if (st == LB_OK && lb_loadgen_summarize(R.q, R.n_q, R.gaps, R.rs_error, R.n_rs, s) != LB_OK)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory summarizing");
    if (st == LB_OK && p->mode == LB_MODE_ACCURACY) st = score_accuracy(ds, R.texts, s, out, err);
    if (st == LB_OK && (lb_loadgen_summary_to_result(s, out) != LB_OK ||
                        add_series(R.q, R.n_q, R.gaps, p->request.stream, R.rs_query, R.rs_error,
                                   R.rs_replica, R.n_rs, out) != LB_OK))
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory storing the result");
    if (st == LB_OK) judge_failure(p, s);
    if (st == LB_OK && interrupted) {
        out->status = LB_RUN_INTERRUPTED;
        snprintf(out->failure, sizeof out->failure, "interrupted by signal %d",
                 lb_signals_received());
        st = lb_fail(err, LB_ERR_INTERRUPTED, "%s", out->failure);
    } else if (st == LB_OK && s->run_failed) {
        out->status = LB_RUN_FAILED;
        snprintf(out->failure, sizeof out->failure, "%s", s->failure);
        st = lb_fail(err, LB_ERR_RUNTIME, "%s", s->failure);
    } else if (st == LB_OK) {
        out->status = LB_RUN_OK;
    }
    if (report != NULL) {
        report->summarized = st == LB_OK || st == LB_ERR_INTERRUPTED || st == LB_ERR_RUNTIME;
        if (R.texts != NULL) {
            report->texts = R.texts;
            report->n_texts = ds->n;
            report->ids = R.ids;
            report->n_ids = R.n_ids;
            R.texts = NULL;
            R.ids = NULL;
            R.n_ids = NULL;
        }
    }
    free_run(&R);
    return st;
}
