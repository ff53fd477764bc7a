// CUDA linear_gelu against the CPU's composition gelu(linear(x, W, b)):
// every float dtype and rank, both approximations, values and gradients
// with NaN-poisoned allocations (an unwritten y or pre-activation fails);
// cublasLt's GELU_AUX_BIAS epilogue taking the common shapes, and the
// composition taking out_features that are not a multiple of 8 (the aux
// leading dim cublasLt requires); autocast as for linear.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"
#include "ember/parallel/amp/autocast.h"
#include "support/cuda_compare.h"
#include "support/stub_swap.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::Tolerance;

const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

Tensor leaf(const Shape& shape, DType dtype, uint64_t seed) { return random(shape, dtype, seed).set_requires_grad(); }

// float32 sums of `depth` products in another order differ by about
// 1e-8 * depth; the 16-bit types accumulate in float and round once, so the
// fused epilogue (GELU of the float accumulator) and the CPU (GELU of the
// rounded pre-activation) differ by about one ulp: their defaults hold.
// Half types: four times the usual tolerance. The input gradient passes
// gelu' and a second product in 16 bits, and cuBLAS rounds the
// pre-activation differently from the CPU's float GEMM; on the H100 a few
// elements in a thousand (the composed path too, where the epilogue
// declines) differed by up to 1% from the CPU's.
Tolerance tolerance(DType dtype, int64_t depth) {
  if (dtype == DType::Float32) return {1e-5, 1e-5 + 2e-7 * double(depth)};
  const Tolerance usual = testing::tolerance_for(dtype);
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return {4 * usual.rtol, 4 * usual.atol};
  return usual;
}

// Counts the problems the CUDA gemm_bias_gelu kernel accepted.
class AcceptedGelu {
 public:
  AcceptedGelu() : swap_(DeviceType::CUDA, &count) { accepted() = 0; }
  static int& accepted() {
    static int n = 0;
    return n;
  }

 private:
  using Swap = testing::StubSwap<GemmBiasGeluKernelFn, &gemm_bias_gelu_stub>;
  static bool count(const GemmArgs& g, const void* bias, void* pre, int64_t ld_pre) {
    const bool ok = Swap::real()(g, bias, pre, ld_pre);
    accepted() += ok ? 1 : 0;
    return ok;
  }
  Swap swap_;
};

TEST(CudaLinearGelu, EveryDtypeRankAndApproximationMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const int64_t k = 33, n = 48;
  for (const char* approximate : {"tanh", "none"}) {
    for (DType dt : kFloatTypes) {
      for (int64_t rank = 1; rank <= 4; ++rank) {
        Tensor x = leaf(testing::linear_input_shape(rank, k), dt, uint64_t(rank)), w = leaf({n, k}, dt, 10),
               b = leaf({n}, dt, 11);
        auto fn = [approximate](const TensorList& in) {
          return TensorList{linear_gelu(in[0], in[1], in[2], approximate)};
        };
        EXPECT_TRUE(cuda_matches_cpu(fn, {x, w, b}, true, tolerance(dt, 66)))
            << approximate << " " << rank << "-D " << dtype_name(dt);
      }
    }
  }
}

// The GPT MLP's first layer, a [B, T, C] input into 4C features: one fused
// GEMM forward, and the backward (gelu_backward on the saved pre-activation,
// then linear's backward) agrees with the CPU.
TEST(CudaLinearGelu, TheGeluEpilogueRunsForTheCommonShapes) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    AcceptedGelu counter;
    Tensor x = leaf({4, 64, 128}, dt, 1), w = leaf({512, 128}, dt, 2), b = leaf({512}, dt, 3);
    auto fn = [](const TensorList& in) { return TensorList{linear_gelu(in[0], in[1], in[2])}; };
    EXPECT_TRUE(cuda_matches_cpu(fn, {x, w, b}, true, tolerance(dt, 256))) << dtype_name(dt);
    EXPECT_EQ(AcceptedGelu::accepted(), 1) << dtype_name(dt) << ": cublasLt declined GELU_AUX_BIAS";
  }
}

// out_features of 7 and 20 are not multiples of 8: the aux leading dim
// cublasLt requires is unmet, so the kernel declines and linear_gelu
// composes. Odd rows and in_features with 24 outputs may take the epilogue.
TEST(CudaLinearGelu, OddSizesMatchCpu) {
  EMBER_REQUIRE_CUDA();
  auto fn = [](const TensorList& in) { return TensorList{linear_gelu(in[0], in[1], in[2])}; };
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (int64_t n : {7, 20}) {
      AcceptedGelu counter;
      Tensor x = leaf({37, 19}, dt, 1), w = leaf({n, 19}, dt, 2), b = leaf({n}, dt, 3);
      EXPECT_TRUE(cuda_matches_cpu(fn, {x, w, b}, true, tolerance(dt, 19))) << n << " " << dtype_name(dt);
      EXPECT_EQ(AcceptedGelu::accepted(), 0) << n << " " << dtype_name(dt);
    }
    Tensor x = leaf({37, 19}, dt, 4), w = leaf({24, 19}, dt, 5), b = leaf({24}, dt, 6);
    EXPECT_TRUE(cuda_matches_cpu(fn, {x, w, b}, true, tolerance(dt, 19))) << "24 " << dtype_name(dt);
  }
}

