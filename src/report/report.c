/* report.c: the HTML and Markdown report (report.h).
 *
 * Both documents are built in memory (open_memstream) section by section; they and the
 * charts are written into a staging folder and renamed into place only when all are whole.
 * Findings are sentences computed from the same numbers the tables show. */
#include "report/report.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/file.h"
#include "core/signals.h"
#include "core/stats.h"
#include "history/bench.h"
#include "history/history.h"
#include "report/svg.h"

#define MAX_LINES  8   /* lines in one chart */
#define MAX_BARS   256 /* bars in one chart */
#define MAX_POINTS 256 /* rates on the QPS chart */
#define MAX_BENCH  4

lb_report_params lb_report_default_params(void) {
    return (lb_report_params){
        .out_dir = "report", .title = "llmbench report", .threshold_pct = 3.0};
}

typedef struct {
    FILE *html, *md, *find_html, *find_md;
    char *html_buf, *md_buf, *find_html_buf, *find_md_buf;
    size_t html_len, md_len, find_html_len, find_md_len;
    const char *dir;
    const char *const *sweep_of; /* lb_report_params' */
    char (*names)[256];          /* per group: its label as shown, "mon: batch=8" for a cell */
    int n_charts;
    size_t n_findings;
    lb_status st;
    lb_err *err;
} doc;

/* ---- files ---- */

static lb_status write_in(const char *dir, const char *name, const char *data, size_t len,
                          lb_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lb_file_write_atomic(path, data, len, err);
}

/* ---- text helpers ---- */

static void esc(FILE *f, const char *t) {
    lb_svg_escape(f, t);
}

/* Stored text (names, labels, the title) as Markdown that shows it as it is, in a table
 * cell or a line: '|' would end the cell, a line break the row, '<' and '&' open raw HTML
 * (a run named <script> would run in a renderer that passes HTML through), '`' a code
 * span, '*' emphasis, '\' would undo the escape that follows it; '_' opens emphasis only
 * at a word's edge ("tokens_per_s" stays as it is), and a link or an image needs "](" or
 * "][" (a label's "[batch=8]" stays). Other marks ('#', '>', '-') act only at a line's
 * start, where the text never stands. */
static void md_text(FILE *f, const char *t) {
    for (const char *p = t ? t : ""; *p; p++) {
        bool edge = p == t || !isalnum((unsigned char)p[-1]) || !isalnum((unsigned char)p[1]);
        if (*p == '\n' || *p == '\r')
            fputc(' ', f);
        else if (strchr("|<&`*\\", *p) != NULL || (*p == '_' && edge) ||
                 (*p == ']' && (p[1] == '(' || p[1] == '[')))
            fprintf(f, "\\%c", *p);
        else
            fputc(*p, f);
    }
}

static void fmt_value(char *buf, size_t cap, double v, const char *unit) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "-");
        return;
    }
    if (strcmp(unit, "bytes") == 0) {
        const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        int i = 0;
        while (fabs(v) >= 1024 && i < 4)
            v /= 1024, i++;
        snprintf(buf, cap, "%.3g %s", v, u[i]);
    } else {
        snprintf(buf, cap, "%.4g %s", v, unit);
    }
}

static const char *metric_unit(const lb_result *r, const char *name) {
    for (size_t i = 0; i < r->n_metrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0) return r->metrics[i].unit;
    return "";
}

/* Median, min and max of metric over the group's ok runs; n = ok runs that have it. A run
 * that failed or was interrupted measured part of its work, or a broken one: it is named in
 * a finding and left out of every figure. */
typedef struct {
    double median, min, max, std;
    size_t n;
    const char *unit;
} gstat;

static gstat group_stat(const lb_run_group *g, const char *metric) {
    gstat s = {NAN, NAN, NAN, NAN, 0, ""};
    double *v = malloc((g->n ? g->n : 1) * sizeof *v);
    for (size_t i = 0; v != NULL && i < g->n; i++) {
        if (g->runs[i]->status != LB_RUN_OK) continue;
        double x = lb_result_metric(g->runs[i], metric);
        if (!isfinite(x)) continue;
        v[s.n++] = x;
        s.unit = metric_unit(g->runs[i], metric);
    }
    if (s.n > 0) {
        lb_stats_summary sum = lb_stats_summarize(v, s.n);
        s.median = sum.median, s.min = sum.min, s.max = sum.max, s.std = sum.std;
    }
    free(v);
    return s;
}

static const char *group_kind(const lb_run_group *g) {
    return g->n ? g->runs[0]->kind : "";
}

static size_t ok_runs(const lb_run_group *g) {
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++)
        n += g->runs[i]->status == LB_RUN_OK;
    return n;
}

/* The group's first run that ended ok, or NULL. */
static const lb_result *first_ok(const lb_run_group *g) {
    for (size_t i = 0; i < g->n; i++)
        if (g->runs[i]->status == LB_RUN_OK) return g->runs[i];
    return NULL;
}

/* ---- findings and charts ---- */

