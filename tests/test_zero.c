/* test_zero.c: train/zero.h's arithmetic: units of a model, buckets over them, padding and
 * pieces on uneven sizes, the buffers' sizes, and ZeRO's memory and traffic formulas; train.h's
 * scaling, cost and slowest-rank figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "train/train.h"
#include "train/zero.h"

static void test_zero_units_cover_the_model_in_layout_order(void **state) {
    (void)state;
    lb_model_config cfg;
    assert_int_equal(lb_model_config_preset("gpt2-tiny", &cfg, NULL), LB_OK);
    int64_t b[8];
    assert_int_equal(lb_zero_model_units(&cfg, b), cfg.n_layer + 2);
    lb_param_offsets o;
    lb_model_param_offsets(&cfg, &o);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], o.layers);
    assert_int_equal(b[2] - b[1], o.layer_numel);
    assert_int_equal(b[3], o.normf_w);
    assert_int_equal(b[4], o.total);
    /* untied head: the last unit holds normf and lm_head */
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, NULL), LB_OK);
    lb_model_param_offsets(&cfg, &o);
    assert_int_equal(lb_zero_model_units(&cfg, b), 4);
    assert_true(o.lm_head > b[3] && o.lm_head < b[4]);
}

static void test_zero_buckets_pad_uneven_units_and_pieces_tile_them(void **state) {
    (void)state;
    /* units of 10, 7, 1, 30 and 5 elements over 3 ranks, align 2: quantum 6 */
    const int64_t bounds[] = {0, 10, 17, 18, 48, 53};
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, bounds, 5, 18, 3, 2, NULL), LB_OK);
    /* buckets: {10, 7, 1} = 18, {30} alone (larger than the cap), {5} */
    assert_int_equal(p.n_buckets, 3);
    assert_int_equal(p.buckets[0].unit_lo, 0);
    assert_int_equal(p.buckets[0].unit_hi, 2);
    assert_int_equal(p.buckets[0].padded, 18);
    assert_int_equal(p.buckets[1].start, 18);
    assert_int_equal(p.buckets[1].end, 48);
    assert_int_equal(p.buckets[1].padded, 30);
    assert_int_equal(p.buckets[2].padded, 6);
    assert_int_equal(p.buckets[2].piece, 2);
    assert_int_equal(p.bucket_of_unit[3], 1);
    assert_int_equal(p.bucket_of_unit[4], 2);
    assert_int_equal(p.shard_elems, 6 + 10 + 2);
    assert_int_equal(p.max_padded, 30);
    assert_int_equal(p.buckets[2].shard_offset, 16);
    /* every real element belongs to exactly one rank's piece */
    for (int b = 0; b < p.n_buckets; b++) {
        int64_t covered = 0, prev_hi = p.buckets[b].start;
        for (int r = 0; r < 3; r++) {
            int64_t lo, hi;
            lb_zero_piece(&p, b, r, &lo, &hi);
            assert_int_equal(lo, prev_hi);
            assert_true(hi >= lo && hi - lo <= p.buckets[b].piece);
            covered += hi - lo;
            prev_hi = hi;
        }
        assert_int_equal(covered, p.buckets[b].end - p.buckets[b].start);
    }
    /* the last bucket: 5 elements in pieces of 2: rank 2 holds one real element */
    int64_t lo, hi;
    lb_zero_piece(&p, 2, 2, &lo, &hi);
    assert_int_equal(lo, 52);
    assert_int_equal(hi, 53);
    lb_zero_plan_free(&p);
}

/* Stages 1-3's buffers (dp_cuda.c): copy and gradient buffers by the buckets' parity,
 * the gathers' large buffer and two small ones. */
