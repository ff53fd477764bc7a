// CUDA matmul and linear against the CPU kernels: every dtype (cuBLAS for
// the float types, ember's tiled kernel for the integers), every rank
// combination, broadcast batches, transposed/narrowed/expanded operands,
// odd sizes, TF32, empty and k = 0 shapes, the GEMM contract (alpha, beta,
// leading dims, broadcast batch) on the kernel itself, the fused bias path
// of linear, gradients, and handles used from several threads and streams.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ember/core/ops/gemm_kernels.h"
#include "support/cuda_compare.h"
#include "support/stub_swap.h"

#if defined(EMBER_WITH_CUDA)
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/stream.h"
#endif

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::Tolerance;

const DType kAllTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64};
const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  if (is_integral(dtype)) return randint(-5, 5, shape, dtype, kCPU, &g);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

// A random input that requires grad when its dtype can.
Tensor leaf(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = random(shape, dtype, seed);
  if (is_floating(dtype)) t.set_requires_grad();
  return t;
}

// Two float32 sums of `depth` products in different orders differ by about
// 1e-8 * depth (the running sum's rounding errors); the default 1e-5 is too
// tight past a few hundred terms. The other dtypes keep their defaults: the
// 16-bit types accumulate in float and round once, far below their ulp.
Tolerance tolerance(DType dtype, int64_t depth) {
  if (dtype == DType::Float32) return {1e-5, 1e-5 + 2e-7 * double(depth)};
  return testing::tolerance_for(dtype);
}

// TF32 keeps 10 mantissa bits of each factor: a relative error near 1e-3 of
// each product, random in sign, so about 1e-3 * sqrt(depth) absolute.
Tolerance tf32_tolerance(int64_t depth) { return {2e-3, 2e-3 * std::sqrt(double(depth))}; }

// Sets the TF32 flag for a scope.
struct Tf32Scope {
  explicit Tf32Scope(bool on) : previous(allow_tf32()) { set_allow_tf32(on); }
  ~Tf32Scope() { set_allow_tf32(previous); }
  bool previous;
};

TensorList mm(const TensorList& in) { return {matmul(in[0], in[1])}; }

// As in tests/core/matmul_test.cpp: batch dims chosen so every pair of ranks broadcasts.
Shape operand_shape(int64_t rank, bool first, int64_t rows, int64_t cols) {
  if (rank == 1) return {first ? cols : rows};
  if (rank == 2) return {rows, cols};
  if (rank == 3) return {3, rows, cols};
  return first ? Shape{2, 1, rows, cols} : Shape{1, 3, rows, cols};
}

// C after gemm_stub's CPU kernel and after its CUDA kernel (cuda:0), each
// on its own copy of c; g's pointers and device are set here.
std::pair<Tensor, Tensor> gemm_on_cpu_and_cuda(GemmArgs g, const Tensor& a, const Tensor& b, const Tensor& c) {
  Tensor c_cpu = c.clone();
  g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c_cpu.data_ptr();
  gemm_stub(DeviceType::CPU)(g);
  Tensor a_gpu = a.cuda(), b_gpu = b.cuda(), c_gpu = c.cuda();
  g.device = 0;
  g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
  gemm_stub(DeviceType::CUDA)(g);
  return {c_cpu, c_gpu};
}

// ---------------- matmul ----------------

TEST(CudaMatmul, EveryRankCombinationAndDtype) {
  EMBER_REQUIRE_CUDA();
  const int64_t sizes[][3] = {{7, 33, 1}, {1, 7, 33}, {33, 1, 7}, {7, 7, 7}};  // m, k, n
  int combo = 0;
  for (int64_t ra = 1; ra <= 4; ++ra) {
    for (int64_t rb = 1; rb <= 4; ++rb) {
      const int64_t* s = sizes[combo++ % 4];
      Shape sa = operand_shape(ra, true, s[0], s[1]), sb = operand_shape(rb, false, s[1], s[2]);
      for (DType dt : kAllTypes) {
        Tensor a = leaf(sa, dt, 10 + combo), b = leaf(sb, dt, 50 + combo);
        EXPECT_TRUE(cuda_matches_cpu(mm, {a, b}, is_floating(dt), tolerance(dt, 6 * 33)))
            << shape_str(sa) << " x " << shape_str(sb) << " " << dtype_name(dt);
      }
    }
  }
}

