// Tiled integer GEMM (see ember/kernels/cuda/integer_gemm.h).
//
// A block of 16 x 16 threads computes a 64 x 64 tile of C, each thread a
// 4 x 4 subset spaced 16 apart (so a warp's stores to a row of C are
// contiguous). The k dimension advances 16 at a time: the block stages the
// 64 x 16 slice of op(A) and the 16 x 64 slice of op(B) in shared memory,
// each thread loading four elements, with consecutive threads walking the
// operand's unit-stride dimension (which one depends on the transpose flag)
// so global loads coalesce. Out-of-range elements load as 0, so any m, n, k
// works. Grid: x over the column tiles, y and z over row tiles and batches
// (grid-stride loops past 65535).
//
// Arithmetic is in the unsigned type of the same width: overflow wraps
// modulo 2^bits, as two's complement hardware and the CPU kernel do, without
// the undefined behaviour of signed overflow. With beta == 0, C is never
// read.
#include <algorithm>
#include <type_traits>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/kernels/cuda/integer_gemm.h"

namespace ember::cuda {
namespace {

constexpr int kTile = 64;               // rows and columns of C per block
constexpr int kTileK = 16;              // depth of a shared-memory stage
constexpr int kThreads = 16;            // per block side
constexpr int kPer = kTile / kThreads;  // outputs per thread per side
constexpr int kMaxGridYZ = 65535;

static_assert(kTile * kTileK == kThreads * kThreads * kPer, "each thread loads kPer elements of each operand tile");

template <typename T>
__global__ void integer_gemm_kernel(const GemmArgs g, int64_t row_tiles) {
  using U = std::make_unsigned_t<T>;
  __shared__ U a_tile[kTileK][kTile + 1];  // [p][i] = op(A)(row0 + i, k0 + p)
  __shared__ U b_tile[kTileK][kTile + 1];  // [p][j] = op(B)(k0 + p, col0 + j)
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreads + tx;
  const U alpha = U(T(g.alpha)), beta = U(T(g.beta));
  const int64_t col0 = int64_t(blockIdx.x) * kTile;

  for (int64_t batch = blockIdx.z; batch < g.batch; batch += gridDim.z) {
    const T* a = static_cast<const T*>(g.a) + batch * g.stride_a;
    const T* b = static_cast<const T*>(g.b) + batch * g.stride_b;
    T* c = static_cast<T*>(g.c) + batch * g.stride_c;
    for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
      const int64_t row0 = tile * kTile;
      U acc[kPer][kPer] = {};
      for (int64_t k0 = 0; k0 < g.k; k0 += kTileK) {
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
          // op(A)(i, p) is a[p * lda + i] transposed (unit stride along i),
          // a[i * lda + p] otherwise (unit stride along p).
          const int i = g.trans_a ? tid % kTile : tid / kTileK + r * (kThreads * kThreads / kTileK);
          const int p = g.trans_a ? tid / kTile + r * (kThreads * kThreads / kTile) : tid % kTileK;
          const int64_t gi = row0 + i, gp = k0 + p;
          U v = 0;
          if (gi < g.m && gp < g.k) v = U(g.trans_a ? a[gp * g.lda + gi] : a[gi * g.lda + gp]);
          a_tile[p][i] = v;
        }
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
          // op(B)(p, j) is b[j * ldb + p] transposed (unit stride along p),
          // b[p * ldb + j] otherwise (unit stride along j).
          const int j = g.trans_b ? tid / kTileK + r * (kThreads * kThreads / kTileK) : tid % kTile;
          const int p = g.trans_b ? tid % kTileK : tid / kTile + r * (kThreads * kThreads / kTile);
          const int64_t gj = col0 + j, gp = k0 + p;
          U v = 0;
          if (gj < g.n && gp < g.k) v = U(g.trans_b ? b[gj * g.ldb + gp] : b[gp * g.ldb + gj]);
          b_tile[p][j] = v;
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < kTileK; ++p) {
          U av[kPer], bv[kPer];
#pragma unroll
          for (int q = 0; q < kPer; ++q) {
            av[q] = a_tile[p][ty + q * kThreads];
            bv[q] = b_tile[p][tx + q * kThreads];
          }
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
#pragma unroll
            for (int j = 0; j < kPer; ++j) acc[i][j] += av[i] * bv[j];
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int64_t gi = row0 + ty + i * kThreads;
        if (gi >= g.m) continue;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int64_t gj = col0 + tx + j * kThreads;
          if (gj >= g.n) continue;
          T* out = c + gi * g.ldc + gj;
          U v = alpha * acc[i][j];
          if (g.beta != 0) v += beta * U(*out);
          *out = T(v);
        }
      }
    }
  }
}

}  // namespace

void integer_gemm(const GemmArgs& g) {
  EMBER_CHECK(g.dtype == DType::Int32 || g.dtype == DType::Int64,
              "integer_gemm: expected int32 or int64, but got " << gemm_str(g));
  DeviceGuard guard(g.device);
  cudaStream_t stream = current_stream(g.device).handle();
  const int64_t row_tiles = (g.m + kTile - 1) / kTile, col_tiles = (g.n + kTile - 1) / kTile;
  const dim3 grid(unsigned(col_tiles), unsigned(std::min<int64_t>(row_tiles, kMaxGridYZ)),
                  unsigned(std::min<int64_t>(g.batch, kMaxGridYZ)));
  const dim3 block(kThreads, kThreads);
  if (g.dtype == DType::Int32) {
    integer_gemm_kernel<int32_t><<<grid, block, 0, stream>>>(g, row_tiles);
  } else {
    integer_gemm_kernel<int64_t><<<grid, block, 0, stream>>>(g, row_tiles);
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::cuda