static void test_zero_buffers_by_turn_and_size(void **state) {
    (void)state;
    /* units of 4, 36, 2 and 30 elements a bucket each over 2 ranks, align 4: padded 8, 40,
     * 8 and 32; the last runs past the array's end (42 + 32 > 72) */
    const int64_t bounds[] = {0, 4, 40, 42, 72};
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, bounds, 4, 0, 2, 4, NULL), LB_OK);
    int64_t other[2];
    /* stages 1-2 send the last bucket, whose padding runs past the end, through a buffer;
     * stage 3 needs none */
    assert_int_equal(lb_zero_send_elems(&p, LB_ZERO_1), 32);
    assert_int_equal(lb_zero_send_elems(&p, LB_ZERO_2), 32);
    assert_int_equal(lb_zero_send_elems(&p, LB_ZERO_3), 0);
    assert_int_equal(lb_zero_send_elems(&p, LB_ZERO_0), 0);
    lb_zero_other_slots(&p, other);
    assert_int_equal(other[0], 8); /* bucket 2, padded; bucket 0 has its own */
    assert_int_equal(other[1], 40);
    /* a last bucket whose padding ends inside the array needs no buffer */
    const int64_t fits[] = {0, 40, 44, 52};
    lb_zero_plan q;
    assert_int_equal(lb_zero_plan_init(&q, fits, 3, 0, 2, 4, NULL), LB_OK);
    assert_int_equal(lb_zero_send_elems(&q, LB_ZERO_1), 0);
    lb_zero_plan_free(&q);
    /* layers: unit 2 alone; unit 3 the head with 5 elements after it */
    lb_zero_gathers g;
    lb_zero_gather_sizes(&p, 2, 3, 3, 5, &g);
    assert_int_equal(g.size[0], 40);
    assert_int_equal(g.size[1], 8);
    assert_int_equal(g.size[2], 8);
    assert_false(lb_zero_gather_big(&p, &g, 0)); /* 8 fits a small buffer */
    assert_true(lb_zero_gather_big(&p, &g, 1));
    assert_false(lb_zero_gather_big(&p, &g, 2));
    assert_true(lb_zero_gather_big(&p, &g, 3));
    /* the head's rows count: unit 2 as the head needs 9, so the small buffers hold 9 */
    lb_zero_gather_sizes(&p, 2, 3, 2, 1, &g);
    assert_int_equal(g.size[1], 9);
    /* layers as large as any unit (no head): no unit needs the large buffer alone */
    lb_zero_gather_sizes(&p, 1, 3, -1, 0, &g);
    assert_int_equal(g.size[0], g.size[1]);
    assert_false(lb_zero_gather_big(&p, &g, 3));
    /* micro-batches add at stages 2-3 only */
    assert_false(lb_zero_adds(LB_ZERO_1, 4));
    assert_false(lb_zero_adds(LB_ZERO_2, 1));
    assert_true(lb_zero_adds(LB_ZERO_2, 2));
    assert_true(lb_zero_adds(LB_ZERO_3, 2));
    lb_zero_plan_free(&p);
}

/* A model's gathers: the head's unit and rows past V, the layers' units small; and when an
 * untied embedding travels as rows. */
static void test_zero_model_gathers_and_rows(void **state) {
    (void)state;
    lb_model_config cfg;
    assert_int_equal(lb_model_config_preset("llama-tiny", &cfg, NULL), LB_OK);
    cfg.vocab_size = 1000; /* 1,024 rows read: 24 x C past V */
    int64_t b[8];
    int n = lb_zero_model_units(&cfg, b);
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, b, n, 0, 2, 64, NULL), LB_OK);
    lb_zero_gathers g;
    lb_zero_model_gathers(&p, &cfg, false, &g);
    assert_int_equal(g.head_unit, n - 1); /* untied: the final norm and the head */
    assert_int_equal(g.head_pad, 24 * cfg.d_model);
    assert_int_equal(g.size[0], p.buckets[n - 1].padded + 24 * cfg.d_model);
    assert_int_equal(g.size[1], p.buckets[1].padded);
    assert_true(lb_zero_gather_big(&p, &g, 0)); /* 1,000 rows of embeddings */
    assert_false(lb_zero_gather_big(&p, &g, 1));
    assert_true(lb_zero_gather_big(&p, &g, n - 1));
    assert_true(lb_zero_rows(&p, &cfg, 1));
    assert_false(lb_zero_rows(&p, &cfg, 2));
    /* adapters: every unit a layer, no head */
    lb_zero_model_gathers(&p, &cfg, true, &g);
    assert_int_equal(g.head_unit, -1);
    assert_int_equal(g.size[0], g.size[1]);
    lb_zero_plan_free(&p);
    /* the embeddings sharing a bucket, or a tied head: no rows */
    assert_int_equal(lb_zero_plan_init(&p, b, n, b[n], 2, 64, NULL), LB_OK);
    assert_false(lb_zero_rows(&p, &cfg, 1));
    lb_zero_plan_free(&p);
    cfg.tied_embeddings = 1;
    n = lb_zero_model_units(&cfg, b);
    assert_int_equal(lb_zero_plan_init(&p, b, n, 0, 2, 64, NULL), LB_OK);
    assert_false(lb_zero_rows(&p, &cfg, 1));
    lb_zero_model_gathers(&p, &cfg, false, &g);
    assert_int_equal(g.head_unit, 0);
    lb_zero_plan_free(&p);
}

