/* stem.c: Porter's suffix stripper with NLTK's extensions (see stem.h for the list).
 *
 * The word lives in one buffer whose length k only changes at the end: every rule looks
 * at a suffix, tests a condition on the part before it (the "stem" of the rule) and
 * rewrites the tail. Because a letter's consonant/vowel class depends only on the letters
 * before it, conditions are computed on the prefix directly, with no copies. A rule table
 * is scanned in order and the first suffix that matches decides: if its condition fails
 * the word is left as it is (later rules are not tried), which is how NLTK applies its
 * rule lists. Nothing here allocates. */
#include "accuracy/stem.h"

#include <stdbool.h>
#include <string.h>

typedef struct {
    char *b;  /* the word being stemmed, b[0..k) */
    size_t k; /* current length */
} word;

static bool is_vowel_letter(char c) {
    return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
}

/* Consonant test for b[i]: 'y' is a consonant at the start and after a vowel, a vowel after
 * a consonant, so a run of y's alternates from the letter that precedes the run. */
static bool consonant_at(const char *b, size_t i) {
    if (is_vowel_letter(b[i])) return false;
    if (b[i] != 'y') return true;
    size_t first_y = i;
    while (first_y > 0 && b[first_y - 1] == 'y')
        first_y--;
    /* class of b[first_y]: consonant when it opens the word or follows a vowel */
    bool first_is_consonant = first_y == 0 || is_vowel_letter(b[first_y - 1]);
    bool even_distance = ((i - first_y) % 2) == 0;
    return first_is_consonant == even_distance;
}

/* m in [C](VC){m}[V] for b[0..n): the number of vowel-to-consonant transitions. */
static int measure(const char *b, size_t n) {
    int m = 0;
    bool prev_consonant = true; /* nothing before the word counts as a consonant run */
    for (size_t i = 0; i < n; i++) {
        bool c;
        if (is_vowel_letter(b[i]))
            c = false;
        else if (b[i] == 'y')
            c = i == 0 ? true : !prev_consonant;
        else
            c = true;
        if (c && !prev_consonant) m++;
        prev_consonant = c;
    }
    return m;
}

static bool has_vowel(const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!consonant_at(b, i)) return true;
    return false;
}

/* *d: ends in two equal consonants. */
static bool ends_double_consonant(const char *b, size_t n) {
    return n >= 2 && b[n - 1] == b[n - 2] && consonant_at(b, n - 1);
}

/* *o: consonant-vowel-consonant with the last not w, x or y; NLTK also accepts a whole
 * two-letter stem vowel-consonant (any consonant). */
static bool ends_cvc(const char *b, size_t n) {
    if (n >= 3 && consonant_at(b, n - 3) && !consonant_at(b, n - 2) && consonant_at(b, n - 1) &&
        b[n - 1] != 'w' && b[n - 1] != 'x' && b[n - 1] != 'y')
        return true;
    return n == 2 && !consonant_at(b, 0) && consonant_at(b, 1);
}

/* The last letter is compared first: most suffixes fail there. */
static bool ends_with(const word *w, const char *suffix, size_t len) {
    return w->k >= len && w->b[w->k - 1] == suffix[len - 1] &&
           memcmp(w->b + w->k - len, suffix, len - 1) == 0;
}

/* Replaces the last cut bytes with rep[0..n) (never longer than what it replaces plus
 * the room a shortened word already has). */
static void set_tail(word *w, size_t cut, const char *rep, size_t n) {
    memcpy(w->b + w->k - cut, rep, n);
    w->k = w->k - cut + n;
}

typedef enum {
    COND_M_GT0, /* m(stem) > 0 */
    COND_M_GT1, /* m(stem) > 1 */
    COND_ION,   /* m(stem) > 1 and the stem ends in s or t */
    COND_LOGI,  /* m(stem + "l") > 0: the l of -logi counts as part of the stem */
} rule_cond;

typedef struct {
    const char *suffix;
    size_t suffix_len;
    const char *rep;
    size_t rep_len;
    rule_cond cond;
} rule;

#define RULE(suffix, rep, cond)                                                                    \
    { suffix, sizeof suffix - 1, rep, sizeof rep - 1, cond }

