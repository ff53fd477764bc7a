// 16-byte vector access for CUDA kernels: one small type every kernel uses
// to move a row or a tensor's body in ld.global.v4 / st.global.v4 units.
//
// Contract:
// - Vec<T, N> is N values of T aligned to their total size; with
//   N = kVecWidth<T> (16 / sizeof(T)) one Vec is one 16-byte access.
// - aligned16(p) (host and device) says whether p may be read or written
//   as such vectors; callers check every operand before taking a vector path.
// - load_vec<T, N>(p) / store_vec(p, v) read and write one Vec at p, which
//   must be aligned to sizeof(Vec<T, N>).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements of T in one 16-byte vector.
template <typename T>
inline constexpr int kVecWidth = int(16 / sizeof(T));

__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

}  // namespace ember::cuda
