#!/bin/bash
# dp_gpu.sh: data-parallel GPU training (ZeRO 0-3) on the GPUs of one machine, in one call.
# The parts run in the order PARTS names them (default: all, in this order), each run
# skipped when the time left (DEADLINE_S, default 480 s from the start) is shorter than it
# needs; every part runs alone (PARTS=perf):
#   correct  loss agreement: for each model of CMODELS and precision of PRECS, one GPU with
#            the whole batch (CBATCH x CSEQ (256), CSTEPS steps, synthetic data) against each GPU
#            count of GPUS with batch CBATCH / N each at every stage of STAGES (each rank
#            reads its part of the same global batch); GPT-2 runs also write their fp32
#            parameters (--save-params, into PARAMS_DIR, default /tmp/dp_gpu_params, not
#            $OUT), compared with the same GPU count's ZeRO 0 run and with the one-GPU run;
#            CONE=0 leaves the one-GPU run out (one in $OUT from before is the reference);
#   perf     GPT-2 124M bf16 16 x 1024 per GPU at every stage of STAGES on 1 and each of
#            GPUS: tokens/s, scaling efficiency against the one-GPU stage 0 run, memory per
#            rank, communication and its exposed part, bytes sent beside the formula;
#            with CTAS (a list of NCCL_MAX_CTAS values, "-" for NCCL's default) each
#            multi-GPU run is repeated under each value (named ...-ctaV), and with BUCKETS
#            (a list of --bucket-mb values, "-" for the default) under each value (named
#            ...-bV); the one-GPU runs once (PONE=0 leaves them out);
#   ddp      PyTorch DDP + torch.compile (bench/pytorch_ddp_baseline.py) at the perf shape
#            on 1 and each of GPUS;
#   stages   the stage table: GPT-2 124M 32 x 128, every stage of STAGES x SPRECS on each
#            count of SGPUS, REPEATS runs each: median and std of tokens/s and step time,
#            peak memory per rank;
#   llama    Llama 3.2 1B bf16 8 x 1024 at each of LSTAGES on LGPUS GPUs, and Llama 3.1 8B
#            bf16 at ZeRO 3 (BIG=0 leaves it out): tokens/s, MFU, memory per rank against
#            the formula.
# TRAIN_ARGS: options added to every llmbench run.
# Steps: STEPS timed after WARMUP warm-up steps (20 and 5). A collective stuck for
# COMM_TIMEOUT s (30) ends its run. JSON of every run goes to $OUT
# (or /tmp/dp_gpu); the last lines are the summary tables.
# NVLink multicast stays off (KINDS.md): NCCL_NVLS_ENABLE=0 and the like.
set -u
. "$(dirname "$0")/device_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DDP=${DDP:-$bench_dir/pytorch_ddp_baseline.py}
PARTS=${PARTS:-correct perf ddp stages llama}
GPUS=${GPUS:-2 4}
STAGES=${STAGES:-0 1 2 3}
PRECS=${PRECS:-bf16 fp16}
CMODELS=${CMODELS:-gpt2-124m llama3.2-1b}
CBATCH=${CBATCH:-8}
CSEQ=${CSEQ:-256}
CSTEPS=${CSTEPS:-8}
SGPUS=${SGPUS:-1 4}
SPRECS=${SPRECS:-fp16 fp32}
REPEATS=${REPEATS:-3}
LGPUS=${LGPUS:-4}
LSTAGES=${LSTAGES:-1 3}
BIG=${BIG:-1}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
dir=${OUT:-/tmp/dp_gpu}
pdir=${PARAMS_DIR:-/tmp/dp_gpu_params} # the correct part's parameters (0.5 GB a run): not in $OUT
mkdir -p "$dir" "$pdir"
db=$dir/dp_gpu.db
start=$(date +%s)
deadline=${DEADLINE_S:-480}
left() { echo $((deadline - ($(date +%s) - start))); }
run() { # NAME NEED_S COMMAND...: runs COMMAND into $dir/NAME.json if NEED_S seconds are left,
    # for at most 4 x NEED_S (a hung run costs the call no more)
    local name=$1 need=$2
    shift 2
    if [ "$(left)" -lt "$need" ]; then
        echo "skipped $name: $(left) s left, needs $need" | tee -a "$dir/summary.txt"
        return
    fi
    local t0=$(date +%s) cap=$((4 * need))
    [ "$cap" -gt "$(left)" ] && cap=$(left)
    timeout "$cap" "$@" >"$dir/$name.json" 2>"$dir/$name.err" ||
        echo "$name failed (exit $?): $(tail -c 600 "$dir/$name.err")" | tee -a "$dir/summary.txt"
    echo "$name $(($(date +%s) - t0)) s" >>"$dir/times.txt"
}
train() { # NAME NEED_S GPUS ARGS...: llmbench train on one GPU or N local workers
    local name=$1 need=$2 n=$3
    shift 3
    local where=(--device cuda)
    [ "$n" -gt 1 ] && where=(--gpus "$n")
    run "$name" "$need" "$LLMBENCH" train "${where[@]}" --json -q --no-progress --db "$db" \
        --comm-timeout "${COMM_TIMEOUT:-30}" "$@" ${TRAIN_ARGS:-}
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
"$LLMBENCH" --version
perf=(--model gpt2-124m --precision bf16 --batch 16 --seq 1024 --steps "$STEPS" --warmup "$WARMUP")
for part in $PARTS; do
    case $part in
    correct)
        for model in $CMODELS; do
            for prec in $PRECS; do
                c=(--model "$model" --precision "$prec" --seq "$CSEQ" --steps "$CSTEPS" --warmup 0)
                save() { [ "$model" = gpt2-124m ] && echo --save-params "$pdir/$1.safetensors"; }
                [ "${CONE:-1}" = 1 ] &&
                    train "c-$model-$prec-1g" 25 1 "${c[@]}" --batch "$CBATCH" $(save "c-$model-$prec-1g")
                for n in $GPUS; do
                    for z in $STAGES; do
                        name=c-$model-$prec-${n}g-z$z
                        train "$name" 25 "$n" "${c[@]}" --batch $((CBATCH / n)) --zero "$z" $(save "$name")
                    done
                done
            done
        done ;;
    perf)
        ones=1
        [ "${PONE:-1}" = 0 ] && ones=
        for n in $ones $GPUS; do
            for z in $STAGES; do
                for c in ${CTAS:--}; do
                    for k in ${BUCKETS:--}; do
                        if [ "$n" = 1 ] || { [ "$c" = - ] && [ "$k" = - ]; }; then
                            train "p-${n}g-z$z" 25 "$n" "${perf[@]}" --zero "$z"
                        elif [ "$k" = - ]; then
                            NCCL_MAX_CTAS=$c train "p-${n}g-z$z-cta$c" 25 "$n" "${perf[@]}" --zero "$z"
                        elif [ "$c" = - ]; then
                            train "p-${n}g-z$z-b$k" 25 "$n" "${perf[@]}" --zero "$z" --bucket-mb "$k"
                        else
                            NCCL_MAX_CTAS=$c train "p-${n}g-z$z-cta$c-b$k" 25 "$n" "${perf[@]}" --zero "$z" \
                                --bucket-mb "$k"
                        fi
                        [ "$n" = 1 ] && break 2
                    done
                done
            done
        done ;;
    ddp)
        for n in 1 $GPUS; do
            run "ddp-${n}g" 70 torchrun --standalone --nproc-per-node "$n" "$DDP" --batch 16 --seq 1024 \
                --steps "$STEPS" --warmup "$WARMUP"
        done ;;
    stages)
        for n in $SGPUS; do
            for prec in $SPRECS; do
                for z in $STAGES; do
                    for rep in $(seq 1 "$REPEATS"); do
                        train "s-${n}g-$prec-z$z-r$rep" 15 "$n" --model gpt2-124m --precision "$prec" \
                            --batch 32 --seq 128 --steps "$STEPS" --warmup "$WARMUP" --zero "$z"
                    done
                done
            done
        done ;;
    llama)
        for z in $LSTAGES; do
            train "l-1b-${LGPUS}g-z$z" 40 "$LGPUS" --model llama3.2-1b --precision bf16 --batch 8 \
                --seq 1024 --steps "$STEPS" --warmup "$WARMUP" --zero "$z"
        done
        [ "$BIG" = 1 ] && train "l-8b-${LGPUS}g-z3" 90 "$LGPUS" --model llama3.1-8b --precision bf16 \
            --batch 1 --seq 1024 --steps 10 --warmup 3 --zero 3 ;;
    esac
