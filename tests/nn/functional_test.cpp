// nn::functional under PyTorch's signatures: embedding(input, weight) in
// torch.nn.functional's order (swapped arguments are an error that says
// so), and the conv and pool functions taking one value for both dims, with
// the stride left out meaning kernel_size, as the layers do.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

namespace F = nn::functional;
using ::testing::HasSubstr;

TEST(NnFunctional, EmbeddingTakesInputThenWeightAsPyTorch) {
  Tensor weight = arange(0, 12, 1, DType::Float64).view({4, 3}).set_requires_grad();
  Tensor input = from_vector<int64_t>({3, 0, 3}, {1, 3});
  Tensor y = F::embedding(input, weight);
  ASSERT_EQ(y.shape(), (Shape{1, 3, 3}));
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  EXPECT_TRUE(equal(y, embedding(weight, input)));  // ember::embedding is torch.embedding, table first
  y.sum().backward();
  EXPECT_EQ(to_vector<double>(weight.grad()), (std::vector<double>{1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2}));
}

TEST(NnFunctional, EmbeddingWithSwappedArgumentsSaysSwap) {
  Tensor weight = zeros({4, 3});
  Tensor input = from_vector<int64_t>({1, 2});
  std::string e = testing::error_of([&] { F::embedding(weight, input); });
  EXPECT_THAT(e, HasSubstr("nn::functional::embedding"));
  EXPECT_THAT(e, HasSubstr("[4, 3] float32"));
  EXPECT_THAT(e, HasSubstr("swap the arguments"));
}

TEST(NnFunctional, ConvAndPoolTakeOneValueForBothDims) {
  Tensor x = sin(arange(0, 64, 1, DType::Float64).view({1, 1, 8, 8}));
  Tensor w = ones({1, 1, 3, 3}, DType::Float64);
  EXPECT_TRUE(equal(F::conv2d(x, w, {}, {2, 2}, {1}), F::conv2d(x, w, {}, {2, 2}, {1, 1})));
  EXPECT_TRUE(equal(F::conv2d(x, w, {}, 2, 1), F::conv2d(x, w, {}, {2, 2}, {1, 1})));
  EXPECT_TRUE(equal(F::max_pool2d(x, {3, 3}, {2, 2}, {1}), F::max_pool2d(x, 3, 2, 1)));
  EXPECT_EQ(F::max_pool2d(x, {3, 3}, {2, 2}, {1}).shape(), (Shape{1, 1, 4, 4}));
  EXPECT_TRUE(equal(F::avg_pool2d(x, 2), F::avg_pool2d(x, {2, 2}, {2, 2}, 0)));
  EXPECT_EQ(F::adaptive_avg_pool2d(x, 3).shape(), (Shape{1, 1, 3, 3}));
}

TEST(NnFunctional, PoolLayersTakeABracedStride) {
  // std::optional<Size2> could not be initialized from {2, 2}.
  Tensor x = sin(arange(0, 49, 1, DType::Float64).view({1, 1, 7, 7}));
  nn::MaxPool2d braced({3, 3}, {2, 2}, {1});
  nn::MaxPool2d scalar(3, 2, 1);
  EXPECT_TRUE(equal(braced(x), scalar(x)));
  EXPECT_EQ(braced.padding, nn::Size2(1, 1));
  nn::AvgPool2d avg({2, 3}, {1, 2});
  EXPECT_EQ(avg.stride, nn::Size2(1, 2));
  EXPECT_EQ(nn::AvgPool2d(2, {}).stride, nn::Size2(2, 2));
}

}  // namespace
}  // namespace ember
