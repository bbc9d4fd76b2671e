/* fuzz_sweep.c: the sweep matrix reader (sweep/matrix.h, lb_sweep_matrix_parse) on
 * arbitrary bytes, as YAML or JSON.
 *
 * Refused: the error is LB_ERR_USAGE, its message is one line that starts with the file's
 * name, and the half-built matrix still frees (matrix.h's promise after a failure).
 * Accepted: the shape matrix.h describes: a command of LB_SWEEP_COMMANDS, a name of at
 * most 127 characters, at most LB_SWEEP_MAX_AXES axes, none empty and none with a value
 * twice, no key both an option and an axis, n_cells the product of the axes' lengths; and
 * the first cells (and the last) build a label and arguments that spell out exactly the
 * options and the cell's axis values. Only MAX_CELLS cells an input are built, so a matrix
 * of 100,000 cells costs no more than one of four. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "sweep/matrix.h"

#define PATH      "fuzz.yaml"
#define MAX_CELLS 4

static bool is_command(const char *c) {
    return strcmp(c, "train") == 0 || strcmp(c, "load") == 0 || strcmp(c, "comm") == 0;
}

static void check_value(const lb_sweep_value *v) {
    FUZZ_CHECK(v->text != NULL && v->line >= 1);
    switch (v->kind) {
    case LB_SWEEP_VALUE_TEXT: FUZZ_CHECK(v->text[0] != '\0'); break;
    case LB_SWEEP_VALUE_TRUE: FUZZ_CHECK(strcmp(v->text, "true") == 0); break;
    case LB_SWEEP_VALUE_FALSE: FUZZ_CHECK(strcmp(v->text, "false") == 0); break;
    }
}

/* Options or axes: named as --help names options, each once, with their flag. */
static void check_keys(const lb_sweep_key *keys, size_t n, bool axes) {
    FUZZ_CHECK(n == 0 || keys != NULL);
    for (size_t i = 0; i < n; i++) {
        const lb_sweep_key *k = &keys[i];
        size_t len = strlen(k->key);
        FUZZ_CHECK(len > 0 && k->key[0] != '-');
        FUZZ_CHECK(strspn(k->key, "abcdefghijklmnopqrstuvwxyz0123456789-") == len);
        char flag[256];
        snprintf(flag, sizeof flag, "%s%s", len == 1 ? "-" : "--", k->key);
        if (len + 3 <= sizeof flag) FUZZ_CHECK(strcmp(k->flag, flag) == 0);
        FUZZ_CHECK(k->n_values >= 1 && k->values != NULL);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(keys[j].key, k->key) != 0);
        for (size_t v = 0; v < k->n_values; v++) {
            check_value(&k->values[v]);
            for (size_t w = 0; axes && w < v; w++)
                FUZZ_CHECK(strcmp(k->values[w].text, k->values[v].text) != 0);
        }
    }
}

/* Appends one value's arguments to want[] as lb_sweep_cell_args should give them. */
static size_t want_value(const char **want, size_t n, const lb_sweep_key *k,
                         const lb_sweep_value *v) {
    if (v->kind == LB_SWEEP_VALUE_FALSE) return n;
    want[n++] = k->flag;
    if (v->kind == LB_SWEEP_VALUE_TEXT) want[n++] = v->text;
    return n;
}

