// CPU GEMM on Eigen (see ember/core/ops/gemm_kernels.h for the contract).
//
// float, double, int32 and int64 run Eigen's GEMM directly on the caller's
// memory: each operand is an Eigen::Map with an outer stride of ld, mapped
// row-major when it is not transposed and column-major when it is (a stored
// row-major k x m matrix read column-major is op(A), m x k), so no operand is
// ever copied. float16 and bfloat16 have no Eigen GEMM: their operands are
// converted into float matrices, multiplied in float, and each result
// element is rounded once. Eigen stays private to this file.
//
// Threads (ember/core/parallel_for.h): Eigen's own GEMM threads only under OpenMP,
// so a batch of at least get_num_threads() products is shared out by
// product, and a single large product by blocks of rows of C (or columns,
// when C has more columns than rows), each block a single-threaded Eigen
// product of the matching rows of op(A) (columns of op(B)) over the whole k.
// Eigen computes a row-major C as C^T = op(B)^T op(A)^T, tiling C's columns
// by its kernel's mr and its rows by nr, and its k blocking depends on k
// alone; blocks that start on those tile boundaries (and are never small,
// the last one taking the remainder) leave every element of C the same sum
// over k, in the same order, as one thread computes, whatever the count.
#include <Eigen/Core>

#include <algorithm>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/parallel_for.h"

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

// Products of fewer than kGemmGrain multiply-adds stay on one thread.
constexpr int64_t kGemmGrain = int64_t(1) << 18;

// Rows (or columns) of C in one block: a multiple of Eigen's tile along
// that dim, and at least 16.
template <typename T>
int64_t gemm_block(bool by_rows) {
  using Traits = Eigen::internal::gebp_traits<T, T>;
  const int64_t tile = by_rows ? Traits::nr : Traits::mr;
  return (16 + tile - 1) / tile * tile;
}

// C[rows r0..r1, cols c0..c1) = alpha op(A) op(B) + beta C over that block.
template <typename T>
void gemm_rows_cols(const GemmArgs& g, const T* a, const T* b, T* c, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const T alpha = T(g.alpha), beta = T(g.beta);
  const T* a_rows = a + (g.trans_a ? r0 : r0 * g.lda);
  const T* b_cols = b + (g.trans_b ? c0 * g.ldb : c0);
  RowMajorMap<T> cb(c + r0 * g.ldc + c0, r1 - r0, c1 - c0, Eigen::OuterStride<>(g.ldc));
  with_op(g.trans_a, a_rows, r1 - r0, g.k, g.lda, [&](const auto& A) {
    with_op(g.trans_b, b_cols, g.k, c1 - c0, g.ldb, [&](const auto& B) {
      if (g.beta == 0) {
        cb.noalias() = alpha * A * B;
      } else {
        if (g.beta != 1) cb *= beta;
        cb.noalias() += alpha * A * B;
      }
    });
  });
}

template <typename T>
void gemm_eigen(const GemmArgs& g) {
  const int64_t macs = g.m * g.n * g.k;
  auto product = [&](int64_t i, bool split) {
    const T* a = static_cast<const T*>(g.a) + i * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + i * g.stride_b;
    T* c = static_cast<T*>(g.c) + i * g.stride_c;
    const bool by_rows = g.m >= g.n;
    const int64_t extent = by_rows ? g.m : g.n, block = gemm_block<T>(by_rows);
    const int64_t blocks = split ? std::max<int64_t>(extent / block, 1) : 1;
    const int64_t block_macs = std::max<int64_t>(macs / blocks, 1);
    parallel_for(0, blocks, kGemmGrain / block_macs + 1, [&](int64_t b0, int64_t b1) {
      const int64_t lo = b0 * block, hi = b1 == blocks ? extent : b1 * block;
      if (by_rows) gemm_rows_cols(g, a, b, c, lo, hi, 0, g.n);
      else gemm_rows_cols(g, a, b, c, 0, g.m, lo, hi);
    });
  };
  if (g.batch >= get_num_threads()) {
    parallel_for(0, g.batch, kGemmGrain / std::max<int64_t>(macs, 1) + 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) product(i, false);
    });
  } else {
    for (int64_t i = 0; i < g.batch; ++i) product(i, macs > kGemmGrain);
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
