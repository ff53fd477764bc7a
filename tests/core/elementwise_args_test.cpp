// Broadcasting and dim coalescing (ember/core/ops/elementwise_args.cpp): what the
// kernels are handed for contiguous, strided, broadcast, 0-dim and empty
// operands, and the errors.
#include <gtest/gtest.h>

#include "ember/core/ops/elementwise_args.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

std::vector<int64_t> sizes_of(const ElementwiseArgs& a) { return {a.sizes, a.sizes + a.ndim}; }
std::vector<int64_t> strides_of(const ElementwiseArgs& a, int operand) {
  return {a.strides[operand], a.strides[operand] + a.ndim};
}

TEST(ElementwiseArgs, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes("op", {3, 1, 5}, {4, 1}), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes("op", {}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes("op", {0, 1}, {1, 4}), (Shape{0, 4}));
  EXPECT_EQ(broadcast_shapes("op", {1}, {1}), (Shape{1}));
  EXPECT_TRUE(throws_with([] { broadcast_shapes("myop", {2, 3}, {4, 3}); }, {"myop", "[2, 3]", "[4, 3]", "2 vs 4"}));
  EXPECT_TRUE(throws_with([] { broadcast_shapes("myop", {0}, {2}); }, {"myop", "[0]", "[2]"}));
}

TEST(ElementwiseArgs, ContiguousOperandsCoalesceToOneFlatDim) {
  Tensor out = empty({2, 3, 4}), a = zeros({2, 3, 4}), b = zeros({2, 3, 4});
  ElementwiseArgs args = make_elementwise_args("op", out, {&a, &b});
  EXPECT_EQ(args.noperands, 3);
  EXPECT_EQ(args.numel, 24);
  EXPECT_EQ(sizes_of(args), (std::vector<int64_t>{24}));
  EXPECT_TRUE(args.contiguous);
  EXPECT_EQ(args.data[1], a.data_ptr());
}

TEST(ElementwiseArgs, StridedAndBroadcastOperandsKeepTheirLayout) {
  Tensor out = empty({3, 4});
  Tensor t = zeros({4, 3}).t();  // strides [1, 3]
  Tensor row = zeros({4});       // broadcast over dim 0: stride 0
  ElementwiseArgs args = make_elementwise_args("op", out, {&t, &row});
  EXPECT_FALSE(args.contiguous);
  EXPECT_EQ(sizes_of(args), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(strides_of(args, 0), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(strides_of(args, 1), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(strides_of(args, 2), (std::vector<int64_t>{0, 1}));
  // A column [3, 1] broadcast over [3, 4]: stride 0 in the last dim.
  Tensor col = zeros({3, 1});
  ElementwiseArgs c = make_elementwise_args("op", out, {&col});
  EXPECT_EQ(strides_of(c, 1), (std::vector<int64_t>{1, 0}));
}

TEST(ElementwiseArgs, SizeOneDimsDropAndCompatibleDimsMerge) {
  // [2, 1, 3, 4] narrowed in the last dim: dims 0..2 merge (size 1 dropped),
  // the last stays separate because the rows are not adjacent.
  Tensor base = zeros({2, 1, 3, 6});
  Tensor in = base.narrow(3, 0, 4);
  Tensor out = empty({2, 1, 3, 4});
  ElementwiseArgs args = make_elementwise_args("op", out, {&in});
  EXPECT_EQ(sizes_of(args), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(strides_of(args, 0), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(strides_of(args, 1), (std::vector<int64_t>{6, 1}));
  // A scalar broadcast to everything merges with anything.
  Tensor s = zeros({});
  ElementwiseArgs sa = make_elementwise_args("op", empty({5, 7}), {&s});
  EXPECT_EQ(sizes_of(sa), (std::vector<int64_t>{35}));
  EXPECT_EQ(strides_of(sa, 1), (std::vector<int64_t>{0}));
  EXPECT_FALSE(sa.contiguous);
  // One element: one dim of size 1.
  ElementwiseArgs one = make_elementwise_args("op", empty({1, 1}), {&s});
  EXPECT_EQ(sizes_of(one), (std::vector<int64_t>{1}));
  EXPECT_EQ(one.numel, 1);
}

TEST(ElementwiseArgs, Errors) {
  Tensor out = empty({2, 3});
  Tensor bad = zeros({4});
  EXPECT_TRUE(throws_with([&] { make_elementwise_args("myop", out, {&bad}); }, {"myop", "[4]", "[2, 3]"}));
  Tensor bigger = zeros({2, 2, 3});
  EXPECT_TRUE(throws_with([&] { make_elementwise_args("myop", out, {&bigger}); }, {"myop", "[2, 2, 3]", "[2, 3]"}));
}

TEST(ElementwiseArgs, OpsOnEmptyTensors) {
  Tensor e = zeros({0, 3});
  Tensor r = e + from_vector<float>({1, 2, 3});
  EXPECT_EQ(r.shape(), (Shape{0, 3}));
  EXPECT_EQ(exp(e.t()).shape(), (Shape{3, 0}));
  EXPECT_EQ(where(lt(e, 1), e, 2.0).shape(), (Shape{0, 3}));
  EXPECT_EQ(randn({0, 4}).numel(), 0);
  Tensor x = zeros({0, 3}).set_requires_grad();
  (x * 2.0).sum().backward();
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace ember
