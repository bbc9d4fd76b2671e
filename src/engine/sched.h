/* sched.h: continuous batching over a paged KV cache: which sequences compute which
 * tokens in the next step.
 *
 * A sequence holds its tokens (prompt, then what was generated) and how many of them
 * have their keys and values in the cache (n_computed). Each step (lb_sched_plan) gives
 * every running sequence the tokens it needs next, within a per-step token budget:
 * decodes (one token) first, then prefill chunks (as many prompt tokens as the budget
 * leaves: chunked prefill), then admits waiting sequences in arrival order while the
 * budget, the batch size and the free blocks allow. A waiting prompt is cut to the budget
 * left only when it could never fit a step whole or the step holds no prompt tokens yet;
 * otherwise a later one that fits whole is admitted before it (first fit), or none. But a
 * prompt is passed over in one step at most: once a later one went ahead of it, it is
 * marked (lb_seq.passed), nothing is admitted ahead of it again, and at the head of the
 * queue it is admitted first in the next step, whole or cut to the budget left (so the
 * step stays full), or, when the blocks it needs are not free, nothing is. So a prompt's
 * wait is bounded under any stream of later, shorter ones. A sequence whose n_computed
 * reaches n_tokens in a step gets its next token sampled from that step's logits.
 *
 * When a running sequence needs a block and none is free, the most recently admitted
 * running sequence is preempted: its blocks are freed, n_computed goes back to 0 and it
 * waits at the head of the queue, to be recomputed (prompt and generated tokens) when
 * it is admitted again. So a full cache costs time, never a failure; lb_sched_add refuses
 * only a sequence that could not fit even alone (longer than max_ctx or the whole cache).
 *
 * Pure bookkeeping on the CPU: no model, no device. Not here: priorities, prefix sharing,
 * swapping blocks to the host. */
#ifndef LB_ENGINE_SCHED_H
#define LB_ENGINE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/kvcache.h"

typedef enum { LB_SEQ_WAITING = 0, LB_SEQ_RUNNING, LB_SEQ_DONE } lb_seq_state;

typedef struct {
    int64_t id;
    int32_t *tokens; /* [cap_tokens]: n_prompt prompt tokens, then the generated ones; owned */
    int32_t n_tokens, cap_tokens;
    int32_t n_prompt;
    int32_t max_new;    /* tokens to generate at most */
    int32_t n_computed; /* tokens whose keys and values are in the cache */
    int32_t *blocks;    /* [n_blocks] the block table, position order; owned */
    int32_t n_blocks, cap_blocks;
    lb_seq_state state;
    int32_t preempted; /* times this sequence was preempted */
    bool passed;       /* a later sequence was admitted ahead of it: none will be again */
    void *user;        /* the engine's request */
} lb_seq;

typedef struct {
    int32_t max_seqs;    /* sequences in one step, at most */
    int32_t step_tokens; /* tokens computed in one step, at most */
    int32_t max_ctx;     /* longest sequence (prompt + output), tokens */
} lb_sched_params;

typedef struct {
    lb_sched_params p;
    lb_kv_blocks kv;
    lb_seq **running; /* admission order */
    int32_t n_running;
    lb_seq **waiting; /* [head .. head + n_waiting) ring, arrival order */
    int32_t n_waiting, cap_waiting, head;
    /* the planned step */
    lb_seq **step_seq;  /* [n_step] */
    int32_t *step_take; /* [n_step] tokens each computes: n_computed .. n_computed + take */
    int32_t n_step;
    int64_t preemptions; /* since init */
} lb_sched;

lb_status lb_sched_init(lb_sched *s, const lb_sched_params *p, int32_t n_blocks, int32_t block_size,
                        lb_err *err);
void lb_sched_free(lb_sched *s); /* frees the scheduler, not the sequences */

/* A sequence with its prompt (q->tokens, q->n_tokens = q->n_prompt >= 1) and max_new set
 * starts waiting. LB_ERR_USAGE naming the limit when it could never fit. */
lb_status lb_sched_add(lb_sched *s, lb_seq *q, lb_err *err);
/* Plans the next step into step_seq/step_take (taking the blocks they need); returns
 * n_step (0: nothing to run). */
int32_t lb_sched_plan(lb_sched *s);
/* After the step ran: every planned sequence's n_computed advances by its take. */
void lb_sched_advance(lb_sched *s);
/* Ends a sequence (finished or cancelled), running or waiting: its blocks are freed. */
void lb_sched_finish(lb_sched *s, lb_seq *q);
/* Appends a generated token (grows q->tokens). */
lb_status lb_sched_seq_push(lb_seq *q, int32_t token, lb_err *err);
/* Frees what a sequence owns (tokens, blocks table); the struct stays the caller's. */
void lb_sched_seq_free(lb_seq *q);

#endif
