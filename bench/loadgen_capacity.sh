#!/bin/sh
# loadgen_capacity.sh: how much load one core of `llmbench load` can generate, and how
# precisely it sends on schedule (the issue's "Capacity" benchmark).
#
# A synthetic server (`llmbench serve --synthetic`, zero TTFT/TPOT) runs on cores
# SERVER_CPUS with THREADS workers so it is not the limit; the load generator is pinned to
# CLIENT_CPU (core 0 is left to the system's interrupts by default). For non-streamed
# answers and for streamed answers of 16 tokens, REPEAT times, it measures
#   1. the maximum rate: Offline scenario, QUERIES queries, MAX_INFLIGHT in flight;
#   2. the send lag at 80% of that rate: Server scenario (Poisson arrivals) for DURATION s
#      with LAG_INFLIGHT (default MAX_INFLIGHT) in flight at most and as many connections
#      opened before t0 (the load generator's default). The same connection count as in 1
#      matters: the synthetic server's cost per request grows with its open connections
#      (libmicrohttpd polls them all), so at 1024 it no longer keeps up with 80% of the
#      rate it reached with 256 and the queries pile up in flight (measured: latency
#      ~27 ms = 1024 / 38,000 per s, p99 send lag 16-71 ms); p50/p99/max of (actual send - scheduled send), where the
#      actual send is the moment libcurl starts writing the request (hand-over to libcurl
#      + its pretransfer time). The hand-over lag (hand-over - scheduled) is the
#      scheduler's own share. Each lag run's per-query detail goes through
#      loadgen_lag_episodes.py (when the late sends happened, and why).
# Around every run it reads the kernel's TCP retransmissions, listen-queue overflows and
# softnet drops, so a lost packet (a 200 ms retransmission timeout) shows as such.
# Targets: >= 20,000 non-streamed req/s, >= 5,000 streamed req/s, p99 lag < 1 ms at 80%.
set -eu
BIN=${LLMBENCH:-./build/llmbench}
HERE=$(cd "$(dirname "$0")" && pwd)
SERVER_CPUS=${SERVER_CPUS:-2-15}
CLIENT_CPU=${CLIENT_CPU:-1}
THREADS=${THREADS:-14}
QUERIES=${QUERIES:-100000}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
DURATION=${DURATION:-10}
LAG_INFLIGHT=${LAG_INFLIGHT:-$MAX_INFLIGHT}
REPEAT=${REPEAT:-1}
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

# netcount: TCP segments retransmitted, listen overflows, softnet drops (kernel totals)
netcount() {
    retrans=$(awk '/^Tcp:/ { if (h) { for (i = 1; i <= NF; i++) if (k[i] == "RetransSegs") print $i; exit } for (i = 1; i <= NF; i++) k[i] = $i; h = 1 }' /proc/net/snmp)
    overflow=$(awk '/^TcpExt:/ { if (h) { for (i = 1; i <= NF; i++) if (k[i] == "ListenOverflows") print $i; exit } for (i = 1; i <= NF; i++) k[i] = $i; h = 1 }' /proc/net/netstat)
    drops=0
    for d in $(awk '{ print $2 }' /proc/net/softnet_stat); do drops=$((drops + 0x$d)); done
    echo "$retrans $overflow $drops"
}

# run NAME ARGS...: one load run pinned to the client core; keeps its summary and prints
# what the kernel counted meanwhile.
run() {
    name=$1
    shift
    echo "+ taskset -c $CLIENT_CPU $BIN load $COMMON $*" >&2
    before=$(netcount)
    # shellcheck disable=SC2086
    taskset -c "$CLIENT_CPU" "$BIN" load $COMMON "$@" > "$WORK/$name.txt"
    after=$(netcount)
    set -- $before $after
    echo "  ($name: kernel counted $(($4 - $1)) TCP retransmissions, $(($5 - $2)) listen overflows, $(($6 - $3)) softnet drops)"
}
field() { # field NAME KEY: the value after "KEY" in the run's summary
    grep -m1 "^$2" "$WORK/$1.txt" | sed 's/.*: *//'
}

lagline() { # lagline NAME: the send and hand-over lag and latency of a run, one line
    echo "send lag p50/p99/max (ns) = $(field "$1" "Send lag");" \
         "hand-over lag = $(field "$1" "Hand-over lag");" \
         "latency p99 $(field "$1" "99.00 percentile latency"), max $(field "$1" "Max latency (ns)") ns;" \
         "completed $(field "$1" "Samples per second") req/s, $(field "$1" "Failed queries") failed;" \
         "connections before / by queries $(field "$1" "Connections opened")"
}

r=1
while [ "$r" -le "$REPEAT" ]; do
    for mode in non-streamed streamed; do
        flag=""
        [ "$mode" = non-streamed ] && flag="--no-stream"
        run "max-$mode-$r" $flag --scenario offline --min-queries "$QUERIES" --max-inflight "$MAX_INFLIGHT"
        rate=$(field "max-$mode-$r" "Samples per second:")
        failed=$(field "max-$mode-$r" "Failed queries")
        echo "[$r] $mode: max rate $rate req/s over $QUERIES queries ($failed failed, $MAX_INFLIGHT in flight)"
        target=$(awk -v r="$rate" 'BEGIN { printf "%.0f", 0.8 * r }')
        run "lag-$mode-$r" $flag --scenario server --qps "$target" --min-duration "$DURATION" \
            --max-inflight "$LAG_INFLIGHT" --out "$WORK/lag-$mode-$r"
        echo "[$r] $mode: at 80% = $target req/s, ${DURATION} s, $LAG_INFLIGHT in flight: $(lagline "lag-$mode-$r")"
        python3 "$HERE/loadgen_lag_episodes.py" "$WORK/lag-$mode-$r" | head -8
    done
    r=$((r + 1))
done
