#!/bin/sh
# loadgen_capacity.sh: how much load one core of `llmbench load` can generate, and how
# precisely it sends on schedule (the issue's "Capacity" benchmark).
#
# A synthetic server (`llmbench serve --synthetic`, zero TTFT/TPOT) runs on cores
# SERVER_CPUS with THREADS workers so it is not the limit; the load generator is pinned to
# CLIENT_CPU. For non-streamed answers and for streamed answers of 16 tokens it measures
#   1. the maximum rate: Offline scenario, QUERIES queries, MAX_INFLIGHT in flight;
#   2. the send lag at 80% of that rate: Server scenario (Poisson arrivals) for DURATION s,
#      p50/p99/max of (actual send - scheduled send), where the actual send is the moment
#      libcurl starts writing the request (hand-over to libcurl + its pretransfer time);
#      once cold (connections opened on demand, MAX_INFLIGHT in flight at most) and once
#      warm (WARMUP unrecorded queries open the connections first, LAG_INFLIGHT at most).
#      The hand-over lag (hand-over - scheduled) is the scheduler's own share.
# Targets: >= 20,000 non-streamed req/s, >= 5,000 streamed req/s, p99 lag < 1 ms at 80%.
# Prints one line per measurement and the commands; nothing else is needed than the
# llmbench binary (LLMBENCH) and taskset.
set -eu
BIN=${LLMBENCH:-./build/llmbench}
SERVER_CPUS=${SERVER_CPUS:-2-15}
CLIENT_CPU=${CLIENT_CPU:-0}
THREADS=${THREADS:-14}
QUERIES=${QUERIES:-100000}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
DURATION=${DURATION:-10}
LAG_INFLIGHT=${LAG_INFLIGHT:-256}
WARMUP=${WARMUP:-20000}
TOKENS=16
WORK=$(mktemp -d /tmp/lb_capacity.XXXXXX)
trap 'kill "$SERVER_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT INT TERM

mkfifo "$WORK/port"
taskset -c "$SERVER_CPUS" "$BIN" serve --synthetic --port 0 --threads "$THREADS" \
    --max-tokens "$TOKENS" > "$WORK/port" 2> "$WORK/serve.err" &
SERVER_PID=$!
read -r LINE < "$WORK/port"
URL=${LINE##* }
echo "server: $URL (cores $SERVER_CPUS, $THREADS threads); load generator on core $CLIENT_CPU"
echo "host: $(uname -n), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "llmbench: $("$BIN" --version)"

COMMON="--endpoint $URL --synthetic 1000 --input-len fixed:16 --max-tokens $TOKENS --retries 0 --db $WORK/runs.db -q"

# run NAME ARGS...: one load run pinned to the client core; keeps its summary.
run() {
    name=$1
    shift
    echo "+ taskset -c $CLIENT_CPU $BIN load $COMMON $*" >&2
    # shellcheck disable=SC2086
    taskset -c "$CLIENT_CPU" "$BIN" load $COMMON "$@" > "$WORK/$name.txt"
}
field() { # field NAME KEY: the value after "KEY" in the run's summary
    grep -m1 "^$2" "$WORK/$1.txt" | sed 's/.*: *//'
}

lagline() { # lagline NAME: the send and hand-over lag and latency of a run, one line
    echo "send lag p50/p99/max (ns) = $(field "$1" "Send lag");" \
         "hand-over lag = $(field "$1" "Hand-over lag");" \
         "latency p99 $(field "$1" "99.00 percentile latency"), max $(field "$1" "Max latency (ns)") ns;" \
         "completed $(field "$1" "Samples per second") req/s, $(field "$1" "Failed queries") failed"
}

for mode in non-streamed streamed; do
    flag=""
    [ "$mode" = non-streamed ] && flag="--no-stream"
    run "max-$mode" $flag --scenario offline --min-queries "$QUERIES" --max-inflight "$MAX_INFLIGHT"
    rate=$(field "max-$mode" "Samples per second:")
    failed=$(field "max-$mode" "Failed queries")
    echo "$mode: max rate $rate req/s over $QUERIES queries ($failed failed, $MAX_INFLIGHT in flight)"
    target=$(awk -v r="$rate" 'BEGIN { printf "%.0f", 0.8 * r }')
    # Cold: connections opened as the schedule needs them, at most MAX_INFLIGHT in flight.
    run "cold-$mode" $flag --scenario server --qps "$target" --min-duration "$DURATION" \
        --max-inflight "$MAX_INFLIGHT"
    echo "$mode: at 80% = $target req/s, ${DURATION} s, cold, $MAX_INFLIGHT in flight: $(lagline "cold-$mode")"
    # Warm: WARMUP unrecorded queries open the connections first; LAG_INFLIGHT in flight.
    run "warm-$mode" $flag --scenario server --qps "$target" --min-duration "$DURATION" \
        --max-inflight "$LAG_INFLIGHT" --warmup "$WARMUP"
    echo "$mode: at 80% = $target req/s, ${DURATION} s, warm, $LAG_INFLIGHT in flight: $(lagline "warm-$mode")"
done
