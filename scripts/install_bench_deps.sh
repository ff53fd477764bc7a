#!/usr/bin/env bash
# Installs what the benchmark reports need beyond the build's packages
# (scripts/install_deps.sh): gnuplot-nox, which draws
# benchmarks/dp_vs_ddp's PNG plots, and with `cpu` also Debian's
# python3-torch for the PyTorch twins on a machine without GPUs (Debian's
# torch is CPU-only: on a GPU machine install a CUDA build of PyTorch
# instead, e.g. with pip). Skips what is installed (scripts/apt_install.sh).
#
#   scripts/install_bench_deps.sh [cpu]
set -euo pipefail

packages=(gnuplot-nox)
if [[ ${1:-} == cpu ]] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then packages+=(python3-torch); fi
exec "$(dirname "$0")/apt_install.sh" "${packages[@]}"
