/* proc.c: fork, exec and wait behind proc.h. The wait polls every 20 ms so that an
 * interrupt flag set by the signal handler is seen even when waitpid is restarted. */
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/signals.h"

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

static void child(const lb_proc_spec *spec, pid_t parent) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (!redirect(1, spec->stdout_path) || !redirect(2, spec->stderr_path)) _exit(127);
    if (spec->stdout_to_stderr && dup2(2, 1) < 0) _exit(127);
    for (size_t i = 0; spec->env != NULL && spec->env[i] != NULL; i++)
        putenv((char *)spec->env[i]);
    execv(spec->argv[0], (char *const *)spec->argv);
    fprintf(stderr, "llmbench: cannot start %s: %s\n", spec->argv[0], strerror(errno));
    _exit(127);
}

lb_status lb_proc_run(const lb_proc_spec *spec, int *exit_code, lb_err *err) {
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return lb_fail(err, LB_ERR_RUNTIME, "cannot start %s: %s", spec->argv[0], strerror(errno));
    if (pid == 0) child(spec, parent);
    setpgid(pid, pid); /* both sides set it: whichever runs first wins the race */
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
