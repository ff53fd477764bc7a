// nn::BatchNorm1d/2d: training normalization and running statistics
// against hand computation, eval mode, the momentum rules, options,
// gradients, errors. These call ember::batch_norm.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

// Per-channel mean and biased / unbiased variance of x (N, C, *).
struct Stats {
  std::vector<double> mean, var, unbiased;
};

Stats channel_stats(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), inner = x.numel() / (N * C);
  std::vector<double> v = to_vector<double>(x);
  Stats s{std::vector<double>(C, 0), std::vector<double>(C, 0), std::vector<double>(C, 0)};
  const double count = double(N * inner);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) s.mean[c] += v[(n * C + c) * inner + i] / count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        double d = v[(n * C + c) * inner + i] - s.mean[c];
        s.var[c] += d * d / count;
      }
    s.unbiased[c] = s.var[c] * count / (count - 1);
  }
  return s;
}

// (x - mean) / sqrt(var + eps) * w + b per channel.
std::vector<double> normalized(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                               const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const int64_t C = x.size(1), inner = x.numel() / (x.size(0) * C);
  std::vector<double> v = to_vector<double>(x), out(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t c = (int64_t(k) / inner) % C;
    out[k] = (v[k] - mean[c]) / std::sqrt(var[c] + eps) * w[c] + b[c];
  }
  return out;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-10) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(NnBatchNorm, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  auto bn = std::make_shared<nn::BatchNorm2d>(3, 1e-3);
  bn->to(DType::Float64);
  EXPECT_EQ(bn->state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::Int64);
  Generator g(1);
  nn::init::normal_(bn->weight, 1, 0.5, &g);
  nn::init::normal_(bn->bias, 0, 0.5, &g);
  std::vector<double> w = to_vector<double>(bn->weight), b = to_vector<double>(bn->bias);

  Tensor x1 = randn({4, 3, 2, 3}, DType::Float64, kCPU, &g) * 2.0 + 1.0;
  Stats s1 = channel_stats(x1);
  expect_close(to_vector<double>((*bn)(x1)), normalized(x1, s1.mean, s1.var, w, b, 1e-3));
  Tensor x2 = randn({4, 3, 2, 3}, DType::Float64, kCPU, &g) - 2.0;
  Stats s2 = channel_stats(x2);
  (*bn)(x2);
  std::vector<double> rm(3), rv(3);
  for (int c = 0; c < 3; ++c) {
    rm[c] = 0.9 * (0.9 * 0.0 + 0.1 * s1.mean[c]) + 0.1 * s2.mean[c];
    rv[c] = 0.9 * (0.9 * 1.0 + 0.1 * s1.unbiased[c]) + 0.1 * s2.unbiased[c];
  }
  expect_close(to_vector<double>(bn->running_mean), rm);
  expect_close(to_vector<double>(bn->running_var), rv);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);

  bn->eval();
  Tensor x3 = randn({2, 3, 2, 2}, DType::Float64, kCPU, &g);
  expect_close(to_vector<double>((*bn)(x3)), normalized(x3, rm, rv, w, b, 1e-3));
  expect_close(to_vector<double>(bn->running_mean), rm);  // eval leaves them alone
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
}

// A training forward that the op rejects (one value per channel) counts no
// batch, with a momentum (counted by the op) and without (counted after it).
TEST(NnBatchNorm, ARejectedBatchIsNotCounted) {
  for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
    auto bn = std::make_shared<nn::BatchNorm1d>(3, 1e-5, momentum);
    (*bn)(randn({4, 3}));
    EXPECT_THROW((*bn)(randn({1, 3})), Error);
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1) << (momentum ? "momentum 0.1" : "cumulative");
  }
}

TEST(NnBatchNorm, CumulativeAverageWithoutMomentum) {
  auto bn = std::make_shared<nn::BatchNorm1d>(2, 1e-5, std::nullopt);
  bn->to(DType::Float64);
  Generator g(2);
  Tensor x1 = randn({5, 2}, DType::Float64, kCPU, &g), x2 = randn({5, 2}, DType::Float64, kCPU, &g) + 3.0;
  (*bn)(x1);
  (*bn)(x2);
  Stats s1 = channel_stats(x1), s2 = channel_stats(x2);
  expect_close(to_vector<double>(bn->running_mean), {(s1.mean[0] + s2.mean[0]) / 2, (s1.mean[1] + s2.mean[1]) / 2});
  expect_close(to_vector<double>(bn->running_var),
               {(s1.unbiased[0] + s2.unbiased[0]) / 2, (s1.unbiased[1] + s2.unbiased[1]) / 2});
  EXPECT_EQ(bn->str(), "BatchNorm1d(2, eps=1e-05, momentum=none, affine=true, track_running_stats=true)");
}

TEST(NnBatchNorm, OptionsAndOneDimensionalInputs) {
  auto plain = std::make_shared<nn::BatchNorm1d>(4, 1e-5, 0.1, false, false);
  EXPECT_TRUE(plain->parameters().empty());
  EXPECT_TRUE(plain->buffers().empty());
  plain->to(DType::Float64);
  Generator g(3);
  Tensor x = randn({6, 4, 3}, DType::Float64, kCPU, &g);
  Stats s = channel_stats(x);
  std::vector<double> one(4, 1.0), zero(4, 0.0);
  expect_close(to_vector<double>((*plain)(x)), normalized(x, s.mean, s.var, one, zero, 1e-5));
  plain->eval();  // no running statistics: eval still uses the batch's
  expect_close(to_vector<double>((*plain)(x)), normalized(x, s.mean, s.var, one, zero, 1e-5));

  auto bn = std::make_shared<nn::BatchNorm1d>(4);
  bn->to(DType::Float64);
  Tensor flat = randn({8, 4}, DType::Float64, kCPU, &g);
  Stats fs = channel_stats(flat);
  expect_close(to_vector<double>((*bn)(flat)), normalized(flat, fs.mean, fs.var, one, zero, 1e-5));
  EXPECT_EQ(nn::BatchNorm2d(3).str(), "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
}

TEST(NnBatchNorm, GradcheckInTrainingAndEval) {
  auto bn = std::make_shared<nn::BatchNorm2d>(2);
  bn->to(DType::Float64);
  Generator g(4);
  nn::init::normal_(bn->weight, 1, 0.5, &g);
  nn::init::normal_(bn->bias, 0, 0.5, &g);
  Tensor x = testing::random_leaf({3, 2, 2, 2}, 1);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*bn)(in[0]); }, {x, bn->weight, bn->bias}));
  bn->eval();
  Tensor xt = testing::random_leaf({3, 2, 2, 2}, 2);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*bn)(in[0].transpose(2, 3)); },
                                 {xt, bn->weight, bn->bias}));
}

TEST(NnBatchNorm, ErrorsNameTheShape) {
  nn::BatchNorm2d bn(3);
  try {
    bn(zeros({2, 3, 4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("BatchNorm2d: expected a 4-D (N, C, H, W) input, got shape [2, 3, 4]"));
  }
  try {
    bn(zeros({2, 4, 1, 1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("BatchNorm2d: expected 3 channels (dim 1) but the input has shape [2, 4, 1, 1]"));
  }
  try {
    nn::BatchNorm1d bad(0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("BatchNorm1d: num_features must be positive, got 0"));
  }
}

}  // namespace
}  // namespace ember
