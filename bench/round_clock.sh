# round_clock.sh: sourced by the one-call scripts (gpu_round.sh, dp_round.sh) after they set
# O (their log folder) and total (seconds the whole call may take): the clock starts here.
#   left      seconds left of total
#   cap S     the smaller of S and what is left, at least 1 (timeout 0 never ends)
#   note ...  a line to stdout and to $O/ends.txt, where each part says how it ended
start=$(date +%s)
left() { echo $((total - ($(date +%s) - start))); }
cap() {
    local l
    l=$(left)
    [ "$l" -lt 1 ] && l=1
    [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
note() { echo "$*" | tee -a "$O/ends.txt"; }
