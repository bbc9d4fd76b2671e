/* engine_source.h: the built-in engine (engine/engine.h) as a token source of the HTTP
 * server (serve/token_source.h).
 *
 * The engine runs on a thread of its own: start() tokenizes the prompt (Llama 3's chat
 * format for chat requests, each message under its own role's header, then the assistant's
 * header; the bos id before a plain prompt) or takes a prompt of token ids as it is (no
 * bos; an id outside the model's vocabulary is LB_ERR_USAGE naming it), checks it against
 * the engine's context and cache (a request that can never fit is LB_ERR_USAGE naming the
 * limit and what would fit: the server answers 400) and queues it; the engine thread
 * admits queued requests between steps and appends each step's tokens to their requests.
 * next() never waits for the engine: it hands over the
 * text of the tokens that are there, one token a call (whole UTF-8 characters, an invalid
 * byte as U+FFFD, at most LB_TOKEN_TEXT_MAX_BYTES at a time, possibly none when a
 * character continues in the next token; the end-of-sequence token that ends a request
 * is LB_TOKEN_STOP, its own text not sent; a special token of the vocabulary is a token
 * without text, as vLLM's skip_special_tokens), or answers LB_TOKEN_LATER "when woken":
 * the engine thread calls the request's wake (token_source.h) after each step that gave it
 * a token and when it ends, so a request waiting in the queue costs nothing until then.
 * A request the engine refuses or that a failed step ends is LB_TOKEN_FAILED after the
 * tokens it got (the server sends an error, never a complete answer). done() on an
 * unfinished request cancels it in the engine, freeing its blocks.
 *
 * Sampling: a request's temperature, top_p, top_k (-1 or 0: no cut), seed and ignore_eos
 * (lb_token_request's sampling) are its own; a field it leaves out is the params' (the
 * server's command line). A request without a seed draws from params.sampling.seed + k,
 * k counting the requests (each prompt of a batch) in the order they were queued from 0,
 * as infer's queries draw from seed + their index: the same arrival order repeats the run,
 * and identical prompts still get different samples. */
#ifndef LB_SERVE_ENGINE_SOURCE_H
#define LB_SERVE_ENGINE_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"
#include "model/tokenizer.h"
#include "serve/token_source.h"

typedef struct {
    lb_engine *engine;       /* driven only by the source's thread from init to free */
    const lb_tokenizer *tok; /* required: prompts and answers are text */
    int32_t bos_id;          /* -1: none */
    const int32_t *eos_ids;  /* [n_eos], copied */
    int n_eos;
    lb_sampling sampling; /* of a request that names none; seed: see above */
    bool ignore_eos;      /* of a request that does not say */
} lb_engine_source_params;

/* Starts the engine thread and fills *src. Release with lb_engine_source_free (before
 * the engine is closed). */
lb_status lb_engine_source_init(const lb_engine_source_params *p, lb_token_source *src,
                                lb_err *err);
/* Before the server drains (serve/server.h's lb_server_shutdown): requests still queued
 * or generating at deadline_ns (lb_clock_now_ns) end as LB_TOKEN_FAILED, "the server shut
 * down before the request finished", so that no request outlives the drain. */
void lb_engine_source_drain(lb_token_source *src, int64_t deadline_ns);
void lb_engine_source_free(lb_token_source *src); /* stops the thread; accepts zeroed */

#endif
