/* rouge.c: ROUGE-1/2/L/Lsum per pair and their MLPerf aggregate (see rouge.h).
 *
 * The design idea: tokenize both texts once into one byte arena (lower-cased, stemmed),
 * intern every distinct token as a small integer, and do all scoring on integer arrays:
 * unigram counts are arrays indexed by token id, bigram counts live in an open-addressing
 * hash table keyed by the id pair, ROUGE-L keeps two DP rows over the shorter text
 * (O(min) memory), and ROUGE-Lsum, which needs the particular LCS rouge_score's backtrack
 * picks, keeps the DP table of one sentence pair as one bit per cell (the difference to
 * the left neighbour, which is 0 or 1) and recovers values by counting bits.
 *
 * Floating point follows rouge_score's expressions in the same order (overlap / size,
 * then 2*P*R / (P+R)), so per-pair scores are bit-identical to it. */
#include "accuracy/rouge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accuracy/sentsplit.h"
#include "accuracy/stem.h"
#include "accuracy/utf8.h"

static const char *const type_names[LB_ROUGE_N_TYPES] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};

const char *lb_rouge_type_name(lb_rouge_type type) {
    return (unsigned)type < LB_ROUGE_N_TYPES ? type_names[type] : "unknown";
}

lb_rouge_params lb_rouge_default_params(void) {
    return (lb_rouge_params){.use_stemmer = true, .mlperf_postprocess = true};
}

/* ---- tokens ---------------------------------------------------------------------------- */

typedef struct {
    char *bytes; /* every token's bytes back to back */
    size_t n_bytes, cap_bytes;
    size_t *start; /* token i is bytes[start[i] .. start[i] + len[i]) */
    uint32_t *len;
    uint32_t *line; /* newline-separated sentence of token i */
    size_t n, cap;
} token_list;

static void tokens_free(token_list *t) {
    free(t->bytes);
    free(t->start);
    free(t->len);
    free(t->line);
}

static bool tokens_reserve_bytes(token_list *t, size_t need) {
    if (need <= t->cap_bytes) return true;
    size_t cap = t->cap_bytes ? t->cap_bytes : 256;
    while (cap < need)
        cap *= 2;
    char *b = realloc(t->bytes, cap);
    if (b == NULL) return false;
    t->bytes = b;
    t->cap_bytes = cap;
    return true;
}

/* Ends the token that starts at byte `start` (stemming it when asked); empty tokens are
 * dropped. */
static bool tokens_close(token_list *t, size_t start, uint32_t line, bool stem) {
    size_t len = t->n_bytes - start;
    if (len == 0) return true;
    if (stem && len > 3) {
        /* the stemmer writes a NUL after the stem, which is never longer than the word */
        if (!tokens_reserve_bytes(t, t->n_bytes + 1)) return false;
        len = lb_stem_word(t->bytes + start, len, t->bytes + start);
        t->n_bytes = start + len;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        size_t *s = realloc(t->start, cap * sizeof *s);
        if (s != NULL) t->start = s;
        uint32_t *l = realloc(t->len, cap * sizeof *l);
        if (l != NULL) t->len = l;
        uint32_t *ln = realloc(t->line, cap * sizeof *ln);
        if (ln != NULL) t->line = ln;
        if (s == NULL || l == NULL || ln == NULL) return false;
        t->cap = cap;
    }
    t->start[t->n] = start;
    t->len[t->n] = (uint32_t)len;
    t->line[t->n] = line;
    t->n++;
    return true;
}

/* rouge_score's tokenizer: Python's lower(), runs outside [a-z0-9] separate tokens, stem
 * tokens longer than 3 characters. Of all non-ASCII characters only two lower-case to
 * ASCII letters: U+212A KELVIN SIGN to "k", U+0130 (capital I with dot) to "i" followed by
 * a combining dot, which separates. Lines are counted at every "\n". */
