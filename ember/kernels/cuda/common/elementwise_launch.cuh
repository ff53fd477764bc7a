// CUDA loops over ElementwiseArgs, shared by every elementwise kernel file.
//
// Contract: launch_map<Out, In...>(args, f) sets out = f(in...) for every
// element, on the current stream of args.device, computing in acc_t.
// - Contiguous operands whose pointers are 16-byte aligned take the fast
//   path: each thread moves 16 bytes of the widest operand per load
//   (ld.global.v4), kUnroll vectors per thread, and a scalar tail.
// - Everything else (strided, broadcast, misaligned) takes a path that
//   computes each operand's offset from the linear index, 32-bit index math
//   when every offset fits.
// f is a functor with a __device__ operator() taking and returning acc_t
// values (a struct: nvcc forbids __device__ lambdas inside the templated
// dispatch lambdas); the 16-bit
// float types are converted with the hardware intrinsics (round to nearest
// even, like the CPU's Half/BFloat16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/elementwise_args.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/cuda/common/vector_access.cuh"

namespace ember::cuda {

template <typename T>
__device__ __forceinline__ acc_t<T> to_acc(T x) {
  if constexpr (std::is_same_v<T, Half>) return __half2float(__ushort_as_half(x.bits));
  else if constexpr (std::is_same_v<T, BFloat16>) return __bfloat162float(__ushort_as_bfloat16(x.bits));
  else return x;
}

template <typename T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) return Half::from_bits(__half_as_ushort(__float2half_rn(v)));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(v)));
  else return T(v);
}

template <typename... Ts>
constexpr int max_size() {
  int m = 1;
  ((m = int(sizeof(Ts)) > m ? int(sizeof(Ts)) : m), ...);
  return m;
}

inline constexpr int kBlock = 256;
inline constexpr int kUnroll = 2;

template <int N, typename Out, typename F, typename... In>
__device__ __forceinline__ void compute_vec(F& f, Out* out, const Vec<In, N>&... v) {
  Vec<Out, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) o.v[j] = from_acc<Out>(f(to_acc(v.v[j])...));
  store_vec(out, o);
}

template <int N, typename Out, typename F, typename... In>
__global__ void vectorized_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t per_block = int64_t(kBlock) * N * kUnroll;
  const int64_t base = int64_t(blockIdx.x) * per_block + int64_t(threadIdx.x) * N;
  if (base + (kUnroll - 1) * int64_t(kBlock) * N + N <= n) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t off = base + int64_t(u) * kBlock * N;
      compute_vec<N>(f, out + off, load_vec<In, N>(in + off)...);
    }
    return;
  }
  // Tail of the tensor: element by element.
  for (int u = 0; u < kUnroll; ++u) {
    for (int j = 0; j < N; ++j) {
      int64_t i = base + int64_t(u) * kBlock * N + j;
      if (i < n) out[i] = from_acc<Out>(f(to_acc(in[i])...));
    }
  }
}

template <typename Index, typename Out, typename... In, typename F, size_t... I>
__device__ __forceinline__ void strided_element(const ElementwiseArgs& a, Index i, F& f, std::index_sequence<I...>) {
  constexpr int K = sizeof...(In) + 1;
  Index off[K] = {};
  Index rem = i;
#pragma unroll
  for (int d = kMaxElementwiseDims - 1; d >= 0; --d) {
    if (d >= a.ndim) continue;
    Index size = Index(a.sizes[d]);
    Index idx = rem % size;
    rem /= size;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += idx * Index(a.strides[k][d]);
  }
  Out* out = reinterpret_cast<Out*>(a.data[0]);
  out[off[0]] = from_acc<Out>(f(to_acc(reinterpret_cast<const In*>(a.data[I + 1])[off[I + 1]])...));
}

template <typename Index, typename Out, typename F, typename... In>
__global__ void strided_kernel(const ElementwiseArgs a, F f) {
  Index i = Index(blockIdx.x) * kBlock + Index(threadIdx.x);
  if (int64_t(i) >= a.numel) return;
  strided_element<Index, Out, In...>(a, i, f, std::index_sequence_for<In...>{});
}

// Largest element offset any operand reaches, to pick 32-bit index math.
inline int64_t max_offset(const ElementwiseArgs& a) {
  int64_t m = a.numel;
  for (int k = 0; k < a.noperands; ++k) {
    int64_t off = 0;
    for (int d = 0; d < a.ndim; ++d) off += (a.sizes[d] - 1) * a.strides[k][d];
    m = std::max(m, off + 1);
  }
  return m;
}

template <typename Out, typename... In, typename F, size_t... I>
void launch_map_impl(const ElementwiseArgs& a, F f, std::index_sequence<I...>) {
  if (a.numel == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  constexpr int N = 16 / max_size<Out, In...>();
  bool aligned = true;
  for (int k = 0; k < a.noperands; ++k) aligned = aligned && aligned16(a.data[k]);
  if (a.contiguous && aligned) {
    int64_t per_block = int64_t(kBlock) * N * kUnroll;
    int64_t blocks = (a.numel + per_block - 1) / per_block;
    vectorized_kernel<N, Out, F, In...><<<unsigned(blocks), kBlock, 0, stream>>>(
        a.numel, f, reinterpret_cast<Out*>(a.data[0]), reinterpret_cast<const In*>(a.data[I + 1])...);
  } else {
    int64_t blocks = (a.numel + kBlock - 1) / kBlock;
    if (max_offset(a) <= INT32_MAX) {
      strided_kernel<uint32_t, Out, F, In...><<<unsigned(blocks), kBlock, 0, stream>>>(a, f);
    } else {
      strided_kernel<int64_t, Out, F, In...><<<unsigned(blocks), kBlock, 0, stream>>>(a, f);
    }
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

template <typename Out, typename... In, typename F>
void launch_map(const ElementwiseArgs& a, F f) {
  launch_map_impl<Out, In...>(a, f, std::index_sequence_for<In...>{});
}

// out[i] = f(i) for the linear (row-major) index i of every element of
// operand 0; used where the value depends on the position (random numbers).
template <typename Out, typename F>
__global__ void generate_kernel(const ElementwiseArgs a, F f) {
  int64_t i = int64_t(blockIdx.x) * kBlock + threadIdx.x;
  if (i >= a.numel) return;
  int64_t off = 0, rem = i;
  for (int d = a.ndim - 1; d >= 0; --d) {
    off += (rem % a.sizes[d]) * a.strides[0][d];
    rem /= a.sizes[d];
  }
  reinterpret_cast<Out*>(a.data[0])[off] = from_acc<Out>(f(i));
}

template <typename Out, typename F>
void launch_generate(const ElementwiseArgs& a, F f) {
  if (a.numel == 0) return;
  DeviceGuard guard(a.device);
  int64_t blocks = (a.numel + kBlock - 1) / kBlock;
  generate_kernel<Out><<<unsigned(blocks), kBlock, 0, current_stream(a.device).handle()>>>(a, f);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
