/* test_cli.c: the command line's contract: exit codes and one-line errors that name the
 * bad input. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/proc.h"
#include "core/signals.h"
#include "test_util.h"

static char out[1 << 16], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static void expect_usage_error(const char *const *args, const char *needle) {
    assert_int_equal(run(args), 2);
    if (strstr(err, needle) == NULL) fail_msg("stderr '%s' lacks '%s'", err, needle);
    /* one line */
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));
}

static void test_cli_unknown_command_exits_2_naming_it(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"frobnicate", NULL}, "'frobnicate'");
}

static void test_cli_unknown_option_exits_2_naming_it(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"env", "--bogus", NULL}, "'--bogus'");
}

/* "-1" names no option: where a command takes arguments it is one, and the command says
 * what is wrong with it; an option still takes a negative value. */
static void test_cli_negative_number_is_an_argument_not_an_option(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"results", "show", "-1", NULL}, "malformed run ID '-1'");
    expect_usage_error((const char *[]){"env", "-1", NULL},
                       "unexpected argument '-1': it takes options only");
    expect_usage_error((const char *[]){"results", "list", "--limit", "-3", NULL},
                       "option --limit must be between 0 and");
}

/* A single-value option given twice with two values is refused (which counts would be a
 * guess); the same value twice, and a list option repeated, are fine. */
static void test_cli_option_given_twice_with_two_values_is_refused(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"results", "list", "--limit", "3", "--limit=4", NULL},
                       "option --limit given twice ('3', then '4'): give it once");
    assert_int_equal(run((const char *[]){"results", "list", "--limit", "3", "--limit", "3", "--db",
                                          "/nonexistent/x.db", NULL}),
                     1); /* parsed; the missing database is the error */
    assert_null(strstr(err, "given twice"));
}

/* An argument past the most a command takes is refused naming that most. */
static void test_cli_too_many_arguments_name_the_limit(void **state) {
    (void)state;
    char path[] = "/tmp/lbtest-errXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(lb_test_shell("%s results export $(seq 1 %d) 2>%s", LB_TEST_BIN,
                                   LB_ARGS_MAX_POSITIONAL + 1, path),
                     2);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    char want[96];
    snprintf(want, sizeof want, "unexpected argument '%d': it takes at most %d arguments",
             LB_ARGS_MAX_POSITIONAL + 1, LB_ARGS_MAX_POSITIONAL);
    if (strstr(text, want) == NULL) fail_msg("stderr '%s' lacks '%s'", text, want);
    free(text);
    unlink(path);
    expect_usage_error((const char *[]){"results", "show", "1", "2", NULL},
                       "unexpected argument '2': it takes at most 1 argument (");
}

static void test_cli_no_command_prints_help_and_exits_0(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){NULL}), 0);
    assert_non_null(strstr(out, "usage: llmbench <command>"));
}

static void test_cli_version_names_version_and_commit(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"--version", NULL}), 0);
    assert_non_null(strstr(out, "llmbench 0."));
    assert_non_null(strstr(out, "(commit "));
}

/* The table shows a byte count with its GiB beside it. */
static void test_cli_env_table_reads_memory_in_gib(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"env", NULL}), 0);
    const char *mem = strstr(out, "host_mem_bytes");
    assert_non_null(mem);
    const char *gib = strstr(mem, " GiB)\n");
    if (gib == NULL || strchr(mem, '\n') < gib) fail_msg("env: %s", out);
}

/* A recorded environment variable's control characters are shown as '?': a newline broke
 * the table into a line of its own and an escape reached the terminal. */
static void test_cli_env_table_shows_control_characters_as_question_marks(void **state) {
    (void)state;
    setenv("NCCL_DEBUG", "INFO\x1b[2J\nWARN", 1);
    int rc = run((const char *[]){"env", NULL});
    unsetenv("NCCL_DEBUG");
    assert_int_equal(rc, 0);
    if (strstr(out, "  NCCL_DEBUG         INFO?[2J?WARN\n") == NULL) fail_msg("env: %s", out);
    assert_null(strchr(out, '\x1b'));
}

