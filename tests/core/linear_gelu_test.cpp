// linear_gelu and gelu_backward on the CPU: linear_gelu equals
// gelu(linear(x, W, b), approximate) bit for bit on the composed path, for
// every rank, both approximations, with and without bias; float64 gradients
// (first and second order). The fused path (gemm_bias_gelu_stub, CUDA only
// in ember) is driven on the CPU by a test kernel installed in the stub
// (tests/support/fake_gelu_gemms.h), so its graph (LinearBackward under
// GeluBackward on the saved pre-activation), its fallbacks and the
// arguments the kernel receives are checked here;
// tests/kernels/cuda/linear_gelu_test.cpp checks cublasLt's epilogue.
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
using testing::FakeGeluKernel;
using ::testing::HasSubstr;

Tensor random(const Shape& shape, DType dtype = DType::Float64, uint64_t seed = 1) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

// ---------------- the composed path (the CPU's) ----------------

TEST(LinearGelu, EqualsGeluOfLinearForEveryRankAndApproximation) {
  ASSERT_FALSE(gemm_bias_gelu_stub.has(DeviceType::CPU));
  for (const char* approximate : {"tanh", "none"}) {
    for (const Shape& xs : {Shape{5}, Shape{4, 5}, Shape{2, 3, 5}, Shape{2, 1, 3, 5}}) {
      for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
        Tensor x = random(xs, dt, 1), w = random({7, 5}, dt, 2), b = random({7}, dt, 3);
        EXPECT_TRUE(equal(linear_gelu(x, w, b, approximate), gelu(linear(x, w, b), approximate)))
            << approximate << " " << shape_str(xs) << " " << dtype_name(dt);
        EXPECT_TRUE(equal(linear_gelu(x, w, Tensor(), approximate), gelu(linear(x, w), approximate)))
            << approximate << " " << shape_str(xs) << " " << dtype_name(dt) << " without bias";
      }
    }
  }
  Tensor x = random({3, 4}), w = random({2, 4}), b = random({2});
  EXPECT_TRUE(equal(linear_gelu(x, w, b), gelu(linear(x, w, b), "tanh"))) << "tanh is the default";
  EXPECT_TRUE(equal(nn::functional::linear_gelu(x, w, b, "none"), gelu(linear(x, w, b))));
}

TEST(LinearGelu, GradcheckBothApproximations) {
  for (const char* approximate : {"tanh", "none"}) {
    Tensor x = testing::random_leaf({2, 3, 4}, 1), w = testing::random_leaf({5, 4}, 2);
    Tensor b = testing::random_leaf({5}, 3);
    EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return linear_gelu(in[0], in[1], in[2], approximate); },
                                   {x, w, b}))
        << approximate;
  }
}

