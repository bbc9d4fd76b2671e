/* test_doctor.c: doctor's readers on a fixture /sys tree (network interfaces, InfiniBand
 * and RoCE ports with a GID table), the checks of NCCL settings against it, the ladder
 * built from those facts, the climb over a fake transport, the cross-rank comparison, and
 * the command on this machine (alone and under mpirun). */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/boot.h"
#include "comm/launch.h"
#include "core/signals.h"
#include "doctor/doctor.h"
#include "doctor/facts.h"
#include "doctor/ladder.h"
#include "test_util.h"

#define NODE1 LB_TEST_FIXTURES "/doctor/node1"

static void test_doctor_reads_interfaces_from_sys(void **state) {
    (void)state;
    json_t *net = lb_doctor_read_net(NODE1);
    assert_int_equal(json_array_size(net), 3);
    json_t *ens = json_array_get(net, 0), *eth = json_array_get(net, 1),
           *lo = json_array_get(net, 2);
    assert_string_equal(json_string_value(json_object_get(ens, "name")), "ens1f0");
    assert_int_equal(json_integer_value(json_object_get(ens, "mtu")), 9000);
    assert_int_equal(json_integer_value(json_object_get(eth, "speed_mbps")), 10000);
    assert_string_equal(json_string_value(json_object_get(eth, "operstate")), "up");
    assert_true(json_is_true(json_object_get(lo, "loopback")));
    assert_true(json_is_false(json_object_get(eth, "loopback")));
    assert_null(json_object_get(lo, "speed_mbps"));
    json_decref(net);
}

static void test_doctor_reads_gid_tables_in_numeric_order_without_unused_entries(void **state) {
    (void)state;
    json_t *ib = lb_doctor_read_ib(NODE1);
    assert_int_equal(json_array_size(ib), 2);
    json_t *roce = json_array_get(ib, 0), *down = json_array_get(ib, 1);
    assert_string_equal(json_string_value(json_object_get(roce, "device")), "mlx5_0");
    assert_int_equal(json_integer_value(json_object_get(roce, "port")), 1);
    assert_string_equal(json_string_value(json_object_get(roce, "state")), "4: ACTIVE");
    assert_string_equal(json_string_value(json_object_get(roce, "link_layer")), "Ethernet");
    json_t *gids = json_object_get(roce, "gids");
    assert_int_equal(json_array_size(gids), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            json_integer_value(json_object_get(json_array_get(gids, (size_t)i), "index")), i);
    assert_string_equal(json_string_value(json_object_get(json_array_get(gids, 3), "type")),
                        "RoCE v2");
    assert_string_equal(json_string_value(json_object_get(json_array_get(gids, 3), "ndev")),
                        "ens1f0");
    /* the RoCE v2 entry with an IPv4-mapped address, not the first v2 entry (1) */
    assert_int_equal(lb_doctor_gid_index(roce), 3);
    assert_int_equal(lb_doctor_gid_index(down), -1);
    json_decref(ib);
}

static int problems(const char *ifname, const char *hca) {
    json_t *net = lb_doctor_read_net(NODE1), *ib = lb_doctor_read_ib(NODE1);
    json_t *p = lb_doctor_env_problems(net, ib, ifname, hca);
    int n = (int)json_array_size(p);
    json_decref(p);
    json_decref(net);
    json_decref(ib);
    return n;
}

static void test_doctor_flags_settings_that_name_nothing(void **state) {
    (void)state;
    assert_int_equal(problems("nosuchif", NULL), 1);
    assert_int_equal(problems("eth", NULL), 0);  /* a prefix */
    assert_int_equal(problems("=eth", NULL), 1); /* exact: there is no "eth" */
    assert_int_equal(problems("=eth0", NULL), 0);
    assert_int_equal(problems("bond,ens", NULL), 0); /* one of a list is enough */
    assert_int_equal(problems("^lo", NULL), 0);
    assert_int_equal(problems("^eth,ens,lo", NULL), 1); /* excludes everything */
    assert_int_equal(problems(NULL, "mlx5_2"), 1);
    assert_int_equal(problems(NULL, "mlx5_0:1"), 0);
    assert_int_equal(problems(NULL, "=mlx5"), 1);
    json_t *net = lb_doctor_read_net(NODE1), *ib = lb_doctor_read_ib(NODE1);
    json_t *p = lb_doctor_env_problems(net, ib, "nosuchif", "mlx9");
    assert_string_equal(json_string_value(json_array_get(p, 0)),
                        "NCCL_SOCKET_IFNAME=nosuchif selects no network interface here "
                        "(interfaces: ens1f0, eth0, lo)");
    assert_string_equal(json_string_value(json_array_get(p, 1)),
                        "NCCL_IB_HCA=mlx9 selects no InfiniBand/RoCE device here (devices: "
                        "mlx5_0, mlx5_1)");
    json_decref(p);
    json_decref(net);
    json_decref(ib);
}

