// DistributedSampler against PyTorch's semantics: the shares of the ranks
// are disjoint and cover the epoch, padding and drop_last sizes, the same
// shuffle on every rank, a new order per epoch, and the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "ember/data/distributed_sampler.h"
#include "support/error_message.h"

namespace ember::data {
namespace {

using testing::throws_with;

// The ranks' shares of one epoch, interleaved back into the padded order.
std::vector<int64_t> interleave(int64_t n, int64_t world, DistributedSamplerOptions options, uint64_t epoch) {
  std::vector<std::vector<int64_t>> shares;
  for (int64_t r = 0; r < world; ++r) shares.push_back(DistributedSampler(n, world, r, options).indices(epoch));
  std::vector<int64_t> out;
  for (size_t i = 0; i < shares[0].size(); ++i) {
    for (const auto& s : shares) {
      EXPECT_EQ(s.size(), shares[0].size());
      out.push_back(s[i]);
    }
  }
  return out;
}

TEST(DistributedSampler, SequentialSharesArePaddedWithTheFirstIndices) {
  // n = 10 over 4 ranks: ceil(10 / 4) = 3 each, padded with 0 and 1.
  DistributedSamplerOptions o{.shuffle = false};
  EXPECT_EQ(DistributedSampler(10, 4, 0, o).indices(0), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(DistributedSampler(10, 4, 1, o).indices(0), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(DistributedSampler(10, 4, 2, o).indices(0), (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(DistributedSampler(10, 4, 3, o).indices(0), (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ(DistributedSampler(10, 4, 3, o).size(), 3);
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  DistributedSamplerOptions o{.shuffle = false, .drop_last = true};
  EXPECT_EQ(DistributedSampler(10, 4, 0, o).indices(0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(DistributedSampler(10, 4, 3, o).indices(0), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(DistributedSampler(10, 4, 1, o).size(), 2);
  EXPECT_TRUE(DistributedSampler(3, 4, 2, o).indices(0).empty());
}

TEST(DistributedSampler, PaddingWrapsWhenThereAreMoreRanksThanExamples) {
  DistributedSamplerOptions o{.shuffle = false};
  // n = 2 over 5 ranks: the order 0, 1 repeats to 0 1 0 1 0.
  EXPECT_EQ(interleave(2, 5, o, 0), (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, ShuffledSharesAreDisjointAndCoverTheEpoch) {
  for (int64_t world : {1, 2, 3, 4}) {
    for (int64_t n : {12, 13}) {
      DistributedSamplerOptions o{.shuffle = true, .seed = 7};
      std::vector<int64_t> all = interleave(n, world, o, 3);
      const int64_t padding = int64_t(all.size()) - n;
      EXPECT_EQ(padding, (world - n % world) % world);
      // The first n positions are a permutation; the padding repeats its head.
      std::vector<int64_t> head(all.begin(), all.begin() + n);
      std::set<int64_t> distinct(head.begin(), head.end());
      EXPECT_EQ(int64_t(distinct.size()), n) << "world " << world << " n " << n;
      EXPECT_EQ(*distinct.begin(), 0);
      EXPECT_EQ(*distinct.rbegin(), n - 1);
      for (int64_t p = 0; p < padding; ++p) EXPECT_EQ(all[size_t(n + p)], all[size_t(p)]);
    }
  }
}

TEST(DistributedSampler, EveryRankShufflesAlikeAndEachEpochDiffers) {
  DistributedSamplerOptions o{.shuffle = true, .seed = 11};
  // The interleaved order of an epoch is RandomSampler's permutation of it.
  EXPECT_EQ(interleave(12, 3, o, 0), RandomSampler(12, 11).indices(0));
  EXPECT_EQ(interleave(12, 3, o, 5), RandomSampler(12, 11).indices(5));
  EXPECT_NE(interleave(12, 3, o, 0), interleave(12, 3, o, 1));
  // A different seed gives a different order; the same seed the same one.
  DistributedSamplerOptions other{.shuffle = true, .seed = 12};
  EXPECT_NE(interleave(12, 3, o, 0), interleave(12, 3, other, 0));
  EXPECT_EQ(DistributedSampler(12, 3, 1, o).indices(2), DistributedSampler(12, 3, 1, o).indices(2));
}

TEST(DistributedSampler, EmptyDatasetGivesEmptyShares) {
  EXPECT_EQ(DistributedSampler(0, 3, 2).size(), 0);
  EXPECT_TRUE(DistributedSampler(0, 3, 2).indices(0).empty());
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  EXPECT_TRUE(throws_with([] { DistributedSampler(10, 4, 4); }, {"DistributedSampler", "rank 4", "[0, 3]"}));
  EXPECT_TRUE(throws_with([] { DistributedSampler(10, 4, -1); }, {"DistributedSampler", "rank -1"}));
  EXPECT_TRUE(throws_with([] { DistributedSampler(10, 0, 0); }, {"DistributedSampler", "num_replicas", "got 0"}));
  EXPECT_TRUE(throws_with([] { DistributedSampler(-1, 2, 0); }, {"DistributedSampler", "non-negative", "-1"}));
}

}  // namespace
}  // namespace ember::data
