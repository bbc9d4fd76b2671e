/* sched.c: the step planner of sched.h. Running and waiting sequences are small pointer
 * arrays scanned each step: a step costs microseconds for hundreds of sequences, next to
 * milliseconds of model work. */
#include "engine/sched.h"

#include <stdlib.h>
#include <string.h>

lb_status lb_sched_init(lb_sched *s, const lb_sched_params *p, int32_t n_blocks, int32_t block_size,
                        lb_err *err) {
    memset(s, 0, sizeof *s);
    if (p->max_seqs < 1 || p->step_tokens < 1 || p->max_ctx < 2)
        return lb_fail(err, LB_ERR_USAGE,
                       "the scheduler needs at least 1 sequence, 1 token a step and a context "
                       "of 2 tokens");
    s->p = *p;
    LB_TRY(lb_kvcache_init(&s->kv, n_blocks, block_size, err));
    s->running = malloc((size_t)p->max_seqs * sizeof *s->running);
    s->step_seq = malloc((size_t)p->max_seqs * sizeof *s->step_seq);
    s->step_take = malloc((size_t)p->max_seqs * sizeof *s->step_take);
    if (s->running == NULL || s->step_seq == NULL || s->step_take == NULL) {
        lb_sched_free(s);
        return lb_fail(err, LB_ERR_NOMEM, "out of memory for the scheduler");
    }
    return LB_OK;
}

void lb_sched_free(lb_sched *s) {
    if (s == NULL) return;
    lb_kvcache_free(&s->kv);
    free(s->running);
    free(s->waiting);
    free(s->step_seq);
    free(s->step_take);
    memset(s, 0, sizeof *s);
}

static lb_seq *waiting_at(const lb_sched *s, int32_t i) {
    return s->waiting[(s->head + i) % s->cap_waiting];
}

static lb_status waiting_grow(lb_sched *s) {
    if (s->n_waiting < s->cap_waiting) return LB_OK;
    int32_t cap = s->cap_waiting ? 2 * s->cap_waiting : 64;
    lb_seq **w = malloc((size_t)cap * sizeof *w);
    if (w == NULL) return LB_ERR_NOMEM;
    for (int32_t i = 0; i < s->n_waiting; i++)
        w[i] = waiting_at(s, i);
    free(s->waiting);
    s->waiting = w;
    s->cap_waiting = cap;
    s->head = 0;
    return LB_OK;
}

lb_status lb_sched_add(lb_sched *s, lb_seq *q, lb_err *err) {
    int64_t total = (int64_t)q->n_prompt + q->max_new;
    if (q->n_prompt < 1) return lb_fail(err, LB_ERR_USAGE, "a request needs a prompt of 1 token");
    if (total > s->p.max_ctx)
        return lb_fail(err, LB_ERR_USAGE,
                       "the prompt's %d tokens and %d to generate exceed the context of %d tokens",
                       q->n_prompt, q->max_new, s->p.max_ctx);
    if (lb_kvcache_blocks_for(&s->kv, total) > s->kv.n_blocks)
        return lb_fail(err, LB_ERR_USAGE,
                       "the prompt's %d tokens and %d to generate exceed the whole KV cache of "
                       "%lld tokens",
                       q->n_prompt, q->max_new, (long long)s->kv.n_blocks * s->kv.block_size);
    if (waiting_grow(s) != LB_OK) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
    q->state = LB_SEQ_WAITING;
    q->n_computed = 0;
    q->passed = false;
    s->waiting[(s->head + s->n_waiting++) % s->cap_waiting] = q;
    return LB_OK;
}

lb_status lb_sched_seq_push(lb_seq *q, int32_t token, lb_err *err) {
    if (q->n_tokens == q->cap_tokens) {
        int32_t cap = q->cap_tokens ? 2 * q->cap_tokens : 64;
        int32_t *t = realloc(q->tokens, (size_t)cap * sizeof *t);
        if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for a sequence's tokens");
        q->tokens = t;
        q->cap_tokens = cap;
    }
    q->tokens[q->n_tokens++] = token;
    return LB_OK;
}

void lb_sched_seq_free(lb_seq *q) {
    if (q == NULL) return;
    free(q->tokens);
    free(q->blocks);
    q->tokens = q->blocks = NULL;
    q->n_tokens = q->cap_tokens = q->n_blocks = q->cap_blocks = 0;
}

static void give_blocks(lb_sched *s, lb_seq *q) {
    for (int32_t i = 0; i < q->n_blocks; i++)
        lb_kvcache_give(&s->kv, q->blocks[i]);
    q->n_blocks = 0;
}

/* Takes the blocks q needs to hold n tokens; false (nothing taken) when too few are free. */
static bool take_blocks(lb_sched *s, lb_seq *q, int32_t n) {
    int32_t need = lb_kvcache_blocks_for(&s->kv, n) - q->n_blocks;
    if (need <= 0) return true;
    if (need > s->kv.n_free) return false;
    if (q->n_blocks + need > q->cap_blocks) {
        int32_t cap = q->cap_blocks ? q->cap_blocks : 8;
        while (cap < q->n_blocks + need)
            cap *= 2;
        int32_t *b = realloc(q->blocks, (size_t)cap * sizeof *b);
        if (b == NULL) return false;
        q->blocks = b;
        q->cap_blocks = cap;
    }
    for (int32_t i = 0; i < need; i++)
        q->blocks[q->n_blocks++] = lb_kvcache_take(&s->kv);
    return true;
}

static void remove_running(lb_sched *s, lb_seq *q) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            memmove(s->running + i, s->running + i + 1,
                    (size_t)(s->n_running - i - 1) * sizeof *s->running);
            s->n_running--;
            return;
        }
}

