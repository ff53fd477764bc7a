// ReduceLROnPlateau: every expected lr below is derived in the comments
// from the rules in ember/optim/lr_scheduler.h (PyTorch's): improvement with
// threshold and threshold_mode, patience, cooldown, min_lr and eps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::ReduceLROnPlateau;
using Options = optim::ReduceLROnPlateauOptions;

struct Fixture {
  Tensor w = zeros({2}).set_requires_grad();
  Tensor b = zeros({1}).set_requires_grad();
  optim::SGD opt{
      std::vector<optim::ParamGroup>{optim::ParamGroup({w}, {{"lr", 1.0}}), optim::ParamGroup({b}, {{"lr", 0.5}})}};
  double lr(size_t g) { return opt.param_groups()[g].lr(); }
};

// The lr of group 0 after each of the steps with these metrics.
std::vector<double> lrs_after(ReduceLROnPlateau& s, Fixture& f, const std::vector<double>& metrics) {
  std::vector<double> out;
  for (double m : metrics) {
    s.step(m);
    out.push_back(f.lr(0));
  }
  return out;
}

TEST(ReduceLROnPlateau, ReducesAfterMoreThanPatienceBadSteps) {
  Fixture f;
  ReduceLROnPlateau s(f.opt, {.factor = 0.5, .patience = 2});
  EXPECT_EQ(s.get_last_lr(), (std::vector<double>{1.0, 0.5}));
  // Step 1 improves on +inf (best = 1); steps 2, 3 are bad steps 1, 2 (not
  // more than patience 2); step 4 is bad step 3 > 2: halve, count back to 0.
  // Steps 5, 6 are bad 1, 2; step 7 is bad 3: halve again.
  EXPECT_EQ(lrs_after(s, f, {1, 1, 1, 1, 1, 1, 1}), (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.25}));
  EXPECT_EQ(s.get_last_lr(), (std::vector<double>{0.25, 0.125}));
  EXPECT_EQ(s.last_epoch(), 7);
  EXPECT_EQ(s.best(), 1.0);
  // An improvement resets the count: 0.5 < 1 * (1 - 1e-4).
  s.step(1);  // bad 1
  s.step(0.5);
  EXPECT_EQ(s.num_bad_epochs(), 0);
  EXPECT_EQ(s.best(), 0.5);
}

