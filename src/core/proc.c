/* proc.c: fork, exec and wait behind proc.h. The wait polls every 20 ms so that an
 * interrupt flag set by the signal handler is seen even when waitpid is restarted. A
 * child that fails before its program runs says why on a close-on-exec pipe, so that the
 * caller gets the reason rather than an exit code 127 that the program might return too.
 * Between fork and exec the child calls only async-signal-safe functions: its environment
 * is made before the fork. SIGCHLD is the default while the child lives, so that a caller
 * that ignores it still gets the child's status. */
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/signals.h"

extern char **environ;

lb_status lb_proc_self_exe(char *out, size_t out_bytes, lb_err *err) {
    ssize_t n = readlink("/proc/self/exe", out, out_bytes - 1);
    if (n <= 0 || (size_t)n >= out_bytes - 1)
        return lb_fail(err, LB_ERR_RUNTIME, "cannot find the path of this program: %s",
                       n < 0 ? strerror(errno) : "path too long");
    out[n] = '\0';
    return LB_OK;
}

/* In the child: redirect fd to path, or leave it. Returns false on failure. */
static int redirect(int fd, const char *path) {
    if (path == NULL) return 1;
    int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f < 0) return 0;
    int ok = dup2(f, fd) >= 0;
    close(f);
    return ok;
}

/* What the child failed at before its program ran, sent to the parent on the report pipe
 * with errno (an exec that succeeds closes the pipe, and the parent reads nothing). */
typedef enum { START_STDOUT = 1, START_STDERR, START_EXEC } start_step;

static _Noreturn void child_failed(int report, start_step step) {
    int msg[2] = {(int)step, errno};
    ssize_t n;
    do {
        n = write(report, msg, sizeof msg);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}

static void child(const lb_proc_spec *spec, char *const *envp, pid_t parent, int report) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (!redirect(1, spec->stdout_path)) child_failed(report, START_STDOUT);
    if (!redirect(2, spec->stderr_path)) child_failed(report, START_STDERR);
    /* stdout where stderr goes: nowhere when stderr is closed */
    if (spec->stdout_to_stderr && dup2(2, 1) < 0) {
        if (errno != EBADF) child_failed(report, START_STDOUT);
        close(1);
    }
    execve(spec->argv[0], (char *const *)spec->argv, envp);
    child_failed(report, START_EXEC);
}

/* a and b ("NAME=VALUE" or a bare "NAME") name the same variable */
static bool same_name(const char *a, const char *b) {
    size_t n = strcspn(a, "=");
    return n == strcspn(b, "=") && memcmp(a, b, n) == 0;
}

char **lb_proc_environment(const char *const *env) {
    size_t n_ours = 0, n_env = 0;
    while (environ != NULL && environ[n_ours] != NULL)
        n_ours++;
    while (env != NULL && env[n_env] != NULL)
        n_env++;
    char **envp = malloc((n_ours + n_env + 1) * sizeof *envp);
    if (envp == NULL) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < n_ours; i++) {
        bool replaced = false;
        for (size_t j = 0; j < n_env && !replaced; j++)
            replaced = same_name(environ[i], env[j]);
        if (!replaced) envp[n++] = environ[i];
    }
    for (size_t j = 0; j < n_env; j++) {
        bool overridden = strchr(env[j], '=') == NULL;
        for (size_t k = j + 1; k < n_env && !overridden; k++)
            overridden = same_name(env[j], env[k]);
        if (!overridden) envp[n++] = (char *)env[j];
    }
    envp[n] = NULL;
    return envp;
}

/* Reads the child's report of a failed start; true (and its message in err) when there
 * is one. */
