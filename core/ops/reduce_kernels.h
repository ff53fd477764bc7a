// Kernel signature and stub of the reduction family.
//
// Contract: the front-end (core/ops/reduce.cpp) presents the input as a
// dense row-major [outer, reduce, inner] block (a view when the reduced dims
// are adjacent in a contiguous tensor, a permuted copy otherwise) and the
// output as a dense [outer, inner] block. Half types accumulate in float,
// float32 in float, float64 in double, integers in int64. Max/Min/ArgMax/
// ArgMin propagate NaN and pick the first extreme index; Var uses Welford's
// algorithm with `correction` (1 = unbiased); LogSumExp subtracts the max.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kernel_stub.h"

namespace ember {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, LogSumExp };

struct ReduceArgs {
  const void* in = nullptr;
  void* out = nullptr;          // values (out_dtype); null for ArgMax/ArgMin
  int64_t* indices = nullptr;   // int64 indices for ArgMax/ArgMin, and for Max/Min when wanted
  int64_t outer = 1, reduce = 1, inner = 1;
  DType in_dtype = DType::Float32;
  DType out_dtype = DType::Float32;
  double correction = 1;        // Var only
};

using ReduceKernelFn = void(ReduceOp op, const ReduceArgs& args);
extern KernelStub<ReduceKernelFn> reduce_stub;

}  // namespace ember
