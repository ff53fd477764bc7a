// CUDA kernels of the indexing family: gather and scatter-add over IndexArgs
// (contract in ember/core/ops/index_kernels.h).
//
// - Index check: before the gather/scatter, one block reads the dense index
//   and finds its first out-of-range value (a block-wide atomicMin in shared
//   memory); thread 0 then claims the device and writes the position and
//   the value into the pinned record of ember/core/cuda/index_error.h, which the
//   host raises as the CPU's error at its next wait or index check. The host
//   never waits for the check, and there is no device assert: the process
//   and its CUDA context keep working after the error. The check is one
//   block of 1024 threads, which serializes the stream for the time one SM
//   takes to read the index (not measured for indices of millions of
//   values; labels and token batches of thousands are what it serves).
// - Gather: one thread per output element, operand offsets from the linear
//   index (32-bit math when every offset fits); elements are moved as raw
//   bytes, so one kernel serves every dtype of a size. The row pattern
//   (embedding, index_select along the outer dim of a contiguous tensor:
//   dense output rows, dense input rows, one index per row) moves 16-byte
//   vectors with a 2-D grid, x over a row's vectors and y over rows. An
//   out-of-range index (the check has recorded it) gathers zeros.
// - Scatter-add: one thread per src element, atomicAdd into the target:
//   native for float, double, int32, __half and __nv_bfloat16 (sm_90 has
//   atom.add.noftz.{f16,bf16}); int64 through the unsigned 64-bit atomic
//   (two's complement wraps like the CPU's add); bool stores true where src
//   is true (the CPU's `or`), a race between equal stores. An out-of-range
//   index adds nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "ember/core/cuda/index_error.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

// ---------------------------------------------------------------- kernels

constexpr unsigned long long kNoBadIndex = ~0ull;
constexpr int kCheckThreads = 1024;

template <typename I>
__global__ void __launch_bounds__(kCheckThreads)
    check_index_kernel(const I* index, int64_t n, int64_t dim_size, IndexCheckTarget target) {
  __shared__ unsigned long long first_bad;
  if (threadIdx.x == 0) first_bad = kNoBadIndex;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kCheckThreads) {
    const int64_t v = int64_t(index[i]);
    if (v < 0 || v >= dim_size) {
      atomicMin(&first_bad, static_cast<unsigned long long>(i));
      break;  // this thread's later positions are larger
    }
  }
  __syncthreads();
  if (threadIdx.x != 0 || first_bad == kNoBadIndex) return;
  if (atomicCAS(target.claim, 0ull, target.id) != 0ull) return;  // an earlier error is still to be raised
  target.record->position = static_cast<long long>(first_bad);
  target.record->value = static_cast<long long>(index[first_bad]);
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(&target.record->id) = target.id;
}

// Offsets of the three operands of element i of the iteration.
template <typename Index>
__device__ __forceinline__ void operand_offsets(const ElementwiseArgs& a, Index i, Index (&off)[3]) {
  off[0] = off[1] = off[2] = 0;
  Index rem = i;
#pragma unroll
  for (int d = kMaxElementwiseDims - 1; d >= 0; --d) {
    if (d >= a.ndim) continue;
    const Index size = Index(a.sizes[d]);
    const Index idx = rem % size;
    rem /= size;
#pragma unroll
    for (int k = 0; k < 3; ++k) off[k] += idx * Index(a.strides[k][d]);
  }
}

// out[p] = x[p; dim <- index[p]]; R is an unsigned type of the element's size.
template <typename R, typename I, typename Index>
__global__ void gather_kernel(const IndexArgs a) {
  const Index i = Index(blockIdx.x) * kBlock + Index(threadIdx.x);
  if (int64_t(i) >= a.iter.numel) return;
  Index off[3];
  operand_offsets(a.iter, i, off);
  const int64_t index = int64_t(reinterpret_cast<const I*>(a.iter.data[2])[off[2]]);
  const R* x = reinterpret_cast<const R*>(a.iter.data[1]);
  const bool valid = index >= 0 && index < a.dim_size;
  reinterpret_cast<R*>(a.iter.data[0])[off[0]] = valid ? x[int64_t(off[1]) + index * a.dim_stride] : R(0);
}

// The row pattern, in 16-byte vectors: out row r = x row index[r].
struct RowGather {
  uint4* out;
  const uint4* x;
  const void* index;
  int64_t rows;
  int64_t row_vecs;        // vectors per row
  int64_t out_row_stride;  // in vectors
  int64_t x_row_stride;    // in vectors (the indexed dim's stride)
  int64_t index_stride;    // in elements of the index
  int64_t dim_size;        // valid rows: [0, dim_size)
};

template <typename I>
__global__ void gather_rows_kernel(const RowGather g) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= g.row_vecs) return;
  const I* index = static_cast<const I*>(g.index);
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < g.rows; r += step) {
    const int64_t row = int64_t(index[r * g.index_stride]);
    const bool valid = row >= 0 && row < g.dim_size;
    g.out[r * g.out_row_stride + col] = valid ? g.x[row * g.x_row_stride + col] : make_uint4(0, 0, 0, 0);
  }
}

template <typename T>
__device__ __forceinline__ void atomic_add(T* dst, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v) *dst = true;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(dst), __ushort_as_half(v.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(dst), __ushort_as_bfloat16(v.bits));
  } else {
    atomicAdd(dst, v);  // float, double, int32
  }
}