static void test_zero_all_padding_piece_is_empty(void **state) {
    (void)state;
    /* 3 elements over 8 ranks: pieces of 1, ranks 3-7 hold only padding */
    const int64_t bounds[] = {0, 3};
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, bounds, 1, 0, 8, 1, NULL), LB_OK);
    assert_int_equal(p.buckets[0].padded, 8);
    int64_t lo, hi;
    lb_zero_piece(&p, 0, 5, &lo, &hi);
    assert_int_equal(lo, hi);
    lb_zero_piece(&p, 0, 2, &lo, &hi);
    assert_int_equal(hi - lo, 1);
    lb_zero_plan_free(&p);
}

static void test_zero_unit_buckets_when_cap_is_zero(void **state) {
    (void)state;
    const int64_t bounds[] = {0, 4, 8, 12};
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, bounds, 3, 0, 1, 1, NULL), LB_OK);
    assert_int_equal(p.n_buckets, 3);
    assert_int_equal(p.shard_elems, 12);
    lb_zero_plan_free(&p);
    assert_int_equal(lb_zero_plan_init(&p, bounds, 3, 1 << 20, 1, 1, NULL), LB_OK);
    assert_int_equal(p.n_buckets, 1);
    lb_zero_plan_free(&p);
}

static void test_zero_shard_segments_follow_tensors_and_padding(void **state) {
    (void)state;
    /* units of 10, 7 and 3 elements, one a bucket, over 2 ranks with align 2 (quantum 4):
     * pieces 6, 4 and 2, at shard offsets 0, 6 and 10 */
    const int64_t bounds[] = {0, 10, 17, 20};
    lb_zero_plan p;
    assert_int_equal(lb_zero_plan_init(&p, bounds, 3, 0, 2, 2, NULL), LB_OK);
    lb_param_tensor t[5];
    memset(t, 0, sizeof t);
    const int64_t off[] = {0, 4, 10, 16, 17, 20};
    const int dec[] = {1, 0, 1, 0, 1};
    for (int i = 0; i < 5; i++)
        t[i].offset = off[i], t[i].numel = off[i + 1] - off[i], t[i].decay = dec[i];
    int64_t start[8];
    lb_zero_seg kind[8];
    /* rank 0: [0, 6) holds t0 and t1, [10, 14) t2, [17, 19) t4; no padding */
    assert_int_equal(lb_zero_shard_segments(&p, 0, t, 5, start, kind, 8), 4);
    const int64_t s0[] = {0, 4, 6, 10};
    const lb_zero_seg P = LB_ZERO_SEG_PLAIN, D = LB_ZERO_SEG_DECAY, X = LB_ZERO_SEG_PAD;
    const lb_zero_seg d0[] = {D, P, D, D};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(start[i], s0[i]);
        assert_int_equal(kind[i], d0[i]);
    }
    /* rank 1: [6, 10) of t1 then 2 of padding; [14, 17) t2 and t3, 1 of padding; [19, 20)
     * t4, 1 of padding */
    assert_int_equal(lb_zero_shard_segments(&p, 1, t, 5, NULL, NULL, 0), 7);
    assert_int_equal(lb_zero_shard_segments(&p, 1, t, 5, start, kind, 8), 7);
    const int64_t s1[] = {0, 4, 6, 8, 9, 10, 11};
    const lb_zero_seg d1[] = {P, X, D, P, X, D, X};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(start[i], s1[i]);
        assert_int_equal(kind[i], d1[i]);
    }
    /* a short table gets the first cap segments and the count of all */
    memset(start, -1, sizeof start);
    assert_int_equal(lb_zero_shard_segments(&p, 1, t, 5, start, kind, 2), 7);
    assert_int_equal(start[1], 4);
    assert_int_equal(start[2], -1);
    lb_zero_plan_free(&p);
}

static void test_zero_plan_refuses_nonsense(void **state) {
    (void)state;
    const int64_t empty[] = {0, 4, 4};
    lb_zero_plan p;
    lb_err err = {{0}};
    assert_int_equal(lb_zero_plan_init(&p, empty, 2, 0, 2, 1, &err), LB_ERR_USAGE);
    assert_non_null(strstr(err.msg, "unit 1 is empty"));
    const int64_t ok[] = {0, 4};
    assert_int_equal(lb_zero_plan_init(&p, ok, 1, 0, 0, 1, &err), LB_ERR_USAGE);
    lb_zero_plan_free(&p);
    lb_zero_plan_free(NULL);
}

