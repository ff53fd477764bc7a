// nn::Linear: forward against a naive loop, gradients, PyTorch's
// initialization bounds, errors and printing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

TEST(NnLinear, ForwardMatchesNaiveLoopOnBatchedInput) {
  auto lin = std::make_shared<nn::Linear>(4, 5);
  lin->to(DType::Float64);
  Generator g(1);
  Tensor x = randn({2, 3, 4}, DType::Float64, kCPU, &g);
  Tensor y = lin->forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  std::vector<double> xv = to_vector<double>(x), wv = to_vector<double>(lin->weight), bv = to_vector<double>(lin->bias),
                      yv = to_vector<double>(y);
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t o = 0; o < 5; ++o) {
      double expect = bv[o];
      for (int64_t i = 0; i < 4; ++i) expect += xv[r * 4 + i] * wv[o * 4 + i];
      EXPECT_NEAR(yv[r * 5 + o], expect, 1e-12);
    }
  }
  auto no_bias = std::make_shared<nn::Linear>(4, 5, false);
  EXPECT_FALSE(no_bias->bias.defined());
  EXPECT_EQ(no_bias->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  Tensor v = from_vector<float>({1, 2, 3, 4});
  std::vector<float> w = to_vector<float>(no_bias->weight), out = to_vector<float>((*no_bias)(v));
  ASSERT_EQ(out.size(), 5u);
  for (int64_t o = 0; o < 5; ++o)
    EXPECT_NEAR(out[o], w[o * 4] + 2 * w[o * 4 + 1] + 3 * w[o * 4 + 2] + 4 * w[o * 4 + 3], 1e-5);
}

TEST(NnLinear, GradcheckInputWeightAndBias) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  lin->to(DType::Float64);
  Tensor x = testing::random_leaf({4, 3}, 1);
  EXPECT_TRUE(
      testing::gradcheck([&](const TensorList& in) { return lin->forward(in[0]); }, {x, lin->weight, lin->bias}));
  Tensor xt = testing::random_leaf({3, 2, 4}, 2);  // used as a permuted (4, 2, 3) view
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        return lin->forward(in[0].permute({2, 1, 0}));
      },
      {xt, lin->weight, lin->bias}));
}

TEST(NnLinear, InitializationMatchesPyTorchBounds) {
  manual_seed(3);
  auto lin = std::make_shared<nn::Linear>(300, 200);
  const double bound = 1.0 / std::sqrt(300.0);
  for (const Tensor& t : {lin->weight, lin->bias}) {
    std::vector<float> v = to_vector<float>(t);
    double lo = 1, hi = -1, mean = 0, sq = 0;
    for (float f : v) {
      lo = std::min(lo, double(f));
      hi = std::max(hi, double(f));
      mean += f;
      sq += double(f) * f;
    }
    mean /= double(v.size());
    double var = sq / double(v.size()) - mean * mean;
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    if (v.size() > 1000) {  // the weight: U(-b, b) has mean 0, variance b^2 / 3
      EXPECT_LT(lo, -0.99 * bound);
      EXPECT_GT(hi, 0.99 * bound);
      EXPECT_NEAR(mean, 0.0, 0.01 * bound);
      EXPECT_NEAR(var, bound * bound / 3, 0.02 * bound * bound / 3);
    }
  }
  // Different draws for weight and bias, and for two layers.
  auto other = std::make_shared<nn::Linear>(300, 200);
  EXPECT_FALSE(equal(lin->weight, other->weight));
}

TEST(NnLinear, ErrorsNameShapesAndDtypes) {
  auto lin = std::make_shared<nn::Linear>(4, 3);
  try {
    lin->forward(zeros({2, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("input shape [2, 5] and weight shape [3, 4] do not match"));
    EXPECT_THAT(e.what(), HasSubstr("in_features"));
  }
  try {
    lin->forward(zeros({2, 4}, DType::Float64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("input [2, 4] float64 on cpu and weight [3, 4] float32 on cpu"));
  }
  EXPECT_EQ(lin->str(), "Linear(in_features=4, out_features=3, bias=true)");
}

}  // namespace
}  // namespace ember
