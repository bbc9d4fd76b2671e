/* hf_tokenizer.c: tokenizer.json to a ranks table, and the chat format (hf_tokenizer.h).
 *
 * The vocabulary is turned into the text of a tiktoken ranks file in memory and parsed by
 * tokenizer.h, so both formats share one loader and its checks (every byte ranked, no
 * token twice). */
#include "model/hf_tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"

#define MAX_ID 0x3fffffff /* tokenizer.h's largest rank, for added tokens too */

/* Llama 3's pre-split expression as tokenizer.json writes it. */
static const char llama3_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-2's byte-to-unicode alphabet, inverted: the byte a code point stands for, or -1. */
static int unicode_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    int k = (int)(cp - 256); /* the k-th byte outside the printable ranges, in byte order */
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (!printable && k-- == 0) return b;
    }
    return -1;
}

/* Decodes a vocabulary string to bytes; returns their count or -1. */
static int vocab_bytes(const char *s, uint8_t *out, int cap) {
    int n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp;
        int len = *p < 0x80         ? 1
                  : (*p >> 5) == 6  ? 2
                  : (*p >> 4) == 14 ? 3
                  : (*p >> 3) == 30 ? 4
                                    : 0;
        if (len == 0) return -1;
        cp = len == 1 ? *p : (uint32_t)(*p & (0x7f >> len));
        for (int i = 1; i < len; i++) {
            if ((p[i] & 0xc0) != 0x80) return -1;
            cp = cp << 6 | (p[i] & 0x3f);
        }
        p += len;
        int b = unicode_byte(cp);
        if (b < 0 || n == cap) return -1;
        out[n++] = (uint8_t)b;
    }
    return n;
}

static size_t b64_encode(const uint8_t *in, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    return o;
}

/* Reads the pre-tokenizer into one of tokenizer.h's expressions. A step is Llama 3's Split
 * (Isolated, not inverted), GPT-2's ByteLevel with use_regex (tokenizers' default when the
 * field is absent), a ByteLevel without it (a byte mapping, no split), or a Sequence of
 * steps; ByteLevel's add_prefix_space must be false. *n_found counts the expressions met.
 * Any other step cuts or changes the text in a way no expression here does: false, with
 * *step naming it. */
static bool pre_split(json_t *pt, lb_tok_pattern *pat, int *n_found, const char **step) {
    const char *type = json_string_value(json_object_get(pt, "type"));
    *step = type ? type : "(no type)";
    if (type == NULL) return false;
    if (strcmp(type, "Sequence") == 0) {
        json_t *steps = json_object_get(pt, "pretokenizers"), *v;
        size_t i;
        if (!json_is_array(steps)) return false;
        json_array_foreach(steps, i, v) if (!pre_split(v, pat, n_found, step)) return false;
        return true;
    }
    if (strcmp(type, "Split") == 0) {
        const char *re =
            json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        *step = "Split (with another expression, behavior or invert)";
        if (re == NULL || strcmp(re, llama3_split) != 0 ||
            json_is_true(json_object_get(pt, "invert")) ||
            (behavior != NULL && strcmp(behavior, "Isolated") != 0))
            return false;
        *pat = LB_TOK_PATTERN_LLAMA3;
        ++*n_found;
        return true;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        *step = "ByteLevel with add_prefix_space";
        if (json_is_true(json_object_get(pt, "add_prefix_space"))) return false;
        if (!json_is_false(json_object_get(pt, "use_regex"))) {
            *pat = LB_TOK_PATTERN_GPT2;
            ++*n_found;
        }
        return true;
    }
    return false;
}

typedef struct {
    const char *key;
    uint32_t id;
    bool added; /* an added token as well: matched verbatim, not ranked */
} vocab_item;

static int cmp_key(const void *a, const void *b) {
    return strcmp(((const vocab_item *)a)->key, ((const vocab_item *)b)->key);
}

static int cmp_id(const void *a, const void *b) {
    uint32_t x = ((const vocab_item *)a)->id, y = ((const vocab_item *)b)->id;
    return x != y ? (x > y) - (x < y) : cmp_key(a, b);
}

/* Refuses two tokens of v[0..n) with one id, naming both (the ranks file made from them
 * would name its own lines). */