static void test_cli_env_json_is_one_document(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"env", "--json", NULL}), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    assert_non_null(json_object_get(doc, "cpu_cores"));
    assert_non_null(json_object_get(doc, "gpus"));
    assert_null(json_object_get(doc, "command_line")); /* a run's, not the machine's */
    json_decref(doc);
}

/* selftest refuses what would check nothing, or not what it says, before it looks for a
 * GPU: the same answer on a machine without one. */
static void test_cli_selftest_refuses_options_that_check_nothing(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"selftest", "--no-model", "--no-kernels", NULL},
                       "--no-model with --no-kernels leaves nothing to check");
    /* 0 means "from the clock" inside: a seed given as 0 could not be repeated */
    expect_usage_error((const char *[]){"selftest", "--seed", "0", NULL},
                       "option --seed must be between 1 and");
    /* --failed would shorten only the table: with --json it did nothing */
    expect_usage_error((const char *[]){"selftest", "--failed", "--json", NULL},
                       "--failed shortens the table, and --json prints every row");
}

/* The seed a selftest prints comes from the monotonic clock, in ns since boot: after 104
 * days up (9e15 ns) it is larger than 9e15, and --seed must still take it back. */
static void test_cli_selftest_takes_back_the_seed_it_printed(void **state) {
    (void)state;
    setenv(LB_ARGS_CHECK_ENV, "1", 1); /* the command line is only checked */
    int rc = run((const char *[]){"selftest", "--seed", "31536000000000000", NULL}); /* 1 year */
    unsetenv(LB_ARGS_CHECK_ENV);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
}

static void test_cli_command_help_lists_its_options(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"env", "--help", NULL}), 0);
    assert_non_null(strstr(out, "usage: llmbench env"));
    assert_non_null(strstr(out, "--json"));
    /* train's presets are listed before its options, where --model's help points */
    assert_int_equal(run((const char *[]){"train", "--help", NULL}), 0);
    const char *models = strstr(out, "models: gpt2-124m"), *ref = strstr(out, "the models above");
    assert_non_null(models);
    assert_non_null(ref);
    assert_true(models < ref);
    assert_null(strstr(out, "see below"));
    /* a long list of choices is shown whole */
    assert_int_equal(run((const char *[]){"comm", "--help", NULL}), 0);
    assert_non_null(strstr(out, "|double|bfloat16|fp32|fp16|bf16|fp64 "));
}

/* comm --help listed no exit codes: it states those the command returns. */
static void test_cli_comm_help_states_its_exit_codes(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"comm", "--help", NULL}), 0);
    const char *codes[] = {"Exit status: 0 every row ran and no element was wrong",
                           "1 failed (#wrong above 0 on any row", "2 bad usage", "130 interrupted"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strstr(out, codes[i]) == NULL) fail_msg("comm --help lacks '%s':\n%s", codes[i], out);
    /* the sizes' one form is said where the options are */
    assert_non_null(strstr(out, "digits, then optionally K, M or G (x1024), then optionally B"));
}

/* comm's sizes are digits, then optionally K, M or G (either case), then optionally B, and
 * nothing else: "0x10", "1e3", " 8" and "1.5K" were read as other sizes (strtod) while "8B"
 * was refused beside "8KB". Accepted values are read back from the check that -b is not
 * above -e, which names both in bytes. */
