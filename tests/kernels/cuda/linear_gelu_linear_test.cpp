// CUDA linear_gelu_linear against the CPU's composition linear(gelu(linear(
// x, W1, b1)), W2, b2): every float dtype and rank, both approximations,
// with and without the second bias, values and gradients with NaN-poisoned
// allocations (an unwritten d_pre or bias gradient fails); cublasLt's
// DGELU epilogue taking the GPT MLP's shapes in the 16-bit types (float32
// composes), the composition taking hidden sizes that are not a multiple
// of 8; the kernel itself with a wide pre-activation and poisoned outputs;
// autocast as for linear. Weights are scaled by 1 / sqrt(fan-in), as
// layers initialize them, so outputs stay near 1 and tolerances mean what
// they say.
#include <gtest/gtest.h>

#include <algorithm>
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

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

// A leaf of random values; a 2-D one (a weight) scaled by 1 / sqrt(its fan-in).
Tensor leaf(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = random(shape, DType::Float64, seed);
  if (shape.size() == 2) t = t / std::sqrt(double(shape[1]));
  return t.to(dtype).set_requires_grad();
}

// float32 sums of `depth` products in another order differ by about
// 1e-8 * depth. The 16-bit types pass two products and gelu' in 16 bits,
// and the fused epilogue applies gelu' to the float accumulator where the
// CPU rounds it first: four times the usual tolerance, as linear_gelu's
// test allows.
// Gradients summed over `rows` (dW2 most): h = gelu(pre) differs between
// the fused forward, which rounds gelu of the float accumulator once, and
// the composition, which rounds pre and then gelu(pre), by up to an ulp of
// the 16-bit type (float32: the epilogue's gelu against the CPU's, about
// 1e-5 relative); dW2 sums `rows` such differences weighted by the random
// upstream gradient, so it differs by about eps * sqrt(rows) absolute. A
// simulation of both roundings (float64 data, PyTorch's CPU rounding, 17
// to 256 rows) needed up to 2.8 eps * sqrt(rows): atol adds 4 eps *
// sqrt(rows) in the 16-bit types and 2e-5 * sqrt(rows) in float32.
// rows = 0 for values that no row sum reaches (outputs).
Tolerance tolerance(DType dtype, int64_t depth, int64_t rows = 0) {
  const double spread = std::sqrt(double(rows));
  if (dtype == DType::Float32) return {1e-5, 1e-5 + 2e-7 * double(depth) + 2e-5 * spread};
  const Tolerance usual = testing::tolerance_for(dtype);
  const double eps = dtype == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return {4 * usual.rtol, 4 * usual.atol + 4 * eps * spread};
  return usual;
}

// The rows of a linear layer's input: all its dims but the last.
int64_t rows_of(const Shape& input) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < input.size(); ++d) rows *= input[d];
  return rows;
}

// Counts the problems the CUDA gemm_dgelu_bgrad kernel accepted, and those
// with a bias gradient.
class AcceptedGeluGrad {
 public:
  AcceptedGeluGrad() : swap_(DeviceType::CUDA, &count) { accepted() = with_bias_grad() = 0; }
  static int& accepted() {
    static int n = 0;
    return n;
  }
  static int& with_bias_grad() {
    static int n = 0;
    return n;
  }

 private:
  using Swap = testing::StubSwap<GemmGeluGradKernelFn, &gemm_dgelu_bgrad_stub>;
  static bool count(const GemmArgs& g, const void* pre, int64_t ld_pre, void* bias_grad) {
    const bool ok = Swap::real()(g, pre, ld_pre, bias_grad);
    accepted() += ok ? 1 : 0;
    with_bias_grad() += ok && bias_grad != nullptr ? 1 : 0;
    return ok;
  }
  Swap swap_;
};

// in: x, weight1, bias1, weight2 and, when given, bias2.
TensorList mlp(const TensorList& in, const char* approximate = "tanh") {
  return {linear_gelu_linear(in[0], in[1], in[2], in[3], in.size() > 4 ? in[4] : Tensor(), approximate)};
}

