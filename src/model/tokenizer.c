/* tokenizer.c: the byte-level BPE of tokenizer.h.
 *
 * Layout: every token's bytes sit in one blob; an entry holds a token's place in the blob,
 * its id and its hash; two open-addressing hash maps (ranks, special tokens) hold entry
 * numbers, and an array of entry numbers sorted by id serves decoding. Nothing changes
 * after loading, so encoding needs no lock; each call brings its own PCRE2 match data and
 * scratch space.
 *
 * Merging: a piece that is itself a token costs one lookup (most words are). Shorter pieces
 * keep their parts in small arrays and scan them for the lowest-ranked pair after each
 * merge, which is fastest for the handful of parts a word has. Longer pieces (a run of
 * letters or spaces thousands of bytes long) keep a linked list of parts and a heap of
 * candidate pairs keyed by (rank, position), so they take n log n steps, not n squared;
 * both choose the same merges. There is no cache of encoded pieces: it would need a lock or
 * per-thread copies, and whole-piece lookups already serve common words. */
#include "model/tokenizer.h"

#include "core/file.h"
#include "model/ucd_classes.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_RANK        UINT32_MAX
#define MAX_RANK       0x3fffffffu /* ranks above this are refused (ids stay well in uint32) */
#define SCAN_MAX_BYTES 96          /* pieces up to this long merge by scanning small arrays */

/* The classes are spelled out (ucd_classes.h), not PCRE2's \p{L}, \p{N} and \s: PCRE2's
 * tables are those of its own Unicode version (Debian 12's PCRE2 10.42 has Unicode 14, whose
 * \p{L} lacks the letters Unicode 15 added), and its \s under UCP is \p{Z}, \h and \v,
 * which takes U+180E (no longer White_Space since Unicode 6.3). The reference tokenizers'
 * \s is the White_Space property (Rust's regex crate in tiktoken, Oniguruma in Hugging
 * Face's tokenizers); \S is its complement. */
#define L  LB_UCD_LETTER
#define N  LB_UCD_NUMBER
#define WS LB_UCD_WHITE_SPACE
static const char *const llama3_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n" L N "]?[" L "]+|[" N "]{1,3}"
    "| ?[^" WS L N "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char *const gpt2_pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?[" L "]+| ?[" N "]+| ?[^" WS L N
                                        "]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef L
#undef N
#undef WS

/* Llama 3.1's special tokens in id order: these eleven, then reserved 3..247. */
static const char *const llama3_specials[] = {"begin_of_text",
                                              "end_of_text",
                                              "reserved_special_token_0",
                                              "reserved_special_token_1",
                                              "finetune_right_pad_id",
                                              "reserved_special_token_2",
                                              "start_header_id",
                                              "end_header_id",
                                              "eom_id",
                                              "eot_id",
                                              "python_tag"};
#define LLAMA3_N_SPECIAL     256
#define LLAMA3_FIRST_SPECIAL 128000u
#define GPT2_FIRST_SPECIAL   50256u

typedef struct {
    uint32_t off; /* into the blob */
    uint32_t len; /* bytes */
    uint32_t id;
} tok_entry;

/* A map slot carries what a lookup compares, so a probe touches one slot, and the blob only
 * for keys longer than 8 bytes. */
typedef struct {
    uint64_t head; /* key_head() of the key */
    uint32_t hash;
    uint32_t len; /* 0: empty */
    uint32_t id;
    uint32_t off; /* the key in the blob */
} tok_slot;

typedef struct {
    tok_slot *slots;
    size_t mask;    /* slots - 1, a power of two minus one */
    size_t max_len; /* longest key: longer strings are not looked up */
} tok_map;

struct lb_tokenizer {
    uint8_t *blob;
    size_t blob_bytes, blob_cap;
    tok_entry *entries;
    size_t n_entries, cap_entries;
    tok_map ranks, special;
    uint32_t *by_id;        /* entry numbers sorted by id */
    bool *special_flag;     /* [n_special] lb_tokenizer_is_special of each special entry, in entry
                               order; NULL: true for all */
    uint8_t *special_match; /* [n_special] lb_tok_added_flag bits of each special entry, in
                               entry order; NULL: none */
    bool second_pass;       /* some special token is LB_TOK_ADDED_NORMALIZED */
    pcre2_code *re_space;   /* one White_Space character, anchored (lstrip, rstrip); or NULL */
    pcre2_code *re_word;    /* one \w character, anchored (single_word); or NULL */
    uint32_t byte_rank[256];
    /* find_special's filters, so that a byte that could start a special token costs a
     * lookup only where one may stand there */
    bool special_first[256];       /* bytes a special token starts with */
    int special_first_byte;        /* the one such byte, or -1 when several (or none) */
    bool special_one[256];         /* bytes that are a special token by themselves */
    uint8_t special_pair[1 << 13]; /* bit a << 8 | b: a longer special token starts "ab" */
    uint8_t special_len[32];       /* bit l: a special token of l bytes (l < 256) */
    bool special_long;             /* a special token of 256 bytes or more */
    pcre2_code *re;
    lb_tokenizer_info info;
};

/* ---- hashing and the maps ---- */

