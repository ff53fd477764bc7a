// In-place ops (ember/core/ops/inplace.cpp): writes through views, version
// counters, the autograd rules (saved tensors modified in place, leaves,
// history rewiring), copy_ (broadcast, cast, overlap), fill_/zero_ and the
// expanded-destination error.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::random_leaf;
using testing::throws_with;

Tensor counting(const Shape& shape, DType dtype = DType::Float32) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return arange(0, n, 1, dtype).view(shape);
}

TEST(InPlace, ArithmeticOnViewsWritesThroughToTheBase) {
  Tensor base = counting({3, 4});                           // 0..11
  base.narrow(1, 1, 2).add_(100);                           // columns 1, 2
  base.t().select(0, 0).mul_(-1);                           // column 0
  base.slice(1, 1, 4, 2).sub_(from_vector<float>({1, 2}));  // columns 1, 3, broadcast over rows
  base[2].div_(2);                                          // row 2
  std::vector<float> want(12);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) {
      float v = float(r * 4 + c);
      if (c == 1 || c == 2) v += 100;
      if (c == 0) v *= -1;
      if (c == 1) v -= 1;
      if (c == 3) v -= 2;
      if (r == 2) v /= 2;
      want[size_t(r * 4 + c)] = v;
    }
  }
  EXPECT_EQ(to_vector<float>(base), want);
}

TEST(InPlace, CompoundOperatorsAndMixedDtypes) {
  Tensor x = from_vector<float>({1, 2, 3});
  x += from_vector<float>({1, 1, 1});
  x *= 2;
  x -= 1.5;
  x /= from_vector<double>({1, 2, 4});  // the written tensor keeps its dtype
  EXPECT_EQ(x.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{2.5, 2.25, 1.625}));
  x.add_(from_vector<float>({2, 2, 2}), 0.5);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{3.5, 3.25, 2.625}));
  Tensor h = from_vector<float>({1, 2}).to(DType::Float16);
  h.mul_(2.5);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<float>(h), (std::vector<float>{2.5, 5}));
  Tensor i = from_vector<int32_t>({1, 2});
  i.add_(from_vector<int64_t>({(int64_t(1) << 20), 3}));  // int64 result, castable to int32
  i.mul_(3);
  EXPECT_EQ(i.dtype(), DType::Int32);
  EXPECT_EQ(to_vector<int32_t>(i), (std::vector<int32_t>{3 * ((1 << 20) + 1), 15}));
}

TEST(InPlace, ResultTypeMustBeCastableToTheWrittenTensor) {
  Tensor i = from_vector<int32_t>({1, 2});
  EXPECT_TRUE(throws_with([&] { i.mul_(2.5); }, {"mul_", "float32", "int32"}));
  EXPECT_TRUE(throws_with([&] { i.div_(2); }, {"div_", "float32", "int32"}));
  EXPECT_TRUE(throws_with([&] { i.add_(from_vector<float>({1, 1})); }, {"add_", "float32", "int32"}));
  Tensor b = from_vector<bool>({true, false});
  EXPECT_TRUE(throws_with([&] { b.add_(from_vector<int32_t>({1, 1})); }, {"add_", "int32", "bool"}));
  EXPECT_TRUE(throws_with([&] { b.add_(1); }, {"add_", "int64", "bool"}));
  EXPECT_EQ(to_vector<int32_t>(i), (std::vector<int32_t>{1, 2}));  // untouched
}

TEST(InPlace, OperandMustBroadcastToTheWrittenShape) {
  Tensor x = zeros({3});
  EXPECT_TRUE(throws_with([&] { x.add_(zeros({2, 3})); }, {"add_", "[2, 3]", "[3]"}));
  EXPECT_TRUE(throws_with([&] { x.mul_(zeros({4})); }, {"mul_", "[4]", "[3]"}));
  // The same check on the autograd path (a non-leaf that requires grad).
  Tensor a = zeros({3}).set_requires_grad();
  Tensor y = a * 1.0;
  EXPECT_TRUE(throws_with([&] { y.add_(zeros({2, 3})); }, {"add_", "[2, 3]", "[3]"}));
  EXPECT_TRUE(throws_with([&] { x.copy_(zeros({2})); }, {"copy_", "[2]", "[3]"}));
  EXPECT_TRUE(throws_with([&] { x.copy_(zeros({2, 3})); }, {"copy_", "[2, 3]", "[3]"}));
}

