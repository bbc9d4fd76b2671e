/* cudnn_gelu_probe.c: probe. Does cuDNN's lb_cudnn_graph API run GPT-2's two GELU products faster
 * than cuBLASLt's GELU epilogues (docs/PERFORMANCE.md, "What was tried: products": ~150 us against
 * ~106 for the plain product at 16384 x 3072 x 768 bf16 on the H200)?
 *
 * Graphs (built with gpu/cudnn/graph.h):
 *   forward:  pre = X W^T + b (bf16 output), out = gelu_tanh(pre) (bf16 output); also with
 *             gelu_tanh'(pre) as the second output instead of pre;
 *   backward: dpre = (dY W) * gelu_tanh'(pre), the derivative by cuDNN's GELU backward mode
 *             or spelled out in pointwise operations; and dpre = (dY W) * g with g stored;
 * each fastest plan also timed under load (back-to-back runs after a warm-up), beside
 * cuBLASLt's dGELU and plain products of the same shape;
 * with X [M,K], W [N,K], dY [M,K] row-major as the training step stores them. Every engine
 * configuration of heuristic modes A, B and FALLBACK that finalises is timed (one run, then
 * the median of REPS), and the fastest one's output compared with a double-precision CPU
 * product on a few rows (exit 1 beyond CHECK_REL, or when no forward plan ran). Fresh
 * uniform data.
 *
 * build: make bench (build/bench/cudnn_gelu_probe; builds with cuDNN's headers only)
 *        (libcudnn.so.9 on the library path at run time: bench/device_env.sh)
 * usage: [OUT_T=1|2] [FWD_ONLY=1] cudnn_gelu_probe [M N K [LDA]]   (default 16384 3072 768,
 *        LDA = K: X's row stride in the forward graphs); OUT_T=1 stores the forward's pre and
 *        out transposed ([N,M], row stride M), OUT_T=2 out only; FWD_ONLY=1 stops after the
 *        forward graphs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/blas/matmul.h"
#include "gpu/cudnn/graph.h"
#include "probe_check.h"

#define REPS      9
#define CHECK_REL 0.01 /* a check fails beyond this share of the largest reference value */
#define WS_MAX    ((size_t)256 << 20)

enum { P_X = 1, P_W, P_B, P_PRE, P_OUT, P_DY, P_DPRE, P_ONE, P_C0, P_C1, P_C2, P_C3, P_C4 };

static int64_t M = 16384, N = 3072, K = 768, LDA = 768;
static bool pre_t, out_tt; /* OUT_T: pre's and out's layouts ([N,M] when true); dpre as pre */

/* element (r, j) of an [M,N] matrix stored row-major, or transposed */
static int64_t at(bool tr, int64_t r, int64_t j) {
    return tr ? j * M + r : r * N + j;
}
/* an [M,N] bf16 matrix descriptor in that layout */
static lb_cudnn_desc mn_matrix(lb_cudnn_graph *g, int64_t uid, bool tr) {
    return lb_cudnn_matrix(g, uid, CUDNN_DATA_BFLOAT16, M, N, tr ? 1 : N, tr ? M : 1, 0);
}

/* "engine E knobs T=V ..." of an engine configuration */
static void describe(lb_cudnn_desc cfg, char *out, size_t cap) {
    out[0] = 0;
    lb_cudnn_desc eng = NULL, kc[16];
    int64_t cnt = 0, idx = -1, nk = 0;
    lb_cudnn.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    for (int i = 0; i < 16; i++)
        lb_cudnn.make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &kc[i]);
    if (lb_cudnn.get(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                     &eng) == 0 &&
        lb_cudnn.get(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx) == 0) {
        size_t len = (size_t)snprintf(out, cap, "engine %lld", (long long)idx);
        if (lb_cudnn.get(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 16,
                         &nk, kc) != 0)
            nk = 0;
        for (int64_t i = 0; i < nk && len < cap; i++) {
            cudnnBackendKnobType_t type;
            int64_t v = 0;
            lb_cudnn.get(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt,
                         &type);
            lb_cudnn.get(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &v);
            len += (size_t)snprintf(out + len, cap - len, " %d=%lld", (int)type, (long long)v);
        }
    }
    for (int i = 0; i < 16; i++)
        lb_cudnn.drop(kc[i]);
    lb_cudnn.drop(eng);
}

