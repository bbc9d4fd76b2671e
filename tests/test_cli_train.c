/* test_cli_train.c: `llmbench train` from the outside: bad input is refused with exit 2
 * and a line naming it before anything is stored; a real run is stored with its raw
 * samples; Ctrl-C stores an interrupted run that keeps the steps measured. */
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <regex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/clock.h"
#include "test_util.h"
#include "train/train.h"

static char g_dir[64], g_db[128];
static char out[1 << 20], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static void expect_usage(const char *const *args, const char *needle) {
    int rc = run(args);
    if (rc != 2) fail_msg("exit %d, stderr: %s", rc, err);
    if (strstr(err, needle) == NULL) fail_msg("stderr '%s' lacks '%s'", err, needle);
}

static void test_cli_train_bad_input_exits_2_naming_it(void **state) {
    (void)state;
    expect_usage((const char *[]){"train", "--model", "gpt5", "--db", g_db, NULL}, "gpt5");
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--batch", "0", "--db", g_db, NULL},
        "--batch");
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--seq", "4096", "--db", g_db, NULL},
        "--seq 4096");
    expect_usage((const char *[]){"train", "--batch", "x", NULL},
                 "--batch expects an integer, got 'x'");
    expect_usage((const char *[]){"train", "--precision", "fp8", NULL}, "fp32|fp16|bf16");
    expect_usage((const char *[]){"train", "--device", "tpu", NULL}, "cpu, cuda or cuda:N");
    expect_usage((const char *[]){"train", "--steps", NULL}, "--steps expects a value");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--data",
                                  "/nonexistent.bin", "--db", g_db, NULL},
                 "/nonexistent.bin");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--gemm-heuristic-only", "--db", g_db, NULL},
                 "--gemm-heuristic-only applies to --device cuda only");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--fp32-matmul", "3xtf32", "--db", g_db, NULL},
                 "--fp32-matmul 3xtf32 (or --tf32) applies to --device cuda only");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--tf32", "--db", g_db, NULL},
                 "--fp32-matmul tf32 (or --tf32) applies to --device cuda only");
    expect_usage((const char *[]){"train", "--fp32-matmul", "bf16x9", NULL},
                 "auto|ieee|tf32|3xtf32|int8");
    expect_usage((const char *[]){"train", "--attention", "flash", NULL}, "auto|builtin|cudnn");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--attention", "cudnn", "--db", g_db, NULL},
                 "--attention cudnn applies to --device cuda only");
    expect_usage((const char *[]){"train", "--tf32", "--fp32-matmul", "3xtf32", NULL},
                 "--tf32 contradicts --fp32-matmul 3xtf32");
    expect_usage((const char *[]){"train", "--quant", "int4", NULL}, "none|nf4");
    expect_usage((const char *[]){"train", "--lora-rank", "0", NULL}, "--lora-rank");
    expect_usage((const char *[]){"train", "--model", "./no-such-dir", "--db", g_db, NULL},
                 "--model ./no-such-dir: no such directory");
    expect_usage((const char *[]){"train", "--model", "llama-tiny", "--seq", "16", "--device",
                                  "cpu", "--lora-rank", "4", "--lora-targets", "q,attn", "--db",
                                  g_db, NULL},
                 "unknown projection 'attn'");
    expect_usage((const char *[]){"train", "--model", "llama-tiny", "--seq", "16", "--device",
                                  "cpu", "--lora-rank", "65", "--db", g_db, NULL},
                 "--lora-rank 65 is larger than projection");
    expect_usage((const char *[]){"train", "--model", "llama-tiny", "--seq", "16", "--device",
                                  "cpu", "--quant", "nf4", "--db", g_db, NULL},
                 "--quant nf4 needs --lora-rank R");
#ifdef LB_HAVE_CUDA
    expect_usage((const char *[]){"train", "--model", "llama-tiny", "--seq", "16", "--device",
                                  "cuda", "--lora-rank", "4", "--quant", "nf4", "--db", g_db, NULL},
                 "--quant nf4 needs --precision bf16 or fp16");
#else
    /* a device this build cannot serve is a usage error saying what to use instead */
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--device", "cuda", "--db", g_db, NULL},
        "--device cuda: this llmbench was built without CUDA; use --device cpu");
    expect_usage((const char *[]){"train", "--device", "cuda:1", NULL},
                 "--device cuda:1: this llmbench was built without CUDA; use --device cpu");
