#!/bin/bash
# engine_perf.sh: the engine's correctness and speed beside its PyTorch peers, in one
# run on GPU 0. Travels in one folder with llmbench, engine_probe, device_env.sh,
# peer_torch.py, libmicrohttpd.so.12 and libyaml-0.so.2 (or runs from the source tree:
# make build bench). Logs go to $OUT (default /tmp). Parts, in this order, each under its
# own time limit in seconds:
#  1. correctness (T_CHECK each): selftest rows of the paged kernels (split contexts and
#     RoPE inside the store included), RoPE at mixed positions, the decode products' gemv
#     (splits, norm and SwiGLU inside), RMSNorm (wide rows included), argmax and the whole
#     engine on a small model (GPU logits against the CPU engine over the same weights;
#     greedy tokens through the cuDNN prefill and the decode graphs); with BIG=1 the same
#     on random llama3.1-8b weights (T_BIG); with HF=1 tools/hf_engine_check.py (transformers
#     against the engine on a tiny model, through bench/engine_logits). CHECK_ONLY=1 stops
#     here.
#  2. llmbench infer --random llama3.1-8b (T_INFER each): SingleStream (778-token prompts:
#     TTFT, TPOT; N_SS queries), Offline (N_OFF queries, prompts normal:778:256, 128
#     tokens, eos ignored), and Server at each rate in $QPS (SQ queries and SD seconds at
#     least, step budget 2048, llama3.1-8b's limits); with SEARCH=R, infer --search-qps R
#     (the same queries; at most ST trials, tolerance STOL, step budget STEP (2048), the
#     limits of MODEL_KEY (llama3.1-8b; llama3.1-8b-interactive: 500 ms / 30 ms); early
#     stopping at p99 needs SQ >= 459 for any trial to be VALID) under T_SEARCH
#  3. the peers (T_PEER): bench/peer_torch.py $PEER_ARGS (the static-cache +
#     torch.compile loop, then transformers' generate)
#  4. where a decode step goes (T_PROBE): bench/engine_probe at batches $PROBE_B
#  5. the table of the figures
# At most 8 files come back from a lent machine: the logs are device, selftest, single,
# offline (the Server runs appended), peer, peer_err and probe (.txt), beside the caller's
# own.
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
O=${OUT:-/tmp}
mkdir -p "$O"
B=$LLMBENCH
PEER=$(dirname "${BASH_SOURCE[0]}")/peer_torch.py
[ -f "$PEER" ] || PEER=$bench_dir/peer_torch.py
DB=/tmp/engine-perf.db
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $O/device.txt
$B --version 2>&1 | head -1 | tee -a $O/device.txt
echo "== selftest"
: > $O/selftest.txt
for K in paged rope gemv rmsnorm sample; do
    timeout ${T_CHECK:-30} $B selftest --no-model --only $K > $O/st.txt 2>&1
    cat $O/st.txt >> $O/selftest.txt
    tail -n 1 $O/st.txt
    grep -h "FAIL" $O/st.txt | head -3
done
timeout ${T_CHECK:-30} $B selftest --no-kernels --only engine > $O/st.txt 2>&1
cat $O/st.txt >> $O/selftest.txt
grep -E "engine\.|checks|FAIL" $O/st.txt | tail -4
if [ -n "$BIG" ]; then
    timeout ${T_BIG:-120} $B selftest --no-kernels --only engine.llama3.1-8b > $O/st.txt 2>&1
    cat $O/st.txt >> $O/selftest.txt
    grep -E "engine\.|checks|FAIL" $O/st.txt | tail -4
fi
if [ -n "$HF" ]; then
    E=$bench_dir/engine_logits
    [ -x "$E" ] || E=$bench_dir/../build/bench/engine_logits
    timeout ${T_CHECK:-30} python3 $bench_dir/../tools/hf_engine_check.py $E /tmp/hfcheck --gpu \
        > $O/st.txt 2>&1
    cat $O/st.txt >> $O/selftest.txt
    tail -n 4 $O/st.txt
fi
rm -f $O/st.txt
[ -n "$CHECK_ONLY" ] && exit 0
echo "== singlestream"
timeout ${T_INFER:-50} $B infer --random llama3.1-8b --scenario singlestream --synthetic ${N_SS:-4} \
    --input-len fixed:778 --max-tokens 128 --ignore-eos --db $DB -vv > $O/single.txt 2>&1
grep -E "engine:|Samples per|Mean First|50.00 percentile first|Mean Time|50.00 percentile time|kernel by kernel|paged kernel|decode products" $O/single.txt
echo "== offline"
timeout ${T_INFER:-50} $B infer --random llama3.1-8b --synthetic ${N_OFF:-300} --input-len normal:778:256 \
    --max-tokens 128 --ignore-eos --db $DB -v > $O/offline.txt 2>&1
grep -E "engine:|engine steps|warm-up|Samples per|Tokens per|Result is|Completed|Failed|Mean First|Mean Time|kernel by kernel|paged kernel" $O/offline.txt
for Q in $QPS; do
    echo "== server $Q queries/s"
    timeout ${T_INFER:-50} $B infer --random llama3.1-8b --scenario server --qps $Q --synthetic 600 \
        --step-tokens 2048 --input-len normal:778:256 --max-tokens 128 --ignore-eos \
        --min-queries ${SQ:-100} --min-duration ${SD:-20} --model-key llama3.1-8b --db $DB \
        > $O/server.txt 2>&1
    grep -E "Scheduled|Completed samples|Result is|satisfied|99.00 percentile first|99.00 percentile time" $O/server.txt
    cat $O/server.txt >> $O/offline.txt
    rm -f $O/server.txt
done
if [ -n "$SEARCH" ]; then
    echo "== server search from $SEARCH queries/s"
    timeout ${T_SEARCH:-200} $B infer --random llama3.1-8b --search-qps $SEARCH --synthetic 2000 \
        --step-tokens ${STEP:-2048} --input-len normal:778:256 --max-tokens 128 --ignore-eos \
        --min-queries ${SQ:-100} --min-duration ${SD:-20} --model-key ${MODEL_KEY:-llama3.1-8b} \
        --search-trials ${ST:-6} --search-tolerance ${STOL:-0.1} --db $DB > $O/server.txt 2>&1
    sed -n '/^QPS search/,$p' $O/server.txt
    tail -n 2 $O/server.txt
    cat $O/server.txt >> $O/offline.txt
    rm -f $O/server.txt
fi
echo "== peers"
timeout ${T_PEER:-100} python3 $PEER $PEER_ARGS > $O/peer.txt 2> $O/peer_err.txt
cat $O/peer.txt
tail -n 3 $O/peer_err.txt
echo "== probe"
P=$bench_dir/engine_probe
[ -x "$P" ] || P=$bench_dir/../build/bench/engine_probe
timeout ${T_PROBE:-60} $P ${PROBE_B:-1 8 64 256} > $O/probe.txt 2>&1
grep -E "kernel sum|engine:|attention|rmsnorm" $O/probe.txt
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
