/* test_schedule.c: `llmbench schedule`. A crontab line is installed through crontab(1) (a
 * stand-in of the test's own, first on PATH, which keeps the table in a file: no test
 * touches the table of the user who runs them), read back by `crontab -l` and `schedule
 * list`, and removed with every other line of the
 * table kept; a systemd user timer and service are written and accepted by
 * `systemd-analyze verify`, then removed; the Kubernetes CronJob parses as YAML (libyaml)
 * with its command, variable and GPU request, every value from the user a string; `schedule
 * exec` tags its run, writes a report, and does not start while another scheduled run
 * holds the lock; bad input (a control character, a name add refuses, --at other than
 * two-digit HH:MM) exits 2; remove keeps a user's line after an entry whose job line was
 * edited away; words with '\', '%' and quotes reach the command as given through cron's
 * reading of the line and /bin/sh; a timer that cannot be written leaves the service as it
 * was. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <yaml.h>

#include <cmocka.h>

#include "store/store.h"
#include "test_util.h"

static char g_dir[64], g_db[128];
static char out[1 << 20], err[1 << 16];

static int run(const char *const *args) {
    return lb_test_run(args, out, sizeof out, err, sizeof err);
}

static bool have(const char *tool) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
    return system(cmd) == 0;
}

/* A crontab(1) that keeps the table in g_dir/fake.crontab and, like cron's, says "no
 * crontab for USER" on stderr when there is none; first on PATH for the whole program, so
 * that no test touches the table of the user who runs them. 0, or -1 when it cannot be. */
static int fake_crontab(void) {
    char bin[160], script[200], text[600];
    snprintf(bin, sizeof bin, "%s/fakebin", g_dir);
    snprintf(script, sizeof script, "%s/crontab", bin);
    snprintf(text, sizeof text,
             "#!/bin/sh\nF=%s/fake.crontab\n"
             "if [ \"$1\" = -l ]; then [ -f $F ] && exec cat $F; "
             "echo \"no crontab for tester\" >&2; exit 1; fi\ncat > $F\n",
             g_dir);
    if (mkdir(bin, 0755) != 0 || !lb_test_write_file(script, text) || chmod(script, 0755) != 0)
        return -1;
    const char *old = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
    char path[4400];
    if (snprintf(path, sizeof path, "%s:%s", bin, old) >= (int)sizeof path) return -1;
    return setenv("PATH", path, 1);
}

static void test_schedule_cron_line_added_listed_and_removed(void **state) {
    (void)state;
    char table_path[200];
    snprintf(table_path, sizeof table_path, "%s/fake.crontab", g_dir);
    /* a line of the user's own that must survive */
    assert_true(lb_test_write_file(table_path, "5 4 * * * true # lbtest keep\n"));
    int rc = run((const char *[]){"schedule", "add", "lbtest-nightly", "--at", "19:00", "--days",
                                  "mon,fri", "--db", g_db, "--", "train", "--model", "gpt2-tiny",
                                  "--name", "it's 100%", NULL});
    char *table = lb_test_read_file(table_path, NULL);
    int rc_list = run((const char *[]){"schedule", "list", NULL});
    bool listed = strstr(out, "lbtest-nightly") != NULL;
    int rc_remove = run((const char *[]){"schedule", "remove", "lbtest-nightly", NULL});
    char *after = lb_test_read_file(table_path, NULL);
    int rc_again = run((const char *[]){"schedule", "remove", "lbtest-nightly", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(table);
    assert_non_null(strstr(table, "5 4 * * * true # lbtest keep\n"));
    assert_non_null(strstr(table, "# llmbench schedule lbtest-nightly\n0 19 * * 1,5 "));
    assert_non_null(strstr(table, "'schedule' 'exec' 'lbtest-nightly'"));
    assert_non_null(strstr(table, "'it'\\''s 100\\%'")); /* quoted for sh, % escaped for cron */
    assert_int_equal(rc_list, 0);
    assert_true(listed);
    assert_int_equal(rc_remove, 0);
    assert_non_null(after);
    assert_string_equal(after, "5 4 * * * true # lbtest keep\n");
    assert_int_equal(rc_again, 2);
    assert_non_null(strstr(err, "no crontab entry named 'lbtest-nightly'"));
    free(table);
    free(after);
}

static void test_schedule_systemd_units_verify_and_remove(void **state) {
    (void)state;
    char cfg[160], timer[256], service[256];
    snprintf(cfg, sizeof cfg, "%s/config", g_dir);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    int rc = run((const char *[]){"schedule", "add", "lbtest-timer", "--at", "07:05", "--days",
                                  "weekdays", "--backend", "systemd", "--report", g_dir, "--db",
                                  g_db, "--", "train", "--model", "gpt2-tiny", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    snprintf(timer, sizeof timer, "%s/systemd/user/llmbench-lbtest-timer.timer", cfg);
    snprintf(service, sizeof service, "%s/systemd/user/llmbench-lbtest-timer.service", cfg);
    char *t = lb_test_read_file(timer, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "OnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 07:05:00\n"));
    free(t);
    char *s = lb_test_read_file(service, NULL);
    assert_non_null(s);
    assert_non_null(strstr(s, "\"schedule\" \"exec\" \"lbtest-timer\" \"--report\""));
    free(s);
    if (have("systemd-analyze")) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "cd %s/systemd/user && systemd-analyze verify "
                 "llmbench-lbtest-timer.timer llmbench-lbtest-timer.service",
                 cfg);
        assert_int_equal(system(cmd), 0);
    } else {
        fprintf(stderr, "systemd-analyze is not installed: units not verified\n");
    }
    assert_int_equal(run((const char *[]){"schedule", "list", NULL}), 0);
    assert_non_null(strstr(out, "systemd  lbtest-timer"));
    assert_int_equal(
        run((const char *[]){"schedule", "remove", "lbtest-timer", "--backend", "systemd", NULL}),
        0);
    assert_int_equal(access(timer, F_OK), -1);
    assert_int_equal(access(service, F_OK), -1);
    unsetenv("XDG_CONFIG_HOME");
}

/* The scalar at a path of mapping keys ("spec", "schedule") in a libyaml document. */
static yaml_node_t *at(yaml_document_t *d, yaml_node_t *n, const char *const *keys) {
    for (size_t k = 0; keys[k] && n; k++) {
        yaml_node_t *next = NULL;
        if (n->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
                 p++)
                if (strcmp((char *)yaml_document_get_node(d, p->key)->data.scalar.value, keys[k]) ==
                    0)
                    next = yaml_document_get_node(d, p->value);
        } else if (n->type == YAML_SEQUENCE_NODE) {
            size_t i = (size_t)atoi(keys[k]);
            if (n->data.sequence.items.start + i < n->data.sequence.items.top)
                next = yaml_document_get_node(d, n->data.sequence.items.start[i]);
        }
        n = next;
    }
    return n;
}