#endif
    expect_usage((const char *[]){"train", "--device", "cuda:x", NULL}, "cpu, cuda or cuda:N");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--save-params", "/no-such-dir/p.safetensors", "--db", g_db,
                                  NULL},
                 "--save-params /no-such-dir/p.safetensors: cannot create a file in folder "
                 "/no-such-dir");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--save-params", g_dir, "--db", g_db, NULL},
                 "is a folder: give a file name");
    /* --scaling's list is judged before the machine is asked (this one may have no GPU),
     * and in a sweep's check of its inputs too */
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "1,,2", "--db", g_db, NULL},
        "--scaling 1,,2: expected a number at each comma");
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "1,2,2", "--db", g_db, NULL},
        "--scaling 1,2,2: each count must be above the one before");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "1,2", "--device",
                                  "cpu", "--db", g_db, NULL},
                 "--scaling 1,2 starts one worker per GPU and --device cpu uses none");
    /* --scaling measures the base itself: a base given too reached each later count's run
     * twice, refused there after the one-GPU run had been stored */
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "1,2",
                                  "--base-tok-per-s", "1000", "--db", g_db, NULL},
                 "--scaling 1,2 measures the one-GPU tokens/s its runs scale against: give it "
                 "without --base-tok-per-s");
    /* a GPU's peak for MFU on the CPU, which reports none: refused like the other CUDA-only
     * options, not ignored */
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--seq", "16", "--device", "cpu",
                                  "--peak-tflops", "5", "--db", g_db, NULL},
                 "--peak-tflops applies to --device cuda only");
    setenv("LLMBENCH_CHECK_ARGS", "inputs", 1);
    expect_usage(
        (const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "0,2", "--db", g_db, NULL},
        "--scaling 0,2: a GPU count must be between 1 and 4096");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--scaling", "1,2",
                                  "--base-tok-per-s", "1000", "--db", g_db, NULL},
                 "give it without --base-tok-per-s");
    unsetenv("LLMBENCH_CHECK_ARGS");
    /* nothing was stored for any of them: not even a database was made */
    assert_int_equal(run((const char *[]){"results", "list", "--json", "--db", g_db, NULL}), 1);
    assert_non_null(strstr(err, "no results database"));
}

/* Checking its inputs (a sweep's check of its cells), `train` holds a token shard to the
 * ranks its command line starts, --gpus N's or --scaling's largest count, with --batch per
 * rank: a shard one rank can read but not N is refused naming N, as the run would be. */
static void test_cli_train_input_check_holds_the_shard_to_every_rank(void **state) {
    (void)state;
    char shard[160];
    snprintf(shard, sizeof shard, "%s/ranks.bin", g_dir);
    assert_int_equal(lb_test_write_shard(shard, 40, 128, 0, 3), 0); /* 2 ranks x 2 x 8 + 1 = 33 */
    setenv("LLMBENCH_CHECK_ARGS", "inputs", 1);
    const char *one[] = {"train", "--model", "gpt2-tiny", "--batch", "2",  "--seq",
                         "8",     "--data",  shard,       "--db",    g_db, NULL};
    int rc = run(one);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    const char *two[] = {"train",  "--model", "gpt2-tiny", "--batch", "2",    "--seq", "8",
                         "--data", shard,     "--gpus",    "2",       "--db", g_db,    NULL};
    rc = run(two);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--batch", "2", "--seq", "8",
                                  "--data", shard, "--gpus", "4", "--db", g_db, NULL},
                 "has 40 tokens, fewer than one batch reads: 8 sequences (4 ranks x 2, a rank's "
                 "micro-batch) x 8 tokens + 1 = 65");
    expect_usage((const char *[]){"train", "--model", "gpt2-tiny", "--batch", "4", "--grad-accum",
                                  "2", "--seq", "8", "--data", shard, "--scaling", "1,2,4", "--db",
                                  g_db, NULL},
                 "(4 ranks x 2, a rank's micro-batch)");
}

/* The input-checking mode ends with its test, failed or not. */
static int leave_input_check(void **state) {
    (void)state;
    return unsetenv("LLMBENCH_CHECK_ARGS");
}

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "SLURM_PROCID",
                                            "SLURM_STEP_NUM_TASKS",
                                            "RANK",
                                            "WORLD_SIZE"};

/* The launcher's variables and the input-checking mode end with their test. */
static int leave_launcher(void **state) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
        unsetenv(launcher_vars[i]);
    return leave_input_check(state);
}

