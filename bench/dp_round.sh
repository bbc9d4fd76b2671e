#!/bin/bash
# dp_round.sh: one call on a machine with 4 GPUs for the data-parallel training rows, the
# parts in the order PARTS names them (default: correct trace stages), each under its own
# limit so the whole ends within TOTAL_S (default 270) seconds:
#   selftest `selftest --only SELFTEST_ONLY` (default matmul) on GPU 0;
#   correct  agreement rows (dp_gpu.sh PARTS=correct): GPT-2 124M in GPT2_PREC (fp16) at
#            GPT2_STAGES (0 2 3) on GPT2_GPUS (2 4), Llama 3.2 1B bf16 at LLAMA_STAGES (0-3)
#            on LLAMA_GPUS (2 4): the 2-GPU runs of the two models side by side (GPUs 0-1
#            and LLAMA_DEVS, default 2,3; CORRECT_S, default 70, seconds for them), then the
#            4-GPU ones, each against its one-GPU run;
#   trace    dp_trace.sh: CUPTI traces of GPT-2 124M bf16 16 x 1024 at ZeRO 0 on 1 GPU and
#            on 4, summarised (with TRACE_ARGS also ZeRO 0 on 4 with those options; then
#            ZeRO 1 on 4 against ZeRO 1 on 1, time allowing);
#   stages   the stage table's one-GPU rows (dp_gpu.sh PARTS=stages SGPUS=1, fp16 and fp32,
#            REPEATS runs each): stage z on GPU z, the four stages at the same time, each
#            into its own folder (one database each), the table over all four;
#   kill     rank 1 of `train --gpus 2` (GPT-2 124M bf16 16 x 1024, ZeRO KILL_ZERO, default 0,
#            --comm-timeout 5) killed after KILL_AFTER seconds (15): the job's exit, how long
#            it took after the kill, and the run stored as failed naming the rank;
#   ab       GPT-2 124M bf16 16 x 1024 on 1 GPU at ZeRO 0, then at each stage of AB_STAGES
#            (default 0 1 3) on AB_GPUS (default 4) GPUs with each of AB_VARIANTS in turn
#            (default "base off"; base: $BASE_LLMBENCH, another build; alt: $ALT_LLMBENCH, a
#            third; off: $LLMBENCH; on: $LLMBENCH with AB_ARGS' options; any other name V:
#            $LLMBENCH under the environment assignments in AB_ENV_V, e.g.
#            AB_ENV_eff="NCCL_CTA_POLICY=1") (dp_gpu.sh PARTS=perf), the variants AB_REPS
#            times in turn (default 1; round r > 1 into ab-VARIANT-r), a table a variant and
#            round against the one-GPU run; AB_STEPS timed steps a run (15) after 3.
# Logs go to $OUT/round (default /tmp/round); ends.txt says how each part ended.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_env.sh"
O=${OUT:-/tmp}/round
total=${TOTAL_S:-270}
. "$here/round_clock.sh"
dp() { # LOG VAR=VALUE...: dp_gpu.sh with those settings
    local log=$1
    shift
    env "$@" bash "$here/dp_gpu.sh" >>"$O/$log" 2>&1
}

