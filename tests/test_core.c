/* test_core.c: the utilities under every command: child processes, wall-clock times in
 * ISO form, whole files in and out, log lines around the progress line, the metrics
 * exposition text, the random generator's gamma draws and the result's metric and series
 * names. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "core/metrics_text.h"
#include "core/proc.h"
#include "core/progress.h"
#include "core/result.h"
#include "core/rng.h"
#include "core/signals.h"
#include "test_util.h"

static char dir[64], unused_db[128];
LB_TEST_DIR_DB_FIXTURE(dir, unused_db)

static void test_proc_a_program_that_cannot_start_is_an_error_with_the_reason(void **state) {
    (void)state;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/no such program", dir);
    const char *argv[] = {missing, NULL};
    lb_proc_spec spec = {.argv = argv, .stderr_path = "/dev/null"};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_ERR_RUNTIME);
    assert_non_null(strstr(e.msg, missing));
    assert_non_null(strstr(e.msg, "No such file or directory"));
    assert_int_equal(code, -1);
    /* the child was waited for: no zombie left */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_proc_an_output_file_that_cannot_be_made_is_an_error(void **state) {
    (void)state;
    char bad[128];
    snprintf(bad, sizeof bad, "%s/missing folder/log", dir);
    const char *argv[] = {"/bin/true", NULL};
    lb_proc_spec spec = {.argv = argv, .stderr_path = bad};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_ERR_RUNTIME);
    assert_non_null(strstr(e.msg, bad));
}

static void test_proc_a_program_s_own_exit_code_127_is_its_exit_code(void **state) {
    (void)state;
    const char *argv[] = {"/bin/sh", "-c", "exit 127", NULL};
    lb_proc_spec spec = {.argv = argv};
    int code = -1;
    lb_err e = {{0}};
    assert_int_equal(lb_proc_run(&spec, &code, &e), LB_OK);
    assert_int_equal(code, 127);
}

/* A caller that ignores SIGCHLD (SIG_IGN, or SA_NOCLDWAIT; both stay through exec from a
 * parent) had the kernel reap the child: waitpid failed with ECHILD and the run was "cannot
 * wait for /bin/sh: No child processes" instead of the child's exit code (alarm: a wait
 * that hangs ends the test). The caller's disposition is back afterwards. */
static void test_proc_a_caller_ignoring_sigchld_gets_the_exit_code(void **state) {
    (void)state;
    const struct sigaction ignoring[] = {{.sa_handler = SIG_IGN},
                                         {.sa_handler = SIG_DFL, .sa_flags = SA_NOCLDWAIT}};
    for (size_t i = 0; i < 2; i++) {
        struct sigaction saved, after;
        assert_int_equal(sigaction(SIGCHLD, &ignoring[i], &saved), 0);
        alarm(20);
        const char *argv[] = {"/bin/sh", "-c", "sleep 0.1; exit 7", NULL};
        lb_proc_spec spec = {.argv = argv};
        int code = -1;
        lb_err e = {{0}};
        lb_status st = lb_proc_run(&spec, &code, &e);
        alarm(0);
        sigaction(SIGCHLD, &saved, &after);
        if (st != LB_OK) fail_msg("SIGCHLD case %zu: %s", i, e.msg);
        assert_int_equal(code, 7);
        assert_true(after.sa_handler == ignoring[i].sa_handler);
        assert_int_equal(after.sa_flags & SA_NOCLDWAIT, ignoring[i].sa_flags & SA_NOCLDWAIT);
    }
}

/* With this process's stdout and stderr closed, the pipe that reports a failed start would
 * take fd 1 or 2, which the child's redirections replace: a child whose stdout goes to its
 * stderr then wrote its output into the report (read as a failed start) or filled it (a
 * hang). Run in a child of the test, which closes both and exits 0 when the program ran. */