static void test_cli_comm_sizes_take_one_form(void **state) {
    (void)state;
    const struct {
        const char *size, *bytes;
    } ok[] = {{"8", "8"},
              {"8B", "8"},
              {"8K", "8192"},
              {"8KB", "8192"},
              {"8k", "8192"},
              {"2M", "2097152"},
              {"2mB", "2097152"},
              {"1G", "1073741824"},
              {"1GB", "1073741824"},
              {"1024G", "1099511627776"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "-b %s -e 4: expected 1 <= minimum size", ok[i].bytes);
        expect_usage_error((const char *[]){"comm", "-b", ok[i].size, "-e", "4", NULL}, want);
        if (strcmp(ok[i].size, "1024G") == 0) continue; /* -e as large as -b would run */
        snprintf(want, sizeof want, "-b 1099511627776 -e %s: expected", ok[i].bytes);
        expect_usage_error((const char *[]){"comm", "-b", "1024G", "-e", ok[i].size, NULL}, want);
    }
    expect_usage_error((const char *[]){"comm", "--matrix", "6B", NULL},
                       "--matrix 6: expected whole float elements");
    const char *bad[] = {"0x10", "1e3",  " 8", "8 ",   "1.5K", "+8",   "K",
                         "B",    "8KiB", "8b", "8KBB", "8T",   "1,024"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *options[] = {"-b", "-e", "--matrix"};
        for (size_t k = 0; k < 3; k++) {
            char want[128];
            snprintf(want, sizeof want,
                     "option %s expects a size in bytes (digits, then optionally K, M or G",
                     options[k]);
            expect_usage_error((const char *[]){"comm", options[k], bad[i], NULL}, want);
            snprintf(want, sizeof want, "got '%s'", bad[i]);
            if (strstr(err, want) == NULL) fail_msg("stderr '%s' lacks '%s'", err, want);
        }
    }
    /* past the largest, however many digits */
    expect_usage_error((const char *[]){"comm", "-e", "1025G", NULL},
                       "option -e must be at most 1024G, got '1025G'");
    expect_usage_error((const char *[]){"comm", "-e", "99999999999999999999999", NULL},
                       "option -e must be at most 1024G");
}

/* `llmbench run` on two or more GPUs adds the scaling run: GPT-2 124M on 1 and all GPUs
 * at ZeRO 1 through train --scaling, with the suite's steps and database, its runs tagged
 * so that the suite's table and report take them in */
static void test_cli_run_scaling_child_command(void **state) {
    (void)state;
    char buf[64], *args[24];
    int n = lb_cli_run_scaling_args(4, 0, "r.db", "run-suite-7", buf, args);
    const char *want[] = {"llmbench", "train",       "--scaling",   "1,4",  "--zero",   "1",
                          "--model",  "gpt2-124m",   "--precision", "bf16", "--batch",  "16",
                          "--seq",    "1024",        "--steps",     "100",  "--warmup", "10",
                          "--tag",    "run-suite-7", "--db",        "r.db"};
    assert_int_equal(n, 22);
    for (int i = 0; i < n; i++)
        assert_string_equal(args[i], want[i]);
    assert_null(args[n]);
    assert_int_equal(lb_cli_run_scaling_args(8, 7, NULL, "t", buf, args), 20);
    assert_string_equal(args[3], "1,8");
    assert_string_equal(args[15], "7");
    assert_null(args[20]);
}

/* Each `train --scaling` run: the command line without --scaling, tagged with the group;
 * every run after the one-GPU run also gets that run's tokens/s as its base. */
static void test_cli_train_scaling_runs_after_the_first_get_the_base(void **state) {
    (void)state;
    char *cmd[] = {"train",   "--model", "gpt2-124m",     "--scaling", "1,2,4",
                   "--steps", "5",       "--scaling=1,2", NULL};
    char *child[16];
    const char *first[] = {"train", "--model", "gpt2-124m", "--steps", "5", "--json", "--tag", "g"};
    int n = lb_cli_train_scaling_child(7, cmd + 1, "g", "", child);
    assert_int_equal(n, 8);
    for (int i = 0; i < n; i++)
        assert_string_equal(child[i], first[i]);
    assert_null(child[n]);
    for (int run = 0; run < 2; run++) { /* the same for every later run */
        n = lb_cli_train_scaling_child(7, cmd + 1, "g", "1234.5", child);
        assert_int_equal(n, 10);
        assert_string_equal(child[7], "g");
        assert_string_equal(child[8], "--base-tok-per-s");
        assert_string_equal(child[9], "1234.5");
        assert_null(child[10]);
    }
}