static bool tokenize(const char *s, size_t n, bool stem, token_list *t) {
    if (!tokens_reserve_bytes(t, n + 1)) return false;
    uint32_t line = 0;
    size_t start = 0;
    t->n_bytes = 0;
    t->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += lb_utf8_decode(s + i, n - i, &cp);
        char c = 0;
        if ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9'))
            c = (char)cp;
        else if (cp >= 'A' && cp <= 'Z')
            c = (char)(cp - 'A' + 'a');
        else if (cp == 0x212A)
            c = 'k';
        if (c != 0) {
            t->bytes[t->n_bytes++] = c; /* n + 1 bytes reserved: each character adds <= 1 */
            continue;
        }
        if (cp == 0x130) t->bytes[t->n_bytes++] = 'i';
        if (!tokens_close(t, start, line, stem)) return false;
        start = t->n_bytes;
        if (cp == '\n') line++;
    }
    return tokens_close(t, start, line, stem);
}

/* ---- interning ------------------------------------------------------------------------- */

typedef struct {
    const token_list *owner;
    size_t index; /* token index in owner, SIZE_MAX for an empty slot */
    uint32_t id;
} intern_slot;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t table_size(size_t entries) {
    size_t cap = 16;
    while (cap < 2 * entries)
        cap *= 2;
    return cap;
}

/* Gives every token of a and b an id in [0, *n_ids), equal ids for equal bytes. */
static bool intern(const token_list *a, const token_list *b, uint32_t *ids_a, uint32_t *ids_b,
                   uint32_t *n_ids) {
    size_t cap = table_size(a->n + b->n);
    intern_slot *slots = malloc(cap * sizeof *slots);
    if (slots == NULL) return false;
    for (size_t i = 0; i < cap; i++)
        slots[i].index = SIZE_MAX;
    uint32_t next = 0;
    const token_list *lists[2] = {a, b};
    uint32_t *out[2] = {ids_a, ids_b};
    for (int l = 0; l < 2; l++) {
        const token_list *t = lists[l];
        for (size_t i = 0; i < t->n; i++) {
            const char *s = t->bytes + t->start[i];
            size_t len = t->len[i];
            size_t h = (size_t)hash_bytes(s, len) & (cap - 1);
            for (;; h = (h + 1) & (cap - 1)) {
                intern_slot *slot = &slots[h];
                if (slot->index == SIZE_MAX) {
                    *slot = (intern_slot){t, i, next++};
                    out[l][i] = slot->id;
                    break;
                }
                const token_list *o = slot->owner;
                if (o->len[slot->index] == len &&
                    memcmp(o->bytes + o->start[slot->index], s, len) == 0) {
                    out[l][i] = slot->id;
                    break;
                }
            }
        }
    }
    free(slots);
    *n_ids = next;
    return true;
}

/* ---- scores ---------------------------------------------------------------------------- */

static lb_rouge_prf prf(int64_t overlap, int64_t pred_size, int64_t ref_size) {
    lb_rouge_prf s;
    s.precision = (double)overlap / (double)pred_size;
    s.recall = (double)overlap / (double)ref_size;
    s.f = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
    return s;
}

static int64_t max1(int64_t x) {
    return x > 1 ? x : 1;
}

static int64_t unigram_overlap(const uint32_t *cnt_ref, const uint32_t *cnt_pred, uint32_t n_ids) {
    int64_t overlap = 0;
    for (uint32_t i = 0; i < n_ids; i++)
        overlap += cnt_ref[i] < cnt_pred[i] ? cnt_ref[i] : cnt_pred[i];
    return overlap;
}

typedef struct {
    uint64_t key; /* (first id + 1) << 32 | second id; 0 marks an empty slot */
    uint32_t ref, pred;
} bigram_slot;

