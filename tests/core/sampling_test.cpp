// multinomial on CPU: shapes, determinism for a seed, empirical frequencies
// of many draws against the normalized weights (with and without
// replacement; zero-weight categories never drawn), error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

// Checks that the counts of categories 0..C-1 among `draws` lie within 5
// standard deviations of n * p (p normalized from `weights`), and that
// zero-weight categories never appear.
void expect_frequencies(const std::vector<int64_t>& draws, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<double> count(weights.size(), 0);
  for (int64_t d : draws) {
    ASSERT_GE(d, 0);
    ASSERT_LT(d, int64_t(weights.size()));
    count[size_t(d)] += 1;
  }
  const double n = double(draws.size());
  for (size_t c = 0; c < weights.size(); ++c) {
    const double p = weights[c] / total;
    if (p == 0) {
      EXPECT_EQ(count[c], 0) << "category " << c << " has weight 0";
      continue;
    }
    EXPECT_NEAR(count[c], n * p, 5 * std::sqrt(n * p * (1 - p)) + 1) << "category " << c;
  }
}

const std::vector<double> kWeights = {0.2, 0, 0.6, 1.2, 0, 0.05};

TEST(Multinomial, WithReplacementFrequencies) {
  Generator g(1);
  Tensor probs = from_vector(kWeights);
  Tensor draws = multinomial(probs, 40000, true, &g);
  EXPECT_EQ(draws.shape(), (Shape{40000}));
  EXPECT_EQ(draws.dtype(), DType::Int64);
  expect_frequencies(to_vector<int64_t>(draws), kWeights);
  // float32 and float16 weights, several rows.
  for (DType dt : {DType::Float32, DType::Float16}) {
    Tensor rows = from_vector(kWeights).to(dt).unsqueeze(0).expand({3, 6});
    Tensor d = multinomial(rows, 20000, true, &g);
    EXPECT_EQ(d.shape(), (Shape{3, 20000}));
    for (int64_t r = 0; r < 3; ++r) expect_frequencies(to_vector<int64_t>(d.select(0, r)), kWeights);
  }
}

TEST(Multinomial, WithoutReplacementFrequenciesAndDistinctDraws) {
  Generator g(2);
  const int64_t rows = 20000;
  Tensor probs = from_vector(kWeights).unsqueeze(0).expand({rows, 6});
  Tensor draws = multinomial(probs, 4, false, &g);
  EXPECT_EQ(draws.shape(), (Shape{rows, 4}));
  std::vector<int64_t> all = to_vector<int64_t>(draws);
  std::vector<int64_t> first;
  for (int64_t r = 0; r < rows; ++r) {
    std::set<int64_t> seen(all.begin() + r * 4, all.begin() + r * 4 + 4);
    ASSERT_EQ(seen.size(), 4u) << "row " << r << " repeats a category";
    EXPECT_EQ(seen.count(1) + seen.count(4), 0u) << "row " << r << " drew a zero-weight category";
    first.push_back(all[size_t(r * 4)]);
  }
  // The first draw of each row follows the normalized weights.
  expect_frequencies(first, kWeights);
  // Every draw of a row of all-positive weights, num_samples = categories: a permutation.
  Tensor perm = multinomial(from_vector<float>({1, 2, 3}), 3, false, &g);
  std::vector<int64_t> p = to_vector<int64_t>(perm);
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()), (std::set<int64_t>{0, 1, 2}));
}

TEST(Multinomial, SameSeedSameDraws) {
  Tensor probs = rand({4, 50}, DType::Float32);
  for (bool replacement : {true, false}) {
    Generator a(7), b(7);
    EXPECT_TRUE(equal(multinomial(probs, 10, replacement, &a), multinomial(probs, 10, replacement, &b)));
    manual_seed(11);
    Tensor x = probs.multinomial(5, replacement);
    manual_seed(11);
    EXPECT_TRUE(equal(x, multinomial(probs, 5, replacement)));
  }
  EXPECT_EQ(multinomial(zeros({0, 3}), 2).shape(), (Shape{0, 2}));
}

TEST(Multinomial, Errors) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_with([] { multinomial(from_vector<int64_t>({1, 2}), 1); }, {"multinomial", "floating", "int64"}));
  EXPECT_TRUE(throws_with([] { multinomial(ones({2, 2, 2}), 1); }, {"multinomial", "1-D or 2-D", "[2, 2, 2]"}));
  EXPECT_TRUE(throws_with([] { multinomial(ones({3}), 0); }, {"multinomial", "positive", "0"}));
  EXPECT_TRUE(
      throws_with([] { multinomial(ones({3}), 4); }, {"multinomial", "4 samples", "3 categories", "replacement"}));
  for (double bad : {-1.0, inf, nan}) {
    EXPECT_TRUE(throws_with(
        [&] {
          multinomial(from_vector<double>({1, bad}), 1, true);
        },
        {"multinomial", "inf, NaN or a negative", "non-negative"}));
  }
  EXPECT_TRUE(throws_with(
      [] {
        multinomial(from_vector<float>({1, 1, 0, 0}, {2, 2}), 1, true);
      },
      {"multinomial", "1 row(s)", "sum to 0"}));
  EXPECT_TRUE(throws_with(
      [] {
        multinomial(from_vector<float>({1, 0, 0}), 2);
      },
      {"multinomial", "2 samples without replacement", "only 1 non-zero"}));
  EXPECT_NO_THROW(multinomial(from_vector<float>({1, 0, 0}), 2, true));
}

}  // namespace
}  // namespace ember