static const char *scalar_at(yaml_document_t *d, const char *const *keys) {
    yaml_node_t *n = at(d, yaml_document_get_root_node(d), keys);
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static void test_schedule_kubernetes_cronjob_parses(void **state) {
    (void)state;
    int rc = run((const char *[]){"schedule", "add", "nightly", "--at", "19:00", "--backend",
                                  "kubernetes", "--gpus", "8", "--image", "reg/llmbench:1", "--",
                                  "train", "--model", "gpt2-124m", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    yaml_parser_t parser;
    yaml_document_t doc;
    assert_true(yaml_parser_initialize(&parser));
    yaml_parser_set_input_string(&parser, (const unsigned char *)out, strlen(out));
    assert_true(yaml_parser_load(&parser, &doc));
    assert_string_equal(scalar_at(&doc, (const char *[]){"kind", NULL}), "CronJob");
    assert_string_equal(scalar_at(&doc, (const char *[]){"spec", "schedule", NULL}), "0 19 * * *");
    assert_string_equal(scalar_at(&doc, (const char *[]){"spec", "concurrencyPolicy", NULL}),
                        "Forbid");
    const char *c[] = {"spec", "jobTemplate", "spec", "template", "spec", "containers", "0", NULL};
    yaml_node_t *container = at(&doc, yaml_document_get_root_node(&doc), c);
    assert_non_null(container);
    const char *img[] = {"spec",       "jobTemplate", "spec",  "template", "spec",
                         "containers", "0",           "image", NULL};
    assert_string_equal(scalar_at(&doc, img), "reg/llmbench:1");
    const char *gpu[] = {"spec", "jobTemplate", "spec",   "template",       "spec", "containers",
                         "0",    "resources",   "limits", "nvidia.com/gpu", NULL};
    assert_string_equal(scalar_at(&doc, gpu), "8");
    const char *env[] = {"spec", "jobTemplate", "spec", "template", "spec", "containers",
                         "0",    "env",         "0",    "name",     NULL};
    assert_string_equal(scalar_at(&doc, env), "LLMBENCH_DB");
    const char *words[] = {"llmbench", "schedule", "exec", "nightly"};
    for (int i = 0; i < 4; i++) {
        char idx[4];
        snprintf(idx, sizeof idx, "%d", i);
        const char *cmd[] = {"spec",       "jobTemplate", "spec",    "template", "spec",
                             "containers", "0",           "command", idx,        NULL};
        assert_string_equal(scalar_at(&doc, cmd), words[i]);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
}

/* The node at keys, which must be a double-quoted scalar (a string whatever it holds, where
 * a plain 2024, on or null is a number, a bool or null) holding want. */
static void assert_string_at(yaml_document_t *d, const char *const *keys, const char *want) {
    yaml_node_t *n = at(d, yaml_document_get_root_node(d), keys);
    assert_non_null(n);
    assert_int_equal(n->type, YAML_SCALAR_NODE);
    assert_string_equal((const char *)n->data.scalar.value, want);
    assert_int_equal(n->data.scalar.style, YAML_DOUBLE_QUOTED_SCALAR_STYLE);
}

/* What the user gives reads back from the CronJob, by a YAML parser, as the strings given:
 * names YAML would read as a number, bool or null, such an image, claim and report folder,
 * and command words that are numbers, bools, nulls, indicators, comments or "key: value". */
static void test_schedule_cronjob_values_read_back_as_strings(void **state) {
    (void)state;
    const char *names[] = {"2024", "on", "yes", "null", "1e3"};
    const char *cmd[] = {"train", "--tag", "true",  "--tag", "1e3",   "--tag", "null",
                         "--tag", "-",     "--tag", ":",     "--tag", "a #b",  "--tag",
                         "k: v",  "--tag", "~",     "--tag", "[x",    "--tag", "\"q\" \\ 'x'"};
    const size_t n_cmd = sizeof cmd / sizeof cmd[0];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *args[14 + sizeof cmd / sizeof cmd[0] + 1] = {
            "schedule", "add",  names[k], "--at", "19:00",    "--backend", "kubernetes",
            "--image",  "true", "--pvc",  "null", "--report", "~",         "--"};
        memcpy(args + 14, cmd, sizeof cmd);
        args[14 + n_cmd] = NULL;
        int rc = run(args);
        if (rc != 0) fail_msg("%s: exit %d: %s", names[k], rc, err);
        yaml_parser_t parser;
        yaml_document_t doc;
        assert_true(yaml_parser_initialize(&parser));
        yaml_parser_set_input_string(&parser, (const unsigned char *)out, strlen(out));
        if (!yaml_parser_load(&parser, &doc)) fail_msg("%s: %s\n%s", names[k], parser.problem, out);
        char object[64];
        snprintf(object, sizeof object, "llmbench-%s", names[k]);
        assert_string_at(&doc, (const char *[]){"metadata", "name", NULL}, object);
        assert_string_at(&doc, (const char *[]){"metadata", "labels", "llmbench-schedule", NULL},
                         names[k]);
        assert_string_at(&doc,
                         (const char *[]){"spec", "jobTemplate", "spec", "template", "metadata",
                                          "labels", "llmbench-schedule", NULL},
                         names[k]);
        const char *pod[] = {"spec", "jobTemplate", "spec", "template", "spec",
                             NULL,   NULL,          NULL,   NULL,       NULL};
        pod[5] = "containers", pod[6] = "0", pod[7] = "image";
        assert_string_at(&doc, pod, "true");
        pod[5] = "volumes", pod[7] = "persistentVolumeClaim", pod[8] = "claimName";
        assert_string_at(&doc, pod, "null");
        const char *words[14 + sizeof cmd / sizeof cmd[0]] = {
            "llmbench",    "schedule", "exec", names[k],           "--report", "~",
            "--threshold", "3",        "--db", "/data/results.db", "--"};
        memcpy(words + 11, cmd, sizeof cmd);
        pod[5] = "containers", pod[7] = "command", pod[8] = NULL;
        yaml_node_t *seq = at(&doc, yaml_document_get_root_node(&doc), pod);
        assert_non_null(seq);
        assert_int_equal(seq->type, YAML_SEQUENCE_NODE);
        assert_int_equal(seq->data.sequence.items.top - seq->data.sequence.items.start, 11 + n_cmd);
        for (size_t i = 0; i < 11 + n_cmd; i++) {
            char idx[8];
            snprintf(idx, sizeof idx, "%zu", i);
            pod[8] = idx;
            assert_string_at(&doc, pod, words[i]);
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
    }
}

static void test_schedule_exec_tags_reports_and_locks(void **state) {
    (void)state;
    char rep[160];
    snprintf(rep, sizeof rep, "%s/nightly-report", g_dir);
    int rc = run((const char *[]){"schedule", "exec", "nightly", "--report", rep, "--db", g_db,
                                  "--", "train", "--model", "gpt2-tiny", "--device", "cpu", "--seq",
                                  "16", "--steps", "3", NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    assert_non_null(strstr(out, ", benchmark "));
    assert_non_null(strstr(out, "no change point in 1 runs"));
    char html[200];
    snprintf(html, sizeof html, "%s/report.html", rep);
    assert_int_equal(access(html, F_OK), 0);
    assert_int_equal(
        run((const char *[]){"results", "export", "--format", "json", "--db", g_db, NULL}), 0);
    assert_non_null(strstr(out, "\"schedule:nightly\""));
    /* a failing command is exit 1 */
    rc = run((const char *[]){"schedule", "exec", "nightly", "--db", g_db, "--", "train", "--model",
                              "nosuchmodel", NULL});
    assert_int_equal(rc, 1);
    /* another holder of the lock: not started */
    char lock_path[200];
    snprintf(lock_path, sizeof lock_path, "%s.schedule.lock", g_db);
    int fd = open(lock_path, O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    rc = run((const char *[]){"schedule", "exec", "nightly", "--db", g_db, "--", "train", "--model",
                              "gpt2-tiny", NULL});
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "is not started (never two at once)"));
    close(fd);
}

/* Ctrl-C during a scheduled run is passed on to the command (its run stored as
 * interrupted); the job then ends with 130, as every interrupted command does, without
 * checking histories or writing a report. */
static void test_schedule_exec_interrupted_exits_130(void **state) {
    (void)state;
    char db[160], rep[160], log[160];
    snprintf(db, sizeof db, "%s/interrupted.db", g_dir);
    snprintf(rep, sizeof rep, "%s/interrupted-report", g_dir);
    snprintf(log, sizeof log, "%s/interrupted.log", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(LB_TEST_BIN, LB_TEST_BIN, "schedule", "exec", "long", "--report", rep, "--db", db,
              "--", "train", "--model", "gpt2-tiny", "--device", "cpu", "--seq", "16", "--steps",
              "1000000", (char *)NULL);
        _exit(127);
    }
    /* Ctrl-C once the command's run is stored as running */
    bool running = false;
    for (int i = 0; i < 600 && !running; i++) {
        usleep(100000);
        lb_store *s = NULL;
        lb_err e = {{0}};
        if (access(db, F_OK) != 0 || lb_store_open_read(db, &s, &e) != LB_OK) continue;
        lb_store_filter f = lb_store_default_filter();
        f.status = LB_RUN_RUNNING;
        lb_store_run_info *list = NULL;
        size_t n = 0;
        running = lb_store_list(s, &f, &list, &n, &e) == LB_OK && n > 0;
        free(list);
        lb_store_close(s);
    }
    kill(pid, SIGINT);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char *text = lb_test_read_file(log, NULL);
    assert_non_null(text);
    if (!running) fail_msg("the command's run never started: %s", text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 130) fail_msg("status %d: %s", status, text);
    assert_non_null(strstr(text, "llmbench schedule exec: interrupted: 'long' stopped its "
                                 "command and checked no history\n"));
    assert_null(strstr(text, ", benchmark "));
    assert_int_equal(access(rep, F_OK), -1);
    free(text);
}

static void test_schedule_bad_input_exits_2(void **state) {
    (void)state;
    assert_int_equal(
        run((const char *[]){"schedule", "add", "x", "--at", "25:00", "--", "run", NULL}), 2);
    assert_non_null(strstr(err, "--at expects HH:MM"));
    assert_int_equal(run((const char *[]){"schedule", "add", "x", "--at", "19:00", NULL}), 2);
    assert_non_null(strstr(err, "no command to schedule"));
    assert_int_equal(run((const char *[]){"schedule", "add", "x", "--at", "19:00", "--days",
                                          "someday", "--", "run", NULL}),
                     2);
    assert_non_null(strstr(err, "--days expects"));
    assert_int_equal(
        run((const char *[]){"schedule", "add", "a b", "--at", "19:00", "--", "run", NULL}), 2);
    /* an unknown or missing subcommand: one line, not the overview */
    assert_int_equal(run((const char *[]){"schedule", "fly", NULL}), 2);
    assert_string_equal(err, "llmbench schedule: unknown subcommand 'fly': expected add, list, "
                             "remove or exec (see 'llmbench schedule --help')\n");
    assert_int_equal(run((const char *[]){"schedule", NULL}), 2);
    assert_non_null(strstr(err, "missing subcommand"));
    assert_null(strchr(err, '\n') + 1 == err + strlen(err) ? NULL : "more than one line");
    assert_int_equal(run((const char *[]){"schedule", "--help", NULL}), 0);
    assert_non_null(strstr(out, "usage: llmbench schedule add NAME"));
}

/* Input that once overflowed the entry's fixed buffers: a day named many times, a command
 * of more words than an entry holds. Refused with one line, nothing printed. */
static void test_schedule_long_days_and_commands_are_refused(void **state) {
    (void)state;
    char days[4 * 40] = "";
    for (int i = 0; i < 40; i++)
        strcat(days, i ? ",mon" : "mon");
    assert_int_equal(run((const char *[]){"schedule", "add", "x", "--at", "19:00", "--days", days,
                                          "--backend", "kubernetes", "--", "train", NULL}),
                     2);
    assert_string_equal(err, "llmbench schedule add: --days names mon twice: give each day once\n");
    assert_string_equal(out, "");
    assert_int_equal(run((const char *[]){"schedule", "add", "x", "--at", "19:00", "--days",
                                          "fri,mon,fri", "--", "train", NULL}),
                     2);
    assert_non_null(strstr(err, "--days names fri twice"));
    /* train -q and 40 times --seed 1: 82 words (more than lb_test_run passes on) */
    const char *args[11 + 80 + 1] = {LB_TEST_BIN, "schedule",   "add", "x",     "--at", "19:00",
                                     "--backend", "kubernetes", "--",  "train", "-q"};
    size_t n = 11;
    for (int i = 0; i < 40; i++) {
        args[n++] = "--seed";
        args[n++] = "1";
    }
    args[n] = NULL;
    assert_int_equal(lb_test_run_argv(args, out, sizeof out, NULL), 2);
    assert_string_equal(out, "llmbench schedule add: the command to schedule has 82 words; a "
                             "schedule holds at most 64\n");
    /* 64 words fit (train -q and 31 times --seed 1): all of them in the CronJob's command */
    args[9 + 64] = NULL;
    int rc = lb_test_run_argv(args, out, sizeof out, NULL);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    size_t words = 0;
    for (const char *p = strstr(out, "- \"train\"\n");
         p && (p = strstr(p, "\n                - \"")); p++)
        words++;
    assert_int_equal(words, 63); /* the words after train */
}

/* The CronJob is llmbench-NAME: a name Kubernetes refuses (capitals, '_', longer than 52
 * characters with the prefix) is refused here, not by kubectl apply. */
static void test_schedule_kubernetes_name_must_be_a_kubernetes_name(void **state) {
    (void)state;
    const char *bad[] = {"Nightly", "night_ly", "nightly-", /* and 44 characters: */
                         "nightly-train-gpt2-124m-bf16-on-eight-h100s1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(run((const char *[]){"schedule", "add", bad[i], "--at", "19:00",
                                              "--backend", "kubernetes", "--", "train", NULL}),
                         2);
        assert_non_null(strstr(err, "is not a Kubernetes name"));
        assert_string_equal(out, "");
    }
    int rc = run((const char *[]){"schedule", "add", "nightly-train-gpt2-124m-bf16-on-eight-h100s",
                                  "--at", "19:00", "--backend", "kubernetes", "--", "train", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(
        strstr(out, "  name: \"llmbench-nightly-train-gpt2-124m-bf16-on-eight-h100s\"\n"));
}

static void test_schedule_add_refuses_a_command_its_parser_refuses(void **state) {
    (void)state;
    int rc = run((const char *[]){"schedule", "add", "typo", "--at", "19:00", "--backend",
                                  "kubernetes", "--", "train", "--modle", "gpt2-tiny", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "llmbench schedule add: not scheduled, the command is refused: "
                                "llmbench train: unknown option '--modle'"));
    assert_null(strchr(err, '\n') + 1 == err + strlen(err) ? NULL : "more than one line");
    assert_string_equal(out, "");
    rc = run((const char *[]){"schedule", "add", "typo", "--at", "19:00", "--backend", "kubernetes",
                              "--", "fly", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "unknown command 'fly'"));
}

static void test_schedule_json_is_json_or_refused(void **state) {
    (void)state;
    int rc =
        run((const char *[]){"schedule", "add", "k8s", "--at", "07:05", "--backend", "kubernetes",
                             "--json", "--", "train", "--model", "gpt2-tiny", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "at")), "07:05");
    assert_non_null(strstr(json_string_value(json_object_get(doc, "manifest")), "kind: CronJob"));
    json_decref(doc);
    rc =
        run((const char *[]){"schedule", "exec", "j", "--json", "--db", g_db, "--", "train", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--json does not apply"));
}

static void test_schedule_no_crontab_yet_is_not_an_error_line(void **state) {
    (void)state;
    char table[200];
    snprintf(table, sizeof table, "%s/fake.crontab", g_dir);
    unlink(table);
    int rc = run((const char *[]){"schedule", "list", NULL});
    int rc_add = rc == 0 ? run((const char *[]){"schedule", "add", "fresh", "--at", "01:00", "--db",
                                                g_db, "--", "train", NULL})
                         : -1;
    assert_int_equal(rc, 0);
    if (rc_add != 0) fail_msg("add: exit %d: %s", rc_add, err);
    assert_string_equal(err, "");
    assert_non_null(strstr(out, "scheduled fresh at 01:00"));
}

static bool one_line(const char *text) {
    return strchr(text, '\n') == text + strlen(text) - 1;
}

/* A newline, carriage return or other control character in a command word or a path would
 * end the crontab line or the unit's line there: refused with one line naming it, nothing
 * written. */
static void test_schedule_control_characters_are_refused(void **state) {
    (void)state;
    char cfg[160], db[160], table[200];
    snprintf(cfg, sizeof cfg, "%s/ctl-config", g_dir);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    snprintf(db, sizeof db, "%s/ctl\nx.db", g_dir);
    snprintf(table, sizeof table, "%s/fake.crontab", g_dir);
    const struct {
        const char *args[16];
        const char *said;
    } cases[] = {
        {{"schedule", "add", "ctl", "--at", "01:00", "--db", g_db, "--", "train", "--name", "a\nb",
          NULL},
         "the command's word 3 'a?b' holds a control character"},
        {{"schedule", "add", "ctl", "--at", "01:00", "--db", g_db, "--report", "r\rx", "--",
          "train", NULL},
         "--report 'r?x' holds a control character"},
        {{"schedule", "add", "ctl", "--at", "01:00", "--db", db, "--", "train", NULL},
         "ctl?x.db' holds a control character"},
        {{"schedule", "add", "ctl", "--at", "01:00", "--backend", "systemd", "--db", g_db, "--",
          "train", "--tag", "t\x01u", NULL},
         "the command's word 3 't?u' holds a control character"},
        {{"schedule", "add", "ctl", "--at", "01:00", "--backend", "kubernetes", "--image", "img\n",
          "--", "train", NULL},
         "--image 'img?' holds a control character"},
    };
    static char said[sizeof err]; /* the first case not refused as it should be */
    int bad = -1, bad_rc = 0;
    for (int i = 0; i < 5; i++) {
        int rc = run(cases[i].args);
        if (bad < 0 && (rc != 2 || strstr(err, cases[i].said) == NULL || !one_line(err))) {
            bad = i, bad_rc = rc;
            memcpy(said, err, sizeof err);
        }
    }
    unsetenv("XDG_CONFIG_HOME");
    if (bad >= 0) fail_msg("case %d: exit %d: %s", bad, bad_rc, said);
    char *t = lb_test_read_file(table, NULL); /* none, or the entries of the tests before */
    assert_true(t == NULL || strstr(t, "'ctl'") == NULL);
    free(t);
    char unit[256];
    snprintf(unit, sizeof unit, "%s/systemd/user/llmbench-ctl.service", cfg);
    assert_int_equal(access(unit, F_OK), -1);
    /* a tab stays inside its word's quotes: kept */
    int rc = run((const char *[]){"schedule", "add", "tabbed", "--at", "01:00", "--db", g_db, "--",
                                  "train", "--name", "a\tb", NULL});
    if (rc != 0) fail_msg("a tab: exit %d: %s", rc, err);
    t = lb_test_read_file(table, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "'a\tb'"));
    free(t);
    assert_int_equal(run((const char *[]){"schedule", "remove", "tabbed", NULL}), 0);
}

/* --at is HH:MM, two digits each, in range: 00:00, 23:59 and 07:05 are taken as they read;
 * a sign, a space, one digit or a value out of range is refused (07:+5 was read as 07:05). */
static void test_schedule_at_takes_two_digit_hh_mm_only(void **state) {
    (void)state;
    const char *good[] = {"00:00", "23:59", "07:05"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = run((const char *[]){"schedule", "add", "at", "--at", good[i], "--backend",
                                      "kubernetes", "--json", "--", "train", NULL});
        if (rc != 0) fail_msg("%s: exit %d: %s", good[i], rc, err);
        json_t *doc = json_loads(out, 0, NULL);
        assert_non_null(doc);
        assert_string_equal(json_string_value(json_object_get(doc, "at")), good[i]);
        json_decref(doc);
    }
    const char *bad[] = {"07:+5", "+7:05", "7:05",  "07:5",     "7:5",  " 7:05", "07: 5", "07:05 ",
                         "24:00", "07:60", "-1:00", "07:05:00", "0705", "07-05", "1e:00"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run((const char *[]){"schedule", "add", "at", "--at", bad[i], "--backend",
                                      "kubernetes", "--", "train", NULL});
        if (rc != 2 || strstr(err, "--at expects HH:MM, two digits each") == NULL)
            fail_msg("'%s': exit %d: %s%s", bad[i], rc, out, err);
    }
}

/* The command cron hands to sh for a crontab line (after its five time fields), as cron
 * reads it: a backslash escapes the character after it ('\%' becomes '%', any other pair is
 * kept as it is), and an unescaped '%' ends the command, the rest going to its stdin (into
 * *rest, NULL when there is none). Returns a malloc'd string. */
static char *cron_command(const char *line, const char **rest) {
    for (int field = 0; field < 5; field++)
        line = strchr(line, ' ') + 1;
    char *cmd = malloc(strlen(line) + 1), *c = cmd;
    bool escaped = false;
    *rest = NULL;
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (escaped) {
            if (*p != '%') *c++ = '\\';
            *c++ = *p;
            escaped = false;
        } else if (*p == '\\') {
            escaped = true;
        } else if (*p == '%') {
            *rest = p + 1;
            break;
        } else {
            *c++ = *p;
        }
    }
    if (escaped) *c++ = '\\';
    *c = '\0';
    return cmd;
}

/* Words with '\', '%', '\%', quotes, spaces and sh's own characters go through the crontab
 * line, cron's reading of it and /bin/sh, and come out as they went in ('a\%b' was written
 * 'a\\%b', whose '%' cron took for the end of the command). */
static void test_schedule_cron_words_reach_the_command_as_given(void **state) {
    (void)state;
    const char *words[] = {"a\\%b",      "100%",    "%",     "\\%",       "\\\\%",
                           "\\",         "%\\",     "\\'%",  "it's 50%%", "\"dq\" 'sq'",
                           "two  words", "\\\\\\%", "$HOME", "`id`",      "a\\b\\%c%"};
    enum { NW = sizeof words / sizeof words[0] };
    const char *args[16 + 2 * NW] = {"schedule", "add", "lbtest-words", "--at", "03:00",
                                     "--db",     g_db,  "--",           "train"};
    size_t n = 9;
    for (size_t i = 0; i < NW; i++) {
        args[n++] = "--tag";
        args[n++] = words[i];
    }
    args[n] = NULL;
    int rc = run(args);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    char table_path[200], script[200];
    snprintf(table_path, sizeof table_path, "%s/fake.crontab", g_dir);
    char *table = lb_test_read_file(table_path, NULL);
    assert_non_null(table);
    const char *line = strstr(table, "# llmbench schedule lbtest-words\n");
    assert_non_null(line);
    const char *rest = NULL;
    char *cmd = cron_command(strchr(line, '\n') + 1, &rest);
    if (rest != NULL) fail_msg("cron ends the command at an unescaped %%: %s", cmd);
    /* sh sets the words as its arguments and prints them one a line */
    snprintf(script, sizeof script, "%s/words.sh", g_dir);
    char *text = malloc(strlen(cmd) + 64);
    sprintf(text, "set -- %s\nprintf '%%s\\n' \"$@\"\n", cmd);
    assert_true(lb_test_write_file(script, text));
    char sh[256];
    snprintf(sh, sizeof sh, "/bin/sh %s", script);
    FILE *p = popen(sh, "r");
    assert_non_null(p);
    static char got[8192];
    size_t len = fread(got, 1, sizeof got - 1, p);
    got[len] = '\0';
    assert_int_equal(pclose(p), 0);
    char *w = strstr(got, "\n--\ntrain\n");
    if (w == NULL) fail_msg("sh read: %s", got);
    w += strlen("\n--\ntrain\n");
    for (size_t i = 0; i < NW; i++) {
        char *tag = strsep(&w, "\n"), *word = tag ? strsep(&w, "\n") : NULL;
        if (tag == NULL || strcmp(tag, "--tag") != 0 || word == NULL || strcmp(word, words[i]) != 0)
            fail_msg("word %zu '%s': sh read '%s' from %s", i, words[i], word ? word : "", cmd);
    }
    assert_string_equal(w, "");
    free(text);
    free(cmd);
    free(table);
    assert_int_equal(run((const char *[]){"schedule", "remove", "lbtest-words", NULL}), 0);
}

/* When the timer cannot be written (a folder stands at its path), the service written before
 * it is not left behind: a new entry leaves no service, a replaced one its old service. */
static void test_schedule_systemd_failed_timer_leaves_the_service_as_it_was(void **state) {
    (void)state;
    char cfg[160], dir[200], timer[256], service[256];
    snprintf(cfg, sizeof cfg, "%s/sd-fail", g_dir);
    snprintf(dir, sizeof dir, "%s/systemd/user", cfg);
    snprintf(timer, sizeof timer, "%s/llmbench-lbtest-fail.timer", dir);
    snprintf(service, sizeof service, "%s/llmbench-lbtest-fail.service", dir);
    char mk[300];
    snprintf(mk, sizeof mk, "mkdir -p %s", timer);
    assert_int_equal(system(mk), 0);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    const char *add[] = {"schedule", "add",  "lbtest-fail", "--at", "01:00", "--backend",
                         "systemd",  "--db", g_db,          "--",   "train", NULL};
    int rc_new = run(add);
    bool left_new = access(service, F_OK) == 0;
    const char *old = "[Service]\nExecStart=/bin/true\n";
    assert_true(lb_test_write_file(service, old));
    int rc_replace = run(add);
    char *kept = lb_test_read_file(service, NULL);
    unsetenv("XDG_CONFIG_HOME");
    if (rc_new == 0 || rc_new == 2) fail_msg("new entry: exit %d: %s", rc_new, err);
    assert_false(left_new);
    if (rc_replace == 0 || rc_replace == 2) fail_msg("replacing: exit %d: %s", rc_replace, err);
    assert_non_null(kept);
    assert_string_equal(kept, old);
    free(kept);
}

/* `schedule exec` takes the names `schedule add` takes: a longer one would tag its runs
 * with more than it searches for afterwards. Refused before the command runs. */
static void test_schedule_exec_refuses_a_name_add_refuses(void **state) {
    (void)state;
    char name[151], db[160];
    memset(name, 'n', 150);
    name[150] = '\0';
    snprintf(db, sizeof db, "%s/exec-name.db", g_dir);
    const char *bad[] = {name, "a b", "a\nb"};
    for (size_t i = 0; i < 3; i++) {
        int rc = run((const char *[]){"schedule", "exec", bad[i], "--db", db, "--", "train",
                                      "--model", "gpt2-tiny", "--device", "cpu", "--seq", "16",
                                      "--steps", "1", NULL});
        if (rc != 2) fail_msg("%zu: exit %d: %s", i, rc, err);
        assert_non_null(strstr(err, "must be 1 to 64 letters, digits, '-' or '_'"));
        assert_true(one_line(err));
        assert_int_equal(access(db, F_OK), -1); /* the command did not run */
    }
}

/* A crontab -l that fails other than by finding no table (here it prints the table and is
 * killed, as Ctrl-C kills it) is an error: the table is left whole, never replaced by one
 * holding only the new entry. */
static void test_schedule_add_keeps_the_table_when_crontab_cannot_read_it(void **state) {
    (void)state;
    char table[200], script[200], text[600];
    snprintf(table, sizeof table, "%s/fake.crontab", g_dir);
    snprintf(script, sizeof script, "%s/fakebin/crontab", g_dir);
    char *fake = lb_test_read_file(script, NULL);
    assert_non_null(fake);
    snprintf(text, sizeof text,
             "#!/bin/sh\nF=%s\nif [ \"$1\" = -l ]; then cat $F; kill -9 $$; fi\ncat > $F\n", table);
    assert_true(lb_test_write_file(script, text));
    assert_true(lb_test_write_file(table, "5 4 * * * my-own-job\n"));
    int rc = run((const char *[]){"schedule", "add", "lbtest-lost", "--at", "03:00", "--db", g_db,
                                  "--", "train", NULL});
    char *after = lb_test_read_file(table, NULL);
    assert_true(lb_test_write_file(script, fake));
    free(fake);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "crontab -l failed (signal 9)"));
    assert_non_null(after);
    assert_string_equal(after, "5 4 * * * my-own-job\n");
    free(after);
}

/* `schedule remove` takes the marker line and the job line under it, but not a line of the
 * user's where the job line was deleted or edited away, nor another entry's marker. */
static void test_schedule_remove_keeps_the_users_line_after_an_edited_entry(void **state) {
    (void)state;
    char table[200];
    static char text[1 << 14];
    snprintf(table, sizeof table, "%s/fake.crontab", g_dir);
    const char *mine = "MAILTO=me\n5 4 * * * my-own-job\n";
    /* the job line deleted by hand: the user's next line stays */
    assert_true(lb_test_write_file(table, "MAILTO=me\n# llmbench schedule lbtest-edited\n"
                                          "5 4 * * * my-own-job\n"));
    int rc_edited = run((const char *[]){"schedule", "remove", "lbtest-edited", NULL});
    char *after_edited = lb_test_read_file(table, NULL);
    /* an entry without its job line right above another one: the other stays whole */
    int rc_add = run((const char *[]){"schedule", "add", "lbtest-kept", "--at", "02:00", "--db",
                                      g_db, "--", "train", NULL});
    char *added = lb_test_read_file(table, NULL);
    const char *kept = added ? strstr(added, "# llmbench schedule lbtest-kept\n") : NULL;
    snprintf(text, sizeof text, "%s# llmbench schedule lbtest-gone\n%s", mine, kept ? kept : "");
    assert_true(lb_test_write_file(table, text));
    int rc_gone = run((const char *[]){"schedule", "remove", "lbtest-gone", NULL});
    char *after_gone = lb_test_read_file(table, NULL);
    /* llmbench's own job line goes with its marker */
    int rc_kept = run((const char *[]){"schedule", "remove", "lbtest-kept", NULL});
    char *after_kept = lb_test_read_file(table, NULL);
    assert_int_equal(rc_edited, 0);
    assert_non_null(after_edited);
    assert_string_equal(after_edited, mine);
    if (rc_add != 0) fail_msg("add: exit %d: %s", rc_add, err);
    assert_non_null(kept);
    assert_non_null(strstr(kept, "\n0 2 * * * '"));
    assert_int_equal(rc_gone, 0);
    assert_non_null(after_gone);
    snprintf(text, sizeof text, "%s%s", mine, kept);
    assert_string_equal(after_gone, text);
    assert_int_equal(rc_kept, 0);
    assert_non_null(after_kept);
    assert_string_equal(after_kept, mine);
    free(after_edited);
    free(added);
    free(after_gone);
    free(after_kept);
}

static void test_schedule_exec_of_a_sweep_checks_and_reports_its_cells(void **state) {
    (void)state;
    char matrix[160], rep[160], db[160];
    snprintf(matrix, sizeof matrix, "%s/nightly.yaml", g_dir);
    snprintf(rep, sizeof rep, "%s/sweep-report", g_dir);
    snprintf(db, sizeof db, "%s/sweep.db", g_dir);
    assert_true(lb_test_write_file(matrix, "name: nightly-sweep\ncommand: train\n"
                                           "options: {model: gpt2-tiny, device: cpu, seq: 16, "
                                           "steps: 2}\naxes: {batch: [1, 2]}\n"));
    /* without --again the second night would find every cell stored: refused */
    assert_int_equal(run((const char *[]){"schedule", "add", "sw", "--at", "01:00", "--db", db,
                                          "--", "sweep", matrix, NULL}),
                     2);
    assert_non_null(strstr(err, "a scheduled sweep needs --again"));
    /* two nights: each runs every cell */
    int rc = 0;
    for (int night = 0; night < 2 && rc == 0; night++)
        rc = run((const char *[]){"schedule", "exec", "sw", "--report", rep, "--db", db, "--",
                                  "sweep", matrix, "--again", "--no-progress", NULL});
    if (rc != 0) fail_msg("exit %d: %s %s", rc, out, err);
    /* each cell's history is checked; the sweep's table has none */
    size_t checked = 0;
    for (const char *p = out; (p = strstr(p, ", benchmark ")) != NULL; p++)
        checked++;
    assert_int_equal(checked, 2);
    char html[200];
    snprintf(html, sizeof html, "%s/report.html", rep);
    char *page = lb_test_read_file(html, NULL);
    assert_non_null(page);
    assert_non_null(strstr(page, "2 runs in 2 configurations"));
    free(page);
    /* the cells carry the schedule's tag too */
    assert_int_equal(
        run((const char *[]){"results", "list", "--kind", "train", "--json", "--db", db, NULL}), 0);
    json_t *doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    json_t *runs = json_object_get(doc, "runs"), *r;
    size_t i;
    assert_int_equal(json_array_size(runs), 4);
    json_array_foreach(runs, i, r) {
        char *tags = json_dumps(json_object_get(r, "tags"), JSON_COMPACT);
        assert_non_null(strstr(tags, "\"schedule:sw\""));
        assert_non_null(strstr(tags, "\"sweep:nightly-sweep\""));
        free(tags);
    }
    json_decref(doc);
}

static int setup(void **state) {
    (void)state;
    lb_test_tmpdir(g_dir, sizeof g_dir);
    snprintf(g_db, sizeof g_db, "%s/results.db", g_dir);
    return fake_crontab();
}

static int teardown(void **state) {
    (void)state;
    lb_test_rmtree(g_dir);
    return 0;
}

/* A CronJob is YAML, which is UTF-8: a value in another encoding is refused with one line
 * (its --json was empty and its YAML not YAML). */
static void test_schedule_kubernetes_refuses_text_that_is_not_utf8(void **state) {
    (void)state;
    int rc = run((const char *[]){"schedule", "add", "k8s", "--at", "07:05", "--backend",
                                  "kubernetes", "--image", "img\xe9", "--json", "--", "train",
                                  "--model", "gpt2-tiny", NULL});
    assert_int_equal(rc, 2);
    assert_string_equal(out, "");
    assert_string_equal(err, "llmbench schedule add: --image 'img?' is not UTF-8 text (its other "
                             "bytes shown as '?'), which a CronJob's YAML must be: give it in "
                             "UTF-8\n");
    rc =
        run((const char *[]){"schedule", "add", "k8s", "--at", "07:05", "--backend", "kubernetes",
                             "--", "train", "--model", "gpt2-tiny", "--name", "caf\xc3\xa9", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_non_null(strstr(out, "\"caf\xc3\xa9\""));
}

/* A cron entry whose command holds a word in another encoding (a Latin-1 file name, which
 * cron passes on as it is) is listed by list --json with that byte as '?', not left out. */
static void test_schedule_list_json_keeps_an_entry_that_is_not_utf8(void **state) {
    (void)state;
    int rc =
        run((const char *[]){"schedule", "add", "lbtest-latin1", "--at", "03:00", "--db", g_db,
                             "--", "train", "--model", "gpt2-tiny", "--name", "caf\xe9", NULL});
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    rc = run((const char *[]){"schedule", "list", "--json", NULL});
    json_t *doc = json_loads(out, 0, NULL);
    int rc_remove = run((const char *[]){"schedule", "remove", "lbtest-latin1", NULL});
    assert_int_equal(rc, 0);
    assert_int_equal(rc_remove, 0);
    assert_non_null(doc);
    const char *entry = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(doc, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), "lbtest-latin1") == 0)
            entry = json_string_value(json_object_get(e, "entry"));
    }
    assert_non_null(entry);
    assert_non_null(strstr(entry, "'--name' 'caf?'"));
    json_decref(doc);
}