static bool bigram_overlap(const uint32_t *ref, size_t n_ref, const uint32_t *pred, size_t n_pred,
                           int64_t *overlap) {
    *overlap = 0;
    if (n_ref < 2 || n_pred < 2) return true;
    size_t cap = table_size(n_ref + n_pred);
    bigram_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL) return false;
    const uint32_t *seq[2] = {ref, pred};
    size_t len[2] = {n_ref, n_pred};
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i + 1 < len[s]; i++) {
            uint64_t key = ((uint64_t)seq[s][i] + 1) << 32 | seq[s][i + 1];
            size_t h = (size_t)hash_u64(key) & (cap - 1);
            while (slots[h].key != 0 && slots[h].key != key)
                h = (h + 1) & (cap - 1);
            slots[h].key = key;
            if (s == 0)
                slots[h].ref++;
            else
                slots[h].pred++;
        }
    }
    for (size_t h = 0; h < cap; h++)
        *overlap += slots[h].ref < slots[h].pred ? slots[h].ref : slots[h].pred;
    free(slots);
    return true;
}

/* LCS length with two DP rows over the shorter sequence. */
static bool lcs_length(const uint32_t *a, size_t n_a, const uint32_t *b, size_t n_b,
                       int64_t *length) {
    if (n_b > n_a) {
        const uint32_t *t = a;
        a = b, b = t;
        size_t tn = n_a;
        n_a = n_b, n_b = tn;
    }
    uint32_t *rows = calloc(2 * (n_b + 1), sizeof *rows);
    if (rows == NULL) return false;
    uint32_t *prev = rows, *cur = rows + n_b + 1;
    for (size_t i = 1; i <= n_a; i++) {
        cur[0] = 0;
        for (size_t j = 1; j <= n_b; j++) {
            if (a[i - 1] == b[j - 1])
                cur[j] = prev[j - 1] + 1;
            else
                cur[j] = prev[j] > cur[j - 1] ? prev[j] : cur[j - 1];
        }
        uint32_t *t = prev;
        prev = cur, cur = t;
    }
    *length = prev[n_b];
    free(rows);
    return true;
}

/* Scratch for the union-LCS of ROUGE-Lsum: the bit table of one sentence pair, two DP
 * rows and the marks of the reference sentence. Grows, never shrinks. */
typedef struct {
    uint64_t *bits;
    size_t cap_bits;
    uint32_t *rows;
    size_t cap_rows;
    bool *mark;
    size_t cap_mark;
} lcs_scratch;

static void lcs_scratch_free(lcs_scratch *s) {
    free(s->bits);
    free(s->rows);
    free(s->mark);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    void *q = realloc(*p, need * elem);
    if (q == NULL) return false;
    *p = q;
    *cap = need;
    return true;
}

/* t[i][j] for i >= 1: the number of set bits of row i in columns 1..j. */
static uint32_t table_value(const uint64_t *bits, size_t words, size_t i, size_t j) {
    if (i == 0 || j == 0) return 0;
    const uint64_t *row = bits + (i - 1) * words;
    uint32_t v = 0;
    size_t full = j / 64;
    for (size_t w = 0; w < full; w++)
        v += (uint32_t)__builtin_popcountll(row[w]);
    if (j % 64) v += (uint32_t)__builtin_popcountll(row[full] & ((1ull << (j % 64)) - 1));
    return v;
}

/* Marks in s->mark the reference positions of the LCS that rouge_score's backtrack reads
 * out: from the bottom-right corner, a match goes diagonally, otherwise left when the left
 * cell is strictly larger than the upper one, else up. Column j is bit j-1 of its row. */
