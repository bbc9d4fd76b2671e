/* cublaslt_sweep.c: probe. How much faster than the heuristic's best candidates can
 * cuBLASLt run a product when every configuration it offers is timed?
 *
 * For each problem (row-major, as gpu/blas/matmul.h describes it: D[m,n] = A'[m,k] B'[k,n],
 * optional transposes, one of the epilogues below), times
 *   - the heuristic's candidates (up to 16, then its list without split-k), as the
 *     training tuner does;
 *   - every (algorithm id, tile, stages, CTA swizzle, custom option) that
 *     cublasLtMatmulAlgoCheck accepts, without split-k; then split-k 2..16 with each
 *     supported reduction scheme on the eight fastest of those.
 * Fresh uniform [-1,1] data, one warm-up run, median of REPS runs timed with CUDA events.
 * Prints one row a problem: configurations tried, the heuristic's best, the sweep's best
 * and its configuration.
 *
 * build: make bench (build/bench/cublaslt_sweep)
 * usage: cublaslt_sweep fp32|bf16 m,n,k,ta,tb,EPI [...]
 *        (ta/tb: 1 = that operand stored transposed; EPI: none, bias, gelu_bias,
 *        gelu_aux_bias, dgelu, dgelu_bgrad, bgrada, bgradb (cuBLASLt's names, its A and B
 *        being our B and A); the GELU ones read or write an aux matrix shaped as D, the
 *        bias ones a vector). With an epilogue, the algorithms the heuristic offers for
 *        the same product without it are timed with it too, where cuBLASLt accepts them.
 *        HEURISTIC_ONLY=1 in the environment times the heuristic's candidates only.
 *        SUSTAIN_MS=T also times each of the heuristic's candidates as a stream of
 *        back-to-back runs of about T ms (after a second of load, two rounds over the
 *        candidates, the faster round kept): the rate a GPU held at its power limit
 *        sustains, which may rank the candidates differently from single runs. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_check.h"

#define REPS     5
#define WS_BYTES ((size_t)64 << 20)
#define MAX_CFG  4096

typedef struct {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    void *a, *b, *d, *bias, *aux, *ws;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cublasComputeType_t ct;
    cudaDataType_t abt, dt;
} problem;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    float us;
} cfg;

static const struct {
    const char *name;
    cublasLtEpilogue_t epi;
    bool bias, aux;
} epilogues[] = {
    {"none", CUBLASLT_EPILOGUE_DEFAULT, false, false},
    {"bias", CUBLASLT_EPILOGUE_BIAS, true, false},
    {"gelu_bias", CUBLASLT_EPILOGUE_GELU_BIAS, true, false},
    {"gelu_aux_bias", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, true},
    {"dgelu", CUBLASLT_EPILOGUE_DGELU, false, true},
    {"dgelu_bgrad", CUBLASLT_EPILOGUE_DGELU_BGRAD, true, true},
    {"bgrada", CUBLASLT_EPILOGUE_BGRADA, true, false},
    {"bgradb", CUBLASLT_EPILOGUE_BGRADB, true, false},
};

/* an fp32-accumulating product descriptor with the given transposes and epilogue */
static cublasLtMatmulDesc_t make_desc(cublasComputeType_t ct, cublasOperation_t opa,
                                      cublasOperation_t opb, cublasLtEpilogue_t epi) {
    cublasLtMatmulDesc_t d;
    CK(cublasLtMatmulDescCreate(&d, ct, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    return d;
}

static float time_algo(problem *p, const cublasLtMatmulAlgo_t *algo, float give_up_us) {
    float alpha = 1.0f, beta = 0.0f, t[REPS];
    for (int r = -1; r < REPS; r++) {
        CK(cudaEventRecord(p->e0, p->s));
        if (cublasLtMatmul(p->lt, p->op, &alpha, p->b, p->la, p->a, p->lb, &beta, p->d, p->lc, p->d,
                           p->lc, algo, p->ws, WS_BYTES, p->s) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
        CK(cudaEventRecord(p->e1, p->s));
        CK(cudaEventSynchronize(p->e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, p->e0, p->e1));
        if (r < 0) {
            if (give_up_us > 0 && ms * 1e3f > give_up_us) return ms * 1e3f;
            continue;
        }
        t[r] = ms * 1e3f;
    }
    for (int i = 1; i < REPS; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[REPS / 2];
}

static void describe(const cublasLtMatmulAlgo_t *a, char *out, size_t n) {
    int id = 0;
    uint32_t tile = 0, stages = 0, swz = 0, custom = 0, red = 0;
    int32_t split = 1;
    uint16_t cluster = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages,
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz,
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                         sizeof custom, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split,
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red,
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                         sizeof cluster, &w);
    snprintf(out, n, "id %d tile %u stages %u swz %u custom %u split %d red %u cluster %u", id,
             tile, stages, swz, custom, split, red, cluster);
}

static bool check(problem *p, const cublasLtMatmulAlgo_t *a) {
    cublasLtMatmulHeuristicResult_t r;
    return cublasLtMatmulAlgoCheck(p->lt, p->op, p->la, p->lb, p->lc, p->lc, a, &r) ==
               CUBLAS_STATUS_SUCCESS &&
           r.workspaceSize <= WS_BYTES;
}

static int cap_u32s(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoCapAttributes_t at,
                    uint32_t *v, int max) {
    size_t w = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(a, at, NULL, 0, &w) != CUBLAS_STATUS_SUCCESS) return 0;
    int n = (int)(w / 4);
    if (n > max) n = max;
    if (n == 0) return 0;
    if (cublasLtMatmulAlgoCapGetAttribute(a, at, v, (size_t)n * 4, &w) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return n;
}

static void fill(void *dst, size_t n, cudaDataType_t t) {
    size_t es = t == CUDA_R_32F ? 4 : 2;
    unsigned char *h = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float x = 2.0f * (float)rand() / (float)RAND_MAX - 1.0f;
        if (es == 4) {
            memcpy(h + 4 * i, &x, 4);
        } else {
            uint32_t u;
            memcpy(&u, &x, 4);
            uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            memcpy(h + 2 * i, &b, 2);
        }
    }
    CK(cudaMemcpy(dst, h, n * es, cudaMemcpyHostToDevice));
    free(h);
}

static int cmp_cfg(const void *x, const void *y) {
    float a = ((const cfg *)x)->us, b = ((const cfg *)y)->us;
    return (a > b) - (a < b);
}

/* microseconds a run of algo takes in a stream of reps back-to-back runs; < 0: it failed */
static float stream_us(problem *p, const cublasLtMatmulAlgo_t *algo, int reps) {
    float alpha = 1.0f, beta = 0.0f, ms;
    CK(cudaEventRecord(p->e0, p->s));
    for (int r = 0; r < reps; r++)
        if (cublasLtMatmul(p->lt, p->op, &alpha, p->b, p->la, p->a, p->lb, &beta, p->d, p->lc, p->d,
                           p->lc, algo, p->ws, WS_BYTES, p->s) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
    CK(cudaEventRecord(p->e1, p->s));
    CK(cudaEventSynchronize(p->e1));
    CK(cudaEventElapsedTime(&ms, p->e0, p->e1));
    return ms * 1e3f / (float)reps;
}

/* each candidate's single-run median and its sustained rate (see the top of the file) */
static void sustained(problem *p, const cublasLtMatmulHeuristicResult_t *res, int n, double ms) {
    float one[64], best[64];
    int reps[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        one[i] = time_algo(p, &res[i].algo, 0);
        reps[i] = one[i] > 0 ? (int)(ms * 1e3 / one[i]) + 1 : 0;
        best[i] = -1.0f;
    }
    if (n > 0 && reps[0] > 0) stream_us(p, &res[0].algo, (int)(1e6 / one[0]) + 1);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < n; i++) {
            if (reps[i] == 0) continue;
            float us = stream_us(p, &res[i].algo, reps[i]);
            if (us > 0 && (best[i] < 0 || us < best[i])) best[i] = us;
        }
    int fs = -1, fl = -1;
    for (int i = 0; i < n; i++) {
        char d[160];
        describe(&res[i].algo, d, sizeof d);
        printf("  candidate %2d: single %7.1f us, sustained %7.1f us [%s]\n", i, one[i], best[i],
               d);
        if (one[i] > 0 && (fs < 0 || one[i] < one[fs])) fs = i;
        if (best[i] > 0 && (fl < 0 || best[i] < best[fl])) fl = i;
    }
    if (fs >= 0 && fl >= 0)
        printf("  fastest single: %d (%.1f us single, %.1f sustained); fastest sustained: %d "
               "(%.1f single, %.1f sustained): %.1f%%\n",
               fs, one[fs], best[fs], fl, one[fl], best[fl],
               100.0 * (best[fs] - best[fl]) / best[fs]);
}

static void run_problem(cublasLtHandle_t lt, bool fp32, const char *spec) {
    long long m, n, k;
    int ta, tb, e = -1;
    char epi_name[32];
    if (sscanf(spec, "%lld,%lld,%lld,%d,%d,%31s", &m, &n, &k, &ta, &tb, epi_name) == 6)
        for (int i = 0; i < (int)(sizeof epilogues / sizeof epilogues[0]); i++)
            if (strcmp(epi_name, epilogues[i].name) == 0) e = i;
    if (e < 0) {
        fprintf(stderr,
                "bad problem '%s': want m,n,k,ta,tb,EPI (EPI: none, bias, gelu_bias, "
                "gelu_aux_bias, dgelu, dgelu_bgrad, bgrada, bgradb)\n",
                spec);
        exit(2);
    }
    problem p = {.lt = lt};
    p.ct = CUBLAS_COMPUTE_32F;
    p.abt = fp32 ? CUDA_R_32F : CUDA_R_16BF;
    p.dt = p.abt;
    size_t es = fp32 ? 4 : 2;
    CK(cudaStreamCreate(&p.s));
    CK(cudaEventCreate(&p.e0));
    CK(cudaEventCreate(&p.e1));
    CK(cudaMalloc(&p.a, (size_t)m * k * es));
    CK(cudaMalloc(&p.b, (size_t)k * n * es));
    CK(cudaMalloc(&p.d, (size_t)m * n * es));
    CK(cudaMalloc(&p.bias, (size_t)(m > n ? m : n) * 4));
    CK(cudaMalloc(&p.aux, (size_t)m * n * es));
    CK(cudaMalloc(&p.ws, WS_BYTES));
    fill(p.a, (size_t)m * k, p.abt);
    fill(p.b, (size_t)k * n, p.abt);
    fill(p.bias, (size_t)n, p.abt);
    fill(p.aux, (size_t)m * n, p.abt);
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    p.op = make_desc(p.ct, opa, opb, epilogues[e].epi);
    if (epilogues[e].bias)
        CK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                          sizeof p.bias));
    if (epilogues[e].aux) {
        int64_t ld_aux = n;
        CK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux,
                                          sizeof p.aux));
        CK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
                                          sizeof ld_aux));
    }
    CK(cublasLtMatrixLayoutCreate(&p.la, p.abt, tb ? k : n, tb ? n : k, tb ? k : n));
    CK(cublasLtMatrixLayoutCreate(&p.lb, p.abt, ta ? m : k, ta ? k : m, ta ? m : k));
    CK(cublasLtMatrixLayoutCreate(&p.lc, p.dt, n, m, n));

    /* the tuner's candidates */
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = WS_BYTES;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws));
    cublasLtMatmulHeuristicResult_t res[32];
    int found = 0, more = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.la, p.lb, p.lc, p.lc, pref, 16, res, &found));
    uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none,
                                            sizeof none));
    CK(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.la, p.lb, p.lc, p.lc, pref, 16, res + found,
                                      &more));
    cublasLtMatmulPreferenceDestroy(pref);
    float h_best = 1e30f, h_first = -1;
    char h_desc[160] = "";
    for (int i = 0; i < found + more; i++) {
        float us = time_algo(&p, &res[i].algo, 0);
        if (i == 0) h_first = us;
        if (us > 0 && us < h_best) h_best = us, describe(&res[i].algo, h_desc, sizeof h_desc);
    }
    if (getenv("SUSTAIN_MS")) sustained(&p, res, found + more, atof(getenv("SUSTAIN_MS")));
    /* the plain product's candidates, run with this epilogue */
    float pl_best = -1;
    int pl_ok = 0;
    char pl_desc[160] = "";
    if (epilogues[e].epi != CUBLASLT_EPILOGUE_DEFAULT) {
        cublasLtMatmulDesc_t plain = make_desc(p.ct, opa, opb, CUBLASLT_EPILOGUE_DEFAULT);
        CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof ws));
        cublasLtMatmulHeuristicResult_t pr[16];
        int np = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, plain, p.la, p.lb, p.lc, p.lc, pref, 16, pr, &np));
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatmulDescDestroy(plain);
        for (int i = 0; i < np; i++) {
            if (!check(&p, &pr[i].algo)) continue;
            pl_ok++;
            float us = time_algo(&p, &pr[i].algo, 0);
            if (us > 0 && (pl_best < 0 || us < pl_best))
                pl_best = us, describe(&pr[i].algo, pl_desc, sizeof pl_desc);
        }
        printf("  plain product's candidates with %s: %d of %d accepted, best %.1f us [%s]\n",
               epilogues[e].name, pl_ok, np, pl_best, pl_desc);
    }

    /* every configuration without split-k */
    static cfg all[MAX_CFG];
    int n_cfg = 0, n_tried = 0;
    int ids[256], n_ids = 0;
    CK(cublasLtMatmulAlgoGetIds(lt, p.ct, CUDA_R_32F, p.abt, p.abt, p.dt, p.dt, 256, ids, &n_ids));
    if (getenv("HEURISTIC_ONLY")) n_ids = 0;
    for (int i = 0; i < n_ids; i++) {
        cublasLtMatmulAlgo_t base;
        if (cublasLtMatmulAlgoInit(lt, p.ct, CUDA_R_32F, p.abt, p.abt, p.dt, p.dt, ids[i], &base) !=
            CUBLAS_STATUS_SUCCESS)
            continue;
        uint32_t tiles[128], stages[128], swz_ok = 0, custom_max = 0;
        int nt = cap_u32s(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, 128);
        int ns = cap_u32s(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, 128);
        size_t w;
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok,
                                          sizeof swz_ok, &w);
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                          sizeof custom_max, &w);
        if (nt == 0) tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED, nt = 1;
        if (ns == 0) stages[0] = CUBLASLT_MATMUL_STAGES_UNDEFINED, ns = 1;
        for (int t = 0; t < nt; t++)
            for (int s = 0; s < ns; s++)
                for (uint32_t z = 0; z <= (swz_ok ? 1u : 0u); z++)
                    for (uint32_t c = 0; c <= custom_max && c < 8; c++) {
                        cublasLtMatmulAlgo_t a = base;
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                             &tiles[t], 4);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                             &stages[s], 4);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                             &z, 4);
                        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                             &c, 4);
                        if (!check(&p, &a) || n_cfg == MAX_CFG) continue;
                        n_tried++;
                        float us = time_algo(&p, &a, 3.0f * h_best);
                        if (us > 0) all[n_cfg++] = (cfg){a, us};
                    }
    }
    qsort(all, (size_t)n_cfg, sizeof all[0], cmp_cfg);
    /* split-k on the eight fastest */
    int top = n_cfg < 8 ? n_cfg : 8;
    for (int i = 0; i < top; i++) {
        uint32_t red_mask = 0;
        int32_t split_ok = 0;
        size_t w;
        cublasLtMatmulAlgoCapGetAttribute(&all[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &split_ok,
                                          sizeof split_ok, &w);
        cublasLtMatmulAlgoCapGetAttribute(&all[i].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK,
                                          &red_mask, sizeof red_mask, &w);
        if (!split_ok) continue;
        static const int32_t splits[] = {2, 3, 4, 6, 8, 12, 16};
        for (int si = 0; si < 7; si++)
            for (uint32_t r = 1; r <= 4; r <<= 1) {
                if (!(red_mask & r) || n_cfg == MAX_CFG) continue;
                cublasLtMatmulAlgo_t a = all[i].algo;
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &splits[si], 4);
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &r,
                                                     4);
                if (!check(&p, &a)) continue;
                n_tried++;
                float us = time_algo(&p, &a, 3.0f * h_best);
                if (us > 0) all[n_cfg++] = (cfg){a, us};
            }
    }
    qsort(all, (size_t)n_cfg, sizeof all[0], cmp_cfg);
    /* re-time the fastest five and the heuristic's best, side by side */
    float s_best = 1e30f;
    char s_desc[160] = "";
    for (int i = 0; i < (n_cfg < 5 ? n_cfg : 5); i++) {
        float us = time_algo(&p, &all[i].algo, 0);
        if (us > 0 && us < s_best) s_best = us, describe(&all[i].algo, s_desc, sizeof s_desc);
    }
    double gflop = 2.0 * (double)m * (double)n * (double)k * 1e-9;
    printf("%s %lldx%lldx%lld ta%d tb%d %s | ids %d tried %d | heuristic first %.1f best %.1f us "
           "(%.1f TF/s) [%s] | sweep best %.1f us (%.1f TF/s) [%s] | gain %.1f%%\n",
           fp32 ? "fp32" : "bf16", m, n, k, ta, tb, epilogues[e].name, n_ids, n_tried, h_first,
           h_best, gflop / h_best * 1e3, h_desc, s_best, gflop / s_best * 1e3, s_desc,
           100.0 * (h_best - s_best) / h_best);
    fflush(stdout);
    cudaFree(p.a), cudaFree(p.b), cudaFree(p.d), cudaFree(p.bias), cudaFree(p.aux), cudaFree(p.ws);
    cublasLtMatrixLayoutDestroy(p.la), cublasLtMatrixLayoutDestroy(p.lb),
        cublasLtMatrixLayoutDestroy(p.lc);
    cublasLtMatmulDescDestroy(p.op);
    cudaEventDestroy(p.e0), cudaEventDestroy(p.e1), cudaStreamDestroy(p.s);
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "fp32") != 0 && strcmp(argv[1], "bf16") != 0)) {
        fprintf(stderr, "usage: %s fp32|bf16 m,n,k,ta,tb,EPI [...]\n", argv[0]);
        return 2;
    }
    srand(1234);
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    for (int i = 2; i < argc; i++)
        run_problem(lt, strcmp(argv[1], "fp32") == 0, argv[i]);
    cublasLtDestroy(lt);
    return 0;
}
