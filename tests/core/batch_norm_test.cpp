// batch_norm on the CPU: training output and running statistics over a few
// steps against a hand computation in double, eval mode, 2-D to 5-D inputs,
// strided running statistics, lower precision, gradients by finite
// differences (train and eval, first and second order, non-contiguous), and
// every error message.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// Per channel of a (N, C, L) array: two-pass mean and biased variance.
struct Stats {
  std::vector<double> mean, var;
};
Stats channel_stats(const std::vector<double>& x, int64_t n, int64_t c, int64_t l) {
  Stats s{std::vector<double>(size_t(c)), std::vector<double>(size_t(c))};
  for (int64_t ch = 0; ch < c; ++ch) {
    double total = 0, sq = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < l; ++i) total += x[size_t((b * c + ch) * l + i)];
    double mean = total / double(n * l);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < l; ++i) sq += std::pow(x[size_t((b * c + ch) * l + i)] - mean, 2);
    s.mean[size_t(ch)] = mean;
    s.var[size_t(ch)] = sq / double(n * l);
  }
  return s;
}

TEST(BatchNorm, TrainingOutputAndRunningStatsOverSteps) {
  const int64_t n = 3, c = 4, h = 2, w = 5, l = h * w;
  const double momentum = 0.2, eps = 1e-3;
  Generator g(1);
  Tensor weight = randn({c}, DType::Float64, kCPU, &g), bias = randn({c}, DType::Float64, kCPU, &g);
  Tensor rm = zeros({c}, DType::Float64), rv = ones({c}, DType::Float64);
  std::vector<double> expect_rm(size_t(c), 0.0), expect_rv(size_t(c), 1.0);
  std::vector<double> wv = to_vector<double>(weight), bv = to_vector<double>(bias);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({n, c, h, w}, DType::Float64, kCPU, &g) * double(step + 1) + double(step);
    uint32_t version = rm.version();
    Tensor y = batch_norm(x, rm, rv, weight, bias, true, momentum, eps);
    EXPECT_GT(rm.version(), version) << "the in-place update bumps the version";
    std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>(y);
    Stats s = channel_stats(xv, n, c, l);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < l; ++i) {
          size_t at = size_t((b * c + ch) * l + i);
          double expect =
              (xv[at] - s.mean[size_t(ch)]) / std::sqrt(s.var[size_t(ch)] + eps) * wv[size_t(ch)] + bv[size_t(ch)];
          ASSERT_NEAR(yv[at], expect, 1e-12);
        }
    for (int64_t ch = 0; ch < c; ++ch) {
      double m = double(n * l);
      expect_rm[size_t(ch)] = (1 - momentum) * expect_rm[size_t(ch)] + momentum * s.mean[size_t(ch)];
      expect_rv[size_t(ch)] = (1 - momentum) * expect_rv[size_t(ch)] + momentum * s.var[size_t(ch)] * m / (m - 1);
    }
    std::vector<double> got_rm = to_vector<double>(rm), got_rv = to_vector<double>(rv);
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(got_rm[size_t(ch)], expect_rm[size_t(ch)], 1e-12) << "step " << step;
      EXPECT_NEAR(got_rv[size_t(ch)], expect_rv[size_t(ch)], 1e-12) << "step " << step;
    }
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThem) {
  Generator g(2);
  Tensor x = randn({4, 3, 5}, DType::Float64, kCPU, &g);
  Tensor rm = from_vector<double>({0.5, -1.0, 2.0}), rv = from_vector<double>({1.5, 0.25, 4.0});
  Tensor weight = from_vector<double>({2.0, -1.0, 0.5}), bias = from_vector<double>({0.0, 1.0, -3.0});
  Tensor y = batch_norm(x, rm, rv, weight, bias, false, 0.1, 1e-5);
  std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>(y);
  const double m[3] = {0.5, -1.0, 2.0}, v[3] = {1.5, 0.25, 4.0}, wv[3] = {2.0, -1.0, 0.5}, bv[3] = {0.0, 1.0, -3.0};
  for (size_t i = 0; i < xv.size(); ++i) {
    size_t ch = (i / 5) % 3;
    ASSERT_NEAR(yv[i], (xv[i] - m[ch]) / std::sqrt(v[ch] + 1e-5) * wv[ch] + bv[ch], 1e-12);
  }
  EXPECT_EQ(to_vector<double>(rm), (std::vector<double>{0.5, -1.0, 2.0}));
  EXPECT_EQ(to_vector<double>(rv), (std::vector<double>{1.5, 0.25, 4.0}));
  // Without weight and bias, and one value per channel is fine in eval.
  Tensor one = full({1, 3}, 2.0, DType::Float64);
  std::vector<double> y1 = to_vector<double>(batch_norm(one, rm, rv, {}, {}, false));
  for (size_t ch = 0; ch < 3; ++ch) EXPECT_NEAR(y1[ch], (2.0 - m[ch]) / std::sqrt(v[ch] + 1e-5), 1e-12);
}

