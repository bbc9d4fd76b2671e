/* ref.c: fp32 reference forward and backward of every transformer op (ref.h).
 *
 * Each function is the textbook formula in loops, with sums carried in double so the
 * results sit within a few float ulps of a float64 computation. OpenMP parallelizes the
 * outer loops of the matmuls and attention over independent outputs only, so no two
 * threads ever write the same element and the results do not depend on the thread count.
 * The few ops that need scratch (rows of doubles) take it inside their OpenMP loops, one
 * row per task; a task that gets none marks the op short of memory and does nothing more,
 * since no failure can leave an OpenMP loop, and the op returns LB_ERR_NOMEM once the loop
 * is over. Not here: blocking, vectorization tricks, reduced precision. */
#include "model/ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* n zeroed doubles of scratch (the caller frees them), NULL when there is no memory. */
static double *scratch(size_t n) {
    return calloc(n ? n : 1, sizeof(double));
}

/* What an op returns once its loop is over: LB_ERR_NOMEM naming op when a task of it found
 * no memory for its scratch (the op's outputs are then partly written). */
static lb_status scratch_status(bool short_of_memory, const char *op, lb_err *err) {
    if (!short_of_memory) return LB_OK;
    return lb_fail(err, LB_ERR_NOMEM, "no memory for the scratch of the CPU reference's %s", op);
}

/* --- embeddings --------------------------------------------------------------------- */

void lb_ref_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((int64_t)b * T + t) * C;
            const float *e = wte + (int64_t)inp[b * T + t] * C;
            const float *p = wpe + (int64_t)t * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
}

void lb_ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                             int T, int C) {
    lb_ref_embedding_backward(dwte, dout, inp, B, T, C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((int64_t)b * T + t) * C;
            float *p = dwpe + (int64_t)t * C;
            for (int c = 0; c < C; c++)
                p[c] += d[c];
        }
}

void lb_ref_embedding_forward(float *out, const int32_t *inp, const float *wte, int B, int T,
                              int C) {
    for (int64_t i = 0; i < (int64_t)B * T; i++)
        memcpy(out + i * C, wte + (int64_t)inp[i] * C, (size_t)C * sizeof(float));
}

void lb_ref_embedding_backward(float *dwte, const float *dout, const int32_t *inp, int B, int T,
                               int C) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        float *e = dwte + (int64_t)inp[i] * C;
        const float *d = dout + i * C;
        for (int c = 0; c < C; c++)
            e[c] += d[c];
    }
}

void lb_ref_embedding_order(const int32_t *ids, int64_t n, int V, int32_t *count, int32_t *keys,
                            int32_t *rows) {
    memset(count, 0, ((size_t)V + 1) * sizeof *count);
    for (int64_t i = 0; i < n; i++)
        count[ids[i] + 1]++;
    for (int v = 0; v < V; v++)
        count[v + 1] += count[v];
    for (int64_t i = 0; i < n; i++) {
        int32_t at = count[ids[i]]++;
        keys[at] = ids[i];
        rows[at] = (int32_t)i;
    }
}

/* --- norms -------------------------------------------------------------------------- */

void lb_ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int B, int T, int C,
                              float eps) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        const float *x = inp + i * C;
        double m = 0.0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        double var = 0.0;
        for (int c = 0; c < C; c++)
            var += (x[c] - m) * (x[c] - m);
        var /= C;
        double s = 1.0 / sqrt(var + eps);
        float *o = out + i * C;
        for (int c = 0; c < C; c++)
            o[c] = (float)((x[c] - m) * s * weight[c] + (bias ? bias[c] : 0.0f));
        mean[i] = (float)m;
        rstd[i] = (float)s;
    }
}