/* One word that, with the length, names a key of up to 8 bytes (1-3 bytes: the first,
 * middle and last; 4-8: the first four and the last four, overlapping); of a longer key,
 * its first 8 bytes. */
static inline uint64_t key_head(const uint8_t *p, size_t n) {
    if (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        return w;
    }
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        return (uint64_t)b << 32 | a;
    }
    return (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
}

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 32);
}

static inline uint32_t key_hash(uint64_t head, const uint8_t *p, size_t n) {
    uint64_t h = mix64(head ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull));
    if (n > 8) {
        uint64_t w;
        for (size_t i = 8; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            h = mix64(h ^ w);
        }
        memcpy(&w, p + n - 8, 8); /* the last 8, overlapping what came before */
        h = mix64(h ^ w);
    }
    return (uint32_t)h;
}

static lb_status map_init(tok_map *m, size_t n_keys, lb_err *err) {
    size_t slots = 16;
    while (slots < 2 * n_keys)
        slots *= 2;
    m->slots = calloc(slots, sizeof *m->slots);
    if (m->slots == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the tokenizer");
    m->mask = slots - 1;
    m->max_len = 0;
    return LB_OK;
}

/* The slot of p[0..n) in m, or NULL. */
static inline const tok_slot *map_find(const lb_tokenizer *t, const tok_map *m, const uint8_t *p,
                                       size_t n) {
    if (n > m->max_len) return NULL;
    uint64_t head = key_head(p, n);
    uint32_t h = key_hash(head, p, n);
    for (size_t s = h & m->mask;; s = (s + 1) & m->mask) {
        const tok_slot *sl = &m->slots[s];
        if (sl->len == 0) return NULL;
        if (sl->hash == h && sl->head == head && sl->len == n &&
            (n <= 8 || memcmp(t->blob + sl->off + 8, p + 8, n - 8) == 0))
            return sl;
    }
}

/* The id of p[0..n) in m, or NO_RANK. */
static inline uint32_t map_id(const lb_tokenizer *t, const tok_map *m, const uint8_t *p, size_t n) {
    const tok_slot *sl = map_find(t, m, p, n);
    return sl ? sl->id : NO_RANK;
}

/* Adds entry e to m; returns the slot already there under the same bytes, or NULL. */
static const tok_slot *map_insert(lb_tokenizer *t, tok_map *m, uint32_t e) {
    const tok_entry *te = &t->entries[e];
    const uint8_t *p = t->blob + te->off;
    if (te->len > m->max_len) m->max_len = te->len;
    const tok_slot *old = map_find(t, m, p, te->len);
    if (old != NULL) return old;
    uint64_t head = key_head(p, te->len);
    uint32_t h = key_hash(head, p, te->len);
    size_t s = h & m->mask;
    while (m->slots[s].len != 0)
        s = (s + 1) & m->mask;
    m->slots[s] = (tok_slot){head, h, te->len, te->id, te->off};
    return NULL;
}

/* Appends a token's bytes and entry (not yet in any map); returns its entry number. */
static lb_status add_entry(lb_tokenizer *t, const uint8_t *p, size_t n, uint32_t id, uint32_t *e,
                           lb_err *err) {
    if (t->blob_bytes + n > t->blob_cap) {
        size_t cap = t->blob_cap ? t->blob_cap : 4096;
        while (cap < t->blob_bytes + n)
            cap *= 2;
        uint8_t *b = realloc(t->blob, cap);
        if (b == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the tokenizer");
        t->blob = b;
        t->blob_cap = cap;
    }
    if (t->n_entries == t->cap_entries) {
        size_t cap = t->cap_entries ? t->cap_entries * 2 : 1024;
        tok_entry *en = realloc(t->entries, cap * sizeof *en);
        if (en == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for the tokenizer");
        t->entries = en;
        t->cap_entries = cap;
    }
    memcpy(t->blob + t->blob_bytes, p, n);
    t->entries[t->n_entries] = (tok_entry){(uint32_t)t->blob_bytes, (uint32_t)n, id};
    t->blob_bytes += n;
    *e = (uint32_t)t->n_entries++;
    return LB_OK;
}

/* ---- the ranks file ---- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard padded base64 s[0..n) into out (room for 3n/4 bytes); returns the byte
 * count, or 0 when s is not such base64 (empty included). */
static size_t b64_decode(const char *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4 != 0) return 0;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            bool padding = i + k >= n - pad;
            int d = padding ? (s[i + k] == '=' ? 0 : -1) : b64_value((unsigned char)s[i + k]);
            if (d < 0) return 0;
            v = v << 6 | (uint32_t)d;
        }
        out[o++] = (uint8_t)(v >> 16);
        if (i + 4 < n || pad < 2) out[o++] = (uint8_t)(v >> 8);
        if (i + 4 < n || pad < 1) out[o++] = (uint8_t)v;
    }
    return o;
}

static int cmp_entry_id(const void *a, const void *b, void *arg) {
    const tok_entry *en = arg;
    uint32_t x = en[*(const uint32_t *)a].id, y = en[*(const uint32_t *)b].id;
    return (x > y) - (x < y);
}

