#!/usr/bin/env bash
# step_gaps.sh: the idle time between kernels inside llmbench's training steps (each step
# one CUDA graph), from an Nsight Systems trace of the timed steps only (they sit between
# cudaProfilerStart and cudaProfilerStop) with the graph traced node by node; summarised
# by gap_summary.py, which ends with the TOP (default 30) kernels by time a step. Clocks
# are left as found, so the steps run as in a plain run.
#
# usage: SHAPES="gpt2-124m:16:1024:bf16 gpt2-124m:32:128:fp32" [TOP=N] bench/step_gaps.sh
# GPUS=N traces `train --gpus N` (every worker; the summary reads the first GPU, with NCCL's
# kernels apart) and ARGS adds train options (ARGS="--zero 1"). Captures go to $OUT (or
# /tmp/llmbench-bench).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
out=${OUT:-/tmp/llmbench-bench}
mkdir -p "$out"
NSYS=${NSYS:-$(command -v nsys || find /opt/nvidia /usr/local -name nsys -type f -perm -u+x 2>/dev/null | head -1)}
[ -n "$NSYS" ] || { echo "step_gaps.sh: nsys not found (set NSYS)" >&2; exit 1; }
# the nsys that comes with Nsight Compute writes .qdstrm only; its importer makes the report
IMPORTER=${IMPORTER:-$(find /opt/nvidia /usr/local -name QdstrmImporter -type f 2>/dev/null | head -1)}
for s in ${SHAPES:-gpt2-124m:16:1024:bf16}; do
    IFS=: read -r m b t p <<< "$s"
    tag="${m}_${b}x${t}_${p}${GPUS:+_${GPUS}g}"
    where=(--device cuda)
    [ -n "${GPUS:-}" ] && where=(--gpus "$GPUS")
    "$NSYS" profile --trace=cuda --cuda-graph-trace=node --capture-range=cudaProfilerApi \
        --capture-range-end=stop --force-overwrite=true --output "$out/nsys_$tag" \
        "$LLMBENCH" train --model "$m" --batch "$b" --seq "$t" --precision "$p" "${where[@]}" \
        --steps "${STEPS:-20}" --warmup "${WARMUP:-10}" --no-progress --db "$out/gaps.db" ${ARGS:-} \
        > "$out/nsys_$tag.log" 2>&1
    echo "== $tag (nsys exit $?)"
    if [ ! -f "$out/nsys_$tag.nsys-rep" ] && [ -n "$IMPORTER" ]; then
        "$IMPORTER" -i "$out/nsys_$tag.qdstrm" >> "$out/nsys_$tag.log" 2>&1
        rm -f "$out/nsys_$tag.qdstrm"
    fi
    "$NSYS" export --type sqlite --force-overwrite=true --output "$out/nsys_$tag.sqlite" \
        "$out/nsys_$tag.nsys-rep" >> "$out/nsys_$tag.log" 2>&1
    rm -f "$out/nsys_$tag.nsys-rep"
    python3 "$(dirname "${BASH_SOURCE[0]}")/gap_summary.py" "$out/nsys_$tag.sqlite" "${STEPS:-20}" "${TOP:-30}"
done
