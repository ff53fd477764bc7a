// CUDA kernel of embedding's weight gradient (contract in
// ember/core/ops/embedding_kernels.h): a sort and a segmented sum instead of
// one atomic add per element, so repeated indices (every token batch has
// them) add in a fixed order and hot rows see no contention.
//
// - Keys: each index becomes a 32-bit key (num_embeddings for one outside
//   the range, so it sorts after every row and is left out), paired with
//   its position. cub::DeviceRadixSort::SortPairs orders the pairs by key
//   over the bits num_embeddings needs; the radix sort is stable, so the
//   positions of each row stay ascending.
// - Row bounds: a thread per row r in [0, num_embeddings] finds by binary
//   search the first sorted slot whose key is >= r, so row r's positions
//   are the slots [first[r], first[r + 1]).
// - Sums: a warp per (row, 32 columns), a column per thread, adds its
//   positions' grad_out elements in slot order (= position order) in acc_t
//   and writes the row once; a row without positions gets zeros. Every
//   element of grad_weight is written, so it needs no zero fill. Columns are
//   the only parallelism within a row (the order of the adds is fixed), so
//   a row named by thousands of positions takes a warp thousands of
//   sequential loads per column chunk.
// - Scratch (keys, positions, row bounds, cub's temporary storage) comes
//   from the caching allocator on the current stream and nothing waits for
//   the device, so the whole sequence can be captured in a CUDA graph (run
//   it once before capturing: cub's first use on a device does setup).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>

#include "ember/core/cuda/index_error.h"
#include "ember/core/ops/embedding_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {
namespace {

// ---------------------------------------------------------------- kernels

constexpr int kThreads = 256;

// keys[p] = indices[p] (num_embeddings when outside [0, num_embeddings)),
// positions[p] = p.
template <typename I>
__global__ void __launch_bounds__(kThreads)
    sort_keys_kernel(const I* __restrict__ indices, uint32_t* __restrict__ keys, int32_t* __restrict__ positions,
                     int64_t n, int64_t num_embeddings) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = int64_t(indices[p]);
    keys[p] = uint32_t(v >= 0 && v < num_embeddings ? v : num_embeddings);
    positions[p] = int32_t(p);
  }
}

// first[r] = the first slot of the ascending keys[0, n) whose key is >= r,
// for r in [0, num_embeddings].
__global__ void __launch_bounds__(kThreads) row_bounds_kernel(const uint32_t* __restrict__ keys, int32_t n,
                                                              int32_t* __restrict__ first, int64_t num_embeddings) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r <= num_embeddings;
       r += int64_t(gridDim.x) * blockDim.x) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (int64_t(keys[mid]) < r) lo = mid + 1;
      else hi = mid;
    }
    first[r] = lo;
  }
}

// Row `row` of grad_weight, columns of this thread: the sum of grad_out's
// rows positions[first[row]], ..., positions[first[row + 1] - 1] in that
// order. Block (x: columns, y: rows); grid (x: row groups, y: column chunks).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_rows_kernel(T* __restrict__ grad_weight, const T* __restrict__ grad_out, int64_t row_stride, int64_t col_stride,
                    const int32_t* __restrict__ positions, const int32_t* __restrict__ first, int64_t num_embeddings,
                    int64_t dim) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= num_embeddings) return;
  const int32_t begin = first[row], end = first[row + 1];
  for (int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; c < dim; c += int64_t(gridDim.y) * blockDim.x) {
    const T* column = grad_out + c * col_stride;
    acc_t<T> sum = 0;
#pragma unroll 4
    for (int32_t i = begin; i < end; ++i) sum += to_acc(column[int64_t(positions[i]) * row_stride]);
    grad_weight[row * dim + c] = from_acc<T>(sum);
  }
}

// ---------------------------------------------------------------- launchers

