#!/usr/bin/env bash
# profile_step.sh: where one training step's GPU time goes, per kernel, for each shape:
# Nsight Compute's gpu__time_duration over every kernel of one timed step after one
# warm-up step (collection starts at the timed steps' cudaProfilerStart, so weight
# initialisation and cuBLASLt's algorithm timing stay out), summarised by ncu_summary.py.
# Clocks and caches are left as found.
#
# usage: SHAPES="gpt2-124m:16:1024:bf16 llama3.2-1b:8:1024:bf16" bench/profile_step.sh
# ARGS adds train options to every shape (ARGS="--fp32-matmul int8").
# CSV captures go to $OUT (or /tmp/llmbench-bench).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
out=${OUT:-/tmp/llmbench-bench}
mkdir -p "$out"
NCU=${NCU:-$(command -v ncu || find /opt/nvidia /usr/local -name ncu -type f 2>/dev/null | head -1)}
for s in ${SHAPES:-gpt2-124m:16:1024:bf16}; do
    IFS=: read -r m b t p <<< "$s"
    tag="${m}_${b}x${t}_${p}"
    "$NCU" --clock-control none --cache-control none --profile-from-start off \
        --metrics gpu__time_duration.sum --csv \
        "$LLMBENCH" train --model "$m" --batch "$b" --seq "$t" --precision "$p" --device cuda \
        --steps 1 --warmup 1 --no-progress --db "$out/profile.db" ${ARGS:-} > "$out/ncu_$tag.csv" \
        2> "$out/ncu_$tag.err"
    echo "== $tag (ncu exit $?)"
    python3 "$(dirname "${BASH_SOURCE[0]}")/ncu_summary.py" "$out/ncu_$tag.csv" | head -${TOP:-16}
done