void lb_ref_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int B, int T, int C) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float *dx = dinp + i * C;
        const double m = mean[i], s = rstd[i];
        /* xhat = (x - m) s; dxhat = dy * w;
         * dx = s (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) */
        double mean_d = 0.0, mean_dx = 0.0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dxhat = (double)dy[c] * weight[c];
            mean_d += dxhat;
            mean_dx += dxhat * xhat;
        }
        mean_d /= C;
        mean_dx /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dxhat = (double)dy[c] * weight[c];
            if (dbias) dbias[c] += dy[c];
            if (dweight) dweight[c] += (float)(xhat * dy[c]);
            dx[c] += (float)(s * (dxhat - mean_d - xhat * mean_dx));
        }
    }
}

void lb_ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int B,
                            int T, int C, float eps) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        const float *x = inp + i * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        double s = 1.0 / sqrt(ss / C + eps);
        float *o = out + i * C;
        for (int c = 0; c < C; c++)
            o[c] = (float)(x[c] * s * weight[c]);
        rstd[i] = (float)s;
    }
}

void lb_ref_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int B, int T, int C) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float *dx = dinp + i * C;
        const double s = rstd[i];
        /* y = x s w with s = (mean(x^2) + eps)^-1/2:
         * dx = s (dxhat - xhat mean(dxhat xhat)), xhat = x s, dxhat = dy w */
        double mean_dx = 0.0;
        for (int c = 0; c < C; c++)
            mean_dx += (double)dy[c] * weight[c] * x[c] * s;
        mean_dx /= C;
        for (int c = 0; c < C; c++) {
            double xhat = x[c] * s;
            if (dweight) dweight[c] += (float)(xhat * dy[c]);
            dx[c] += (float)(s * ((double)dy[c] * weight[c] - xhat * mean_dx));
        }
    }
}

/* --- matmul ------------------------------------------------------------------------- */

/* Rows of inp per task: each task reads every weight row once for all its rows, so the
 * weights stream from memory N / MM_ROWS times instead of N times. */
#define MM_COLS 256 /* output columns per task */
#define MM_ROWS 8

void lb_ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int T, int C, int OC) {
    /* tasks of MM_ROWS rows by MM_COLS output columns, so a few rows (inference decode)
     * still spread over every thread */
    const int64_t N = (int64_t)B * T, n_tasks = (N + MM_ROWS - 1) / MM_ROWS;
    const int n_col_tasks = (OC + MM_COLS - 1) / MM_COLS;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t task = 0; task < n_tasks; task++) {
        for (int ct = 0; ct < n_col_tasks; ct++) {
            const int64_t i0 = task * MM_ROWS, i1 = i0 + MM_ROWS < N ? i0 + MM_ROWS : N;
            const int o1 = (ct + 1) * MM_COLS < OC ? (ct + 1) * MM_COLS : OC;
            for (int o = ct * MM_COLS; o < o1; o++) {
                const float *w = weight + (int64_t)o * C;
                for (int64_t i = i0; i < i1; i++) {
                    const float *x = inp + i * C;
                    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
                    for (int c = 0; c < C; c++)
                        acc += (double)x[c] * w[c];
                    out[i * OC + o] = (float)(acc + (bias ? bias[o] : 0.0));
                }
            }
        }
    }
}

