#!/bin/bash
# four_gpu.sh: the rows of a machine with N GPUs (default: every GPU it has) in one call.
# The parts run in the order PARTS names them, each skipped when the time left
# (DEADLINE_S, default 420 s from the start) is below what it needs:
#   doctor    `llmbench doctor` on the node, and the pair matrix of `llmbench comm --matrix`
#             with NVML's link of each pair;
#   comm      all_reduce, all_gather and reduce_scatter bf16 busbw from 8 B to 4 GB
#             (factor 4) over --gpus N, beside torch.distributed (comm_torch.py) in the
#             same call;
#   check     `llmbench comm all` from 8 B to 128 MB (#wrong of every collective at every
#             size), and all_reduce bf16 at 256 MB and 1 GB beside torch.distributed;
#   nccl1m    all_reduce float 512 KB to 2 MB (#wrong of every element), three times under
#             each libnccl.so.2 the machine has, beside nccl-tests' all_reduce_perf with
#             its check (-c 1) when $NCCL_TESTS names that binary;
#   head      `llmbench comm` with rank 0 on no GPU (CUDA_VISIBLE_DEVICES empty), the
#             coordinator, and two GPU ranks, started from torchrun's variables;
#   sweep     `llmbench sweep` of `comm --gpus N` over two dtypes and two start sizes;
#   train     `llmbench train --scaling 1,2,..,N` GPT-2 124M bf16 16 x 1024 per GPU at
#             ZeRO 0, beside PyTorch DDP + torch.compile (pytorch_ddp_baseline.py) on N
#             and 2 GPUs (DDP_GPUS: other counts, or none);
#   replicas  one `llmbench serve --random llama3.1-8b` per GPU, warmed up by a short
#             untimed run on all, then one `llmbench load` Offline run of RQ queries
#             (default 512) against one replica and one of N x RQ against all: aggregate
#             samples/s against N x one replica's;
#   kill      a rank killed mid-collective: the job ends within --comm-timeout, naming it.
# $LLMBENCH is the binary (default: build/llmbench); logs and JSON go to $OUT (or /tmp); the
# last lines are a summary. NVLink multicast stays off (KINDS.md).
set -u
. "$(dirname "$0")/device_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$LLMBENCH
n=${GPUS:-$(nvidia-smi -L | wc -l)}
PARTS=${PARTS:-doctor comm check train replicas kill}
dir=${OUT:-/tmp}
mkdir -p "$dir"
db=/tmp/four_gpu.db
start=$(date +%s)
deadline=${DEADLINE_S:-420}
left() { echo $((deadline - ($(date +%s) - start))); }
enough() { # NAME NEED_S: true when NEED_S seconds are left
    [ "$(left)" -ge "$2" ] && return 0
    echo "skipped $1: $(left) s left, needs $2" | tee -a "$dir/summary.txt"
    return 1
}
section() { echo; echo "=== $* ($(($(date +%s) - start)) s)"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

section machine
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv,noheader
nvidia-smi topo -m
"$L" --version

sizes=8,32,128,512,2048,8192,32768,131072,524288,2097152,8388608,33554432,134217728,536870912,2147483648,4294967296
for part in $PARTS; do
    case $part in
    doctor)
        enough doctor 40 || continue
        section doctor
        t0=$(date +%s%N)
        timeout 60 "$L" doctor; echo "doctor exit $? after $(ms_since "$t0") ms"
        section "pair matrix"
        timeout 60 "$L" comm all_reduce --gpus "$n" -b 8 -e 8 -n 5 -w 2 --matrix 256M --db "$db"
        ;;
    comm)
        enough comm 150 || continue
        section "llmbench comm, $n GPUs"
        timeout 150 "$L" comm all_reduce all_gather reduce_scatter --gpus "$n" -d bf16 -b 8 -e 4G -f 4 \
            -n 40 -w 5 --place out --json --db "$db" >"$dir/comm.json" 2>"$dir/comm.err"
        echo "llmbench comm exit $?"
        section "torch.distributed, $n GPUs"
        timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" \
            "$bench_dir/comm_torch.py" --ops all_reduce,all_gather,reduce_scatter --sizes "$sizes" \
            --iters 40 --warmup 5 2>"$dir/comm_torch.err" | grep '^{' >"$dir/comm_torch.jsonl"
        echo "torch exit ${PIPESTATUS[0]}"
        ;;
    check)
        enough check 90 || continue
        section "every collective, #wrong at every size, $n GPUs"
        timeout 90 "$L" comm all --gpus "$n" -b 8 -e 128M -f 8 -n 5 -w 2 --db "$db" 2>&1 |
            grep -E '^ +[0-9]|Out of bounds|Collective|stored'
        section "all_reduce bf16 256 MB and 1 GB, $n GPUs, llmbench then torch"
        timeout 60 "$L" comm all_reduce --gpus "$n" -d bf16 -b 256M -e 1G -f 4 -n 20 -w 5 --db "$db" 2>&1 |
            grep -E '^ +[0-9]'
        timeout 90 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" \
            "$bench_dir/comm_torch.py" --sizes 268435456,1073741824 --iters 20 --warmup 5 2>/dev/null | grep '^{'
        ;;
    nccl1m)
        enough nccl1m 60 || continue
        for lib in $(find /opt /usr/local /usr/lib -name 'libnccl.so.2' -exec readlink -f {} \; 2>/dev/null | sort -u); do
            section "all_reduce float 512 KB - 2 MB under $lib"
            for i in 1 2 3; do
                LD_LIBRARY_PATH=$(dirname "$lib"):$LD_LIBRARY_PATH NCCL_DEBUG=VERSION timeout 40 "$L" comm \
                    all_reduce --gpus "$n" -b 512K -e 2M -n 50 -w 5 --db "$db" 2>&1 |
                    grep -E '^ +[0-9]|NCCL version' | sort -u
                [ -x "${NCCL_TESTS:-}" ] && LD_LIBRARY_PATH=$(dirname "$lib"):$LD_LIBRARY_PATH \
                    NCCL_DEBUG=VERSION timeout 40 "$NCCL_TESTS" -g "$n" -b 512K -e 2M -f 2 -d float \
                    -c 1 -n 50 -w 5 2>&1 | grep -E '^ +[0-9]|NCCL version|wrong|Avg bus' | sed 's/^/nccl-tests /'
            done
        done
        ;;
    head)
        enough head 40 || continue
        section "a rank without a GPU as rank 0 (torchrun variables), GPUs 1 and 2 as ranks 1 and 2"
        hp=()
        for r in 0 1 2; do
            vis=()
            [ "$r" = 0 ] && vis=(env CUDA_VISIBLE_DEVICES=)
            RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
                timeout 60 "${vis[@]}" "$L" comm all_reduce all_gather -b 8 -e 64M -f 64 -n 5 -w 2 \
                --setup-timeout 30 --db "$db" >"$dir/head$r.log" 2>&1 &
            hp+=($!)
        done
        for r in 0 1 2; do wait "${hp[r]}"; echo "rank $r exit $?"; done
        grep -vE '^#  ' "$dir/head0.log" | head -20
        tail -3 "$dir/head1.log"
        ;;
    sweep)
        enough sweep 60 || continue
        section "a sweep of comm over --gpus $n"
        printf '%s\n' "name: comm-gpus" "command: comm" "repeats: 2" \
            "options: {gpus: $n, e: 64M, f: 8, n: 5, w: 2}" "axes: {d: [bfloat16, float], b: [8, 1M]}" \
            >"$dir/comm-sweep.yaml"
        timeout 60 "$L" sweep "$dir/comm-sweep.yaml" --db "$db" 2>&1 | tail -12
        ;;
    train)
        perf=(--model gpt2-124m --precision bf16 --batch 16 --seq 1024 --steps 30 --warmup 5)
        counts=1
        for ((g = 2; g <= n; g *= 2)); do counts=$counts,$g; done
        enough train 60 || continue
        section "llmbench train --scaling $counts"
        timeout "$(left)" "$L" train --scaling "$counts" "${perf[@]}" --json -q --no-progress --db "$db" \
            >"$dir/scaling.json" 2>"$dir/scaling.err" || echo "scaling exit $?: $(tail -c 400 "$dir/scaling.err")"
        for g in ${DDP_GPUS-$n 2}; do
            enough "ddp$g" 80 || continue
            section "PyTorch DDP + compile, $g GPUs"
            timeout 150 torchrun --standalone --nproc-per-node "$g" "$bench_dir/pytorch_ddp_baseline.py" \
                --batch 16 --seq 1024 --steps 30 --warmup 5 2>"$dir/ddp$g.err" | grep '^{' >"$dir/ddp$g.json"
        done
        ;;
    replicas)
        enough replicas 120 || continue
        section "replicas: one serve --random llama3.1-8b per GPU"
        tok=$bench_dir/../tests/fixtures/tokenizer/gpt2.tiktoken
        pids=()
        for ((g = 0; g < n; g++)); do
            "$L" serve --random llama3.1-8b --gpu "$g" --port $((8100 + g)) --tokenizer "$tok" \
                --ignore-eos -q >"$dir/serve$g.log" 2>&1 &
            pids+=($!)
        done
        for ((g = 0; g < n; g++)); do
            for ((i = 0; i < 120; i++)); do
                curl -sf "http://127.0.0.1:$((8100 + g))/health" >/dev/null && break
                kill -0 "${pids[g]}" 2>/dev/null || break
                sleep 1
            done
        done
        echo "replicas up after $(($(date +%s) - start)) s"
        load=(--input-len normal:600:200 --max-tokens 128 --ignore-eos --scenario offline
            --json --db "$db")
        eps=()
        for ((g = 0; g < n; g++)); do eps+=(--endpoint "http://127.0.0.1:$((8100 + g))"); done
        # every replica's first batches (kernel choices, first touch of its cache) untimed
        timeout 60 "$L" load "${eps[@]}" "${load[@]}" --synthetic $((256 * n)) --max-tokens 16 \
            >/dev/null 2>"$dir/replicas_warm.err"
        echo "warm-up: exit $?"
        timeout 120 "$L" load --endpoint http://127.0.0.1:8100 "${load[@]}" --synthetic "${RQ:-512}" \
            >"$dir/replica1.json" 2>"$dir/replica1.err"
        echo "one replica: exit $?"
        timeout 120 "$L" load "${eps[@]}" "${load[@]}" --synthetic $((${RQ:-512} * n)) \
            >"$dir/replicas.json" 2>"$dir/replicas.err"
        echo "$n replicas: exit $?"
        kill -INT "${pids[@]}"
        wait
        ;;
    kill)
        enough kill 40 || continue
        section "rank 1 killed mid-collective (--comm-timeout 5)"
        t0=$(date +%s%N)
        timeout 60 "$L" comm all_reduce --gpus "$n" -b 1G -e 1G -n 100000 -w 1 -c 0 --comm-timeout 5 --db "$db" &
        launcher=$!
        sleep 8
        for p in /proc/[0-9]*; do
            if [ "$(readlink "$p/exe")" = "$(readlink -f "$L")" ] &&
                tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then
                echo "killing rank 1 (pid ${p#/proc/}) at $(ms_since "$t0") ms"
                kill -9 "${p#/proc/}"
            fi
        done
        wait $launcher
        echo "exit $? after $(ms_since "$t0") ms"
        "$L" results list --db "$db" --limit 1 2>&1 | tail -2
        ;;
    esac
