// Gradients of the elementwise ops (ember/core/ops/elementwise.cpp) against
// central differences in float64: every differentiable op, on contiguous,
// transposed, narrowed and broadcast inputs, plus the conventions at
// non-differentiable points (ties of maximum/minimum, pow at 0).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::random_leaf;
using V = std::vector<double>;

// x's values moved away from 0 (and, with positive, made > 0), as a new leaf.
Tensor away_from_zero(const Tensor& x, bool positive) {
  NoGradGuard no_grad;
  Tensor a = x.abs() + 0.3;
  return (positive ? a : a * sign(x)).detach().set_requires_grad();
}

struct UnaryGrad {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
  bool positive_domain;
};

TEST(ElementwiseGrad, EveryUnaryOpOnContiguousAndStridedInputs) {
  const std::vector<UnaryGrad> ops = {
      {"neg", [](const Tensor& x) { return -x; }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, false},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"sign", [](const Tensor& x) { return sign(x) * x; }, false},
      {"sin", [](const Tensor& x) { return sin(x); }, false},
      {"cos", [](const Tensor& x) { return cos(x); }, false},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, false},
      {"erf", [](const Tensor& x) { return erf(x); }, false},
      {"square", [](const Tensor& x) { return square(x); }, false},
      {"pow 3", [](const Tensor& x) { return pow(x, 3); }, false},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }, true},
      {"pow 0", [](const Tensor& x) { return pow(x, 0) * x; }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.8, 0.9); }, false},
      {"clamp min", [](const Tensor& x) { return clamp(x, 0.5, std::nullopt); }, false},
      {"clamp max", [](const Tensor& x) { return clamp(x, std::nullopt, -0.5); }, false},
      {"add scalar", [](const Tensor& x) { return x + 2.5; }, false},
      {"sub scalar", [](const Tensor& x) { return x - 2.5; }, false},
      {"rsub scalar", [](const Tensor& x) { return 2.5 - x; }, false},
      {"mul scalar", [](const Tensor& x) { return x * -1.5; }, false},
      {"div scalar", [](const Tensor& x) { return x / 4.0; }, false},
      {"rdiv scalar", [](const Tensor& x) { return 3.0 / x; }, false},
  };
  for (const UnaryGrad& op : ops) {
    Tensor base = away_from_zero(random_leaf({3, 4}, 41), op.positive_domain);
    // Clamp bounds at +-0.8/0.9 and x beyond 0.3: keep inputs off the corners.
    auto f = [&](const TensorList& in) { return op.f(in[0]); };
    EXPECT_TRUE(gradcheck(f, {base})) << op.name << " contiguous";
    EXPECT_TRUE(gradcheck(f, {base.t()})) << op.name << " transposed";
    EXPECT_TRUE(gradcheck(f, {base.narrow(1, 1, 2)})) << op.name << " narrowed";
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) {
          return op.f(in[0].expand({2, 3, 4}));
        },
        {base}))
        << op.name << " broadcast";
  }
}

struct BinaryGrad {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> f;
  bool positive_a, nonzero_b;
};

TEST(ElementwiseGrad, EveryBinaryOpWithBroadcastingAndStrides) {
  const std::vector<BinaryGrad> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, false, false},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, -2.5); }, false, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, false, false},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 0.5); }, false, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, false, false},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, false, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true, false},
      {"where", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a * a, b * 3.0); }, false, false},
  };
  for (const BinaryGrad& op : ops) {
    auto operand = [&](const Shape& shape, uint64_t seed, bool nonzero) {
      return nonzero ? away_from_zero(random_leaf(shape, seed), false) : random_leaf(shape, seed);
    };
    Tensor a = away_from_zero(random_leaf({2, 3}, 51), op.positive_a);
    Tensor b_full = operand({2, 3}, 52, op.nonzero_b), b_row = operand({3}, 53, op.nonzero_b);
    Tensor b_t = operand({3, 2}, 55, op.nonzero_b);
    // b_col is also a first operand below: positive for pow.
    Tensor b_col = op.positive_a ? away_from_zero(random_leaf({2, 1}, 54), true) : operand({2, 1}, 54, op.nonzero_b);
    auto f = [&](const TensorList& in) { return op.f(in[0], in[1]); };
    EXPECT_TRUE(gradcheck(f, {a, b_full})) << op.name << " same shape";
    EXPECT_TRUE(gradcheck(f, {a, b_row})) << op.name << " [2,3] x [3]";
    EXPECT_TRUE(gradcheck(f, {a, b_col})) << op.name << " [2,3] x [2,1]";
    EXPECT_TRUE(gradcheck(f, {b_col, a})) << op.name << " [2,1] x [2,3]";
    EXPECT_TRUE(gradcheck(f, {a, b_t.t()})) << op.name << " transposed operand";
    EXPECT_TRUE(gradcheck(f, {a.narrow(1, 1, 2), b_row.narrow(0, 0, 2)})) << op.name << " narrowed operands";
    EXPECT_TRUE(gradcheck([&](const TensorList& in) { return op.f(in[0], in[1].select(1, 1)); }, {a, b_t}))
        << op.name << " selected operand";
    // Only one operand requires grad.
    EXPECT_TRUE(gradcheck(f, {a, b_row.detach()})) << op.name << " constant b";
    EXPECT_TRUE(gradcheck(f, {a.detach(), b_row})) << op.name << " constant a";
  }
}

