#!/bin/bash
# dp_trace.sh: where a data-parallel training step on N GPUs loses time against one GPU, from
# CUPTI activity traces (bench/cupti_trace.c loaded with LD_PRELOAD into every process) of the
# timed steps of `llmbench train` (GPT-2 124M bf16 16 x 1024 a GPU by default), summarised by
# trace_summary.py: the model stream's busy and idle time a step and why it idled, NCCL's
# exposed time, the kernels whose time a step grew and those slowed beside NCCL's, and the
# host's runtime calls.
#
# usage: [RUNS="1 4"] [ARGS="--zero 1"] [TAG=z1] [STEPS=10] [WARMUP=5] bench/dp_trace.sh
# RUNS: the GPU counts to trace (each summarised against the one-GPU trace of BASE_TAG,
# default TAG, traced now or before into the same $OUT); MODEL, BATCH, SEQ, PREC: the shape. The
# tracer is $TRACE_LIB (default: libcupti_trace.so beside this script, else
# build/bench/); it needs libcupti.so.13 on the loader path. Traces and the runs' JSON go
# to $OUT/TAG-Ng (default /tmp/dp_trace).
set -u
. "$(dirname "$0")/device_env.sh"
export NCCL_NVLS_ENABLE=0
lib=${TRACE_LIB:-$bench_dir/libcupti_trace.so}
[ -f "$lib" ] || lib=$bench_dir/../build/bench/libcupti_trace.so
[ -f "$lib" ] || { echo "dp_trace.sh: no libcupti_trace.so (make bench, or set TRACE_LIB)" >&2; exit 1; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
out=${OUT:-/tmp/dp_trace}
tag=${TAG:-z0}
steps=${STEPS:-10}
for n in ${RUNS:-1 4}; do
    d=$out/$tag-${n}g
    rm -rf "$d"
    mkdir -p "$d"
    where=(--device cuda)
    [ "$n" -gt 1 ] && where=(--gpus "$n")
    LB_TRACE_DIR=$d LD_PRELOAD=$lib "$LLMBENCH" train "${where[@]}" --model "${MODEL:-gpt2-124m}" \
        --precision "${PREC:-bf16}" --batch "${BATCH:-16}" --seq "${SEQ:-1024}" --steps "$steps" \
        --warmup "${WARMUP:-5}" --json -q --no-progress --db "$d/trace.db" ${ARGS:-} \
        >"$d/train.json" 2>"$d/train.err"
    echo "== $tag on $n GPU(s): train exit $?, step ms median $(python3 -c 'import json,sys
r = json.load(open(sys.argv[1])); r = r[0] if isinstance(r, list) else r
print(next((m["value"] for m in r["metrics"] if m["name"] == "step_ms_median"), "?"))' "$d/train.json" 2>/dev/null)"
    base=$out/${BASE_TAG:-$tag}-1g
    [ "$n" -gt 1 ] && [ -d "$base" ] && python3 "$bench_dir/trace_summary.py" "$base" "$d" "$steps" "${TOP:-25}"
done
