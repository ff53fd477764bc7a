// The kernel-image probe of ember/core/cuda/kernel_image.h.
#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "ember/core/cuda/architectures.h"
#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/kernel_image.h"
#include "ember/core/error.h"

namespace ember::cuda::detail {
namespace {

// CUDA kernels

// Compiled with every other kernel, for the same architectures: it has an
// image for a device exactly when they do.
__global__ void probe_kernel() {}

std::atomic<bool> probed[kMaxDevices];

}  // namespace

// kernel launchers

std::string no_kernel_image_message_for(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return no_kernel_image_message(device, "name unknown", 0, 0, built_architectures());
  }
  return no_kernel_image_message(device, p.name, p.major, p.minor, built_architectures());
}

std::string current_device_description() {
  int device = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "the current GPU";
  }
  return "cuda:" + std::to_string(device) + " (" + p.name + ", compute capability " + std::to_string(p.major) + "." +
         std::to_string(p.minor) + ")";
}

void check_kernel_image(int device) {
  if (probed[device].load(std::memory_order_acquire)) [[likely]]
    return;
  int previous = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (previous != device) cudaSetDevice(previous);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();
    EMBER_FAIL(no_kernel_image_message_for(device));
  }
  EMBER_CUDA_CHECK(err);
  probed[device].store(true, std::memory_order_release);
}

}  // namespace ember::cuda::detail