TEST(ReduceLROnPlateau, CooldownIgnoresBadSteps) {
  Fixture f;
  ReduceLROnPlateau s(f.opt, {.factor = 0.1, .patience = 0, .cooldown = 2});
  // Step 1 improves. Step 2: bad 1 > 0: reduce to 0.1, cooldown 2. Steps 3,
  // 4 count the cooldown down (2 -> 1 -> 0) and zero the bad count. Step 5:
  // bad 1 > 0: reduce to 0.01, cooldown 2; steps 6, 7 cool down; step 8
  // reduces again.
  std::vector<double> got = lrs_after(s, f, {5, 5, 5, 5, 5, 5, 5, 5});
  std::vector<double> want = {1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << "step " << i + 1;
  EXPECT_TRUE(s.in_cooldown());
  EXPECT_EQ(s.cooldown_counter(), 2);
}

TEST(ReduceLROnPlateau, ThresholdRelAndAbsInBothModes) {
  // Min, Rel, threshold 0.1: a improves on best when a < best * 0.9.
  // best 1 -> 0.95 is not below 0.9 (bad 1) -> 0.89 is (best 0.89) -> 0.81
  // is not below 0.801 (bad 1) -> 0.8 is.
  {
    Fixture f;
    ReduceLROnPlateau s(f.opt, {.patience = 5, .threshold = 0.1});
    std::vector<int64_t> bad;
    for (double m : {1.0, 0.95, 0.89, 0.81, 0.8}) {
      s.step(m);
      bad.push_back(s.num_bad_epochs());
    }
    EXPECT_EQ(bad, (std::vector<int64_t>{0, 1, 0, 1, 0}));
    EXPECT_EQ(s.best(), 0.8);
  }
  // Min, Abs, threshold 0.1: a < best - 0.1. 1 -> 0.91 (bad) -> 0.85 (best).
  {
    Fixture f;
    ReduceLROnPlateau s(f.opt, {.patience = 5, .threshold = 0.1, .threshold_mode = Options::ThresholdMode::Abs});
    s.step(1.0);
    s.step(0.91);
    EXPECT_EQ(s.num_bad_epochs(), 1);
    s.step(0.85);
    EXPECT_EQ(s.num_bad_epochs(), 0);
    EXPECT_EQ(s.best(), 0.85);
  }
  // Max, Rel, threshold 0.1: a > best * 1.1. 1 -> 1.05 (bad) -> 1.11 (best).
  {
    Fixture f;
    ReduceLROnPlateau s(f.opt, {.mode = Options::Mode::Max, .patience = 5, .threshold = 0.1});
    s.step(1.0);
    s.step(1.05);
    EXPECT_EQ(s.num_bad_epochs(), 1);
    s.step(1.11);
    EXPECT_EQ(s.best(), 1.11);
  }
  // Max, Abs, threshold 0.5: a > best + 0.5. The first step improves on -inf
  // (a lower metric than any later one); 2 -> 2.4 (bad) -> 2.6 (best).
  {
    Fixture f;
    ReduceLROnPlateau s(
        f.opt,
        {.mode = Options::Mode::Max, .patience = 5, .threshold = 0.5, .threshold_mode = Options::ThresholdMode::Abs});
    s.step(2.0);
    EXPECT_EQ(s.best(), 2.0);
    s.step(2.4);
    EXPECT_EQ(s.num_bad_epochs(), 1);
    s.step(2.6);
    EXPECT_EQ(s.best(), 2.6);
  }
}

TEST(ReduceLROnPlateau, NaNIsABadStep) {
  Fixture f;
  ReduceLROnPlateau s(f.opt, {.patience = 0});
  s.step(1.0);
  s.step(std::numeric_limits<double>::quiet_NaN());  // bad 1 > 0: reduce
  EXPECT_DOUBLE_EQ(f.lr(0), 0.1);
  EXPECT_EQ(s.best(), 1.0);
}

TEST(ReduceLROnPlateau, MinLrClampsAndEpsSkipsTinyReductions) {
  // lr 1, factor 0.1, min_lr 0.05: max(0.1, 0.05) = 0.1, then
  // max(0.01, 0.05) = 0.05, then max(0.005, 0.05) = 0.05 lowers it by 0,
  // not more than eps: unchanged. Group 1 (lr 0.5, min_lr 0.2): 0.2 at the
  // first reduction, then unchanged.
  Fixture f;
  ReduceLROnPlateau s(f.opt, {.patience = 0, .min_lr = {0.05, 0.2}});
  s.step(1);
  std::vector<std::vector<double>> got;
  for (int i = 0; i < 3; ++i) {
    s.step(1);
    got.push_back(s.get_last_lr());
  }
  EXPECT_DOUBLE_EQ(got[0][0], 0.1);
  EXPECT_DOUBLE_EQ(got[0][1], 0.2);
  EXPECT_DOUBLE_EQ(got[1][0], 0.05);
  EXPECT_DOUBLE_EQ(got[2][0], 0.05);
  EXPECT_DOUBLE_EQ(got[2][1], 0.2);

  // eps: lr 3e-8 * 0.5 = 1.5e-8 lowers it by 1.5e-8 > eps 1e-8: applied;
  // 1.5e-8 * 0.5 lowers it by 7.5e-9 <= 1e-8: skipped, forever after.
  Fixture g;
  g.opt.param_groups()[0].set_lr(3e-8);
  ReduceLROnPlateau e(g.opt, {.factor = 0.5, .patience = 0});
  e.step(1);
  e.step(1);
  EXPECT_DOUBLE_EQ(g.lr(0), 1.5e-8);
  e.step(1);
  e.step(1);
  EXPECT_DOUBLE_EQ(g.lr(0), 1.5e-8);
  // A larger eps skips the first one too.
  Fixture h;
  h.opt.param_groups()[0].set_lr(3e-8);
  ReduceLROnPlateau big_eps(h.opt, {.factor = 0.5, .patience = 0, .eps = 2e-8});
  big_eps.step(1);
  big_eps.step(1);
  EXPECT_DOUBLE_EQ(h.lr(0), 3e-8);
  EXPECT_DOUBLE_EQ(h.lr(1), 0.25);
}

TEST(ReduceLROnPlateau, StateDictResumesExactly) {
  const std::vector<double> metrics = {3, 2, 2, 2, 2, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5};
  Fixture full;
  ReduceLROnPlateau uninterrupted(full.opt, {.factor = 0.5, .patience = 1, .cooldown = 1});
  for (double m : metrics) uninterrupted.step(m);

  Fixture first;
  ReduceLROnPlateau before(first.opt, {.factor = 0.5, .patience = 1, .cooldown = 1});
  for (size_t i = 0; i < 5; ++i) before.step(metrics[i]);
  optim::ReduceLROnPlateauState state = before.state_dict();
  optim::OptimizerStateDict opt_state = first.opt.state_dict();

  Fixture second;
  second.opt.load_state_dict(opt_state);
  ReduceLROnPlateau after(second.opt, {.factor = 0.5, .patience = 1, .cooldown = 1});
  after.load_state_dict(state);
  for (size_t i = 5; i < metrics.size(); ++i) after.step(metrics[i]);
  EXPECT_EQ(after.get_last_lr(), uninterrupted.get_last_lr());
  EXPECT_EQ(after.last_epoch(), uninterrupted.last_epoch());
  EXPECT_EQ(after.best(), uninterrupted.best());
  EXPECT_EQ(after.num_bad_epochs(), uninterrupted.num_bad_epochs());
  EXPECT_EQ(after.cooldown_counter(), uninterrupted.cooldown_counter());
  EXPECT_LT(uninterrupted.get_last_lr()[0], 1.0);
}

TEST(ReduceLROnPlateau, ErrorsNameTheOption) {
  Fixture f;
  EXPECT_TRUE(testing::throws_with([&] { ReduceLROnPlateau s(f.opt, {.factor = 1.0}); },
                                   {"ReduceLROnPlateau", "factor should be < 1.0", "1"}));
  EXPECT_TRUE(testing::throws_with(
      [&] {
        ReduceLROnPlateau s(f.opt, {.min_lr = {0.1, 0.2, 0.3}});
      },
      {"ReduceLROnPlateau", "expected 2 min_lrs", "got 3"}));
  ReduceLROnPlateau s(f.opt);
  optim::ReduceLROnPlateauState bad = s.state_dict();
  bad.last_lrs.push_back(1.0);
  bad.last_epoch = 9;
  EXPECT_TRUE(testing::throws_with([&] { s.load_state_dict(bad); },
                                   {"ReduceLROnPlateau.load_state_dict", "3 last lrs", "2 parameter groups"}));
  EXPECT_EQ(s.last_epoch(), 0);
}

}  // namespace
}  // namespace ember