TEST(CudaMatmul, BroadcastBatches) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllTypes) {
    const bool grads = is_floating(dt);
    const Tolerance tol = tolerance(dt, 60);
    Tensor a = leaf({2, 1, 3, 4}, dt, 1), b = leaf({5, 4, 6}, dt, 2), c = leaf({1, 4, 6}, dt, 3);
    EXPECT_TRUE(cuda_matches_cpu(mm, {a, b}, grads, tol)) << dtype_name(dt);
    EXPECT_TRUE(cuda_matches_cpu(mm, {a, c}, grads, tol)) << dtype_name(dt);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) { return TensorList{matmul(in[1].transpose(1, 2), in[0].transpose(2, 3))}; }, {a, c},
        grads, tol))
        << dtype_name(dt);
    // Operands expanded inside the function: stride-0 rows and batches.
    Tensor r = leaf({1, 4}, dt, 4), m = leaf({4, 3}, dt, 5);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{matmul(in[0].expand({3, 2, 4}), in[1].expand({3, 4, 3}))};
        },
        {r, m}, grads, tol))
        << dtype_name(dt);
  }
}

TEST(CudaMatmul, TransposedNarrowedAndStridedOperands) {
  EMBER_REQUIRE_CUDA();
  const int64_t m = 7, k = 33, n = 5;
  using Fn = TensorList (*)(const TensorList&);
  struct Case {
    const char* name;
    Shape a, b;
    Fn fn;
  };
  const Case cases[] = {
      {"both transposed",
       {k, m},
       {n, k},
       [](const TensorList& in) { return TensorList{matmul(in[0].t(), in[1].t())}; }},
      {"narrowed (ld > cols)",
       {m + 3, k + 5},
       {k + 3, n},
       [](const TensorList& in) {
         return TensorList{matmul(in[0].narrow(1, 2, k).narrow(0, 1, m), in[1].narrow(0, 1, k))};
       }},
      {"no unit stride (copied)",
       {m, 2 * k},
       {k, n},
       [](const TensorList& in) { return TensorList{matmul(in[0].slice(1, 0, 2 * k, 2), in[1])}; }},
      {"stride-0 rows",
       {1, k},
       {k, n},
       [](const TensorList& in) {
         return TensorList{matmul(in[0].expand({m, k}), in[1])};
       }},
      {"batched transposed",
       {4, k, m},
       {4, n, k},
       [](const TensorList& in) { return TensorList{matmul(in[0].transpose(1, 2), in[1].transpose(1, 2))}; }},
      {"batch dim not outermost",
       {m, 4, k},
       {k, n},
       [](const TensorList& in) { return TensorList{matmul(in[0].transpose(0, 1), in[1])}; }},
      {"permuted batch dims",
       {2, 3, m, k},
       {n, k},
       [](const TensorList& in) {
         return TensorList{matmul(in[0].permute({1, 0, 2, 3}), in[1].t())};
       }},
      {"expanded batch of A",
       {m, k},
       {4, k, n},
       [](const TensorList& in) {
         return TensorList{matmul(in[0].expand({4, m, k}), in[1])};
       }},
      {"strided vectors",
       {2 * k},
       {k, n},
       [](const TensorList& in) {
         Tensor v = in[0].slice(0, 0, 2 * k, 2);
         return TensorList{matmul(v, in[1]), matmul(in[1].t(), v), matmul(v, v)};
       }},
  };
  for (DType dt : kAllTypes) {
    for (const Case& c : cases) {
      EXPECT_TRUE(cuda_matches_cpu(c.fn, {leaf(c.a, dt, 1), leaf(c.b, dt, 2)}, is_floating(dt), tolerance(dt, 4 * k)))
          << c.name << " " << dtype_name(dt);
    }
  }
}

TEST(CudaMatmul, OddSizes) {
  EMBER_REQUIRE_CUDA();
  for (int64_t s : {1, 7, 33, 127, 257}) {
    const Shape shapes[][2] = {{{s, 33}, {33, 7}}, {{7, s}, {s, 33}}, {{33, 7}, {7, s}}, {{s, s}, {s, s}}};
    for (DType dt : kAllTypes) {
      for (const auto& shape : shapes) {
        Tensor a = leaf(shape[0], dt, uint64_t(s)), b = leaf(shape[1], dt, uint64_t(s) + 1);
        EXPECT_TRUE(cuda_matches_cpu(mm, {a, b}, is_floating(dt), tolerance(dt, 257)))
            << shape_str(shape[0]) << " x " << shape_str(shape[1]) << " " << dtype_name(dt);
      }
      // Batched with a transposed, shared second operand (integer tiles cross their edges).
      Tensor a = leaf({3, s, 65}, dt, 7), b = leaf({s, 65}, dt, 8);
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{matmul(in[0], in[1].t())}; }, {a, b},
                                   is_floating(dt), tolerance(dt, 3 * 257)))
          << "[3, " << s << ", 65] x [" << s << ", 65]^T " << dtype_name(dt);
    }
  }
}

