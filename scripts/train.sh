#!/usr/bin/env bash
# A new user's first command on a fresh Debian/Ubuntu machine: installs the
# packages ember needs and the Fashion-MNIST data (scripts/install_deps.sh,
# through sudo when not root), configures ./build (with CUDA when nvcc is
# found), builds ember-train and trains the MLP on Fashion-MNIST on the GPU
# if one is visible, else on the CPU. Extra arguments go to ember-train
# (e.g. --model cnn --epochs 20); see `build/examples/ember-train --help`.
#
# EMBER_CMAKE_FLAGS adds flags to the configure, e.g.
#   EMBER_CMAKE_FLAGS=-DEMBER_WITH_CUDA=OFF scripts/train.sh      # CPU-only (no cuDNN or NCCL needed)
#   EMBER_CMAKE_FLAGS=-DCMAKE_CUDA_ARCHITECTURES=86 scripts/train.sh
# A fresh ./build is configured without the test suite, so GoogleTest is not
# needed; a ./build that exists keeps its options, plus these flags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a flags <<<"${EMBER_CMAKE_FLAGS:-}"
[[ -f build/CMakeCache.txt ]] || flags=(-DEMBER_BUILD_TESTS=OFF "${flags[@]}")

bash scripts/install_deps.sh
cmake -S . -B build -G Ninja "${flags[@]}"
cmake --build build -j"$(nproc)" --target example_train
./build/examples/ember-train "$@"
