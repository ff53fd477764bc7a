// busy_wait: a one-thread kernel that spins on the GPU's global timer.
#include "ember/core/cuda/busy_wait.h"

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"

namespace ember::cuda {
namespace {

// CUDA kernels

__device__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy_wait_kernel(uint64_t nanoseconds) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) {
  }
}

}  // namespace

// kernel launchers

void busy_wait(Stream stream, int64_t nanoseconds) {
  if (nanoseconds <= 0) return;
  DeviceGuard guard(stream.device());
  busy_wait_kernel<<<1, 1, 0, stream.handle()>>>(uint64_t(nanoseconds));
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
