#!/bin/bash
# gpu_round.sh: one call on a machine with 4 GPUs that checks the GPU paths changed since
# the last such call and repeats the rows they touch, each part under its own limit so the
# whole ends within TOTAL_S (default 540) seconds; correctness first:
#   1. tests/test_train_gpu ($TTG) and `selftest --only grad_pack` on GPU 0;
#   2. ZeRO 0-3 agreement in bf16 on 4 GPUs against one (dp_gpu.sh PARTS=correct);
#   3. LoRA with ZeRO 1-3 and --grad-accum (lora_bench.sh PARTS=zero from $LORA_DIR, which
#      holds the script and its binary);
#   4. collectives: all_reduce float 512 KB - 2 MB three times under each libnccl.so.2
#      (four_gpu.sh PARTS=nccl1m), then every collective 8 B - 128 MB and all_reduce float
#      at 1 MB over `mpirun -np 4` (Open MPI from $OMPI_DIR, bench/comm_carry.sh's layout);
#   5. one engine replica per GPU under one load run (four_gpu.sh PARTS=replicas);
#   6. GPT-2 124M bf16 16 x 1024 at ZeRO PSTAGES (default 0 1 3) on 1 and 4 GPUs
#      (dp_gpu.sh PARTS=perf);
#   7. where the 4-GPU step loses time against one GPU: dp_trace.sh's CUPTI traces of GPT-2 124M
#      bf16 16 x 1024 at ZeRO 0 on 1 GPU and on 4 (GAPS=0 leaves it out).
# $LLMBENCH is the binary. Logs go to $OUT/round (default /tmp/round); the last lines say
# how each part ended.
set -u
here=$(cd "$(dirname "$0")" && pwd)
X=$LLMBENCH
O=${OUT:-/tmp}/round
total=${TOTAL_S:-540}
. "$here/round_clock.sh"

if [ -n "${TTG:-}" ]; then
    CUDA_VISIBLE_DEVICES=0 timeout "$(cap 90)" "$TTG" >"$O/ttg.txt" 2>&1
    note "test_train_gpu exit $?: $(grep -E 'PASSED|FAILED' "$O/ttg.txt" | tr '\n' ' ')"
fi
CUDA_VISIBLE_DEVICES=0 timeout "$(cap 30)" "$X" selftest --no-model --only grad_pack >"$O/selftest.txt" 2>&1
note "selftest grad_pack exit $?: $(tail -n 1 "$O/selftest.txt")"

OUT=$O/dp PARTS=correct CMODELS=gpt2-124m PRECS=bf16 GPUS=4 STAGES="0 1 2 3" CSTEPS=6 \
    DEADLINE_S=$(cap 80) bash "$here/dp_gpu.sh" >"$O/correct.txt" 2>&1
note "dp_gpu correct exit $?"

if [ -n "${LORA_DIR:-}" ]; then
    (cd "$LORA_DIR" && env -u LLMBENCH PARTS=zero OUT=$O/lora timeout "$(cap 130)" bash ./lora_bench.sh \
        >"$O/lora.txt" 2>&1)
    note "lora_bench zero exit $?: $(grep 'zero check' "$O/lora.txt")"
fi

OUT=$O/four PARTS=nccl1m DEADLINE_S=$(cap 70) bash "$here/four_gpu.sh" >"$O/nccl1m.txt" 2>&1
note "nccl1m exit $?: $(awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0)' "$O/nccl1m.txt" | wc -l) rows with wrong elements"
if [ -n "${OMPI_DIR:-}" ]; then
    (
        export OPAL_PREFIX=$OMPI_DIR/ompi/usr PMIX_INSTALL_PREFIX=$OMPI_DIR/ompi/usr/lib/x86_64-linux-gnu/pmix2
        export PATH=$OMPI_DIR/ompi/usr/bin:$PATH PMIX_MCA_pcompress_base_silence_warning=1
        export LD_LIBRARY_PATH=$OMPI_DIR/lib:${LD_LIBRARY_PATH:-}
        . "$here/device_env.sh"
        mpi=(mpirun --allow-run-as-root -np 4 --mca btl self,vader -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
        timeout "$(cap 60)" "${mpi[@]}" "$X" comm all -b 8 -e 128M -f 8 -n 5 -w 2 --db /tmp/round-mpi.db
        echo "mpirun comm all exit $?"
        timeout "$(cap 30)" "${mpi[@]}" "$X" comm all_reduce -b 1M -e 1M -n 50 -w 5 --db /tmp/round-mpi.db
        echo "mpirun all_reduce 1M exit $?"
    ) >"$O/mpi.txt" 2>&1
    note "$(grep -E 'exit' "$O/mpi.txt" | tr '\n' ' ')"
fi

OUT=$O/four PARTS=replicas RQ=1024 DDP_GPUS= DEADLINE_S=$(cap 150) bash "$here/four_gpu.sh" >"$O/four.txt" 2>&1
note "replicas exit $?: $(grep 'replicas:' "$O/four.txt" | tail -1)"

OUT=$O/dp PARTS=perf GPUS=4 STAGES="${PSTAGES:-0 1 3}" STEPS=15 WARMUP=3 DEADLINE_S=$(cap 120) \
    bash "$here/dp_gpu.sh" >"$O/perf.txt" 2>&1
note "dp_gpu perf exit $?"

if [ "${GAPS:-1}" = 1 ]; then
    OUT=$O/trace RUNS="1 4" TAG=z0 STEPS=10 WARMUP=5 timeout "$(cap 75)" bash "$here/dp_trace.sh" \
        >"$O/trace.txt" 2>&1
    note "dp_trace exit $?"
fi
note "done after $(($(date +%s) - start)) s"