/* Facts of the fixture node with the broken environment of the GPU test. */
static json_t *broken_facts(void) {
    json_t *net = lb_doctor_read_net(NODE1), *ib = lb_doctor_read_ib(NODE1);
    size_t i;
    json_t *o;
    json_array_foreach(net, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        json_object_set_new(o, "addresses",
                            json_pack("[s]", strcmp(name, "lo") == 0 ? "127.0.0.1" : "10.0.0.1"));
    }
    json_t *env = json_pack("{s:s, s:s, s:s}", "NCCL_SOCKET_IFNAME", "nosuchif", "NCCL_P2P_DISABLE",
                            "1", "NCCL_SHM_DISABLE", "1");
    json_t *f = json_pack("{s:o, s:o, s:o, s:o}", "env_problems",
                          lb_doctor_env_problems(net, ib, "nosuchif", NULL), "net", net, "ib", ib,
                          "env", env);
    return f;
}

static bool has(const char (*list)[160], int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0) return true;
    return false;
}

static void test_doctor_ladder_from_facts(void **state) {
    (void)state;
    json_t *f = broken_facts();
    lb_doctor_rung r[LB_LADDER_MAX];
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX);
    assert_string_equal(r[0].name, "as found");
    assert_int_equal(r[0].n_set + r[0].n_unset, 0);
    assert_string_equal(r[1].name, "without the settings that name nothing here");
    assert_string_equal(r[1].unset[0], "NCCL_SOCKET_IFNAME");
    assert_string_equal(r[2].name, "NCCL_P2P_DISABLE removed");
    assert_int_equal(r[2].n_unset, 2);
    assert_string_equal(r[3].name, "NCCL_SHM_DISABLE removed (and the above)");
    assert_int_equal(r[3].n_unset, 3);
    assert_string_equal(r[4].name, "NCCL_IB_GID_INDEX=3 (RoCE v2 on mlx5_0)");
    assert_true(has(r[4].set, r[4].n_set, "NCCL_IB_GID_INDEX=3"));
    assert_string_equal(r[5].name, "NCCL_CROSS_NIC=0");
    assert_string_equal(r[6].name, "InfiniBand off, sockets on ens1f0");
    assert_true(has(r[6].set, r[6].n_set, "NCCL_SOCKET_IFNAME==ens1f0"));
    assert_true(has(r[6].set, r[6].n_set, "NCCL_IB_DISABLE=1"));
    assert_string_equal(r[7].name, "InfiniBand off, sockets on eth0");
    assert_string_equal(r[8].name, "InfiniBand off, sockets on lo");
    /* P2P and SHM are already off as found: only GDR remains of the single switches */
    assert_string_equal(r[9].name, "NCCL_NET_GDR_LEVEL=0");
    assert_int_equal(n, 10);
    /* across nodes the loopback is no candidate */
    assert_int_equal(lb_doctor_ladder(f, true, r, LB_LADDER_MAX), 9);
    char line[512];
    lb_doctor_export_line(&r[6], line, sizeof line);
    /* set again, the variable is no longer removed */
    assert_string_equal(line, "export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME==ens1f0");
    lb_doctor_export_line(&r[0], line, sizeof line);
    assert_string_equal(line, "");
    json_decref(f);
}

/* A fake transport: the environment as found with the rung applied decides the outcome. */
typedef struct {
    const json_t *env;
    int calls;
    double fast, slow;
    bool nothing_works;
} fake;

static const char *effective(const fake *fk, const lb_doctor_rung *r, const char *name) {
    static char value[160];
    for (int i = 0; i < r->n_set; i++)
        if (strncmp(r->set[i], name, strlen(name)) == 0 && r->set[i][strlen(name)] == '=') {
            snprintf(value, sizeof value, "%s", r->set[i] + strlen(name) + 1);
            return value;
        }
    for (int i = 0; i < r->n_unset; i++)
        if (strcmp(r->unset[i], name) == 0) return NULL;
    return json_string_value(json_object_get(fk->env, name));
}

static lb_status fake_probe(void *ctx, const lb_doctor_rung *r, lb_doctor_probe *out, lb_err *err) {
    fake *fk = ctx;
    fk->calls++;
    const char *ifname = effective(fk, r, "NCCL_SOCKET_IFNAME");
    const char *p2p_off = effective(fk, r, "NCCL_P2P_DISABLE");
    out->ok = !fk->nothing_works && (ifname == NULL || strcmp(ifname, "nosuchif") != 0);
    out->busbw_gbps = out->ok ? (p2p_off != NULL ? fk->slow : fk->fast) : 0;
    if (!out->ok) snprintf(out->error, sizeof out->error, "no socket interface");
    return LB_OK;
}

