// A per-device pool of timing-free cudaEvent_t, so the caching allocators
// mark stream uses without cudaEventCreate in steady state. Internal to
// ember (CUDA-typed).
//
// Contract: acquire() returns an event of `device` (made under a guard for
// that device); release() takes it back once its owner no longer needs it.
// Events live as long as the process. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda::detail {

cudaEvent_t acquire_event(int device);
void release_event(int device, cudaEvent_t event);

}  // namespace ember::cuda::detail
