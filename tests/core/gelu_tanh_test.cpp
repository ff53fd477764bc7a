// gelu(x, "tanh") (ember/core/ops/elementwise.cpp, ember/kernels/elementwise_math.h):
// values against the float64 formula and PyTorch's, every floating dtype,
// strided inputs, the float64 gradient and second derivative, the
// approximate argument's errors, and nn::GELU / nn::functional::gelu.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::throws_with;

double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// Values over [-8, 8] in a scrambled order.
Tensor spread(int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = -8 + 16 * double((i * 7919) % n) / double(n - 1);
  return from_vector(v, {n}).to(dtype);
}

TEST(GeluTanh, MatchesPyTorchAndTheFloat64Formula) {
  // torch.nn.functional.gelu(x, approximate='tanh') in float64 (PyTorch 1.13).
  Tensor x = from_vector<double>({-6, -3, -1.5, -0.5, 0, 0.25, 1, 2.5, 7});
  const std::vector<double> torch_y = {
      -8.43964897967453e-11, -0.0036373920817729943, -0.10042842301976707, -0.15428599017485606, 0.0,
      0.149675350701685,     0.8411919906082768,     2.484915733910001,    6.999999999999997};
  std::vector<double> y = to_vector<double>(gelu(x, "tanh"));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], torch_y[i], 1e-15 + 1e-14 * std::fabs(torch_y[i])) << i;
  // Its gradient, from PyTorch's backward.
  const std::vector<double> torch_dx = {
      -7.709976012836329e-10, -0.011584166630969648, -0.12771079315143308, 0.13263009646535764, 0.5,
      0.6953540951510604,     1.0829640838457826,    1.037951576212666,    1.0000000000000278};
  Tensor leaf = x.clone().set_requires_grad();
  gelu(leaf, "tanh").sum().backward();
  std::vector<double> dx = to_vector<double>(leaf.grad());
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], torch_dx[i], 1e-15 + 1e-13 * std::fabs(torch_dx[i])) << i;
}

TEST(GeluTanh, EveryFloatingDtypeComputesInFloat32OrBetter) {
  // Half types compute in float32 and round once: within one rounding of
  // the float64 value (relative 2^-8 for bfloat16, 2^-11 for float16).
  const std::pair<DType, double> cases[] = {
      {DType::Float64, 1e-14}, {DType::Float32, 1e-6}, {DType::BFloat16, 8e-3}, {DType::Float16, 1e-3}};
  for (auto [dt, rtol] : cases) {
    Tensor x = spread(1025, dt);
    Tensor y = gelu(x, "tanh");
    EXPECT_EQ(y.dtype(), dt);
    std::vector<double> in = to_vector<double>(x), out = to_vector<double>(y);
    for (size_t i = 0; i < in.size(); ++i) {
      double want = gelu_tanh_ref(in[i]);
      ASSERT_NEAR(out[i], want, rtol * std::fabs(want) + 1e-6) << dtype_name(dt) << " x=" << in[i];
    }
  }
}

TEST(GeluTanh, StridedAndIntegralInputs) {
  Tensor base = spread(24, DType::Float64).reshape({4, 6});
  Tensor x = base.t().narrow(0, 1, 4);  // non-contiguous
  std::vector<double> in = to_vector<double>(x), out = to_vector<double>(x.gelu("tanh"));
  for (size_t i = 0; i < in.size(); ++i) EXPECT_NEAR(out[i], gelu_tanh_ref(in[i]), 1e-14);
  // Integral inputs promote to float32, as every floating-only op here.
  Tensor y = gelu(arange(-3, 4, 1), "tanh");
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_NEAR(to_vector<double>(y)[4], gelu_tanh_ref(1), 1e-6);
}

TEST(GeluTanh, NoneIsTheExactForm) {
  Tensor x = spread(33, DType::Float64);
  EXPECT_TRUE(equal(gelu(x, "none"), gelu(x)));
  EXPECT_TRUE(equal(x.gelu("none"), x.gelu()));
  EXPECT_FALSE(equal(gelu(x, "tanh"), gelu(x)));
}

TEST(GeluTanh, GradientAndSecondDerivative) {
  Tensor x = testing::random_leaf({3, 5}, 11);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gelu(in[0], "tanh"); }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gelu(in[0].t(), "tanh") * 2.0; }, {x}));
  EXPECT_EQ(gelu(x, "tanh").grad_fn()->name(), "GeluBackward");
  // Under create_graph the fused backward is composed from recorded ops.
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        return autograd::grad({gelu(in[0], "tanh").sum()}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      },
      {x}));
}

TEST(GeluTanh, AnUnknownApproximationNamesTheTwoAccepted) {
  Tensor x = ones({2});
  EXPECT_TRUE(throws_with([&] { gelu(x, "tan"); }, {"gelu", "'tan'", "'none' or 'tanh'"}));
  EXPECT_TRUE(throws_with([&] { x.gelu("Tanh"); }, {"gelu", "'Tanh'", "'none' or 'tanh'"}));
}

TEST(GeluTanh, ModuleAndFunctional) {
  Tensor x = spread(9, DType::Float64);
  nn::GELU exact, approx("tanh");
  EXPECT_TRUE(equal(exact(x), gelu(x)));
  EXPECT_TRUE(equal(approx(x), gelu(x, "tanh")));
  EXPECT_TRUE(equal(nn::functional::gelu(x, "tanh"), gelu(x, "tanh")));
  EXPECT_EQ(approx.str(), "GELU(approximate='tanh')");
  EXPECT_EQ(exact.str(), "GELU(approximate='none')");
  auto copy = std::dynamic_pointer_cast<nn::GELU>(approx.clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->approximate, "tanh");
  // As in PyTorch, the string is checked when the layer runs.
  nn::GELU bad("erf");
  EXPECT_TRUE(throws_with([&] { bad(x); }, {"gelu", "'erf'", "'none' or 'tanh'"}));
}

}  // namespace
}  // namespace ember