/* Drops q from the planned step; returns the tokens it had been given (0 if none). */
static int32_t unplan(lb_sched *s, lb_seq *q) {
    for (int32_t i = 0; i < s->n_step; i++)
        if (s->step_seq[i] == q) {
            int32_t take = s->step_take[i];
            memmove(s->step_seq + i, s->step_seq + i + 1,
                    (size_t)(s->n_step - i - 1) * sizeof *s->step_seq);
            memmove(s->step_take + i, s->step_take + i + 1,
                    (size_t)(s->n_step - i - 1) * sizeof *s->step_take);
            s->n_step--;
            return take;
        }
    return 0;
}

/* The newest running sequence goes back to the head of the queue with nothing cached. */
static lb_seq *preempt_newest(lb_sched *s, int32_t *budget) {
    lb_seq *v = s->running[s->n_running - 1];
    *budget += unplan(s, v);
    s->n_running--;
    give_blocks(s, v);
    v->n_computed = 0;
    v->state = LB_SEQ_WAITING;
    v->preempted++;
    s->preemptions++;
    waiting_grow(s); /* cannot fail: a running sequence had a waiting slot before */
    s->head = (s->head + s->cap_waiting - 1) % s->cap_waiting;
    s->waiting[s->head] = v;
    s->n_waiting++;
    return v;
}

/* Plans q's next `take` tokens, preempting the newest sequences for blocks; false when
 * q itself was preempted. */
static bool plan_running(lb_sched *s, lb_seq *q, int32_t take, int32_t *budget) {
    while (!take_blocks(s, q, q->n_computed + take))
        if (preempt_newest(s, budget) == q) return false;
    s->step_seq[s->n_step] = q;
    s->step_take[s->n_step++] = take;
    *budget -= take;
    return true;
}

/* The waiting sequence to admit next with `budget` tokens left in a step, or -1: the
 * head when it fits whole, or cut to the budget when a later prompt was admitted ahead of
 * it in an earlier step (so no prompt is passed over in two steps); else the first later
 * one that fits whole, looking no further than one already passed over (a prompt cut at
 * the step's end would run its rest in the next step through the paged kernel, attending
 * over the cache, slower than a whole prompt's attention); else the head cut to the budget
 * when it could never fit a step whole, or when the step holds no prompt tokens yet (so
 * every prompt progresses); else none (the rest of the budget stays unused). */
static int32_t next_waiting(const lb_sched *s, int32_t budget, bool has_prompt) {
    const lb_seq *h = waiting_at(s, 0);
    const int32_t left = h->n_tokens - h->n_computed;
    if (left <= budget || h->passed) return 0;
    for (int32_t i = 1; i < s->n_waiting; i++) {
        const lb_seq *q = waiting_at(s, i);
        if (q->n_tokens - q->n_computed <= budget) return i;
        if (q->passed) break;
    }
    return left > s->p.step_tokens || !has_prompt ? 0 : -1;
}

int32_t lb_sched_plan(lb_sched *s) {
    s->n_step = 0;
    int32_t budget = s->p.step_tokens;
    bool has_prompt = false; /* the step computes some prompt tokens */
    /* decodes first, then prefill chunks of running sequences, both in admission order */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
            lb_seq *q = s->running[i];
            int32_t left = q->n_tokens - q->n_computed;
            if ((pass == 0) != (left == 1) || left < 1) continue;
            bool planned = false;
            for (int32_t k = 0; k < s->n_step; k++)
                planned |= s->step_seq[k] == q;
            if (planned) continue;
            if (!plan_running(s, q, left < budget ? left : budget, &budget))
                i--;
            else
                has_prompt |= pass == 1;
        }
    int32_t n_passed = 0; /* the waiting sequences a later one went ahead of this step */
    while (budget > 0 && s->n_waiting > 0 && s->n_running < s->p.max_seqs) {
        const int32_t at = next_waiting(s, budget, has_prompt);
        if (at < 0) break;
        lb_seq *q = waiting_at(s, at);
        int32_t left = q->n_tokens - q->n_computed;
        int32_t take = left < budget ? left : budget;
        if (!take_blocks(s, q, q->n_computed + take)) break;
        for (int32_t k = at; k > 0; k--) /* q out of the ring, the ones before it move up */
            s->waiting[(s->head + k) % s->cap_waiting] = waiting_at(s, k - 1);
        s->head = (s->head + 1) % s->cap_waiting;
        s->n_waiting--;
        q->state = LB_SEQ_RUNNING;
        s->running[s->n_running++] = q;
        s->step_seq[s->n_step] = q;
        s->step_take[s->n_step++] = take;
        budget -= take;
        has_prompt = true;
        n_passed = at >= n_passed ? at : n_passed - 1; /* those before q stay in front */
    }
    /* they stay at the front of the queue; from the next step on none is passed again */
    for (int32_t i = 0; i < n_passed; i++)
        waiting_at(s, i)->passed = true;
    return s->n_step;
}

void lb_sched_advance(lb_sched *s) {
    for (int32_t i = 0; i < s->n_step; i++)
        s->step_seq[i]->n_computed += s->step_take[i];
}

void lb_sched_finish(lb_sched *s, lb_seq *q) {
    if (q->state == LB_SEQ_RUNNING) {
        remove_running(s, q);
    } else if (q->state == LB_SEQ_WAITING) {
        for (int32_t i = 0; i < s->n_waiting; i++)
            if (waiting_at(s, i) == q) {
                for (int32_t k = i; k + 1 < s->n_waiting; k++)
                    s->waiting[(s->head + k) % s->cap_waiting] = waiting_at(s, k + 1);
                s->n_waiting--;
                break;
            }
    }
    give_blocks(s, q);
    q->state = LB_SEQ_DONE;
}
