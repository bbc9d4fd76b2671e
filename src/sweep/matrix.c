/* matrix.c: the matrix file behind matrix.h, read with libyaml's document API (every node
 * carries its start mark, so every message can name the line). */
#include "sweep/matrix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/file.h"
#include "core/result.h"
#include "history/bench.h"

/* The sweep's name is its stored run's (and part of its runs' tags): at most what that holds. */
#define MAX_NAME (sizeof((lb_result *)NULL)->name - 1)

typedef struct {
    yaml_document_t *doc;
    const char *path;
    lb_err *err;
} reader;

static int line_of(const yaml_node_t *n) {
    return (int)n->start_mark.line + 1;
}

/* The key is shown with control characters as '?': a quoted key may hold "\n", and the
 * message is one line. */
static lb_status bad(const reader *R, const yaml_node_t *n, const char *key, const char *what) {
    char shown[192];
    snprintf(shown, sizeof shown, "%s", key);
    return lb_fail(R->err, LB_ERR_USAGE, "%s:%d: key '%s': %s", R->path, line_of(n),
                   lb_status_printable(shown), what);
}

static const char *scalar(const yaml_node_t *n) {
    return (const char *)n->data.scalar.value;
}

static bool plain(const yaml_node_t *n) {
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Whether a scalar holds a NUL ("\0" in a quoted YAML string): its text would end there,
 * and an option would take the part before it without a word. */
static bool holds_nul(const yaml_node_t *n) {
    return strlen(scalar(n)) != n->data.scalar.length;
}

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

/* A scalar value of an option; YAML's plain true/false (and yes/no, on/off) are flags. */
static lb_status read_value(const reader *R, const yaml_node_t *n, const char *key,
                            lb_sweep_value *v) {
    if (n->type != YAML_SCALAR_NODE)
        return bad(R, n, key, "expected a single value (a number, a word or true/false)");
    const char *t = scalar(n);
    if (holds_nul(n))
        return bad(R, n, key, "a NUL character (\\0) in a value: a command's argument ends there");
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "off", "Off"};
    v->kind = LB_SWEEP_VALUE_TEXT;
    for (size_t i = 0; plain(n) && i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(t, yes[i]) == 0) v->kind = LB_SWEEP_VALUE_TRUE;
        if (strcmp(t, no[i]) == 0) v->kind = LB_SWEEP_VALUE_FALSE;
    }
    if (v->kind == LB_SWEEP_VALUE_TEXT && t[0] == '\0')
        return bad(R, n, key, "an empty value: give one, or leave the key out");
    if (plain(n) && (strcmp(t, "~") == 0 || strcmp(t, "null") == 0))
        return bad(R, n, key, "a null value: give one, or leave the key out");
    v->text = strdup(v->kind == LB_SWEEP_VALUE_TRUE    ? "true"
                     : v->kind == LB_SWEEP_VALUE_FALSE ? "false"
                                                       : t);
    v->line = line_of(n);
    return v->text ? LB_OK : lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
}

/* Whether a and b read as one number (1, 01, 1.0, 1e0), as the commands' parsers read
 * them: base-10 integers compared as integers (two beyond a double's 53 bits stay apart),
 * else finite numbers of strtod. */
static bool same_number(const char *a, const char *b) {
    char *end_a = NULL, *end_b = NULL;
    errno = 0;
    long long ia = strtoll(a, &end_a, 10), ib = strtoll(b, &end_b, 10);
    if (errno == 0 && end_a != a && *end_a == '\0' && end_b != b && *end_b == '\0') return ia == ib;
    double da = strtod(a, &end_a), db = strtod(b, &end_b);
    return end_a != a && *end_a == '\0' && end_b != b && *end_b == '\0' && isfinite(da) && da == db;
}

/* The first character of an axis value that a cell's label cannot hold, or '\0': report
 * reads the values back from "a=1,b=2", and the label is one line of its runs' tags. */
static char label_breaker(const char *text) {
    for (const char *c = text; *c; c++)
        if (*c == ',' || *c == '=' || (unsigned char)*c < 0x20 || *c == 0x7f) return *c;
    return '\0';
}

/* An axis' new value v (values[0..n-1] before it): refused when its cell's label would be
 * ambiguous or when it is an earlier value again, as text or as a number. */
