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
// product, and a single large product by a grid of rectangles of C, one
// per thread: rows of C cut into row blocks and columns into column blocks
// (a 64 x 128 C at 2 threads is two 32 x 128 halves, where columns alone
// would give 48 and 80). Each rectangle is a single-threaded Eigen product
// of the matching rows of op(A) and columns of op(B) over the whole k. The
// grid is the one, of at most get_num_threads() rectangles, whose largest
// rectangle has the least area, then the least perimeter (each rectangle
// packs its rows of op(A) and columns of op(B), so square ones pack least).
// Eigen computes a row-major C as C^T = op(B)^T op(A)^T, tiling C's columns
// by its kernel's mr and its rows by nr, and its k blocking depends on k
// alone; blocks that start on those tile boundaries (the last one taking
// the part tile, alone or after whole tiles) leave every element of C the
// same sum over k, in the same order, as one thread computes, whatever the
// count.
#include <Eigen/Core>

#include <algorithm>
#include <utility>

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

// A product is cut into rectangles of at least kGemmGrain multiply-adds.
constexpr int64_t kGemmGrain = int64_t(1) << 18;

// Eigen's tile along the rows (nr) or the columns (mr) of a row-major C.
template <typename T>
int64_t gemm_tile(bool by_rows) {
  using Traits = Eigen::internal::gebp_traits<T, T>;
  return by_rows ? Traits::nr : Traits::mr;
}

// The smallest block of rows (or columns) of C.
constexpr int64_t kGemmMinBlock = 16;

// The most blocks one dim of C (extent rows or columns, Eigen's tile along
// it) is cut into: blocks of whole tiles of at least kGemmMinBlock, plus one
// of the part tile at the end when that is itself at least kGemmMinBlock (a
// 128-column C on AVX-512's 48-column tile is 48 + 48 + 32, not 48 + 80).
template <typename T>
int64_t gemm_most_blocks(int64_t extent, bool by_rows) {
  const int64_t tile = gemm_tile<T>(by_rows);
  const int64_t block = (kGemmMinBlock + tile - 1) / tile * tile;
  return std::max<int64_t>(extent / block + (extent % tile >= kGemmMinBlock ? 1 : 0), 1);
}

// The cut of one dim of C (extent rows or columns) into `blocks` blocks
// that start on multiples of `tile`, near-equal in tiles, the last one
// taking the remainder.
struct BlockCut {
  int64_t extent, tile, blocks;

  int64_t start(int64_t i) const {
    if (i == blocks) return extent;
    const int64_t tiles = extent / tile;
    return (i * (tiles / blocks) + std::min(i, tiles % blocks)) * tile;
  }
  // The first block has the most whole tiles, the last the remainder.
  int64_t largest() const { return std::max(start(1), extent - start(blocks - 1)); }
};

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

// The grid of at most max_blocks rectangles over an m x n C (see the top
// of the file): row and column cuts on Eigen's tiles, at most
// gemm_most_blocks along each dim.
template <typename T>
std::pair<BlockCut, BlockCut> gemm_grid(int64_t m, int64_t n, int64_t max_blocks) {
  const int64_t row_tile = gemm_tile<T>(true), col_tile = gemm_tile<T>(false);
  const int64_t most_rows = gemm_most_blocks<T>(m, true), most_cols = gemm_most_blocks<T>(n, false);
  BlockCut best_rows{m, row_tile, 1}, best_cols{n, col_tile, 1};
  auto cost = [](const BlockCut& r, const BlockCut& c) {
    return std::pair(r.largest() * c.largest(), r.largest() + c.largest());
  };
  for (int64_t rb = 1; rb <= std::min(most_rows, max_blocks); ++rb) {
    for (int64_t cb = 1; cb <= std::min(most_cols, max_blocks / rb); ++cb) {
      const BlockCut rows{m, row_tile, rb}, cols{n, col_tile, cb};
      if (cost(rows, cols) < cost(best_rows, best_cols)) {
        best_rows = rows;
        best_cols = cols;
      }
    }
  }
  return {best_rows, best_cols};
}

template <typename T>
void gemm_eigen(const GemmArgs& g) {
  const int64_t macs = g.m * g.n * g.k;
  auto product = [&](int64_t i, int64_t max_blocks) {
    const T* a = static_cast<const T*>(g.a) + i * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + i * g.stride_b;
    T* c = static_cast<T*>(g.c) + i * g.stride_c;
    // Not a structured binding: the lambda below captures them (clang < 16).
    const std::pair<BlockCut, BlockCut> grid = gemm_grid<T>(g.m, g.n, max_blocks);
    const BlockCut& rows = grid.first;
    const BlockCut& cols = grid.second;
    parallel_for(0, rows.blocks * cols.blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t block = b0; block < b1; ++block) {
        const int64_t r = block / cols.blocks, col = block % cols.blocks;
        gemm_rows_cols(g, a, b, c, rows.start(r), rows.start(r + 1), cols.start(col), cols.start(col + 1));
      }
    });
  };
  const int64_t threads = in_parallel_region() ? 1 : get_num_threads();
  if (g.batch >= threads) {
    parallel_for(0, g.batch, kGemmGrain / std::max<int64_t>(macs, 1) + 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) product(i, 1);
    });
  } else {
    const int64_t max_blocks = std::clamp<int64_t>(macs / kGemmGrain, 1, threads);
    for (int64_t i = 0; i < g.batch; ++i) product(i, max_blocks);
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
