// Whether this ember has a kernel image for a GPU: checked at the GPU's
// first allocation, so that a build for other architectures fails with
// ember/core/cuda/architectures.h's message (the GPU, its capability, the build's
// list, the flag that fixes it) rather than at some later op with the CUDA
// runtime's "no kernel image is available". Internal to ember (CUDA builds).
//
// Contract:
// - check_kernel_image(device) probes the device once per process (a tiny
//   kernel's attributes, cudaFuncGetAttributes, with `device` current for the
//   call) and afterwards costs one atomic load. It throws ember::Error with
//   no_kernel_image_message when the probe has no image for the device;
//   other CUDA errors are reported as EMBER_CUDA_CHECK does. It calls the
//   CUDA runtime directly (not set_device or DeviceGuard), so it can be
//   called from anywhere below them.
// - no_kernel_image_message_for(device) is that message for a device by the
//   runtime's own properties; cuda_check.cpp appends it to the errors
//   cudaErrorNoKernelImageForDevice and cudaErrorInvalidDeviceFunction.
// - current_device_description() is "cuda:0 (NVIDIA T4, compute capability
//   7.5)" for the calling thread's current device, for the cuBLAS and cuDNN
//   errors of a call the GPU's architecture does not support; never throws
//   ("the current GPU" when the runtime cannot say).
#pragma once

#include <string>

namespace ember::cuda::detail {

void check_kernel_image(int device);
std::string no_kernel_image_message_for(int device);
std::string current_device_description();

}  // namespace ember::cuda::detail
