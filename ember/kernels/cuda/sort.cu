// CUDA kernels of the ordering family (contract in ember/core/ops/sort_kernels.h).
//
// sort: each value becomes an unsigned radix key whose unsigned order is the
// family's order (NaN the largest key, -0.0 the key of 0.0; every key
// complemented for descending, so ties still keep their input order), then a
// stable radix sort orders (key, index) pairs within each row:
// - 32-bit keys (float32, the half types as float, int32, bool): one
//   cub::DeviceRadixSort over every row at once, of the 64-bit keys
//   (row << 32 | key), so a few long rows use the whole GPU as well as many
//   short ones do.
// - 64-bit keys (float64, int64): cub::DeviceSegmentedSort::StableSortPairs,
//   one segment per row.
// topk (k < n) sorts whole rows into a workspace and copies the first k of
// each: a full sort, not a selection.
// searchsorted: a thread per value, binary search in its sorted row.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/sort_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {
namespace {

template <typename T>
using radix_key_t = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

// The unsigned key of v: key(a) < key(b) exactly when a comes first.
template <typename T>
__device__ __forceinline__ radix_key_t<T> radix_key(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1u : 0u;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return uint32_t(v) ^ 0x80000000u;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return uint64_t(v) ^ 0x8000000000000000ull;
  } else if constexpr (std::is_same_v<T, double>) {
    if (isnan(v)) return ~0ull;
    const uint64_t u = __double_as_longlong(v == 0.0 ? 0.0 : v);
    return (u >> 63) ? ~u : u | 0x8000000000000000ull;
  } else {
    const float f = to_acc(v);
    if (isnan(f)) return ~0u;
    const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (u >> 31) ? ~u : u | 0x80000000u;
  }
}

// Keys and in-row indices of (rows, n) values; row offsets for the sort.
template <typename T>
__global__ void __launch_bounds__(256)
    radix_keys_kernel(const T* __restrict__ x, radix_key_t<T>* __restrict__ keys, int64_t* __restrict__ index,
                      int64_t* __restrict__ offsets, int64_t rows, int64_t n, bool descending) {
  const int64_t total = rows * n;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += int64_t(gridDim.x) * blockDim.x) {
    const radix_key_t<T> key = radix_key(x[p]);
    keys[p] = descending ? radix_key_t<T>(~key) : key;
    const int64_t j = p % n;
    index[p] = j;
    if (j == 0) offsets[p / n] = p;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) offsets[rows] = total;
}

// 32-bit orders: the keys (row << 32 | key) and in-row indices.
template <typename T>
__global__ void __launch_bounds__(256)
    row_keys_kernel(const T* __restrict__ x, uint64_t* __restrict__ keys, int64_t* __restrict__ index, int64_t rows,
                    int64_t n, bool descending) {
  const int64_t total = rows * n;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t key = radix_key(x[p]);
    keys[p] = (uint64_t(p / n) << 32) | (descending ? ~key : key);
    index[p] = p % n;
  }
}

// Sorts (rows, n) into index_out (rows, n) with one radix sort of 64-bit
// keys whose high bits are the row.
template <typename T>
void sort_rows_at_once(const SortArgs& a, int64_t* index_out, cudaStream_t stream) {
  const int64_t total = a.rows * a.n;
  Workspace keys_in = workspace_for<uint64_t>(total, a.device), keys_out = workspace_for<uint64_t>(total, a.device);
  Workspace index_in = workspace_for<int64_t>(total, a.device);
  row_keys_kernel<T><<<grid_size(ceil_div(total, 256)), 256, 0, stream>>>(
      static_cast<const T*>(a.in), keys_in.as<uint64_t>(), index_in.as<int64_t>(), a.rows, a.n, a.descending);
  EMBER_CUDA_CHECK_LAUNCH();
  int end_bit = 32;
  while (end_bit < 64 && (uint64_t(a.rows - 1) >> (end_bit - 32)) != 0) ++end_bit;
  size_t temp_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.as<uint64_t>(), keys_out.as<uint64_t>(),
                                                   index_in.as<int64_t>(), index_out, total, 0, end_bit, stream));
  Workspace temp(temp_bytes, a.device);
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in.as<uint64_t>(),
                                                   keys_out.as<uint64_t>(), index_in.as<int64_t>(), index_out, total, 0,
                                                   end_bit, stream));
}