static bool cond_holds(const word *w, size_t stem_len, rule_cond cond) {
    switch (cond) {
    case COND_M_GT0: return measure(w->b, stem_len) > 0;
    case COND_M_GT1: return measure(w->b, stem_len) > 1;
    case COND_ION:
        return measure(w->b, stem_len) > 1 &&
               (w->b[stem_len - 1] == 's' || w->b[stem_len - 1] == 't');
    case COND_LOGI: return measure(w->b, stem_len + 1) > 0;
    }
    return false;
}

/* The first rule whose suffix matches decides; returns whether one matched. */
static bool apply_rules(word *w, const rule *rules, size_t n_rules) {
    for (size_t i = 0; i < n_rules; i++) {
        const rule *r = &rules[i];
        if (!ends_with(w, r->suffix, r->suffix_len)) continue;
        if (cond_holds(w, w->k - r->suffix_len, r->cond))
            set_tail(w, r->suffix_len, r->rep, r->rep_len);
        return true;
    }
    return false;
}

/* Plural endings. */
static void step1a(word *w) {
    if (w->k == 4 && ends_with(w, "ies", 3)) { /* ties -> tie, but ponies -> poni */
        w->k = 3;
        return;
    }
    if (ends_with(w, "sses", 4))
        w->k -= 2;
    else if (ends_with(w, "ies", 3))
        w->k -= 2;
    else if (ends_with(w, "ss", 2))
        return;
    else if (ends_with(w, "s", 1))
        w->k -= 1;
}

/* -eed, -ed, -ing, and the repairs after removing -ed or -ing. */
static void step1b(word *w) {
    if (ends_with(w, "ied", 3)) { /* died -> die, spied -> spi */
        w->k -= w->k == 4 ? 1 : 2;
        return;
    }
    if (ends_with(w, "eed", 3)) {
        if (measure(w->b, w->k - 3) > 0) w->k -= 1;
        return;
    }
    size_t cut = 0;
    if (ends_with(w, "ed", 2) && has_vowel(w->b, w->k - 2))
        cut = 2;
    else if (ends_with(w, "ing", 3) && has_vowel(w->b, w->k - 3))
        cut = 3;
    if (cut == 0) return;
    w->k -= cut;
    if (ends_with(w, "at", 2) || ends_with(w, "bl", 2) || ends_with(w, "iz", 2)) {
        w->b[w->k++] = 'e';
    } else if (ends_double_consonant(w->b, w->k)) {
        char last = w->b[w->k - 1];
        if (last != 'l' && last != 's' && last != 'z') w->k -= 1;
    } else if (measure(w->b, w->k) == 1 && ends_cvc(w->b, w->k)) {
        w->b[w->k++] = 'e';
    }
}

/* y -> i after a consonant that is not the word's only letter before the y. */
static void step1c(word *w) {
    if (ends_with(w, "y", 1) && w->k - 1 > 1 && consonant_at(w->b, w->k - 2)) w->b[w->k - 1] = 'i';
}

static void step2(word *w) {
    /* -alli first, and the result goes through this step again */
    if (ends_with(w, "alli", 4) && measure(w->b, w->k - 4) > 0) {
        w->k -= 2;
        step2(w);
        return;
    }
    static const rule rules[] = {
        RULE("ational", "ate", COND_M_GT0), RULE("tional", "tion", COND_M_GT0),
        RULE("enci", "ence", COND_M_GT0),   RULE("anci", "ance", COND_M_GT0),
        RULE("izer", "ize", COND_M_GT0),    RULE("bli", "ble", COND_M_GT0),
        RULE("alli", "al", COND_M_GT0),     RULE("entli", "ent", COND_M_GT0),
        RULE("eli", "e", COND_M_GT0),       RULE("ousli", "ous", COND_M_GT0),
        RULE("ization", "ize", COND_M_GT0), RULE("ation", "ate", COND_M_GT0),
        RULE("ator", "ate", COND_M_GT0),    RULE("alism", "al", COND_M_GT0),
        RULE("iveness", "ive", COND_M_GT0), RULE("fulness", "ful", COND_M_GT0),
        RULE("ousness", "ous", COND_M_GT0), RULE("aliti", "al", COND_M_GT0),
        RULE("iviti", "ive", COND_M_GT0),   RULE("biliti", "ble", COND_M_GT0),
        RULE("fulli", "ful", COND_M_GT0),   RULE("logi", "log", COND_LOGI),
    };
    apply_rules(w, rules, sizeof rules / sizeof rules[0]);
}

