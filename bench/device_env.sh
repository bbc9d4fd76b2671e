# device_env.sh: sourced by the bench scripts on the GPU machine. Puts the carried
# shared libraries (.carry/gpu) first on the loader path and adds the directory of the
# NCCL library that the machine's PyTorch wheels ship (the CUDA toolkit there has none).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nccl=$(find /opt /usr/local /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$here/.carry/gpu${nccl:+:$(dirname "$nccl")}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export LLMBENCH="$here/.carry/gpu/llmbench"
