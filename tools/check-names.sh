#!/bin/sh
# The name rule ("## Names" in docs/ARCHITECTURE.md): every symbol that llmbench_lib exports
# is lb_<module>_... or lb_<module>, where <module> is the name of the file that defines it
# (without extension) or one of the folders on that file's path under src/: a function of
# src/gpu/blas/matmul.c may be lb_matmul_*, lb_blas_* or lb_gpu_*. Everything else is static.
# One exception: core/status.c's lb_fail, the error call of nearly every function.
# Reads the library's object files in a CMake build folder with nm (C++ names demangled;
# the toolchain's own symbols, which begin with "__" or "DW.ref.", are not ours, nor are the
# CUDA toolkit's C++ libraries' (CUB, Thrust, libcu++: names in cub::, thrust:: or cuda::,
# whose inline templates nvcc emits as weak symbols in every object that uses them); objects
# whose source is gone from ROOT/src are stale and skipped), prints each offender with its
# source file, and fails when there is one.
# usage: tools/check-names.sh [BUILD [ROOT]]   (default: build, this checkout)
set -eu
build=${1:-build}
root=${2:-$(dirname "$0")/..}
objdir="$build/CMakeFiles/llmbench_lib.dir/src"
[ -d "$objdir" ] || { echo "check-names: $objdir: no such folder (build first)" >&2; exit 2; }
objs=$(cd "$objdir" && find . -name '*.o' | sed 's|^\./||' | sort)
[ -n "$objs" ] || { echo "check-names: no object files under $objdir" >&2; exit 2; }
bad=0
for obj in $objs; do
    src=${obj%.o}
    [ -f "$root/src/$src" ] || continue
    stem=$(basename "$src")
    stem=${stem%.*}
    modules="$stem $(dirname "$src" | tr '/' ' ')"
    nm -g --defined-only "$objdir/$obj" | awk 'NF >= 3 {print $3}' | c++filt | sed 's/(.*//' |
        while IFS= read -r sym; do
            case "$sym" in __* | DW.ref.* | lb_fail | *cub::* | *thrust::* | *cuda::*) continue ;; esac
            ok=0
            for m in $modules; do
                case "$sym" in "lb_$m" | "lb_${m}_"*) ok=1 && break ;; esac
            done
            [ $ok = 1 ] || echo "src/$src: $sym (may be lb_<m>_... for m in: $modules)"
        done | grep . && bad=1
done
exit $bad
