// amp::GradScaler (ember/parallel/amp/grad_scaler.h): the scale sequence on
// planted overflows against a reference of the documented rule, skipped
// steps that change nothing, steps equal to a plain step on the true
// gradients, unscale_ for clipping, the collapse error, state dicts and the
// misuse errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;
using testing::throws_with;

const double kInf = std::numeric_limits<double>::infinity();

// A tiny regression problem: loss = mean((x w + b - y)^2).
struct Problem {
  Tensor w, b, x, y;
  explicit Problem(uint64_t seed = 1) {
    manual_seed(seed);
    w = randn({4, 2}).set_requires_grad();
    b = randn({2}).set_requires_grad();
    x = randn({8, 4});
    y = randn({8, 2});
  }
  TensorList params() const { return {w, b}; }
  Tensor loss() const { return square(matmul(x, w) + b - y).mean(); }
};

// Backward of the scaled loss, then (when plant is not 0) a planted value
// in one gradient element.
void backward(GradScaler& scaler, const Problem& p, double plant = 0) {
  scaler.scale(p.loss()).backward();
  if (plant != 0) {
    NoGradGuard no_grad;
    p.w.grad().view({-1}).narrow(0, 3, 1).fill_(plant);
  }
}

// The documented update rule, on the host.
struct ReferenceScale {
  double scale;
  int64_t tracker = 0;
  GradScalerOptions o;
  explicit ReferenceScale(const GradScalerOptions& options) : scale(options.init_scale), o(options) {}
  void update(bool found_inf) {
    if (found_inf) {
      scale = std::max(scale * o.backoff_factor, o.min_scale);
      tracker = 0;
    } else if (++tracker == o.growth_interval) {
      scale = std::min(scale * o.growth_factor, o.max_scale);
      tracker = 0;
    }
  }
};

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScalerOptions o;
  EXPECT_EQ(o.init_scale, std::pow(2.0, 16));
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_EQ(o.max_scale, std::pow(2.0, 24));
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  Tensor loss = from_vector<float>({3.0f}).reshape({});
  EXPECT_EQ(scaler.scale(loss).item<double>(), 3.0 * 65536.0);
}

TEST(GradScaler, ScaleSequenceOnPlantedOverflowsMatchesTheRule) {
  GradScalerOptions o;
  o.growth_interval = 3;  // short, so growth shows within a few steps
  o.init_scale = 1024;
  GradScaler scaler(o);
  ReferenceScale ref(o);
  Problem p;
  optim::SGD sgd(p.params(), optim::SGDOptions{.lr = 0.01});
  const std::vector<double> plants = {0, 0, 0, 0, kInf, 0, 0, 0, std::nan(""), -kInf, 0, 0, 0, 0, 0, 0, 0};
  int64_t skipped = 0;
  for (size_t step = 0; step < plants.size(); ++step) {
    sgd.zero_grad();
    backward(scaler, p, plants[step]);
    scaler.step(sgd);
    scaler.update();
    ref.update(plants[step] != 0);
    skipped += plants[step] != 0;
    EXPECT_EQ(scaler.get_scale(), ref.scale) << "after step " << step;
    EXPECT_EQ(scaler.growth_tracker(), ref.tracker) << "after step " << step;
    EXPECT_EQ(scaler.skipped_steps(), skipped) << "after step " << step;
  }
}

