/* test_store_runctl.c: the stored-run lifecycle (cli/runctl.h) against a real database:
 * ok, failed and interrupted workloads, a store that cannot be opened, secrets that must
 * never reach the file or an export, and a run of a million samples. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <time.h>

#include "cli/runctl.h"
#include "core/clock.h"
#include "core/signals.h"
#include "store/store.h"
#include "test_util.h"

#define SECRET "s3cr3t-abc-77f1"

typedef struct {
    char dir[256];
    char db[300];
    lb_cli_common common;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    lb_test_tmpdir(f->dir, sizeof f->dir);
    assert_true(f->dir[0] != '\0');
    snprintf(f->db, sizeof f->db, "%s/results.db", f->dir);
    f->common.db_path = f->db;
    f->common.verbosity = -1;
    lb_signals_reset();
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    lb_signals_reset();
    lb_test_rmtree(f->dir);
    free(f);
    return 0;
}

/* What a workload does, in miniature: steps that each push a step time and a loss. */
typedef struct {
    int steps;        /* steps to run */
    int fail_at;      /* step that fails; -1: none */
    int interrupt_at; /* step at which SIGINT "arrives"; -1: none */
    int calls;        /* how often the work ran */
} toy_work;

static lb_status toy_run(void *ctx, lb_result *r, lb_err *err) {
    toy_work *w = ctx;
    w->calls++;
    lb_series *step = lb_result_series(r, "step_ms", "ms");
    lb_series *loss = lb_result_series(r, "loss", "nats");
    for (int i = 0; i < w->steps; i++) {
        if (i == w->interrupt_at) lb_signals_raise(SIGINT);
        if (lb_signals_interrupted())
            return lb_fail(err, LB_ERR_INTERRUPTED, "interrupted at step %d", i);
        if (i == w->fail_at) return lb_fail(err, LB_ERR_RUNTIME, "loss became NaN at step %d", i);
        LB_TRY(lb_result_series_push(step, 10.0 + i));
        LB_TRY(lb_result_series_push(loss, 5.0 / (i + 1)));
    }
    return lb_result_set_metric(r, "final_loss", loss->values[loss->n - 1], "nats");
}

static lb_result *load(const fixture *f, int64_t id) {
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_result *r = NULL;
    assert_int_equal(lb_store_run_load(s, id, &r, &err), LB_OK);
    lb_store_close(s);
    return r;
}

static lb_status run_toy(fixture *f, toy_work *w, int argc, char **argv, int64_t *id, lb_err *err) {
    lb_result *r = lb_result_new("train", "toy");
    json_object_set_new(r->config, "steps", json_integer(w->steps));
    lb_status st = lb_runctl_run(&f->common, argc, argv, r, toy_run, w, id, err);
    lb_result_free(r);
    return st;
}

static void test_runctl_ok_run_is_stored_with_provenance(void **state) {
    fixture *f = *state;
    toy_work w = {.steps = 8, .fail_at = -1, .interrupt_at = -1};
    char *argv[] = {"llmbench", "train", "--steps", "8"};
    int64_t id = -1;
    lb_err err = {{0}};
    double before = lb_clock_wall_s();
    assert_int_equal(run_toy(f, &w, 4, argv, &id, &err), LB_OK);
    assert_true(id > 0);
    lb_result *r = load(f, id);
    assert_int_equal(r->status, LB_RUN_OK);
    assert_string_equal(r->failure, "");
    assert_int_equal(lb_result_find_series(r, "loss")->n, 8);
    assert_true(lb_result_metric(r, "final_loss") == 5.0 / 8);
    assert_int_equal(json_integer_value(json_object_get(r->config, "steps")), 8);
    assert_true(r->start_wall_s >= before && r->end_wall_s >= r->start_wall_s);
    json_t *cmd = json_object_get(r->provenance, "command_line");
    assert_int_equal(json_array_size(cmd), 4);
    assert_string_equal(json_string_value(json_array_get(cmd, 1)), "train");
    assert_non_null(json_object_get(r->provenance, "hostname"));
    lb_result_free(r);
}

