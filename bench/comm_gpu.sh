#!/bin/bash
# comm_gpu.sh: issue 29's GPU checks and benchmark, on a machine with 2 GPUs, from the
# folder bench/comm_carry.sh filled: `llmbench comm all_reduce` bf16 at 256 MB and 1 GB and
# 8 B - 64 KB beside torch.distributed (comm_torch.py), twice, alternating; every collective
# with #wrong 0 over --gpus 2 (with the pair matrix) and over mpirun -np 2; doctor on the
# healthy node and on one made to fail; a rank killed mid-collective. Output on stdout; the
# stored runs in $OUT/comm.db.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl=$(find / -name 'libnccl.so.2' -path '*nvidia/nccl*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$here/lib${nccl:+:$(dirname "$nccl")}:${LD_LIBRARY_PATH:-}"
export OPAL_PREFIX=$here/ompi/usr PMIX_INSTALL_PREFIX=$here/ompi/usr/lib/x86_64-linux-gnu/pmix2
export PATH=$here/ompi/usr/bin:$PATH PMIX_MCA_pcompress_base_silence_warning=1
L=$here/llmbench
out=${OUT:-/tmp}
db=$out/comm.db
t="timeout -k 5"
section() { echo; echo "=== $* ($(date -u +%FT%TZ))"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

section machine
nvidia-smi -L
nvidia-smi topo -m
$L --version
echo "libnccl: $nccl"

for round in 1 2; do
    section "benchmark round $round: 256 MB and 1 GB"
    $t 60 $L comm all_reduce --gpus 2 -d bf16 -b 256M -e 1G -f 4 -n 20 -w 5 --db "$db"
    $t 60 python3 -m torch.distributed.run --nproc_per_node 2 "$here/comm_torch.py" \
        --sizes 268435456,1073741824 --iters 20 --warmup 5 2>&1 | grep '^{'
    section "benchmark round $round: 8 B - 64 KB"
    $t 60 $L comm all_reduce --gpus 2 -d bf16 -b 8 -e 64K -f 2 -n 200 -w 50 --db "$db"
    $t 60 python3 -m torch.distributed.run --nproc_per_node 2 "$here/comm_torch.py" \
        --sizes 8,16,32,64,128,256,512,1024,2048,4096,8192,16384,32768,65536 --iters 200 \
        --warmup 50 2>&1 | grep '^{'
done

section "every collective, --gpus 2, with the pair matrix"
$t 120 $L comm all --gpus 2 -b 8 -e 128M -f 8 -n 5 -w 2 --matrix 256M --db "$db"; echo "exit $?"
$t 60 $L comm all_reduce reduce_scatter all_gather reduce --gpus 2 -d bf16 -o avg -b 2 -e 64M -f 32 -n 3 -w 1 --db "$db"; echo "exit $?"

section "every collective, mpirun -np 2"
$t 120 mpirun --allow-run-as-root -np 2 --mca btl self,vader -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    $L comm all -b 8 -e 64M -f 8 -n 5 -w 2 --db "$db" 2>&1 | grep -v 'pcompress\|^ *dlopen\|^---\|^$\|Sorry\|help file\|unavailable'; echo "exit ${PIPESTATUS[0]}"

section "doctor, healthy node"
start=$(date +%s%N)
$t 60 $L doctor; echo "exit $? after $(ms_since "$start") ms"

section "doctor, NCCL_SOCKET_IFNAME=nosuchif NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"
start=$(date +%s%N)
NCCL_SOCKET_IFNAME=nosuchif NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 $t 150 $L doctor; echo "exit $? after $(ms_since "$start") ms"

section "rank 1 killed mid-collective (--comm-timeout 5)"
start=$(date +%s%N)
$t 60 $L comm all_reduce --gpus 2 -b 1G -e 1G -n 100000 -w 1 -c 0 --comm-timeout 5 --db "$db" &
launcher=$!
sleep 8
for p in /proc/[0-9]*; do
    if [ "$(readlink "$p/exe")" = "$L" ] && tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then
        echo "killing rank 1 (pid ${p#/proc/}) at $(ms_since "$start") ms"
        kill -9 "${p#/proc/}"
    fi
done
wait $launcher; echo "exit $? after $(ms_since "$start") ms"
