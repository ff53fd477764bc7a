// cumsum on CPU: values against torch.cumsum and a naive float64 loop over
// every dim and layout, result dtypes, float16 accumulation, 0-dim and
// empty tensors; gradients by finite differences (first and second order);
// error messages.
#include <gtest/gtest.h>

#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// Running sums of x along dim, in float64, on x's logical order.
std::vector<double> naive_cumsum(const Tensor& x, int64_t dim) {
  std::vector<double> v = to_vector<double>(x);
  int64_t d = (dim + x.dim()) % x.dim(), outer = 1, inner = 1, size = x.size(d);
  for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 1; k < size; ++k)
        v[size_t((o * size + k) * inner + i)] += v[size_t((o * size + k - 1) * inner + i)];
    }
  }
  return v;
}

TEST(Cumsum, MatchesTorch) {
  // torch.cumsum(torch.tensor([[1., 2., 3.], [4., 5., 6.]]), 0) and 1.
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(to_vector<float>(cumsum(x, 0)), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(to_vector<float>(cumsum(x, -1)), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(to_vector<float>(x.cumsum(1)), (std::vector<float>{1, 3, 6, 4, 9, 15}));
}

TEST(Cumsum, EveryDimAndLayoutMatchesNaiveLoop) {
  Generator g(3);
  Tensor base = randn({4, 5, 6}, DType::Float64, kCPU, &g);
  for (const Tensor& x : {base, base.transpose(0, 2), base.narrow(1, 1, 3), base.permute({1, 2, 0})}) {
    for (int64_t d = -3; d < 3; ++d) {
      std::vector<double> got = to_vector<double>(cumsum(x, d)), want = naive_cumsum(x, d);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "dim " << d << " at " << i;
    }
  }
}

TEST(Cumsum, ResultDtypes) {
  Tensor i32 = from_vector<int32_t>({1, 2, 3});
  EXPECT_EQ(cumsum(i32, 0).dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(cumsum(i32, 0)), (std::vector<int64_t>{1, 3, 6}));
  Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ(cumsum(b, 0).dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(cumsum(b, 0)), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(cumsum(i32, 0, DType::Float64).dtype(), DType::Float64);
  EXPECT_EQ(cumsum(i32, 0, DType::Int32).dtype(), DType::Int32);
  Tensor f = from_vector<float>({0.5f, 1.25f});
  EXPECT_EQ(cumsum(f, 0).dtype(), DType::Float32);
  EXPECT_EQ(to_vector<double>(cumsum(f, 0, DType::Float64)), (std::vector<double>{0.5, 1.75}));
  EXPECT_EQ(cumsum(f.to(DType::BFloat16), 0).dtype(), DType::BFloat16);
}

TEST(Cumsum, HalfTypesAccumulateInFloat32) {
  // 3000 is a float16 number, but a float16 running sum of ones stops at
  // 2048 (2048 + 1 rounds back to 2048).
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor y = cumsum(ones({3000}, dt), 0);
    std::vector<float> v = to_vector<float>(y);
    EXPECT_EQ(v.back(), dt == DType::Float16 ? 3000.0f : 3008.0f) << dtype_name(dt);
  }
}

TEST(Cumsum, ZeroDimAndEmpty) {
  Tensor s = full({}, 2.5);
  EXPECT_EQ(cumsum(s, 0).dim(), 0);
  EXPECT_EQ(cumsum(s, -1).item<float>(), 2.5f);
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(cumsum(zeros({3, 0}), 1).shape(), (Shape{3, 0}));
}

TEST(Cumsum, GradcheckEveryDimAndView) {
  Tensor leaf = testing::random_leaf({3, 4, 5});
  for (int64_t d = 0; d < 3; ++d) {
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return cumsum(in[0], d); }, {leaf})) << "dim " << d;
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return cumsum(in[0].transpose(0, 2), d); }, {leaf}))
        << "transposed, dim " << d;
  }
}

TEST(Cumsum, GradientIsReverseRunningSum) {
  Tensor x = from_vector<double>({1, 2, 3, 4}).set_requires_grad();
  cumsum(x, 0).backward(from_vector<double>({1, 10, 100, 1000}));
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{1111, 1110, 1100, 1000}));
  // A float32 input summed in float64 gets a float32 gradient.
  Tensor f = from_vector<float>({1, 2}).set_requires_grad();
  cumsum(f, 0, DType::Float64).sum().backward();
  EXPECT_EQ(f.grad().dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(f.grad()), (std::vector<float>{2, 1}));
}

TEST(Cumsum, SecondOrderGradcheck) {
  Tensor leaf = testing::random_leaf({6});
  Tensor v = testing::random_leaf({6}, 11).detach();
  // d/dx of sum(v * dL/dx) where L = sum(cumsum(x)^2): exercises the
  // backward's own backward (the forward running sum).
  EXPECT_TRUE(testing::gradcheck(
      [v](const TensorList& in) {
        Tensor y = cumsum(in[0], 0);
        Tensor gx = autograd::grad({(y * y).sum()}, {in[0]}, {}, true, true)[0];
        return gx * v;
      },
      {leaf}));
}

TEST(Cumsum, Errors) {
  EXPECT_TRUE(throws_with([] { cumsum(ones({2, 3}), 2); }, {"cumsum", "dim 2", "[2, 3]"}));
  EXPECT_TRUE(throws_with([] { cumsum(Tensor(), 0); }, {"cumsum", "undefined"}));
}

}  // namespace
}  // namespace ember
