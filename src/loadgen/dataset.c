/* dataset.c: dataset parsers and the synthetic prompt generator (see dataset.h).
 *
 * Each parser validates every record before the run starts: a dataset that fails half
 * way through a ten-hour run is worse than one refused at once. Records are copied out of
 * the jansson tree so the tree can be freed right after parsing. Texts become C strings,
 * so a string with a NUL inside ("\u0000") is refused by name instead of being cut short
 * (jansson parses with JSON_ALLOW_NUL only so that the error can name the field). An error
 * counts records, turns and JSONL lines from 1, as an editor counts lines. */
#include "loadgen/dataset.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/result.h"

static lb_status push_sample(lb_dataset *d, size_t *cap, lb_sample s) {
    if (d->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        lb_sample *p = realloc(d->samples, ncap * sizeof *p);
        if (p == NULL) return LB_ERR_NOMEM;
        d->samples = p;
        *cap = ncap;
    }
    if (!d->multi_turn) s.next_turn = -1;
    d->samples[d->n++] = s;
    return LB_OK;
}

static void sample_free(lb_sample *s) {
    free(s->prompt);
    free(s->reference);
    for (size_t i = 0; i < s->n_history; i++)
        free(s->history[i]);
    free(s->history);
}

lb_status lb_dataset_count_tokens(lb_dataset *d, const lb_tokenizer *tok, lb_err *err) {
    const bool cnn = strcmp(d->format, "cnn") == 0;
    for (size_t i = 0; i < d->n; i++) {
        if (cnn && d->samples[i].input_tokens >= 0) continue; /* the file's tok_input */
        int64_t n = 0;
        LB_TRY(
            lb_tokenizer_count(tok, d->samples[i].prompt, strlen(d->samples[i].prompt), &n, err));
        d->samples[i].input_tokens = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    }
    return LB_OK;
}

void lb_dataset_free(lb_dataset *d) {
    if (d == NULL) return;
    for (size_t i = 0; i < d->n; i++)
        sample_free(&d->samples[i]);
    free(d->samples);
    memset(d, 0, sizeof *d);
}

static void dataset_start(lb_dataset *d, const char *format) {
    memset(d, 0, sizeof *d);
    snprintf(d->format, sizeof d->format, "%s", format);
}

/* A JSON string that a C string cannot hold: it has a NUL inside. */
static bool has_nul(const json_t *v) {
    return strlen(json_string_value(v)) != json_string_length(v);
}

static char *dup_string(const json_t *v) {
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (s == NULL) return NULL;
    memcpy(s, json_string_value(v), n);
    s[n] = '\0';
    return s;
}

/* The template with "{input}" replaced by the article. */
static char *apply_cnn_template(const json_t *input) {
    static const char tmpl[] = LB_CNN_PROMPT_TEMPLATE;
    const char *hole = strstr(tmpl, "{input}");
    size_t head = (size_t)(hole - tmpl), tail = strlen(hole + 7), n = json_string_length(input);
    char *s = malloc(head + n + tail + 1);
    if (s == NULL) return NULL;
    memcpy(s, tmpl, head);
    memcpy(s + head, json_string_value(input), n);
    memcpy(s + head + n, hole + 7, tail + 1);
    return s;
}

/* Parses a whole JSON document that must be an array. */
static lb_status load_array(const char *buf, size_t len, const char *name, json_t **out,
                            lb_err *err) {
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_ALLOW_NUL, &je);
    if (root == NULL)
        return lb_fail(err, LB_ERR_FORMAT, "dataset %s: not valid JSON at line %d column %d: %s",
                       name, je.line, je.column, je.text);
    if (!json_is_array(root)) {
        lb_status st = lb_fail(err, LB_ERR_FORMAT,
                               "dataset %s: the top level must be an array of records, got %s",
                               name, lb_result_json_kind(root));
        json_decref(root);
        return st;
    }
    *out = root;
    return LB_OK;
}

static lb_status finish(lb_dataset *out, const char *name, lb_status st, lb_err *err) {
    if (st == LB_OK && out->n == 0)
        st = lb_fail(err, LB_ERR_FORMAT, "dataset %s: no usable records", name);
    if (st != LB_OK) lb_dataset_free(out);
    return st;
}