TEST(BatchNorm, InputRanksAndStridedRunningStats) {
  Generator g(3);
  // (N, C) and (N, C, D, H, W) normalize over every dim but C.
  for (Shape shape : {Shape{6, 3}, Shape{2, 3, 2, 3, 2}}) {
    Tensor x = randn(shape, DType::Float64, kCPU, &g);
    Tensor y = batch_norm(x, {}, {}, {}, {}, true);
    Shape dims{0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    Tensor mean = x.mean(dims, true), var = x.var(dims, 0, true);
    EXPECT_TRUE(allclose(y, (x - mean) / sqrt(var + 1e-5), 1e-10, 1e-10)) << shape_str(shape);
  }
  // Running stats that are strided views of a larger buffer are updated through the view.
  Tensor buffer = zeros({2, 3}, DType::Float64);
  Tensor rm = buffer.select(0, 0), rv_base = ones({3, 2}, DType::Float64), rv = rv_base.select(1, 1);
  ASSERT_FALSE(rv.is_contiguous());
  Tensor x = randn({4, 3, 2}, DType::Float64, kCPU, &g);
  batch_norm(x, rm, rv, {}, {}, true, 0.5);
  Tensor mean = x.mean({0, 2}), var = x.var({0, 2}, 1);
  EXPECT_TRUE(allclose(buffer.select(0, 0), mean * 0.5, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(rv_base.select(1, 1), var * 0.5 + 0.5, 1e-12, 1e-12));
  EXPECT_TRUE(equal(rv_base.select(1, 0), ones({3}, DType::Float64)));
}

TEST(BatchNorm, LowerPrecisionAgreesWithDouble) {
  Generator g(4);
  Tensor x = randn({4, 3, 6, 5}, DType::Float64, kCPU, &g) * 2.0 + 1.0;
  Tensor w = randn({3}, DType::Float64, kCPU, &g), b = randn({3}, DType::Float64, kCPU, &g);
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    double tol = dt == DType::Float32 ? 1e-5 : dt == DType::Float16 ? 1e-2 : 5e-2;
    Tensor rm = zeros({3}, dt), rv = ones({3}, dt);
    Tensor xd = x.to(dt).to(DType::Float64);
    Tensor rmd = zeros({3}, DType::Float64), rvd = ones({3}, DType::Float64);
    Tensor y = batch_norm(x.to(dt), rm, rv, w.to(dt), b.to(dt), true);
    Tensor ref = batch_norm(xd, rmd, rvd, w.to(dt).to(DType::Float64), b.to(dt).to(DType::Float64), true);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(allclose(y.to(DType::Float64), ref, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(allclose(rv.to(DType::Float64), rvd, tol, tol)) << dtype_name(dt);
  }
}

TEST(BatchNorm, GradcheckTrainAndEval) {
  Tensor x = testing::random_leaf({3, 2, 3, 2}, 1), w = testing::random_leaf({2}, 2), b = testing::random_leaf({2}, 3);
  Tensor rm = zeros({2}, DType::Float64), rv = ones({2}, DType::Float64);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return batch_norm(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-3); }, {x, w, b}));
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return batch_norm(in[0], {}, {}, {}, {}, true); }, {x}));
  Tensor rv_eval = from_vector<double>({0.7, 1.9});
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return batch_norm(in[0], rm, rv_eval, in[1], in[2], false); }, {x, w, b}));
  // A permuted input (N, C, L) and a 2-D one.
  Tensor xp = testing::random_leaf({4, 3, 2}, 4).detach().permute({2, 1, 0}).set_requires_grad();
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return batch_norm(in[0], {}, {}, in[1], {}, true); },
                                 {xp, testing::random_leaf({3}, 5)}));
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return batch_norm(in[0], {}, {}, {}, in[1], true); },
                                 {testing::random_leaf({5, 2}, 6), testing::random_leaf({2}, 7)}));
  // A broadcast input: one sample expanded to a batch of 4.
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return batch_norm(in[0].expand({4, 3, 5}), {}, {}, in[1], in[2], true);
      },
      {testing::random_leaf({1, 3, 5}, 8), testing::random_leaf({3}, 9), testing::random_leaf({3}, 10)}));
}

