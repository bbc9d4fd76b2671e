#!/bin/bash
# gpu_check.sh: one call that checks a build's GPU paths on a lent machine (correctness, no
# figure that counts). PARTS (default all but signal) chooses among:
#   tests     the GPU test programs (test_gpu_kernels, test_gpu_infra, test_train_gpu,
#             test_train_memory), from $TESTS (default: the binary's folder, then
#             build/tests);
#   selftest  `selftest`;
#   run       `run --steps 20` (the default suite, a scaling run where there are 2+ GPUs);
#   comm      `comm all --gpus 2 -c 1` (2+ GPUs; 0 wrong expected);
#   serve     the engine behind `serve --random` under `load`, then Ctrl-C while a long
#             request is in flight (answered at the --drain deadline);
#   sampling  serve's per-request sampling on the GPU: two seeds at temperature 1 differ,
#             one seed twice repeats, ignore_eos gives exactly max_tokens;
#   infer     `infer --random`;
#   signal    SIGTERM to a `train --gpus 2` launcher alone, mid-run: the workers stop and
#             the run is stored interrupted (2+ GPUs).
# $LLMBENCH is the binary. Logs go to $OUT/check (default /tmp/check); the last lines say
# how each part ended. Each part runs under its own limit.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_env.sh"
X=$LLMBENCH
T=${TESTS:-$(dirname "$X")}
[ -x "$T/test_gpu_kernels" ] || T=$here/../build/tests
O=${OUT:-/tmp}/check
TOK=${TOKENIZER:-$here/../tests/fixtures/tokenizer/llama3-subset.tiktoken}
PARTS=${PARTS:-tests selftest run comm serve sampling infer}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
n_gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
summary=()
note() { summary+=("$1"); echo "== $1"; }
port=18431

serve_start() { # serve --random on $port, waits until it answers
    "$X" serve --random llama3.2-1b --tokenizer "$TOK" --port $port --drain 1 >"$O/serve.txt" 2>&1 &
    spid=$!
    for _ in $(seq 1 120); do
        curl -s "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
        sleep 1
    done
}
complete() { # JSON BODY -> the answer's text and completion_tokens, one line
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$1" |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(repr(r["choices"][0]["text"]), r["usage"]["completion_tokens"])'
}

for part in $PARTS; do
    case $part in
    tests)
        for t in test_gpu_kernels test_gpu_infra test_train_gpu test_train_memory; do
            if [ -x "$T/$t" ]; then
                (cd "$O" && timeout 240 "$T/$t" >"$O/$t.txt" 2>&1)
                note "$t exit $?: $(grep -cE '^ok|PASSED|\[ +OK' "$O/$t.txt") ok lines, $(grep -cE 'FAIL' "$O/$t.txt") FAIL lines"
            else
                note "$t: not found in $T"
            fi
        done ;;
    selftest)
        timeout 240 "$X" selftest >"$O/selftest.txt" 2>&1
        note "selftest exit $?: $(tail -n 1 "$O/selftest.txt")" ;;
    run)
        timeout 180 "$X" run --steps 20 --db "$O/run.db" >"$O/run.txt" 2>&1
        note "run --steps 20 exit $?: $(grep -E '^[0-9]+ ' "$O/run.txt" | awk '{print $2, $3, $4}' | tr '\n' ';')" ;;
    comm)
        [ "$n_gpus" -ge 2 ] || continue
        timeout 120 "$X" comm all --gpus 2 -c 1 --db "$O/comm.db" >"$O/comm.txt" 2>&1
        note "comm all --gpus 2 exit $?: $(grep -h "Out of bounds values" "$O/comm.txt" | tr -s ' ' | tr '\n' ';')" ;;
    serve)
        serve_start
        timeout 120 "$X" load --endpoint "http://127.0.0.1:$port" --synthetic 64 --qps 20 --max-tokens 64 \
            --tokenizer "$TOK" --db "$O/load.db" >"$O/load.txt" 2>&1
        note "load of 64 queries exit $?: $(grep -E 'completed|tok/s' "$O/load.txt" | head -n 3 | tr '\n' ';')"
        # requests a stop string ends at the server while the engine has steps of them left
        codes=$(for i in $(seq 1 24); do
            curl -s -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$port/v1/completions" \
                -H 'Content-Type: application/json' \
                -d "{\"prompt\":\"hello $i\",\"max_tokens\":300,\"ignore_eos\":true,\"stream\":$([ $((i % 2)) = 0 ] && echo true || echo false),\"stop\":[\"e\",\" \"]}" &
        done; wait)
        note "24 requests ended early by a stop string: status $(echo $codes | tr ' ' '\n' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
        # within the context (8192): more is refused at once, with no request in flight
        curl -s -o "$O/long.txt" "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
            -d '{"model":"m","prompt":"hello","max_tokens":8000,"ignore_eos":true}' &
        cpid=$!
        sleep 2
        t0=$(date +%s%N)
        kill -INT $spid
        wait $spid
        rc=$?
        t1=$(date +%s%N)
        wait $cpid
        note "serve Ctrl-C with a request in flight: exit $rc after $(((t1 - t0) / 1000000)) ms; the client got $(head -c 120 "$O/long.txt")" ;;
    sampling)
        serve_start
        body='{"model":"m","prompt":"The capital of France is","max_tokens":24,"temperature":1'
        a=$(complete "$body,\"seed\":11}")
        b=$(complete "$body,\"seed\":12}")
        c=$(complete "$body,\"seed\":11}")
        e=$(complete '{"model":"m","prompt":"hello","max_tokens":40,"ignore_eos":true}')
        note "sampling: seeds 11 and 12 $([ "$a" != "$b" ] && echo differ || echo AGREE); seed 11 twice $([ "$a" = "$c" ] && echo repeats || echo DIFFERS); ignore_eos gave ${e##* } of 40 tokens"
        kill -INT $spid
        wait $spid ;;
    infer)
        timeout 120 "$X" infer --random llama3.2-1b --synthetic 16 --max-tokens 32 --db "$O/infer.db" >"$O/infer.txt" 2>&1
        note "infer --random exit $?: $(grep -iE 'tokens/s|Result is' "$O/infer.txt" | head -n 2 | tr '\n' ';')" ;;
    signal)
        [ "$n_gpus" -ge 2 ] || continue
        "$X" train --gpus 2 --model gpt2-124m --precision bf16 --batch 8 --seq 1024 --steps 100000 \
            --warmup 3 --no-progress --db "$O/signal.db" >"$O/signal.txt" 2>&1 &
        lpid=$!
        sleep 25
        t0=$(date +%s%N)
        kill -TERM $lpid
        wait $lpid
        rc=$?
        t1=$(date +%s%N)
        note "SIGTERM to the train --gpus 2 launcher alone: exit $rc after $(((t1 - t0) / 1000000)) ms; stored: $("$X" results list --db "$O/signal.db" 2>&1 | tail -n +2 | awk '{print $1, $2}' | tr '\n' ';')" ;;
    esac
done

echo
printf '%s\n' "${summary[@]}"