static void test_doctor_climb_stops_at_the_first_good_rung(void **state) {
    (void)state;
    json_t *f = broken_facts();
    lb_doctor_rung r[LB_LADDER_MAX];
    lb_doctor_probe res[LB_LADDER_MAX];
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX), chosen;
    lb_doctor_verdict v;
    lb_err err;
    fake fk = {.env = json_object_get(f, "env"), .fast = 150, .slow = 3};
    assert_int_equal(lb_doctor_climb(r, n, 45, fake_probe, &fk, res, &chosen, &v, &err), LB_OK);
    assert_int_equal(v, LB_DOCTOR_FIXED);
    assert_int_equal(chosen, 2);
    assert_int_equal(fk.calls, 3);
    assert_false(res[0].ok);
    assert_true(res[1].ok && res[1].busbw_gbps == 3); /* works, but far below the links */
    assert_false(res[3].ran);
    char line[256];
    lb_doctor_export_line(&r[chosen], line, sizeof line);
    assert_string_equal(line, "unset NCCL_SOCKET_IFNAME NCCL_P2P_DISABLE");

    /* nothing reaches the bar: the fastest rung that worked */
    fk = (fake){.env = json_object_get(f, "env"), .fast = 20, .slow = 3};
    lb_doctor_climb(r, n, 45, fake_probe, &fk, res, &chosen, &v, &err);
    assert_int_equal(v, LB_DOCTOR_SLOW);
    assert_int_equal(chosen, 2);
    assert_int_equal(fk.calls, n);

    fk = (fake){.env = json_object_get(f, "env"), .nothing_works = true};
    lb_doctor_climb(r, n, 45, fake_probe, &fk, res, &chosen, &v, &err);
    assert_int_equal(v, LB_DOCTOR_BROKEN);
    assert_int_equal(chosen, -1);

    /* a healthy environment: one probe, exit 0 */
    json_t *healthy = json_pack("{s:{}, s:[], s:[], s:[]}", "env", "env_problems", "net", "ib");
    n = lb_doctor_ladder(healthy, false, r, LB_LADDER_MAX);
    fk = (fake){.env = json_object_get(healthy, "env"), .fast = 150, .slow = 3};
    lb_doctor_climb(r, n, 45, fake_probe, &fk, res, &chosen, &v, &err);
    assert_int_equal(v, LB_DOCTOR_WORKS_AS_FOUND);
    assert_int_equal(chosen, 0);
    assert_int_equal(fk.calls, 1);
    json_decref(healthy);
    json_decref(f);
}

/* Each switch found off is named alone when it is the first removed; a *_DISABLE=0 switches
 * nothing off, so no rung removes it (it would probe the environment as found again). */
static void test_doctor_ladder_names_only_the_switches_it_removed(void **state) {
    (void)state;
    json_t *f =
        json_pack("{s:{s:s, s:s, s:s}, s:[], s:[], s:[]}", "env", "NCCL_P2P_DISABLE", "0",
                  "NCCL_SHM_DISABLE", "1", "NCCL_IB_DISABLE", "1", "env_problems", "net", "ib");
    lb_doctor_rung r[LB_LADDER_MAX];
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX);
    const char *want[] = {"as found", "NCCL_SHM_DISABLE removed",
                          "NCCL_IB_DISABLE removed (and the above)", "NCCL_P2P_DISABLE=1",
                          "NCCL_NET_GDR_LEVEL=0"};
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++)
        assert_string_equal(r[i].name, want[i]);
    assert_int_equal(r[1].n_unset, 1);
    assert_string_equal(r[1].unset[0], "NCCL_SHM_DISABLE");
    assert_int_equal(r[2].n_unset, 2);
    json_decref(f);
}

/* A probe during which a Ctrl-C arrived: its workers got the signal too and failed. */
static lb_status interrupted_probe(void *ctx, const lb_doctor_rung *r, lb_doctor_probe *out,
                                   lb_err *err) {
    (void)r;
    (void)err;
    if (++*(int *)ctx == 2) lb_signals_raise(SIGINT);
    out->ok = false;
    snprintf(out->error, sizeof out->error, "the probe workers ended with exit code 130");
    return LB_OK;
}

/* A signal stops the climb: no later rung is probed and the interrupted one is not counted
 * as failed, so no "nothing works" verdict comes of a Ctrl-C. */
static void test_doctor_climb_stops_when_interrupted(void **state) {
    (void)state;
    json_t *f = broken_facts();
    lb_doctor_rung r[LB_LADDER_MAX];
    lb_doctor_probe res[LB_LADDER_MAX];
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX), chosen, calls = 0;
    lb_doctor_verdict v;
    lb_err err = {{0}};
    lb_status st = lb_doctor_climb(r, n, 45, interrupted_probe, &calls, res, &chosen, &v, &err);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_int_equal(calls, 2);
    assert_true(res[0].ran);
    assert_false(res[1].ran);
    assert_false(res[2].ran);
    assert_string_equal(err.msg, "interrupted during the probe of \"without the settings that "
                                 "name nothing here\"");
    /* a signal before the climb: nothing is probed */
    lb_signals_raise(SIGINT);
    calls = 0;
    st = lb_doctor_climb(r, n, 45, interrupted_probe, &calls, res, &chosen, &v, &err);
    lb_signals_reset();
    assert_int_equal(st, LB_ERR_INTERRUPTED);
    assert_int_equal(calls, 0);
    json_decref(f);
}

/* One rank's part of a probe across ranks: slow but working, except that a signal reaches
 * rank signal_rank during its second part (and its workers, passed the signal, end 130),
 * that rank overrun_rank's workers overrun the launch's deadline in its first part, and that
 * rank slow_rank's first part takes 1.5 s. */
typedef struct {
    int rank, signal_rank, overrun_rank, slow_rank, parts;
} part_ctx;

#define OVERRUN_MSG "the launch's deadline of 110 s passed with 1 of 1 workers still running"

