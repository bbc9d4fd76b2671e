#!/bin/bash
# dp_gpu.sh: data-parallel training on the GPUs of one machine, in one call. The parts run
# in the order PARTS names them (default: all, in this order), each skipped when the time
# left (DEADLINE_S, default 230 s from the start) is too short for it:
#   agree    loss agreement: GPT-2 124M bf16, 2 GPUs x batch 4 against 1 GPU x batch 8
#            (seq 256, 8 steps, ZeRO 0, synthetic data: each rank reads its half of the
#            batch);
#   perf     GPT-2 124M bf16 16 x 1024 per GPU on 1 and 2 GPUs: tokens/s, step, memory per
#            rank, communication time and its exposed part;
#   ddp2     PyTorch DDP + torch.compile (bench/pytorch_ddp_baseline.py) on 2 GPUs, the
#            same shape; ddp1 on 1 GPU;
#   lagree   loss agreement for Llama 3.2 1B bf16 (2 x 2 against 1 x 4, seq 256, 6 steps);
#   fp16     loss agreement for GPT-2 124M fp16 (dynamic loss scaling), as agree;
#   scaling  `llmbench train --scaling 1,2` at the perf shape: both counts as one group.
# JSON of every run goes to $OUT (or /tmp); the last lines are a summary table.
# NVLink multicast stays off (KINDS.md): NCCL_NVLS_ENABLE=0 and the like.
set -u
. "$(dirname "$0")/device_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DDP=${DDP:-$bench_dir/pytorch_ddp_baseline.py}
PARTS=${PARTS:-agree perf ddp2 ddp1 lagree fp16 scaling}
dir=${OUT:-/tmp}
db=/tmp/dp_gpu.db
start=$(date +%s)
deadline=${DEADLINE_S:-230}
left() { echo $((deadline - ($(date +%s) - start))); }
run() { # NAME NEED_S COMMAND...: runs COMMAND into $dir/NAME.json if NEED_S seconds are left
    local name=$1 need=$2
    shift 2
    if [ "$(left)" -lt "$need" ]; then
        echo "skipped $name: $(left) s left, needs $need" | tee -a "$dir/summary.txt"
        return
    fi
    timeout "$(left)" "$@" >"$dir/$name.json" 2>"$dir/$name.err" ||
        echo "$name failed (exit $?): $(tail -c 600 "$dir/$name.err")" | tee -a "$dir/summary.txt"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
"$LLMBENCH" --version
common=(--model gpt2-124m --precision bf16 --json -q --no-progress --db "$db")
perf=(--batch 16 --seq 1024 --steps 30 --warmup 5)
for part in $PARTS; do
    case $part in
    agree)
        run agree1 25 "$LLMBENCH" train --device cuda "${common[@]}" --batch 8 --seq 256 --steps 8 --warmup 0
        run agree2 25 "$LLMBENCH" train --gpus 2 "${common[@]}" --batch 4 --seq 256 --steps 8 --warmup 0 ;;
    perf)
        run perf1 30 "$LLMBENCH" train --device cuda "${common[@]}" "${perf[@]}"
        run perf2 30 "$LLMBENCH" train --gpus 2 "${common[@]}" "${perf[@]}" ;;
    ddp2) run ddp2 70 torchrun --standalone --nproc-per-node 2 "$DDP" "${perf[@]}" ;;
    ddp1) run ddp1 60 torchrun --standalone --nproc-per-node 1 "$DDP" "${perf[@]}" ;;
    lagree)
        lcommon=(--model llama3.2-1b --precision bf16 --json -q --no-progress --db "$db")
        run lagree1 30 "$LLMBENCH" train --device cuda "${lcommon[@]}" --batch 4 --seq 256 --steps 6 --warmup 0
        run lagree2 30 "$LLMBENCH" train --gpus 2 "${lcommon[@]}" --batch 2 --seq 256 --steps 6 --warmup 0 ;;
    fp16)
        hcommon=(--model gpt2-124m --precision fp16 --json -q --no-progress --db "$db")
        run hagree1 25 "$LLMBENCH" train --device cuda "${hcommon[@]}" --batch 8 --seq 256 --steps 8 --warmup 0
        run hagree2 25 "$LLMBENCH" train --gpus 2 "${hcommon[@]}" --batch 4 --seq 256 --steps 8 --warmup 0 ;;
    scaling) run scaling 60 "$LLMBENCH" train --scaling 1,2 "${common[@]}" "${perf[@]}" ;;
    esac
done
python3 - "$dir" <<'EOF' | tee -a "$dir/summary.txt"
import json, os, sys
d = sys.argv[1]
def load(name):
    try:
        t = open(os.path.join(d, name + ".json")).read()
        return json.loads(t[min(i for i in (t.find("{"), t.find("[")) if i >= 0):])
    except Exception:
        return None
def metric(r, name):
    for m in r.get("metrics", []):
        if m["name"] == name:
            return m["value"]
    return float("nan")
for a, b in (("agree1", "agree2"), ("lagree1", "lagree2"), ("hagree1", "hagree2")):
    r1, r2 = load(a), load(b)
    if r1 and r2:
        l1, l2 = r1["series"]["loss"]["values"], r2["series"]["loss"]["values"]
        rel = max(abs(x - y) / abs(x) for x, y in zip(l1, l2))
        print(f"{a} vs {b}: {r1['config']['model']} {r1['config']['precision']} losses 1 GPU {['%.5f' % x for x in l1]}")
        print(f"{'':>16} 2 GPUs {['%.5f' % x for x in l2]} max rel diff {rel:.2e}, "
              f"replicas identical {metric(r2, 'replicas_identical'):.0f}, skipped steps {metric(r2, 'skipped_steps'):.0f}")
runs = [(n, load(n)) for n in ("perf1", "perf2")]
s = load("scaling")
if s:
    runs += [("scale%d" % r["config"]["ranks"], r) for r in s]
print(f"{'run':>7} {'gpus':>4} {'tok/s':>10} {'tok/s/gpu':>10} {'eff':>6} {'step ms':>8} {'mem/rank GiB':>12} {'comm ms':>8} {'exposed ms':>10}")
for name, r in runs:
    if r:
        g = r["config"].get("ranks", 1)
        print(f"{name:>7} {g:>4} {metric(r, 'tokens_per_s'):>10.0f} {metric(r, 'tokens_per_s') / g:>10.0f} "
              f"{metric(r, 'scaling_efficiency'):>6.3f} {metric(r, 'step_ms_median'):>8.2f} "
              f"{metric(r, 'peak_device_bytes') / 2**30:>12.2f} "
              f"{metric(r, 'comm_ms_median'):>8.2f} {metric(r, 'comm_exposed_ms_median'):>10.2f}")
for name in ("ddp2", "ddp1"):
    r = load(name)
    if r:
        print(f"{name:>7} {r['gpus']:>4} {r['tokens_per_s']:>10.0f} {r['tokens_per_s_per_gpu']:>10.0f} {'':>6} "
              f"{r['step_ms_median']:>8.2f} {r['peak_mem_bytes_per_rank'] / 2**30:>12.2f}")
EOF