static bool start_failed(const lb_proc_spec *spec, pid_t pid, int report, lb_err *err) {
    int msg[2];
    size_t got = 0;
    while (got < sizeof msg) {
        ssize_t n = read(report, (char *)msg + got, sizeof msg - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof msg) return false;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (msg[0] == START_EXEC)
        lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: %s", spec->argv[0], strerror(msg[1]));
    else
        lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: cannot write its %s to %s: %s",
                spec->argv[0], msg[0] == START_STDOUT ? "output" : "errors",
                msg[0] == START_STDOUT ? (spec->stdout_path ? spec->stdout_path : "its stderr")
                                       : spec->stderr_path,
                strerror(msg[1]));
    return true;
}

void lb_proc_sigchld_reset(lb_proc_sigchld *saved) {
    sigaction(SIGCHLD, NULL, &saved->caller);
    bool ignored = !(saved->caller.sa_flags & SA_SIGINFO) && saved->caller.sa_handler == SIG_IGN;
    saved->changed = ignored || (saved->caller.sa_flags & SA_NOCLDWAIT);
    if (!saved->changed) return;
    struct sigaction mine = saved->caller;
    mine.sa_flags &= ~SA_NOCLDWAIT;
    if (ignored) mine.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &mine, NULL);
}

void lb_proc_sigchld_restore(const lb_proc_sigchld *saved) {
    if (saved->changed) sigaction(SIGCHLD, &saved->caller, NULL);
}

/* Waits for the started child pid (report: the read end of its report pipe, closed here). */
static lb_status wait_child(const lb_proc_spec *spec, pid_t pid, int report, int *exit_code,
                            lb_err *err) {
    bool failed = start_failed(spec, pid, report, err);
    close(report);
    if (failed) return LB_ERR_RUNTIME;
    bool forwarded = false;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            return lb_fail(err, LB_ERR_RUNTIME, "cannot wait for %s: %s", spec->argv[0],
                           strerror(errno));
        }
        if (!forwarded && lb_signals_interrupted()) {
            kill(pid, SIGINT);
            forwarded = true;
        }
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return LB_OK;
}

lb_status lb_proc_run(const lb_proc_spec *spec, int *exit_code, lb_err *err) {
    pid_t parent = getpid();
    char **envp = lb_proc_environment(spec->env);
    if (envp == NULL)
        return lb_fail(err, LB_ERR_NOMEM, "cannot start %s: out of memory", spec->argv[0]);
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        int e = errno;
        free(envp);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: %s", spec->argv[0], strerror(e));
    }
    /* with our stdout or stderr closed the pipe may take fd 1 or 2, which the child's
     * redirections replace: keep both ends at 3 or above */
    for (int k = 0; k < 2; k++)
        if (report[k] < 3) {
            int moved = fcntl(report[k], F_DUPFD_CLOEXEC, 3);
            if (moved < 0) {
                int e = errno;
                close(report[0]);
                close(report[1]);
                free(envp);
                return lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: %s", spec->argv[0],
                               strerror(e));
            }
            close(report[k]);
            report[k] = moved;
        }
    lb_proc_sigchld sigchld;
    lb_proc_sigchld_reset(&sigchld);
    fflush(NULL);
    pid_t pid = fork();
    int fork_errno = errno;
    if (pid != 0) free(envp);
    if (pid < 0) {
        lb_proc_sigchld_restore(&sigchld);
        close(report[0]);
        close(report[1]);
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: %s", spec->argv[0],
                       strerror(fork_errno));
    }
    if (pid == 0) child(spec, envp, parent, report[1]);
    setpgid(pid, pid); /* both sides set it: whichever runs first wins the race */
    close(report[1]);
    lb_status st = wait_child(spec, pid, report[0], exit_code, err);
    lb_proc_sigchld_restore(&sigchld);
    return st;
}

void lb_proc_sh_word(FILE *f, const char *word, lb_proc_sh_mode mode) {
    static const char plain[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-";
    if (mode == LB_PROC_SH_BARE_PLAIN && word[0] != '\0' && strspn(word, plain) == strlen(word)) {
        fputs(word, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = word; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else if (*p == '%' && mode == LB_PROC_SH_IN_CRONTAB)
            fputs(p > word && p[-1] == '\\' ? "''\\%" : "\\%", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}
