// CUDA batch-norm kernels (contract in core/ops/batch_norm_kernels.h).
//
// Forward: one block per channel keeps Welford statistics over the
// channel's n * inner values (block_welford merges them), writes save_mean
// and save_invstd and updates the running statistics in place, all on the
// device; in eval mode one thread per channel turns the running statistics
// into save_mean / save_invstd instead. A grid-stride kernel then writes
// y = x * scale + shift per element (scale, shift from the channel's
// statistics, weight and bias).
// Backward: one block per channel sums grad_output and grad_output * xhat
// (block_sum) into grad_bias / grad_weight and a scratch buffer; a
// grid-stride kernel then writes grad_input.
#include <algorithm>

#include "core/ops.h"
#include "core/ops/batch_norm_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

constexpr int kChannelThreads = 512;
constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

template <typename T, typename S>
__device__ __forceinline__ S load(const void* p, int64_t i) {
  return S(to_acc(static_cast<const T*>(p)[i]));
}

template <typename T, typename S>
__device__ __forceinline__ void store(void* p, int64_t i, S v) {
  static_cast<T*>(p)[i] = from_acc<T>(acc_t<T>(v));
}

// Element `i` of the channel's n * inner values: (b, k) -> (b, c, k).
__device__ __forceinline__ int64_t channel_offset(const BatchNormArgs& a, int64_t c, int64_t i) {
  const int64_t b = i / a.inner;
  return (b * a.c + c) * a.inner + (i - b * a.inner);
}

template <typename T, typename S>
__global__ void batch_stats_kernel(BatchNormArgs a) {
  __shared__ Welford<S> shared[32];
  const int64_t c = blockIdx.x, m = a.n * a.inner;
  Welford<S> w;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) w.push(load<T, S>(a.input, channel_offset(a, c, i)));
  w = block_welford(w, shared);
  if (threadIdx.x != 0) return;
  const S mean = w.mean, mom = S(a.momentum);
  static_cast<S*>(a.save_mean)[c] = mean;
  static_cast<S*>(a.save_invstd)[c] = S(1) / ::sqrt(w.m2 / S(m) + S(a.eps));
  if (a.running_mean) store<T, S>(a.running_mean, c, (S(1) - mom) * load<T, S>(a.running_mean, c) + mom * mean);
  if (a.running_var) {
    store<T, S>(a.running_var, c, (S(1) - mom) * load<T, S>(a.running_var, c) + mom * (w.m2 / S(m - 1)));
  }
}

template <typename T, typename S>
__global__ void running_stats_kernel(BatchNormArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.c) return;
  static_cast<S*>(a.save_mean)[c] = load<T, S>(a.running_mean, c);
  static_cast<S*>(a.save_invstd)[c] = S(1) / ::sqrt(load<T, S>(a.running_var, c) + S(a.eps));
}

template <typename T, typename S>
__global__ void normalize_kernel(BatchNormArgs a) {
  const int64_t total = a.n * a.c * a.inner;
  const S* mean = static_cast<const S*>(a.save_mean);
  const S* invstd = static_cast<const S*>(a.save_invstd);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / a.inner % a.c;
    const S scale = invstd[c] * (a.weight ? load<T, S>(a.weight, c) : S(1));
    const S shift = (a.bias ? load<T, S>(a.bias, c) : S(0)) - mean[c] * scale;
    store<T, S>(a.output, i, load<T, S>(a.input, i) * scale + shift);
  }
}

// sums[c] = sum(dy), sums[c + a.c] = sum(dy * xhat), and the parameter grads.
template <typename T, typename S>
__global__ void backward_sums_kernel(BatchNormArgs a, S* sums) {
  __shared__ S shared[32];
  const int64_t c = blockIdx.x, m = a.n * a.inner;
  const S mean = static_cast<const S*>(a.save_mean)[c], invstd = static_cast<const S*>(a.save_invstd)[c];
  S sum_dy = 0, sum_dy_xhat = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const int64_t at = channel_offset(a, c, i);
    const S dy = load<T, S>(a.grad_output, at);
    sum_dy += dy;
    sum_dy_xhat += dy * (load<T, S>(a.input, at) - mean) * invstd;
  }
  sum_dy = block_sum(sum_dy, shared);
  sum_dy_xhat = block_sum(sum_dy_xhat, shared);
  if (threadIdx.x != 0) return;
  sums[c] = sum_dy;
  sums[c + a.c] = sum_dy_xhat;
  if (a.grad_weight) store<T, S>(a.grad_weight, c, sum_dy_xhat);
  if (a.grad_bias) store<T, S>(a.grad_bias, c, sum_dy);
}

template <typename T, typename S>
__global__ void grad_input_kernel(BatchNormArgs a, const S* sums) {
  const int64_t total = a.n * a.c * a.inner;
  const S m = S(a.n * a.inner);
  const S* mean = static_cast<const S*>(a.save_mean);
  const S* invstd = static_cast<const S*>(a.save_invstd);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / a.inner % a.c;
    const S scale = invstd[c] * (a.weight ? load<T, S>(a.weight, c) : S(1));
    S dx = load<T, S>(a.grad_output, i);
    if (a.training) {
      const S xhat = (load<T, S>(a.input, i) - mean[c]) * invstd[c];
      dx = dx - sums[c] / m - xhat * sums[c + a.c] / m;
    }
    store<T, S>(a.grad_input, i, dx * scale);
  }
}

void forward(const BatchNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "batch_norm", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (a.training) {
      batch_stats_kernel<T, S><<<unsigned(a.c), kChannelThreads, 0, stream>>>(a);
    } else {
      running_stats_kernel<T, S><<<unsigned((a.c + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a);
    }
    EMBER_CUDA_CHECK_LAUNCH();
    normalize_kernel<T, S><<<blocks_for(a.n * a.c * a.inner), kThreads, 0, stream>>>(a);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void backward(const BatchNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "batch_norm_backward", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Tensor sums;
    if (a.grad_weight || a.grad_bias || (a.grad_input && a.training)) {
      sums = empty({2, a.c}, batch_norm_stats_dtype(a.dtype), cuda_device(a.device));
      backward_sums_kernel<T, S><<<unsigned(a.c), kChannelThreads, 0, stream>>>(a, static_cast<S*>(sums.data_ptr()));
      EMBER_CUDA_CHECK_LAUNCH();
    }
    if (a.grad_input) {
      const S* s = sums.defined() ? static_cast<const S*>(sums.data_ptr()) : nullptr;
      grad_input_kernel<T, S><<<blocks_for(a.n * a.c * a.inner), kThreads, 0, stream>>>(a, s);
      EMBER_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(batch_norm_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(batch_norm_backward_stub, DeviceType::CUDA, backward);

}  // namespace ember::cuda