/* Reads every line into an entry; line_of[e] is entry e's line. */
static lb_status parse_ranks(lb_tokenizer *t, const char *buf, size_t n, const char *name,
                             uint32_t **line_of, lb_err *err) {
    static const char *const want = "expected 'base64-token rank' (a tiktoken ranks file)";
    uint8_t tok[768];
    size_t lines_cap = 0;
    uint32_t line = 0;
    for (size_t pos = 0; pos < n;) {
        const char *nl = memchr(buf + pos, '\n', n - pos);
        size_t end = nl ? (size_t)(nl - buf) : n, len = end - pos;
        const char *s = buf + pos;
        pos = end + 1;
        line++;
        if (len > 0 && s[len - 1] == '\r') len--;
        if (len == 0) continue;
        const char *sp = memchr(s, ' ', len);
        if (sp == NULL)
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: no space before the rank; %s", name, line,
                           want);
        size_t b64_len = (size_t)(sp - s);
        if (b64_len > 4 * sizeof tok / 3)
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: token longer than %zu bytes; %s", name, line,
                           sizeof tok, want);
        size_t tok_len = b64_decode(s, b64_len, tok);
        if (tok_len == 0)
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: \"%.*s\" is not base64 of a token; %s", name,
                           line, (int)(b64_len < 40 ? b64_len : 40), s, want);
        const char *r = sp + 1, *r_end = s + len;
        uint64_t rank = 0;
        if (r == r_end)
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: no rank after the token; %s", name, line,
                           want);
        for (; r < r_end; r++) {
            if (*r < '0' || *r > '9' || rank > MAX_RANK)
                return lb_fail(err, LB_ERR_FORMAT,
                               "%s:%u: rank \"%.*s\" is not a whole number up to %u; %s", name,
                               line, (int)(r_end - sp - 1 < 20 ? r_end - sp - 1 : 20), sp + 1,
                               MAX_RANK, want);
            rank = rank * 10 + (uint64_t)(*r - '0');
        }
        if (rank > MAX_RANK)
            return lb_fail(err, LB_ERR_FORMAT,
                           "%s:%u: rank %llu is above the largest allowed, %u; %s", name, line,
                           (unsigned long long)rank, MAX_RANK, want);
        uint32_t e;
        LB_TRY(add_entry(t, tok, tok_len, (uint32_t)rank, &e, err));
        if (e >= lines_cap) {
            lines_cap = lines_cap ? lines_cap * 2 : 1024;
            uint32_t *lo = realloc(*line_of, lines_cap * sizeof *lo);
            if (lo == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
            *line_of = lo;
        }
        (*line_of)[e] = line;
    }
    if (t->n_entries == 0) return lb_fail(err, LB_ERR_FORMAT, "%s: no tokens; %s", name, want);
    return LB_OK;
}

/* ---- choices that depend on the vocabulary ---- */

static lb_tok_pattern detect_pattern(const lb_tokenizer *t) {
    for (size_t e = 0; e < t->n_entries; e++) {
        const uint8_t *p = t->blob + t->entries[e].off;
        int run = 0;
        for (uint32_t i = 0; i < t->entries[e].len && run < 4; i++)
            run = p[i] >= '0' && p[i] <= '9' ? run + 1 : 0;
        if (run == 4) return LB_TOK_PATTERN_GPT2;
    }
    return LB_TOK_PATTERN_LLAMA3;
}

/* The special tokens' first bytes, for find_special's scan. */
static void index_special_starts(lb_tokenizer *t) {
    int n = 0;
    t->special_first_byte = -1;
    for (size_t e = t->info.n_ranks; e < t->n_entries; e++) {
        const uint8_t *p = t->blob + t->entries[e].off;
        size_t len = t->entries[e].len;
        if (!t->special_first[p[0]]) n++;
        t->special_first[p[0]] = true;
        t->special_first_byte = p[0];
        if (len == 1) t->special_one[p[0]] = true;
        if (len >= 2) t->special_pair[p[0] << 5 | p[1] >> 3] |= (uint8_t)(1u << (p[1] & 7));
        if (len < 256)
            t->special_len[len >> 3] |= (uint8_t)(1u << (len & 7));
        else
            t->special_long = true;
    }
    if (n != 1) t->special_first_byte = -1;
}

/* Whether a special token has l bytes (l >= 2). */
static inline bool special_may(const lb_tokenizer *t, size_t l) {
    return l < 256 ? (t->special_len[l >> 3] >> (l & 7)) & 1 : t->special_long;
}

static lb_status add_special(lb_tokenizer *t, const char *name, uint32_t id, lb_err *err) {
    char text[64];
    int n = snprintf(text, sizeof text, "<|%s|>", name);
    uint32_t e = 0;
    LB_TRY(add_entry(t, (const uint8_t *)text, (size_t)n, id, &e, err));
    map_insert(t, &t->special, e);
    return LB_OK;
}

