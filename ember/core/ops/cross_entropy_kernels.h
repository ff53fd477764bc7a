// Kernel signatures and stubs of the fused cross-entropy loss over logits
// (N, C) and class indices (N) (the op: cross_entropy_loss in ember/core/ops.h).
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (ember/core/ops/cross_entropy.cpp) has checked shapes, dtypes
//   and devices: logits are a dense row-major (n, c) block of `dtype` (any
//   float dtype), target a dense (n) block of `target_dtype` (int64 or
//   int32), n >= 1 and c >= 1. Arithmetic is in float (double for float64),
//   the accumulation type S of the statistics.
// - Per row i with target t: ignored when t == ignore_index. Otherwise t
//   must lie in [0, c): the CPU kernel checks every target before it writes
//   anything and throws the error of index_out_of_range (ember/core/ops/
//   index_kernels.h, op "cross_entropy", dim 1, size c) for the first bad
//   one; the CUDA kernels find the first bad one on the device and report it
//   as the index checks of ember/core/cuda/index_error.h do (raised by the next
//   call that waits for the device), treating its row as ignored meanwhile.
// - out and grad are of out_dtype: `dtype`, or float32 for float16 and
//   bfloat16 logits (the loss of half logits under autocast, which runs in
//   float32); grad_logits is always of `dtype`.
// - forward writes lse[i] = log(sum_j exp(x_ij)) (S, computed from the row
//   max), and
//     loss_i = (1 - e) * (lse_i - x_it) + e / c * sum_j (lse_i - x_ij)
//   (e = smoothing; the second term only when e > 0, so a -inf logit, a
//   masked class, leaves the loss finite as in PyTorch), 0 for ignored
//   rows; count = the number of rows not ignored (S, one value). With
//   reduction None, out (n, dtype) = loss_i; Sum: out (one value, dtype) =
//   sum_i loss_i; Mean: out = that sum / count (NaN when every row is
//   ignored, as in PyTorch). Sums over rows are
//   formed in a fixed order (deterministic) in S and rounded once.
// - backward reads logits, target, lse and count and writes
//     grad_logits_ij = w_i * (exp(x_ij - lse_i) - (1 - e) * [j == t] - e / c)
//   with w_i = grad[i] (None), grad (Sum) or grad / count (Mean), and 0 for
//   ignored (and bad) rows.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct CrossEntropyArgs {
  int device = 0;
  DType dtype = DType::Float32;      // logits, grad_logits
  DType out_dtype = DType::Float32;  // out, grad: dtype, or float32 for 16-bit logits
  DType target_dtype = DType::Int64;
  int64_t n = 0, c = 0;
  int64_t ignore_index = -100;
  double smoothing = 0;
  int reduction = 0;  // int(Reduction): 0 None, 1 Mean, 2 Sum
  const void* logits = nullptr;
  const void* target = nullptr;
  void* lse = nullptr;          // (n), S: written by forward, read by backward
  void* count = nullptr;        // (1), S: likewise
  void* out = nullptr;          // forward: (n) or (1), out_dtype
  const void* grad = nullptr;   // backward: (n) or (1), out_dtype
  void* grad_logits = nullptr;  // backward: (n, c), dtype
};

// The dtype of lse and count for a logits dtype.
inline DType cross_entropy_stats_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

using CrossEntropyKernelFn = void(const CrossEntropyArgs& args);
extern KernelStub<CrossEntropyKernelFn> cross_entropy_forward_stub;
extern KernelStub<CrossEntropyKernelFn> cross_entropy_backward_stub;

}  // namespace ember