/* Under a launcher (mpirun's, Slurm's or torchrun's variables) and without --gpus or
 * --scaling, the input check holds a token shard to the world size the environment names,
 * in lb_boot_init's order: a shard 2 ranks can read but not 4 is refused naming 4 ranks
 * (one rank was counted). --gpus N still counts N. */
static void test_cli_train_input_check_counts_the_launchers_ranks(void **state) {
    (void)state;
    char shard[160];
    snprintf(shard, sizeof shard, "%s/world.bin", g_dir);
    assert_int_equal(lb_test_write_shard(shard, 40, 128, 0, 3), 0); /* 2 ranks x 2 x 8 + 1 = 33 */
    setenv("LLMBENCH_CHECK_ARGS", "inputs", 1);
    const char *args[] = {"train", "--model", "gpt2-tiny", "--batch", "2",  "--seq",
                          "8",     "--data",  shard,       "--db",    g_db, NULL};
    const char *want = "has 40 tokens, fewer than one batch reads: 8 sequences (4 ranks x 2, a "
                       "rank's micro-batch) x 8 tokens + 1 = 65";
    for (size_t l = 0; l < 6; l += 2) { /* mpirun, Slurm, torchrun: rank then size */
        setenv(launcher_vars[l], "0", 1);
        setenv(launcher_vars[l + 1], "2", 1);
        int rc = run(args);
        if (rc != 0) fail_msg("%s=2: exit %d: %s", launcher_vars[l + 1], rc, err);
        setenv(launcher_vars[l + 1], "4", 1);
        expect_usage(args, want);
        unsetenv(launcher_vars[l]);
        unsetenv(launcher_vars[l + 1]);
    }
    /* torchrun's pair under srun: the nearer launcher's world, as the job would form */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "2", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "4", 1);
    expect_usage(args, want);
    const char *gpus[] = {"train",  "--model", "gpt2-tiny", "--batch", "2",    "--seq", "8",
                          "--data", shard,     "--gpus",    "2",       "--db", g_db,    NULL};
    int rc = run(gpus);
    if (rc != 0) fail_msg("--gpus 2 under WORLD_SIZE=4: exit %d: %s", rc, err);
}

/* --lora-alpha set through the library's params: a value that is not a positive number
 * is refused, with or without a rank (it was taken for "unset" and became 16). */
static void test_cli_train_lora_alpha_not_positive_is_refused(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err e = {{0}};
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, &e), LB_OK);
    const double bad[] = {-1.0, NAN};
    for (int i = 0; i < 2; i++) {
        lb_train_params p = lb_train_default_params();
        p.device = LB_DEVICE_CPU, p.seq = 16, p.lora_alpha = bad[i];
        assert_int_equal(lb_train_validate(&p, &cfg, &e), LB_ERR_USAGE);
        assert_non_null(strstr(e.msg, "--lora-alpha needs --lora-rank R"));
        p.lora_rank = 4;
        assert_int_equal(lb_train_validate(&p, &cfg, &e), LB_ERR_USAGE);
        assert_non_null(strstr(e.msg, "--lora-alpha must be a positive number"));
    }
}

/* A model that fits nowhere: the advice offers --recompute only where it is not on yet. */
static void test_cli_train_fit_advice_leaves_out_what_is_given(void **state) {
    (void)state;
    lb_model_config cfg;
    lb_err e = {{0}};
    assert_int_equal(lb_model_config_preset("llama3.1-8b", &cfg, &e), LB_OK);
    lb_train_params p = lb_train_default_params();
    p.device = LB_DEVICE_CUDA, p.precision = LB_PREC_BF16, p.seq = 1024, p.batch = 64;
    assert_int_equal(lb_train_check_fit(&p, &cfg, 2, 1e9, &e), LB_ERR_USAGE);
    assert_non_null(strstr(e.msg, "no stage fits on up to 4096 GPUs: try a smaller --batch or "
                                  "--recompute"));
    p.recompute = true;
    assert_int_equal(lb_train_check_fit(&p, &cfg, 2, 1e9, &e), LB_ERR_USAGE);
    assert_null(strstr(e.msg, "--recompute"));
    assert_non_null(strstr(e.msg, "try a smaller --batch"));
    assert_null(strchr(e.msg, '\n'));
}

