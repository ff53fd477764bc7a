#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages ember builds against, skipping the
# ones already installed (so a second run costs a few dpkg queries). Runs
# apt-get through sudo when not root. The CUDA toolkit, cuDNN and NCCL are
# not installed here: the build finds them under /usr/local/cuda if present
# and builds CPU-only otherwise. dataset-fashion-mnist (30 MB) is the data
# of ember-train and of its tests, which skip without it.
set -euo pipefail

packages=(cmake ninja-build g++ libeigen3-dev zlib1g-dev libgtest-dev ccache libgloo-dev dataset-fashion-mnist)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all packages present (${packages[*]})"
  exit 0
fi

sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
