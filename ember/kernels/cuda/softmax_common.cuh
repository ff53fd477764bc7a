// Shared pieces of the CUDA softmax family (contract in
// ember/core/ops/softmax_kernels.h): ember/kernels/cuda/softmax_forward.cu and
// softmax_backward.cu hold the kernels, ember/kernels/cuda/softmax.cu dispatches.
//
// Which kernel takes which [outer, dim, inner] (forward and backward alike):
// - inner == 1, dim <= kSoftmaxWarpMaxDim: a warp per row, 8 rows per
//   256-thread block. Each lane keeps N values (N the power of two >= dim / 32)
//   in registers, loaded as 16-byte vectors when every row is 16-byte
//   aligned: a row is read once and written once.
// - forward only, inner == 1, rows of whole 16-byte vectors on aligned
//   operands, at most 2048 vectors (8192 float32): a 256-thread block per
//   row, each thread's 8 vectors in registers: one read, one write.
// - inner == 1, longer rows, operands 16-byte aligned: a block per row
//   (128..512 threads), each row split into a scalar head, 16-byte vectors
//   and a scalar tail (so odd widths are vectorized too):
//   * cached, when the row (y and dL/dy for backward) fits the device's
//     opt-in shared memory (the launcher raises the limit above 48 KB): the
//     row is copied to shared memory with cp.async, all of it in flight at
//     once, then every pass reads shared memory: one global read, one write.
//   * online otherwise: forward keeps a running max and rescaled sum in one
//     read, then reads again (mostly from L2) to write; backward reads twice.
// - inner > 1 (or misaligned operands): 256-thread blocks of (bx, by): bx
//   lanes on consecutive inner positions (coalesced), by lanes striding
//   along dim; partial maxima and sums are merged through shared memory.
//   Every pass reads global memory.
// Arithmetic is in acc_t (float for the half types, the type itself
// otherwise); the formulas are the CPU kernel's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/ops/softmax_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/softmax_path.h"

namespace ember::cuda {

inline constexpr int64_t kSoftmaxWarpMaxDim = 1024;
inline constexpr int kSoftmaxUnroll = 4;  // vector loads in flight per thread (block kernels)

// Launchers; the caller holds a DeviceGuard and a non-empty block.
void softmax_forward_cuda(const SoftmaxArgs& a, bool is_log);
void softmax_backward_cuda(const SoftmaxArgs& a, bool is_log);

// What decides a call's path (ember/kernels/cuda/softmax_path.h).
struct SoftmaxShape {
  bool backward = false;
  bool aligned = false;          // every operand 16-byte aligned
  bool whole_vectors = false;    // dim a multiple of the 16-byte vector width
  int64_t register_max_dim = 0;  // the register kernel's longest row (0: none, as backward)
  size_t cache_bytes = 0;        // shared memory a cached row takes
};
// The shape's choice (the list above), or the forced path, which throws
// when it cannot take the shape.
SoftmaxPath softmax_path_for(const SoftmaxArgs& a, const SoftmaxShape& s);

// The larger of m and v, NaN winning: a NaN max stays, so its row comes out NaN.
template <typename A>
__device__ __forceinline__ A nan_max(A m, A v) {
  return (v > m || v != v) ? v : m;
}

struct NanMaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return nan_max(a, b);
  }
};
struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

// Combines v over the by lanes of a (bx, by) block that share threadIdx.x;
// every thread gets its column's result. `shared` holds bx * by values.
template <typename A, typename Op>
__device__ __forceinline__ A column_reduce(A v, A* shared, Op op) {
  const int bx = blockDim.x;
  A* mine = shared + threadIdx.y * bx + threadIdx.x;
  *mine = v;
  __syncthreads();
  for (int half = blockDim.y >> 1; half > 0; half >>= 1) {
    if (int(threadIdx.y) < half) *mine = op(*mine, mine[half * bx]);
    __syncthreads();
  }
  A r = shared[threadIdx.x];
  __syncthreads();  // every thread has read before the slots are reused
  return r;
}

// The split of a row at p into a scalar head [0, head), 16-byte vectors
// [head, body_end) and a scalar tail [body_end, dim). Rows of operands whose
// base pointers are 16-byte aligned split alike.
struct RowSplit {
  int64_t head, body_end;
};
template <typename T>
__device__ __forceinline__ RowSplit split_row(const T* p, int64_t dim) {
  constexpr int64_t V = 16 / int64_t(sizeof(T));
  const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(p) % 16) / int64_t(sizeof(T));
  const int64_t head = misaligned ? std::min(dim, V - misaligned) : 0;
  return {head, head + (dim - head) / V * V};
}