TEST(CudaLinearGeluLinear, EveryDtypeRankAndApproximationMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const int64_t k = 33, hidden = 48, out = 24;
  for (const char* approximate : {"tanh", "none"}) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      for (int64_t rank = 1; rank <= 4; ++rank) {
        for (bool bias2 : {true, false}) {
          const Shape input = testing::linear_input_shape(rank, k);
          TensorList in = {leaf(input, dt, uint64_t(rank)), leaf({hidden, k}, dt, 10), leaf({hidden}, dt, 11),
                           leaf({out, hidden}, dt, 12)};
          if (bias2) in.push_back(leaf({out}, dt, 13));
          EXPECT_TRUE(cuda_matches_cpu([approximate](const TensorList& t) { return mlp(t, approximate); }, in, true,
                                       tolerance(dt, 2 * hidden), tolerance(dt, 2 * hidden, rows_of(input))))
              << approximate << " " << rank << "-D " << dtype_name(dt) << " bias2 " << bias2;
        }
      }
    }
  }
}

// The GPT MLP's shape ([B, T, C] into 4C and back): in the 16-bit types the
// backward's gelu' GEMM is cublasLt's DGELU (with the bias gradient where
// cublasLt takes DGELU_BGRAD), float32 composes, and every gradient agrees
// with the CPU.
TEST(CudaLinearGeluLinear, TheGeluGradEpilogueRunsForTheMlpShape) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    AcceptedGeluGrad counter;
    const TensorList in = {leaf({4, 64, 128}, dt, 1), leaf({512, 128}, dt, 2), leaf({512}, dt, 3),
                           leaf({128, 512}, dt, 4), leaf({128}, dt, 5)};
    EXPECT_TRUE(cuda_matches_cpu([](const TensorList& t) { return mlp(t); }, in, true, tolerance(dt, 512),
                                 tolerance(dt, 512, 4 * 64)))
        << dtype_name(dt);
    EXPECT_EQ(AcceptedGeluGrad::accepted(), dt == DType::Float32 ? 0 : 1) << dtype_name(dt);
  }
}

// Hidden sizes of 7 and 20 are not multiples of 8 (cublasLt's aux leading
// dim): the forward GEMM declines and the op composes, the gelu' GEMM is
// never asked. Odd rows, inputs and outputs around a hidden size of 24 may
// take both epilogues.
TEST(CudaLinearGeluLinear, OddSizesMatchCpu) {
  EMBER_REQUIRE_CUDA();
  auto fn = [](const TensorList& t) { return mlp(t); };
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (int64_t hidden : {7, 20}) {
      AcceptedGeluGrad counter;
      const TensorList in = {leaf({37, 19}, dt, 1), leaf({hidden, 19}, dt, 2), leaf({hidden}, dt, 3),
                             leaf({13, hidden}, dt, 4), leaf({13}, dt, 5)};
      EXPECT_TRUE(cuda_matches_cpu(fn, in, true, tolerance(dt, 2 * hidden), tolerance(dt, 2 * hidden, 37)))
          << hidden << " " << dtype_name(dt);
      EXPECT_EQ(AcceptedGeluGrad::accepted(), 0) << hidden << " " << dtype_name(dt);
    }
    const TensorList in = {leaf({37, 19}, dt, 6), leaf({24, 19}, dt, 7), leaf({24}, dt, 8), leaf({13, 24}, dt, 9),
                           leaf({13}, dt, 10)};
    EXPECT_TRUE(cuda_matches_cpu(fn, in, true, tolerance(dt, 48), tolerance(dt, 48, 37))) << "24 " << dtype_name(dt);
  }
}

