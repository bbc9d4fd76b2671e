/* test_root_filesystems.c: results and output files on file systems that only root can
 * make (as in CI; elsewhere the program exits 77, which CTest reports as skipped).
 *
 * A finished run on a full disk is not lost: the database lives on a 1 MiB tmpfs, a
 * workload measures more samples than fit, and the result must come out whole in the
 * state folder, the row marked failed naming it, and `results import` must store it once
 * there is room. A database left in WAL mode with its -wal and -shm files on a read-only
 * mount is read by `results list` as it is. An output file written on a full disk
 * (`load --out`, `results export --out`, a result kept aside) keeps its old contents and
 * leaves no temporary file. */
/* cmocka.h needs these four first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <sqlite3.h>
#include <sys/mount.h>

#include "cli/runctl.h"
#include "core/file.h"
#include "store/store.h"
#include "test_util.h"

#define N_SAMPLES 200000

static char mnt[64], state[64], spare[64];

static lb_status many_samples(void *ctx, lb_result *r, lb_err *err) {
    (void)ctx, (void)err;
    lb_series *s = lb_result_series(r, "latency_ms", "ms");
    for (int i = 0; i < N_SAMPLES; i++)
        LB_TRY(lb_result_series_push(s, 1.0 + i * 1e-3));
    return lb_result_set_metric(r, "n", N_SAMPLES, "queries");
}

static void test_store_full_disk_keeps_the_result_aside_and_marks_the_run(void **state_) {
    (void)state_;
    char db[128];
    snprintf(db, sizeof db, "%s/results.db", mnt);
    lb_cli_common common = {.db_path = db, .verbosity = -1};
    lb_result *r = lb_result_new("load", "full-disk");
    int64_t id = -1;
    lb_err err = {{0}};
    lb_status st = lb_runctl_run(&common, 0, NULL, r, many_samples, NULL, &id, &err);
    lb_result_free(r);
    assert_int_equal(st, LB_ERR_DB);
    assert_true(id > 0);
    assert_non_null(strstr(err.msg, "could not be stored"));
    /* Not beside the database (no room there): in $XDG_STATE_HOME/llmbench. */
    char side[600];
    assert_true(lb_test_side_file(err.msg, side, sizeof side));
    char want[128];
    snprintf(want, sizeof want, "%s/llmbench/unstored-run-", state);
    assert_memory_equal(side, want, strlen(want));

    lb_store *s = NULL;
    assert_int_equal(lb_store_open_read(db, &s, &err), LB_OK);
    lb_result *row = NULL;
    assert_int_equal(lb_store_run_load(s, id, &row, &err), LB_OK);
    assert_int_equal(row->status, LB_RUN_FAILED);
    assert_non_null(strstr(row->failure, side));
    assert_null(lb_result_find_series(row, "latency_ms"));
    lb_result_free(row);
    lb_store_close(s);

    /* Stored later, elsewhere, whole. */
    char other[128];
    snprintf(other, sizeof other, "%s/results.db", spare);
    const char *args[] = {"results", "import", side, "--db", other, NULL};
    char out[1024], errout[1024];
    assert_int_equal(lb_test_run(args, out, sizeof out, errout, sizeof errout), 0);
    assert_int_equal(lb_store_open_read(other, &s, &err), LB_OK);
    assert_int_equal(lb_store_run_load(s, 1, &row, &err), LB_OK);
    assert_int_equal(row->status, LB_RUN_OK);
    const lb_series *lat = lb_result_find_series(row, "latency_ms");
    assert_int_equal(lat->n, N_SAMPLES);
    assert_true(lat->values[N_SAMPLES - 1] == 1.0 + (N_SAMPLES - 1) * 1e-3);
    lb_result_free(row);
    lb_store_close(s);
}

