// CUDA softmax_stub kernel (contract in core/ops/softmax_kernels.h): guards
// the device and sends each kind to the forward or backward launchers of
// kernels/cuda/softmax_forward.cu and softmax_backward.cu (which kernel
// takes which shape: kernels/cuda/softmax_common.cuh).
#include "core/cuda/device.h"
#include "core/ops/softmax_kernels.h"
#include "kernels/cuda/softmax_common.cuh"

namespace ember::cuda {
namespace {

void softmax_cuda(SoftmaxKind kind, const SoftmaxArgs& a) {
  if (a.outer == 0 || a.dim == 0 || a.inner == 0) return;
  DeviceGuard guard(a.device);
  switch (kind) {
    case SoftmaxKind::Softmax: return softmax_forward_cuda(a, false);
    case SoftmaxKind::LogSoftmax: return softmax_forward_cuda(a, true);
    case SoftmaxKind::SoftmaxBackward: return softmax_backward_cuda(a, false);
    case SoftmaxKind::LogSoftmaxBackward: return softmax_backward_cuda(a, true);
  }
  EMBER_FAIL("softmax: unknown kernel kind " << int(kind));
}

}  // namespace

EMBER_REGISTER_KERNEL(softmax_stub, DeviceType::CUDA, softmax_cuda);

}  // namespace ember::cuda
