// Kernel signature and stub of softmax and log_softmax, forward and backward.
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (ember/core/ops/softmax.cpp) has checked the dim, promoted the
//   input to a floating dtype and made every operand a dense row-major
//   [outer, dim, inner] block of `dtype`; softmax runs along the middle
//   axis: the `dim` elements p[(o * dim + k) * inner + i], k = 0 .. dim-1,
//   form one row for each (o, i). Any size may be 0; then nothing is done.
// - Arithmetic is in float for float16/bfloat16 and float32, in double for
//   float64; each output is rounded to `dtype` once.
// - Forward kinds read `in` (x) and write `out` (y), subtracting the row max
//   m before exponentiating, so no row overflows:
//     Softmax       y = exp(x - m) / sum(exp(x - m))
//     LogSoftmax    y = (x - m) - log(sum(exp(x - m)))
//   A NaN in a row makes the whole row NaN; a row of -inf gives NaN, as in
//   PyTorch.
// - Backward kinds read `in` = y (the forward's output) and `grad` = dL/dy,
//   and write `out` = dL/dx:
//     SoftmaxBackward     dx = y * (g - sum(g * y))
//     LogSoftmaxBackward  dx = g - exp(y) * sum(g)
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

enum class SoftmaxKind : uint8_t { Softmax, LogSoftmax, SoftmaxBackward, LogSoftmaxBackward };

// Plain data, passable by value to a CUDA kernel. All operands share shape
// [outer, dim, inner] and `dtype`.
struct SoftmaxArgs {
  int device = 0;              // CUDA device index (ignored on CPU)
  const void* in = nullptr;    // forward: x; backward: y
  const void* grad = nullptr;  // backward only: dL/dy; null for the forward kinds
  void* out = nullptr;         // forward: y; backward: dL/dx
  int64_t outer = 1, dim = 1, inner = 1;
  DType dtype = DType::Float32;
};

using SoftmaxKernelFn = void(SoftmaxKind kind, const SoftmaxArgs& args);
extern KernelStub<SoftmaxKernelFn> softmax_stub;

}  // namespace ember