done

section summary
python3 - "$dir" "$n" <<'EOF' | tee -a "$dir/summary.txt"
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        t = open(os.path.join(d, name)).read()
        return json.loads(t[min(i for i in (t.find("{"), t.find("[")) if i >= 0):])
    except Exception:
        return None
def metric(r, name):
    for m in r.get("metrics", []):
        if m["name"] == name:
            return m["value"]
    return float("nan")
c = load("comm.json")
torch_rows = {}
try:
    for line in open(os.path.join(d, "comm_torch.jsonl")):
        j = json.loads(line)
        torch_rows[(j["op"], j["bytes"])] = j
except OSError:
    pass
if c:
    m = {x["name"]: x["value"] for x in c.get("metrics", [])}
    print(f"{'collective':>15} {'bytes':>11} {'llmbench us':>12} {'busbw':>8} {'#wrong':>6} {'torch us':>10} {'busbw':>8} {'ratio':>6}")
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        for size in sorted({int(k.split(".")[1]) for k in m if k.startswith(coll + ".")}):
            key = f"{coll}.{size}.oop."
            t = torch_rows.get((coll, size), {})
            tbw = t.get("busbw", float("nan"))
            bw = m.get(key + "busbw", float("nan"))
            print(f"{coll:>15} {size:>11} {m.get(key + 'time_us', float('nan')):>12.1f} {bw:>8.1f} "
                  f"{m.get(key + 'wrong', float('nan')):>6.0f} {t.get('time_us', float('nan')):>10.1f} {tbw:>8.1f} "
                  f"{bw / tbw if tbw > 0 else float('nan'):>6.3f}")
