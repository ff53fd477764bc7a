// ember/parallel/coalesced: bucket assignment, the coalesced broadcast and
// reduction on CPU "devices", and the transport seam.
#include "ember/parallel/distributed/coalesced.h"

#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember::parallel {
namespace {

using ember::testing::gradcheck;
using ember::testing::random_leaf;

// The copy transport, counting its calls.
struct CountingTransport : BucketTransport {
  size_t broadcasts = 0, reductions = 0;
  void broadcast(const Tensor& source, const TensorList& destinations) override {
    ++broadcasts;
    copy_transport()->broadcast(source, destinations);
  }
  Tensor reduce_sum(const TensorList& sources, Device destination) override {
    ++reductions;
    return copy_transport()->reduce_sum(sources, destination);
  }
};

TEST(ParallelBuckets, GroupByDtypeUpToTheByteLimit) {
  TensorList ts{zeros({10}), zeros({3}, DType::Float64), zeros({20}), zeros({300}),
                zeros({4}),  zeros({2}, DType::Float64)};
  std::vector<Bucket> buckets = assign_buckets(ts, 100);  // 25 floats
  // float32: [0 (40 B), 2 (80 B) -> 120 B, closed], [3 alone: 1200 B], [4];
  // float64: [1, 5].
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].members, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(buckets[0].numel, 30);
  EXPECT_EQ(buckets[1].dtype, DType::Float64);
  EXPECT_EQ(buckets[1].members, (std::vector<size_t>{1, 5}));
  EXPECT_EQ(buckets[2].members, (std::vector<size_t>{3}));
  EXPECT_EQ(buckets[3].members, (std::vector<size_t>{4}));
  EXPECT_EQ(buckets[0].shapes[1], (Shape{20}));
  EXPECT_EQ(assign_buckets(ts).size(), 2u) << "with the default 25 MiB: one bucket per dtype";
}

TEST(ParallelCoalesced, BroadcastGivesFreshCopiesPerDevice) {
  TensorList ts{randn({3, 4}), randn({5}), arange(6, DType::Int64).view({2, 3})};
  std::vector<Bucket> buckets = assign_buckets(ts);
  CountingTransport transport;
  std::vector<TensorList> copies = broadcast_coalesced(ts, {kCPU, kCPU, kCPU}, buckets, transport);
  EXPECT_EQ(transport.broadcasts, buckets.size()) << "one broadcast per bucket";
  ASSERT_EQ(copies.size(), 3u);
  for (const TensorList& c : copies) {
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_TRUE(equal(c[i], ts[i]));
      EXPECT_NE(c[i].storage(), ts[i].storage()) << "fresh memory even on the source device";
      EXPECT_FALSE(c[i].requires_grad());
    }
    EXPECT_EQ(c[0].storage(), c[1].storage()) << "one flat tensor per bucket";
  }
  EXPECT_NE(copies[0][0].storage(), copies[1][0].storage());
}

TEST(ParallelCoalesced, ReduceSumsAndKeepsUnusedUndefined) {
  TensorList a{full({2, 2}, 1.0), Tensor(), full({3}, 10.0), Tensor()};
  TensorList b{full({2, 2}, 2.0), full({1}, 5.0), Tensor(), Tensor()};
  TensorList shapes{zeros({2, 2}), zeros({1}), zeros({3}), zeros({2})};
  std::vector<Bucket> buckets = assign_buckets(shapes);
  CountingTransport transport;
  TensorList sums = reduce_add_coalesced({a, b}, kCPU, buckets, transport);
  EXPECT_EQ(transport.reductions, buckets.size()) << "one reduction per bucket";
  EXPECT_TRUE(equal(sums[0], full({2, 2}, 3.0)));
  EXPECT_TRUE(equal(sums[1], full({1}, 5.0)));
  EXPECT_TRUE(equal(sums[2], full({3}, 10.0)));
  EXPECT_FALSE(sums[3].defined()) << "no replica had a gradient for it";
  EXPECT_TRUE(ember::testing::throws_with(
      [&] {
        reduce_add_coalesced({a, {a[0]}}, kCPU, buckets, transport);
      },
      {"replica 1 has 1 gradients for 4 tensors"}));
}

TEST(ParallelCoalesced, ReductionIsDifferentiable) {
  Tensor x = random_leaf({2, 3}, 1), y = random_leaf({4}, 2);
  std::vector<Bucket> buckets = assign_buckets({x, y});
  auto fn = [&](const TensorList& in) {
    TensorList sums = reduce_add_coalesced({{in[0], in[1]}, {in[0] * 2.0, Tensor()}}, kCPU, buckets, *copy_transport());
    return cat({sums[0].reshape({-1}), sums[1]}, 0);
  };
  EXPECT_TRUE(gradcheck(fn, {x, y}));
}

}  // namespace
}  // namespace ember::parallel
