// CUDA cumsum over a dense [outer, dim, inner] block (contract in
// ember/core/ops/scan_kernels.h).
//
// - inner == 1 (each row contiguous): a block per row, the row taken in
//   chunks of kThreads * kItems elements in scan order. Each thread sums its
//   kItems consecutive values in registers, cub::BlockScan gives it the sum
//   of the threads before it in the chunk, and a carry holds the sum of the
//   earlier chunks. The block is 32..256 threads, the smallest that covers a
//   short row in one chunk.
// - inner > 1: a thread per (outer, inner) column walking along dim, so a
//   warp reads and writes 32 consecutive inner positions at each step
//   (coalesced). Its additions are the CPU kernel's, in the same order.
//   When there are too few columns to fill the GPU (fewer than
//   kColumnThreads), the dim is cut into pieces of at least kMinPiece
//   steps, a thread per (column, piece): one pass sums each piece, a second
//   turns each column's piece sums into running offsets, a third walks each
//   piece again from its offset (the input is read twice).
// Every order is fixed by the shape alone: the results are deterministic.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <type_traits>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/scan_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {
namespace {

// float for the half types and float32, double for float64, int64 for the
// integral types and bool (as ember/kernels/cpu/scan.cpp).
template <typename T>
using scan_acc_t = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                       int64_t>>;

template <typename T>
__device__ __forceinline__ scan_acc_t<T> load_acc(const T* p) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return to_acc(*p);
  else return scan_acc_t<T>(*p);
}

template <typename T>
__device__ __forceinline__ T store_acc(scan_acc_t<T> v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return from_acc<T>(v);
  else return T(v);
}

constexpr int kItems = 4;  // values a thread scans in registers per chunk

template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
    cumsum_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n, bool reverse) {
  using A = scan_acc_t<T>;
  using BlockScan = cub::BlockScan<A, kThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  constexpr int64_t kChunk = int64_t(kThreads) * kItems;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    A carry = 0;
    for (int64_t base = 0; base < n; base += kChunk) {
      const int64_t first = base + int64_t(threadIdx.x) * kItems;  // in scan order
      A v[kItems];
      A local = 0;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int64_t s = first + j;
        if (s < n) local += load_acc(xr + (reverse ? n - 1 - s : s));
        v[j] = local;
      }
      A before, total;
      BlockScan(temp).ExclusiveSum(local, before, total);
      const A offset = carry + before;
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int64_t s = first + j;
        if (s < n) yr[reverse ? n - 1 - s : s] = store_acc<T>(offset + v[j]);
      }
      carry += total;
      __syncthreads();  // temp is reused by the next chunk's scan
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256) cumsum_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                                                             int64_t n, int64_t inner, bool reverse) {
  using A = scan_acc_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c % inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    A s = 0;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t k = reverse ? n - 1 - step : step;
      s += load_acc(xc + k * inner);
      yc[k * inner] = store_acc<T>(s);
    }
  }
}

constexpr int64_t kColumnThreads = int64_t(1) << 18;  // threads that fill an H100 several times over
constexpr int64_t kMinPiece = 16;

// Where the steps of piece `s` (of `piece` steps each) of a column lie.
struct Piece {
  int64_t first, last;  // in scan order, [first, last)
};
__device__ __forceinline__ Piece piece_of(int64_t s, int64_t piece, int64_t n) {
  return {s * piece, min(n, (s + 1) * piece)};
}

// sums[s * columns + c]: the sum of piece s of column c.
template <typename T>
__global__ void __launch_bounds__(256)
    column_piece_sums_kernel(const T* __restrict__ x, scan_acc_t<T>* __restrict__ sums, int64_t outer, int64_t n,
                             int64_t inner, int64_t piece, int64_t pieces, bool reverse) {
  const int64_t columns = outer * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns * pieces;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t % columns, o = c / inner, i = c % inner;
    const T* xc = x + o * n * inner + i;
    const Piece p = piece_of(t / columns, piece, n);
    scan_acc_t<T> s = 0;
    for (int64_t step = p.first; step < p.last; ++step) s += load_acc(xc + (reverse ? n - 1 - step : step) * inner);
    sums[t] = s;
  }
}