TEST(CudaMatmul, Tf32OnStaysWithinTf32Precision) {
  EMBER_REQUIRE_CUDA();
  Tf32Scope tf32(true);
  Tensor a = leaf({127, 257}, DType::Float32, 1), b = leaf({257, 33}, DType::Float32, 2);
  EXPECT_TRUE(cuda_matches_cpu(mm, {a, b}, true, tf32_tolerance(257)));
  Tensor c = leaf({3, 65, 129}, DType::Float32, 3), d = leaf({33, 129}, DType::Float32, 4);
  EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{matmul(in[0], in[1].t())}; }, {c, d}, true,
                               tf32_tolerance(3 * 129)));
  Tensor e = leaf({2, 1, 33, 65}, DType::Float32, 5), f = leaf({3, 65, 17}, DType::Float32, 6);
  EXPECT_TRUE(cuda_matches_cpu(mm, {e, f}, true, tf32_tolerance(6 * 65)));
}

TEST(CudaMatmul, Tf32OffIsFullFloat32) {
  EMBER_REQUIRE_CUDA();
  Tf32Scope tf32(false);
  // Inputs whose TF32 rounding would be visible: 1 + 2^-13 has no TF32 form.
  Tensor a = full({64, 256}, 1.0 + 0x1p-13, DType::Float32), b = ones({256, 64}, DType::Float32);
  EXPECT_TRUE(cuda_matches_cpu(mm, {a, b}, false, Tolerance{1e-7, 0}));
}

TEST(CudaMatmul, EmptyAndZeroDepthShapes) {
  EMBER_REQUIRE_CUDA();
  const Shape pairs[][2] = {{{0, 3}, {3, 4}}, {{2, 3, 0}, {0, 5}}, {{0}, {0}},       {{2, 0, 3, 4}, {4, 5}},
                            {{3, 0}, {0}},    {{0}, {0, 4}},       {{4, 0}, {0, 3}}, {{1, 4, 0}, {3, 0, 2}}};
  for (DType dt : kAllTypes) {
    for (const auto& p : pairs) {
      // k = 0 must give zeros: allocations are poisoned with NaN (-1 for
      // integers) while the CUDA side runs.
      EXPECT_TRUE(cuda_matches_cpu(mm, {leaf(p[0], dt, 1), leaf(p[1], dt, 2)}, is_floating(dt)))
          << shape_str(p[0]) << " x " << shape_str(p[1]) << " " << dtype_name(dt);
    }
  }
}

// ---------------- the GEMM contract, on the kernel itself ----------------

// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] with padded leading dims, a
// broadcast (stride 0) or batched A and every transpose combination, through
// gemm_stub(CUDA) against gemm_stub(CPU) on the same data. Padding columns
// of C must come back untouched; with beta 0, NaN in C must not leak.
TEST(CudaGemm, AlphaBetaLeadingDimsAndBroadcastBatchMatchTheCpuKernel) {
  EMBER_REQUIRE_CUDA();
  const int64_t m = 37, n = 70, k = 45, batch = 3;
  for (DType dt : kAllTypes) {
    const bool integral = is_integral(dt);
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      for (double beta : {0.0, integral ? 3.0 : 0.5}) {
        const bool shared_a = flags == 1 || flags == 2;
        Tensor a =
            random(shared_a ? Shape{ta ? k : m, (ta ? m : k) + 3} : Shape{batch, ta ? k : m, (ta ? m : k) + 3}, dt, 1);
        Tensor b = random({batch, tb ? n : k, (tb ? k : n) + 1}, dt, 2);
        Tensor c = random({batch, m, n + 2}, dt, 3);
        if (beta == 0 && !integral) c.fill_(std::numeric_limits<double>::quiet_NaN());
        GemmArgs g;
        g.dtype = dt;
        g.trans_a = ta, g.trans_b = tb;
        g.m = m, g.n = n, g.k = k, g.batch = batch;
        g.alpha = 2, g.beta = beta;
        g.lda = a.size(-1), g.stride_a = shared_a ? 0 : a.size(-2) * a.size(-1);
        g.ldb = b.size(-1), g.stride_b = b.size(-2) * b.size(-1);
        g.ldc = n + 2, g.stride_c = m * (n + 2);

        const auto [c_cpu, c_gpu] = gemm_on_cpu_and_cuda(g, a, b, c);
        EXPECT_TRUE(testing::tensors_close(c_gpu, c_cpu, tolerance(dt, k)))
            << dtype_name(dt) << " trans_a " << ta << " trans_b " << tb << " beta " << beta;
      }
    }
  }
}

