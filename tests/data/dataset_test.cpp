// TensorDataset, Subset and the two collations (stack_examples for any
// dataset, gather_rows for rows of a tensor): values against the rows they
// must come from, non-contiguous sources, and every error message.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/data/collate.h"
#include "ember/data/subset.h"
#include "ember/data/tensor_dataset.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::data {
namespace {

using testing::throws_with;

// inputs (n, 2, 3) float64 with element (i, r, c) = 100 i + 10 r + c;
// targets (n) int64 with target i = 1000 + i.
TensorDataset numbered(int64_t n) {
  std::vector<double> in;
  std::vector<int64_t> target;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 3; ++c) in.push_back(double(100 * i + 10 * r + c));
    }
    target.push_back(1000 + i);
  }
  return TensorDataset(from_vector<double>(in, {n, 2, 3}), from_vector<int64_t>(target, {n}));
}

// Checks that batch row k holds example indices[k] of numbered().
void expect_rows(const Batch& batch, const std::vector<int64_t>& indices) {
  const int64_t b = int64_t(indices.size());
  ASSERT_EQ(batch.input.shape(), (Shape{b, 2, 3}));
  ASSERT_EQ(batch.target.shape(), (Shape{b}));
  std::vector<double> in = to_vector<double>(batch.input);
  std::vector<int64_t> target = to_vector<int64_t>(batch.target);
  for (int64_t k = 0; k < b; ++k) {
    EXPECT_EQ(target[size_t(k)], 1000 + indices[size_t(k)]);
    for (int64_t e = 0; e < 6; ++e) {
      EXPECT_EQ(in[size_t(6 * k + e)], double(100 * indices[size_t(k)] + 10 * (e / 3) + e % 3));
    }
  }
}

// A dataset that only has get(): collation goes through stack_examples.
class Examples : public Dataset {
 public:
  explicit Examples(std::vector<Example> examples) : examples_(std::move(examples)) {}
  int64_t size() const override { return int64_t(examples_.size()); }
  Example get(int64_t i) const override { return examples_.at(size_t(i)); }

 private:
  std::vector<Example> examples_;
};

TEST(TensorDataset, SizeAndGetAreRowViews) {
  TensorDataset ds = numbered(5);
  EXPECT_EQ(ds.size(), 5);
  Example ex = ds.get(3);
  EXPECT_EQ(ex.input.shape(), (Shape{2, 3}));
  EXPECT_EQ(to_vector<double>(ex.input), (std::vector<double>{300, 301, 302, 310, 311, 312}));
  EXPECT_EQ(ex.target.item<int64_t>(), 1003);
  EXPECT_EQ(ex.input.storage(), ds.inputs().storage());  // a view, no copy
}

TEST(TensorDataset, GetBatchGathersRowsInOrderWithRepeats) {
  TensorDataset ds = numbered(6);
  const std::vector<int64_t> indices{4, 0, 4, 5, 2};
  expect_rows(ds.get_batch(indices, HostAllocator()), indices);
}

TEST(TensorDataset, NonContiguousInputsAreMadeContiguousOnce) {
  // inputs = base.t(): row i is column i of base.
  Tensor base = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  TensorDataset ds(base.t(), from_vector<int64_t>({7, 8, 9}));
  EXPECT_TRUE(ds.inputs().is_contiguous());
  Batch b = ds.get_batch({2, 0}, HostAllocator());
  EXPECT_EQ(to_vector<float>(b.input), (std::vector<float>{2, 5, 0, 3}));
  EXPECT_EQ(to_vector<int64_t>(b.target), (std::vector<int64_t>{9, 7}));
}

TEST(TensorDataset, DetachesItsTensors) {
  Tensor x = ones({3, 2}).set_requires_grad();
  TensorDataset ds(x, zeros({3}));
  EXPECT_FALSE(ds.inputs().requires_grad());
  EXPECT_FALSE(ds.get(0).input.requires_grad());
}

