/* test_dataset.c: dataset parsers on good and bad buffers, the synthetic generator and
 * file loading with format detection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loadgen/dataset.h"
#include "test_util.h"

static lb_status parse(lb_status (*fn)(const char *, size_t, const char *, lb_dataset *, lb_err *),
                       const char *text, lb_dataset *ds, lb_err *err) {
    return fn(text, strlen(text), "data.json", ds, err);
}

static void test_dataset_cnn_applies_mlperf_template(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    const char *text = "[{\"input\": \"A cat sat.\", \"tok_input\": [1, 2, 3, 4], "
                       "\"output\": \"Cat sits.\"}, {\"input\": \"Dog.\", \"output\": \"D\"}]";
    assert_int_equal(parse(lb_dataset_parse_cnn, text, &ds, &err), LB_OK);
    assert_int_equal(ds.n, 2);
    assert_string_equal(
        ds.samples[0].prompt,
        "Summarize the following news article in 128 tokens. Please output the "
        "summary only, without any other text.\n\nArticle:\nA cat sat.\n\nSummary:");
    assert_string_equal(ds.samples[0].reference, "Cat sits.");
    assert_int_equal(ds.samples[0].max_tokens, 128);
    assert_int_equal(ds.samples[0].input_tokens, 4);
    assert_int_equal(ds.samples[1].input_tokens, -1);
    assert_string_equal(ds.format, "cnn");
    lb_dataset_free(&ds);
}

static void test_dataset_cnn_bad_field_names_file_record_and_field(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    const char *text = "[{\"input\": \"ok\"}, {\"input\": 42}]";
    assert_int_equal(parse(lb_dataset_parse_cnn, text, &ds, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json"));
    assert_non_null(strstr(err.msg, "record 2"));
    assert_non_null(strstr(err.msg, "\"input\""));
    assert_non_null(strstr(err.msg, "an integer"));
    assert_int_equal(ds.n, 0);

    assert_int_equal(
        parse(lb_dataset_parse_cnn, "[{\"input\": \"x\", \"tok_input\": [1, \"a\"]}]", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tok_input"));
    /* an empty tok_input would count a prompt of 0 tokens */
    assert_int_equal(
        parse(lb_dataset_parse_cnn, "[{\"input\": \"x\", \"tok_input\": []}]", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "record 1: field \"tok_input\" must be a non-empty array"));
    assert_int_equal(parse(lb_dataset_parse_cnn, "{\"input\": \"x\"}", &ds, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "array"));
    assert_int_equal(parse(lb_dataset_parse_cnn, "[{\"input\": \"x\"", &ds, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not valid JSON"));
    assert_int_equal(parse(lb_dataset_parse_cnn, "[]", &ds, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "no usable records"));
}

/* tok_input holds token ids: a negative, fractional, too large or non-numeric one is
 * refused naming the file, the record, the element and the value, not counted as a token. */
static void test_dataset_cnn_tok_input_that_is_no_token_id_is_named(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"[{\"input\": \"a\", \"tok_input\": [1]}, {\"input\": \"b\", \"tok_input\": [7, -5]}]",
         "dataset data.json: record 2: field \"tok_input\" element 2 is -5: token ids are "
         "integers from 0 to 2147483647"},
        {"[{\"input\": \"a\", \"tok_input\": [1.5]}]",
         "record 1: field \"tok_input\" element 1 is 1.5: token ids"},
        {"[{\"input\": \"a\", \"tok_input\": [2147483648]}]", "element 1 is 2147483648:"},
        {"[{\"input\": \"a\", \"tok_input\": [1, \"a\"]}]", "element 2 is \"a\":"},
        {"[{\"input\": \"a\", \"tok_input\": "
         "[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]}]",
         "element 1 is \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...: token ids"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(parse(lb_dataset_parse_cnn, bad[i].text, &ds, &err), LB_ERR_FORMAT);
        if (strstr(err.msg, bad[i].msg) == NULL) fail_msg("'%s' lacks '%s'", err.msg, bad[i].msg);
        assert_null(strchr(err.msg, '\n'));
        assert_int_equal(ds.n, 0);
    }
    const char *ok = "[{\"input\": \"a\", \"tok_input\": [0, 2147483647, 3]}]";
    assert_int_equal(parse(lb_dataset_parse_cnn, ok, &ds, &err), LB_OK);
    assert_int_equal(ds.samples[0].input_tokens, 3);
    lb_dataset_free(&ds);
}

