// Warp and block reductions for CUDA kernels: sums, maxima and Welford
// (count, mean, M2) merges, built on warp shuffles.
//
// Contract: block_* functions must be called by every thread of the block
// (they synchronize) with blockDim.x a multiple of 32 and at most 1024; the
// result is valid in every thread. `shared` must hold 32 values of the type.
#pragma once

#include <cuda_runtime.h>

namespace ember::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    T o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = (o > v || o != o) ? o : v;  // NaN wins, as in the CPU kernels
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}

template <typename T>
__device__ __forceinline__ T block_max(T v, T* shared, T lowest) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : lowest;
  return warp_max(v);
}

// Welford's running statistics; merge() combines two partial results
// (Chan et al.), so the order of a tree reduction does not matter.
template <typename T>
struct Welford {
  T mean = 0, m2 = 0, count = 0;
  __device__ __forceinline__ void push(T x) {
    count += T(1);
    T delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  __device__ __forceinline__ void merge(const Welford& o) {
    if (o.count == T(0)) return;
    if (count == T(0)) {
      *this = o;
      return;
    }
    T n = count + o.count, delta = o.mean - mean;
    mean += delta * (o.count / n);
    m2 += o.m2 + delta * delta * (count * o.count / n);
    count = n;
  }
};

template <typename T>
__device__ __forceinline__ Welford<T> warp_welford(Welford<T> w) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Welford<T> o;
    o.mean = __shfl_xor_sync(0xffffffffu, w.mean, offset);
    o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, offset);
    o.count = __shfl_xor_sync(0xffffffffu, w.count, offset);
    w.merge(o);
  }
  return w;
}

template <typename T>
__device__ __forceinline__ Welford<T> block_welford(Welford<T> w, Welford<T>* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  w = warp_welford(w);
  __syncthreads();
  if (lane == 0) shared[warp] = w;
  __syncthreads();
  w = lane < warps ? shared[lane] : Welford<T>{};
  return warp_welford(w);
}

}  // namespace ember::cuda
