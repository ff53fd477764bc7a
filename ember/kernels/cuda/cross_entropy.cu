// CUDA kernels of the fused cross-entropy loss (contract in
// ember/core/ops/cross_entropy_kernels.h).
//
// Each logit crosses the memory bus once in the forward and once in the
// backward, in the logits' own dtype (16-bit logits are never widened in
// memory), as llm.c's fused classifier; rows are read in 16-byte vectors
// (an unaligned head and tail element by element).
// Forward, two kernels: rows_kernel gives each row a warp (up to
// kWarpClasses classes) or a block, which in one pass keeps the running max
// m with the sum of exp(x - m) (rescaled when m grows) and the sum of
// x - x_0 (x_0 the row's first logit: a shift known before the pass, so the
// label-smoothing sum needs no second one), and writes lse and the row's
// loss (into out for reduction None, else into a scratch array);
// finish_kernel, one block, walks every target once: it counts the rows
// kept (int64), sums their losses (double, a fixed tree: deterministic),
// writes count and the reduced loss, and reports the first bad target (the
// lowest row) through the index-error record of ember/core/cuda/index_error.h,
// as ember/kernels/cuda/index.cu's check does. Rows with a bad target count
// as ignored meanwhile.
// Backward, one kernel: a warp or a block per row, as the forward, reading
// the row's target, lse and weight once and then its logits as vectors.
//
// Why the backward recomputes softmax from the saved lse rather than the
// forward storing softmax(x) - onehot for it to scale: the gradient's scale
// (the incoming grad) is known only in the backward, so a stored gradient
// costs a write of n x c values in the forward, keeps that buffer alive
// until the backward, and is read and written again there (four passes over
// n x c values); recomputing costs one read in the forward and a read and a
// write in the backward (three), with only n floats kept.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ember/core/cuda/index_error.h"
#include "ember/core/ops.h"
#include "ember/core/ops/cross_entropy_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/vector_access.cuh"

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

// Elements of row before its first 16-byte boundary (all of them when c is
// smaller): the head read element by element.
template <typename T>
__device__ __forceinline__ int64_t row_head(const T* row, int64_t c) {
  const int64_t to_boundary = int64_t((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T));
  return to_boundary < c ? to_boundary : c;
}

// Calls f(j, x_j) for the elements j of row that thread `lane` of `width`
// threads owns: the head and tail one by one, the body as 16-byte vectors.
template <typename T, typename F>
__device__ __forceinline__ void for_each_in_row(const T* row, int64_t c, int lane, int width, F&& f) {
  constexpr int N = kVecWidth<T>;
  const int64_t head = row_head(row, c), vecs = (c - head) / N;
  for (int64_t j = lane; j < head; j += width) f(j, row[j]);
  for (int64_t v = lane; v < vecs; v += width) {
    const int64_t j = head + v * N;
    const Vec<T, N> x = load_vec<T, N>(row + j);
#pragma unroll
    for (int k = 0; k < N; ++k) f(j + k, x.v[k]);
  }
  for (int64_t j = head + vecs * N + lane; j < c; j += width) f(j, row[j]);
}

template <typename S>
__device__ __forceinline__ bool becomes_max(S m, S v) {
  return m == m && (v > m || v != v);  // a NaN, once the max, stays
}

// A row's statistics in one pass: the running max m, the sum of exp(x - m)
// (rescaled whenever m grows; -inf logits add nothing, so a row that starts
// with them stays exact), and the sum of x - shift.
template <typename S>
struct RowStats {
  S m = -INFINITY, sum_exp = 0, sum_shifted = 0;

  __device__ __forceinline__ void add(S v, S shift) {
    sum_shifted += v - shift;
    if (becomes_max(m, v)) {
      sum_exp = sum_exp * ::exp(m - v) + ::exp(v - v);  // exp(v - v): NaN for an infinite or NaN max
      m = v;
    } else if (v != S(-INFINITY)) {
      sum_exp += ::exp(v - m);
    }
  }
  // The sum of exp(x - m) taken to the larger max M.
  __device__ __forceinline__ static S rescaled(S m, S sum_exp, S M) {
    return sum_exp == S(0) ? S(0) : sum_exp * ::exp(m - M);
  }
  __device__ __forceinline__ void merge(S om, S osum_exp, S osum_shifted) {
    const S M = becomes_max(m, om) ? om : m;
    sum_exp = rescaled(m, sum_exp, M) + rescaled(om, osum_exp, M);
    sum_shifted += osum_shifted;
    m = M;
  }
};

template <typename S>
__device__ __forceinline__ RowStats<S> warp_row_stats(RowStats<S> r) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    r.merge(__shfl_xor_sync(0xffffffffu, r.m, offset), __shfl_xor_sync(0xffffffffu, r.sum_exp, offset),
            __shfl_xor_sync(0xffffffffu, r.sum_shifted, offset));
  }
  return r;
}

// The shift of a row's one-pass sum of x: its first logit when finite (the
// sum then cancels no large common offset), else 0.
template <typename S>
__device__ __forceinline__ S row_shift(S x0) {
  return ::isfinite(x0) ? x0 : S(0);
}

template <typename T, typename S>
__device__ __forceinline__ RowStats<S> thread_row_stats(const T* row, int64_t c, S shift, int lane, int width) {
  RowStats<S> r;
  for_each_in_row(row, c, lane, width, [&](int64_t, T x) { r.add(S(to_acc(x)), shift); });
  return r;
}