// Each column's piece sums become the sums of the pieces before it.
template <typename A>
__global__ void __launch_bounds__(256)
    column_piece_offsets_kernel(A* __restrict__ sums, int64_t columns, int64_t pieces) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += int64_t(gridDim.x) * blockDim.x) {
    A before = 0;
    for (int64_t s = 0; s < pieces; ++s) {
      const A here = sums[s * columns + c];
      sums[s * columns + c] = before;
      before += here;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256)
    column_piece_scan_kernel(const T* __restrict__ x, T* __restrict__ y, const scan_acc_t<T>* __restrict__ offsets,
                             int64_t outer, int64_t n, int64_t inner, int64_t piece, int64_t pieces, bool reverse) {
  const int64_t columns = outer * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns * pieces;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t % columns, o = c / inner, i = c % inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    const Piece p = piece_of(t / columns, piece, n);
    scan_acc_t<T> s = offsets[t];
    for (int64_t step = p.first; step < p.last; ++step) {
      const int64_t k = reverse ? n - 1 - step : step;
      s += load_acc(xc + k * inner);
      yc[k * inner] = store_acc<T>(s);
    }
  }
}

template <typename T>
void launch_columns(const ScanArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t columns = a.outer * a.inner;
  const int64_t pieces = std::clamp<int64_t>(kColumnThreads / columns, 1, ceil_div(a.dim, kMinPiece));
  if (pieces == 1) {
    cumsum_columns_kernel<T><<<grid_size(ceil_div(columns, kThreads)), kThreads, 0, stream>>>(
        static_cast<const T*>(a.in), static_cast<T*>(a.out), a.outer, a.dim, a.inner, a.reverse);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  using A = scan_acc_t<T>;
  const int64_t piece = ceil_div(a.dim, pieces);
  Workspace sums = workspace_for<A>(columns * pieces, a.device);
  const unsigned grid = grid_size(ceil_div(columns * pieces, kThreads));
  column_piece_sums_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a.in), sums.as<A>(), a.outer, a.dim,
                                                             a.inner, piece, pieces, a.reverse);
  EMBER_CUDA_CHECK_LAUNCH();
  column_piece_offsets_kernel<A>
      <<<grid_size(ceil_div(columns, kThreads)), kThreads, 0, stream>>>(sums.as<A>(), columns, pieces);
  EMBER_CUDA_CHECK_LAUNCH();
  column_piece_scan_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a.in), static_cast<T*>(a.out),
                                                             sums.as<A>(), a.outer, a.dim, a.inner, piece, pieces,
                                                             a.reverse);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <typename T, int kThreads>
void launch_rows(const ScanArgs& a, cudaStream_t stream) {
  cumsum_rows_kernel<T, kThreads><<<grid_size(a.outer), kThreads, 0, stream>>>(
      static_cast<const T*>(a.in), static_cast<T*>(a.out), a.outer, a.dim, a.reverse);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cumsum(const ScanArgs& a) {
  cudaStream_t stream = current_stream(a.device).handle();
  if (a.inner > 1) {
    launch_columns<T>(a, stream);
  } else if (a.dim <= 32 * kItems) {
    launch_rows<T, 32>(a, stream);
  } else if (a.dim <= 64 * kItems) {
    launch_rows<T, 64>(a, stream);
  } else if (a.dim <= 128 * kItems) {
    launch_rows<T, 128>(a, stream);
  } else {
    launch_rows<T, 256>(a, stream);
  }
}

void cumsum_cuda(const ScanArgs& a) {
  if (a.outer == 0 || a.dim == 0 || a.inner == 0) return;
  DeviceGuard guard(a.device);
  EMBER_DISPATCH_DTYPE(a.dtype, "cumsum", [&]<typename T>() { cumsum<T>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(cumsum_stub, DeviceType::CUDA, cumsum_cuda);

}  // namespace ember::cuda
