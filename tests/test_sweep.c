/* test_sweep.c: experiment matrices. The reader expands cells and names the line of every
 * fault; `llmbench sweep` refuses a bad file with exit 2 before anything runs, resumes
 * after SIGINT running only the missing cells, and its table agrees with the table
 * recomputed from `results export`. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/runctl.h"
#include "core/stats.h"
#include "store/store.h"
#include "sweep/matrix.h"
#include "sweep/sweep.h"
#include "test_util.h"

/* Steps of the resume test's cells: long enough that the sweep is still running cells
 * when the first is stored (about 0.5 s a cell optimised), short enough under the
 * sanitizers (about 15 s a cell at 40 steps). */
#ifdef __SANITIZE_ADDRESS__
#define RESUME_STEPS "40"
#else
#define RESUME_STEPS "400"
#endif

static char g_dir[64], g_db[128];
static char out[1 << 21], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static void parse_fails(const char *text, const char *needle) {
    lb_sweep_matrix m;
    lb_err e = {{0}};
    lb_status st = lb_sweep_matrix_parse(text, strlen(text), "m.yaml", &m, &e);
    lb_sweep_matrix_free(&m);
    if (st != LB_ERR_USAGE) fail_msg("accepted: %s", text);
    if (strstr(e.msg, needle) == NULL) fail_msg("'%s' lacks '%s'", e.msg, needle);
}

static void test_sweep_matrix_crosses_axes_last_fastest(void **state) {
    (void)state;
    const char *text = "name: zp\ncommand: train\nrepeats: 3\n"
                       "options: {model: gpt2-tiny, recompute: true, gemm-heuristic-only: false,"
                       " tag: [a, b]}\n"
                       "axes:\n  zero: [0, 1, 2]\n  precision: [fp16, fp32]\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    assert_int_equal(lb_sweep_matrix_parse(text, strlen(text), "m.yaml", &m, &e), LB_OK);
    assert_int_equal(m.n_cells, 6);
    assert_int_equal(m.repeats, 3);
    char label[128], small[8];
    assert_int_equal(lb_sweep_cell_label(&m, 0, label, sizeof label), 21);
    assert_string_equal(label, "zero=0,precision=fp16");
    lb_sweep_cell_label(&m, 3, label, sizeof label);
    assert_string_equal(label, "zero=1,precision=fp32");
    /* a buffer too small holds the start, and the length says how much it needs */
    assert_int_equal(lb_sweep_cell_label(&m, 3, small, sizeof small), 21);
    assert_string_equal(small, "zero=1,");
    assert_int_equal(lb_sweep_cell_label(&m, 3, NULL, 0), 21);
    char **argv = NULL;
    size_t argc = 0;
    assert_int_equal(lb_sweep_cell_args(&m, 5, &argv, &argc, &e), LB_OK);
    const char *want[] = {"--model", "gpt2-tiny", "--recompute", "--tag",       "a",   "--tag",
                          "b",       "--zero",    "2",           "--precision", "fp32"};
    assert_int_equal(argc, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < argc; i++)
        assert_string_equal(argv[i], want[i]);
    assert_null(argv[argc]);
    free(argv);
    /* the fingerprint tells cells apart and does not depend on repeats */
    assert_true(lb_sweep_cell_fingerprint(&m, 0) != lb_sweep_cell_fingerprint(&m, 1));
    uint64_t fp5 = lb_sweep_cell_fingerprint(&m, 5);
    lb_sweep_matrix_free(&m);
    const char *json = "{\"name\": \"zp\", \"command\": \"train\", \"repeats\": 1,"
                       "\"options\": {\"model\": \"gpt2-tiny\", \"recompute\": true,"
                       "\"gemm-heuristic-only\": false, \"tag\": [\"a\", \"b\"]},"
                       "\"axes\": {\"zero\": [0, 1, 2], \"precision\": [\"fp16\", \"fp32\"]}}";
    assert_int_equal(lb_sweep_matrix_parse(json, strlen(json), "m.json", &m, &e), LB_OK);
    assert_int_equal(m.n_cells, 6);
    assert_true(lb_sweep_cell_fingerprint(&m, 5) == fp5);
    lb_sweep_matrix_free(&m);
}

static void test_sweep_matrix_faults_name_line_and_key(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\naxes: {batch: []}\n",
                "m.yaml:3: key 'axes.batch': an empty axis");
    parse_fails("name: a\ncommand: train\naxes:\n  batch: 4\n",
                "m.yaml:4: key 'axes.batch': an axis is a list");
    parse_fails("name: a\ncommand: fly\n", "m.yaml:2: key 'command': not a command");
    parse_fails("name: a\ncommand: train\nrepeats: two\n", "m.yaml:3: key 'repeats'");
    parse_fails("name: a\ncommand: train\nrepeat: 2\n", "m.yaml:3: key 'repeat': unknown key");
    parse_fails("name: a\ncommand: train\noptions: {batch: {x: 1}}\n",
                "m.yaml:3: key 'options.batch': expected a single value");
    parse_fails("name: a\ncommand: train\noptions: [batch]\n",
                "m.yaml:3: key 'options': expected a mapping");
    parse_fails("name: a\ncommand: train\noptions: {db: x.db}\n",
                "key 'options.db': the sweep sets");
    parse_fails("command: train\n", "key 'name' is missing");
    parse_fails("name: a\ncommand: train\noptions: {batch: 2}\naxes: {batch: [1]}\n",
                "m.yaml:4: key 'axes.batch': also under options (line 3)");
    parse_fails("name: a\ncommand: [train\n", "m.yaml:3: not valid YAML or JSON");
    /* compare and report read "2024" and "1,2" as run ids, never as a sweep's name */
    parse_fails("name: 2024\ncommand: train\n", "m.yaml:1: key 'name': a sweep name of digits");
    parse_fails("name: \"a\\nb\"\ncommand: train\n",
                "m.yaml:1: key 'name': a sweep name has no ':', '/', blanks or control");
    parse_fails("name: '1,2'\ncommand: train\n", "m.yaml:1: key 'name': a sweep name of digits");
    /* one cell, run once, would stand for both */
    parse_fails("name: a\ncommand: train\naxes:\n  batch: [1, 2,\n    1]\n",
                "m.yaml:5: key 'axes.batch': a value given twice");
    parse_fails("name: a\ncommand: train\naxes: {recompute: [true, yes]}\n",
                "m.yaml:3: key 'axes.recompute': a value given twice");
    /* the name is its stored run's; a longer one was cut in its runs' tags, so that every
     * cell x repeat found the first one's run */
    char text[1024], name[129];
    memset(name, 'n', 128);
    name[128] = '\0';
    snprintf(text, sizeof text, "name: %s\ncommand: train\n", name);
    parse_fails(text, "m.yaml:1: key 'name': a sweep name of at most 127 characters");
    /* nothing of the file goes unread */
    parse_fails("name: a\ncommand: train\n---\nname: b\n", "m.yaml:4: a second document");
    parse_fails("name: a\ncommand: train\n---\n[b\n", "m.yaml:5: not valid YAML or JSON");
    /* more axes than a cell's index holds */
    int len = snprintf(text, sizeof text, "name: a\ncommand: train\naxes: {");
    for (int i = 0; i <= LB_SWEEP_MAX_AXES; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%sa%d: [1]", i ? ", " : "", i);
    snprintf(text + len, sizeof text - (size_t)len, "}\n");
    parse_fails(text, "m.yaml:3: key 'axes': over 64 axes");
}