static void step3(word *w) {
    static const rule rules[] = {
        RULE("icate", "ic", COND_M_GT0), RULE("ative", "", COND_M_GT0),
        RULE("alize", "al", COND_M_GT0), RULE("iciti", "ic", COND_M_GT0),
        RULE("ical", "ic", COND_M_GT0),  RULE("ful", "", COND_M_GT0),
        RULE("ness", "", COND_M_GT0),
    };
    apply_rules(w, rules, sizeof rules / sizeof rules[0]);
}

static void step4(word *w) {
    static const rule rules[] = {
        RULE("al", "", COND_M_GT1),   RULE("ance", "", COND_M_GT1), RULE("ence", "", COND_M_GT1),
        RULE("er", "", COND_M_GT1),   RULE("ic", "", COND_M_GT1),   RULE("able", "", COND_M_GT1),
        RULE("ible", "", COND_M_GT1), RULE("ant", "", COND_M_GT1),  RULE("ement", "", COND_M_GT1),
        RULE("ment", "", COND_M_GT1), RULE("ent", "", COND_M_GT1),  RULE("ion", "", COND_ION),
        RULE("ou", "", COND_M_GT1),   RULE("ism", "", COND_M_GT1),  RULE("ate", "", COND_M_GT1),
        RULE("iti", "", COND_M_GT1),  RULE("ous", "", COND_M_GT1),  RULE("ive", "", COND_M_GT1),
        RULE("ize", "", COND_M_GT1),
    };
    apply_rules(w, rules, sizeof rules / sizeof rules[0]);
}

/* A final e goes when m > 1, or when m = 1 and the rest does not end consonant-vowel-
 * consonant (both conditions are tried, unlike a rule list). */
static void step5a(word *w) {
    if (!ends_with(w, "e", 1)) return;
    int m = measure(w->b, w->k - 1);
    if (m > 1 || (m == 1 && !ends_cvc(w->b, w->k - 1))) w->k -= 1;
}

/* -ll -> -l when m > 1, measured on the word less its last letter. */
static void step5b(word *w) {
    if (ends_with(w, "ll", 2) && measure(w->b, w->k - 1) > 1) w->k -= 1;
}

typedef struct {
    const char *form;
    size_t form_len;
    const char *stem;
} irregular;

#define IRREGULAR(form, stem)                                                                      \
    { form, sizeof form - 1, stem }

/* NLTK's pool: forms the rules get wrong, with the stem to use instead. */
static const irregular irregular_forms[] = {
    IRREGULAR("sky", "sky"),          IRREGULAR("skies", "sky"),
    IRREGULAR("dying", "die"),        IRREGULAR("lying", "lie"),
    IRREGULAR("tying", "tie"),        IRREGULAR("news", "news"),
    IRREGULAR("innings", "inning"),   IRREGULAR("inning", "inning"),
    IRREGULAR("outings", "outing"),   IRREGULAR("outing", "outing"),
    IRREGULAR("cannings", "canning"), IRREGULAR("canning", "canning"),
    IRREGULAR("howe", "howe"),        IRREGULAR("proceed", "proceed"),
    IRREGULAR("exceed", "exceed"),    IRREGULAR("succeed", "succeed"),
};

size_t lb_stem_word(const char *in, size_t len, char *out) {
    for (size_t i = 0; i < sizeof irregular_forms / sizeof irregular_forms[0]; i++) {
        const irregular *f = &irregular_forms[i];
        if (f->form_len == len && f->form[0] == in[0] && memcmp(f->form, in, len) == 0) {
            size_t n = strlen(f->stem); /* never longer than the form */
            memmove(out, f->stem, n);
            out[n] = '\0';
            return n;
        }
    }
    memmove(out, in, len);
    word w = {out, len};
    if (len > 2) {
        step1a(&w);
        step1b(&w);
        step1c(&w);
        step2(&w);
        step3(&w);
        step4(&w);
        step5a(&w);
        step5b(&w);
    }
    out[w.k] = '\0';
    return w.k;
}
