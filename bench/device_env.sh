# device_env.sh: sourced by the bench scripts on the GPU machine.
# Finds the llmbench binary and the PyTorch baseline either beside this script (the way
# they travel to a lent GPU machine: binary, scripts and the shared libraries that machine
# lacks in one folder) or in the source tree (build/llmbench, tools/). Adds that folder and
# the NCCL and cuDNN libraries of the machine's PyTorch wheels to the loader path.
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -x "$bench_dir/llmbench" ]; then
    LLMBENCH=${LLMBENCH:-$bench_dir/llmbench}
    BASELINE=${BASELINE:-$bench_dir/pytorch_gpt2_baseline.py}
else
    LLMBENCH=${LLMBENCH:-$bench_dir/../build/llmbench}
    BASELINE=${BASELINE:-$bench_dir/../tools/pytorch_gpt2_baseline.py}
fi
nccl=$(find /opt /usr/local /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
cudnn=$(find /opt /usr/local /usr/lib -name 'libcudnn.so.9' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$bench_dir${nccl:+:$(dirname "$nccl")}${cudnn:+:$(dirname "$cudnn")}:${LD_LIBRARY_PATH:-}"
export LLMBENCH BASELINE