/* Every element of a record's tok_input array (record i, from 0) is a token id: an integer
 * from 0 to INT32_MAX. The first that is not is named with its value, in JSON cut short. */
static lb_status check_token_ids(const json_t *tok, const char *name, size_t i, lb_err *err) {
    size_t k;
    json_t *t;
    json_array_foreach(tok, k, t) {
        if (json_is_integer(t) && json_integer_value(t) >= 0 && json_integer_value(t) <= INT32_MAX)
            continue;
        char *text = json_dumps(t, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
        if (text == NULL)
            return lb_fail(err, LB_ERR_NOMEM, "dataset %s: out of memory at record %zu", name,
                           i + 1);
        lb_status st = lb_fail(err, LB_ERR_FORMAT,
                               "dataset %s: record %zu: field \"tok_input\" element %zu is "
                               "%.40s%s: token ids are integers from 0 to %d",
                               name, i + 1, k + 1, text, strlen(text) > 40 ? "..." : "", INT32_MAX);
        free(text);
        return st;
    }
    return LB_OK;
}

lb_status lb_dataset_parse_cnn(const char *buf, size_t len, const char *name, lb_dataset *out,
                               lb_err *err) {
    dataset_start(out, "cnn");
    json_t *root;
    LB_TRY(load_array(buf, len, name, &root, err));
    size_t cap = 0, i;
    json_t *rec;
    lb_status st = LB_OK;
    json_array_foreach(root, i, rec) {
        if (!json_is_object(rec)) {
            st = lb_fail(err, LB_ERR_FORMAT, "dataset %s: record %zu must be an object, got %s",
                         name, i + 1, lb_result_json_kind(rec));
            break;
        }
        json_t *input = json_object_get(rec, "input");
        json_t *output = json_object_get(rec, "output");
        json_t *tok = json_object_get(rec, "tok_input");
        if (!json_is_string(input)) {
            st = lb_fail(err, LB_ERR_FORMAT,
                         "dataset %s: record %zu: field \"input\" must be a string, got %s", name,
                         i + 1, input ? lb_result_json_kind(input) : "nothing");
            break;
        }
        if (output != NULL && !json_is_string(output)) {
            st = lb_fail(err, LB_ERR_FORMAT,
                         "dataset %s: record %zu: field \"output\" must be a string, got %s", name,
                         i + 1, lb_result_json_kind(output));
            break;
        }
        const char *nul_field = NULL;
        if (output != NULL && has_nul(output)) nul_field = "output";
        if (has_nul(input)) nul_field = "input";
        if (nul_field != NULL) {
            st = lb_fail(err, LB_ERR_FORMAT,
                         "dataset %s: record %zu: field \"%s\" contains a NUL character "
                         "(\\u0000): texts must be free of NUL",
                         name, i + 1, nul_field);
            break;
        }
        int32_t n_tok = -1;
        if (tok != NULL) {
            if (!json_is_array(tok) || json_array_size(tok) == 0) {
                st = lb_fail(err, LB_ERR_FORMAT,
                             "dataset %s: record %zu: field \"tok_input\" must be a non-empty "
                             "array of integers (the prompt's token ids)",
                             name, i + 1);
                break;
            }
            if ((st = check_token_ids(tok, name, i, err)) != LB_OK) break;
            n_tok = (int32_t)json_array_size(tok);
        }
        lb_sample s = {.prompt = apply_cnn_template(input),
                       .reference = output ? dup_string(output) : NULL,
                       .max_tokens = LB_CNN_MAX_TOKENS,
                       .input_tokens = n_tok};
        if (s.prompt == NULL || (output && s.reference == NULL) ||
            push_sample(out, &cap, s) != LB_OK) {
            sample_free(&s);
            st = lb_fail(err, LB_ERR_NOMEM, "dataset %s: out of memory at record %zu", name, i + 1);
            break;
        }
    }
    json_decref(root);
    return finish(out, name, st, err);
}

/* One JSONL record (line `line_no`, 1-based). */
static lb_status jsonl_record(const char *line, size_t n, size_t line_no, const char *name,
                              lb_dataset *out, size_t *cap, lb_err *err) {
    json_error_t je;
    json_t *rec = json_loadb(line, n, JSON_ALLOW_NUL, &je);
    if (rec == NULL)
        return lb_fail(err, LB_ERR_FORMAT, "dataset %s: line %zu: not valid JSON (column %d: %s)",
                       name, line_no, je.column, je.text);
    lb_status st = LB_OK;
    json_t *prompt = json_object_get(rec, "prompt");
    json_t *ref = json_object_get(rec, "reference");
    json_t *maxt = json_object_get(rec, "max_tokens");
    if (!json_is_object(rec))
        st = lb_fail(err, LB_ERR_FORMAT, "dataset %s: line %zu must be a JSON object, got %s", name,
                     line_no, lb_result_json_kind(rec));
    else if (!json_is_string(prompt))
        st = lb_fail(err, LB_ERR_FORMAT,
                     "dataset %s: line %zu: field \"prompt\" must be a string, got %s", name,
                     line_no, prompt ? lb_result_json_kind(prompt) : "nothing");
    else if (ref != NULL && !json_is_string(ref))
        st = lb_fail(err, LB_ERR_FORMAT,
                     "dataset %s: line %zu: field \"reference\" must be a string, got %s", name,
                     line_no, lb_result_json_kind(ref));
    else if (maxt != NULL && (!json_is_integer(maxt) || json_integer_value(maxt) < 1 ||
                              json_integer_value(maxt) > 1000000))
        st = lb_fail(err, LB_ERR_FORMAT,
                     "dataset %s: line %zu: field \"max_tokens\" must be an integer in "
                     "[1, 1000000]",
                     name, line_no);
    else if (json_string_length(prompt) == 0)
        st = lb_fail(err, LB_ERR_FORMAT,
                     "dataset %s: line %zu: field \"prompt\" is empty: a request needs a prompt "
                     "of at least one token",
                     name, line_no);
    else if (has_nul(prompt) || (ref != NULL && has_nul(ref)))
        st = lb_fail(err, LB_ERR_FORMAT,
                     "dataset %s: line %zu: field \"%s\" contains a NUL character (\\u0000): "
                     "texts must be free of NUL",
                     name, line_no, has_nul(prompt) ? "prompt" : "reference");
    if (st == LB_OK) {
        lb_sample s = {.prompt = dup_string(prompt),
                       .reference = ref ? dup_string(ref) : NULL,
                       .max_tokens = maxt ? (int32_t)json_integer_value(maxt) : 0,
                       .input_tokens = -1};
        if (s.prompt == NULL || (ref && s.reference == NULL) || push_sample(out, cap, s) != LB_OK) {
            sample_free(&s);
            st = lb_fail(err, LB_ERR_NOMEM, "dataset %s: out of memory at line %zu", name, line_no);
        }
    }
    json_decref(rec);
    return st;
}

lb_status lb_dataset_parse_jsonl(const char *buf, size_t len, const char *name, lb_dataset *out,
                                 lb_err *err) {
    dataset_start(out, "jsonl");
    size_t cap = 0, line_no = 0;
    lb_status st = LB_OK;
    for (size_t pos = 0; pos < len && st == LB_OK;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        line_no++;
        size_t a = pos, b = end;
        while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r'))
            a++;
        while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r'))
            b--;
        if (b > a) st = jsonl_record(buf + a, b - a, line_no, name, out, &cap, err);
        pos = end + 1;
    }
    return finish(out, name, st, err);
}

static bool turn_from(const json_t *turn, const char *a, const char *b) {
    const char *from = json_string_value(json_object_get(turn, "from"));
    if (from == NULL) from = json_string_value(json_object_get(turn, "role"));
    return from != NULL && (strcmp(from, a) == 0 || strcmp(from, b) == 0);
}

/* A user turn a request can send: an empty text is no prompt (a server refuses it). */
static bool user_turn(const json_t *turn) {
    return turn_from(turn, "human", "user") &&
           json_string_length(json_object_get(turn, "value")) > 0;
}

/* One sample a user turn that has a reply: turns = the conversation's first 2k + 1 texts
 * (user, assistant, ..., user), the reply the reference. Its earlier turns become its
 * history, and the sample before it in the conversation points at it (next_turn). */
static lb_status push_turn(lb_dataset *out, size_t *cap, json_t *conv, size_t k, size_t first) {
    lb_sample s = {.prompt = dup_string(json_object_get(json_array_get(conv, 2 * k), "value")),
                   .reference =
                       dup_string(json_object_get(json_array_get(conv, 2 * k + 1), "value")),
                   .input_tokens = -1,
                   .next_turn = -1,
                   .follow_up = k > 0};
    bool ok = s.prompt != NULL && s.reference != NULL;
    if (ok && k > 0) {
        s.history = calloc(2 * k, sizeof *s.history);
        ok = s.history != NULL;
        for (size_t h = 0; ok && h < 2 * k; h++) {
            s.history[h] = dup_string(json_object_get(json_array_get(conv, h), "value"));
            ok = s.history[h] != NULL;
            s.n_history = h + 1;
        }
    }
    if (!ok || push_sample(out, cap, s) != LB_OK) {
        sample_free(&s);
        return LB_ERR_NOMEM;
    }
    if (k > 0) out->samples[first + k - 1].next_turn = (int32_t)(out->n - 1);
    return LB_OK;
}

/* ShareGPT, either the first exchange of each conversation, or (multi_turn) every user
 * turn with a reply as one sample, in conversation order, up to the first turn out of
 * place (two user turns in a row ...). */
static lb_status parse_sharegpt(const char *buf, size_t len, const char *name, bool multi_turn,
                                lb_dataset *out, lb_err *err) {
    dataset_start(out, multi_turn ? "sharegpt-turns" : "sharegpt");
    out->multi_turn = multi_turn;
    json_t *root;
    LB_TRY(load_array(buf, len, name, &root, err));
    size_t cap = 0, i;
    json_t *rec;
    lb_status st = LB_OK;
    json_array_foreach(root, i, rec) {
        json_t *conv = json_object_get(rec, "conversations");
        if (!json_is_object(rec) || !json_is_array(conv)) {
            st = lb_fail(err, LB_ERR_FORMAT,
                         "dataset %s: record %zu: field \"conversations\" must be an array of "
                         "turns, got %s",
                         name, i + 1,
                         conv                  ? lb_result_json_kind(conv)
                         : json_is_object(rec) ? "nothing"
                                               : lb_result_json_kind(rec));
            break;
        }
        size_t k;
        json_t *turn;
        json_array_foreach(conv, k, turn) {
            json_t *value = json_object_get(turn, "value");
            if (!json_is_string(value)) {
                st = lb_fail(err, LB_ERR_FORMAT,
                             "dataset %s: record %zu: turn %zu: field \"value\" must be a string",
                             name, i + 1, k + 1);
                break;
            }
            if (has_nul(value)) {
                st = lb_fail(err, LB_ERR_FORMAT,
                             "dataset %s: record %zu: turn %zu: field \"value\" contains a NUL "
                             "character (\\u0000): texts must be free of NUL",
                             name, i + 1, k + 1);
                break;
            }
        }
        if (st != LB_OK) break;
        size_t pairs = 0, first = out->n;
        while (json_array_get(conv, 2 * pairs + 1) != NULL &&
               user_turn(json_array_get(conv, 2 * pairs)) &&
               turn_from(json_array_get(conv, 2 * pairs + 1), "gpt", "assistant") &&
               (multi_turn || pairs == 0))
            pairs++;
        if (pairs == 0) {
            out->skipped++;
            continue;
        }
        for (size_t t = 0; t < pairs && st == LB_OK; t++)
            if (push_turn(out, &cap, conv, t, first) != LB_OK)
                st = lb_fail(err, LB_ERR_NOMEM, "dataset %s: out of memory at record %zu", name,
                             i + 1);
        if (st != LB_OK) break;
    }
    json_decref(root);
    return finish(out, name, st, err);
}

lb_status lb_dataset_parse_sharegpt(const char *buf, size_t len, const char *name, lb_dataset *out,
                                    lb_err *err) {
    return parse_sharegpt(buf, len, name, false, out, err);
}

lb_status lb_dataset_parse_sharegpt_turns(const char *buf, size_t len, const char *name,
                                          lb_dataset *out, lb_err *err) {
    return parse_sharegpt(buf, len, name, true, out, err);
}

lb_status lb_dataset_len_dist_parse(const char *text, lb_len_dist *out, lb_err *err) {
    char kind[16] = "";
    double a = NAN, b = NAN;
    char *end;
    errno = 0;
    double bare = strtod(text, &end);
    if (end != text && *end == '\0' && errno == 0) {
        kind[0] = 'f';
        a = bare;
    } else {
        char tail;
        int used = 0; /* bytes read up to the first number: all of a fixed:N */
        int n = sscanf(text, "%15[a-z]:%lf%n:%lf%c", kind, &a, &used, &b, &tail);
        if (n < 2 || n > 3 || (n == 2 && text[used] != '\0')) kind[0] = '\0';
        if ((strcmp(kind, "fixed") == 0) != (n == 2)) kind[0] = '\0';
    }
    bool whole_a = a == floor(a), whole_b = isnan(b) || b == floor(b);
    if (kind[0] == 'f' && a >= 1 && a <= LB_LEN_MAX && whole_a) {
        *out = (lb_len_dist){LB_LEN_FIXED, a, 0};
        return LB_OK;
    }
    if (strcmp(kind, "uniform") == 0 && a >= 1 && b >= a && b <= LB_LEN_MAX && whole_a && whole_b) {
        *out = (lb_len_dist){LB_LEN_UNIFORM, a, b};
        return LB_OK;
    }
    if (strcmp(kind, "normal") == 0 && a >= 1 && a <= LB_LEN_MAX && b >= 0 && b <= LB_LEN_MAX) {
        *out = (lb_len_dist){LB_LEN_NORMAL, a, b};
        return LB_OK;
    }
    return lb_fail(err, LB_ERR_USAGE,
                   "length distribution '%s' is not one of fixed:N, uniform:LO:HI (whole numbers, "
                   "1 <= LO <= HI), normal:MEAN:STD (MEAN >= 1), every number at most %d",
                   text, LB_LEN_MAX);
}

int32_t lb_dataset_len_dist_draw(const lb_len_dist *d, lb_rng *rng) {
    double v = d->a;
    if (d->kind == LB_LEN_UNIFORM)
        v = d->a + (double)lb_rng_below(rng, (uint64_t)(d->b - d->a) + 1);
    if (d->kind == LB_LEN_NORMAL) v = round(d->a + d->b * lb_rng_normal(rng));
    if (v < 1) v = 1;
    if (v > LB_LEN_MAX) v = LB_LEN_MAX;
    return (int32_t)v;
}

lb_dataset_synthetic_params lb_dataset_synthetic_default_params(void) {
    return (lb_dataset_synthetic_params){
        .n_samples = 1000,
        .input = {LB_LEN_FIXED, 128, 0},
        .output = {LB_LEN_FIXED, 128, 0},
        .seed = 1,
    };
}

/* Short common English words: each is about one token for the usual BPE vocabularies,
 * so a prompt of N words is about N tokens long. */
static const char *const words[] = {
    "the",     "of",    "and",    "to",    "in",     "is",    "was",     "for",   "on",
    "as",      "with",  "by",     "he",    "at",     "from",  "his",     "an",    "were",
    "are",     "which", "this",   "also",  "be",     "had",   "it",      "first", "one",
    "their",   "its",   "new",    "after", "but",    "who",   "not",     "they",  "have",
    "her",     "she",   "two",    "been",  "other",  "when",  "there",   "all",   "during",
    "into",    "time",  "year",   "city",  "more",   "most",  "only",    "over",  "some",
    "such",    "state", "world",  "would", "where",  "later", "up",      "made",  "about",
    "than",    "many",  "under",  "known", "school", "while", "people",  "part",  "since",
    "may",     "used",  "both",   "then",  "film",   "three", "through", "each",  "team",
    "between", "well",  "season", "him",   "these",
};

enum { N_WORDS = sizeof words / sizeof words[0] };

/* Token costs of the words: alone (a text's first word) and after a space; NULL tok:
 * every word costs one (the words are common enough to be one token each). */
typedef struct {
    int32_t first[N_WORDS], spaced[N_WORDS];
} word_costs;

static lb_status costs_of(const lb_tokenizer *tok, word_costs *c, lb_err *err) {
    for (size_t w = 0; w < N_WORDS; w++) {
        int64_t a = 1, b = 1;
        if (tok != NULL) {
            char spaced[16];
            int n = snprintf(spaced, sizeof spaced, " %s", words[w]);
            LB_TRY(lb_tokenizer_count(tok, words[w], strlen(words[w]), &a, err));
            LB_TRY(lb_tokenizer_count(tok, spaced, (size_t)n, &b, err));
        }
        c->first[w] = (int32_t)a;
        c->spaced[w] = (int32_t)b;
    }
    return LB_OK;
}

/* Appends random words costing `units` (words, or tokens per c) to the malloc'd text
 * *s (length *len), a space before each but the text's first. A word that would overrun
 * is replaced by the cheapest one; the text stops short only when even that overruns. */
static bool add_words(lb_rng *rng, const word_costs *c, int32_t units, char **s, size_t *len) {
    char *t = realloc(*s, *len + (size_t)units * 9 + 2);
    if (t == NULL) return false;
    *s = t;
    while (units > 0) {
        size_t w = (size_t)lb_rng_below(rng, N_WORDS);
        const int32_t *cost = *len == 0 ? c->first : c->spaced;
        if (cost[w] > units) {
            size_t best = 0;
            for (size_t k = 1; k < N_WORDS; k++)
                if (cost[k] < cost[best]) best = k;
            if (cost[best] > units) break;
            w = best;
        }
        if (*len > 0) t[(*len)++] = ' ';
        size_t wl = strlen(words[w]);
        memcpy(t + *len, words[w], wl);
        *len += wl;
        units -= cost[w];
    }
    t[*len] = '\0';
    return true;
}

lb_status lb_dataset_synthetic(const lb_dataset_synthetic_params *p, lb_dataset *out, lb_err *err) {
    dataset_start(out, "synthetic");
    if (p->n_samples == 0)
        return lb_fail(err, LB_ERR_USAGE, "a synthetic dataset needs at least one sample");
    word_costs costs;
    LB_TRY(costs_of(p->tok, &costs, err));
    lb_rng rng;
    lb_rng_seed(&rng, p->seed);
    /* The shared prefixes come first, from their own generator, so the samples do not
     * depend on how many there are. */
    size_t n_prefixes = p->prefix_len > 0 ? (p->n_prefixes > 0 ? p->n_prefixes : 1) : 0;
    char **prefixes = n_prefixes ? calloc(n_prefixes, sizeof *prefixes) : NULL;
    size_t *prefix_bytes = n_prefixes ? calloc(n_prefixes, sizeof *prefix_bytes) : NULL;
    lb_status st = n_prefixes && (prefixes == NULL || prefix_bytes == NULL) ? LB_ERR_NOMEM : LB_OK;
    lb_rng prng;
    lb_rng_seed(&prng, p->seed ^ UINT64_C(0x5052454649584553));
    for (size_t k = 0; k < n_prefixes && st == LB_OK; k++)
        if (!add_words(&prng, &costs, p->prefix_len, &prefixes[k], &prefix_bytes[k]))
            st = LB_ERR_NOMEM;
    size_t cap = 0;
    for (size_t i = 0; i < p->n_samples && st == LB_OK; i++) {
        int32_t n_in = lb_dataset_len_dist_draw(&p->input, &rng);
        int32_t n_out = lb_dataset_len_dist_draw(&p->output, &rng);
        char *s = NULL;
        size_t len = 0;
        if (n_prefixes > 0) {
            size_t k = i % n_prefixes;
            s = malloc(prefix_bytes[k] + 1);
            if (s != NULL) memcpy(s, prefixes[k], prefix_bytes[k] + 1);
            len = prefix_bytes[k];
        }
        if ((n_prefixes > 0 && s == NULL) || !add_words(&rng, &costs, n_in, &s, &len)) {
            free(s);
            st = LB_ERR_NOMEM;
            break;
        }
        int64_t n_tok = n_in + (n_prefixes ? p->prefix_len : 0);
        if (p->tok != NULL && (st = lb_tokenizer_count(p->tok, s, len, &n_tok, err)) != LB_OK) {
            free(s);
            break;
        }
        lb_sample smp = {.prompt = s,
                         .reference = NULL,
                         .max_tokens = n_out,
                         .input_tokens = n_tok > INT32_MAX ? INT32_MAX : (int32_t)n_tok};
        if (push_sample(out, &cap, smp) != LB_OK) {
            free(s);
            st = LB_ERR_NOMEM;
        }
    }
    for (size_t k = 0; k < n_prefixes; k++)
        free(prefixes ? prefixes[k] : NULL);
    free(prefixes);
    free(prefix_bytes);
    if (st != LB_OK) {
        lb_dataset_free(out);
        return st == LB_ERR_NOMEM ? lb_fail(err, st, "synthetic dataset: out of memory") : st;
    }
    return LB_OK;
}

/* The index of the first byte from i on that is not JSON white space (len when none). */
static size_t skip_space(const char *buf, size_t len, size_t i) {
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t'))
        i++;
    return i;
}

/* One past the bracket that closes the object or array opening at buf[i], strings skipped
 * whole; len when it never closes. */
static size_t value_end(const char *buf, size_t len, size_t i) {
    size_t depth = 0;
    for (bool in_string = false; i < len; i++) {
        char c = buf[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return len;
}

/* Guesses the format: JSONL by its name or a record at the top level, else ShareGPT when the
 * array's first record has a "conversations" key, however long the fields before it, else
 * cnn_eval (whose parser names what a record lacks). Only the first record is parsed. */
static const char *sniff(const char *path, const char *buf, size_t len) {
    size_t plen = strlen(path);
    if (plen >= 6 && strcmp(path + plen - 6, ".jsonl") == 0) return "jsonl";
    size_t i = skip_space(buf, len, 0);
    if (i < len && buf[i] == '{') return "jsonl";
    if (i == len || buf[i] != '[') return "cnn";
    i = skip_space(buf, len, i + 1);
    if (i == len || buf[i] != '{') return "cnn";
    json_t *first = json_loadb(buf + i, value_end(buf, len, i) - i, JSON_ALLOW_NUL, NULL);
    bool conv = json_object_get(first, "conversations") != NULL;
    json_decref(first);
    return conv ? "sharegpt" : "cnn";
}

lb_status lb_dataset_load(const char *path, const char *format, lb_dataset *out, lb_err *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    LB_TRY(lb_file_read(path, &buf, &len, err));
    /* A UTF-8 byte order mark (Windows editors write one) is not JSON: skipped. */
    const char *text = buf;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, len -= 3;
    if (strcmp(format, "auto") == 0) format = sniff(path, text, len);
    lb_status st;
    if (strcmp(format, "cnn") == 0)
        st = lb_dataset_parse_cnn(text, len, path, out, err);
    else if (strcmp(format, "jsonl") == 0)
        st = lb_dataset_parse_jsonl(text, len, path, out, err);
    else if (strcmp(format, "sharegpt") == 0)
        st = lb_dataset_parse_sharegpt(text, len, path, out, err);
    else if (strcmp(format, "sharegpt-turns") == 0)
        st = lb_dataset_parse_sharegpt_turns(text, len, path, out, err);
    else
        st = lb_fail(err, LB_ERR_USAGE,
                     "dataset format '%s' is not one of auto, cnn, jsonl, sharegpt, sharegpt-turns",
                     format);
    free(buf);
    return st;
}