#ifdef LB_HAVE_MPI
/* An option that only a later rank was given (its key absent from rank 0's configuration)
 * stops every rank before anything runs, named: rank 0 alone was compared, and the ranks
 * went on to train different things. */
static void test_cli_train_option_given_on_one_rank_only_stops_the_job(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/agree.db", g_dir);
    const char *argv[64] = {"mpirun", "--oversubscribe"};
    int n = 2;
    if (getuid() == 0) argv[n++] = "--allow-run-as-root";
    const char *rest[] = {
        "-np",        "1",           LB_TEST_BIN, "train",    "--device", "cpu",
        "--model",    "llama-tiny",  "--seq",     "16",       "--steps",  "1",
        "--warmup",   "0",           "--db",      db,         ":",        "-np",
        "1",          LB_TEST_BIN,   "train",     "--device", "cpu",      "--model",
        "llama-tiny", "--seq",       "16",        "--steps",  "1",        "--warmup",
        "0",          "--lora-rank", "4",         "--db",     db,         NULL};
    for (int i = 0; rest[i] != NULL; i++)
        argv[n++] = rest[i];
    argv[n] = NULL;
    int rc = lb_test_run_argv(argv, out, sizeof out, NULL);
    if (rc != 2 || strstr(out, "llmbench train: rank 1 was started with --lora-rank 4 where rank 0 "
                               "has (none): every rank needs the same options\n") == NULL)
        fail_msg("exit %d: %.2000s", rc, out);
    assert_int_equal(run((const char *[]){"results", "list", "--db", db, NULL}), 1);
    assert_non_null(strstr(err, "no results database"));
}

/* Ranks that differ in an option whose config key is spelt otherwise are told the option
 * they can type: --bucket-mb (its key is bucket_mib). */
static void test_cli_train_ranks_that_differ_are_told_the_option_name(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/bucket.db", g_dir);
    const char *argv[64] = {"mpirun", "--oversubscribe"};
    int n = 2;
    if (getuid() == 0) argv[n++] = "--allow-run-as-root";
    const char *rest[] = {
        "-np",         "1",          LB_TEST_BIN, "train",    "--device", "cpu",
        "--model",     "llama-tiny", "--seq",     "16",       "--steps",  "1",
        "--bucket-mb", "10",         "--db",      db,         ":",        "-np",
        "1",           LB_TEST_BIN,  "train",     "--device", "cpu",      "--model",
        "llama-tiny",  "--seq",      "16",        "--steps",  "1",        "--bucket-mb",
        "20",          "--db",       db,          NULL};
    for (int i = 0; rest[i] != NULL; i++)
        argv[n++] = rest[i];
    argv[n] = NULL;
    int rc = lb_test_run_argv(argv, out, sizeof out, NULL);
    if (rc != 2 || strstr(out, "llmbench train: rank 1 was started with --bucket-mb 20.0 where "
                               "rank 0 has 10.0: every rank needs the same options\n") == NULL)
        fail_msg("exit %d: %.2000s", rc, out);
}
#endif

/* --help says what name a run on several ranks gets by default: MODEL-DEVICE-PRECISION
 * followed by -xN-zeroSTAGE. */
static void test_cli_train_help_names_the_default_run_name_on_ranks(void **state) {
    (void)state;
    assert_int_equal(run((const char *[]){"train", "--help", NULL}), 0);
    assert_non_null(strstr(out, "(default MODEL-DEVICE-PRECISION, on N ranks with -xN-zeroSTAGE "
                                "after it)"));
}

