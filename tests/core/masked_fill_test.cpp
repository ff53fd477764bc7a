// masked_fill and masked_fill_ (ember/core/ops/masked_fill.cpp,
// ember/core/ops/inplace.cpp): PyTorch's values, shapes and dtype rules
// (broadcasting both ways out of place, only into x in place; the value cast
// to x's dtype, never a promotion), Scalar and 0-dim tensor values, every
// dtype, strided inputs, float64 gradients of x and of the value, in-place
// autograd, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::throws_with;

const double kInf = std::numeric_limits<double>::infinity();

Tensor row_mask() { return from_vector<bool>({true, false, true}); }

TEST(MaskedFill, MatchesPyTorch) {
  Tensor x = arange(6, DType::Float32).reshape({2, 3});
  // x.masked_fill(torch.tensor([True, False, True]), 9)
  EXPECT_EQ(to_vector<float>(x.masked_fill(row_mask(), 9)), (std::vector<float>{9, 1, 9, 9, 4, 9}));
  // torch.arange(3.).masked_fill(mask (2, 3), -1.): x broadcasts up to the mask.
  Tensor m2 = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  Tensor y = masked_fill(arange(3, DType::Float32), m2, -1.0);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{-1, 1, -1, 0, 1, -1}));
  // A 0-dim mask fills everything or nothing.
  EXPECT_EQ(to_vector<float>(x.masked_fill(full({}, true, DType::Bool), 5)), std::vector<float>(6, 5));
  EXPECT_TRUE(equal(x.masked_fill(full({}, false, DType::Bool), 5), x));
}

TEST(MaskedFill, TheValueTakesXsDtype) {
  Tensor xi = arange(6, DType::Int64).reshape({2, 3});
  // int64 x with a float value truncates toward zero, as PyTorch.
  Tensor a = xi.masked_fill(row_mask(), 1.7), b = xi.masked_fill(row_mask(), -1.7);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(a), (std::vector<int64_t>{1, 1, 1, 1, 4, 1}));
  EXPECT_EQ(to_vector<int64_t>(b), (std::vector<int64_t>{-1, 1, -1, -1, 4, -1}));
  EXPECT_EQ(to_vector<int64_t>(xi.masked_fill(row_mask(), full({}, 2.5, DType::Float64))),
            (std::vector<int64_t>{2, 1, 2, 2, 4, 2}));
  // bool x: 2 is true.
  EXPECT_EQ(to_vector<bool>(zeros({3}, DType::Bool).masked_fill(row_mask(), 2)),
            (std::vector<bool>{true, false, true}));
  // A float64 value into a float16 tensor stays float16 (no promotion).
  EXPECT_EQ(zeros({3}, DType::Float16).masked_fill(row_mask(), full({}, 3.0, DType::Float64)).dtype(), DType::Float16);
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    Tensor x = arange(6, DType::Int64).reshape({2, 3}).to(dt);
    Tensor y = x.masked_fill(row_mask(), 3);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(to_vector<double>(y), (std::vector<double>{3, 1, 3, 3, 4, 3})) << dtype_name(dt);
  }
}

TEST(MaskedFill, ValuesADtypeCannotHoldAreErrors) {
  EXPECT_TRUE(throws_with([] { zeros({3}, DType::Int64).masked_fill(row_mask(), kInf); },
                          {"masked_fill", "inf", "int64", "without overflow"}));
  EXPECT_TRUE(throws_with([] { zeros({3}, DType::Int32).masked_fill(row_mask(), int64_t(1) << 40); },
                          {"masked_fill", "int32", "without overflow"}));
  EXPECT_TRUE(throws_with([] { zeros({3}, DType::Float16).masked_fill(row_mask(), 1e6); },
                          {"masked_fill", "float16", "without overflow"}));
  Tensor h = zeros({3}, DType::Float16);
  EXPECT_TRUE(throws_with([&] { h.masked_fill_(row_mask(), 70000.0); }, {"masked_fill_", "float16"}));
  // Infinities fit every floating dtype.
  EXPECT_TRUE(std::isinf(to_vector<double>(h.masked_fill(row_mask(), -kInf))[0]));
}

TEST(MaskedFill, StridedAndBroadcastInputs) {
  Tensor base = arange(4 * 6, DType::Float64).reshape({4, 6});
  Tensor x = base.t();  // (6, 4), non-contiguous
  Tensor mask = from_vector<bool>({true, false, false, true}).expand({6, 4});
  std::vector<double> got = to_vector<double>(x.masked_fill(mask, -7.0)), want = to_vector<double>(x);
  for (size_t k = 0; k < want.size(); ++k) {
    if (k % 4 == 0 || k % 4 == 3) want[k] = -7;
  }
  EXPECT_EQ(got, want);
  Tensor narrow_mask = from_vector<bool>({true, false, true, false, true, false}, {6, 1}).expand({6, 4});
  EXPECT_EQ(masked_fill(x.narrow(1, 1, 2), narrow_mask.narrow(1, 0, 2), 0.0).shape(), (Shape{6, 2}));
}

