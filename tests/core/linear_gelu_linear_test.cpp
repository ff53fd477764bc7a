// linear_gelu_linear on the CPU: the composition linear(gelu(linear(x, W1,
// b1), approximate), W2, b2) bit for bit on the composed path (every rank,
// both approximations, with and without either bias), float64 gradients;
// the fused path (gemm_bias_gelu_stub and gemm_dgelu_bgrad_stub, CUDA only
// in ember) driven by the CPU stand-ins of tests/support/fake_gelu_gemms.h:
// its one node, the gradients each subset of inputs asks for, where the
// first bias's gradient comes from, the fallbacks when a kernel declines or
// is missing, double backward, autocast; and nn::Sequential running a
// Linear, GELU, Linear triple as one op.
// tests/kernels/cuda/linear_gelu_linear_test.cpp checks cublasLt's epilogue.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"
#include "ember/parallel/amp/autocast.h"
#include "support/error_message.h"
#include "support/fake_gelu_gemms.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;
using testing::FakeGeluGemms;
using testing::FakeGeluGradKernel;
using testing::FakeGeluKernel;
using ::testing::HasSubstr;

Tensor random(const Shape& shape, DType dtype = DType::Float64, uint64_t seed = 1) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

// An MLP's parameters: in 6 features, hidden 8 (a multiple of 8, as
// cublasLt's aux leading dim), out 5.
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(DType dtype = DType::Float64, bool bias1 = true, bool bias2 = true)
      : w1(random({8, 6}, dtype, 11)),
        b1(bias1 ? random({8}, dtype, 12) : Tensor()),
        w2(random({5, 8}, dtype, 13)),
        b2(bias2 ? random({5}, dtype, 14) : Tensor()) {}
  Mlp leaves() const {
    Mlp m = *this;
    for (Tensor* t : {&m.w1, &m.b1, &m.w2, &m.b2}) {
      if (t->defined()) *t = t->detach().clone().set_requires_grad();
    }
    return m;
  }
  TensorList params() const { return {w1, b1, w2, b2}; }
};

Tensor fused(const Tensor& x, const Mlp& m, const char* approximate = "tanh") {
  return linear_gelu_linear(x, m.w1, m.b1, m.w2, m.b2, approximate);
}

Tensor composed(const Tensor& x, const Mlp& m, const char* approximate = "tanh") {
  return linear(gelu(linear(x, m.w1, m.b1), approximate), m.w2, m.b2);
}

// The gradients of sum(g * f(x, m)) for x and the parameters that require
// grad (undefined for the others).
TensorList grads_of(Tensor (*f)(const Tensor&, const Mlp&, const char*), const Tensor& x, const Mlp& m,
                    const Tensor& g) {
  f(x, m, "tanh").backward(g);
  TensorList out;
  for (const Tensor& t : {x, m.w1, m.b1, m.w2, m.b2}) out.push_back(t.defined() ? t.grad() : Tensor());
  return out;
}