TEST(TensorDataset, Errors) {
  EXPECT_TRUE(throws_with(
      [] {
        TensorDataset(zeros({4, 2}), zeros({3}));
      },
      {"TensorDataset", "[4, 2]", "[3]", "differ in dim 0"}));
  EXPECT_TRUE(throws_with([] { TensorDataset(zeros({}), zeros({3})); }, {"inputs", "[]", "dim 0 of examples"}));
  EXPECT_TRUE(throws_with([] { TensorDataset(Tensor(), zeros({3})); }, {"inputs", "undefined"}));
  TensorDataset ds = numbered(3);
  EXPECT_TRUE(throws_with([&] { ds.get(3); }, {"TensorDataset::get", "index 3", "3 examples"}));
  EXPECT_TRUE(throws_with([&] { ds.get(-1); }, {"index -1"}));
  EXPECT_TRUE(throws_with(
      [&] {
        ds.get_batch({0, 7}, HostAllocator());
      },
      {"gather_rows", "index 7", "position 1", "3 rows", "[3, 2, 3]"}));
}

TEST(Subset, MapsIndicesAndKeepsTheFastPath) {
  auto ds = std::make_shared<TensorDataset>(numbered(10));
  Subset sub(ds, {9, 2, 5});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.get(1).target.item<int64_t>(), 1002);
  expect_rows(sub.get_batch({2, 0, 0}, HostAllocator()), {5, 9, 9});
  // A subset of a subset.
  Subset subsub(std::make_shared<Subset>(sub), {2, 1});
  expect_rows(subsub.get_batch({0, 1}, HostAllocator()), {5, 2});
}

TEST(Subset, Errors) {
  auto ds = std::make_shared<TensorDataset>(numbered(4));
  EXPECT_TRUE(throws_with([&] { Subset(ds, {1, 4}); }, {"Subset", "index 4", "position 1", "4 examples"}));
  EXPECT_TRUE(throws_with([&] { Subset(nullptr, {0}); }, {"Subset", "null"}));
  Subset sub(ds, {3, 1});
  EXPECT_TRUE(throws_with([&] { sub.get(2); }, {"Subset", "index 2", "subset of 2 examples"}));
  EXPECT_TRUE(throws_with([&] { sub.get_batch({0, -1}, HostAllocator()); }, {"Subset", "index -1"}));
}

TEST(StackExamples, StacksGetOfEachIndex) {
  TensorDataset rows = numbered(5);
  std::vector<Example> examples;
  for (int64_t i = 0; i < 5; ++i) {
    // Non-contiguous example inputs: a transposed (3, 2) view of each row, transposed back.
    Example ex = rows.get(i);
    examples.push_back({ex.input.t().contiguous().t(), ex.target});
  }
  Examples ds(examples);
  const std::vector<int64_t> indices{3, 1, 4};
  expect_rows(ds.get_batch(indices, HostAllocator()), indices);
}

TEST(StackExamples, Errors) {
  Examples mixed({{zeros({2}), zeros({})}, {zeros({3}), zeros({})}});
  EXPECT_TRUE(throws_with(
      [&] {
        mixed.get_batch({0, 1}, HostAllocator());
      },
      {"stack_examples", "example 1", "position 1", "[3] float32", "example 0", "[2] float32",
       "same shape and dtype"}));
  Examples dtypes({{zeros({2}), zeros({})}, {zeros({2}), zeros({}, DType::Int64)}});
  EXPECT_TRUE(throws_with([&] { dtypes.get_batch({0, 1}, HostAllocator()); }, {"target", "[] int64", "[] float32"}));
  Examples undefined({{zeros({2}), Tensor()}});
  EXPECT_TRUE(throws_with([&] { undefined.get_batch({0}, HostAllocator()); }, {"example 0", "undefined target"}));
  EXPECT_TRUE(throws_with([&] { undefined.get_batch({}, HostAllocator()); }, {"stack_examples", "no indices"}));
}

TEST(HostAllocator, PinnedNeedsAVisibleDevice) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: pinned memory is available";
  EXPECT_TRUE(throws_with([] { HostAllocator(true); }, {"HostAllocator", "pinned memory needs a visible CUDA device"}));
  Tensor t = HostAllocator().empty({2, 3}, DType::Int32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::Int32);
  EXPECT_TRUE(t.device().is_cpu());
}

}  // namespace
}  // namespace ember::data
