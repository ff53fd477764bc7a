// CUDA kernels of the fused cross-entropy loss (contract in
// ember/core/ops/cross_entropy_kernels.h).
//
// Forward, two kernels: rows_kernel gives each row a warp (up to
// kWarpClasses classes) or a block, which finds the row max, then sums
// exp(x - max) and x - max, and writes lse and the row's loss (into out for
// reduction None, else into a scratch array); finish_kernel, one block,
// walks every target once: it counts the rows kept (int64), sums their
// losses (double, a fixed tree: deterministic), writes count and the
// reduced loss, and reports
// the first bad target (the lowest row) through the index-error record of
// ember/core/cuda/index_error.h, as ember/kernels/cuda/index.cu's check does. Rows with
// a bad target count as ignored meanwhile.
// Backward, one kernel: a thread per logit, 32-bit index math where it fits.
#include <algorithm>
#include <cmath>

#include "ember/core/cuda/index_error.h"
#include "ember/core/ops.h"
#include "ember/core/ops/cross_entropy_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpClasses = 1024;
constexpr int kFinishThreads = 1024;
constexpr unsigned long long kNoBadTarget = ~0ull;

template <typename I>
__device__ __forceinline__ bool kept_target(const CrossEntropyArgs& a, I t) {
  return int64_t(t) != a.ignore_index && t >= 0 && int64_t(t) < a.c;
}

// The row's loss from its max m, sum of exp(x - m) and sum of (x - m).
template <typename T, typename I, typename O, typename S>
__device__ __forceinline__ void write_row(const CrossEntropyArgs& a, int64_t i, S m, S sum_exp, S sum_shifted,
                                          S* row_loss) {
  const S log_sum = ::log(sum_exp), e = S(a.smoothing), c = S(a.c);
  static_cast<S*>(a.lse)[i] = m + log_sum;
  const I t = static_cast<const I*>(a.target)[i];
  S loss = 0;
  if (kept_target(a, t)) {
    const S xt = S(to_acc(static_cast<const T*>(a.logits)[i * a.c + int64_t(t)]));
    loss = (S(1) - e) * (log_sum - (xt - m)) + e / c * (c * log_sum - sum_shifted);
  }
  if (a.reduction == int(Reduction::None)) {
    static_cast<O*>(a.out)[i] = from_acc<O>(acc_t<O>(loss));
  } else {
    row_loss[i] = loss;
  }
}

template <typename S>
__device__ __forceinline__ S max_nan(S m, S v) {
  return (m == m && (v > m || v != v)) ? v : m;  // a NaN, once the max, stays
}

template <typename T, typename I, typename O>
__global__ void warp_rows_kernel(CrossEntropyArgs a, acc_t<T>* row_loss) {
  using S = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t i = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (i >= a.n) return;  // whole warps leave together
  const T* row = static_cast<const T*>(a.logits) + i * a.c;
  S m = -INFINITY;
  for (int64_t j = lane; j < a.c; j += 32) m = max_nan(m, S(to_acc(row[j])));
  m = warp_max(m);
  S sum_exp = 0, sum_shifted = 0;
  for (int64_t j = lane; j < a.c; j += 32) {
    const S shifted = S(to_acc(row[j])) - m;
    sum_exp += ::exp(shifted);
    sum_shifted += shifted;
  }
  sum_exp = warp_sum(sum_exp);
  sum_shifted = warp_sum(sum_shifted);
  if (lane == 0) write_row<T, I, O, S>(a, i, m, sum_exp, sum_shifted, row_loss);
}

template <typename T, typename I, typename O>
__global__ void block_rows_kernel(CrossEntropyArgs a, acc_t<T>* row_loss) {
  using S = acc_t<T>;
  __shared__ S shared[32];
  const int64_t i = blockIdx.x;
  const T* row = static_cast<const T*>(a.logits) + i * a.c;
  S m = -INFINITY;
  for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) m = max_nan(m, S(to_acc(row[j])));
  m = block_max(m, shared, S(-INFINITY));
  S sum_exp = 0, sum_shifted = 0;
  for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
    const S shifted = S(to_acc(row[j])) - m;
    sum_exp += ::exp(shifted);
    sum_shifted += shifted;
  }
  sum_exp = block_sum(sum_exp, shared);
  sum_shifted = block_sum(sum_shifted, shared);
  if (threadIdx.x == 0) write_row<T, I, O, S>(a, i, m, sum_exp, sum_shifted, row_loss);
}