static void test_runctl_failed_run_keeps_the_reason(void **state) {
    fixture *f = *state;
    toy_work w = {.steps = 8, .fail_at = 3, .interrupt_at = -1};
    int64_t id = -1;
    lb_err err = {{0}};
    assert_int_equal(run_toy(f, &w, 0, NULL, &id, &err), LB_ERR_RUNTIME);
    assert_string_equal(err.msg, "loss became NaN at step 3");
    lb_result *r = load(f, id);
    assert_int_equal(r->status, LB_RUN_FAILED);
    assert_string_equal(r->failure, "loss became NaN at step 3");
    assert_int_equal(lb_result_find_series(r, "step_ms")->n, 3);
    lb_result_free(r);
}

static void test_runctl_interrupted_run_is_marked_and_keeps_samples(void **state) {
    fixture *f = *state;
    toy_work w = {.steps = 100, .fail_at = -1, .interrupt_at = 5};
    int64_t id = -1;
    lb_err err = {{0}};
    assert_int_equal(run_toy(f, &w, 0, NULL, &id, &err), LB_ERR_INTERRUPTED);
    assert_int_equal(lb_status_exit_code(LB_ERR_INTERRUPTED), 130);
    lb_result *r = load(f, id);
    assert_int_equal(r->status, LB_RUN_INTERRUPTED);
    assert_string_equal(r->failure, "interrupted at step 5");
    const lb_series *step = lb_result_find_series(r, "step_ms");
    assert_int_equal(step->n, 5);
    assert_true(step->values[4] == 14.0);
    lb_result_free(r);
}

static void test_runctl_signal_after_work_marks_interrupted(void **state) {
    fixture *f = *state;
    /* No step left to run, so the workload never polls the flag and returns LB_OK. */
    toy_work w = {.steps = 0, .fail_at = -1, .interrupt_at = -1};
    lb_signals_raise(SIGTERM);
    int64_t id = -1;
    lb_err err = {{0}};
    lb_result *r = lb_result_new("train", "toy");
    lb_result_series_push(lb_result_series(r, "loss", "nats"), 1.0);
    lb_status st = lb_runctl_run(&f->common, 0, NULL, r, toy_run, &w, &id, &err);
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_string_equal(r->failure, "interrupted by SIGTERM");
    lb_result_free(r);
    r = load(f, id);
    assert_int_equal(r->status, LB_RUN_INTERRUPTED);
    lb_result_free(r);
}

/* A failure whose sentence quotes bytes that are not UTF-8 (a Latin-1 file name, a server's
 * reply) or is cut inside a character: the result still has its JSON (train --json printed
 * an empty line for it, and run --json left the run out), the bytes as '?'. */
static lb_status fail_naming_latin1_file(void *ctx, lb_result *r, lb_err *err) {
    (void)ctx;
    (void)r;
    return lb_fail(err, LB_ERR_IO, "cannot read /data/caf\xe9.bin: the reply was \xc3");
}

static void test_runctl_failure_not_utf8_keeps_the_result_json(void **state) {
    fixture *f = *state;
    int64_t id = -1;
    lb_err err = {{0}};
    lb_result *r = lb_result_new("train", "toy");
    assert_int_equal(
        lb_runctl_run(&f->common, 0, NULL, r, fail_naming_latin1_file, NULL, &id, &err), LB_ERR_IO);
    assert_string_equal(r->failure, "cannot read /data/caf?.bin: the reply was ?");
    json_t *doc = lb_result_to_json(r);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "failure")), r->failure);
    json_decref(doc);
    lb_result_free(r);
    r = load(f, id);
    assert_int_equal(r->status, LB_RUN_FAILED);
    assert_string_equal(r->failure, "cannot read /data/caf?.bin: the reply was ?");
    lb_result_free(r);
}

