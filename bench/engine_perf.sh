#!/bin/bash
# engine_perf.sh: the engine's speed beside its PyTorch peers, in one run on GPU 0, with
# its correctness checks first. Travels in one folder with llmbench, device_env.sh,
# peer_torch.py and libmicrohttpd.so.12 (or runs from the source tree). Logs go to $OUT
# (default /tmp); a table of the figures is printed last.
#  1. correctness: selftest rows of the paged kernels (split contexts included) and of the
#     whole engine on a small model (GPU logits against the CPU engine over the same
#     weights, greedy tokens through the prefill and decode paths, CUDA graphs included)
#  2. llmbench infer --random llama3.1-8b: Offline (N_OFF queries, prompts normal:778:256,
#     128 tokens, eos ignored) and SingleStream (778-token prompts: TTFT, TPOT)
#  3. bench/peer_torch.py: transformers' generate and the static-cache + torch.compile loop
#  4. with NSYS=1 and nsys on the machine: a kernel summary of SingleStream decode steps
# Each part has its own time limit (seconds): T_CHECK, T_INFER, T_PEER.
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
O=${OUT:-/tmp}
B=$LLMBENCH
PEER=$(dirname "${BASH_SOURCE[0]}")/peer_torch.py
[ -f "$PEER" ] || PEER=$bench_dir/peer_torch.py
DB=/tmp/engine-perf.db
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $O/device.txt
$B --version 2>&1 | head -1 | tee -a $O/device.txt
echo "== selftest"
timeout ${T_CHECK:-60} $B selftest --no-model --only paged --db $DB > $O/selftest_paged.txt 2>&1
tail -3 $O/selftest_paged.txt
grep -c "FAIL" $O/selftest_paged.txt
timeout ${T_CHECK:-60} $B selftest --no-kernels --only engine --db $DB > $O/selftest_engine.txt 2>&1
grep -E "engine\.|checks|FAIL" $O/selftest_engine.txt | tail -4
echo "== offline"
timeout ${T_INFER:-70} $B infer --random llama3.1-8b --synthetic ${N_OFF:-300} --input-len normal:778:256 \
    --max-tokens 128 --ignore-eos --db $DB -v > $O/offline.txt 2>&1
grep -E "engine:|KV cache|Samples per|Tokens per|Result is|Completed|Failed|Mean First|Mean Time|run kernel|paged kernel" $O/offline.txt
echo "== singlestream"
timeout ${T_INFER:-70} $B infer --random llama3.1-8b --scenario singlestream --synthetic ${N_SS:-6} \
    --input-len fixed:778 --max-tokens 128 --ignore-eos --db $DB -v > $O/single.txt 2>&1
grep -E "Samples per|Mean First|50.00 percentile first|Mean Time|50.00 percentile time|run kernel|paged kernel" $O/single.txt
echo "== peers"
timeout ${T_PEER:-110} python3 $PEER > $O/peer.txt 2> $O/peer_err.txt
cat $O/peer.txt
tail -3 $O/peer_err.txt
if [ -n "$NSYS" ] && command -v nsys > /dev/null; then
    echo "== nsys"
    timeout 45 nsys profile -o $O/single -f true --stats=false $B infer --random llama3.1-8b \
        --scenario singlestream --synthetic 2 --input-len fixed:778 --max-tokens 128 --ignore-eos \
        > /dev/null 2>&1
    timeout 20 nsys stats -q -r cuda_gpu_kern_sum -f csv $O/single.nsys-rep 2> /dev/null |
        head -25 | cut -c1-220 > $O/kernels.csv
    cat $O/kernels.csv
fi
echo "== table"
num() { grep -E "$1" "$2" | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | tail -1; }
printf '| run | Offline samples/s | batch-1 TPOT ms | TTFT (778) ms |\n| --- | ---: | ---: | ---: |\n'
printf '| llmbench | %s | %s | %s |\n' "$(num 'Samples per second' $O/offline.txt)" \
    "$(awk '/50.00 percentile time to output token/ {print $NF/1e6}' $O/single.txt)" \
    "$(awk '/50.00 percentile first token latency/ {print $NF/1e6}' $O/single.txt)"
python3 - "$O/peer.txt" << 'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "peer" in d:
        r = rows.setdefault(d["peer"], ["-", "-", "-"])
        if d["batch"] > 1:
            r[0] = "%s (batch %d)" % (d["samples_per_s"], d["batch"])
        else:
            r[1], r[2] = str(d["tpot_ms"]), str(d["ttft_ms"])
for k, r in rows.items():
    print("| %s | %s | %s | %s |" % (k, *r))
EOF