template <typename T, typename I, typename O>
__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(CrossEntropyArgs a, const acc_t<T>* row_loss, IndexCheckTarget check) {
  using S = acc_t<T>;
  // The count in 64-bit integers and the losses in double: exact counts and
  // no small loss rounded away however many rows there are.
  __shared__ long long shared_count[32];
  __shared__ double shared_total[32];
  __shared__ unsigned long long first_bad;
  if (threadIdx.x == 0) first_bad = kNoBadTarget;
  __syncthreads();
  const I* t = static_cast<const I*>(a.target);
  long long kept = 0;
  double total = 0;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
    const I v = t[i];
    if (kept_target(a, v)) {
      kept += 1;
      if (row_loss) total += double(row_loss[i]);
    } else if (int64_t(v) != a.ignore_index) {
      atomicMin(&first_bad, static_cast<unsigned long long>(i));
    }
  }
  kept = block_sum(kept, shared_count);
  total = block_sum(total, shared_total);  // block_sum synchronizes: first_bad is final
  if (threadIdx.x != 0) return;
  *static_cast<S*>(a.count) = S(kept);
  if (a.reduction == int(Reduction::Sum)) *static_cast<O*>(a.out) = from_acc<O>(acc_t<O>(S(total)));
  if (a.reduction == int(Reduction::Mean)) {
    *static_cast<O*>(a.out) = from_acc<O>(acc_t<O>(S(total / double(kept))));
  }
  if (first_bad == kNoBadTarget) return;
  if (atomicCAS(check.claim, 0ull, check.id) != 0ull) return;  // an earlier error is still to be raised
  check.record->position = static_cast<long long>(first_bad);
  check.record->value = static_cast<long long>(t[first_bad]);
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(&check.record->id) = check.id;
}

template <typename T, typename I, typename O, typename Index>
__global__ void backward_kernel(CrossEntropyArgs a) {
  using S = acc_t<T>;
  const Index total = Index(a.n) * Index(a.c), c = Index(a.c);
  const S e = S(a.smoothing), uniform = e / S(a.c);
  const S scale = a.reduction == int(Reduction::Mean) ? S(1) / *static_cast<const S*>(a.count) : S(1);
  const T* x = static_cast<const T*>(a.logits);
  const I* t = static_cast<const I*>(a.target);
  const S* lse = static_cast<const S*>(a.lse);
  const O* grad = static_cast<const O*>(a.grad);
  T* dx = static_cast<T*>(a.grad_logits);
  for (Index k = Index(blockIdx.x) * kThreads + threadIdx.x; k < total; k += Index(gridDim.x) * kThreads) {
    const Index i = k / c, j = k - i * c;
    const I target = t[i];
    S d = 0;
    if (kept_target(a, target)) {
      const S w = S(to_acc(grad[a.reduction == int(Reduction::None) ? i : 0])) * scale;
      const S p = ::exp(S(to_acc(x[k])) - lse[i]);
      d = w * (p - (int64_t(j) == int64_t(target) ? S(1) - e : S(0)) - uniform);
    }
    dx[k] = from_acc<T>(acc_t<T>(d));
  }
}

unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

void forward(const CrossEntropyArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "cross_entropy", [&]<typename T>() {
    dispatch_index(a.target_dtype, "cross_entropy", [&]<typename I>() {
      dispatch_same_or_float32<T>(a.dtype, a.out_dtype, "cross_entropy", [&]<typename O>() {
        using S = acc_t<T>;
        raise_pending_index_error();
        Tensor row_loss;
        if (a.reduction != int(Reduction::None)) {
          row_loss = empty({a.n}, cross_entropy_stats_dtype(a.dtype), cuda_device(a.device));
        }
        S* losses = row_loss.defined() ? static_cast<S*>(row_loss.data_ptr()) : nullptr;
        if (a.c <= kWarpClasses) {
          const int64_t rows_per_block = kThreads / 32;
          const unsigned blocks = unsigned((a.n + rows_per_block - 1) / rows_per_block);
          warp_rows_kernel<T, I, O><<<blocks, kThreads, 0, stream>>>(a, losses);
        } else {
          block_rows_kernel<T, I, O><<<unsigned(a.n), kThreads, 0, stream>>>(a, losses);
        }
        EMBER_CUDA_CHECK_LAUNCH();
        const IndexCheckTarget check = begin_index_check(a.device, "cross_entropy", 1, a.c);
        finish_kernel<T, I, O><<<1, kFinishThreads, 0, stream>>>(a, losses, check);
        EMBER_CUDA_CHECK_LAUNCH();
        raise_pending_index_error();
      });
    });
  });
}

void backward(const CrossEntropyArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "cross_entropy_backward", [&]<typename T>() {
    dispatch_index(a.target_dtype, "cross_entropy_backward", [&]<typename I>() {
      dispatch_same_or_float32<T>(a.dtype, a.out_dtype, "cross_entropy", [&]<typename O>() {
        const int64_t total = a.n * a.c;
        if (total < INT32_MAX - (int64_t(1) << 28)) {
          backward_kernel<T, I, O, uint32_t><<<grid_for(total), kThreads, 0, stream>>>(a);
        } else {
          backward_kernel<T, I, O, int64_t><<<grid_for(total), kThreads, 0, stream>>>(a);
        }
        EMBER_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_entropy_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(cross_entropy_backward_stub, DeviceType::CUDA, backward);

}  // namespace ember::cuda
