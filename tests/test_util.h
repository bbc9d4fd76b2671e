/* test_util.h: helpers shared by the tests: run the llmbench program and capture its
 * output, and make a fresh temporary directory. Header-only so each test program stays one
 * file; everything is static. */
#ifndef LB_TEST_UTIL_H
#define LB_TEST_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "store/store.h"
#include "train/data.h"

/* Stores r as an ok run in the database at db (NULL: the default place) and frees r; the
 * run's id, or -1 when the store refused it. */
static inline int64_t lb_test_store_ok(const char *db, lb_result *r) {
    lb_store *s = NULL;
    lb_err e = {{0}};
    int64_t id = -1;
    bool ok = lb_store_open(db, &s, &e) == LB_OK && lb_store_run_begin(s, r, &id, &e) == LB_OK;
    r->status = LB_RUN_OK;
    ok = ok && lb_store_run_finish(s, id, r, &e) == LB_OK;
    lb_result_free(r);
    lb_store_close(s);
    return ok ? id : -1;
}

/* Called in a forked child that runs a server: it is killed when the test program ends,
 * also when a failed assertion skipped the test's own clean-up (a server left running
 * would keep CTest waiting on its output). */
static inline void lb_test_die_with_parent(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* Starts path with argv (argv[0] included, NULL-terminated), its stdout and stderr on pipes
 * whose read ends go into *out_fd and *err_fd; the child dies with the test program.
 * Returns its pid, -1 when it could not be started. */
static inline pid_t lb_test_spawn(const char *path, const char *const *argv, int *out_fd,
                                  int *err_fd) {
    int out[2], err[2];
    if (pipe(out) != 0) return -1;
    if (pipe(err) != 0) {
        close(out[0]), close(out[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        lb_test_die_with_parent();
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    *out_fd = out[0];
    *err_fd = err[0];
    return pid;
}

/* Reads all of fd into buf (NUL-terminated, truncated to cap-1). */
static inline void lb_test_slurp(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        char tmp[4096];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0) break;
        size_t take = (size_t)r;
        if (n + take > cap - 1) take = cap - 1 - n;
        memcpy(buf + n, tmp, take);
        n += take;
    }
    buf[n] = '\0';
}

/* Runs LB_TEST_BIN with args (NULL-terminated, without argv[0]); captures stdout and
 * stderr (either may be NULL). Returns the exit code, or 128+signal. */
static inline int lb_test_run(const char *const *args, char *out, size_t out_cap, char *errbuf,
                              size_t err_cap) {
    char out_path[] = "/tmp/lbtest-outXXXXXX", err_path[] = "/tmp/lbtest-errXXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        const char *argv[64];
        int n = 0;
        argv[n++] = LB_TEST_BIN;
        for (int i = 0; args[i] != NULL && n < 63; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(LB_TEST_BIN, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (out) {
        lseek(out_fd, 0, SEEK_SET);
        lb_test_slurp(out_fd, out, out_cap);
    }
    if (errbuf) {
        lseek(err_fd, 0, SEEK_SET);
        lb_test_slurp(err_fd, errbuf, err_cap);
    }
    close(out_fd);
    close(err_fd);
    unlink(out_path);
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* An llm.c token shard (train/data.h) at path: n tokens drawn uniformly below vocab from
 * seed, the first `period` of them repeated (0: none repeated; a short period gives text a
 * model learns within a few steps). Returns 0, or -1 when the file cannot be written. */
static inline int lb_test_write_shard(const char *path, int n, int vocab, int period,
                                      uint64_t seed) {
    FILE *f = fopen(path, "wb");
    uint16_t *tok = malloc((size_t)n * sizeof *tok);
    if (f == NULL || tok == NULL) {
        if (f != NULL) fclose(f);
        free(tok);
        return -1;
    }
    int32_t header[LB_SHARD_HEADER_INTS] = {LB_SHARD_MAGIC, LB_SHARD_VERSION, n};
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++)
        tok[i] = period > 0 && i >= period ? tok[i % period]
                                           : (uint16_t)lb_rng_below(&rng, (uint64_t)vocab);
    bool ok = fwrite(header, sizeof header, 1, f) == 1 && fwrite(tok, 2, (size_t)n, f) == (size_t)n;
    free(tok);
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Weights large enough that attention and norms are far from their trivial regime:
 * matrices normal(0, 0.2), norm weights 1 +- 0.1, biases +- 0.05 (gradient checks). */
static inline void lb_test_randomize_params(lb_model *m, uint64_t seed) {
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_tensors; i++) {
        const lb_param_tensor *t = &m->layout[i];
        const char *dot = strrchr(t->name, '.');
        int norm_w = strstr(t->name, "norm") && dot && strcmp(dot, ".w") == 0;
        for (int64_t j = 0; j < t->numel; j++) {
            double z = lb_rng_normal(&rng);
            m->params[t->offset + j] = (float)(t->ndim == 2 ? 0.2 * z
                                               : norm_w     ? 1.0 + 0.1 * z
                                                            : 0.05 * z);
        }
    }
}

/* Runs argv (NULL-terminated; argv[0] looked up in PATH) with its stdout and stderr
 * together into out (NUL-terminated, truncated to cap-1). Returns the exit code, or
 * 128+signal; *seconds (unless NULL) receives the wall time it took. */
static inline int lb_test_run_argv(const char *const *argv, char *out, size_t cap,
                                   double *seconds) {
    char path[] = "/tmp/lbtest-argvXXXXXX";
    int fd = mkstemp(path);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (seconds) *seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    lseek(fd, 0, SEEK_SET);
    lb_test_slurp(fd, out, cap);
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Makes a fresh directory under /tmp and writes its path into dir (>= 32 bytes). */
static inline void lb_test_tmpdir(char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/lbtest-XXXXXX");
    if (mkdtemp(dir) == NULL) dir[0] = '\0';
}

static inline int lb_test_rm_entry(const char *path, const struct stat *sb, int flag,
                                   struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a directory made by lb_test_tmpdir with everything in it. */
static inline void lb_test_rmtree(const char *dir) {
    nftw(dir, lb_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Defines static setup() and teardown() for a cmocka group whose tests share a fresh
 * folder `dir` (a char array of at least 32 bytes) holding the results database path `db`
 * (a char array), the folder removed with everything in it after the group. */
#define LB_TEST_DIR_DB_FIXTURE(dir, db)                                                            \
    static int setup(void **state) {                                                               \
        (void)state;                                                                               \
        lb_test_tmpdir(dir, sizeof dir);                                                           \
        snprintf(db, sizeof db, "%s/results.db", dir);                                             \
        return dir[0] ? 0 : -1;                                                                    \
    }                                                                                              \
    static int teardown(void **state) {                                                            \
        (void)state;                                                                               \
        lb_test_rmtree(dir);                                                                       \
        return 0;                                                                                  \
    }

/* The whole file, NUL-terminated (caller frees); NULL when it cannot be read. */
static inline char *lb_test_read_file(const char *path, size_t *n_bytes) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
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

/* Creates or replaces path with text; false when it cannot be written. */
static inline bool lb_test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The UTF-8 bytes of code point cp (at most 4) into out; returns their count. */
static inline size_t lb_test_utf8_of(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) return out[0] = (unsigned char)cp, 1;
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 63));
        out[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 63));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 63));
    out[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Appends "base64(b[0..n)) rank\n" to a ranks file being built in the malloc'd *buf
 * (length *len, NUL-terminated). */
static inline void lb_test_add_rank(char **buf, size_t *len, const unsigned char *b, size_t n,
                                    unsigned rank) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char line[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)b[i] << 16 | (i + 1 < n ? (unsigned)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        line[k++] = b64[v >> 18 & 63];
        line[k++] = b64[v >> 12 & 63];
        line[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        line[k++] = i + 2 < n ? b64[v & 63] : '=';
    }
    k += (size_t)snprintf(line + k, sizeof line - k, " %u\n", rank);
    *buf = (char *)realloc(*buf, *len + k + 1);
    memcpy(*buf + *len, line, k + 1);
    *len += k;
}

/* A tokenizer whose tokens are the 256 bytes and nothing else (GPT-2's expression): a
 * text costs one token a byte. The caller frees it. */
static inline lb_tokenizer *lb_test_bytes_tokenizer(void) {
    char *ranks = NULL;
    size_t len = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        lb_test_add_rank(&ranks, &len, &byte, 1, b);
    }
    lb_tokenizer_params p = {.pattern = LB_TOK_PATTERN_GPT2, .special = LB_TOK_SPECIAL_NONE};
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_tokenizer_parse(&tok, ranks, len, "bytes.tiktoken", &p, &err) != LB_OK)
        fprintf(stderr, "%s\n", err.msg);
    free(ranks);
    return tok;
}

/* The file named in a "... 'llmbench results import FILE'" error (a result kept aside):
 * copied into out; false when msg names none. */
static inline bool lb_test_side_file(const char *msg, char *out, size_t cap) {
    const char *at = strstr(msg, "llmbench results import ");
    if (at == NULL) return false;
    snprintf(out, cap, "%s", at + strlen("llmbench results import "));
    out[strcspn(out, "'")] = '\0';
    return true;
}

/* GPT-2's tokenizer from tests/fixtures/tokenizer/gpt2.tiktoken; NULL, with the reason on
 * stderr, when it cannot be loaded. The caller frees it with lb_tokenizer_free. */
static inline lb_tokenizer *lb_test_gpt2_tokenizer(void) {
    lb_tokenizer *tok = NULL;
    lb_err err = {{0}};
    if (lb_tokenizer_load(&tok, LB_TEST_FIXTURES "/tokenizer/gpt2.tiktoken", NULL, &err) != LB_OK)
        fprintf(stderr, "%s\n", err.msg);
    return tok;
}

/* An HTTP answer's body, collected by lb_test_keep (a curl write callback) and
 * NUL-terminated; u NULL drops it. */
typedef struct {
    char *p;
    size_t n;
} lb_test_body;

static inline size_t lb_test_keep(char *d, size_t s, size_t n, void *u) {
    lb_test_body *b = u;
    if (b == NULL) return s * n;
    char *p = realloc(b->p, b->n + s * n + 1);
    if (p == NULL) return 0;
    memcpy(p + b->n, d, s * n);
    b->p = p;
    b->n += s * n;
    p[b->n] = '\0';
    return s * n;
}

/* A rank of an mpirun job that a Ctrl-C reaches alone: execs argv (argv[0] a path, the
 * list NULL-terminated), and in the rank numbered `rank` (OMPI_COMM_WORLD_RANK) first forks
 * a helper that sends it SIGINT after `seconds` (nothing if it has gone by then). Returns
 * only when exec failed. */
static inline int lb_test_exec_interrupting_rank(int rank, double seconds, char **argv) {
    const char *me = getenv("OMPI_COMM_WORLD_RANK");
    if (me != NULL && atoi(me) == rank) {
        pid_t target = getpid();
        if (fork() == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 0), dup2(null, 1), dup2(null, 2);
            struct timespec ts = {(time_t)seconds,
                                  (long)((seconds - (double)(time_t)seconds) * 1e9)};
            nanosleep(&ts, NULL);
            if (getppid() == target) kill(target, SIGINT);
            _exit(0);
        }
    }
    execv(argv[0], argv);
    return 127;
}

/* Runs a shell command line made from fmt; its exit status (128 + signal when killed). */
static inline __attribute__((format(printf, 1, 2))) int lb_test_shell(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
}

#endif
