#!/bin/sh
# test_name_check: tools/check-names.sh passes on this build's library, and fails, naming
# the file and the symbol, on objects of a planted tree: a C function without its module's
# prefix and a C++ (as nvcc emits) kernel that is not static. Prefixed names, the file's or
# a folder's, static functions and lb_fail pass.
# usage: name_check.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/tools/check-names.sh" "$build" "$src" || { echo "FAIL: the library breaks the name rule"; exit 1; }

obj="$tmp/build/CMakeFiles/llmbench_lib.dir/src"
mkdir -p "$tmp/src/core" "$tmp/src/kernels" "$obj/core" "$obj/kernels"
cat > "$tmp/src/core/planted.c" <<'C'
static int helper(void) { return 1; }
int lb_planted_count(void) { return helper(); }
int lb_core_count(void) { return 2; }
int lb_planted(void) { return 3; }
int lb_fail(void) { return 4; }
int planted_count(void) { return 5; }
C
cat > "$tmp/src/kernels/planted.cu" <<'C'
void scale_kernel(float *x, int n) { x[n] = 0; }
void lb_kernels_scale(float *x, int n) { scale_kernel(x, n); }
C
cc -c -o "$obj/core/planted.c.o" "$tmp/src/core/planted.c"
c++ -x c++ -c -o "$obj/kernels/planted.cu.o" "$tmp/src/kernels/planted.cu"
if "$src/tools/check-names.sh" "$tmp/build" "$tmp" > "$tmp/out" 2>&1; then
    echo "FAIL: planted names without their module's prefix passed the name check"; exit 1
fi
grep -q "^src/core/planted.c: planted_count " "$tmp/out" ||
    { echo "FAIL: the unprefixed C function is not named:"; cat "$tmp/out"; exit 1; }
grep -q "^src/kernels/planted.cu: scale_kernel " "$tmp/out" ||
    { echo "FAIL: the non-static kernel is not named:"; cat "$tmp/out"; exit 1; }
[ "$(wc -l < "$tmp/out")" -eq 2 ] || { echo "FAIL: more than the two planted names reported:"; cat "$tmp/out"; exit 1; }
echo "name check: library passes, the two planted names fail"
