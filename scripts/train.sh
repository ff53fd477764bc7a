#!/usr/bin/env bash
# A new user's first command on a fresh Debian/Ubuntu machine: installs the
# packages ember needs and the Fashion-MNIST data (scripts/install_deps.sh,
# through sudo when not root), configures ./build (with CUDA when nvcc is
# found), builds ember-train and trains the MLP on Fashion-MNIST on the GPU
# if one is visible, else on the CPU. Extra arguments go to ember-train
# (e.g. --model cnn --epochs 20); see `build/examples/ember-train --help`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install_deps.sh
cmake -S . -B build -G Ninja
cmake --build build -j"$(nproc)" --target example_train
./build/examples/ember-train "$@"