// Visits the elements of a row this thread owns in the block kernels:
// on_vec(c) for the vectors at c = head + V * threadIdx.x, stepping V *
// blockDim.x, and on_one(c) for the head and tail elements, one per thread
// in turn. Every pass of a kernel uses this same ownership.
template <int V, typename OnVec, typename OnOne>
__device__ __forceinline__ void for_each_owned(const RowSplit& sp, int64_t dim, OnVec on_vec, OnOne on_one) {
  const int64_t tid = threadIdx.x, n = blockDim.x;
  for (int64_t c = tid; c < sp.head; c += n) on_one(c);
  for (int64_t c = sp.head + tid * V; c < sp.body_end; c += n * V) on_vec(c);
  for (int64_t c = sp.body_end + tid; c < dim; c += n) on_one(c);
}

// Where a block kernel caches the row at p in dynamic shared memory: shifted
// by p's offset from 16 bytes, so that the row's 16-byte-aligned vectors
// land on 16-byte-aligned shared addresses (cp.async needs both).
template <typename T>
__device__ __forceinline__ T* row_cache(unsigned char* region, const T* p) {
  return reinterpret_cast<T*>(region + reinterpret_cast<uintptr_t>(p) % 16);
}

// Shared memory one cached row of `dim` elements takes, 16-byte padded.
template <typename T>
constexpr size_t row_cache_bytes(int64_t dim) {
  return (size_t(dim) * sizeof(T) + 31) / 16 * 16;
}

// Calls f.template operator()<N>() with N the per-lane element count of the
// warp kernels for a row of `dim` <= kSoftmaxWarpMaxDim elements.
template <typename F>
void with_lane_elements(int64_t dim, F f) {
  if (dim <= 32) f.template operator()<1>();
  else if (dim <= 64) f.template operator()<2>();
  else if (dim <= 128) f.template operator()<4>();
  else if (dim <= 256) f.template operator()<8>();
  else if (dim <= 512) f.template operator()<16>();
  else f.template operator()<32>();
}

// Launches a warp-per-row kernel over `rows` rows of `dim` <=
// kSoftmaxWarpMaxDim elements, 8 rows per 256-thread block:
// launch.template operator()<N, W>(grid), N from with_lane_elements, W = V
// (16-byte vectors) where N >= V and the operands take vectors, else 1.
template <int V, typename Launch>
void launch_warp_rows(int64_t rows, int64_t dim, bool vectors, Launch launch) {
  const unsigned grid = grid_size(ceil_div(rows, 8));
  with_lane_elements(dim, [&]<int N>() {
    if constexpr (N >= V) {
      if (vectors) {
        launch.template operator()<N, V>(grid);
        EMBER_CUDA_CHECK_LAUNCH();
        return;
      }
    }
    launch.template operator()<N, 1>(grid);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

// The strided kernels' launch over [outer, dim, inner]: 256-thread blocks of
// (bx, by), bx <= 32 lanes on consecutive inner positions and by along dim;
// inner_blocks blocks cover one outer index.
struct StridedLaunch {
  unsigned grid;
  dim3 block;
  int64_t inner_blocks;
};
inline StridedLaunch strided_launch(int64_t outer, int64_t inner) {
  const int bx = int(std::min<int64_t>(32, pow2_ceil(inner))), by = 256 / bx;
  const int64_t inner_blocks = ceil_div(inner, bx);
  return {grid_size(outer * inner_blocks), dim3{unsigned(bx), unsigned(by)}, inner_blocks};
}

// Threads of a block-per-row kernel: enough for kSoftmaxUnroll vectors of
// `vec` elements each over the row, 128 to 512 (at most 128 registers each).
inline int row_block_threads(int64_t dim, int vec) {
  return int(std::clamp<int64_t>(pow2_ceil(ceil_div(dim, int64_t(vec) * kSoftmaxUnroll)), 128, 512));
}

// Whether a cached row of `cache_bytes` fits a block's shared memory beside
// the kernels' static shared memory (32 reduction slots).
inline bool row_cache_fits(size_t cache_bytes, int device) {
  constexpr size_t kStaticReserve = 1024;
  return cache_bytes + kStaticReserve <= properties(device).shared_memory_per_block_optin;
}

// Launches a block-per-row kernel over `rows` rows with `cache_bytes` of
// dynamic shared memory (0 for the uncached kernels), raising the kernel's
// limit above the default 48 KB where the row needs it.
template <typename... Params>
void launch_row_blocks(void (*kernel)(Params...), int64_t rows, int threads, size_t cache_bytes, cudaStream_t stream,
                       std::type_identity_t<Params>... args) {
  constexpr size_t kDefaultLimit = 48 * 1024;
  if (cache_bytes > kDefaultLimit) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cache_bytes)));
  }
  kernel<<<grid_size(rows), threads, cache_bytes, stream>>>(args...);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
