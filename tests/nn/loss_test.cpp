// Losses: values against hand computation (incl. ignore_index,
// label_smoothing and every reduction), gradients, stability, the
// out-of-range label error and the module wrappers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;

using nn::Reduction;
using ::testing::HasSubstr;
namespace F = nn::functional;

// -log softmax(row)[target], and the mean of -log softmax(row) over classes.
double nll_of(const std::vector<double>& row, int64_t target) {
  double m = row[0];
  for (double v : row) m = std::max(m, v);
  double z = 0;
  for (double v : row) z += std::exp(v - m);
  return std::log(z) + m - row[target];
}
double uniform_of(const std::vector<double>& row) {
  double s = 0;
  for (size_t c = 0; c < row.size(); ++c) s += nll_of(row, int64_t(c));
  return s / double(row.size());
}

const std::vector<double> kLogits = {1, 2, 3, 1, 0, -1, 0.5, -2, 2};  // (3, 3)

TEST(NnLoss, CrossEntropyMatchesHandValuesForEveryReduction) {
  Tensor x = from_vector<double>(kLogits, {3, 3});
  Tensor t = from_vector<int64_t>({2, 0, 1});
  double l0 = nll_of({1, 2, 3}, 2), l1 = nll_of({1, 0, -1}, 0), l2 = nll_of({0.5, -2, 2}, 1);
  EXPECT_NEAR(F::cross_entropy(x, t).item<double>(), (l0 + l1 + l2) / 3, 1e-12);
  EXPECT_NEAR(F::cross_entropy(x, t, {.reduction = Reduction::Sum}).item<double>(), l0 + l1 + l2, 1e-12);
  std::vector<double> none = to_vector<double>(F::cross_entropy(x, t, {.reduction = Reduction::None}));
  ASSERT_EQ(none.size(), 3u);
  EXPECT_NEAR(none[0], l0, 1e-12);
  EXPECT_NEAR(none[1], l1, 1e-12);
  EXPECT_NEAR(none[2], l2, 1e-12);
  // nll_loss on log-probabilities gives the same.
  EXPECT_NEAR(F::nll_loss(log_softmax(x, 1), t).item<double>(), (l0 + l1 + l2) / 3, 1e-12);
  // Unbatched: (C) logits and a 0-dim target.
  EXPECT_NEAR(F::cross_entropy(x[0], from_vector<int64_t>({2}).reshape({})).item<double>(), l0, 1e-12);
}

TEST(NnLoss, IgnoreIndexDropsTargetsFromSumAndMean) {
  Tensor x = from_vector<double>(kLogits, {3, 3});
  double l0 = nll_of({1, 2, 3}, 2), l2 = nll_of({0.5, -2, 2}, 1);
  Tensor t = from_vector<int64_t>({2, -100, 1});
  EXPECT_NEAR(F::cross_entropy(x, t).item<double>(), (l0 + l2) / 2, 1e-12);
  EXPECT_NEAR(F::cross_entropy(x, t, {.reduction = Reduction::Sum}).item<double>(), l0 + l2, 1e-12);
  EXPECT_EQ(to_vector<double>(F::cross_entropy(x, t, {.reduction = Reduction::None}))[1], 0.0);
  // A custom ignore_index that is a valid class.
  Tensor t2 = from_vector<int64_t>({2, 0, 1});
  EXPECT_NEAR(F::cross_entropy(x, t2, {.ignore_index = 0}).item<double>(), (l0 + l2) / 2, 1e-12);
  // Everything ignored: the mean is NaN, as in PyTorch.
  EXPECT_TRUE(std::isnan(F::cross_entropy(x, full({3}, -100, DType::Int64)).item<double>()));
  // No gradient flows from ignored targets.
  Tensor leaf = from_vector<double>(kLogits, {3, 3}).set_requires_grad();
  F::cross_entropy(leaf, t).backward();
  EXPECT_EQ(to_vector<double>(leaf.grad().narrow(0, 1, 1)), std::vector<double>(3, 0.0));
}

