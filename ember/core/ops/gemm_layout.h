// How a strided tensor is handed to the GEMM kernels without a copy: the
// layout rules that matmul and linear share, and the arguments of a
// one-matrix GEMM over such operands (see ember/core/ops/gemm_kernels.h for what
// the kernels accept).
#pragma once

#include <cstdint>
#include <optional>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/tensor.h"

namespace ember {

struct MatrixLayout {
  bool trans;  // stored transposed: unit-stride rows
  int64_t ld;  // the kernel's leading dim
};

// How a rows x cols matrix with strides (sr, sc) goes to the kernel without
// a copy: unit-stride columns as it is, unit-stride rows transposed; nullopt
// when neither stride is 1. The stride of a size-1 dim is never used, so it
// does not count.
std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc);

// The GemmArgs of one matrix C = op(A) op(B): A (m x k) and B (k x n) read
// from a's and b's data as laid out, C dense row-major (ldc = n) at c; the
// device and dtype are a's.
GemmArgs matrix_gemm(const Tensor& a, MatrixLayout al, const Tensor& b, MatrixLayout bl, int64_t m, int64_t n,
                     int64_t k, void* c);

// The one stride that walks the first `n` dims of (sizes, strides) in
// row-major order (0 when they are all of size 1), or nullopt when they do
// not collapse to one.
std::optional<int64_t> collapse_batch(const Shape& sizes, const Shape& strides, size_t n);

}  // namespace ember
