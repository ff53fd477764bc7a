#!/usr/bin/env bash
# ThreadSanitizer over ember's threaded CPU kernels: configures a CPU-only
# build with -fsanitize=thread in its own directory, builds the test binary
# only, and runs the thread pool's and the threaded kernels' tests (the
# kernels run at 1, 2 and 3 threads inside them). Any report fails the run.
#
#   bash scripts/tsan.sh [BUILD_DIR] [GTEST_FILTER]
#
# BUILD_DIR defaults to build-tsan; GTEST_FILTER to the pool's and the
# threaded kernels' tests. -O0 -g1 as the sanitize stage of .ci/run: the
# checks do not depend on optimization and it compiles fastest. The first
# build takes a while (the whole library; ccache helps later runs). ember's
# own pool is what makes this meaningful: GCC's libgomp is not instrumented,
# so ThreadSanitizer would report false races inside OpenMP regions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir=${1:-build-tsan}
filter=${2:-'ParallelFor*:ParallelReduce*:SetNumThreads*:CpuThreads*'}

cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DEMBER_WITH_CUDA=OFF -DEMBER_BUILD_BENCHMARKS=OFF -DEMBER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$dir" --target ember_tests -j"$(nproc)"

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
for threads in 1 2; do
  echo "== EMBER_NUM_THREADS=$threads"
  EMBER_NUM_THREADS=$threads "$dir/tests/ember_tests" --gtest_filter="$filter" --gtest_brief=1
done
echo "ThreadSanitizer: no reports ($filter)"
