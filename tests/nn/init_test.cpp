// nn::init: gains, fans, the distributions' bounds and moments, generator
// determinism and SkipInitGuard.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

struct Moments {
  double min, max, mean, std;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = to_vector<double>(t.to(DType::Float64));
  Moments m{v[0], v[0], 0, 0};
  for (double x : v) {
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.mean += x;
  }
  m.mean /= double(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

TEST(NnInit, GainsAndFans) {
  using nn::init::Nonlinearity;
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::Linear), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(empty({4, 3, 2, 5}));
  EXPECT_EQ(fan_in, 30);
  EXPECT_EQ(fan_out, 40);
  try {
    nn::init::calculate_fan_in_and_fan_out(empty({7}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fewer than 2 dims (got shape [7])"));
  }
}

TEST(NnInit, DistributionsHaveTheirBoundsAndMoments) {
  Generator g(5);
  Tensor w = empty({200, 300});
  // kaiming_uniform_(a = sqrt(5)): bound 1 / sqrt(fan_in).
  nn::init::kaiming_uniform_(w, std::sqrt(5.0), nn::init::FanMode::FanIn, nn::init::Nonlinearity::LeakyReLU, &g);
  Moments m = moments(w);
  double b = 1.0 / std::sqrt(300.0);
  EXPECT_GE(m.min, -b);
  EXPECT_LE(m.max, b);
  EXPECT_LT(m.min, -0.99 * b);
  EXPECT_NEAR(m.std, b / std::sqrt(3.0), 0.01 * b);
  // kaiming_normal_ with ReLU and fan_out: std sqrt(2 / 200).
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU, &g);
  m = moments(w);
  EXPECT_NEAR(m.std, std::sqrt(2.0 / 200.0), 0.01 * std::sqrt(2.0 / 200.0));
  EXPECT_NEAR(m.mean, 0.0, 0.002);
  // xavier_uniform_: bound gain * sqrt(6 / (fan_in + fan_out)).
  nn::init::xavier_uniform_(w, 2.0, &g);
  m = moments(w);
  b = 2.0 * std::sqrt(6.0 / 500.0);
  EXPECT_GE(m.min, -b);
  EXPECT_LE(m.max, b);
  EXPECT_GT(m.max, 0.99 * b);
  nn::init::xavier_normal_(w, 1.0, &g);
  EXPECT_NEAR(moments(w).std, std::sqrt(2.0 / 500.0), 0.01 * std::sqrt(2.0 / 500.0));
  Tensor d = empty({50000}, DType::Float64);
  nn::init::normal_(d, 3.0, 0.5, &g);
  m = moments(d);
  EXPECT_NEAR(m.mean, 3.0, 0.01);
  EXPECT_NEAR(m.std, 0.5, 0.01);
  nn::init::uniform_(d, -2.0, 1.0, &g);
  m = moments(d);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LT(m.max, 1.0);
  EXPECT_NEAR(m.mean, -0.5, 0.02);
  nn::init::constant_(d, 0.25);
  m = moments(d);
  EXPECT_EQ(m.min, 0.25);
  EXPECT_EQ(m.max, 0.25);
}

TEST(NnInit, WorksOnLeavesThatRequireGradAndKeepsDtype) {
  Tensor p = zeros({3, 4}, DType::BFloat16).set_requires_grad();
  nn::init::ones_(p);
  EXPECT_EQ(p.dtype(), DType::BFloat16);
  EXPECT_TRUE(p.is_leaf() && p.requires_grad());
  EXPECT_EQ(to_vector<float>(p.to(DType::Float32)), std::vector<float>(12, 1.0f));
  try {
    nn::init::normal_(zeros({2}, DType::Int64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("normal_: expected a floating tensor, got int64"));
  }
}

TEST(NnInit, SameGeneratorSeedSameValuesAndSkipGuard) {
  Generator g1(9), g2(9);
  Tensor a = nn::init::uniform_(empty({10}), -1, 1, &g1);
  Tensor b = nn::init::uniform_(empty({10}), -1, 1, &g2);
  EXPECT_TRUE(equal(a, b));
  Tensor c = zeros({10});
  {
    nn::init::SkipInitGuard skip;
    EXPECT_TRUE(nn::init::is_init_skipped());
    nn::init::uniform_(c, -1, 1, &g1);
    nn::init::ones_(c);
  }
  EXPECT_FALSE(nn::init::is_init_skipped());
  EXPECT_EQ(to_vector<float>(c), std::vector<float>(10, 0.0f));
}

}  // namespace
}  // namespace ember
