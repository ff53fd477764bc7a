// optim::Adam and optim::AdamW against values computed by hand and a
// float64 reference loop (tests/support/optim_reference.h).
#include "ember/optim/adam.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/optim_reference.h"

namespace ember {
namespace {

using optim::Adam;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;

Tensor leaf(const std::vector<double>& v, DType dtype = DType::Float64) {
  return from_vector<double>(v, {int64_t(v.size())}).to(dtype).set_requires_grad();
}

// Known gradients of three steps on a 2-element parameter; the second
// component shrinks, so amsgrad's max differs from exp_avg_sq.
const std::vector<std::vector<double>> kGrads = {{0.3, -2.0}, {-0.1, 0.5}, {0.7, 0.05}};

TEST(Adam, FirstStepMovesEachElementByLr) {
  // Step 1: exp_avg = 0.1 g, exp_avg_sq = 0.001 g^2, so the update is
  // lr * (0.1 g / 0.1) / (sqrt(0.001 g^2) / sqrt(0.001) + eps) = lr * g / (|g| + eps).
  Tensor w = leaf({1.0, -3.0});
  Adam opt({w}, AdamOptions{.lr = 0.1});
  w.set_grad(from_vector<double>({2.0, -0.5}));
  opt.step();
  std::vector<double> got = to_vector<double>(w);
  EXPECT_NEAR(got[0], 1.0 - 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
  EXPECT_NEAR(got[1], -3.0 + 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  const auto& st = opt.state(w);
  EXPECT_EQ(st.at("step").item<int64_t>(), 1);
  EXPECT_EQ(st.at("step").dim(), 0);
  EXPECT_NEAR(to_vector<double>(st.at("exp_avg"))[0], 0.2, 1e-16);
  EXPECT_NEAR(to_vector<double>(st.at("exp_avg_sq"))[1], 0.001 * 0.25, 1e-18);
  EXPECT_EQ(st.count("max_exp_avg_sq"), 0u);
}

struct AdamCase {
  const char* name;
  bool adamw;
  double weight_decay;
  bool amsgrad;
};

TEST(Adam, ThreeStepsMatchFloat64Reference) {
  const AdamCase cases[] = {{"Adam", false, 0.0, false},
                            {"Adam L2 weight decay", false, 0.1, false},
                            {"Adam amsgrad", false, 0.0, true},
                            {"AdamW", true, 0.1, false},
                            {"AdamW amsgrad", true, 0.05, true}};
  for (const AdamCase& c : cases) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dtype));
      std::vector<double> ref_w = {0.8, -1.2};
      Tensor w = leaf(ref_w, dtype);
      std::unique_ptr<optim::Optimizer> opt;
      if (c.adamw) {
        opt = std::make_unique<AdamW>(
            TensorList{w},
            AdamWOptions{
                .lr = 0.01, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = c.weight_decay, .amsgrad = c.amsgrad});
      } else {
        opt = std::make_unique<Adam>(
            TensorList{w},
            AdamOptions{
                .lr = 0.01, .betas = {0.8, 0.9}, .eps = 1e-6, .weight_decay = c.weight_decay, .amsgrad = c.amsgrad});
      }
      testing::RefAdam ref{0.01, 0.8, 0.9, 1e-6, c.weight_decay, c.amsgrad, c.adamw};
      for (const std::vector<double>& g : kGrads) {
        w.set_grad(from_vector<double>(g).to(dtype));
        opt->step();
        ref.step(ref_w, g);
      }
      std::vector<double> got = to_vector<double>(w);
      const double tol = dtype == DType::Float64 ? 1e-14 : 1e-6;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref_w[i], tol) << i;
      const auto& st = opt->state(w);
      EXPECT_EQ(st.at("step").item<int64_t>(), 3);
      std::vector<double> m = to_vector<double>(st.at("exp_avg")), v = to_vector<double>(st.at("exp_avg_sq"));
      for (size_t i = 0; i < m.size(); ++i) {
        EXPECT_NEAR(m[i], ref.m[i], tol);
        EXPECT_NEAR(v[i], ref.v[i], tol);
      }
      EXPECT_EQ(st.count("max_exp_avg_sq"), c.amsgrad ? 1u : 0u);
      if (c.amsgrad) {
        std::vector<double> vmax = to_vector<double>(st.at("max_exp_avg_sq"));
        for (size_t i = 0; i < vmax.size(); ++i) EXPECT_NEAR(vmax[i], ref.vmax[i], tol);
        EXPECT_GT(vmax[1], v[1]) << "the shrinking gradient should leave the max above exp_avg_sq";
      }
    }
  }
}