lb_status lb_ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int B, int T, int C, int OC,
                                 lb_err *err) {
    const int64_t N = (int64_t)B * T, n_tasks = (N + MM_ROWS - 1) / MM_ROWS;
    bool short_of_memory = false;
    if (dinp) {
        /* dinp[i,:] += sum_o dout[i,o] W[o,:], MM_ROWS rows per task */
#pragma omp parallel for schedule(static)
        for (int64_t task = 0; task < n_tasks; task++) {
            const int64_t i0 = task * MM_ROWS, i1 = i0 + MM_ROWS < N ? i0 + MM_ROWS : N;
            double *acc = scratch((size_t)MM_ROWS * C);
            if (acc == NULL) {
#pragma omp atomic write
                short_of_memory = true;
                continue;
            }
            for (int o = 0; o < OC; o++) {
                const float *w = weight + (int64_t)o * C;
                for (int64_t i = i0; i < i1; i++) {
                    const double d = dout[i * OC + o];
                    double *a = acc + (i - i0) * C;
#pragma omp simd
                    for (int c = 0; c < C; c++)
                        a[c] += d * w[c];
                }
            }
            for (int64_t i = i0; i < i1; i++)
                for (int c = 0; c < C; c++)
                    dinp[i * C + c] += (float)acc[(i - i0) * C + c];
            free(acc);
        }
    }
    if (short_of_memory || (!dweight && !dbias))
        return scratch_status(short_of_memory, "matmul backward", err);
        /* dweight[o,:] += sum_i dout[i,o] inp[i,:]; dbias[o] += sum_i dout[i,o] */
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        double *acc = scratch((size_t)C), bacc = 0.0;
        if (acc == NULL) {
#pragma omp atomic write
            short_of_memory = true;
            continue;
        }
        for (int64_t i = 0; i < N; i++) {
            const double d = dout[i * OC + o];
            const float *x = inp + i * C;
            bacc += d;
#pragma omp simd
            for (int c = 0; c < C; c++)
                acc[c] += d * x[c];
        }
        if (dweight)
            for (int c = 0; c < C; c++)
                dweight[(int64_t)o * C + c] += (float)acc[c];
        if (dbias) dbias[o] += (float)bacc;
        free(acc);
    }
    return scratch_status(short_of_memory, "matmul backward", err);
}

/* --- LoRA adapter ------------------------------------------------------------------- */

void lb_ref_lora_forward(float *y, int64_t ldy, float *u, const float *x, const float *A,
                         const float *Bm, int64_t N, int in, int out, int r, float s) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float *xi = x + i * in;
        float *ui = u + i * r;
        for (int k = 0; k < r; k++) {
            double acc = 0.0;
            for (int c = 0; c < in; c++)
                acc += (double)xi[c] * A[(int64_t)k * in + c];
            ui[k] = (float)acc;
        }
        float *yi = y + i * ldy;
        for (int j = 0; j < out; j++) {
            double acc = 0.0;
            for (int k = 0; k < r; k++)
                acc += (double)ui[k] * Bm[(int64_t)j * r + k];
            yi[j] += (float)(s * acc);
        }
    }
}

void lb_ref_lora_backward(float *dx, float *dA, float *dBm, float *du, const float *dy, int64_t ldy,
                          const float *x, const float *u, const float *A, const float *Bm,
                          int64_t N, int in, int out, int r, float s) {
    /* dBm[j,k] += s sum_i dy[i,j] u[i,k] */
#pragma omp parallel for schedule(static)
    for (int j = 0; j < out; j++)
        for (int k = 0; k < r; k++) {
            double acc = 0.0;
            for (int64_t i = 0; i < N; i++)
                acc += (double)dy[i * ldy + j] * u[i * r + k];
            dBm[(int64_t)j * r + k] += (float)(s * acc);
        }
        /* du[i,k] = s sum_j dy[i,j] Bm[j,k]; dx[i,c] += sum_k du[i,k] A[k,c] */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        for (int k = 0; k < r; k++) {
            double acc = 0.0;
            for (int j = 0; j < out; j++)
                acc += (double)dy[i * ldy + j] * Bm[(int64_t)j * r + k];
            du[i * r + k] = (float)(s * acc);
        }
        if (dx)
            for (int c = 0; c < in; c++) {
                double acc = 0.0;
                for (int k = 0; k < r; k++)
                    acc += (double)du[i * r + k] * A[(int64_t)k * in + c];
                dx[i * in + c] += (float)acc;
            }
    }
    /* dA[k,c] += sum_i du[i,k] x[i,c] */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < r; k++)
        for (int c = 0; c < in; c++) {
            double acc = 0.0;
            for (int64_t i = 0; i < N; i++)
                acc += (double)du[i * r + k] * x[i * in + c];
            dA[(int64_t)k * in + c] += (float)acc;
        }
}

/* --- attention ---------------------------------------------------------------------- */

