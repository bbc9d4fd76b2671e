#!/bin/sh
# loadgen_capacity.sh: how much load one core of `llmbench load` can generate, and how
# precisely it sends on schedule (the issue's "Capacity" benchmark).
#
# A synthetic server (`llmbench serve --synthetic`, zero TTFT/TPOT) runs on cores
# SERVER_CPUS with THREADS workers (default: one per core) so it is not the limit; the load
# generator is pinned to CLIENT_CPU. By default the server gets every core but core 0
# (the system's interrupts) and the client's physical core (an SMT sibling busy with the
# server would slow the client down by a varying amount). For non-streamed
# answers and for streamed answers of 16 tokens, REPEAT times, it measures
#   1. the maximum rate: Offline scenario, MAX_INFLIGHT in flight, MAX_QUERIES queries:
#      by default as many as last MAX_SECONDS (default DURATION) at the rate a short probe
#      of PROBE_QUERIES queries reached, so that the 80% of step 2 is taken of a rate
#      sustained as long as the lag run lasts (100,000 queries last about 2 s
#      non-streamed: 80% of a fast stretch can be more than a slower stretch sustains);
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
# FIXED_RATE=16000,4000 skips the maximum-rate runs and measures the lag at those rates
# (80% of the targets themselves). RESULT=DIR keeps every run's summary and kernel
# counters and the output there (the per-query detail stays behind: it is large).
set -eu
BIN=${LLMBENCH:-./build/llmbench}
HERE=$(cd "$(dirname "$0")" && pwd)
CLIENT_CPU=${CLIENT_CPU:-1}
# siblings: the logical CPUs sharing CLIENT_CPU's physical core (SMT), one per line
siblings() {
    f=/sys/devices/system/cpu/cpu$CLIENT_CPU/topology/thread_siblings_list
    [ -r "$f" ] || { echo "$CLIENT_CPU"; return; }
    tr ',' '\n' < "$f" | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'
}
# default server cores: every CPU but 0 (the system's interrupts) and the client's
# physical core, so the server never competes with the load generator for one core
if [ -z "${SERVER_CPUS:-}" ]; then
    SERVER_CPUS=$(seq 1 $(($(nproc) - 1)) | grep -v -x -F "$(siblings)" | paste -sd, -)