TEST(InPlace, AliasedOperandsReadTheOldValues) {
  Tensor x = from_vector<float>({1, 2, 3, 4});
  x.add_(x);
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{2, 4, 6, 8}));
  // Shifted overlap: every element adds its left neighbour's old value.
  Tensor y = from_vector<float>({1, 2, 3, 4, 5});
  y.narrow(0, 1, 4).add_(y.narrow(0, 0, 4));
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{1, 3, 5, 7, 9}));
  Tensor m = counting({3, 3});
  m.mul_(m.t());  // m[i][j] * m[j][i]
  std::vector<float> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(float((i * 3 + j) * (j * 3 + i)));
  EXPECT_EQ(to_vector<float>(m), want);
}

// ---------------- version counter ----------------

TEST(InPlace, VersionCounterBumpsOnEveryWriteThroughAnyView) {
  Tensor x = zeros({2, 3});
  Tensor v = x.narrow(1, 0, 2);
  uint32_t v0 = x.version();
  x.add_(1);
  EXPECT_EQ(x.version(), v0 + 1);
  v.mul_(from_vector<float>({2, 3}));
  EXPECT_EQ(x.version(), v0 + 2);
  EXPECT_EQ(v.version(), x.version());  // views share the counter
  x.fill_(3);
  x.zero_();
  x.copy_(ones({3}));
  EXPECT_EQ(x.version(), v0 + 5);
  Tensor d = x.detach();
  d.sub_(1);
  EXPECT_EQ(x.version(), v0 + 6);  // detach shares it too
  Tensor y = x + 1;                // out of place: no bump
  Tensor c = x.clone();
  EXPECT_EQ(x.version(), v0 + 6);
  c.add_(1);
  EXPECT_EQ(x.version(), v0 + 6);  // a clone has its own
}

// ---------------- autograd ----------------

TEST(InPlace, ModifyingASavedTensorThenBackwardNamesTheNode) {
  Tensor a = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<float>({4, 5, 6}).set_requires_grad();
  Tensor bb = b * 1.0;  // a non-leaf that MulBackward below saves
  Tensor y = (a * bb).sum();
  bb.mul_(2);
  EXPECT_TRUE(throws_with([&] { y.backward(); },
                          {"MulBackward", "modified by an in-place operation", "[3]", "version 0", "version 1"}));

  // An op's saved output modified in place.
  Tensor x = from_vector<float>({0.5f, 1.5f}).set_requires_grad();
  Tensor e = x.exp();
  Tensor loss = e.sum();
  Tensor e2 = e * 1.0;
  e2.add_(1);  // fine: e2 is not saved by anything
  e.add_(1);   // ExpBackward saved e
  EXPECT_TRUE(throws_with([&] { loss.backward(); }, {"ExpBackward", "modified by an in-place operation"}));

  // A leaf changed under NoGradGuard (as an optimizer would) between forward and backward.
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  Tensor z = (w * w).sum();
  {
    NoGradGuard no_grad;
    w.sub_(0.1);
  }
  EXPECT_TRUE(throws_with([&] { z.backward(); }, {"MulBackward", "[2]", "float64"}));
}

TEST(InPlace, OnALeafThatRequiresGradIsAnError) {
  Tensor w = from_vector<float>({1, 2}).set_requires_grad();
  EXPECT_TRUE(throws_with([&] { w.add_(1); }, {"add_", "leaf", "requires grad", "[2]", "NoGradGuard"}));
  EXPECT_TRUE(throws_with([&] { w.mul_(from_vector<float>({1, 1})); }, {"mul_", "leaf", "[2]"}));
  EXPECT_TRUE(throws_with([&] { w.fill_(0); }, {"fill_", "leaf", "[2]"}));
  EXPECT_TRUE(throws_with([&] { w.copy_(zeros({2})); }, {"copy_", "leaf", "[2]"}));
  EXPECT_EQ(to_vector<float>(w), (std::vector<float>{1, 2}));
  {
    NoGradGuard no_grad;  // the optimizer's way
    w.sub_(from_vector<float>({0.5f, 0.5f}));
    w.mul_(2);
  }
  EXPECT_EQ(to_vector<float>(w), (std::vector<float>{1, 3}));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
}

TEST(InPlace, OnAViewOfATensorThatRequiresGradIsAnError) {
  Tensor a = zeros({2, 3}).set_requires_grad();
  Tensor x = a * 2.0;
  EXPECT_TRUE(throws_with([&] { x.narrow(1, 0, 2).add_(1); }, {"add_", "view", "[2, 2]", "clone"}));
  Tensor plain = zeros({2, 3});
  EXPECT_TRUE(throws_with([&] { plain[0].mul_(a[0]); }, {"mul_", "view", "[3]"}));
}

