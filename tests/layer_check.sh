#!/bin/sh
# test_layer_check: tools/check-layers.sh passes on this tree, and fails, naming the file,
# the line and both folders, on a copy of the tree with one upward include planted (core
# including cli), and on a folder the layer table does not list.
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/tools/check-layers.sh" "$src" || { echo "FAIL: the tree itself breaks the layer rule"; exit 1; }

mkdir -p "$tmp/tree/docs" "$tmp/tree/tools"
cp -r "$src/src" "$tmp/tree/src"
cp "$src/docs/ARCHITECTURE.md" "$tmp/tree/docs/"
printf '#include "core/status.h"\n#include "cli/args.h"\n' > "$tmp/tree/src/core/planted.c"
if "$src/tools/check-layers.sh" "$tmp/tree" > "$tmp/out" 2>&1; then
    echo "FAIL: a planted upward include passed the layer check"; exit 1
fi
grep -q "src/core/planted.c:2: 'core' may not include 'cli'" "$tmp/out" ||
    { echo "FAIL: the report does not name the planted line:"; cat "$tmp/out"; exit 1; }
[ "$(wc -l < "$tmp/out")" -eq 1 ] || { echo "FAIL: more than the planted line reported:"; cat "$tmp/out"; exit 1; }

rm "$tmp/tree/src/core/planted.c"
mkdir "$tmp/tree/src/unlisted"
printf '#include "core/status.h"\n' > "$tmp/tree/src/unlisted/x.c"
if "$src/tools/check-layers.sh" "$tmp/tree" > "$tmp/out" 2>&1; then
    echo "FAIL: a folder without a row in the layer table passed"; exit 1
fi
grep -q "src/unlisted/x.c: folder 'unlisted' has no row" "$tmp/out" ||
    { echo "FAIL: the unlisted folder is not named:"; cat "$tmp/out"; exit 1; }
echo "layer check: tree passes, planted upward include and unlisted folder fail"