static void test_dataset_jsonl_reads_prompt_reference_and_max_tokens(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    const char *text = "{\"prompt\": \"hello\", \"reference\": \"hi\", \"max_tokens\": 7}\r\n"
                       "\n"
                       "  {\"prompt\": \"second\"}  \n";
    assert_int_equal(parse(lb_dataset_parse_jsonl, text, &ds, &err), LB_OK);
    assert_int_equal(ds.n, 2);
    assert_string_equal(ds.samples[0].prompt, "hello");
    assert_string_equal(ds.samples[0].reference, "hi");
    assert_int_equal(ds.samples[0].max_tokens, 7);
    assert_string_equal(ds.samples[1].prompt, "second");
    assert_null(ds.samples[1].reference);
    assert_int_equal(ds.samples[1].max_tokens, 0);
    lb_dataset_free(&ds);
}

static void test_dataset_jsonl_bad_line_is_named(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    assert_int_equal(
        parse(lb_dataset_parse_jsonl, "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "line 2"));
    assert_non_null(strstr(err.msg, "\"prompt\""));
    assert_int_equal(parse(lb_dataset_parse_jsonl, "{\"prompt\": \"a\"}\n{oops\n", &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "line 2: not valid JSON"));
    assert_int_equal(
        parse(lb_dataset_parse_jsonl, "{\"prompt\": \"a\", \"max_tokens\": 0}", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "max_tokens"));
    assert_int_equal(
        parse(lb_dataset_parse_jsonl, "{\"prompt\": \"a\", \"reference\": [1]}", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "reference"));
    /* an empty prompt is a request every server refuses: refused before the run */
    assert_int_equal(
        parse(lb_dataset_parse_jsonl, "{\"prompt\": \"a\"}\n{\"prompt\": \"\"}\n", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json: line 2: field \"prompt\" is empty"));
}

/* "\u0000" inside a text would silently cut the prompt short as a C string: refused, with
 * the file, record and field named. */
static void test_dataset_text_with_nul_is_refused_by_name(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    assert_int_equal(parse(lb_dataset_parse_jsonl,
                           "{\"prompt\": \"ok\"}\n{\"prompt\": \"Hi\\u0000there\"}\n", &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json"));
    assert_non_null(strstr(err.msg, "line 2"));
    assert_non_null(strstr(err.msg, "\"prompt\""));
    assert_non_null(strstr(err.msg, "NUL"));
    assert_int_equal(parse(lb_dataset_parse_jsonl,
                           "{\"prompt\": \"a\", \"reference\": \"b\\u0000\"}", &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"reference\""));
    assert_int_equal(parse(lb_dataset_parse_cnn,
                           "[{\"input\": \"a\"}, {\"input\": \"\\u0000b\", \"output\": \"c\"}]",
                           &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "record 2: field \"input\""));
    assert_int_equal(
        parse(lb_dataset_parse_cnn, "[{\"input\": \"a\", \"output\": \"c\\u0000\"}]", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "record 1: field \"output\""));
    assert_int_equal(parse(lb_dataset_parse_sharegpt,
                           "[{\"conversations\": [{\"from\": \"human\", \"value\": \"Q\"},"
                           " {\"from\": \"gpt\", \"value\": \"A\\u0000\"}]}]",
                           &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "record 1: turn 2: field \"value\""));
    assert_non_null(strstr(err.msg, "NUL"));
    /* A NUL-free text still parses. */
    assert_int_equal(parse(lb_dataset_parse_jsonl, "{\"prompt\": \"Hi\\u0001there\"}", &ds, &err),
                     LB_OK);
    assert_int_equal(strlen(ds.samples[0].prompt), 8);
    lb_dataset_free(&ds);
}

/* The third record is record 3 in every format, as the third JSONL line is line 3: the
 * JSON arrays counted their records (and ShareGPT its turns) from 0. */
static void test_dataset_errors_count_records_from_1_as_jsonl_lines(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    assert_int_equal(parse(lb_dataset_parse_jsonl,
                           "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": 3}\n", &ds,
                           &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json: line 3: field \"prompt\" must be a string"));
    assert_int_equal(
        parse(lb_dataset_parse_cnn, "[{\"input\": \"a\"}, {\"input\": \"b\"}, 3]", &ds, &err),
        LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json: record 3 must be an object, got an integer"));
    assert_int_equal(parse(lb_dataset_parse_sharegpt,
                           "[{\"conversations\": []}, {\"conversations\": []},"
                           " {\"conversations\": 3}]",
                           &ds, &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json: record 3: field \"conversations\""));
    assert_int_equal(parse(lb_dataset_parse_sharegpt_turns,
                           "[{\"conversations\": [{\"from\": \"human\", \"value\": 1}]}]", &ds,
                           &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "data.json: record 1: turn 1: field \"value\""));
}

static void test_dataset_sharegpt_takes_first_exchange_and_skips_short_ones(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    const char *text =
        "[{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"Q1\"},"
        " {\"from\": \"gpt\", \"value\": \"A1\"}, {\"from\": \"human\", \"value\": \"Q2\"}]},"
        " {\"id\": \"b\", \"conversations\": [{\"from\": \"human\", \"value\": \"alone\"}]},"
        " {\"id\": \"c\", \"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"},"
        " {\"from\": \"human\", \"value\": \"y\"}]},"
        " {\"id\": \"d\", \"conversations\": [{\"from\": \"human\", \"value\": \"\"},"
        " {\"from\": \"gpt\", \"value\": \"an answer to nothing\"}]}]";
    assert_int_equal(parse(lb_dataset_parse_sharegpt, text, &ds, &err), LB_OK);
    assert_int_equal(ds.n, 1);
    assert_int_equal(ds.skipped, 3); /* b and c lack an exchange, d's prompt is empty */
    assert_string_equal(ds.samples[0].prompt, "Q1");
    assert_string_equal(ds.samples[0].reference, "A1");
    lb_dataset_free(&ds);

    assert_int_equal(parse(lb_dataset_parse_sharegpt,
                           "[{\"conversations\": [{\"from\": \"human\", \"value\": 3}]}]", &ds,
                           &err),
                     LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "record 1: turn 1"));
    assert_int_equal(parse(lb_dataset_parse_sharegpt, "[{\"id\": 1}]", &ds, &err), LB_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "conversations"));
}

/* sharegpt-turns: every user turn with a reply is a sample; its history is the turns
 * before it, and the turn before points at it. */
static void test_dataset_sharegpt_turns_chain_a_conversation(void **state) {
    (void)state;
    lb_dataset ds;
    lb_err err = {""};
    const char *text =
        "[{\"conversations\": [{\"from\": \"human\", \"value\": \"Q1\"},"
        " {\"from\": \"gpt\", \"value\": \"A1\"}, {\"from\": \"human\", \"value\": \"Q2\"},"
        " {\"from\": \"gpt\", \"value\": \"A2\"}, {\"from\": \"human\", \"value\": \"Q3\"}]},"
        " {\"conversations\": [{\"from\": \"human\", \"value\": \"R1\"},"
        " {\"from\": \"gpt\", \"value\": \"S1\"}]},"
        " {\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}]";
    assert_int_equal(parse(lb_dataset_parse_sharegpt_turns, text, &ds, &err), LB_OK);
    assert_string_equal(ds.format, "sharegpt-turns");
    assert_true(ds.multi_turn);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.skipped, 1);
    assert_string_equal(ds.samples[0].prompt, "Q1");
    assert_int_equal(ds.samples[0].n_history, 0);
    assert_false(ds.samples[0].follow_up);
    assert_int_equal(ds.samples[0].next_turn, 1);
    assert_string_equal(ds.samples[1].prompt, "Q2");
    assert_string_equal(ds.samples[1].reference, "A2");
    assert_true(ds.samples[1].follow_up);
    assert_int_equal(ds.samples[1].n_history, 2);
    assert_string_equal(ds.samples[1].history[0], "Q1");
    assert_string_equal(ds.samples[1].history[1], "A1");
    assert_int_equal(ds.samples[1].next_turn, -1); /* Q3 has no reply */
    assert_string_equal(ds.samples[2].prompt, "R1");
    assert_int_equal(ds.samples[2].next_turn, -1);
    lb_dataset_free(&ds);
    /* The first-exchange reading of the same file is unchanged, with no chains. */
    assert_int_equal(parse(lb_dataset_parse_sharegpt, text, &ds, &err), LB_OK);
    assert_int_equal(ds.n, 2);
    assert_int_equal(ds.samples[0].next_turn, -1);
    lb_dataset_free(&ds);
}