static lb_status add_specials(lb_tokenizer *t, const lb_tokenizer_params *params,
                              lb_tok_special kind, uint32_t first, const char *name, lb_err *err) {
    size_t n = kind == LB_TOK_SPECIAL_LLAMA3 ? LLAMA3_N_SPECIAL
               : kind == LB_TOK_SPECIAL_GPT2 ? 1
               : kind == LB_TOK_SPECIAL_LIST ? params->n_special_list
                                             : 0;
    LB_TRY(map_init(&t->special, n, err));
    if (kind == LB_TOK_SPECIAL_LIST && params->special_flags != NULL) {
        t->special_flag = malloc((n + 1) * sizeof *t->special_flag);
        if (t->special_flag == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        memcpy(t->special_flag, params->special_flags, n * sizeof *t->special_flag);
    }
    if (kind == LB_TOK_SPECIAL_LIST && params->special_match != NULL) {
        t->special_match = malloc(n + 1);
        if (t->special_match == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            t->special_match[i] = (uint8_t)params->special_match[i];
            t->second_pass |= (params->special_match[i] & LB_TOK_ADDED_NORMALIZED) != 0;
        }
    }
    if (kind == LB_TOK_SPECIAL_LIST) {
        for (size_t i = 0; i < n; i++) {
            const char *s = params->special_texts[i];
            uint32_t e = 0;
            LB_TRY(add_entry(t, (const uint8_t *)s, strlen(s), params->special_ids[i], &e, err));
            if (t->entries[e].len == 0 || map_insert(t, &t->special, e) != NULL)
                return lb_fail(err, LB_ERR_FORMAT, "%s: special token \"%s\" is empty or repeated",
                               name, s);
        }
        return LB_OK;
    }
    if (kind == LB_TOK_SPECIAL_GPT2) return add_special(t, "endoftext", first, err);
    size_t named = sizeof llama3_specials / sizeof *llama3_specials;
    for (size_t i = 0; i < n; i++) {
        char text[48];
        if (i < named)
            snprintf(text, sizeof text, "%s", llama3_specials[i]);
        else
            snprintf(text, sizeof text, "reserved_special_token_%zu", i - named + 3);
        LB_TRY(add_special(t, text, first + (uint32_t)i, err));
    }
    return LB_OK;
}

static lb_status compile_pattern(lb_tokenizer *t, lb_err *err) {
    const char *pat = t->info.pattern == LB_TOK_PATTERN_GPT2 ? gpt2_pattern : llama3_pattern;
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (t->re == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return lb_fail(err, LB_ERR_UNSUPPORTED, "this PCRE2 cannot compile the %s pattern: %s",
                       lb_tokenizer_pattern_name(t->info.pattern), (const char *)msg);
    }
    /* Without JIT (an unsupported CPU, or a PCRE2 built without it) the interpreter runs. */
    t->info.jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return LB_OK;
}

/* *out: one character of the class cls (a class's inside), anchored; what names the class
 * in an error. */
static lb_status compile_class(const char *cls, const char *what, pcre2_code **out, lb_err *err) {
    char pat[512];
    snprintf(pat, sizeof pat, "[%s]", cls);
    int code;
    PCRE2_SIZE at;
    *out = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_ANCHORED, &code,
                         &at, NULL);
    if (*out == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return lb_fail(err, LB_ERR_UNSUPPORTED, "this PCRE2 cannot compile the %s class: %s", what,
                       (const char *)msg);
    }
    return LB_OK;
}

/* The classes that the special tokens' lstrip, rstrip and single_word look at. */
static lb_status compile_neighbours(lb_tokenizer *t, lb_err *err) {
    unsigned any = 0;
    for (size_t i = 0; t->special_match != NULL && i < t->info.n_special; i++)
        any |= t->special_match[i];
    if (any & (LB_TOK_ADDED_LSTRIP | LB_TOK_ADDED_RSTRIP))
        LB_TRY(compile_class(LB_UCD_WHITE_SPACE, "White_Space", &t->re_space, err));
    if (any & LB_TOK_ADDED_SINGLE_WORD)
        LB_TRY(compile_class("\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}",
                             "word-character (\\w)", &t->re_word, err));
    return LB_OK;
}

/* ---- public: setup ---- */

lb_tokenizer_params lb_tokenizer_default_params(void) {
    return (lb_tokenizer_params){.pattern = LB_TOK_PATTERN_AUTO, .special = LB_TOK_SPECIAL_AUTO};
}

lb_status lb_tokenizer_pattern_parse(const char *name, lb_tok_pattern *out, lb_err *err) {
    if (strcmp(name, "auto") == 0)
        *out = LB_TOK_PATTERN_AUTO;
    else if (strcmp(name, "llama3") == 0)
        *out = LB_TOK_PATTERN_LLAMA3;
    else if (strcmp(name, "gpt2") == 0 || strcmp(name, "r50k") == 0 || strcmp(name, "p50k") == 0)
        *out = LB_TOK_PATTERN_GPT2;
    else
        return lb_fail(err, LB_ERR_USAGE,
                       "tokenizer pattern \"%s\" is unknown; use auto, llama3 or gpt2", name);
    return LB_OK;
}

const char *lb_tokenizer_pattern_name(lb_tok_pattern pattern) {
    switch (pattern) {
    case LB_TOK_PATTERN_AUTO: return "auto";
    case LB_TOK_PATTERN_LLAMA3: return "llama3";
    case LB_TOK_PATTERN_GPT2: return "gpt2";
    }
    return "?";
}

