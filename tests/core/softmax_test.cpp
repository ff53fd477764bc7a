// softmax and log_softmax on CPU: values against a naive float64 loop over
// every dim and layout, stability, half types, promotion, NaN, 0-dim and
// empty tensors; gradients by finite differences, by hand and in half
// precision; error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax (or log_softmax) of x along dim, in float64, by the textbook
// formula on x's logical (row-major) order.
std::vector<double> naive_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = to_vector<double>(x);
  std::vector<double> out(v.size());
  int64_t n = x.dim(), d = (dim + n) % n;
  int64_t outer = 1, inner = 1, size = x.size(d);
  for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
  for (int64_t k = d + 1; k < n; ++k) inner *= x.size(k);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * size + k) * inner + i); };
      double total = 0;
      for (int64_t k = 0; k < size; ++k) total += std::exp(v[at(k)]);
      for (int64_t k = 0; k < size; ++k) out[at(k)] = log ? v[at(k)] - std::log(total) : std::exp(v[at(k)]) / total;
    }
  }
  return out;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  std::vector<double> g = to_vector<double>(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << ": got " << g[i];
    else EXPECT_NEAR(g[i], want[i], atol + rtol * std::fabs(want[i])) << what << " element " << i;
  }
}

// [3, 5, 7] in four layouts: contiguous, transposed, narrowed, permuted.
std::vector<std::pair<std::string, Tensor>> layouts(DType dtype) {
  Generator g(21);
  return {
      {"contiguous", randn({3, 5, 7}, dtype, kCPU, &g)},
      {"transposed", randn({7, 5, 3}, dtype, kCPU, &g).transpose(0, 2)},
      {"narrowed", randn({3, 8, 7}, dtype, kCPU, &g).narrow(1, 2, 5)},
      {"permuted", randn({5, 7, 3}, dtype, kCPU, &g).permute({2, 0, 1})},
  };
}

// ---------------- values ----------------

TEST(Softmax, MatchesNaiveOverEveryDimAndLayout) {
  for (DType dt : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
    // Outputs round once to dt; probabilities are < 1, log-probabilities ~ -3.
    double tol = dt == DType::Float64 ? 1e-13 : dt == DType::Float32 ? 1e-6 : dt == DType::Float16 ? 1e-3 : 8e-3;
    for (const auto& [name, x] : layouts(dt)) {
      for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
        std::string what = std::string(dtype_name(dt)) + " " + name + " dim " + std::to_string(dim);
        Tensor y = softmax(x, dim), ly = x.log_softmax(dim);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(y.shape(), x.shape());
        expect_close(y, naive_softmax(x, dim, false), tol, tol, "softmax " + what);
        expect_close(ly, naive_softmax(x, dim, true), tol, tol, "log_softmax " + what);
      }
    }
  }
}

TEST(Softmax, HandValues) {
  Tensor x = from_vector<double>({0, std::log(3.0), 1, 1}, {2, 2});
  expect_close(x.softmax(1), {0.25, 0.75, 0.5, 0.5}, 1e-15, 0, "softmax rows");
  expect_close(log_softmax(x, 0),
               {std::log(1 / (1 + std::exp(1.0))), std::log(3 / (3 + std::exp(1.0))),
                std::log(std::exp(1.0) / (1 + std::exp(1.0))), std::log(std::exp(1.0) / (3 + std::exp(1.0)))},
               1e-14, 0, "log_softmax columns");
}

TEST(Softmax, LargeInputsDoNotOverflow) {
  // exp(1000) overflows even float64; subtracting the row max avoids it.
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e1 + e2;
  expect_close(softmax(x, 1), {e2 / z, e1 / z, 1 / z, 1 / z, e1 / z, e2 / z}, 1e-6, 0, "softmax");
  expect_close(log_softmax(x, 1),
               {-2 - std::log(z), -1 - std::log(z), -std::log(z), -std::log(z), -1 - std::log(z), -2 - std::log(z)},
               1e-6, 0, "log_softmax");
  Tensor h = from_vector<float>({60000, 60000}, {2}).to(DType::Float16);
  expect_close(softmax(h, 0), {0.5, 0.5}, 0, 0, "half at its range limit");
}

TEST(Softmax, HalfTypesAccumulateInFloat) {
  // In half, a running sum of 4096 ones stalls at 2048 (bfloat16: 512 at 256).
  expect_close(log_softmax(zeros({4096}, DType::Float16), 0).narrow(0, 0, 1), {-std::log(4096.0)}, 1e-3, 0, "half");
  expect_close(log_softmax(zeros({512}, DType::BFloat16), 0).narrow(0, 0, 1), {-std::log(512.0)}, 4e-3, 0, "bf16");
}

TEST(Softmax, IntegralInputsPromoteToFloat32) {
  Tensor x = from_vector<int64_t>({0, 1, 2, 3}, {2, 2});
  Tensor y = softmax(x, 1);
  EXPECT_EQ(y.dtype(), DType::Float32);
  double p = 1 / (1 + std::exp(1.0));
  expect_close(y, {p, 1 - p, p, 1 - p}, 1e-6, 0, "int64");
  Tensor ly = log_softmax(from_vector<int32_t>({5, 5}, {2}), 0);
  EXPECT_EQ(ly.dtype(), DType::Float32);
  expect_close(ly, {-std::log(2.0), -std::log(2.0)}, 1e-6, 0, "int32");
  EXPECT_EQ(softmax(from_vector<bool>({true, false}, {2}), 0).dtype(), DType::Float32);
}