done
python3 - "$dir" "$GPUS" "$STAGES" "$pdir" <<'EOF' | tee -a "$dir/summary.txt"
import glob, json, os, statistics, struct, sys
d, gpus, stages, pdir = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
TOL = {"bf16": 2e-2, "fp16": 2e-2, "fp32": 1e-4}  # relative loss difference per precision
def load(name):
    try:
        t = open(os.path.join(d, name + ".json")).read()
        r = json.loads(t[min(i for i in (t.find("{"), t.find("[")) if i >= 0):])
        return r[0] if isinstance(r, list) and len(r) == 1 else r
    except Exception:
        return None
def metric(r, name):
    for m in (r or {}).get("metrics", []):
        if m["name"] == name:
            return m["value"]
    return float("nan")
try:
    import numpy as np
except ImportError:
    np = None
def params(name):
    path = os.path.join(pdir, name + ".safetensors")
    if np is None or not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = np.frombuffer(f.read(), dtype=np.float32)
    return data
def compare(a, b):
    if a is None or b is None or a.shape != b.shape:
        return "n/a"
    diff = a.astype(np.float64) - b
    return f"max |d| {np.abs(diff).max():.2e}, rel L2 {np.linalg.norm(diff) / np.linalg.norm(b):.2e}"
gib = 2**30
# correctness
rows = sorted({os.path.basename(p)[2:-5].rsplit("-", 1)[0] for p in glob.glob(os.path.join(d, "c-*-1g.json"))})
if rows:
    print("\n== loss agreement: N GPUs x batch B/N against 1 GPU x batch B (same tokens) ==")
    print(f"{'run':>28} {'max rel dloss':>13} {'tol':>6} {'ok':>4} {'replicas':>8} {'skipped':>7}  params vs ZeRO 0 (same N) | vs 1 GPU")