static void test_cli_train_tiny_model_runs_with_its_defaults(void **state) {
    (void)state;
    int rc = run((const char *[]){"train", "--model", "gpt2-tiny", "--device", "cpu", "--steps",
                                  "1", "--warmup", "0", "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "config"), "seq")),
                     32);
    json_decref(doc);
}

/* A --name and a --tag that are not UTF-8 (typed in a Latin-1 terminal) are kept with '?'
 * for their odd bytes: the tag was left out and the run's JSON could not be written. */
static void test_cli_train_name_and_tag_not_utf8_are_kept(void **state) {
    (void)state;
    int rc = run((const char *[]){"train", "--model", "gpt2-tiny", "--device", "cpu", "--steps",
                                  "1", "--warmup", "0", "--name", "caf\xe9", "--tag", "t\xe9",
                                  "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    if (doc == NULL) fail_msg("not JSON: %s", out);
    assert_string_equal(json_string_value(json_object_get(doc, "name")), "caf?");
    const json_t *tags = json_object_get(doc, "tags");
    bool found = false;
    for (size_t i = 0; i < json_array_size(tags); i++)
        found |= strcmp(json_string_value(json_array_get(tags, i)), "t?") == 0;
    assert_true(found);
    json_decref(doc);
}

/* On a terminal a run shows the time left on its progress line. */
static void test_cli_train_progress_on_a_terminal_shows_the_time_left(void **state) {
    (void)state;
    int master = -1, slave = -1;
    assert_int_equal(openpty(&master, &slave, NULL, NULL, NULL), 0);
    pid_t pid = fork();
    if (pid == 0) {
        lb_test_die_with_parent();
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(slave, 2);
        close(master);
        close(slave);
        /* steps for longer than the test waits: it stops the run after the third line */
        execl(LB_TEST_BIN, "llmbench", "train", "--model", "gpt2-tiny", "--batch", "1", "--seq",
              "16", "--steps", "1000000", "--warmup", "0", "--db", g_db, (char *)NULL);
        _exit(127);
    }
    close(slave);
    static char tty[1 << 16];
    size_t n = 0;
    int64_t deadline = lb_clock_now_ns() + 120 * 1000000000LL;
    /* Three redraws (each starts with a carriage return) hold two whole lines. */
    for (int seen = 0; seen < 3 && n + 1 < sizeof tty && lb_clock_now_ns() < deadline;) {
        tty[n] = '\0';
        seen = 0;
        for (const char *p = strstr(tty, "ETA "); p; p = strstr(p + 1, "ETA "))
            seen++;
        if (seen >= 3) break;
        struct pollfd pfd = {.fd = master, .events = POLLIN};
        if (poll(&pfd, 1, 1000) <= 0) continue;
        ssize_t r = read(master, tty + n, sizeof tty - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
    }
    tty[n] = '\0';
    kill(pid, SIGINT);
    for (char sink[4096]; read(master, sink, sizeof sink) > 0;) {
    }
    close(master);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 130);
    /* the last line may be cut short: only the whole ones, between carriage returns */
    char *last = strrchr(tty, '\r');
    if (last) *last = '\0';
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "step ([0-9]+)/1000000 loss [0-9.]+ [0-9.]+ ms/step, ETA "
                             "([0-9]+ s|[0-9]+ min [0-5][0-9] s|[0-9]+ h [0-5][0-9] min) *$",
                             REG_EXTENDED | REG_NEWLINE),
                     0);
    int lines = 0;
    for (char *line = strtok(tty, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        if (strstr(line, "ETA") == NULL) continue;
        if (regexec(&re, line, 0, NULL, 0) != 0) fail_msg("progress line: '%s'", line);
        lines++;
    }
    regfree(&re);
    if (lines < 1) fail_msg("no progress line with ETA on the terminal: '%.400s'", tty);
}

static void test_cli_train_prints_no_result_when_the_store_cannot_be_used(void **state) {
    (void)state;
    char file[160], db[200];
    snprintf(file, sizeof file, "%s/plain-file", g_dir);
    assert_true(lb_test_write_file(file, ""));
    snprintf(db, sizeof db, "%s/results.db", file);
    const char *const args[] = {"train", "--model", "gpt2-tiny", "--steps", "1", "--db", db, NULL};
    assert_int_equal(run(args), 1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "plain-file"));
    const char *const json_args[] = {"train",  "--model", "gpt2-tiny", "--steps", "1",
                                     "--json", "--db",    db,          NULL};
    assert_int_equal(run(json_args), 1);
    assert_string_equal(out, "");
}

static void test_cli_train_stores_run_with_raw_samples(void **state) {
    (void)state;
    int rc = run((const char *[]){"train", "--model", "llama-tiny", "--device", "cpu", "--batch",
                                  "2", "--seq", "16", "--steps", "5", "--warmup", "1", "--json",
                                  "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_int_t id = json_integer_value(json_object_get(doc, "id"));
    assert_true(id > 0);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "ok");
    json_t *config = json_object_get(doc, "config");
    assert_string_equal(json_string_value(json_object_get(config, "fp32_matmul")), "ieee");
    assert_true(json_is_false(json_object_get(config, "tf32")));
    json_decref(doc);

    char id_s[32];
    snprintf(id_s, sizeof id_s, "%lld", (long long)id);
    assert_int_equal(
        run((const char *[]){"results", "export", id_s, "--format", "json", "--db", g_db, NULL}),
        0);
    json_t *exp = json_loads(out, 0, NULL);
    assert_non_null(exp);
    json_t *run0 = json_array_get(exp, 0);
    json_t *series = json_object_get(run0, "series");
    json_t *step_ms = json_object_get(json_object_get(series, "step_ms"), "values");
    json_t *loss = json_object_get(json_object_get(series, "loss"), "values");
    assert_int_equal(json_array_size(step_ms), 5);
    assert_int_equal(json_array_size(loss), 5);
    /* tokens/s recomputed from the exported raw step times */
    double total_s = 0;
    for (size_t i = 0; i < 5; i++)
        total_s += json_real_value(json_array_get(step_ms, i)) / 1e3;
    double tok_s = 0;
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(run0, "metrics"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "name")), "tokens_per_s") == 0)
            tok_s = json_real_value(json_object_get(m, "value"));
    }
    assert_float_equal(tok_s, 2.0 * 16 * 5 / total_s, 1e-6 * tok_s);
    json_decref(exp);
}

