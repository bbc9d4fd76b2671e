/* rouge.h: ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum as MLPerf scores Llama-3.1-8B on
 * CNN/DailyMail (rouge_score 0.1.2, use_stemmer=True, mean F-measure x 100).
 *
 * Tokens follow rouge_score: Python's lower(), every run of characters outside [a-z0-9] is
 * one separator, tokens longer than 3 characters go through the Porter stemmer
 * (accuracy/stem.h). ROUGE-N counts n-grams and clips the overlap; ROUGE-L is the longest
 * common subsequence of the two token lists; ROUGE-Lsum is the summary-level union LCS
 * over newline-separated sentences with rouge_score's guard against counting a token more
 * often than it occurs (and its choice among equally long LCSs, which changes the union).
 *
 * MLPerf's evaluation.py first strips each text and puts every sentence on its own line
 * with NLTK's Punkt model (nltk.sent_tokenize). llmbench has no Punkt model; with
 * mlperf_postprocess on, a rule-based splitter stands in for it (see rouge.c and
 * docs/ACCURACY.md): it only changes ROUGE-Lsum and, by whitespace collapsed at
 * sentence ends, gen_len. ROUGE-1/2/L do not see line breaks, so they match exactly.
 *
 * What this module does not do: read files (cli/cmd_rouge.c does), bootstrap confidence
 * intervals (MLPerf reports the plain mean), multiple references per prediction.
 *
 * Thread safety: lb_rouge_score_pair keeps no state and may run on many threads at once;
 * an accumulator belongs to one thread at a time. */
#ifndef LB_ACCURACY_ROUGE_H
#define LB_ACCURACY_ROUGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "core/status.h"

typedef enum {
    LB_ROUGE_1 = 0,
    LB_ROUGE_2,
    LB_ROUGE_L,
    LB_ROUGE_LSUM,
    LB_ROUGE_N_TYPES,
} lb_rouge_type;

/* "rouge1", "rouge2", "rougeL", "rougeLsum" (rouge_score's and MLPerf's keys). */
const char *lb_rouge_type_name(lb_rouge_type type);

typedef struct {
    double precision; /* fraction in [0,1]: overlap / prediction size */
    double recall;    /* fraction in [0,1]: overlap / reference size */
    double f;         /* 2PR/(P+R), 0 when P+R = 0 */
} lb_rouge_prf;

typedef struct {
    lb_rouge_prf s[LB_ROUGE_N_TYPES]; /* indexed by lb_rouge_type */
    int64_t pred_chars;               /* characters (code points) of the scored prediction */
} lb_rouge_scores;

typedef struct {
    bool use_stemmer;        /* Porter stemmer on tokens longer than 3 chars (default true) */
    bool mlperf_postprocess; /* strip both texts and put each sentence on its own line, as
                                MLPerf's evaluation.py does (default true); off: the texts
                                are scored as given, "\n" separating ROUGE-Lsum sentences */
} lb_rouge_params;

lb_rouge_params lb_rouge_default_params(void);

/* Scores one prediction against its reference (both NUL-terminated UTF-8; invalid bytes
 * count as separators and as one character each). Fails only with LB_ERR_NOMEM. */
lb_status lb_rouge_score_pair(const lb_rouge_params *params, const char *pred, const char *ref,
                              lb_rouge_scores *out, lb_err *err);

/* The aggregate over a data set, as MLPerf prints it. */
typedef struct {
    int64_t gen_num;                /* samples added */
    int64_t gen_len;                /* characters (code points) of all scored predictions */
    double score[LB_ROUGE_N_TYPES]; /* mean F-measure x 100 over samples, summed as np.mean
                                       sums (pairwise, in 8192-value blocks); 0 when empty */
} lb_rouge_summary;

/* Accumulates per-sample scores. Owns its arrays; lb_rouge_acc_free releases them. */
typedef struct {
    lb_rouge_params params;
    double *f[LB_ROUGE_N_TYPES]; /* per-sample F-measures (fractions), n of each */
    size_t n, cap;
    int64_t gen_len; /* characters */
} lb_rouge_acc;

void lb_rouge_acc_init(lb_rouge_acc *acc, const lb_rouge_params *params);
void lb_rouge_acc_free(lb_rouge_acc *acc);
/* Scores the pair and keeps its F-measures; *out (may be NULL) receives the pair's scores. */
lb_status lb_rouge_acc_add(lb_rouge_acc *acc, const char *pred, const char *ref,
                           lb_rouge_scores *out, lb_err *err);
lb_rouge_summary lb_rouge_acc_finish(const lb_rouge_acc *acc);

/* Pass/fail limits: every score at least score_min, gen_len within [gen_len_min,
 * gen_len_max]. */
typedef struct {
    double score_min[LB_ROUGE_N_TYPES]; /* x 100, like lb_rouge_summary.score */
    double gen_len_min, gen_len_max;    /* characters */
} lb_rouge_targets;

/* MLPerf's llama3.1-8b targets: 99% of rouge1 38.7792, rouge2 15.9075, rougeL 24.4957,
 * rougeLsum 35.793, and gen_len within 90-110% of 8,167,644 (the full 13,368 samples). */
lb_rouge_targets lb_rouge_targets_mlperf_llama31_8b(void);

typedef struct {
    bool pass; /* all of the below */
    bool score_ok[LB_ROUGE_N_TYPES];
    bool gen_len_ok;
} lb_rouge_verdict;

/* score rounded to 4 decimals as evaluation.py prints it: round(np.mean(v) * 100, 4) on a
 * numpy float64, numpy's scaled round-half-to-even, not Python's round of a float. */
double lb_rouge_round(double score);

/* Compares the scores rounded by lb_rouge_round with targets. */
lb_rouge_verdict lb_rouge_check(const lb_rouge_summary *summary, const lb_rouge_targets *targets);

/* Adds the metrics rouge1, rouge2, rougeL, rougeLsum (unit "score"), gen_len ("chars"),
 * gen_num ("samples") and, when targets is not NULL, rouge_pass (1 or 0) to r; with
 * per_sample also the series rouge1_f ... rougeLsum_f of per-sample F-measures. */
lb_status lb_rouge_add_to_result(const lb_rouge_acc *acc, const lb_rouge_targets *targets,
                                 bool per_sample, lb_result *r);

#endif