// Rows that do not start on 16-byte boundaries (odd leading dims of 16-bit
// values, the logits of a 50257-token vocabulary) and n and k that are not
// multiples of 16 bytes' elements are padded for large products
// (ember/kernels/cuda/libraries/lt_matmul.cpp), C computed in a buffer and
// copied out: the same values as the CPU kernel, C's padding column
// untouched, beta's C read; with a bias epilogue too (n kept).
TEST(CudaGemm, LargeProblemsWithMisalignedRowsMatchTheCpuKernel) {
  EMBER_REQUIRE_CUDA();
  const int64_t m = 515, n = 1027, k = 513;  // 2.7e8 multiply-adds: past the copying threshold
  for (DType dt : {DType::BFloat16, DType::Float16, DType::Float32}) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      for (double beta : {0.0, 0.5}) {
        Tensor a = random({ta ? k : m, (ta ? m : k) + 1}, dt, 11);
        Tensor b = random({tb ? n : k, (tb ? k : n) + 3}, dt, 12);
        Tensor c = random({m, n + 1}, dt, 13);
        if (beta == 0) c.narrow(1, 0, n).fill_(std::numeric_limits<double>::quiet_NaN());
        GemmArgs g;
        g.dtype = dt;
        g.trans_a = ta, g.trans_b = tb;
        g.m = m, g.n = n, g.k = k;
        g.alpha = 1.5, g.beta = beta;
        g.lda = a.size(1), g.ldb = b.size(1), g.ldc = n + 1;

        const auto [c_cpu, c_gpu] = gemm_on_cpu_and_cuda(g, a, b, c);
        EXPECT_TRUE(testing::tensors_close(c_gpu, c_cpu, tolerance(dt, k)))
            << dtype_name(dt) << " trans_a " << ta << " trans_b " << tb << " beta " << beta;
        EXPECT_TRUE(equal(c_gpu.narrow(1, n, 1).cpu(), c.narrow(1, n, 1)))
            << "C's padding column was written: " << dtype_name(dt) << " trans_a " << ta << " trans_b " << tb;
        if (beta != 0) continue;
        Tensor bias = random({n}, dt, 14), bias_gpu = bias.cuda(), a_gpu = a.cuda(), b_gpu = b.cuda();
        g.c = c_cpu.data_ptr(), g.a = a.data_ptr(), g.b = b.data_ptr(), g.device = 0;
        ASSERT_TRUE(gemm_bias_stub(DeviceType::CPU)(g, bias.data_ptr()));
        g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
        if (!gemm_bias_stub(DeviceType::CUDA)(g, bias_gpu.data_ptr())) continue;  // declining is allowed
        EXPECT_TRUE(testing::tensors_close(c_gpu, c_cpu, tolerance(dt, k)))
            << "bias epilogue: " << dtype_name(dt) << " trans_a " << ta << " trans_b " << tb;
      }
    }
  }
}

// The bias-gradient epilogue (BGRADB) on the padded copies: its sums of
// op(A) are over k, which the copies pad with zeros, and C's padding
// columns are computed and dropped. C and the sums poisoned first.
TEST(CudaGemm, LargeMisalignedProblemsWithTheBiasGradEpilogueMatchTheCpuKernel) {
  EMBER_REQUIRE_CUDA();
  const int64_t m = 515, n = 1027, k = 513;
  const std::pair<DType, DType> pairs[] = {
      {DType::BFloat16, DType::Float32}, {DType::Float16, DType::Float16}, {DType::Float32, DType::Float32}};
  for (const auto& [dt, c_dt] : pairs) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = random({ta ? k : m, (ta ? m : k) + 1}, dt, 21), b = random({tb ? n : k, (tb ? k : n) + 3}, dt, 22);
      GemmArgs g;
      g.dtype = dt;
      g.trans_a = ta, g.trans_b = tb;
      g.m = m, g.n = n, g.k = k;
      g.lda = a.size(1), g.ldb = b.size(1), g.ldc = n + 1;
      Tensor c_cpu = zeros({m, n + 1}, c_dt), bias_cpu = empty({m}, c_dt);
      g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c_cpu.data_ptr();
      ASSERT_TRUE(gemm_bias_grad_stub(DeviceType::CPU)(g, c_dt, bias_cpu.data_ptr()));
      Tensor a_gpu = a.cuda(), b_gpu = b.cuda();
      Tensor c_gpu = full({m, n + 1}, std::nan(""), c_dt, cuda_device(0));
      Tensor bias_gpu = full({m}, std::nan(""), c_dt, cuda_device(0));
      g.device = 0;
      g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
      const std::string what = std::string(dtype_name(dt)) + " -> " + dtype_name(c_dt) + " trans_a " +
                               std::to_string(ta) + " trans_b " + std::to_string(tb);
      if (!gemm_bias_grad_stub(DeviceType::CUDA)(g, c_dt, bias_gpu.data_ptr())) continue;  // declining is allowed
      const Tolerance tol = tolerance(c_dt, k);
      EXPECT_TRUE(testing::tensors_close(c_gpu.narrow(1, 0, n), c_cpu.narrow(1, 0, n), tol)) << what;
      EXPECT_TRUE(testing::tensors_close(bias_gpu, bias_cpu, tol)) << what << " bias gradient";
      const Tensor padding = c_gpu.narrow(1, n, 1).cpu();
      EXPECT_EQ(ne(padding, padding).sum().item<double>(), double(m)) << what << ": C's padding column was written";
    }
  }
}