static void test_zero_formulas_match_the_paper(void **state) {
    (void)state;
    const double P = 1e9;
    /* 16-bit mixed precision: 16P, 4P + 12P/N, 2P + 14P/N, 16P/N */
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_0, LB_PREC_BF16, P, 4), 16e9, 1);
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_1, LB_PREC_BF16, P, 4), 4e9 + 3e9, 1);
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_2, LB_PREC_FP16, P, 4), 2e9 + 3.5e9, 1);
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_3, LB_PREC_BF16, P, 4), 4e9, 1);
    /* fp32: 16P, 8P + 8P/N, 4P + 12P/N, 16P/N */
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_1, LB_PREC_FP32, P, 2), 8e9 + 4e9, 1);
    assert_float_equal(lb_zero_state_bytes(LB_ZERO_2, LB_PREC_FP32, P, 2), 4e9 + 6e9, 1);
    /* traffic: 2 (N-1)/N P b for stages 0-2, 3 (N-1)/N P b for stage 3, 0 on one rank */
    assert_float_equal(lb_zero_traffic_bytes(LB_ZERO_0, LB_PREC_BF16, P, 4), 2 * 0.75 * 2e9, 1);
    assert_float_equal(lb_zero_traffic_bytes(LB_ZERO_3, LB_PREC_FP32, P, 2), 3 * 0.5 * 4e9, 1);
    assert_float_equal(lb_zero_traffic_bytes(LB_ZERO_2, LB_PREC_FP32, P, 1), 0, 0);
    assert_float_equal(lb_zero_ring_bytes(LB_ZERO_ALL_REDUCE, 400, 4), 600, 1e-9);
    assert_float_equal(lb_zero_ring_bytes(LB_ZERO_ALL_GATHER, 400, 4), 300, 1e-9);
}

/* Adapters: fp32 gradients at every stage, the working copy gathered in its own type. */
static void test_zero_adapter_traffic_by_stage(void **state) {
    (void)state;
    const double n = 1e6;
    assert_float_equal(lb_zero_adapter_traffic_bytes(LB_ZERO_0, LB_PREC_BF16, n, 4), 2 * 0.75 * 4e6,
                       1e-6);
    assert_float_equal(lb_zero_adapter_traffic_bytes(LB_ZERO_1, LB_PREC_BF16, n, 4), 0.75 * 6e6,
                       1e-6);
    assert_float_equal(lb_zero_adapter_traffic_bytes(LB_ZERO_2, LB_PREC_FP32, n, 2), 0.5 * 8e6,
                       1e-6);
    assert_float_equal(lb_zero_adapter_traffic_bytes(LB_ZERO_3, LB_PREC_FP16, n, 4), 0.75 * 8e6,
                       1e-6);
    assert_float_equal(lb_zero_adapter_traffic_bytes(LB_ZERO_3, LB_PREC_FP32, n, 1), 0, 0);
}

static void test_train_scaling_cost_and_slowest_rank(void **state) {
    (void)state;
    assert_float_equal(lb_train_scaling_efficiency(1.8e6, 4, 5e5), 0.9, 1e-12);
    /* 8 an hour at 100 samples/s: 8/3600 per second, 10 s per 1000 samples */
    assert_float_equal(lb_train_cost_per_1k_samples(8, 100), 8.0 / 360, 1e-12);
    assert_float_equal(lb_train_cost_per_1m_tokens(3.6, 1000), 1.0, 1e-12);
    const double med[] = {10, 12.5, 9, 10};
    double pct = 0;
    assert_int_equal(lb_train_slowest_rank(med, 4, &pct), 1);
    assert_float_equal(pct, 100.0 * 3.5 / 9, 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_units_cover_the_model_in_layout_order),
        cmocka_unit_test(test_zero_buckets_pad_uneven_units_and_pieces_tile_them),
        cmocka_unit_test(test_zero_buffers_by_turn_and_size),
        cmocka_unit_test(test_zero_model_gathers_and_rows),
        cmocka_unit_test(test_zero_all_padding_piece_is_empty),
        cmocka_unit_test(test_zero_unit_buckets_when_cap_is_zero),
        cmocka_unit_test(test_zero_shard_segments_follow_tensors_and_padding),
        cmocka_unit_test(test_zero_plan_refuses_nonsense),
        cmocka_unit_test(test_zero_formulas_match_the_paper),
        cmocka_unit_test(test_zero_adapter_traffic_by_stage),
        cmocka_unit_test(test_train_scaling_cost_and_slowest_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