for key in rows:
    ref = load(f"c-{key}-1g")
    prec = key.rsplit("-", 1)[1]
    if not ref:
        continue
    l1 = ref["series"]["loss"]["values"]
    p1 = params(f"c-{key}-1g")
    print(f"{'c-' + key + '-1g':>28} losses {' '.join('%.4f' % x for x in l1)}")
    for n in gpus:
        p0 = params(f"c-{key}-{n}g-z0")
        for z in stages:
            name = f"c-{key}-{n}g-z{z}"
            r = load(name)
            if not r:
                continue
            l2 = r["series"]["loss"]["values"]
            rel = max(abs(x - y) / abs(x) for x, y in zip(l1, l2))
            ok = "yes" if rel <= TOL[prec] and len(l1) == len(l2) else "NO"
            pz = params(name)
            print(f"{name:>28} {rel:>13.2e} {TOL[prec]:>6.0e} {ok:>4} {metric(r, 'replicas_identical'):>8.0f} "
                  f"{metric(r, 'skipped_steps'):>7.0f}  {compare(pz, p0) if z != '0' else '-'} | {compare(pz, p1)}")
# throughput
def max_sum_tok(r, tok):
    """tokens/s over the sum of the per-step maxima (step_ms), the rate's divisor before
    lb_train_timed_seconds: tok x S / that sum"""
    ms = r["series"].get("step_ms", {}).get("values", [])
    own = [sum(r["series"][k]["values"]) for k in r["series"] if k.startswith("step_ms.r")]
    return tok * (max(own) if own else sum(ms)) / sum(ms) if ms else float("nan")
def perf_row(name, r, base):
    g = r["config"].get("ranks", 1)
    tok = metric(r, "tokens_per_s")
    eff = tok / (g * base) if base == base and base > 0 else float("nan")
    eff_max = max_sum_tok(r, tok) / (g * base) if base == base and base > 0 else float("nan")
    return (f"{name:>18} {g:>4} {r['config'].get('zero', 0):>4} {tok:>10.0f} {tok / g:>10.0f} {eff:>6.3f} {eff_max:>6.3f} "
            f"{metric(r, 'step_ms_median'):>8.2f} {metric(r, 'mfu'):>5.3f} {metric(r, 'peak_device_bytes') / gib:>8.2f} "
            f"{metric(r, 'zero_state_bytes_formula') / gib:>8.2f} {metric(r, 'comm_ms_median'):>7.2f} "
            f"{metric(r, 'comm_exposed_ms_median'):>7.2f} {metric(r, 'sent_bytes_per_step') / 1e6:>8.1f} "
            f"{metric(r, 'sent_bytes_formula') / 1e6:>8.1f}")