static void check_cell(const lb_sweep_matrix *m, size_t cell) {
    size_t idx[LB_SWEEP_MAX_AXES];
    lb_sweep_cell_index(m, cell, idx);
    char want_label[8192], label[8192], small[12];
    size_t len = 0;
    for (size_t a = 0; a < m->n_axes; a++) {
        FUZZ_CHECK(idx[a] < m->axes[a].n_values);
        if (len < sizeof want_label)
            len += (size_t)snprintf(want_label + len, sizeof want_label - len, "%s%s=%s",
                                    a ? "," : "", m->axes[a].key, m->axes[a].values[idx[a]].text);
    }
    if (m->n_axes == 0) len = (size_t)snprintf(want_label, sizeof want_label, "all");
    lb_sweep_cell_label(m, cell, label, sizeof label);
    if (len < sizeof want_label) FUZZ_CHECK(strcmp(label, want_label) == 0);
    lb_sweep_cell_label(m, cell, small, sizeof small); /* cut short, still a string */
    FUZZ_CHECK(strlen(small) < sizeof small && strncmp(small, label, strlen(small)) == 0);

    size_t cap = 1 + 2 * m->n_axes;
    for (size_t o = 0; o < m->n_options; o++)
        cap += 2 * m->options[o].n_values;
    const char **want = calloc(cap, sizeof *want);
    FUZZ_CHECK(want != NULL);
    size_t n_want = 0;
    for (size_t o = 0; o < m->n_options; o++)
        for (size_t v = 0; v < m->options[o].n_values; v++)
            n_want = want_value(want, n_want, &m->options[o], &m->options[o].values[v]);
    for (size_t a = 0; a < m->n_axes; a++)
        n_want = want_value(want, n_want, &m->axes[a], &m->axes[a].values[idx[a]]);

    char **argv = NULL;
    size_t argc = 0;
    lb_err err = {{0}};
    FUZZ_CHECK(lb_sweep_cell_args(m, cell, &argv, &argc, &err) == LB_OK);
    FUZZ_CHECK(argv != NULL && argc == n_want && argv[argc] == NULL);
    for (size_t i = 0; i < argc; i++)
        FUZZ_CHECK(strcmp(argv[i], want[i]) == 0);
    free(argv); /* the array only: its strings belong to m */
    free(want);
    FUZZ_CHECK(lb_sweep_cell_fingerprint(m, cell) == lb_sweep_cell_fingerprint(m, cell));
}

static void check_matrix(const lb_sweep_matrix *m) {
    FUZZ_CHECK(m->path != NULL && strcmp(m->path, PATH) == 0);
    FUZZ_CHECK(m->command != NULL && is_command(m->command));
    FUZZ_CHECK(m->name != NULL && m->name[0] != '\0' && strlen(m->name) <= 127);
    FUZZ_CHECK(strpbrk(m->name, ":/ \t") == NULL);
    for (const char *c = m->name; *c; c++)
        FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f);
    FUZZ_CHECK(m->repeats >= 1 && m->repeats <= 1000);
    FUZZ_CHECK(m->n_axes <= LB_SWEEP_MAX_AXES);
    check_keys(m->options, m->n_options, false);
    check_keys(m->axes, m->n_axes, true);
    size_t cells = 1;
    for (size_t a = 0; a < m->n_axes; a++) {
        cells *= m->axes[a].n_values;
        for (size_t o = 0; o < m->n_options; o++)
            FUZZ_CHECK(strcmp(m->axes[a].key, m->options[o].key) != 0);
    }
    FUZZ_CHECK(m->n_cells == cells && m->n_cells >= 1);
    for (size_t c = 0; c < m->n_cells && c < MAX_CELLS; c++)
        check_cell(m, c);
    if (m->n_cells > MAX_CELLS) check_cell(m, m->n_cells - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lb_sweep_matrix m;
    lb_err err = {{0}};
    lb_status st = lb_sweep_matrix_parse((const char *)data, size, PATH, &m, &err);
    if (st == LB_OK) {
        check_matrix(&m);
    } else {
        FUZZ_CHECK(st == LB_ERR_USAGE);
        FUZZ_CHECK(strncmp(err.msg, PATH ":", strlen(PATH ":")) == 0);
        FUZZ_CHECK(strchr(err.msg, '\n') == NULL && strchr(err.msg, '\r') == NULL);
    }
    lb_sweep_matrix_free(&m);
    FUZZ_CHECK(m.path == NULL && m.axes == NULL && m.options == NULL);
    return 0;
}