static lb_status check_axis_value(const reader *R, const yaml_node_t *n, const char *key,
                                  const lb_sweep_value *values, size_t n_values,
                                  const lb_sweep_value *v) {
    char what[512], c = label_breaker(v->text);
    if (c == ',' || c == '=') {
        snprintf(what, sizeof what,
                 "a '%c' in an axis value: the cell's label (axis=value,axis=value) would not "
                 "tell its values apart; give such a value under options, a sweep for each",
                 c);
        return bad(R, n, key, what);
    }
    if (c != '\0')
        return bad(R, n, key, "a control character in an axis value: a cell's label is one line");
    for (size_t i = 0; i < n_values; i++) {
        if (strcmp(values[i].text, v->text) == 0)
            return bad(R, n, key,
                       "a value given twice: the two cells would be one (give repeats for more "
                       "runs of a cell)");
        if (same_number(values[i].text, v->text)) {
            snprintf(what, sizeof what,
                     "a value given twice: '%.100s' is '%.100s' (line %d) as a number, so the two "
                     "cells would be one (give repeats for more runs of a cell)",
                     v->text, values[i].text, values[i].line);
            return bad(R, n, key, what);
        }
    }
    return LB_OK;
}

/* A mapping of option names to a value (options) or to a list of values (axes). */
static lb_status read_keys(const reader *R, const yaml_node_t *map, const char *section, bool axes,
                           lb_sweep_key **out, size_t *n_out) {
    if (map->type != YAML_MAPPING_NODE)
        return bad(R, map, section,
                   axes ? "expected a mapping of option names to lists of values"
                        : "expected a mapping of option names to values");
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    *out = calloc(n ? n : 1, sizeof **out);
    if (*out == NULL) return lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
    *n_out = 0;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(R->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(R->doc, p->value);
        char full[192];
        if (k->type != YAML_SCALAR_NODE) return bad(R, k, section, "a key must be an option name");
        snprintf(full, sizeof full, "%s.%s", section, scalar(k));
        const char *name = scalar(k);
        if (name[0] == '\0' || name[0] == '-' || holds_nul(k) ||
            strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(name))
            return bad(R, k, full,
                       "an option name is written as in --help without the leading dashes "
                       "(lower-case letters, digits, '-')");
        if (strcmp(name, "db") == 0 || strcmp(name, "json") == 0)
            return bad(R, k, full, "the sweep sets this option itself (give --db to the sweep)");
        if (strcmp(name, "help") == 0 || strcmp(name, "h") == 0)
            return bad(R, k, full,
                       "a cell would print its command's help and store no run (see "
                       "'llmbench COMMAND --help' for its options)");
        for (size_t i = 0; i < *n_out; i++)
            if (strcmp((*out)[i].key, name) == 0) return bad(R, k, full, "given twice");
        lb_sweep_key *key = &(*out)[(*n_out)++];
        key->key = strdup(name);
        key->line = line_of(k);
        size_t flag_bytes = strlen(name) + 3;
        key->flag = malloc(flag_bytes);
        if (key->key == NULL || key->flag == NULL)
            return lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
        snprintf(key->flag, flag_bytes, "%s%s", name[1] ? "--" : "-", name); /* b: -b */
        if (v->type == YAML_SEQUENCE_NODE) {
            size_t nv = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            if (nv == 0)
                return bad(R, v, full,
                           axes ? "an empty axis: give it at least one value"
                                : "an empty list: give at least one value, or leave the key out");
            key->values = calloc(nv, sizeof *key->values);
            if (key->values == NULL)
                return lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                const yaml_node_t *item = yaml_document_get_node(R->doc, *it);
                LB_TRY(read_value(R, item, full, &key->values[key->n_values++]));
                if (axes)
                    LB_TRY(check_axis_value(R, item, full, key->values, key->n_values - 1,
                                            &key->values[key->n_values - 1]));
            }
        } else if (axes) {
            return bad(R, v, full, "an axis is a list of values, for example [1, 2, 4]");
        } else {
            key->values = calloc(1, sizeof *key->values);
            if (key->values == NULL)
                return lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
            LB_TRY(read_value(R, v, full, &key->values[0]));
            key->n_values = 1;
        }
    }
    return LB_OK;
}