static float run_ms(cudnnHandle_t h, lb_cudnn_desc plan, lb_cudnn_desc vp) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[REPS];
    if (lb_cudnn.execute(h, plan, vp) != CUDNN_STATUS_SUCCESS) return -1.0f;
    for (int r = 0; r < REPS; r++) {
        CK(cudaEventRecord(e0, 0));
        lb_cudnn.execute(h, plan, vp);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return probe_median(t, REPS) * 1e3f;
}

/* us a run over SUS_RUNS back-to-back runs after SUS_WARM of them (a GPU at its power
 * limit), of the plan (or of the cuBLASLt product g when plan is NULL) */
#define SUS_WARM 2000
#define SUS_RUNS 400
static float sustained_us(cudnnHandle_t h, lb_cudnn_desc plan, lb_cudnn_desc vp, lb_blas_gemm *g) {
    static lb_blas *blas = NULL;
    lb_err e;
    if (g && !blas) {
        lb_blas_params bp = lb_blas_default_params();
        CK(cudaMalloc(&bp.workspace, LB_BLAS_WORKSPACE_BYTES));
        bp.workspace_bytes = LB_BLAS_WORKSPACE_BYTES, bp.tune = true;
        CK(lb_blas_init(&blas, &bp, &e));
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms = 0.0f;
    for (int r = 0; r < SUS_WARM + SUS_RUNS; r++) {
        if (r == SUS_WARM) CK(cudaEventRecord(e0, 0));
        if (g)
            CK(lb_blas_gemm_run(blas, g, NULL, &e));
        else
            lb_cudnn.execute(h, plan, vp);
    }
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms * 1e3f / SUS_RUNS;
}

/* a variant pack binding n ids to pointers, with the workspace */
static lb_cudnn_desc pack(lb_cudnn_graph *vg, int n, const int64_t *uids, void **ptrs, void *ws) {
    lb_cudnn_desc vp = lb_cudnn_make(vg, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    lb_cudnn_set(vg, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    lb_cudnn_set(vg, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    lb_cudnn_set(vg, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    lb_cudnn_finalize(vg, vp, "variant pack");
    return vp;
}

/* Times every configuration of g's graph; leaves the fastest one's results in the buffers
 * and returns true, or false where no configuration ran. */
static bool time_all(lb_cudnn_graph *g, cudnnHandle_t h, const char *name, int n,
                     const int64_t *uids, void **ptrs, void *ws) {
    lb_cudnn_desc opg = lb_cudnn_make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    lb_cudnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    lb_cudnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops,
                 g->ops);
    lb_cudnn_finalize(g, opg, name);
    if (g->st != LB_OK) {
        printf("%s: lb_cudnn_graph refused: %s\n", name, g->err->msg);
        return false;
    }
    lb_cudnn_desc best_plan = NULL;
    float best = -1.0f;
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B,
                                                   CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 3; mi++) {
        lb_err e2;
        lb_cudnn_graph hg = {.err = &e2};
        lb_cudnn_desc heur = lb_cudnn_make(&hg, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        lb_cudnn_set_desc(&hg, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, opg);
        lb_cudnn_set(&hg, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
        lb_cudnn_finalize(&hg, heur, "heuristic");
        int64_t cnt = 0;
        if (hg.st == LB_OK)
            lb_cudnn_ok(&hg,
                        lb_cudnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL),
                        "count");
        if (hg.st != LB_OK) {
            printf("%s mode %d: %s\n", name, (int)modes[mi], e2.msg);
            lb_cudnn_graph_free(&hg);
            continue;
        }
        printf("%s mode %d: %lld configurations\n", name, (int)modes[mi], (long long)cnt);
        if (cnt > 16) cnt = 16;
        lb_cudnn_desc cfg[16];
        for (int64_t i = 0; i < cnt; i++)
            cfg[i] = lb_cudnn_make(&hg, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        lb_cudnn_ok(&hg,
                    lb_cudnn.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 cnt, &got, cfg),
                    "results");
        for (int64_t i = 0; hg.st == LB_OK && i < got; i++) {
            lb_cudnn_desc p = NULL;
            char what[96] = "";
            describe(cfg[i], what, sizeof what);
            lb_cudnn.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
            lb_cudnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
            lb_cudnn.set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         1, &cfg[i]);
            cudnnStatus_t s = lb_cudnn.finalize(p);
            int64_t bytes = 0, c2 = 0;
            if (s == CUDNN_STATUS_SUCCESS)
                lb_cudnn.get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &c2,
                             &bytes);
            if (s != CUDNN_STATUS_SUCCESS || (size_t)bytes > WS_MAX) {
                printf("%s mode %d cfg %lld (%s): no plan (%d, ws %lld)\n", name, (int)modes[mi],
                       (long long)i, what, (int)s, (long long)bytes);
                lb_cudnn.drop(p);
                continue;
            }
            lb_cudnn_graph vg = {.err = &e2};
            lb_cudnn_desc vp = pack(&vg, n, uids, ptrs, ws);
            float us = vg.st == LB_OK ? run_ms(h, p, vp) : -1.0f;
            CK(cudaDeviceSynchronize());
            lb_cudnn_graph_free(&vg);
            double tf = 2.0 * (double)M * N * K / (us * 1e-6) * 1e-12;
            printf("%s mode %d cfg %lld (%s, ws %lld): %.1f us (%.0f TF/s)\n", name, (int)modes[mi],
                   (long long)i, what, (long long)bytes, us, us > 0 ? tf : 0.0);
            if (us > 0 && (best < 0 || us < best)) {
                if (best_plan) lb_cudnn.drop(best_plan);
                best_plan = p, best = us;
            } else {
                lb_cudnn.drop(p);
            }
        }
        lb_cudnn_graph_free(&hg);
    }
    if (best_plan == NULL) return false;
    lb_err e3;
    lb_cudnn_graph vg = {.err = &e3};
    lb_cudnn_desc vp = pack(&vg, n, uids, ptrs, ws);
    float sus = sustained_us(h, best_plan, vp, NULL);
    printf("%s: best plan under load %.1f us a run\n", name, sus);
    lb_cudnn.execute(h, best_plan, vp);
    CK(cudaDeviceSynchronize());
    lb_cudnn_graph_free(&vg);
    lb_cudnn.drop(best_plan);
    printf("%s: best %.1f us\n", name, best);
    return true;
}

/* the forward graphs: pre a bf16 output that also feeds the GELU, pre virtual (fp32) with a
 * bf16 copy as a second output, or no pre at all (the reference point) */
enum { FWD_PRE_SHARED, FWD_PRE_VIRTUAL, FWD_NO_PRE, FWD_GPRIME };

static bool forward_graph(cudnnHandle_t h, int how, void **bufs, void *ws, lb_err *err) {
    static const char *names[] = {
        "forward (pre as output and input)", "forward (virtual pre, two outputs)",
        "forward without pre (reference point)", "forward with gelu'(pre) as the second output"};
    cudnnDataType_t t = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
    lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = err};
    lb_cudnn_desc tx = lb_cudnn_matrix(&g, P_X, t, M, K, LDA, 1, 0),
                  tw = lb_cudnn_matrix(&g, P_W, t, K, N, 1, K, 0);
    lb_cudnn_desc tb = lb_cudnn_matrix(&g, P_B, t, 1, N, N, 1, 0);
    lb_cudnn_desc mm = lb_cudnn_matrix(&g, 0, f, M, N, N, 1, LB_CUDNN_VIRTUAL);
    lb_cudnn_desc tp = how == FWD_NO_PRE ? NULL : mn_matrix(&g, P_PRE, pre_t);
    lb_cudnn_desc pv =
        how == FWD_PRE_SHARED ? tp : lb_cudnn_matrix(&g, 0, f, M, N, N, 1, LB_CUDNN_VIRTUAL);
    const int64_t one3[3] = {1, 1, 1};
    lb_cudnn_desc tone =
        how == FWD_GPRIME ? lb_cudnn_tensor(&g, P_ONE, f, 3, one3, one3, LB_CUDNN_BY_VALUE) : NULL;
    lb_cudnn_desc to = mn_matrix(&g, P_OUT, out_tt);
    lb_cudnn_matmul(&g, tx, tw, mm);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, mm, tb, pv);
    if (how == FWD_PRE_VIRTUAL) lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_IDENTITY, pv, NULL, tp);
    lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_GELU_APPROX_TANH_FWD, pv, NULL, to);
    if (how == FWD_GPRIME)
        lb_cudnn_pointwise_bwd(&g, CUDNN_POINTWISE_GELU_APPROX_TANH_BWD, tone, pv, tp);
    float one = 1.0f;
    int64_t uids[] = {P_X, P_W, P_B, P_PRE, P_OUT, P_ONE};
    void *ptrs[] = {bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], &one};
    if (how == FWD_NO_PRE) uids[3] = P_OUT, ptrs[3] = bufs[4];
    bool ran = time_all(&g, h, names[how],
                        how == FWD_NO_PRE   ? 4
                        : how == FWD_GPRIME ? 6
                                            : 5,
                        uids, ptrs, ws);
    lb_cudnn_graph_free(&g);
    return ran;
}

