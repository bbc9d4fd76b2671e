#!/usr/bin/env bash
# train_vs_pytorch.sh: llmbench's CUDA training against a PyTorch baseline of the same
# model, in one call on one GPU: selftest first (a failure is reported, the timings still
# run), then each shape with llmbench and with PyTorch (torch.compile, autocast, fused
# AdamW: tools/pytorch_gpt2_baseline.py), then one table.
#
# usage: bench/train_vs_pytorch.sh            all shapes below
#        SHAPES="gpt2-124m:16:1024:bf16" bench/train_vs_pytorch.sh
# A shape is MODEL:BATCH:SEQ:PRECISION[:FP32_MATMUL]; the fifth field (auto, ieee, tf32,
# 3xtf32, int8) is passed to llmbench as --fp32-matmul (PyTorch runs its default fp32
# products, IEEE fp32).
#        TORCH=0 bench/train_vs_pytorch.sh    llmbench only
# Raw JSON and logs go to $OUT (or /tmp/llmbench-bench).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
out=${OUT:-/tmp/llmbench-bench}
mkdir -p "$out"
SHAPES=${SHAPES:-"gpt2-124m:32:128:fp32 gpt2-124m:32:128:fp32:ieee gpt2-124m:32:128:fp32:3xtf32 gpt2-124m:32:128:fp16 gpt2-124m:32:128:bf16 gpt2-124m:16:1024:bf16 gpt2-124m:64:1024:bf16 llama3.2-1b:8:1024:bf16"}
# 100 timed steps (1-12 s a shape): a power-capped GPU's clocks settle over the first
# seconds of load, and shorter windows caught the settling (step_ms_drift_pct)
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-10}
TORCH=${TORCH:-1}
SELFTEST=${SELFTEST:-1}
export PYTHONUNBUFFERED=1

if [ "$SELFTEST" = 1 ]; then
    "$LLMBENCH" selftest > "$out/selftest.txt" 2>&1
    echo "selftest exit $?: $(tail -1 "$out/selftest.txt")"
    grep FAIL "$out/selftest.txt" | head -20
fi
for s in $SHAPES; do
    IFS=: read -r m b t p mode <<< "$s"
    tag="${m}_${b}x${t}_${p}${mode:+_$mode}"
    "$LLMBENCH" train --model "$m" --batch "$b" --seq "$t" --precision "$p" --device cuda \
        ${mode:+--fp32-matmul "$mode"} \
        --steps "$STEPS" --warmup "$WARMUP" --json --no-progress --db "$out/bench.db" \
        > "$out/llmbench_$tag.json" 2> "$out/llmbench_$tag.err"
    echo "llmbench $tag exit $? $(tail -c 300 "$out/llmbench_$tag.err" | tr '\n' ' ')"
    if [ "$TORCH" = 1 ]; then
        python3 "$BASELINE" --model "$m" --batch "$b" --seq "$t" --precision "$p" \
            --steps "$STEPS" --warmup "$WARMUP" > "$out/torch_$tag.json" 2> "$out/torch_$tag.err"
        echo "torch $tag exit $? $(tail -c 300 "$out/torch_$tag.err" | tr '\n' ' ')"
    fi
done
python3 "$(dirname "${BASH_SOURCE[0]}")/bench_table.py" "$out" $SHAPES | tee "$out/table.md"
