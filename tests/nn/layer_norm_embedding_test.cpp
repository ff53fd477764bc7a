// nn::LayerNorm and nn::Embedding: values against hand computation,
// gradients, options and printing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

TEST(NnLayerNorm, NormalizesTrailingDimsThenScalesAndShifts) {
  auto ln = std::make_shared<nn::LayerNorm>(Shape{2, 3}, 1e-3);
  ln->to(DType::Float64);
  EXPECT_EQ(to_vector<double>(ln->weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(to_vector<double>(ln->bias), std::vector<double>(6, 0.0));
  Generator g(8);
  nn::init::normal_(ln->weight, 0, 1, &g);
  nn::init::normal_(ln->bias, 0, 1, &g);
  Tensor x = randn({4, 2, 3}, DType::Float64, kCPU, &g) * 2.0 + 1.0;
  std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>((*ln)(x)), w = to_vector<double>(ln->weight),
                      b = to_vector<double>(ln->bias);
  for (int r = 0; r < 4; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 6; ++c) mean += xv[r * 6 + c] / 6;
    for (int c = 0; c < 6; ++c) var += (xv[r * 6 + c] - mean) * (xv[r * 6 + c] - mean) / 6;
    for (int c = 0; c < 6; ++c) {
      EXPECT_NEAR(yv[r * 6 + c], (xv[r * 6 + c] - mean) / std::sqrt(var + 1e-3) * w[c] + b[c], 1e-12);
    }
  }
  Tensor leaf = testing::random_leaf({4, 3, 2}, 9);  // seen as (4, 2, 3)
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*ln)(in[0].transpose(1, 2)); },
                                 {leaf, ln->weight, ln->bias}));
  EXPECT_EQ(ln->str(), "LayerNorm(normalized_shape=[2, 3], eps=0.001, elementwise_affine=true)");
}

TEST(NnLayerNorm, OptionsDecideTheParameters) {
  EXPECT_EQ(nn::LayerNorm({4}, 1e-5, false).parameters().size(), 0u);
  auto no_bias = std::make_shared<nn::LayerNorm>(Shape{4}, 1e-5, true, false);
  EXPECT_EQ(no_bias->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(no_bias->str(), "LayerNorm(normalized_shape=[4], eps=1e-05, elementwise_affine=true, bias=false)");
  try {
    (*no_bias)(zeros({2, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[2, 5]"));
  }
}

TEST(NnEmbedding, LooksUpRowsAndAccumulatesGradients) {
  manual_seed(1);
  auto emb = std::make_shared<nn::Embedding>(5, 3);
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2, 1, 4}, {2, 3});
  Tensor y = (*emb)(idx);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  std::vector<float> w = to_vector<float>(emb->weight), yv = to_vector<float>(y);
  std::vector<int64_t> iv = to_vector<int64_t>(idx);
  for (int p = 0; p < 6; ++p) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(yv[p * 3 + d], w[iv[p] * 3 + d]);
  }
  y.sum().backward();
  std::vector<float> g = to_vector<float>(emb->weight.grad());
  std::vector<float> counts = {1, 1, 1, 0, 3};
  for (int r = 0; r < 5; ++r) {
    for (int d = 0; d < 3; ++d) EXPECT_EQ(g[r * 3 + d], counts[r]);
  }
  emb->to(DType::Float64);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList&) { return (*emb)(idx)*2.0; }, {emb->weight}));
  EXPECT_EQ(emb->str(), "Embedding(5, 3)");
}

TEST(NnEmbedding, NormalInitAndBadIndexError) {
  manual_seed(2);
  nn::Embedding big(400, 50);
  std::vector<float> v = to_vector<float>(big.weight);
  double mean = 0, sq = 0;
  for (float f : v) {
    mean += f;
    sq += double(f) * f;
  }
  mean /= double(v.size());
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / double(v.size()) - mean * mean), 1.0, 0.02);
  try {
    big(from_vector<int64_t>({3, 400}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("400"));
  }
}

}  // namespace
}  // namespace ember