static void test_dataset_synthetic_is_seeded_and_follows_lengths(void **state) {
    (void)state;
    lb_dataset_synthetic_params p = lb_dataset_synthetic_default_params();
    p.n_samples = 200;
    lb_err err = {""};
    assert_int_equal(lb_dataset_len_dist_parse("uniform:10:20", &p.input, &err), LB_OK);
    assert_int_equal(lb_dataset_len_dist_parse("normal:50:5", &p.output, &err), LB_OK);
    lb_dataset a, b;
    assert_int_equal(lb_dataset_synthetic(&p, &a, &err), LB_OK);
    assert_int_equal(lb_dataset_synthetic(&p, &b, &err), LB_OK);
    double out_sum = 0;
    int lo_seen = 0, hi_seen = 0;
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.samples[i].prompt, b.samples[i].prompt);
        int words = 1;
        for (const char *c = a.samples[i].prompt; *c; c++)
            words += *c == ' ';
        assert_int_equal(words, a.samples[i].input_tokens);
        assert_true(words >= 10 && words <= 20);
        lo_seen |= words == 10;
        hi_seen |= words == 20;
        out_sum += a.samples[i].max_tokens;
    }
    assert_true(lo_seen && hi_seen);
    assert_float_equal(out_sum / (double)a.n, 50.0, 1.5);
    lb_dataset_free(&a);
    lb_dataset_free(&b);
}