/* QLoRA on the CPU from the command line: stored with its adapter config and figures. */
static void test_cli_train_qlora_run_is_stored_with_its_figures(void **state) {
    (void)state;
    int rc = run((const char *[]){
        "train", "--model",     "llama-tiny", "--device",     "cpu",  "--batch",
        "2",     "--seq",       "16",         "--steps",      "3",    "--warmup",
        "0",     "--lora-rank", "4",          "--lora-alpha", "8",    "--lora-targets",
        "q,v",   "--quant",     "nf4",        "--json",       "--db", g_db,
        NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *config = json_object_get(doc, "config");
    assert_string_equal(json_string_value(json_object_get(config, "lora_targets")), "q,v");
    assert_string_equal(json_string_value(json_object_get(config, "quant")), "nf4");
    assert_float_equal(json_real_value(json_object_get(config, "lora_alpha")), 8.0, 0.0);
    /* llama-tiny, 2 layers: q 4 (64 + 64) + v 4 (64 + 32) = 896 a layer */
    double trainable = -1;
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(doc, "metrics"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "name")), "trainable_params") == 0)
            trainable = json_real_value(json_object_get(m, "value"));
    }
    assert_float_equal(trainable, 1792.0, 0.0);
    json_decref(doc);
}

static void test_cli_train_sigint_stores_interrupted_run(void **state) {
    (void)state;
    char out_path[160];
    snprintf(out_path, sizeof out_path, "%s/stdout", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "train", "--model", "gpt2-tiny", "--device", "cpu",
              "--batch", "2", "--seq", "16", "--steps", "100000000", "--warmup", "0", "--db", g_db,
              (char *)NULL);
        _exit(127);
    }
    /* Wait until steps have run: the first progress line (written to a file 5 s after the
     * first step, "step N/...") says so, however slow the machine or the build. */
    int64_t deadline = lb_clock_now_ns() + 120 * 1000000000LL;
    bool stepped = false;
    while (!stepped && lb_clock_now_ns() < deadline) {
        usleep(200 * 1000);
        char *text = lb_test_read_file(out_path, NULL);
        stepped = text != NULL && strstr(text, ": step ") != NULL;
        free(text);
    }
    assert_true(stepped);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    assert_int_equal(
        run((const char *[]){"results", "export", "--format", "json", "--db", g_db, NULL}), 0);
    json_t *all = json_loads(out, 0, NULL);
    assert_non_null(all);
    json_t *last = NULL, *r;
    size_t i;
    json_array_foreach(all, i, r) {
        if (strcmp(json_string_value(json_object_get(r, "status")), "interrupted") == 0) last = r;
    }
    assert_non_null(last);
    json_t *steps =
        json_object_get(json_object_get(json_object_get(last, "series"), "step_ms"), "values");
    assert_true(json_array_size(steps) > 0);
    assert_non_null(strstr(json_string_value(json_object_get(last, "failure")), "interrupted"));
    json_decref(all);
}

/* `llmbench train | head`: the reader goes away after the first progress line, and the
 * run stops as on Ctrl-C, stored interrupted (the default action of SIGPIPE would kill it
 * and leave it `running`). */
