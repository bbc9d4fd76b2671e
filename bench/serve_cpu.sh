#!/bin/sh
# serve_cpu.sh: server CPU per request of `llmbench serve --synthetic`, for one or more
# builds side by side (alternating, REPEAT rounds), under the same closed-loop load.
#
#   BINS="./build-a/llmbench ./build-b/llmbench" [N=20000] [REPEAT=3] [SERVER_CPU=1]
#   [CLIENT_CPU=0] [STREAM=0] sh bench/serve_cpu.sh
#
# The load generator of the first build sends N whole (or, STREAM=1, streamed) requests of
# 32 words and 16 tokens at concurrency 64 over kept-alive connections; the server's CPU
# time (utime + stime from /proc/PID/stat) is read before and after. Each row checks that
# all N requests completed before it reports.
set -eu
: "${BINS:?set BINS to the llmbench binaries to compare}"
N=${N:-20000}
REPEAT=${REPEAT:-3}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
STREAM=${STREAM:-0}
PORT=${PORT:-18391}
TICK=$(getconf CLK_TCK)
LOAD=$(echo "$BINS" | cut -d' ' -f1)
NO_STREAM=--no-stream
[ "$STREAM" = 1 ] && NO_STREAM=
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "| round | binary | server CPU us/request | wall s |"
echo "| --- | --- | --- | --- |"
r=1
while [ "$r" -le "$REPEAT" ]; do
    for bin in $BINS; do
        taskset -c "$SERVER_CPU" "$bin" serve --synthetic --port "$PORT" --threads 1 \
            >"$TMP/out" 2>"$TMP/err" &
        pid=$!
        i=0
        until grep -q "listening" "$TMP/out" 2>/dev/null || [ $i -ge 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        s0=$(date +%s.%N)
        taskset -c "$CLIENT_CPU" "$LOAD" load --endpoint "http://127.0.0.1:$PORT" \
            --synthetic "$N" --input-len fixed:32 --max-tokens 16 --concurrency 64 \
            $NO_STREAM >/dev/null 2>&1 || true
        s1=$(date +%s.%N)
        t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill -INT "$pid"
        wait "$pid" || true
        if ! grep -q "$N completed" "$TMP/err"; then
            echo "$bin: not all $N requests completed: $(tail -1 "$TMP/err")" >&2
            exit 1
        fi
        awk -v r="$r" -v b="$bin" -v t="$((t1 - t0))" -v tick="$TICK" -v n="$N" \
            -v s0="$s0" -v s1="$s1" \
            'BEGIN { printf "| %d | %s | %.1f | %.2f |\n", r, b, t / tick * 1e6 / n, s1 - s0 }'
    done
    r=$((r + 1))
done
