#!/usr/bin/env bash
# Compiles every CUDA source of ember (ember/core/cuda/*.cu and ember/kernels/cuda/*.cu)
# for a list of GPU architectures, so that a kernel using an instruction an
# older GPU lacks (bf16 arithmetic, atomics on 16-bit types, cp.async, ...)
# fails here rather than on a user's machine. CI's main build compiles for
# sm_90 only (CUDA compile time grows with every architecture); run this
# nightly or before a release, on a machine with nvcc (no GPU needed).
#
#   scripts/check_cuda_archs.sh            # ember's default list: 75 80 86 89 90
#   scripts/check_cuda_archs.sh 75 80      # just these
#
# Environment: EMBER_ARCH_BUILD_DIR (default build-archs), JOBS (default
# nproc). Only the .cu objects are built (no link, no tests); ccache, when
# installed, makes a rerun quick. Exits non-zero when any object fails, after
# trying all of them (ninja -k 0), and prints which ones failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

archs=("$@")
[[ ${#archs[@]} -eq 0 ]] && archs=(75 80 86 89 90)
list=""
for a in "${archs[@]}"; do
  [[ $a =~ ^[0-9]+a?$ ]] || { echo "check_cuda_archs.sh: '$a' is not an architecture number such as 80" >&2; exit 2; }
  list+="${list:+;}$a-real"
done
dir=${EMBER_ARCH_BUILD_DIR:-build-archs}
mkdir -p "$dir"

cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$list" \
  -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCHMARKS=OFF -DEMBER_BUILD_EXAMPLES=OFF >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log" >&2; exit 1; }
mapfile -t objects < <(ninja -C "$dir" -t targets all | grep -oE '^[^:]+\.cu\.o(bj)?' | sort -u)
[[ ${#objects[@]} -gt 0 ]] || { echo "check_cuda_archs.sh: no .cu objects in $dir" >&2; exit 1; }
echo "check_cuda_archs.sh: ${#objects[@]} CUDA objects for ${list}"
if ninja -C "$dir" -k 0 -j"${JOBS:-$(nproc)}" "${objects[@]}" >"$dir/archs.log" 2>&1; then
  echo "check_cuda_archs.sh: every CUDA object compiles for ${list}"
else
  grep -E '^FAILED:|error' "$dir/archs.log" >&2 || tail -50 "$dir/archs.log" >&2
  echo "check_cuda_archs.sh: some CUDA objects do not compile for ${list} (log: $dir/archs.log)" >&2
  exit 1
fi