fi
THREADS=${THREADS:-$(echo "$SERVER_CPUS" | tr ',' '\n' | wc -l)}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
DURATION=${DURATION:-10}
MAX_SECONDS=${MAX_SECONDS:-$DURATION}
PROBE_QUERIES=${PROBE_QUERIES:-20000}
LAG_INFLIGHT=${LAG_INFLIGHT:-$MAX_INFLIGHT}
REPEAT=${REPEAT:-1}
TOKENS=16
WORK=$(mktemp -d /tmp/lb_capacity.XXXXXX)
RESULT=${RESULT:-}
# on exit: stop the server, keep the summaries in RESULT (when set), remove WORK
finish() {
    kill "$SERVER_PID" 2>/dev/null || true
    if [ -n "$RESULT" ]; then
        mkdir -p "$RESULT"
        cp "$WORK"/*.txt "$WORK"/*.before "$WORK"/*.after "$WORK/serve.err" "$RESULT/" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap finish EXIT
trap 'exit 130' INT TERM

mkfifo "$WORK/port"
taskset -c "$SERVER_CPUS" "$BIN" serve --synthetic --port 0 --threads "$THREADS" \
    --max-tokens "$TOKENS" > "$WORK/port" 2> "$WORK/serve.err" &
SERVER_PID=$!
read -r LINE < "$WORK/port"
URL=${LINE##* }
echo "server: $URL (cores $SERVER_CPUS, $THREADS threads); load generator on core $CLIENT_CPU"
echo "client core $CLIENT_CPU shares its physical core with: $(siblings | paste -sd, -)"
echo "host: $(uname -n), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "llmbench: $("$BIN" --version)"

COMMON="--endpoint $URL --synthetic 1000 --input-len fixed:16 --max-tokens $TOKENS --retries 0 --db $WORK/runs.db -q"

# netcount: kernel totals, one "name value" per line: TCP segments retransmitted and the
# TcpExt counters that say why (loss probes, timeouts, drops at the socket), softnet
# drops, and the time the hypervisor took (steal, /proc/stat ticks) from the client's
# core and from all cores
netcount() {
    awk '/^Tcp:/ { if (h) { for (i = 1; i <= NF; i++) if (k[i] == "RetransSegs") print "RetransSegs", $i; exit } for (i = 1; i <= NF; i++) k[i] = $i; h = 1 }' /proc/net/snmp
    awk '/^TcpExt:/ { if (h) { for (i = 2; i <= NF; i++) if (k[i] ~ /^(ListenOverflows|TCPLossProbes|TCPTimeouts|TCPBacklogDrop|TCPRcvQDrop|TCPZeroWindowDrop|TCPOFODrop|TCPFastRetrans|TCPSlowStartRetrans|TCPAbortOnMemory|PruneCalled|RcvPruned)$/) print k[i], $i; exit } for (i = 1; i <= NF; i++) k[i] = $i; h = 1 }' /proc/net/netstat
    d=0
    for x in $(awk '{ print $2 }' /proc/net/softnet_stat); do d=$((d + 0x$x)); done
    echo "SoftnetDrops $d"
    awk -v c="cpu$CLIENT_CPU" '$1 == c { print "StealClientCore", $9 } $1 == "cpu" { print "StealAll", $9 }' /proc/stat
}

# run NAME ARGS...: one load run pinned to the client core; keeps its summary and prints
# what the kernel counted meanwhile (the counters that moved).
run() {
    name=$1
    shift
    echo "+ taskset -c $CLIENT_CPU $BIN load $COMMON $*" >&2
    netcount > "$WORK/$name.before"
    # exit 3 is a completed run that is INVALID (e.g. too short for early stopping): measured
    rc=0
    # shellcheck disable=SC2086
    taskset -c "$CLIENT_CPU" "$BIN" load $COMMON "$@" > "$WORK/$name.txt" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "$name: llmbench load exited $rc" >&2; exit 1; }
    netcount > "$WORK/$name.after"
    echo "  ($name: kernel counted $(awk 'NR == FNR { b[$1] = $2; next } $2 != b[$1] { printf "%s%s +%d", sep, $1, $2 - b[$1]; sep = "," } END { if (!sep) printf "nothing" }' "$WORK/$name.before" "$WORK/$name.after"))"
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
        if [ -n "${FIXED_RATE:-}" ]; then # FIXED_RATE=NONSTREAMED,STREAMED: lag runs only
            target=$(echo "$FIXED_RATE" | cut -d, -f"$([ "$mode" = streamed ] && echo 2 || echo 1)")
        else
            queries=${MAX_QUERIES:-}
            if [ -z "$queries" ]; then # as many as last MAX_SECONDS at the probe's rate
                run "probe-$mode-$r" $flag --scenario offline --min-queries "$PROBE_QUERIES" \
                    --max-inflight "$MAX_INFLIGHT"
                probe=$(field "probe-$mode-$r" "Samples per second:")
                queries=$(awk -v r="$probe" -v s="$MAX_SECONDS" 'BEGIN { printf "%.0f", r * s }')
                echo "[$r] $mode: probe $probe req/s over $PROBE_QUERIES queries: $queries queries for ${MAX_SECONDS} s"
            fi
            run "max-$mode-$r" $flag --scenario offline --min-queries "$queries" --max-inflight "$MAX_INFLIGHT"
            rate=$(field "max-$mode-$r" "Samples per second:")
            failed=$(field "max-$mode-$r" "Failed queries")
            echo "[$r] $mode: max rate $rate req/s over $queries queries ($failed failed, $MAX_INFLIGHT in flight)"
            target=$(awk -v r="$rate" 'BEGIN { printf "%.0f", 0.8 * r }')
        fi
        run "lag-$mode-$r" $flag --scenario server --qps "$target" --min-duration "$DURATION" \
            --max-inflight "$LAG_INFLIGHT" --out "$WORK/lag-$mode-$r"
        echo "[$r] $mode: at $target req/s, ${DURATION} s, $LAG_INFLIGHT in flight: $(lagline "lag-$mode-$r")"
        python3 "$HERE/loadgen_lag_episodes.py" "$WORK/lag-$mode-$r" > "$WORK/episodes-$mode-$r.txt"
        head -8 "$WORK/episodes-$mode-$r.txt"
    done
    r=$((r + 1))
done
