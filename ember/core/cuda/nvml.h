// NVML, the NVIDIA Management Library, loaded at run time with dlopen:
// libnvidia-ml.so.1 ships with the NVIDIA driver, not with the CUDA
// toolkit, so ember has no link dependency on it and runs where it is
// missing (physical_devices() then says so). Internal to ember/parallel/devices.
#pragma once

#include <vector>

#include "ember/core/cuda/devices.h"

namespace ember::cuda::detail {

// Every physical GPU as NVML sees it, in NVML's (nvidia-smi's) order. An
// ember::Error naming the library or call that failed and what to do when
// NVML cannot be loaded or queried.
std::vector<PhysicalDevice> nvml_devices();

}  // namespace ember::cuda::detail
