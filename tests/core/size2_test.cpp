// Size2 and OptionalSize2 (ember/core/size2.h), and the NCHW ops that take them:
// one value means both dims, as PyTorch's `_size_2_t`, so conv2d's and the
// pools' {1}, 1 and {1, 2} read as PyTorch's padding=1, padding=1 and
// padding=(1, 2), and a stride left out is the pools' kernel_size.
#include <gtest/gtest.h>

#include <optional>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

Size2 pass(Size2 s) { return s; }
std::optional<Size2> pass_optional(OptionalSize2 s) { return s.get(); }

TEST(Size2, OneValueMeansBothDimsTwoMeanHeightWidth) {
  EXPECT_EQ(pass(1), Size2(1, 1));
  EXPECT_EQ(pass({1}), Size2(1, 1));
  EXPECT_EQ(pass({1, 2}), Size2(1, 2));
  EXPECT_EQ(pass(Int2{3, 4}), Size2(3, 4));
  EXPECT_EQ(pass(Size2(5)).w, 5);
}

TEST(Size2, OptionalSize2LeftOutOrSetLikeSize2) {
  EXPECT_FALSE(pass_optional({}).has_value());
  EXPECT_FALSE(pass_optional(std::nullopt).has_value());
  EXPECT_EQ(pass_optional(2), Size2(2, 2));
  EXPECT_EQ(pass_optional({2}), Size2(2, 2));
  EXPECT_EQ(pass_optional({2, 3}), Size2(2, 3));
  EXPECT_EQ(pass_optional(Size2(4, 5)), Size2(4, 5));
  EXPECT_EQ(pass_optional(std::optional<Size2>(Size2(6))), Size2(6, 6));
}

Tensor image(int64_t h, int64_t w) { return sin(arange(0, h * w, 1, DType::Float64).view({1, 1, h, w})); }

TEST(Size2, Conv2dBracedSingleValueMeansBothSides) {
  // Before Size2, {1} was a std::array {1, 0}: padding (1, 0).
  Tensor x = image(7, 6), w = ones({1, 1, 3, 3}, DType::Float64);
  Tensor both = conv2d(x, w, {}, {2, 2}, {1, 1});
  EXPECT_TRUE(equal(conv2d(x, w, {}, {2, 2}, {1}), both));
  EXPECT_TRUE(equal(conv2d(x, w, {}, 2, 1), both));
  EXPECT_TRUE(equal(conv2d(x, w, {}, {2}, 1, {1}), both));
  EXPECT_EQ(conv2d(x, w, {}, 1, {1, 2}).shape(), (Shape{1, 1, 7, 8}));
  EXPECT_EQ(conv2d(x, w, {}, 1, 0, {2}).shape(), (Shape{1, 1, 3, 2}));  // dilation 2 on both dims
  EXPECT_EQ(conv2d(x, w, {}, 1, 0, {2, 1}).shape(), (Shape{1, 1, 3, 4}));
}

TEST(Size2, PoolsTakeOneValueAndDefaultStrideToKernel) {
  Tensor x = image(8, 7);
  // max_pool2d(x, {3, 3}, {2, 2}, {1}) was padding (1, 0).
  Tensor both = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  EXPECT_EQ(both.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_TRUE(equal(max_pool2d(x, {3, 3}, {2, 2}, {1}), both));
  EXPECT_TRUE(equal(max_pool2d(x, 3, 2, 1), both));
  EXPECT_TRUE(equal(max_pool2d(x, 3, 2, 1, 1, false), both));
  // avg_pool2d(x, 2) did not compile; the stride left out is the kernel's.
  EXPECT_TRUE(equal(avg_pool2d(x, 2), avg_pool2d(x, {2, 2}, {2, 2}, {0, 0})));
  EXPECT_TRUE(equal(max_pool2d(x, 3, {}, 1), max_pool2d(x, {3, 3}, {3, 3}, {1, 1})));
  EXPECT_TRUE(equal(avg_pool2d(x, {3, 2}, std::nullopt, {1}), avg_pool2d(x, {3, 2}, {3, 2}, {1, 1})));
  EXPECT_EQ(avg_pool2d(x, {3, 2}, {}, {1, 0}).shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(x, 2).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {3}).shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {1, 3}).shape(), (Shape{1, 1, 1, 3}));
}

TEST(Size2, ExplicitZeroStrideIsAnErrorNotTheDefault) {
  // A stride of 0 once stood for "kernel_size"; PyTorch rejects it, as ember now does.
  Tensor x = image(6, 6);
  EXPECT_TRUE(throws_with([&] { max_pool2d(x, 2, 0); }, {"max_pool2d", "stride (0, 0)", "positive"}));
  EXPECT_TRUE(throws_with([&] { avg_pool2d(x, 2, {0, 0}); }, {"avg_pool2d", "stride (0, 0)", "positive"}));
}

}  // namespace
}  // namespace ember