static bool signalled_part(void *ctx, const lb_doctor_rung *r, int port, lb_doctor_probe *out,
                           int *code) {
    (void)r;
    (void)port;
    part_ctx *pc = ctx;
    bool hit = ++pc->parts == 2 && pc->rank == pc->signal_rank;
    if (pc->parts == 1 && pc->rank == pc->slow_rank)
        nanosleep(&(struct timespec){.tv_sec = 1, .tv_nsec = 500 * 1000 * 1000}, NULL);
    if (hit) lb_signals_raise(SIGINT);
    if (pc->parts == 1 && pc->rank == pc->overrun_rank) {
        out->ok = false;
        snprintf(out->error, sizeof out->error, "%s", OVERRUN_MSG);
        *code = LB_LAUNCH_DEADLINE_PASSED;
        return true;
    }
    out->ok = !hit;
    out->busbw_gbps = hit ? 0 : 3;
    *code = hit ? 130 : 0;
    return true;
}

/* Rank `rank` of two over TCP climbing the broken ladder with signalled_part (pc's rank
 * set here), a control plane of 1 s and parts of up to 3 s; one line on fd: its status, its
 * parts, the rungs it counts as ran, its error; rank 0 a second: the first rung's outcome. */
static _Noreturn void climb_as(int rank, part_ctx pc, int port, int fd) {
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    lb_boot *boot = NULL;
    lb_err err = {{0}};
    if (lb_boot_init(10, &boot, &err) != LB_OK) {
        dprintf(fd, "rank %d: %s\n", rank, err.msg);
        _exit(1);
    }
    lb_boot_set_timeout_s(boot, 1);
    json_t *f = broken_facts();
    lb_doctor_rung r[LB_LADDER_MAX];
    lb_doctor_probe res[LB_LADDER_MAX] = {0};
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX), chosen = 0;
    lb_doctor_verdict verdict;
    pc.rank = rank;
    lb_status st = lb_doctor_climb_across(boot, 0, signalled_part, &pc, 3, r, n, 45, res, &chosen,
                                          &verdict, &err);
    int ran = 0;
    for (int i = 0; i < n; i++)
        ran += res[i].ran;
    dprintf(fd, "rank %d: status %d, %d parts, %d ran, chosen %d: %s\n", rank, (int)st, pc.parts,
            ran, chosen, err.msg);
    if (rank == 0) dprintf(fd, "first rung: ok %d: %s\n", res[0].ok, res[0].error);
    lb_boot_free(boot);
    _exit(0);
}

/* Both ranks' lines for the parts pc describes (-1: no such rank). */
static void climb_two_ranks(part_ctx pc, char *out, size_t cap) {
    char path[] = "/tmp/lbtest-climbXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int port = lb_launch_free_port();
    pid_t pids[2];
    for (int rank = 0; rank < 2; rank++)
        if ((pids[rank] = fork()) == 0) {
            lb_test_die_with_parent();
            climb_as(rank, pc, port, fd);
        }
    alarm(60);
    for (int rank = 0; rank < 2; rank++)
        waitpid(pids[rank], NULL, 0);
    alarm(0);
    lseek(fd, 0, SEEK_SET);
    lb_test_slurp(fd, out, cap);
    close(fd);
}

/* A signal that reaches one rank only (kill -INT of rank 1 of an mpirun doctor) stops the
 * climb on every rank: no later rung is probed anywhere, the probe it came during is not
 * counted, and every rank ends interrupted, naming the rank it reached. */
static void test_doctor_signal_on_any_rank_stops_the_climb_on_every_rank(void **state) {
    (void)state;
    char out[2048], want[512];
    for (int signal_rank = 0; signal_rank < 2; signal_rank++) {
        climb_two_ranks((part_ctx){.signal_rank = signal_rank, .overrun_rank = -1, .slow_rank = -1},
                        out, sizeof out);
        snprintf(want, sizeof want,
                 "rank 0: status %d, 2 parts, 1 ran, chosen -1: interrupted (a signal reached "
                 "rank %d) during the probe of \"without the settings that name nothing here\"\n",
                 (int)LB_ERR_INTERRUPTED, signal_rank);
        if (strstr(out, want) == NULL) fail_msg("no '%s' in:\n%s", want, out);
        snprintf(want, sizeof want,
                 "rank 1: status %d, 2 parts, 0 ran, chosen 0: interrupted (a signal reached "
                 "rank %d): the climb stopped\n",
                 (int)LB_ERR_INTERRUPTED, signal_rank);
        if (strstr(out, want) == NULL) fail_msg("no '%s' in:\n%s", want, out);
    }
}

/* A probe whose workers on rank 1 overran the launch's deadline is a failed rung with the
 * launcher's reason, naming the rank; the climb goes on to the next rungs. */
static void test_doctor_probe_that_overran_its_deadline_fails_its_rung(void **state) {
    (void)state;
    char out[2048];
    climb_two_ranks((part_ctx){.signal_rank = -1, .overrun_rank = 1, .slow_rank = -1}, out,
                    sizeof out);
    int parts = 0, ran = 0;
    const char *line = strstr(out, "rank 0: status 0, ");
    if (line == NULL || sscanf(line, "rank 0: status 0, %d parts, %d ran", &parts, &ran) != 2)
        fail_msg("no rank 0 line in:\n%s", out);
    assert_true(parts > 1);
    assert_int_equal(ran, parts);
    if (strstr(out, "first rung: ok 0: rank 1: " OVERRUN_MSG "\n") == NULL)
        fail_msg("no overrun in:\n%s", out);
}

