// The CUDA reduction skeleton over a dense [outer, reduce, inner] block
// (ember/core/ops/reduce_kernels.h), shared by every op of ember/kernels/cuda/reduce.cu.
//
// Contract of a Reducer R over elements of type T (a struct with __device__
// members, passed to the kernels by value):
//   using State = ...;                       trivially copyable, sizeof a multiple of 4
//   State identity() const;                  the state of no elements
//   State push(State s, T x, int64_t r) const;
//                                            folds element r in; each thread pushes
//                                            its elements in increasing r
//   State merge(State a, State b) const;     combines two disjoint partial states;
//                                            the result may not depend on the
//                                            order (up to rounding)
//   void write(State s, int64_t j) const;    stores the result of output j
// plus push_vecs(red, s, x, c, step) for U vectors x[u] of V elements, x[u]
// holding elements c + u * step .. c + u * step + V - 1 (the generic one
// pushes them one by one in that order; a reducer may overload it to fold a
// group at once).
//
// launch_reduce<T>(args, reducer) picks one of three kernels:
// - inner == 1, reduce <= kWarpRowMax: `group` lanes per row (the power of
//   two covering reduce / (V * kReduceUnroll), at most a warp, so a lane has
//   up to kReduceUnroll vectors in flight), 256-thread blocks, 32 / group
//   rows per warp.
// - inner == 1, longer rows: one block per row (128..512 threads, enough for
//   kUnroll vectors each), split across gridDim.y blocks when there are too
//   few rows to fill the GPU.
// - inner > 1: 256-thread blocks of (bx, by): bx lanes on consecutive inner
//   positions (V of them per lane, 16-byte loads, when inner allows), by
//   lanes striding over `reduce`, split across gridDim.y blocks when
//   outer * inner is too small to fill the GPU and the input holds at least
//   kSplitColumnsMin elements.
// Rows are read with 16-byte vector loads from the first aligned element
// (scalar head and tail), kUnroll loads in flight per thread. Split
// reductions write partial states to a workspace and a second kernel (a
// warp per output) merges them. Every kernel loops over its grid, so any
// size launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops.h"
#include "ember/core/ops/reduce_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"

namespace ember::cuda {

inline constexpr int64_t kWarpRowMax = 1024;                   // longest row the warp kernel takes
inline constexpr int kReduceUnroll = 4;                        // vector loads in flight per thread
inline constexpr int64_t kSplitColumnsMin = int64_t(1) << 20;  // input elements below which columns are not split

template <typename A>
__device__ __forceinline__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// A state moved between lanes 32 bits at a time.
template <typename S>
__device__ __forceinline__ S shfl_xor_state(const S& s, int offset) {
  static_assert(sizeof(S) % 4 == 0, "reducer states must be a multiple of 4 bytes");
  constexpr int kWords = sizeof(S) / 4;
  unsigned w[kWords];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], offset);
  S out;
  memcpy(&out, w, sizeof(S));
  return out;
}

// Merges the states of `width` consecutive lanes (a power of two <= 32);
// every lane of the group gets the result.
template <typename R, typename S>
__device__ __forceinline__ S warp_reduce_state(const R& red, S s, int width = 32) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) s = red.merge(s, shfl_xor_state(s, offset));
  return s;
}

// Merges the states of the whole block (called by every thread); `shared`
// holds 32 states. The result is valid in every thread.
template <typename R, typename S>
__device__ __forceinline__ S block_reduce_state(const R& red, S s, S* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  s = warp_reduce_state(red, s);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = s;
  __syncthreads();
  s = lane < warps ? shared[lane] : red.identity();
  return warp_reduce_state(red, s);
}

template <typename R, typename T, int V, int U>
__device__ __forceinline__ typename R::State push_vecs(const R& red, typename R::State s, const Vec<T, V> (&x)[U],
                                                       int64_t c, int64_t step) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int j = 0; j < V; ++j) s = red.push(s, x[u].v[j], c + u * step + j);
  }
  return s;
}

// Folds row[begin, end) into s, thread l of n: a scalar head up to the
// first 16-byte boundary, V-element vectors (kReduceUnroll in flight), a
// scalar tail. Each thread pushes in increasing index order.
template <int V, typename R, typename T>
__device__ __forceinline__ typename R::State reduce_range(const R& red, typename R::State s, const T* row,
                                                          int64_t begin, int64_t end, int l, int n) {
  int64_t a0 = begin, a1 = end;
  if constexpr (V > 1) {
    const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(row + begin) % 16) / int64_t(sizeof(T));
    a0 = std::min(end, begin + (misaligned ? V - misaligned : 0));
    a1 = a0 + (end - a0) / V * V;
  }
  for (int64_t c = begin + l; c < a0; c += n) s = red.push(s, row[c], c);
  const int64_t step = int64_t(n) * V;
  int64_t c = a0 + int64_t(l) * V;
  for (; c + (kReduceUnroll - 1) * step < a1; c += kReduceUnroll * step) {
    Vec<T, V> x[kReduceUnroll];
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) x[u] = load_vec<T, V>(row + c + u * step);
    s = push_vecs(red, s, x, c, step);
  }
  for (; c < a1; c += step) {
    Vec<T, V> x[1] = {load_vec<T, V>(row + c)};
    s = push_vecs(red, s, x, c, step);
  }
  for (int64_t c2 = a1 + l; c2 < end; c2 += n) s = red.push(s, row[c2], c2);
  return s;
}