TEST(LinearGelu, SecondOrderGradientsMatchTheComposition) {
  Tensor x = testing::random_leaf({3, 4}, 1), w = testing::random_leaf({5, 4}, 2), b = testing::random_leaf({5}, 3);
  auto second = [&](bool fused) {
    Tensor y = fused ? linear_gelu(x, w, b, "tanh") : gelu(linear(x, w, b), "tanh");
    TensorList g = autograd::grad({(y * y).sum()}, {x, w, b}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    return autograd::grad({(g[0] * g[0]).sum() + (g[1] * g[1]).sum() + (g[2] * g[2]).sum()}, {x, w, b});
  };
  const TensorList composed = second(false);
  {
    FakeGeluGemms fake;
    const TensorList fused = second(true);
    EXPECT_EQ(FakeGeluKernel::calls, 1);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(allclose(fused[i], composed[i], 1e-12, 1e-12)) << i;
  }
}

// ---------------- the fused path, through a test kernel ----------------

TEST(LinearGeluFused, TakesTheKernelForTanhAndRecordsTheComposedGraph) {
  FakeGeluGemms fake;
  for (const Shape& xs : {Shape{4, 6}, Shape{2, 3, 6}}) {
    Tensor x = random(xs, DType::Float64, 1).set_requires_grad();
    Tensor w = random({9, 6}, DType::Float64, 2).set_requires_grad();
    Tensor b = random({9}, DType::Float64, 3).set_requires_grad();
    FakeGeluKernel::calls = 0;
    Tensor y = linear_gelu(x, w, b);
    EXPECT_EQ(FakeGeluKernel::calls, 1) << shape_str(xs);
    EXPECT_EQ(FakeGeluKernel::last_ld_pre, 9);
    ASSERT_NE(y.grad_fn(), nullptr);
    EXPECT_EQ(y.grad_fn()->name(), "GeluBackward");
    Tensor ref = gelu(linear(x.detach(), w.detach(), b.detach()), "tanh");
    EXPECT_TRUE(allclose(y.detach(), ref, 1e-14, 1e-14)) << shape_str(xs);

    Tensor g = random(y.shape(), DType::Float64, 4);
    y.backward(g);
    Tensor xc = x.detach().set_requires_grad(), wc = w.detach().set_requires_grad();
    Tensor bc = b.detach().set_requires_grad();
    gelu(linear(xc, wc, bc), "tanh").backward(g);
    EXPECT_TRUE(allclose(x.grad(), xc.grad(), 1e-12, 1e-12)) << shape_str(xs);
    EXPECT_TRUE(allclose(w.grad(), wc.grad(), 1e-12, 1e-12)) << shape_str(xs);
    EXPECT_TRUE(allclose(b.grad(), bc.grad(), 1e-12, 1e-12)) << shape_str(xs);
  }
  Tensor x = testing::random_leaf({3, 4}, 1), w = testing::random_leaf({5, 4}, 2), b = testing::random_leaf({5}, 3);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return linear_gelu(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_GT(FakeGeluKernel::calls, 0);
}

TEST(LinearGeluFused, ComposesWhereTheKernelCannotOrDeclines) {
  FakeGeluGemms fake;
  Tensor x = random({4, 6}), w = random({5, 6}), b = random({5});
  // "none" (cublasLt's GELU is the tanh form) or no bias: not asked.
  EXPECT_TRUE(equal(linear_gelu(x, w, b, "none"), gelu(linear(x, w, b))));
  EXPECT_TRUE(equal(linear_gelu(x, w, Tensor()), gelu(linear(x, w), "tanh")));
  EXPECT_EQ(FakeGeluKernel::calls, 0);
  // x not 2-D-able (a permuted 3-D view): not asked either.
  Tensor x3 = random({3, 6, 2}).permute({2, 0, 1});
  EXPECT_TRUE(equal(linear_gelu(x3, w, b), gelu(linear(x3, w, b), "tanh")));
  EXPECT_EQ(FakeGeluKernel::calls, 0);
  // Declined: the composition, with its graph.
  FakeGeluKernel::decline = true;
  Tensor xg = x.detach().set_requires_grad();
  Tensor y = linear_gelu(xg, w, b);
  EXPECT_EQ(FakeGeluKernel::calls, 1);
  EXPECT_TRUE(equal(y, gelu(linear(x, w, b), "tanh")));
  y.sum().backward();
  EXPECT_TRUE(xg.grad().defined());
}

TEST(LinearGeluFused, NoGraphWithoutGrad) {
  FakeGeluGemms fake;
  Tensor x = random({4, 6}).set_requires_grad(), w = random({5, 6}), b = random({5});
  {
    NoGradGuard no_grad;
    Tensor y = linear_gelu(x, w, b);
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor y = linear_gelu(random({4, 6}), w, b);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(FakeGeluKernel::calls, 2);
}

// nn::Sequential runs a Linear with a bias followed by a GELU as one
// linear_gelu: the fused kernel once, the composition's values and
// gradients. A Linear without bias, a subclass of Linear (its forward may
// differ) or another order are run member by member. (A second Linear after
// them makes an MLP: tests/core/linear_gelu_linear_test.cpp.)
TEST(LinearGeluFused, SequentialFusesLinearThenGelu) {
  FakeGeluGemms fake;
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 9), std::make_shared<nn::GELU>("tanh"));
  seq->to(DType::Float64);
  Tensor x = random({4, 6}, DType::Float64, 5).set_requires_grad();
  Tensor y = (*seq)(x);
  EXPECT_EQ(FakeGeluKernel::calls, 1);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "GeluBackward");
  auto l0 = seq->at<nn::Linear>(0);
  Tensor xc = x.detach().set_requires_grad();
  Tensor w0 = l0->weight.detach().set_requires_grad(), b0 = l0->bias.detach().set_requires_grad();
  Tensor ref = gelu(linear(xc, w0, b0), "tanh");
  EXPECT_TRUE(allclose(y.detach(), ref.detach(), 1e-14, 1e-14));
  Tensor g = random(y.shape(), DType::Float64, 6);
  y.backward(g);
  ref.backward(g);
  EXPECT_TRUE(allclose(x.grad(), xc.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(l0->weight.grad(), w0.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(l0->bias.grad(), b0.grad(), 1e-12, 1e-12));

  struct ScaledLinear : nn::Linear {
    using nn::Linear::Linear;
    Tensor forward(const Tensor& input) override { return nn::Linear::forward(input) * 2.0; }
  };
  FakeGeluKernel::calls = 0;
  for (auto first : {std::shared_ptr<nn::UnaryModule>(std::make_shared<nn::Linear>(6, 9, false)),
                     std::shared_ptr<nn::UnaryModule>(std::make_shared<ScaledLinear>(6, 9))}) {
    auto unfused = std::make_shared<nn::Sequential>(first, std::make_shared<nn::GELU>("tanh"));
    unfused->to(DType::Float64);
    Tensor expect = gelu((*first)(x.detach()), "tanh");
    EXPECT_TRUE(equal((*unfused)(x.detach()), expect)) << first->name();
  }
  auto reversed =
      std::make_shared<nn::Sequential>(std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Linear>(6, 9));
  reversed->to(DType::Float64);
  (void)(*reversed)(x.detach());
  EXPECT_EQ(FakeGeluKernel::calls, 0);
}

// Under autocast, linear_gelu is gelu(linear()) under autocast: the product
// in the lower precision, the gradients to the float32 parameters in float32.
TEST(LinearGelu, AutocastBehavesAsTheComposition) {
  Tensor x = random({4, 6}, DType::Float32, 1), w = random({5, 6}, DType::Float32, 2);
  Tensor b = random({5}, DType::Float32, 3);
  Tensor wf = w.detach().set_requires_grad(), bf = b.detach().set_requires_grad();
  Tensor wc = w.detach().set_requires_grad(), bc = b.detach().set_requires_grad();
  Tensor fused, composed;
  {
    amp::autocast guard(DeviceType::CPU, DType::BFloat16);
    fused = linear_gelu(x, wf, bf);
    composed = gelu(linear(x, wc, bc), "tanh");
  }
  EXPECT_EQ(fused.dtype(), composed.dtype());
  EXPECT_TRUE(equal(fused, composed));
  fused.sum().backward();
  composed.sum().backward();
  EXPECT_EQ(wf.grad().dtype(), DType::Float32);
  EXPECT_TRUE(equal(wf.grad(), wc.grad()));
  EXPECT_TRUE(equal(bf.grad(), bc.grad()));
}

// ---------------- gelu_backward ----------------

TEST(GeluBackward, IsGelusGradient) {
  for (const char* approximate : {"tanh", "none"}) {
    Tensor x = random({3, 5}).set_requires_grad();
    Tensor g = random({3, 5}, DType::Float64, 9);
    gelu(x, approximate).backward(g);
    EXPECT_TRUE(allclose(gelu_backward(g, x.detach(), approximate), x.grad(), 1e-14, 1e-14)) << approximate;
  }
}

// ---------------- errors ----------------

TEST(LinearGeluErrors, NameTheProblem) {
  std::string e = error_of([] { linear_gelu(random({2, 3}), random({4, 3}), random({4}), "exact"); });
  EXPECT_THAT(e, HasSubstr("linear_gelu: approximate must be 'none' or 'tanh'"));
  e = error_of([] { linear_gelu(random({2, 3}), random({4, 5}), random({4})); });
  EXPECT_THAT(e, HasSubstr("linear: input shape [2, 3] and weight shape [4, 5] do not match"));
  e = error_of([] { gelu_backward(random({2, 3}), random({3, 2}), "tanh"); });
  EXPECT_THAT(e, HasSubstr("gelu_backward: grad and input must match"));
  e = error_of([] { gelu_backward(random({2}), random({2}), "fast"); });
  EXPECT_THAT(e, HasSubstr("gelu_backward: approximate must be 'none' or 'tanh'"));
}

}  // namespace
}  // namespace ember
