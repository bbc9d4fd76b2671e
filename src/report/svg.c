/* svg.c: bar and line charts as SVG text (svg.h). */
#include "report/svg.h"

#include <math.h>
#include <string.h>
#include <time.h>

enum { W = 760, H = 340, ML = 78, MR = 24, MT = 34, MB = 76 };

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

void lb_svg_escape(FILE *f, const char *text) {
    for (const char *p = text ? text : ""; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        /* XML 1.0 has no form of the other control characters: chart-N.svg would not parse */
        default: fputc((unsigned char)*p < 0x20 && strchr("\t\n\r", *p) == NULL ? '?' : *p, f);
        }
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

static void fmt_num(char *buf, size_t cap, double v) {
    double a = fabs(v);
    if (a != 0 && (a >= 1e6 || a < 1e-3))
        snprintf(buf, cap, "%.3g", v);
    else
        snprintf(buf, cap, "%.6g", v);
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
    for (double t = ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
        double y = MT + (H - MT - MB) * (1.0 - (t - lo) / (hi - lo));
        char buf[32];
        fmt_num(buf, sizeof buf, fabs(t) < step * 1e-9 ? 0.0 : t);
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

void lb_svg_bars(FILE *f, const char *title, const char *y_label, const char *const *labels,
                 const double *value, const double *lo, const double *hi, size_t n) {
    double top = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(value[i]) && value[i] > top) top = value[i];
        if (hi && isfinite(hi[i]) && hi[i] > top) top = hi[i];
    }
    if (!(top > 0)) top = 1.0;
    top *= 1.08;
    open_chart(f, "bar", n, title);
    y_axis(f, 0.0, top, y_label);
    double slot = (double)(W - ML - MR) / (double)(n ? n : 1);
    double bw = slot * 0.6 < 80 ? slot * 0.6 : 80;
    for (size_t i = 0; i < n; i++) {
        double cx = ML + slot * ((double)i + 0.5);
        double scale = (H - MT - MB) / top;
        if (isfinite(value[i])) {
            double h = value[i] * scale;
            char buf[32];
            fmt_num(buf, sizeof buf, value[i]);
            fprintf(f,
                    "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"%s\"><title>",
                    cx - bw / 2, H - MB - h, bw, h, palette[0]);
            lb_svg_escape(f, labels[i]);
            fprintf(f, ": %s</title></rect>\n", buf);
        }
        if (lo && hi && isfinite(lo[i]) && isfinite(hi[i]))
            fprintf(f,
                    "<path class=\"whisker\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" "
                    "stroke=\"#222\" fill=\"none\"/>\n",
                    cx, H - MB - lo[i] * scale, H - MB - hi[i] * scale, cx - 6,
                    H - MB - lo[i] * scale, cx + 6, cx - 6, H - MB - hi[i] * scale, cx + 6);
        fprintf(f,
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" transform=\"rotate(-25 %.1f %d)\">",
                cx, H - MB + 16, cx, H - MB + 16);
        lb_svg_escape(f, labels[i]);
        fputs("</text>\n", f);
    }
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n</svg>\n", ML,
            W - MR, H - MB, H - MB);
}

/* Dates on an axis of days or more, hours and minutes on a shorter one. */
static void x_label_text(char *buf, size_t cap, double x, bool time_axis, bool days) {
    if (time_axis) {
        time_t t = (time_t)x;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(buf, cap, days ? "%Y-%m-%d" : "%H:%M:%S", &tm);
    } else {
        fmt_num(buf, cap, x);
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
    if (!(x1 - x0 > least_span(x0, x1))) x1 = x0 + fmax(1.0, fabs(x0) * 1e-6);
    double pad = (y1 - y0) * 0.08;
    if (!(pad > least_span(y0, y1))) pad = fabs(y0) * 0.05 + 1e-9;
    y0 -= pad, y1 += pad;
    open_chart(f, "line", n_lines, title);
    y_axis(f, y0, y1, y_label);
    double sx = (W - ML - MR) / (x1 - x0), sy = (H - MT - MB) / (y1 - y0);
    bool days = x_is_time && x1 - x0 >= 2 * 86400.0;
    double step = days        ? 86400.0 * ceil(tick_step(x0, x1) / 86400.0)
                  : x_is_time ? fmax(1.0, tick_step(x0, x1)) /* whole seconds */
                              : tick_step(x0, x1);
    for (double t = ceil(x0 / step) * step; t <= x1 + step * 1e-9; t += step) {
        char buf[32];
        x_label_text(buf, sizeof buf, t, x_is_time, days);
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
        if (n_lines > 1) {
            fprintf(f, "<text x=\"%d\" y=\"%zu\" fill=\"%s\" text-anchor=\"end\">", W - MR - 4,
                    (size_t)MT + 14 + 14 * l, color);
            lb_svg_escape(f, lines[l].name);
            fputs("</text>\n", f);
        }
    }
    fputs("</svg>\n", f);
}
