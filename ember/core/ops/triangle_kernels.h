// Kernel signature and stub of triu and tril.
//
// Contract: the front-end (ember/core/ops/triangle.cpp) views x as
// (batch, rows, cols), batch the product of its leading dims, with any
// strides (in elements), and allocates out dense in that shape. Each kernel
// sets out[b][i][j] = in[b][i][j] where the element is kept, else 0 (false
// for bool):
//   upper (triu): kept where j - i >= diagonal
//   lower (tril): kept where j - i <= diagonal
// An element that is not kept is never read. Every dtype; no arithmetic, so
// the half types are copied bit for bit.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct TriangleArgs {
  int device = 0;  // the CUDA device index of in and out (0 on the CPU)
  DType dtype = DType::Float32;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t batch = 0, rows = 0, cols = 0;
  int64_t in_strides[3] = {};  // of (batch, rows, cols)
  int64_t diagonal = 0;
  bool upper = true;
};

using TriangleKernelFn = void(const TriangleArgs& args);
extern KernelStub<TriangleKernelFn> triangle_stub;

}  // namespace ember