static bool mark_lcs(lcs_scratch *s, const uint32_t *r, size_t n_r, const uint32_t *c, size_t n_c) {
    if (n_r == 0 || n_c == 0) return true;
    size_t words = (n_c + 63) / 64;
    if (!grow((void **)&s->bits, &s->cap_bits, n_r * words, sizeof *s->bits) ||
        !grow((void **)&s->rows, &s->cap_rows, 2 * (n_c + 1), sizeof *s->rows))
        return false;
    memset(s->bits, 0, n_r * words * sizeof *s->bits);
    uint32_t *prev = s->rows, *cur = s->rows + n_c + 1;
    memset(prev, 0, (n_c + 1) * sizeof *prev);
    for (size_t i = 1; i <= n_r; i++) {
        uint64_t *row = s->bits + (i - 1) * words;
        cur[0] = 0;
        for (size_t j = 1; j <= n_c; j++) {
            if (r[i - 1] == c[j - 1])
                cur[j] = prev[j - 1] + 1;
            else
                cur[j] = prev[j] > cur[j - 1] ? prev[j] : cur[j - 1];
            if (cur[j] != cur[j - 1]) row[(j - 1) / 64] |= 1ull << ((j - 1) % 64);
        }
        uint32_t *t = prev;
        prev = cur, cur = t;
    }
    size_t i = n_r, j = n_c;
    uint32_t v = prev[n_c];
    while (i > 0 && j > 0) {
        if (r[i - 1] == c[j - 1]) {
            s->mark[i - 1] = true;
            i--, j--, v--;
            continue;
        }
        const uint64_t *row = s->bits + (i - 1) * words;
        uint32_t left = v - (uint32_t)((row[(j - 1) / 64] >> ((j - 1) % 64)) & 1);
        uint32_t up = table_value(s->bits, words, i - 1, j);
        if (left > up)
            j--, v = left;
        else
            i--, v = up;
    }
    return true;
}

typedef struct {
    size_t start, len; /* a run of token ids with the same line */
} span;

/* Splits ids (in line order) into non-empty sentences; returns the count or SIZE_MAX when
 * out of memory. *out is the caller's to free. */
static size_t sentences(const token_list *t, span **out) {
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (i == 0 || t->line[i] != t->line[i - 1]) n++;
    *out = malloc((n ? n : 1) * sizeof **out);
    if (*out == NULL) return SIZE_MAX;
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (i == 0 || t->line[i] != t->line[i - 1]) (*out)[k++] = (span){i, 0};
        (*out)[k - 1].len++;
    }
    return n;
}

/* Summary-level LCS as rouge_score computes it: for each reference sentence the union of
 * its LCS positions with every prediction sentence, each union token counted as a hit
 * only while both texts still have an unused occurrence of it. */
static bool union_lcs_hits(const token_list *ref_tok, const uint32_t *ref,
                           const token_list *pred_tok, const uint32_t *pred,
                           const uint32_t *cnt_ref, const uint32_t *cnt_pred, uint32_t n_ids,
                           int64_t *hits) {
    *hits = 0;
    span *rs = NULL, *ps = NULL;
    lcs_scratch sc = {0};
    uint32_t *left = malloc(2 * (size_t)(n_ids ? n_ids : 1) * sizeof *left);
    size_t n_rs = sentences(ref_tok, &rs), n_ps = sentences(pred_tok, &ps);
    bool ok = left != NULL && n_rs != SIZE_MAX && n_ps != SIZE_MAX;
    if (ok) {
        uint32_t *left_ref = left, *left_pred = left + n_ids;
        memcpy(left_ref, cnt_ref, n_ids * sizeof *left);
        memcpy(left_pred, cnt_pred, n_ids * sizeof *left);
        for (size_t a = 0; a < n_rs && ok; a++) {
            const uint32_t *r = ref + rs[a].start;
            size_t n_r = rs[a].len;
            ok = grow((void **)&sc.mark, &sc.cap_mark, n_r, sizeof *sc.mark);
            if (ok) memset(sc.mark, 0, n_r * sizeof *sc.mark);
            for (size_t b = 0; b < n_ps && ok; b++)
                ok = mark_lcs(&sc, r, n_r, pred + ps[b].start, ps[b].len);
            for (size_t i = 0; i < n_r && ok; i++) {
                uint32_t tok = r[i];
                if (sc.mark[i] && left_ref[tok] > 0 && left_pred[tok] > 0) {
                    (*hits)++;
                    left_ref[tok]--;
                    left_pred[tok]--;
                }
            }
        }
    }
    free(left);
    free(rs);
    free(ps);
    lcs_scratch_free(&sc);
    return ok;
}