lb_status lb_tokenizer_special_parse(const char *name, lb_tok_special *out, lb_err *err) {
    for (int k = LB_TOK_SPECIAL_AUTO; k <= LB_TOK_SPECIAL_GPT2; k++) {
        if (strcmp(name, lb_tokenizer_special_name((lb_tok_special)k)) == 0) {
            *out = (lb_tok_special)k;
            return LB_OK;
        }
    }
    return lb_fail(err, LB_ERR_USAGE,
                   "special tokens \"%s\" are unknown; use auto, none, llama3 or gpt2", name);
}

const char *lb_tokenizer_special_name(lb_tok_special special) {
    switch (special) {
    case LB_TOK_SPECIAL_AUTO: return "auto";
    case LB_TOK_SPECIAL_NONE: return "none";
    case LB_TOK_SPECIAL_LLAMA3: return "llama3";
    case LB_TOK_SPECIAL_GPT2: return "gpt2";
    case LB_TOK_SPECIAL_LIST: return "list";
    }
    return "?";
}

void lb_tokenizer_free(lb_tokenizer *tok) {
    if (tok == NULL) return;
    pcre2_code_free(tok->re);
    pcre2_code_free(tok->re_space);
    pcre2_code_free(tok->re_word);
    free(tok->special_match);
    free(tok->by_id);
    free(tok->special_flag);
    free(tok->ranks.slots);
    free(tok->special.slots);
    free(tok->entries);
    free(tok->blob);
    free(tok);
}