/* With a tokenizer, prompts without a count (JSONL, cnn_eval records without tok_input) or
 * with an estimate (synthetic: words) get the tokenizer's count; cnn_eval.json's own
 * tok_input stays. */
static void test_dataset_count_tokens_replaces_missing_and_estimated_counts(void **state) {
    (void)state;
    lb_tokenizer *tok = lb_test_gpt2_tokenizer();
    assert_non_null(tok);
    lb_err err = {{0}};
    const char *jsonl = "{\"prompt\": \"Hello world!\"}\n{\"prompt\": \"1234567\"}\n";
    lb_dataset d;
    assert_int_equal(lb_dataset_parse_jsonl(jsonl, strlen(jsonl), "p.jsonl", &d, &err), LB_OK);
    assert_int_equal(d.samples[0].input_tokens, -1);
    assert_int_equal(lb_dataset_count_tokens(&d, tok, &err), LB_OK);
    assert_int_equal(d.samples[0].input_tokens, 3); /* Hello| world|! */
    assert_int_equal(d.samples[1].input_tokens, 3); /* 123|45|67 */
    lb_dataset_free(&d);

    lb_dataset_synthetic_params sp = lb_dataset_synthetic_default_params();
    sp.n_samples = 4;
    assert_int_equal(lb_dataset_synthetic(&sp, &d, &err), LB_OK);
    assert_int_equal(lb_dataset_count_tokens(&d, tok, &err), LB_OK);
    for (size_t i = 0; i < d.n; i++) {
        int64_t n = 0;
        assert_int_equal(
            lb_tokenizer_count(tok, d.samples[i].prompt, strlen(d.samples[i].prompt), &n, &err),
            LB_OK);
        assert_int_equal(d.samples[i].input_tokens, n);
    }
    lb_dataset_free(&d);

    /* a record without tok_input is counted like a JSONL prompt */
    const char *cnn = "[{\"input\": \"An article.\", \"tok_input\": [1, 2, 3, 4], "
                      "\"output\": \"A summary.\"}, {\"input\": \"Another.\"}]";
    assert_int_equal(lb_dataset_parse_cnn(cnn, strlen(cnn), "cnn.json", &d, &err), LB_OK);
    assert_int_equal(d.samples[1].input_tokens, -1);
    assert_int_equal(lb_dataset_count_tokens(&d, tok, &err), LB_OK);
    assert_int_equal(d.samples[0].input_tokens, 4);
    int64_t n = 0;
    assert_int_equal(
        lb_tokenizer_count(tok, d.samples[1].prompt, strlen(d.samples[1].prompt), &n, &err), LB_OK);
    assert_true(n > 10);
    assert_int_equal(d.samples[1].input_tokens, n);
    lb_dataset_free(&d);
    lb_tokenizer_free(tok);
}