// Sorts the (key, position) pairs of the indices into sorted_positions and
// writes each row's first slot into first (num_embeddings + 1 values).
template <typename I>
void group_positions(const EmbeddingBackwardArgs& a, int32_t* sorted_positions, int32_t* first, cudaStream_t stream) {
  const int32_t n = int32_t(a.num_indices);
  Workspace keys_in = workspace_for<uint32_t>(n, a.device), keys_out = workspace_for<uint32_t>(n, a.device);
  Workspace positions_in = workspace_for<int32_t>(n, a.device);
  if (n > 0) {
    sort_keys_kernel<I><<<grid_size(ceil_div(n, kThreads)), kThreads, 0, stream>>>(
        static_cast<const I*>(a.indices), keys_in.as<uint32_t>(), positions_in.as<int32_t>(), n, a.num_embeddings);
    EMBER_CUDA_CHECK_LAUNCH();
    // Keys lie in [0, num_embeddings]: the bits of num_embeddings suffice.
    const int end_bit = std::bit_width(uint64_t(a.num_embeddings));
    size_t temp_bytes = 0;
    EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.as<uint32_t>(),
                                                     keys_out.as<uint32_t>(), positions_in.as<int32_t>(),
                                                     sorted_positions, n, 0, end_bit, stream));
    Workspace temp(temp_bytes, a.device);
    EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in.as<uint32_t>(),
                                                     keys_out.as<uint32_t>(), positions_in.as<int32_t>(),
                                                     sorted_positions, n, 0, end_bit, stream));
  }
  row_bounds_kernel<<<grid_size(ceil_div(a.num_embeddings + 1, kThreads)), kThreads, 0, stream>>>(
      keys_out.as<uint32_t>(), n, first, a.num_embeddings);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_sum_rows(const EmbeddingBackwardArgs& a, const int32_t* sorted_positions, const int32_t* first,
                     cudaStream_t stream) {
  // x: a warp's columns (fewer for narrow rows), y: rows.
  const unsigned tx = unsigned(std::min<int64_t>(pow2_ceil(a.dim), 32));
  const unsigned ty = unsigned(kThreads) / tx;
  const dim3 grid(grid_size(ceil_div(a.num_embeddings, ty)), unsigned(std::min<int64_t>(ceil_div(a.dim, tx), 65535)));
  sum_rows_kernel<T><<<grid, dim3(tx, ty), 0, stream>>>(
      static_cast<T*>(a.grad_weight), static_cast<const T*>(a.grad_out), a.grad_out_row_stride, a.grad_out_col_stride,
      sorted_positions, first, a.num_embeddings, a.dim);
  EMBER_CUDA_CHECK_LAUNCH();
}

void embedding_backward_cuda(const EmbeddingBackwardArgs& a) {
  EMBER_CHECK(a.num_indices <= INT32_MAX && a.num_embeddings < int64_t(UINT32_MAX),
              a.op << ": the CUDA weight gradient takes at most " << INT32_MAX << " indices and " << UINT32_MAX - 1
                   << " embeddings, got " << a.num_indices << " indices into " << a.num_embeddings
                   << " embeddings; split the batch");
  if (a.num_embeddings == 0 || a.dim == 0) return;
  DeviceGuard guard(a.device);
  raise_pending_index_error();
  cudaStream_t stream = current_stream(a.device).handle();
  Workspace sorted_positions = workspace_for<int32_t>(a.num_indices, a.device);
  Workspace first = workspace_for<int32_t>(a.num_embeddings + 1, a.device);
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    group_positions<I>(a, sorted_positions.as<int32_t>(), first.as<int32_t>(), stream);
  });
  EMBER_DISPATCH_FLOAT(a.dtype, a.op, [&]<typename T>() {
    launch_sum_rows<T>(a, sorted_positions.as<int32_t>(), first.as<int32_t>(), stream);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(embedding_backward_stub, DeviceType::CUDA, embedding_backward_cuda);

}  // namespace ember::cuda
