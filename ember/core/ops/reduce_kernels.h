// Kernel signature and stub of the reduction family.
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (ember/core/ops/reduce.cpp) has checked dims and dtypes and
//   presents the input as a dense row-major [outer, reduce, inner] block
//   (a view when the reduced dims are adjacent in a contiguous tensor, a
//   permuted copy with the reduced dims last otherwise), and each output as
//   a dense [outer, inner] block: element (o, i) of the output reduces the
//   `reduce` elements in[(o * reduce + r) * inner + i], r = 0 .. reduce-1.
// - Any of outer, reduce, inner may be 0 (empty tensors); then nothing is
//   read, and only a zero-size `reduce` with outer * inner > 0 writes (the
//   identity of Sum, NaN for Mean and Var, -inf for LogSumExp). The
//   front-end never passes reduce == 0 to Max/Min/ArgMax/ArgMin.
// - Arithmetic: half types in float, float32 in float, float64 in double;
//   Sum of integers and bool in int64. Each result is rounded to out_dtype
//   once. Max/Min compare in the same types (exact for every dtype).
// - A kernel may split a reduction over CPU threads or GPU blocks; its
//   result is then bit-identical run to run for a given thread count or
//   launch configuration (ember/core/parallel_for.h).
//
// Per op (in_dtype is the input's, out_dtype the values' dtype):
//   Sum        out = sum; out_dtype is in_dtype for floats, int64 otherwise.
//   Mean       out = sum / reduce; floating in_dtype == out_dtype.
//   Max, Min   out = the extreme value (out_dtype == in_dtype); when
//              `indices` is set, also its index r in [0, reduce). A NaN wins
//              (the first NaN); among equal values the first index wins.
//   ArgMax,    only the index of Max/Min, into `indices`; `out` is null.
//   ArgMin
//   Var, Std   Welford's algorithm (states of a split reduction merged by
//              Chan's formula); var = M2 / max(reduce - correction, 0)
//              (so inf, or NaN when M2 == 0, once correction >= reduce, as
//              in PyTorch); Std is its square root. Floating only.
//   LogSumExp  m + log(sum(exp(x - m))) with m the max (taken as 0 when it is
//              infinite, so rows of -inf give -inf and +inf gives +inf); a NaN
//              propagates. Floating only; out_dtype == in_dtype.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, Std, LogSumExp };

// Plain data, passable by value to a CUDA kernel.
struct ReduceArgs {
  int device = 0;              // CUDA device index (ignored on CPU)
  const void* in = nullptr;    // [outer, reduce, inner], in_dtype
  void* out = nullptr;         // [outer, inner], out_dtype; null for ArgMax/ArgMin
  int64_t* indices = nullptr;  // [outer, inner]; for ArgMax/ArgMin, and for Max/Min when wanted
  int64_t outer = 1, reduce = 1, inner = 1;
  DType in_dtype = DType::Float32;
  DType out_dtype = DType::Float32;
  double correction = 1;  // Var and Std only
};

using ReduceKernelFn = void(ReduceOp op, const ReduceArgs& args);
extern KernelStub<ReduceKernelFn> reduce_stub;

}  // namespace ember
