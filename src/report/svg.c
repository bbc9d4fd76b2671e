/* svg.c: bar and line charts as SVG text (svg.h). */
#include "report/svg.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "core/utf8text.h"

enum { W = 760, H = 340, ML = 78, MR = 24, MT = 34, MB = 76 };

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

void lb_svg_escape(FILE *f, const char *text) {
    const char *p = text ? text : "";
    for (size_t left = strlen(p); left > 0;) {
        int len = lb_utf8text_char_len(p, left);
        if (len > 1) { /* a character of several bytes, whole */
            fwrite(p, 1, (size_t)len, f);
            p += len, left -= (size_t)len;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        /* XML 1.0 has no form of the other control characters, nor of bytes that start no
         * UTF-8 character (a name cut inside one): chart-N.svg would not parse */
        default:
            fputc(len <= 0 || ((unsigned char)*p < 0x20 && strchr("\t\n\r", *p) == NULL) ? '?' : *p,
                  f);
        }
        p++, left--;
    }
}

/* A round tick step giving about five ticks over [lo, hi]. */
static double tick_step(double lo, double hi) {
    double span = hi - lo;
    if (!(span > 0)) return 1.0;
    double raw = span / 5.0, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag;
    return (r < 1.5 ? 1.0 : r < 3.5 ? 2.0 : r < 7.5 ? 5.0 : 10.0) * mag;
}

/* Below this span an axis is drawn as if its values were equal: ticks a fifth of a span
 * apart must be distinct doubles, or the tick loop never reaches the axis' end (two values
 * one rounding apart, such as 0.1 + 0.2 and 0.3, or one value of 1e17 plus 1). */
static double least_span(double lo, double hi) {
    return fmax(fabs(lo), fabs(hi)) * 1e-12;
}

/* v with at least digits significant digits, three for a very large or small one, six
 * otherwise. */
static void fmt_num(char *buf, size_t cap, double v, int digits) {
    double a = fabs(v);
    int p = a != 0 && (a >= 1e6 || a < 1e-3) ? 3 : 6;
    snprintf(buf, cap, "%.*g", p > digits ? p : digits, v);
}

/* The label of tick t of an axis whose ticks are step apart: digits enough to tell it from
 * its neighbours (1200000 and 1200200 would both read 1.2e+06), and 0 for a tick that
 * adding steps left one rounding off zero. */
static void fmt_tick(char *buf, size_t cap, double t, double step) {
    if (fabs(t) < step * 1e-9) t = 0.0;
    double ratio = fabs(t) / step;
    fmt_num(buf, cap, t, ratio > 1 && isfinite(ratio) ? (int)ceil(log10(ratio)) + 1 : 1);
}

static void open_chart(FILE *f, const char *kind, size_t n, const char *title) {
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-kind=\"%s\" "
            "data-n=\"%zu\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
            "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">",
            kind, n, W, H, W, H, W, H, ML);
    lb_svg_escape(f, title);
    fputs("</text>\n", f);
}

/* Horizontal grid lines and y tick labels over [lo, hi]. */
static void y_axis(FILE *f, double lo, double hi, const char *label) {
    double step = tick_step(lo, hi);
    double first = ceil(lo / step) * step, t;
    for (int i = 0; (t = first + i * step) <= hi + step * 1e-9; i++) {
        double y = MT + (H - MT - MB) * (1.0 - (t - lo) / (hi - lo));
        char buf[32];
        fmt_tick(buf, sizeof buf, t, step);
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                ML, W - MR, y, y, ML - 6, y + 4, buf);
    }
    fprintf(f, "<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
            MT + (H - MT - MB) / 2);
    lb_svg_escape(f, label);
    fprintf(f, "</text>\n<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", ML, ML,
            MT, H - MB);
}

/* The bars stand on zero: the axis spans zero and every value and whisker end, so a
 * negative value hangs below the zero line. */
void lb_svg_bars(FILE *f, const char *title, const char *y_label, const char *const *labels,
                 const double *value, const double *lo, const double *hi, size_t n) {
    double bottom = 0.0, top = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double ends[] = {value[i], lo ? lo[i] : NAN, hi ? hi[i] : NAN};
        for (size_t k = 0; k < 3; k++)
            if (isfinite(ends[k])) bottom = fmin(bottom, ends[k]), top = fmax(top, ends[k]);
    }
    if (!(top > bottom)) top = 1.0;
    top *= 1.08, bottom *= 1.08;
    open_chart(f, "bar", n, title);
    y_axis(f, bottom, top, y_label);
    double slot = (double)(W - ML - MR) / (double)(n ? n : 1);
    double bw = slot * 0.6 < 80 ? slot * 0.6 : 80;
    double scale = (H - MT - MB) / (top - bottom), zero = H - MB + bottom * scale;
    for (size_t i = 0; i < n; i++) {
        double cx = ML + slot * ((double)i + 0.5);
        if (isfinite(value[i])) {
            double h = fabs(value[i]) * scale;
            char buf[32];
            fmt_num(buf, sizeof buf, value[i], 0);
            fprintf(f,
                    "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"%s\"><title>",
                    cx - bw / 2, value[i] < 0 ? zero : zero - h, bw, h, palette[0]);
            lb_svg_escape(f, labels[i]);
            fprintf(f, ": %s</title></rect>\n", buf);
        }
        if (lo && hi && isfinite(lo[i]) && isfinite(hi[i])) {
            double y_lo = zero - lo[i] * scale, y_hi = zero - hi[i] * scale;
            fprintf(f,
                    "<path class=\"whisker\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" "
                    "stroke=\"#222\" fill=\"none\"/>\n",
                    cx, y_lo, y_hi, cx - 6, y_lo, cx + 6, cx - 6, y_hi, cx + 6);
        }
        fprintf(f,
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" transform=\"rotate(-25 %.1f %d)\">",
                cx, H - MB + 16, cx, H - MB + 16);
        lb_svg_escape(f, labels[i]);
        fputs("</text>\n", f);
    }
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n</svg>\n", ML,
            W - MR, zero, zero);
}