// Sets the GEMM autotuning flag for a scope.
struct AutotuneScope {
  explicit AutotuneScope(bool on) : previous(gemm_autotune()) { set_gemm_autotune(on); }
  ~AutotuneScope() { set_gemm_autotune(previous); }
  bool previous;
};

// One matrix through cublasLt, its algorithm chosen by timing the candidates
// or by the heuristic alone (each case a problem no other test meets, so the
// choice is made here): the result matches the CPU kernel, with beta reading
// C (the timing runs must not write the C it reads) and with beta 0 (NaN in
// C must not leak), and a second call of the same problem, which reuses the
// kept choice, gives the same bits.
TEST(CudaGemm, TimedAndHeuristicAlgorithmChoicesMatchTheCpuAndAreKept) {
  EMBER_REQUIRE_CUDA();
  int64_t m = 131;
  for (bool autotune : {true, false}) {
    AutotuneScope scope(autotune);
    for (DType dt : kFloatTypes) {
      for (double beta : {0.0, 0.75}) {
        const int64_t n = 77, k = 259;
        ++m;  // a fresh problem each case
        Tensor a = random({m, k}, dt, 4), b = random({k, n}, dt, 5), c = random({m, n + 3}, dt, 6);
        if (beta == 0) c.fill_(std::numeric_limits<double>::quiet_NaN());
        GemmArgs g;
        g.dtype = dt;
        g.m = m, g.n = n, g.k = k;
        g.alpha = 1.5, g.beta = beta;
        g.lda = k, g.ldb = n, g.ldc = n + 3;
        Tensor c_cpu = c.clone();
        g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c_cpu.data_ptr();
        gemm_stub(DeviceType::CPU)(g);

        Tensor a_gpu = a.cuda(), b_gpu = b.cuda();
        Tensor results[2];
        for (Tensor& r : results) {
          Tensor c_gpu = c.cuda();
          g.device = 0;
          g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
          gemm_stub(DeviceType::CUDA)(g);
          r = c_gpu.cpu();
        }
        const std::string what =
            std::string(dtype_name(dt)) + " beta " + std::to_string(beta) + (autotune ? ", timed" : ", heuristic");
        EXPECT_TRUE(testing::tensors_close(results[0], c_cpu, tolerance(dt, k))) << what;
        EXPECT_TRUE(testing::tensors_close(results[1], results[0], Tolerance{0, 0}))
            << what << ": the kept choice changed the bits";
      }
    }
  }
}

// A problem met first while a graph captures gets the heuristic's choice
// (timing would wait for the device, which a capture forbids) and the
// replay computes it right.
TEST(CudaGemm, AProblemMetFirstInACaptureIsNotTimed) {
  EMBER_REQUIRE_CUDA();
  AutotuneScope scope(true);
  Tensor a = random({93, 61}, DType::Float32, 7), b = random({61, 45}, DType::Float32, 8);
  Tensor ag = a.cuda(), bg = b.cuda();
  matmul(bg.t(), ag.t());  // another problem: the thread's cuBLAS handles are made before the capture
  Tensor y;
  cuda::Graph graph(0);
  graph.capture([&] { y = matmul(ag, bg); });
  graph.replay();
  EXPECT_TRUE(testing::tensors_close(y.cpu(), matmul(a, b), tolerance(DType::Float32, 61)));
}

