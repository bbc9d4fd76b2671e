#!/bin/bash
# engine_ab.sh: the engine of this build against another build's (BASE, e.g. main's), side
# by side in one run on GPU 0: correctness first, then the same runs of both alternately;
# with ALT, a third build (e.g. this one less a change) beside them in the Offline runs.
# Travels in one folder with llmbench, BASE's binary (llmbench.base), ALT's (llmbench.alt),
# engine_probe, device_env.sh and the shared libraries the machine lacks (or runs from the
# source tree: make build bench, BASE=path). Logs go to $OUT (default /tmp). Parts, in this
# order, each under its own time limit in seconds:
#  1. correctness (T_CHECK each), this build: the selftest rows of the paged kernels, RoPE,
#     the decode gemv, RMSNorm, argmax ($KERNELS: those named) and the whole engine against
#     the CPU engine, on the small model and on random llama3.1-8b weights (T_BIG).
#     CHECK_ONLY=1 stops here.
#  2. with SEARCH=R, this build's infer --search-qps R (ALT's when this build failed a
#     selftest row) under MODEL_KEY's limits (SQ queries and SD seconds a trial at least,
#     step budget STEP, ST trials, tolerance STOL), T_SEARCH
#  3. one Offline run of BASE, untimed (a fresh machine's first run is slow; NO_WARM=1
#     leaves it out, BASE then runs first in round 1), then ROUNDS rounds (T_INFER each
#     run) of SingleStream (N_SS queries of 778 tokens, 128 out; the builds SS_BUILDS, of
#     a (this one), b (BASE) and c (ALT): a and b unless named) and Offline (N_OFF queries,
#     normal:778:256, 128 out, eos ignored; OFF_BUILDS, all three unless named), and with
#     SRV_QPS=R a Server run at R queries/s (N_SRV queries of the Offline shape, at least
#     SQ queries and SD seconds, step budget STEP, MODEL_KEY's bounds; SRV_BUILDS, a and b
#     unless named: TTFT and TPOT p99, VALID or not), the order of the builds reversed every
#     round
#  4. with PROBE_B, bench/engine_probe at those batches (T_PROBE): where a decode step and
#     a prefill step go
#  5. the table: each build's figures per round and their medians
# At most 8 files come back from a lent machine: device, selftest, runs, search and probe
# (.txt).
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
O=${OUT:-/tmp}
mkdir -p "$O"
A=$LLMBENCH
B=${BASE:-$bench_dir/llmbench.base}
C=${ALT:-$bench_dir/llmbench.alt}
[ -x "$C" ] || C=
DB=/tmp/engine-ab.db
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee $O/device.txt
for X in "$A" "$B" $C; do $X --version 2>&1 | head -1 | tee -a $O/device.txt; done
echo "== selftest"
: > $O/selftest.txt
for K in ${KERNELS:-paged rope gemv rmsnorm sample}; do
    timeout ${T_CHECK:-40} $A selftest --no-model --only $K > $O/st.txt 2>&1 || bad=1
    cat $O/st.txt >> $O/selftest.txt
    tail -n 1 $O/st.txt
    grep -h "FAIL" $O/st.txt | head -3
done
for K in engine engine.llama3.1-8b; do
    T=${T_CHECK:-40}
    [ $K = engine.llama3.1-8b ] && T=${T_BIG:-120}
    timeout $T $A selftest --no-kernels --only $K > $O/st.txt 2>&1 || { echo "selftest $K: exit $?"; bad=1; }
    cat $O/st.txt >> $O/selftest.txt
    grep -E "engine\.|checks|FAIL" $O/st.txt | tail -4
done
rm -f $O/st.txt
[ -n "$CHECK_ONLY" ] && exit 0

if [ -n "$SEARCH" ]; then
    S=$A
    [ -n "$bad" ] && [ -n "$C" ] && { echo "this build failed a selftest row: the search runs ALT"; S=$C; }
    echo "== server search from $SEARCH queries/s (${MODEL_KEY:-llama3.1-8b-interactive}, $($S --version 2>&1 | head -1))"
    timeout ${T_SEARCH:-200} $S infer --random llama3.1-8b --search-qps $SEARCH \
        --synthetic ${N_SEARCH:-2000} --step-tokens ${STEP:-2048} --input-len normal:778:256 \
        --max-tokens 128 --ignore-eos --min-queries ${SQ:-500} --min-duration ${SD:-20} \
        --model-key ${MODEL_KEY:-llama3.1-8b-interactive} --search-trials ${ST:-6} \
        --search-tolerance ${STOL:-0.1} --db $DB -v > $O/search.txt 2>&1
    sed -n '/^QPS search/,$p' $O/search.txt
    tail -n 2 $O/search.txt
fi

