#!/usr/bin/env bash
# Installs what the benchmark reports need beyond the build's packages
# (scripts/install_deps.sh): gnuplot-nox, which draws
# benchmarks/dp_vs_ddp's PNG plots, and with `cpu` also Debian's
# python3-torch for the PyTorch twins on a machine without GPUs (Debian's
# torch is CPU-only: on a GPU machine install a CUDA build of PyTorch
# instead, e.g. with pip). Skips what is installed; runs apt-get through
# sudo when not root.
#
#   scripts/install_bench_deps.sh [cpu]
set -euo pipefail

packages=(gnuplot-nox)
if [[ ${1:-} == cpu ]] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then packages+=(python3-torch); fi
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_bench_deps: all packages present (${packages[*]})"
  exit 0
fi

sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
echo "install_bench_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
