#!/bin/bash
# engine_perf.sh: the engine's speed beside its PyTorch peers, in one run on GPU 0, with
# its correctness checks first. Travels in one folder with llmbench, engine_probe,
# device_env.sh, peer_torch.py and libmicrohttpd.so.12 (or runs from the source tree:
# make build bench). Logs go to $OUT (default /tmp); a table of the figures is printed
# last. Parts, in this order, each under its own time limit in seconds:
#  1. correctness (T_CHECK): selftest rows of the paged kernels (split contexts included),
#     of the decode products' gemv and of the whole engine on a small model (GPU logits against the CPU engine over the
#     same weights; greedy tokens through the cuDNN prefill and the decode graphs)
#  2. where a decode step goes (T_PROBE): bench/engine_probe at batches $PROBE_B
#  3. llmbench infer --random llama3.1-8b (T_INFER): SingleStream (778-token prompts: TTFT,
#     TPOT; N_SS queries), Offline (N_OFF queries, prompts normal:778:256, 128 tokens, eos
#     ignored)
#  4. the peers (T_PEER): bench/peer_torch.py $PEER_ARGS (transformers' generate and the
#     static-cache + torch.compile loop)
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
timeout ${T_CHECK:-60} $B selftest --no-model --only gemv --db $DB > $O/selftest_gemv.txt 2>&1
tail -2 $O/selftest_paged.txt $O/selftest_gemv.txt
grep -h "FAIL" $O/selftest_paged.txt $O/selftest_gemv.txt | head -5
timeout ${T_CHECK:-60} $B selftest --no-kernels --only engine --db $DB > $O/selftest_engine.txt 2>&1
grep -E "engine\.|checks|FAIL" $O/selftest_engine.txt | tail -4
echo "== probe"
P=$bench_dir/engine_probe
[ -x "$P" ] || P=$bench_dir/../build/bench/engine_probe
timeout ${T_PROBE:-60} $P ${PROBE_B:-1 8 64 256} > $O/probe.txt 2>&1
grep -E "kernel sum|engine:|attention|mlp_in" $O/probe.txt
echo "== singlestream"
timeout ${T_INFER:-50} $B infer --random llama3.1-8b --scenario singlestream --synthetic ${N_SS:-4} \
    --input-len fixed:778 --max-tokens 128 --ignore-eos --db $DB -v > $O/single.txt 2>&1
grep -E "Samples per|Mean First|50.00 percentile first|Mean Time|50.00 percentile time|run kernel|paged kernel" $O/single.txt
echo "== peers"
timeout ${T_PEER:-100} python3 $PEER $PEER_ARGS > $O/peer.txt 2> $O/peer_err.txt
cat $O/peer.txt
tail -3 $O/peer_err.txt
echo "== offline"
timeout ${T_INFER:-50} $B infer --random llama3.1-8b --synthetic ${N_OFF:-300} --input-len normal:778:256 \
    --max-tokens 128 --ignore-eos --db $DB -v > $O/offline.txt 2>&1
grep -E "engine:|KV cache|Samples per|Tokens per|Result is|Completed|Failed|Mean First|Mean Time|run kernel|paged kernel" $O/offline.txt
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