lb_status lb_ref_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                   int NKV, int HD, lb_err *err) {
    const int QW = (NH + 2 * NKV) * HD, group = NH / NKV;
    const double scale = 1.0 / sqrt((double)HD);
    bool short_of_memory = false;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int kvh = h / group;
                const float *q = qkv + ((int64_t)b * T + t) * QW + h * HD;
                float *a = att + (((int64_t)b * NH + h) * T + t) * T;
                /* scores, then a stable softmax over t2 <= t, in double */
                double *e = scratch((size_t)t + 1);
                if (e == NULL) {
#pragma omp atomic write
                    short_of_memory = true;
                    continue;
                }
                double mx = -INFINITY, sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((int64_t)b * T + t2) * QW + (NH + kvh) * HD;
                    double s = 0.0;
                    for (int i = 0; i < HD; i++)
                        s += (double)q[i] * k[i];
                    e[t2] = s * scale;
                    if (e[t2] > mx) mx = e[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    e[t2] = exp(e[t2] - mx);
                    sum += e[t2];
                }
                for (int t2 = 0; t2 <= t; t2++)
                    a[t2] = (float)(e[t2] / sum);
                for (int t2 = t + 1; t2 < T; t2++)
                    a[t2] = 0.0f;
                float *o = out + ((int64_t)b * T + t) * (NH * HD) + h * HD;
                for (int i = 0; i < HD; i++) {
                    double acc = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float *v = qkv + ((int64_t)b * T + t2) * QW + (NH + NKV + kvh) * HD;
                        acc += e[t2] / sum * v[i];
                    }
                    o[i] = (float)acc;
                }
                free(e);
            }
    return scratch_status(short_of_memory, "attention forward", err);
}

lb_status lb_ref_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int NH, int NKV, int HD,
                                    lb_err *err) {
    const int QW = (NH + 2 * NKV) * HD, group = NH / NKV;
    const double scale = 1.0 / sqrt((double)HD);
    bool short_of_memory = false;
    /* One task per (batch, kv head): it owns the k and v gradients of that kv head and the
     * q gradients of the query heads that read it, so tasks never write the same element. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < NKV; kvh++) {
            double *dpre = scratch((size_t)T);
            if (dpre == NULL) {
#pragma omp atomic write
                short_of_memory = true;
                continue;
            }
            for (int h = kvh * group; h < (kvh + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((int64_t)b * NH + h) * T + t) * T;
                    const float *dy = dout + ((int64_t)b * T + t) * (NH * HD) + h * HD;
                    const float *q = qkv + ((int64_t)b * T + t) * QW + h * HD;
                    float *dq = dqkv + ((int64_t)b * T + t) * QW + h * HD;
                    /* datt[t2] = dy . v[t2]; dv[t2] += att[t2] dy */
                    double dot = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const int64_t row = ((int64_t)b * T + t2) * QW;
                        const float *v = qkv + row + (NH + NKV + kvh) * HD;
                        float *dv = dqkv + row + (NH + NKV + kvh) * HD;
                        double datt = 0.0;
                        for (int i = 0; i < HD; i++) {
                            datt += (double)dy[i] * v[i];
                            dv[i] += (float)((double)a[t2] * dy[i]);
                        }
                        dpre[t2] = datt;
                        dot += datt * a[t2];
                    }
                    /* softmax backward, then through the scaled dot products */
                    for (int t2 = 0; t2 <= t; t2++) {
                        const int64_t row = ((int64_t)b * T + t2) * QW;
                        const float *k = qkv + row + (NH + kvh) * HD;
                        float *dk = dqkv + row + (NH + kvh) * HD;
                        double ds = a[t2] * (dpre[t2] - dot) * scale;
                        for (int i = 0; i < HD; i++) {
                            dq[i] += (float)(ds * k[i]);
                            dk[i] += (float)(ds * q[i]);
                        }
                    }
                }
            free(dpre);
        }
    return scratch_status(short_of_memory, "attention backward", err);
}

/* --- rope --------------------------------------------------------------------------- */