/* The backward product, dY [M,K] times W [N,K] read as [K,N], into dst (pre's layout):
 * times gelu'(pre) by cuDNN's GELU backward mode, or (stored) times pre's values as a
 * stored derivative. */
static bool backward_graph(cudnnHandle_t h, bool stored, void *dy, void *w, void *pre, void *dst,
                           void *ws, lb_err *err) {
    cudnnDataType_t t = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
    lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = err};
    lb_cudnn_desc tdy = lb_cudnn_matrix(&g, P_DY, t, M, K, K, 1, 0),
                  tw = lb_cudnn_matrix(&g, P_W, t, K, N, 1, K, 0);
    lb_cudnn_desc mm = lb_cudnn_matrix(&g, 0, f, M, N, N, 1, LB_CUDNN_VIRTUAL);
    lb_cudnn_desc tp = mn_matrix(&g, P_PRE, pre_t), td = mn_matrix(&g, P_DPRE, pre_t);
    lb_cudnn_matmul(&g, tdy, tw, mm);
    if (stored)
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, mm, tp, td);
    else
        lb_cudnn_pointwise_bwd(&g, CUDNN_POINTWISE_GELU_APPROX_TANH_BWD, mm, tp, td);
    const int64_t uids[] = {P_DY, P_W, P_PRE, P_DPRE};
    void *ptrs[] = {dy, w, pre, dst};
    bool ran = time_all(&g, h, stored ? "backward (product times stored derivative)" : "backward",
                        4, uids, ptrs, ws);
    lb_cudnn_graph_free(&g);
    return ran;
}

static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static double from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static uint16_t *rand_bf16(size_t n, float scale) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = to_bf16(scale * (2.0f * (float)rand() / (float)RAND_MAX - 1.0f));
    return h;
}
static uint16_t *download(const void *d) {
    uint16_t *h = malloc((size_t)M * N * 2);
    CK(cudaMemcpy(h, d, (size_t)M * N * 2, cudaMemcpyDeviceToHost));
    return h;
}
/* the larger error, any NaN (a poisoned element never written) counting as infinite */
static double worse(double e, double d) {
    return isnan(d) ? INFINITY : fmax(e, d);
}
static void *upload(const uint16_t *h, size_t n) {
    void *d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    return d;
}
static double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double dgelu(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

int main(int argc, char **argv) {
    if (argc >= 4) M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
    LDA = argc >= 5 ? atoll(argv[4]) : K;
    int out_t = getenv("OUT_T") ? atoi(getenv("OUT_T")) : 0;
    pre_t = out_t == 1, out_tt = out_t >= 1;
    srand(4321);
    lb_err err;
    if (lb_cudnn_load(&err) != LB_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("cuDNN %zu, M %lld N %lld K %lld\n", lb_cudnn.version, (long long)M, (long long)N,
           (long long)K);
    cudnnHandle_t h;
    if (lb_cudnn.create(&h) != CUDNN_STATUS_SUCCESS) return 1;
    uint16_t *hx = rand_bf16((size_t)M * LDA, 1.0f), *hw = rand_bf16((size_t)N * K, 0.06f);
    uint16_t *hb = rand_bf16((size_t)N, 0.5f), *hdy = rand_bf16((size_t)M * K, 1.0f);
    void *x = upload(hx, (size_t)M * LDA), *w = upload(hw, (size_t)N * K),
         *b = upload(hb, (size_t)N);
    void *dy = upload(hdy, (size_t)M * K), *pre, *out, *dpre, *ws;
    CK(cudaMalloc(&pre, (size_t)M * N * 2));
    CK(cudaMalloc(&out, (size_t)M * N * 2));
    CK(cudaMalloc(&dpre, (size_t)M * N * 2));
    void *scratch;
    CK(cudaMalloc(&scratch, (size_t)M * N * 2));
    CK(cudaMalloc(&ws, WS_MAX));
    cudnnDataType_t t = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
    /* forward, four ways; the last one leaves pre and out for the check and the backward
     * (both poisoned first: bf16 0xffff is a NaN) */
    void *bufs[] = {x, w, b, pre, out};
    forward_graph(h, FWD_NO_PRE, bufs, ws, &err);
    forward_graph(h, FWD_PRE_SHARED, bufs, ws, &err);
    forward_graph(h, FWD_GPRIME, bufs, ws, &err);
    CK(cudaMemset(pre, 0xff, (size_t)M * N * 2));
    CK(cudaMemset(out, 0xff, (size_t)M * N * 2));
    CK(cudaMemset(dpre, 0xff, (size_t)M * N * 2));
    bool fwd = forward_graph(h, FWD_PRE_VIRTUAL, bufs, ws, &err), bwd = false, bad = false;
    if (!fwd) printf("the forward with pre as a second output did not run: nothing to check\n");
    if (!fwd || getenv("FWD_ONLY")) goto check;
    /* backward: dpre = (dY W) * gelu'(pre), then with a stored derivative (pre's values) */
    bwd = backward_graph(h, false, dy, w, pre, dpre, ws, &err);
    backward_graph(h, true, dy, w, pre, scratch, ws, &err);
    /* backward with the derivative spelled out in pointwise operations:
     * g = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2, t = tanh(k x (1 + c x^2)) */
    {
        lb_cudnn_graph g = {.next_virtual = LB_CUDNN_UID_VIRTUAL, .err = &err};
        const int64_t one3[3] = {1, 1, 1};
        float cv[5] = {1.0f, 0.044715f, 0.7978845608028654f, 0.5f, 3.0f * 0.044715f};
        lb_cudnn_desc c[5];
        for (int i = 0; i < 5; i++)
            c[i] = lb_cudnn_tensor(&g, P_C0 + i, f, 3, one3, one3, LB_CUDNN_BY_VALUE);
        lb_cudnn_desc tdy = lb_cudnn_matrix(&g, P_DY, t, M, K, K, 1, 0),
                      tw = lb_cudnn_matrix(&g, P_W, t, K, N, 1, K, 0);
        lb_cudnn_desc tp = mn_matrix(&g, P_PRE, pre_t), td = mn_matrix(&g, P_OUT, pre_t);
        lb_cudnn_desc v[16];
        for (int i = 0; i < 16; i++)
            v[i] = lb_cudnn_matrix(&g, 0, f, M, N, N, 1, LB_CUDNN_VIRTUAL);
        lb_cudnn_matmul(&g, tdy, tw, v[0]);
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, tp, tp, v[1]);          /* x^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[1], c[1], v[2]);      /* c x^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, v[2], c[0], v[3]);      /* 1 + c x^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[3], tp, v[4]);        /* x (1 + c x^2) */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[4], c[2], v[5]);      /* u */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_TANH_FWD, v[5], NULL, v[6]); /* t */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, v[6], c[0], v[7]);      /* 1 + t */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[6], v[6], v[8]);      /* t^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_SUB, c[0], v[8], v[9]);      /* 1 - t^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[1], c[4], v[10]);     /* 3 c x^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, v[10], c[0], v[11]);    /* 1 + 3 c x^2 */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[11], c[2], v[12]);    /* k (1 + 3 c x^2) */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[12], v[9], v[13]);
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[13], tp, v[14]);   /* x (1 - t^2) k (..) */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_ADD, v[14], v[7], v[15]); /* 2 g */
        lb_cudnn_desc w2 = lb_cudnn_matrix(&g, 0, f, M, N, N, 1, LB_CUDNN_VIRTUAL);
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[15], c[3], w2); /* g */
        lb_cudnn_fp32_op(&g, CUDNN_POINTWISE_MUL, v[0], w2, td);
        const int64_t uids[] = {P_DY, P_W, P_PRE, P_OUT, P_C0, P_C1, P_C2, P_C3, P_C4};
        void *ptrs[] = {dy, w, pre, scratch, &cv[0], &cv[1], &cv[2], &cv[3], &cv[4]};
        CK(cudaMemset(scratch, 0xff, (size_t)M * N * 2));
        bool ran =
            time_all(&g, h, "backward (derivative as pointwise operations)", 9, uids, ptrs, ws);
        lb_cudnn_graph_free(&g);
        /* check against the double-precision derivative on a few rows */
        uint16_t *hs = download(scratch), *hq = download(pre);
        double e = 0, mx = 0;
        for (int64_t r = 0; ran && r < M; r += M / 3)
            for (int64_t j = 0; j < N; j++) {
                double s2 = 0;
                for (int64_t k = 0; k < K; k++)
                    s2 += from_bf16(hdy[r * K + k]) * from_bf16(hw[j * K + k]);
                double ref = s2 * dgelu(from_bf16(hq[at(pre_t, r, j)]));
                e = worse(e, fabs(from_bf16(hs[at(pre_t, r, j)]) - ref)), mx = fmax(mx, fabs(ref));
            }
        bad = ran && e > CHECK_REL * mx;
        if (ran)
            printf("spelled-out derivative check (3 rows): max|err| %.4f of max %.3f%s\n", e, mx,
                   bad ? ": FAIL" : "");
        free(hs), free(hq);
    }
    {
        lb_blas_gemm g = {.m = M,
                          .n = N,
                          .k = K,
                          .a = dy,
                          .lda = K,
                          .b = w,
                          .ldb = K,
                          .trans_b = true,
                          .ab_type = LB_DT_BF16,
                          .d = scratch,
                          .ldd = N,
                          .d_type = LB_DT_BF16,
                          .alpha = 1.0f,
                          .epilogue = LB_EPI_DGELU,
                          .aux = pre};
        printf("cuBLASLt dGELU under load %.1f us a run\n", sustained_us(h, NULL, NULL, &g));
        g.epilogue = LB_EPI_NONE;
        printf("cuBLASLt plain product under load %.1f us a run\n",
               sustained_us(h, NULL, NULL, &g));
    }