static void test_runctl_unusable_store_runs_nothing(void **state) {
    fixture *f = *state;
    char path[320];
    snprintf(path, sizeof path, "%s/plain-file", f->dir);
    assert_true(lb_test_write_file(path, ""));
    snprintf(f->db, sizeof f->db, "%s/plain-file/results.db", f->dir);
    toy_work w = {.steps = 3, .fail_at = -1, .interrupt_at = -1};
    int64_t id = 0;
    lb_err err = {{0}};
    assert_int_equal(run_toy(f, &w, 0, NULL, &id, &err), LB_ERR_IO);
    assert_int_equal(w.calls, 0);
    assert_int_equal(id, -1);
    assert_non_null(strstr(err.msg, "plain-file"));
}

static bool contains(const char *hay, size_t n, const char *needle) {
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

static void test_runctl_secrets_never_reach_the_database_or_exports(void **state) {
    fixture *f = *state;
    setenv("FOO_API_KEY", SECRET, 1);
    setenv("LLMBENCH_API_KEY", SECRET, 1);
    setenv("NCCL_SECRET_TOKEN", SECRET, 1);
    char *argv[] = {"llmbench", "load", "--api-key=" SECRET, "--url", "http://h:8000"};
    toy_work w = {.steps = 2, .fail_at = -1, .interrupt_at = -1};
    int64_t id = -1;
    lb_err err = {{0}};
    assert_int_equal(run_toy(f, &w, 5, argv, &id, &err), LB_OK);
    unsetenv("FOO_API_KEY");
    unsetenv("LLMBENCH_API_KEY");
    unsetenv("NCCL_SECRET_TOKEN");

    /* The provenance kept the variables' names and the option, not the value. */
    lb_result *r = load(f, id);
    json_t *env = json_object_get(r->provenance, "env");
    assert_string_equal(json_string_value(json_object_get(env, "LLMBENCH_API_KEY")), "***");
    assert_string_equal(json_string_value(json_object_get(env, "NCCL_SECRET_TOKEN")), "***");
    lb_result_free(r);

    /* Every byte the database holds: the file and any write-ahead log left beside it. */
    const char *suffixes[] = {"", "-wal", "-journal"};
    for (int i = 0; i < 3; i++) {
        char path[340];
        snprintf(path, sizeof path, "%s%s", f->db, suffixes[i]);
        size_t n = 0;
        char *bytes = lb_test_read_file(path, &n);
        if (i == 0) assert_non_null(bytes);
        if (bytes) assert_false(contains(bytes, n, SECRET));
        free(bytes);
    }
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    for (int fmt = LB_STORE_FORMAT_JSON; fmt <= LB_STORE_FORMAT_CSV; fmt++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        assert_int_equal(lb_store_export(s, NULL, 0, (lb_store_format)fmt, out, &err), LB_OK);
        fclose(out);
        assert_true(len > 0);
        assert_false(contains(buf, len, SECRET));
        if (fmt == LB_STORE_FORMAT_JSON) assert_true(contains(buf, len, "--api-key=***"));
        free(buf);
    }
    lb_store_close(s);
}

/* Steps until a signal arrives; the first step's end is announced on a pipe. */
typedef struct {
    int ready_fd;
} until_signal;

static lb_status run_until_signal(void *ctx, lb_result *r, lb_err *err) {
    until_signal *u = ctx;
    lb_series *step = lb_result_series(r, "step_ms", "ms");
    for (int i = 0; !lb_signals_interrupted(); i++) {
        usleep(1000);
        LB_TRY(lb_result_series_push(step, 1.0 + i));
        if (i == 0 && write(u->ready_fd, "x", 1) != 1)
            return lb_fail(err, LB_ERR_IO, "cannot tell the parent");
    }
    return lb_fail(err, LB_ERR_INTERRUPTED, "stopped by a signal");
}

static void test_runctl_real_sigint_stores_interrupted_run_and_exits_130(void **state) {
    fixture *f = *state;
    int pipe_fd[2];
    assert_int_equal(pipe(pipe_fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipe_fd[0]);
        lb_signals_install();
        until_signal u = {.ready_fd = pipe_fd[1]};
        lb_result *r = lb_result_new("train", "until-sigint");
        int64_t id;
        lb_err err = {{0}};
        lb_status st = lb_runctl_run(&f->common, 0, NULL, r, run_until_signal, &u, &id, &err);
        lb_result_free(r);
        _exit(lb_status_exit_code(st));
    }
    close(pipe_fd[1]);
    char c;
    assert_int_equal(read(pipe_fd[0], &c, 1), 1); /* the workload is running */
    close(pipe_fd[0]);
    usleep(20000);
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);

    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_store_run_info *runs = NULL;
    size_t n = 0;
    assert_int_equal(lb_store_list(s, NULL, &runs, &n, &err), LB_OK);
    lb_store_close(s);
    assert_int_equal(n, 1);
    assert_int_equal(runs[0].status, LB_RUN_INTERRUPTED);
    assert_string_equal(runs[0].failure, "stopped by a signal");
    assert_true(runs[0].n_samples >= 1);
    free(runs);
}

