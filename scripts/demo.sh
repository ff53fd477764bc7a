#!/usr/bin/env bash
# A new user's first command on a fresh Debian/Ubuntu machine: installs the
# packages ember needs (scripts/install_deps.sh, through sudo when not root),
# configures ./build (with CUDA when nvcc is found, see README.md), builds the
# tensor_demo example and runs it. The test command in README.md then builds
# the rest of ./build and runs the suite. EMBER_CMAKE_FLAGS adds flags to the
# configure, e.g. EMBER_CMAKE_FLAGS=-DEMBER_WITH_CUDA=OFF scripts/demo.sh
# for a CPU-only build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a flags <<<"${EMBER_CMAKE_FLAGS:-}"
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja "${flags[@]}"
cmake --build build -j2 --target example_tensor_demo
./build/examples/tensor_demo