s = load("scaling.json")
if s:
    print(f"{'run':>8} {'gpus':>4} {'tok/s':>10} {'tok/s/gpu':>10} {'eff':>6} {'step ms':>8} {'mem GiB':>8} {'comm ms':>8} {'exposed':>8}")
    for r in s:
        g = r["config"].get("ranks", 1)
        print(f"{'llmbench':>8} {g:>4} {metric(r, 'tokens_per_s'):>10.0f} {metric(r, 'tokens_per_s') / g:>10.0f} "
              f"{metric(r, 'scaling_efficiency'):>6.3f} {metric(r, 'step_ms_median'):>8.2f} "
              f"{metric(r, 'peak_device_bytes') / 2**30:>8.2f} {metric(r, 'comm_ms_median'):>8.2f} "
              f"{metric(r, 'comm_exposed_ms_median'):>8.2f}")
for g in (n, 2):
    r = load(f"ddp{g}.json")
    if r:
        print(f"{'ddp':>8} {r['gpus']:>4} {r['tokens_per_s']:>10.0f} {r['tokens_per_s_per_gpu']:>10.0f} {'':>6} "
              f"{r['step_ms_median']:>8.2f} {r['peak_mem_bytes_per_rank'] / 2**30:>8.2f}")
one, many = load("replica1.json"), load("replicas.json")
if one and many:
    a, b = metric(one, "samples_per_s"), metric(many, "samples_per_s")
    print(f"replicas: one {a:.2f} samples/s, {n} {b:.2f} samples/s = {b / (n * a):.3f} of {n} x one "
          f"(result {one.get('status')}/{many.get('status')})")
EOF