/* A part that takes longer than the control plane's deadline (rank 1's workers running up
 * to their own deadline) is waited for: the climb is judged, not stopped by rank 0's
 * gather giving up on rank 1. */
static void test_doctor_climb_waits_for_a_part_longer_than_the_control_deadline(void **state) {
    (void)state;
    char out[2048];
    climb_two_ranks((part_ctx){.signal_rank = -1, .overrun_rank = -1, .slow_rank = 1}, out,
                    sizeof out);
    int parts = 0, ran = 0;
    const char *line = strstr(out, "rank 0: status 0, ");
    if (line == NULL || sscanf(line, "rank 0: status 0, %d parts, %d ran", &parts, &ran) != 2)
        fail_msg("no rank 0 line in:\n%s", out);
    assert_true(parts >= 1);
    assert_int_equal(ran, parts);
    if (strstr(out, "rank 1: status 0, ") == NULL) fail_msg("no rank 1 line in:\n%s", out);
}

/* The doctor's bound on one probe's workers: their own deadlines and 30 s for start-up. */
static void test_doctor_probe_deadline_follows_the_probe_deadlines(void **state) {
    (void)state;
    lb_doctor_params p = lb_doctor_default_params();
    assert_true(lb_doctor_probe_deadline_s(&p) == 3 * 20 + 2 * 10 + 30);
    p.setup_timeout_s = 1;
    p.op_timeout_s = 0.5;
    assert_true(lb_doctor_probe_deadline_s(&p) == 3 + 1 + 30);
}

/* The probe worker's stdout also holds NCCL's own lines (NCCL_DEBUG=INFO writes there):
 * its result line is found among them. */
static void test_doctor_reads_the_probe_line_among_nccl_debug_output(void **state) {
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    fprintf(f, "node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
               "node1:4242:4242 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
               "{\"ok\": true, \"busbw_gbps\": 123.5, \"error\": \"\"}\n"
               "node1:4242:4250 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 - Destroy COMPLETE\n");
    rewind(f);
    lb_doctor_probe p = {.seconds = 2.5};
    assert_true(lb_doctor_read_probe(f, &p));
    assert_true(p.ok);
    assert_true(p.busbw_gbps == 123.5);
    assert_string_equal(p.error, "");
    assert_true(p.seconds == 2.5);
    fclose(f);

    f = tmpfile();
    fprintf(f, "node1:4242:4242 [0] NCCL INFO {not the probe's line}\n{\"other\": 1}\n"
               "{\"ok\": false, \"busbw_gbps\": 0, \"error\": \"NCCL timed out\"}\n");
    rewind(f);
    p = (lb_doctor_probe){.ok = true};
    assert_true(lb_doctor_read_probe(f, &p));
    assert_false(p.ok);
    assert_string_equal(p.error, "NCCL timed out");
    fclose(f);

    f = tmpfile();
    fprintf(f, "node1:4242:4242 [0] NCCL WARN Bootstrap : no socket interface found\n");
    rewind(f);
    p = (lb_doctor_probe){.busbw_gbps = 7};
    assert_false(lb_doctor_read_probe(f, &p));
    assert_true(p.busbw_gbps == 7);
    fclose(f);
}

/* A setting that names nothing on another GPU node is removed from the rungs everywhere
 * (the ladder is built from the first GPU rank's facts); a rank without a GPU starts no
 * worker, so its settings do not shape the ladder. */
static void test_doctor_ladder_removes_a_setting_wrong_on_another_node(void **state) {
    (void)state;
    json_t *f[3] = {
        json_pack("{s:s, s:i, s:{s:s}, s:[s], s:[], s:[]}", "host", "head", "cuda_devices", 0,
                  "env", "NCCL_IB_HCA", "mlx9", "env_problems",
                  "NCCL_IB_HCA=mlx9 selects no InfiniBand/RoCE device here (devices: none)", "net",
                  "ib"),
        json_pack("{s:s, s:i, s:{s:s}, s:[], s:[], s:[]}", "host", "node-a", "cuda_devices", 1,
                  "env", "NCCL_SOCKET_IFNAME", "=veth-a", "env_problems", "net", "ib"),
        json_pack("{s:s, s:i, s:{s:s}, s:[s], s:[], s:[]}", "host", "node-b", "cuda_devices", 1,
                  "env", "NCCL_SOCKET_IFNAME", "=veth-a", "env_problems",
                  "NCCL_SOCKET_IFNAME==veth-a selects no network interface here (interfaces: "
                  "veth-b, lo)",
                  "net", "ib"),
    };
    json_t *lf = lb_doctor_ladder_facts(f, 3, 1);
    assert_string_equal(json_string_value(json_object_get(lf, "host")), "node-a");
    assert_int_equal(json_array_size(json_object_get(lf, "env_problems")), 1);
    assert_int_equal(json_array_size(json_object_get(f[1], "env_problems")), 0);
    lb_doctor_rung r[LB_LADDER_MAX];
    int n = lb_doctor_ladder(lf, true, r, LB_LADDER_MAX);
    assert_true(n > 2);
    assert_string_equal(r[1].name, "without the settings that name nothing here");
    assert_int_equal(r[1].n_unset, 1);
    assert_string_equal(r[1].unset[0], "NCCL_SOCKET_IFNAME");
    json_decref(lf);
    for (int i = 0; i < 3; i++)
        json_decref(f[i]);
}