// inner == 1, short rows: `group` lanes per row.
template <int V, typename R, typename T>
__global__ void __launch_bounds__(256)
    reduce_rows_warp_kernel(R red, const T* in, int64_t outer, int64_t reduce, int group) {
  using S = typename R::State;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, l = lane & (group - 1);
  const int64_t rows_per_warp = 32 / group;
  for (int64_t first = (int64_t(blockIdx.x) * warps + (threadIdx.x >> 5)) * rows_per_warp; first < outer;
       first += int64_t(gridDim.x) * warps * rows_per_warp) {
    const int64_t row = first + lane / group;
    S s = red.identity();
    if (row < outer) s = reduce_range<V>(red, s, in + row * reduce, 0, reduce, l, group);
    s = warp_reduce_state(red, s, group);
    if (row < outer && l == 0) red.write(s, row);
  }
}

// inner == 1, long rows: block (row, split) folds row[split * per_split, +per_split).
template <int V, typename R, typename T>
__global__ void __launch_bounds__(512) reduce_rows_block_kernel(R red, const T* in, int64_t outer, int64_t reduce,
                                                                int64_t per_split, typename R::State* partial) {
  using S = typename R::State;
  __shared__ __align__(16) unsigned char raw[32 * sizeof(S)];
  S* shared = reinterpret_cast<S*>(raw);
  const int64_t begin = int64_t(blockIdx.y) * per_split, end = std::min(reduce, begin + per_split);
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    S s = reduce_range<V>(red, red.identity(), in + row * reduce, begin, end, threadIdx.x, blockDim.x);
    s = block_reduce_state(red, s, shared);
    if (threadIdx.x == 0) {
      if (gridDim.y == 1) red.write(s, row);
      else partial[int64_t(blockIdx.y) * outer + row] = s;
    }
  }
}

// inner > 1: lane (tx, ty) folds columns i0 .. i0 + V - 1 over the rows
// r = r0 + ty, r0 + ty + by, ... of its split; the by partial states of
// each column are merged through shared memory.
template <int V, typename R, typename T>
__global__ void __launch_bounds__(256)
    reduce_columns_kernel(R red, const T* in, int64_t outer, int64_t reduce, int64_t inner, int64_t inner_blocks,
                          int64_t rows_per_split, typename R::State* partial) {
  using S = typename R::State;
  __shared__ __align__(16) unsigned char raw[256 * sizeof(S)];
  S* shared = reinterpret_cast<S*>(raw);
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_split, r1 = std::min(reduce, r0 + rows_per_split);
  const int64_t nout = outer * inner;
  for (int64_t cb = blockIdx.x; cb < outer * inner_blocks; cb += gridDim.x) {
    const int64_t o = cb / inner_blocks, i0 = ((cb % inner_blocks) * bx + tx) * V;
    S s[V];
#pragma unroll
    for (int v = 0; v < V; ++v) s[v] = red.identity();
    if (i0 < inner) {  // V > 1 only when V divides inner: the whole vector is in range
      const T* p = in + o * reduce * inner + i0;
      int64_t r = r0 + ty;
      for (; r + (kReduceUnroll - 1) * by < r1; r += kReduceUnroll * by) {
        Vec<T, V> x[kReduceUnroll];
#pragma unroll
        for (int u = 0; u < kReduceUnroll; ++u) x[u] = load_vec<T, V>(p + (r + u * by) * inner);
#pragma unroll
        for (int u = 0; u < kReduceUnroll; ++u) {
#pragma unroll
          for (int v = 0; v < V; ++v) s[v] = red.push(s[v], x[u].v[v], r + u * by);
        }
      }
      for (; r < r1; r += by) {
        Vec<T, V> x = load_vec<T, V>(p + r * inner);
#pragma unroll
        for (int v = 0; v < V; ++v) s[v] = red.push(s[v], x.v[v], r);
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      S* mine = shared + ty * bx + tx;
      *mine = s[v];
      __syncthreads();
      for (int half = by >> 1; half > 0; half >>= 1) {
        if (ty < half) *mine = red.merge(*mine, mine[half * bx]);
        __syncthreads();
      }
      if (ty == 0 && i0 < inner) {
        const int64_t j = o * inner + i0 + v;
        if (gridDim.y == 1) red.write(*mine, j);
        else partial[int64_t(blockIdx.y) * nout + j] = *mine;
      }
      __syncthreads();  // before the slots are written again
    }
  }
}

// Second pass of a split reduction: a warp merges the `splits` partial
// states of output j (partial[s * nout + j]) and writes it.
template <typename R>
__global__ void __launch_bounds__(256)
    reduce_partials_kernel(R red, const typename R::State* partial, int64_t splits, int64_t nout) {
  using S = typename R::State;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t j = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); j < nout; j += int64_t(gridDim.x) * warps) {
    S s = red.identity();
    for (int64_t k = lane; k < splits; k += 32) s = red.merge(s, partial[k * nout + j]);
    s = warp_reduce_state(red, s);
    if (lane == 0) red.write(s, j);
  }
}

