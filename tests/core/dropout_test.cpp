// dropout: keep rate, scaling, eval identity, mask reuse in backward, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/cuda_compare.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

TEST(Dropout, KeepsAboutOneMinusPAndScales) {
  Tensor x = ones({100000});
  Tensor y = dropout(x, 0.3);
  std::vector<float> v = to_vector<float>(y);
  int64_t kept = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::fabs(e - 1.0f / 0.7f) < 1e-6f) << e;
    kept += e != 0.0f;
  }
  EXPECT_NEAR(double(kept) / 100000.0, 0.7, 0.01);
  EXPECT_TRUE(dropout(x, 0.3, /*training=*/false).is_same(x));
}

TEST(Dropout, BackwardReusesTheForwardMask) {
  Tensor x = testing::random_leaf({50, 7});
  Generator g(5);
  Tensor y = dropout(x, 0.5, true, &g);
  y.backward(ones_like(y));
  std::vector<double> yv = to_vector<double>(y), xv = to_vector<double>(x), gv = to_vector<double>(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) {
    if (yv[i] == 0.0 && xv[i] != 0.0) EXPECT_EQ(gv[i], 0.0);
    else EXPECT_DOUBLE_EQ(gv[i], 2.0);
  }
}

TEST(Dropout, SameSeedSameMaskOnEveryDevice) {
  EMBER_REQUIRE_CUDA();
  Tensor x = randn({1025, 3});
  Generator g1(11), g2(11);
  Tensor cpu = dropout(x, 0.4, true, &g1);
  Tensor gpu = dropout(x.cuda(), 0.4, true, &g2);
  EXPECT_TRUE(testing::tensors_close(gpu, cpu));
}

TEST(Dropout, RejectsBadProbability) {
  try {
    dropout(ones({2}), 1.5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("between 0 and 1, but got 1.5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember
