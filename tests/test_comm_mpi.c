/* test_comm_mpi.c: comm.h's MPI backend under `mpirun -np 4 --oversubscribe`, the TCP
 * rendezvous of torchrun variables among local processes, the local launcher, and
 * `llmbench comm` end to end.
 *
 * The program is its own worker: CTest runs it plainly; each test starts it again under
 * mpirun (argv[1] = "--mpi-worker SCENARIO") or as forked ranks with torchrun variables,
 * and checks what the ranks printed and how they ended. Expected values are computed here
 * from the inputs' formula, independently of commbench's checker. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/boot.h"
#include "comm/comm.h"
#include "comm/launch.h"
#include "commbench/commbench.h"
#include "core/clock.h"
#include "core/signals.h"
#include "gpu/devinfo.h"
#include "test_util.h"

#define NP 4

static char self_path[4096];

/* ---- the MPI worker ---- */

static double input(int rank, size_t i) {
    return (double)((rank + 1) * 3 + (int)(i % 5) - 2);
}

static double reduce_all(lb_comm_op op, int n, size_t i) {
    double acc = input(0, i);
    for (int r = 1; r < n; r++) {
        double v = input(r, i);
        acc = op == LB_COMM_MAX ? fmax(acc, v) : op == LB_COMM_MIN ? fmin(acc, v) : acc + v;
    }
    return op == LB_COMM_AVG ? acc / n : acc;
}

static double stored(lb_comm_dtype t, double v) {
    unsigned char tmp[8];
    lb_comm_value_set(tmp, t, 0, v);
    return lb_comm_value_get(tmp, t, 0);
}

static bool is_unsigned(lb_comm_dtype t) {
    return t == LB_COMM_UINT8 || t == LB_COMM_UINT32 || t == LB_COMM_UINT64;
}

static int failures;

static void expect(const char *what, lb_comm_dtype t, const void *buf, size_t i, double want) {
    double got = lb_comm_value_get(buf, t, i);
    if (got != want && failures++ < 20)
        fprintf(stderr, "%s %s [%zu]: got %g, expected %g\n", what, lb_comm_dtype_name(t), i, got,
                want);
}

static void fill(void *buf, lb_comm_dtype t, int rank, size_t n, size_t offset) {
    for (size_t i = 0; i < n; i++)
        lb_comm_value_set(buf, t, i, input(rank, offset + i));
}

/* Every collective, dtype and op on counts that do not divide evenly, in and out of place. */
static int scenario_collectives(lb_comm *c) {
    int me = lb_comm_rank(c), n = lb_comm_size(c);
    lb_err err;
    const size_t counts[] = {1, 7, 13};
    for (int ti = 0; ti < LB_COMM_N_DTYPES; ti++) {
        lb_comm_dtype t = (lb_comm_dtype)ti;
        size_t es = lb_comm_dtype_bytes(t);
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t cnt = counts[ci], total = cnt * (size_t)n;
            char *send = calloc(total, es), *recv = calloc(total, es);
            for (int oi = 0; oi < LB_COMM_N_OPS; oi++) {
                lb_comm_op op = (lb_comm_op)oi;
                if (is_unsigned(t) && op != LB_COMM_MAX && op != LB_COMM_SUM) continue;
                /* all_reduce, out of place and in place */
                fill(send, t, me, cnt, 0);
                lb_comm_all_reduce(c, send, recv, cnt, t, op, NULL, &err);
                for (size_t i = 0; i < cnt; i++)
                    expect("all_reduce", t, recv, i, stored(t, reduce_all(op, n, i)));
                fill(recv, t, me, cnt, 0);
                lb_comm_all_reduce(c, recv, recv, cnt, t, op, NULL, &err);
                for (size_t i = 0; i < cnt; i++)
                    expect("all_reduce in place", t, recv, i, stored(t, reduce_all(op, n, i)));
                /* reduce to the last rank */
                fill(send, t, me, cnt, 0);
                memset(recv, 0, total * es);
                lb_comm_reduce(c, send, recv, cnt, t, op, n - 1, NULL, &err);
                for (size_t i = 0; me == n - 1 && i < cnt; i++)
                    expect("reduce", t, recv, i, stored(t, reduce_all(op, n, i)));
                /* reduce_scatter: block r of every rank's send reduced into rank r */
                fill(send, t, me, total, 0);
                lb_comm_reduce_scatter(c, send, recv, cnt, t, op, NULL, &err);
                for (size_t i = 0; i < cnt; i++)
                    expect("reduce_scatter", t, recv, i,
                           stored(t, reduce_all(op, n, (size_t)me * cnt + i)));
                fill(recv, t, me, total, 0);
                lb_comm_reduce_scatter(c, recv, recv + (size_t)me * cnt * es, cnt, t, op, NULL,
                                       &err);
                for (size_t i = 0; i < cnt; i++)
                    expect("reduce_scatter in place", t, recv + (size_t)me * cnt * es, i,
                           stored(t, reduce_all(op, n, (size_t)me * cnt + i)));
            }
            /* broadcast from rank 1 */
            fill(send, t, me, cnt, 0);
            lb_comm_broadcast(c, send, recv, cnt, t, 1, NULL, &err);
            for (size_t i = 0; i < cnt; i++)
                expect("broadcast", t, recv, i, stored(t, input(1, i)));
            /* all_gather, out of place and in place */
            fill(send, t, me, cnt, 0);
            lb_comm_all_gather(c, send, recv, cnt, t, NULL, &err);
            for (size_t i = 0; i < total; i++)
                expect("all_gather", t, recv, i, stored(t, input((int)(i / cnt), i % cnt)));
            memset(recv, 0, total * es);
            fill(recv + (size_t)me * cnt * es, t, me, cnt, 0);
            lb_comm_all_gather(c, recv + (size_t)me * cnt * es, recv, cnt, t, NULL, &err);
            for (size_t i = 0; i < total; i++)
                expect("all_gather in place", t, recv, i,
                       stored(t, input((int)(i / cnt), i % cnt)));
            /* all_to_all: block p of rank r holds input(r, p * cnt + i) */
            fill(send, t, me, total, 0);
            lb_comm_all_to_all(c, send, recv, cnt, t, NULL, &err);
            for (size_t i = 0; i < total; i++)
                expect("all_to_all", t, recv, i,
                       stored(t, input((int)(i / cnt), (size_t)me * cnt + i % cnt)));
            fill(recv, t, me, total, 0);
            lb_comm_all_to_all(c, recv, recv, cnt, t, NULL, &err);
            for (size_t i = 0; i < total; i++)
                expect("all_to_all in place", t, recv, i,
                       stored(t, input((int)(i / cnt), (size_t)me * cnt + i % cnt)));
            /* a ring of send/recv in one group */
            fill(send, t, me, cnt, 0);
            lb_comm_group_start(c, &err);
            lb_comm_send(c, send, cnt, t, (me + 1) % n, NULL, &err);
            lb_comm_recv(c, recv, cnt, t, (me + n - 1) % n, NULL, &err);
            lb_comm_group_end(c, &err);
            for (size_t i = 0; i < cnt; i++)
                expect("send/recv", t, recv, i, stored(t, input((me + n - 1) % n, i)));
            /* a bucket as data-parallel training runs it: reduce_scatter then all_gather,
             * both started in one group */
            char *shard = calloc(cnt, es), *full = calloc(total, es);
            fill(send, t, me, total, 0);
            lb_comm_group_start(c, &err);
            lb_comm_reduce_scatter(c, send, shard, cnt, t, LB_COMM_SUM, NULL, &err);
            lb_comm_group_end(c, &err);
            lb_comm_group_start(c, &err);
            lb_comm_all_gather(c, shard, full, cnt, t, NULL, &err);
            lb_comm_barrier(c, NULL, &err);
            lb_comm_group_end(c, &err);
            for (size_t i = 0; i < total; i++)
                expect("group reduce_scatter + all_gather", t, full, i,
                       stored(t, reduce_all(LB_COMM_SUM, n, i)));
            free(shard);
            free(full);
            free(send);
            free(recv);
        }
    }
    if (lb_comm_broken(c)) {
        fprintf(stderr, "rank %d: communicator broke\n", me);
        failures++;
    }
    printf("rank %d: collectives %s (%d wrong)\n", me, failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* Rank 3 never arrives: the others must fail within the deadline, naming it. */
static int scenario_late_rank(lb_comm *c) {
    int me = lb_comm_rank(c);
    int32_t x = 1, y = 0;
    lb_err err = {{0}};
    if (me == 3) {
        sleep(30);
        return 0;
    }
    int64_t t0 = lb_clock_now_ns();
    lb_status st = lb_comm_all_reduce(c, &x, &y, 1, LB_COMM_INT32, LB_COMM_SUM, NULL, &err);
    double s = (double)(lb_clock_now_ns() - t0) / 1e9;
    bool ok = st == LB_ERR_COMM && strstr(err.msg, "rank(s) 3 never arrived") != NULL &&
              strstr(err.msg, "all_reduce") != NULL && s < 6;
    lb_err again = {{0}};
    ok = ok && lb_comm_barrier(c, NULL, &again) == LB_ERR_COMM && strcmp(again.msg, err.msg) == 0;
    printf("rank %d: late rank %s after %.1f s: %s\n", me, ok ? "named" : "NOT NAMED", s, err.msg);
    fflush(stdout);
    /* the first rank to leave aborts the job: give the others (and mpirun's forwarding of
     * their lines) time before that, or a rank slowed by a loaded machine says nothing */
    sleep(3);
    return ok ? 0 : 1;
}

static int mpi_worker(const char *scenario) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) {
        fprintf(stderr, "boot: %s\n", err.msg);
        return 1;
    }
    lb_comm_params p = lb_comm_default_params();
    p.backend = LB_COMM_BACKEND_MPI;
    p.op_timeout_s = strcmp(scenario, "late-rank") == 0 ? 1.5 : 30;
    lb_comm *c = NULL;
    int rc = 1;
    if (lb_boot_source_of(boot) != LB_BOOT_MPI || lb_boot_size(boot) != NP)
        fprintf(stderr, "not started as %d MPI ranks\n", NP);
    else if (lb_comm_init(boot, &p, true, &c, &err) != LB_OK)
        fprintf(stderr, "comm: %s\n", err.msg);
    else
        rc = strcmp(scenario, "late-rank") == 0 ? scenario_late_rank(c) : scenario_collectives(c);
    lb_comm_free(c);
    lb_boot_free(boot); /* after the late rank: MPI_Abort */
    return rc;
}

/* ---- a collective that loses its data: commbench's check must see it ---- */

#ifdef LB_HAVE_MPI
#include <mpi.h>

/* MPI's profiling interface: the library's MPI_Iallgather is this one. With lose_in_place
 * set, an in-place call moves nothing (a barrier stands in, so the ranks still meet). */
static bool lose_in_place;

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request) {
    if (lose_in_place && sendbuf == MPI_IN_PLACE) return PMPI_Ibarrier(comm, request);
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                           request);
}
#endif

/* all_gather of 1 KiB of `dtype`, out of place then in place, where the in-place calls lose
 * their data; rank 0 prints the run's status and each placement's #wrong. */
static int lost_gather_worker(const char *dtype) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) {
        fprintf(stderr, "boot: %s\n", err.msg);
        return 1;
    }
#ifdef LB_HAVE_MPI
    lose_in_place = true;
#endif
    lb_commbench_params p = lb_commbench_default_params();
    p.colls[LB_BENCH_ALL_REDUCE] = false;
    p.colls[LB_BENCH_ALL_GATHER] = true;
    p.min_bytes = p.max_bytes = 1024;
    p.warmup = 0;
    p.iters = 1;
    p.comm.backend = LB_COMM_BACKEND_MPI;
    lb_comm_dtype_parse(dtype, &p.dtype);
    lb_result *r = lb_boot_rank(boot) == 0 ? lb_result_new("comm", "lost") : NULL;
    lb_status st = lb_commbench_run(boot, &p, r, &err);
    if (r != NULL)
        printf("status %s, out-of-place wrong %.0f, in-place wrong %.0f\n", lb_status_name(st),
               lb_result_metric(r, "all_gather.1024.oop.wrong"),
               lb_result_metric(r, "all_gather.1024.ip.wrong"));
    lb_result_free(r);
    lb_boot_free(boot);
    return 0;
}

/* all_reduce where rank 1 alone cannot allocate its buffers (it asks for 1 PiB, the others
 * for 64 bytes); rank 0 prints whether the run's error is rank 1's own sentence with its
 * host, as a job of many nodes needs it (rank 1's stderr is on another host there). */
static int failing_rank_worker(void) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) {
        fprintf(stderr, "boot: %s\n", err.msg);
        return 1;
    }
    lb_commbench_params p = lb_commbench_default_params();
    p.min_bytes = 8;
    p.max_bytes = lb_boot_rank(boot) == 1 ? (int64_t)1 << 50 : 64;
    p.comm.backend = LB_COMM_BACKEND_MPI;
    lb_result *r = lb_boot_rank(boot) == 0 ? lb_result_new("comm", "failing") : NULL;
    lb_status st = lb_commbench_run(boot, &p, r, &err);
    if (r != NULL) {
        char want[512];
        snprintf(want, sizeof want, "rank 1 (%s): out of host memory for ", lb_boot_host(boot));
        printf("status %s, %s: %s\n", lb_status_name(st),
               strncmp(err.msg, want, strlen(want)) == 0 ? "named" : "NOT NAMED", err.msg);
    }
    lb_result_free(r);
    lb_boot_free(boot);
    return 0;
}

/* all_reduce of 8 bytes, then the pair matrix; rank 0's flag says a signal arrived once the
 * row is done (on_row), so the ranks must stop before the matrix. Rank 0 prints the status,
 * whether the row and the matrix were stored, and the sentence. */
static void signal_after_row(void *ctx, const lb_bench_row *row) {
    (void)ctx, (void)row;
    lb_signals_raise(SIGINT);
}

static int interrupted_matrix_worker(void) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(30, &boot, &err) != LB_OK) {
        fprintf(stderr, "boot: %s\n", err.msg);
        return 1;
    }
    lb_commbench_params p = lb_commbench_default_params();
    p.min_bytes = p.max_bytes = 8;
    p.warmup = 0;
    p.iters = 1;
    p.matrix = true;
    p.matrix_bytes = 1024;
    p.comm.backend = LB_COMM_BACKEND_MPI;
    p.on_row = signal_after_row;
    lb_result *r = lb_boot_rank(boot) == 0 ? lb_result_new("comm", "stopped") : NULL;
    lb_status st = lb_commbench_run(boot, &p, r, &err);
    if (r != NULL)
        printf("status %s, row %s, matrix %s: %s\n", lb_status_name(st),
               isnan(lb_result_metric(r, "all_reduce.8.oop.time_us")) ? "missing" : "stored",
               isnan(lb_result_metric(r, "matrix.0.0.nvlinks")) ? "not measured" : "measured",
               err.msg);
    lb_result_free(r);
    lb_boot_free(boot);
    return 0;
}

/* ---- torchrun variables: the TCP rendezvous ---- */

/* Rank 0 sees no rank gone while all wait in a barrier, then, once the others exited after
 * it, every one of them gone, by their closed control connections. */
static int gone_worker(lb_boot *boot, int me, int n) {
    lb_err err = {{0}};
    char text[128];
    int before = me == 0 ? lb_boot_gone(boot, text, sizeof text) : 0;
    if (lb_boot_barrier(boot, &err) != LB_OK) return 1;
    if (me != 0) _exit(0); /* no goodbye: the sockets close with the process */
    int after = 0;
    for (int i = 0; i < 500 && (after = lb_boot_gone(boot, text, sizeof text)) < n - 1; i++)
        usleep(10 * 1000);
    printf("gone before %d, after %d: %s\n", before, after, text);
    lb_boot_free(boot);
    return 0;
}

/* Steps in lockstep until the ranks agree to stop; rank 2 raises its flag at step 5. Then
 * a gather checks that the control stream still carries its bytes as they were sent. */
static int stop_worker(lb_boot *boot, int me, int n) {
    lb_err err = {{0}};
    int who = -1, step = 0;
    for (; step < 2000 && who < 0; step++) {
        if (lb_boot_agree_stop(boot, me == 2 && step >= 5, &who, &err) != LB_OK) return 1;
        /* a step's collective: no rank runs more than a step ahead */
        if (lb_boot_barrier(boot, &err) != LB_OK) return 1;
    }
    char text[64];
    snprintf(text, sizeof text, "rank %d stopped at step %d by rank %d", me, step, who);
    char **all = NULL;
    if (lb_boot_gather_text(boot, text, &all, &err) != LB_OK) return 1;
    for (int r = 0; me == 0 && r < n; r++)
        printf("%s\n", all[r]);
    lb_boot_strings_free(all, n);
    lb_boot_free(boot);
    return 0;
}

static int torchrun_worker(void) {
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (getenv("LB_TEST_SIGNALS") != NULL) lb_signals_install(); /* as llmbench's commands */
    if (getenv("LB_TEST_UNSET") != NULL) unsetenv(getenv("LB_TEST_UNSET"));
    double timeout = atof(getenv("LB_TEST_BOOT_TIMEOUT") ? getenv("LB_TEST_BOOT_TIMEOUT") : "20");
    lb_status st = lb_boot_init(timeout, &boot, &err);
    if (st != LB_OK) {
        printf("boot failed (%s): %s\n", lb_status_name(st), err.msg);
        return lb_status_exit_code(st);
    }
    int me = lb_boot_rank(boot), n = lb_boot_size(boot);
    if (getenv("LB_TEST_GONE") != NULL) return gone_worker(boot, me, n);
    if (getenv("LB_TEST_STOP") != NULL) return stop_worker(boot, me, n);
    char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (char)(me == 0 ? i * 3 + 1 : 0);
    int bad = lb_boot_source_of(boot) != (getenv("RANK") == NULL && getenv("SLURM_PROCID") != NULL
                                              ? LB_BOOT_SLURM
                                              : LB_BOOT_TORCHRUN);
    bad |= lb_boot_bcast(boot, id, sizeof id, &err) != LB_OK;
    for (int i = 0; i < 128; i++)
        bad |= id[i] != (char)(i * 3 + 1);
    char text[64];
    snprintf(text, sizeof text, "rank %d says %s", me, me % 2 ? "hello" : "a longer hello");
    char **all = NULL;
    bad |= lb_boot_gather_text(boot, text, &all, &err) != LB_OK;
    for (int r = 0; me == 0 && all != NULL && r < n; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d says %s", r, r % 2 ? "hello" : "a longer hello");
        bad |= strcmp(all[r], want) != 0;
    }
    lb_boot_strings_free(all, n);
    bad |= lb_boot_barrier(boot, &err) != LB_OK;
    bad |= lb_boot_local_size(boot) != n || lb_boot_local_rank(boot) != me;
    /* one GPU a rank by its local rank, or the one each sees where each sees one */
    bad |= lb_boot_device(boot, n) != me || lb_boot_device(boot, 1) != 0;
    printf("rank %d of %d: %s\n", me, n, bad ? "BAD" : "ok");
    lb_boot_free(boot);
    return bad;
}

/* ---- the tests ---- */

static bool as_root(void) {
    return getuid() == 0;
}

static int mpirun(const char *prog, const char *const *args, char *out, size_t cap,
                  double *seconds) {
    const char *argv[40] = {"mpirun", "-np", "4", "--oversubscribe"};
    int n = 4;
    if (as_root()) argv[n++] = "--allow-run-as-root";
    argv[n++] = prog;
    for (int i = 0; args[i] != NULL && n < 38; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return lb_test_run_argv(argv, out, cap, seconds);
}

static int count(const char *hay, const char *needle) {
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        k++;
    return k;
}

static void test_comm_mpi_every_collective_dtype_and_op_matches(void **state) {
    (void)state;
    static char out[1 << 16];
    const char *args[] = {"--mpi-worker", "collectives", NULL};
    int rc = mpirun(self_path, args, out, sizeof out, NULL);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_int_equal(count(out, "collectives ok (0 wrong)"), NP);
}

static void test_comm_mpi_rank_that_never_arrives_is_named_within_the_deadline(void **state) {
    (void)state;
    static char out[1 << 16];
    const char *args[] = {"--mpi-worker", "late-rank", NULL};
    double s = 0;
    int rc = mpirun(self_path, args, out, sizeof out, &s);
    if (count(out, "late rank named") != NP - 1) fprintf(stderr, "%s\n", out);
    assert_int_equal(count(out, "late rank named"), NP - 1);
    assert_int_not_equal(rc, 0); /* the job is aborted, not finalised */
    assert_true(s < 20);         /* rank 3 sleeps 30 s: the abort ended it */
}

/* A file with no name, a process's output, read back from the start. */
static int nameless_file(void) {
    char path[] = "/tmp/lbtest-outXXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    return fd;
}

/* One rank of a job joined through the torchrun variables, or Slurm's (slurm: srun's
 * SLURM_PROCID and SLURM_STEP_NUM_TASKS, rank 0's address in SLURM_LAUNCH_NODE_IPADDR). */
static void spawn_rank_env(bool slurm, int rank, int world, int port, const char *timeout,
                           const char *const *env, pid_t *pid, int *out_fd) {
    *out_fd = nameless_file();
    *pid = fork();
    if (*pid == 0) {
        lb_test_die_with_parent();
        dup2(*out_fd, 1);
        char v[16];
        snprintf(v, sizeof v, "%d", rank);
        setenv(slurm ? "SLURM_PROCID" : "RANK", v, 1);
        snprintf(v, sizeof v, "%d", world);
        setenv(slurm ? "SLURM_STEP_NUM_TASKS" : "WORLD_SIZE", v, 1);
        snprintf(v, sizeof v, "%d", port);
        setenv("MASTER_PORT", v, 1);
        setenv(slurm ? "SLURM_LAUNCH_NODE_IPADDR" : "MASTER_ADDR", "127.0.0.1", 1);
        setenv("LB_TEST_BOOT_TIMEOUT", timeout, 1);
        for (int i = 0; env != NULL && env[i] != NULL; i++)
            putenv((char *)env[i]);
        execl(self_path, self_path, "--torchrun-worker", (char *)NULL);
        _exit(127);
    }
}

static void spawn_rank(bool slurm, int rank, int world, int port, const char *timeout, pid_t *pid,
                       int *out_fd) {
    spawn_rank_env(slurm, rank, world, port, timeout, NULL, pid, out_fd);
}

/* Waits up to s seconds until process pid catches signal sig (its handler installed, as
 * /proc/PID/status's SigCgt mask shows); a signal sent before would end it by default. */
static void wait_caught(pid_t pid, int sig, double s) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    for (int64_t end = lb_clock_now_ns() + (int64_t)(s * 1e9); lb_clock_now_ns() < end;) {
        FILE *f = fopen(path, "r");
        unsigned long long mask = 0;
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "SigCgt: %llx", &mask) == 1) break;
        if (f != NULL) fclose(f);
        if (mask & (1ull << (sig - 1))) return;
        usleep(10 * 1000);
    }
}

/* The exit code of pid if it ends within s seconds; else it is killed and -1. */
static int wait_code_within(pid_t pid, double s) {
    int status = 0;
    for (int64_t end = lb_clock_now_ns() + (int64_t)(s * 1e9); lb_clock_now_ns() < end;) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(20 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static int wait_code(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void read_all(int fd, char *buf, size_t cap) {
    lseek(fd, 0, SEEK_SET);
    lb_test_slurp(fd, buf, cap);
    close(fd);
}

static void rendezvous(bool slurm) {
    int port = lb_launch_free_port();
    pid_t pids[NP];
    int fds[NP];
    /* rank 0 last: the others must retry until it listens */
    for (int r = NP - 1; r >= 0; r--) {
        spawn_rank(slurm, r, NP, port, "20", &pids[r], &fds[r]);
        if (r == 1) usleep(300 * 1000);
    }
    for (int r = 0; r < NP; r++) {
        char out[512];
        int rc = wait_code(pids[r]);
        read_all(fds[r], out, sizeof out);
        if (rc != 0) fprintf(stderr, "rank %d: %s\n", r, out);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "ok"));
    }
}

static void test_comm_torchrun_variables_rendezvous_over_tcp(void **state) {
    (void)state;
    rendezvous(false);
}

static void test_comm_slurm_variables_without_mpi_rendezvous_over_tcp(void **state) {
    (void)state;
    rendezvous(true);
}

/* NP ranks over TCP with the environment variable `mode` set (a worker of torchrun_worker's
 * choice), each ending with exit 0; rank 0's output into out. */
static void run_tcp_ranks(const char *mode, char *out, size_t cap) {
    int port = lb_launch_free_port();
    pid_t pids[NP];
    int fds[NP];
    setenv(mode, "1", 1);
    for (int r = 0; r < NP; r++)
        spawn_rank(false, r, NP, port, "20", &pids[r], &fds[r]);
    unsetenv(mode);
    for (int r = NP - 1; r >= 0; r--)
        assert_int_equal(wait_code(pids[r]), 0);
    read_all(fds[0], out, cap);
    for (int r = 1; r < NP; r++)
        close(fds[r]);
}

static void test_comm_ranks_gone_are_named_by_their_closed_connections(void **state) {
    (void)state;
    char out[512];
    run_tcp_ranks("LB_TEST_GONE", out, sizeof out);
    assert_non_null(strstr(out, "gone before 0, after 3: ranks 1, 2, 3"));
}

/* A flag raised on rank 2 only reaches rank 0 over TCP without a wait and stops every rank
 * at the same step, within a step or two of it, though a barrier's gather read rank 2's
 * bytes behind the notice; the control stream's bytes around it arrive intact. */
static void test_comm_stop_on_one_rank_stops_every_rank_over_tcp(void **state) {
    (void)state;
    char out[1024];
    run_tcp_ranks("LB_TEST_STOP", out, sizeof out);
    int step = -1;
    const char *line = strstr(out, "rank 0 stopped at step ");
    if (line == NULL || sscanf(line, "rank 0 stopped at step %d", &step) != 1)
        fail_msg("output: %s", out);
    /* rank 2 sent it in step 5 before that step's barrier: rank 0 decides step 5 or 6 on it */
    if (step < 6 || step > 7) fail_msg("stopped at step %d: %s", step, out);
    for (int r = 0; r < NP; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d stopped at step %d by rank 2", r, step);
        if (strstr(out, want) == NULL) fail_msg("no '%s' in: %s", want, out);
    }
}

/* torchrun started by srun (`srun -N 2 torchrun --nproc-per-node 2`): every worker also has
 * srun's SLURM_PROCID (its node's task, 0 or 1) and SLURM_STEP_NUM_TASKS (2). RANK and
 * WORLD_SIZE, the nearer launcher's, decide; Slurm's gave rank 0 twice in a world of 2. */
static void test_comm_torchrun_variables_under_srun_win_over_slurms(void **state) {
    (void)state;
    int port = lb_launch_free_port();
    pid_t pids[NP];
    int fds[NP];
    static char env[NP][3][48];
    for (int r = 0; r < NP; r++) {
        snprintf(env[r][0], sizeof env[r][0], "SLURM_PROCID=%d", r / 2);
        snprintf(env[r][1], sizeof env[r][1], "SLURM_STEP_NUM_TASKS=%d", NP / 2);
        snprintf(env[r][2], sizeof env[r][2], "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1");
        const char *e[] = {env[r][0], env[r][1], env[r][2], NULL};
        spawn_rank_env(false, r, NP, port, "10", e, &pids[r], &fds[r]);
    }
    for (int r = 0; r < NP; r++) {
        char out[512];
        int rc = wait_code_within(pids[r], 30);
        read_all(fds[r], out, sizeof out);
        if (rc != 0) fail_msg("rank %d ended with %d: %s", r, rc, out);
        char want[32];
        snprintf(want, sizeof want, "rank %d of %d: ok", r, NP);
        if (strstr(out, want) == NULL) fail_msg("rank %d said: %s", r, out);
    }
}

/* A Ctrl-C during the rendezvous ends it at once, on a rank still connecting, on a rank
 * waiting for rank 0's answer and on rank 0 waiting for the rest, not after
 * --setup-timeout. */
static void test_comm_signal_during_rendezvous_ends_it_at_once(void **state) {
    (void)state;
    int port = lb_launch_free_port(), nobody = lb_launch_free_port();
    while (nobody == port)
        nobody = lb_launch_free_port();
    const char *env[] = {"LB_TEST_SIGNALS=1", NULL};
    pid_t pids[3];
    int fds[3];
    spawn_rank_env(false, 0, 3, port, "30", env, &pids[0], &fds[0]); /* rank 2 never comes */
    spawn_rank_env(false, 1, 3, port, "30", env, &pids[1], &fds[1]);
    spawn_rank_env(false, 1, 2, nobody, "30", env, &pids[2], &fds[2]); /* no rank 0 at all */
    for (int i = 0; i < 3; i++)
        wait_caught(pids[i], SIGINT, 10);
    usleep(300 * 1000); /* into the rendezvous (a signal before it is seen there too) */
    for (int i = 0; i < 3; i++)
        kill(pids[i], SIGINT);
    for (int i = 0; i < 3; i++) {
        char out[1024];
        int rc = wait_code_within(pids[i], 5);
        read_all(fds[i], out, sizeof out);
        if (rc != 130 || strstr(out, "interrupted by a signal before every rank joined") == NULL)
            fail_msg("process %d ended with %d: %s", i, rc, out);
    }
}

/* A rank 0 address that never answers a connection (a firewall that drops, a host that is
 * down; here a listener whose accept queue is full) fails at the deadline, not after the
 * kernel's SYN retries (some two minutes). */
static void test_comm_master_that_never_answers_fails_at_the_deadline(void **state) {
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 0), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&a, sizeof a), 0); /* the queue is full */
    pid_t p;
    int f;
    spawn_rank(false, 1, 2, ntohs(a.sin_port), "1", &p, &f);
    char out[1024], want[64];
    int rc = wait_code_within(p, 8);
    read_all(f, out, sizeof out);
    close(cfd);
    close(lfd);
    snprintf(want, sizeof want, "MASTER_PORT=%d within 1 s", ntohs(a.sin_port));
    if (rc != 2 || strstr(out, want) == NULL) fail_msg("ended with %d: %s", rc, out);
}

/* A connection to rank 0's port that never says hello (a TCP health check, a port scanner)
 * is dropped after a few seconds; the ranks queued behind it still meet well before the
 * deadline, which it used to use up. */
static void test_comm_silent_connection_does_not_hold_up_the_rendezvous(void **state) {
    (void)state;
    int port = lb_launch_free_port();
    pid_t pids[NP];
    int fds[NP];
    spawn_rank(false, 0, NP, port, "12", &pids[0], &fds[0]);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int silent = -1;
    for (int i = 0; i < 100 && silent < 0; i++) {
        silent = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(silent, (struct sockaddr *)&a, sizeof a) != 0) {
            close(silent);
            silent = -1;
            usleep(50 * 1000);
        }
    }
    assert_true(silent >= 0);
    usleep(100 * 1000);
    int64_t t0 = lb_clock_now_ns();
    for (int r = 1; r < NP; r++)
        spawn_rank(false, r, NP, port, "12", &pids[r], &fds[r]);
    for (int r = 0; r < NP; r++) {
        char out[512];
        int rc = wait_code_within(pids[r], 20);
        read_all(fds[r], out, sizeof out);
        if (rc != 0) fail_msg("rank %d ended with %d: %s", r, rc, out);
    }
    close(silent);
    assert_true((double)(lb_clock_now_ns() - t0) / 1e9 < 9);
}

/* One Slurm task alone (SLURM_STEP_NUM_TASKS=1) meets nobody: no rank 0 address is needed,
 * where it used to be refused for the want of one. */
static void test_comm_one_slurm_task_needs_no_master_address(void **state) {
    (void)state;
    const char *env[] = {"LB_TEST_UNSET=SLURM_LAUNCH_NODE_IPADDR", NULL};
    pid_t p;
    int f;
    spawn_rank_env(true, 0, 1, 29500, "5", env, &p, &f);
    char out[512];
    int rc = wait_code_within(p, 10);
    read_all(f, out, sizeof out);
    if (rc != 0 || strstr(out, "rank 0 of 1: ok") == NULL) fail_msg("ended with %d: %s", rc, out);
}

/* A world size or rank that does not fit is named by the variable it was read from:
 * Slurm's were named as torchrun's RANK and WORLD_SIZE. */
static void test_comm_mismatched_world_size_is_a_usage_error(void **state) {
    (void)state;
    for (int slurm = 0; slurm < 2; slurm++) {
        int port = lb_launch_free_port();
        pid_t p0, p1;
        int f0, f1;
        spawn_rank(slurm, 0, 2, port, "10", &p0, &f0);
        usleep(200 * 1000);
        spawn_rank(slurm, 1, 3, port, "10", &p1, &f1);
        char out0[1024], out1[1024], want1[64], want0[64];
        int rc0 = wait_code(p0), rc1 = wait_code(p1);
        read_all(f0, out0, sizeof out0);
        read_all(f1, out1, sizeof out1);
        const char *world = slurm ? "SLURM_STEP_NUM_TASKS" : "WORLD_SIZE";
        snprintf(want1, sizeof want1, "has %s=3, rank 0 on", world);
        snprintf(want0, sizeof want0, "has %s=2;", world);
        assert_int_equal(rc0, 2);
        assert_int_equal(rc1, 2);
        for (int r = 0; r < 2; r++) {
            const char *out = r ? out1 : out0;
            if (strstr(out, "the world size differs between ranks: rank 1 on") == NULL ||
                strstr(out, want1) == NULL || strstr(out, want0) == NULL ||
                (slurm && strstr(out, "WORLD_SIZE") != NULL))
                fail_msg("rank %d (%s): %s", r, slurm ? "slurm" : "torchrun", out);
        }
    }
}

static void test_comm_slurm_rank_taken_twice_is_named_as_slurm_procid(void **state) {
    (void)state;
    int port = lb_launch_free_port();
    pid_t p[3];
    int f[3];
    spawn_rank(true, 0, 3, port, "10", &p[0], &f[0]);
    usleep(200 * 1000);
    spawn_rank(true, 1, 3, port, "10", &p[1], &f[1]);
    usleep(200 * 1000);
    spawn_rank(true, 1, 3, port, "10", &p[2], &f[2]);
    char out[1024];
    int rc0 = wait_code(p[0]);
    read_all(f[0], out, sizeof out);
    for (int r = 1; r < 3; r++)
        wait_code(p[r]);
    assert_int_equal(rc0, 2);
    if (strstr(out, "SLURM_PROCID=1 (from ") == NULL || strstr(out, "is taken twice") == NULL ||
        strstr(out, "RANK") != NULL)
        fail_msg("%s", out);
}

static void test_comm_unreachable_master_is_named_with_its_port(void **state) {
    (void)state;
    int port = lb_launch_free_port(); /* nothing listens there */
    pid_t p;
    int f;
    int64_t t0 = lb_clock_now_ns();
    spawn_rank(false, 1, 2, port, "1", &p, &f);
    char out[1024], want[64];
    int rc = wait_code(p);
    double s = (double)(lb_clock_now_ns() - t0) / 1e9;
    read_all(f, out, sizeof out);
    snprintf(want, sizeof want, "MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", port);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, want));
    assert_true(s < 5);
}

static void test_comm_local_launcher_starts_ranks_that_meet(void **state) {
    (void)state;
    int fd = nameless_file();
    char *const argv[] = {self_path, "--torchrun-worker", NULL};
    const char *env[] = {"LB_TEST_BOOT_TIMEOUT=20", NULL};
    lb_launch_params lp = {.n = 3, .argv = argv, .env = env, .rank0_stdout = fd, .grace_s = 5};
    lb_err err = {{0}};
    int rc = lb_launch_local(&lp, &err);
    char out[512];
    read_all(fd, out, sizeof out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "rank 0 of 3: ok"));
}

static void test_comm_free_port_is_below_the_ephemeral_range(void **state) {
    (void)state;
    int lo = 0, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f == NULL || fscanf(f, "%d %d", &lo, &hi) != 2 || lo <= 2048) {
        if (f != NULL) fclose(f);
        skip();
    }
    fclose(f);
    for (int i = 0; i < 20; i++) {
        int p = lb_launch_free_port();
        assert_true(p >= 1024 && p < lo);
    }
}

static void test_comm_launcher_reports_the_first_failure(void **state) {
    (void)state;
    /* one worker alone succeeds; two told MASTER_PORT=0 each fail with a usage error (2) */
    char *const argv[] = {self_path, "--torchrun-worker", NULL};
    const char *env[] = {"LB_TEST_BOOT_TIMEOUT=0.5", NULL};
    lb_launch_params lp = {.n = 1, .argv = argv, .env = env, .rank0_stdout = -1, .grace_s = 1};
    lb_err err = {{0}};
    assert_int_equal(lb_launch_local(&lp, &err), 0);
    const char *env_bad[] = {"LB_TEST_BOOT_TIMEOUT=0.5", "MASTER_PORT=0", NULL};
    lp.env = env_bad;
    lp.n = 2;
    assert_int_equal(lb_launch_local(&lp, &err), 2);
}

/* --stuck-worker: rank 1 fails at once (exit 3, or LB_TEST_EXIT); rank 0 ends 0.1 s later with
 * LB_TEST_RANK0_EXIT when that is set, else sleeps through the first
 * SIGTERM (a flag nobody polls) and says its last words on the second, or with
 * LB_TEST_IGNORE_TERM set ignores SIGTERM (only SIGKILL ends it). */
static void stuck_last_words(void *ctx, int signo) {
    (void)ctx;
    printf("last words on signal %d\n", signo);
    fflush(stdout);
}

static int stuck_worker(void) {
    if (strcmp(getenv("RANK") ? getenv("RANK") : "", "0") != 0)
        return getenv("LB_TEST_EXIT") ? atoi(getenv("LB_TEST_EXIT")) : 3;
    if (getenv("LB_TEST_RANK0_EXIT") != NULL) { /* rank 0 ends too, a moment later */
        usleep(100 * 1000);
        return atoi(getenv("LB_TEST_RANK0_EXIT"));
    }
    if (getenv("LB_TEST_IGNORE_TERM") != NULL) {
        signal(SIGTERM, SIG_IGN);
    } else {
        lb_signals_install();
        lb_signals_set_last_words(stuck_last_words, NULL);
    }
    printf("rank 0 stuck\n");
    fflush(stdout);
    for (int i = 0; i < 600; i++)
        usleep(100 * 1000);
    return 0;
}

/* Two --stuck-worker workers with env (NULL-terminated), a grace of 0.5 s and the launch's
 * deadline_s; rank 0's stdout into out, the launcher's own stderr into errout, its err
 * into *err, the time taken into *s. */
static int launch_stuck_within(const char **env, double deadline_s, char *out, char *errout,
                               size_t cap, double *s, lb_err *err) {
    int fd = nameless_file(), efd = nameless_file();
    char *const argv[] = {self_path, "--stuck-worker", NULL};
    lb_launch_params lp = {.n = 2,
                           .argv = argv,
                           .env = env,
                           .rank0_stdout = fd,
                           .grace_s = 0.5,
                           .deadline_s = deadline_s};
    fflush(stderr);
    int saved = dup(2);
    dup2(efd, 2);
    int64_t t0 = lb_clock_now_ns();
    int rc = lb_launch_local(&lp, err);
    *s = (double)(lb_clock_now_ns() - t0) / 1e9;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    read_all(fd, out, cap);
    read_all(efd, errout, cap);
    close(fd);
    close(efd);
    return rc;
}

/* launch_stuck_within without a deadline. */
static int launch_stuck(const char **env, char *out, char *errout, size_t cap, double *s) {
    lb_err err = {{0}};
    return launch_stuck_within(env, 0, out, errout, cap, s, &err);
}

static void test_comm_launcher_reaches_a_stuck_worker_with_a_second_sigterm(void **state) {
    (void)state;
    char out[512], errout[512];
    double s = 0;
    const char *env[] = {NULL};
    int rc = launch_stuck(env, out, errout, sizeof out, &s);
    assert_int_equal(rc, 3); /* the first failure's code */
    assert_non_null(strstr(out, "rank 0 stuck"));
    assert_non_null(strstr(out, "last words on signal 15"));
    assert_non_null(strstr(errout, "worker 1 of 2 (rank 1) exited with status 3; the 1 left get "
                                   "0.5 s to end on their own"));
    assert_true(s > 2 && s < 10); /* grace, SIGTERM, 2 s, SIGTERM: ended there */
}

/* Workers that no deadline of their own reaches (rank 1 ended well, rank 0 sleeps on) are
 * ended at the launch's deadline as after a failure: SIGTERM, a second one 2 s later (its
 * last words), SIGKILL 2 s after that for one that ignores SIGTERM; the launch says so in
 * err, naming the one still running, and prints no failure line. */
static void test_comm_launcher_ends_workers_past_its_deadline(void **state) {
    (void)state;
    char out[512], errout[512];
    double s = 0;
    lb_err err = {{0}};
    const char *ignoring[] = {"LB_TEST_EXIT=0", "LB_TEST_IGNORE_TERM=1", NULL};
    int rc = launch_stuck_within(ignoring, 1, out, errout, sizeof out, &s, &err);
    assert_int_equal(rc, LB_LAUNCH_DEADLINE_PASSED);
    assert_string_equal(err.msg, "the launch's deadline of 1 s passed with 1 of 2 workers still "
                                 "running (worker 0 (rank 0)): they were ended with SIGTERM, "
                                 "then SIGKILL");
    assert_non_null(strstr(out, "rank 0 stuck"));
    assert_string_equal(errout, "");
    assert_true(s > 1 + 4 && s < 1 + 4 + 1.5); /* deadline, SIGTERM, 2 s, SIGTERM, 2 s, SIGKILL */

    const char *stuck[] = {"LB_TEST_EXIT=0", NULL};
    err = (lb_err){{0}};
    rc = launch_stuck_within(stuck, 1, out, errout, sizeof out, &s, &err);
    assert_int_equal(rc, LB_LAUNCH_DEADLINE_PASSED);
    assert_non_null(strstr(err.msg, "deadline of 1 s passed with 1 of 2 workers"));
    assert_non_null(strstr(out, "last words on signal 15"));
    assert_true(s > 1 + 2 && s < 1 + 2 + 1.5); /* deadline, SIGTERM, 2 s, SIGTERM: ended */

    /* a failure before the deadline is the launch's outcome, as without one */
    const char *failing[] = {NULL};
    err = (lb_err){{0}};
    rc = launch_stuck_within(failing, 30, out, errout, sizeof out, &s, &err);
    assert_int_equal(rc, 3);
    assert_string_equal(err.msg, "");
    assert_true(s < 10);
}

/* A worker that ends interrupted (exit 130) said why itself: the launcher adds no line while
 * the others end within their grace, as at the same step they do; a worker left running
 * past it (a second Ctrl-C ends a worker at once, with no word to the others) is named
 * then, and the workers left are ended as for any failure. */
/* --polling-worker: checks for a signal every 10 ms for 10 s (exit 0); on one it takes
 * 0.3 s (a run being stored, when a second signal would end it at once), then says which
 * signal stopped it and exits 130. */
static int polling_worker(void) {
    lb_signals_install();
    printf("rank %s polling\n", getenv("RANK"));
    fflush(stdout);
    char ready[256]; /* the test's sign that this rank's handlers are in place */
    snprintf(ready, sizeof ready, "%s/%s", getenv("LB_TEST_READY_DIR"), getenv("RANK"));
    close(open(ready, O_CREAT | O_WRONLY, 0600));
    for (int i = 0; i < 1000 && !lb_signals_interrupted(); i++)
        usleep(10 * 1000);
    if (!lb_signals_interrupted()) return 0;
    usleep(300 * 1000);
    printf("rank %s stopped on signal %d\n", getenv("RANK"), lb_signals_received());
    fflush(stdout);
    return 130;
}

/* Two --polling-worker workers under a launcher in a process group of its own (signals
 * installed, as llmbench's main does); once both poll, signo goes to the launcher alone
 * or to its whole group. Rank 0's output into out; returns the launcher's exit code. */
static int signal_launcher(int signo, bool group, char *out, size_t cap) {
    int fd = nameless_file();
    char dir[] = "/tmp/lbtest-readyXXXXXX", env_dir[64], f0[96], f1[96];
    assert_non_null(mkdtemp(dir));
    snprintf(env_dir, sizeof env_dir, "LB_TEST_READY_DIR=%s", dir);
    snprintf(f0, sizeof f0, "%s/0", dir);
    snprintf(f1, sizeof f1, "%s/1", dir);
    pid_t pid = fork();
    if (pid == 0) {
        lb_test_die_with_parent();
        setpgid(0, 0);
        lb_signals_install();
        char *const argv[] = {self_path, "--polling-worker", NULL};
        const char *env[] = {env_dir, NULL};
        lb_launch_params lp = {.n = 2, .argv = argv, .env = env, .rank0_stdout = fd, .grace_s = 5};
        lb_err err = {{0}};
        _exit(lb_launch_local(&lp, &err) & 0xff);
    }
    for (int i = 0; i < 1000 && (access(f0, F_OK) != 0 || access(f1, F_OK) != 0); i++)
        usleep(10 * 1000);
    kill(group ? -pid : pid, signo);
    int rc = wait_code_within(pid, 5);
    read_all(fd, out, cap);
    unlink(f0);
    unlink(f1);
    rmdir(dir);
    return rc;
}

/* A SIGTERM to the launcher alone (kill PID, a container's stop) reaches the workers: they
 * stop as on their own signal (they ran on for 10 s, their runs left running); a Ctrl-C to
 * the whole group reaches each worker twice (its own and the launcher's copy) and is still
 * one signal: the worker stops in its own time (a second would have ended it at once). */
static void test_comm_launcher_passes_on_a_signal_once(void **state) {
    (void)state;
    char out[512];
    assert_int_equal(signal_launcher(SIGTERM, false, out, sizeof out), 130);
    assert_non_null(strstr(out, "rank 0 stopped on signal 15"));
    assert_int_equal(signal_launcher(SIGINT, true, out, sizeof out), 130);
    assert_non_null(strstr(out, "rank 0 stopped on signal 2"));
}

/* --env-worker: one line with what its environment says. */
static int env_worker(void) {
    const char *gone = getenv("LB_TEST_GONE");
    printf("rank %s local %s of %s extra %s gone %s\n", getenv("RANK"), getenv("LOCAL_RANK"),
           getenv("WORLD_SIZE"), getenv("LB_TEST_EXTRA"), gone ? gone : "(unset)");
    return 0;
}

static atomic_bool churning;

/* Another thread of the launcher's process changing its environment all the while: it
 * holds the environment's lock most of the time, at the forks too. */
static void *churn(void *arg) {
    (void)arg;
    char v[32];
    for (unsigned i = 0; atomic_load(&churning); i++) {
        snprintf(v, sizeof v, "%u", i % 1000);
        setenv("LB_TEST_CHURN", v, 1);
    }
    return NULL;
}

/* The workers' environment is made before each fork: a lock held by another thread at the
 * fork does not hang a worker (alarm: the test ends instead of waiting forever), and each
 * worker has its own ranks, the launcher's extra variables, and not those it removed. */
static void
test_comm_launcher_workers_start_while_another_thread_changes_the_environment(void **state) {
    (void)state;
    setenv("LB_TEST_CHURN", "0", 1);
    setenv("LB_TEST_GONE", "still here", 1);
    setenv("RANK", "99", 1);
    atomic_store(&churning, true);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn, NULL), 0);
    alarm(60);
    char *const argv[] = {self_path, "--env-worker", NULL};
    const char *env[] = {"LB_TEST_EXTRA=seven", NULL};
    const char *unset[] = {"LB_TEST_GONE", NULL};
    lb_launch_params lp = {.n = 4,
                           .argv = argv,
                           .env = env,
                           .unset = unset,
                           .rank0_stdout = -1,
                           .grace_s = 5,
                           .first_rank = 2,
                           .world = 8};
    int codes[20];
    static char out[20][1024];
    for (int i = 0; i < 20; i++) {
        int fd = nameless_file();
        fflush(stdout);
        int saved = dup(1);
        dup2(fd, 1);
        lb_err err = {{0}};
        codes[i] = lb_launch_local(&lp, &err);
        dup2(saved, 1);
        close(saved);
        read_all(fd, out[i], sizeof out[i]);
    }
    alarm(0);
    atomic_store(&churning, false);
    pthread_join(t, NULL);
    unsetenv("LB_TEST_CHURN");
    unsetenv("LB_TEST_GONE");
    unsetenv("RANK");
    for (int i = 0; i < 20; i++) {
        assert_int_equal(codes[i], 0);
        for (int r = 0; r < 4; r++) {
            char want[128];
            snprintf(want, sizeof want, "rank %d local %d of 8 extra seven gone (unset)\n", 2 + r,
                     r);
            if (strstr(out[i], want) == NULL)
                fail_msg("launch %d: no '%s' in:\n%s", i, want, out[i]);
        }
    }
}

static void test_comm_launcher_leaves_an_interrupted_worker_to_say_so(void **state) {
    (void)state;
    char out[512], errout[512];
    double s = 0;
    const char *together[] = {"LB_TEST_EXIT=130", "LB_TEST_RANK0_EXIT=130", NULL};
    assert_int_equal(launch_stuck(together, out, errout, sizeof out, &s), 130);
    if (strstr(errout, "worker") != NULL) fail_msg("launcher said: %s", errout);
    const char *alone[] = {"LB_TEST_EXIT=130", NULL};
    assert_int_equal(launch_stuck(alone, out, errout, sizeof out, &s), 130);
    assert_non_null(strstr(out, "last words on signal 15"));
    if (strstr(errout, "worker 1 of 2 (rank 1) exited with status 130; the 1 left did not end "
                       "within 0.5 s: SIGTERM") == NULL)
        fail_msg("launcher said: %s", errout);
}

/* A launcher whose caller ignores SIGCHLD (an ignored signal stays ignored through exec, so
 * some supervisors pass it on) still waits for its workers and gives the first failure's
 * code, where the kernel reaped them and the launch waited for ever (alarm: the test ends
 * instead); the caller's disposition is back afterwards. */
static void test_comm_launcher_waits_for_workers_when_sigchld_is_ignored(void **state) {
    (void)state;
    struct sigaction ignore = {.sa_handler = SIG_IGN}, saved, after;
    sigaction(SIGCHLD, &ignore, &saved);
    alarm(30);
    char out[512], errout[512];
    double s = 0;
    const char *env[] = {"LB_TEST_RANK0_EXIT=0", NULL};
    int rc = launch_stuck(env, out, errout, sizeof out, &s);
    alarm(0);
    sigaction(SIGCHLD, &saved, &after);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(errout, "worker 1 of 2 (rank 1) exited with status 3"));
    assert_true(after.sa_handler == SIG_IGN);
}

/* --padded-worker: alone (LOCAL_WORLD_SIZE 1) it ends at once; one of several says it runs
 * and sleeps 30 s (the test makes it ignore SIGTERM from its start). */
static int padded_worker(void) {
    if (strcmp(getenv("LOCAL_WORLD_SIZE"), "1") == 0) return 0;
    printf("rank %s runs\n", getenv("RANK"));
    fflush(stdout);
    for (int i = 0; i < 300; i++)
        usleep(100 * 1000);
    return 0;
}

/* n --padded-worker workers with ranks from 9, on a fixed port, their environment grown by
 * pad bytes of LB_TEST_PADk variables; rank 9's stdout into out_fd. */
static int launch_padded(int n, size_t pad, int out_fd, lb_err *err) {
    enum { CHUNK = 100000, MAX_CHUNKS = 400 };
    static const char *env[MAX_CHUNKS + 1];
    char *text = malloc(pad + MAX_CHUNKS * 32);
    assert_non_null(text);
    size_t k = 0, used = 0;
    for (size_t left = pad; left > 0 && k < MAX_CHUNKS; k++) {
        size_t take = left < CHUNK ? left : CHUNK;
        env[k] = text + used;
        used += (size_t)sprintf(text + used, "LB_TEST_PAD%zu=", k);
        memset(text + used, 'x', take);
        used += take;
        text[used++] = '\0';
        left -= take;
    }
    env[k] = NULL;
    char *const argv[] = {self_path, "--padded-worker", NULL};
    lb_launch_params lp = {.n = n,
                           .argv = argv,
                           .env = env,
                           .rank0_stdout = out_fd,
                           .grace_s = 0.5,
                           .first_rank = 9,
                           .master_port = 29500};
    int rc = lb_launch_local(&lp, err);
    free(text);
    return rc;
}

/* A worker that cannot exec while another runs and ignores SIGTERM: the one running is ended
 * as after a failure (SIGTERM, SIGTERM 2 s later, SIGKILL 2 s after that), where the launch
 * used to wait for it for ever. Only worker 1 cannot exec: the environment is grown to the
 * largest that execs with RANK=9, and worker 1's RANK=10 is one byte more (E2BIG). */
static void test_comm_launcher_ends_started_workers_when_one_cannot_exec(void **state) {
    (void)state;
    int fd = nameless_file();
    lb_err err = {{0}};
    size_t fits = 0, too_big = 1 << 16;
    while (launch_padded(1, too_big, fd, &err) == 0) {
        fits = too_big;
        too_big *= 2;
        if (too_big > (size_t)30 << 20) skip();
    }
    assert_non_null(strstr(err.msg, strerror(E2BIG)));
    while (too_big - fits > 1) {
        size_t mid = fits + (too_big - fits) / 2;
        err = (lb_err){{0}};
        if (launch_padded(1, mid, fd, &err) == 0) {
            fits = mid;
        } else {
            assert_non_null(strstr(err.msg, strerror(E2BIG)));
            too_big = mid;
        }
    }
    struct sigaction ignore = {.sa_handler = SIG_IGN}, saved;
    sigaction(SIGTERM, &ignore, &saved); /* the workers inherit it at their fork */
    err = (lb_err){{0}};
    int64_t t0 = lb_clock_now_ns();
    int rc = launch_padded(2, fits, fd, &err);
    double s = (double)(lb_clock_now_ns() - t0) / 1e9;
    sigaction(SIGTERM, &saved, NULL);
    char out[256];
    read_all(fd, out, sizeof out);
    assert_int_equal(rc, -1);
    char want[sizeof self_path + 64];
    snprintf(want, sizeof want, "cannot start worker 1 (%s): %s", self_path, strerror(E2BIG));
    assert_string_equal(err.msg, want);
    assert_non_null(strstr(out, "rank 9 runs"));
    assert_true(s > 4 && s < 4 + 1.5); /* SIGTERM, 2 s, SIGTERM, 2 s, SIGKILL */
}

static void test_comm_cli_end_to_end_under_mpirun(void **state) {
    (void)state;
    static char out[1 << 17];
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *args[] = {"comm", "all", "-b", "8", "-e",        "2K",  "-f",   "4", "-d", "bf16",
                          "-n",   "3",   "-w", "1", "--backend", "mpi", "--db", db,  NULL};
    int rc = mpirun(LB_TEST_BIN, args, out, sizeof out, NULL);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "# Collective: reduce_scatter"));
    assert_non_null(strstr(out, "# Out of bounds values : 0 OK"));
    assert_non_null(strstr(out, "started by mpi, backend mpi"));
    /* nccl-tests' columns: size, count, type, redop, root; 2 KiB of bf16 = 1024 elements */
    assert_non_null(strstr(out, "        2048          1024  bfloat16     sum      -1"));
    const char *show[] = {"results", "show", "1", "--db", db, "--json", NULL};
    char json[1 << 16];
    assert_int_equal(lb_test_run(show, json, sizeof json, NULL, 0), 0);
    assert_non_null(strstr(json, "\"all_reduce.2048.oop.r3\""));
    assert_non_null(strstr(json, "\"sendrecv.2048.oop.wrong\""));
    lb_test_rmtree(dir);
}

/* Rank 0 cannot open the results database (its folder would be under a file): every rank
 * stops before the benchmark with rank 0's one line, where the others used to wait for
 * rank 0 in the first collective until the deadline. */
static void test_comm_cli_database_rank_0_cannot_open_stops_every_rank(void **state) {
    (void)state;
    static char out[1 << 16];
    char dir[64], file[96], db[128];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/a-file", dir);
    assert_true(lb_test_write_file(file, "not a folder\n"));
    snprintf(db, sizeof db, "%s/sub/r.db", file);
    const char *args[] = {"comm", "all_reduce",     "-b", "8",    "-e", "64", "--backend",
                          "mpi",  "--comm-timeout", "60", "--db", db,   NULL};
    double seconds = 0;
    int rc = mpirun(LB_TEST_BIN, args, out, sizeof out, &seconds);
    if (rc == 0 || seconds > 30 || count(out, "cannot create folder") != 1)
        fail_msg("exit %d after %.0f s:\n%s", rc, seconds, out);
    lb_test_rmtree(dir);
}

/* A Ctrl-C that reaches one rank only (not rank 0) ends every rank at the same row; the
 * run is stored as interrupted, naming that rank, and rank 0 says so; the pair matrix,
 * never reached, is not printed (it used to print as one rank's empty table). */
static void test_comm_cli_signal_to_one_rank_interrupts_every_rank(void **state) {
    (void)state;
    static char out[1 << 18];
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    /* some 700 rows up to 16 MiB: many seconds after the signal when nothing stops them */
    const char *args[] = {"--interrupt-rank",
                          "2",
                          "3",
                          LB_TEST_BIN,
                          "comm",
                          "-b",
                          "4",
                          "-e",
                          "16M",
                          "-f",
                          "1.02",
                          "-n",
                          "20",
                          "-w",
                          "1",
                          "--backend",
                          "mpi",
                          "--matrix",
                          "64",
                          "--db",
                          db,
                          NULL};
    double seconds = 0;
    int rc = mpirun(self_path, args, out, sizeof out, &seconds);
    assert_int_equal(rc, 130);
    assert_true(seconds < 30);
    if (strstr(out,
               "llmbench comm: rank 0: interrupted (a signal reached rank 2) before all_reduce "
               "of ") == NULL ||
        strstr(out, "# send/recv of each pair") != NULL)
        fail_msg("output: %.3000s", out);
    const char *show[] = {"results", "show", "1", "--db", db, "--json", NULL};
    static char json[1 << 20];
    assert_int_equal(lb_test_run(show, json, sizeof json, NULL, 0), 0);
    assert_non_null(strstr(json, "\"status\": \"interrupted\""));
    assert_non_null(strstr(json, "a signal reached rank 2"));
    lb_test_rmtree(dir);
}

/* Over 64 ranks a uint8 sum passes 255 (from 51 ranks on): NCCL's sum wraps in the type and its
 * integer avg divides that wrapped sum, truncating; the check expects the same (it used to expect
 * the exact sum, and counted every right answer of a large job wrong). Computed here in the types'
 * own arithmetic from commbench.h's input formula. */
static void test_comm_check_expects_sums_wrapped_as_the_integer_type_does(void **state) {
    (void)state;
    enum { N = 64 };
    for (size_t i = 0; i < 11; i++) {
        uint8_t u = 0;
        int8_t s = 0;
        for (int r = 0; r < N; r++) {
            int v = (int)((i * 7 + (size_t)r * 13 + 3) % 11);
            u = (uint8_t)(u + v);
            s = (int8_t)(s + v - 5);
        }
        assert_true(lb_commbench_reduce_pattern(LB_COMM_UINT8, LB_COMM_SUM, N, i) == u);
        assert_true(lb_commbench_reduce_pattern(LB_COMM_UINT8, LB_COMM_AVG, N, i) == u / N);
        assert_true(lb_commbench_reduce_pattern(LB_COMM_INT8, LB_COMM_SUM, N, i) == s);
        assert_true(lb_commbench_reduce_pattern(LB_COMM_INT8, LB_COMM_AVG, N, i) == s / N);
    }
    /* one element's sums in full: 328 in uint8 is 72, avg 1 (not 5) */
    assert_true(lb_commbench_reduce_pattern(LB_COMM_UINT32, LB_COMM_SUM, N, 8) == 328);
    assert_true(lb_commbench_reduce_pattern(LB_COMM_UINT8, LB_COMM_SUM, N, 8) == 72);
    assert_true(lb_commbench_reduce_pattern(LB_COMM_UINT8, LB_COMM_AVG, N, 8) == 1);
}

/* The check fills the output with values no call leaves before it runs: an in-place
 * all_gather that moves nothing leaves the right answer of the out-of-place check before it
 * in every block, and must still count the 3 blocks of 64 floats on each of 4 ranks. */
static void test_comm_check_counts_what_a_call_did_not_write(void **state) {
    (void)state;
    char out[4096];
    const char *args[] = {"--lost-gather-worker", "float", NULL};
    int rc = mpirun(self_path, args, out, sizeof out, NULL);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    if (strstr(out, "status runtime, out-of-place wrong 0, in-place wrong 768") == NULL)
        fail_msg("output: %s", out);
}

/* The same in signed integers, where 0xff bytes are -1, the expected value of some 1 in 11
 * elements: each of the 768 elements that were not written is still counted (it was 698). */
static void test_comm_check_counts_what_a_call_did_not_write_in_signed_integers(void **state) {
    (void)state;
    char out[4096];
    const char *args[] = {"--lost-gather-worker", "int32", NULL};
    int rc = mpirun(self_path, args, out, sizeof out, NULL);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    if (strstr(out, "status runtime, out-of-place wrong 0, in-place wrong 768") == NULL)
        fail_msg("output: %s", out);
}

/* A signal that arrives after the last row stops the ranks before the pair matrix (of some
 * n^2 transfers: minutes on a large job), with the rows stored; the matrix used to run to
 * its end and the run ended as if nothing had arrived. */
static void test_comm_signal_before_the_pair_matrix_stops_it(void **state) {
    (void)state;
    char out[4096];
    const char *args[] = {"--interrupted-matrix-worker", NULL};
    int rc = mpirun(self_path, args, out, sizeof out, NULL);
    if (rc != 0 ||
        strstr(out, "status interrupted, row stored, matrix not measured: interrupted (a signal "
                    "reached rank 0) before the pair matrix's sends from rank 0\n") == NULL)
        fail_msg("exit %d: %s", rc, out);
}

/* A rank's failure reaches rank 0 as that rank's own sentence with its host, not as "rank
 * 1 failed (its error is on its stderr)". */
static void test_comm_failure_of_another_rank_is_its_own_sentence(void **state) {
    (void)state;
    char out[8192], opts[512];
    const char *was = getenv("ASAN_OPTIONS");
    /* AddressSanitizer: the 1 PiB malloc returns NULL as glibc's does */
    snprintf(opts, sizeof opts, "%s%sallocator_may_return_null=1", was ? was : "", was ? ":" : "");
    char *saved = was ? strdup(was) : NULL;
    setenv("ASAN_OPTIONS", opts, 1);
    const char *args[] = {"--failing-rank-worker", NULL};
    int rc = mpirun(self_path, args, out, sizeof out, NULL);
    if (saved != NULL)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    if (rc != 0 || strstr(out, "status out-of-memory, named: rank 1 (") == NULL)
        fail_msg("exit %d: %s", rc, out);
}

/* Nothing to measure is refused before anything runs or is stored: sendrecv in place only
 * (every row would be N/A), an all_gather whose smallest size holds less than one element a
 * rank (its rows were left out, and the run stored as ok). */
static void test_comm_cli_nothing_to_measure_is_refused(void **state) {
    (void)state;
    static char out[1 << 14];
    char err[2048], dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *in[] = {"comm", "sendrecv", "--place", "in", "-b", "8",
                        "-e",   "32",       "--db",    db,   NULL};
    assert_int_equal(lb_test_run(in, NULL, 0, err, sizeof err), 2);
    assert_non_null(
        strstr(err, "--place in: sendrecv has no in-place form; use --place out or both"));
    const char *small[] = {"comm", "all_gather", "-b",   "4", "-e",        "4",   "-n", "1",
                           "-w",   "0",          "--db", db,  "--backend", "mpi", NULL};
    int rc = mpirun(LB_TEST_BIN, small, out, sizeof out, NULL);
    bool stored = access(db, F_OK) == 0;
    lb_test_rmtree(dir);
    if (rc != 2 || stored ||
        count(out, "llmbench comm: -e 4: all_gather over 4 ranks needs at least 16 bytes (one "
                   "float per rank)\n") != 1)
        fail_msg("exit %d, stored %d: %s", rc, stored, out);
}

/* nccl-tests' count column for the collectives that split the buffer is the per-rank count
 * (per peer for alltoall), and sizes that round to the same per-rank count make one row:
 * 16 and 20 bytes over 4 ranks are both one float a rank; 4 to 12 bytes, less than one,
 * make none. */
static void test_comm_cli_split_collectives_show_the_per_rank_count_once(void **state) {
    (void)state;
    static char out[1 << 15];
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *args[] = {"comm",     "all_gather", "reduce_scatter",
                          "alltoall", "-b",         "4",
                          "-e",       "20",         "-f",
                          "1.2",      "-n",         "3",
                          "-w",       "0",          "--backend",
                          "mpi",      "--db",       db,
                          NULL};
    int rc = mpirun(LB_TEST_BIN, args, out, sizeof out, NULL);
    if (rc != 0 || count(out, "\n          16             1     float") != 3 ||
        count(out, "\n          16 ") != 3)
        fail_msg("exit %d: %s", rc, out);
    /* one row: each rank's series holds -n 3 times, not those of two rows */
    const char *show[] = {"results", "export", "1", "--format", "csv", "--db", db, NULL};
    static char csv[1 << 16];
    assert_int_equal(lb_test_run(show, csv, sizeof csv, NULL, 0), 0);
    lb_test_rmtree(dir);
    if (count(csv, "all_gather.16.oop.r2,") != 3) fail_msg("export: %.4000s", csv);
}

/* What did not run says N/A, not 0 or OK: with --place in, the out-of-place columns, p50
 * and p99 included; with -c 0, #wrong and the summary of wrong values. */
static void test_comm_cli_what_did_not_run_shows_as_na(void **state) {
    (void)state;
    static char out[1 << 14];
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *args[] = {"comm", "broadcast", "-b",   "64",      "-e", "64",        "-n",
                          "2",    "-w",        "0",    "--place", "in", "--backend", "mpi",
                          "-c",   "0",         "--db", db,        NULL};
    int rc = mpirun(LB_TEST_BIN, args, out, sizeof out, NULL);
    lb_test_rmtree(dir);
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    const char *row = strstr(out, "\n          64            16     float    none       0");
    assert_non_null(row);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(row + 1, "\n"), row + 1);
    /* out of place: time, algbw, busbw, #wrong; then the in-place #wrong (not checked) and
     * the out-of-place p50 and p99 */
    if (strstr(line, "0      N/A     N/A     N/A     N/A  ") == NULL ||
        strstr(line, " N/A      N/A      N/A  ") == NULL)
        fail_msg("row: %s", line);
    assert_non_null(strstr(out, "# Out of bounds values : N/A (-c 0: not checked)\n"));
}

static void test_comm_cli_int_max_checks_every_element(void **state) {
    (void)state;
    static char out[1 << 16];
    const char *ok_args[] = {"comm",   "all_reduce", "reduce", "-b",      "4",
                             "-e",     "64K",        "-d",     "int32",   "-o",
                             "max",    "-r",         "2",      "--place", "in",
                             "--json", "--backend",  "mpi",    "--db",    "/tmp/lbtest-comm-max.db",
                             NULL};
    int rc = mpirun(LB_TEST_BIN, ok_args, out, sizeof out, NULL);
    unlink("/tmp/lbtest-comm-max.db");
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"wrong_total\""));
    assert_non_null(strstr(out, "\"reduce.65536.ip.wrong\""));
    assert_null(strstr(out, "oop.time_us"));
}

/* Ranks started with different options (an MPMD command line, a script that differs per
 * node) are refused before anything runs, naming the option and both values; with
 * different -n they used to meet in the wrong calls and wait out --comm-timeout. */
static void test_comm_cli_ranks_with_different_options_are_refused(void **state) {
    (void)state;
    static char out[1 << 16];
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *argv[64];
    int n = 0;
    for (int half = 0; half < 2; half++) {
        if (half == 1)
            argv[n++] = ":";
        else
            argv[n++] = "mpirun";
        argv[n++] = "-np";
        argv[n++] = "2";
        if (half == 0) argv[n++] = "--oversubscribe";
        if (half == 0 && as_root()) argv[n++] = "--allow-run-as-root";
        const char *rest[] = {LB_TEST_BIN,
                              "comm",
                              "all_reduce",
                              "-b",
                              half ? "1K" : "1024",
                              "-e",
                              "4K",
                              "-n",
                              half ? "4" : "3",
                              "-w",
                              "1",
                              "--backend",
                              "mpi",
                              "--comm-timeout",
                              "120",
                              "--db",
                              db,
                              NULL};
        for (int i = 0; rest[i] != NULL; i++)
            argv[n++] = rest[i];
    }
    argv[n] = NULL;
    double seconds = 0;
    int rc = lb_test_run_argv(argv, out, sizeof out, &seconds);
    bool stored = access(db, F_OK) == 0;
    lb_test_rmtree(dir);
    /* before anything runs: well within the 120 s the old meeting in wrong calls took (four
     * ranks start in 18 s under AddressSanitizer on two busy cores) */
    if (rc != 2 || seconds > 60 || stored ||
        count(out, "llmbench comm: rank 2 was started with -n 4 where rank 0 has -n 3: every rank "
                   "needs the same options\n") != 1 ||
        strstr(out, "started with -b") != NULL)
        fail_msg("exit %d after %.0f s, stored %d:\n%s", rc, seconds, stored, out);
}

static void test_comm_cli_bad_input_exits_2(void **state) {
    (void)state;
    char err[2048];
    const char *a1[] = {"comm", "allreduce", NULL};
    assert_int_equal(lb_test_run(a1, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "unknown collective 'allreduce'"));
    const char *a2[] = {"comm", "-b", "6", "-e", "64", NULL};
    assert_int_equal(lb_test_run(a2, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "whole float elements"));
    const char *a3[] = {"comm", "-b", "1X", NULL};
    assert_int_equal(lb_test_run(a3, NULL, 0, err, sizeof err), 2);
    const char *a4[] = {"comm", "-d", "complex", NULL};
    assert_int_equal(lb_test_run(a4, NULL, 0, err, sizeof err), 2);
    const char *a5[] = {"comm", "--gpus", "4096", NULL};
    assert_int_equal(lb_test_run(a5, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, lb_devinfo_cuda_device_count() == 0
                                    ? "--gpus 4096 starts one worker per GPU and this machine "
                                      "has no usable GPU"
                                    : "--gpus 4096: this machine has"));
    const char *a6[] = {"comm", "-b", "64", "-e", "8", NULL};
    assert_int_equal(lb_test_run(a6, NULL, 0, err, sizeof err), 2);
    /* the option is named as it is spelt */
    const char *a9[] = {"comm", "--matrix", "6", NULL};
    assert_int_equal(lb_test_run(a9, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "--matrix 6: expected whole float elements"));
    /* nothing to move data with: no GPU and no MPI ranks; nothing is stored */
    char dir[64], db[96];
    lb_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    const char *a7[] = {"comm", "--backend", "mpi", "--db", db, NULL};
    assert_int_equal(lb_test_run(a7, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "needs ranks started by mpirun"));
    assert_int_equal(access(db, F_OK), -1);
    if (lb_devinfo_cuda_device_count() == 0) {
        const char *a8[] = {"comm", "--backend", "nccl", "--db", db, NULL};
        assert_int_equal(lb_test_run(a8, NULL, 0, err, sizeof err), 2);
        assert_non_null(strstr(err, "--backend nccl: no rank sees a GPU"));
        assert_int_equal(access(db, F_OK), -1);
    }
    lb_test_rmtree(dir);
}

static void test_comm_values_round_like_the_hardware(void **state) {
    (void)state;
    unsigned char b[8];
    lb_comm_value_set(b, LB_COMM_BF16, 0, 1.0 + 1.0 / 256); /* tie: to even (1.0) */
    assert_true(lb_comm_value_get(b, LB_COMM_BF16, 0) == 1.0);
    lb_comm_value_set(b, LB_COMM_BF16, 0, 1.0 + 3.0 / 256); /* tie: to even (1 + 4/256) */
    assert_true(lb_comm_value_get(b, LB_COMM_BF16, 0) == 1.0 + 4.0 / 256);
    lb_comm_value_set(b, LB_COMM_FP16, 0, 65504);
    assert_true(lb_comm_value_get(b, LB_COMM_FP16, 0) == 65504);
    lb_comm_value_set(b, LB_COMM_FP16, 0, 70000);
    assert_true(isinf(lb_comm_value_get(b, LB_COMM_FP16, 0)));
    lb_comm_value_set(b, LB_COMM_FP16, 0, -0x1p-24);
    assert_true(lb_comm_value_get(b, LB_COMM_FP16, 0) == -0x1p-24);
    lb_comm_value_set(b, LB_COMM_FP16, 0, 1.0 + 1.0 / 2048); /* tie: to even (1.0) */
    assert_true(lb_comm_value_get(b, LB_COMM_FP16, 0) == 1.0);
    lb_comm_dtype t;
    assert_int_equal(lb_comm_dtype_parse("bf16", &t), 0);
    assert_int_equal(t, LB_COMM_BF16);
    assert_int_equal(lb_comm_dtype_parse("half", &t), 0);
    assert_int_equal(t, LB_COMM_FP16);
    assert_int_equal(lb_comm_dtype_parse("float16", &t), -1);
}

static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_RANK",
                                            "PMI_SIZE",
                                            "PMI_RANK",
                                            "PMIX_RANK",
                                            "SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_NPROCS",
                                            "SLURM_STEP_NUM_TASKS",
                                            "RANK",
                                            "WORLD_SIZE"};

static int unset_launcher_vars(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
        unsetenv(launcher_vars[i]);
    return 0;
}

/* The world size in the environment, before any joining, is read from the launcher that
 * lb_boot_init would follow (MPI, then Slurm unless torchrun's pair is set, then torchrun),
 * as the rank is; one process alone, or a count that is not one, is a world of 1. */
static void test_comm_env_world_size_follows_the_launcher_order(void **state) {
    unset_launcher_vars(state);
    assert_int_equal(lb_boot_env_size(), 1);
    assert_int_equal(lb_boot_env_rank(), -1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("RANK", "2", 1);
    assert_int_equal(lb_boot_env_size(), 3);
    assert_int_equal(lb_boot_env_rank(), 2);
    setenv("SLURM_PROCID", "1", 1); /* `srun torchrun`: torchrun's pair is the nearer */
    setenv("SLURM_STEP_NUM_TASKS", "2", 1);
    assert_int_equal(lb_boot_env_size(), 3);
    assert_int_equal(lb_boot_env_rank(), 2);
    unsetenv("RANK"); /* WORLD_SIZE alone: Slurm's */
    assert_int_equal(lb_boot_env_size(), 2);
    assert_int_equal(lb_boot_env_rank(), 1);
    setenv("PMIX_RANK", "5", 1); /* `srun --mpi=pmix`: MPI, counted by Slurm */
    setenv("SLURM_STEP_NUM_TASKS", "6", 1);
    setenv("SLURM_NTASKS", "12", 1);
    assert_int_equal(lb_boot_env_size(), 6);
    unsetenv("SLURM_STEP_NUM_TASKS");
    assert_int_equal(lb_boot_env_size(), 12);
    unsetenv("SLURM_NTASKS");
    setenv("SLURM_NPROCS", "7", 1);
    assert_int_equal(lb_boot_env_size(), 7);
    assert_int_equal(lb_boot_env_rank(), 5);
    setenv("PMI_SIZE", "8", 1);
    assert_int_equal(lb_boot_env_size(), 8);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1); /* mpirun */
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    assert_int_equal(lb_boot_env_size(), 4);
    assert_int_equal(lb_boot_env_rank(), 3);
    setenv("OMPI_COMM_WORLD_SIZE", "four", 1);
    assert_int_equal(lb_boot_env_size(), 1);
    setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
    assert_int_equal(lb_boot_env_size(), 1);
    unset_launcher_vars(state);
    setenv("SLURM_NTASKS", "16", 1); /* an allocation's count without a step: one process */
    setenv("SLURM_PROCID", "0", 1);
    assert_int_equal(lb_boot_env_size(), 1);
}

int main(int argc, char **argv) {
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    self_path[len > 0 ? len : 0] = '\0';
    if (argc >= 3 && strcmp(argv[1], "--mpi-worker") == 0) return mpi_worker(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "--torchrun-worker") == 0) return torchrun_worker();
    if (argc >= 2 && strcmp(argv[1], "--stuck-worker") == 0) return stuck_worker();
    if (argc >= 2 && strcmp(argv[1], "--polling-worker") == 0) return polling_worker();
    if (argc >= 2 && strcmp(argv[1], "--env-worker") == 0) return env_worker();
    if (argc >= 2 && strcmp(argv[1], "--padded-worker") == 0) return padded_worker();
    if (argc >= 3 && strcmp(argv[1], "--lost-gather-worker") == 0)
        return lost_gather_worker(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "--interrupted-matrix-worker") == 0)
        return interrupted_matrix_worker();
    if (argc >= 2 && strcmp(argv[1], "--failing-rank-worker") == 0) return failing_rank_worker();
    if (argc >= 5 && strcmp(argv[1], "--interrupt-rank") == 0)
        return lb_test_exec_interrupting_rank(atoi(argv[2]), atof(argv[3]), argv + 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_values_round_like_the_hardware),
        cmocka_unit_test_teardown(test_comm_env_world_size_follows_the_launcher_order,
                                  unset_launcher_vars),
        cmocka_unit_test(test_comm_mpi_every_collective_dtype_and_op_matches),
        cmocka_unit_test(test_comm_mpi_rank_that_never_arrives_is_named_within_the_deadline),
        cmocka_unit_test(test_comm_torchrun_variables_rendezvous_over_tcp),
        cmocka_unit_test(test_comm_slurm_variables_without_mpi_rendezvous_over_tcp),
        cmocka_unit_test(test_comm_ranks_gone_are_named_by_their_closed_connections),
        cmocka_unit_test(test_comm_stop_on_one_rank_stops_every_rank_over_tcp),
        cmocka_unit_test(test_comm_torchrun_variables_under_srun_win_over_slurms),
        cmocka_unit_test(test_comm_signal_during_rendezvous_ends_it_at_once),
        cmocka_unit_test(test_comm_master_that_never_answers_fails_at_the_deadline),
        cmocka_unit_test(test_comm_silent_connection_does_not_hold_up_the_rendezvous),
        cmocka_unit_test(test_comm_one_slurm_task_needs_no_master_address),
        cmocka_unit_test(test_comm_mismatched_world_size_is_a_usage_error),
        cmocka_unit_test(test_comm_slurm_rank_taken_twice_is_named_as_slurm_procid),
        cmocka_unit_test(test_comm_unreachable_master_is_named_with_its_port),
        cmocka_unit_test(test_comm_local_launcher_starts_ranks_that_meet),
        cmocka_unit_test(test_comm_free_port_is_below_the_ephemeral_range),
        cmocka_unit_test(test_comm_launcher_reports_the_first_failure),
        cmocka_unit_test(test_comm_launcher_reaches_a_stuck_worker_with_a_second_sigterm),
        cmocka_unit_test(test_comm_launcher_ends_workers_past_its_deadline),
        cmocka_unit_test(test_comm_launcher_leaves_an_interrupted_worker_to_say_so),
        cmocka_unit_test(test_comm_launcher_ends_started_workers_when_one_cannot_exec),
        cmocka_unit_test(test_comm_launcher_waits_for_workers_when_sigchld_is_ignored),
        cmocka_unit_test(
            test_comm_launcher_workers_start_while_another_thread_changes_the_environment),
        cmocka_unit_test(test_comm_launcher_passes_on_a_signal_once),
        cmocka_unit_test(test_comm_cli_end_to_end_under_mpirun),
        cmocka_unit_test(test_comm_cli_database_rank_0_cannot_open_stops_every_rank),
        cmocka_unit_test(test_comm_cli_signal_to_one_rank_interrupts_every_rank),
        cmocka_unit_test(test_comm_check_expects_sums_wrapped_as_the_integer_type_does),
        cmocka_unit_test(test_comm_check_counts_what_a_call_did_not_write),
        cmocka_unit_test(test_comm_check_counts_what_a_call_did_not_write_in_signed_integers),
        cmocka_unit_test(test_comm_signal_before_the_pair_matrix_stops_it),
        cmocka_unit_test(test_comm_failure_of_another_rank_is_its_own_sentence),
        cmocka_unit_test(test_comm_cli_nothing_to_measure_is_refused),
        cmocka_unit_test(test_comm_cli_split_collectives_show_the_per_rank_count_once),
        cmocka_unit_test(test_comm_cli_what_did_not_run_shows_as_na),
        cmocka_unit_test(test_comm_cli_int_max_checks_every_element),
        cmocka_unit_test(test_comm_cli_ranks_with_different_options_are_refused),
        cmocka_unit_test(test_comm_cli_bad_input_exits_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