::testing::AssertionResult all_close(const TensorList& actual, const TensorList& expected, double tol) {
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].defined() != expected[i].defined()) {
      return ::testing::AssertionFailure() << "gradient " << i << " defined in one run only";
    }
    if (!actual[i].defined()) continue;
    if (actual[i].dtype() != expected[i].dtype()) {
      return ::testing::AssertionFailure() << "gradient " << i << " of " << dtype_name(actual[i].dtype())
                                           << ", expected " << dtype_name(expected[i].dtype());
    }
    if (!allclose(actual[i], expected[i], tol, tol)) {
      return ::testing::AssertionFailure() << "gradient " << i << " differs: " << (actual[i] - expected[i]).abs().max();
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------- the composed path (the CPU's) ----------------

TEST(LinearGeluLinear, EqualsTheCompositionForEveryRankApproximationAndBias) {
  ASSERT_FALSE(gemm_bias_gelu_stub.has(DeviceType::CPU));
  ASSERT_FALSE(gemm_dgelu_bgrad_stub.has(DeviceType::CPU));
  for (const char* approximate : {"tanh", "none"}) {
    for (const Shape& xs : {Shape{6}, Shape{4, 6}, Shape{2, 3, 6}, Shape{2, 1, 3, 6}}) {
      for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
        for (bool bias1 : {true, false}) {
          for (bool bias2 : {true, false}) {
            const Mlp m(dt, bias1, bias2);
            const Tensor x = random(xs, dt, 1);
            EXPECT_TRUE(equal(fused(x, m, approximate), composed(x, m, approximate)))
                << approximate << " " << shape_str(xs) << " " << dtype_name(dt) << " " << bias1 << bias2;
          }
        }
      }
    }
  }
  const Mlp m;
  const Tensor x = random({3, 6});
  EXPECT_TRUE(equal(linear_gelu_linear(x, m.w1, m.b1, m.w2, m.b2), composed(x, m, "tanh"))) << "tanh is the default";
  EXPECT_TRUE(equal(nn::functional::linear_gelu_linear(x, m.w1, m.b1, m.w2, m.b2, "none"), composed(x, m, "none")));
}

TEST(LinearGeluLinear, GradcheckBothApproximationsAndBiases) {
  for (const char* approximate : {"tanh", "none"}) {
    for (bool bias2 : {true, false}) {
      TensorList in = {testing::random_leaf({2, 3, 6}, 1), testing::random_leaf({8, 6}, 2),
                       testing::random_leaf({8}, 3), testing::random_leaf({5, 8}, 4),
                       bias2 ? testing::random_leaf({5}, 5) : Tensor()};
      EXPECT_TRUE(testing::gradcheck(
          [&](const TensorList& t) { return linear_gelu_linear(t[0], t[1], t[2], t[3], t[4], approximate); }, in))
          << approximate << " " << bias2;
    }
  }
}

// ---------------- the fused path, through the CPU stand-ins ----------------

TEST(LinearGeluLinearFused, OneNodeWithTheCompositionsValuesAndGradients) {
  FakeGeluGemms fakes;
  for (const Shape& xs : {Shape{4, 6}, Shape{2, 3, 6}}) {
    for (bool bias2 : {true, false}) {
      const Mlp base(DType::Float64, true, bias2);
      const Mlp m = base.leaves(), mc = base.leaves();
      const Tensor x = random(xs, DType::Float64, 1).set_requires_grad();
      const Tensor xc = x.detach().clone().set_requires_grad();
      FakeGeluKernel::calls = FakeGeluGradKernel::calls = 0;
      const Tensor y = fused(x, m);
      EXPECT_EQ(FakeGeluKernel::calls, 1);
      EXPECT_EQ(FakeGeluKernel::last_ld_pre, 8);
      ASSERT_NE(y.grad_fn(), nullptr);
      EXPECT_EQ(y.grad_fn()->name(), "LinearGeluLinearBackward");
      EXPECT_TRUE(allclose(y.detach(), composed(x.detach(), base, "tanh"), 1e-14, 1e-14)) << shape_str(xs);

      const Tensor g = random(y.shape(), DType::Float64, 4);
      const TensorList got = grads_of(&fused, x, m, g);
      EXPECT_EQ(FakeGeluGradKernel::calls, 1);
      EXPECT_EQ(FakeGeluGradKernel::last_ld_pre, 8);
      EXPECT_TRUE(FakeGeluGradKernel::last_had_bias_grad) << "db1 comes from d_pre's GEMM in its own dtype";
      EXPECT_TRUE(all_close(got, grads_of(&composed, xc, mc, g), 1e-12)) << shape_str(xs) << " " << bias2;
    }
  }
  TensorList in = {testing::random_leaf({3, 6}, 1), testing::random_leaf({8, 6}, 2), testing::random_leaf({8}, 3),
                   testing::random_leaf({5, 8}, 4), testing::random_leaf({5}, 5)};
  FakeGeluGradKernel::calls = 0;
  EXPECT_TRUE(
      testing::gradcheck([](const TensorList& t) { return linear_gelu_linear(t[0], t[1], t[2], t[3], t[4]); }, in));
  EXPECT_GT(FakeGeluGradKernel::calls, 0);
}

// Each subset of inputs asks for its own gradients only; the GEMM with
// gelu' in its epilogue runs when a gradient passes the GELU.
TEST(LinearGeluLinearFused, GradientsOfEachSubsetOfInputs) {
  FakeGeluGemms fakes;
  const Mlp base;
  const Tensor x0 = random({4, 6}, DType::Float64, 1), g = random({4, 5}, DType::Float64, 4);
  for (int mask = 1; mask < 32; ++mask) {
    auto pick = [mask](const Tensor& t, int bit) {
      return mask & (1 << bit) ? t.detach().clone().set_requires_grad() : t.detach().clone();
    };
    const Tensor x = pick(x0, 0), xc = pick(x0, 0);
    Mlp m = base, mc = base;
    m.w1 = pick(base.w1, 1), m.b1 = pick(base.b1, 2), m.w2 = pick(base.w2, 3), m.b2 = pick(base.b2, 4);
    mc.w1 = pick(base.w1, 1), mc.b1 = pick(base.b1, 2), mc.w2 = pick(base.w2, 3), mc.b2 = pick(base.b2, 4);
    FakeGeluGradKernel::calls = 0;
    fused(x, m).backward(g);
    composed(xc, mc, "tanh").backward(g);
    EXPECT_EQ(FakeGeluGradKernel::calls, (mask & 7) != 0 ? 1 : 0) << mask;
    const Tensor pairs[][2] = {{x, xc}, {m.w1, mc.w1}, {m.b1, mc.b1}, {m.w2, mc.w2}, {m.b2, mc.b2}};
    for (int i = 0; i < 5; ++i) {
      const Tensor &a = pairs[i][0], &b = pairs[i][1];
      ASSERT_EQ(a.grad().defined(), b.grad().defined()) << mask << " input " << i;
      if (a.grad().defined()) EXPECT_TRUE(allclose(a.grad(), b.grad(), 1e-12, 1e-12)) << mask << " input " << i;
    }
  }
}

// A declined or missing gelu' GEMM: gelu_backward on the saved
// pre-activation, the same gradients. A declined forward GEMM, "none", no
// first bias or a layout the GEMM cannot take: the composition, op by op.
TEST(LinearGeluLinearFused, FallsBackWhereAKernelDeclinesOrIsMissing) {
  const Mlp base;
  const Tensor x0 = random({4, 6}, DType::Float64, 1), g = random({4, 5}, DType::Float64, 4);
  const Tensor x_composed = x0.detach().clone().set_requires_grad();
  const Mlp m_composed = base.leaves();
  const TensorList want = grads_of(&composed, x_composed, m_composed, g);
  for (int how = 0; how < 2; ++how) {
    FakeGeluGemms fakes(/*with_grad_kernel=*/how == 0);
    FakeGeluGradKernel::decline = how == 0;
    const Tensor x = x0.detach().clone().set_requires_grad();
    const Mlp m = base.leaves();
    const Tensor y = fused(x, m);
    EXPECT_EQ(y.grad_fn()->name(), "LinearGeluLinearBackward");
    EXPECT_TRUE(all_close(grads_of(&fused, x, m, g), want, 1e-12)) << how;
    // Declined with the bias gradient, then asked without it (DGELU).
    EXPECT_EQ(FakeGeluGradKernel::calls, how == 0 ? 2 : 0);
  }

  FakeGeluGemms fakes;
  FakeGeluKernel::decline = true;
  Tensor x = x0.detach().clone().set_requires_grad();
  Mlp m = base.leaves();
  EXPECT_TRUE(equal(fused(x, m), composed(x0, base, "tanh")));
  EXPECT_EQ(FakeGeluKernel::calls, 1);
  EXPECT_TRUE(all_close(grads_of(&fused, x, m, g), want, 1e-12));
  EXPECT_EQ(FakeGeluGradKernel::calls, 0);

  FakeGeluKernel::decline = false;
  FakeGeluKernel::calls = 0;
  EXPECT_TRUE(equal(fused(x0, base, "none"), composed(x0, base, "none")));
  const Mlp no_bias1(DType::Float64, false, true);
  EXPECT_TRUE(equal(fused(x0, no_bias1), composed(x0, no_bias1, "tanh")));
  const Tensor x3 = random({3, 6, 2}).permute({2, 0, 1});  // not 2-D-able
  EXPECT_TRUE(equal(fused(x3, base), composed(x3, base, "tanh")));
  EXPECT_EQ(FakeGeluKernel::calls, 0);
}

TEST(LinearGeluLinearFused, NoGraphWithoutGrad) {
  FakeGeluGemms fakes;
  const Mlp m = Mlp().leaves();
  {
    NoGradGuard no_grad;
    const Tensor y = fused(random({4, 6}), m);
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_FALSE(fused(random({4, 6}), Mlp()).requires_grad());
  EXPECT_EQ(FakeGeluKernel::calls, 2);
}

// Under create_graph the node composes differentiable ops (the gelu' GEMM is
// not asked), so gradients of gradients are the composition's. (The second
// backward passes the node again, without create_graph.)
TEST(LinearGeluLinearFused, SecondOrderGradientsMatchTheComposition) {
  const Tensor x0 = random({3, 6}, DType::Float64, 1);
  const Mlp base;
  auto second = [&](bool use_fused) {
    const Tensor x = x0.detach().clone().set_requires_grad();
    const Mlp m = base.leaves();
    const Tensor y = use_fused ? fused(x, m) : composed(x, m, "tanh");
    const TensorList in = {x, m.w1, m.b1, m.w2, m.b2};
    const TensorList g = autograd::grad({(y * y).sum()}, in, {}, /*retain_graph=*/true, /*create_graph=*/true);
    EXPECT_EQ(FakeGeluGradKernel::calls, 0) << "the backward under create_graph composes";
    Tensor total = (g[0] * g[0]).sum();
    for (size_t i = 1; i < g.size(); ++i) total = total + (g[i] * g[i]).sum();
    return autograd::grad({total}, in);
  };
  const TensorList want = second(false);
  FakeGeluGemms fakes;
  const TensorList got = second(true);
  EXPECT_EQ(FakeGeluKernel::calls, 1);
  EXPECT_TRUE(all_close(got, want, 1e-10));
}

// Under autocast both products run in the lower precision and the float32
// parameters get float32 gradients. A float32 first bias takes its gradient
// from dW1's GEMM in float32 (the gelu' GEMM writes it in bfloat16); a
// bfloat16 one from the gelu' GEMM.
TEST(LinearGeluLinearFused, AutocastBehavesAsTheComposition) {
  for (DType param_dtype : {DType::Float32, DType::BFloat16}) {
    FakeGeluGemms fakes;
    const Mlp base(param_dtype);
    const Tensor x0 = random({4, 6}, DType::Float32, 1);
    const Tensor x = x0.detach().clone().set_requires_grad(), xc = x0.detach().clone().set_requires_grad();
    const Mlp m = base.leaves(), mc = base.leaves();
    Tensor y, yc;
    {
      amp::autocast guard(DeviceType::CPU, DType::BFloat16);
      y = fused(x, m);
      yc = composed(xc, mc, "tanh");
    }
    EXPECT_EQ(FakeGeluKernel::calls, 1);
    EXPECT_EQ(y.dtype(), DType::BFloat16);
    EXPECT_TRUE(equal(y, yc)) << dtype_name(param_dtype);
    const Tensor g = random({4, 5}, DType::BFloat16, 4);
    y.backward(g);
    yc.backward(g);
    EXPECT_EQ(FakeGeluGradKernel::calls, 1);
    EXPECT_EQ(FakeGeluGradKernel::last_had_bias_grad, param_dtype == DType::BFloat16);
    EXPECT_EQ(x.grad().dtype(), DType::Float32);
    const TensorList got = {x.grad(), m.w1.grad(), m.b1.grad(), m.w2.grad(), m.b2.grad()};
    const TensorList want = {xc.grad(), mc.w1.grad(), mc.b1.grad(), mc.w2.grad(), mc.b2.grad()};
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), want[i].dtype()) << dtype_name(param_dtype) << " " << i;
      EXPECT_TRUE(allclose(got[i].to(DType::Float64), want[i].to(DType::Float64), 1e-2, 1e-2))
          << dtype_name(param_dtype) << " " << i;
    }
  }
}