TEST(CudaGemm, CublasErrorsNameTheProblem) {
  EMBER_REQUIRE_CUDA();
  Tensor a = zeros({3, 5}, DType::Float32, cuda_device(0)), b = zeros({5, 4}, DType::Float32, cuda_device(0));
  Tensor c = zeros({3, 4}, DType::Float32, cuda_device(0));
  GemmArgs g;
  g.m = 3, g.n = 4, g.k = 5;
  g.a = a.data_ptr(), g.lda = 2;  // below k: cuBLAS rejects it
  g.b = b.data_ptr(), g.ldb = 4;
  g.c = c.data_ptr(), g.ldc = 4;
  try {
    gemm_stub(DeviceType::CUDA)(g);
    ADD_FAILURE() << "an invalid leading dim was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("gemm on cuda:0 failed for float32 C [3 x 4] = op(A) [3 x 5] * op(B) "
                                               "[5 x 4] (A lda 2 batch stride 0"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("CUBLAS_STATUS_INVALID_VALUE"));
  }
}

// ---------------- linear ----------------

TensorList linear_bias(const TensorList& in) { return {linear(in[0], in[1], in[2])}; }
TensorList linear_no_bias(const TensorList& in) { return {linear(in[0], in[1])}; }

TEST(CudaLinear, EveryRankWithAndWithoutBiasMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const int64_t k = 33, n = 48;
  for (DType dt : kAllTypes) {
    for (int64_t rank = 1; rank <= 4; ++rank) {
      Tensor x = leaf(testing::linear_input_shape(rank, k), dt, uint64_t(rank)), w = leaf({n, k}, dt, 10),
             b = leaf({n}, dt, 11);
      const Tolerance tol = tolerance(dt, 66);
      EXPECT_TRUE(cuda_matches_cpu(linear_bias, {x, w, b}, is_floating(dt), tol)) << rank << "-D " << dtype_name(dt);
      EXPECT_TRUE(cuda_matches_cpu(linear_no_bias, {x, w}, is_floating(dt), tol)) << rank << "-D " << dtype_name(dt);
    }
  }
}

TEST(CudaLinear, LayoutsOddSizesAndTf32) {
  EMBER_REQUIRE_CUDA();
  using Fn = TensorList (*)(const TensorList&);
  struct Case {
    const char* name;
    Shape x, w;
    int64_t out_features;
    Fn fn;
  };
  const Case cases[] = {
      {"transposed weight",
       {5, 33},
       {33, 7},
       7,
       [](const TensorList& in) { return TensorList{linear(in[0], in[1].t(), in[2])}; }},
      {"transposed x",
       {33, 5},
       {7, 33},
       7,
       [](const TensorList& in) { return TensorList{linear(in[0].t(), in[1], in[2])}; }},
      {"permuted x (collapses)",
       {33, 2, 3},
       {7, 33},
       7,
       [](const TensorList& in) {
         return TensorList{linear(in[0].permute({1, 2, 0}), in[1], in[2])};
       }},
      {"batch dims that do not collapse",
       {3, 2, 33},
       {7, 33},
       7,
       [](const TensorList& in) { return TensorList{linear(in[0].transpose(0, 1), in[1], in[2])}; }},
      {"stepped x and weight",
       {5, 66},
       {7, 66},
       7,
       [](const TensorList& in) {
         return TensorList{linear(in[0].slice(1, 0, 66, 2), in[1].slice(1, 0, 66, 2), in[2])};
       }},
      {"odd sizes", {127, 257}, {7, 257}, 7, &linear_bias},
      {"one output feature", {9, 33}, {1, 33}, 1, &linear_bias},
      {"one input feature", {9, 1}, {7, 1}, 7, &linear_bias},
  };
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      Tensor x = leaf(c.x, dt, 1), w = leaf(c.w, dt, 2), b = leaf({c.out_features}, dt, 3);
      EXPECT_TRUE(cuda_matches_cpu(c.fn, {x, w, b}, true, tolerance(dt, 257))) << c.name << " " << dtype_name(dt);
    }
  }
  Tf32Scope tf32(true);
  Tensor x = leaf({2, 65, 129}, DType::Float32, 4), w = leaf({33, 129}, DType::Float32, 5);
  Tensor b = leaf({33}, DType::Float32, 6);
  EXPECT_TRUE(cuda_matches_cpu(linear_bias, {x, w, b}, true, tf32_tolerance(130)));
}

TEST(CudaLinear, AgreesWithMatmulPlusAddOnTheCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    Tensor x = random({4, 16, 96}, dt, 1), w = random({40, 96}, dt, 2), b = random({40}, dt, 3);
    Tensor expected = matmul(x, w.t()) + b;
    EXPECT_TRUE(testing::tensors_close(linear(x.cuda(), w.cuda(), b.cuda()), expected, tolerance(dt, 96)))
        << dtype_name(dt);
    EXPECT_TRUE(testing::tensors_close(linear(x.cuda(), w.cuda()), matmul(x, w.t()), tolerance(dt, 96)))
        << dtype_name(dt);
  }
}

