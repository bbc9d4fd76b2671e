#!/bin/sh
# The layer rule: every `#include "folder/..."` under src/ must name a folder that the
# including file's folder may include, as the table under "## Layers" in
# docs/ARCHITECTURE.md says (one row per folder: | `folder` | `a`, `b`, ... |; a folder
# may always include itself; `*` allows every folder). Prints each offending line and
# fails when there is one. usage: tools/check-layers.sh [ROOT] (default: this checkout)
set -eu
root=${1:-$(dirname "$0")/..}
table="$root/docs/ARCHITECTURE.md"
[ -f "$table" ] || { echo "check-layers: $table: no such file" >&2; exit 2; }
rules=$(awk '/^## Layers/ {on = 1; next} /^## / {on = 0}
    on && /^\| `[a-z_]+` \|/ {
        n = split($0, col, "|"); gsub(/[` ]/, "", col[2]); gsub(/[` ]/, "", col[3]);
        print col[2], col[3] }' "$table")
[ -n "$rules" ] || { echo "check-layers: $table has no layer table under '## Layers'" >&2; exit 2; }
bad=0
for path in $(cd "$root/src" && find . -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sed 's|^\./||' | sort); do
    folder=${path%%/*}
    allowed=$(echo "$rules" | awk -v f="$folder" '$1 == f {print $2}')
    if [ -z "$allowed" ]; then
        echo "src/$path: folder '$folder' has no row in the layer table of docs/ARCHITECTURE.md"
        bad=1
        continue
    fi
    [ "$allowed" = "*" ] && continue
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$root/src/$path" |
        while IFS= read -r line; do
            target=$(echo "$line" | sed 's|^[0-9]*:[^"]*"\([a-z_]*\)/.*|\1|')
            [ "$target" = "$folder" ] && continue
            case ",$allowed," in *",$target,"*) continue ;; esac
            echo "src/$path:${line%%:*}: '$folder' may not include '$target' (may include: $allowed)"
        done | grep . && bad=1
done
exit $bad
