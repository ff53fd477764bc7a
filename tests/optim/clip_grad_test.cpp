// clip_grad_norm_ against norms computed by hand and by float64 loops.
#include "ember/optim/clip_grad.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::clip_grad_norm_;
using testing::error_of;
using ::testing::HasSubstr;

Tensor with_grad(const Tensor& grad) {
  Tensor p = zeros_like(grad).set_requires_grad();
  p.set_grad(grad);
  return p;
}

TEST(ClipGradNorm, L2NormByHandAndClipping) {
  // ||(3, 4, 12)|| = 13.
  Tensor a = with_grad(from_vector<float>({3, 4})), b = with_grad(from_vector<float>({12}));
  Tensor no_grad = zeros({5}).set_requires_grad();
  Tensor total = clip_grad_norm_({a, no_grad, b}, 6.5);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(total.item<float>(), 13.0f);
  const double coef = 6.5 / (13.0 + 1e-6);
  std::vector<float> ga = to_vector<float>(a.grad()), gb = to_vector<float>(b.grad());
  EXPECT_FLOAT_EQ(ga[0], float(3 * coef));
  EXPECT_FLOAT_EQ(ga[1], float(4 * coef));
  EXPECT_FLOAT_EQ(gb[0], float(12 * coef));
  EXPECT_FALSE(no_grad.grad().defined());
}

TEST(ClipGradNorm, BelowMaxNormLeavesGradsExactly) {
  Tensor a = with_grad(from_vector<double>({0.1, -0.2, 0.3}));
  Tensor total = clip_grad_norm_({a}, 10.0);
  EXPECT_EQ(total.dtype(), DType::Float64);
  EXPECT_DOUBLE_EQ(total.item<double>(), std::sqrt(0.01 + 0.04 + 0.09));
  EXPECT_EQ(to_vector<double>(a.grad()), (std::vector<double>{0.1, -0.2, 0.3}));
}

TEST(ClipGradNorm, OtherNormTypesMatchFloat64Loops) {
  // Several tensors, one of them spanning two 64K-element chunks.
  TensorList params;
  std::vector<double> all;
  for (int64_t n : {1, 7, 70000, 3}) {
    Tensor g = sin(arange(0, double(n), 1, DType::Float64) * 0.37 + double(n));
    std::vector<double> v = to_vector<double>(g);
    all.insert(all.end(), v.begin(), v.end());
    params.push_back(with_grad(g));
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (double p : {1.0, 2.0, 3.0, inf}) {
    SCOPED_TRACE(p);
    double expected = 0;
    for (double v : all)
      expected = std::isinf(p) ? std::max(expected, std::fabs(v)) : expected + std::pow(std::fabs(v), p);
    if (!std::isinf(p)) expected = std::pow(expected, 1 / p);
    Tensor total = clip_grad_norm_(params, 1e9, p);
    EXPECT_NEAR(total.item<double>(), expected, 1e-12 * expected);
  }
}

TEST(ClipGradNorm, MixedDtypesReduceTogether) {
  Tensor a = with_grad(from_vector<float>({3})), b = with_grad(from_vector<double>({4}));
  Tensor c = with_grad(from_vector<float>({0}).to(DType::BFloat16));
  Tensor total = clip_grad_norm_({a, b, c}, 1.0);
  EXPECT_EQ(total.dtype(), DType::Float64);
  EXPECT_NEAR(total.item<double>(), 5.0, 1e-12);
  EXPECT_NEAR(to_vector<double>(b.grad())[0], 4.0 / (5.0 + 1e-6), 1e-12);
  EXPECT_NEAR(to_vector<float>(a.grad())[0], 3.0 / (5.0 + 1e-6), 1e-6);
}

TEST(ClipGradNorm, NonFiniteNorm) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = with_grad(from_vector<double>({1.0, nan}));
  EXPECT_THAT(error_of([&] { clip_grad_norm_({a}, 1.0, 2.0, true); }),
              HasSubstr("the total norm of order 2 for gradients from `parameters` is non-finite (nan)"));
  EXPECT_EQ(to_vector<double>(a.grad())[0], 1.0) << "no gradient changes when the check fails";
  Tensor total = clip_grad_norm_({a}, 1.0);
  EXPECT_TRUE(std::isnan(total.item<double>()));
}

TEST(ClipGradNorm, EdgeCasesAndErrors) {
  Tensor none = zeros({3}).set_requires_grad();
  Tensor total = clip_grad_norm_({none}, 1.0);
  EXPECT_EQ(total.item<float>(), 0.0f);
  Tensor empty_grad = with_grad(zeros({0}));
  EXPECT_EQ(clip_grad_norm_({empty_grad}, 1.0).item<float>(), 0.0f);
  EXPECT_THAT(error_of([&] { clip_grad_norm_({none}, 1.0, 0.0); }),
              HasSubstr("clip_grad_norm_: norm_type must be positive or infinity, but is 0"));
}

}  // namespace
}  // namespace ember
