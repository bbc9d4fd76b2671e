/* fuzz_tokenizer.c: the BPE tokenizer (model/tokenizer.h) on arbitrary bytes, as a ranks
 * file and as text.
 *
 * As a ranks file: refused with the file's name in the message and nothing left, or
 * accepted with every byte ranked, and then the input encodes with it and decodes back.
 * As text: encoded by tokenizers over a small vocabulary built here (the 256 bytes, then
 * prefixes of common words with and without a leading space, whitespace and digit runs),
 * with each pre-split pattern and with and without special tokens. Every encoding must
 * give ids inside the vocabulary, count as many tokens as it returns, and decode to the
 * input's bytes exactly, whatever their UTF-8 validity. */
#include <string.h>

#include "fuzz.h"
#include "model/tokenizer.h"

static const char *const words[] = {
    "the",    "and",     "ing",           "tion",  "hello", "world", "token", "count",
    "server", "request", "<|endoftext|>", "don't", "it's",  "12",    "123",   "2024",
    "  ",     "   ",     "\n\n",          "\t",    "é",     "日本",  "😀"};

static char *vocab_text;
static size_t vocab_len, vocab_cap;
static char added[512][24];
static size_t n_added;

static void add_token(const char *tok, size_t n) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n > 1) {
        for (size_t i = 0; i < n_added; i++)
            if (strlen(added[i]) == n && memcmp(added[i], tok, n) == 0) return;
        FUZZ_CHECK(n_added < 512 && n < sizeof added[0]);
        memcpy(added[n_added++], tok, n);
    }
    if (vocab_len + 64 > vocab_cap) {
        vocab_cap = vocab_cap ? 2 * vocab_cap : 16384;
        vocab_text = realloc(vocab_text, vocab_cap);
        FUZZ_CHECK(vocab_text != NULL);
    }
    for (size_t i = 0; i < n; i += 3) {
        const uint8_t *p = (const uint8_t *)tok + i;
        uint32_t v =
            (uint32_t)p[0] << 16 | (i + 1 < n ? (uint32_t)p[1] << 8 : 0) | (i + 2 < n ? p[2] : 0);
        vocab_text[vocab_len++] = b64[v >> 18];
        vocab_text[vocab_len++] = b64[(v >> 12) & 63];
        vocab_text[vocab_len++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        vocab_text[vocab_len++] = i + 2 < n ? b64[v & 63] : '=';
    }
    static unsigned rank;
    vocab_len += (size_t)snprintf(vocab_text + vocab_len, vocab_cap - vocab_len, " %u\n", rank++);
}

/* Tokenizers over the built-in vocabulary: llama3 and gpt2 patterns, special tokens off
 * and (gpt2's <|endoftext|>) on. */
static lb_tokenizer *toks[4];

static void setup(void) {
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        add_token(&c, 1);
    }
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
        char spaced[32];
        size_t n = strlen(words[w]);
        snprintf(spaced, sizeof spaced, " %s", words[w]);
        for (size_t k = 2; k <= n; k++)
            add_token(words[w], k);
        for (size_t k = 2; k <= n + 1; k++)
            add_token(spaced, k);
    }
    for (int i = 0; i < 4; i++) {
        lb_tokenizer_params p = lb_tokenizer_default_params();
        p.pattern = i < 2 ? LB_TOK_PATTERN_LLAMA3 : LB_TOK_PATTERN_GPT2;
        p.special = i % 2 ? LB_TOK_SPECIAL_GPT2 : LB_TOK_SPECIAL_NONE;
        lb_err err = {{0}};
        FUZZ_CHECK(lb_tokenizer_parse(&toks[i], vocab_text, vocab_len, "builtin", &p, &err) ==
                   LB_OK);
    }
}

static void check_encoding(const lb_tokenizer *tok, const char *text, size_t n) {
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    lb_err err = {{0}};
    FUZZ_CHECK(lb_tokenizer_encode(tok, text, n, &ids, &n_ids, &err) == LB_OK);
    FUZZ_CHECK(n_ids <= n && (n_ids > 0) == (n > 0));
    const lb_tokenizer_info *info = lb_tokenizer_get_info(tok);
    for (size_t i = 0; i < n_ids; i++)
        FUZZ_CHECK(ids[i] <= info->max_id);
    int64_t c = -1;
    FUZZ_CHECK(lb_tokenizer_count(tok, text, n, &c, &err) == LB_OK && c == (int64_t)n_ids);
    char *back = NULL;
    size_t back_len = 0;
    FUZZ_CHECK(lb_tokenizer_decode(tok, ids, n_ids, &back, &back_len, &err) == LB_OK);
    FUZZ_CHECK(back_len == n && memcmp(back, text, n) == 0 && back[n] == '\0');
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (toks[0] == NULL) setup();
    const char *text = (const char *)data;
    for (int i = 0; i < 4; i++)
        check_encoding(toks[i], text, size);

    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    lb_status st = lb_tokenizer_parse(&tok, text, size, "fuzz.tiktoken", NULL, &err);
    if (st != LB_OK) {
        FUZZ_CHECK(tok == NULL);
        FUZZ_CHECK(strstr(err.msg, "fuzz.tiktoken") != NULL);
        return 0;
    }
    FUZZ_CHECK(lb_tokenizer_get_info(tok)->n_ranks >= 256);
    check_encoding(tok, text, size);
    lb_tokenizer_free(tok);
    return 0;
}