static void test_cli_commands_that_store_nothing_refuse_db(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"env", "--db", "/tmp/x.db", NULL}, "--db does not apply");
    expect_usage_error((const char *[]){"rouge", "--db", "/tmp/x.db", NULL}, "--db does not apply");
    expect_usage_error((const char *[]){"tokenize", "--db=/tmp/x.db", "a.txt", NULL},
                       "--db does not apply");
    assert_int_equal(run((const char *[]){"env", "--help", NULL}), 0);
    assert_null(strstr(out, "--db"));
    assert_int_equal(run((const char *[]){"train", "--help", NULL}), 0);
    assert_non_null(strstr(out, "--db PATH"));
    assert_int_equal(run((const char *[]){"run", "--help", NULL}), 0);
    assert_non_null(strstr(out, "--no-progress"));
}

static void test_cli_out_of_range_lengths_are_refused_not_clamped(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic",
                                        "1", "--input-len", "fixed:99999999999", NULL},
                       "at most 10000000");
    expect_usage_error((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic",
                                        "1", "--output-len", "uniform:1:20000000", NULL},
                       "'uniform:1:20000000'");
    expect_usage_error((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic",
                                        "1", "--input-len", "fixed:2.5", NULL},
                       "whole numbers");
}

static void test_cli_tokenize_prints_nothing_before_an_unreadable_file(void **state) {
    (void)state;
    char path[] = "/tmp/lbtest-tokXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello world", 11), 11);
    close(fd);
    const char *args[] = {"tokenize",
                          "--tokenizer",
                          LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken",
                          path,
                          "/nonexistent/missing.txt",
                          NULL};
    assert_int_equal(run(args), 2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "missing.txt"));
    const char *ok[] = {"tokenize", "--tokenizer", LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken",
                        path, NULL};
    assert_int_equal(run(ok), 0);
    assert_non_null(strstr(out, ": 2 tokens"));
    unlink(path);
}

/* A vocabulary whose own bytes go into the error (a token, a JSON key) still gives one line
 * that a terminal shows as it is: a newline or an escape from the file is shown as '?'. */
