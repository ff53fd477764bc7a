// The schedulers' lr sequences against PyTorch's closed forms, written out
// here, and OneCycleLR against values worked out by hand.
#include "ember/optim/lr_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ember/ember.h"
#include "ember/optim/adam.h"
#include "ember/optim/sgd.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::ParamGroup;
using testing::error_of;
using ::testing::HasSubstr;

constexpr double kPi = std::numbers::pi;

struct Fixture {
  Tensor a = ones({2}).set_requires_grad();
  Tensor b = ones({3}).set_requires_grad();
  optim::SGD sgd{std::vector<ParamGroup>{ParamGroup({a}), ParamGroup({b}, {{"lr", 0.5}})},
                 optim::SGDOptions{.lr = 0.1}};
};

// lrs of epochs 0..n-1: the constructor's, then n - 1 steps.
std::vector<std::vector<double>> sequence(optim::LRScheduler& s, int n) {
  std::vector<std::vector<double>> out = {s.get_last_lr()};
  for (int e = 1; e < n; ++e) {
    s.step();
    out.push_back(s.get_last_lr());
  }
  return out;
}

TEST(LRScheduler, StepLR) {
  Fixture f;
  optim::StepLR s(f.sgd, 3, 0.5);
  auto lrs = sequence(s, 10);
  for (int e = 0; e < 10; ++e) {
    EXPECT_DOUBLE_EQ(lrs[e][0], 0.1 * std::pow(0.5, e / 3)) << e;
    EXPECT_DOUBLE_EQ(lrs[e][1], 0.5 * std::pow(0.5, e / 3)) << e;
  }
  EXPECT_EQ(f.sgd.param_groups()[1].lr(), lrs[9][1]) << "step() sets the groups' lr";
  EXPECT_EQ(s.last_epoch(), 9);
}

TEST(LRScheduler, CosineAnnealingLR) {
  Fixture f;
  optim::CosineAnnealingLR s(f.sgd, 4, 0.01);
  auto lrs = sequence(s, 9);
  const double base[2] = {0.1, 0.5};
  for (int e = 0; e < 9; ++e) {
    for (int g = 0; g < 2; ++g) {
      EXPECT_NEAR(lrs[e][g], 0.01 + (base[g] - 0.01) * (1 + std::cos(kPi * e / 4)) / 2, 1e-15) << e;
    }
  }
  EXPECT_NEAR(lrs[4][0], 0.01, 1e-15);
  EXPECT_NEAR(lrs[8][1], 0.5, 1e-15);
}

TEST(LRScheduler, LinearLRWarmup) {
  Fixture f;
  optim::LinearLR s(f.sgd);  // start 1/3, end 1, 5 iterations
  auto lrs = sequence(s, 8);
  for (int e = 0; e < 8; ++e) {
    const double factor = 1.0 / 3 + (1 - 1.0 / 3) * std::min(e, 5) / 5.0;
    EXPECT_NEAR(lrs[e][0], 0.1 * factor, 1e-15) << e;
    EXPECT_NEAR(lrs[e][1], 0.5 * factor, 1e-15) << e;
  }
  EXPECT_NEAR(lrs[0][0], 0.1 / 3, 1e-16);
  EXPECT_NEAR(lrs[7][1], 0.5, 1e-15);
  EXPECT_THAT(error_of([&] { optim::LinearLR bad(f.sgd, 0.0); }),
              HasSubstr("starting multiplicative factor expected to be greater than 0"));
}

