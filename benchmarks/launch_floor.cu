// The empty kernel of benchmarks/launch_floor.h and its launch.
#include "benchmarks/launch_floor.h"

#include <cuda_runtime.h>

#include "ember/core/cuda/cuda_check.h"

namespace ember::bench {
namespace {

__global__ void empty_kernel() {}

}  // namespace

void launch_empty_kernel(void* stream) {
  empty_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::bench