static void finding(doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void finding(doc *d, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fputs("<li>", d->find_html);
    esc(d->find_html, text);
    fputs("</li>\n", d->find_html);
    fputs("- ", d->find_md);
    md_text(d->find_md, text);
    fputs("\n", d->find_md);
    d->n_findings++;
}

static FILE *chart_open(char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    return open_memstream(buf, len);
}

/* Closes f (the memstream over *bufp, *lenp) and places its chart. A chart that draws
 * `drawn` of `total` items (configurations, rates) gets a caption line saying so under it;
 * note (NULL: none), a sentence on what else it leaves out, follows in the same line. */
static void chart_close(doc *d, FILE *f, char **bufp, size_t *lenp, const char *title, size_t drawn,
                        size_t total, const char *items, const char *note) {
    fclose(f);
    char *buf = *bufp;
    size_t len = *lenp;
    char name[32], caption[512] = "";
    snprintf(name, sizeof name, "chart-%d.svg", ++d->n_charts);
    if (drawn < total)
        snprintf(caption, sizeof caption, "%zu of %zu %s drawn.", drawn, total, items);
    if (note && note[0])
        snprintf(caption + strlen(caption), sizeof caption - strlen(caption), "%s%s",
                 caption[0] ? " " : "", note);
    fprintf(d->html, "<figure>\n%s", buf ? buf : "");
    if (caption[0]) fprintf(d->html, "<figcaption>%s</figcaption>\n", caption);
    fputs("</figure>\n", d->html);
    fprintf(d->md, "![%s](%s)\n\n", title, name);
    if (caption[0]) fprintf(d->md, "%s\n\n", caption);
    if (d->st == LB_OK) d->st = write_in(d->dir, name, buf ? buf : "", len, d->err);
    free(buf);
}

static void section(doc *d, const char *title) {
    fputs("<h2>", d->html);
    esc(d->html, title);
    fputs("</h2>\n", d->html);
    fprintf(d->md, "## %s\n\n", title);
}

static void para(doc *d, const char *text) {
    fputs("<p>", d->html);
    esc(d->html, text);
    fputs("</p>\n", d->html);
    fprintf(d->md, "%s\n\n", text);
}

/* Bars of metric per group of kind, whiskers min..max. Returns false when no group has it. */
static bool bars_of(doc *d, const lb_run_set *set, const char *kind, const char *metric,
                    const char *what) {
    size_t n = 0, total = 0;
    const char *labels[MAX_BARS];
    double v[MAX_BARS], lo[MAX_BARS], hi[MAX_BARS];
    const char *unit = "";
    for (size_t g = 0; g < set->n_groups; g++) {
        if (strcmp(group_kind(&set->groups[g]), kind) != 0) continue;
        gstat s = group_stat(&set->groups[g], metric);
        if (s.n == 0 || total++ >= MAX_BARS) continue;
        labels[n] = d->names[g];
        v[n] = s.median, lo[n] = s.min, hi[n] = s.max;
        unit = s.unit;
        n++;
    }
    if (n == 0) return false;
    char title[256], ylab[128];
    snprintf(title, sizeof title, "%s: %s per configuration (median; whiskers: min-max of repeats)",
             what, metric);
    snprintf(ylab, sizeof ylab, "%s (%s)", metric, unit);
    char *buf;
    size_t len;
    FILE *f = chart_open(&buf, &len);
    lb_svg_bars(f, title, ylab, labels, v, lo, hi, n);
    chart_close(d, f, &buf, &len, title, n, total, "configurations", NULL);
    return true;
}

#define CDF_POINTS  500  /* a CDF is drawn through this many quantiles at most */
#define LINE_POINTS 5000 /* a longer series is drawn every k-th value */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One line per group (its first ok run) of series name against its index, or its CDF. A
 * caption says how much of the longest series thinning left out. */
static void series_lines(doc *d, const lb_run_set *set, const char *kind, const char *series,
                         const char *title, const char *x_label, bool cdf) {
    lb_svg_line lines[MAX_LINES];
    double *xs[MAX_LINES] = {0}, *ys[MAX_LINES] = {0};
    size_t n = 0, total = 0, longest = 0, longest_drawn = 0;
    const char *unit = "";
    for (size_t g = 0; g < set->n_groups; g++) {
        const lb_run_group *grp = &set->groups[g];
        if (strcmp(group_kind(grp), kind) != 0 || first_ok(grp) == NULL) continue;
        const lb_series *s = lb_result_find_series(first_ok(grp), series);
        if (s == NULL || s->n == 0 || total++ >= MAX_LINES) continue;
        xs[n] = malloc(s->n * sizeof(double));
        ys[n] = malloc(s->n * sizeof(double));
        if (xs[n] == NULL || ys[n] == NULL) {
            free(xs[n]), free(ys[n]);
            break;
        }
        size_t m = 0,
               stride = !cdf && s->n > LINE_POINTS ? (s->n + LINE_POINTS - 1) / LINE_POINTS : 1;
        for (size_t i = 0; i < s->n; i += stride) {
            if (cdf && !isfinite(s->values[i])) continue;
            xs[n][m] = cdf ? s->values[i] : (double)i;
            ys[n][m++] = s->values[i];
        }
        if (cdf) { /* sorted values against the fraction at or below them */
            qsort(xs[n], m, sizeof(double), cmp_double);
            size_t k = m < CDF_POINTS ? m : CDF_POINTS;
            for (size_t i = 0; i < k; i++) { /* the (j+1)/m quantile, j spread evenly */
                size_t j =
                    k == m ? i : (size_t)((double)i * (double)(m - 1) / (double)(k - 1) + 0.5);
                xs[n][i] = xs[n][j];
                ys[n][i] = (double)(j + 1) / (double)m;
            }
            m = k;
        }
        if (m < s->n && s->n > longest) longest = s->n, longest_drawn = m;
        unit = s->unit;
        lines[n] = (lb_svg_line){d->names[g], xs[n], ys[n], m};
        n++;
    }
    if (n > 0) {
        char ylab[128], xlab[128];
        snprintf(ylab, sizeof ylab, cdf ? "fraction of queries" : "%s (%s)", series, unit);
        snprintf(xlab, sizeof xlab, cdf ? "%s (%s)" : "%s", cdf ? series : x_label, unit);
        char note[160] = "";
        if (longest > 0)
            snprintf(note, sizeof note, "%s: %zu of its %zu values drawn%s.",
                     cdf ? "The largest CDF" : "The longest line", longest_drawn, longest,
                     cdf ? " (as quantiles)" : " (every k-th)");
        char *buf;
        size_t len;
        FILE *f = chart_open(&buf, &len);
        lb_svg_lines(f, title, xlab, ylab, lines, n, NULL, 0, false);
        chart_close(d, f, &buf, &len, title, n, total, "configurations", note);
    }
    for (size_t i = 0; i < n; i++)
        free(xs[i]), free(ys[i]);
}

static bool any_has(const lb_run_set *set, const char *kind, const char *metric) {
    for (size_t g = 0; g < set->n_groups; g++)
        if (strcmp(group_kind(&set->groups[g]), kind) == 0 &&
            group_stat(&set->groups[g], metric).n > 0)
            return true;
    return false;
}

/* Key metrics table of one kind: the columns some configuration has. The runs column counts
 * every run and, where some did not end ok, the ok ones the figures are of; a configuration
 * with no ok run says so in place of figures. */
static void metrics_table(doc *d, const lb_run_set *set, const char *kind) {
    size_t n_all = 0, n_keys = 0;
    const lb_key_metric *all = lb_bench_key_metrics(kind, &n_all);
    lb_key_metric *keys = malloc((n_all ? n_all : 1) * sizeof *keys);
    if (keys == NULL) {
        if (d->st == LB_OK) d->st = lb_fail(d->err, LB_ERR_NOMEM, "no memory for the report");
        return;
    }
    for (size_t k = 0; k < n_all; k++)
        if (any_has(set, kind, all[k].metric)) keys[n_keys++] = all[k];
    fputs("<table><tr><th>configuration</th><th>runs</th>", d->html);
    fputs("| configuration | runs |", d->md);
    for (size_t k = 0; k < n_keys; k++) {
        fprintf(d->html, "<th>%s<br><small>median (min-max)</small></th>", keys[k].metric);
        fprintf(d->md, " %s median (min-max) |", keys[k].metric);
    }
    fputs("</tr>\n", d->html);
    fputs("\n|---|---|", d->md);
    for (size_t k = 0; k < n_keys; k++)
        fputs("---|", d->md);
    fputs("\n", d->md);
    for (size_t g = 0; g < set->n_groups; g++) {
        const lb_run_group *grp = &set->groups[g];
        if (strcmp(group_kind(grp), kind) != 0) continue;
        size_t ok = ok_runs(grp);
        char runs[64];
        if (ok == grp->n)
            snprintf(runs, sizeof runs, "%zu", grp->n);
        else
            snprintf(runs, sizeof runs, "%zu (%zu ok)", grp->n, ok);
        fputs("<tr><td>", d->html);
        esc(d->html, d->names[g]);
        fprintf(d->html, "</td><td>%s</td>", runs);
        fputs("| ", d->md);
        md_text(d->md, d->names[g]);
        fprintf(d->md, " | %s |", runs);
        for (size_t k = 0; k < n_keys; k++) {
            gstat s = group_stat(grp, keys[k].metric);
            char med[48], lo[48], hi[48], cell[160];
            fmt_value(med, sizeof med, s.median, s.unit);
            fmt_value(lo, sizeof lo, s.min, s.unit);
            fmt_value(hi, sizeof hi, s.max, s.unit);
            if (ok == 0)
                snprintf(cell, sizeof cell, "no ok run");
            else if (s.n > 1)
                snprintf(cell, sizeof cell, "%s (%s - %s)", med, lo, hi);
            else
                snprintf(cell, sizeof cell, "%s", med);
            fputs("<td>", d->html);
            esc(d->html, cell);
            fputs("</td>", d->html);
            fputs(" ", d->md);
            md_text(d->md, cell);
            fputs(" |", d->md);
        }
        fputs("</tr>\n", d->html);
        fputs("\n", d->md);
    }
    fputs("</table>\n", d->html);
    fputs("\n", d->md);
    free(keys);
}

/* "a=1,b=2": the value of axis in a cell label into out; false when absent. */
static bool label_value(const char *label, const char *axis, char *out, size_t cap) {
    size_t alen = strlen(axis);
    for (const char *p = label; p && *p;) {
        if (strncmp(p, axis, alen) == 0 && p[alen] == '=') {
            const char *v = p + alen + 1, *end = strchr(v, ',');
            size_t n = end ? (size_t)(end - v) : strlen(v);
            snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
            return true;
        }
        p = strchr(p, ',');
        if (p) p++;
    }
    return false;
}

/* The label with axis removed: what must match for two cells to differ only in axis. */
static void label_without(const char *label, const char *axis, char *out, size_t cap) {
    size_t alen = strlen(axis), len = 0;
    out[0] = '\0';
    for (const char *p = label; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (!(strncmp(p, axis, alen) == 0 && p[alen] == '=') && len + n + 2 < cap) {
            len += (size_t)snprintf(out + len, cap - len, "%s%.*s", len ? "," : "", (int)n, p);
        }
        p = end ? end + 1 : NULL;
    }
}

/* The sweep group g is a cell of (lb_report_params' sweep_of), NULL for none. */
static const char *sweep_of(const doc *d, size_t g) {
    return d->sweep_of ? d->sweep_of[g] : NULL;
}

static bool same_sweep(const doc *d, size_t g, size_t h) {
    const char *a = sweep_of(d, g), *b = sweep_of(d, h);
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The findings of axis_findings for the sweep whose first cell is group f: its axes are
 * those of f's label, their first values f's, and only its own cells are paired. */
static void sweep_axis_findings(doc *d, const lb_run_set *set, const lb_key_metric *m,
                                const char *kind, size_t f) {
    char axes[16][64], pre[140] = ""; /* pre: "mon: " before an axis, as the cells are shown */
    if (sweep_of(d, f)) snprintf(pre, sizeof pre, "%.127s: ", sweep_of(d, f));
    size_t n_axes = 0;
    const char *first = set->groups[f].label;
    for (const char *p = first; p && *p && n_axes < 16;) {
        const char *eq = strchr(p, '=');
        if (eq == NULL) break;
        snprintf(axes[n_axes++], 64, "%.*s", (int)(eq - p), p);
        p = strchr(p, ',');
        if (p) p++;
    }
    const char *mem = strcmp(kind, "train") == 0 ? "peak_device_bytes" : NULL;
    for (size_t a = 0; a < n_axes; a++) {
        char base[128];
        if (!label_value(first, axes[a], base, sizeof base)) continue;
        char seen[16][128];
        size_t n_seen = 0;
        for (size_t g = f; g < set->n_groups; g++) {
            char v[128];
            if (!same_sweep(d, g, f) || !label_value(set->groups[g].label, axes[a], v, sizeof v) ||
                strcmp(v, base) == 0)
                continue;
            bool dup = false;
            for (size_t s = 0; s < n_seen; s++)
                dup |= strcmp(seen[s], v) == 0;
            if (dup || n_seen >= 16) continue;
            snprintf(seen[n_seen++], 128, "%s", v);
            double log_sum = 0, mem_sum = 0;
            size_t pairs = 0, mem_pairs = 0;
            for (size_t x = 0; x < set->n_groups; x++) {
                char vx[128], rest_x[256];
                if (!same_sweep(d, x, f) ||
                    !label_value(set->groups[x].label, axes[a], vx, sizeof vx) || strcmp(vx, v))
                    continue;
                label_without(set->groups[x].label, axes[a], rest_x, sizeof rest_x);
                for (size_t y = 0; y < set->n_groups; y++) {
                    char vy[128], rest_y[256];
                    if (!same_sweep(d, y, f) ||
                        !label_value(set->groups[y].label, axes[a], vy, sizeof vy) ||
                        strcmp(vy, base))
                        continue;
                    label_without(set->groups[y].label, axes[a], rest_y, sizeof rest_y);
                    if (strcmp(rest_x, rest_y) != 0) continue;
                    gstat sx = group_stat(&set->groups[x], m->metric);
                    gstat sy = group_stat(&set->groups[y], m->metric);
                    if (sx.n && sy.n && sx.median > 0 && sy.median > 0) {
                        log_sum += log(sx.median / sy.median);
                        pairs++;
                    }
                    gstat mx = mem ? group_stat(&set->groups[x], mem) : (gstat){0};
                    gstat my = mem ? group_stat(&set->groups[y], mem) : (gstat){0};
                    if (mx.n && my.n) {
                        mem_sum += mx.median - my.median;
                        mem_pairs++;
                    }
                }
            }
            if (pairs == 0) continue;
            double ratio = exp(log_sum / (double)pairs);
            char memtext[128] = "";
            if (mem_pairs) {
                char amount[48];
                double diff = mem_sum / (double)mem_pairs;
                fmt_value(amount, sizeof amount, fabs(diff), "bytes");
                snprintf(memtext, sizeof memtext, " and %s %s of device memory",
                         diff <= 0 ? "saves" : "needs", amount);
            }
            if ((ratio >= 1.0) == m->higher_is_better)
                finding(d,
                        "%s%s=%s gives %.2fx the %s of %s%s=%s%s (geometric mean over %zu "
                        "matched configurations).",
                        pre, axes[a], v, ratio, m->metric, pre, axes[a], base, memtext, pairs);
            else
                finding(d,
                        "%s%s=%s costs %.0f%% %s against %s%s=%s%s (geometric mean over %zu "
                        "matched configurations).",
                        pre, axes[a], v, 100.0 * fabs(1.0 - ratio), m->metric, pre, axes[a], base,
                        memtext, pairs);
        }
    }
}

/* Sweep findings, per sweep of the set: for each axis and each of its values after the
 * first, the geometric mean ratio of the first key metric over cells that differ only in
 * that axis, and the change of peak memory. */
static void axis_findings(doc *d, const lb_run_set *set, const char *kind) {
    const lb_key_metric *m = lb_history_metric(kind, NULL);
    for (size_t f = 0; m != NULL && set->sweep && f < set->n_groups; f++) {
        bool first = true; /* f is its sweep's first cell */
        for (size_t g = 0; g < f && first; g++)
            first = !same_sweep(d, g, f);
        if (first) sweep_axis_findings(d, set, m, kind, f);
    }
}

static void kind_findings(doc *d, const lb_run_set *set, const char *kind) {
    const lb_key_metric *m = lb_history_metric(kind, NULL);
    if (m == NULL) return;
    const char *best = NULL, *worst = NULL;
    double bv = NAN, wv = NAN, noisiest = 0;
    const char *noisy_label = NULL, *unit = "";
    for (size_t g = 0; g < set->n_groups; g++) {
        if (strcmp(group_kind(&set->groups[g]), kind) != 0) continue;
        gstat s = group_stat(&set->groups[g], m->metric);
        if (s.n == 0) continue;
        unit = s.unit;
        bool better = best == NULL || (m->higher_is_better ? s.median > bv : s.median < bv);
        bool worse = worst == NULL || (m->higher_is_better ? s.median < wv : s.median > wv);
        if (better) best = d->names[g], bv = s.median;
        if (worse) worst = d->names[g], wv = s.median;
        if (s.n > 1 && s.median > 0 && s.std / s.median > noisiest) /* no ratio to a zero */
            noisiest = s.std / s.median, noisy_label = d->names[g];
    }
    if (best == NULL) return;
    char a[48], b[48];
    fmt_value(a, sizeof a, bv, unit);
    fmt_value(b, sizeof b, wv, unit);
    double below = m->higher_is_better ? wv : bv; /* the ratio's denominator */
    if (best != worst && below > 0)
        finding(d, "Best %s: %s at %s, %.2fx the worst (%s at %s).", m->metric, best, a,
                m->higher_is_better ? bv / wv : wv / bv, worst, b);
    else if (best != worst)
        finding(d, "Best %s: %s at %s; the worst: %s at %s.", m->metric, best, a, worst, b);
    else
        finding(d, "%s: %s at %s.", m->metric, best, a);
    if (noisy_label)
        finding(d, "Repeats vary by up to %.1f%% (std over median of %s, %s).", 100.0 * noisiest,
                m->metric, noisy_label);
    axis_findings(d, set, kind);
}

/* A configuration is repeats of one benchmark (history/bench.h); one whose runs are of
 * several (a list of ids of two models, a sweep's cell run before and after its file
 * changed) pools them in every figure: a finding names the first two runs that differ and
 * how. */
static void mixed_findings(doc *d, const lb_run_set *set) {
    for (size_t g = 0; g < set->n_groups; g++) {
        const lb_run_group *grp = &set->groups[g];
        for (size_t i = 1; i < grp->n; i++) {
            const lb_result *a = grp->runs[0], *b = grp->runs[i];
            char differ[600];
            if (strcmp(a->kind, b->kind) != 0)
                snprintf(differ, sizeof differ, "a %s run and a %s run", a->kind, b->kind);
            else
                lb_bench_differences(a, b, differ, sizeof differ, NULL);
            if (differ[0] == '\0') continue;
            finding(d,
                    "Configuration %s mixes benchmarks: runs %lld and %lld differ in %s; its "
                    "figures pool them.",
                    d->names[g], (long long)grp->ids[0], (long long)grp->ids[i], differ);
            break;
        }
    }
}

/* p99 TTFT and TPOT against QPS from ok runs with per-rate metrics (load --sweep-qps) or one
 * Server-scenario rate each. */
static void qps_chart(doc *d, const lb_run_set *set) {
    double q[MAX_POINTS], ttft[MAX_POINTS], tpot[MAX_POINTS], limit = NAN;
    size_t n = 0, total = 0;
    for (size_t g = 0; g < set->n_groups; g++)
        for (size_t i = 0; i < set->groups[g].n; i++) {
            const lb_result *r = set->groups[g].runs[i];
            if (strcmp(r->kind, "load") != 0 || r->status != LB_RUN_OK) continue;
            json_t *c = json_object_get(r->config, "constraints");
            double lim = json_number_value(json_object_get(c, "ttft_limit_ms"));
            if (lim > 0) limit = lim;
            for (size_t k = 0; k < r->n_metrics; k++) {
                const char *name = r->metrics[k].name;
                if (strncmp(name, "qps", 3) != 0 || strstr(name, "/target_qps") == NULL ||
                    total++ >= MAX_POINTS)
                    continue;
                char prefix[LB_NAME_BYTES], full[LB_NAME_BYTES * 2];
                snprintf(prefix, sizeof prefix, "%.*s", (int)(strchr(name, '/') - name), name);
                q[n] = r->metrics[k].value;
                snprintf(full, sizeof full, "%s/ttft_p99_ms", prefix);
                ttft[n] = lb_result_metric(r, full);
                snprintf(full, sizeof full, "%s/tpot_p99_ms", prefix);
                tpot[n++] = lb_result_metric(r, full);
            }
            const char *scen = json_string_value(json_object_get(r->config, "scenario"));
            double qps = json_number_value(json_object_get(r->config, "qps"));
            if (scen && strcasecmp(scen, "server") == 0 && qps > 0 &&
                isfinite(lb_result_metric(r, "ttft_p99_ms")) && total++ < MAX_POINTS) {
                q[n] = qps;
                ttft[n] = lb_result_metric(r, "ttft_p99_ms");
                tpot[n++] = lb_result_metric(r, "tpot_p99_ms");
            }
        }
    if (n < 2) return;
    for (size_t i = 1; i < n; i++) /* by rate */
        for (size_t j = i; j > 0 && q[j - 1] > q[j]; j--) {
            double t;
            t = q[j], q[j] = q[j - 1], q[j - 1] = t;
            t = ttft[j], ttft[j] = ttft[j - 1], ttft[j - 1] = t;
            t = tpot[j], tpot[j] = tpot[j - 1], tpot[j - 1] = t;
        }
    lb_svg_line lines[2] = {{"TTFT p99", q, ttft, n}, {"TPOT p99", q, tpot, n}};
    const char *title = "p99 TTFT and TPOT against offered load";
    char *buf;
    size_t len;
    FILE *f = chart_open(&buf, &len);
    lb_svg_lines(f, title, "target QPS", "ms", lines, 2, NULL, 0, false);
    chart_close(d, f, &buf, &len, title, n, total, "rates", NULL);
    if (isfinite(limit)) {
        size_t i = 0;
        while (i < n && !(ttft[i] > limit))
            i++;
        if (i == n)
            finding(d, "p99 TTFT stays under the %.0f ms limit up to %.3g QPS.", limit, q[n - 1]);
        else if (i == 0)
            finding(d, "p99 TTFT is over the %.0f ms limit already at %.3g QPS (%.0f ms).", limit,
                    q[0], ttft[0]);
        else
            finding(d, "p99 TTFT crosses the %.0f ms limit above %.3g QPS (%.0f ms at %.3g QPS).",
                    limit, q[i - 1], ttft[i], q[i]);
    }
}

#define MAX_COUNTS 32 /* rank counts on one line */

/* A train run's identity (history/bench.h) but its rank count: the runs of one scaling. */
static void family_key(const lb_result *r, char *out, size_t cap) {
    lb_bench_field f[LB_BENCH_MAX_FIELDS];
    size_t n = lb_bench_fields(r, f), len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && len < cap; i++)
        if (strcmp(f[i].key, "ranks") != 0)
            len += (size_t)snprintf(out + len, cap - len, " %s=%s", f[i].key, f[i].value);
}

/* The runs of one scaling: its smallest MAX_COUNTS rank counts in order with their
 * throughput, of total configurations. */
typedef struct {
    char key[LB_BENCH_ID_BYTES];
    const char *name; /* the smallest count's run */
    double ranks[MAX_COUNTS], eff[MAX_COUNTS];
    size_t n, total;
} family;

/* Training throughput per rank (one GPU a rank on GPUs) against the rank count train stores
 * in its config ("ranks"): a line for each configuration whose runs differ only in it,
 * against that configuration's smallest count; a finding for each, the chart draws the
 * first MAX_LINES. A family of more than MAX_COUNTS configurations keeps its smallest counts
 * and a finding says how many it shows. */
static void scaling_chart(doc *d, const lb_run_set *set) {
    const lb_key_metric *m = lb_history_metric("train", NULL);
    if (m == NULL || set->n_groups == 0) return;
    family *fam = malloc(set->n_groups * sizeof *fam);
    if (fam == NULL) {
        if (d->st == LB_OK) d->st = lb_fail(d->err, LB_ERR_NOMEM, "no memory for the report");
        return;
    }
    size_t nf = 0;
    for (size_t g = 0; g < set->n_groups; g++) {
        const lb_run_group *grp = &set->groups[g];
        if (strcmp(group_kind(grp), "train") != 0) continue;
        double count = json_number_value(json_object_get(grp->runs[0]->config, "ranks"));
        gstat s = group_stat(grp, m->metric);
        if (!(count > 0) || s.n == 0) continue;
        char key[LB_BENCH_ID_BYTES];
        family_key(grp->runs[0], key, sizeof key);
        size_t f = 0;
        while (f < nf && strcmp(fam[f].key, key) != 0)
            f++;
        if (f == nf) {
            snprintf(fam[nf].key, sizeof fam[nf].key, "%s", key);
            fam[nf].total = 0;
            fam[nf++].n = 0;
        }
        family *y = &fam[f];
        y->total++;
        if (y->n == MAX_COUNTS && count >= y->ranks[MAX_COUNTS - 1]) continue;
        if (y->n == MAX_COUNTS) y->n--; /* the largest gives way */
        size_t at = y->n++;             /* in rank order */
        for (; at > 0 && y->ranks[at - 1] > count; at--)
            y->ranks[at] = y->ranks[at - 1], y->eff[at] = y->eff[at - 1];
        y->ranks[at] = count, y->eff[at] = s.median;
        if (at == 0) y->name = grp->runs[0]->name;
    }
    lb_svg_line lines[MAX_LINES];
    size_t nl = 0, total = 0;
    for (size_t f = 0; f < nf; f++) {
        family *y = &fam[f];
        if (y->n < 2 || y->ranks[y->n - 1] == y->ranks[0]) continue;
        if (!(y->eff[0] > 0)) { /* no efficiency against nothing */
            finding(d, "%s: no scaling efficiency, as %.0f rank%s measured a %s of 0.", y->name,
                    y->ranks[0], y->ranks[0] == 1 ? "" : "s", m->metric);
            continue;
        }
        double base = y->eff[0] / y->ranks[0];
        for (size_t i = 0; i < y->n; i++)
            y->eff[i] = 100.0 * y->eff[i] / (y->ranks[i] * base);
        for (size_t i = 1; i < y->n; i++)
            if (y->ranks[i] != y->ranks[0])
                finding(d, "%s: %.0f ranks scale at %.0f%% of %.0f rank%s throughput per rank.",
                        y->name, y->ranks[i], y->eff[i], y->ranks[0],
                        y->ranks[0] == 1 ? "'s" : "s'");
        if (y->n < y->total)
            finding(d,
                    "%s: %zu of its %zu configurations shown, those of the fewest ranks (up "
                    "to %.0f).",
                    y->name, y->n, y->total, y->ranks[y->n - 1]);
        if (total++ < MAX_LINES) lines[nl++] = (lb_svg_line){y->name, y->ranks, y->eff, y->n};
    }
    if (nl > 0) {
        const char *title = "scaling efficiency: throughput per rank against the smallest count";
        char *buf;
        size_t len;
        FILE *f = chart_open(&buf, &len);
        lb_svg_lines(f, title, "ranks (one GPU each on GPUs)", "% of per-rank throughput", lines,
                     nl, NULL, 0, false);
        chart_close(d, f, &buf, &len, title, nl, total, "configurations", NULL);
    }
    free(fam);
}

/* Each benchmark of the set (the first MAX_BENCH, as each reads the store's runs; a line says
 * how many of how many): its history with every change point. */
static void history_charts(doc *d, lb_store *s, const lb_run_set *set, double threshold_pct) {
    char(*keys)[13] = malloc((set->n_groups ? set->n_groups : 1) * sizeof *keys);
    if (keys == NULL) {
        if (d->st == LB_OK) d->st = lb_fail(d->err, LB_ERR_NOMEM, "no memory for the report");
        return;
    }
    size_t n_keys = 0;
    static char identity[LB_BENCH_ID_BYTES];
    for (size_t g = 0; g < set->n_groups; g++) {
        const lb_result *r = set->groups[g].runs[0];
        if (lb_history_metric(r->kind, NULL) == NULL) continue;
        char key[13];
        lb_bench_identity(r, identity, sizeof identity);
        lb_bench_key(identity, key);
        bool dup = false;
        for (size_t k = 0; k < n_keys; k++)
            dup |= strcmp(keys[k], key) == 0;
        if (!dup) snprintf(keys[n_keys++], 13, "%s", key);
    }
    size_t regressions = 0, shown = 0;
    for (size_t k = 0; k < n_keys && k < MAX_BENCH && d->st == LB_OK && !lb_signals_interrupted();
         k++) {
        lb_history_bench bench;
        lb_history_point *pts = NULL;
        size_t n = 0;
        lb_err err = {{0}};
        if (lb_history_points(s, keys[k], NULL, &bench, &pts, &n, &err) != LB_OK || n < 2) {
            free(pts);
            continue;
        }
        const lb_key_metric *m = lb_history_metric(bench.kind, NULL);
        size_t n_ch = 0;
        lb_changepoint_params cp = lb_changepoint_default_params();
        double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        lb_history_change *ch = malloc(n * sizeof *ch); /* a point starts at most one */
        lb_svg_marker *marks = malloc(n * sizeof *marks);
        char(*mark_text)[48] = malloc(n * sizeof *mark_text);
        if (ch && marks && mark_text)
            lb_history_changes(pts, n, m, threshold_pct, &cp, ch, &n_ch, n, &err);
        if (x && y && ch && marks && mark_text) {
            for (size_t i = 0; i < n; i++)
                x[i] = pts[i].start_wall_s, y[i] = pts[i].value;
            for (size_t c = 0; c < n_ch; c++) {
                char size[32];
                snprintf(mark_text[c], sizeof mark_text[c], "%s%s",
                         lb_history_change_text(&ch[c], size, sizeof size),
                         ch[c].regression ? " regression" : "");
                marks[c] = (lb_svg_marker){pts[ch[c].index].start_wall_s, mark_text[c]};
                if (ch[c].regression) {
                    char when[40];
                    lb_clock_format_iso(pts[ch[c].index].start_wall_s, when, sizeof when);
                    finding(d,
                            "Regression: %s of benchmark %s fell from %.4g to %.4g (%s) "
                            "at run %lld (%.10s).",
                            m->metric, bench.key, ch[c].before, ch[c].after, size,
                            (long long)ch[c].run_id, when);
                    regressions++;
                }
            }
            char title[256];
            snprintf(title, sizeof title, "history of %s, benchmark %s (%zu runs)", m->metric,
                     bench.key, n);
            lb_svg_line line = {bench.identity, x, y, n};
            char *buf;
            size_t len;
            FILE *f = chart_open(&buf, &len);
            lb_svg_lines(f, title, "run start (UTC)", m->metric, &line, 1, marks, n_ch, true);
            chart_close(d, f, &buf, &len, title, 1, 1, "histories", NULL);
            shown++;
        } else if (d->st == LB_OK) {
            d->st = lb_fail(d->err, LB_ERR_NOMEM, "no memory for the report");
        }
        free(x), free(y), free(ch), free(marks), free(mark_text), free(pts);
    }
    if (n_keys > MAX_BENCH) {
        char text[160];
        snprintf(text, sizeof text,
                 "History drawn for the first %d of the %zu benchmarks of these runs.", MAX_BENCH,
                 n_keys);
        para(d, text);
    }
    free(keys);
    if (shown && regressions == 0)
        finding(d,
                "No regression in the history of the %zu benchmark%s shown (change points by "
                "E-divisive means, threshold %.0f%%).",
                shown, shown == 1 ? "" : "s", threshold_pct);
    if (shown == 0) para(d, "No benchmark of these runs has two or more runs in its history yet.");
}

static void provenance_table(doc *d, const lb_run_set *set) {
    fputs(
        "<table><tr><th>run</th><th>kind</th><th>name</th><th>status</th><th>started "
        "(UTC)</th><th>host</th><th>CPU</th><th>GPUs</th><th>llmbench</th><th>command</th></tr>\n",
        d->html);
    fputs("| run | kind | name | status | started (UTC) | host | GPUs | llmbench | command |\n"
          "|---|---|---|---|---|---|---|---|---|\n",
          d->md);
    for (size_t g = 0; g < set->n_groups; g++)
        for (size_t i = 0; i < set->groups[g].n; i++) {
            const lb_result *r = set->groups[g].runs[i];
            json_t *p = r->provenance;
            char when[40], gpus[160] = "none", cmd[1024] = "", ver[96];
            lb_clock_format_iso(r->start_wall_s, when, sizeof when);
            json_t *gl = json_object_get(p, "gpus");
            if (json_array_size(gl) > 0)
                snprintf(gpus, sizeof gpus, "%zu x %s", json_array_size(gl),
                         json_string_value(json_object_get(json_array_get(gl, 0), "name")));
            json_t *cl = json_object_get(p, "command_line");
            if (json_is_string(cl)) snprintf(cmd, sizeof cmd, "%s", json_string_value(cl));
            size_t k, len = 0;
            json_t *w;
            json_array_foreach(cl, k, w) if (len < sizeof cmd) len += (size_t)snprintf(
                cmd + len, sizeof cmd - len, "%s%s", k ? " " : "", json_string_value(w));
            const char *version = json_string_value(json_object_get(p, "llmbench_version"));
            const char *commit = json_string_value(json_object_get(p, "llmbench_commit"));
            snprintf(ver, sizeof ver, "%s %s", version ? version : "?", commit ? commit : "");
            const char *host = json_string_value(json_object_get(p, "hostname"));
            const char *cpu = json_string_value(json_object_get(p, "cpu_model"));
            const char *cells[] = {r->kind,
                                   r->name,
                                   lb_result_status_name(r->status),
                                   when,
                                   host ? host : "?",
                                   cpu ? cpu : "?",
                                   gpus,
                                   ver,
                                   cmd};
            fprintf(d->html, "<tr><td>%lld</td>", (long long)set->groups[g].ids[i]);
            fprintf(d->md, "| %lld |", (long long)set->groups[g].ids[i]);
            for (size_t c = 0; c < sizeof cells / sizeof cells[0]; c++) {
                fputs(c == 8 ? "<td><code>" : "<td>", d->html);
                esc(d->html, cells[c]);
                fputs(c == 8 ? "</code></td>" : "</td>", d->html);
                if (c == 5) continue; /* the CPU model: the page only */
                fputs(" ", d->md);
                md_text(d->md, cells[c]);
                fputs(" |", d->md);
            }
            fputs("</tr>\n", d->html);
            fputs("\n", d->md);
        }
    fputs("</table>\n", d->html);
    fputs("\n", d->md);
}

/* The name of the k-th staged file (1-based): chart-1.svg .. chart-N.svg, report.md,
 * report.html. */
static void staged_name(int k, int n_charts, char *name, size_t cap) {
    if (k <= n_charts)
        snprintf(name, cap, "chart-%d.svg", k);
    else
        snprintf(name, cap, "%s", k == n_charts + 1 ? "report.md" : "report.html");
}

/* Moves the staged files (each written whole) from stage into dir when st is LB_OK, the page
 * last; removes what stays in stage, and stage. Before the first move every target is
 * checked: one that is a folder, which no file can be renamed over, fails the report with dir
 * untouched. A file replaced keeps its permissions, as lb_file_write_atomic's do. A report
 * that failed to be written leaves dir as it was. */
static lb_status publish(const char *stage, const char *dir, int n_charts, lb_status st,
                         lb_err *err) {
    char name[32], from[4200], to[4200];
    for (int k = 1; st == LB_OK && k <= n_charts + 2; k++) {
        staged_name(k, n_charts, name, sizeof name);
        snprintf(from, sizeof from, "%s/%s", stage, name);
        snprintf(to, sizeof to, "%s/%s", dir, name);
        struct stat old;
        if (lstat(to, &old) == 0 && S_ISDIR(old.st_mode))
            st = lb_fail(err, LB_ERR_USAGE,
                         "--out %s: %s is a folder where the report writes a file: move it away",
                         dir, to);
        else if (stat(to, &old) == 0 && chmod(from, old.st_mode & 0777) != 0)
            st = lb_fail(err, LB_ERR_IO, "cannot set the mode of %s: %s", from, strerror(errno));
    }
    for (int k = 1; k <= n_charts + 2; k++) {
        staged_name(k, n_charts, name, sizeof name);
        snprintf(from, sizeof from, "%s/%s", stage, name);
        snprintf(to, sizeof to, "%s/%s", dir, name);
        if (st == LB_OK && rename(from, to) != 0)
            st = lb_fail(err, LB_ERR_IO, "cannot rename %s to %s: %s", from, to, strerror(errno));
        unlink(from);
    }
    rmdir(stage);
    return st;
}

static const char *const css =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}figure{margin:1em 0}"
    "code{font-size:11px}.findings li{margin:.3em 0}";

