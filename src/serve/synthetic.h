/* synthetic.h: a token source with configured timing and no model behind it.
 *
 * Token i (0-based) of a request is due at arrival + ttft + i * tpot, measured from the
 * request's arrival, so a server that falls behind catches up instead of adding its delay
 * to every later token. The text is deterministic pseudo-words "tok<N> " (N below
 * 100000) drawn from a generator seeded by the server seed and a hash of the prompt: the
 * same prompt gives the same completion, streamed or not, in every run. Every token is
 * exactly one whitespace-separated word. Prompt tokens are counted as whitespace-separated
 * words of the prompt (space, tab, newline, carriage return, form feed, vertical tab), or
 * as its ids when it came as token ids.
 *
 * With `slots` N > 0 it models a server that generates for at most N requests at once: a
 * request waits (first come, first served) for the slot that frees first, and its clock
 * starts there, so TTFT grows with the load once arrivals outpace N slots (a known
 * capacity: N / (ttft + (max_tokens - 1) * tpot) requests a second).
 *
 * It always generates exactly max_tokens tokens; it does not model stop sequences or EOS.
 * It ignores the request's sampling fields (lb_token_request's sampling: temperature,
 * top_p, top_k, seed, ignore_eos): the text depends on the prompt and the server seed
 * only. */
#ifndef LB_SERVE_SYNTHETIC_H
#define LB_SERVE_SYNTHETIC_H

#include <stdint.h>

#include "core/status.h"
#include "serve/token_source.h"

typedef struct {
    double ttft_ms; /* first token this long after the request arrived, ms (>= 0) */
    double tpot_ms; /* each further token this long after the one before, ms (>= 0) */
    uint64_t seed;  /* mixed into every request's token generator */
    int64_t slots;  /* requests generating at once, at most; 0 = no limit */
} lb_synthetic_params;

lb_synthetic_params lb_synthetic_default_params(void);

/* Fills *src with the synthetic source. src->ctx is allocated here: release it with
 * lb_synthetic_free. */
lb_status lb_synthetic_init(const lb_synthetic_params *params, lb_token_source *src, lb_err *err);
void lb_synthetic_free(lb_token_source *src); /* accepts NULL and a zeroed source */

/* Whitespace-separated words in text[0..len): the synthetic prompt token count. */
int64_t lb_synthetic_count_words(const char *text, size_t len);

#endif
