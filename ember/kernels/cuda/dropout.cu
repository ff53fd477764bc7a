// CUDA dropout kernel (contract in ember/core/ops/dropout_kernels.h): one thread
// per element, the Philox block of the element's index decides.
#include "ember/core/ops/dropout_kernels.h"
#include "ember/core/philox.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

template <typename T>
__global__ void dropout_cuda_kernel(DropoutArgs a) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n) return;
  const T* in = static_cast<const T*>(a.in);
  const uint64_t offset = a.state.offset + (a.offset_shift != nullptr ? *a.offset_shift : 0);
  bool keep = philox::uniform(philox::generate(a.state.seed, offset + uint64_t(i)).x) >= float(a.p);
  static_cast<T*>(a.out)[i] =
      keep ? from_acc<T>(acc_t<T>(to_acc(in[i]) * acc_t<T>(a.scale))) : from_acc<T>(acc_t<T>(0));
}

void dropout_kernel(const DropoutArgs& a) {
  DeviceGuard guard(a.device);
  EMBER_DISPATCH_FLOAT(a.dtype, "dropout", [&]<typename T>() {
    dropout_cuda_kernel<T><<<unsigned((a.n + 255) / 256), 256, 0, current_stream(a.device).handle()>>>(a);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_stub, DeviceType::CUDA, dropout_kernel);

}  // namespace ember::cuda
