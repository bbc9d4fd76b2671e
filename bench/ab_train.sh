#!/usr/bin/env bash
# ab_train.sh: two llmbench binaries, A and B, alternating on the same shapes in one call
# (ROUNDS times each, A first), so that a change is judged against the GPU's state of the
# same minutes. Prints one line a run: tok/s, median step, SM clock, power-capped share.
#
# usage: A=./llmbench_old B=./llmbench SHAPES="gpt2-124m:16:1024:bf16" bench/ab_train.sh
# A shape is MODEL:BATCH:SEQ:PRECISION. STEPS (default 100), WARMUP (10), ROUNDS (2).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
out=${OUT:-/tmp/llmbench-bench}
mkdir -p "$out"
: "${A:?A=path of the first binary}" "${B:?B=path of the second binary}"
for s in ${SHAPES:-gpt2-124m:16:1024:bf16}; do
    IFS=: read -r m b t p <<< "$s"
    for r in $(seq 1 "${ROUNDS:-2}"); do
        for side in A B; do
            bin=${!side}
            json="$out/ab_${m}_${b}x${t}_${p}_${side}_$r.json"
            "$bin" train --model "$m" --batch "$b" --seq "$t" --precision "$p" --device cuda \
                --steps "${STEPS:-100}" --warmup "${WARMUP:-10}" --json --no-progress \
                --db "$out/ab.db" > "$json" 2> "$json.err"
            python3 - "$json" "$s" "$side" <<'PY'
import json, sys
try:
    res = json.load(open(sys.argv[1]))
except ValueError:
    print(f"{sys.argv[2]} {sys.argv[3]} failed"); sys.exit()
m = {x["name"]: x["value"] for x in res["metrics"]}
print(f"{sys.argv[2]} {sys.argv[3]} {m['tokens_per_s']:12,.0f} tok/s  step {m['step_ms_median']:7.3f} ms"
      f"  {m.get('sm_clock_mean_mhz', 0):5.0f} MHz ({m.get('clock_power_capped_pct', 0):3.0f}% capped)")
PY
        done
    done
done