// Two optimizers: each has its own found-inf flag, an overflow in one's
// gradients skips that one's step alone, and no flag carries an old inf
// into a later iteration (with one optimizer the update kernel resets the
// flag the next iteration reuses).
TEST(GradScaler, EachOptimizerKeepsItsOwnFlagFromIterationToIteration) {
  Problem p;
  optim::SGD for_w(TensorList{p.w}, optim::SGDOptions{.lr = 0.01});
  optim::SGD for_b(TensorList{p.b}, optim::SGDOptions{.lr = 0.01});
  GradScaler scaler;
  for (int it = 0; it < 4; ++it) {
    const Tensor w0 = p.w.detach().clone(), b0 = p.b.detach().clone();
    for_w.zero_grad();
    for_b.zero_grad();
    backward(scaler, p, it == 1 ? kInf : 0);  // an inf in w's gradient at iteration 1
    scaler.step(for_w);
    scaler.step(for_b);
    scaler.update();
    EXPECT_EQ(equal(p.w, w0), it == 1) << "iteration " << it;
    EXPECT_FALSE(equal(p.b, b0)) << "iteration " << it;
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // Then one optimizer alone, after an overflow: its next step is taken.
  GradScaler single;
  for (int it = 0; it < 3; ++it) {
    const Tensor w0 = p.w.detach().clone();
    for_w.zero_grad();
    for_b.zero_grad();
    backward(single, p, it == 0 ? kInf : 0);
    single.step(for_w);
    single.update();
    EXPECT_EQ(equal(p.w, w0), it == 0) << "iteration " << it;
  }
}

TEST(GradScaler, DefaultScaleAfterOneOverflow) {
  GradScaler scaler;
  Problem p;
  optim::Adam adam(p.params());
  backward(scaler, p, kInf);
  scaler.step(adam);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScaler, TheScaleStaysWithinItsBounds) {
  GradScalerOptions o;
  o.init_scale = std::pow(2.0, 23);
  o.growth_interval = 1;
  GradScaler scaler(o);
  Problem p;
  optim::SGD sgd(p.params(), optim::SGDOptions{.lr = 0.0});
  for (int i = 0; i < 3; ++i) {
    sgd.zero_grad();
    backward(scaler, p);
    scaler.step(sgd);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), std::pow(2.0, 24));
}