// Workspace for `count` partial states, on the device and stream of the op.
template <typename S>
Tensor partial_workspace(int64_t count, int device) {
  return empty({ceil_div(count * int64_t(sizeof(S)), 8)}, DType::Int64, cuda_device(device));
}

// Runs `red` over a (outer * inner > 0); the caller holds a DeviceGuard.
template <typename T, typename R>
void launch_reduce(const ReduceArgs& a, const R& red) {
  using S = typename R::State;
  constexpr int V = kVecWidth<T>;
  cudaStream_t stream = current_stream(a.device).handle();
  const T* in = static_cast<const T*>(a.in);
  const int64_t sms = properties(a.device).multiprocessor_count;
  const int64_t nout = a.outer * a.inner;
  int64_t splits = 1;
  Tensor workspace;
  S* partial = nullptr;

  if (a.inner == 1 && a.reduce <= kWarpRowMax) {
    const int group = int(std::min<int64_t>(32, pow2_ceil(ceil_div(a.reduce, V * kReduceUnroll))));
    const int64_t rows_per_block = (256 / 32) * (32 / group);
    reduce_rows_warp_kernel<V>
        <<<grid_size(ceil_div(a.outer, rows_per_block)), 256, 0, stream>>>(red, in, a.outer, a.reduce, group);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  if (a.inner == 1) {
    const int threads = int(std::clamp<int64_t>(pow2_ceil(ceil_div(a.reduce, V * kReduceUnroll)), 128, 512));
    const int64_t min_per_split = int64_t(threads) * V * kReduceUnroll;
    const int64_t target_blocks = sms * (2048 / threads);
    if (a.outer < target_blocks) {
      splits = std::max<int64_t>(1, std::min(ceil_div(target_blocks, a.outer), a.reduce / min_per_split));
    }
    int64_t per_split = ceil_div(ceil_div(a.reduce, splits), V) * V;
    splits = ceil_div(a.reduce, per_split);
    if (splits > 1) {
      workspace = partial_workspace<S>(splits * nout, a.device);
      partial = reinterpret_cast<S*>(workspace.data_ptr());
    }
    reduce_rows_block_kernel<V><<<dim3(grid_size(a.outer), unsigned(splits)), threads, 0, stream>>>(
        red, in, a.outer, a.reduce, per_split, partial);
    EMBER_CUDA_CHECK_LAUNCH();
  } else {
    const bool vectorize = a.inner % V == 0 && aligned16(in);
    const int vec = vectorize ? V : 1;
    const int bx = int(std::min<int64_t>(32, pow2_ceil(ceil_div(a.inner, vec)))), by = 256 / bx;
    const int64_t inner_blocks = ceil_div(a.inner, int64_t(bx) * vec);
    const int64_t column_blocks = a.outer * inner_blocks;
    const int64_t target_blocks = sms * 8;
    // A small input (a bias gradient: 256 x 1024) is read faster by its few
    // column blocks alone than by a split and a second kernel.
    if (column_blocks < target_blocks && a.outer * a.reduce * a.inner >= kSplitColumnsMin) {
      // At least 16 rows per lane, so the partials stay a small fraction of the input.
      splits = std::max<int64_t>(1, std::min(ceil_div(target_blocks, column_blocks), a.reduce / (int64_t(by) * 16)));
    }
    int64_t rows_per_split = ceil_div(a.reduce, splits);
    splits = rows_per_split > 0 ? ceil_div(a.reduce, rows_per_split) : 1;
    if (splits > 1) {
      workspace = partial_workspace<S>(splits * nout, a.device);
      partial = reinterpret_cast<S*>(workspace.data_ptr());
    }
    const dim3 grid{grid_size(column_blocks), unsigned(splits)}, block{unsigned(bx), unsigned(by)};
    if (vectorize) {
      reduce_columns_kernel<V>
          <<<grid, block, 0, stream>>>(red, in, a.outer, a.reduce, a.inner, inner_blocks, rows_per_split, partial);
    } else {
      reduce_columns_kernel<1>
          <<<grid, block, 0, stream>>>(red, in, a.outer, a.reduce, a.inner, inner_blocks, rows_per_split, partial);
    }
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (splits > 1) {
    reduce_partials_kernel<<<grid_size(ceil_div(nout, 8)), 256, 0, stream>>>(red, partial, splits, nout);
    EMBER_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ember::cuda