/* A key given twice is refused whichever it is (the second repeats was taken silently), and
 * YAML's null is no name or command. */
static void test_sweep_matrix_refuses_repeats_twice_and_a_null_name(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\nrepeats: 2\nrepeats: 3\n",
                "m.yaml:4: key 'repeats': given twice");
    parse_fails("name: ~\ncommand: train\n", "m.yaml:1: key 'name': expected a non-empty word");
    parse_fails("name: a\ncommand: null\n", "m.yaml:2: key 'command': expected a non-empty word");
}

/* An axis value with ',' or '=' would make its cell's label ambiguous (report reads the
 * values back from "a=1,b=2"), and a line break would split the label's tag in two; under
 * options, which no label shows, such a value is taken. */
static void test_sweep_matrix_refuses_axis_values_a_label_cannot_hold(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\naxes:\n  lora-targets: [\"q,v\", all]\n",
                "m.yaml:4: key 'axes.lora-targets': a ',' in an axis value");
    parse_fails("name: a\ncommand: load\naxes: {slo: [ttft_ms=2000, ttft_ms=500]}\n",
                "m.yaml:3: key 'axes.slo': a '=' in an axis value");
    parse_fails("name: a\ncommand: train\naxes: {tag: [a, \"b\\nc\"]}\n",
                "m.yaml:3: key 'axes.tag': a control character in an axis value");
    const char *text = "name: a\ncommand: train\noptions: {lora-targets: \"q,v\"}\n"
                       "axes: {lora-rank: [4, 8]}\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    assert_int_equal(lb_sweep_matrix_parse(text, strlen(text), "m.yaml", &m, &e), LB_OK);
    assert_string_equal(m.options[0].values[0].text, "q,v");
    lb_sweep_matrix_free(&m);
}

/* 1, 01 and 1.0 are one number to the commands' parsers: their two cells would run the
 * same thing, and are refused as a value given twice is. */
static void test_sweep_matrix_refuses_one_number_written_twice(void **state) {
    (void)state;
    parse_fails(
        "name: a\ncommand: train\naxes:\n  batch: [1, 2,\n    01]\n",
        "m.yaml:5: key 'axes.batch': a value given twice: '01' is '1' (line 4) as a number");
    parse_fails("name: a\ncommand: train\naxes: {lr: [0.001, 1e-3]}\n",
                "m.yaml:3: key 'axes.lr': a value given twice: '1e-3' is '0.001' (line 3)");
    parse_fails("name: a\ncommand: train\naxes: {batch: [1, \"1.0\"]}\n",
                "m.yaml:3: key 'axes.batch': a value given twice: '1.0' is '1'");
    /* integers beyond a double's precision, and words, stay apart */
    const char *text = "name: a\ncommand: train\naxes: {seed: [9007199254740992, "
                       "9007199254740993], model: [gpt2-tiny, llama-tiny], b: [1K, 1k, 1024]}\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    if (lb_sweep_matrix_parse(text, strlen(text), "m.yaml", &m, &e) != LB_OK) fail_msg("%s", e.msg);
    assert_int_equal(m.n_cells, 12);
    lb_sweep_matrix_free(&m);
}

/* A value the commands' number parser (strtod) reads as another's is that value given
 * twice, hex included: lr 0.5 and 0x1p-1 would run one run twice. */
static void test_sweep_matrix_hex_axis_value_is_its_number(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\naxes: {lr: [0.5, 0x1p-1]}\n",
                "m.yaml:3: key 'axes.lr': a value given twice");
    parse_fails("name: a\ncommand: train\naxes: {batch: [16, 0x10]}\n",
                "m.yaml:3: key 'axes.batch': a value given twice");
}

static size_t count_runs(void) {
    if (access(g_db, F_OK) != 0) return 0; /* no database: `results list` never makes one */
    assert_int_equal(run((const char *[]){"results", "list", "--json", "--db", g_db, NULL}), 0);
    json_t *list = json_loads(out, 0, NULL);
    assert_non_null(list);
    size_t n = json_array_size(list);
    json_decref(list);
    return n;
}

static void test_sweep_bad_file_exits_2_and_runs_nothing(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/bad.yaml", g_dir);
    const struct {
        const char *text, *needle;
    } cases[] = {
        {"name: b\ncommand: train\noptions: {model: gpt2-tiny, bach: 2}\n",
         "bad.yaml:3: key 'options.bach': unknown option '--bach'"},
        {"name: b\ncommand: train\naxes:\n  batch: [1, two]\n",
         "bad.yaml:4: key 'axes.batch': option --batch expects an integer, got 'two'"},
        {"name: b\ncommand: train\naxes:\n  precision: [fp32, fp7]\n",
         "key 'axes.precision': option --precision expects one of fp32|fp16|bf16, got 'fp7'"},
        {"name: b\ncommand: train\noptions: {recompute: 3}\n", "key 'options.recompute'"},
        {"name: b\ncommand: trian\n", "bad.yaml:2: key 'command'"},
        {"name: b\ncommand: train\naxes:\n  lora-targets: [\"q,v\", all]\n",
         "bad.yaml:4: key 'axes.lora-targets': a ',' in an axis value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_true(lb_test_write_file(path, cases[i].text));
        int rc = run((const char *[]){"sweep", path, "--db", g_db, NULL});
        if (rc != 2) fail_msg("case %zu: exit %d, stderr %s", i, rc, err);
        if (strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu: stderr '%s' lacks '%s'", i, err, cases[i].needle);
        assert_null(strchr(err, '\n') == err + strlen(err) - 1 ? NULL : "more than one line");
    }
    assert_int_equal(count_runs(), 0);
}

/* train runs stored with this tag and status (the sweep's own run is of kind sweep) */
static size_t train_runs_tagged(const char *tag, lb_run_status status) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    assert_int_equal(lb_store_open(g_db, &s, &e), LB_OK);
    lb_store_filter f = lb_store_default_filter();
    f.tag = tag;
    f.kind = "train";
    f.status = status;
    lb_store_run_info *list = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(s, &f, &list, &n, &e), LB_OK);
    free(list);
    lb_store_close(s);
    return n;
}