void lb_ref_rope_freqs(const lb_model_config *cfg, float *inv_freq) {
    const int HD = lb_model_head_dim(cfg);
    const lb_rope_scaling *s = &cfg->rope_scaling;
    for (int i = 0; i < HD / 2; i++) {
        double f = pow((double)cfg->rope_theta, -2.0 * i / HD);
        if (s->enabled) {
            const double pi = 3.14159265358979323846;
            double wavelen = 2.0 * pi / f;
            double low_wavelen = s->original_max_pos / (double)s->low_freq_factor;
            double high_wavelen = s->original_max_pos / (double)s->high_freq_factor;
            if (wavelen > low_wavelen) {
                f /= s->factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (s->original_max_pos / wavelen - s->low_freq_factor) /
                                ((double)s->high_freq_factor - s->low_freq_factor);
                f = (1.0 - smooth) * f / s->factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

/* Rotates q and k heads by sign * position * inv_freq, the position t or pos[b*T + t];
 * copies v. */
static void rope_rotate(float *out, const float *inp, const float *inv_freq, const int32_t *pos,
                        int B, int T, int NH, int NKV, int HD, double sign) {
    const int QW = (NH + 2 * NKV) * HD, half = HD / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int64_t row = ((int64_t)b * T + t) * QW;
            for (int h = 0; h < NH + NKV; h++) {
                const float *x = inp + row + h * HD;
                float *y = out + row + h * HD;
                for (int i = 0; i < half; i++) {
                    double p = pos ? pos[(int64_t)b * T + t] : t;
                    double ang = sign * p * (double)inv_freq[i];
                    double c = cos(ang), s = sin(ang);
                    double x0 = x[i], x1 = x[i + half];
                    y[i] = (float)(x0 * c - x1 * s);
                    y[i + half] = (float)(x1 * c + x0 * s);
                }
            }
            if (out != inp)
                memcpy(out + row + (NH + NKV) * HD, inp + row + (NH + NKV) * HD,
                       (size_t)NKV * HD * sizeof(float));
        }
}

void lb_ref_rope_forward(float *out, const float *inp, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HD) {
    rope_rotate(out, inp, inv_freq, NULL, B, T, NH, NKV, HD, 1.0);
}

void lb_ref_rope_backward(float *dinp, const float *dout, const float *inv_freq, int B, int T,
                          int NH, int NKV, int HD) {
    rope_rotate(dinp, dout, inv_freq, NULL, B, T, NH, NKV, HD, -1.0);
}

void lb_ref_rope_positions(float *qkv, const int32_t *pos, const float *inv_freq, int N, int NH,
                           int NKV, int HD) {
    rope_rotate(qkv, qkv, inv_freq, pos, 1, N, NH, NKV, HD, 1.0);
}

/* --- paged attention ---------------------------------------------------------------- */

lb_status lb_ref_paged_attention(float *out, const float *qkv, const float *k_cache,
                                 const float *v_cache, const int32_t *block_table, int max_blocks,
                                 const int32_t *seq_of, const int32_t *pos, int N, int NH, int NKV,
                                 int HD, int block_size, lb_err *err) {
    const int QW = (NH + 2 * NKV) * HD, group = NH / NKV;
    const double scale = 1.0 / sqrt((double)HD);
    bool short_of_memory = false;
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < N; i++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / group, len = pos[i] + 1;
            const int32_t *bt = block_table + (int64_t)seq_of[i] * max_blocks;
            const float *q = qkv + (int64_t)i * QW + h * HD;
            double *e = scratch((size_t)len);
            if (e == NULL) {
#pragma omp atomic write
                short_of_memory = true;
                continue;
            }
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t < len; t++) {
                int64_t slot = (int64_t)bt[t / block_size] * block_size + t % block_size;
                const float *k = k_cache + (slot * NKV + kvh) * HD;
                double s = 0.0;
                for (int c = 0; c < HD; c++)
                    s += (double)q[c] * k[c];
                e[t] = s * scale;
                if (e[t] > mx) mx = e[t];
            }
            for (int t = 0; t < len; t++) {
                e[t] = exp(e[t] - mx);
                sum += e[t];
            }
            float *o = out + (int64_t)i * NH * HD + h * HD;
            for (int c = 0; c < HD; c++) {
                double acc = 0.0;
                for (int t = 0; t < len; t++) {
                    int64_t slot = (int64_t)bt[t / block_size] * block_size + t % block_size;
                    acc += e[t] * v_cache[(slot * NKV + kvh) * HD + c];
                }
                o[c] = (float)(acc / sum);
            }
            free(e);
        }
    return scratch_status(short_of_memory, "paged attention", err);
}

/* --- activations -------------------------------------------------------------------- */

#define GELU_SCALE 0.7978845608028654 /* sqrt(2 / pi) */

void lb_ref_gelu_forward(float *out, const float *inp, int64_t N) {
    for (int64_t i = 0; i < N; i++) {
        double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(GELU_SCALE * (x + 0.044715 * x * x * x))));
    }
}

