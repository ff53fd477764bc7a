// layer_norm: values against a float64 reference, gradients, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/gradcheck.h"

namespace ember {
namespace {

TEST(LayerNorm, MatchesTwoPassReferenceInDouble) {
  Generator g(3);
  Tensor x = randn({4, 3, 37}, DType::Float64, kCPU, &g) * 3.0 + 1.5;
  Tensor w = randn({37}, DType::Float64, kCPU, &g), b = randn({37}, DType::Float64, kCPU, &g);
  Tensor y = layer_norm(x, {37}, w, b, 1e-5);
  std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>(y), wv = to_vector<double>(w),
                      bv = to_vector<double>(b);
  for (int64_t r = 0; r < 12; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < 37; ++c) mean += xv[r * 37 + c];
    mean /= 37;
    for (int64_t c = 0; c < 37; ++c) var += (xv[r * 37 + c] - mean) * (xv[r * 37 + c] - mean);
    var /= 37;
    for (int64_t c = 0; c < 37; ++c) {
      double expect = (xv[r * 37 + c] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
      ASSERT_NEAR(yv[r * 37 + c], expect, 1e-12) << r << "," << c;
    }
  }
}

TEST(LayerNorm, Float32AndHalfAgreeWithDouble) {
  Generator g(4);
  Tensor x = randn({5, 64}, DType::Float64, kCPU, &g);
  Tensor ref = layer_norm(x, {64});
  EXPECT_TRUE(allclose(layer_norm(x.to(DType::Float32), {64}).to(DType::Float64), ref, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(layer_norm(x.to(DType::BFloat16), {64}).to(DType::Float64), ref, 2e-2, 2e-2));
}

TEST(LayerNorm, GradcheckWithAndWithoutAffine) {
  Tensor x = testing::random_leaf({3, 2, 5}, 1), w = testing::random_leaf({2, 5}, 2),
         b = testing::random_leaf({2, 5}, 3);
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return layer_norm(in[0], {2, 5}, in[1], in[2]);
      },
      {x, w, b}));
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return layer_norm(in[0], {5}); }, {x}));
  Tensor xt = testing::random_leaf({5, 4}, 4);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return layer_norm(in[0].t(), {5}); }, {xt}));
}

TEST(LayerNorm, ErrorsNameShapes) {
  Tensor x = zeros({2, 3});
  try {
    layer_norm(x, {4});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  try {
    layer_norm(x, {3}, ones({4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight has shape [4]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember
