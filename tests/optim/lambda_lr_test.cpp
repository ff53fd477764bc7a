// LambdaLR against torch.optim.lr_scheduler.LambdaLR (PyTorch 1.13's values
// of a warmup + cosine lambda, written out here), per-group lambdas, the
// argument checks and a resume through state_dict().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ember/ember.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/sgd.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::ParamGroup;
using testing::error_of;
using ::testing::HasSubstr;

struct Fixture {
  Tensor a = ones({2}).set_requires_grad();
  Tensor b = ones({3}).set_requires_grad();
  optim::SGD sgd{std::vector<ParamGroup>{ParamGroup({a}), ParamGroup({b}, {{"lr", 0.5}})},
                 optim::SGDOptions{.lr = 0.1}};
};

// Linear warmup over 3 steps, then a cosine to 0 at step 10 (and on, periodic).
double warmup_cosine(int64_t t) {
  constexpr int64_t kWarmup = 3, kTotal = 10;
  if (t < kWarmup) return double(t + 1) / kWarmup;
  return 0.5 * (1 + std::cos(std::numbers::pi * double(t - kWarmup) / double(kTotal - kWarmup)));
}

TEST(LambdaLR, MatchesPyTorchForAWarmupThenCosine) {
  // torch.optim.lr_scheduler.LambdaLR(SGD([{a}, {b, lr 0.5}], lr=0.1), warmup_cosine):
  // get_last_lr() after construction and after each of 11 steps.
  const double expected[12][2] = {{0.03333333333333333, 0.16666666666666666},
                                  {0.06666666666666667, 0.3333333333333333},
                                  {0.1, 0.5},
                                  {0.1, 0.5},
                                  {0.09504844339512096, 0.47524221697560476},
                                  {0.08117449009293669, 0.4058724504646834},
                                  {0.06112604669781572, 0.3056302334890786},
                                  {0.03887395330218429, 0.19436976651092142},
                                  {0.018825509907063328, 0.09412754953531663},
                                  {0.004951556604879049, 0.02475778302439524},
                                  {0.0, 0.0},
                                  {0.004951556604879043, 0.024757783024395214}};
  Fixture f;
  optim::LambdaLR s(f.sgd, warmup_cosine);
  for (int e = 0; e < 12; ++e) {
    if (e > 0) s.step();
    for (int g = 0; g < 2; ++g) {
      EXPECT_NEAR(s.get_last_lr()[g], expected[e][g], 1e-15) << "epoch " << e << " group " << g;
      EXPECT_EQ(f.sgd.param_groups()[g].lr(), s.get_last_lr()[g]) << "step() sets the groups' lr";
    }
  }
  EXPECT_EQ(s.last_epoch(), 11);
}

TEST(LambdaLR, OneLambdaPerGroup) {
  Fixture f;
  optim::LambdaLR s(f.sgd, {[](int64_t e) { return 1.0 / double(e + 1); }, [](int64_t e) { return std::pow(0.9, e); }});
  s.step();
  s.step();
  EXPECT_DOUBLE_EQ(s.get_last_lr()[0], 0.1 / 3);
  EXPECT_DOUBLE_EQ(s.get_last_lr()[1], 0.5 * 0.81);
}

TEST(LambdaLR, AWrongNumberOfLambdasOrAnEmptyOneIsAnError) {
  Fixture f;
  const optim::LambdaLR::Lambda one = [](int64_t) { return 1.0; };
  EXPECT_THAT(error_of([&] {
                optim::LambdaLR s(f.sgd, std::vector<optim::LambdaLR::Lambda>{one, one, one});
              }),
              HasSubstr("LambdaLR: expected 2 lr_lambdas (one per parameter group), but got 3"));
  EXPECT_THAT(error_of([&] { optim::LambdaLR s(f.sgd, optim::LambdaLR::Lambda{}); }),
              HasSubstr("LambdaLR: lr_lambda 0 is empty"));
  EXPECT_EQ(f.sgd.param_groups()[0].lr(), 0.1) << "a failed constructor changes no lr";
}

// A scheduler made afresh for a resumed run, given the saved state and the
// same lambda, continues with the lrs of the run that never stopped.
TEST(LambdaLR, ResumesFromItsStateDict) {
  Fixture straight_run;
  optim::LambdaLR straight(straight_run.sgd, warmup_cosine);
  for (int e = 0; e < 5; ++e) straight.step();
  const optim::SchedulerStateDict saved = straight.state_dict();
  const optim::OptimizerStateDict saved_optimizer = straight_run.sgd.state_dict();
  for (int e = 0; e < 3; ++e) straight.step();

  Fixture resumed_run;
  optim::LambdaLR resumed(resumed_run.sgd, warmup_cosine);
  resumed_run.sgd.load_state_dict(saved_optimizer);
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.last_epoch(), 5);
  for (int e = 0; e < 3; ++e) resumed.step();
  EXPECT_EQ(resumed.get_last_lr(), straight.get_last_lr());
  EXPECT_EQ(resumed_run.sgd.param_groups()[1].lr(), straight_run.sgd.param_groups()[1].lr());
}

}  // namespace
}  // namespace ember