TEST(GradScaler, ASkippedStepLeavesParametersAndStateUntouched) {
  Problem p;
  optim::Adam adam(p.params(), optim::AdamOptions{.lr = 0.1});
  GradScaler scaler;
  backward(scaler, p);
  scaler.step(adam);  // a clean step: Adam state exists
  scaler.update();
  TensorList before;
  for (const Tensor& t : p.params()) before.push_back(t.detach().clone());
  std::map<std::string, Tensor> state_before;
  for (const auto& [name, t] : adam.state(p.w)) state_before[name] = t.clone();
  for (double plant : {kInf, std::nan("")}) {
    adam.zero_grad();
    backward(scaler, p, plant);
    scaler.step(adam);
    scaler.update();
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(equal(p.params()[i], before[i])) << "parameter " << i;
    for (const auto& [name, t] : adam.state(p.w)) EXPECT_TRUE(equal(t, state_before.at(name))) << name;
  }
  EXPECT_EQ(adam.state(p.w).at("step").item<int64_t>(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

// With a power-of-two scale, unscaling is exact: the scaled step equals a
// plain step on the true gradients, bit for bit.
TEST(GradScaler, AStepEqualsAPlainStepOnTheTrueGradients) {
  Problem scaled(3), plain(3);
  optim::AdamW a(scaled.params()), b(plain.params());
  GradScaler scaler;
  for (int i = 0; i < 3; ++i) {
    a.zero_grad();
    b.zero_grad();
    backward(scaler, scaled);
    scaler.step(a);
    scaler.update();
    plain.loss().backward();
    b.step();
    EXPECT_TRUE(equal(scaled.w, plain.w));
    EXPECT_TRUE(equal(scaled.b, plain.b));
  }
}

TEST(GradScaler, UnscaleGivesTheTrueGradientsForClipping) {
  Problem scaled(4), plain(4);
  optim::SGD a(scaled.params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  optim::SGD b(plain.params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  GradScaler scaler;
  backward(scaler, scaled);
  scaler.unscale_(a);
  plain.loss().backward();
  EXPECT_TRUE(equal(scaled.w.grad(), plain.w.grad()));
  Tensor n1 = optim::clip_grad_norm_(scaled.params(), 0.05);
  Tensor n2 = optim::clip_grad_norm_(plain.params(), 0.05);
  EXPECT_TRUE(equal(n1, n2));
  scaler.step(a);  // found_inf only: the gradients are already unscaled
  scaler.update();
  b.step();
  EXPECT_TRUE(equal(scaled.w, plain.w));
  // An inf found by unscale_ skips the step too.
  a.zero_grad();
  Tensor w_before = scaled.w.detach().clone();
  backward(scaler, scaled, kInf);
  scaler.unscale_(a);
  scaler.step(a);
  scaler.update();
  EXPECT_TRUE(equal(scaled.w, w_before));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScaler, HalfParametersStepWithoutUnscale) {
  manual_seed(5);
  Tensor w = randn({16}).to(DType::Float16).set_requires_grad();
  Tensor target = randn({16});
  optim::SGD sgd(TensorList{w}, optim::SGDOptions{.lr = 0.5});
  GradScaler scaler;
  const double first = square(w.to(DType::Float32) - target).mean().item<double>();
  for (int i = 0; i < 20; ++i) {
    sgd.zero_grad();
    scaler.scale(square(w.to(DType::Float32) - target).mean()).backward();
    EXPECT_EQ(w.grad().dtype(), DType::Float16);
    scaler.step(sgd);
    scaler.update();
  }
  EXPECT_LT(square(w.to(DType::Float32) - target).mean().item<double>(), first / 10);
  // unscale_ in place on float16 gradients is refused, as in PyTorch.
  sgd.zero_grad();
  scaler.scale(square(w.to(DType::Float32) - target).mean()).backward();
  EXPECT_TRUE(throws_with([&] { scaler.unscale_(sgd); }, {"unscale_", "float16 gradients", "MasterWeights"}));
}

TEST(GradScaler, ACollapsedScaleIsAnErrorNotAnEndlessLoop) {
  GradScalerOptions o;
  o.check_interval = 10;
  GradScaler scaler(o);
  Problem p;
  optim::SGD sgd(p.params(), optim::SGDOptions{.lr = 0.1});
  // From 2^16, halving each step reaches min_scale = 2^-24 after 40 steps;
  // the host looks every 10 updates.
  const int64_t to_floor = int64_t(std::lround(std::log2(o.init_scale / o.min_scale)));
  const int64_t expected_at = (to_floor + o.check_interval - 1) / o.check_interval * o.check_interval;
  int64_t updates = 0;
  std::string message;
  for (; updates < 1000; ++updates) {
    sgd.zero_grad();
    scaler.scale(p.loss() * std::nan("")).backward();  // a NaN loss
    scaler.step(sgd);
    try {
      scaler.update();
    } catch (const Error& e) {
      message = e.what();
      break;
    }
  }
  EXPECT_EQ(updates + 1, expected_at);
  EXPECT_NE(message.find("collapsed"), std::string::npos) << message;
  EXPECT_NE(message.find("NaN"), std::string::npos) << message;
  EXPECT_NE(message.find("diverged"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(expected_at) + " skipped steps"), std::string::npos) << message;
  EXPECT_TRUE(throws_with([&] { scaler.get_scale(); }, {"collapsed"}));
}

TEST(GradScaler, StateDictRoundTrip) {
  GradScalerOptions o;
  o.growth_interval = 5;
  GradScaler scaler(o);
  Problem p;
  optim::SGD sgd(p.params(), optim::SGDOptions{.lr = 0.01});
  for (double plant : {0.0, 0.0, kInf, 0.0}) {
    sgd.zero_grad();
    backward(scaler, p, plant);
    scaler.step(sgd);
    scaler.update();
  }
  amp::GradScalerState s = scaler.state_dict();
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.growth_tracker, 1);
  EXPECT_EQ(s.growth_interval, 5);
  EXPECT_EQ(s.growth_factor, 2.0);
  EXPECT_EQ(s.backoff_factor, 0.5);
  // Loaded before the first scale(): it starts from there.
  GradScaler resumed;
  resumed.load_state_dict(s);
  EXPECT_EQ(resumed.get_scale(), 32768.0);
  Tensor loss = from_vector<float>({1.0f}).reshape({});
  EXPECT_EQ(resumed.scale(loss).item<double>(), 32768.0);
  EXPECT_EQ(resumed.growth_tracker(), 1);
  EXPECT_EQ(resumed.options().growth_interval, 5);
  s.growth_tracker = 5;
  EXPECT_TRUE(throws_with([&] { resumed.load_state_dict(s); }, {"load_state_dict", "growth tracker 5"}));
}

TEST(GradScaler, DisabledIsAPassThrough) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  Problem scaled(6), plain(6);
  optim::SGD a(scaled.params()), b(plain.params());
  Tensor loss = scaled.loss();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(a);
  scaler.step(a);
  scaler.update();
  plain.loss().backward();
  b.step();
  EXPECT_TRUE(equal(scaled.w, plain.w));
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

// backward() of the scaled loss gives the loss the scale as its gradient
// (no seed, no multiply), equal to the scaled gradient of the plain loss;
// an explicit gradient is multiplied by the scale; a scale changed before
// that backward is an error, not gradients that disagree with the loss.
TEST(GradScaler, TheScaledLossesGradientIsTheScale) {
  Problem p;
  GradScaler scaler(GradScalerOptions{.init_scale = 1024.0});
  Tensor scaled = scaler.scale(p.loss());
  EXPECT_EQ(scaled.item<double>(), p.loss().item<double>() * 1024.0);
  ASSERT_NE(scaled.grad_fn(), nullptr);
  EXPECT_EQ(scaled.grad_fn()->name(), "GradScalerScaleBackward");
  scaled.backward();
  const Tensor w_grad = p.w.grad().clone();
  p.w.set_grad(Tensor());
  (p.loss() * 1024.0).backward();
  EXPECT_TRUE(equal(w_grad, p.w.grad()));
  EXPECT_EQ(scaler.get_scale(), 1024.0);  // shared as the gradient, still the scale

  p.w.set_grad(Tensor());
  scaler.scale(p.loss()).backward(from_vector<float>({0.5f}).reshape({}));
  EXPECT_TRUE(allclose(p.w.grad(), w_grad * 0.5, 1e-6, 0));

  p.w.set_grad(Tensor());
  Tensor stale = scaler.scale(p.loss());
  scaler.update(2048.0);
  EXPECT_TRUE(throws_with([&] { stale.backward(); }, {"GradScaler.scale", "the scale changed", "before update()"}));
}

TEST(GradScaler, MisuseIsAnError) {
  Problem p;
  optim::SGD sgd(p.params());
  GradScaler scaler;
  EXPECT_TRUE(throws_with([&] { scaler.step(sgd); }, {"GradScaler.step", "scaler.scale(loss)"}));
  EXPECT_TRUE(throws_with([&] { scaler.update(); }, {"GradScaler.update", "scaler.scale(loss)"}));
  backward(scaler, p);
  scaler.unscale_(sgd);
  EXPECT_TRUE(throws_with([&] { scaler.unscale_(sgd); }, {"already been called"}));
  scaler.step(sgd);
  EXPECT_TRUE(throws_with([&] { scaler.step(sgd); }, {"step() has already been called"}));
  EXPECT_TRUE(throws_with([&] { scaler.unscale_(sgd); }, {"after step()"}));
  scaler.update();
  EXPECT_TRUE(throws_with([&] { scaler.update(); }, {"no inf checks were recorded"}));
  sgd.zero_grad();  // no gradients at all
  EXPECT_TRUE(throws_with([&] { scaler.step(sgd); }, {"no inf checks were recorded for this optimizer"}));
  EXPECT_TRUE(throws_with([] { GradScaler bad(GradScalerOptions{.growth_factor = 0.5}); }, {"growth_factor"}));
  EXPECT_TRUE(throws_with([] { GradScaler bad(GradScalerOptions{.backoff_factor = 1.0}); }, {"backoff_factor"}));
}

TEST(GradScaler, UpdateWithANewScale) {
  GradScaler scaler;
  Problem p;
  backward(scaler, p);
  scaler.update(128.0);
  EXPECT_EQ(scaler.get_scale(), 128.0);
  EXPECT_TRUE(throws_with([&] { scaler.update(0.0); }, {"positive"}));
}

}  // namespace
}  // namespace ember