static lb_status million_samples(void *ctx, lb_result *r, lb_err *err) {
    (void)ctx, (void)err;
    lb_series *lat = lb_result_series(r, "latency_ms", "ms");
    for (int i = 0; i < 1000000; i++)
        LB_TRY(lb_result_series_push(lat, i * 0.001));
    return LB_OK;
}

static void test_runctl_million_samples_are_stored_whole(void **state) {
    fixture *f = *state;
    lb_result *r = lb_result_new("infer", "big");
    int64_t id = -1;
    lb_err err = {{0}};
    int64_t t0 = lb_clock_now_ns();
    assert_int_equal(lb_runctl_run(&f->common, 0, NULL, r, million_samples, NULL, &id, &err),
                     LB_OK);
    int64_t t1 = lb_clock_now_ns();
    lb_result_free(r);
    r = load(f, id);
    int64_t t2 = lb_clock_now_ns();
    print_message("1e6 samples: run+store %.2f s, load %.2f s\n", (t1 - t0) * 1e-9,
                  (t2 - t1) * 1e-9);
    const lb_series *lat = lb_result_find_series(r, "latency_ms");
    assert_int_equal(lat->n, 1000000);
    assert_true(lat->values[0] == 0.0);
    assert_true(lat->values[123456] == 123456 * 0.001);
    assert_true(lat->values[999999] == 999999 * 0.001);
    lb_result_free(r);
}

/* Another process's connection that takes the write lock and keeps it for hold_s. */
typedef struct {
    const char *db;
    double hold_s;
    atomic_int locked;           /* 1 held, -1 failed to take it */
    _Atomic int64_t released_ns; /* when it let go (lb_clock_now_ns), 0 before */
} lock_holder;

static void *hold_lock(void *arg) {
    lock_holder *h = arg;
    sqlite3 *db = NULL;
    sqlite3_open(h->db, &db);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    h->locked = rc == SQLITE_OK ? 1 : -1;
    nanosleep(&(struct timespec){.tv_sec = (time_t)h->hold_s,
                                 .tv_nsec = (long)((h->hold_s - (time_t)h->hold_s) * 1e9)},
              NULL);
    atomic_store(&h->released_ns, lb_clock_now_ns());
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return NULL;
}

/* A workload that takes the lock away (as another process would) once it has measured. */
typedef struct {
    toy_work toy;
    lock_holder holder;
    pthread_t thread;
} locked_work;

/* Starts h on a thread of its own and returns once it holds the lock (or failed to). */
static void start_holding(lock_holder *h, pthread_t *thread) {
    pthread_create(thread, NULL, hold_lock, h);
    while (h->locked == 0)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}

static lb_status toy_then_lock(void *ctx, lb_result *r, lb_err *err) {
    locked_work *w = ctx;
    LB_TRY(toy_run(&w->toy, r, err));
    start_holding(&w->holder, &w->thread);
    return LB_OK;
}

/* Creates the fixture's database, as a run before the writer's would have. */
static void create_store(const fixture *f) {
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_store_close(s);
}

/* Another process holds the write lock longer than one busy timeout (10 s): the start of a
 * run waits for it, as a finish does, instead of failing with "database is locked". */
