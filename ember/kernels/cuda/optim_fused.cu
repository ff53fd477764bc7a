// CUDA kernels of the fused optimizer steps (contract in
// ember/core/ops/optimizer_kernels.h; formulas in ember/kernels/optim_math.h).
//
// A step is one multi-tensor launch per ChunkList (ember/kernels/cuda/
// multi_tensor_apply.cuh: 28-36 tensors and 256 chunks of 8K elements each;
// a float32 step writes autocast's low-precision copies in the same pass)
// that reads every step counter it needs, then one launch per 448 tensors
// that advances the counters unless found_inf is set. Counters are never
// written by the update launches, so blocks sharing a tensor cannot race.
#include <cuda_runtime.h>

#include "ember/core/ops/optimizer_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/multi_tensor_apply.cuh"
#include "ember/kernels/optim_math.h"

namespace ember::cuda {
namespace {

using optim::AdamHyper;
using optim::FusedStepArgs;
using optim::FusedTensor;
using optim::SGDHyper;

constexpr int kSGDTensors = 36;   // param, grad, momentum buffer, low copy
constexpr int kAdamTensors = 28;  // param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, low copy
using SGDList = ChunkList<4, kSGDTensors>;
using AdamList = ChunkList<6, kAdamTensors>;

__device__ __forceinline__ bool skip_step(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

template <typename A>
__device__ __forceinline__ A grad_factor(const float* inv_scale) {
  return inv_scale != nullptr ? A(*inv_scale) : A(1);
}

// Slot d of a FusedTensor for a ChunkList of Depth slots: param, grad, the
// state, and last the low-precision copy.
template <int Depth>
void* pick_slot(const FusedTensor& f, int d) {
  if (d == 0) return f.param;
  if (d == 1) return const_cast<void*>(f.grad);
  if (d == Depth - 1) return f.low_copy;
  return f.state[d - 2];
}

// Each thread keeps kILP elements of every array in flight: a memory-bound
// kernel needs that many loads outstanding to approach peak bandwidth.
constexpr int kILP = 4;

// C: the low copy's type (float16 or bfloat16, for a float32 T), or T for a
// step without copies.
template <typename T, typename C>
__global__ void sgd_kernel(const SGDList list, const SGDHyper h, const float* found_inf, const float* inv_scale) {
  using A = acc_t<T>;
  if (skip_step(found_inf)) return;
  const BlockChunk bc = block_chunk(list);
  const auto c = optim_math::sgd_scalars<A>(h);
  const A factor = grad_factor<A>(inv_scale);
  T* p = static_cast<T*>(list.ptr[0][bc.slot]) + bc.begin;
  const T* g = static_cast<const T*>(list.ptr[1][bc.slot]) + bc.begin;
  A* buf = static_cast<A*>(list.ptr[2][bc.slot]);
  if (buf != nullptr) buf += bc.begin;
  C* low = static_cast<C*>(list.ptr[3][bc.slot]);
  if (low != nullptr) low += bc.begin;
  const int64_t* step = list.step[bc.slot];
  const bool first = step != nullptr && *step == 0;
  for (int64_t base = threadIdx.x; base < bc.length; base += int64_t(blockDim.x) * kILP) {
    A pv[kILP] = {}, gv[kILP] = {}, bv[kILP] = {};
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i >= bc.length) continue;
      pv[u] = to_acc(p[i]);
      gv[u] = to_acc(g[i]);
      if (buf != nullptr && !first) bv[u] = buf[i];
    }
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i >= bc.length) continue;
      optim_math::sgd_element<A>(c, pv[u], gv[u] * factor, bv[u], first);
      const T rounded = from_acc<T>(pv[u]);
      p[i] = rounded;
      if (buf != nullptr) buf[i] = bv[u];
      if (low != nullptr) low[i] = from_acc<C>(acc_t<C>(rounded));
    }
  }
}