// The kernel itself: d_pre and the bias gradient poisoned (NaN) first, pre
// read with a leading dim wider than n, against float64 on the CPU; with
// and without the bias gradient (DGELU_BGRAD and DGELU).
TEST(CudaLinearGeluLinear, KernelWritesTheGeluGradientAndItsColumnSums) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (bool want_bias_grad : {true, false}) {
      const int64_t m = 40, n = 16, k = 32, ld_pre = 24;
      const Tensor a = random({m, k}, dt, 1), w = random({k, n}, dt, 2), pre = random({m, ld_pre}, dt, 3);
      Tensor c = full({m, n}, std::nan(""), dt, cuda_device(0)),
             bias_grad = full({n}, std::nan(""), dt, cuda_device(0));
      const Tensor ag = a.cuda(), wg = w.cuda(), pg = pre.cuda();
      GemmArgs g;
      g.dtype = dt;
      g.m = m, g.n = n, g.k = k;
      g.a = ag.data_ptr(), g.lda = k;
      g.b = wg.data_ptr(), g.ldb = n;
      g.c = c.data_ptr(), g.ldc = n;
      const bool accepted = gemm_dgelu_bgrad_stub(DeviceType::CUDA)(g, pg.data_ptr(), ld_pre,
                                                                    want_bias_grad ? bias_grad.data_ptr() : nullptr);
      if (dt == DType::Float32) {  // the composition's precision: declined
        EXPECT_FALSE(accepted);
        continue;
      }
      // cublasLt may decline DGELU_BGRAD (the caller sums the bias then), not DGELU.
      if (want_bias_grad && !accepted) continue;
      ASSERT_TRUE(accepted) << dtype_name(dt) << " " << want_bias_grad;
      const Tensor product = matmul(a.to(DType::Float64), w.to(DType::Float64));
      const Tensor expected = gelu_backward(product, pre.narrow(1, 0, n).to(DType::Float64), "tanh");
      EXPECT_TRUE(testing::tensors_close(c.to(DType::Float64), expected, tolerance(dt, k))) << dtype_name(dt);
      if (want_bias_grad) {
        // The sums may add d_pre's values after their rounding: m of them.
        const Tolerance t = tolerance(dt, k);
        EXPECT_TRUE(testing::tensors_close(bias_grad.to(DType::Float64), sum_to(expected, {n}),
                                           {t.rtol, t.atol * std::sqrt(double(m))}))
            << dtype_name(dt);
      } else {
        for (float v : to_vector<float>(bias_grad.to(DType::Float32))) {
          EXPECT_TRUE(std::isnan(v)) << "DGELU writes no bias gradient";
        }
      }
    }
  }
}

// Under autocast linear_gelu_linear is the composition under autocast:
// half-precision results, float32 gradients for float32 parameters. A
// float32 first bias takes its gradient from dW1's GEMM, so the gelu' GEMM
// runs without its bias gradient (DGELU).
TEST(CudaLinearGeluLinear, AutocastBehavesAsTheComposition) {
  EMBER_REQUIRE_CUDA();
  for (DType autocast_dtype : {DType::Float16, DType::BFloat16}) {
    const Tensor x = random({64, 128}, DType::Float32, 1).cuda();
    TensorList fused_params, composed_params;
    for (const Shape& s : {Shape{256, 128}, Shape{256}, Shape{128, 256}, Shape{128}}) {
      fused_params.push_back(leaf(s, DType::Float32, uint64_t(s[0] + s.size())).detach().cuda().set_requires_grad());
      composed_params.push_back(fused_params.back().detach().clone().set_requires_grad());
    }
    const TensorList& f = fused_params;
    const TensorList& c = composed_params;
    Tensor fused, composed;
    AcceptedGeluGrad counter;
    {
      amp::autocast guard(autocast_dtype);
      fused = linear_gelu_linear(x, f[0], f[1], f[2], f[3]);
      composed = linear(gelu(linear(x, c[0], c[1]), "tanh"), c[2], c[3]);
    }
    EXPECT_EQ(fused.dtype(), autocast_dtype);
    EXPECT_TRUE(testing::tensors_close(fused, composed, tolerance(autocast_dtype, 256)));
    const Tensor g = random({64, 128}, autocast_dtype, 4).cuda();
    fused.backward(g);
    composed.backward(g);
    EXPECT_EQ(AcceptedGeluGrad::accepted(), 1) << dtype_name(autocast_dtype);
    EXPECT_EQ(AcceptedGeluGrad::with_bias_grad(), 0) << dtype_name(autocast_dtype);
    // dW2 (parameter 2) within tolerance() for 64 rows, and at least the
    // 2e-2 relative and 5e-2 that the other gradients, whose two paths
    // differ in where gelu' rounds, are held to.
    const Tolerance dw2 = tolerance(autocast_dtype, 256, 64);
    const Tolerance others = {2e-2, 5e-2};
    for (size_t i = 0; i < f.size(); ++i) {
      EXPECT_EQ(f[i].grad().dtype(), DType::Float32) << i;
      const Tolerance t = i == 2 ? Tolerance{std::max(dw2.rtol, others.rtol), std::max(dw2.atol, others.atol)} : others;
      EXPECT_TRUE(testing::tensors_close(f[i].grad(), c[i].grad(), t))
          << dtype_name(autocast_dtype) << " parameter " << i;
    }
  }
}

}  // namespace
}  // namespace ember