static void test_doctor_compares_ranks(void **state) {
    (void)state;
    json_t *a = json_pack("{s:s, s:s, s:s, s:[{s:s}, {s:s}]}", "host", "n1", "driver", "580.1",
                          "nccl", "2.28.9", "gpus", "name", "H100", "name", "H100");
    json_t *b = json_pack("{s:s, s:s, s:s, s:[{s:s}, {s:s}]}", "host", "n2", "driver", "570.2",
                          "nccl", "2.28.9", "gpus", "name", "H100", "name", "A30");
    json_t *same[2] = {a, a}, *diff[2] = {a, b};
    json_t *m = lb_doctor_compare(same, 2);
    assert_int_equal(json_array_size(m), 0);
    json_decref(m);
    m = lb_doctor_compare(diff, 2);
    assert_int_equal(json_array_size(m), 2);
    assert_string_equal(json_string_value(json_array_get(m, 0)),
                        "driver differs: rank 0 (n1) has 580.1, rank 1 (n2) has 570.2");
    assert_string_equal(json_string_value(json_array_get(m, 1)),
                        "GPU models differ: rank 0 has H100 x2, rank 1 has H100 x1, A30 x1");
    json_decref(m);
    json_decref(a);
    json_decref(b);
}

/* A CPU-only rank 0 (a head node) is named once as such; the GPU ranks are compared with
 * the first of them, every one that differs, including a rank whose CUDA sees no GPU but
 * whose NVML lists one (a driver too old for the runtime). */
static void test_doctor_compares_gpu_ranks_past_a_head_node(void **state) {
    (void)state;
    json_t *f[4] = {
        json_pack("{s:s, s:i, s:[]}", "host", "head", "cuda_devices", 0, "gpus"), /* no NCCL */
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:[{s:s}]}", "host", "gpu1", "driver", "580.1",
                  "cuda_driver", "13.0", "nccl", "2.28.9", "cuda_devices", 1, "gpus", "name",
                  "H100"),
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:[{s:s}]}", "host", "gpu2", "driver", "535.2",
                  "cuda_driver", "12.2", "nccl", "2.28.9", "cuda_devices", 0, "gpus", "name",
                  "A100"),
        json_pack("{s:s, s:s, s:s, s:s, s:i, s:[{s:s}]}", "host", "gpu3", "driver", "570.9",
                  "cuda_driver", "13.0", "nccl", "2.28.9", "cuda_devices", 1, "gpus", "name",
                  "H100"),
    };
    json_t *m = lb_doctor_compare(f, 4);
    const char *want[] = {
        "rank 0 (head) has no GPU: left out of the driver, CUDA, NCCL and GPU model comparisons",
        "driver differs: rank 1 (gpu1) has 580.1, rank 2 (gpu2) has 535.2",
        "driver differs: rank 1 (gpu1) has 580.1, rank 3 (gpu3) has 570.9",
        "cuda_driver differs: rank 1 (gpu1) has 13.0, rank 2 (gpu2) has 12.2",
        "GPU models differ: rank 1 has H100 x1, rank 2 has A100 x1",
    };
    size_t n_want = sizeof want / sizeof want[0];
    for (size_t i = 0; i < json_array_size(m) || i < n_want; i++)
        if (i >= n_want || i >= json_array_size(m) ||
            strcmp(json_string_value(json_array_get(m, i)), want[i]) != 0)
            fail_msg("sentence %zu: %s (want %s)", i, json_string_value(json_array_get(m, i)),
                     i < n_want ? want[i] : "none");
    json_decref(m);
    for (int r = 0; r < 4; r++)
        json_decref(f[r]);
}

/* The probe job's ranks are the GPU ranks' indices among themselves, so a gap (a rank
 * without a GPU) gives the next GPU rank the next probe rank, within the probe job's size. */
static void test_doctor_probe_ranks_skip_ranks_without_a_gpu(void **state) {
    (void)state;
    json_t *gpu = json_pack("{s:i}", "cuda_devices", 1),
           *none = json_pack("{s:i}", "cuda_devices", 0);
    json_t *f[5] = {gpu, gpu, none, gpu, none};
    int32_t pr[5];
    assert_int_equal(lb_doctor_probe_ranks(f, 5, pr), 3);
    const int32_t want[5] = {0, 1, -1, 2, -1};
    for (int r = 0; r < 5; r++)
        assert_int_equal(pr[r], want[r]);
    json_t *head[3] = {none, gpu, gpu};
    assert_int_equal(lb_doctor_probe_ranks(head, 3, pr), 2);
    assert_int_equal(pr[0], -1);
    assert_int_equal(pr[1], 0);
    assert_int_equal(pr[2], 1);
    json_decref(gpu);
    json_decref(none);
}

