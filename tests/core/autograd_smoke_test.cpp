// A first end-to-end check of ops and backward on CPU.
#include <gtest/gtest.h>

#include "ember/ember.h"

namespace ember {
namespace {

TEST(AutogradSmoke, MulAddSumBackward) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor b = from_vector<float>({10, 20, 30}, {3}).set_requires_grad();
  Tensor y = (a * b + 1.0f).sum();
  EXPECT_FLOAT_EQ(y.item<float>(), 10 + 40 + 90 + 40 + 100 + 180 + 6);
  y.backward();
  EXPECT_EQ(to_vector<float>(a.grad()), (std::vector<float>{10, 20, 30, 10, 20, 30}));
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
}

}  // namespace
}  // namespace ember

#include "support/gradcheck.h"

namespace ember {
namespace {

TEST(AutogradSmoke, GradcheckOnBroadcastMulAndTranspose) {
  Tensor a = testing::random_leaf({3, 4}, 1);
  Tensor b = testing::random_leaf({4}, 2);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return (in[0] * in[1]).tanh() + in[0].exp(); }, {a, b}));
  Tensor base = testing::random_leaf({4, 3}, 3);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return in[0].t() * 2.0 + in[1]; }, {base, b}));
}

}  // namespace
}  // namespace ember
