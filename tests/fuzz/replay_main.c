/* replay_main.c: drives a fuzz target without libFuzzer, so that every build (gcc too)
 * and CI run the parsers on their seed corpus and on inputs mutated from it.
 *
 * Usage: fuzz_replay_<name> [-n COUNT] [-s SEED] [-m MAX_BYTES] PATH...
 * Each PATH is a file or a directory of files (read in name order). Every file is fed once
 * as it is; then COUNT inputs are derived from them with a seeded lb_rng (core/stats.h).
 * One in eight is random bytes; the others are a corpus file with 1 to 8 mutations, half
 * of them with one, a quarter with two and so on, because near-valid inputs get further
 * into a parser than wrecked ones. A mutation flips a bit, writes a random or boundary
 * byte, sets a little-endian integer to an edge value, inserts, deletes or repeats a run,
 * splices in a run of another file, or truncates. Each input sits alone in a malloc'd
 * block of exactly its size, so the sanitizers catch a read one byte past its end. The
 * same corpus and seed give the same inputs, so a failure in CI reproduces anywhere.
 *
 * On a crash (a failed FUZZ_CHECK, a signal, a sanitizer report) it names the input and
 * saves it as fuzz-crash-<name>.bin in the working directory; `fuzz_replay_<name> -n 0
 * FILE` replays that file alone. Not here: coverage guidance, which is libFuzzer's job
 * (make fuzz). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/rng.h"
#include "fuzz.h"

typedef struct {
    char *name;
    uint8_t *bytes;
    size_t n;
} seed_file;

static seed_file *seeds;
static size_t n_seeds, cap_seeds;

/* The input being run, for the crash report. */
static const uint8_t *cur;
static size_t cur_n;
static char cur_label[320];
static char crash_path[288];

static void put_str(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Runs in a signal handler or a sanitizer's death callback: write(2) only. */
static void report_current(void) {
    if (cur == NULL && cur_n == 0) return;
    put_str("\nfuzz replay: crash on ");
    put_str(cur_label);
    put_str("; input saved to ");
    put_str(crash_path);
    put_str("\n");
    int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < cur_n) {
            ssize_t w = write(fd, cur + off, cur_n - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
    }
    if (cur_n <= 512) {
        static const char hex[] = "0123456789abcdef";
        char line[2 * 32 + 2];
        for (size_t i = 0; i < cur_n; i += 32) {
            size_t k = 0;
            for (size_t j = i; j < cur_n && j < i + 32; j++) {
                line[k++] = hex[cur[j] >> 4];
                line[k++] = hex[cur[j] & 15];
            }
            line[k++] = '\n';
            line[k] = '\0';
            put_str(line);
        }
    }
    cur_n = 0;
    cur = NULL;
}

static void on_fatal_signal(int sig) {
    report_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Present when a sanitizer runtime is linked: its reports end in a death callback. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void install_crash_report(void) {
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(report_current);
        signal(SIGABRT, on_fatal_signal); /* FUZZ_CHECK; the sanitizer handles the others */
        return;
    }
    const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_fatal_signal);
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "fuzz replay: %s %s\n", what, path);
    exit(2);
}

static void add_seed(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) die("cannot stat", path);
    uint8_t *b = malloc((size_t)sb.st_size + 1);
    size_t n = 0;
    while (b != NULL && n < (size_t)sb.st_size) {
        ssize_t r = read(fd, b + n, (size_t)sb.st_size - n);
        if (r <= 0) die("cannot read", path);
        n += (size_t)r;
    }
    close(fd);
    if (n_seeds == cap_seeds) {
        cap_seeds = cap_seeds ? 2 * cap_seeds : 64;
        seeds = realloc(seeds, cap_seeds * sizeof *seeds);
    }
    if (b == NULL || seeds == NULL) die("out of memory reading", path);
    seeds[n_seeds++] = (seed_file){.name = strdup(path), .bytes = b, .n = n};
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) die("no such file or directory:", path);
    if (!S_ISDIR(sb.st_mode)) {
        add_seed(path);
        return;
    }
    DIR *dir = opendir(path);
    if (dir == NULL) die("cannot list", path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
            if (names == NULL) die("out of memory listing", path);
        }
        names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
        if (names[n] == NULL) die("out of memory listing", path);
        sprintf(names[n], "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    qsort(names, n, sizeof *names, cmp_name);
    for (size_t i = 0; i < n; i++) {
        add_seed(names[i]);
        free(names[i]);
    }
    free(names);
}