static void test_proc_runs_with_stdout_and_stderr_closed(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        close(1);
        close(2);
        const char *argv[] = {"/bin/sh", "-c", "head -c 200000 /dev/zero; exit 5", NULL};
        lb_proc_spec spec = {.argv = argv, .stdout_to_stderr = true};
        int code = -1;
        lb_err e = {{0}};
        _exit(lb_proc_run(&spec, &code, &e) == LB_OK && code == 5 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static atomic_bool g_spinning;

static void *change_environment(void *arg) {
    (void)arg;
    for (unsigned i = 0; atomic_load(&g_spinning); i++)
        setenv("LB_TEST_SPIN", i & 1 ? "a" : "b", 1);
    return NULL;
}

/* setenv or putenv in the child waits for the environment's lock, which another thread of
 * the parent may hold at the fork: the child then never ran its program (here the test's
 * child hung until its alarm). The environment given reaches the program, in place of ours
 * where the name is the same, and what else we have is kept. */
static void test_proc_env_reaches_the_child_while_another_thread_changes_ours(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        setenv("LB_TEST_SPIN", "a", 1);
        setenv("LB_TEST_KEPT", "kept", 1);
        setenv("LB_TEST_SET", "old", 1);
        atomic_store(&g_spinning, true);
        pthread_t spinner;
        if (pthread_create(&spinner, NULL, change_environment, NULL) != 0) _exit(3);
        const char *argv[] = {
            "/bin/sh", "-c",
            "[ \"$LB_TEST_SET\" = new ] && [ \"$LB_TEST_ADDED\" = 1 ] && [ \"$LB_TEST_KEPT\" = "
            "kept ] && [ -z \"${LB_TEST_GONE+x}\" ]",
            NULL};
        const char *env[] = {"LB_TEST_SET=new", "LB_TEST_ADDED=0", "LB_TEST_ADDED=1",
                             "LB_TEST_GONE=1",  "LB_TEST_GONE",    NULL};
        lb_proc_spec spec = {.argv = argv, .env = env};
        int failed = 0;
        for (int i = 0; i < 100; i++) {
            int code = -1;
            lb_err e = {{0}};
            if (lb_proc_run(&spec, &code, &e) != LB_OK || code != 0) failed++;
        }
        atomic_store(&g_spinning, false);
        pthread_join(spinner, NULL);
        _exit(failed == 0 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void expect_iso(double wall_s, const char *want) {
    char buf[40];
    lb_clock_format_iso(wall_s, buf, sizeof buf);
    assert_string_equal(buf, want);
}

static void test_clock_iso_times_round_to_the_millisecond(void **state) {
    (void)state;
    expect_iso(1700000000.123, "2023-11-14T22:13:20.123Z");
    expect_iso(1700000000.9996, "2023-11-14T22:13:21.000Z");
    expect_iso(0.0, "1970-01-01T00:00:00.000Z");
    expect_iso(-1.5, "1969-12-31T23:59:58.500Z");
    expect_iso(NAN, "-");
    expect_iso(INFINITY, "-");
}

static void test_file_last_line_is_found_past_a_nul_byte(void **state) {
    (void)state;
    char path[128], line[64];
    snprintf(path, sizeof path, "%s/child.log", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const char log[] = "start\0garbage\nllmbench train: out of memory\n\n";
    fwrite(log, 1, sizeof log - 1, f);
    fclose(f);
    lb_file_last_line(path, line, sizeof line);
    assert_string_equal(line, "llmbench train: out of memory");
}

/* A write to a symbolic link replaces the link and leaves the file it points to alone: a
 * link planted in a shared folder cannot aim an output at another file. */
static void test_file_write_to_a_link_replaces_the_link_not_its_target(void **state) {
    (void)state;
    char real[128], link[128];
    snprintf(real, sizeof real, "%s/target.txt", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    lb_err e = {{0}};
    assert_int_equal(lb_file_write_atomic(real, "old\n", 4, &e), LB_OK);
    assert_int_equal(symlink("target.txt", link), 0);
    assert_int_equal(lb_file_write_atomic(link, "new\n", 4, &e), LB_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    char *text = lb_test_read_file(real, NULL);
    assert_non_null(text);
    assert_string_equal(text, "old\n");
    free(text);
    text = lb_test_read_file(link, NULL);
    assert_non_null(text);
    assert_string_equal(text, "new\n");
    free(text);
}

static int release_fd = -1; /* the writer of read_pipe_with_signal waits for a byte on it */

static void on_alarm(int signo) {
    (void)signo;
    if (write(release_fd, "x", 1) != 1) _exit(3);
}

static void on_alarm_interrupt(int signo) {
    on_alarm(signo);
    lb_signals_raise(SIGINT);
}

/* lb_file_read of a pipe whose writer sends "first ", then "second" once the handler has
 * run on a SIGALRM 100 ms in (without SA_RESTART: the read blocked for the rest fails
 * with EINTR); *buf and *n as read, the status returned. */
static lb_status read_pipe_with_signal(void (*handler)(int), char **buf, size_t *n, lb_err *e) {
    int fds[2], release[2];
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(pipe(release), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        close(release[1]);
        signal(SIGPIPE, SIG_IGN); /* an interrupted reader may have gone */
        char go;
        if (write(fds[1], "first ", 6) != 6 || read(release[0], &go, 1) != 1) _exit(1);
        _exit(write(fds[1], "second", 6) == 6 || errno == EPIPE ? 0 : 1);
    }
    close(fds[1]);
    close(release[0]);
    release_fd = release[1];
    struct sigaction sa = {.sa_handler = handler}, old_sa;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old_sa), 0);
    struct itimerval t = {.it_value = {.tv_sec = 0, .tv_usec = 100 * 1000}};
    assert_int_equal(setitimer(ITIMER_REAL, &t, NULL), 0);
    char path[64];
    snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
    lb_status st = lb_file_read(path, buf, n, e);
    sigaction(SIGALRM, &old_sa, NULL);
    close(fds[0]);
    close(release[1]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return st;
}

/* A signal that arrives while a pipe has nothing yet stopped the read with EINTR, which
 * was reported as the user's input at fault: the read goes on and gets all of it; where
 * the signal is an interrupt, the read ends as interrupted. */
static void test_file_read_of_a_pipe_goes_on_after_a_signal(void **state) {
    (void)state;
    char *buf = NULL;
    size_t n = 0;
    lb_err e = {{0}};
    assert_int_equal(read_pipe_with_signal(on_alarm, &buf, &n, &e), LB_OK);
    assert_int_equal(n, 12);
    assert_string_equal(buf, "first second");
    free(buf);
    assert_int_equal(read_pipe_with_signal(on_alarm_interrupt, &buf, &n, &e), LB_ERR_INTERRUPTED);
    lb_signals_reset();
    assert_null(buf);
    assert_non_null(strstr(e.msg, "interrupted while reading /dev/fd/"));
}

/* A read that fails once the file is open is no fault of the user's input: LB_ERR_IO
 * (exit 1), where it was LB_ERR_USAGE; a folder still is the user's, with its own reason. */
static void test_file_read_error_is_an_io_error_and_a_folder_a_usage_error(void **state) {
    (void)state;
    char *buf = NULL;
    size_t n = 0;
    lb_err e = {{0}};
    /* address 0 is not mapped: reading this process's memory there fails with EIO */
    assert_int_equal(lb_file_read("/proc/self/mem", &buf, &n, &e), LB_ERR_IO);
    assert_null(buf);
    assert_non_null(strstr(e.msg, "/proc/self/mem"));
    assert_non_null(strstr(e.msg, strerror(EIO)));
    assert_int_equal(lb_file_read(dir, &buf, &n, &e), LB_ERR_USAGE);
    assert_null(buf);
    assert_non_null(strstr(e.msg, "is a folder"));
}

/* The command line's view of the same: a --user-conf that opens but cannot be read fails
 * the run (exit 1, no "see --help"); a folder given for it is a usage error (exit 2). */
static void test_file_a_config_that_cannot_be_read_fails_the_run_not_the_usage(void **state) {
    (void)state;
    char db[128], err[1024];
    snprintf(db, sizeof db, "%s/load.db", dir);
    const char *io[] = {"load", "--user-conf", "/proc/self/mem",     "--synthetic",
                        "4",    "--endpoint",  "http://127.0.0.1:9", "--db",
                        db,     NULL};
    assert_int_equal(lb_test_run(io, NULL, 0, err, sizeof err), 1);
    assert_string_equal(err, "llmbench load: --user-conf: cannot read /proc/self/mem: "
                             "Input/output error\n");
    io[2] = dir;
    assert_int_equal(lb_test_run(io, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "is a folder"));
}

static void test_log_writes_one_line_whatever_the_text_holds(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    lb_log(LB_LOG_WARN, "query 3 failed: %s", "HTTP 500:\nllmbench: error: forged\x1b[2J");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    assert_string_equal(
        text, "llmbench: warning: query 3 failed: HTTP 500:?llmbench: error: forged?[2J\n");
    free(text);
}

/* A log line written while the progress line is live on a terminal went onto it: the
 * progress line is blanked, the message starts at the line's start, and the progress line
 * is drawn again below it; once the progress is done, a message is written as it is. */
static void test_log_line_clears_the_live_progress_line_and_draws_it_again(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/progress", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    lb_progress p;
    lb_progress_init(&p, true);
    p.tty = true; /* as on a terminal, which the test's stderr is not */
    lb_progress_update(&p, true, "step 3/10");
    lb_log(LB_LOG_WARN, "slow step");
    lb_progress_update(&p, true, "step 4/10");
    lb_progress_done(&p);
    lb_log(LB_LOG_WARN, "done");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *text = lb_test_read_file(path, NULL);
    assert_non_null(text);
    assert_string_equal(text, "\rstep 3/10"
                              "\r         \rllmbench: warning: slow step\n"
                              "step 3/10"
                              "\rstep 4/10\n"
                              "llmbench: warning: done\n");
    free(text);
}

static void test_metrics_histogram_numbers_read_back_as_the_same_double(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    const double bounds[] = {0.005, 1, 1234567, 1234568};
    const uint64_t counts[] = {1, 2, 3, 4, 5};
    lb_metrics_text_histogram(f, "latency_seconds", "", bounds, counts, 4, 15000000.123);
    fclose(f);
    assert_string_equal(text, "llmbench_latency_seconds_bucket{le=\"0.005\"} 1\n"
                              "llmbench_latency_seconds_bucket{le=\"1.0\"} 3\n"
                              "llmbench_latency_seconds_bucket{le=\"1234567.0\"} 6\n"
                              "llmbench_latency_seconds_bucket{le=\"1234568.0\"} 10\n"
                              "llmbench_latency_seconds_bucket{le=\"+Inf\"} 15\n"
                              "llmbench_latency_seconds_sum 15000000.123\n"
                              "llmbench_latency_seconds_count 15\n");
    free(text);
}

static void test_metrics_histogram_sum_not_finite_is_spelt_as_the_format_wants(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    const double bounds[] = {1};
    const uint64_t counts[] = {0, 1};
    lb_metrics_text_histogram(f, "x", "a=\"b\"", bounds, counts, 1, INFINITY);
    fclose(f);
    assert_non_null(strstr(text, "llmbench_x_sum{a=\"b\"} +Inf\n"));
    free(text);
}

/* A shape with no gamma distribution (NaN, not positive, infinite) is NaN at once with
 * nothing drawn: a huge negative shape (or -inf) recursed until the stack ran out, -0.5
 * gave a positive draw and 0 gave 0. A valid shape keeps its mean. */
static void test_rng_gamma_of_a_shape_with_no_distribution_is_nan(void **state) {
    (void)state;
    const double bad[] = {NAN, 0.0, -0.5, -1e18, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lb_rng rng, before;
        lb_rng_seed(&rng, 7);
        before = rng;
        double v = lb_rng_gamma(&rng, bad[i]);
        if (!isnan(v)) fail_msg("shape %g gave %g, not NaN", bad[i], v);
        assert_memory_equal(&rng, &before, sizeof rng);
    }
    lb_rng rng;
    lb_rng_seed(&rng, 7);
    const double shapes[] = {0.25, 2.5};
    for (size_t k = 0; k < 2; k++) {
        double sum = 0;
        for (int i = 0; i < 20000; i++)
            sum += lb_rng_gamma(&rng, shapes[k]);
        assert_float_equal(sum / 20000, shapes[k], 0.05 * (1 + shapes[k]));
    }
}

/* A metric or series name longer than a stored name (or not UTF-8) is stored cut (or
 * repaired); given again, the same name finds that entry instead of adding a second one. */
static void test_result_a_name_stored_cut_is_found_again(void **state) {
    (void)state;
    char name[LB_NAME_BYTES + 40];
    memset(name, 'm', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    const char *latin1 = "lat\xe9ncia";
    lb_result *r = lb_result_new("load", "names");
    assert_non_null(r);
    assert_int_equal(lb_result_set_metric(r, name, 1.0, "s"), LB_OK);
    assert_int_equal(lb_result_set_metric(r, name, 2.0, "ms"), LB_OK);
    assert_int_equal(lb_result_set_metric(r, latin1, 3.0, "s"), LB_OK);
    assert_int_equal(lb_result_set_metric(r, latin1, 4.0, "s"), LB_OK);
    assert_int_equal(r->n_metrics, 2);
    assert_int_equal(strlen(r->metrics[0].name), LB_NAME_BYTES - 1);
    assert_string_equal(r->metrics[0].unit, "ms");
    assert_float_equal(lb_result_metric(r, name), 2.0, 0);
    assert_string_equal(r->metrics[1].name, "lat?ncia");
    assert_float_equal(lb_result_metric(r, latin1), 4.0, 0);
    lb_series *s = lb_result_series(r, name, "s");
    assert_non_null(s);
    assert_int_equal(lb_result_series_push(s, 5.0), LB_OK);
    assert_ptr_equal(lb_result_series(r, name, "s"), s);
    assert_int_equal(r->n_series, 1);
    const lb_series *found = lb_result_find_series(r, name);
    assert_ptr_equal(found, s);
    assert_int_equal(found->n, 1);
    lb_result_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_a_program_that_cannot_start_is_an_error_with_the_reason),
        cmocka_unit_test(test_proc_an_output_file_that_cannot_be_made_is_an_error),
        cmocka_unit_test(test_proc_a_program_s_own_exit_code_127_is_its_exit_code),
        cmocka_unit_test(test_proc_a_caller_ignoring_sigchld_gets_the_exit_code),
        cmocka_unit_test(test_proc_runs_with_stdout_and_stderr_closed),
        cmocka_unit_test(test_proc_env_reaches_the_child_while_another_thread_changes_ours),
        cmocka_unit_test(test_clock_iso_times_round_to_the_millisecond),
        cmocka_unit_test(test_file_last_line_is_found_past_a_nul_byte),
        cmocka_unit_test(test_file_write_to_a_link_replaces_the_link_not_its_target),
        cmocka_unit_test(test_file_read_of_a_pipe_goes_on_after_a_signal),
        cmocka_unit_test(test_file_read_error_is_an_io_error_and_a_folder_a_usage_error),
        cmocka_unit_test(test_file_a_config_that_cannot_be_read_fails_the_run_not_the_usage),
        cmocka_unit_test(test_log_writes_one_line_whatever_the_text_holds),
        cmocka_unit_test(test_log_line_clears_the_live_progress_line_and_draws_it_again),
        cmocka_unit_test(test_metrics_histogram_numbers_read_back_as_the_same_double),
        cmocka_unit_test(test_metrics_histogram_sum_not_finite_is_spelt_as_the_format_wants),
        cmocka_unit_test(test_rng_gamma_of_a_shape_with_no_distribution_is_nan),
        cmocka_unit_test(test_result_a_name_stored_cut_is_found_again),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