static size_t count_lines(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* `llmbench sweep PATH` on g_db (and flag, unless NULL) as a child of this test, its stdout
 * and stderr into log. */
static pid_t start_sweep(const char *path, const char *log, const char *flag) {
    pid_t pid = fork();
    if (pid == 0) {
        lb_test_die_with_parent();
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "sweep", path, "--db", g_db, flag, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void test_sweep_resumes_after_sigint_running_only_missing_cells(void **state) {
    (void)state;
    char path[160], log[160];
    snprintf(path, sizeof path, "%s/resume.yaml", g_dir);
    snprintf(log, sizeof log, "%s/sweep.log", g_dir);
    assert_true(lb_test_write_file(
        path,
        "name: resume\ncommand: train\nrepeats: 2\n"
        "options: {model: gpt2-tiny, device: cpu, seq: 16, steps: " RESUME_STEPS ", warmup: 1}\n"
        "axes: {batch: [1, 2]}\n"));
    pid_t pid = start_sweep(path, log, NULL);
    /* interrupt once the first cell x repeat is stored */
    for (int i = 0; i < 50000 && train_runs_tagged("sweep:resume", LB_RUN_OK) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    size_t done = train_runs_tagged("sweep:resume", LB_RUN_OK);
    assert_true(done >= 1 && done < 4);

    int rc = run((const char *[]){"sweep", path, "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_int_equal(count_lines(err, "stored before as run"), done);
    assert_int_equal(count_lines(err, ": running"), 4 - done);
    assert_int_equal(train_runs_tagged("sweep:resume", LB_RUN_OK), 4);

    /* the table recomputed from the export agrees */
    json_t *table = json_loads(out, 0, NULL);
    assert_non_null(table);
    assert_string_equal(json_string_value(json_object_get(table, "status")), "ok");
    assert_int_equal(
        run((const char *[]){"results", "export", "--format", "json", "--db", g_db, NULL}), 0);
    json_t *all = json_loads(out, 0, NULL);
    assert_non_null(all);
    size_t i, j;
    json_t *cell, *id;
    json_array_foreach(json_object_get(table, "cells"), i, cell) {
        json_t *runs = json_object_get(cell, "runs");
        assert_int_equal(json_array_size(runs), 2);
        double v[2];
        json_array_foreach(runs, j, id) {
            json_t *r, *found = NULL;
            size_t k;
            json_array_foreach(all, k, r) if (json_integer_value(json_object_get(r, "id")) ==
                                              json_integer_value(id)) found = r;
            assert_non_null(found);
            char cell_tag[128];
            snprintf(cell_tag, sizeof cell_tag, "sweep-cell:%s",
                     json_string_value(json_object_get(cell, "label")));
            bool tagged = false;
            json_t *t;
            json_array_foreach(json_object_get(found, "tags"), k, t) tagged |=
                strcmp(json_string_value(t), cell_tag) == 0;
            assert_true(tagged);
            json_t *m;
            v[j] = NAN;
            json_array_foreach(
                json_object_get(found, "metrics"), k,
                m) if (strcmp(json_string_value(json_object_get(m, "name")), "tokens_per_s") == 0)
                v[j] = json_number_value(json_object_get(m, "value"));
        }
        json_t *tps = json_object_get(json_object_get(cell, "metrics"), "tokens_per_s");
        lb_stats_summary s = lb_stats_summarize(v, 2);
        assert_float_equal(json_number_value(json_object_get(tps, "median")), s.median,
                           1e-9 * s.median);
        assert_float_equal(json_number_value(json_object_get(tps, "std")), s.std, 1e-9 * s.median);
        assert_float_equal(json_number_value(json_object_get(tps, "min")), s.min, 1e-9 * s.median);
        assert_float_equal(json_number_value(json_object_get(tps, "max")), s.max, 1e-9 * s.median);
    }
    json_decref(all);
    json_decref(table);
}

/* The file the stderr of pid's child goes to into path ("" when no child runs). */
static void child_stderr(pid_t pid, char *path, size_t cap) {
    char proc[64], children[64] = "", link[96];
    path[0] = '\0';
    snprintf(proc, sizeof proc, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(proc, "r");
    pid_t child = f && fgets(children, sizeof children, f) ? atoi(children) : 0;
    if (f) fclose(f);
    snprintf(link, sizeof link, "/proc/%d/fd/2", (int)child);
    ssize_t n = child > 0 ? readlink(link, path, cap - 1) : -1;
    path[n > 0 ? n : 0] = '\0';
}

/* The log of the children's stderr has no name in /tmp while a cell runs (the sweep unlinks
 * it once made), so no ending, a second Ctrl-C's immediate exit included, can leave it
 * behind; one Ctrl-C then ends the sweep as interrupted. */
static void test_sweep_log_file_has_no_name_while_cells_run(void **state) {
    (void)state;
    char path[160], log[160], child_log[256] = "";
    snprintf(path, sizeof path, "%s/twice.yaml", g_dir);
    snprintf(log, sizeof log, "%s/twice.log", g_dir);
    assert_true(lb_test_write_file(path, "name: twice\ncommand: train\noptions: {model: gpt2-tiny, "
                                         "device: cpu, seq: 16, steps: 1000000}\n"));
    pid_t pid = start_sweep(path, log, NULL);
    /* the cell's run is stored as running, its stderr on the sweep's log */
    for (int i = 0; i < 6000 && train_runs_tagged("sweep:twice", LB_RUN_RUNNING) == 0; i++)
        usleep(10 * 1000);
    child_stderr(pid, child_log, sizeof child_log);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    if (strstr(child_log, "/tmp/llmbench-sweep-") == NULL ||
        strstr(child_log, " (deleted)") == NULL)
        fail_msg("the cell's stderr is '%s', not the sweep's log without a name", child_log);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
}

/* After the resume test: the plan lists what is stored and what would run, runs nothing. */
static void test_sweep_dry_run_plans_only_the_missing_repeats(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/resume3.yaml", g_dir);
    assert_true(lb_test_write_file(
        path,
        "name: resume\ncommand: train\nrepeats: 3\n"
        "options: {model: gpt2-tiny, device: cpu, seq: 16, steps: " RESUME_STEPS ", warmup: 1}\n"
        "axes: {batch: [1, 2]}\n"));
    size_t before = count_runs();
    int rc = run((const char *[]){"sweep", path, "--dry-run", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "2 of 6 to run"));
    assert_int_equal(count_lines(out, "stored as run"), 4);
    assert_non_null(strstr(out, "batch=2                              repeat 3: llmbench train "
                                "--model gpt2-tiny --device cpu --seq 16 --steps " RESUME_STEPS
                                " --warmup 1 --batch 2\n"));
    assert_int_equal(count_runs(), before);
    rc = run((const char *[]){"sweep", path, "--dry-run", "--again", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "6 of 6 to run"));
}

/* Run again, a finished sweep runs nothing; with --again every cell runs once more, and
 * the table holds the new round's runs. */
static void test_sweep_again_runs_every_cell_once_more(void **state) {
    (void)state;
    char path[160], db[160];
    snprintf(path, sizeof path, "%s/again.yaml", g_dir);
    snprintf(db, sizeof db, "%s/again.db", g_dir);
    assert_true(lb_test_write_file(path, "name: again\ncommand: train\n"
                                         "options: {model: gpt2-tiny, device: cpu, seq: 16, "
                                         "steps: 2}\naxes: {batch: [1, 2]}\n"));
    const char *plain[] = {"sweep", path, "--json", "--db", db, NULL};
    const char *again[] = {"sweep", path, "--again", "--json", "--db", db, NULL};
    int64_t first[2] = {0}, last[2] = {0};
    for (int round = 0; round < 3; round++) {
        int rc = run(round == 2 ? again : plain);
        if (rc != 0) fail_msg("round %d: exit %d: %s", round, rc, err);
        assert_int_equal(count_lines(err, ": running"), round == 1 ? 0 : 2);
        json_t *table = json_loads(out, 0, NULL);
        assert_non_null(table);
        json_t *cell;
        size_t i;
        json_array_foreach(json_object_get(table, "cells"), i, cell) {
            json_t *runs = json_object_get(cell, "runs");
            assert_int_equal(json_array_size(runs), 1);
            (round == 0 ? first : last)[i] = json_integer_value(json_array_get(runs, 0));
        }
        json_decref(table);
    }
    for (int i = 0; i < 2; i++)
        assert_true(last[i] > first[i]);
}

/* --again whose cell fails: the table does not fall back on the round before's ok run. */
/* Starts `serve --synthetic` on a free loopback port; its URL into url. */
static pid_t start_server(char *url, size_t cap) {
    char serve_out[160];
    snprintf(serve_out, sizeof serve_out, "%s/serve.out", g_dir);
    url[0] = '\0';
    pid_t pid = fork();
    if (pid == 0) {
        lb_test_die_with_parent();
        int fd = open(serve_out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        execl(LB_TEST_BIN, LB_TEST_BIN, "serve", "--synthetic", "--host", "127.0.0.1", "--port",
              "0", "--ttft-ms", "5", "--tpot-ms", "1", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000 && url[0] == '\0'; i++) { /* its first line names the port */
        usleep(10 * 1000);
        char *first = lb_test_read_file(serve_out, NULL);
        const char *at = first ? strstr(first, "http://") : NULL;
        if (at && strchr(at, '\n')) snprintf(url, cap, "%.*s", (int)strcspn(at, "\n"), at);
        free(first);
    }
    assert_true(url[0] != '\0');
    return pid;
}

static void test_sweep_again_table_holds_only_its_round(void **state) {
    (void)state;
    char path[160], db[160], text[512], url[64];
    snprintf(path, sizeof path, "%s/round.yaml", g_dir);
    snprintf(db, sizeof db, "%s/round.db", g_dir);
    pid_t pid = start_server(url, sizeof url);
    snprintf(text, sizeof text,
             "name: round\ncommand: load\noptions: {endpoint: \"%s\", model: synthetic, "
             "synthetic: 4, max-tokens: 2}\naxes: {qps: [20, 40]}\n",
             url);
    assert_true(lb_test_write_file(path, text));
    int rc = run((const char *[]){"sweep", path, "--no-progress", "--db", db, NULL});
    kill(pid, SIGKILL); /* the next round's cells fail */
    waitpid(pid, NULL, 0);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    rc = run(
        (const char *[]){"sweep", path, "--again", "--json", "--no-progress", "--db", db, NULL});
    assert_int_equal(rc, 1);
    json_t *table = json_loads(out, 0, NULL);
    assert_non_null(table);
    assert_string_equal(json_string_value(json_object_get(table, "status")), "failed");
    json_t *cell;
    size_t i;
    json_array_foreach(json_object_get(table, "cells"), i, cell) {
        assert_int_equal(json_array_size(json_object_get(cell, "runs")), 0);
        assert_int_equal(json_array_size(json_object_get(cell, "failed")), 1);
    }
    assert_int_equal(i, 2);
    json_decref(table);
}

/* comm's sizes are short options: a one-letter key is -k, checked by comm's own parser. */
static void test_sweep_one_letter_keys_are_short_options(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/comm.yaml", g_dir);
    assert_true(lb_test_write_file(path,
                                   "name: sizes\ncommand: comm\noptions: {backend: mpi, n: 5}\n"
                                   "axes: {b: [8, 1K], place: [in, out]}\n"));
    int rc = run((const char *[]){"sweep", path, "--dry-run", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "repeat 1: llmbench comm --backend mpi -n 5 -b 1K --place out\n"));
    assert_non_null(strstr(out, "4 of 4 to run"));
    assert_true(lb_test_write_file(path, "name: sizes\ncommand: comm\naxes:\n  d: [float, fp7]\n"));
    assert_int_equal(run((const char *[]){"sweep", path, "--dry-run", "--db", g_db, NULL}), 2);
    assert_non_null(strstr(err, "comm.yaml:4: key 'axes.d': option -d expects one of"));
}

/* load cells against `serve --synthetic`: each cell a stored load run; a cell that
 * completes with an INVALID verdict (exit 3: the 1 ms TTFT bound is missed) is stored ok
 * and counts as done. */
/* Writes g_dir/name from format (its one %s: the URL of a `serve --synthetic` started for
 * it), runs `sweep FILE --json` on g_db and stops the server; the sweep's exit code. */
static int sweep_against_a_server(const char *name, const char *format) {
    char path[160], text[512], url[64];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    pid_t pid = start_server(url, sizeof url);
    snprintf(text, sizeof text, format, url);
    assert_true(lb_test_write_file(path, text));
    int rc = run((const char *[]){"sweep", path, "--json", "--db", g_db, NULL});
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return rc;
}

static void test_sweep_of_load_cells_against_a_synthetic_server(void **state) {
    (void)state;
    int rc = sweep_against_a_server(
        "load.yaml",
        "name: rates\ncommand: load\noptions: {endpoint: \"%s\", model: synthetic, synthetic: "
        "20, max-tokens: 4}\naxes: {qps: [20, 40], ttft-limit-ms: [1, 5000]}\n");
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *table = json_loads(out, 0, NULL);
    assert_non_null(table);
    assert_string_equal(json_string_value(json_object_get(table, "status")), "ok");
    size_t i;
    json_t *cell;
    json_array_foreach(json_object_get(table, "cells"), i, cell) {
        assert_int_equal(json_array_size(json_object_get(cell, "runs")), 1);
        json_t *tps = json_object_get(json_object_get(cell, "metrics"), "output_tok_per_s");
        assert_true(json_number_value(json_object_get(tps, "median")) > 0);
    }
    assert_int_equal(i, 4);
    json_decref(table);
}

static void test_sweep_failed_cell_does_not_stop_the_others(void **state) {
    (void)state;
    /* nothing listens on port 1: that cell fails when it runs, the other one runs */
    int rc = sweep_against_a_server(
        "fail.yaml",
        "name: failing\ncommand: load\noptions: {model: synthetic, synthetic: 4, "
        "max-tokens: 2, qps: 20}\naxes: {endpoint: [\"http://127.0.0.1:1\", \"%s\"]}\n");
    if (rc != 1) fail_msg("exit %d: %s", rc, err);
    json_t *table = json_loads(out, 0, NULL);
    assert_non_null(table);
    json_t *cells = json_object_get(table, "cells");
    json_t *bad = json_object_get(json_array_get(cells, 0), "failed");
    assert_int_equal(json_array_size(bad), 1);
    const char *reason = json_string_value(json_object_get(json_array_get(bad, 0), "reason"));
    if (strstr(reason, "connect") == NULL) fail_msg("reason '%s' is not the connection's", reason);
    assert_int_equal(json_array_size(json_object_get(json_array_get(cells, 1), "runs")), 1);
    json_decref(table);
    assert_non_null(strstr(err, "repeat 1: FAILED, "));
    assert_null(strstr(err, "run -1"));
}

/* A cell x repeat is credited only with a run its own process began: run again, a cell
 * whose process now stores nothing (refused for an option, exit 2) is failed with that
 * process's sentence, not with the run and reason its earlier attempt stored. */
static void test_sweep_cell_storing_nothing_is_not_credited_with_an_earlier_run(void **state) {
    (void)state;
    char db[160], log[160], refuse[160], text[512];
    snprintf(db, sizeof db, "%s/earlier.db", g_dir);
    snprintf(log, sizeof log, "%s/earlier.log", g_dir);
    snprintf(refuse, sizeof refuse, "%s/refuse.sh", g_dir);
    /* the cell's command line with an option its command refuses before storing a run */
    snprintf(text, sizeof text, "#!/bin/sh\nexec %s \"$@\" --no-such-option\n", LB_TEST_BIN);
    assert_true(lb_test_write_file(refuse, text));
    assert_int_equal(chmod(refuse, 0700), 0);
    /* nothing listens on port 1: the first attempt stores a failed run */
    const char *yaml = "name: earlier\ncommand: load\noptions: {endpoint: \"http://127.0.0.1:1\", "
                       "model: synthetic, synthetic: 4, max-tokens: 2, qps: 20}\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    assert_int_equal(lb_sweep_matrix_parse(yaml, strlen(yaml), "earlier.yaml", &m, &e), LB_OK);
    lb_store *store = NULL;
    assert_int_equal(lb_store_open(db, &store, &e), LB_OK);
    lb_sweep_params p = lb_sweep_default_params();
    p.db_path = db;
    p.tags_env = LB_RUNCTL_TAGS_ENV;
    p.log_path = log;
    p.progress = false;
    const char *exe[2] = {LB_TEST_BIN, refuse};
    json_t *failed[2];
    for (int attempt = 0; attempt < 2; attempt++) {
        p.exe = exe[attempt];
        lb_result *agg = lb_result_new("sweep", m.name);
        assert_non_null(agg);
        assert_int_equal(lb_sweep_run(&m, &p, store, agg, &e), LB_ERR_RUNTIME);
        json_t *cell = json_array_get(json_object_get(agg->config, "cells"), 0);
        assert_int_equal(json_array_size(json_object_get(cell, "failed")), 1);
        failed[attempt] = json_incref(json_array_get(json_object_get(cell, "failed"), 0));
        lb_result_free(agg);
    }
    assert_true(json_is_integer(json_object_get(failed[0], "run")));
    const char *first = json_string_value(json_object_get(failed[0], "reason"));
    if (strstr(first, "connect") == NULL) fail_msg("reason '%s' is not the connection's", first);
    const char *second = json_string_value(json_object_get(failed[1], "reason"));
    if (!json_is_null(json_object_get(failed[1], "run")) ||
        strstr(second, "unknown option '--no-such-option'") == NULL)
        fail_msg("the second attempt is credited with run %lld, '%s'",
                 (long long)json_integer_value(json_object_get(failed[1], "run")), second);
    /* the first attempt's run is the only one */
    lb_store_filter f = lb_store_default_filter();
    f.tag = "sweep:earlier";
    lb_store_run_info *list = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(store, &f, &list, &n, &e), LB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, json_integer_value(json_object_get(failed[0], "run")));
    free(list);
    json_decref(failed[0]);
    json_decref(failed[1]);
    lb_store_close(store);
    lb_sweep_matrix_free(&m);
}

/* What the parser cannot judge from one value alone is checked per cell before anything
 * runs: a model's name, options that contradict each other, a missing data file. */
static void test_sweep_cells_are_checked_before_anything_runs(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/cells.yaml", g_dir);
    const struct {
        const char *text, *needle;
    } cases[] = {
        {"name: c\ncommand: train\noptions: {device: cpu, steps: 1}\n"
         "axes: {model: [gpt2-tiny, gtp2-tiny]}\n",
         "cells.yaml: cell model=gtp2-tiny: unknown model 'gtp2-tiny'"},
        {"name: c\ncommand: train\noptions: {device: cpu, model: gpt2-tiny, steps: 1}\n"
         "axes: {precision: [fp32, bf16]}\n",
         "cell precision=bf16: --precision bf16 needs --device cuda"},
        {"name: c\ncommand: train\noptions: {device: cpu, model: gpt2-tiny, steps: 1}\n"
         "axes: {seq: [16, 4096]}\n",
         "cell seq=4096: --seq 4096 does not fit model gpt2-tiny"},
        {"name: c\ncommand: train\noptions: {model: gpt2-tiny, data: /nonexistent/tokens.bin}\n",
         "/nonexistent/tokens.bin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_true(lb_test_write_file(path, cases[i].text));
        int rc = run((const char *[]){"sweep", path, "--db", g_db, NULL});
        if (rc != 2) fail_msg("case %zu: exit %d, stderr %s", i, rc, err);
        if (strstr(err, cases[i].needle) == NULL)
            fail_msg("case %zu: stderr '%s' lacks '%s'", i, err, cases[i].needle);
        assert_null(strchr(err, '\n') == err + strlen(err) - 1 ? NULL : "more than one line");
    }
    /* a cell's ranks read a token shard together: the gpus=4 cell needs 4 x 2 x 8 + 1 tokens
     * where one rank needs 17, and is refused before the gpus=1 cell runs */
    char shard[160], text[320];
    snprintf(shard, sizeof shard, "%s/cells.bin", g_dir);
    assert_int_equal(lb_test_write_shard(shard, 40, 128, 0, 9), 0);
    snprintf(text, sizeof text,
             "name: c\ncommand: train\noptions: {model: gpt2-tiny, batch: 2, seq: 8, steps: 1, "
             "data: %s}\naxes: {gpus: [1, 4]}\n",
             shard);
    assert_true(lb_test_write_file(path, text));
    int rc = run((const char *[]){"sweep", path, "--db", g_db, NULL});
    if (rc != 2) fail_msg("exit %d, stderr %s", rc, err);
    const char *want = "cell gpus=4: token shard";
    if (strstr(err, want) == NULL || strstr(err, "(4 ranks x 2, a rank's micro-batch)") == NULL)
        fail_msg("stderr '%s' lacks '%s' and the rank count", err, want);
    assert_int_equal(count_runs(), 0);
    /* a cell on the GPU is not refused where there is none, by a build that has CUDA: the
     * sweep may run elsewhere */
    assert_true(lb_test_write_file(path, "name: c\ncommand: train\noptions: {device: cuda, "
                                         "model: gpt2-tiny, precision: bf16, steps: 1}\n"));
    rc = run((const char *[]){"sweep", path, "--dry-run", "--db", g_db, NULL});
#ifdef LB_HAVE_CUDA
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
#else
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "built without CUDA"));
#endif
}

static void test_sweep_dry_run_creates_no_database(void **state) {
    (void)state;
    char path[160], db[160];
    snprintf(path, sizeof path, "%s/dry.yaml", g_dir);
    snprintf(db, sizeof db, "%s/never/made.db", g_dir);
    assert_true(lb_test_write_file(path, "name: dry\ncommand: train\n"
                                         "options: {model: gpt2-tiny, device: cpu, steps: 2}\n"
                                         "axes: {batch: [1, 2]}\n"));
    int rc = run((const char *[]){"sweep", path, "--dry-run", "--db", db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "2 of 2 to run"));
    char folder[160];
    snprintf(folder, sizeof folder, "%s/never", g_dir);
    assert_int_equal(access(folder, F_OK), -1);
}

/* A NUL ("\0" in a quoted YAML string) would end its argument there: the command took "a"
 * for "a\0b", and two axis values that differ after it read as one value given twice. */
static void test_sweep_matrix_refuses_a_nul_in_a_key_or_value(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\noptions: {tag: \"a\\0b\"}\n",
                "m.yaml:3: key 'options.tag': a NUL character (\\0) in a value");
    parse_fails("name: a\ncommand: train\naxes: {tag: [\"x\\0y\", x]}\n",
                "m.yaml:3: key 'axes.tag': a NUL character (\\0) in a value");
    parse_fails("name: a\ncommand: train\noptions: {\"tag\\0x\": a}\n",
                "m.yaml:3: key 'options.tag': an option name is written as in --help");
    parse_fails("name: a\ncommand: train\n\"repeats\\0\": 2\n", "m.yaml:3: key '?': a key must be");
}

/* --help in a cell printed the help and stored nothing: every cell failed after the
 * checks had passed it. */
static void test_sweep_matrix_refuses_help_as_an_option(void **state) {
    (void)state;
    parse_fails("name: a\ncommand: train\noptions: {model: gpt2-tiny, help: true}\n",
                "m.yaml:3: key 'options.help': a cell would print its command's help");
    parse_fails("name: a\ncommand: comm\naxes:\n  h: [true, false]\n",
                "m.yaml:4: key 'axes.h': a cell would print its command's help");
}

/* While a sweep runs, a second one of its name on its database would run the same cells
 * and mix its runs into the first one's table: it is refused at once with one line (exit 1)
 * and stores nothing. A sweep of another name runs beside it, and the lock ends with the
 * sweep, stopped or killed. */
static void test_sweep_second_of_one_name_is_refused_while_the_first_runs(void **state) {
    (void)state;
    char slow[160], quick[160], other[160], log[160];
    snprintf(slow, sizeof slow, "%s/busy-slow.yaml", g_dir);
    snprintf(quick, sizeof quick, "%s/busy-quick.yaml", g_dir);
    snprintf(other, sizeof other, "%s/beside.yaml", g_dir);
    snprintf(log, sizeof log, "%s/busy.log", g_dir);
    assert_true(lb_test_write_file(slow, "name: busy\ncommand: train\noptions: {model: gpt2-tiny, "
                                         "device: cpu, seq: 16, steps: 1000000}\n"));
    assert_true(lb_test_write_file(quick, "name: busy\ncommand: train\noptions: {model: gpt2-tiny, "
                                          "device: cpu, seq: 16, steps: 2}\n"));
    assert_true(lb_test_write_file(other, "name: beside\ncommand: train\noptions: {model: "
                                          "gpt2-tiny, device: cpu, seq: 16, steps: 2}\n"));
    const int stop[] = {SIGINT, SIGKILL};
    for (int round = 0; round < 2; round++) {
        pid_t pid = start_sweep(slow, log, NULL);
        for (int i = 0; i < 6000 && train_runs_tagged("sweep:busy", LB_RUN_RUNNING) == 0; i++)
            usleep(10 * 1000);
        assert_int_equal(train_runs_tagged("sweep:busy", LB_RUN_RUNNING), 1);
        size_t before = count_runs();
        int rc = run((const char *[]){"sweep", quick, "--db", g_db, NULL});
        if (rc != 1) fail_msg("round %d: exit %d, stderr %s", round, rc, err);
        if (strstr(err, "llmbench sweep: sweep 'busy' is already running on ") == NULL)
            fail_msg("round %d: stderr '%s' does not say the sweep is running", round, err);
        assert_null(strchr(err, '\n') == err + strlen(err) - 1 ? NULL : "more than one line");
        assert_int_equal(count_runs(), before);
        if (round == 0) {
            rc = run((const char *[]){"sweep", other, "--db", g_db, NULL});
            if (rc != 0) fail_msg("exit %d beside the running sweep: %s", rc, err);
        }
        assert_int_equal(kill(pid, stop[round]), 0);
        int status = 0;
        waitpid(pid, &status, 0);
        /* a killed sweep's cell holds the lock (inherited) until it has stored its run */
        for (int i = 0; i < 300; i++) {
            rc = run((const char *[]){"sweep", quick, "--db", g_db, NULL});
            if (rc != 1 || strstr(err, "is already running") == NULL) break;
            assert_int_equal(round, 1);
            usleep(100 * 1000);
        }
        if (rc != 0) fail_msg("round %d: exit %d after the first sweep ended: %s", round, rc, err);
        assert_int_equal(train_runs_tagged("sweep:busy", LB_RUN_RUNNING), 0);
    }
}

/* n copies of the two bytes of U+00E9 after prefix, into out. */
static void e_acute(char *text, const char *prefix, size_t n) {
    size_t len = (size_t)sprintf(text, "%s", prefix);
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "\xc3\xa9");
}

/* A cell's label is whole however long: in its runs' sweep-cell tag, the progress lines,
 * the plan and the table (cut at 255 bytes, a label split a character, was no JSON string,
 * and its cell fell out of the plan and the table). A one-line error shows it cut between
 * characters with "...", so the command's reason still fits. */
static void test_sweep_long_label_is_whole_and_cut_visibly_in_errors(void **state) {
    (void)state;
    char path[160], va[700], vb[700], text[2000], label[800], want[1000];
    snprintf(path, sizeof path, "%s/long.yaml", g_dir);
    e_acute(va, "a", 300);
    e_acute(vb, "b", 300);
    snprintf(text, sizeof text,
             "name: long\ncommand: train\noptions: {model: gpt2-tiny, device: cpu, seq: 16, "
             "steps: 2}\naxes: {tag: [%s, %s]}\n",
             va, vb);
    assert_true(lb_test_write_file(path, text));
    snprintf(label, sizeof label, "tag=%s", va);
    int rc = run((const char *[]){"sweep", path, "--dry-run", "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *plan = json_loads(out, 0, NULL);
    assert_non_null(plan);
    assert_int_equal(json_array_size(plan), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(plan, 0), "label")),
                        label);
    json_decref(plan);

    rc = run((const char *[]){"sweep", path, "--json", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    snprintf(want, sizeof want, "sweep long [1/2] %s repeat 1/1: running\n", label);
    assert_non_null(strstr(err, want));
    json_t *table = json_loads(out, 0, NULL);
    assert_non_null(table);
    json_t *cells = json_object_get(table, "cells");
    assert_int_equal(json_array_size(cells), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cells, 0), "label")),
                        label);
    json_decref(table);
    snprintf(want, sizeof want, "sweep-cell:%s", label);
    assert_int_equal(train_runs_tagged(want, LB_RUN_OK), 1);

    /* "tag=x" and 77 whole characters are 159 bytes: the 78th would pass 160 */
    e_acute(va, "x", 300);
    snprintf(text, sizeof text,
             "name: long\ncommand: train\noptions: {device: cpu, steps: 1}\n"
             "axes: {tag: [%s], model: [gtp2-tiny]}\n",
             va);
    assert_true(lb_test_write_file(path, text));
    rc = run((const char *[]){"sweep", path, "--db", g_db, NULL});
    if (rc != 2) fail_msg("exit %d: %s", rc, err);
    e_acute(label, "long.yaml: cell tag=x", 77);
    snprintf(want, sizeof want, "%s...: unknown model 'gtp2-tiny'", label);
    if (strstr(err, want) == NULL) fail_msg("stderr '%s' lacks '%s'", err, want);
}

/* A failed cell's reason is its command's last line, which may hold any bytes (a Latin-1
 * file name) or end inside a character where it was cut: it is made UTF-8, so that the
 * failure is in the table's JSON (a reason jansson refused left the failure out). */
static void test_sweep_failure_reason_of_any_bytes_is_in_the_table(void **state) {
    (void)state;
    char db[160], log[160], script[160];
    snprintf(db, sizeof db, "%s/latin.db", g_dir);
    snprintf(log, sizeof log, "%s/latin.log", g_dir);
    snprintf(script, sizeof script, "%s/latin.sh", g_dir);
    assert_true(lb_test_write_file(
        script, "#!/bin/sh\nprintf 'llmbench load: cannot read caf\\351.txt\\n' >&2\nexit 1\n"));
    assert_int_equal(chmod(script, 0700), 0);
    const char *yaml = "name: latin\ncommand: load\noptions: {model: synthetic}\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    assert_int_equal(lb_sweep_matrix_parse(yaml, strlen(yaml), "latin.yaml", &m, &e), LB_OK);
    lb_store *store = NULL;
    assert_int_equal(lb_store_open(db, &store, &e), LB_OK);
    lb_sweep_params p = lb_sweep_default_params();
    p.exe = script;
    p.db_path = db;
    p.tags_env = LB_RUNCTL_TAGS_ENV;
    p.log_path = log;
    p.progress = false;
    lb_result *agg = lb_result_new("sweep", m.name);
    assert_non_null(agg);
    assert_int_equal(lb_sweep_run(&m, &p, store, agg, &e), LB_ERR_RUNTIME);
    json_t *cell = json_array_get(json_object_get(agg->config, "cells"), 0);
    json_t *failed = json_object_get(cell, "failed");
    assert_int_equal(json_array_size(failed), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(failed, 0), "reason")),
                        "cannot read caf?.txt");
    assert_non_null(strstr(agg->failure, "(1 failed in this sweep)"));
    lb_result_free(agg);
    lb_store_close(store);
    lb_sweep_matrix_free(&m);
}

/* A cell whose process cannot start (here a program that is not there; in a sweep, its
 * arguments or tags past the system's limits) fails alone with the reason, and the sweep
 * goes on to its other cells and ends with its table (it stopped there without one). */
static void test_sweep_cell_that_cannot_start_fails_alone(void **state) {
    (void)state;
    char db[160], log[160];
    snprintf(db, sizeof db, "%s/nostart.db", g_dir);
    snprintf(log, sizeof log, "%s/nostart.log", g_dir);
    const char *yaml = "name: nostart\ncommand: load\noptions: {model: synthetic}\n"
                       "axes: {qps: [1, 2]}\n";
    lb_sweep_matrix m;
    lb_err e = {{0}};
    assert_int_equal(lb_sweep_matrix_parse(yaml, strlen(yaml), "nostart.yaml", &m, &e), LB_OK);
    lb_store *store = NULL;
    assert_int_equal(lb_store_open(db, &store, &e), LB_OK);
    lb_sweep_params p = lb_sweep_default_params();
    p.exe = "/nonexistent/llmbench";
    p.db_path = db;
    p.tags_env = LB_RUNCTL_TAGS_ENV;
    p.log_path = log;
    p.progress = false;
    lb_result *agg = lb_result_new("sweep", m.name);
    assert_non_null(agg);
    assert_int_equal(lb_sweep_run(&m, &p, store, agg, &e), LB_ERR_RUNTIME);
    json_t *cells = json_object_get(agg->config, "cells");
    assert_int_equal(json_array_size(cells), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *failed = json_object_get(json_array_get(cells, i), "failed");
        assert_int_equal(json_array_size(failed), 1);
        const char *reason =
            json_string_value(json_object_get(json_array_get(failed, 0), "reason"));
        if (strstr(reason, "cannot start /nonexistent/llmbench") == NULL)
            fail_msg("cell %zu: reason '%s'", i, reason);
    }
    assert_non_null(strstr(agg->failure, "(2 failed in this sweep)"));
    lb_result_free(agg);
    lb_store_close(store);
    lb_sweep_matrix_free(&m);
}

/* The plan prints each command a cell would run as it can be pasted into a shell: a value
 * with a blank, a quote or a '$' is one quoted word (it was printed bare, and pasted ran
 * other arguments than the cell). */
static void test_sweep_dry_run_quotes_values_for_the_shell(void **state) {
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/quoted.yaml", g_dir);
    assert_true(lb_test_write_file(path, "name: quoted\ncommand: train\n"
                                         "options: {model: gpt2-tiny, device: cpu, steps: 2, "
                                         "tag: [\"a b\", \"it's\", \"$HOME\", x=1]}\n"));
    int rc = run((const char *[]){"sweep", path, "--dry-run", "--db", g_db, NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    const char *want = "repeat 1: llmbench train --model gpt2-tiny --device cpu --steps 2 "
                       "--tag 'a b' --tag 'it'\\''s' --tag '$HOME' --tag x=1\n";
    if (strstr(out, want) == NULL) fail_msg("stdout '%s' lacks '%s'", out, want);
}

/* An interrupted round of --again is not resumed by the same command (it runs every cell
 * anew): the message says so, where it said to run the same command again to resume. */
static void test_sweep_interrupted_again_round_says_how_to_go_on(void **state) {
    (void)state;
    char path[160], log[160];
    snprintf(path, sizeof path, "%s/again-stop.yaml", g_dir);
    snprintf(log, sizeof log, "%s/again-stop.log", g_dir);
    assert_true(lb_test_write_file(path, "name: againstop\ncommand: train\noptions: {model: "
                                         "gpt2-tiny, device: cpu, seq: 16, steps: 1000000}\n"));
    pid_t pid = start_sweep(path, log, "--again");
    for (int i = 0; i < 6000 && train_runs_tagged("sweep:againstop", LB_RUN_RUNNING) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(train_runs_tagged("sweep:againstop", LB_RUN_RUNNING), 1);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    char *text = lb_test_read_file(log, NULL);
    assert_non_null(text);
    const char *want = "llmbench sweep: interrupted at cell all repeat 1; run it again without "
                       "--again to finish with the runs stored (with --again every cell runs "
                       "anew)\n";
    if (strstr(text, want) == NULL) fail_msg("log '%s' lacks '%s'", text, want);
    free(text);
}

LB_TEST_DIR_DB_FIXTURE(g_dir, g_db)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_matrix_crosses_axes_last_fastest),
        cmocka_unit_test(test_sweep_matrix_faults_name_line_and_key),
        cmocka_unit_test(test_sweep_matrix_refuses_repeats_twice_and_a_null_name),
        cmocka_unit_test(test_sweep_matrix_refuses_axis_values_a_label_cannot_hold),
        cmocka_unit_test(test_sweep_matrix_refuses_one_number_written_twice),
        cmocka_unit_test(test_sweep_matrix_hex_axis_value_is_its_number),
        cmocka_unit_test(test_sweep_bad_file_exits_2_and_runs_nothing),
        cmocka_unit_test(test_sweep_resumes_after_sigint_running_only_missing_cells),
        cmocka_unit_test(test_sweep_log_file_has_no_name_while_cells_run),
        cmocka_unit_test(test_sweep_dry_run_plans_only_the_missing_repeats),
        cmocka_unit_test(test_sweep_again_runs_every_cell_once_more),
        cmocka_unit_test(test_sweep_again_table_holds_only_its_round),
        cmocka_unit_test(test_sweep_one_letter_keys_are_short_options),
        cmocka_unit_test(test_sweep_of_load_cells_against_a_synthetic_server),
        cmocka_unit_test(test_sweep_failed_cell_does_not_stop_the_others),
        cmocka_unit_test(test_sweep_cell_storing_nothing_is_not_credited_with_an_earlier_run),
        cmocka_unit_test(test_sweep_cells_are_checked_before_anything_runs),
        cmocka_unit_test(test_sweep_dry_run_creates_no_database),
        cmocka_unit_test(test_sweep_matrix_refuses_a_nul_in_a_key_or_value),
        cmocka_unit_test(test_sweep_matrix_refuses_help_as_an_option),
        cmocka_unit_test(test_sweep_second_of_one_name_is_refused_while_the_first_runs),
        cmocka_unit_test(test_sweep_long_label_is_whole_and_cut_visibly_in_errors),
        cmocka_unit_test(test_sweep_failure_reason_of_any_bytes_is_in_the_table),
        cmocka_unit_test(test_sweep_cell_that_cannot_start_fails_alone),
        cmocka_unit_test(test_sweep_dry_run_quotes_values_for_the_shell),
        cmocka_unit_test(test_sweep_interrupted_again_round_says_how_to_go_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