/* With a tokenizer the synthetic lengths are tokens: every prompt counts exactly the
 * drawn length; shared prefixes open the prompts in turn, and the suffixes differ. */
static void test_dataset_synthetic_sized_in_tokens_with_shared_prefixes(void **state) {
    (void)state;
    lb_tokenizer *tok = lb_test_gpt2_tokenizer();
    assert_non_null(tok);
    lb_dataset_synthetic_params p = lb_dataset_synthetic_default_params();
    p.n_samples = 6;
    p.input = (lb_len_dist){LB_LEN_FIXED, 30, 0};
    p.tok = tok;
    p.prefix_len = 12;
    p.n_prefixes = 2;
    lb_dataset ds;
    lb_err err = {{0}};
    assert_int_equal(lb_dataset_synthetic(&p, &ds, &err), LB_OK);
    char prefix[2][256];
    for (size_t i = 0; i < ds.n; i++) {
        int32_t n_in = 30;
        int64_t n = 0;
        const char *s = ds.samples[i].prompt;
        assert_int_equal(lb_tokenizer_count(tok, s, strlen(s), &n, &err), LB_OK);
        assert_int_equal(n, 12 + n_in);
        assert_int_equal(ds.samples[i].input_tokens, n);
        /* the prefix: the first 12 words */
        const char *e = s;
        for (int w = 0; w < 12; w++)
            e = strchr(e, ' ') + 1;
        if (i < 2)
            snprintf(prefix[i], sizeof prefix[i], "%.*s", (int)(e - s), s);
        else
            assert_memory_equal(s, prefix[i % 2], strlen(prefix[i % 2]));
    }
    assert_string_not_equal(prefix[0], prefix[1]);
    assert_string_not_equal(ds.samples[0].prompt + strlen(prefix[0]),
                            ds.samples[2].prompt + strlen(prefix[0]));
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
    /* A vocabulary of bytes only: a word costs its letters (and space), so prompts sized
     * in tokens have far fewer words than words-sized ones, and hit the length to within
     * the cheapest word (3 tokens: " of"). */
    tok = lb_test_bytes_tokenizer();
    assert_non_null(tok);
    p.tok = tok;
    p.prefix_len = 0;
    p.input = (lb_len_dist){LB_LEN_FIXED, 200, 0};
    assert_int_equal(lb_dataset_synthetic(&p, &ds, &err), LB_OK);
    for (size_t i = 0; i < ds.n; i++) {
        const char *s = ds.samples[i].prompt;
        assert_int_equal(ds.samples[i].input_tokens, (int32_t)strlen(s));
        assert_true(strlen(s) > 200 - 3 && strlen(s) <= 200);
    }
    lb_dataset_free(&ds);
    lb_tokenizer_free(tok);
}

