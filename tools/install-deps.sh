#!/bin/sh
# Installs the Debian/Ubuntu packages listed in deps/apt-packages.txt that are missing.
# As root it runs apt-get; otherwise it prints the one apt-get line needed and fails.
set -eu
here=$(dirname "$0")/..
missing=""
for pkg in $(grep -v '^#' "$here/deps/apt-packages.txt"); do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $pkg"
    fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "llmbench: missing packages; run as root:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
fi
echo "llmbench: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