lb_status lb_report_write(lb_store *s, const lb_run_set *set, const lb_report_params *p,
                          char *html_path, size_t html_path_bytes, lb_err *err) {
    size_t n_runs = 0;
    for (size_t g = 0; g < set->n_groups; g++)
        n_runs += set->groups[g].n;
    if (n_runs == 0) return lb_fail(err, LB_ERR_USAGE, "no run to report on");
    struct stat out_st;
    if (stat(p->out_dir, &out_st) == 0 && !S_ISDIR(out_st.st_mode))
        return lb_fail(err, LB_ERR_USAGE,
                       "--out %s is a file, not a folder: name a folder (created when missing) "
                       "for report.html, report.md and the charts",
                       p->out_dir);
    LB_TRY(lb_file_mkdirs(p->out_dir, 0755, err));
    char stage[4096];
    if (snprintf(stage, sizeof stage, "%s/.report-XXXXXX", p->out_dir) >= (int)sizeof stage)
        return lb_fail(err, LB_ERR_USAGE, "--out %s: a path too long", p->out_dir);
    if (mkdtemp(stage) == NULL)
        return lb_fail(err, LB_ERR_IO,
                       "--out %s: cannot write a report there (%s): choose a folder you can write",
                       p->out_dir, strerror(errno));
    doc d = {.dir = stage, .sweep_of = p->sweep_of, .st = LB_OK, .err = err};
    d.names = malloc((set->n_groups + 1) * sizeof *d.names);
    d.html = open_memstream(&d.html_buf, &d.html_len);
    d.md = open_memstream(&d.md_buf, &d.md_len);
    d.find_html = open_memstream(&d.find_html_buf, &d.find_html_len);
    d.find_md = open_memstream(&d.find_md_buf, &d.find_md_len);
    if (!d.html || !d.md || !d.find_html || !d.find_md || !d.names) {
        free(d.names);
        rmdir(stage);
        return lb_fail(err, LB_ERR_NOMEM, "no memory for the report");
    }
    for (size_t g = 0; g < set->n_groups; g++)
        if (sweep_of(&d, g))
            snprintf(d.names[g], sizeof d.names[g], "%.127s: %.120s", sweep_of(&d, g),
                     set->groups[g].label);
        else
            snprintf(d.names[g], sizeof d.names[g], "%s", set->groups[g].label);

    mixed_findings(&d, set);
    const char *const *kinds = lb_bench_kinds;
    for (size_t k = 0; kinds[k] != NULL; k++) {
        bool any = false;
        for (size_t g = 0; g < set->n_groups; g++)
            any |= strcmp(group_kind(&set->groups[g]), kinds[k]) == 0;
        if (!any) continue;
        char title[64];
        snprintf(title, sizeof title, "%s runs", kinds[k]);
        section(&d, title);
        metrics_table(&d, set, kinds[k]);
        kind_findings(&d, set, kinds[k]);
        const lb_key_metric *m = lb_history_metric(kinds[k], NULL);
        bars_of(&d, set, kinds[k], m->metric, kinds[k]);
        if (strcmp(kinds[k], "train") == 0) {
            scaling_chart(&d, set);
            series_lines(&d, set, "train", "loss",
                         "training loss per step (first run of each "
                         "configuration)",
                         "step", false);
            series_lines(&d, set, "train", "step_ms",
                         "step time per step (first run of each "
                         "configuration)",
                         "step", false);
            bool gpu = bars_of(&d, set, "train", "gpu_util_mean_pct", "GPU utilisation");
            gpu |= bars_of(&d, set, "train", "gpu_power_mean_w", "GPU power");
            gpu |= bars_of(&d, set, "train", "peak_device_bytes", "device memory");
            if (!gpu)
                para(&d, "No GPU utilisation, power or device memory: these runs measured none "
                         "(CPU runs, or no NVML).");
        } else if (strcmp(kinds[k], "load") == 0) {
            series_lines(&d, set, "load", "ttft_ms", "TTFT CDF (first run of each configuration)",
                         NULL, true);
            series_lines(&d, set, "load", "latency_ms",
                         "latency CDF (first run of each configuration)", NULL, true);
            qps_chart(&d, set);
        }
    }
    section(&d, "History");
    history_charts(&d, s, set, p->threshold_pct);
    section(&d, "Provenance");
    provenance_table(&d, set);
    size_t failed = 0, named = 0, len = 0;
    char which[512] = ""; /* "12 failed, 14 interrupted" */
    for (size_t g = 0; g < set->n_groups; g++)
        for (size_t i = 0; i < set->groups[g].n; i++) {
            lb_run_status rs = set->groups[g].runs[i]->status;
            if (rs == LB_RUN_OK) continue;
            char one[64];
            int n = snprintf(one, sizeof one, "%s%lld %s", failed ? ", " : "",
                             (long long)set->groups[g].ids[i], lb_result_status_name(rs));
            failed++;
            if (n >= (int)sizeof one) n = (int)sizeof one - 1; /* cut: copy what is there */
            if (named + 1 < failed || len + (size_t)n >= sizeof which - 24) continue;
            memcpy(which + len, one, (size_t)n + 1);
            len += (size_t)n;
            named++;
        }
    if (failed > named) snprintf(which + len, sizeof which - len, " and %zu more", failed - named);
    if (failed)
        finding(&d,
                "%zu of %zu runs did not end ok (run %s); what they measured is left out of the "
                "tables and charts.",
                failed, n_runs, which);
    fclose(d.html);
    fclose(d.md);
    fclose(d.find_html);
    fclose(d.find_md);

    char now[40];
    lb_clock_format_iso(lb_clock_wall_s(), now, sizeof now);
    char *page = NULL, *md = NULL;
    size_t page_len = 0, md_len = 0;
    FILE *f = open_memstream(&page, &page_len);
    FILE *g = open_memstream(&md, &md_len);
    if (f && g) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", f);
        esc(f, p->title);
        fprintf(f, "</title><style>%s</style></head><body>\n<h1>", css);
        esc(f, p->title);
        fprintf(f, "</h1>\n<p>%zu runs in %zu configurations; written %s UTC.</p>\n", n_runs,
                set->n_groups, now);
        fprintf(f, "<h2>Summary</h2>\n<ul class=\"findings\">\n%s</ul>\n%s",
                d.find_html_buf ? d.find_html_buf : "", d.html_buf ? d.html_buf : "");
        fputs("<footer id=\"end\"><p>llmbench report</p></footer>\n</body></html>\n", f);
        fputs("# ", g);
        md_text(g, p->title);
        fprintf(g, "\n\n%zu runs in %zu configurations; written %s UTC.\n\n## Summary\n\n%s\n%s",
                n_runs, set->n_groups, now, d.find_md_buf ? d.find_md_buf : "",
                d.md_buf ? d.md_buf : "");
    }
    if (f) fclose(f);
    if (g) fclose(g);
    lb_status st = d.st;
    if (st == LB_OK && lb_signals_interrupted())
        st = lb_fail(err, LB_ERR_INTERRUPTED, "interrupted: no report written; %s is as it was",
                     p->out_dir);
    if (st == LB_OK && (page == NULL || md == NULL))
        st = lb_fail(err, LB_ERR_NOMEM, "no memory for the report");
    if (st == LB_OK) st = write_in(stage, "report.md", md, md_len, err);
    if (st == LB_OK) st = write_in(stage, "report.html", page, page_len, err);
    st = publish(stage, p->out_dir, d.n_charts, st, err);
    /* an older, longer report's charts beyond this one's: it links none of them */
    for (int k = d.n_charts + 1; st == LB_OK; k++) {
        char stale[4200];
        snprintf(stale, sizeof stale, "%s/chart-%d.svg", p->out_dir, k);
        if (unlink(stale) != 0) break;
    }
    if (st == LB_OK) snprintf(html_path, html_path_bytes, "%s/report.html", p->out_dir);
    free(page), free(md), free(d.names), free(d.html_buf), free(d.md_buf), free(d.find_html_buf),
        free(d.find_md_buf);
    return st;
}
