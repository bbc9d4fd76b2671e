/* cmd_rouge.c: `llmbench rouge --pred FILE --ref FILE`: MLPerf's llama3.1-8b accuracy
 * figures for a file of generated summaries.
 *
 * Reads both files (accuracy/textfile.h: JSON Lines, a JSON array, or one text per line),
 * scores record i of --pred against record i of --ref as MLPerf's evaluation.py does
 * (accuracy/rouge.h), and prints rouge1, rouge2, rougeL, rougeLsum, gen_len, gen_num and
 * the verdict against MLPerf's targets, as a table or as one JSON document. Exit codes:
 * 2 for bad usage or a malformed file (one line naming the file, line and fault), 1 when
 * --check is given and a target is missed, 0 otherwise. Nothing is stored: scoring a file
 * is a calculation, not a run. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "accuracy/rouge.h"
#include "accuracy/textfile.h"
#include "cli/args.h"
#include "cli/commands.h"

#define MLPERF_SAMPLES 13368

static void print_table(const char *pred_path, const lb_rouge_summary *s, const lb_rouge_targets *t,
                        const lb_rouge_verdict *v) {
    printf("ROUGE of %" PRId64 " predictions (%s)\n", s->gen_num, pred_path);
    printf("  %-10s %14s   %-28s %s\n", "metric", "value", "MLPerf llama3.1-8b target", "check");
    for (int i = 0; i < LB_ROUGE_N_TYPES; i++) {
        char target[40];
        snprintf(target, sizeof target, ">= %.10g", t->score_min[i]);
        printf("  %-10s %14.4f   %-28s %s\n", lb_rouge_type_name((lb_rouge_type)i),
               lb_rouge_round(s->score[i]), target, v->score_ok[i] ? "ok" : "FAIL");
    }
    char range[40];
    snprintf(range, sizeof range, "%.0f .. %.0f", t->gen_len_min, t->gen_len_max);
    printf("  %-10s %14" PRId64 "   %-28s %s\n", "gen_len", s->gen_len, range,
           v->gen_len_ok ? "ok" : "FAIL");
    printf("  %-10s %14" PRId64 "\n", "gen_num", s->gen_num);
    printf("MLPerf llama3.1-8b accuracy: %s\n", v->pass ? "PASS" : "FAIL");
    if (s->gen_num != MLPERF_SAMPLES)
        printf("note: the targets are for the full data set of %d samples; this file has "
               "%" PRId64 "\n",
               MLPERF_SAMPLES, s->gen_num);
}

static void print_json(const lb_rouge_params *p, const lb_rouge_summary *s,
                       const lb_rouge_targets *t, const lb_rouge_verdict *v) {
    json_t *doc = json_object(), *targets = json_object(), *checks = json_object();
    for (int i = 0; i < LB_ROUGE_N_TYPES; i++) {
        const char *name = lb_rouge_type_name((lb_rouge_type)i);
        json_object_set_new(doc, name, json_real(s->score[i]));
        json_object_set_new(targets, name, json_real(t->score_min[i]));
        json_object_set_new(checks, name, json_boolean(v->score_ok[i]));
    }
    json_object_set_new(doc, "gen_len", json_integer(s->gen_len));
    json_object_set_new(doc, "gen_num", json_integer(s->gen_num));
    json_object_set_new(targets, "gen_len_min", json_real(t->gen_len_min));
    json_object_set_new(targets, "gen_len_max", json_real(t->gen_len_max));
    json_object_set_new(checks, "gen_len", json_boolean(v->gen_len_ok));
    json_object_set_new(doc, "targets", targets);
    json_object_set_new(doc, "checks", checks);
    json_object_set_new(doc, "pass", json_boolean(v->pass));
    json_object_set_new(doc, "use_stemmer", json_boolean(p->use_stemmer));
    json_object_set_new(doc, "sentence_split",
                        json_string(p->mlperf_postprocess ? "rule-based (MLPerf uses Punkt)"
                                                          : "none (lines as given)"));
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    printf("\n");
    json_decref(doc);
}

int lb_cmd_rouge(int argc, char **argv) {
    const char *pred_path = NULL, *ref_path = NULL;
    bool no_stemmer = false, no_split = false, check = false;
    const lb_arg_spec specs[] = {
        {"--pred", LB_ARG_STRING, &pred_path, "FILE",
         "generated texts: JSONL (string, or object with prediction/text/output), a JSON "
         "array, or one text per line (required)",
         0, 0, NULL},
        {"--ref", LB_ARG_STRING, &ref_path, "FILE",
         "reference texts, same layouts (object fields reference/text/output; MLPerf's "
         "cnn_eval.json works) (required)",
         0, 0, NULL},
        {"--no-stemmer", LB_ARG_FLAG, &no_stemmer, NULL,
         "compare words unstemmed (MLPerf stems: use_stemmer=True)", 0, 0, NULL},
        {"--no-split", LB_ARG_FLAG, &no_split, NULL,
         "score the texts as given, without MLPerf's strip and sentence-per-line "
         "postprocessing (rougeLsum then splits only at line breaks already there)",
         0, 0, NULL},
        {"--check", LB_ARG_FLAG, &check, NULL,
         "exit 1 when MLPerf's llama3.1-8b accuracy targets are not met (MLPerf's scoring: not "
         "with --no-stemmer or --no-split)",
         0, 0, NULL},
    };
    const lb_cli_command cmd = {
        .command = "rouge",
        .usage = "--pred FILE --ref FILE [options]",
        .summary = "Scores generated summaries against references as MLPerf's llama3.1-8b "
                   "evaluation does: rouge1, rouge2, rougeL, rougeLsum (mean F-measure x 100, "
                   "rouge_score 0.1.2 with the Porter stemmer), gen_len (characters) and "
                   "gen_num, and checks them against MLPerf's targets. Record i of --pred is "
                   "scored against record i of --ref.",
        LB_ARG_SPECS(specs),
    };
    lb_args a;
    int rc = lb_args_parse(&cmd, argc, argv, &a);
    if (rc != LB_ARGS_GO_ON) return rc;
    if (pred_path == NULL || ref_path == NULL)
        return lb_status_exit_code(
            lb_args_usage_error("rouge", "both --pred FILE and --ref FILE are required"));
    if (check && (no_stemmer || no_split)) /* MLPerf's targets are for its own scoring */
        return lb_status_exit_code(lb_args_usage_error(
            "rouge", "--check judges MLPerf's scoring, which stems and splits sentences: drop %s",
            no_stemmer ? "--no-stemmer" : "--no-split"));

    /* A message may quote the file's bytes or a path's: a newline or an escape there would
     * break the one line. */
    lb_textfile preds, refs;
    lb_err err = {{0}};
    lb_status st = lb_textfile_read(pred_path, LB_TEXTFILE_PREDICTIONS, &preds, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench rouge: --pred: %s\n", lb_status_printable(err.msg));
        return lb_status_exit_code(st);
    }
    st = lb_textfile_read(ref_path, LB_TEXTFILE_REFERENCES, &refs, &err);
    if (st != LB_OK) {
        fprintf(stderr, "llmbench rouge: --ref: %s\n", lb_status_printable(err.msg));
        lb_textfile_free(&preds);
        return lb_status_exit_code(st);
    }
    int code = 0;
    if (preds.n != refs.n || preds.n == 0) {
        fprintf(stderr,
                "llmbench rouge: --pred %s has %zu texts and --ref %s has %zu; expected the same "
                "number, at least 1 (record i of --pred is scored against record i of --ref)\n",
                pred_path, preds.n, ref_path, refs.n);
        code = 2;
    }
    lb_rouge_params params = lb_rouge_default_params();
    params.use_stemmer = !no_stemmer;
    params.mlperf_postprocess = !no_split;
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &params);
    for (size_t i = 0; code == 0 && i < preds.n; i++) {
        st = lb_rouge_acc_add(&acc, preds.texts[i], refs.texts[i], NULL, &err);
        if (st != LB_OK) {
            fprintf(stderr, "llmbench rouge: record %zu: %s\n", i + 1, err.msg);
            code = lb_status_exit_code(st);
        }
    }
    if (code == 0) {
        lb_rouge_summary s = lb_rouge_acc_finish(&acc);
        lb_rouge_targets t = lb_rouge_targets_mlperf_llama31_8b();
        lb_rouge_verdict v = lb_rouge_check(&s, &t);
        if (a.common.json)
            print_json(&params, &s, &t, &v);
        else
            print_table(pred_path, &s, &t, &v);
        if (check && !v.pass) code = 1;
    }
    lb_rouge_acc_free(&acc);
    lb_textfile_free(&preds);
    lb_textfile_free(&refs);
    return code;
}