/* remove takes the names add takes: another is refused with one line naming it. */
static void test_schedule_remove_refuses_a_name_add_refuses(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++) {
        int rc = run((const char *[]){"schedule", "remove", "a\nb", "--backend",
                                      b ? "systemd" : "cron", NULL});
        assert_int_equal(rc, 2);
        assert_string_equal(err, "llmbench schedule remove: schedule name 'a?b' must be 1 to 64 "
                                 "letters, digits, '-' or '_'\n");
    }
}

/* add --json says where the units went: a folder named in another encoding is written
 * with its bytes as '?', and the answer is JSON still (it was empty). */
static void test_schedule_add_json_with_a_folder_that_is_not_utf8(void **state) {
    (void)state;
    char cfg[160], old[160];
    snprintf(old, sizeof old, "%s", getenv("XDG_CONFIG_HOME") ? getenv("XDG_CONFIG_HOME") : "");
    snprintf(cfg, sizeof cfg, "%s/conf\xe9", g_dir);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    int rc = run((const char *[]){"schedule", "add", "lbtest-latin1", "--at", "07:05", "--backend",
                                  "systemd", "--json", "--db", g_db, "--", "train", "--model",
                                  "gpt2-tiny", NULL});
    json_t *doc = json_loads(out, 0, NULL);
    int rc_remove =
        run((const char *[]){"schedule", "remove", "lbtest-latin1", "--backend", "systemd", NULL});
    if (old[0])
        setenv("XDG_CONFIG_HOME", old, 1);
    else
        unsetenv("XDG_CONFIG_HOME");
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    assert_int_equal(rc_remove, 0);
    assert_non_null(doc);
    const char *note = json_string_value(json_object_get(doc, "note"));
    assert_non_null(note);
    /* without a user manager the note names the timer's path; with one, the timer */
    assert_true(strstr(note, "/conf?/systemd/user/llmbench-lbtest-latin1.timer") != NULL ||
                strcmp(note, "enabled llmbench-lbtest-latin1.timer") == 0);
    json_decref(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_cron_line_added_listed_and_removed),
        cmocka_unit_test(test_schedule_systemd_units_verify_and_remove),
        cmocka_unit_test(test_schedule_kubernetes_cronjob_parses),
        cmocka_unit_test(test_schedule_cronjob_values_read_back_as_strings),
        cmocka_unit_test(test_schedule_exec_tags_reports_and_locks),
        cmocka_unit_test(test_schedule_exec_interrupted_exits_130),
        cmocka_unit_test(test_schedule_bad_input_exits_2),
        cmocka_unit_test(test_schedule_at_takes_two_digit_hh_mm_only),
        cmocka_unit_test(test_schedule_cron_words_reach_the_command_as_given),
        cmocka_unit_test(test_schedule_systemd_failed_timer_leaves_the_service_as_it_was),
        cmocka_unit_test(test_schedule_long_days_and_commands_are_refused),
        cmocka_unit_test(test_schedule_kubernetes_name_must_be_a_kubernetes_name),
        cmocka_unit_test(test_schedule_add_refuses_a_command_its_parser_refuses),
        cmocka_unit_test(test_schedule_json_is_json_or_refused),
        cmocka_unit_test(test_schedule_no_crontab_yet_is_not_an_error_line),
        cmocka_unit_test(test_schedule_control_characters_are_refused),
        cmocka_unit_test(test_schedule_exec_refuses_a_name_add_refuses),
        cmocka_unit_test(test_schedule_remove_keeps_the_users_line_after_an_edited_entry),
        cmocka_unit_test(test_schedule_add_keeps_the_table_when_crontab_cannot_read_it),
        cmocka_unit_test(test_schedule_exec_of_a_sweep_checks_and_reports_its_cells),
        cmocka_unit_test(test_schedule_kubernetes_refuses_text_that_is_not_utf8),
        cmocka_unit_test(test_schedule_list_json_keeps_an_entry_that_is_not_utf8),
        cmocka_unit_test(test_schedule_remove_refuses_a_name_add_refuses),
        cmocka_unit_test(test_schedule_add_json_with_a_folder_that_is_not_utf8),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