static void test_doctor_good_bandwidth_follows_the_links(void **state) {
    (void)state;
    json_t *nv = json_pack("{s:[{s:[s,s,s,s]}, {s:[s,s]}]}", "gpus", "nvlinks", "a", "b", "c", "d",
                           "nvlinks", "a", "b");
    assert_true(fabs(lb_doctor_good_gbps(nv, false, 2) - 5.0) < 1e-9); /* 2 links x 25 / 10 */
    json_t *pcie =
        json_pack("{s:[{s:[], s:{s:i, s:i}}]}", "gpus", "nvlinks", "pcie", "gen", 4, "width", 16);
    assert_true(fabs(lb_doctor_good_gbps(pcie, false, 2) - 0.985 * 2 * 16 / 10) < 1e-9);
    json_t *net = lb_doctor_read_net(NODE1), *ib = lb_doctor_read_ib(NODE1);
    json_t *nodes = json_pack("{s:o, s:o}", "net", net, "ib", ib);
    assert_true(fabs(lb_doctor_good_gbps(nodes, true, 2) - 1.25) < 1e-9); /* 100 Gb/s: 12.5 GB/s */
    json_decref(nv);
    json_decref(pcie);
    json_decref(nodes);
}

/* An idle GPU's link trains down (gen1 while idle): the bar follows the link's maximum. */
static void test_doctor_good_bandwidth_uses_the_pcie_maximum(void **state) {
    (void)state;
    json_t *idle = json_pack("{s:[{s:[], s:{s:i, s:i, s:i, s:i}}]}", "gpus", "nvlinks", "pcie",
                             "gen", 1, "width", 16, "max_gen", 4, "max_width", 16);
    assert_true(fabs(lb_doctor_good_gbps(idle, false, 2) - 0.985 * 2 * 16 / 10) < 1e-9);
    json_decref(idle);
}

static lb_status one_gpu_probe(void *ctx, const lb_doctor_rung *r, lb_doctor_probe *out,
                               lb_err *err) {
    (void)r;
    (void)err;
    (*(int *)ctx)++;
    out->ok = true;
    out->busbw_gbps = 0; /* one rank: busbw factor 2(n-1)/n = 0 */
    return LB_OK;
}

/* One GPU's all_reduce moves nothing, so its bus bandwidth is 0: success alone is judged,
 * and a working NCCL is "works as found" after one probe, not "slow" after every rung. */
static void test_doctor_one_gpu_is_judged_by_success_alone(void **state) {
    (void)state;
    json_t *f = json_pack("{s:[{s:[], s:{s:i, s:i, s:i, s:i}}], s:[{s:s, s:s, s:b, s:[s]}], "
                          "s:[], s:{}, s:[]}",
                          "gpus", "nvlinks", "pcie", "gen", 4, "width", 16, "max_gen", 4,
                          "max_width", 16, "net", "name", "eth0", "operstate", "up", "loopback",
                          false, "addresses", "10.0.0.2", "ib", "env", "env_problems");
    double good = lb_doctor_good_gbps(f, false, 1);
    assert_true(good == 0);
    lb_doctor_rung r[LB_LADDER_MAX];
    lb_doctor_probe res[LB_LADDER_MAX];
    int n = lb_doctor_ladder(f, false, r, LB_LADDER_MAX), chosen, calls = 0;
    assert_true(n > 1);
    lb_doctor_verdict v;
    lb_err err;
    assert_int_equal(lb_doctor_climb(r, n, good, one_gpu_probe, &calls, res, &chosen, &v, &err),
                     LB_OK);
    assert_int_equal(v, LB_DOCTOR_WORKS_AS_FOUND);
    assert_int_equal(chosen, 0);
    assert_int_equal(calls, 1);
    json_decref(f);
}

static void test_doctor_command_on_this_machine(void **state) {
    (void)state;
    static char out[1 << 16];
    char err[4096];
    const char *args[] = {"doctor", "--json", NULL};
    int rc = lb_test_run(args, out, sizeof out, err, sizeof err);
    json_t *rep = json_loads(out, 0, NULL);
    assert_non_null(rep);
    assert_int_equal(json_array_size(json_object_get(rep, "ranks")), 1);
    assert_non_null(json_object_get(json_array_get(json_object_get(rep, "ranks"), 0), "net"));
    assert_int_equal(json_integer_value(json_object_get(rep, "exit_code")), rc);
    json_t *check = json_object_get(rep, "check");
    if (json_object_get(check, "rungs") == NULL && json_object_get(check, "ok") == NULL) {
        /* no GPU and no MPI ranks: nothing ran, so nothing is said to work */
        assert_string_equal(json_string_value(json_object_get(check, "verdict")), "not checked");
        assert_int_equal(rc, 0);
    }
    json_decref(rep);
    /* one rank: nothing to compare, and the report says so rather than that ranks agree */
    const char *plain[] = {"doctor", "--no-progress", NULL};
    lb_test_run(plain, out, sizeof out, err, sizeof err);
    assert_non_null(strstr(out, "one rank: no other to compare"));
    assert_null(strstr(out, "ranks agree"));
    const char *bad[] = {"doctor", "--ladder", NULL};
    assert_int_equal(lb_test_run(bad, NULL, 0, err, sizeof err), 2);
    assert_non_null(strstr(err, "unknown option '--ladder'"));
}

