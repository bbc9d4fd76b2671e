/* fuzz_rouge.c: the ROUGE scorer (accuracy/rouge.h) and MLPerf's sentence splitting
 * (accuracy/sentsplit.h) on arbitrary bytes.
 *
 * The input is a prediction and a reference separated by the first NUL byte (no NUL: the
 * two halves). Both are scored with and without MLPerf postprocessing, and the other way
 * round. Must hold: every precision, recall and F in [0, 1] with F = 2PR/(P+R); swapping
 * the texts swaps precision and recall for ROUGE-1, ROUGE-2 and ROUGE-L (n-gram overlap
 * and the LCS are symmetric); a text against itself scores F 1 or 0 (no token); the
 * prediction's character count is its UTF-8 length; the split text is no longer than
 * its input; the accumulator's means are the per-pair F-measures x 100. Inputs are capped
 * at 4 KB: LCS is quadratic and longer texts find nothing new. */
#include <math.h>
#include <string.h>

#include "accuracy/rouge.h"
#include "accuracy/sentsplit.h"
#include "accuracy/utf8.h"
#include "fuzz.h"

static void check_prf(const lb_rouge_prf *s) {
    FUZZ_CHECK(s->precision >= 0 && s->precision <= 1);
    FUZZ_CHECK(s->recall >= 0 && s->recall <= 1);
    FUZZ_CHECK(s->f >= 0 && s->f <= 1);
    double sum = s->precision + s->recall;
    double f = sum > 0 ? 2 * s->precision * s->recall / sum : 0;
    FUZZ_CHECK(fabs(s->f - f) <= 1e-12);
}

static void score(const lb_rouge_params *p, const char *a, const char *b, lb_rouge_scores *out) {
    lb_err err;
    FUZZ_CHECK(lb_rouge_score_pair(p, a, b, out, &err) == LB_OK);
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
        check_prf(&out->s[t]);
    FUZZ_CHECK(out->pred_chars >= 0 && out->pred_chars <= (int64_t)strlen(a));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 2);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = '\0';
    const char *pred = buf, *ref;
    size_t np = strlen(buf);
    if (np < size) {
        ref = buf + np + 1;
    } else { /* no NUL: split in half, keeping both halves NUL-terminated */
        np = size / 2;
        memmove(buf + np + 1, buf + np, size - np);
        buf[np] = '\0';
        ref = buf + np + 1;
    }

    for (int post = 0; post <= 1; post++) {
        lb_rouge_params p = lb_rouge_default_params();
        p.mlperf_postprocess = post;
        lb_rouge_scores ab, ba, aa;
        score(&p, pred, ref, &ab);
        score(&p, ref, pred, &ba);
        score(&p, pred, pred, &aa);
        for (int t = LB_ROUGE_1; t <= LB_ROUGE_L; t++) {
            FUZZ_CHECK(ab.s[t].precision == ba.s[t].recall);
            FUZZ_CHECK(ab.s[t].recall == ba.s[t].precision);
        }
        FUZZ_CHECK(aa.s[LB_ROUGE_1].f == 1.0 || aa.s[LB_ROUGE_1].f == 0.0);
        FUZZ_CHECK(aa.s[LB_ROUGE_L].f == aa.s[LB_ROUGE_1].f);
        FUZZ_CHECK(aa.s[LB_ROUGE_LSUM].f == aa.s[LB_ROUGE_1].f);
        if (!post) FUZZ_CHECK(ab.pred_chars == lb_utf8_count(pred, strlen(pred)));

        lb_rouge_acc acc;
        lb_rouge_acc_init(&acc, &p);
        lb_err err;
        FUZZ_CHECK(lb_rouge_acc_add(&acc, pred, ref, NULL, &err) == LB_OK);
        FUZZ_CHECK(lb_rouge_acc_add(&acc, ref, pred, NULL, &err) == LB_OK);
        lb_rouge_summary sum = lb_rouge_acc_finish(&acc);
        FUZZ_CHECK(sum.gen_num == 2 && sum.gen_len == ab.pred_chars + ba.pred_chars);
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
            FUZZ_CHECK(fabs(sum.score[t] - 50 * (ab.s[t].f + ba.s[t].f)) <= 1e-9);
        lb_rouge_acc_free(&acc);
    }

    size_t n = strlen(pred), out_len = 0;
    char *lines = lb_sentsplit_lines(pred, n, &out_len);
    FUZZ_CHECK(lines != NULL);
    FUZZ_CHECK(out_len <= n && lines[out_len] == '\0');
    free(lines);
    free(buf);
    return 0;
}
