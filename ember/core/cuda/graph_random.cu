// store_shift_async: a one-thread kernel that stores one word.
#include "ember/core/cuda/graph_random.h"

#include "ember/core/cuda/cuda_check.h"

namespace ember::cuda::detail {
namespace {

// CUDA kernels

__global__ void store_shift_kernel(uint64_t* shift, uint64_t value) { *shift = value; }

}  // namespace

// kernel launchers

void store_shift_async(uint64_t* shift, uint64_t value, cudaStream_t stream) {
  store_shift_kernel<<<1, 1, 0, stream>>>(shift, value);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda::detail
