#!/bin/bash
# gpu_round.sh: one call on a machine with 4 GPUs that checks the GPU paths built since the
# last such call and measures what they were built for, each part under its own limit so
# the whole ends within TOTAL_S (default 500) seconds:
#   1. at once, on separate GPUs: the engine's correctness rows (engine_perf.sh
#      CHECK_ONLY=1 BIG=1, GPU 0), test_train_gpu (GPU 1), and Llama 3.1 8B at ZeRO 0 on one
#      GPU, which must be refused before anything is allocated (GPU 2);
#   2. data-parallel LoRA and `train --model DIR` (lora_bench.sh PARTS=dp,hf, Mistral 7B);
#   3. ZeRO 0-3 agreement in fp16 on 4 GPUs (dp_gpu.sh PARTS=correct);
#   4. Llama 3.1 8B at ZeRO 3 on 4 GPUs (dp_gpu.sh PARTS=llama);
#   5. one engine replica per GPU under one load run (four_gpu.sh PARTS=replicas);
#   6. `llmbench run --steps 10` in the time left (its multi-GPU suite: scaling, comm,
#      doctor).
# $LLMBENCH is the binary, $LORA_DIR the folder with lora_bench.sh and its binary, $TTG the
# test_train_gpu binary. Logs go to $OUT/round (default /tmp/round); the last lines say
# what each part ended with.
set -u
here=$(cd "$(dirname "$0")" && pwd)
X=$LLMBENCH
O=${OUT:-/tmp}/round
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
total=${TOTAL_S:-500}
left() { echo $((total - ($(date +%s) - start))); }
cap() { # SECONDS: the smaller of SECONDS and what is left
    local l
    l=$(left)
    [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
note() { echo "$*" | tee -a "$O/ends.txt"; }

(OUT=$O/eng CHECK_ONLY=1 BIG=1 T_CHECK=40 timeout 100 bash "$here/engine_perf.sh" >"$O/eng.txt" 2>&1
    echo "engine checks exit $?" >>"$O/eng.txt") &
(CUDA_VISIBLE_DEVICES=1 timeout 90 "$TTG" >"$O/ttg.txt" 2>&1; echo "test_train_gpu exit $?" >>"$O/ttg.txt") &
(CUDA_VISIBLE_DEVICES=2 timeout 60 "$X" train --model llama3.1-8b --device cuda --precision bf16 \
    --batch 1 --seq 1024 --steps 2 --db /tmp/round-oom.db >"$O/oom.txt" 2>&1
    echo "8b at zero 0 on one GPU: exit $?" >>"$O/oom.txt") &
wait
note "$(tail -n 1 "$O/eng.txt"), $(tail -n 1 "$O/ttg.txt"), $(tail -n 1 "$O/oom.txt")"

(cd "$LORA_DIR" && env -u LLMBENCH PARTS=dp,hf MODEL=mistral-7b BATCH=8 SEQ=512 RANK=16 OUT=$O/lora \
    timeout "$(cap 110)" bash ./lora_bench.sh >"$O/lora.txt" 2>&1)
note "lora_bench dp,hf exit $?"

OUT=$O/dp PARTS=correct CMODELS=gpt2-124m PRECS=fp16 GPUS=4 STAGES="0 1 2 3" CSTEPS=6 \
    DEADLINE_S=$(cap 50) bash "$here/dp_gpu.sh" >"$O/fp16.txt" 2>&1
note "dp_gpu correct fp16 exit $?"
OUT=$O/dp PARTS=llama LSTAGES= BIG=1 DEADLINE_S=$(cap 100) bash "$here/dp_gpu.sh" >"$O/big.txt" 2>&1
note "dp_gpu llama 8b exit $?"
OUT=$O/four PARTS=replicas DDP_GPUS= DEADLINE_S=$(cap 125) bash "$here/four_gpu.sh" >"$O/four.txt" 2>&1
note "four_gpu replicas exit $?"
if [ "$(left)" -gt 40 ]; then
    timeout "$(cap 200)" "$X" run --steps 10 --db /tmp/round-run.db --no-progress >"$O/run.txt" 2>&1
    note "llmbench run exit $? ($(left) s left)"
else
    note "llmbench run skipped: $(left) s left"
fi
