/* hf_tokenizer.h: a Hugging Face tokenizer.json of the byte-level BPE kind (Llama 3,
 * GPT-2) as a model/tokenizer.h tokenizer, and Llama 3's chat format.
 *
 * tokenizer.json's model.vocab maps token strings, written in GPT-2's byte-to-unicode
 * alphabet, to ids; decoded to bytes they become a ranks table (id = rank) for
 * tokenizer.h's BPE. That BPE merges by the rank of the merged token, which equals HF's
 * merge order exactly when every merge "a b" yields a token whose id grows with the
 * merge's position: this is checked, and a tokenizer.json that breaks it is refused. The
 * pre-tokenizer must be Llama 3's Split expression or GPT-2's ByteLevel with use_regex (with
 * at most ByteLevel byte mappings beside it, add_prefix_space false); any other step, and
 * any normalizer, is refused by name rather than skipped. added_tokens are matched as Hugging
 * Face matches them (also one model.vocab holds), lstrip, rstrip, single_word and normalized
 * included (tokenizer.h's lb_tok_added_flag), and tokenizer.h's lb_tokenizer_is_special is
 * true of those marked "special" only. Not here:
 * SentencePiece (Llama 2, Mistral v0.x) vocabularies, normalizers, byte fallback, WordPiece,
 * Unigram. */
#ifndef LB_MODEL_HF_TOKENIZER_H
#define LB_MODEL_HF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/tokenizer.h"

/* Reads tokenizer.json's text (name labels errors). *out is the caller's
 * (lb_tokenizer_free). A file it cannot read is LB_ERR_USAGE naming it and the field. */
lb_status lb_hf_tokenizer_parse(lb_tokenizer **out, const char *json, size_t len, const char *name,
                                lb_err *err);
/* Reads the file at path: a tokenizer.json (its text starts with '{'), or else a tiktoken
 * ranks file (Llama 3's original/tokenizer.model, with its special tokens) read with
 * ranks_params (NULL: tokenizer.h's defaults). A tokenizer.json names its own pre-split
 * expression and special tokens: ranks_params other than the defaults' automatic choices
 * are LB_ERR_USAGE for one. */
lb_status lb_hf_tokenizer_load(lb_tokenizer **out, const char *path,
                               const lb_tokenizer_params *ranks_params, lb_err *err);

/* One chat message. */
typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
    size_t content_len; /* bytes */
} lb_chat_message;

/* Llama 3's chat prompt: <|begin_of_text|>, then per message
 * <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>, then the assistant's
 * header that the reply follows. CONTENT is the message's content trimmed as the
 * template's `message['content'] | trim` does (Python's str.strip(): leading and trailing
 * whitespace, Unicode's included). *text is malloc'd and NUL-terminated (caller frees);
 * *len its bytes. */
lb_status lb_hf_tokenizer_chat_llama3(const lb_chat_message *msgs, size_t n, char **text,
                                      size_t *len, lb_err *err);

#endif
