// The one kernel of CUDA graph replays: storing the Philox offset shift of a
// graph's captured random draws (ember/core/cuda/graph.h). Internal to ember
// (CUDA-typed).
//
// Contract: store_shift_async queues, on `stream`, the store of `value` at
// `shift` (device memory). The value travels as a kernel argument, so the
// host may reuse its variable at once and consecutive replays on a stream
// each see their own value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ember::cuda::detail {

void store_shift_async(uint64_t* shift, uint64_t value, cudaStream_t stream);

}  // namespace ember::cuda::detail