static lb_status unique_ids(const vocab_item *v, size_t n, const char *name, lb_err *err) {
    vocab_item *by_id = malloc((n + 1) * sizeof *by_id);
    if (by_id == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    memcpy(by_id, v, n * sizeof *by_id);
    qsort(by_id, n, sizeof *by_id, cmp_id);
    lb_status st = LB_OK;
    for (size_t k = 1; k < n && st == LB_OK; k++)
        if (by_id[k].id == by_id[k - 1].id)
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s: model.vocab[\"%.100s\"] and model.vocab[\"%.100s\"] both have id "
                         "%u; each token has an id of its own",
                         name, by_id[k - 1].key, by_id[k].key, by_id[k].id);
    free(by_id);
    return st;
}

/* The item of a vocabulary string (items sorted by key), or NULL. */
static vocab_item *item_of(vocab_item *v, size_t n, const char *key) {
    vocab_item k = {.key = key};
    return bsearch(&k, v, n, sizeof *v, cmp_key);
}

/* Merge k ("a b" or ["a", "b"]) joined, into buf. */
static bool merge_text(json_t *m, char *buf, size_t cap) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (sp == NULL || strchr(sp + 1, ' ') != NULL) return false;
        return (size_t)snprintf(buf, cap, "%.*s%s", (int)(sp - s), s, sp + 1) < cap;
    }
    const char *a = json_string_value(json_array_get(m, 0));
    const char *b = json_string_value(json_array_get(m, 1));
    return a && b && json_array_size(m) == 2 && (size_t)snprintf(buf, cap, "%s%s", a, b) < cap;
}