TEST(LRScheduler, OneCycleLRDefaultsWithSgdMomentum) {
  Fixture f;
  optim::OneCycleLR s(f.sgd, 1.0, 10);
  // initial_lr = 1 / 25 = 0.04, min_lr = 0.04 / 1e4; warmup phase ends at
  // step 0.3 * 10 - 1 = 2, the annealing phase at step 9.
  auto lr0 = [&] { return f.sgd.param_groups()[0].lr(); };
  auto momentum = [&] { return f.sgd.param_groups()[0].get("momentum"); };
  // Epoch 0 is computed by the annealing formula (pct 0), as PyTorch does,
  // so it is 0.04 up to rounding.
  EXPECT_EQ(lr0(), 1.0 + (0.04 - 1.0) / 2 * (std::cos(0.0) + 1));
  EXPECT_NEAR(lr0(), 0.04, 1e-16);
  EXPECT_DOUBLE_EQ(momentum(), 0.95);
  s.step();  // pct 1/2 of the warmup: halfway between by cosine
  EXPECT_DOUBLE_EQ(lr0(), 1.0 + (0.04 - 1.0) / 2 * (std::cos(kPi * 0.5) + 1));
  EXPECT_DOUBLE_EQ(momentum(), 0.85 + (0.95 - 0.85) / 2 * (std::cos(kPi * 0.5) + 1));
  s.step();
  EXPECT_DOUBLE_EQ(lr0(), 1.0);
  EXPECT_DOUBLE_EQ(momentum(), 0.85);
  for (int e = 3; e <= 9; ++e) {
    s.step();
    const double pct = (e - 2) / 7.0;
    EXPECT_NEAR(lr0(), 4e-6 + (1.0 - 4e-6) / 2 * (std::cos(kPi * pct) + 1), 1e-15) << e;
    EXPECT_NEAR(momentum(), 0.95 + (0.85 - 0.95) / 2 * (std::cos(kPi * pct) + 1), 1e-15) << e;
  }
  EXPECT_NEAR(lr0(), 4e-6, 1e-20);
  s.step();  // step total_steps is still allowed, as in PyTorch
  EXPECT_THAT(error_of([&] { s.step(); }), HasSubstr("OneCycleLR: tried to step 11 times; the specified number of "
                                                     "total steps is 10"));
  EXPECT_EQ(s.last_epoch(), 10) << "a failed step does not advance";
}

TEST(LRScheduler, OneCycleLRThreePhaseLinearCyclesAdamBeta1) {
  Tensor w = ones({2}).set_requires_grad();
  optim::Adam adam({w});
  optim::OneCycleOptions o;
  o.anneal_strategy = optim::OneCycleOptions::Anneal::Linear;
  o.three_phase = true;
  o.div_factor = 10;
  o.final_div_factor = 100;
  optim::OneCycleLR s(adam, 2.0, 20, o);
  // Phases end at steps 5, 10 and 19; lrs 0.2 -> 2 -> 0.2 -> 0.002.
  auto seq = sequence(s, 20);
  auto expected = [](int e) {
    if (e <= 5) return 0.2 + (2.0 - 0.2) * e / 5.0;
    if (e <= 10) return 2.0 + (0.2 - 2.0) * (e - 5) / 5.0;
    return 0.2 + (0.002 - 0.2) * (e - 10) / 9.0;
  };
  for (int e = 0; e < 20; ++e) EXPECT_NEAR(seq[e][0], expected(e), 1e-14) << e;
  EXPECT_NEAR(adam.param_groups()[0].get("beta1"), 0.95, 1e-15) << "the last phase holds max_momentum";
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].get("beta2"), 0.999);
}

TEST(LRScheduler, OneCycleLRErrors) {
  Fixture f;
  EXPECT_THAT(error_of([&] { optim::OneCycleLR s(f.sgd, 1.0, 0); }),
              HasSubstr("expected a positive total_steps, but got 0"));
  EXPECT_THAT(error_of([&] { optim::OneCycleLR s(f.sgd, std::vector<double>{1.0}, 10); }),
              HasSubstr("expected 2 values for max_lr (one per parameter group), got 1"));
  optim::OneCycleOptions o;
  o.pct_start = 1.5;
  EXPECT_THAT(error_of([&] { optim::OneCycleLR s(f.sgd, 1.0, 10, o); }),
              HasSubstr("expected pct_start between 0 and 1, but got 1.5"));
}

TEST(LRScheduler, StateDictResumesTheSequence) {
  Fixture f1, f2;
  optim::CosineAnnealingLR full(f1.sgd, 10);
  for (int e = 0; e < 6; ++e) full.step();

  optim::CosineAnnealingLR first(f2.sgd, 10);
  for (int e = 0; e < 3; ++e) first.step();
  optim::SchedulerStateDict sd = first.state_dict();
  optim::OptimizerStateDict osd = f2.sgd.state_dict();

  Fixture f3;
  optim::CosineAnnealingLR resumed(f3.sgd, 10);
  f3.sgd.load_state_dict(osd);
  resumed.load_state_dict(sd);
  EXPECT_EQ(resumed.last_epoch(), 3);
  EXPECT_EQ(f3.sgd.param_groups()[1].lr(), f2.sgd.param_groups()[1].lr());
  for (int e = 0; e < 3; ++e) resumed.step();
  EXPECT_EQ(resumed.get_last_lr(), full.get_last_lr());
  EXPECT_EQ(resumed.base_lrs(), (std::vector<double>{0.1, 0.5}));

  sd.base_lrs.pop_back();
  EXPECT_THAT(error_of([&] { resumed.load_state_dict(sd); }),
              HasSubstr("the state dict has 1 base lrs and 2 last lrs, but the optimizer has 2 parameter groups"));
}

}  // namespace
}  // namespace ember
