/* fuzz_textfile.c: the ROUGE input reader (accuracy/textfile.h, lb_textfile_parse) on
 * arbitrary bytes, as predictions and as references.
 *
 * Accepted: the layout is one of the three, every text is valid UTF-8 without a NUL byte
 * (textfile.h refuses both), and a plain-text file has exactly one text per line, the same
 * for both roles. Refused: nothing is left and the message names the file. */
#include <string.h>

#include "accuracy/textfile.h"
#include "accuracy/utf8.h"
#include "fuzz.h"

static void check_texts(const lb_textfile *f) {
    FUZZ_CHECK(f->n == 0 || f->texts != NULL);
    for (size_t i = 0; i < f->n; i++) {
        const char *t = f->texts[i];
        FUZZ_CHECK(t != NULL);
        size_t n = strlen(t);
        for (size_t k = 0; k < n;) {
            uint32_t cp;
            k += lb_utf8_decode(t + k, n - k, &cp);
            FUZZ_CHECK(cp != LB_UTF8_INVALID);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    lb_textfile f[2];
    lb_status st[2];
    for (int role = 0; role < 2; role++) {
        lb_err err = {{0}};
        st[role] = lb_textfile_parse(buf, size, "fuzz.txt", (lb_textfile_role)role, &f[role], &err);
        if (st[role] != LB_OK) {
            FUZZ_CHECK(f[role].n == 0 && f[role].texts == NULL);
            FUZZ_CHECK(strstr(err.msg, "fuzz.txt") != NULL);
            continue;
        }
        check_texts(&f[role]);
        FUZZ_CHECK(strcmp(f[role].format, "jsonl") == 0 || strcmp(f[role].format, "json") == 0 ||
                   strcmp(f[role].format, "lines") == 0);
    }
    if (st[0] == LB_OK && strcmp(f[0].format, "lines") == 0) {
        /* a byte-order mark opens the file, not a line */
        size_t from = size >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0, lines = 0;
        for (size_t i = from; i < size; i++)
            lines += buf[i] == '\n';
        if (size > from && buf[size - 1] != '\n') lines++;
        FUZZ_CHECK(f[0].n == lines);
        FUZZ_CHECK(st[1] == LB_OK && f[1].n == f[0].n);
        for (size_t i = 0; i < f[0].n; i++)
            FUZZ_CHECK(strcmp(f[0].texts[i], f[1].texts[i]) == 0);
    }
    lb_textfile_free(&f[0]);
    lb_textfile_free(&f[1]);
    return 0;
}
