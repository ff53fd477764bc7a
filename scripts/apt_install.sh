#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages named on the command line that are
# not installed yet (a run with everything present costs a few dpkg
# queries), through sudo when not root. The one place ember's scripts and
# .ci/run install packages from.
#
#   scripts/apt_install.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "apt_install: all packages present ($*)"
  exit 0
fi

sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
echo "apt_install: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