TEST(ElementwiseGrad, MaximumMinimumSplitTiesEvenly) {
  // At a tie the central difference is 1/2 for each side, which is also
  // PyTorch's convention for the analytic gradient.
  Tensor a = from_vector<double>({1, 2, 3, -1}).set_requires_grad();
  Tensor b = from_vector<double>({1, 5, 0, -1}).set_requires_grad();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return maximum(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return minimum(in[0], in[1]); }, {a, b}));
  maximum(a, b).sum().backward();
  EXPECT_EQ(to_vector<double>(a.grad()), (V{0.5, 0, 1, 0.5}));
  EXPECT_EQ(to_vector<double>(b.grad()), (V{0.5, 1, 0, 0.5}));
  // A broadcast operand collects its share from every tie.
  Tensor s = from_vector<double>({2}).set_requires_grad();
  Tensor t = from_vector<double>({2, 2, 1}).set_requires_grad();
  minimum(s, t).sum().backward();
  EXPECT_EQ(to_vector<double>(s.grad()), (V{1}));
  EXPECT_EQ(to_vector<double>(t.grad()), (V{0.5, 0.5, 1}));
}

TEST(ElementwiseGrad, PowAtZero) {
  // d/dx x^0 is 0 everywhere, also at x = 0; d/de x^e at x = 0, e > 0 is 0.
  Tensor x = from_vector<double>({0, 2, 0}).set_requires_grad();
  Tensor e = from_vector<double>({0, 0, 2}).set_requires_grad();
  pow(x, e).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{0, 0, 0}));
  std::vector<double> ge = to_vector<double>(e.grad());
  EXPECT_EQ(ge[0], 0);
  EXPECT_NEAR(ge[1], std::log(2.0), 1e-15);
  EXPECT_EQ(ge[2], 0);
  Tensor y = from_vector<double>({0, 3}).set_requires_grad();
  pow(y, 0).sum().backward();
  EXPECT_EQ(to_vector<double>(y.grad()), (V{0, 0}));
}

TEST(ElementwiseGrad, ClampPassesGradientInsideTheRangeOnly) {
  Tensor x = from_vector<double>({-2, -1, 0, 1, 2}).set_requires_grad();
  clamp(x, -1, 1).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{0, 1, 1, 1, 0}));  // the bounds themselves pass it, as in PyTorch
}

TEST(ElementwiseGrad, WhereRoutesGradientByCondition) {
  Tensor a = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<double>({10}).set_requires_grad();
  Tensor c = from_vector<bool>({true, false, true});
  (where(c, a, b) * from_vector<double>({1, 2, 3})).sum().backward();
  EXPECT_EQ(to_vector<double>(a.grad()), (V{1, 0, 3}));
  EXPECT_EQ(to_vector<double>(b.grad()), (V{2}));
  Tensor s = from_vector<double>({1, 2}).set_requires_grad();
  where(from_vector<bool>({false, true}), s, 0.0).sum().backward();
  EXPECT_EQ(to_vector<double>(s.grad()), (V{0, 1}));
}

TEST(ElementwiseGrad, NonDifferentiableOpsRecordNothing) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  EXPECT_FALSE(lt(x, 1.5).requires_grad());
  EXPECT_FALSE(eq(x, x).requires_grad());
  EXPECT_FALSE(logical_not(x).requires_grad());
  EXPECT_FALSE(x.to(DType::Int64).requires_grad());
  EXPECT_EQ(sign(x).grad_fn()->name(), "SignBackward");
  sign(x).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{0, 0}));
}

TEST(ElementwiseGrad, NodeNamesFollowTheOps) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  EXPECT_EQ((x + x).grad_fn()->name(), "AddBackward");
  EXPECT_EQ((x - 1).grad_fn()->name(), "SubBackward");
  EXPECT_EQ((1 - x).grad_fn()->name(), "RsubBackward");
  EXPECT_EQ((x / x).grad_fn()->name(), "DivBackward");
  EXPECT_EQ((1 / x).grad_fn()->name(), "RdivBackward");
  EXPECT_EQ(maximum(x, x).grad_fn()->name(), "MaximumBackward");
  EXPECT_EQ(x.pow(x).grad_fn()->name(), "PowBackward");
  EXPECT_EQ(gelu(x).grad_fn()->name(), "GeluBackward");
  EXPECT_EQ(clamp(x, 0, 1).grad_fn()->name(), "ClampBackward");
  EXPECT_EQ(where(gt(x, 1), x, x).grad_fn()->name(), "WhereBackward");
}

}  // namespace
}  // namespace ember