TEST(NnLoss, LabelSmoothingMixesInTheUniformTarget) {
  Tensor x = from_vector<double>(kLogits, {3, 3});
  Tensor t = from_vector<int64_t>({2, -100, 1});
  const double e = 0.1;
  double s0 = (1 - e) * nll_of({1, 2, 3}, 2) + e * uniform_of({1, 2, 3});
  double s2 = (1 - e) * nll_of({0.5, -2, 2}, 1) + e * uniform_of({0.5, -2, 2});
  EXPECT_NEAR(F::cross_entropy(x, t, {.label_smoothing = e}).item<double>(), (s0 + s2) / 2, 1e-12);
  std::vector<double> none =
      to_vector<double>(F::cross_entropy(x, t, {.label_smoothing = e, .reduction = Reduction::None}));
  EXPECT_NEAR(none[0], s0, 1e-12);
  EXPECT_EQ(none[1], 0.0);
  EXPECT_NEAR(none[2], s2, 1e-12);
  EXPECT_THAT(error_of([&] { F::cross_entropy(x, t, {.label_smoothing = 1.5}); }),
              HasSubstr("label_smoothing must be in [0, 1], got 1.5"));
}

TEST(NnLoss, CrossEntropyOverExtraDims) {
  Generator g(3);
  Tensor x = randn({2, 3, 4}, DType::Float64, kCPU, &g);  // (N, C, d)
  Tensor t = randint(0, 3, {2, 4}, DType::Int64, kCPU, &g);
  std::vector<double> none = to_vector<double>(F::cross_entropy(x, t, {.reduction = Reduction::None}));
  std::vector<int64_t> tv = to_vector<int64_t>(t);
  ASSERT_EQ(none.size(), 8u);
  double total = 0;
  for (int n = 0; n < 2; ++n) {
    for (int d = 0; d < 4; ++d) {
      std::vector<double> row = to_vector<double>(x.select(0, n).select(1, d));
      double expect = nll_of(row, tv[n * 4 + d]);
      EXPECT_NEAR(none[n * 4 + d], expect, 1e-12);
      total += expect;
    }
  }
  EXPECT_NEAR(F::cross_entropy(x, t).item<double>(), total / 8, 1e-12);
  EXPECT_THAT(error_of([&] {
                F::cross_entropy(x, zeros({2, 3}, DType::Int64));
              }),
              HasSubstr("i.e. [2, 4] for an input of shape [2, 3, 4], but got [2, 3]"));
}

TEST(NnLoss, CrossEntropyIsStableForHugeLogits) {
  Tensor x = from_vector<float>({1000, -1000, 0, 0, 3000, -3000}, {2, 3});
  Tensor t = from_vector<int64_t>({1, 0});
  std::vector<float> none = to_vector<float>(F::cross_entropy(x, t, {.reduction = Reduction::None}));
  EXPECT_FLOAT_EQ(none[0], 2000.0f);
  EXPECT_FLOAT_EQ(none[1], 3000.0f);
}

// A -inf logit (a masked class) has probability 0: without smoothing the
// loss and gradient are finite; with smoothing the loss is inf, as the mean
// of -log p over classes is. Values from PyTorch 1.13.
TEST(NnLoss, CrossEntropyTakesMinusInfinityLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = from_vector<float>({0, -inf, 1, -inf, 2, 0.5}, {2, 3}).set_requires_grad();
  Tensor t = from_vector<int64_t>({2, 1});
  Tensor loss = F::cross_entropy(x, t, {.reduction = Reduction::None});
  std::vector<float> v = to_vector<float>(loss);
  EXPECT_NEAR(v[0], 0.31326166f, 1e-6);
  EXPECT_NEAR(v[1], 0.20141333f, 1e-6);
  loss.sum().backward();
  std::vector<float> g = to_vector<float>(x.grad());
  const std::vector<float> expected = {0.26894143f, 0, -0.26894140f, 0, -0.18242556f, 0.18242550f};
  for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], expected[k], 1e-6) << k;
  std::vector<float> smoothed =
      to_vector<float>(F::cross_entropy(x, t, {.label_smoothing = 0.1, .reduction = Reduction::None}));
  EXPECT_EQ(smoothed, std::vector<float>({inf, inf}));
}