// The row's loss from its statistics (sum_shifted taken about `shift`).
template <typename T, typename I, typename O, typename S>
__device__ __forceinline__ void write_row(const CrossEntropyArgs& a, int64_t i, const RowStats<S>& r, S shift,
                                          S* row_loss) {
  const S log_sum = ::log(r.sum_exp), e = S(a.smoothing), c = S(a.c);
  static_cast<S*>(a.lse)[i] = r.m + log_sum;
  const I t = static_cast<const I*>(a.target)[i];
  S loss = 0;
  if (kept_target(a, t)) {
    // lse - x_t = log_sum - (x_t - m); sum_j (lse - x_j) = c * log_sum - sum_j (x_j - m).
    const S xt = S(to_acc(static_cast<const T*>(a.logits)[i * a.c + int64_t(t)]));
    loss = (S(1) - e) * (log_sum - (xt - r.m));
    if (e > S(0)) loss += e / c * (c * log_sum - (r.sum_shifted + c * (shift - r.m)));
  }
  if (a.reduction == int(Reduction::None)) {
    static_cast<O*>(a.out)[i] = from_acc<O>(acc_t<O>(loss));
  } else {
    row_loss[i] = loss;
  }
}

template <typename T, typename I, typename O>
__global__ void warp_rows_kernel(CrossEntropyArgs a, acc_t<T>* row_loss) {
  using S = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t i = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (i >= a.n) return;  // whole warps leave together
  const T* row = static_cast<const T*>(a.logits) + i * a.c;
  const S shift = row_shift(S(to_acc(row[0])));
  const RowStats<S> r = warp_row_stats(thread_row_stats(row, a.c, shift, lane, 32));
  if (lane == 0) write_row<T, I, O, S>(a, i, r, shift, row_loss);
}

template <typename T, typename I, typename O>
__global__ void block_rows_kernel(CrossEntropyArgs a, acc_t<T>* row_loss) {
  using S = acc_t<T>;
  __shared__ S shared_m[32], shared_sum_exp[32], shared_sum_shifted[32];
  const int64_t i = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const T* row = static_cast<const T*>(a.logits) + i * a.c;
  const S shift = row_shift(S(to_acc(row[0])));
  RowStats<S> r = warp_row_stats(thread_row_stats(row, a.c, shift, threadIdx.x, blockDim.x));
  if (lane == 0) {
    shared_m[warp] = r.m;
    shared_sum_exp[warp] = r.sum_exp;
    shared_sum_shifted[warp] = r.sum_shifted;
  }
  __syncthreads();
  if (warp != 0) return;
  r = RowStats<S>();
  if (lane < warps) r.merge(shared_m[lane], shared_sum_exp[lane], shared_sum_shifted[lane]);
  r = warp_row_stats(r);
  if (lane == 0) write_row<T, I, O, S>(a, i, r, shift, row_loss);
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

// One row per `Width` threads (a warp or the block): dx = w * (softmax(x) -
// (1 - e) * onehot - e / c), read and written as vectors when x and dx share
// their alignment (they are both dense (n, c) blocks, so then every row's
// head is the same length).
template <typename T, typename I, typename O, int Width>
__global__ void backward_kernel(CrossEntropyArgs a) {
  using S = acc_t<T>;
  constexpr int N = kVecWidth<T>;
  const int64_t i = int64_t(blockIdx.x) * (kThreads / Width) + threadIdx.x / Width;
  const int lane = threadIdx.x % Width;
  if (i >= a.n) return;
  const T* x = static_cast<const T*>(a.logits) + i * a.c;
  T* dx = static_cast<T*>(a.grad_logits) + i * a.c;
  const I target = static_cast<const I*>(a.target)[i];
  const bool kept = kept_target(a, target);
  const S e = S(a.smoothing), uniform = e / S(a.c), lse = static_cast<const S*>(a.lse)[i];
  S w = 0;
  if (kept) {
    const S scale = a.reduction == int(Reduction::Mean) ? S(1) / *static_cast<const S*>(a.count) : S(1);
    w = S(to_acc(static_cast<const O*>(a.grad)[a.reduction == int(Reduction::None) ? i : 0])) * scale;
  }
  const int64_t t = kept ? int64_t(target) : -1;
  auto grad = [&](int64_t j, T xj) {
    if (!kept) return from_acc<T>(acc_t<T>(0));
    const S p = ::exp(S(to_acc(xj)) - lse);
    return from_acc<T>(acc_t<T>(w * (p - (j == t ? S(1) - e : S(0)) - uniform)));
  };
  const bool vectors = reinterpret_cast<uintptr_t>(a.logits) % 16 == reinterpret_cast<uintptr_t>(a.grad_logits) % 16;
  const int64_t head = vectors ? row_head(x, a.c) : a.c, vecs = vectors ? (a.c - head) / N : 0;
  for (int64_t j = lane; j < head; j += Width) dx[j] = grad(j, x[j]);
  for (int64_t v = lane; v < vecs; v += Width) {
    const int64_t j = head + v * N;
    const Vec<T, N> in = load_vec<T, N>(x + j);
    Vec<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = grad(j + k, in.v[k]);
    store_vec(dx + j, out);
  }
  for (int64_t j = head + vecs * N + lane; j < a.c; j += Width) dx[j] = grad(j, x[j]);
}

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
        if (a.c <= kWarpClasses) {
          const int64_t rows_per_block = kThreads / 32;
          const unsigned blocks = unsigned((a.n + rows_per_block - 1) / rows_per_block);
          backward_kernel<T, I, O, 32><<<blocks, kThreads, 0, stream>>>(a);
        } else {
          backward_kernel<T, I, O, kThreads><<<unsigned(a.n), kThreads, 0, stream>>>(a);
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
