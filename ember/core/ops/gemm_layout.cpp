// GEMM operand layouts (see ember/core/ops/gemm_layout.h).
#include "ember/core/ops/gemm_layout.h"

namespace ember {

std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) return MatrixLayout{false, rows == 1 ? cols : sr};
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) return MatrixLayout{true, cols == 1 ? rows : sc};
  return std::nullopt;
}

GemmArgs matrix_gemm(const Tensor& a, MatrixLayout al, const Tensor& b, MatrixLayout bl, int64_t m, int64_t n,
                     int64_t k, void* c) {
  GemmArgs g;
  g.device = a.device().index;
  g.dtype = a.dtype();
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.data_ptr();
  g.trans_a = al.trans;
  g.lda = al.ld;
  g.b = b.data_ptr();
  g.trans_b = bl.trans;
  g.ldb = bl.ld;
  g.c = c;
  g.ldc = n;
  g.stride_c = m * n;
  return g;
}

std::optional<int64_t> collapse_batch(const Shape& sizes, const Shape& strides, size_t n) {
  std::optional<int64_t> stride;
  int64_t expected = 0;
  for (size_t d = n; d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (!stride) {
      stride = strides[d];
    } else if (strides[d] != expected) {
      return std::nullopt;
    }
    expected = strides[d] * sizes[d];
  }
  return stride.value_or(0);
}

}  // namespace ember