static void test_cli_tokenize_vocabulary_error_is_one_printable_line(void **state) {
    (void)state;
    char dir[64], json[96], ranks[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(json, sizeof json, "%s/tokenizer.json", dir);
    snprintf(ranks, sizeof ranks, "%s/t.tiktoken", dir);
    assert_true(lb_test_write_file(json, "{\"model\": {\"type\": \"BPE\", \"merges\": [], "
                                         "\"vocab\": {\"a\\nb\\u001b[2K\": 0}}, "
                                         "\"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                                         "\"use_regex\": true}}"));
    assert_true(lb_test_write_file(ranks, "YQ== 0\n\x1b[2K\rYg== 1\n"));
    expect_usage_error((const char *[]){"tokenize", "--tokenizer", json, "x.txt", NULL},
                       "model.vocab[\"a?b?[2K\"] is not written in the byte-level alphabet");
    expect_usage_error((const char *[]){"tokenize", "--tokenizer", ranks, "x.txt", NULL},
                       ":2: \"?[2K?Yg==\" is not base64 of a token");
    lb_test_rmtree(dir);
}

/* `tokenize --json` of a file whose name is not UTF-8 (a Latin-1 e-acute) keeps its "path",
 * the byte shown as '?' (jansson writes no string that is not UTF-8, so it was dropped). */
static void test_cli_tokenize_json_keeps_a_path_that_is_not_utf8(void **state) {
    (void)state;
    char dir[64], path[96], want[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/caf\xe9.txt", dir);
    snprintf(want, sizeof want, "%s/caf?.txt", dir);
    assert_true(lb_test_write_file(path, "hello world"));
    const char *args[] = {"tokenize", "--tokenizer", LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken",
                          "--json",   path,          NULL};
    assert_int_equal(run(args), 0);
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: %s", out);
    json_t *file = json_array_get(json_object_get(doc, "files"), 0);
    const char *got = json_string_value(json_object_get(file, "path"));
    if (got == NULL || strcmp(got, want) != 0) fail_msg("path %s in %s", got ? got : "-", out);
    assert_int_equal(json_integer_value(json_object_get(file, "tokens")), 2);
    assert_non_null(json_string_value(json_object_get(doc, "tokenizer")));
    json_decref(doc);
    lb_test_rmtree(dir);
}

/* `run -q` that succeeds says nothing on stderr (without a GPU it said it ran the CPU suite
 * only: a remark, not a warning). */
static void test_cli_run_quiet_is_quiet(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *args[] = {"run",           "-q",   "--cpu-only", "--steps", "1", "--no-report",
                          "--no-progress", "--db", db,           NULL};
    assert_int_equal(run(args), 0);
    if (err[0] != '\0') fail_msg("stderr: %s", err);
    assert_non_null(strstr(out, "gpt2-tiny-cpu-fp32"));
    lb_test_rmtree(dir);
}

/* `run --report DIR` where DIR cannot be a folder: refused before the suite runs, nothing
 * stored. */
static void test_cli_run_refuses_a_bad_report_folder_before_running(void **state) {
    (void)state;
    char dir[64], file[96], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/a-file", dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    expect_usage_error((const char *[]){"run", "--cpu-only", "--report", file, "--db", db, NULL},
                       "is a file: give a folder");
    expect_usage_error((const char *[]){"run", "--report", dir, "--no-report", "--db", db, NULL},
                       "give one of them");
    assert_int_equal(access(db, F_OK), -1);
    lb_test_rmtree(dir);
}

/* A file that cannot be read is named with the option that gave it. */
static void test_cli_unreadable_files_name_their_option(void **state) {
    (void)state;
    expect_usage_error((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--dataset",
                                        "/nonexistent/d.json", NULL},
                       "--dataset: cannot read /nonexistent/d.json");
    expect_usage_error((const char *[]){"tokenize", "--tokenizer", "/nonexistent/t.tiktoken",
                                        "/nonexistent/x.txt", NULL},
                       "--tokenizer: cannot read /nonexistent/t.tiktoken");
    expect_usage_error((const char *[]){"load", "--endpoint", "http://127.0.0.1:1", "--synthetic",
                                        "2", "--mlperf-conf", "/nonexistent/m.conf", NULL},
                       "--mlperf-conf: cannot read /nonexistent/m.conf");
}

/* Output that stdout does not take whole (a full disk, a closed stdout) is a failure, said
 * on stderr: `env --json > /dev/full` exited 0 with no output written. */
static void test_cli_output_stdout_cannot_take_exits_1(void **state) {
    (void)state;
    char path[] = "/tmp/lbtest-errXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(lb_test_shell("%s env --json > /dev/full 2>%s", LB_TEST_BIN, path), 1);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    if (strstr(text, "llmbench env: cannot write the output: No space left on device\n") == NULL)
        fail_msg("stderr: %s", text);
    free(text);
    assert_int_equal(lb_test_shell("%s --version >&- 2>%s", LB_TEST_BIN, path), 1);
    text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    if (strstr(text, "llmbench --version: cannot write the output") == NULL)
        fail_msg("stderr: %s", text);
    free(text);
    unlink(path);
    assert_int_equal(lb_test_shell("%s env > /dev/null", LB_TEST_BIN), 0);
}

/* `llmbench help COMMAND` is that command's --help (it printed the list of commands, and
 * exited 0 for a command that does not exist); an option before the command is named as an
 * option. */
static void test_cli_help_command_prints_the_commands_help(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"help", "run", NULL}), 0);
    assert_non_null(strstr(out, "usage: llmbench run [options]"));
    assert_non_null(strstr(out, "--cpu-only"));
    assert_null(strstr(out, "commands:"));
    expect_usage_error((const char *[]){"help", "frobnicate", NULL},
                       "unknown command 'frobnicate'");
    expect_usage_error((const char *[]){"help", "run", "env", NULL},
                       "unexpected argument 'env': it takes one command name");
    expect_usage_error((const char *[]){"--json", "env", NULL},
                       "unknown option '--json': options go after the command");
    assert_int_equal(run((const char *[]){"help", NULL}), 0);
    assert_non_null(strstr(out, "commands:"));
    /* help about help is the commands' list */
    const char *itself[] = {"help", "--help", "-h"};
    for (size_t i = 0; i < sizeof itself / sizeof itself[0]; i++) {
        assert_int_equal(run((const char *[]){"help", itself[i], NULL}), 0);
        assert_non_null(strstr(out, "commands:"));
    }
}

