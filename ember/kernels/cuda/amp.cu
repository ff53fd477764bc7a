// CUDA kernels of dynamic loss scaling (contract in ember/core/ops/amp_kernels.h).
//
// Unscale and check: one multi-tensor kernel (multi_tensor_apply.cuh), a
// block per 64K-element chunk; each thread checks (and, with an inverse
// scale, multiplies) its elements, and a thread that saw an inf or NaN
// stores 1 into the flag: every such store writes the same value, so no
// atomic is needed. Scale update: one thread runs the rule of
// ember/kernels/amp_math.h on the device's copies of the scale and counters.
// Batched cast: one multi-tensor kernel too, each element converted as the
// cast kernel of ember/kernels/cuda/copy_fill_random.cu converts it.
#include <cuda_runtime.h>

#include "ember/core/ops/amp_kernels.h"
#include "ember/kernels/amp_math.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/multi_tensor_apply.cuh"

namespace ember::cuda {
namespace {

using optim::MultiTensorArgs;

constexpr int kILP = 4;  // elements each thread keeps in flight

template <typename T, bool Unscale>
__global__ void unscale_and_check_kernel(const ParamList list, const float* inv_scale, float* found_inf) {
  using A = acc_t<T>;
  const BlockChunk bc = block_chunk(list);
  T* x = static_cast<T*>(list.ptr[0][bc.slot]) + bc.begin;
  A factor = A(1);
  if constexpr (Unscale) factor = A(*inv_scale);
  bool found = false;
  for (int64_t base = threadIdx.x; base < bc.length; base += int64_t(blockDim.x) * kILP) {
    A v[kILP];
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      v[u] = i < bc.length ? to_acc(x[i]) : A(0);
    }
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      found |= !::isfinite(v[u]);
      if constexpr (Unscale) {
        const int64_t i = base + int64_t(u) * blockDim.x;
        if (i < bc.length) x[i] = from_acc<T>(v[u] * factor);
      }
    }
  }
  if (found) *found_inf = 1.0f;
}

// A batched cast's list: a source and a destination per tensor.
constexpr int kCastTensors = 48;
using CastList = ChunkList<2, kCastTensors>;

// The source of a batched cast (its record's grad) and its destination (param).
inline void* pick_cast(const optim::FusedTensor& f, int d) { return d == 0 ? const_cast<void*>(f.grad) : f.param; }

template <typename O>
__global__ void cast_many_kernel(const CastList list) {
  const BlockChunk bc = block_chunk(list);
  const float* src = static_cast<const float*>(list.ptr[0][bc.slot]) + bc.begin;
  O* dst = static_cast<O*>(list.ptr[1][bc.slot]) + bc.begin;
  for (int64_t i = threadIdx.x; i < bc.length; i += blockDim.x) dst[i] = from_acc<O>(acc_t<O>(src[i]));
}

__global__ void update_scale_kernel(const amp::ScaleState state, const amp::ScaleRule rule) {
  amp_math::update_scale_rule(state, rule);
}

void unscale_and_check(const MultiTensorArgs& a, const float* inv_scale, float* found_inf) {
  if (a.count == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "amp::GradScaler unscale", [&]<typename T>() {
    for_each_chunk_list<1, kParamListTensors>(a.tensors, a.count, pick_param, [&](const ParamList& list, int blocks) {
      if (inv_scale != nullptr) {
        unscale_and_check_kernel<T, true>
            <<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, inv_scale, found_inf);
      } else {
        unscale_and_check_kernel<T, false>
            <<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, nullptr, found_inf);
      }
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void cast_many(const MultiTensorArgs& a) {
  if (a.count == 0) return;
  EMBER_CHECK(a.dtype == DType::Float16 || a.dtype == DType::BFloat16,
              "amp::autocast: the batched cast makes float16 or bfloat16, not " << dtype_name(a.dtype));
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  auto run = [&]<typename O>() {
    for_each_chunk_list<2, kCastTensors>(a.tensors, a.count, pick_cast, [&](const CastList& list, int blocks) {
      cast_many_kernel<O><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  };
  if (a.dtype == DType::Float16) run.template operator()<Half>();
  else run.template operator()<BFloat16>();
}

void update_scale(const amp::ScaleState& s, const amp::ScaleRule& r) {
  DeviceGuard guard(s.device);
  update_scale_kernel<<<1, 1, 0, current_stream(s.device).handle()>>>(s, r);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

EMBER_REGISTER_KERNEL(amp::unscale_and_check_stub, DeviceType::CUDA, unscale_and_check);
EMBER_REGISTER_KERNEL(amp::update_scale_stub, DeviceType::CUDA, update_scale);
EMBER_REGISTER_KERNEL(amp::cast_many_stub, DeviceType::CUDA, cast_many);

}  // namespace ember::cuda