// Sorts (rows, n) into index_out (rows, n), a segment per row.
template <typename T>
void sort_segments(const SortArgs& a, int64_t* index_out, cudaStream_t stream) {
  using K = radix_key_t<T>;
  const int64_t total = a.rows * a.n;
  Workspace keys_in = workspace_for<K>(total, a.device), keys_out = workspace_for<K>(total, a.device);
  Workspace index_in = workspace_for<int64_t>(total, a.device);
  Workspace offsets = workspace_for<int64_t>(a.rows + 1, a.device);
  radix_keys_kernel<T><<<grid_size(ceil_div(total, 256)), 256, 0, stream>>>(
      static_cast<const T*>(a.in), keys_in.as<K>(), index_in.as<int64_t>(), offsets.as<int64_t>(), a.rows, a.n,
      a.descending);
  EMBER_CUDA_CHECK_LAUNCH();
  const int64_t* begin = offsets.as<int64_t>();
  size_t temp_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp_bytes, keys_in.as<K>(), keys_out.as<K>(),
                                                             index_in.as<int64_t>(), index_out, total, a.rows, begin,
                                                             begin + 1, stream));
  Workspace temp(temp_bytes, a.device);
  EMBER_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp.data(), temp_bytes, keys_in.as<K>(), keys_out.as<K>(),
                                                             index_in.as<int64_t>(), index_out, total, a.rows, begin,
                                                             begin + 1, stream));
}

template <typename T>
void sort_rows(const SortArgs& a) {
  cudaStream_t stream = current_stream(a.device).handle();
  Workspace sorted_index;  // whole rows, when only k of them are kept
  int64_t* index_out = a.out;
  if (a.k < a.n) {
    sorted_index = workspace_for<int64_t>(a.rows * a.n, a.device);
    index_out = sorted_index.as<int64_t>();
  }
  if constexpr (sizeof(radix_key_t<T>) == 4) sort_rows_at_once<T>(a, index_out, stream);
  else sort_segments<T>(a, index_out, stream);
  if (a.k < a.n) {
    EMBER_CUDA_CHECK(cudaMemcpy2DAsync(a.out, size_t(a.k) * sizeof(int64_t), index_out, size_t(a.n) * sizeof(int64_t),
                                       size_t(a.k) * sizeof(int64_t), size_t(a.rows), cudaMemcpyDeviceToDevice,
                                       stream));
  }
}

template <typename T>
__global__ void __launch_bounds__(256)
    searchsorted_kernel(const T* __restrict__ sorted, const T* __restrict__ values, int64_t* __restrict__ out,
                        int64_t rows_sorted, int64_t n, int64_t rows, int64_t m, bool right) {
  const int64_t total = rows * m;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += int64_t(gridDim.x) * blockDim.x) {
    const T* row = sorted + (rows_sorted == 1 ? 0 : p / m) * n;
    const auto v = radix_key(values[p]);
    int64_t lo = 0, hi = n;  // the answer lies in [lo, hi]
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      const auto s = radix_key(row[mid]);
      if (right ? s <= v : s < v) lo = mid + 1;
      else hi = mid;
    }
    out[p] = lo;
  }
}

void sort_cuda(const SortArgs& a) {
  if (a.rows == 0 || a.k == 0) return;
  DeviceGuard guard(a.device);
  EMBER_DISPATCH_DTYPE(a.dtype, "sort", [&]<typename T>() { sort_rows<T>(a); });
}

void searchsorted_cuda(const SearchSortedArgs& a) {
  if (a.rows == 0 || a.m == 0) return;
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_DTYPE(a.dtype, "searchsorted", [&]<typename T>() {
    searchsorted_kernel<T><<<grid_size(ceil_div(a.rows * a.m, 256)), 256, 0, stream>>>(
        static_cast<const T*>(a.sorted), static_cast<const T*>(a.values), a.out, a.rows_sorted, a.n, a.rows, a.m,
        a.right);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(sort_stub, DeviceType::CUDA, sort_cuda);
EMBER_REGISTER_KERNEL(searchsorted_stub, DeviceType::CUDA, searchsorted_cuda);

}  // namespace ember::cuda