/* Dates on an axis of days or more, hours and minutes on a shorter one. */
static void x_label_text(char *buf, size_t cap, double x, double step, bool time_axis, bool days) {
    if (time_axis) {
        time_t t = (time_t)x;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(buf, cap, days ? "%Y-%m-%d" : "%H:%M:%S", &tm);
    } else {
        fmt_tick(buf, cap, x, step);
    }
}

void lb_svg_lines(FILE *f, const char *title, const char *x_label, const char *y_label,
                  const lb_svg_line *lines, size_t n_lines, const lb_svg_marker *markers,
                  size_t n_markers, bool x_is_time) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    size_t total = 0;
    for (size_t l = 0; l < n_lines; l++)
        for (size_t i = 0; i < lines[l].n; i++) {
            if (!isfinite(lines[l].x[i]) || !isfinite(lines[l].y[i])) continue;
            x0 = fmin(x0, lines[l].x[i]), x1 = fmax(x1, lines[l].x[i]);
            y0 = fmin(y0, lines[l].y[i]), y1 = fmax(y1, lines[l].y[i]);
            total++;
        }
    if (total == 0) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (!(x1 - x0 > least_span(x0, x1))) { /* one x: in the middle */
        double w = fmax(1.0, fabs(x0) * 1e-6);
        x0 -= w / 2, x1 = x0 + w;
    }
    double pad = (y1 - y0) * 0.08;
    if (!(pad > least_span(y0, y1))) pad = y0 != 0 ? fabs(y0) * 0.05 : 1.0;
    y0 -= pad, y1 += pad;
    open_chart(f, "line", n_lines, title);
    y_axis(f, y0, y1, y_label);
    double sx = (W - ML - MR) / (x1 - x0), sy = (H - MT - MB) / (y1 - y0);
    bool days = x_is_time && x1 - x0 >= 2 * 86400.0;
    double step = days        ? 86400.0 * ceil(tick_step(x0, x1) / 86400.0)
                  : x_is_time ? fmax(1.0, tick_step(x0, x1)) /* whole seconds */
                              : tick_step(x0, x1);
    double first = ceil(x0 / step) * step, t;
    for (int i = 0; (t = first + i * step) <= x1 + step * 1e-9; i++) {
        char buf[32];
        x_label_text(buf, sizeof buf, t, step, x_is_time, days);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                ML + (t - x0) * sx, H - MB + 16, buf);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + (W - ML - MR) / 2,
            H - MB + 36);
    lb_svg_escape(f, x_label);
    fprintf(f, "</text>\n<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", ML,
            W - MR, H - MB, H - MB);
    for (size_t m = 0; m < n_markers; m++) {
        double x = ML + (markers[m].x - x0) * sx;
        fprintf(f,
                "<line class=\"marker\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" "
                "stroke=\"#d62728\" stroke-dasharray=\"5 3\"/><text x=\"%.1f\" y=\"%d\" "
                "fill=\"#d62728\">",
                x, x, MT, H - MB, x + 3, MT + 12);
        lb_svg_escape(f, markers[m].label);
        fputs("</text>\n", f);
    }
    for (size_t l = 0; l < n_lines; l++) {
        size_t n = 0;
        for (size_t i = 0; i < lines[l].n; i++)
            n += isfinite(lines[l].x[i]) && isfinite(lines[l].y[i]);
        const char *color = palette[l % (sizeof palette / sizeof palette[0])];
        fprintf(f,
                "<polyline class=\"line\" data-n=\"%zu\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"1.5\" points=\"",
                n, color);
        for (size_t i = 0; i < lines[l].n; i++)
            if (isfinite(lines[l].x[i]) && isfinite(lines[l].y[i]))
                fprintf(f, "%.1f,%.1f ", ML + (lines[l].x[i] - x0) * sx,
                        H - MB - (lines[l].y[i] - y0) * sy);
        fputs("\"/>\n", f);
        for (size_t i = 0; n == 1 && i < lines[l].n; i++) /* a line of one point draws none */
            if (isfinite(lines[l].x[i]) && isfinite(lines[l].y[i]))
                fprintf(f,
                        "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                        ML + (lines[l].x[i] - x0) * sx, H - MB - (lines[l].y[i] - y0) * sy, color);
        if (n_lines > 1) {
            fprintf(f, "<text x=\"%d\" y=\"%zu\" fill=\"%s\" text-anchor=\"end\">", W - MR - 4,
                    (size_t)MT + 14 + 14 * l, color);
            lb_svg_escape(f, lines[l].name);
            fputs("</text>\n", f);
        }
    }
    fputs("</svg>\n", f);
}
