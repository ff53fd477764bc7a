// Defaults of core ops that PyTorch users leave out (docs/pytorch_differences.md):
// clamp's min and max (None), dropout's p (0.5), batch_norm's weight, bias
// (None) and training (False).
#include <gtest/gtest.h>

#include <optional>

#include "ember/ember.h"

namespace ember {
namespace {

TEST(PyTorchDefaults, ClampTakesMinOrMaxAlone) {
  Tensor x = from_vector<double>({-2, -0.5, 0.5, 3});
  EXPECT_EQ(to_vector<double>(clamp(x, 0)), (std::vector<double>{0, 0, 0.5, 3}));
  EXPECT_EQ(to_vector<double>(clamp(x, std::nullopt, 1)), (std::vector<double>{-2, -0.5, 0.5, 1}));
}

TEST(PyTorchDefaults, DropoutPIsOneHalf) {
  Tensor x = ones({1000}, DType::Float64);
  Generator a(7), b(7);
  Tensor y = dropout(x, 0.5, true, &a);
  EXPECT_TRUE(equal(dropout(x, 0.5, true, &b), y));
  Generator c(7);
  Tensor d = nn::functional::dropout(x, 0.5, true, &c);
  EXPECT_TRUE(equal(d, y));
  std::vector<double> v = to_vector<double>(dropout(x));
  for (double e : v) EXPECT_TRUE(e == 0.0 || e == 2.0) << e;  // scaled by 1 / (1 - 0.5)
}

TEST(PyTorchDefaults, BatchNormWithoutWeightBiasOrTrainingUsesRunningStats) {
  Tensor x = arange(0, 24, 1, DType::Float64).view({2, 3, 2, 2});
  Tensor mean = from_vector<double>({1, 2, 3}), var = from_vector<double>({4, 1, 0.25});
  Tensor y = batch_norm(x, mean, var);
  EXPECT_TRUE(allclose(y, batch_norm(x, mean, var, {}, {}, false), 0, 0));
  Tensor expected = (x - mean.view({1, 3, 1, 1})) / sqrt(var.view({1, 3, 1, 1}) + 1e-5);
  EXPECT_TRUE(allclose(y, expected, 1e-12, 1e-12));
  EXPECT_EQ(to_vector<double>(mean), (std::vector<double>{1, 2, 3}));  // eval: running stats untouched
}

}  // namespace
}  // namespace ember
