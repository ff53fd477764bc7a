// Kernel signature and stub of cumsum, the running sum along one dim.
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (ember/core/ops/scan.cpp) has checked the dim, cast the input to
//   the result's dtype and made both operands dense row-major
//   [outer, dim, inner] blocks of `dtype`; the `dim` elements
//   p[(o * dim + k) * inner + i], k = 0 .. dim-1, form one row for each
//   (o, i). Any size may be 0; then nothing is done.
// - out[k] = in[0] + ... + in[k] along each row, or, with `reverse`,
//   out[k] = in[k] + ... + in[dim-1] (cumsum's gradient).
// - Sums run in float for float16, bfloat16 and float32, in double for
//   float64, in int64 for int32, int64 and bool; each output is rounded to
//   `dtype` once. The order of the additions is fixed for a given shape, so
//   results are deterministic; CPU and CUDA agree within rounding, exactly
//   for integers.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

// Plain data, passable by value to a CUDA kernel.
struct ScanArgs {
  int device = 0;  // CUDA device index (ignored on CPU)
  const void* in = nullptr;
  void* out = nullptr;
  int64_t outer = 1, dim = 1, inner = 1;
  bool reverse = false;
  DType dtype = DType::Float32;
};

using ScanKernelFn = void(const ScanArgs& args);
extern KernelStub<ScanKernelFn> cumsum_stub;

}  // namespace ember
