#!/usr/bin/env bash
# lora_bench.sh: LoRA and QLoRA fine-tuning with llmbench beside a PyTorch LoRA baseline of
# the same model and targets, in one call on one GPU: selftest's nf4 and lora rows first (a
# failure is reported, the timings still run), a small run on a repeated batch whose loss
# must fall, then the shape with llmbench (bf16 LoRA, NF4 QLoRA, NF4 QLoRA with
# --recompute: the smallest memory) and with PyTorch (bf16
# LoRA, torch.compile, fused AdamW on the adapters: tools/pytorch_gpt2_baseline.py
# --lora-rank), then one table.
#
# The dp part (PARTS=dp, alone; on 2 or 4 GPUs of one host) trains LoRA data-parallel:
# N = 2 and 4 GPUs with BATCH/N sequences each against one GPU with the whole BATCH on a
# repeated batch (the loss of every step, warm-up included, and replicas_identical: the
# same adapter bits on every rank), then DP_WEAK GPUs (default 4) with BATCH each for
# tokens/s per GPU and scaling efficiency against the one-GPU run, and one table.
#
# usage: bench/lora_bench.sh
#        MODEL=mistral-7b BATCH=8 SEQ=512 LORA_RANK=16 TARGETS=all STEPS=20 WARMUP=5 bench/lora_bench.sh
#        TORCH=0 SELFTEST=0 bench/lora_bench.sh     llmbench's timings only
#        SELFTEST_SETS="--only nf4;--only lora" bench/lora_bench.sh   fewer selftest rows
#        LLMBENCH_BASE=BIN bench/lora_bench.sh      BIN's bf16 LoRA row beside this build's
#        PARTS=dp MODEL=mistral-7b bench/lora_bench.sh   data parallel only (DP_STEPS=4,
#                                                   DP_WARMUP=1, DP_LR=1e-3, DP_WEAK=4,
#                                                   DP_SELFTEST=1: selftest --only lora first;
#                                                   LLMBENCH_BASE=BIN: its 1-GPU run beside)
# The hf part (PARTS=hf) writes tiny random Llama and Mistral directories with
# transformers and a token shard, and checks llmbench's first loss on --model DIR against
# the model's own PyTorch loss on that batch, for each of HF_RUNS (ARCH:DEVICE:PRECISION:
# LORA_RANK[:QUANT]; default CPU fp32, GPU fp32 with and without adapters, bf16 LoRA, NF4
# QLoRA).
# The zero part (PARTS=zero, alone; on 2 or 4 GPUs of one host) trains LoRA under ZeRO and
# gradient accumulation on one token shard: 1 GPU with the whole ZBATCH (default 8) in K
# micro-batches (ZONE: STAGE:K pairs, default "0:1 0:2 0:4 3:2"), then each of ZGPUS
# (default "2 4") GPUs with ZBATCH/N at each of ZSTAGES (default "0 1 2 3"), ZMODEL (default
# llama3.2-1b) at ZSEQ 256, ZSTEPS 6 after ZWARMUP 1, ZLR 1e-3 (at 5e-3 the loss oscillates
# and bf16 differences grow to 5% in six steps); each run under ZCAP s (25),
# none started after ZDEADLINE_S (115); the table: the max relative loss difference against
# 1 GPU at ZeRO 0 with one micro-batch, replicas identical, tokens/s, memory per rank
# (peak, optimizer state, adapters), bytes sent a step beside zero.h's formula.
# PARTS lists what runs, comma-separated: single (selftest, small runs, timings, PyTorch;
# the default), dp, zero and hf. QUANTS picks the single part's llmbench rows (default "none nf4
# nf4:recompute"). Raw JSON and logs go to $OUT/MODEL (or /tmp/llmbench-lora/MODEL).
# The binary beside this script, when there is one, is the one measured: an LLMBENCH that
# another script exported does not replace it (LLMBENCH_BASE names a second build).
set -u
[ -x "$(dirname "${BASH_SOURCE[0]}")/llmbench" ] && unset LLMBENCH
source "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
MODEL=${MODEL:-llama3.1-8b}
out=${OUT:-/tmp/llmbench-lora}/$MODEL
mkdir -p "$out"
BATCH=${BATCH:-8}
SEQ=${SEQ:-512}
LORA_RANK=${LORA_RANK:-16}
TARGETS=${TARGETS:-all}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
TORCH=${TORCH:-1}
SELFTEST=${SELFTEST:-1}
PARTS=${PARTS:-single}
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0