head = (f"{'run':>18} {'gpus':>4} {'zero':>4} {'tok/s':>10} {'tok/s/gpu':>10} {'eff':>6} {'eff Σmax':>6} {'step ms':>8} {'mfu':>5} "
        f"{'mem GiB':>8} {'formula':>8} {'comm ms':>7} {'exposed':>7} {'sent MB':>8} {'formula':>8}")
perf = sorted(glob.glob(os.path.join(d, "p-*.json")))
if perf:
    print("\n== GPT-2 124M bf16 16 x 1024 per GPU (eff: against 1 GPU at ZeRO 0; eff Σmax: the same over the sum of the per-step maxima; mem: arena per rank; formula: ZeRO's state bytes) ==")
    print(head)
    base = metric(load("p-1g-z0"), "tokens_per_s")
    for n in ["1"] + gpus:
        for z in stages:
            for name in [f"p-{n}g-z{z}"] + sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(d, f"p-{n}g-z{z}-[cb]*.json"))):
                r = load(name)
                if r:
                    print(perf_row(name, r, base))
    ddp1 = load("ddp-1g")
    for n in ["1"] + gpus:
        r = load(f"ddp-{n}g")
        if r:
            eff = r["tokens_per_s"] / (int(n) * ddp1["tokens_per_s"]) if ddp1 else float("nan")
            ours = metric(load(f"p-{n}g-z0"), "tokens_per_s")
            print(f"{'ddp-' + n + 'g':>18} {n:>4} {'':>4} {r['tokens_per_s']:>10.0f} {r['tokens_per_s_per_gpu']:>10.0f} "
                  f"{eff:>6.3f} {r['step_ms_median']:>8.2f} {'':>5} {r['peak_mem_bytes_per_rank'] / gib:>8.2f}"
                  f"   llmbench ZeRO 0 / DDP: {ours / r['tokens_per_s']:.2f}x")
srs = glob.glob(os.path.join(d, "s-*.json"))
if srs:
    print("\n== stage table: GPT-2 124M 32 x 128 (median / std over repeats) ==")
    print(f"{'gpus':>4} {'prec':>5} {'zero':>4} {'n':>2} {'tok/s med':>10} {'std':>8} {'step ms':>8} {'std':>6} {'mem GiB':>8} {'formula':>8} {'util %':>6}")
    groups = {}
    for p in srs:
        k = os.path.basename(p)[2:-5].rsplit("-r", 1)[0]
        r = load(os.path.basename(p)[:-5])
        if r:
            groups.setdefault(k, []).append(r)
    for k in sorted(groups):
        n, prec, z = k.split("-")
        rs = groups[k]
        tok = [metric(r, "tokens_per_s") for r in rs]
        ms = [metric(r, "step_ms_median") for r in rs]
        sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
        print(f"{n[:-1]:>4} {prec:>5} {z[1:]:>4} {len(rs):>2} {statistics.median(tok):>10.0f} {sd(tok):>8.0f} "
              f"{statistics.median(ms):>8.2f} {sd(ms):>6.2f} {max(metric(r, 'peak_device_bytes') for r in rs) / gib:>8.2f} "
              f"{metric(rs[0], 'zero_state_bytes_formula') / gib:>8.2f} {statistics.median(metric(r, 'gpu_util_mean_pct') for r in rs):>6.1f}")
lrs = sorted(glob.glob(os.path.join(d, "l-*.json")))
if lrs:
    print("\n== Llama (bf16; formula: ZeRO's state bytes per rank, activations not in it) ==")
    print(head)
    for p in lrs:
        r = load(os.path.basename(p)[:-5])
        if r:
            print(perf_row(os.path.basename(p)[:-5], r, float("nan")))
EOF