static void test_store_read_commands_read_a_wal_database_on_a_read_only_mount(void **state_) {
    (void)state_;
    char dir[64], ro[64], db[128], sql[256];
    lb_test_tmpdir(dir, sizeof dir);
    lb_test_tmpdir(ro, sizeof ro);
    snprintf(db, sizeof db, "%s/results.db", dir);
    /* A writer that ends without closing leaves -wal and -shm behind: a child that exits. */
    lb_store *s = NULL;
    lb_err err = {{0}};
    assert_int_equal(lb_store_open(db, &s, &err), LB_OK);
    lb_store_close(s);
    pid_t pid = fork();
    if (pid == 0) {
        sqlite3 *h = NULL;
        sqlite3_open(db, &h);
        sqlite3_exec(h, "PRAGMA wal_autocheckpoint = 0", NULL, NULL, NULL);
        snprintf(sql, sizeof sql,
                 "INSERT INTO runs (kind, name, start_wall_s, status) "
                 "VALUES ('train', 'left-in-wal', 1, 'ok')");
        sqlite3_exec(h, sql, NULL, NULL, NULL);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    snprintf(sql, sizeof sql, "%s-wal", db);
    assert_int_equal(access(sql, F_OK), 0);
    assert_int_equal(mount(dir, ro, NULL, MS_BIND, NULL), 0);
    assert_int_equal(mount(NULL, ro, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
    char rodb[128], out[4096], errout[1024];
    snprintf(rodb, sizeof rodb, "%s/results.db", ro);
    const char *args[] = {"results", "list", "--db", rodb, NULL};
    int rc = lb_test_run(args, out, sizeof out, errout, sizeof errout);
    umount2(ro, MNT_DETACH);
    rmdir(ro);
    lb_test_rmtree(dir);
    if (rc != 0) fail_msg("results list: exit %d: %s", rc, errout);
    assert_non_null(strstr(out, "left-in-wal"));
}

static lb_status write_two_mib(FILE *out, void *ctx, lb_err *err) {
    (void)ctx, (void)err;
    static char block[1 << 16];
    memset(block, 'x', sizeof block);
    for (int i = 0; i < 32; i++)
        fwrite(block, 1, sizeof block, out);
    return LB_OK;
}

static void test_file_written_on_a_full_disk_keeps_the_old_contents(void **state_) {
    (void)state_;
    char disk[64], path[128], tmp_left[256];
    lb_test_tmpdir(disk, sizeof disk);
    assert_int_equal(mount("lbtest", disk, "tmpfs", 0, "size=1m"), 0);
    snprintf(path, sizeof path, "%s/detail.json", disk);
    assert_true(lb_test_write_file(path, "{\"old\": true}\n"));
    lb_err err = {{0}};
    assert_int_equal(lb_file_write_atomic_with(path, write_two_mib, NULL, &err), LB_ERR_IO);
    assert_non_null(strstr(err.msg, "detail.json"));
    char *text = lb_test_read_file(path, NULL);
    assert_string_equal(text, "{\"old\": true}\n");
    free(text);
    snprintf(tmp_left, sizeof tmp_left, "ls %s | grep -c tmp- > /dev/null", disk);
    int left = system(tmp_left);
    umount2(disk, MNT_DETACH);
    rmdir(disk);
    assert_int_not_equal(left, 0);
}

int main(void) {
    lb_test_tmpdir(mnt, sizeof mnt);
    lb_test_tmpdir(state, sizeof state);
    lb_test_tmpdir(spare, sizeof spare);
    if (mount("lbtest", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("skipped: cannot mount a small tmpfs (needs root): %s\n", strerror(errno));
        rmdir(mnt), rmdir(state), rmdir(spare);
        return 77;
    }
    setenv("XDG_STATE_HOME", state, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_full_disk_keeps_the_result_aside_and_marks_the_run),
        cmocka_unit_test(test_store_read_commands_read_a_wal_database_on_a_read_only_mount),
        cmocka_unit_test(test_file_written_on_a_full_disk_keeps_the_old_contents),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
    lb_test_rmtree(state);
    lb_test_rmtree(spare);
    return failed;
}