// nn::Sequential runs an exact Linear (with a bias), GELU, Linear as one
// linear_gelu_linear; a Linear and a GELU followed by anything else stay one
// linear_gelu, and a subclass of Linear in third place is run as itself.
TEST(LinearGeluLinearFused, SequentialFusesLinearGeluLinear) {
  FakeGeluGemms fakes;
  for (bool bias2 : {true, false}) {
    auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::GELU>("tanh"),
                                                std::make_shared<nn::Linear>(8, 5, bias2));
    seq->to(DType::Float64);
    const Tensor x = random({4, 6}, DType::Float64, 5).set_requires_grad();
    FakeGeluKernel::calls = FakeGeluGradKernel::calls = 0;
    const Tensor y = (*seq)(x);
    EXPECT_EQ(FakeGeluKernel::calls, 1);
    ASSERT_NE(y.grad_fn(), nullptr);
    EXPECT_EQ(y.grad_fn()->name(), "LinearGeluLinearBackward");
    auto l0 = seq->at<nn::Linear>(0), l2 = seq->at<nn::Linear>(2);
    const Tensor xc = x.detach().clone().set_requires_grad();
    Mlp mc;
    mc.w1 = l0->weight, mc.b1 = l0->bias, mc.w2 = l2->weight, mc.b2 = l2->bias;
    mc = mc.leaves();
    const Tensor g = random(y.shape(), DType::Float64, 6);
    y.backward(g);
    composed(xc, mc, "tanh").backward(g);
    EXPECT_EQ(FakeGeluGradKernel::calls, 1);
    EXPECT_TRUE(allclose(x.grad(), xc.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(allclose(l0->weight.grad(), mc.w1.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(allclose(l0->bias.grad(), mc.b1.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(allclose(l2->weight.grad(), mc.w2.grad(), 1e-12, 1e-12));
    if (bias2) EXPECT_TRUE(allclose(l2->bias.grad(), mc.b2.grad(), 1e-12, 1e-12));
  }

  struct ScaledLinear : nn::Linear {
    using nn::Linear::Linear;
    Tensor forward(const Tensor& input) override { return nn::Linear::forward(input) * 2.0; }
  };
  const Tensor x = random({4, 6}, DType::Float64, 5);
  auto pair_then_subclass = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::GELU>("tanh"), std::make_shared<ScaledLinear>(8, 5));
  auto pair_then_dropout = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Dropout>(0.0));
  for (const auto& seq : {pair_then_subclass, pair_then_dropout}) {
    seq->to(DType::Float64);
    FakeGeluKernel::calls = 0;
    auto l0 = seq->at<nn::Linear>(0);
    const Tensor pair = gelu(linear(x, l0->weight, l0->bias), "tanh");
    const Tensor expect = (*(*seq)[2])(pair);
    EXPECT_TRUE(allclose((*seq)(x), expect, 1e-14, 1e-14)) << (*seq)[2]->name();
    EXPECT_EQ(FakeGeluKernel::calls, 1) << (*seq)[2]->name() << ": the pair still runs as linear_gelu";
  }
  auto no_bias =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 8, false), std::make_shared<nn::GELU>("tanh"),
                                       std::make_shared<nn::Linear>(8, 5));
  no_bias->to(DType::Float64);
  FakeGeluKernel::calls = 0;
  (void)(*no_bias)(x);
  EXPECT_EQ(FakeGeluKernel::calls, 0);
}

// ---------------- errors ----------------

TEST(LinearGeluLinearErrors, NameTheProblem) {
  const Mlp m;
  std::string e = error_of([&] { linear_gelu_linear(random({2, 6}), m.w1, m.b1, m.w2, m.b2, "exact"); });
  EXPECT_THAT(e, HasSubstr("linear_gelu_linear: approximate must be 'none' or 'tanh'"));
  e = error_of([&] { linear_gelu_linear(random({2, 6}), m.w1, m.b1, random({5, 7}), m.b2); });
  EXPECT_THAT(e, HasSubstr("linear: input shape [2, 8] and weight shape [5, 7] do not match"));
  FakeGeluGemms fakes;
  e = error_of([&] { linear_gelu_linear(random({2, 6}), m.w1, m.b1, random({5, 7}), m.b2); });
  EXPECT_THAT(e, HasSubstr("linear: input shape [2, 8] and weight shape [5, 7] do not match"));
  e = error_of([&] { linear_gelu_linear(random({2, 6}), m.w1, m.b1, m.w2, random({4})); });
  EXPECT_THAT(e, HasSubstr("linear: the bias must be 1-D [out_features] = [5]"));
}

}  // namespace
}  // namespace ember
