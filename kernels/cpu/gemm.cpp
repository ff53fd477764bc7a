// CPU GEMM on Eigen (see core/ops/gemm_kernels.h for the contract).
//
// float, double, int32 and int64 run Eigen's GEMM directly on the caller's
// memory: each operand is an Eigen::Map with an outer stride of ld, mapped
// row-major when it is not transposed and column-major when it is (a stored
// row-major k x m matrix read column-major is op(A), m x k), so no operand is
// ever copied. float16 and bfloat16 have no Eigen GEMM: their operands are
// converted into float matrices, multiplied in float, and each result
// element is rounded once. Eigen stays private to this file.
#include <Eigen/Core>

#include "core/ops/gemm_kernels.h"

namespace ember::cpu {
namespace {

template <typename T, int Order>
using ConstMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using RowMajorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                               Eigen::OuterStride<>>;

// Calls f with op(X) as an rows x cols Eigen expression over p.
template <typename T, typename F>
void with_op(bool trans, const T* p, int64_t rows, int64_t cols, int64_t ld, F&& f) {
  if (trans) f(ConstMap<T, Eigen::ColMajor>(p, rows, cols, Eigen::OuterStride<>(ld)));
  else f(ConstMap<T, Eigen::RowMajor>(p, rows, cols, Eigen::OuterStride<>(ld)));
}

template <typename T>
void gemm_eigen(const GemmArgs& g) {
  const T alpha = T(g.alpha), beta = T(g.beta);
  for (int64_t i = 0; i < g.batch; ++i) {
    const T* a = static_cast<const T*>(g.a) + i * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + i * g.stride_b;
    RowMajorMap<T> c(static_cast<T*>(g.c) + i * g.stride_c, g.m, g.n, Eigen::OuterStride<>(g.ldc));
    with_op(g.trans_a, a, g.m, g.k, g.lda, [&](const auto& A) {
      with_op(g.trans_b, b, g.k, g.n, g.ldb, [&](const auto& B) {
        if (g.beta == 0) {
          c.noalias() = alpha * A * B;
        } else {
          if (g.beta != 1) c *= beta;
          c.noalias() += alpha * A * B;
        }
      });
    });
  }
}

// Copies op(X) (rows x cols) of a 16-bit float type into a float matrix.
template <typename T>
void widen(bool trans, const T* p, int64_t rows, int64_t cols, int64_t ld, Eigen::MatrixXf& out) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) out(i, j) = float(trans ? p[j * ld + i] : p[i * ld + j]);
  }
}

template <typename T>
void gemm_via_float(const GemmArgs& g) {
  Eigen::MatrixXf a(g.m, g.k), b(g.k, g.n);
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> acc(g.m, g.n);
  const float alpha = float(g.alpha), beta = float(g.beta);
  for (int64_t i = 0; i < g.batch; ++i) {
    // A batch stride of 0 repeats one matrix: widen it once.
    if (i == 0 || g.stride_a != 0) widen(g.trans_a, static_cast<const T*>(g.a) + i * g.stride_a, g.m, g.k, g.lda, a);
    if (i == 0 || g.stride_b != 0) widen(g.trans_b, static_cast<const T*>(g.b) + i * g.stride_b, g.k, g.n, g.ldb, b);
    acc.noalias() = a * b;
    T* c = static_cast<T*>(g.c) + i * g.stride_c;
    for (int64_t r = 0; r < g.m; ++r) {
      for (int64_t col = 0; col < g.n; ++col) {
        T& out = c[r * g.ldc + col];
        float v = alpha * acc(r, col);
        if (g.beta != 0) v += beta * float(out);
        out = T(v);
      }
    }
  }
}

void gemm_kernel(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::Float32: return gemm_eigen<float>(g);
    case DType::Float64: return gemm_eigen<double>(g);
    case DType::Int32: return gemm_eigen<int32_t>(g);
    case DType::Int64: return gemm_eigen<int64_t>(g);
    case DType::Float16: return gemm_via_float<Half>(g);
    case DType::BFloat16: return gemm_via_float<BFloat16>(g);
    case DType::Bool: break;
  }
  EMBER_FAIL("gemm: dtype " << dtype_name(g.dtype)
                            << " has no GEMM; use a floating or integer dtype (convert with .to(dtype))");
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_stub, DeviceType::CPU, gemm_kernel);

}  // namespace ember::cpu