static const tok_entry *entry_of_id(const lb_tokenizer *t, uint32_t id) {
    size_t lo = 0, hi = t->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t v = t->entries[t->by_id[mid]].id;
        if (v == id) return &t->entries[t->by_id[mid]];
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

bool lb_tokenizer_is_special(const lb_tokenizer *tok, uint32_t id) {
    const tok_entry *e = entry_of_id(tok, id);
    if (e == NULL || (size_t)(e - tok->entries) < tok->info.n_ranks) return false; /* a rank */
    return tok->special_flag == NULL || tok->special_flag[e - tok->entries - tok->info.n_ranks];
}

static lb_status build(lb_tokenizer *t, const char *bytes, size_t n, const char *name,
                       const lb_tokenizer_params *params, uint32_t **line_of, lb_err *err) {
    LB_TRY(parse_ranks(t, bytes, n, name, line_of, err));
    t->info.n_ranks = t->n_entries;
    t->by_id = malloc(t->n_entries * sizeof *t->by_id);
    if (t->by_id == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    for (uint32_t e = 0; e < t->n_entries; e++)
        t->by_id[e] = e;
    qsort_r(t->by_id, t->n_entries, sizeof *t->by_id, cmp_entry_id, t->entries);
    for (size_t i = 1; i < t->n_entries; i++) {
        const tok_entry *a = &t->entries[t->by_id[i - 1]], *b = &t->entries[t->by_id[i]];
        if (a->id == b->id) {
            uint32_t la = (*line_of)[t->by_id[i - 1]], lb = (*line_of)[t->by_id[i]];
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: rank %u was given on line %u already", name,
                           la > lb ? la : lb, a->id, la < lb ? la : lb);
        }
    }
    LB_TRY(map_init(&t->ranks, t->n_entries, err));
    for (uint32_t e = 0; e < t->n_entries; e++) {
        const tok_slot *old = map_insert(t, &t->ranks, e);
        if (old != NULL)
            return lb_fail(err, LB_ERR_FORMAT, "%s:%u: the token of line %u again; %s", name,
                           (*line_of)[e], (*line_of)[entry_of_id(t, old->id) - t->entries],
                           "each token has one rank");
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_rank[b] = map_id(t, &t->ranks, &c, 1);
        if (t->byte_rank[b] == NO_RANK)
            return lb_fail(err, LB_ERR_FORMAT,
                           "%s: byte 0x%02x has no rank; a byte-level BPE vocabulary ranks all "
                           "256 bytes",
                           name, b);
    }
    uint32_t next_id = t->entries[t->by_id[t->n_entries - 1]].id + 1;

    t->info.pattern = params->pattern == LB_TOK_PATTERN_AUTO ? detect_pattern(t) : params->pattern;
    t->info.special = params->special;
    if (params->special == LB_TOK_SPECIAL_AUTO) {
        bool llama = t->info.pattern == LB_TOK_PATTERN_LLAMA3 && next_id == LLAMA3_FIRST_SPECIAL;
        bool gpt2 = t->info.pattern == LB_TOK_PATTERN_GPT2 && next_id == GPT2_FIRST_SPECIAL;
        t->info.special = llama  ? LB_TOK_SPECIAL_LLAMA3
                          : gpt2 ? LB_TOK_SPECIAL_GPT2
                                 : LB_TOK_SPECIAL_NONE;
    }
    LB_TRY(add_specials(t, params, t->info.special, next_id, name, err));
    t->info.n_special = t->n_entries - t->info.n_ranks;
    index_special_starts(t);
    t->info.max_id = next_id - 1 + (uint32_t)t->info.n_special;
    /* Special ids of a family follow every rank, so appending them keeps by_id sorted; a
     * given list is sorted in and its ids checked against the ranks'. */
    uint32_t *by_id = realloc(t->by_id, t->n_entries * sizeof *by_id);
    if (by_id == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    t->by_id = by_id;
    for (size_t e = t->info.n_ranks; e < t->n_entries; e++)
        t->by_id[e] = (uint32_t)e;
    if (t->info.special == LB_TOK_SPECIAL_LIST) {
        qsort_r(t->by_id, t->n_entries, sizeof *t->by_id, cmp_entry_id, t->entries);
        for (size_t i = 1; i < t->n_entries; i++)
            if (t->entries[t->by_id[i - 1]].id == t->entries[t->by_id[i]].id)
                return lb_fail(err, LB_ERR_FORMAT, "%s: id %u is both a token and a special token",
                               name, t->entries[t->by_id[i]].id);
        t->info.max_id = t->entries[t->by_id[t->n_entries - 1]].id;
    }
    LB_TRY(compile_neighbours(t, err));
    return compile_pattern(t, err);
}

lb_status lb_tokenizer_parse(lb_tokenizer **out, const char *bytes, size_t n, const char *name,
                             const lb_tokenizer_params *params, lb_err *err) {
    *out = NULL;
    lb_tokenizer_params def = lb_tokenizer_default_params();
    lb_tokenizer *t = calloc(1, sizeof *t);
    if (t == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    uint32_t *line_of = NULL;
    lb_status st = build(t, bytes, n, name, params ? params : &def, &line_of, err);
    free(line_of);
    if (st != LB_OK) {
        lb_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LB_OK;
}

lb_status lb_tokenizer_load(lb_tokenizer **out, const char *path, const lb_tokenizer_params *params,
                            lb_err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    LB_TRY(lb_file_read(path, &buf, &n, err));
    lb_status st = lb_tokenizer_parse(out, buf, n, path, params, err);
    free(buf);
    return st;
}

const lb_tokenizer_info *lb_tokenizer_get_info(const lb_tokenizer *tok) {
    return &tok->info;
}

/* ---- encoding ---- */

/* Per-call state: the match data, the ids (or only their count) and scratch for long
 * pieces. */
typedef struct {
    pcre2_match_data *md;
    bool store;
    uint32_t *ids;
    size_t n_ids, cap_ids;
    uint32_t *scratch; /* 4 x cap_piece: next, prev, id, pair rank */
    uint64_t *heap;    /* 2 x cap_piece: (rank << 32 | position); n - 1 pairs at first, and
                          each merge pops one and pushes at most two */
    size_t cap_piece;
} work;

static lb_status emit(work *w, uint32_t id, lb_err *err) {
    if (w->store) {
        if (w->n_ids == w->cap_ids) {
            size_t cap = w->cap_ids ? w->cap_ids * 2 : 256;
            uint32_t *ids = realloc(w->ids, cap * sizeof *ids);
            if (ids == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory encoding a text");
            w->ids = ids;
            w->cap_ids = cap;
        }
        w->ids[w->n_ids] = id;
    }
    w->n_ids++;
    return LB_OK;
}

static lb_status bpe_scan(const lb_tokenizer *t, work *w, const uint8_t *p, size_t n, lb_err *err) {
    uint32_t pos[SCAN_MAX_BYTES + 1], id[SCAN_MAX_BYTES], pr[SCAN_MAX_BYTES];
    size_t m = n;
    for (size_t k = 0; k < n; k++) {
        pos[k] = (uint32_t)k;
        id[k] = t->byte_rank[p[k]];
        pr[k] = k + 1 < n ? map_id(t, &t->ranks, p + k, 2) : NO_RANK;
    }
    pos[n] = (uint32_t)n;
    for (;;) {
        uint32_t best = NO_RANK;
        size_t b = 0;
        for (size_t k = 0; k + 1 < m; k++) {
            if (pr[k] < best) {
                best = pr[k];
                b = k;
            }
        }
        if (best == NO_RANK) break;
        id[b] = best;
        memmove(&pos[b + 1], &pos[b + 2], (m - b - 1) * sizeof *pos);
        memmove(&id[b + 1], &id[b + 2], (m - b - 2) * sizeof *id);
        memmove(&pr[b + 1], &pr[b + 2], (m - b - 2) * sizeof *pr);
        m--;
        pr[b] = b + 1 < m ? map_id(t, &t->ranks, p + pos[b], pos[b + 2] - pos[b]) : NO_RANK;
        if (b > 0) pr[b - 1] = map_id(t, &t->ranks, p + pos[b - 1], pos[b + 1] - pos[b - 1]);
    }
    for (size_t k = 0; k < m; k++)
        LB_TRY(emit(w, id[k], err));
    return LB_OK;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Parts are named by their first byte; next[i] is where the following part starts (n at
 * the end); pr[i] is the rank of part i joined with the next, or NO_RANK. A heap entry
 * whose rank is no longer pr[i] is stale: ranks name byte strings one to one, so the same
 * rank at the same start is the same pair. */
static lb_status bpe_heap(const lb_tokenizer *t, work *w, const uint8_t *p, size_t n, lb_err *err) {
    if (n > w->cap_piece) {
        uint32_t *s = realloc(w->scratch, 4 * n * sizeof *s);
        if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory encoding a text");
        w->scratch = s;
        uint64_t *h = realloc(w->heap, 2 * n * sizeof *h);
        if (h == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory encoding a text");
        w->heap = h;
        w->cap_piece = n;
    }
    uint32_t *next = w->scratch, *prev = next + n, *id = prev + n, *pr = id + n;
    uint64_t *heap = w->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)(i + 1);
        prev[i] = (uint32_t)i - 1; /* wraps to UINT32_MAX for the first */
        id[i] = t->byte_rank[p[i]];
        pr[i] = i + 1 < n ? map_id(t, &t->ranks, p + i, 2) : NO_RANK;
        if (pr[i] != NO_RANK) heap_push(heap, &nh, (uint64_t)pr[i] << 32 | i);
    }
    while (nh > 0) {
        uint64_t top = heap_pop(heap, &nh);
        uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
        if (pr[i] != r) continue;
        uint32_t j = next[i];
        id[i] = r;
        pr[j] = NO_RANK;
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = i;
        if (next[i] < n) {
            pr[i] = map_id(t, &t->ranks, p + i, next[next[i]] - i);
            if (pr[i] != NO_RANK) heap_push(heap, &nh, (uint64_t)pr[i] << 32 | i);
        } else {
            pr[i] = NO_RANK;
        }
        uint32_t k = prev[i];
        if (k != UINT32_MAX) {
            pr[k] = map_id(t, &t->ranks, p + k, next[i] - k);
            if (pr[k] != NO_RANK) heap_push(heap, &nh, (uint64_t)pr[k] << 32 | k);
        }
    }
    for (size_t i = 0; i < n; i = next[i])
        LB_TRY(emit(w, id[i], err));
    return LB_OK;
}

static lb_status piece(const lb_tokenizer *t, work *w, const uint8_t *p, size_t n, lb_err *err) {
    if (n == 1) return emit(w, t->byte_rank[p[0]], err);
    uint32_t id = map_id(t, &t->ranks, p, n);
    if (id != NO_RANK) return emit(w, id, err);
    return n <= SCAN_MAX_BYTES ? bpe_scan(t, w, p, n, err) : bpe_heap(t, w, p, n, err);
}

/* Cuts s[0..n) (no special-token text in it) with the pattern and merges each piece. A
 * stretch the pattern skips (bytes that are not UTF-8) is a piece of its own. */
static lb_status split(const lb_tokenizer *t, work *w, const uint8_t *s, size_t n, lb_err *err) {
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(t->re, s, n, off, 0, w->md, NULL);
        size_t ms = n, me = n;
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            ms = ov[0];
            me = ov[1];
            if (me == ms)
                return lb_fail(err, LB_ERR_RUNTIME, "the pre-split pattern matched nothing");
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lb_fail(err, LB_ERR_RUNTIME, "pre-splitting a text failed: %s",
                           (const char *)msg);
        }
        if (ms > off) LB_TRY(piece(t, w, s + off, ms - off, err));
        if (me > ms) LB_TRY(piece(t, w, s + ms, me - ms, err));
        off = me;
    }
    return LB_OK;
}

/* The lb_tok_added_flag bits of the special token id. */
static unsigned match_of(const lb_tokenizer *t, uint32_t id) {
    if (t->special_match == NULL) return 0;
    return t->special_match[entry_of_id(t, id) - t->entries - t->info.n_ranks];
}

/* The first special-token text of the pass in s[from..n) (pass 1: the
 * LB_TOK_ADDED_NORMALIZED ones, pass 0 the others), the longest one where several start
 * there (Hugging Face's added tokens match leftmost-longest): its start, length and id;
 * false if none. One first byte (GPT-2's and Llama 3's "<|...|>") is found with memchr. */
static bool find_special(const lb_tokenizer *t, int pass, const uint8_t *s, size_t from, size_t n,
                         size_t *at, size_t *len, uint32_t *id) {
    for (size_t i = from; i < n; i++) {
        if (t->special_first_byte >= 0) {
            const uint8_t *c = memchr(s + i, t->special_first_byte, n - i);
            if (c == NULL) return false;
            i = (size_t)(c - s);
        } else if (!t->special_first[s[i]]) {
            continue;
        }
        size_t lim = n - i < t->special.max_len ? n - i : t->special.max_len;
        bool pair = lim >= 2 && (t->special_pair[s[i] << 5 | s[i + 1] >> 3] >> (s[i + 1] & 7)) & 1;
        for (size_t l = pair ? lim : 1; l > 0; l--) {
            if (l >= 2 ? !special_may(t, l) : !t->special_one[s[i]]) continue;
            uint32_t sid = map_id(t, &t->special, s + i, l);
            if (sid != NO_RANK && ((match_of(t, sid) & LB_TOK_ADDED_NORMALIZED) != 0) == pass) {
                *at = i;
                *len = l;
                *id = sid;
                return true;
            }
        }
    }
    return false;
}

/* The bytes of the character of class re (compile_class) at s[at..n), or 0. */
static size_t class_len(const pcre2_code *re, work *w, const uint8_t *s, size_t at, size_t n) {
    if (at >= n || pcre2_match(re, s, n, at, 0, w->md, NULL) < 0) return 0;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
    return ov[1] - ov[0];
}

/* Where the last character of s[lo..at) starts (at > lo). */
static size_t char_before(const uint8_t *s, size_t lo, size_t at) {
    size_t b = at - 1;
    while (b > lo && at - b < 4 && (s[b] & 0xc0) == 0x80)
        b--;
    return b;
}

static lb_status encode_span(const lb_tokenizer *t, work *w, int pass, const uint8_t *s, size_t lo,
                             size_t hi, lb_err *err);

/* s[lo..hi), between two tokens of the pass, through what comes after it. */
static lb_status encode_gap(const lb_tokenizer *t, work *w, int pass, const uint8_t *s, size_t lo,
                            size_t hi, lb_err *err) {
    if (pass == 0 && t->second_pass) return encode_span(t, w, 1, s, lo, hi, err);
    return split(t, w, s + lo, hi - lo, err);
}

/* Encodes s[lo..hi): the special tokens of the pass where they match, and what lies between
 * them through the next pass (pass 0's gaps to pass 1 when there is one) or the pre-split.
 * As Hugging Face does, a token takes the whitespace beside it that its lstrip and rstrip
 * ask for, never past s[lo..hi) or into what an earlier token took; a single_word token
 * touching a word character is text; and the search goes on after the token as found, so a
 * token may follow inside whitespace the one before it took. */
static lb_status encode_span(const lb_tokenizer *t, work *w, int pass, const uint8_t *s, size_t lo,
                             size_t hi, lb_err *err) {
    size_t from = lo, search = lo;
    for (;;) {
        size_t at = hi, sl = 0, k;
        uint32_t sid = 0;
        if (t->info.n_special == 0 || !find_special(t, pass, s, search, hi, &at, &sl, &sid))
            return encode_gap(t, w, pass, s, from, hi, err);
        size_t start = at, stop = at + sl;
        search = stop;
        unsigned how = match_of(t, sid);
        if ((how & LB_TOK_ADDED_SINGLE_WORD) &&
            ((at > lo && class_len(t->re_word, w, s, char_before(s, lo, at), at) > 0) ||
             class_len(t->re_word, w, s, stop, hi) > 0))
            continue;
        while ((how & LB_TOK_ADDED_LSTRIP) && start > from) {
            k = char_before(s, from, start);
            if (class_len(t->re_space, w, s, k, start) != start - k) break;
            start = k;
        }
        if (how & LB_TOK_ADDED_RSTRIP)
            while ((k = class_len(t->re_space, w, s, stop, hi)) > 0)
                stop += k;
        if (start > from) LB_TRY(encode_gap(t, w, pass, s, from, start, err));
        LB_TRY(emit(w, sid, err));
        if (stop > from) from = stop;
    }
}

static lb_status run(const lb_tokenizer *t, const char *text, size_t len, work *w, lb_err *err) {
    w->md = pcre2_match_data_create(1, NULL);
    if (w->md == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory encoding a text");
    return encode_span(t, w, 0, (const uint8_t *)text, 0, len, err);
}

static void work_free(work *w) {
    pcre2_match_data_free(w->md);
    free(w->scratch);
    free(w->heap);
}

lb_status lb_tokenizer_count(const lb_tokenizer *tok, const char *text, size_t len,
                             int64_t *n_tokens, lb_err *err) {
    work w = {0};
    lb_status st = run(tok, text, len, &w, err);
    work_free(&w);
    *n_tokens = st == LB_OK ? (int64_t)w.n_ids : 0;
    return st;
}

lb_status lb_tokenizer_encode(const lb_tokenizer *tok, const char *text, size_t len, uint32_t **ids,
                              size_t *n_ids, lb_err *err) {
    work w = {.store = true};
    lb_status st = run(tok, text, len, &w, err);
    work_free(&w);
    if (st != LB_OK) {
        free(w.ids);
        w.ids = NULL;
        w.n_ids = 0;
    }
    *ids = w.ids;
    *n_ids = w.n_ids;
    return st;
}

/* ---- decoding ---- */

lb_status lb_tokenizer_decode(const lb_tokenizer *tok, const uint32_t *ids, size_t n_ids,
                              char **text, size_t *len, lb_err *err) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const tok_entry *e = entry_of_id(tok, ids[i]);
        if (e == NULL)
            return lb_fail(err, LB_ERR_USAGE,
                           "token id %u (position %zu) is not in the vocabulary (ids 0..%u)",
                           ids[i], i, tok->info.max_id);
        total += e->len;
    }
    char *out = malloc(total + 1);
    if (out == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory decoding tokens");
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const tok_entry *e = entry_of_id(tok, ids[i]);
        memcpy(out + o, tok->blob + e->off, e->len);
        o += e->len;
    }
    out[o] = '\0';
    *text = out;
    *len = o;
    return LB_OK;
}
