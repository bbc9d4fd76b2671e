#!/bin/bash
# dp_graph.sh: one call on a machine with N_GPUS GPUs (default 2) for the data-parallel step
# as one CUDA graph, the parts in the order PARTS names them (default: test correct ab), each under its
# own limit so the whole ends within TOTAL_S (default 280) seconds:
#   test     the GPU training test's case of steps as a graph against kernel by kernel
#            ($TEST_BIN, default test_train_gpu beside this script);
#   correct  loss agreement (dp_gpu.sh PARTS=correct): GPT-2 124M in bf16 and fp16 at ZeRO
#            0-3 on N_GPUS GPUs against one GPU with the whole batch (the two one-GPU runs side
#            by side, one a GPU), replicas identical;
#   ab       dp_round.sh PARTS=ab on N_GPUS GPUs at ZeRO 0-3, $BASE_LLMBENCH (base) and
#            $LLMBENCH (off) in turn, twice each (AB_REPS), after one one-GPU ZeRO 0 run
#            (BASE_LLMBENCH default: llmbench-main beside this script).
# Logs go to $OUT/graph (default /tmp/graph); ends.txt says how each part ended.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_env.sh"
O=${OUT:-/tmp}/graph
total=${TOTAL_S:-280}
. "$here/round_clock.sh"
n=${N_GPUS:-2}
TEST_BIN=${TEST_BIN:-$here/test_train_gpu}
BASE_LLMBENCH=${BASE_LLMBENCH:-$here/llmbench-main}
export BASE_LLMBENCH
"$LLMBENCH" --version && "$BASE_LLMBENCH" --version || {
    note "a binary does not start"
    exit 1
}
for part in ${PARTS:-test correct ab}; do
    case $part in
    test)
        timeout "$(cap 40)" "$TEST_BIN" test_gpu_graph_steps_match_kernel_by_kernel >"$O/test.txt" 2>&1
        note "test exit $?: $(grep -E 'PASSED|FAILED|SKIPPED|fail' "$O/test.txt" | tail -n 3 | tr '\n' ' ')" ;;
    correct)
        c=(PARTS=correct CMODELS=gpt2-124m STAGES="0 1 2 3" CSTEPS=6 COMM_TIMEOUT=20)
        t=$(cap 25)
        for g in 0 1; do # the one-GPU runs, each on its GPU, each into its folder
            prec=bf16
            [ $g = 1 ] && prec=fp16
            env CUDA_VISIBLE_DEVICES=$g "${c[@]}" PRECS=$prec GPUS=" " OUT="$O/correct-1g-$prec" \
                DEADLINE_S="$t" bash "$here/dp_gpu.sh" >"$O/correct-1g-$prec.txt" 2>&1 &
        done
        wait
        mkdir -p "$O/correct"
        cp "$O"/correct-1g-*/c-*.json "$O/correct/"
        env "${c[@]}" PRECS="bf16 fp16" GPUS=$n CONE=0 OUT="$O/correct" DEADLINE_S="$(cap 75)" \
            TRAIN_ARGS=-v bash "$here/dp_gpu.sh" >"$O/correct.txt" 2>&1
        note "correct: $(grep -c ' yes ' "$O/correct.txt") rows agree, $(grep -c ' NO ' "$O/correct.txt")" \
            "do not; $(grep -c '^skipped\| failed (exit' "$O/correct.txt") runs failed or skipped;" \
            "graph: $(grep -l '"cuda_graph": *true' "$O"/correct/c-*-"$n"g-*.json | wc -l) $n-GPU runs," \
            "capture failed in $(grep -l 'kernel by kernel' "$O"/correct/c-*-"$n"g-*.err | wc -l)" ;;
    ab)
        OUT=$O TOTAL_S=$(left) PARTS=ab AB_VARIANTS="base off" AB_GPUS=$n AB_STAGES="0 1 2 3" AB_REPS=2 \
            bash "$here/dp_round.sh" >"$O/ab-run.txt" 2>&1
        note "ab: $(tail -n 2 "$O/ab-run.txt" | tr '\n' ' ')" ;;
    esac
done
note "done after $(($(date +%s) - start)) s"
[ -f "$O/round/ab-table.txt" ] && cat "$O/round/ab-table.txt"
