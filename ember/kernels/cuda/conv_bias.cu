// CUDA kernels of conv2d's bias (see ember/kernels/cuda/conv_bias.h): a
// grid-stride add over the output, and one block per output channel that
// sums its n * out_h * out_w gradients (block_sum) in acc_t; NCHW or
// channels-last as the args say.
#include <algorithm>

#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/conv_bias.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChannelThreads = 512;

template <typename T>
__global__ void bias_add_kernel(ConvArgs a) {
  const int64_t plane = a.out_h * a.out_w, total = a.n * a.c_out * plane;
  T* y = static_cast<T*>(a.output);
  const T* b = static_cast<const T*>(a.bias);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t channel = a.channels_last ? i % a.c_out : i / plane % a.c_out;
    y[i] = from_acc<T>(to_acc(y[i]) + to_acc(b[channel]));
  }
}

template <typename T>
__global__ void bias_grad_kernel(ConvArgs a) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t c = blockIdx.x, plane = a.out_h * a.out_w, m = a.n * plane;
  const T* gy = static_cast<const T*>(a.grad_output);
  A total = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const int64_t b = i / plane;
    total += to_acc(gy[a.channels_last ? i * a.c_out + c : (b * a.c_out + c) * plane + (i - b * plane)]);
  }
  total = block_sum(total, shared);
  if (threadIdx.x == 0) static_cast<T*>(a.grad_bias)[c] = from_acc<T>(total);
}

}  // namespace

void conv_bias_add(const ConvArgs& a) {
  DeviceGuard guard(a.device);
  const int64_t total = a.n * a.c_out * a.out_h * a.out_w;
  const unsigned blocks = unsigned(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20));
  EMBER_DISPATCH_FLOAT(a.dtype, "conv2d", [&]<typename T>() {
    bias_add_kernel<T><<<blocks, kThreads, 0, current_stream(a.device).handle()>>>(a);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void conv_bias_grad(const ConvArgs& a) {
  DeviceGuard guard(a.device);
  EMBER_DISPATCH_FLOAT(a.dtype, "conv2d_backward", [&]<typename T>() {
    bias_grad_kernel<T><<<unsigned(a.c_out), kChannelThreads, 0, current_stream(a.device).handle()>>>(a);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ember::cuda