/* SIGTERM to this process alone, once the child has opened its database (its run is about
 * to be stored as running), the way `kill PID` reaches `llmbench run` and not its child. */
static void *terminate_when_stored(void *db) {
    for (int i = 0; i < 1200 && access(db, F_OK) != 0; i++)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    kill(getpid(), SIGTERM);
    return NULL;
}

/* A step that `run` starts as a child (core/proc.h) gets the signal that reached `run`
 * alone, and `run` waits for it: `run`'s own waitpid, interrupted by the signal, returned at
 * once, and the child went on benchmarking on its own, its stored run `running`. */
static void test_cli_run_child_gets_the_signal_and_is_waited_for(void **state) {
    (void)state;
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *args[] = {LB_TEST_BIN,     "train", "--model", "gpt2-tiny", "--steps", "2000",
                          "--no-progress", "-q",    "--db",    db,          NULL};
    lb_signals_install();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, terminate_when_stored, db), 0);
    lb_proc_spec spec = {.argv = args, .stdout_to_stderr = true};
    int code = 0;
    lb_err why;
    assert_int_equal(lb_proc_run(&spec, &code, &why), LB_OK);
    pthread_join(t, NULL);
    assert_true(lb_signals_interrupted());
    lb_signals_reset();
    assert_int_equal(code, 130);
    assert_int_equal(run((const char *[]){"results", "list", "--json", "--db", db, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: %s", out);
    json_t *runs = json_object_get(doc, "runs");
    assert_int_equal(json_array_size(runs), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(runs, 0), "status")),
                        "interrupted");
    json_decref(doc);
    lb_test_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_unknown_command_exits_2_naming_it),
        cmocka_unit_test(test_cli_unknown_option_exits_2_naming_it),
        cmocka_unit_test(test_cli_negative_number_is_an_argument_not_an_option),
        cmocka_unit_test(test_cli_option_given_twice_with_two_values_is_refused),
        cmocka_unit_test(test_cli_too_many_arguments_name_the_limit),
        cmocka_unit_test(test_cli_no_command_prints_help_and_exits_0),
        cmocka_unit_test(test_cli_version_names_version_and_commit),
        cmocka_unit_test(test_cli_env_table_reads_memory_in_gib),
        cmocka_unit_test(test_cli_env_json_is_one_document),
        cmocka_unit_test(test_cli_env_table_shows_control_characters_as_question_marks),
        cmocka_unit_test(test_cli_command_help_lists_its_options),
        cmocka_unit_test(test_cli_comm_help_states_its_exit_codes),
        cmocka_unit_test(test_cli_comm_sizes_take_one_form),
        cmocka_unit_test(test_cli_commands_that_store_nothing_refuse_db),
        cmocka_unit_test(test_cli_run_scaling_child_command),
        cmocka_unit_test(test_cli_train_scaling_runs_after_the_first_get_the_base),
        cmocka_unit_test(test_cli_out_of_range_lengths_are_refused_not_clamped),
        cmocka_unit_test(test_cli_tokenize_prints_nothing_before_an_unreadable_file),
        cmocka_unit_test(test_cli_tokenize_vocabulary_error_is_one_printable_line),
        cmocka_unit_test(test_cli_tokenize_json_keeps_a_path_that_is_not_utf8),
        cmocka_unit_test(test_cli_run_quiet_is_quiet),
        cmocka_unit_test(test_cli_run_refuses_a_bad_report_folder_before_running),
        cmocka_unit_test(test_cli_unreadable_files_name_their_option),
        cmocka_unit_test(test_cli_selftest_refuses_options_that_check_nothing),
        cmocka_unit_test(test_cli_selftest_takes_back_the_seed_it_printed),
        cmocka_unit_test(test_cli_output_stdout_cannot_take_exits_1),
        cmocka_unit_test(test_cli_help_command_prints_the_commands_help),
        cmocka_unit_test(test_cli_run_child_gets_the_signal_and_is_waited_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