lb_status lb_hf_tokenizer_parse(lb_tokenizer **out, const char *json, size_t len, const char *name,
                                lb_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (root == NULL)
        return lb_fail(err, LB_ERR_USAGE, "%s:%d: not JSON: %s", name, je.line, je.text);
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"),
           *added = json_object_get(root, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    lb_status st = LB_OK;
    lb_tokenizer_params tp = lb_tokenizer_default_params();
    int n_found = 0;
    const char *step = NULL;
    json_t *pt = json_object_get(root, "pre_tokenizer"),
           *norm = json_object_get(root, "normalizer");
    bool understood = pt == NULL || json_is_null(pt) || pre_split(pt, &tp.pattern, &n_found, &step);
    size_t nv = json_object_size(vocab), na = json_array_size(added);
    vocab_item *items = calloc(nv + 1, sizeof *items);
    const char **sp_text = calloc(na + 1, sizeof *sp_text);
    uint32_t *sp_id = calloc(na + 1, sizeof *sp_id);
    bool *sp_flag = calloc(na + 1, sizeof *sp_flag);
    unsigned *sp_match = calloc(na + 1, sizeof *sp_match);
    char *ranks = NULL;
    if (items == NULL || sp_text == NULL || sp_id == NULL || sp_flag == NULL || sp_match == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    if (st == LB_OK && (mtype == NULL || strcmp(mtype, "BPE") != 0 || !json_is_object(vocab)))
        st = lb_fail(err, LB_ERR_USAGE, "%s: model.type must be \"BPE\" with a model.vocab object",
                     name);
    if (st == LB_OK && json_is_true(json_object_get(model, "byte_fallback")))
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: a byte_fallback (SentencePiece) BPE is not supported; a byte-level one "
                     "(Llama 3, GPT-2) is",
                     name);
    /* a normalizer changes the text before it is split; an empty Sequence is none */
    const char *ntype = json_string_value(json_object_get(norm, "type"));
    bool no_norm = norm == NULL || json_is_null(norm) ||
                   (ntype != NULL && strcmp(ntype, "Sequence") == 0 &&
                    json_array_size(json_object_get(norm, "normalizers")) == 0);
    if (st == LB_OK && !no_norm)
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: normalizer %s is not supported; a byte-level BPE (Llama 3, GPT-2) has "
                     "none",
                     name, ntype ? ntype : "(no type)");
    if (st == LB_OK && !understood)
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: pre_tokenizer step %s is not supported; Llama 3's Split expression and "
                     "GPT-2's ByteLevel are",
                     name, step);
    if (st == LB_OK && n_found != 1)
        st = lb_fail(err, LB_ERR_USAGE,
                     "%s: pre_tokenizer %s; one of Llama 3's Split expression and GPT-2's "
                     "ByteLevel with use_regex is supported",
                     name,
                     n_found ? "splits with two expressions in turn" : "has no split expression");
    size_t n = 0;
    const char *key;
    json_t *val;
    if (st == LB_OK) json_object_foreach(vocab, key, val) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                json_integer_value(val) > MAX_ID) {
                st = lb_fail(err, LB_ERR_USAGE, "%s: model.vocab[\"%s\"] is not an id", name, key);
                break;
            }
            items[n++] = (vocab_item){key, (uint32_t)json_integer_value(val)};
        }
    qsort(items, n, sizeof *items, cmp_key);
    if (st == LB_OK) st = unique_ids(items, n, name, err);
    /* Merge order must be the order of the merged tokens' ids. */
    int64_t last = -1;
    size_t i;
    json_t *m;
    if (st == LB_OK) json_array_foreach(merges, i, m) {
            char joined[1024];
            const vocab_item *it =
                merge_text(m, joined, sizeof joined) ? item_of(items, n, joined) : NULL;
            int64_t id = it ? (int64_t)it->id : -1;
            if (id < 0) {
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: model.merges[%zu] is not two tokens whose "
                             "join is in model.vocab",
                             name, i);
                break;
            }
            if (id <= last) {
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: model.merges[%zu] makes id %lld after id %lld; only vocabularies "
                             "whose merges come in id order (tiktoken's kind) are supported",
                             name, i, (long long)id, (long long)last);
                break;
            }
            last = id;
        }
    /* Added tokens are matched before the text is split (Hugging Face's added vocabulary),
     * also one that is in model.vocab (GPT-2's <|endoftext|>), which therefore leaves the
     * ranks; "special" is kept for decoders that skip special tokens, and lstrip, rstrip,
     * single_word and normalized say how it matches (tokenizer.h's lb_tok_added_flag; with
     * no normalizer, "normalized" only puts a token in the second pass). normalized absent
     * is !special, as tokenizers' AddedToken::from makes it. */
    static const struct {
        const char *name;
        lb_tok_added_flag flag;
    } ways[] = {{"lstrip", LB_TOK_ADDED_LSTRIP},
                {"rstrip", LB_TOK_ADDED_RSTRIP},
                {"single_word", LB_TOK_ADDED_SINGLE_WORD},
                {"normalized", LB_TOK_ADDED_NORMALIZED}};
    size_t ns = 0;
    if (st == LB_OK) json_array_foreach(added, i, m) {
            json_t *id = json_object_get(m, "id");
            const char *content = json_string_value(json_object_get(m, "content"));
            if (!json_is_integer(id) || json_integer_value(id) < 0 ||
                json_integer_value(id) > MAX_ID || content == NULL) {
                st = lb_fail(err, LB_ERR_USAGE,
                             "%s: added_tokens[%zu] needs an id (0 to %d) and a content", name, i,
                             MAX_ID);
                break;
            }
            sp_flag[ns] = json_is_true(json_object_get(m, "special"));
            sp_match[ns] = sp_flag[ns] ? 0 : LB_TOK_ADDED_NORMALIZED;
            for (size_t f = 0; f < sizeof ways / sizeof *ways && st == LB_OK; f++) {
                json_t *v = json_object_get(m, ways[f].name);
                if (v != NULL && !json_is_boolean(v))
                    st = lb_fail(err, LB_ERR_USAGE,
                                 "%s: added_tokens[%zu] \"%.100s\" has %s that is not true or "
                                 "false",
                                 name, i, content, ways[f].name);
                else if (v != NULL)
                    sp_match[ns] = json_is_true(v) ? sp_match[ns] | ways[f].flag
                                                   : sp_match[ns] & ~(unsigned)ways[f].flag;
            }
            if (st != LB_OK) break;
            vocab_item *it = item_of(items, n, content);
            if (it != NULL && it->id == json_integer_value(id)) it->added = true;
            sp_text[ns] = content;
            sp_id[ns++] = (uint32_t)json_integer_value(id);
        }
    /* The ranks text: at most 4/3 of 3 bytes per code point, plus the id. */
    size_t cap = 0;
    for (size_t k = 0; k < n; k++)
        cap += 4 * strlen(items[k].key) / 3 + 8 + 16;
    if (st == LB_OK && (ranks = malloc(cap + 1)) == NULL)
        st = lb_fail(err, LB_ERR_NOMEM, "out of memory reading %s", name);
    size_t pos = 0;
    for (size_t k = 0; k < n && st == LB_OK; k++) {
        if (items[k].added) continue;
        uint8_t bytes[768];
        int nb = vocab_bytes(items[k].key, bytes, (int)sizeof bytes);
        if (nb <= 0) {
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s: model.vocab[\"%s\"] is not written in the byte-level alphabet", name,
                         items[k].key);
            break;
        }
        pos += b64_encode(bytes, (size_t)nb, ranks + pos);
        pos += (size_t)sprintf(ranks + pos, " %u\n", items[k].id);
    }
    if (st == LB_OK) {
        tp.special = LB_TOK_SPECIAL_LIST;
        tp.special_texts = sp_text;
        tp.special_ids = sp_id;
        tp.special_flags = sp_flag;
        tp.special_match = sp_match;
        tp.n_special_list = ns;
        st = lb_tokenizer_parse(out, ranks, pos, name, &tp, err);
        if (st != LB_OK) st = LB_ERR_USAGE;
    }
    free(ranks);
    free(items);
    free(sp_text);
    free(sp_id);
    free(sp_flag);
    free(sp_match);
    json_decref(root);
    return st;
}