// The kernel itself: pre written with a leading dim wider than n, C and pre
// poisoned (NaN) first, against the CPU composition of the same data.
TEST(CudaLinearGelu, KernelWritesPreAndOutputWithTheirLeadingDims) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    const int64_t m = 40, n = 16, k = 32, ld_pre = 24;
    Tensor a = random({m, k}, dt, 1), w = random({n, k}, dt, 2), bias = random({n}, dt, 3);
    Tensor c = full({m, n}, std::nan(""), dt, cuda_device(0)),
           pre = full({m, ld_pre}, std::nan(""), dt, cuda_device(0));
    Tensor ag = a.cuda(), wg = w.cuda(), bg = bias.cuda();
    GemmArgs g;
    g.dtype = dt;
    g.m = m, g.n = n, g.k = k;
    g.trans_b = true;  // op(B) = W^T
    g.a = ag.data_ptr(), g.lda = k;
    g.b = wg.data_ptr(), g.ldb = k;
    g.c = c.data_ptr(), g.ldc = n;
    ASSERT_TRUE(gemm_bias_gelu_stub(DeviceType::CUDA)(g, bg.data_ptr(), pre.data_ptr(), ld_pre)) << dtype_name(dt);
    const Tensor expected_pre = linear(a, w, bias);
    EXPECT_TRUE(testing::tensors_close(pre.narrow(1, 0, n), expected_pre, tolerance(dt, k))) << dtype_name(dt);
    EXPECT_TRUE(testing::tensors_close(c, gelu(expected_pre.to(DType::Float64), "tanh").to(dt), tolerance(dt, k)))
        << dtype_name(dt);
  }
}

// A product past lt_matmul's copying threshold whose rows and k are not
// 16-byte multiples runs on padded copies; the GELU epilogue fixes n, and
// pre keeps its own leading dim.
TEST(CudaLinearGelu, LargeMisalignedProblemsRunOnPaddedCopiesAndMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    const int64_t m = 515, n = 1027, k = 513, ld_pre = 1032;  // 2.7e8 multiply-adds
    Tensor a = random({m, k}, dt, 7), w = random({n, k}, dt, 8), bias = random({n}, dt, 9);
    Tensor c = full({m, n}, std::nan(""), dt, cuda_device(0)),
           pre = full({m, ld_pre}, std::nan(""), dt, cuda_device(0));
    Tensor ag = a.cuda(), wg = w.cuda(), bg = bias.cuda();
    GemmArgs g;
    g.dtype = dt;
    g.m = m, g.n = n, g.k = k;
    g.trans_b = true;
    g.a = ag.data_ptr(), g.lda = k;
    g.b = wg.data_ptr(), g.ldb = k;
    g.c = c.data_ptr(), g.ldc = n;
    if (!gemm_bias_gelu_stub(DeviceType::CUDA)(g, bg.data_ptr(), pre.data_ptr(), ld_pre)) continue;  // may decline
    const Tensor expected_pre = linear(a.to(DType::Float64), w.to(DType::Float64), bias.to(DType::Float64));
    EXPECT_TRUE(testing::tensors_close(pre.narrow(1, 0, n).to(DType::Float64), expected_pre, tolerance(dt, k)))
        << dtype_name(dt);
    EXPECT_TRUE(testing::tensors_close(c.to(DType::Float64), gelu(expected_pre, "tanh"), tolerance(dt, k)))
        << dtype_name(dt);
  }
}

// Under float16 autocast linear_gelu is gelu(linear()) under autocast: a
// float16 result from the fused GEMM, float32 gradients for float32
// parameters.
TEST(CudaLinearGelu, AutocastBehavesAsTheComposition) {
  EMBER_REQUIRE_CUDA();
  Tensor x = random({64, 128}, DType::Float32, 1).cuda();
  Tensor wf = random({256, 128}, DType::Float32, 2).cuda().set_requires_grad();
  Tensor bf = random({256}, DType::Float32, 3).cuda().set_requires_grad();
  Tensor wc = wf.detach().clone().set_requires_grad(), bc = bf.detach().clone().set_requires_grad();
  Tensor fused, composed;
  {
    AcceptedGelu counter;
    amp::autocast guard(DType::Float16);
    fused = linear_gelu(x, wf, bf);
    composed = gelu(linear(x, wc, bc), "tanh");
    EXPECT_EQ(AcceptedGelu::accepted(), 1);
  }
  EXPECT_EQ(fused.dtype(), DType::Float16);
  EXPECT_TRUE(testing::tensors_close(fused, composed, testing::tolerance_for(DType::Float16)));
  Tensor g = random({64, 256}, DType::Float16, 4).cuda();
  fused.backward(g);
  composed.backward(g);
  EXPECT_EQ(wf.grad().dtype(), DType::Float32);
  EXPECT_EQ(bf.grad().dtype(), DType::Float32);
  EXPECT_TRUE(testing::tensors_close(wf.grad(), wc.grad(), {2e-3, 2e-2}));
  EXPECT_TRUE(testing::tensors_close(bf.grad(), bc.grad(), {2e-3, 2e-2}));
}

}  // namespace
}  // namespace ember