static void test_cli_train_closed_reader_stores_interrupted_run(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/pipe.db", g_dir);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "train", "--model", "gpt2-tiny", "--device", "cpu",
              "--batch", "2", "--seq", "16", "--steps", "100000000", "--warmup", "0", "--db", db,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    /* read until the first progress line ("step N/...", 5 s after the first step) */
    char seen[4096] = {0};
    size_t n = 0;
    while (strstr(seen, ": step ") == NULL && n + 1 < sizeof seen) {
        ssize_t k = read(fds[0], seen + n, sizeof seen - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    assert_non_null(strstr(seen, ": step "));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status)); /* not killed by the signal */
    /* 130 from the run's own end, 141 where a second SIGPIPE (its last words) ended it */
    assert_true(WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 128 + SIGPIPE);
    assert_int_equal(run((const char *[]){"results", "show", "1", "--json", "--db", db, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "interrupted");
    json_decref(doc);
}

/* Starts a long training run (batch B) storing into db, its output discarded, and returns
 * its pid once the run is recorded as begun (run 1 of db). */
static pid_t start_long_run(const char *db, const char *batch) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "train", "--model", "gpt2-tiny", "--device", "cpu",
              "--batch", batch, "--steps", "100000000", "--warmup", "0", "--db", db, (char *)NULL);
        _exit(127);
    }
    int rc = 1;
    for (int i = 0; i < 100 && rc != 0; i++) {
        usleep(100 * 1000);
        rc = run((const char *[]){"results", "show", "1", "--db", db, NULL});
    }
    assert_int_equal(rc, 0);
    return pid;
}

static void test_cli_train_crashed_run_keeps_its_config(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/crash.db", g_dir);
    pid_t pid = start_long_run(db, "3");
    assert_int_equal(kill(pid, SIGKILL), 0); /* as a crash would end it */
    waitpid(pid, NULL, 0);
    assert_int_equal(run((const char *[]){"results", "show", "1", "--json", "--db", db, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "running");
    json_t *config = json_object_get(doc, "config");
    assert_string_equal(json_string_value(json_object_get(config, "model")), "gpt2-tiny");
    assert_int_equal(json_integer_value(json_object_get(config, "batch")), 3);
    json_decref(doc);
}

static void test_cli_train_second_sigint_marks_the_run_interrupted(void **state) {
    (void)state;
    char db[160];
    snprintf(db, sizeof db, "%s/twice.db", g_dir);
    pid_t pid = start_long_run(db, "4");
    kill(pid, SIGINT);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    assert_int_equal(run((const char *[]){"results", "show", "1", "--json", "--db", db, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    /* Whichever came first, the finish of the first signal or the second signal's mark. */
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "interrupted");
    json_decref(doc);
}

static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(g_dir, sizeof g_dir);
    snprintf(g_db, sizeof g_db, "%s/results.db", g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    lb_test_rmtree(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_train_bad_input_exits_2_naming_it),
        cmocka_unit_test_teardown(test_cli_train_input_check_holds_the_shard_to_every_rank,
                                  leave_input_check),
        cmocka_unit_test_teardown(test_cli_train_input_check_counts_the_launchers_ranks,
                                  leave_launcher),
        cmocka_unit_test(test_cli_train_lora_alpha_not_positive_is_refused),
        cmocka_unit_test(test_cli_train_fit_advice_leaves_out_what_is_given),
#ifdef LB_HAVE_MPI
        cmocka_unit_test(test_cli_train_option_given_on_one_rank_only_stops_the_job),
        cmocka_unit_test(test_cli_train_ranks_that_differ_are_told_the_option_name),
#endif
        cmocka_unit_test(test_cli_train_help_names_the_default_run_name_on_ranks),
        cmocka_unit_test(test_cli_train_stores_run_with_raw_samples),
        cmocka_unit_test(test_cli_train_qlora_run_is_stored_with_its_figures),
        cmocka_unit_test(test_cli_train_sigint_stores_interrupted_run),
        cmocka_unit_test(test_cli_train_closed_reader_stores_interrupted_run),
        cmocka_unit_test(test_cli_train_tiny_model_runs_with_its_defaults),
        cmocka_unit_test(test_cli_train_name_and_tag_not_utf8_are_kept),
        cmocka_unit_test(test_cli_train_prints_no_result_when_the_store_cannot_be_used),
        cmocka_unit_test(test_cli_train_progress_on_a_terminal_shows_the_time_left),
        cmocka_unit_test(test_cli_train_crashed_run_keeps_its_config),
        cmocka_unit_test(test_cli_train_second_sigint_marks_the_run_interrupted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
