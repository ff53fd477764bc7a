// parallel::scatter and gather over CPU "devices": torch.chunk's pieces,
// explicit sizes, nested values, their backward, and their errors.
#include "ember/parallel/data_parallel/scatter_gather.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "ember/parallel/data_parallel/warn_once.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember::parallel {
namespace {

using ember::testing::gradcheck;
using ember::testing::random_leaf;
using ember::testing::throws_with;

std::vector<Device> cpus(size_t n) { return std::vector<Device>(n, kCPU); }

std::vector<int64_t> sizes_of(const std::vector<Value>& pieces, int64_t dim = 0) {
  std::vector<int64_t> s;
  for (const Value& p : pieces) s.push_back(p.tensors().at(0).size(dim));
  return s;
}

TEST(ParallelScatter, PiecesAreTorchChunks) {
  for (int64_t n : {1, 2, 5, 9, 10, 12}) {
    for (size_t devices : {1, 2, 3, 4}) {
      Tensor x = arange(0, n, 1, DType::Float32).unsqueeze(1).expand({n, 2}).contiguous();
      TensorList expect = chunk(x, int64_t(devices), 0);
      std::vector<Value> pieces = scatter(x, cpus(devices));
      ASSERT_EQ(pieces.size(), expect.size()) << "n=" << n << " devices=" << devices;
      EXPECT_EQ(chunk_sizes_for(n, devices), sizes_of(pieces));
      for (size_t k = 0; k < pieces.size(); ++k) {
        EXPECT_TRUE(equal(pieces[k].tensor(), expect[k]));
        EXPECT_EQ(pieces[k].tensor().storage(), x.storage()) << "on its own device a piece is a view";
      }
    }
  }
  EXPECT_EQ(chunk_sizes_for(5, 4), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(chunk_sizes_for(10, 3), (std::vector<int64_t>{4, 4, 2}));
}

TEST(ParallelScatter, ExplicitSizesAndOtherDims) {
  Tensor x = randn({3, 8});
  std::vector<Value> pieces = scatter(x, cpus(3), 1, {1, 3, 4});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(equal(pieces[0].tensor(), x.narrow(1, 0, 1)));
  EXPECT_TRUE(equal(pieces[1].tensor(), x.narrow(1, 1, 3)));
  EXPECT_TRUE(equal(pieces[2].tensor(), x.narrow(1, 4, 4)));
  EXPECT_EQ(scatter(x, cpus(3), -1, {6, 2}).size(), 2u) << "fewer sizes than devices use fewer devices";
  EXPECT_TRUE(throws_with([&] { scatter(x, cpus(2), 1, {3, 3}); }, {"sum to 6", "have 8 along dim 1"}));
  EXPECT_TRUE(throws_with([&] { scatter(x, cpus(2), 1, {2, 2, 4}); }, {"3 chunk sizes", "for 2 devices"}));
  EXPECT_TRUE(throws_with([&] { scatter(x, cpus(2), 1, {8, 0}); }, {"must be positive", "[8, 0]"}));
  EXPECT_TRUE(throws_with([&] { scatter(x, cpus(2), 2); }, {"scatter", "dim"}));
}

TEST(ParallelScatter, NestedValuesKeepTheirStructure) {
  Tensor a = randn({6, 3}), b = randn({6}), c = arange(6, DType::Int64);
  Value in = Value::list({a, Value::list({b, Value()}), c});
  std::vector<Value> pieces = scatter(in, cpus(3));
  ASSERT_EQ(pieces.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const Value& p = pieces[k];
    ASSERT_TRUE(p.is_list());
    ASSERT_EQ(p.size(), 3u);
    EXPECT_TRUE(equal(p[0].tensor(), a.narrow(0, int64_t(2 * k), 2)));
    EXPECT_TRUE(equal(p[1][0].tensor(), b.narrow(0, int64_t(2 * k), 2)));
    EXPECT_TRUE(p[1][1].is_none());
    EXPECT_TRUE(equal(p[2].tensor(), c.narrow(0, int64_t(2 * k), 2)));
  }
  Value back = gather(pieces, kCPU);
  EXPECT_TRUE(equal(back[0].tensor(), a));
  EXPECT_TRUE(equal(back[1][0].tensor(), b));
  EXPECT_TRUE(back[1][1].is_none());
  EXPECT_TRUE(equal(back[2].tensor(), c));
}

TEST(ParallelScatter, Errors) {
  EXPECT_TRUE(throws_with(
      [] {
        scatter(Value::list({randn({4, 2}), randn({3, 2})}), cpus(2));
      },
      {"input tensors 0 and 1 have 4 and 3 rows along dim 0", "must agree"}));
  EXPECT_TRUE(throws_with(
      [] {
        scatter(Value::list({randn({4}), randn({})}), cpus(2));
      },
      {"input tensor 1", "0-dim", "cannot be split"}));
  EXPECT_TRUE(throws_with([] { scatter(randn({0, 3}), cpus(2)); }, {"the batch is empty"}));
  EXPECT_TRUE(throws_with([] { scatter(Value::list({Value()}), cpus(2)); }, {"no tensor to split"}));
  EXPECT_TRUE(throws_with([] { scatter(randn({4}), {}); }, {"no devices"}));
}

TEST(ParallelGather, ConcatenatesAlongDim) {
  Tensor a = randn({2, 3}), b = randn({2, 5});
  Tensor g = gather({a, b}, kCPU, 1).tensor();
  EXPECT_TRUE(equal(g, cat({a, b}, 1)));
  EXPECT_TRUE(gather({a}, kCPU).tensor().is_same(a)) << "one output on its device is returned as is";
  EXPECT_TRUE(throws_with([&] { gather({a, b}, kCPU, 0); }, {"replica 1's output", "does not match replica 0's"}));
  EXPECT_TRUE(throws_with([&] { gather({a, a.to(DType::Float64)}, kCPU, 0); }, {"replica 1's output"}));
  EXPECT_TRUE(throws_with(
      [&] {
        gather({Value(a), Value::list({a})}, kCPU);
      },
      {"differ in structure", "replica 1's is list("}));
  EXPECT_TRUE(throws_with([&] { gather({Value::list({a}), Value::list({a, a})}, kCPU); }, {"differ in structure"}));
  EXPECT_TRUE(throws_with([] { gather({}, kCPU); }, {"no outputs"}));
}

TEST(ParallelGather, ScalarsBecomeAVectorWithAWarning) {
  WarningCapture warnings;
  Tensor l0 = full({}, 1.5), l1 = full({}, 2.5);
  Tensor v = gather({l0, l1}, kCPU).tensor();
  EXPECT_EQ(v.shape(), (Shape{2}));
  EXPECT_EQ(to_vector<float>(v), (std::vector<float>{1.5f, 2.5f}));
  gather({l0, l1}, kCPU);
  EXPECT_EQ(warnings.count("all input tensors were scalars; will instead unsqueeze and return a vector"), 1u)
      << "warned once";
  EXPECT_EQ(gather({l0}, kCPU).tensor().dim(), 0) << "a single output stays as it is";
  EXPECT_TRUE(throws_with([&] { gather({l0, randn({2})}, kCPU); }, {"mix 0-dim and dimensioned tensors"}));
}

// d/dx of gather(f_k(piece_k)) with a different f per piece, so that each
// piece's gradient must go back to the right rows.
TEST(ParallelScatterGather, Gradients) {
  for (int64_t dim : {0, 1}) {
    Tensor x = random_leaf({5, 4}, 3);
    auto fn = [dim](const TensorList& in) {
      std::vector<Value> pieces = scatter(in[0], cpus(3), dim);
      std::vector<Value> outs;
      for (size_t k = 0; k < pieces.size(); ++k) outs.push_back(pieces[k].tensor() * double(k + 1) + in[0].sum());
      return gather(outs, kCPU, dim).tensor();
    };
    EXPECT_TRUE(gradcheck(fn, {x})) << "dim " << dim;
  }
  // A piece that gets no gradient contributes zeros.
  Tensor x = random_leaf({6, 2}, 4);
  std::vector<Value> pieces = scatter(x, cpus(3));
  (pieces[1].tensor() * 3.0).sum().backward();
  Tensor expect = zeros({6, 2}, DType::Float64);
  expect.narrow(0, 2, 2).fill_(3.0);
  EXPECT_TRUE(equal(x.grad(), expect));
  // Inputs that need no grad give pieces that need none.
  EXPECT_FALSE(scatter(randn({4, 2}), cpus(2))[0].tensor().requires_grad());
}

TEST(ParallelScatterGather, DoubleBackwardSeesThrough) {
  Tensor x = random_leaf({4, 3}, 5);
  std::vector<Value> pieces = scatter(x, cpus(2));
  std::vector<Value> outs;
  for (const Value& p : pieces) outs.push_back(p.tensor() * p.tensor() * p.tensor());
  Tensor y = gather(outs, kCPU).tensor().sum();
  Tensor g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true)[0];  // 3 x^2
  Tensor gg = autograd::grad({g.sum()}, {x})[0];                             // 6 x
  EXPECT_TRUE(allclose(g, x * x * 3.0, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(gg, x * 6.0, 1e-12, 1e-12));
}

}  // namespace
}  // namespace ember::parallel