for part in ${PARTS:-correct trace stages}; do
    case $part in
    selftest)
        CUDA_VISIBLE_DEVICES=0 timeout "$(cap 40)" "$LLMBENCH" selftest --no-model --only "${SELFTEST_ONLY:-matmul}" \
            >"$O/selftest.txt" 2>&1
        note "selftest ${SELFTEST_ONLY:-matmul} exit $?: $(tail -n 1 "$O/selftest.txt")" ;;
    correct)
        c=(PARTS=correct CSTEPS=6 COMM_TIMEOUT=20)
        g=(CMODELS=gpt2-124m PRECS="${GPT2_PREC:-fp16}" STAGES="${GPT2_STAGES:-0 2 3}" OUT=$O/c-gpt2)
        l=(CMODELS=llama3.2-1b PRECS=bf16 STAGES="${LLAMA_STAGES:-0 1 2 3}" OUT=$O/c-llama)
        t=$(cap "${CORRECT_S:-70}")
        case " ${GPT2_GPUS:-2 4} " in *" 2 "*)
            dp c-gpt2.txt CUDA_VISIBLE_DEVICES=0,1 "${c[@]}" "${g[@]}" GPUS=2 DEADLINE_S="$t" & ;; esac
        case " ${LLAMA_GPUS:-2 4} " in *" 2 "*)
            dp c-llama.txt CUDA_VISIBLE_DEVICES="${LLAMA_DEVS:-2,3}" "${c[@]}" "${l[@]}" GPUS=2 \
                DEADLINE_S="$t" & ;; esac
        wait
        case " ${GPT2_GPUS:-2 4} " in *" 4 "*)
            dp c-gpt2.txt "${c[@]}" "${g[@]}" GPUS=4 CONE=0 DEADLINE_S="$(cap 45)" ;; esac
        case " ${LLAMA_GPUS:-2 4} " in *" 4 "*)
            dp c-llama.txt "${c[@]}" "${l[@]}" GPUS=4 CONE=0 DEADLINE_S="$(cap 70)" ;; esac
        for m in gpt2 llama; do # the tables over both GPU counts
            s=("${g[@]}")
            [ $m = llama ] && s=("${l[@]}")
            dp c-$m-table.txt PARTS=none "${s[@]}" GPUS="2 4"
        done
        note "correct: $(cat "$O"/c-*-table.txt | grep -c ' yes ') rows agree," \
            "$(cat "$O"/c-*-table.txt | grep -c ' NO ') do not; $(cat "$O"/c-gpt2.txt "$O"/c-llama.txt 2>/dev/null | grep -c '^skipped\| failed (exit') runs failed or skipped" ;;
    trace)
        OUT=$O/trace RUNS="1 4" TAG=z0 STEPS=10 WARMUP=5 timeout "$(cap 50)" bash "$here/dp_trace.sh" \
            >"$O/trace-z0.txt" 2>&1
        note "trace z0 exit $?"
        [ -n "${TRACE_ARGS:-}" ] && OUT=$O/trace RUNS=4 TAG=z0-args BASE_TAG=z0 ARGS="$TRACE_ARGS" \
            STEPS=10 WARMUP=5 timeout "$(cap 30)" bash "$here/dp_trace.sh" >"$O/trace-z0-args.txt" 2>&1 &&
            note "trace z0 $TRACE_ARGS done"
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
    kill)
        timeout "$(cap 60)" "$LLMBENCH" train --gpus 2 --model gpt2-124m --precision bf16 --batch 16 \
            --seq 1024 --zero "${KILL_ZERO:-0}" --steps 1000000 --warmup 2 --comm-timeout 5 \
            --no-progress --db "$O/kill.db" >"$O/kill.txt" 2>&1 &
        job=$!
        sleep "${KILL_AFTER:-15}"
        killed=
        for p in /proc/[0-9]*; do
            if [ "$(readlink "$p/exe")" = "$(readlink -f "$LLMBENCH")" ] &&
                tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then
                kill -9 "${p#/proc/}" && killed=$(date +%s%N)
            fi
        done
        wait $job
        rc=$?
        [ -n "$killed" ] && took="$((($(date +%s%N) - killed) / 1000000)) ms after the kill" ||
            took="no rank 1 found to kill"
        note "kill: train exit $rc, $took; stored: $("$LLMBENCH" results list --db "$O/kill.db" \
            --limit 1 2>&1 | tail -n 1)"
        tail -n 3 "$O/kill.txt" | tee -a "$O/ends.txt" ;;
    ab)
        # the one-GPU baseline (its code is the same in both builds), then per stage the
        # builds and variants alternating; every run's JSON into one folder for the table
        dp ab.txt PARTS=perf GPUS=" " STAGES=0 STEPS="${AB_STEPS:-15}" WARMUP=3 OUT="$O/ab" DEADLINE_S="$(cap 30)"
        folders=()
        for z in ${AB_STAGES:-0 1 3}; do
            for r in $(seq 1 "${AB_REPS:-1}"); do
                for v in ${AB_VARIANTS:-base off}; do
                    x=$LLMBENCH a= f=ab-$v
                    [ "$v" = base ] && x=$BASE_LLMBENCH
                    [ "$v" = alt ] && x=$ALT_LLMBENCH
                    [ "$v" = on ] && a=${AB_ARGS:-}
                    e=AB_ENV_$v
                    read -r -a ev <<<"${!e:-}"
                    [ "$r" -gt 1 ] && f=ab-$v-$r
                    case " ${folders[*]} " in *" $f "*) ;; *) folders+=("$f") ;; esac
                    dp ab.txt "${ev[@]}" LLMBENCH="$x" TRAIN_ARGS="$a" PARTS=perf PONE=0 GPUS="${AB_GPUS:-4}" STAGES="$z" \
                        STEPS="${AB_STEPS:-15}" WARMUP=3 OUT="$O/$f" DEADLINE_S="$(cap 30)"
                    cp "$O/ab/p-1g-z0.json" "$O/$f/" 2>/dev/null
                done
            done
        done
        for f in "${folders[@]}"; do
            echo "== ${f#ab-}" >>"$O/ab-table.txt"
            dp ab-table.txt PARTS=none OUT="$O/$f" GPUS="${AB_GPUS:-4}" STAGES="${AB_STAGES:-0 1 3}"
        done
        note "ab: $(grep -c "^ *p-${AB_GPUS:-4}g" "$O/ab-table.txt") rows" ;;
    esac
done
note "done after $(($(date +%s) - start)) s"