// x[p; dim <- index[p]] += src[p], one thread per element of src's iteration.
template <typename T, typename I, typename Index>
__global__ void scatter_add_kernel(const IndexArgs a) {
  const Index i = Index(blockIdx.x) * kBlock + Index(threadIdx.x);
  if (int64_t(i) >= a.iter.numel) return;
  Index off[3];
  operand_offsets(a.iter, i, off);
  const int64_t index = int64_t(reinterpret_cast<const I*>(a.iter.data[2])[off[2]]);
  if (index < 0 || index >= a.dim_size) return;
  T* dst = reinterpret_cast<T*>(a.iter.data[0]) + (int64_t(off[0]) + index * a.dim_stride);
  atomic_add(dst, reinterpret_cast<const T*>(a.iter.data[1])[off[1]]);
}

// ---------------------------------------------------------------- launchers

// Queues the check of every index value against [0, dim_size) (see the top
// of this file); raises an error found by an earlier check, and under
// EMBER_LAUNCH_BLOCKING=1 this one's.
template <typename I>
void check_indices(const IndexArgs& a, cudaStream_t stream) {
  raise_pending_index_error();
  if (a.index_numel == 0) return;
  const IndexCheckTarget target = begin_index_check(a.device, a.op, a.dim, a.dim_size);
  check_index_kernel<I>
      <<<1, kCheckThreads, 0, stream>>>(static_cast<const I*>(a.index), a.index_numel, a.dim_size, target);
  EMBER_CUDA_CHECK_LAUNCH();
  raise_pending_index_error();
}

template <typename F>
void dispatch_element_size(DType dtype, const char* op, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<unsigned long long>();
  }
  EMBER_FAIL(op << ": no gather kernel for elements of " << dtype_size(dtype) << " bytes (" << dtype_name(dtype)
                << ")");
}

// The row pattern of a gather, if a.iter has it with 16-byte aligned rows:
// coalesced sizes [rows, cols] (or [cols] for one row), out and x dense
// along cols, x restrided (stride 0) along rows, the index constant along
// cols.
bool row_gather(const IndexArgs& a, RowGather& g) {
  const ElementwiseArgs& it = a.iter;
  const int64_t elem = int64_t(dtype_size(a.dtype));
  const int c = it.ndim - 1;
  if (it.ndim > 2 || it.strides[0][c] != 1 || it.strides[1][c] != 1 || it.strides[2][c] != 0) return false;
  if (it.ndim == 2 && it.strides[1][0] != 0) return false;
  const int64_t cols = it.sizes[c];
  g.rows = it.ndim == 2 ? it.sizes[0] : 1;
  const int64_t out_stride = it.ndim == 2 ? it.strides[0][0] : 0;
  g.index_stride = it.ndim == 2 ? it.strides[2][0] : 0;
  if ((cols * elem) % 16 != 0 || (out_stride * elem) % 16 != 0 || (a.dim_stride * elem) % 16 != 0) return false;
  if (!aligned16(it.data[0]) || !aligned16(it.data[1])) return false;
  g.out = reinterpret_cast<uint4*>(it.data[0]);
  g.x = reinterpret_cast<const uint4*>(it.data[1]);
  g.index = it.data[2];
  g.row_vecs = cols * elem / 16;
  g.out_row_stride = out_stride * elem / 16;
  g.x_row_stride = a.dim_stride * elem / 16;
  g.dim_size = a.dim_size;
  return true;
}

template <typename I>
void launch_gather_rows(const RowGather& g, cudaStream_t stream) {
  // x: a power of two >= the row's vectors (up to the block); y: rows.
  unsigned tx = 1;
  while (tx < unsigned(std::min<int64_t>(g.row_vecs, kBlock))) tx *= 2;
  const unsigned ty = unsigned(kBlock) / tx;
  const int64_t grid_x = (g.row_vecs + tx - 1) / tx;
  const int64_t grid_y = std::min<int64_t>((g.rows + ty - 1) / ty, 65535);
  gather_rows_kernel<I><<<dim3(unsigned(grid_x), unsigned(grid_y)), dim3(tx, ty), 0, stream>>>(g);
  EMBER_CUDA_CHECK_LAUNCH();
}

void gather_cuda(const IndexArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    check_indices<I>(a, stream);
    if (a.iter.numel == 0) return;
    RowGather rows;
    if (row_gather(a, rows)) return launch_gather_rows<I>(rows, stream);
    const unsigned blocks = unsigned((a.iter.numel + kBlock - 1) / kBlock);
    const bool small = max_offset(a.iter) <= INT32_MAX;
    dispatch_element_size(a.dtype, a.op, [&]<typename R>() {
      if (small) gather_kernel<R, I, uint32_t><<<blocks, kBlock, 0, stream>>>(a);
      else gather_kernel<R, I, int64_t><<<blocks, kBlock, 0, stream>>>(a);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void scatter_add_cuda(const IndexArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    check_indices<I>(a, stream);
    if (a.iter.numel == 0) return;
    const unsigned blocks = unsigned((a.iter.numel + kBlock - 1) / kBlock);
    const bool small = max_offset(a.iter) <= INT32_MAX;
    EMBER_DISPATCH_DTYPE(a.dtype, a.op, [&]<typename T>() {
      if (small) scatter_add_kernel<T, I, uint32_t><<<blocks, kBlock, 0, stream>>>(a);
      else scatter_add_kernel<T, I, int64_t><<<blocks, kBlock, 0, stream>>>(a);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(gather_stub, DeviceType::CUDA, gather_cuda);
EMBER_REGISTER_KERNEL(scatter_add_stub, DeviceType::CUDA, scatter_add_cuda);

}  // namespace ember::cuda