TEST(Adam, HalfParamsKeepFloat32StateAndRoundOncePerStep) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor w = leaf({0.8, -1.2}, dtype);
    std::vector<double> ref_w = to_vector<double>(w);
    Adam opt({w}, AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    testing::RefAdam ref{0.01, 0.9, 0.999, 1e-8, 0.1, true, false};
    for (const std::vector<double>& g : kGrads) {
      Tensor grad = from_vector<double>(g).to(dtype);
      w.set_grad(grad);
      ref.step(ref_w, to_vector<double>(grad));
      // The reference sees the rounded param as the kernel does.
      opt.step();
      ref_w = to_vector<double>(from_vector<double>(ref_w).to(dtype));
    }
    for (const char* name : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
      EXPECT_EQ(opt.state(w).at(name).dtype(), DType::Float32) << name;
    }
    std::vector<double> got = to_vector<double>(w);
    const double ulp = dtype == DType::Float16 ? 1e-3 : 8e-3;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref_w[i], ulp * std::fabs(ref_w[i])) << i;
  }
}

TEST(AdamW, DefaultsAndDecoupledDecayWithZeroGrad) {
  // With a zero gradient, AdamW only decays: p *= 1 - lr * wd (exp_avg stays 0).
  Tensor w = leaf({2.0, -4.0});
  AdamW opt({w});
  EXPECT_EQ(opt.param_groups()[0].get("weight_decay"), 1e-2);
  EXPECT_EQ(opt.param_groups()[0].lr(), 1e-3);
  EXPECT_EQ(opt.name(), "AdamW");
  w.set_grad(zeros({2}, DType::Float64));
  opt.step();
  std::vector<double> got = to_vector<double>(w);
  EXPECT_DOUBLE_EQ(got[0], 2.0 * (1 - 1e-5));
  EXPECT_DOUBLE_EQ(got[1], -4.0 * (1 - 1e-5));
}

TEST(Adam, OneOptionsTypeServesAdamAndAdamW) {
  // Choosing the optimizer at run time takes one set of fields; an unset
  // weight_decay is each optimizer's PyTorch default (0 for Adam, 1e-2 for
  // AdamW), a set one is used by both.
  static_assert(std::is_same_v<AdamOptions, AdamWOptions>);
  Tensor w = leaf({1.0});
  AdamOptions o{.lr = 0.05, .betas = {0.8, 0.95}};
  Adam adam({w}, o);
  AdamW adamw({w}, o);
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].get("weight_decay"), 0.0);
  EXPECT_DOUBLE_EQ(adamw.param_groups()[0].get("weight_decay"), 1e-2);
  for (const optim::Optimizer* opt : std::vector<const optim::Optimizer*>{&adam, &adamw}) {
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].get("lr"), 0.05);
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].get("beta1"), 0.8);
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].get("beta2"), 0.95);
  }
  o.weight_decay = 0.3;
  EXPECT_DOUBLE_EQ(Adam({w}, o).param_groups()[0].get("weight_decay"), 0.3);
  EXPECT_DOUBLE_EQ(AdamW({w}, o).param_groups()[0].get("weight_decay"), 0.3);
}

TEST(Adam, BetasIsPyTorchsPairWithBeta1Beta2Accessors) {
  AdamOptions o;
  EXPECT_EQ(o.betas, (std::pair<double, double>{0.9, 0.999}));
  EXPECT_DOUBLE_EQ(o.beta1(), 0.9);
  EXPECT_DOUBLE_EQ(o.beta2(), 0.999);
  EXPECT_FALSE(o.weight_decay.has_value());
  o.betas = {0.5, 0.75};
  EXPECT_DOUBLE_EQ(o.beta1(), 0.5);
  EXPECT_DOUBLE_EQ(o.beta2(), 0.75);
}

TEST(Adam, RejectsBadOptionsNamingThem) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Tensor w = leaf({1.0});
  EXPECT_THAT(error_of([&] {
                Adam opt({w}, AdamOptions{.betas = {0.9, 1.0}});
              }),
              HasSubstr("Adam: invalid beta parameter at index 1: 1"));
  EXPECT_THAT(error_of([&] { AdamW opt({w}, AdamWOptions{.eps = -1e-8}); }),
              HasSubstr("AdamW: invalid epsilon value: -1e-08"));
  EXPECT_THAT(error_of([&] { Adam opt({w}, AdamOptions{.weight_decay = -0.5}); }),
              HasSubstr("Adam: invalid weight_decay value: -0.5"));
}

}  // namespace
}  // namespace ember