TEST(BatchNorm, SecondOrderGradients) {
  Tensor x = testing::random_leaf({3, 2, 2, 2}, 8), w = testing::random_leaf({2}, 9), b = testing::random_leaf({2}, 10);
  Generator g(11);
  Tensor v = randn({3, 2, 2, 2}, DType::Float64, kCPU, &g);
  Tensor rm = from_vector<double>({0.1, -0.2}), rv = from_vector<double>({1.3, 0.8});
  for (bool training : {true, false}) {
    EXPECT_TRUE(testing::gradcheck(
        [&](const TensorList& in) {
          Tensor y = batch_norm(in[0], rm, rv, in[1], in[2], training);
          TensorList d = autograd::grad({(y * y * v).sum()}, {in[0], in[1], in[2]}, {}, true, true);
          return cat({square(d[0]).flatten(), d[1] * d[2]});
        },
        {x, w, b}))
        << (training ? "training" : "eval");
  }
}

TEST(BatchNorm, ErrorsNameShapes) {
  Tensor x = zeros({4, 3, 5});
  EXPECT_TRUE(
      throws_with([&] { batch_norm(zeros({3}), {}, {}, {}, {}, true); }, {"batch_norm", "at least 2 dims", "[3]"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, {}, {}, zeros({4}), {}, true); },
                          {"batch_norm", "weight must have shape [3]", "[4, 3, 5]", "got [4]"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, zeros({3}), ones({2}), {}, {}, true); },
                          {"batch_norm", "running_var must have shape [3]", "got [2]"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, {}, {}, {}, {}, false); },
                          {"batch_norm", "eval mode", "running_mean and running_var", "[4, 3, 5]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        batch_norm(zeros({1, 3}), {}, {}, {}, {}, true);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, {}, {}, {}, zeros({3}, DType::Float64), true); },
                          {"batch_norm", "bias is [3] float64", "input is [4, 3, 5] float32"}));
  EXPECT_TRUE(
      throws_with([&] { batch_norm(x.to(DType::Int64), {}, {}, {}, {}, true); }, {"batch_norm", "floating", "int64"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5, zeros({}, DType::Int32)); },
                          {"batch_norm", "num_batches_tracked must be a () int64 tensor", "int32", "[4, 3, 5]"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5, zeros({1}, DType::Int64)); },
                          {"batch_norm", "num_batches_tracked", "[1] int64"}));
}

// The counter given to batch_norm is incremented by the op in training (in
// place: the same tensor, its version moved) and left alone in eval.
TEST(BatchNorm, CountsBatchesInTraining) {
  Tensor x = randn({4, 3, 5}), counter = zeros({}, DType::Int64), rm = zeros({3}), rv = ones({3});
  const uint32_t version = counter.version();
  batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5, counter);
  batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5, counter);
  EXPECT_EQ(counter.item<int64_t>(), 2);
  EXPECT_GT(counter.version(), version);
  batch_norm(x, rm, rv, {}, {}, false, 0.1, 1e-5, counter);
  EXPECT_EQ(counter.item<int64_t>(), 2);
}

}  // namespace
}  // namespace ember