lb_status lb_hf_tokenizer_load(lb_tokenizer **out, const char *path,
                               const lb_tokenizer_params *ranks_params, lb_err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    LB_TRY(lb_file_read(path, &buf, &n, err));
    const lb_tokenizer_params d = lb_tokenizer_default_params();
    const lb_tokenizer_params *tp = ranks_params ? ranks_params : &d;
    lb_status st;
    if (buf[strspn(buf, " \t\r\n")] == '{') {
        st = tp->pattern != d.pattern || tp->special != d.special
                 ? lb_fail(err, LB_ERR_USAGE,
                           "%s is a tokenizer.json, which names its own pre-split expression "
                           "and special tokens: a pattern or special-token set is for a ranks "
                           "file",
                           path)
                 : lb_hf_tokenizer_parse(out, buf, n, path, err);
    } else {
        st = lb_tokenizer_parse(out, buf, n, path, tp, err);
        if (st != LB_OK) st = LB_ERR_USAGE;
    }
    free(buf);
    return st;
}

/* The bytes of the character at s[0..n) when it is whitespace to Python's str.strip()
 * (str.isspace(): ASCII \t..\r, \x1c..\x1f and space; U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), else 0. */
static size_t space_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] == ' ' || (u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x1f)) return 1;
    if (n >= 2 && u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    if ((u[0] & 0xf0) != 0xe0 || (u[1] & 0xc0) != 0x80 || (u[2] & 0xc0) != 0x80) return 0;
    uint32_t cp = (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
    bool ws = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
              cp == 0x202f || cp == 0x205f || cp == 0x3000;
    return ws ? 3 : 0;
}

/* Jinja's trim (Python's str.strip()) on s[0..*n): returns the first byte kept and sets *n
 * to the bytes kept. */
static const char *trim(const char *s, size_t *n) {
    size_t b = 0, e = *n, k;
    while (b < e && (k = space_len(s + b, e - b)) > 0)
        b += k;
    while (e > b) {
        size_t start = e - 1; /* the lead byte of the last character */
        while (start > b && e - start < 3 && ((unsigned char)s[start] & 0xc0) == 0x80)
            start--;
        if (space_len(s + start, e - start) != e - start) break;
        e = start;
    }
    *n = e - b;
    return s + b;
}

lb_status lb_hf_tokenizer_chat_llama3(const lb_chat_message *msgs, size_t n, char **text,
                                      size_t *len, lb_err *err) {
    static const char bot[] = "<|begin_of_text|>", sh[] = "<|start_header_id|>",
                      eh[] = "<|end_header_id|>\n\n", eot[] = "<|eot_id|>";
    size_t cap = sizeof bot + sizeof sh + sizeof eh + 16;
    for (size_t i = 0; i < n; i++)
        cap += sizeof sh + sizeof eh + sizeof eot + strlen(msgs[i].role) + msgs[i].content_len;
    char *s = malloc(cap);
    if (s == NULL) return lb_fail(err, LB_ERR_NOMEM, "out of memory for a chat prompt");
    size_t o = (size_t)sprintf(s, "%s", bot);
    for (size_t i = 0; i < n; i++) {
        o += (size_t)sprintf(s + o, "%s%s%s", sh, msgs[i].role, eh);
        size_t n_content = msgs[i].content_len;
        const char *content = trim(msgs[i].content, &n_content);
        memcpy(s + o, content, n_content);
        o += n_content;
        o += (size_t)sprintf(s + o, "%s", eot);
    }
    o += (size_t)sprintf(s + o, "%sassistant%s", sh, eh);
    *text = s;
    *len = o;
    return LB_OK;
}
