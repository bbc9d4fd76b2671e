#!/bin/sh
# engine_device.sh: the engine's checks and benchmarks in one run on a GPU machine, GPU 0.
# $C is the build folder holding llmbench and bench/engine_logits (make build; make bench)
# and libmicrohttpd.so.12 where the machine lacks it (default: build); $T holds
# hf_engine_check.py and peer_transformers.py (default: tools). Logs go to $OUT (default
# /tmp). Sections: the
# selftest rows of the engine's kernels and of the whole engine on a small model; with
# BIG=1 on llama3.1-8b; with HF=1 transformers against the engine on a tiny model; then
# infer on random llama3.1-8b weights: Offline (N_OFF queries, once per max-seqs in SEQS),
# SingleStream, Server (once per rate in QPS; SQ queries and SD seconds at least); with
# PEER=1 transformers' generate on the Offline shape.
C=${C:-build}
T=${T:-tools}
E=$C/engine_logits
[ -x "$E" ] || E=$C/bench/engine_logits
O=${OUT:-/tmp}
export CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$C:$LD_LIBRARY_PATH
B=$C/llmbench
DB=/tmp/engine-runs.db
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
step() { echo "== $*"; }
step selftest kernels
timeout 120 $B selftest --no-model --only paged --db $DB > $O/selftest_paged.txt 2>&1
tail -14 $O/selftest_paged.txt
timeout 60 $B selftest --no-model --only rope --db $DB 2>&1 | grep -i "positions\|FAIL\|checks" | tail -8
timeout 60 $B selftest --no-model --only sample --db $DB 2>&1 | tail -2
step selftest engine small
timeout 60 $B selftest --no-kernels --only engine --db $DB 2>&1 | tail -4
[ -n "$BIG" ] && step selftest engine 8b
[ -n "$BIG" ] && timeout 150 $B selftest --no-kernels --only engine.llama3.1-8b --db $DB 2>&1 | tail -4
[ -n "$HF" ] && step transformers
[ -n "$HF" ] && timeout 90 python3 $T/hf_engine_check.py $E /tmp/hfcheck --gpu 2>&1 | tail -4
for S in ${SEQS:-256}; do
step offline max-seqs $S
timeout 100 $B infer --random llama3.1-8b --synthetic ${N_OFF:-300} --input-len normal:778:256 \
    --max-tokens 128 --ignore-eos --max-seqs $S --db $DB -v > $O/offline$S.txt 2>&1
grep -E "engine:|Samples per|Tokens per|Result is|Duration|Completed|Failed|Mean First|Mean Time" $O/offline$S.txt
done
step singlestream
timeout 45 $B infer --random llama3.1-8b --scenario singlestream --synthetic 6 --input-len fixed:778 \
    --max-tokens 128 --ignore-eos --db $DB > $O/single.txt 2>&1
grep -E "Samples per|Tokens per|Mean First|50.00 percentile first|Mean Time|50.00 percentile time" $O/single.txt
for Q in ${QPS:-6}; do
step server qps $Q
timeout 100 $B infer --random llama3.1-8b --scenario server --qps $Q --synthetic 600 --step-tokens 2048 \
    --input-len normal:778:256 --max-tokens 128 --ignore-eos --min-queries ${SQ:-100} \
    --min-duration ${SD:-20} --model-key llama3.1-8b --db $DB > $O/server$Q.txt 2>&1
grep -E "Scheduled|Completed samples|Result is|satisfied|99.00 percentile first|99.00 percentile time" $O/server$Q.txt
done
[ -n "$PEER" ] && step peer transformers
[ -n "$PEER" ] && timeout 150 python3 $T/peer_transformers.py 64 778 2>&1 | tail -2
