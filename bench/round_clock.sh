# round_clock.sh: sourced by the one-call scripts (gpu_round.sh, dp_round.sh, dp_graph.sh)
# after they set O (their log folder, made here) and total (seconds the whole call may take):
# the clock starts here, with NVLink multicast off (KINDS.md).
#   left      seconds left of total
#   cap S     the smaller of S and what is left, at least 1 (timeout 0 never ends)
#   note ...  a line to stdout and to $O/ends.txt, where each part says how it ended
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
start=$(date +%s)
left() { echo $((total - ($(date +%s) - start))); }
cap() {
    local l
    l=$(left)
    [ "$l" -lt 1 ] && l=1
    [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
note() { echo "$*" | tee -a "$O/ends.txt"; }
