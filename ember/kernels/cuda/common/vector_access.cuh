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

// 16-bit values (Half, BFloat16) are packed in pairs into 32-bit words and
// stored with one st.v4.b32 (v2, or one word; generic addresses: global or
// shared memory): assigned as a struct, such a Vec
// became one st.global.u16 or st.global.v2.u16 per pair of elements, which
// took the cross-entropy backward's 16-bit rows to a quarter of copy
// bandwidth on the H100.
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  if constexpr (sizeof(T) == 2 && (N == 2 || N == 4 || N == 8)) {
    uint32_t w[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      w[i] = uint32_t(__builtin_bit_cast(uint16_t, v.v[2 * i])) |
             (uint32_t(__builtin_bit_cast(uint16_t, v.v[2 * i + 1])) << 16);
    }
    // In PTX: stored through a uint4 pointer, the words still went out as
    // four st.global.u32.
    if constexpr (N == 8) {
      asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
    } else if constexpr (N == 4) {
      asm volatile("st.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
    } else {
      asm volatile("st.b32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
    }
  } else {
    *reinterpret_cast<Vec<T, N>*>(p) = v;
  }
}

}  // namespace ember::cuda
