/* launch.c: fork/exec of local workers with torchrun variables, and the wait for them.
 * Each worker's environment is made before its fork and the child calls only
 * async-signal-safe functions until its execve; one that cannot exec says why on a
 * close-on-exec pipe. */
#include "comm/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/proc.h"
#include "core/signals.h"

/* A TCP port free on the loopback now (the kernel's choice for port 0). */
/* Whether port p on 127.0.0.1 can be bound now (p = 0: any; *got: the one bound). */
static bool bindable(int p, int *got) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0;
    if (ok) *got = ntohs(a.sin_port);
    close(fd);
    return ok;
}

/* A port for rank 0 to listen on, free now. Taken from below the kernel's ephemeral range
 * where it can: a port from inside it may be handed to some process's outgoing connection
 * before rank 0 binds it ("Address already in use" when jobs run side by side). */
static int free_port(void) {
    int lo = 32768, hi = 60999, got = -1;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
        fclose(f);
    }
    int from = lo - 12000 > 1024 ? lo - 12000 : 1024;
    unsigned seed = (unsigned)getpid() ^ (unsigned)lb_clock_now_ns();
    for (int i = 0; i < 64 && lo > from; i++)
        if (bindable(from + (int)(rand_r(&seed) % (unsigned)(lo - from)), &got)) return got;
    return bindable(0, &got) ? got : -1;
}

static int code_of(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* One line on stderr for the first worker that failed: which, how, and what follows (late:
 * the others outlived their grace). */
static void report_failure(const lb_launch_params *p, int r, int status, int left, bool late) {
    char how[64];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    fprintf(stderr, "llmbench: worker %d of %d (rank %d) %s", r, p->n, p->first_rank + r, how);
    if (left > 0 && late)
        fprintf(stderr, "; the %d left did not end within %g s: SIGTERM", left, p->grace_s);
    else if (left > 0)
        fprintf(stderr, "; the %d left get %g s to end on their own, then SIGTERM", left,
                p->grace_s);
    fputc('\n', stderr);
    fflush(stderr);
}

/* err: the deadline passed with the workers in pids (0: ended) still running. */
static void name_running(const lb_launch_params *p, const pid_t *pids, int left, lb_err *err) {
    char list[256] = "";
    size_t used = 0;
    for (int r = 0; r < p->n && used < sizeof list; r++)
        if (pids[r] > 0)
            used += (size_t)snprintf(list + used, sizeof list - used, "%sworker %d (rank %d)",
                                     used > 0 ? ", " : "", r, p->first_rank + r);
    lb_fail(err, LB_ERR_RUNTIME,
            "the launch's deadline of %g s passed with %d of %d workers still running (%s): "
            "they were ended with SIGTERM, then SIGKILL",
            p->deadline_s, left, p->n, list);
}

int lb_launch_free_port(void) {
    return free_port();
}

/* The variables every worker's environment is made with, in the order applied (a later
 * entry wins, a bare NAME removes it): the job's, the MPI and Slurm ones removed (the
 * workers meet by the job's variables even when the launcher is an MPI or Slurm rank),
 * p->unset removed, p->env. rank and local_rank are written for each worker in turn. */
typedef struct {
    char world[32], local_world[32], port[32], rank[32], local_rank[32];
    char *addr;        /* "MASTER_ADDR=...", malloc'd */
    const char **list; /* NULL-terminated, malloc'd; its strings are these and p's */
} worker_vars;

static void vars_free(worker_vars *v) {
    free(v->addr);
    free(v->list);
}

/* false when out of memory (v freed) */
static bool vars_init(worker_vars *v, const lb_launch_params *p, int port) {
    static const char *const mpi_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                           "SLURM_PROCID"};
    enum { N_MPI = sizeof mpi_vars / sizeof mpi_vars[0], N_JOB = 6 };
    int n_unset = 0, n_env = 0;
    while (p->unset != NULL && p->unset[n_unset] != NULL)
        n_unset++;
    while (p->env != NULL && p->env[n_env] != NULL)
        n_env++;
    const char *addr = p->master_addr ? p->master_addr : "127.0.0.1";
    v->addr = malloc(sizeof "MASTER_ADDR=" + strlen(addr));
    v->list = calloc((size_t)(N_JOB + N_MPI + n_unset + n_env + 1), sizeof *v->list);
    if (v->addr == NULL || v->list == NULL) {
        vars_free(v);
        return false;
    }
    sprintf(v->addr, "MASTER_ADDR=%s", addr);
    snprintf(v->world, sizeof v->world, "WORLD_SIZE=%d", p->world > 0 ? p->world : p->n);
    snprintf(v->local_world, sizeof v->local_world, "LOCAL_WORLD_SIZE=%d", p->n);
    snprintf(v->port, sizeof v->port, "MASTER_PORT=%d", port);
    int k = 0;
    const char *job[N_JOB] = {v->rank, v->local_rank, v->world, v->local_world, v->port, v->addr};
    for (int i = 0; i < N_JOB; i++)
        v->list[k++] = job[i];
    for (int i = 0; i < N_MPI; i++)
        v->list[k++] = mpi_vars[i];
    for (int i = 0; i < n_unset; i++)
        v->list[k++] = p->unset[i];
    for (int i = 0; i < n_env; i++)
        v->list[k++] = p->env[i];
    return true;
}

