// optim::SGD against values computed by hand and a float64 reference loop.
#include "ember/optim/sgd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/optim_reference.h"

namespace ember {
namespace {

using optim::SGD;
using optim::SGDOptions;

Tensor leaf(const std::vector<double>& v, DType dtype = DType::Float64) {
  return from_vector<double>(v, {int64_t(v.size())}).to(dtype).set_requires_grad();
}

// loss = sum(c * (w - t)^2), so grad = 2 c (w - t); backward computes it.
const std::vector<double> kTarget = {0.5, -1.5, 2.0};
const std::vector<double> kCurv = {1.0, 3.0, 0.25};

void backward_quadratic(const Tensor& w) {
  Tensor t = from_vector<double>(kTarget).to(w.dtype());
  Tensor c = from_vector<double>(kCurv).to(w.dtype());
  (c * square(w - t)).sum().backward();
}

std::vector<double> quadratic_grad(const std::vector<double>& w) {
  std::vector<double> g(w.size());
  for (size_t i = 0; i < w.size(); ++i) g[i] = 2 * kCurv[i] * (w[i] - kTarget[i]);
  return g;
}

TEST(SGD, PlainStepByHand) {
  Tensor w = leaf({1.0, 2.0}, DType::Float32);
  w.set_grad(from_vector<float>({0.5f, -1.0f}));
  SGD opt({w}, SGDOptions{.lr = 0.1});
  opt.step();
  std::vector<float> got = to_vector<float>(w);
  EXPECT_FLOAT_EQ(got[0], 0.95f);
  EXPECT_FLOAT_EQ(got[1], 2.1f);
  EXPECT_TRUE(opt.state(w).empty()) << "SGD without momentum keeps no state";
}

TEST(SGD, MomentumBufferStartsAsTheGradient) {
  Tensor w = leaf({1.0, -1.0});
  SGD opt({w}, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  w.set_grad(from_vector<double>({1.0, 2.0}));
  opt.step();
  // First step: buf = g (no dampening), w = w - lr * buf.
  EXPECT_EQ(to_vector<double>(opt.state(w).at("momentum_buffer")), (std::vector<double>{1.0, 2.0}));
  EXPECT_DOUBLE_EQ(to_vector<double>(w)[0], 1.0 - 0.1 * 1.0);
  w.set_grad(from_vector<double>({-1.0, 4.0}));
  opt.step();
  // Second step: buf = 0.9 * buf + (1 - 0.5) * g.
  const std::vector<double> buf = {0.9 * 1.0 + 0.5 * -1.0, 0.9 * 2.0 + 0.5 * 4.0};
  EXPECT_EQ(to_vector<double>(opt.state(w).at("momentum_buffer")), buf);
  std::vector<double> got = to_vector<double>(w);
  EXPECT_DOUBLE_EQ(got[0], 0.9 - 0.1 * buf[0]);
  EXPECT_DOUBLE_EQ(got[1], -1.0 - 0.1 * 2.0 - 0.1 * buf[1]);
  EXPECT_EQ(opt.state(w).at("step").item<int64_t>(), 2);
}

struct SGDCase {
  const char* name;
  SGDOptions options;
};

TEST(SGD, MatchesFloat64ReferenceOnAQuadratic) {
  const SGDCase cases[] = {
      {"plain", {.lr = 0.05}},
      {"momentum+dampening", {.lr = 0.05, .momentum = 0.9, .dampening = 0.1}},
      {"weight decay", {.lr = 0.05, .momentum = 0.5, .weight_decay = 0.1}},
      {"nesterov", {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
  };
  for (const SGDCase& c : cases) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dtype));
      std::vector<double> ref_w = {2.0, 0.0, -1.0};
      Tensor w = leaf(ref_w, dtype);
      SGD opt({w}, c.options);
      testing::RefSGD ref{c.options.lr, c.options.momentum, c.options.dampening, c.options.weight_decay,
                          c.options.nesterov};
      for (int s = 0; s < 5; ++s) {
        opt.zero_grad();
        backward_quadratic(w);
        opt.step();
        ref.step(ref_w, quadratic_grad(ref_w));
      }
      std::vector<double> got = to_vector<double>(w);
      const double tol = dtype == DType::Float64 ? 1e-13 : 2e-6;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref_w[i], tol * (1 + std::fabs(ref_w[i]))) << i;
    }
  }
}

TEST(SGD, RejectsBadOptionsNamingThem) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Tensor w = leaf({1.0});
  EXPECT_THAT(error_of([&] { SGD opt({w}, SGDOptions{.lr = -1}); }), HasSubstr("SGD: invalid learning rate: -1"));
  EXPECT_THAT(
      error_of([&] { SGD opt({w}, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }),
      HasSubstr("Nesterov momentum requires a momentum and zero dampening (momentum 0.9, dampening 0.1)"));
  EXPECT_THAT(error_of([&] { SGD opt(TensorList{}); }), HasSubstr("SGD: got an empty parameter list"));
}

}  // namespace
}  // namespace ember
