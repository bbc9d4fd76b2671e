/* test_rouge_cli.c: `llmbench rouge`: the three file layouts give the library's scores,
 * and every malformed input is one line naming file, line and fault, with exit code 2. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "accuracy/rouge.h"
#include "accuracy/textfile.h"
#include "test_util.h"

static char out[1 << 16], err[1 << 16];
static char dir[64];

static const char *const refs[] = {
    "Police were investigating the shootings. Two men were arrested.",
    "The cat sat on the mat.",
    "Mr. Smith went to Washington. He left on Monday!",
};
static const char *const preds[] = {
    "Police investigated a shooting. Two men arrested.",
    "the cat was on the mat",
    "Smith went to Washington on Monday.",
};

static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(dir, sizeof dir);
    return dir[0] ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lb_test_rmtree(dir);
    return 0;
}

static const char *write_tmp(const char *name, const char *text) {
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    assert_true(lb_test_write_file(p, text));
    return p;
}

static int rouge(const char *pred, const char *ref, const char *extra) {
    const char *args[] = {"rouge", "--pred", pred, "--ref", ref, extra, NULL};
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static void expect_one_line_error(const char *needle) {
    if (strstr(err, needle) == NULL) fail_msg("stderr '%s' lacks '%s'", err, needle);
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));
}

/* The library's aggregate over the three pairs above. */
static lb_rouge_summary library_summary(void) {
    lb_rouge_params p = lb_rouge_default_params();
    lb_rouge_acc acc;
    lb_rouge_acc_init(&acc, &p);
    for (int i = 0; i < 3; i++)
        assert_int_equal(lb_rouge_acc_add(&acc, preds[i], refs[i], NULL, NULL), LB_OK);
    lb_rouge_summary s = lb_rouge_acc_finish(&acc);
    lb_rouge_acc_free(&acc);
    return s;
}

static void expect_json_matches_library(void) {
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    if (doc == NULL) fail_msg("not JSON: %s\n%s", je.text, out);
    lb_rouge_summary s = library_summary();
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
        double got = json_number_value(json_object_get(doc, lb_rouge_type_name((lb_rouge_type)t)));
        if (got != s.score[t])
            fail_msg("%s: %.17g, library %.17g", lb_rouge_type_name((lb_rouge_type)t), got,
                     s.score[t]);
    }
    assert_int_equal(json_integer_value(json_object_get(doc, "gen_num")), 3);
    assert_int_equal(json_integer_value(json_object_get(doc, "gen_len")), s.gen_len);
    assert_true(json_is_false(json_object_get(doc, "pass"))); /* gen_len is far too small */
    json_decref(doc);
}

static void test_rouge_cli_reads_lines_jsonl_and_json_alike(void **state) {
    (void)state;
    char lines_p[1024], lines_r[1024];
    snprintf(lines_p, sizeof lines_p, "%s\n%s\n%s\n", preds[0], preds[1], preds[2]);
    snprintf(lines_r, sizeof lines_r, "%s\r\n%s\r\n%s", refs[0], refs[1], refs[2]);
    assert_int_equal(rouge(write_tmp("p.txt", lines_p), write_tmp("r.txt", lines_r), "--json"), 0);
    expect_json_matches_library();

    /* JSONL: bare strings for predictions, objects (with a blank line) for references */
    char jl_p[1024], jl_r[1024];
    snprintf(jl_p, sizeof jl_p, "\"%s\"\n\"%s\"\n\"%s\"\n", preds[0], preds[1], preds[2]);
    snprintf(jl_r, sizeof jl_r,
             "{\"id\": 1, \"text\": \"%s\"}\n\n{\"reference\": \"%s\"}\n"
             "{\"output\": \"%s\"}\n",
             refs[0], refs[1], refs[2]);
    assert_int_equal(rouge(write_tmp("p.jsonl", jl_p), write_tmp("r.jsonl", jl_r), "--json"), 0);
    expect_json_matches_library();

    /* one combined JSONL file as both; a JSON array like MLPerf's cnn_eval.json */
    char both[2048], arr[1024];
    snprintf(both, sizeof both,
             "{\"prediction\": \"%s\", \"reference\": \"%s\"}\n"
             "{\"prediction\": \"%s\", \"reference\": \"%s\"}\n"
             "{\"prediction\": \"%s\", \"reference\": \"%s\"}\n",
             preds[0], refs[0], preds[1], refs[1], preds[2], refs[2]);
    snprintf(arr, sizeof arr,
             "[{\"input\": \"x\", \"output\": \"%s\"}, {\"output\": \"%s\"}, "
             "{\"output\": \"%s\"}]",
             refs[0], refs[1], refs[2]);
    const char *b = write_tmp("both.jsonl", both);
    assert_int_equal(rouge(b, b, "--json"), 0);
    expect_json_matches_library();
    assert_int_equal(rouge(b, write_tmp("cnn_eval.json", arr), "--json"), 0);
    expect_json_matches_library();
}

