#!/bin/bash
# dp_round.sh: one call on a machine with 4 GPUs for the data-parallel training rows, the
# parts in the order PARTS names them (default: correct trace stages), each under its own
# limit so the whole ends within TOTAL_S (default 270) seconds:
#   correct  agreement rows (dp_gpu.sh PARTS=correct): GPT-2 124M fp16 at ZeRO 0, 2 and 3
#            and Llama 3.2 1B bf16 at ZeRO 0-3, on 2 GPUs (the two models side by side, on
#            GPUs 0-1 and 2-3) and then on 4, each against its one-GPU run;
#   trace    dp_trace.sh: CUPTI traces of GPT-2 124M bf16 16 x 1024 at ZeRO 0 on 1 GPU and
#            on 4, summarised (then ZeRO 1 on 4 against ZeRO 1 on 1, time allowing);
#   stages   the stage table's one-GPU rows (dp_gpu.sh PARTS=stages SGPUS=1, fp16 and fp32,
#            REPEATS runs each): stage z on GPU z, the four stages at the same time, each
#            into its own folder (one database each), the table over all four;
#   ab       GPT-2 124M bf16 16 x 1024 at ZeRO AB_STAGES (default 0 1 3) on 1 and 4 GPUs
#            with $LLMBENCH and with $BASE_LLMBENCH (another build), alternating, AB_REPEATS
#            (default 2) times (dp_gpu.sh PARTS=perf into $OUT/round/ab-NAME-REP).
# Logs go to $OUT/round (default /tmp/round); ends.txt says how each part ended.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_env.sh"
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp}/round
mkdir -p "$O"
start=$(date +%s)
total=${TOTAL_S:-270}
left() { echo $((total - ($(date +%s) - start))); }
cap() { # SECONDS: the smaller of SECONDS and what is left, at least 1 (timeout 0 never ends)
    local l
    l=$(left)
    [ "$l" -lt 1 ] && l=1
    [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
note() { echo "$*" | tee -a "$O/ends.txt"; }
dp() { # LOG VAR=VALUE...: dp_gpu.sh with those settings
    local log=$1
    shift
    env "$@" bash "$here/dp_gpu.sh" >>"$O/$log" 2>&1
}

for part in ${PARTS:-correct trace stages}; do
    case $part in
    correct)
        c=(PARTS=correct CSTEPS=6 COMM_TIMEOUT=20)
        g=(CMODELS=gpt2-124m PRECS=fp16 STAGES="0 2 3" OUT=$O/c-gpt2)
        l=(CMODELS=llama3.2-1b PRECS=bf16 STAGES="0 1 2 3" OUT=$O/c-llama)
        t=$(cap 70)
        dp c-gpt2.txt CUDA_VISIBLE_DEVICES=0,1 "${c[@]}" "${g[@]}" GPUS=2 DEADLINE_S="$t" &
        dp c-llama.txt CUDA_VISIBLE_DEVICES=2,3 "${c[@]}" "${l[@]}" GPUS=2 DEADLINE_S="$t" &
        wait
        dp c-gpt2.txt "${c[@]}" "${g[@]}" GPUS=4 CONE=0 DEADLINE_S="$(cap 45)"
        dp c-llama.txt "${c[@]}" "${l[@]}" GPUS=4 CONE=0 DEADLINE_S="$(cap 70)"
        for m in gpt2 llama; do # the tables over both GPU counts
            s=("${g[@]}")
            [ $m = llama ] && s=("${l[@]}")
            dp c-$m-table.txt PARTS=none "${s[@]}" GPUS="2 4"
        done
        note "correct: $(grep -c ' yes ' "$O"/c-*-table.txt | tr '\n' ' ') rows agree," \
            "$(cat "$O"/c-*-table.txt | grep -c ' NO ') do not; $(grep -h 'failed\|skipped' "$O"/c-gpt2.txt "$O"/c-llama.txt | wc -l) runs failed or skipped" ;;
    trace)
        OUT=$O/trace RUNS="1 4" TAG=z0 STEPS=10 WARMUP=5 timeout "$(cap 50)" bash "$here/dp_trace.sh" \
            >"$O/trace-z0.txt" 2>&1
        note "trace z0 exit $?"
        [ "$(left)" -gt 70 ] && OUT=$O/trace RUNS="1 4" TAG=z1 ARGS="--zero 1" STEPS=10 WARMUP=5 \
            timeout "$(cap 40)" bash "$here/dp_trace.sh" >"$O/trace-z1.txt" 2>&1 &&
            note "trace z1 done" ;;
    stages)
        t=$(cap 60)
        for z in 0 1 2 3; do
            dp stages-z$z.txt CUDA_VISIBLE_DEVICES=$z PARTS=stages SGPUS=1 STAGES=$z \
                REPEATS="${REPEATS:-3}" OUT=$O/stages-z$z DEADLINE_S="$t" &
        done
        wait
        mkdir -p "$O/stages"
        cp "$O"/stages-z*/s-*.json "$O/stages/"
        dp stages-table.txt PARTS=none OUT=$O/stages GPUS=1
        note "stages: $(grep -c '^ *1 ' "$O/stages-table.txt") rows" ;;
    ab)
        for rep in $(seq 1 "${AB_REPEATS:-2}"); do
            for who in new base; do
                x=$LLMBENCH
                [ $who = base ] && x=$BASE_LLMBENCH
                dp ab-$who-$rep.txt LLMBENCH="$x" PARTS=perf GPUS=4 STAGES="${AB_STAGES:-0 1 3}" STEPS=15 \
                    WARMUP=3 OUT="$O/ab-$who-$rep" DEADLINE_S="$(cap 75)"
            done
        done
        note "ab: $(grep -h '^ *p-' "$O"/ab-*.txt | wc -l) rows" ;;
    esac
done
note "done after $(($(date +%s) - start)) s"