static bool is_word_of(const char *words, const char *w) {
    size_t len = strlen(w);
    for (const char *p = words; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, w, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static lb_status read_top(const reader *R, const yaml_node_t *root, lb_sweep_matrix *m) {
    if (root->type != YAML_MAPPING_NODE)
        return lb_fail(R->err, LB_ERR_USAGE,
                       "%s:%d: expected a mapping with name, command, options, axes, repeats",
                       R->path, line_of(root));
    const yaml_node_t *name_node = NULL, *command_node = NULL, *repeats_node = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(R->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(R->doc, p->value);
        if (k->type != YAML_SCALAR_NODE || holds_nul(k))
            return bad(R, k, "?", "a key must be a word");
        const char *key = scalar(k);
        if (strcmp(key, "name") == 0 || strcmp(key, "command") == 0) {
            if (v->type != YAML_SCALAR_NODE || scalar(v)[0] == '\0' || holds_nul(v) ||
                (plain(v) && (strcmp(scalar(v), "~") == 0 || strcmp(scalar(v), "null") == 0)))
                return bad(R, v, key, "expected a non-empty word");
            char **slot = key[0] == 'n' ? &m->name : &m->command;
            if (*slot != NULL) return bad(R, k, key, "given twice");
            if (key[0] == 'n') {
                name_node = v;
                bool control = false;
                for (const char *c = scalar(v); *c; c++)
                    control |= (unsigned char)*c < 0x20 || *c == 0x7f;
                if (strpbrk(scalar(v), ":/ \t") != NULL || control)
                    return bad(R, v, key,
                               "a sweep name has no ':', '/', blanks or control characters");
                if (strlen(scalar(v)) > MAX_NAME)
                    return lb_fail(R->err, LB_ERR_USAGE,
                                   "%s:%d: key 'name': a sweep name of at most %zu characters "
                                   "(its stored run's name)",
                                   R->path, line_of(v), MAX_NAME);
                if (strspn(scalar(v), "0123456789,") == strlen(scalar(v)))
                    return bad(R, v, key,
                               "a sweep name of digits and commas only would read as run ids "
                               "in compare and report: give it a letter");
            } else {
                command_node = v;
            }
            if ((*slot = strdup(scalar(v))) == NULL)
                return lb_fail(R->err, LB_ERR_NOMEM, "no memory to read %s", R->path);
        } else if (strcmp(key, "repeats") == 0) {
            if (repeats_node != NULL) return bad(R, k, key, "given twice");
            repeats_node = v;
            char *end = NULL;
            errno = 0;
            long long r = v->type == YAML_SCALAR_NODE ? strtoll(scalar(v), &end, 10) : 0;
            if (v->type != YAML_SCALAR_NODE || errno != 0 || end == scalar(v) || *end != '\0' ||
                r < 1 || r > 1000)
                return bad(R, v, key, "expected an integer from 1 to 1000");
            m->repeats = r;
        } else if (strcmp(key, "options") == 0) {
            if (m->options != NULL) return bad(R, k, key, "given twice");
            LB_TRY(read_keys(R, v, "options", false, &m->options, &m->n_options));
        } else if (strcmp(key, "axes") == 0) {
            if (m->axes != NULL) return bad(R, k, key, "given twice");
            LB_TRY(read_keys(R, v, "axes", true, &m->axes, &m->n_axes));
        } else {
            return bad(R, k, key, "unknown key (expected name, command, repeats, options, axes)");
        }
    }
    if (name_node == NULL)
        return lb_fail(R->err, LB_ERR_USAGE, "%s: key 'name' is missing (the sweep's name)",
                       R->path);
    if (command_node == NULL)
        return lb_fail(R->err, LB_ERR_USAGE, "%s: key 'command' is missing (one of %s)", R->path,
                       LB_SWEEP_COMMANDS);
    if (!is_word_of(LB_SWEEP_COMMANDS, m->command))
        return bad(R, command_node, "command",
                   "not a command a sweep can run (one of " LB_SWEEP_COMMANDS ")");
    for (size_t a = 0; a < m->n_axes; a++)
        for (size_t o = 0; o < m->n_options; o++)
            if (strcmp(m->axes[a].key, m->options[o].key) == 0)
                return lb_fail(R->err, LB_ERR_USAGE,
                               "%s:%d: key 'axes.%s': also under options (line %d): give it in "
                               "one place",
                               R->path, m->axes[a].line, m->axes[a].key, m->options[o].line);
    if (m->n_axes > LB_SWEEP_MAX_AXES)
        return lb_fail(R->err, LB_ERR_USAGE, "%s:%d: key 'axes': over %d axes", R->path,
                       m->axes[LB_SWEEP_MAX_AXES].line, LB_SWEEP_MAX_AXES);
    m->n_cells = 1;
    for (size_t a = 0; a < m->n_axes; a++) {
        m->n_cells *= m->axes[a].n_values;
        if (m->n_cells > 100000)
            return lb_fail(R->err, LB_ERR_USAGE, "%s:%d: key 'axes.%s': over 100000 cells", R->path,
                           m->axes[a].line, m->axes[a].key);
    }
    return LB_OK;
}

lb_status lb_sweep_matrix_parse(const char *text, size_t len, const char *path, lb_sweep_matrix *m,
                                lb_err *err) {
    memset(m, 0, sizeof *m);
    m->repeats = 1;
    m->path = dup_or_null(path);
    if (m->path == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory to read %s", path);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return lb_fail(err, LB_ERR_NOMEM, "no memory for libyaml");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        lb_status st = lb_fail(err, LB_ERR_USAGE, "%s:%d: not valid YAML or JSON: %s", path,
                               (int)parser.problem_mark.line + 1,
                               parser.problem ? parser.problem : "unreadable");
        yaml_parser_delete(&parser);
        return st;
    }
    reader R = {.doc = &doc, .path = path, .err = err};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    lb_status st = root == NULL ? lb_fail(err, LB_ERR_USAGE, "%s: the file is empty", path)
                                : read_top(&R, root, m);
    yaml_document_delete(&doc);
    /* a second document would be left unread: one matrix a file */
    if (st == LB_OK && yaml_parser_load(&parser, &doc)) {
        root = yaml_document_get_root_node(&doc);
        if (root != NULL)
            st = lb_fail(err, LB_ERR_USAGE,
                         "%s:%d: a second document: a sweep file holds one matrix", path,
                         line_of(root));
        yaml_document_delete(&doc);
    } else if (st == LB_OK) {
        st = lb_fail(err, LB_ERR_USAGE, "%s:%d: not valid YAML or JSON: %s", path,
                     (int)parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "unreadable");
    }
    yaml_parser_delete(&parser);
    return st;
}

lb_status lb_sweep_matrix_read(const char *path, lb_sweep_matrix *m, lb_err *err) {
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    LB_TRY(lb_file_read(path, &text, &len, err));
    lb_status st = lb_sweep_matrix_parse(text, len, path, m, err);
    free(text);
    return st;
}

static void free_keys(lb_sweep_key *keys, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(keys[i].key);
        free(keys[i].flag);
        for (size_t v = 0; v < keys[i].n_values; v++)
            free(keys[i].values[v].text);
        free(keys[i].values);
    }
    free(keys);
}