/* A UTF-8 byte order mark (Windows editors write one) is skipped: a JSONL file is still
 * JSONL, and the first text of a plain file does not start with U+FEFF. */
static void test_rouge_cli_skips_a_byte_order_mark(void **state) {
    (void)state;
    char jl_p[1024], lines_r[1024];
    snprintf(jl_p, sizeof jl_p,
             "\xEF\xBB\xBF{\"prediction\": \"%s\"}\n{\"prediction\": \"%s\"}\n"
             "{\"prediction\": \"%s\"}\n",
             preds[0], preds[1], preds[2]);
    snprintf(lines_r, sizeof lines_r, "\xEF\xBB\xBF%s\n%s\n%s\n", refs[0], refs[1], refs[2]);
    assert_int_equal(
        rouge(write_tmp("bom_p.jsonl", jl_p), write_tmp("bom_r.txt", lines_r), "--json"), 0);
    expect_json_matches_library();
    char lines_p[1024];
    snprintf(lines_p, sizeof lines_p, "\xEF\xBB\xBF%s\n%s\n%s\n", preds[0], preds[1], preds[2]);
    assert_int_equal(
        rouge(write_tmp("bom_p.txt", lines_p), write_tmp("bom_r.txt", lines_r), "--json"), 0);
    expect_json_matches_library(); /* gen_len counts no U+FEFF */
}

/* The oracle corpus (tools/rouge_oracle.py) read as both files: its mean F x 100. */
static void test_rouge_cli_matches_oracle_means(void **state) {
    (void)state;
    const char *path = LB_TEST_FIXTURES "/rouge/oracle.jsonl";
    const char *args[] = {"rouge", "--pred", path, "--ref", path, "--no-split", "--json", NULL};
    assert_int_equal(lb_test_run(args, out, sizeof out, err, sizeof err), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    char *buf = lb_test_read_file(path, NULL);
    assert_non_null(buf);
    double sum[LB_ROUGE_N_TYPES] = {0};
    int n = 0;
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"), n++) {
        json_t *rec = json_loads(line, 0, &je);
        assert_non_null(rec);
        for (int t = 0; t < LB_ROUGE_N_TYPES; t++)
            sum[t] += json_number_value(
                json_array_get(json_object_get(rec, lb_rouge_type_name((lb_rouge_type)t)), 2));
        json_decref(rec);
    }
    assert_int_equal(n, 300);
    assert_int_equal(json_integer_value(json_object_get(doc, "gen_num")), 300);
    for (int t = 0; t < LB_ROUGE_N_TYPES; t++) {
        double got = json_number_value(json_object_get(doc, lb_rouge_type_name((lb_rouge_type)t)));
        if (fabs(got - sum[t] / n * 100) > 1e-9)
            fail_msg("%s: %.12f, oracle %.12f", lb_rouge_type_name((lb_rouge_type)t), got,
                     sum[t] / n * 100);
    }
    json_decref(doc);
    free(buf);
}