/* All four scores of two token lists. */
static bool score_tokens(const token_list *pt, const token_list *rt, lb_rouge_scores *out) {
    size_t n_p = pt->n, n_r = rt->n;
    uint32_t *ids = malloc((n_p + n_r + 1) * sizeof *ids);
    if (ids == NULL) return false;
    uint32_t *pred = ids, *ref = ids + n_p, n_ids = 0;
    uint32_t *counts = NULL;
    bool ok = intern(pt, rt, pred, ref, &n_ids);
    if (ok) ok = (counts = calloc(2 * (size_t)n_ids + 1, sizeof *counts)) != NULL;
    if (ok) {
        uint32_t *cnt_pred = counts, *cnt_ref = counts + n_ids;
        for (size_t i = 0; i < n_p; i++)
            cnt_pred[pred[i]]++;
        for (size_t i = 0; i < n_r; i++)
            cnt_ref[ref[i]]++;
        int64_t overlap, lcs = 0, hits = 0;
        overlap = unigram_overlap(cnt_ref, cnt_pred, n_ids);
        out->s[LB_ROUGE_1] = prf(overlap, max1((int64_t)n_p), max1((int64_t)n_r));
        ok = bigram_overlap(ref, n_r, pred, n_p, &overlap);
        out->s[LB_ROUGE_2] = prf(overlap, max1((int64_t)n_p - 1), max1((int64_t)n_r - 1));
        if (ok && n_p > 0 && n_r > 0) {
            ok = lcs_length(ref, n_r, pred, n_p, &lcs) &&
                 union_lcs_hits(rt, ref, pt, pred, cnt_ref, cnt_pred, n_ids, &hits);
            out->s[LB_ROUGE_L] = prf(lcs, (int64_t)n_p, (int64_t)n_r);
            out->s[LB_ROUGE_LSUM] = prf(hits, (int64_t)n_p, (int64_t)n_r);
        }
    }
    free(counts);
    free(ids);
    return ok;
}

lb_status lb_rouge_score_pair(const lb_rouge_params *params, const char *pred, const char *ref,
                              lb_rouge_scores *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    size_t n_pred = strlen(pred), n_ref = strlen(ref);
    char *pred_pp = NULL, *ref_pp = NULL;
    if (params->mlperf_postprocess) {
        pred_pp = lb_sentsplit_lines(pred, n_pred, &n_pred);
        ref_pp = lb_sentsplit_lines(ref, n_ref, &n_ref);
        pred = pred_pp, ref = ref_pp;
    }
    token_list pt = {0}, rt = {0};
    bool ok = pred != NULL && ref != NULL && tokenize(pred, n_pred, params->use_stemmer, &pt) &&
              tokenize(ref, n_ref, params->use_stemmer, &rt) && score_tokens(&pt, &rt, out);
    if (ok) out->pred_chars = lb_utf8_count(pred, n_pred);
    tokens_free(&pt);
    tokens_free(&rt);
    free(pred_pp);
    free(ref_pp);
    if (!ok)
        return lb_fail(err, LB_ERR_NOMEM,
                       "out of memory scoring a %zu-byte prediction against a "
                       "%zu-byte reference",
                       n_pred, n_ref);
    return LB_OK;
}

/* ---- aggregate ------------------------------------------------------------------------- */

void lb_rouge_acc_init(lb_rouge_acc *acc, const lb_rouge_params *params) {
    memset(acc, 0, sizeof *acc);
    acc->params = *params;
}

void lb_rouge_acc_free(lb_rouge_acc *acc) {
    if (acc == NULL) return;
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        free(acc->f[t]);
    memset(acc->f, 0, sizeof acc->f);
    acc->n = acc->cap = 0;
}

lb_status lb_rouge_acc_add(lb_rouge_acc *acc, const char *pred, const char *ref,
                           lb_rouge_scores *out, lb_err *err) {
    lb_rouge_scores s;
    LB_TRY(lb_rouge_score_pair(&acc->params, pred, ref, &s, err));
    if (acc->n == acc->cap) {
        size_t cap = acc->cap ? acc->cap * 2 : 256;
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
            double *f = realloc(acc->f[t], cap * sizeof *f);
            if (f == NULL)
                return lb_fail(err, LB_ERR_NOMEM, "out of memory keeping %zu ROUGE scores", cap);
            acc->f[t] = f;
        }
        acc->cap = cap;
    }
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        acc->f[t][acc->n] = s.s[t].f;
    acc->n++;
    acc->gen_len += s.pred_chars;
    if (out != NULL) *out = s;
    return LB_OK;
}

