// Higher-order gradients (create_graph) through ops whose first backward is
// a fused kernel: the second derivative must be right, not silently zero.
#include <gtest/gtest.h>

#include <cmath>

#include "support/gradcheck.h"

namespace ember {
namespace {

// d/dx of the first derivative, checked against finite differences of the
// first derivative itself.
::testing::AssertionResult second_derivative_matches(Tensor (*f)(const Tensor&), double at) {
  auto first = [f](double x0) {
    Tensor x = full({1}, x0, DType::Float64).set_requires_grad();
    return autograd::grad({f(x).sum()}, {x})[0].item<double>();
  };
  Tensor x = full({1}, at, DType::Float64).set_requires_grad();
  Tensor g1 = autograd::grad({f(x).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
  double analytic = autograd::grad({g1.sum()}, {x})[0].item<double>();
  double eps = 1e-5, numeric = (first(at + eps) - first(at - eps)) / (2 * eps);
  if (std::fabs(analytic - numeric) <= 1e-6 + 1e-5 * std::fabs(numeric)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "second derivative " << analytic << " vs numeric " << numeric;
}

TEST(DoubleBackward, FusedUnaryBackwardsCompose) {
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return tanh(x); }, 0.7));
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return sigmoid(x); }, -0.4));
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return gelu(x); }, 0.3));
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return exp(x) * relu(x); }, 0.9));
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return erf(x); }, 0.5));
  EXPECT_TRUE(second_derivative_matches([](const Tensor& x) { return sqrt(x) + reciprocal(x); }, 1.3));
}

TEST(DoubleBackward, SoftmaxAndLogSoftmax) {
  Tensor x = testing::random_leaf({2, 5}, 3);
  Generator g(4);
  Tensor w = randn({2, 5}, DType::Float64, kCPU, &g);
  for (bool log_form : {false, true}) {
    // The gradient of <grad of sum(w * softmax(x)), w> with respect to x, against finite differences.
    EXPECT_TRUE(testing::gradcheck(
        [&](const TensorList& in) {
          Tensor y = log_form ? log_softmax(in[0], 1) : softmax(in[0], 1);
          return autograd::grad({(y * w).sum()}, {in[0]}, {}, false, true)[0];
        },
        {x}));
  }
}

TEST(Erf, ValuesAndGradient) {
  Tensor x = from_vector<double>({-1.5, 0.0, 0.25, 2.0}, {4});
  std::vector<double> v = to_vector<double>(erf(x));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i], std::erf(to_vector<double>(x)[i]), 1e-15);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return erf(in[0]); }, {testing::random_leaf({7})}));
}

}  // namespace
}  // namespace ember