static void test_len_dist_parse_rejects_bad_specs(void **state) {
    (void)state;
    lb_len_dist d;
    lb_err err = {""};
    assert_int_equal(lb_dataset_len_dist_parse("64", &d, &err), LB_OK);
    assert_int_equal(d.kind, LB_LEN_FIXED);
    assert_float_equal(d.a, 64, 0);
    assert_int_equal(lb_dataset_len_dist_parse("fixed:32", &d, &err), LB_OK);
    assert_float_equal(d.a, 32, 0);
    assert_int_equal(lb_dataset_len_dist_parse("uniform:5:4", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("gamma:1:2", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("fixed:0", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("normal:10", &d, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "normal:10"));
    /* text after fixed's number is refused as it is after the others' (it was dropped:
     * "fixed:128x" ran as 128, "fixed:64:" as 64) */
    assert_int_equal(lb_dataset_len_dist_parse("fixed:128x", &d, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "fixed:128x"));
    assert_int_equal(lb_dataset_len_dist_parse("fixed:64:", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("fixed:64 tokens", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("uniform:1:5x", &d, &err), LB_ERR_USAGE);
    assert_int_equal(lb_dataset_len_dist_parse("uniform:1:5", &d, &err), LB_OK);
    assert_float_equal(d.b, 5, 0);
}

static void test_dataset_load_detects_format_from_file(void **state) {
    (void)state;
    char dir[] = "/tmp/lb_dataset_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"prompt\": \"x\"}\n", f);
    fclose(f);
    lb_dataset ds;
    lb_err err = {""};
    assert_int_equal(lb_dataset_load(path, "auto", &ds, &err), LB_OK);
    assert_string_equal(ds.format, "jsonl");
    lb_dataset_free(&ds);
    unlink(path);
    snprintf(path, sizeof path, "%s/s.json", dir);
    f = fopen(path, "w");
    fputs("[{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
          "{\"from\": \"gpt\", \"value\": \"a\"}]}]",
          f);
    fclose(f);
    assert_int_equal(lb_dataset_load(path, "auto", &ds, &err), LB_OK);
    assert_string_equal(ds.format, "sharegpt");
    lb_dataset_free(&ds);
    unlink(path);
    /* ShareGPT by its first record's keys, however long the fields before
     * "conversations" (one of 5000 bytes pushed it past what was looked at: read as
     * cnn_eval, refused for want of "input") */
    f = fopen(path, "w");
    fputs("[{\"id\": \"", f);
    for (int i = 0; i < 5000; i++)
        fputc('x', f);
    fputs("\", \"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
          "{\"from\": \"gpt\", \"value\": \"a\"}]}]",
          f);
    fclose(f);
    if (lb_dataset_load(path, "auto", &ds, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_string_equal(ds.format, "sharegpt");
    assert_int_equal(ds.n, 1);
    assert_string_equal(ds.samples[0].prompt, "q");
    lb_dataset_free(&ds);
    /* a "conversations" key inside a cnn_eval record's field is not ShareGPT's */
    f = fopen(path, "w");
    fputs("[{\"meta\": {\"conversations\": [\"}\"]}, \"input\": \"An article.\"}]", f);
    fclose(f);
    if (lb_dataset_load(path, "auto", &ds, &err) != LB_OK) fail_msg("%s", err.msg);
    assert_string_equal(ds.format, "cnn");
    assert_int_equal(ds.n, 1);
    lb_dataset_free(&ds);
    unlink(path);
    /* A UTF-8 byte order mark before the JSON (Notepad, PowerShell) is skipped, in the
     * format's detection too. */
    f = fopen(path, "w");
    fputs("\xEF\xBB\xBF{\"prompt\": \"x\"}\r\n{\"prompt\": \"y\"}\r\n", f);
    fclose(f);
    assert_int_equal(lb_dataset_load(path, "auto", &ds, &err), LB_OK);
    assert_string_equal(ds.format, "jsonl");
    assert_int_equal(ds.n, 2);
    assert_string_equal(ds.samples[0].prompt, "x");
    lb_dataset_free(&ds);
    f = fopen(path, "w");
    fputs("\xEF\xBB\xBF[{\"input\": \"An article.\", \"output\": \"A summary.\"}]", f);
    fclose(f);
    assert_int_equal(lb_dataset_load(path, "cnn", &ds, &err), LB_OK);
    assert_int_equal(ds.n, 1);
    lb_dataset_free(&ds);
    unlink(path);
    assert_int_equal(lb_dataset_load(path, "auto", &ds, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, path));
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_cnn_applies_mlperf_template),
        cmocka_unit_test(test_dataset_cnn_bad_field_names_file_record_and_field),
        cmocka_unit_test(test_dataset_cnn_tok_input_that_is_no_token_id_is_named),
        cmocka_unit_test(test_dataset_jsonl_reads_prompt_reference_and_max_tokens),
        cmocka_unit_test(test_dataset_jsonl_bad_line_is_named),
        cmocka_unit_test(test_dataset_text_with_nul_is_refused_by_name),
        cmocka_unit_test(test_dataset_errors_count_records_from_1_as_jsonl_lines),
        cmocka_unit_test(test_dataset_sharegpt_takes_first_exchange_and_skips_short_ones),
        cmocka_unit_test(test_dataset_sharegpt_turns_chain_a_conversation),
        cmocka_unit_test(test_dataset_synthetic_is_seeded_and_follows_lengths),
        cmocka_unit_test(test_dataset_count_tokens_replaces_missing_and_estimated_counts),
        cmocka_unit_test(test_dataset_synthetic_sized_in_tokens_with_shared_prefixes),
        cmocka_unit_test(test_len_dist_parse_rejects_bad_specs),
        cmocka_unit_test(test_dataset_load_detects_format_from_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