# one run: ss|off|srv, build (a|b|c), round; its log appended to runs.txt, figures to figs.txt
: > $O/runs.txt
: > $O/figs.txt
one() {
    local X=$A
    [ "$2" = b ] && X=$B
    [ "$2" = c ] && X=$C
    if [ "$1" = ss ]; then
        timeout ${T_INFER:-50} $X infer --random llama3.1-8b --scenario singlestream \
            --synthetic ${N_SS:-3} --input-len fixed:778 --max-tokens 128 --ignore-eos \
            --db $DB -v > $O/r.txt 2>&1
        local tpot ttft
        tpot=$(awk '/50.00 percentile time to output token/ {print $NF/1e6}' $O/r.txt)
        ttft=$(awk '/50.00 percentile first token latency/ {print $NF/1e6}' $O/r.txt)
        echo "ss $2 $3 ${tpot:-NA} ${ttft:-NA}" | tee -a $O/figs.txt
    elif [ "$1" = off ]; then
        timeout ${T_INFER:-50} $X infer --random llama3.1-8b --synthetic ${N_OFF:-250} \
            --input-len normal:778:256 --max-tokens 128 --ignore-eos --db $DB -v > $O/r.txt 2>&1
        local sps
        sps=$(grep -E "Samples per second" $O/r.txt | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | tail -1)
        echo "off $2 $3 ${sps:-NA}" | tee -a $O/figs.txt
        grep -E "engine steps|warm-up|Result is|Failed" $O/r.txt
    elif [ "$1" = srv ]; then
        timeout ${T_INFER:-50} $X infer --random llama3.1-8b --scenario server --qps $SRV_QPS \
            --synthetic ${N_SRV:-1000} --step-tokens ${STEP:-2048} --input-len normal:778:256 \
            --max-tokens 128 --ignore-eos --min-queries ${SQ:-500} --min-duration ${SD:-20} \
            --model-key ${MODEL_KEY:-llama3.1-8b-interactive} --db $DB -v > $O/r.txt 2>&1
        local ttft tpot valid
        ttft=$(awk '/99.00 percentile first token latency/ {print $NF/1e6}' $O/r.txt)
        tpot=$(awk '/99.00 percentile time to output token/ {print $NF/1e6}' $O/r.txt)
        valid=$(grep -qE "Result is : VALID" $O/r.txt && echo 1 || echo 0)
        echo "srv $2 $3 ${ttft:-NA} ${tpot:-NA} $valid" | tee -a $O/figs.txt
    fi
    echo "==== $1 $2 round $3" >> $O/runs.txt
    cat $O/r.txt >> $O/runs.txt
    rm -f $O/r.txt
}
if [ -z "$NO_WARM" ]; then
    echo "== warm-up (base Offline, untimed)"
    one off b 0
fi
for R in $(seq 1 ${ROUNDS:-3}); do
    echo "== round $R"
    if [ $((R % 2)) = 1 ]; then order="b ${C:+c }a"; else order="a ${C:+c }b"; fi
    for X in $order; do [[ " ${SS_BUILDS:-a b} " == *" $X "* ]] && one ss $X $R; done
    for X in $order; do [[ " ${OFF_BUILDS:-a b c} " == *" $X "* ]] && one off $X $R; done
    [ -n "${SRV_QPS:-}" ] && for X in $order; do [[ " ${SRV_BUILDS:-a b} " == *" $X "* ]] && one srv $X $R; done
done
if [ -n "$PROBE_B" ]; then
    echo "== probe"
    P=$bench_dir/engine_probe
    [ -x "$P" ] || P=$bench_dir/../build/bench/engine_probe
    timeout ${T_PROBE:-60} $P $PROBE_B > $O/probe.txt 2>&1
    grep -E "kernel sum|engine:|attention|prefill" $O/probe.txt
fi
echo "== table (a: $($A --version 2>&1 | head -1), b: $($B --version 2>&1 | head -1)${C:+, c: $($C --version 2>&1 | head -1)})"
python3 - "$O/figs.txt" << 'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[2] == "0":
        continue  # the untimed warm-up
    for i, v in enumerate(f[3:]):
        if v != "NA":
            runs.setdefault((f[0], i, f[1]), []).append(float(v))
names = {("ss", 0): "SingleStream TPOT p50 ms", ("ss", 1): "SingleStream TTFT p50 ms",
         ("off", 0): "Offline samples/s", ("srv", 0): "Server TTFT p99 ms",
         ("srv", 1): "Server TPOT p99 ms", ("srv", 2): "Server VALID (1) or not (0)"}
builds = "abc" if any(k[2] == "c" for k in runs) else "ab"
label = {"a": "a (this build)", "b": "b (base)", "c": "c (alt)"}
print("| figure | " + " | ".join(label[b] + ": runs, median" for b in builds) + " |")
print("| --- |" + " --- |" * len(builds))
for (kind, i), name in names.items():
    cells = []
    for b in builds:
        v = runs.get((kind, i, b), [])
        cells.append("%s, **%s**" % (" ".join("%g" % x for x in v),
                                     "%.2f" % statistics.median(v) if v else "-"))
    print("| %s | %s |" % (name, " | ".join(cells)))
EOF