# The tables' Python: what both tables read from a run's JSON, then the table's own code
# from stdin; the folder of the runs is its first argument.
table_py() {
    python3 -c 'import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:
        return None
def metric(d, k):
    return {x["name"]: x["value"] for x in d["metrics"]}.get(k, float("nan"))
def losses(d):
    s = d["series"]
    return s.get("warmup_loss", {}).get("values", []) + s["loss"]["values"]
'"$(cat)" "$@"
}

if [[ ",$PARTS," == *,dp,* ]]; then
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    dp=(--model "$MODEL" --seq "$SEQ" --precision bf16 --device cuda --lora-rank "$LORA_RANK"
        --lora-targets "$TARGETS" --data repeat --lr "${DP_LR:-1e-3}" --steps "${DP_STEPS:-4}"
        --warmup "${DP_WARMUP:-1}" --json -q --no-progress --db "$out/bench.db")
    if [ "${DP_SELFTEST:-1}" = 1 ]; then # the GPU's LoRA and QLoRA steps against the CPU
        timeout 40 "$LLMBENCH" selftest --only lora > "$out/dp_selftest.txt" 2>&1
        echo "selftest --only lora exit $?: $(tail -1 "$out/dp_selftest.txt")"
        grep FAIL "$out/dp_selftest.txt" | head -5
        # an odd rank on two of qkv's three targets (stacked A, unaligned columns): loss falls
        "$LLMBENCH" train --model llama-tiny --device cuda --precision bf16 --batch 4 --seq 32 \
            --data repeat --lr 1e-2 --lora-rank 5 --lora-targets q,v --steps 30 --warmup 0 \
            --json -q --no-progress --db "$out/bench.db" > "$out/dp_tiny.json" 2> "$out/dp_tiny.err"
        echo "tiny rank 5 q,v exit $? $(python3 -c "import json; l = json.load(open('$out/dp_tiny.json'))['series']['loss']['values']; print('loss %.3f -> %.3f' % (l[0], l[-1]))" 2>&1 | tail -1)"
    fi
    # one GPU with the whole batch: the reference of the checks and of scaling efficiency
    timeout 60 "$LLMBENCH" train "${dp[@]}" --batch "$BATCH" > "$out/dp_1.json" 2> "$out/dp_1.err"
    echo "llmbench 1 GPU --batch $BATCH exit $? $(tail -c 300 "$out/dp_1.err" | tr '\n' ' ')"
    if [ -n "${LLMBENCH_BASE:-}" ]; then # the same run with another build, side by side
        timeout 60 "$LLMBENCH_BASE" train "${dp[@]}" --batch "$BATCH" > "$out/dp_base.json" 2> "$out/dp_base.err"
        echo "LLMBENCH_BASE 1 GPU --batch $BATCH exit $? $(tail -c 300 "$out/dp_base.err" | tr '\n' ' ')"
    fi
    base=$(python3 -c "import json; d = json.load(open('$out/dp_1.json')); print([m['value'] for m in d['metrics'] if m['name'] == 'tokens_per_s'][0])" 2> /dev/null)
    for n in 2 4; do # the same global batch split over n GPUs
        [ "$n" -le "$gpus" ] || continue
        timeout 60 "$LLMBENCH" train "${dp[@]}" --batch $((BATCH / n)) --gpus "$n" \
            > "$out/dp_split$n.json" 2> "$out/dp_split$n.err"
        echo "llmbench --gpus $n --batch $((BATCH / n)) exit $? $(tail -c 300 "$out/dp_split$n.err" | tr '\n' ' ')"
    done
    for n in ${DP_WEAK-4}; do # BATCH a GPU: scaling efficiency against the one-GPU run
        [ "$n" -le "$gpus" ] || continue
        timeout 60 "$LLMBENCH" train "${dp[@]}" --batch "$BATCH" --gpus "$n" \
            ${base:+--base-tok-per-s $base} > "$out/dp_weak$n.json" 2> "$out/dp_weak$n.err"
        echo "llmbench --gpus $n --batch $BATCH exit $? $(tail -c 300 "$out/dp_weak$n.err" | tr '\n' ' ')"
    done
    MODEL=$MODEL BATCH=$BATCH table_py "$out" <<'EOF' | tee -a "$out/table.md"