TEST(InPlace, OnANonLeafRewiresHistory) {
  Tensor a = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<double>({4, 5, 6}).set_requires_grad();
  Tensor x = a * 1.0;
  auto first = x.grad_fn();
  x.mul_(b);
  EXPECT_NE(x.grad_fn(), first);
  EXPECT_EQ(x.grad_fn()->name(), "MulBackward");
  EXPECT_EQ(to_vector<double>(x), (std::vector<double>{4, 10, 18}));
  (x * x).sum().backward();  // d/da (ab)^2 = 2ab^2, d/db = 2a^2b
  EXPECT_EQ(to_vector<double>(a.grad()), (std::vector<double>{32, 100, 216}));
  EXPECT_EQ(to_vector<double>(b.grad()), (std::vector<double>{8, 40, 108}));

  // The operand may be the tensor itself: its old history feeds the new one.
  Tensor c = from_vector<double>({1, 2}).set_requires_grad();
  Tensor z = c * c;
  z.add_(z);
  z.sum().backward();
  EXPECT_EQ(to_vector<double>(c.grad()), (std::vector<double>{4, 8}));

  // A tensor that did not require grad starts to when the operand does.
  Tensor buf = zeros({3}, DType::Float64);
  buf.add_(a, 2);
  EXPECT_TRUE(buf.requires_grad());
  EXPECT_FALSE(buf.is_leaf());
  buf.sum().backward();
  EXPECT_EQ(to_vector<double>(a.grad()), (std::vector<double>{34, 102, 218}));
}

TEST(InPlace, ChainsOfInPlaceOpsPassGradcheck) {
  Tensor a = random_leaf({3, 4}, 21);
  Tensor b = random_leaf({4}, 22);
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor x = in[0] * 1.0;
        x.mul_(in[1]);
        x.add_(in[0], -0.5);
        x.sub_(in[1].exp());
        x.div_(in[1] * in[1] + 1.0);
        x.mul_(3.0);
        x.add_(1.5);
        x.sub_(0.25);
        x.div_(-2.0);
        return x;
      },
      {a, b}));
  // copy_ from a tensor that requires grad (broadcast and dtype cast).
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor dst = zeros({2, 4}, DType::Float64);
        dst.copy_(in[0]);
        return dst * in[0];
      },
      {b}));
}

TEST(InPlace, CopyBackwardConvertsAndSumsBroadcastGradients) {
  Tensor src = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor dst = zeros({2, 3}, DType::Float64);
  dst.copy_(src);
  EXPECT_EQ(dst.grad_fn()->name(), "CopyBackward");
  Tensor w = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  (dst * w).sum().backward();
  EXPECT_EQ(src.grad().dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(src.grad()), (std::vector<float>{5, 7, 9}));
}

TEST(InPlace, OverwritingANonLeafWithConstantsEndsItsHistory) {
  Tensor a = ones({2}).set_requires_grad();
  Tensor x = a * 2.0;
  x.fill_(5);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{5, 5}));
  Tensor y = a * 2.0;
  y.copy_(zeros({2}));
  EXPECT_FALSE(y.requires_grad());
}

// ---------------- copy_, fill_, zero_ ----------------

TEST(InPlace, CopyBroadcastsAndCastsDtypes) {
  Tensor dst = zeros({2, 3});
  dst.copy_(from_vector<float>({1, 2, 3}));
  EXPECT_EQ(to_vector<float>(dst), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  dst.copy_(from_vector<float>({7, 8}, {2, 1}));
  EXPECT_EQ(to_vector<float>(dst), (std::vector<float>{7, 7, 7, 8, 8, 8}));
  dst.copy_(full({}, 4.0));
  EXPECT_EQ(to_vector<float>(dst), std::vector<float>(6, 4));

  Tensor f = from_vector<double>({-2.7, -0.5, 0, 0.9, 3.99, 1e9});
  Tensor i = zeros({6}, DType::Int32);
  i.copy_(f);  // truncation toward zero, as a C cast
  EXPECT_EQ(to_vector<int32_t>(i), (std::vector<int32_t>{-2, 0, 0, 0, 3, 1000000000}));
  Tensor b = zeros({6}, DType::Bool);
  b.copy_(f);
  EXPECT_EQ(to_vector<bool>(b), (std::vector<bool>{1, 1, 0, 1, 1, 1}));
  Tensor fb = zeros({2}, DType::Float32);
  fb.copy_(from_vector<bool>({true, false}));
  EXPECT_EQ(to_vector<float>(fb), (std::vector<float>{1, 0}));
  Tensor big = zeros({1}, DType::Float64);
  big.copy_(from_vector<int64_t>({(int64_t(1) << 53) - 1}));  // exact through double
  EXPECT_EQ(to_vector<double>(big)[0], double((int64_t(1) << 53) - 1));
  Tensor l = zeros({1}, DType::Int64);
  l.copy_(from_vector<int64_t>({(int64_t(1) << 62) + 3}));
  EXPECT_EQ(to_vector<int64_t>(l)[0], (int64_t(1) << 62) + 3);
  // float64 -> float16 rounds to nearest even (2049 is halfway between 2048 and 2050).
  Tensor h = zeros({3}, DType::Float16);
  h.copy_(from_vector<double>({2049, 2051, 1e6}));
  std::vector<double> hv = to_vector<double>(h);
  EXPECT_EQ(hv[0], 2048);
  EXPECT_EQ(hv[1], 2052);
  EXPECT_TRUE(std::isinf(hv[2]));
  Tensor bf = zeros({1}, DType::BFloat16);
  bf.copy_(from_vector<float>({1.0f + 1.0f / 128 + 1.0f / 512}));
  EXPECT_EQ(to_vector<float>(bf)[0], 1.0f + 1.0f / 128);
}

TEST(InPlace, CopyFromAnOverlappingViewOfItself) {
  Tensor x = counting({4, 4});
  std::vector<float> before = to_vector<float>(x);
  x.copy_(x.t());
  std::vector<float> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) want.push_back(before[size_t(j * 4 + i)]);
  EXPECT_EQ(to_vector<float>(x), want);
  Tensor y = counting({6});
  y.narrow(0, 1, 5).copy_(y.narrow(0, 0, 5));  // shift right by one
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  Tensor z = counting({6});
  z.narrow(0, 0, 5).copy_(z.narrow(0, 1, 5));  // shift left by one
  EXPECT_EQ(to_vector<float>(z), (std::vector<float>{1, 2, 3, 4, 5, 5}));
  Tensor s = counting({3});
  s.copy_(s);  // the identical view: a no-op
  EXPECT_EQ(to_vector<float>(s), (std::vector<float>{0, 1, 2}));
}