/* Runs the target on a private copy of exactly n bytes. */
static void run_one(const uint8_t *bytes, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    if (copy == NULL) die("out of memory for an input of", "n bytes");
    if (n) memcpy(copy, bytes, n);
    cur = copy;
    cur_n = n;
    LLVMFuzzerTestOneInput(copy, n);
    cur = NULL;
    cur_n = 0;
    free(copy);
}

/* Bytes that change the meaning of JSON, text and binary headers. */
static const uint8_t special_bytes[] = {0,   1,   0x7f, 0x80, 0xff, '"', '\\', '{', '}', '[',
                                        ']', ',', ':',  '\n', '\r', ' ', '0',  '9', '-', '.'};
static const int64_t edge_ints[] = {
    0,         1,         -1,      2,     127,       128,       255,
    256,       32767,     65535,   65536, INT32_MAX, INT32_MIN, (int64_t)1 << 40,
    INT64_MAX, INT64_MIN, 20240520};

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buffer;

static uint8_t random_byte(lb_rng *r) {
    return lb_rng_below(r, 2) ? (uint8_t)lb_rng_next(r)
                              : special_bytes[lb_rng_below(r, sizeof special_bytes)];
}

/* Makes room for k bytes at pos (k is clipped to the capacity); returns the k made. */
static size_t open_gap(buffer *b, size_t pos, size_t k) {
    if (k > b->cap - b->n) k = b->cap - b->n;
    memmove(b->p + pos + k, b->p + pos, b->n - pos);
    b->n += k;
    return k;
}

static void mutate(lb_rng *r, buffer *b) {
    size_t pos = (size_t)lb_rng_below(r, b->n + 1);
    switch (lb_rng_below(r, 9)) {
    case 0: /* flip one bit */
        if (b->n) b->p[pos % b->n] ^= (uint8_t)(1u << lb_rng_below(r, 8));
        break;
    case 1: /* one byte, random or special */
        if (b->n) b->p[pos % b->n] = random_byte(r);
        break;
    case 2: { /* a little-endian integer of 1, 2, 4 or 8 bytes set to an edge value */
        size_t w = (size_t)1 << lb_rng_below(r, 4);
        if (b->n < w) break;
        int64_t v = edge_ints[lb_rng_below(r, sizeof edge_ints / sizeof edge_ints[0])];
        memcpy(b->p + lb_rng_below(r, b->n - w + 1), &v, w);
        break;
    }
    case 3: { /* insert 1 to 8 bytes */
        size_t k = open_gap(b, pos, 1 + (size_t)lb_rng_below(r, 8));
        for (size_t i = 0; i < k; i++)
            b->p[pos + i] = random_byte(r);
        break;
    }
    case 4: { /* delete a run */
        if (pos == b->n) break;
        size_t k = 1 + (size_t)lb_rng_below(r, (b->n - pos + 1) / 2 + 1);
        if (k > b->n - pos) k = b->n - pos;
        memmove(b->p + pos, b->p + pos + k, b->n - pos - k);
        b->n -= k;
        break;
    }
    case 5: { /* repeat a run of the input elsewhere */
        if (b->n == 0) break;
        size_t from = (size_t)lb_rng_below(r, b->n);
        size_t len = 1 + (size_t)lb_rng_below(r, b->n - from);
        uint8_t tmp[512];
        if (len > sizeof tmp) len = sizeof tmp;
        memcpy(tmp, b->p + from, len);
        size_t k = open_gap(b, pos, len);
        memcpy(b->p + pos, tmp, k);
        break;
    }
    case 6: { /* splice in a run of another corpus file */
        const seed_file *s = &seeds[lb_rng_below(r, n_seeds)];
        if (s->n == 0) break;
        size_t from = (size_t)lb_rng_below(r, s->n);
        size_t k = open_gap(b, pos, 1 + (size_t)lb_rng_below(r, s->n - from));
        memcpy(b->p + pos, s->bytes + from, k);
        break;
    }
    case 7: /* truncate */ b->n = pos; break;
    default: { /* overwrite a run with one repeated byte */
        size_t k = 1 + (size_t)lb_rng_below(r, 16);
        uint8_t v = random_byte(r);
        for (size_t i = pos; i < b->n && i < pos + k; i++)
            b->p[i] = v;
        break;
    }
    }
}