TEST(NnLoss, OutOfRangeLabelNamesTheLabelAndTheClassCount) {
  Tensor x = zeros({3, 5});
  std::string e = error_of([&] { F::cross_entropy(x, from_vector<int64_t>({0, 7, 1})); });
  EXPECT_THAT(e, HasSubstr("cross_entropy: a target is not a class index for 5 classes (valid targets: 0 to 4, or "
                           "ignore_index = -100)"));
  EXPECT_THAT(e, HasSubstr("index 7 is out of bounds"));
  e = error_of([&] { F::nll_loss(x, from_vector<int64_t>({-1, 0, 1})); });
  EXPECT_THAT(e, HasSubstr("nll_loss: a target is not a class index for 5 classes"));
  EXPECT_THAT(e, HasSubstr("index -1 is out of bounds"));
  EXPECT_THAT(error_of([&] {
                F::cross_entropy(x, from_vector<float>({0, 1, 2}));
              }),
              HasSubstr("expected class indices as an int64 tensor, got a target of [3] float32"));
}

TEST(NnLoss, CrossEntropyAndNllGradcheck) {
  Tensor x = testing::random_leaf({4, 3}, 1);
  Tensor t = from_vector<int64_t>({2, -100, 0, 1});
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return F::cross_entropy(in[0], t); }, {x}));
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        return F::cross_entropy(in[0], t, {.label_smoothing = 0.2, .reduction = Reduction::None});
      },
      {x}));
  Tensor xt = testing::random_leaf({3, 4}, 2);  // transposed: (4, 3)
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return F::nll_loss(in[0].t(), t, {.reduction = Reduction::Sum}); }, {xt}));
}

TEST(NnLoss, MseAndL1MatchHandValues) {
  Tensor a = from_vector<double>({1, -2, 3, 0.5}, {2, 2});
  Tensor b = from_vector<double>({0, 1, 3, -0.5}, {2, 2});
  EXPECT_NEAR(F::mse_loss(a, b).item<double>(), (1 + 9 + 0 + 1) / 4.0, 1e-12);
  EXPECT_NEAR(F::mse_loss(a, b, Reduction::Sum).item<double>(), 11.0, 1e-12);
  EXPECT_EQ(to_vector<double>(F::mse_loss(a, b, Reduction::None)), (std::vector<double>{1, 9, 0, 1}));
  EXPECT_NEAR(F::l1_loss(a, b).item<double>(), (1 + 3 + 0 + 1) / 4.0, 1e-12);
  EXPECT_NEAR(F::l1_loss(a, b, Reduction::Sum).item<double>(), 5.0, 1e-12);
  EXPECT_EQ(to_vector<double>(F::l1_loss(a, b, Reduction::None)), (std::vector<double>{1, 3, 0, 1}));
  Tensor x = testing::random_leaf({3, 2}, 3), y = testing::random_leaf({2, 3}, 4);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return F::mse_loss(in[0], in[1].t()); }, {x, y}));
  EXPECT_TRUE(
      testing::gradcheck([](const TensorList& in) { return F::l1_loss(in[0], in[1].t(), Reduction::None); }, {x, y}));
  EXPECT_THAT(error_of([&] {
                F::mse_loss(zeros({4, 1}), zeros({4}));
              }),
              HasSubstr("mse_loss: the input has shape [4, 1] but the target [4]"));
}

TEST(NnLoss, BceWithLogitsMatchesNaiveFormulaAndIsStable) {
  std::vector<double> xv = {-3, -0.5, 0.2, 2.5, 4, -1}, yv = {0, 1, 1, 0, 1, 0.3}, pw = {2.0, 0.5, 1.5};
  Tensor x = from_vector<double>(xv, {2, 3}), y = from_vector<double>(yv, {2, 3});
  Tensor pos = from_vector<double>(pw);
  std::vector<double> plain = to_vector<double>(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::None));
  std::vector<double> weighted = to_vector<double>(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::None, pos));
  double sum = 0;
  for (int i = 0; i < 6; ++i) {
    double s = 1 / (1 + std::exp(-xv[i]));
    EXPECT_NEAR(plain[i], -(yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s)), 1e-12);
    EXPECT_NEAR(weighted[i], -(pw[i % 3] * yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s)), 1e-12);
    sum += plain[i];
  }
  EXPECT_NEAR(F::binary_cross_entropy_with_logits(x, y).item<double>(), sum / 6, 1e-12);
  EXPECT_NEAR(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::Sum).item<double>(), sum, 1e-12);
  // Huge logits: finite, and the large-margin values are exact.
  Tensor big = from_vector<float>({200, -200, 200, -200});
  Tensor lab = from_vector<float>({1, 0, 0, 1});
  EXPECT_EQ(to_vector<float>(F::binary_cross_entropy_with_logits(big, lab, {}, Reduction::None)),
            (std::vector<float>{0, 0, 200, 200}));
  Tensor xl = testing::random_leaf({2, 3}, 5);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return F::binary_cross_entropy_with_logits(in[0], y, {}, Reduction::None, pos); },
      {xl}));
}