TEST(Softmax, NaNAndInfinities) {
  Tensor x = from_vector<double>({1, kNaN, 2, 0, -kInf, 0, -kInf, -kInf, -kInf}, {3, 3});
  // A NaN poisons its row only; -inf is probability 0; a row of -inf is NaN (as PyTorch).
  expect_close(softmax(x, 1), {kNaN, kNaN, kNaN, 0.5, 0, 0.5, kNaN, kNaN, kNaN}, 1e-15, 0, "softmax");
  std::vector<double> l = to_vector<double>(log_softmax(x, 1));
  EXPECT_NEAR(l[3], -std::log(2.0), 1e-15);
  EXPECT_EQ(l[4], -kInf);
  EXPECT_TRUE(std::isnan(l[0]) && std::isnan(l[6]));
}

TEST(Softmax, ZeroDimAndEmptyTensors) {
  Tensor s = full({}, 3.0, DType::Float64);
  EXPECT_EQ(softmax(s, 0).item<double>(), 1.0);
  EXPECT_EQ(log_softmax(s, -1).item<double>(), 0.0);
  EXPECT_EQ(softmax(zeros({0, 4}), 1).shape(), (Shape{0, 4}));
  EXPECT_EQ(log_softmax(zeros({3, 0}), 1).shape(), (Shape{3, 0}));
}

TEST(Softmax, BadDimNamesTheShape) {
  Tensor x = zeros({3, 5, 7});
  for (const std::string& msg : {error_of([&] { softmax(x, 3); }), error_of([&] { log_softmax(x, -4); })}) {
    EXPECT_THAT(msg, HasSubstr("out of range for a tensor of shape [3, 5, 7] (valid dims: -3 to 2)"));
  }
  EXPECT_THAT(error_of([&] { softmax(x, 3); }), HasSubstr("softmax: dim 3"));
  EXPECT_THAT(error_of([&] { log_softmax(full({}, 1.0), 1); }), HasSubstr("log_softmax: dim 1"));
}

// ---------------- gradients ----------------

using testing::gradcheck;
using testing::random_leaf;

TEST(SoftmaxGrad, GradcheckEveryDimAndLayout) {
  Tensor contiguous = random_leaf({2, 3, 5}, 1);
  Tensor permuted = random_leaf({5, 3, 2}, 2).detach().permute({2, 1, 0}).set_requires_grad();
  Tensor narrowed = random_leaf({2, 6, 5}, 3).detach().narrow(1, 1, 3).set_requires_grad();
  for (const Tensor& x : {contiguous, permuted, narrowed}) {
    for (int64_t dim : {0, 1, -1}) {
      EXPECT_TRUE(gradcheck([dim](const TensorList& in) { return softmax(in[0], dim); }, {x})) << "dim " << dim;
      EXPECT_TRUE(gradcheck([dim](const TensorList& in) { return log_softmax(in[0], dim); }, {x})) << "dim " << dim;
    }
  }
  // Through a transpose inside the graph, and with a broadcast incoming gradient (from sum).
  Tensor base = random_leaf({4, 3}, 4);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].t().softmax(0) * in[0].t(); }, {base}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].log_softmax(1).sum({1}); }, {base}));
}

TEST(SoftmaxGrad, ByHand) {
  // y = [0.25, 0.75]; g = [1, 0]: dx = y * (g - sum(g * y)) = [0.1875, -0.1875].
  Tensor x = from_vector<double>({0, std::log(3.0)}, {2}).set_requires_grad();
  Tensor y = softmax(x, 0);
  EXPECT_EQ(y.grad_fn()->name(), "SoftmaxBackward");
  y.backward(from_vector<double>({1, 0}, {2}));
  expect_close(x.grad(), {0.1875, -0.1875}, 1e-15, 0, "softmax grad");
  // log_softmax: dx = g - exp(y) * sum(g) = [1, 0] - [0.25, 0.75].
  Tensor z = from_vector<double>({0, std::log(3.0)}, {2}).set_requires_grad();
  Tensor ly = log_softmax(z, 0);
  EXPECT_EQ(ly.grad_fn()->name(), "LogSoftmaxBackward");
  ly.backward(from_vector<double>({1, 0}, {2}));
  expect_close(z.grad(), {0.75, -0.75}, 1e-15, 0, "log_softmax grad");
}

TEST(SoftmaxGrad, HalfTypesMatchFloat64) {
  Generator gen(8);
  Tensor x64 = randn({3, 5, 7}, DType::Float64, kCPU, &gen);
  Tensor g64 = randn({3, 5, 7}, DType::Float64, kCPU, &gen);
  for (DType dt : {DType::Float16, DType::BFloat16, DType::Float32}) {
    double tol = dt == DType::Float32 ? 1e-6 : dt == DType::Float16 ? 2e-3 : 2e-2;
    // Reference: float64 gradients of the dt-rounded inputs.
    Tensor xr = x64.to(dt), gr = g64.to(dt);
    for (int64_t dim : {0, 1, 2}) {
      for (bool log : {false, true}) {
        auto fwd = [&](const Tensor& t) { return log ? log_softmax(t, dim) : softmax(t, dim); };
        Tensor a = xr.detach().set_requires_grad();
        fwd(a).backward(gr);
        Tensor b = xr.to(DType::Float64).set_requires_grad();
        fwd(b).backward(gr.to(DType::Float64));
        EXPECT_EQ(a.grad().dtype(), dt);
        expect_close(a.grad(), to_vector<double>(b.grad()), tol, tol,
                     std::string(dtype_name(dt)) + (log ? " log_softmax" : " softmax") + " dim " + std::to_string(dim));
      }
    }
  }
}

}  // namespace
}  // namespace ember
