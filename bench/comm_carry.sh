#!/bin/sh
# comm_carry.sh DEST: puts what bench/comm_gpu.sh needs on a GPU machine into DEST: the
# llmbench binary (stripped), libmicrohttpd (absent there), the scripts, and Debian's Open
# MPI with its plugins, PMIx and every library they load beyond glibc, in the layout Open
# MPI expects under OPAL_PREFIX (DEST/ompi/usr), so `mpirun` runs from DEST on a machine
# without MPI. Run from the source tree after `make build`.
set -eu
dest=$1
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
mkdir -p "$dest/lib" "$dest/ompi/usr/bin" "$dest/ompi/usr/lib/x86_64-linux-gnu" "$dest/ompi/usr/share"
cp "$src/build/llmbench" "$dest/llmbench"
strip "$dest/llmbench"
cp "$src/bench/comm_gpu.sh" "$src/bench/comm_torch.py" "$dest/"
cp -L /lib/x86_64-linux-gnu/libmicrohttpd.so.12 "$dest/lib/"
multiarch=/usr/lib/x86_64-linux-gnu
cp -a $multiarch/openmpi $multiarch/pmix2 "$dest/ompi/usr/lib/x86_64-linux-gnu/"
rm -rf "$dest/ompi/usr/lib/x86_64-linux-gnu/openmpi/include" "$dest/ompi/usr/lib/x86_64-linux-gnu/pmix2/include"
find "$dest/ompi" -name '*.a' -delete
cp -a /usr/share/openmpi "$dest/ompi/usr/share/"
cp -L /usr/bin/orterun "$dest/ompi/usr/bin/mpirun"
cp -L /usr/bin/orted "$dest/ompi/usr/bin/orted"
files="/usr/bin/orterun /usr/bin/orted $multiarch/libmpi.so.40 $(find $multiarch/openmpi/lib/openmpi3 $multiarch/pmix2/lib -name '*.so*')"
for f in $files; do ldd "$f" 2>/dev/null | awk '/=>/ {print $3}'; done | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
du -sh "$dest"