// Wraps a CUDA GEMM kernel (Stub's) to count the problems it accepted.
template <typename Fn, KernelStub<Fn>* Stub>
class AcceptedCounter {
 public:
  AcceptedCounter() : swap_(DeviceType::CUDA, count) { accepted() = 0; }
  static int& accepted() {
    static int n = 0;
    return n;
  }

 private:
  using Swap = testing::StubSwap<Fn, Stub>;
  template <typename... Args>
  static bool forward(Args... args) {
    const bool ok = Swap::real()(args...);
    accepted() += ok ? 1 : 0;
    return ok;
  }
  static constexpr Fn* count = &forward;
  Swap swap_;
};
using AcceptedBiasCounter = AcceptedCounter<GemmBiasKernelFn, &gemm_bias_stub>;
using AcceptedBiasGradCounter = AcceptedCounter<GemmBiasGradKernelFn, &gemm_bias_grad_stub>;

TEST(CudaLinear, TheBiasEpilogueRunsForTheCommonShapes) {
  EMBER_REQUIRE_CUDA();
  for (bool tf32 : {false, true}) {
    Tf32Scope scope(tf32);
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      AcceptedBiasCounter counter;
      Tensor x = random({8, 64, 256}, dt, 1).cuda(), w = random({128, 256}, dt, 2).cuda();
      Tensor b = random({128}, dt, 3).cuda();
      Tensor y = linear(x, w, b);
      EXPECT_EQ(AcceptedBiasCounter::accepted(), 1) << dtype_name(dt) << (tf32 ? " with TF32" : "");
      EXPECT_TRUE(testing::tensors_close(y, matmul(x.cpu(), w.cpu().t()) + b.cpu(),
                                         tf32 && dt == DType::Float32 ? tf32_tolerance(256) : tolerance(dt, 256)));
    }
  }
}

// gemm_bias_grad on cublasLt (BGRADB) against the CPU kernel on the same
// data: every transpose, the operands' dtype or float32 for the 16-bit
// types, an odd shape and the MLP's (a weight of 1024 x 784 from a batch of
// 256), C and the bias gradient poisoned (NaN) first. linear's own layout
// (op(A) = g^T stored row-major, op(B) = x) must not be declined.
TEST(CudaGemm, BiasGradEpilogueMatchesTheCpuKernel) {
  EMBER_REQUIRE_CUDA();
  const std::pair<DType, DType> pairs[] = {{DType::Float32, DType::Float32},   {DType::Float64, DType::Float64},
                                           {DType::Float16, DType::Float16},   {DType::Float16, DType::Float32},
                                           {DType::BFloat16, DType::BFloat16}, {DType::BFloat16, DType::Float32}};
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 sh : {Shape3{37, 70, 45}, Shape3{1024, 784, 256}}) {
    for (const auto& [dt, c_dt] : pairs) {
      for (int flags = 0; flags < 4; ++flags) {
        const bool ta = flags & 1, tb = flags & 2;
        const int64_t m = sh.m, n = sh.n, k = sh.k;
        Tensor a = random({ta ? k : m, ta ? m : k}, dt, 1), b = random({tb ? n : k, tb ? k : n}, dt, 2);
        GemmArgs g;
        g.dtype = dt;
        g.trans_a = ta, g.trans_b = tb;
        g.m = m, g.n = n, g.k = k;
        g.lda = a.size(1), g.ldb = b.size(1), g.ldc = n;
        Tensor c_cpu = empty({m, n}, c_dt), bias_cpu = empty({m}, c_dt);
        g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c_cpu.data_ptr();
        ASSERT_TRUE(gemm_bias_grad_stub(DeviceType::CPU)(g, c_dt, bias_cpu.data_ptr()));

        Tensor a_gpu = a.cuda(), b_gpu = b.cuda();
        Tensor c_gpu = full({m, n}, std::nan(""), c_dt, cuda_device(0));
        Tensor bias_gpu = full({m}, std::nan(""), c_dt, cuda_device(0));
        g.device = 0;
        g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
        const std::string what = std::string(dtype_name(dt)) + " -> " + dtype_name(c_dt) + " " + std::to_string(m) +
                                 "x" + std::to_string(n) + "x" + std::to_string(k) + " trans_a " + std::to_string(ta) +
                                 " trans_b " + std::to_string(tb);
        if (!gemm_bias_grad_stub(DeviceType::CUDA)(g, c_dt, bias_gpu.data_ptr())) {
          EXPECT_FALSE(ta && !tb && dt != DType::Float64) << what << ": declined linear's own layout";
          continue;
        }
        const Tolerance tol = tolerance(c_dt, k);
        EXPECT_TRUE(testing::tensors_close(c_gpu, c_cpu, tol)) << what;
        EXPECT_TRUE(testing::tensors_close(bias_gpu, bias_cpu, tol)) << what << " bias gradient";
      }
    }
  }
}