int lb_launch_local(const lb_launch_params *p, lb_err *err) {
    int port = p->master_port > 0 ? p->master_port : free_port();
    if (port < 0) {
        lb_fail(err, LB_ERR_IO, "no free TCP port on 127.0.0.1 for the workers' rendezvous");
        return -1;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        lb_fail(err, LB_ERR_IO, "cannot find this program (/proc/self/exe): %s", strerror(errno));
        return -1;
    }
    exe[len] = '\0';
    pid_t *pids = calloc((size_t)p->n, sizeof *pids);
    worker_vars vars = {0};
    if (pids == NULL || !vars_init(&vars, p, port)) {
        free(pids);
        lb_fail(err, LB_ERR_NOMEM, "out of memory");
        return -1;
    }
    /* a worker that cannot exec says why on this close-on-exec pipe ({worker, errno}); an
     * exec that succeeds closes it. Its write end at 3 or above, which rank 0's stdout
     * leaves in place. */
    int report[2] = {-1, -1};
    if (pipe2(report, O_CLOEXEC) == 0 && report[1] < 3) {
        int moved = fcntl(report[1], F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(report[1]);
        report[1] = moved;
        errno = e;
    }
    if (report[1] < 0) {
        lb_fail(err, LB_ERR_RUNTIME, "cannot start the workers: %s", strerror(errno));
        if (report[0] >= 0) close(report[0]);
        free(pids);
        vars_free(&vars);
        return -1;
    }
    /* a caller that ignores SIGCHLD would have the kernel reap the workers, their statuses
     * lost to the wait below */
    lb_proc_sigchld caller;
    lb_proc_sigchld_reset(&caller);
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    int started = 0;
    for (int r = 0; r < p->n; r++) {
        snprintf(vars.rank, sizeof vars.rank, "RANK=%d", p->first_rank + r);
        snprintf(vars.local_rank, sizeof vars.local_rank, "LOCAL_RANK=%d", r);
        char **envp = lb_proc_environment(vars.list);
        if (envp == NULL) {
            lb_fail(err, LB_ERR_NOMEM, "out of memory");
            break;
        }
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1);
            if (r == 0 && p->rank0_stdout >= 0) dup2(p->rank0_stdout, 1);
            execve(exe, p->argv, envp);
            int msg[2] = {r, errno};
            ssize_t n;
            do {
                n = write(report[1], msg, sizeof msg);
            } while (n < 0 && errno == EINTR);
            _exit(127);
        }
        int fork_errno = errno;
        free(envp);
        if (pid < 0) {
            lb_fail(err, LB_ERR_RUNTIME, "fork of worker %d failed: %s", r, strerror(fork_errno));
            break;
        }
        pids[r] = pid;
        started++;
    }
    vars_free(&vars);
    close(report[1]);
    int msg[2];
    size_t got = 0;
    while (got < sizeof msg) {
        ssize_t n = read(report[0], (char *)msg + got, sizeof msg - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(report[0]);
    if (got == sizeof msg)
        lb_fail(err, LB_ERR_RUNTIME, "cannot start worker %d (%s): %s", msg[0], exe,
                strerror(msg[1]));
    /* when not every worker started, those that did are ended at once as after a failure
     * (SIGTERM, SIGTERM, SIGKILL): one that ignores SIGTERM does not hold the launch */
    bool not_started = got == sizeof msg || started < p->n;
    int code = not_started ? -1 : 0, left = started;
    int64_t kill_at = not_started ? lb_clock_now_ns() : 0;
    int64_t deadline =
        p->deadline_s > 0 ? lb_clock_now_ns() + (int64_t)(p->deadline_s * 1e9) : INT64_MAX;
    bool overran = false;
    int sent = 0; /* signals sent to the workers left: SIGTERM, SIGTERM again, SIGKILL */
    int quiet_r = -1, quiet_status = 0; /* an interrupted worker's end, said if the others
                                         * outlive their grace */
    bool passed_on = false;
    while (left > 0) {
        /* a signal that reached the launcher alone (kill PID, a container's stop) would
         * leave the workers running and their stored run `running`: passed on once, as a
         * copy that a worker the same signal reached (a Ctrl-C) takes as nothing more */
        if (!passed_on && lb_signals_interrupted()) {
            for (int r = 0; r < p->n; r++)
                if (pids[r] > 0) lb_signals_pass_on(pids[r]);
            passed_on = true;
        }
        for (int r = 0; r < p->n; r++) {
            int status = 0;
            if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
            pids[r] = 0;
            left--;
            if (!overran && code == 0 && code_of(status) != 0) {
                code = code_of(status);
                kill_at = lb_clock_now_ns() + (int64_t)(p->grace_s * 1e9);
                /* a worker that ended interrupted said so itself, and the others stop at
                 * its step: its line waits for whether they do (a second Ctrl-C ends a
                 * worker with the same status and no word to the others) */
                if (WIFEXITED(status) &&
                    WEXITSTATUS(status) == lb_status_exit_code(LB_ERR_INTERRUPTED))
                    quiet_r = r, quiet_status = status;
                else
                    report_failure(p, r, status, left, false);
            }
        }
        if (!overran && code == 0 && left > 0 && lb_clock_now_ns() > deadline) {
            overran = true;
            name_running(p, pids, left, err);
            kill_at = deadline;
        }
        if (kill_at != 0 && lb_clock_now_ns() > kill_at) {
            if (sent == 0 && quiet_r >= 0) report_failure(p, quiet_r, quiet_status, left, true);
            /* the first SIGTERM asks a worker to stop between steps; a second one reaches
             * a worker stuck elsewhere (its last words mark its stored run, core/signals.h) */
            for (int r = 0; r < p->n; r++)
                if (pids[r] > 0) kill(pids[r], sent < 2 ? SIGTERM : SIGKILL);
            sent++;
            kill_at = lb_clock_now_ns() + 2000000000LL;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(pids);
    lb_proc_sigchld_restore(&caller);
    return overran ? LB_LAUNCH_DEADLINE_PASSED : code;
}