/* --json prints one JSON document even when the job never forms (here: rank 1 of 2 whose
 * rank 0 never answers), with the error and the exit code. */
/* A job that never forms: the process its launcher calls rank 0 prints one JSON document
 * with the error (a job's stdout then holds one document), the others print none. */
static int doctor_alone_as(const char *rank, const char *port, char *out, size_t cap, char *err,
                           size_t err_cap) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    const char *args[] = {"doctor", "--json", "--setup-timeout", "1", NULL};
    int rc = lb_test_run(args, out, cap, err, err_cap);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    return rc;
}

static void test_doctor_json_reports_a_job_that_never_forms(void **state) {
    (void)state;
    static char out[1 << 14];
    char err[4096], port[16];
    snprintf(port, sizeof port, "%d", lb_launch_free_port());
    int rc = doctor_alone_as("1", port, out, sizeof out, err, sizeof err);
    if (rc == 0 || out[0] != '\0') fail_msg("rank 1: exit %d, stdout: %s", rc, out);
    assert_non_null(strstr(err, port));
    snprintf(port, sizeof port, "%d", lb_launch_free_port());
    rc = doctor_alone_as("0", port, out, sizeof out, err, sizeof err);
    json_t *rep = json_loads(out, 0, NULL);
    if (rep == NULL) fail_msg("rank 0: exit %d, stdout: %s, stderr: %s", rc, out, err);
    assert_int_not_equal(rc, 0);
    assert_int_equal(json_integer_value(json_object_get(rep, "exit_code")), rc);
    assert_non_null(json_string_value(json_object_get(rep, "error")));
    json_decref(rep);
}

static void test_doctor_under_mpirun_compares_and_checks_over_mpi(void **state) {
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "NCCL_SOCKET_IFNAME=nosuchif mpirun -np 2 --oversubscribe %s %s doctor --json 2>&1",
             getuid() == 0 ? "--allow-run-as-root" : "", LB_TEST_BIN);
    FILE *p = popen(cmd, "r");
    static char out[1 << 17];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    json_t *rep =
        json_loads(strchr(out, '{') ? strchr(out, '{') : out, JSON_DISABLE_EOF_CHECK, NULL);
    if (rep == NULL) fprintf(stderr, "%s\n", out);
    assert_non_null(rep);
    assert_int_equal(json_array_size(json_object_get(rep, "ranks")), 2);
    assert_string_equal(json_string_value(json_object_get(rep, "launcher")), "mpi");
    json_t *check = json_object_get(rep, "check");
    if (json_array_size(
            json_object_get(json_array_get(json_object_get(rep, "ranks"), 0), "gpus")) == 0) {
        assert_string_equal(json_string_value(json_object_get(check, "how")),
                            "mpi all_reduce (no GPU)");
        assert_true(json_is_true(json_object_get(check, "ok")));
        assert_int_equal(WEXITSTATUS(rc), 0);
    }
    /* each rank's problem with the setting, named with its rank */
    json_t *probs = json_object_get(rep, "problems");
    assert_int_equal(json_array_size(probs), 2);
    assert_non_null(strstr(json_string_value(json_array_get(probs, 1)), "rank 1 (" /* host */));
    assert_non_null(
        strstr(json_string_value(json_array_get(probs, 1)), "NCCL_SOCKET_IFNAME=nosuchif"));
    json_decref(rep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doctor_reads_interfaces_from_sys),
        cmocka_unit_test(test_doctor_reads_gid_tables_in_numeric_order_without_unused_entries),
        cmocka_unit_test(test_doctor_flags_settings_that_name_nothing),
        cmocka_unit_test(test_doctor_ladder_from_facts),
        cmocka_unit_test(test_doctor_climb_stops_at_the_first_good_rung),
        cmocka_unit_test(test_doctor_ladder_names_only_the_switches_it_removed),
        cmocka_unit_test(test_doctor_climb_stops_when_interrupted),
        cmocka_unit_test(test_doctor_signal_on_any_rank_stops_the_climb_on_every_rank),
        cmocka_unit_test(test_doctor_reads_the_probe_line_among_nccl_debug_output),
        cmocka_unit_test(test_doctor_ladder_removes_a_setting_wrong_on_another_node),
        cmocka_unit_test(test_doctor_compares_ranks),
        cmocka_unit_test(test_doctor_compares_gpu_ranks_past_a_head_node),
        cmocka_unit_test(test_doctor_probe_ranks_skip_ranks_without_a_gpu),
        cmocka_unit_test(test_doctor_good_bandwidth_follows_the_links),
        cmocka_unit_test(test_doctor_good_bandwidth_uses_the_pcie_maximum),
        cmocka_unit_test(test_doctor_probe_that_overran_its_deadline_fails_its_rung),
        cmocka_unit_test(test_doctor_climb_waits_for_a_part_longer_than_the_control_deadline),
        cmocka_unit_test(test_doctor_probe_deadline_follows_the_probe_deadlines),
        cmocka_unit_test(test_doctor_one_gpu_is_judged_by_success_alone),
        cmocka_unit_test(test_doctor_command_on_this_machine),
        cmocka_unit_test(test_doctor_json_reports_a_job_that_never_forms),
        cmocka_unit_test(test_doctor_under_mpirun_compares_and_checks_over_mpi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
