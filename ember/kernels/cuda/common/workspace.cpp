// Scratch device memory (contract in ember/kernels/cuda/common/workspace.h).
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {

Workspace::Workspace(size_t bytes, int device) : bytes_(bytes) {
  if (bytes > 0) memory_ = allocator_for(DeviceType::CUDA).allocate(bytes, cuda_device(device));
}

}  // namespace ember::cuda