static void test_store_run_begin_waits_for_a_lock_held_longer_than_the_busy_timeout(void **state) {
    fixture *f = *state;
    create_store(f);
    setenv("LLMBENCH_DB_WAIT_S", "60", 1);
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    unsetenv("LLMBENCH_DB_WAIT_S");
    lock_holder holder = {.db = f->db, .hold_s = 10.5};
    pthread_t thread;
    start_holding(&holder, &thread);
    assert_int_equal(holder.locked, 1);
    lb_result *r = lb_result_new("train", "toy");
    int64_t id = -1;
    lb_status st = lb_store_run_begin(s, r, &id, &err);
    const int64_t returned_ns = lb_clock_now_ns();
    pthread_join(thread, NULL);
    if (st != LB_OK) fail_msg("begin under a lock held 10.5 s: %s", err.msg);
    assert_true(id > 0);
    assert_true(returned_ns >= atomic_load(&holder.released_ns));
    lb_store_close(s);
    lb_result_free(r);
    r = load(f, id);
    assert_int_equal(r->status, LB_RUN_RUNNING);
    assert_string_equal(r->name, "toy");
    lb_result_free(r);
}

/* A lock held past the whole wait: nothing runs, no run is stored, and the one-line error
 * names the database, the wait and what to do. */
static void test_runctl_start_under_a_lock_held_past_the_wait_runs_nothing(void **state) {
    fixture *f = *state;
    create_store(f);
    setenv("LLMBENCH_DB_WAIT_S", "0.3", 1);
    lock_holder holder = {.db = f->db, .hold_s = 2};
    pthread_t thread;
    start_holding(&holder, &thread);
    toy_work w = {.steps = 3, .fail_at = -1, .interrupt_at = -1};
    int64_t id = 0;
    lb_err err = {{0}};
    lb_status st = run_toy(f, &w, 0, NULL, &id, &err);
    unsetenv("LLMBENCH_DB_WAIT_S");
    pthread_join(thread, NULL);
    assert_int_equal(holder.locked, 1);
    assert_int_equal(st, LB_ERR_DB);
    assert_int_equal(w.calls, 0);
    assert_int_equal(id, -1);
    assert_non_null(strstr(err.msg, f->db));
    assert_non_null(strstr(err.msg, "stayed locked by another process for 0.3 s (1 attempt)"));
    assert_non_null(strstr(err.msg, "LLMBENCH_DB_WAIT_S to wait longer"));
    assert_null(strchr(err.msg, '\n'));
    lb_store *s = NULL;
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_store_run_info *runs = NULL;
    size_t n = 7;
    assert_int_equal(lb_store_list(s, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 0);
    free(runs);
    lb_store_close(s);
}

static void
test_runctl_final_write_waits_for_a_lock_held_longer_than_the_busy_timeout(void **state) {
    fixture *f = *state;
    setenv("LLMBENCH_DB_WAIT_S", "60", 1);
    locked_work w = {.toy = {.steps = 8, .fail_at = -1, .interrupt_at = -1},
                     .holder = {.db = f->db, .hold_s = 11.5}};
    lb_result *r = lb_result_new("train", "toy");
    int64_t id = -1;
    lb_err err = {{0}};
    lb_status st = lb_runctl_run(&f->common, 0, NULL, r, toy_then_lock, &w, &id, &err);
    pthread_join(w.thread, NULL);
    unsetenv("LLMBENCH_DB_WAIT_S");
    lb_result_free(r);
    assert_int_equal(w.holder.locked, 1);
    assert_int_equal(st, LB_OK);
    r = load(f, id);
    assert_int_equal(r->status, LB_RUN_OK);
    assert_int_equal(lb_result_find_series(r, "loss")->n, 8);
    lb_result_free(r);
}

/* A run's start waiting for another process's write lock (LLMBENCH_DB_WAIT_S=60) stops at a
 * SIGINT at once, neither after SQLite's busy timeout (10 s) nor after the whole wait: exit
 * 130, one line saying so, nothing run and nothing stored. */
static void test_runctl_start_waiting_for_the_lock_stops_at_sigint(void **state) {
    fixture *f = *state;
    create_store(f);
    int go[2], said[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(said), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        close(said[0]);
        lb_signals_install();
        setenv("LLMBENCH_DB_WAIT_S", "60", 1);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(99);
        toy_work w = {.steps = 3, .fail_at = -1, .interrupt_at = -1};
        int64_t id = 0;
        lb_err err = {{0}};
        lb_status st = run_toy(f, &w, 0, NULL, &id, &err);
        dprintf(said[1], "%d %lld %s", w.calls, (long long)id, err.msg);
        _exit(lb_status_exit_code(st));
    }
    close(go[0]);
    close(said[1]);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(write(go[1], "x", 1), 1);
    close(go[1]);
    usleep(500 * 1000);
    int64_t t0 = lb_clock_now_ns();
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = 0;
    pid_t ended = 0;
    while ((ended = waitpid(pid, &status, WNOHANG)) == 0 && lb_clock_now_ns() - t0 < 3000000000)
        usleep(10 * 1000);
    double took_s = (lb_clock_now_ns() - t0) * 1e-9;
    assert_int_equal(sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    if (ended == 0) assert_int_equal(waitpid(pid, &status, 0), pid);
    char msg[LB_ERR_MSG_BYTES + 64] = "";
    lb_test_slurp(said[0], msg, sizeof msg);
    close(said[0]);
    print_message("the start ended %.3f s after SIGINT: %s\n", took_s, msg);
    assert_true(took_s < 2.0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    char want[LB_ERR_MSG_BYTES];
    snprintf(want, sizeof want,
             "0 -1 interrupted while waiting for results database %s, locked by another "
             "process: nothing was stored",
             f->db);
    assert_string_equal(msg, want);
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_store_run_info *runs = NULL;
    size_t n = 7;
    assert_int_equal(lb_store_list(s, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 0);
    free(runs);
    lb_store_close(s);
}

/* A finish keeps waiting for the lock after a signal: an interrupted run's samples are
 * stored once the other process lets go. */
static void test_store_run_finish_waits_for_the_lock_after_a_signal(void **state) {
    fixture *f = *state;
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_result *r = lb_result_new("train", "toy");
    int64_t id = -1;
    assert_int_equal(lb_store_run_begin(s, r, &id, &err), LB_OK);
    lb_result_series_push(lb_result_series(r, "loss", "nats"), 2.5);
    r->status = LB_RUN_INTERRUPTED;
    lock_holder holder = {.db = f->db, .hold_s = 1.5};
    pthread_t thread;
    start_holding(&holder, &thread);
    assert_int_equal(holder.locked, 1);
    lb_signals_raise(SIGINT);
    lb_status st = lb_store_run_finish(s, id, r, &err);
    const int64_t returned_ns = lb_clock_now_ns();
    lb_signals_reset();
    pthread_join(thread, NULL);
    if (st != LB_OK) fail_msg("finish after a signal under a lock held 1.5 s: %s", err.msg);
    assert_true(returned_ns >= atomic_load(&holder.released_ns)); /* it waited for the lock */
    lb_store_close(s);
    lb_result_free(r);
    r = load(f, id);
    assert_int_equal(r->status, LB_RUN_INTERRUPTED);
    assert_true(lb_result_find_series(r, "loss")->values[0] == 2.5);
    lb_result_free(r);
}

/* An import (lb_store_run_import) that a signal reached commits nothing, even with the lock
 * free: its transaction is rolled back at the commit, the run is neither stored nor found. */
static void test_store_run_import_after_a_signal_stores_nothing(void **state) {
    fixture *f = *state;
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(f->db, &s, &err), LB_OK);
    lb_result *r = lb_result_new("train", "kept");
    r->status = LB_RUN_OK;
    r->start_wall_s = 1.7e9;
    r->end_wall_s = 1.7e9 + 5;
    lb_result_series_push(lb_result_series(r, "step_ms", "ms"), 1.0);
    int64_t id = 0;
    bool stored = true;
    lb_signals_raise(SIGINT);
    lb_status st = lb_store_run_import(s, r, "imported:0123456789abcdef", &id, &stored, &err);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_string_equal(err.msg,
                        "interrupted before the run was committed: nothing of it was stored");
    assert_int_equal(id, -1);
    assert_false(stored);
    lb_store_run_info *runs = NULL;
    size_t n = 7;
    assert_int_equal(lb_store_list(s, NULL, &runs, &n, &err), LB_OK);
    assert_int_equal(n, 0);
    free(runs);
    assert_int_equal(lb_store_run_import(s, r, "imported:0123456789abcdef", &id, &stored, &err),
                     LB_OK);
    assert_true(stored);
    assert_true(id > 0);
    lb_store_close(s);
    lb_result_free(r);
}

static void test_runctl_result_that_cannot_be_stored_is_kept_in_a_file_and_imported(void **state) {
    fixture *f = *state;
    setenv("LLMBENCH_DB_WAIT_S", "1", 1);
    locked_work w = {.toy = {.steps = 8, .fail_at = -1, .interrupt_at = -1},
                     .holder = {.db = f->db, .hold_s = 4}};
    lb_result *r = lb_result_new("train", "toy");
    int64_t id = -1;
    lb_err err = {{0}};
    lb_status st = lb_runctl_run(&f->common, 0, NULL, r, toy_then_lock, &w, &id, &err);
    unsetenv("LLMBENCH_DB_WAIT_S");
    lb_result_free(r);
    assert_int_equal(st, LB_ERR_DB);
    assert_true(id > 0);
    assert_non_null(strstr(err.msg, "stayed locked"));
    /* The message names the file and the command that stores it. */
    char side[600];
    assert_true(lb_test_side_file(err.msg, side, sizeof side));
    assert_non_null(strstr(side, f->dir));
    char *text = lb_test_read_file(side, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"status\":\"ok\""));
    assert_non_null(strstr(text, "\"loss\""));
    free(text);
    pthread_join(w.thread, NULL);

    const char *args[] = {"results", "import", side, "--db", f->db, NULL};
    char out[1024], errout[1024];
    assert_int_equal(lb_test_run(args, out, sizeof out, errout, sizeof errout), 0);
    long long imported = 0;
    assert_int_equal(sscanf(strstr(out, "as run "), "as run %lld", &imported), 1);
    assert_true(imported > id);
    r = load(f, imported);
    assert_int_equal(r->status, LB_RUN_OK);
    const lb_series *loss = lb_result_find_series(r, "loss");
    assert_int_equal(loss->n, 8);
    assert_true(loss->values[7] == 5.0 / 8);
    assert_true(lb_result_metric(r, "final_loss") == 5.0 / 8);
    lb_result_free(r);
}

static void test_cli_results_import_refuses_a_file_that_is_not_a_result(void **state) {
    fixture *f = *state;
    char path[320];
    snprintf(path, sizeof path, "%s/x.json", f->dir);
    assert_true(lb_test_write_file(path, "{\"kind\":\"train\"}"));
    const char *args[] = {"results", "import", path, "--db", f->db, NULL};
    char errout[1024];
    assert_int_equal(lb_test_run(args, NULL, 0, errout, sizeof errout), 2);
    assert_non_null(strstr(errout, "\"name\""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runctl_ok_run_is_stored_with_provenance, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_runctl_failed_run_keeps_the_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runctl_interrupted_run_is_marked_and_keeps_samples,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_runctl_signal_after_work_marks_interrupted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_runctl_unusable_store_runs_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runctl_failure_not_utf8_keeps_the_result_json, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_runctl_secrets_never_reach_the_database_or_exports,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_runctl_real_sigint_stores_interrupted_run_and_exits_130, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runctl_million_samples_are_stored_whole, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_runctl_final_write_waits_for_a_lock_held_longer_than_the_busy_timeout, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_runctl_result_that_cannot_be_stored_is_kept_in_a_file_and_imported, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_cli_results_import_refuses_a_file_that_is_not_a_result,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_store_run_begin_waits_for_a_lock_held_longer_than_the_busy_timeout, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_runctl_start_under_a_lock_held_past_the_wait_runs_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runctl_start_waiting_for_the_lock_stops_at_sigint,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_run_finish_waits_for_the_lock_after_a_signal,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_run_import_after_a_signal_stores_nothing, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
