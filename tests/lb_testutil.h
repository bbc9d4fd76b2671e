/* lb_testutil.h: small helpers shared by tests: private temporary folders, whole-file
 * reads, and running the llmbench program with its output captured in files.
 *
 * Header-only (static inline) because every test is its own program. Failures abort the
 * test through cmocka's assertions; nothing here is used by llmbench itself. */
#ifndef LB_TESTUTIL_H
#define LB_TESTUTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Makes a new private folder under $TMPDIR (or /tmp) and writes its path into dir. */
static inline void lb_test_mkdtemp(char *dir, size_t cap) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, cap, "%s/llmbench-test-XXXXXX", base && base[0] ? base : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static inline int lb_test_rm_entry(const char *path, const struct stat *sb, int flag,
                                   struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a folder made by lb_test_mkdtemp with everything in it. */
static inline void lb_test_rmtree(const char *dir) {
    nftw(dir, lb_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file, NUL-terminated (caller frees); NULL when it cannot be read. */
static inline char *lb_test_read_file(const char *path, size_t *n_bytes) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf == NULL) return NULL;
    buf[n] = '\0';
    if (n_bytes) *n_bytes = (size_t)n;
    return buf;
}

/* Runs argv (argv[0] is the program path) with stdout and stderr sent to the given files
 * (NULL: /dev/null) and returns its exit code, or 128 + signal when a signal ended it. */
static inline int lb_test_spawn(char *const argv[], const char *out_path, const char *err_path) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen(out_path ? out_path : "/dev/null", "w", stdout)) _exit(127);
        if (!freopen(err_path ? err_path : "/dev/null", "w", stderr)) _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