/* numpy's pairwise summation of one block (pairwise_sum in its loops_utils.h): below 8
 * values in order, up to 128 in eight interleaved partial sums, above that two halves
 * split at a multiple of 8. */
static double pairwise_sum(const double *x, size_t n) {
    if (n < 8) {
        double s = -0.0;
        for (size_t i = 0; i < n; i++)
            s += x[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        memcpy(r, x, sizeof r);
        size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int k = 0; k < 8; k++)
                r[k] += x[i + k];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            s += x[i];
        return s;
    }
    size_t half = n / 2 - (n / 2) % 8;
    return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

/* np.mean of a float64 array, as evaluation.py takes it: the reduction runs over blocks of
 * numpy's 8192-element buffer, each summed pairwise, the block sums added in order. */
static double numpy_mean(const double *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i += 8192)
        s += pairwise_sum(x + i, n - i < 8192 ? n - i : 8192);
    return s / (double)n;
}

lb_rouge_summary lb_rouge_acc_finish(const lb_rouge_acc *acc) {
    lb_rouge_summary s = {.gen_num = (int64_t)acc->n, .gen_len = acc->gen_len};
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        s.score[t] = acc->n ? numpy_mean(acc->f[t], acc->n) * 100.0 : 0.0;
    return s;
}

lb_rouge_targets lb_rouge_targets_mlperf_llama31_8b(void) {
    /* the same expressions as MLPerf's submission checker, so the same doubles */
    return (lb_rouge_targets){
        .score_min = {38.7792 * 0.99, 15.9075 * 0.99, 24.4957 * 0.99, 35.793 * 0.99},
        .gen_len_min = 8167644 * 0.9,
        .gen_len_max = 8167644 * 1.1,
    };
}

/* round() on a numpy float64 is numpy's around: scale by 10^4, round half to even, scale
 * back. It differs from Python's round on a float (and printf's %.4f), which round the
 * exact binary value, where x * 10^4 lands on a half: 59.68535 gives 59.6854, not 59.6853. */
double lb_rouge_round(double score) {
    return rint(score * 10000.0) / 10000.0;
}

lb_rouge_verdict lb_rouge_check(const lb_rouge_summary *summary, const lb_rouge_targets *targets) {
    lb_rouge_verdict v = {.pass = true};
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
        v.score_ok[t] = lb_rouge_round(summary->score[t]) >= targets->score_min[t];
        v.pass &= v.score_ok[t];
    }
    double gen_len = (double)summary->gen_len;
    v.gen_len_ok = gen_len >= targets->gen_len_min && gen_len <= targets->gen_len_max;
    v.pass &= v.gen_len_ok;
    return v;
}

lb_status lb_rouge_add_to_result(const lb_rouge_acc *acc, const lb_rouge_targets *targets,
                                 bool per_sample, lb_result *r) {
    lb_rouge_summary s = lb_rouge_acc_finish(acc);
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        LB_TRY(lb_result_set_metric(r, type_names[t], s.score[t], "score"));
    LB_TRY(lb_result_set_metric(r, "gen_len", (double)s.gen_len, "chars"));
    LB_TRY(lb_result_set_metric(r, "gen_num", (double)s.gen_num, "samples"));
    if (targets != NULL) {
        lb_rouge_verdict v = lb_rouge_check(&s, targets);
        LB_TRY(lb_result_set_metric(r, "rouge_pass", v.pass ? 1.0 : 0.0, "bool"));
    }
    if (!per_sample) return LB_OK;
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
        char name[LB_NAME_BYTES];
        snprintf(name, sizeof name, "%s_f", type_names[t]);
        lb_series *series = lb_result_series(r, name, "fraction");
        if (series == NULL) return LB_ERR_NOMEM;
        for (size_t i = 0; i < acc->n; i++)
            LB_TRY(lb_result_series_push(series, acc->f[t][i]));
    }
    return LB_OK;
}