int main(int argc, char **argv) {
    long count = 2000, max_bytes = 4096;
    uint64_t seed = 1;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:m:")) != -1) {
        if (opt == 'n')
            count = strtol(optarg, NULL, 10);
        else if (opt == 's')
            seed = strtoull(optarg, NULL, 10);
        else if (opt == 'm')
            max_bytes = strtol(optarg, NULL, 10);
        else {
            fprintf(stderr, "usage: %s [-n COUNT] [-s SEED] [-m MAX_BYTES] PATH...\n", argv[0]);
            return 2;
        }
    }
    if (optind == argc || count < 0 || max_bytes < 1) {
        fprintf(stderr,
                "usage: %s [-n COUNT] [-s SEED] [-m MAX_BYTES] PATH... (a corpus "
                "directory or input files)\n",
                argv[0]);
        return 2;
    }
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (strncmp(base, "fuzz_replay_", 12) == 0) base += 12;
    snprintf(crash_path, sizeof crash_path, "fuzz-crash-%s.bin", base);
    install_crash_report();

    for (int i = optind; i < argc; i++)
        add_path(argv[i]);
    int64_t t0 = lb_clock_now_ns();
    for (size_t i = 0; i < n_seeds; i++) {
        snprintf(cur_label, sizeof cur_label, "corpus file %s", seeds[i].name);
        run_one(seeds[i].bytes, seeds[i].n);
    }

    buffer b = {.p = malloc((size_t)max_bytes), .cap = (size_t)max_bytes};
    if (b.p == NULL) die("out of memory for inputs of", "MAX_BYTES");
    lb_rng rng;
    lb_rng_seed(&rng, seed);
    for (long k = 0; k < count && n_seeds > 0; k++) {
        if (lb_rng_below(&rng, 8) == 0) {
            b.n = (size_t)lb_rng_below(&rng, (b.cap < 256 ? b.cap : 256) + 1);
            for (size_t i = 0; i < b.n; i++)
                b.p[i] = random_byte(&rng);
            snprintf(cur_label, sizeof cur_label, "input %ld (random bytes, seed %llu)", k,
                     (unsigned long long)seed);
        } else {
            const seed_file *s = &seeds[lb_rng_below(&rng, n_seeds)];
            b.n = s->n < b.cap ? s->n : b.cap;
            memcpy(b.p, s->bytes, b.n);
            int m = 1; /* half the inputs one mutation, a quarter two, ... up to 8 */
            while (m < 8 && lb_rng_below(&rng, 2))
                m++;
            for (int j = 0; j < m; j++)
                mutate(&rng, &b);
            snprintf(cur_label, sizeof cur_label, "input %ld (%s with %d mutations, seed %llu)", k,
                     s->name, m, (unsigned long long)seed);
        }
        run_one(b.p, b.n);
    }
    double s = (double)(lb_clock_now_ns() - t0) / 1e9;
    printf("fuzz replay %s: %zu corpus files and %ld derived inputs (seed %llu) in %.2f s\n", base,
           n_seeds, n_seeds ? count : 0L, (unsigned long long)seed, s);
    free(b.p);
    for (size_t i = 0; i < n_seeds; i++) {
        free(seeds[i].name);
        free(seeds[i].bytes);
    }
    free(seeds);
    return 0;
}
