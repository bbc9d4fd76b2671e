#!/usr/bin/env bash
# fp32_products.sh: the fp32 product modes side by side in one call on the GPU machine.
# Runs the selftest's product, int8 cut and whole-model rows, then GPT-2 124M 32x128 fp32
# training with each --fp32-matmul mode given (MODES, default "ieee int8"), ROUNDS times
# alternating, and prints one line a run: tok/s, median step, final loss. Extra binaries
# (BINS="name=path ...") run the int8 mode too, for builds with another digit count.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
out=${OUT:-/tmp/llmbench-bench}
mkdir -p "$out"
"$LLMBENCH" selftest --only matmul --no-model
"$LLMBENCH" selftest --only int8 --no-model
"$LLMBENCH" selftest --only model --no-kernels | grep -E "fp32|int8|3xtf32|checks"
run() { # label binary mode
    local json="$out/fp32_$1_$3_$r.json"
    "$2" train --model gpt2-124m --batch 32 --seq 128 --precision fp32 --device cuda \
        --fp32-matmul "$3" --steps "${STEPS:-100}" --warmup "${WARMUP:-10}" --json --no-progress \
        --db "$out/fp32.db" > "$json" 2> "$json.err" || { echo "$1 $3 failed:"; tail -3 "$json.err"; return; }
    python3 - "$json" "$1 $3" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))
m = {x["name"]: x["value"] for x in res["metrics"]}
print(f"{sys.argv[2]:>16} {m['tokens_per_s']:10,.0f} tok/s  step {m['step_ms_median']:7.3f} ms"
      f"  loss {m.get('final_loss', float('nan')):.4f}  MFU {m.get('mfu', float('nan')):.3f}"
      f"  peak {m.get('peak_device_bytes', 0)/2**30:.2f} GiB")
PY
}
for r in $(seq 1 "${ROUNDS:-2}"); do
    for mode in ${MODES:-ieee int8}; do run main "$LLMBENCH" "$mode"; done
    for b in ${BINS:-}; do run "${b%%=*}" "${b#*=}" int8; done
done