TEST(NnLoss, ModuleWrappersForwardToTheFunctions) {
  Tensor x = from_vector<double>(kLogits, {3, 3});
  Tensor t = from_vector<int64_t>({2, 1, 1});
  nn::CrossEntropyLoss ce({.ignore_index = 1, .label_smoothing = 0.05});
  EXPECT_TRUE(equal(ce(x, t), F::cross_entropy(x, t, {.ignore_index = 1, .label_smoothing = 0.05})));
  nn::NLLLoss nll({.reduction = Reduction::Sum});
  EXPECT_TRUE(equal(nll(x, t), F::nll_loss(x, t, {.reduction = Reduction::Sum})));
  EXPECT_TRUE(equal(nn::MSELoss(Reduction::Sum)(x, x * 2.0), F::mse_loss(x, x * 2.0, Reduction::Sum)));
  EXPECT_TRUE(equal(nn::L1Loss()(x, x * 2.0), F::l1_loss(x, x * 2.0)));

  auto bce = std::make_shared<nn::BCEWithLogitsLoss>(Tensor(), Reduction::Mean, from_vector<double>({1, 2, 3}));
  Tensor y = full({3, 3}, 0.5, DType::Float64);
  EXPECT_TRUE(equal((*bce)(x, y),
                    F::binary_cross_entropy_with_logits(x, y, {}, Reduction::Mean, from_vector<double>({1, 2, 3}))));
  EXPECT_EQ(bce->state_dict().keys(), (std::vector<std::string>{"pos_weight"}));
  auto copy = nn::clone(bce);
  EXPECT_TRUE(equal(copy->pos_weight, bce->pos_weight));
  EXPECT_NE(copy->pos_weight.data_ptr(), bce->pos_weight.data_ptr());
  EXPECT_EQ(nn::CrossEntropyLoss().str(), "CrossEntropyLoss()");
}

TEST(NnLoss, BceWithLogitsTakesWeightThenPosWeightAsPyTorch) {
  // torch.nn.functional.binary_cross_entropy_with_logits(input, target,
  // weight, ..., reduction, pos_weight): the third argument rescales each
  // element's loss; it once was pos_weight.
  Tensor x = from_vector<double>({-1.5, 0.25, 2, 0.5, -0.75, 1}, {2, 3});
  Tensor y = from_vector<double>({0, 1, 1, 1, 0, 0.5}, {2, 3});
  Tensor w = from_vector<double>({0.5, 2, 3});
  Tensor pos = from_vector<double>({4, 1, 0.25});
  Tensor plain = F::binary_cross_entropy_with_logits(x, y, {}, Reduction::None);
  EXPECT_TRUE(allclose(F::binary_cross_entropy_with_logits(x, y, w, Reduction::None), plain * w, 1e-15, 0));
  Tensor positive = F::binary_cross_entropy_with_logits(x, y, {}, Reduction::None, pos);
  EXPECT_TRUE(allclose(F::binary_cross_entropy_with_logits(x, y, w, Reduction::None, pos), positive * w, 1e-15, 0));
  EXPECT_NEAR(F::binary_cross_entropy_with_logits(x, y, w).item<double>(), (plain * w).mean().item<double>(), 1e-15);

  nn::BCEWithLogitsLoss module(w, Reduction::Sum, pos);
  EXPECT_NEAR(module(x, y).item<double>(), (positive * w).sum().item<double>(), 1e-14);
  EXPECT_EQ(module.state_dict().keys(), (std::vector<std::string>{"weight", "pos_weight"}));
  auto copy = nn::clone(std::make_shared<nn::BCEWithLogitsLoss>(w, Reduction::Sum, pos));
  EXPECT_TRUE(equal(copy->weight, w));
  EXPECT_TRUE(equal(copy->pos_weight, pos));
}

}  // namespace
}  // namespace ember
