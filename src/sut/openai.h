/* openai.h: the OpenAI-compatible HTTP API as the load generator speaks it: request
 * bodies for /v1/completions and /v1/chat/completions, and the parsing of a response
 * body or of one streamed event's data.
 *
 * A streamed completion is a sequence of events whose data is a JSON object with
 * choices[0].text (completions) or choices[0].delta.content (chat; a reasoning model's
 * thinking comes first, in delta.reasoning_content or delta.reasoning), then, when
 * stream_options.include_usage was asked, one event with "usage" {prompt_tokens,
 * completion_tokens}, then the event "[DONE]". A server error arrives as {"error":
 * {"message": ...}}. Parsing takes a buffer, so it can be unit-tested and fuzzed; it does
 * no I/O. */
#ifndef LB_SUT_OPENAI_H
#define LB_SUT_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum {
    LB_API_COMPLETIONS = 0, /* POST /v1/completions, "prompt" */
    LB_API_CHAT,            /* POST /v1/chat/completions: the history, then the user message */
} lb_api;

/* "completions" or "chat"; parse returns -1 for anything else. */
const char *lb_openai_api_name(lb_api api);
int lb_openai_api_parse(const char *name);
/* The path appended to an endpoint URL: "/v1/completions" or "/v1/chat/completions". */
const char *lb_openai_api_path(lb_api api);

typedef struct {
    lb_api api;
    const char *model;  /* "model" field; NULL leaves it out */
    bool stream;        /* stream with stream_options.include_usage */
    bool ignore_eos;    /* vLLM's extension: generate exactly max_tokens */
    double temperature; /* 0 = greedy, as MLPerf runs */
} lb_openai_request;

/* The JSON request body for one prompt (malloc'd, caller frees); *len gets its length.
 * Chat: history[0..n_history) are the conversation's earlier messages, user and
 * assistant in turn, before the prompt as the last user message (completions take none).
 * NULL on no memory. */
char *lb_openai_body(const lb_openai_request *req, const char *const *history, size_t n_history,
                     const char *prompt, int32_t max_tokens, size_t *len);

typedef struct {
    bool done;        /* the "[DONE]" event */
    const char *text; /* generated text in this piece ("" when none); points into root */
    size_t text_len;
    const char *reasoning; /* a chat piece's reasoning text (the delta's or a whole answer's
                              message's reasoning_content or reasoning, as vLLM, SGLang and
                              llama.cpp send a reasoning model's thinking): generated, not
                              the answer; "" when none; points into root */
    size_t reasoning_len;
    int64_t prompt_tokens;     /* from usage; -1 when absent */
    int64_t completion_tokens; /* from usage; -1 when absent */
    const char *error;         /* the server's error message, NULL when none; points into root */
    json_t *root;              /* holds the strings above (lb_openai_piece_clear frees it) */
} lb_openai_piece;

/* Parses one streamed event's data (streamed) or a whole response body (!streamed).
 * LB_ERR_FORMAT when it is not JSON or not shaped like a completion; the piece is then
 * cleared. */
lb_status lb_openai_parse(lb_api api, bool streamed, const char *data, size_t len,
                          lb_openai_piece *out);
void lb_openai_piece_clear(lb_openai_piece *p);

#endif