TEST(MaskedFill, InPlaceBroadcastsTheMaskIntoX) {
  Tensor x = arange(6, DType::Float32).reshape({2, 3});
  uint32_t v0 = x.version();
  Tensor& same = x.masked_fill_(row_mask(), full({}, -2.0));
  EXPECT_TRUE(same.is_same(x));
  EXPECT_GT(x.version(), v0);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{-2, 1, -2, -2, 4, -2}));
  // Through a view: the base sees it.
  Tensor base = zeros({3, 3});
  base.t().masked_fill_(row_mask(), 1);
  EXPECT_EQ(to_vector<float>(base), (std::vector<float>{1, 1, 1, 0, 0, 0, 1, 1, 1}));
  // A mask aliasing a bool x.
  Tensor b = from_vector<bool>({true, false, true, true});
  b.masked_fill_(b, false);
  EXPECT_EQ(to_vector<bool>(b), std::vector<bool>(4, false));
  // The out-of-place form broadcasts x up; the in-place one cannot.
  Tensor m2 = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  Tensor small = arange(3, DType::Float32);
  EXPECT_TRUE(throws_with([&] { small.masked_fill_(m2, -1); },
                          {"masked_fill_", "mask of shape [2, 3]", "in-place tensor of shape [3]"}));
}

TEST(MaskedFill, GradientsOfXAndOfTheValue) {
  Tensor x = testing::random_leaf({2, 3}, 5);
  Tensor v = full({}, 0.5, DType::Float64).set_requires_grad();
  Tensor mask = row_mask();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return masked_fill(in[0], mask, in[1]); }, {x, v}));
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        return masked_fill(in[0].t(), mask.expand({2, 3}).t(), 1.5);
      },
      {x}));
  // x broadcast up by the mask: x's gradient sums over the broadcast rows.
  Tensor row = testing::random_leaf({3}, 6);
  Tensor m2 = from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return masked_fill(in[0], m2, in[1]); }, {row, v}));
  // PyTorch: x.grad is zero where masked, value.grad the sum over the masked
  // positions, in the value's dtype.
  Tensor v32 = full({}, 2.0, DType::Float32).set_requires_grad();
  Tensor y = masked_fill(x, mask, v32);
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_EQ(y.grad_fn()->name(), "MaskedFillBackward");
  y.backward(arange(6, DType::Float64).reshape({2, 3}));
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 1, 0, 0, 4, 0}));
  EXPECT_EQ(v32.grad().dtype(), DType::Float32);
  EXPECT_EQ(v32.grad().item<double>(), 0 + 2 + 3 + 5);
}

TEST(MaskedFill, InPlaceRecordsHistory) {
  Tensor x = testing::random_leaf({2, 3}, 8);
  Tensor v = full({}, 0.25, DType::Float64).set_requires_grad();
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        Tensor y = in[0] * 2.0;
        y.masked_fill_(row_mask(), in[1]);
        return y;
      },
      {x, v}));
  // A leaf that requires grad cannot be filled in place, as in PyTorch.
  EXPECT_TRUE(throws_with([&] { x.masked_fill_(row_mask(), 0); }, {"masked_fill_", "leaf"}));
  NoGradGuard no_grad;
  Tensor copy = x.detach().clone();
  copy.masked_fill_(row_mask(), 0);
  EXPECT_EQ(to_vector<double>(copy)[0], 0);
}

TEST(MaskedFill, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_TRUE(throws_with(
      [&] {
        x.masked_fill(from_vector<int32_t>({1, 0, 1}), 1);
      },
      {"masked_fill", "bool mask", "[3] int32", "to(DType::Bool)"}));
  EXPECT_TRUE(throws_with(
      [&] {
        x.masked_fill_(from_vector<int64_t>({1, 0, 1}), 1);
      },
      {"masked_fill_", "bool mask", "[3] int64"}));
  EXPECT_TRUE(throws_with(
      [&] {
        x.masked_fill(from_vector<bool>({true, false}), 1);
      },
      {"masked_fill", "[2, 3]", "[2]", "cannot be broadcast"}));
  EXPECT_TRUE(throws_with([&] { x.masked_fill(row_mask(), from_vector<float>({1})); },
                          {"masked_fill", "0-dimensional value tensor", "[1] float32", "Scalar"}));
  EXPECT_TRUE(throws_with(
      [&] {
        x.masked_fill_(row_mask(), zeros({2, 3}));
      },
      {"masked_fill_", "0-dimensional value tensor", "[2, 3] float32"}));
}

}  // namespace
}  // namespace ember