void lb_sweep_matrix_free(lb_sweep_matrix *m) {
    if (m == NULL) return;
    free(m->path);
    free(m->name);
    free(m->command);
    free_keys(m->options, m->n_options);
    free_keys(m->axes, m->n_axes);
    memset(m, 0, sizeof *m);
}

void lb_sweep_cell_index(const lb_sweep_matrix *m, size_t cell, size_t *idx) {
    for (size_t a = m->n_axes; a-- > 0;) {
        idx[a] = cell % m->axes[a].n_values;
        cell /= m->axes[a].n_values;
    }
}

size_t lb_sweep_cell_label(const lb_sweep_matrix *m, size_t cell, char *out, size_t out_bytes) {
    if (m->n_axes == 0) return (size_t)snprintf(out, out_bytes, "all");
    size_t idx[LB_SWEEP_MAX_AXES], len = 0;
    lb_sweep_cell_index(m, cell, idx);
    if (out_bytes > 0) out[0] = '\0';
    for (size_t a = 0; a < m->n_axes; a++) {
        bool room = len < out_bytes;
        len += (size_t)snprintf(room ? out + len : NULL, room ? out_bytes - len : 0, "%s%s=%s",
                                a ? "," : "", m->axes[a].key, m->axes[a].values[idx[a]].text);
    }
    return len;
}

static size_t push_value(const char **argv, size_t n, const lb_sweep_key *k,
                         const lb_sweep_value *v) {
    if (v->kind == LB_SWEEP_VALUE_FALSE) return n;
    argv[n++] = k->flag;
    if (v->kind == LB_SWEEP_VALUE_TEXT) argv[n++] = v->text;
    return n;
}

lb_status lb_sweep_cell_args(const lb_sweep_matrix *m, size_t cell, char ***argv, size_t *argc,
                             lb_err *err) {
    size_t cap = 1 + 2 * m->n_axes;
    for (size_t o = 0; o < m->n_options; o++)
        cap += 2 * m->options[o].n_values;
    const char **a = calloc(cap, sizeof *a);
    if (a == NULL) return lb_fail(err, LB_ERR_NOMEM, "no memory for the arguments of a cell");
    size_t n = 0, idx[LB_SWEEP_MAX_AXES];
    for (size_t o = 0; o < m->n_options; o++)
        for (size_t v = 0; v < m->options[o].n_values; v++)
            n = push_value(a, n, &m->options[o], &m->options[o].values[v]);
    lb_sweep_cell_index(m, cell, idx);
    for (size_t x = 0; x < m->n_axes; x++)
        n = push_value(a, n, &m->axes[x], &m->axes[x].values[idx[x]]);
    a[n] = NULL;
    *argv = (char **)a;
    *argc = n;
    return LB_OK;
}

uint64_t lb_sweep_cell_fingerprint(const lb_sweep_matrix *m, size_t cell) {
    uint64_t h = lb_bench_fnv(LB_FNV_OFFSET, m->command);
    char **argv = NULL;
    size_t argc = 0;
    if (lb_sweep_cell_args(m, cell, &argv, &argc, NULL) != LB_OK) return h;
    for (size_t i = 0; i < argc; i++)
        h = lb_bench_fnv(h, argv[i]);
    free(argv);
    return h;
}