check:
    if (!fwd) return 1;
    /* the forward's (and the GELU backward mode's) rows against double precision */
    uint16_t *hp = download(pre), *ho = download(out), *hd = download(dpre);
    double e_pre = 0, e_out = 0, e_d = 0, m_pre = 0, m_d = 0;
    for (int64_t r = 0; r < M; r += M / 5) {
        for (int64_t j = 0; j < N; j++) {
            double s = from_bf16(hb[j]), s2 = 0;
            for (int64_t k = 0; k < K; k++) {
                s += from_bf16(hx[r * LDA + k]) * from_bf16(hw[j * K + k]);
                s2 += from_bf16(hdy[r * K + k]) * from_bf16(hw[j * K + k]);
            }
            double gp = from_bf16(hp[at(pre_t, r, j)]);
            e_pre = worse(e_pre, fabs(gp - s)), m_pre = fmax(m_pre, fabs(s));
            e_out = worse(e_out, fabs(from_bf16(ho[at(out_tt, r, j)]) - gelu(s)));
            double dref = s2 * dgelu(gp);
            e_d = worse(e_d, fabs(from_bf16(hd[at(pre_t, r, j)]) - dref)),
            m_d = fmax(m_d, fabs(dref));
        }
    }
    printf("check (5 rows): pre max|err| %.4f of max %.3f; gelu max|err| %.4f", e_pre, m_pre,
           e_out);
    if (bwd) printf("; dpre max|err| %.4f of max %.3f", e_d, m_d);
    /* bf16 rounds to 2^-9 of a value: an error over 1% of the largest is a wrong result */
    bool wrong =
        e_pre > CHECK_REL * m_pre || e_out > CHECK_REL * m_pre || (bwd && e_d > CHECK_REL * m_d);
    printf("%s\n", wrong ? ": FAIL" : "");
    free(hp), free(ho), free(hd);
    return bad || wrong ? 1 : 0;
}
