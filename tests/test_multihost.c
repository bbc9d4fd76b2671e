/* test_multihost.c: ranks on two hosts, made on this machine as two network namespaces
 * joined by a veth pair (10.77.0.1 and 10.77.0.2), each rank with a host name of its own
 * (a UTS namespace). Only root can make them (as in CI; elsewhere the program exits 77,
 * which CTest reports as skipped). Traffic stays on this machine.
 *
 * The ranks meet through the torchrun variables over TCP between the hosts, as ranks on
 * two nodes do, and `doctor` gathers each host's facts on rank 0: a setting that is right
 * on one host and names nothing on the other (NCCL_SOCKET_IFNAME copied from node A's
 * interfaces to node B) is named with the rank and host it is wrong on. CPU training over
 * these variables is refused: its collectives are MPI's. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static char ns[2][32], veth[2][16], dir[64];

static void hosts_down(void) {
    for (int h = 0; h < 2; h++)
        lb_test_shell("ip netns del %s 2>/dev/null", ns[h]);
}

/* Two namespaces and the veth pair between them; false when this machine cannot. */
static bool hosts_up(void) {
    for (int h = 0; h < 2; h++) {
        snprintf(ns[h], sizeof ns[h], "lbmh%c%d", 'a' + h, (int)getpid());
        snprintf(veth[h], sizeof veth[h], "mh%c%d", 'a' + h, (int)getpid() % 1000000);
    }
    bool ok = lb_test_shell("ip netns add %s 2>/dev/null && ip netns add %s", ns[0], ns[1]) == 0 &&
              lb_test_shell("ip link add %s netns %s type veth peer name %s netns %s", veth[0],
                            ns[0], veth[1], ns[1]) == 0;
    for (int h = 0; ok && h < 2; h++)
        ok = lb_test_shell("ip -n %s addr add 10.77.0.%d/24 dev %s && ip -n %s link set %s up && "
                           "ip -n %s link set lo up",
                           ns[h], h + 1, veth[h], ns[h], veth[h], ns[h]) == 0;
    if (!ok) hosts_down();
    return ok;
}

/* `llmbench ARGS` as rank r of 2 on host r (node-a, node-b), with ENV (NAME=VALUE ...)
 * before it, for both ranks at once; each rank's stdout and stderr into dir/out<r> and
 * dir/err<r>, its exit status into rc[r]. Returns when both have ended. */
static void run_ranks(const char *env, const char *args, int rc[2]) {
    char cmd[2][768];
    for (int r = 0; r < 2; r++)
        snprintf(cmd[r], sizeof cmd[r],
                 "(ip netns exec %s unshare --uts sh -c 'hostname node-%c; %s RANK=%d "
                 "WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 exec %s %s' >%s/out%d "
                 "2>%s/err%d; echo $? >%s/rc%d)",
                 ns[r], 'a' + r, env, r, LB_TEST_BIN, args, dir, r, dir, r, dir, r);
    lb_test_shell("%s & %s; wait", cmd[0], cmd[1]);
    for (int r = 0; r < 2; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rc%d", dir, r);
        FILE *f = fopen(path, "r");
        rc[r] = -1;
        if (f != NULL && fscanf(f, "%d", &rc[r]) != 1) rc[r] = -1;
        if (f != NULL) fclose(f);
    }
}

/* The text of dir/NAME (at most cap - 1 bytes). */
static const char *text_of(const char *name, char *buf, size_t cap) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        buf[fread(buf, 1, cap - 1, f)] = '\0';
        fclose(f);
    }
    return buf;
}

static json_t *read_json(const char *name) {
    char path[128], err[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (doc == NULL)
        fail_msg("%s: %s; rank 0 said: %s", path, je.text, text_of("err0", err, sizeof err));
    return doc;
}

/* doctor on two hosts: each rank's facts are its own host's (name, interfaces), and the
 * interface setting that names node A's interface is a problem on node B only. */
static void test_multihost_doctor_names_the_host_a_setting_is_wrong_on(void **state) {
    (void)state;
    char env[64];
    snprintf(env, sizeof env, "NCCL_SOCKET_IFNAME=%s", veth[0]);
    int rc[2];
    run_ranks(env, "doctor --json", rc);
    json_t *rep = read_json("out0");
    assert_int_equal(rc[0], 0); /* a problem is reported, the check's verdict decides */
    assert_string_equal(json_string_value(json_object_get(rep, "launcher")), "torchrun");
    json_t *ranks = json_object_get(rep, "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    for (int r = 0; r < 2; r++) {
        json_t *facts = json_array_get(ranks, (size_t)r);
        char host[16];
        snprintf(host, sizeof host, "node-%c", 'a' + r);
        assert_string_equal(json_string_value(json_object_get(facts, "host")), host);
        char *net = json_dumps(json_object_get(facts, "net"), 0);
        if (strstr(net, veth[r]) == NULL || strstr(net, veth[1 - r]) != NULL)
            fail_msg("rank %d's interfaces: %s", r, net);
        free(net);
    }
    json_t *probs = json_object_get(rep, "problems");
    char want[160];
    snprintf(want, sizeof want,
             "rank 1 (node-b): NCCL_SOCKET_IFNAME=%s selects no network interface here "
             "(interfaces: lo, %s)",
             veth[0], veth[1]);
    if (json_array_size(probs) != 1 || strcmp(json_string_value(json_array_get(probs, 0)), want))
        fail_msg("problems: %s", json_dumps(probs, 0));
    json_decref(rep);
}

/* CPU training across hosts needs MPI's collectives: ranks met through the torchrun
 * variables are refused before anything is stored, on both hosts, saying what would do. */
static void test_multihost_cpu_training_without_mpi_is_a_usage_error(void **state) {
    (void)state;
    char args[256], err[2048];
    snprintf(args, sizeof args, "train --device cpu --model gpt2-tiny --steps 2 --db %s/r.db", dir);
    int rc[2];
    run_ranks("", args, rc);
    assert_int_equal(rc[0], 2);
    assert_int_equal(rc[1], 2);
    if (strstr(text_of("err0", err, sizeof err),
               "2 ranks on the CPU train over MPI, but this job was started as 'torchrun': start "
               "it with mpirun") == NULL)
        fail_msg("rank 0 said: %s", err);
    char db[96];
    snprintf(db, sizeof db, "%s/r.db", dir);
    assert_int_equal(access(db, F_OK), -1); /* nothing stored */
}

int main(void) {
    if (getuid() != 0 || !hosts_up()) {
        printf("skipped: cannot make network namespaces (needs root and iproute2)\n");
        return 77;
    }
    lb_test_tmpdir(dir, sizeof dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multihost_doctor_names_the_host_a_setting_is_wrong_on),
        cmocka_unit_test(test_multihost_cpu_training_without_mpi_is_a_usage_error),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    hosts_down();
    lb_test_rmtree(dir);
    return failed;
}
