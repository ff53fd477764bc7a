// Activation layers, Flatten and Dropout: values against std:: math or
// hand computation, gradients, train/eval behaviour, printing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

void expect_elementwise(nn::UnaryModule& m, double (*f)(double)) {
  Generator g(2);
  Tensor x = randn({3, 5}, DType::Float64, kCPU, &g) * 2.0;
  std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>(m(x));
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], f(xv[i]), 1e-12) << m.name() << " at " << xv[i];
  Tensor leaf = testing::random_leaf({4, 3}, 3);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return m(in[0].t()); }, {leaf})) << m.name();
}

TEST(NnActivation, ElementwiseLayersMatchStdMath) {
  nn::ReLU relu;
  nn::GELU gelu;
  nn::Tanh tanh_layer;
  nn::Sigmoid sigmoid_layer;
  expect_elementwise(relu, [](double x) { return x > 0 ? x : 0.0; });
  expect_elementwise(gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  expect_elementwise(tanh_layer, [](double x) { return std::tanh(x); });
  expect_elementwise(sigmoid_layer, [](double x) { return 1 / (1 + std::exp(-x)); });
}

TEST(NnActivation, SoftmaxAndLogSoftmaxAlongDim) {
  Tensor x = from_vector<double>({1, 2, 3, -1, 0, 4}, {2, 3});
  auto sm = std::make_shared<nn::Softmax>(0);
  auto lsm = std::make_shared<nn::LogSoftmax>(-1);
  std::vector<double> s = to_vector<double>((*sm)(x)), l = to_vector<double>((*lsm)(x));
  std::vector<double> xv = to_vector<double>(x);
  for (int c = 0; c < 3; ++c) {  // softmax down each column
    double z = std::exp(xv[c]) + std::exp(xv[3 + c]);
    EXPECT_NEAR(s[c], std::exp(xv[c]) / z, 1e-12);
    EXPECT_NEAR(s[3 + c], std::exp(xv[3 + c]) / z, 1e-12);
  }
  for (int r = 0; r < 2; ++r) {  // log-softmax along each row
    double z = std::log(std::exp(xv[r * 3]) + std::exp(xv[r * 3 + 1]) + std::exp(xv[r * 3 + 2]));
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(l[r * 3 + c], xv[r * 3 + c] - z, 1e-12);
  }
  Tensor leaf = testing::random_leaf({3, 4}, 4);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*sm)(in[0]) * in[0]; }, {leaf}));
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*lsm)(in[0].t()); }, {leaf}));
  EXPECT_EQ(sm->str(), "Softmax(dim=0)");
  EXPECT_EQ(lsm->str(), "LogSoftmax(dim=-1)");
  EXPECT_EQ(nn::GELU().str(), "GELU(approximate='none')");
}

TEST(NnFlatten, MergesDimsOfAnyLayout) {
  Tensor x = arange(120, DType::Float64).reshape({2, 3, 4, 5});
  nn::Flatten flat;
  EXPECT_EQ(flat(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).shape(), (Shape{6, 4, 5}));
  Tensor p = x.permute({0, 2, 3, 1});  // non-contiguous
  std::vector<double> got = to_vector<double>(flat(p)), expect = to_vector<double>(p.contiguous());
  EXPECT_EQ(got, expect);
  Tensor leaf = testing::random_leaf({2, 3, 2}, 5);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return flat(in[0].transpose(1, 2)) * 3.0; }, {leaf}));
  EXPECT_EQ(flat.str(), "Flatten(start_dim=1, end_dim=-1)");
}

TEST(NnDropout, TrainDropsAndScalesEvalIsIdentity) {
  auto drop = std::make_shared<nn::Dropout>(0.25);
  Tensor x = ones({100, 100}, DType::Float64);
  manual_seed(4);
  std::vector<double> y = to_vector<double>((*drop)(x));
  int64_t zeros_seen = 0;
  for (double v : y) {
    if (v == 0.0) {
      ++zeros_seen;
    } else {
      EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);  // the op keeps its scale in float32
    }
  }
  EXPECT_NEAR(double(zeros_seen) / 10000.0, 0.25, 0.02);
  drop->eval();
  EXPECT_TRUE((*drop)(x).is_same(x));
  drop->train();
  // Gradient: the same mask scales the incoming gradient (the mask is
  // replayed by reseeding before each call).
  Tensor leaf = testing::random_leaf({4, 5}, 6);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        manual_seed(21);
        return (*drop)(in[0]);
      },
      {leaf}));
  EXPECT_EQ(drop->str(), "Dropout(p=0.25)");
  try {
    nn::Dropout bad(1.5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("between 0 and 1, but got 1.5"));
  }
}

}  // namespace
}  // namespace ember