template <typename T, typename C>
__global__ void adam_kernel(const AdamList list, const AdamHyper h, const float* found_inf, const float* inv_scale) {
  using A = acc_t<T>;
  if (skip_step(found_inf)) return;
  const BlockChunk bc = block_chunk(list);
  const auto c = optim_math::adam_scalars<A>(h, *list.step[bc.slot] + 1);
  const A factor = grad_factor<A>(inv_scale);
  T* p = static_cast<T*>(list.ptr[0][bc.slot]) + bc.begin;
  const T* g = static_cast<const T*>(list.ptr[1][bc.slot]) + bc.begin;
  A* m = static_cast<A*>(list.ptr[2][bc.slot]) + bc.begin;
  A* v = static_cast<A*>(list.ptr[3][bc.slot]) + bc.begin;
  A* vmax = static_cast<A*>(list.ptr[4][bc.slot]);
  if (vmax != nullptr) vmax += bc.begin;
  C* low = static_cast<C*>(list.ptr[5][bc.slot]);
  if (low != nullptr) low += bc.begin;
  for (int64_t base = threadIdx.x; base < bc.length; base += int64_t(blockDim.x) * kILP) {
    A pv[kILP] = {}, gv[kILP] = {}, mv[kILP] = {}, vv[kILP] = {}, xv[kILP] = {};
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i >= bc.length) continue;
      pv[u] = to_acc(p[i]);
      gv[u] = to_acc(g[i]);
      mv[u] = m[i];
      vv[u] = v[i];
      if (vmax != nullptr) xv[u] = vmax[i];
    }
#pragma unroll
    for (int u = 0; u < kILP; ++u) {
      const int64_t i = base + int64_t(u) * blockDim.x;
      if (i >= bc.length) continue;
      optim_math::adam_element<A>(c, pv[u], gv[u] * factor, mv[u], vv[u], xv[u]);
      const T rounded = from_acc<T>(pv[u]);
      p[i] = rounded;
      m[i] = mv[u];
      v[i] = vv[u];
      if (vmax != nullptr) vmax[i] = xv[u];
      if (low != nullptr) low[i] = from_acc<C>(acc_t<C>(rounded));
    }
  }
}

constexpr int kMaxStepsPerLaunch = 448;
struct StepList {
  int64_t* step[kMaxStepsPerLaunch];
  int count;
};

__global__ void advance_steps_kernel(const StepList list, const float* found_inf) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= list.count || skip_step(found_inf)) return;
  ++*list.step[i];
}

// After the update launches: every non-null counter += 1 unless found_inf.
void advance_steps(const FusedStepArgs& a, cudaStream_t stream) {
  StepList list{};
  auto flush = [&] {
    if (list.count == 0) return;
    advance_steps_kernel<<<unsigned((list.count + 127) / 128), 128, 0, stream>>>(list, a.found_inf);
    EMBER_CUDA_CHECK_LAUNCH();
    list.count = 0;
  };
  for (int64_t t = 0; t < a.count; ++t) {
    if (a.tensors[t].step == nullptr) continue;
    list.step[list.count++] = a.tensors[t].step;
    if (list.count == kMaxStepsPerLaunch) flush();
  }
  flush();
}

// Calls run.template operator()<T, C>() for the step's param type T and low
// copy type C (T itself when there are no copies).
template <typename Run>
void dispatch_step(const FusedStepArgs& a, const char* op, Run&& run) {
  if (optim::check_fused_step(a, op)) {
    if (a.low_dtype == DType::Float16) run.template operator()<float, Half>();
    else run.template operator()<float, BFloat16>();
    return;
  }
  EMBER_DISPATCH_FLOAT(a.dtype, op, [&]<typename T>() { run.template operator()<T, T>(); });
}

void sgd_step(const FusedStepArgs& a, const SGDHyper& h) {
  if (a.count == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  dispatch_step(a, "optim::SGD step", [&]<typename T, typename C>() {
    for_each_chunk_list<4, kSGDTensors>(a.tensors, a.count, pick_slot<4>, [&](const SGDList& list, int blocks) {
      sgd_kernel<T, C><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, h, a.found_inf, a.inv_scale);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
  advance_steps(a, stream);
}

void adam_step(const FusedStepArgs& a, const AdamHyper& h) {
  if (a.count == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  dispatch_step(a, "optim::Adam step", [&]<typename T, typename C>() {
    for_each_chunk_list<6, kAdamTensors>(a.tensors, a.count, pick_slot<6>, [&](const AdamList& list, int blocks) {
      adam_kernel<T, C><<<unsigned(blocks), kMultiTensorThreads, 0, stream>>>(list, h, a.found_inf, a.inv_scale);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
  advance_steps(a, stream);
}

}  // namespace

EMBER_REGISTER_KERNEL(optim::sgd_step_stub, DeviceType::CUDA, sgd_step);
EMBER_REGISTER_KERNEL(optim::adam_step_stub, DeviceType::CUDA, adam_step);

}  // namespace ember::cuda
