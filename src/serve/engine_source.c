/* engine_source.c: the engine thread and the token-source callbacks (engine_source.h).
 *
 * Requests move through three places under one mutex: the queue of new requests (filled
 * by start), the active list (submitted to the engine; only the engine thread changes it)
 * and nowhere (finished or abandoned, freed by whichever side lets go last: done() frees a
 * finished request, the engine thread frees one that done() abandoned). */
#include "serve/engine_source.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/utf8text.h"
#include "model/hf_tokenizer.h"

#define DRAIN_NAP_NS 1000000LL
#define SHUT_DOWN    "the server shut down before the request finished"

typedef struct ereq {
    int32_t *prompt; /* freed once submitted */
    int32_t n_prompt, max_tokens;
    lb_sampling sampling; /* the request's fields over the server's */
    bool ignore_eos;
    int64_t id; /* the engine's, once submitted */
    int32_t *toks;
    int32_t n_toks, cap_toks;
    lb_finish fin;
    const char *failed;   /* why the engine ended it unfinished; NULL when it finished */
    bool ended;           /* finished or failed: no more tokens */
    bool abandoned;       /* done() came first */
    void (*wake)(void *); /* the server's, called under mu until done() */
    void *wake_ctx;
    struct ereq *next;
} ereq;

typedef struct {
    lb_engine_source_params p;
    int32_t eos[LB_ENGINE_MAX_EOS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ereq *new_head, *new_tail;
    ereq **active;
    int32_t n_active, cap_active;
    bool stop;
    int64_t deadline_ns; /* lb_engine_source_drain's; 0: none */
    uint64_t n_queued;   /* requests queued so far: the next one's seed offset */
    pthread_t th;
} esrc;

typedef struct {
    ereq *r;
    int32_t n_read;
    char pend[2 * LB_TOKEN_TEXT_MAX_BYTES];
    size_t pend_len;
} stream_state;

static void free_req(ereq *r) {
    free(r->prompt);
    free(r->toks);
    free(r);
}

static bool is_eos(const esrc *s, int32_t t) {
    for (int i = 0; i < s->p.n_eos; i++)
        if (s->eos[i] == t) return true;
    return false;
}

/* Under mu: ends r, finished (why NULL) or failed (it leaves the active list by the
 * caller's hand), and wakes its stream. */
static void end_req(ereq *r, const char *why) {
    r->failed = why;
    r->ended = true;
    if (r->abandoned)
        free_req(r);
    else
        r->wake(r->wake_ctx);
}

static void drop_active(esrc *s, int32_t k) {
    s->active[k] = s->active[--s->n_active];
}

static void *engine_thread(void *arg) {
    esrc *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        ereq *fresh = s->new_head;
        s->new_head = s->new_tail = NULL;
        /* cancel what was abandoned; past the drain deadline, everything (unfinished) */
        const bool late = s->deadline_ns > 0 && lb_clock_now_ns() >= s->deadline_ns;
        for (int32_t k = 0; k < s->n_active;) {
            ereq *r = s->active[k];
            if (r->abandoned || late) {
                lb_engine_cancel(s->p.engine, r->id);
                drop_active(s, k);
                end_req(r, SHUT_DOWN);
            } else {
                k++;
            }
        }
        for (ereq *r = fresh, *nx; r != NULL; r = nx) {
            nx = r->next;
            if (r->abandoned || late) {
                end_req(r, SHUT_DOWN);
                continue;
            }
            lb_engine_request rq = {.sampling = r->sampling,
                                    .max_tokens = r->max_tokens,
                                    .ignore_eos = r->ignore_eos,
                                    .eos_ids = s->eos,
                                    .n_eos = s->p.n_eos};
            lb_err err;
            if (s->n_active == s->cap_active) {
                int32_t cap = s->cap_active ? 2 * s->cap_active : 256;
                ereq **a = realloc(s->active, (size_t)cap * sizeof *a);
                if (a == NULL) {
                    end_req(r, "the server ran out of memory");
                    continue;
                }
                s->active = a;
                s->cap_active = cap;
            }
            if (lb_engine_submit(s->p.engine, r->prompt, r->n_prompt, &rq, &r->id, &err) != LB_OK) {
                LB_ERROR("serve: a request was refused by the engine: %s", err.msg);
                end_req(r, "the engine refused the request");
                continue;
            }
            free(r->prompt);
            r->prompt = NULL;
            s->active[s->n_active++] = r;
        }
        if (lb_engine_pending(s->p.engine) == 0) {
            if (s->new_head == NULL && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        const lb_engine_event *ev;
        int32_t n = 0;
        lb_err err;
        lb_status st = lb_engine_step(s->p.engine, &ev, &n, &err);
        pthread_mutex_lock(&s->mu);
        if (st != LB_OK) {
            LB_ERROR("serve: the engine failed: %s; ending every request", err.msg);
            for (int32_t k = 0; k < s->n_active; k++) {
                lb_engine_cancel(s->p.engine, s->active[k]->id);
                end_req(s->active[k], "the engine failed");
            }
            s->n_active = 0;
            continue;
        }
        for (int32_t e = 0; e < n; e++) {
            int32_t k = 0;
            while (k < s->n_active && s->active[k]->id != ev[e].id)
                k++;
            if (k == s->n_active) continue;
            ereq *r = s->active[k];
            if (r->n_toks == r->cap_toks) {
                int32_t cap = r->cap_toks ? 2 * r->cap_toks : 64;
                int32_t *t = realloc(r->toks, (size_t)cap * sizeof *t);
                if (t == NULL) {
                    lb_engine_cancel(s->p.engine, r->id);
                    drop_active(s, k);
                    end_req(r, "the server ran out of memory");
                    continue;
                }
                r->toks = t;
                r->cap_toks = cap;
            }
            r->toks[r->n_toks++] = ev[e].token;
            if (ev[e].done != LB_FINISH_NONE) {
                r->fin = ev[e].done;
                drop_active(s, k);
                end_req(r, NULL);
            } else if (!r->abandoned) { /* after done() the server's request is gone */
                r->wake(r->wake_ctx);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A chat request's prompt in Llama 3's chat format, each message under its own role's
 * header; *text is malloc'd (caller frees). */
static lb_status chat_text(const lb_token_request *req, char **text, size_t *len, lb_err *err) {
    lb_chat_message *m = malloc(req->n_messages * sizeof *m);
    if (m == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for a chat prompt");
    for (size_t i = 0; i < req->n_messages; i++)
        m[i] = (lb_chat_message){req->messages[i].role, req->messages[i].content,
                                 req->messages[i].content_len};
    lb_status st = lb_hf_tokenizer_chat_llama3(m, req->n_messages, text, len, err);
    free(m);
    return st;
}

/* The tokens the chat format adds to req's messages (their headers and the assistant's),
 * found by encoding the messages emptied; 0 when that fails. */
static long long format_tokens(const esrc *s, const lb_token_request *req) {
    lb_token_message *empty = calloc(req->n_messages, sizeof *empty);
    if (empty == NULL) return 0;
    for (size_t i = 0; i < req->n_messages; i++)
        empty[i] = (lb_token_message){.role = req->messages[i].role, .content = ""};
    lb_token_request q = *req;
    q.messages = empty;
    char *text = NULL;
    size_t len = 0, n = 0;
    uint32_t *ids = NULL;
    lb_err err;
    if (chat_text(&q, &text, &len, &err) != LB_OK ||
        lb_tokenizer_encode(s->p.tok, text, len, &ids, &n, &err) != LB_OK)
        n = 0;
    free(ids);
    free(text);
    free(empty);
    return (long long)n;
}

static lb_status src_start(void *ctx, const lb_token_request *req, void *stream,
                           int64_t *prompt_tokens, lb_err *err) {
    esrc *s = ctx;
    stream_state *ss = stream;
    uint32_t *ids = NULL; /* the text's tokens; a prompt of ids is taken as it is */
    size_t n = req->n_ids;
    if (req->ids != NULL) {
        const int32_t vocab = lb_engine_config(s->p.engine)->vocab_size;
        for (size_t i = 0; i < n; i++)
            if (req->ids[i] < 0 || req->ids[i] >= vocab)
                return lb_fail(err, LB_ERR_USAGE,
                               "token id %d (position %zu of the prompt) is not in the model's "
                               "vocabulary (ids 0..%d)",
                               req->ids[i], i, vocab - 1);
    } else {
        char *text = NULL;
        size_t len = req->prompt_len;
        if (req->chat) LB_TRY(chat_text(req, &text, &len, err));
        lb_status st = lb_tokenizer_encode(s->p.tok, text ? text : req->prompt, len, &ids, &n, err);
        free(text);
        if (st != LB_OK) return st;
    }
    bool bos = s->p.bos_id >= 0 && !req->chat && req->ids == NULL;
    size_t total = n + bos;
    const lb_engine_info *info = lb_engine_get_info(s->p.engine);
    int64_t limit = info->max_ctx < info->kv_tokens ? info->max_ctx : info->kv_tokens;
    if (total == 0) {
        free(ids);
        return lb_fail(err, LB_ERR_USAGE, "the prompt has no tokens: give a prompt of some text");
    }
    /* what the client did not write counts too, so the advice is a cut of its own text */
    const char *counted = req->chat ? " (the chat format's tokens included)"
                          : bos     ? " (the bos token included)"
                                    : "";
    const bool too_long = (int64_t)total >= limit || (int64_t)total + req->max_tokens > limit;
    long long own = (long long)n; /* the client's tokens: a cut of more is no advice */
    if (too_long && req->chat) own -= format_tokens(s, req);
    if ((int64_t)total >= limit) {
        free(ids);
        long long cut = (long long)total - limit + 1;
        if (cut > own)
            return lb_fail(err, LB_ERR_USAGE,
                           "the chat format's own %lld tokens leave no room for output within "
                           "the engine's limit of %lld tokens: serve a model with a longer "
                           "context",
                           (long long)total - own, (long long)limit);
        return lb_fail(err, LB_ERR_USAGE,
                       "the prompt's %zu tokens%s leave no room for output within the engine's "
                       "limit of %lld tokens (prompt and max_tokens together): shorten the prompt "
                       "by at least %lld token%s",
                       total, counted, (long long)limit, cut, cut == 1 ? "" : "s");
    }
    if ((int64_t)total + req->max_tokens > limit) {
        free(ids);
        long long cut = (long long)total + req->max_tokens - limit;
        char shorten[80] = "";
        if (cut <= own)
            snprintf(shorten, sizeof shorten, " or shorten the prompt by at least %lld token%s",
                     cut, cut == 1 ? "" : "s");
        return lb_fail(err, LB_ERR_USAGE,
                       "the prompt's %zu tokens%s and max_tokens %lld exceed the engine's limit "
                       "of %lld tokens: ask for at most %lld tokens%s",
                       total, counted, (long long)req->max_tokens, (long long)limit,
                       (long long)(limit - (int64_t)total), shorten);
    }
    ereq *r = calloc(1, sizeof *r);
    if (r == NULL || (r->prompt = malloc(total * sizeof *r->prompt)) == NULL) {
        free(r);
        free(ids);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    }
    if (bos) r->prompt[r->n_prompt++] = s->p.bos_id;
    for (size_t i = 0; i < n; i++)
        r->prompt[r->n_prompt++] = req->ids ? req->ids[i] : (int32_t)ids[i];
    free(ids);
    r->max_tokens = (int32_t)req->max_tokens;
    const lb_token_sampling *q = &req->sampling;
    r->sampling = s->p.sampling;
    if (q->has_temperature) r->sampling.temperature = q->temperature;
    if (q->has_top_p) r->sampling.top_p = q->top_p;
    if (q->has_top_k) r->sampling.top_k = q->top_k > 0 ? q->top_k : 0;
    r->ignore_eos = q->has_ignore_eos ? q->ignore_eos : s->p.ignore_eos;
    r->wake = req->wake;
    r->wake_ctx = req->wake_ctx;
    r->id = -1;
    memset(ss, 0, sizeof *ss);
    ss->r = r;
    *prompt_tokens = r->n_prompt;
    pthread_mutex_lock(&s->mu);
    /* without a seed of its own, request k in queue order draws from seed + k, as infer's
     * queries do: a run repeats for the same arrival order */
    r->sampling.seed = q->has_seed ? q->seed : s->p.sampling.seed + s->n_queued;
    s->n_queued++;
    if (s->new_tail)
        s->new_tail->next = r;
    else
        s->new_head = r;
    s->new_tail = r;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return LB_OK;
}

/* Moves up to LB_TOKEN_TEXT_MAX_BYTES of valid UTF-8 from the pending bytes to text:
 * whole characters, an invalid byte as U+FFFD; a character cut short at the end waits for
 * the next token unless final. Returns the bytes written. */
static size_t take_utf8(stream_state *ss, char *text, bool final) {
    const char *p = ss->pend;
    size_t i = 0, o = 0;
    while (i < ss->pend_len) {
        int k = lb_utf8text_char_len(p + i, ss->pend_len - i);
        if (k < 0 && !final) break;
        size_t w = k > 0 ? (size_t)k : 3;
        if (o + w > LB_TOKEN_TEXT_MAX_BYTES) break;
        if (k > 0)
            memcpy(text + o, p + i, (size_t)k);
        else
            memcpy(text + o, "\xef\xbf\xbd", 3);
        i += k > 0 ? (size_t)k : 1;
        o += w;
    }
    memmove(ss->pend, ss->pend + i, ss->pend_len - i);
    ss->pend_len -= i;
    return o;
}

static lb_token_state src_next(void *ctx, void *stream, int64_t now_ns, char *text, size_t *len,
                               int64_t *due_ns) {
    esrc *s = ctx;
    stream_state *ss = stream;
    pthread_mutex_lock(&s->mu);
    ereq *r = ss->r;
    bool have = ss->n_read < r->n_toks, ended = r->ended;
    int32_t tok = have ? r->toks[ss->n_read++] : -1;
    bool last = ended && ss->n_read == r->n_toks;
    lb_finish fin = r->fin;
    const char *failed = r->failed;
    pthread_mutex_unlock(&s->mu);
    if (!have) {
        if (ended && failed != NULL) {
            *len = strlen(failed);
            memcpy(text, failed, *len);
            return LB_TOKEN_FAILED;
        }
        if (ended && ss->pend_len > 0 && (*len = take_utf8(ss, text, true)) > 0)
            return LB_TOKEN_READY;
        if (ended) return LB_TOKEN_END;
        /* the engine thread wakes the stream when its next token or its end is there; a
         * draining server asks again at once: a nap keeps it from spinning */
        *due_ns = INT64_MAX;
        if (now_ns == INT64_MAX) {
            nanosleep(&(struct timespec){.tv_nsec = DRAIN_NAP_NS}, NULL);
            *due_ns = lb_clock_now_ns() + DRAIN_NAP_NS;
        }
        return LB_TOKEN_LATER;
    }
    /* one READY per token, its text possibly empty (part of a character), so the server's
     * count of tokens stays exact; the end-of-sequence token that ended the request is a
     * STOP with the text still pending, so that the server says "stop" even when it came
     * as the last token max_tokens allows */
    const bool eos = last && fin == LB_FINISH_STOP && is_eos(s, tok);
    /* a special token (<|eot_id|>, a reserved one) counts but writes no text, as vLLM's
     * skip_special_tokens does by default */
    if (!eos && !lb_tokenizer_is_special(s->p.tok, (uint32_t)tok)) {
        char *piece = NULL;
        size_t plen = 0;
        lb_err err;
        uint32_t id = (uint32_t)tok;
        if (lb_tokenizer_decode(s->p.tok, &id, 1, &piece, &plen, &err) == LB_OK) {
            if (ss->pend_len + plen > sizeof ss->pend) plen = sizeof ss->pend - ss->pend_len;
            memcpy(ss->pend + ss->pend_len, piece, plen);
            ss->pend_len += plen;
        }
        free(piece);
    }
    *len = take_utf8(ss, text, last);
    return eos ? LB_TOKEN_STOP : LB_TOKEN_READY;
}

static void src_done(void *ctx, void *stream) {
    esrc *s = ctx;
    stream_state *ss = stream;
    if (ss->r == NULL) return;
    pthread_mutex_lock(&s->mu);
    if (ss->r->ended) {
        free_req(ss->r);
    } else {
        ss->r->abandoned = true;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    ss->r = NULL;
}

lb_status lb_engine_source_init(const lb_engine_source_params *p, lb_token_source *src,
                                lb_err *err) {
    memset(src, 0, sizeof *src);
    if (p->tok == NULL)
        return lb_fail(err, LB_ERR_USAGE, "serving the engine needs a tokenizer (--tokenizer)");
    esrc *s = calloc(1, sizeof *s);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->p.n_eos = p->n_eos < LB_ENGINE_MAX_EOS ? p->n_eos : LB_ENGINE_MAX_EOS;
    if (s->p.n_eos > 0) memcpy(s->eos, p->eos_ids, (size_t)s->p.n_eos * sizeof *s->eos);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, engine_thread, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start the engine thread");
    }
    *src = (lb_token_source){.name = "engine",
                             .ctx = s,
                             .stream_bytes = sizeof(stream_state),
                             .start = src_start,
                             .next = src_next,
                             .done = src_done};
    return LB_OK;
}

void lb_engine_source_drain(lb_token_source *src, int64_t deadline_ns) {
    esrc *s = src->ctx;
    pthread_mutex_lock(&s->mu);
    s->deadline_ns = deadline_ns > 0 ? deadline_ns : 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void lb_engine_source_free(lb_token_source *src) {
    if (src == NULL || src->ctx == NULL) return;
    esrc *s = src->ctx;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    for (ereq *r = s->new_head, *nx; r != NULL; r = nx) {
        nx = r->next;
        free_req(r);
    }
    for (int32_t k = 0; k < s->n_active; k++)
        free_req(s->active[k]);
    free(s->active);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    memset(src, 0, sizeof *src);
}
