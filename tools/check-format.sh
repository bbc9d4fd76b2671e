#!/bin/sh
# Fails when a C or CUDA source differs from what `clang-format` (the .clang-format at the
# root) makes of it; prints the files. `tools/check-format.sh --fix` rewrites them instead.
set -eu
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
    echo "$files" | xargs clang-format -i
    exit 0
fi
bad=""
for f in $files; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
    echo "check-format: not formatted (run tools/check-format.sh --fix):$bad" >&2
    exit 1
fi
