// clip_grad_value_ against torch.nn.utils.clip_grad_value_'s rule: every
// defined gradient clamped in place to [-clip_value, clip_value].
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::clip_grad_value_;

Tensor with_grad(const Tensor& grad) {
  Tensor p = zeros_like(grad).set_requires_grad();
  p.set_grad(grad);
  return p;
}

// The rule, element by element.
std::vector<double> clamped(const std::vector<double>& g, double c) {
  std::vector<double> out;
  for (double v : g) out.push_back(std::isnan(v) ? v : std::min(std::max(v, -c), c));
  return out;
}

TEST(ClipGradValue, ClampsEveryDefinedGradientInPlaceAndSkipsTheRest) {
  const std::vector<double> ga = {-3.0, -0.5, 0.0, 0.25, 2.0, 1.0};
  const std::vector<double> gb = {0.9, -1.1};
  for (std::optional<bool> foreach : {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    Tensor a = with_grad(from_vector<double>(ga, {2, 3}));
    Tensor b = with_grad(from_vector<float>({0.9f, -1.1f}));
    Tensor none = zeros({3}).set_requires_grad();
    Tensor a_grad = a.grad();
    clip_grad_value_({a, none, b}, 1.0, foreach);
    EXPECT_TRUE(a.grad().is_same(a_grad));  // in place
    EXPECT_EQ(to_vector<double>(a.grad()), clamped(ga, 1.0));
    std::vector<float> b_values = to_vector<float>(b.grad());
    EXPECT_FLOAT_EQ(b_values[0], 0.9f);
    EXPECT_FLOAT_EQ(b_values[1], -1.0f);
    EXPECT_EQ(b.grad().dtype(), DType::Float32);
    EXPECT_FALSE(none.grad().defined());
  }
}

TEST(ClipGradValue, NonContiguousGradientsNaNAndZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor p = zeros({3, 2}).to(DType::Float64).set_requires_grad();
  Tensor g = from_vector<double>({5, -inf, nan, 0.1, -0.2, inf}, {2, 3}).t();  // (3, 2), transposed strides
  p.set_grad(g);
  clip_grad_value_({p}, 0.5);
  std::vector<double> got = to_vector<double>(p.grad().contiguous());
  // g.t() row-major: 5, 0.1, -inf, -0.2, nan, inf
  EXPECT_EQ(got[0], 0.5);
  EXPECT_EQ(got[1], 0.1);
  EXPECT_EQ(got[2], -0.5);
  EXPECT_EQ(got[3], -0.2);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], 0.5);
  EXPECT_TRUE(p.grad().is_same(g));

  Tensor q = with_grad(from_vector<float>({1.0f, -2.0f}));
  clip_grad_value_({q}, 0.0);
  EXPECT_EQ(to_vector<float>(q.grad()), (std::vector<float>{0.0f, 0.0f}));
}

TEST(ClipGradValue, NegativeClipValueIsAnError) {
  Tensor p = with_grad(from_vector<float>({1.0f}));
  EXPECT_TRUE(testing::throws_with([&] { clip_grad_value_({p}, -1.0); }, {"clip_grad_value_", "non-negative", "-1"}));
  EXPECT_EQ(to_vector<float>(p.grad()), (std::vector<float>{1.0f}));
}

TEST(ClipGradValue, CudaGradientsMatchTheCpu) {
  EMBER_REQUIRE_CUDA();
  Tensor g = randn({37, 5}) * 3;
  Tensor cpu = with_grad(g.clone()), gpu = with_grad(g.cuda());
  clip_grad_value_({cpu}, 1.5);
  clip_grad_value_({gpu}, 1.5);
  EXPECT_TRUE(equal(gpu.grad().cpu(), cpu.grad()));
}

}  // namespace
}  // namespace ember