TEST(InPlace, CopyIntoANonContiguousDestination) {
  Tensor base = zeros({3, 4});
  base.t().copy_(counting({4, 3}));
  std::vector<float> want;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) want.push_back(float(c * 3 + r));
  EXPECT_EQ(to_vector<float>(base), want);
  Tensor b2 = zeros({2, 6});
  b2.slice(1, 0, 6, 2).copy_(from_vector<float>({1, 2, 3}));
  EXPECT_EQ(to_vector<float>(b2), (std::vector<float>{1, 0, 2, 0, 3, 0, 1, 0, 2, 0, 3, 0}));
}

TEST(InPlace, FillAndZeroOnAllDtypesAndViews) {
  Tensor f = zeros({2, 3});
  f.select(1, 1).fill_(2.5);
  EXPECT_EQ(to_vector<float>(f), (std::vector<float>{0, 2.5, 0, 0, 2.5, 0}));
  f.t()[2].fill_(-1);
  EXPECT_EQ(to_vector<float>(f), (std::vector<float>{0, 2.5, -1, 0, 2.5, -1}));
  f.zero_();
  EXPECT_EQ(to_vector<float>(f), std::vector<float>(6, 0));
  Tensor i = zeros({3}, DType::Int64);
  i.fill_((int64_t(1) << 62) + 1);
  EXPECT_EQ(to_vector<int64_t>(i), std::vector<int64_t>(3, (int64_t(1) << 62) + 1));
  Tensor b = zeros({2}, DType::Bool);
  b.fill_(true);
  EXPECT_EQ(to_vector<bool>(b), (std::vector<bool>{1, 1}));
  Tensor h = zeros({2}, DType::Float16);
  h.fill_(0.1);
  EXPECT_EQ(to_vector<float>(h)[1], float(Half(0.1f)));
  Tensor bf = ones({2}, DType::BFloat16);
  bf.zero_();
  EXPECT_EQ(to_vector<float>(bf), (std::vector<float>{0, 0}));
}

TEST(InPlace, WritingIntoAnExpandedTensorIsAnError) {
  Tensor x = zeros({3, 1});
  Tensor e = x.expand({3, 4});
  EXPECT_TRUE(throws_with([&] { e.add_(1); }, {"add_", "[3, 4]", "expand", "clone"}));
  EXPECT_TRUE(throws_with([&] { e.mul_(ones({3, 4})); }, {"mul_", "[3, 4]", "expand"}));
  EXPECT_TRUE(throws_with([&] { e.fill_(2); }, {"fill_", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { e.copy_(ones({3, 4})); }, {"copy_", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { e.zero_(); }, {"fill_", "[3, 4]"}));
  EXPECT_EQ(to_vector<float>(x), std::vector<float>(3, 0));
  // A size-1 dim with stride 0 is harmless.
  Tensor one = zeros({1}).expand({1, 1});
  one.add_(1);
  EXPECT_EQ(to_vector<float>(one)[0], 1.0f);
}

}  // namespace
}  // namespace ember