static void test_rouge_cli_table_names_metrics_and_verdict(void **state) {
    (void)state;
    const char *p = write_tmp("same.txt", "The cat sat on the mat.\n");
    assert_int_equal(rouge(p, p, NULL), 0);
    assert_non_null(strstr(out, "rouge1"));
    assert_non_null(strstr(out, "100.0000"));
    assert_non_null(strstr(out, "rougeLsum"));
    assert_non_null(strstr(out, "gen_len"));
    assert_non_null(strstr(out, "accuracy: FAIL")); /* gen_len 23 of ~8.2 million */
    /* the limits as compared: a rouge1 printed as 38.3914 is below 38.391408 */
    assert_non_null(strstr(out, ">= 38.391408 "));
    assert_non_null(strstr(out, ">= 15.748425 "));
    assert_non_null(strstr(out, ">= 35.43507 "));
    assert_non_null(strstr(out, "7350880 .. 8984408"));
    assert_int_equal(rouge(p, p, "--check"), 1);
}

static void test_rouge_cli_count_mismatch_names_both_files(void **state) {
    (void)state;
    assert_int_equal(
        rouge(write_tmp("two.txt", "a\nb\n"), write_tmp("three.txt", "a\nb\nc\n"), NULL), 2);
    expect_one_line_error("two.txt has 2 texts and");
    expect_one_line_error("three.txt has 3");
}

static void test_rouge_cli_malformed_jsonl_names_file_and_line(void **state) {
    (void)state;
    const char *r = write_tmp("r3.txt", "a\nb\nc\n");
    assert_int_equal(rouge(write_tmp("bad.jsonl", "\"a\"\n\"b\"\n{\"text\": \"c\",\n"), r, NULL),
                     2);
    expect_one_line_error("bad.jsonl:3: not valid JSON");
    /* plain text whose first text opens with a quote: the message says why it is JSON */
    assert_int_equal(rouge(write_tmp("quote.txt", "\"Go,\" he said.\nb\nc\n"), r, NULL), 2);
    expect_one_line_error("quote.txt:1: not valid JSON");
    expect_one_line_error("starts with '{' or '\"' is JSON Lines");
    assert_int_equal(
        rouge(write_tmp("nofield.jsonl", "\"a\"\n{\"summary\": \"b\"}\n\"c\"\n"), r, NULL), 2);
    expect_one_line_error("nofield.jsonl:2: object has none of the fields \"prediction\"");
    assert_int_equal(rouge(write_tmp("num.jsonl", "{\"text\": 5}\n\"b\"\n\"c\"\n"), r, NULL), 2);
    expect_one_line_error("num.jsonl:1: field \"text\" is an integer, expected a string");
    assert_int_equal(rouge(write_tmp("arr.jsonl", "\"a\"\n[1]\n\"c\"\n"), r, NULL), 2);
    expect_one_line_error("arr.jsonl:2: a record must be a JSON string or object, got an array");
    assert_int_equal(rouge(r, write_tmp("arr.json", "[\"a\", 7, \"c\"]"), NULL), 2);
    expect_one_line_error("--ref: ");
    expect_one_line_error("arr.json: record 2 of the array: a record must be");
    /* jansson quotes the bytes it stopped at: an escape or a newline of the file is '?' */
    assert_int_equal(
        rouge(write_tmp("esc.jsonl", "{\"text\": \"a\"} \x1b[31m\n\"b\"\n\"c\"\n"), r, NULL), 2);
    expect_one_line_error("esc.jsonl:1: not valid JSON");
    assert_null(strchr(err, '\x1b'));
    char nl_path[160];
    snprintf(nl_path, sizeof nl_path, "%s/no\nsuch.txt", dir);
    assert_int_equal(rouge(r, nl_path, NULL), 2);
    expect_one_line_error("--ref: cannot read");
    expect_one_line_error("no?such.txt");
}

