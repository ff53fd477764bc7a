// CUDA kernels of the multi-tensor norm partials and scale used by
// clip_grad_norm_ (contract in ember/core/ops/optimizer_kernels.h).
//
// Norm: a block reduces one chunk (sum of |x|^p, or max |x|) with the block
// reductions of block_reduce.cuh and writes it to its own slot of
// `partials`, so the result is deterministic; the front-end reduces the
// partials. Scale: x *= *scale, the factor read on the device.
#include <cuda_runtime.h>

#include <cmath>

#include "ember/core/ops/optimizer_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/multi_tensor_apply.cuh"
#include "ember/kernels/optim_math.h"

namespace ember::cuda {
namespace {

using optim::MultiTensorArgs;

constexpr int kILP = 4;  // loads each thread keeps in flight

template <typename T, bool Inf>
__global__ void norm_partials_kernel(const ParamList list, acc_t<T> p, acc_t<T>* partials) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const BlockChunk bc = block_chunk(list);
  const T* x = static_cast<const T*>(list.ptr[0][bc.slot]) + bc.begin;
  A acc[kILP] = {};
  for (int64_t base = threadIdx.x; base < bc.length; base += int64_t(blockDim.x) * kILP) {
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i >= bc.length) continue;
      const A v = to_acc(x[i]);
      if constexpr (Inf) acc[u] = optim_math::maximum(acc[u], v < A(0) ? -v : v);
      else acc[u] += optim_math::abs_pow(v, p);
    }
  }
  A total = acc[0];
#pragma unroll
  for (int u = 1; u < kILP; ++u) total = Inf ? optim_math::maximum(total, acc[u]) : total + acc[u];
  if constexpr (Inf) total = block_max(total, shared, A(0));
  else total = block_sum(total, shared);
  if (threadIdx.x == 0) partials[list.first_chunk[bc.slot] + list.block_chunk[blockIdx.x]] = total;
}

template <typename T>
__global__ void scale_kernel(const ParamList list, const acc_t<T>* scale) {
  const BlockChunk bc = block_chunk(list);
  T* x = static_cast<T*>(list.ptr[0][bc.slot]) + bc.begin;
  const acc_t<T> s = *scale;
  for (int64_t base = threadIdx.x; base < bc.length; base += int64_t(blockDim.x) * kILP) {
    acc_t<T> v[kILP] = {};
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i < bc.length) v[u] = to_acc(x[i]);
    }
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i < bc.length) x[i] = from_acc<T>(v[u] * s);
    }
  }
}

void norm_partials(const MultiTensorArgs& a, double norm_type, void* partials) {
  if (a.count == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "clip_grad_norm_", [&]<typename T>() {
    using A = acc_t<T>;
    A* out = static_cast<A*>(partials);
    const bool inf = std::isinf(norm_type);
    for_each_chunk_list<1, kParamListTensors>(a.tensors, a.count, pick_param, [&](const ParamList& list, int blocks) {
      if (inf) norm_partials_kernel<T, true><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, A(0), out);
      else
        norm_partials_kernel<T, false><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, A(norm_type), out);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void scale(const MultiTensorArgs& a, const void* factor) {
  if (a.count == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "clip_grad_norm_", [&]<typename T>() {
    const auto* s = static_cast<const acc_t<T>*>(factor);
    for_each_chunk_list<1, kParamListTensors>(a.tensors, a.count, pick_param, [&](const ParamList& list, int blocks) {
      scale_kernel<T><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, s);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(optim::norm_partials_stub, DeviceType::CUDA, norm_partials);
EMBER_REGISTER_KERNEL(optim::scale_stub, DeviceType::CUDA, scale);

}  // namespace ember::cuda