ref = load("dp_1.json")
B = int(os.environ["BATCH"])
print(f"{os.environ['MODEL']} LoRA data parallel: N GPUs x {B}/N sequences against 1 GPU x {B} "
      f"(same batch: losses and adapters checked), then N GPUs x {B} (scaling efficiency)")
print("| GPUs | batch/GPU | loss first -> last | max rel. loss diff vs 1 GPU | replicas identical | step ms | tokens/s | tokens/s/GPU | scaling eff. | comm ms (exposed) | sent MB/step | peak GB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
rows = [(1, "dp_1.json"), (1, "dp_base.json")] + [(n, f"dp_split{n}.json") for n in (2, 4)]
rows += [(n, f"dp_weak{n}.json") for n in (2, 4, 8)]
ok, checked = ref is not None, 0
for n, name in rows:
    d = load(name)
    if d is None or ref is None:
        continue
    l, r = losses(d), losses(ref)
    split = name.startswith("dp_split")
    diff = max(abs(a - b) / b for a, b in zip(l, r))
    rep = metric(d, "replicas_identical") if n > 1 else 1
    if n > 1:
        ok = ok and rep == 1 and (not split or (diff < 1e-2 and len(l) == len(r)))
        checked += split
    label = f"{n} (LLMBENCH_BASE)" if name == "dp_base.json" else n
    print(f"| {label} | {d['config']['batch']} | {l[0]:.4f} -> {l[-1]:.4f} | "
          f"{diff:.2e}{' (other data)' if n > 1 and not split else ''} | {rep:.0f} | "
          f"{metric(d, 'step_ms_median'):.1f} | {metric(d, 'tokens_per_s'):.0f} | "
          f"{metric(d, 'tokens_per_s_per_gpu'):.0f} | {metric(d, 'scaling_efficiency'):.3f} | "
          f"{metric(d, 'comm_ms_median'):.2f} ({metric(d, 'comm_exposed_ms_median'):.2f}) | "
          f"{metric(d, 'sent_bytes_per_step') / 1e6:.1f} | {metric(d, 'peak_device_bytes') / 1e9:.2f} |")
print("dp check:", "PASS" if ok and checked > 0 else "FAIL")
EOF
fi

if [[ ",$PARTS," == *,zero,* ]]; then
    # LoRA with ZeRO and gradient accumulation: one token shard (random tokens below ZVOCAB,
    # default 32000, repeating every 997, so the loss falls), read by every run as one GPU with the whole batch reads
    # it; 1 GPU with ZBATCH sequences in K micro-batches (ZONE: STAGE:K pairs), then each of
    # ZGPUS GPUs with ZBATCH/N each at every stage of ZSTAGES; every run capped at ZCAP s
    # and skipped once ZDEADLINE_S have passed since the part began.
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    zstart=$(date +%s)
    ZMODEL=${ZMODEL:-llama3.2-1b}
    ZBATCH=${ZBATCH:-8}
    zout=${OUT:-/tmp/llmbench-lora}/$ZMODEL/zero
    mkdir -p "$zout"
    python3 -c "
import struct, random
random.seed(7); n = 400000; period = [random.randrange(${ZVOCAB:-32000}) for _ in range(997)]
with open('$zout/tokens.bin', 'wb') as f:
    f.write(struct.pack('<256i', 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack('<%dH' % n, *(period[i % 997] for i in range(n))))
"
    z=(--model "$ZMODEL" --seq "${ZSEQ:-256}" --precision bf16 --device cuda
       --lora-rank "$LORA_RANK" --lora-targets "$TARGETS" --data "$zout/tokens.bin"
       --lr "${ZLR:-1e-3}" --steps "${ZSTEPS:-6}" --warmup "${ZWARMUP:-1}" --comm-timeout 30
       --json -q --no-progress --db "$zout/bench.db")
    zrun() { # NAME ARGS...: one run into $zout/NAME.json, unless the part's time is spent
        local name=$1
        shift
        if [ $(($(date +%s) - zstart)) -ge "${ZDEADLINE_S:-115}" ]; then
            echo "$name: skipped (the part's ${ZDEADLINE_S:-115} s are spent)"
            return
        fi
        local t0=$(date +%s)
        timeout "${ZCAP:-25}" "$LLMBENCH" train "${z[@]}" "$@" > "$zout/$name.json" 2> "$zout/$name.err"
        echo "$name exit $? in $(($(date +%s) - t0)) s $(tail -c 200 "$zout/$name.err" | tr '\n' ' ')"
    }
    for sk in ${ZONE:-0:1 0:2 0:4 3:2}; do
        zrun "g1-z${sk%%:*}-k${sk##*:}" --batch "$ZBATCH" --grad-accum "${sk##*:}" --zero "${sk%%:*}"
    done
    for n in ${ZGPUS:-2 4}; do
        [ "$n" -le "$gpus" ] || continue
        for s in ${ZSTAGES:-0 1 2 3}; do
            zrun "g$n-z$s-k1" --batch $((ZBATCH / n)) --gpus "$n" --zero "$s"
        done
    done
    MODEL=$ZMODEL table_py "$zout" <<'EOF' | tee -a "$zout/table.md"
import glob, re
ref = load("g1-z0-k1.json")
runs = []
for path in glob.glob(os.path.join(out, "g*-z*-k*.json")):
    name = os.path.basename(path)
    g, z, k = map(int, re.match(r"g(\d+)-z(\d+)-k(\d+)", name).groups())
    runs.append((g, z, k, load(name)))
runs.sort(key=lambda r: r[:3])
print(f"{os.environ['MODEL']} LoRA: every run on the same global batch of the same token shard, "
      "against 1 GPU at ZeRO 0 with one micro-batch")
print("| GPUs | ZeRO | micro-batches | loss first -> last | max rel. loss diff vs 1 GPU | "
      "replicas identical | tokens/s | peak GB/rank | optimizer MB/rank | adapters MB/rank | "
      "sent MB/step (formula) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
ok = ref is not None
for g, z, k, d in runs:
    if d is None:
        print(f"| {g} | {z} | {k} | failed | | | | | | | |")
        ok = False
        continue
    l = losses(d)
    diff = max(abs(a - b) / b for a, b in zip(l, losses(ref))) if ref else float("nan")
    rep = metric(d, "replicas_identical") if g > 1 else 1
    ok = ok and diff < 2e-2 and rep == 1 and len(l) == len(losses(ref))
    print(f"| {g} | {z} | {k} | {l[0]:.4f} -> {l[-1]:.4f} | {diff:.2e} | {rep:.0f} | "
          f"{metric(d, 'tokens_per_s'):.0f} | {metric(d, 'peak_device_bytes') / 1e9:.2f} | "
          f"{metric(d, 'optimizer_bytes') / 1e6:.1f} | {metric(d, 'adapter_bytes') / 1e6:.1f} | "
          f"{metric(d, 'sent_bytes_per_step') / 1e6:.2f} ({metric(d, 'sent_bytes_formula') / 1e6:.2f}) |")
if ref is not None: # agreement says little unless the adapters moved the loss
    print(f"reference loss {losses(ref)[0]:.4f} -> {losses(ref)[-1]:.4f}:",
          "falls" if losses(ref)[-1] < losses(ref)[0] else "does NOT fall (raise ZLR or ZSTEPS)")
print("zero check:", "PASS" if ok and len(runs) > 1 else "FAIL",
      "(bf16: losses within 2e-2 of the 1-GPU run, the same adapter bits on every rank)")
EOF
fi

HF_RUNS=${HF_RUNS:-llama:cpu:fp32:0 llama:cuda:fp32:0 llama:cuda:fp32:4 llama:cuda:bf16:4 llama:cuda:bf16:4:nf4 mistral:cpu:fp32:0 mistral:cuda:fp32:4 mistral:cuda:bf16:4}
if [[ ",$PARTS," == *,hf,* ]]; then
    # tiny random Llama and Mistral directories written by transformers, a token shard, and
    # each model's own loss on its first batch (fp32, on the CPU)
    python3 - "$out" <<'EOF' > "$out/hf_ref.json" 2> "$out/hf_ref.err"
import json, os, sys
import numpy as np
import torch
import transformers as tf
out = sys.argv[1]
B, T, V = 2, 32, 512
torch.manual_seed(0)
tok = torch.randint(0, V, (B * T + 1,))
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, B * T + 1)
with open(os.path.join(out, "hf_tokens.bin"), "wb") as f:
    f.write(header.tobytes())
    f.write(tok.numpy().astype(np.uint16).tobytes())
shape = dict(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
ref = {"batch": B, "seq": T, "transformers": tf.__version__}
for name, cfg, cls in (("llama", tf.LlamaConfig(**shape), tf.LlamaForCausalLM),
                       ("mistral", tf.MistralConfig(sliding_window=None, **shape), tf.MistralForCausalLM)):
    model = cls(cfg).float().eval()
    model.save_pretrained(os.path.join(out, f"hf-{name}"), safe_serialization=True)
    with torch.no_grad():
        logits = model(tok[:-1].view(B, T)).logits
        ref[name] = torch.nn.functional.cross_entropy(logits.view(-1, V), tok[1:]).item()
print(json.dumps(ref))
EOF
    echo "transformers directories exit $? $(tail -c 200 "$out/hf_ref.err" | tr '\n' ' ')"
    for run in $HF_RUNS; do
        IFS=: read -r arch dev prec rank q <<< "$run"
        "$LLMBENCH" train --model "$out/hf-$arch" --device "$dev" --precision "$prec" \
            ${q:+--quant $q} $([ "$rank" = 0 ] || echo --lora-rank "$rank") \
            $([ "$dev:$prec" = cuda:fp32 ] && echo --fp32-matmul ieee) \
            --data "$out/hf_tokens.bin" --batch 2 --seq 32 --steps 3 --warmup 0 --json -q \
            --no-progress --db "$out/bench.db" > "$out/hf_${run//:/_}.json" 2> "$out/hf_${run//:/_}.err"
        echo "hf $run exit $? $(tail -c 200 "$out/hf_${run//:/_}.err" | tr '\n' ' ')"
    done
    HF_RUNS=$HF_RUNS python3 - "$out" <<'EOF' | tee -a "$out/table.md"
import json, os, sys
out = sys.argv[1]
ref = json.load(open(os.path.join(out, "hf_ref.json")))
print(f"--model DIR (transformers {ref['transformers']} directories, batch {ref['batch']} x {ref['seq']}): "
      "llmbench's first loss against the model's own in PyTorch fp32")
print("| model | device | precision | LoRA rank | quant | first loss | PyTorch loss | rel. diff | verdict |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
ok = True
for run in os.environ["HF_RUNS"].split():
    arch, dev, prec, rank, *q = run.split(":")
    try:
        d = json.load(open(os.path.join(out, f"hf_{run.replace(':', '_')}.json")))
        got = d["series"]["loss"]["values"][0]
    except Exception:
        got = float("nan")
    want = ref[arch]
    diff = abs(got - want) / want
    tol = 1e-4 if prec == "fp32" else 2e-2 if not q else 5e-2
    good = diff < tol
    ok = ok and good
    print(f"| {arch} | {dev} | {prec} | {rank} | {q[0] if q else 'none'} | {got:.6f} | {want:.6f} | "
          f"{diff:.2e} | {'ok' if good else 'FAIL'} (tol {tol:g}) |")
print("hf check:", "PASS" if ok else "FAIL")
EOF
fi
[[ ",$PARTS," == *,single,* ]] || exit 0

if [ "$SELFTEST" = 1 ]; then
    # default: the NF4 kernels, then every whole-model row (full training and LoRA/QLoRA)
    IFS=';' read -r -a sets <<< "${SELFTEST_SETS:---only nf4;--no-kernels}"
    for args in "${sets[@]}"; do
        tag=${args// /}
        "$LLMBENCH" selftest $args > "$out/selftest$tag.txt" 2>&1
        echo "selftest $args exit $?: $(tail -1 "$out/selftest$tag.txt")"
        grep FAIL "$out/selftest$tag.txt" | head -10
    done
    # small runs on one repeated batch: QLoRA, an odd rank on two targets, full training
    for args in "--lora-rank 8 --quant nf4" "--lora-rank 5 --lora-targets q,v" ""; do
        "$LLMBENCH" train --model llama-tiny --device cuda --precision bf16 --batch 4 --seq 32 \
            --data repeat --lr 1e-2 $args --steps 30 --warmup 0 --json --no-progress \
            --db "$out/bench.db" > "$out/tiny.json" 2> "$out/tiny.err"
        echo "tiny [$args] exit $? $(python3 -c "import json; d = json.load(open('$out/tiny.json')); l = d['series']['loss']['values']; print('loss %.3f -> %.3f' % (l[0], l[-1]))" 2>&1 | tail -1)"
    done
fi
single() { # BIN TAG QUANT [FLAG]: one timed run of the shape into $out/llmbench_TAG.json
    "$1" train --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision bf16 \
        --device cuda --lora-rank "$LORA_RANK" --lora-targets "$TARGETS" --quant "$3" \
        ${4:+--$4} --steps "$STEPS" --warmup "$WARMUP" --json --no-progress \
        --db "$out/bench.db" > "$out/llmbench_$2.json" 2> "$out/llmbench_$2.err"
    echo "llmbench [$2] --quant $3 ${4:+--$4} exit $? $(tail -c 300 "$out/llmbench_$2.err" | tr '\n' ' ')"
}
for run in ${QUANTS:-none nf4 nf4:recompute}; do
    IFS=: read -r q extra <<< "$run"
    single "$LLMBENCH" "${q}${extra:+_$extra}" "$q" "$extra"
done
# LLMBENCH_BASE: another build's bf16 row beside this one's (an A/B in the same call)
[ -n "${LLMBENCH_BASE:-}" ] && single "$LLMBENCH_BASE" base none
if [ "$TORCH" = 1 ]; then
    python3 "$BASELINE" --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision bf16 \
        --steps "$STEPS" --warmup "$WARMUP" --lora-rank "$LORA_RANK" --lora-targets "$TARGETS" \
        > "$out/torch_lora.json" 2> "$out/torch_lora.err"
    echo "torch exit $? $(tail -c 300 "$out/torch_lora.err" | tr '\n' ' ')"
fi
MODEL=$MODEL python3 - "$out" <<'EOF' | tee -a "$out/table.md"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1] if name.startswith("torch") else f.read())
    except Exception:
        return None
print(f"{os.environ.get('MODEL', 'llama3.1-8b')}:")
print("| run | step ms (median, 95% CI) | tokens/s | samples/s | MFU | SM MHz | trainable | peak device GB | final loss |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for tag, label in (("none", "LoRA bf16"), ("base", "LoRA bf16 (LLMBENCH_BASE)"),
                   ("nf4", "QLoRA nf4"), ("nf4_recompute", "QLoRA nf4 --recompute")):
    d = load(f"llmbench_{tag}.json")
    if not d:
        continue
    m = {x["name"]: x["value"] for x in d["metrics"]}
    gb = lambda k: m.get(k, 0) / 1e9
    print(f"| llmbench {label} | {m.get('step_ms_median', 0):.1f} ({m.get('step_ms_median_ci_lo', 0):.1f}-"
          f"{m.get('step_ms_median_ci_hi', 0):.1f}) | {m.get('tokens_per_s', 0):.0f} | "
          f"{m.get('samples_per_s', 0):.2f} | {m.get('mfu', 0):.3f} | {m.get('sm_clock_mean_mhz', 0):.0f} | "
          f"{m.get('trainable_params', 0):.0f} | {gb('peak_device_bytes'):.2f} (driver "
          f"{gb('driver_peak_device_bytes'):.2f}; base {gb('base_bytes'):.2f}, adapters "
          f"{gb('adapter_bytes'):.2f}, optimizer {gb('optimizer_bytes'):.2f}, activations "
          f"{gb('activation_bytes'):.2f}) | {m.get('final_loss', float('nan')):.4f} |")
t = load("torch_lora.json")
if t:
    print(f"| {t['impl']} {t['torch']} LoRA bf16 | {t['step_ms_median']:.1f} | {t['tokens_per_s']:.0f} | "
          f"{t['samples_per_s']:.2f} | | | {t['trainable_params']} | {t['peak_mem_bytes'] / 1e9:.2f} | "
          f"{t['final_loss']:.4f} |")
EOF