void lb_ref_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t N) {
    for (int64_t i = 0; i < N; i++) {
        double x = inp[i];
        double u = GELU_SCALE * (x + 0.044715 * x * x * x);
        double th = tanh(u);
        double du = GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
        double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
        dinp[i] += (float)(grad * dout[i]);
    }
}

void lb_ref_swiglu_forward(float *out, const float *inp, int B, int T, int F) {
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        const float *gate = inp + r * 2 * F, *up = gate + F;
        float *o = out + r * F;
        for (int i = 0; i < F; i++) {
            double g = gate[i];
            o[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
        }
    }
}

void lb_ref_swiglu_backward(float *dinp, const float *dout, const float *inp, int B, int T, int F) {
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        const float *gate = inp + r * 2 * F, *up = gate + F;
        float *dgate = dinp + r * 2 * F, *dup = dgate + F;
        const float *dy = dout + r * F;
        for (int i = 0; i < F; i++) {
            double g = gate[i], sig = 1.0 / (1.0 + exp(-g));
            dgate[i] += (float)(dy[i] * (double)up[i] * sig * (1.0 + g * (1.0 - sig)));
            dup[i] += (float)(dy[i] * g * sig);
        }
    }
}

/* --- residual ----------------------------------------------------------------------- */

void lb_ref_residual_forward(float *out, const float *a, const float *b, int64_t N) {
    for (int64_t i = 0; i < N; i++)
        out[i] = a[i] + b[i];
}

void lb_ref_residual_backward(float *da, float *db, const float *dout, int64_t N) {
    for (int64_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* --- loss --------------------------------------------------------------------------- */

void lb_ref_softmax_crossentropy_forward(float *losses, float *probs, const float *logits,
                                         const int32_t *targets, int B, int T, int V) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        const float *z = logits + r * V;
        float *p = probs + r * V;
        double mx = -INFINITY;
        for (int i = 0; i < V; i++)
            if (z[i] > mx) mx = z[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++)
            sum += exp(z[i] - mx);
        for (int i = 0; i < V; i++)
            p[i] = (float)(exp(z[i] - mx) / sum);
        /* -log softmax computed from the logits, not from the rounded probability */
        losses[r] = (float)(log(sum) - (z[targets[r]] - mx));
    }
}

void lb_ref_softmax_crossentropy_backward(float *dlogits, const float *probs,
                                          const int32_t *targets, float dloss, int B, int T,
                                          int V) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        const float *p = probs + r * V;
        float *d = dlogits + r * V;
        for (int i = 0; i < V; i++)
            d[i] += (float)(((double)p[i] - (i == targets[r] ? 1.0 : 0.0)) * dloss);
    }
}

/* --- optimizer ---------------------------------------------------------------------- */

double lb_ref_sum_squares(const float *x, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    return acc;
}

float lb_ref_clip_scale(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double s = max_norm / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}

void lb_ref_adamw_update(float *param, const float *grad, float *m, float *v, int64_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                         int step) {
    const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    const double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
    for (int64_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        double p = param[i] * (1.0 - (double)lr * weight_decay);
        double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
        double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        param[i] = (float)(p - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));
    }
}