// linear's backward takes dW and db from the fused GEMM on the GPU too, in
// each dtype and in float32 from half precision under autocast, and they
// match the CPU's.
TEST(CudaLinear, TheBiasGradEpilogueRunsForTheCommonShapes) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (bool autocast_on : {false, true}) {
      if (autocast_on && dt != DType::Float32) continue;
      for (DType low : {DType::Float16, DType::BFloat16}) {
        if (!autocast_on && low == DType::BFloat16) continue;  // one run without autocast
        Tensor x = random({256, 784}, dt, 1), w = random({1024, 784}, dt, 2), b = random({1024}, dt, 3);
        Tensor g = random({256, 1024}, autocast_on ? low : dt, 4);
        Tensor wg = w.cuda().set_requires_grad(), bg = b.cuda().set_requires_grad();
        AcceptedBiasGradCounter counter;
        Tensor y;
        {
          std::optional<amp::autocast> guard;
          if (autocast_on) guard.emplace(low);
          y = linear(x.cuda(), wg, bg);
        }
        y.backward(g.cuda());
        const std::string what =
            std::string(dtype_name(dt)) + (autocast_on ? std::string(" autocast ") + dtype_name(low) : "");
        EXPECT_EQ(AcceptedBiasGradCounter::accepted(), 1) << what;
        ASSERT_EQ(wg.grad().dtype(), dt) << what;
        ASSERT_EQ(bg.grad().dtype(), dt) << what;
        const Tensor gc = g.to(DType::Float32);
        const Tensor xc = (autocast_on ? x.to(low) : x).to(DType::Float32);
        Tensor dw = matmul(gc.t(), xc), db = gc.sum({0});
        const Tolerance tol = autocast_on || dt == DType::Float32 ? tolerance(DType::Float32, 256) : tolerance(dt, 256);
        EXPECT_TRUE(testing::tensors_close(wg.grad().to(DType::Float32), dw, tol)) << what;
        EXPECT_TRUE(testing::tensors_close(bg.grad().to(DType::Float32), db, tol)) << what;
      }
    }
  }
}

// ---------------- handles, threads and streams ----------------

#if defined(EMBER_WITH_CUDA)

TEST(CudaMatmul, SideStreamsAndThreadsGetTheirOwnHandleBindings) {
  EMBER_REQUIRE_CUDA();
  Tensor a = random({64, 96}, DType::Float32, 1), b = random({96, 80}, DType::Float32, 2);
  Tensor bias = random({80}, DType::Float32, 3);
  Tensor expected = matmul(a, b), expected_linear = linear(a, b.t(), bias);
  Tensor ag = a.cuda(), bg = b.cuda(), biasg = bias.cuda();
  cuda::synchronize(0);  // the side stream does not wait for the default stream
  {
    cuda::StreamGuard guard(cuda::stream_from_pool(0));
    Tensor y = matmul(ag, bg), z = linear(ag, bg.t(), biasg);
    EXPECT_TRUE(testing::tensors_close(y, expected, tolerance(DType::Float32, 96)));
    EXPECT_TRUE(testing::tensors_close(z, expected_linear, tolerance(DType::Float32, 96)));
  }
  std::vector<Tensor> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i)
        results[size_t(2 * t + i)] = (i == 0 ? matmul(ag, bg) : linear(ag, bg.t(), biasg)).cpu();
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(
        testing::tensors_close(results[i], i % 2 == 0 ? expected : expected_linear, tolerance(DType::Float32, 96)))
        << "thread " << i / 2;
  }
}

TEST(CudaMatmul, SteadyStateAllocatesNothingNew) {
  EMBER_REQUIRE_CUDA();
  Tensor a = random({256, 512}, DType::Float16, 1).cuda(), b = random({512, 384}, DType::Float16, 2).cuda();
  Tensor bias = random({384}, DType::Float16, 3).cuda();
  for (int i = 0; i < 3; ++i) {
    matmul(a, b);
    linear(a, b.t(), bias);
  }
  const uint64_t before = cuda::num_device_allocs(0);
  for (int i = 0; i < 20; ++i) {
    matmul(a, b);
    linear(a, b.t(), bias);
  }
  cuda::synchronize(0);
  EXPECT_EQ(cuda::num_device_allocs(0), before);
}

#endif  // EMBER_WITH_CUDA

}  // namespace
}  // namespace ember
