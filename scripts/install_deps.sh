#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages ember builds against, skipping the
# ones already installed (scripts/apt_install.sh). The CUDA toolkit, cuDNN
# and NCCL are not installed here: the build finds them under
# /usr/local/cuda if present and builds CPU-only otherwise.
# dataset-fashion-mnist (30 MB) is the data of ember-train and of its
# tests, and fortunes (2.6 MB of text) ember-gpt's default corpus; the tests
# of each skip without it.
set -euo pipefail

exec "$(dirname "$0")/apt_install.sh" cmake ninja-build g++ libeigen3-dev zlib1g-dev libgtest-dev ccache \
  libgloo-dev dataset-fashion-mnist fortunes
