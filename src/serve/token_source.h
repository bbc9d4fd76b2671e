/* token_source.h: where `llmbench serve` gets the tokens it sends.
 *
 * The HTTP server (serve/server.h) knows nothing about models: for every completion request
 * it asks a token source to start a stream, then pulls tokens one at a time. A pull never
 * blocks: the source either hands over the next token (it is due now), or says when the
 * next one will be due (or that it will wake the request then: lb_token_request's wake),
 * and the server parks the connection until then without holding a thread
 * (serve/server_timer.h). The synthetic source (serve/synthetic.h) is the first
 * implementation; the built-in inference engine plugs in through the same callbacks.
 *
 * Memory: the server gives every request stream_bytes of zeroed, max_align_t-aligned
 * memory for the source's per-request state, so a source needs no allocation per request.
 * Threads: start, next and done for one request run on one server thread at a time, but
 * different requests run concurrently: ctx must be safe to share.
 *
 * A completion prompt comes as text or, when the client sent token ids, as those ids
 * (ids >= 0 and < 2^31; whether they are in the vocabulary is the source's to check).
 * The request's sampling fields (temperature, top_p, top_k, seed, ignore_eos) come checked
 * by the server, each with whether the request set it: a field left out (or null) is the
 * source's own default. The synthetic source ignores them (its text depends on the prompt
 * and --seed only); the engine source samples with them.
 * A chat request's messages come in order with their roles (system, user or assistant: the
 * server refuses any other, and a message without one); its prompt is their contents
 * joined by newlines, for a source that needs only the text (the synthetic one). */
#ifndef LB_SERVE_TOKEN_SOURCE_H
#define LB_SERVE_TOKEN_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Longest token text a source may return, bytes (the server's buffers are sized by it):
 * the longest token of Llama 3's and GPT-2's vocabularies is 128 bytes, three times that
 * when each of its bytes is shown as U+FFFD, with room to spare. */
#define LB_TOKEN_TEXT_MAX_BYTES 512

/* A request's sampling fields, in the ranges the server accepts (vLLM's). */
typedef struct {
    /* which fields the request set */
    bool has_temperature, has_top_p, has_top_k, has_seed, has_ignore_eos;
    float temperature; /* >= 0; 0: greedy */
    float top_p;       /* in (0, 1]; 1: no cut */
    int32_t top_k;     /* >= 1, or 0 or -1: no cut */
    uint64_t seed;     /* the request's integer, two's complement when negative */
    bool ignore_eos;   /* generate max_tokens whatever the end-of-sequence token says */
} lb_token_sampling;

/* One message of a chat request. */
typedef struct {
    const char *role;    /* "system", "user" or "assistant"; static */
    const char *content; /* its text (text parts joined by newlines); not NUL-terminated */
    size_t content_len;  /* bytes */
} lb_token_message;

typedef struct {
    const char *prompt; /* prompt text; valid during start() only; not NUL-terminated */
    size_t prompt_len;  /* bytes */
    const int32_t *ids; /* the prompt as token ids [n_ids], valid during start() only;
                           NULL: the prompt is text */
    size_t n_ids;       /* >= 1 when ids is set */
    int64_t max_tokens; /* output tokens to generate, >= 1 */
    int64_t arrival_ns; /* lb_clock_now_ns() when the request arrived */
    bool chat;          /* /v1/chat/completions (prompt = message contents) */
    const lb_token_message *messages; /* a chat's [n_messages] in order, valid during start()
                                         only; NULL when not chat */
    size_t n_messages;                /* >= 1 when chat */
    /* the request's sampling fields */
    lb_token_sampling sampling;
    /* For a source whose tokens come from another thread (the engine's): next() may answer
     * LB_TOKEN_LATER with *due_ns INT64_MAX, "when woken", and the source then calls
     * wake(wake_ctx), from any thread, once next() has something to say (a token, the end,
     * a failure). A wake that finds nothing waiting is kept for the next wait; none may
     * come after done(). Set by the server. */
    void (*wake)(void *wake_ctx);
    void *wake_ctx;
} lb_token_request;

typedef enum {
    LB_TOKEN_READY,  /* the next token's text was written */
    LB_TOKEN_STOP,   /* the last token's text was written: it ended the request as an
                        end-of-sequence token does (finish_reason "stop"), whatever the
                        token budget; no more tokens */
    LB_TOKEN_LATER,  /* the next token is not due yet: *due_ns says when to ask again */
    LB_TOKEN_END,    /* no more tokens: the request is complete */
    LB_TOKEN_FAILED, /* no more tokens, the request is not complete: text says why */
} lb_token_state;

typedef struct {
    const char *name;    /* "synthetic" */
    void *ctx;           /* the source's shared state, passed to every callback */
    size_t stream_bytes; /* per-request state the server provides to start(), bytes */
    /* Begins a request: initialises the state in stream and counts the prompt's tokens
     * into *prompt_tokens. On failure writes err and returns its status: LB_ERR_USAGE for
     * a request the source can never serve (the server answers 400 with err's text). */
    lb_status (*start)(void *ctx, const lb_token_request *req, void *stream, int64_t *prompt_tokens,
                       lb_err *err);
    /* The next token as of now_ns (monotonic ns; INT64_MAX means "everything is due"):
     * LB_TOKEN_READY or LB_TOKEN_STOP with text[0..*len) (at most LB_TOKEN_TEXT_MAX_BYTES,
     * no NUL), LB_TOKEN_LATER with *due_ns (INT64_MAX: when the source calls the request's
     * wake), LB_TOKEN_END, or LB_TOKEN_FAILED with the reason in
     * text[0..*len) (same limits) after the tokens it could give. Never blocks, but for a
     * moment (a millisecond) while the server drains (now_ns INT64_MAX: it asks again at
     * once), so that a source whose tokens take time does not make it spin. */
    lb_token_state (*next)(void *ctx, void *stream, int64_t now_ns, char *text, size_t *len,
                           int64_t *due_ns);
    /* Ends a request, finished or abandoned; releases what start() took. */
    void (*done)(void *ctx, void *stream);
} lb_token_source;

#endif
