/* svg.h: the two charts reports draw, as standalone SVG text.
 *
 * Bars with whiskers (a value per configuration and the spread of its repeats) and lines
 * over a numeric or time axis (loss curves, step times, CDFs, a history with its change
 * points marked). Written by hand rather than through PLplot: a report needs these two
 * shapes only, inline in an HTML page with no scripts, and every mark carries a class
 * ("bar", "line" with its point count in data-n, "marker") so a test can count what a
 * browser rendered against the data. Axes get about five round ticks, labelled with the
 * digits that tell them apart; text is XML-escaped.
 * Not here: legends beyond the line names, logarithmic axes, interaction. */
#ifndef LB_REPORT_SVG_H
#define LB_REPORT_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Bars value[i] labelled labels[i], standing on zero (a negative one hangs below it);
 * lo/hi (may be NULL) draw a whisker from lo[i] to hi[i]. NaN values are drawn as no bar
 * (the label stays). */
void lb_svg_bars(FILE *f, const char *title, const char *y_label, const char *const *labels,
                 const double *value, const double *lo, const double *hi, size_t n);

typedef struct {
    const char *name;
    const double *x, *y;
    size_t n;
} lb_svg_line;

typedef struct {
    double x;
    const char *label;
} lb_svg_marker;

/* Lines, named in a legend when there are several; vertical markers at markers[i].x. A
 * line of one point, which a polyline does not show, gets a dot (class "point").
 * x_is_time: x is seconds since the epoch and ticks show dates (times of day when the
 * axis spans less than two days). */
void lb_svg_lines(FILE *f, const char *title, const char *x_label, const char *y_label,
                  const lb_svg_line *lines, size_t n_lines, const lb_svg_marker *markers,
                  size_t n_markers, bool x_is_time);

/* Writes text with &, <, >, " escaped, and control characters but tab and line breaks
 * and each byte that starts no UTF-8 character (which XML cannot hold) as '?'. */
void lb_svg_escape(FILE *f, const char *text);

#endif