static void test_rouge_cli_invalid_utf8_names_line(void **state) {
    (void)state;
    const char *r = write_tmp("r2.txt", "a\nb\n");
    assert_int_equal(rouge(write_tmp("latin1.txt", "ok\ncaf\xe9\n"), r, NULL), 2);
    expect_one_line_error("latin1.txt:2: invalid UTF-8 at byte 4");
}

/* A JSON Lines line of NUL bytes (a file cut short by a crash) is refused, not skipped as
 * blank, and so is a NUL after a record. */
static void test_rouge_cli_nul_bytes_in_json_lines_are_refused(void **state) {
    (void)state;
    static const char nul_line[] = "\"a\"\n\0\0\n\"b\"\n";
    lb_textfile f;
    lb_err e = {{0}};
    assert_int_equal(lb_textfile_parse(nul_line, sizeof nul_line - 1, "cut.jsonl",
                                       LB_TEXTFILE_PREDICTIONS, &f, &e),
                     LB_ERR_USAGE);
    assert_string_equal(e.msg, "cut.jsonl:2: NUL byte at byte 1 of the line (texts must be UTF-8)");
    assert_int_equal(f.n, 0);
    static const char nul_after[] = "{\"text\": \"a\"}\0\n";
    assert_int_equal(lb_textfile_parse(nul_after, sizeof nul_after - 1, "tail.jsonl",
                                       LB_TEXTFILE_REFERENCES, &f, &e),
                     LB_ERR_USAGE);
    assert_string_equal(e.msg,
                        "tail.jsonl:1: NUL byte at byte 14 of the line (texts must be UTF-8)");
    static const char blank[] = "\"a\"\n \t\r\n\"b\"\n";
    assert_int_equal(
        lb_textfile_parse(blank, sizeof blank - 1, "blank.jsonl", LB_TEXTFILE_PREDICTIONS, &f, &e),
        LB_OK);
    assert_int_equal(f.n, 2);
    lb_textfile_free(&f);
}

static void test_rouge_cli_usage_errors_exit_2(void **state) {
    (void)state;
    const char *args[] = {"rouge", "--pred", "x.txt", NULL};
    assert_int_equal(lb_test_run(args, out, sizeof out, err, sizeof err), 2);
    expect_one_line_error("both --pred FILE and --ref FILE are required");
    const char *other[] = {"rouge", "--pred",  "x.txt",      "--ref",
                           "x.txt", "--check", "--no-split", NULL};
    assert_int_equal(lb_test_run(other, out, sizeof out, err, sizeof err), 2);
    expect_one_line_error("--check judges MLPerf's scoring, which stems and splits sentences: "
                          "drop --no-split");
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    assert_int_equal(rouge(missing, missing, NULL), 2);
    expect_one_line_error("--pred: cannot read");
    expect_one_line_error("missing.txt");
    /* the option says which file it is, though both are named alike */
    assert_int_equal(rouge(write_tmp("one.txt", "a\n"), missing, NULL), 2);
    expect_one_line_error("--ref: cannot read");
    const char *empty = write_tmp("empty.txt", "");
    assert_int_equal(rouge(empty, empty, NULL), 2);
    expect_one_line_error("has 0 texts");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rouge_cli_reads_lines_jsonl_and_json_alike),
        cmocka_unit_test(test_rouge_cli_skips_a_byte_order_mark),
        cmocka_unit_test(test_rouge_cli_matches_oracle_means),
        cmocka_unit_test(test_rouge_cli_table_names_metrics_and_verdict),
        cmocka_unit_test(test_rouge_cli_count_mismatch_names_both_files),
        cmocka_unit_test(test_rouge_cli_malformed_jsonl_names_file_and_line),
        cmocka_unit_test(test_rouge_cli_invalid_utf8_names_line),
        cmocka_unit_test(test_rouge_cli_nul_bytes_in_json_lines_are_refused),
        cmocka_unit_test(test_rouge_cli_usage_errors_exit_2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
