// Views (ember/core/tensor.cpp): which element of the base each view reads, that a
// write through a view reaches the base, when reshape copies, the errors of
// bad shapes and dims, and the gradients of every view op.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// A float32 tensor holding 1, 2, ..., numel(shape): every element is nonzero
// and distinct, so a negation through a view shows which ones it reached.
Tensor counting(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return arange(1, n + 1, 1, DType::Float32).view(shape);
}

// Calls f for every multi-index of shape, in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Shape idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// v must read base element index(i) at view index i, share base's storage,
// and a write through v must change exactly those base elements.
void expect_view_of(const Tensor& base, Tensor v, const Shape& expected_shape,
                    const std::function<int64_t(const Shape&)>& index) {
  ASSERT_EQ(v.shape(), expected_shape);
  EXPECT_EQ(v.storage(), base.storage());
  std::vector<float> b = to_vector<float>(base), got = to_vector<float>(v);
  std::vector<float> want;
  std::set<int64_t> touched;
  for_each_index(v.shape(), [&](const Shape& i) {
    want.push_back(b[size_t(index(i))]);
    touched.insert(index(i));
  });
  EXPECT_EQ(got, want);
  v.mul_(-1.0f);
  std::vector<float> after = to_vector<float>(base);
  for (size_t k = 0; k < b.size(); ++k) {
    float expect = touched.count(int64_t(k)) ? -b[k] : b[k];
    EXPECT_EQ(after[k], expect) << "base element " << k;
  }
}

TEST(TensorView, ViewAndReshapeOfContiguousShareStorage) {
  Tensor base = counting({2, 3, 4});
  expect_view_of(base, base.view({4, 6}), {4, 6}, [](const Shape& i) { return i[0] * 6 + i[1]; });
  expect_view_of(base, base.view({-1, 3}), {8, 3}, [](const Shape& i) { return i[0] * 3 + i[1]; });
  expect_view_of(base, base.reshape({24}), {24}, [](const Shape& i) { return i[0]; });
  expect_view_of(base, base.flatten(1), {2, 12}, [](const Shape& i) { return i[0] * 12 + i[1]; });
  expect_view_of(base, base.flatten(), {24}, [](const Shape& i) { return i[0]; });
  expect_view_of(base, base.unflatten(2, {2, -1}), {2, 3, 2, 2},
                 [](const Shape& i) { return i[0] * 12 + i[1] * 4 + i[2] * 2 + i[3]; });
}

TEST(TensorView, TransposePermuteShareStorage) {
  Tensor base = counting({2, 3, 4});
  expect_view_of(base, base.transpose(0, 2), {4, 3, 2}, [](const Shape& i) { return i[2] * 12 + i[1] * 4 + i[0]; });
  expect_view_of(base, base.transpose(-1, -2), {2, 4, 3}, [](const Shape& i) { return i[0] * 12 + i[2] * 4 + i[1]; });
  // out[i][j][k] = base[j][k][i]
  expect_view_of(base, base.permute({2, 0, 1}), {4, 2, 3}, [](const Shape& i) { return i[1] * 12 + i[2] * 4 + i[0]; });
  Tensor m = counting({3, 5});
  expect_view_of(m, m.t(), {5, 3}, [](const Shape& i) { return i[1] * 5 + i[0]; });
  EXPECT_FALSE(m.t().is_contiguous());
  EXPECT_TRUE(m.t().t().is_contiguous());
}

TEST(TensorView, NarrowSliceSelectShareStorage) {
  Tensor base = counting({2, 3, 4});
  expect_view_of(base, base.narrow(1, 1, 2), {2, 2, 4},
                 [](const Shape& i) { return i[0] * 12 + (i[1] + 1) * 4 + i[2]; });
  expect_view_of(base, base.narrow(-1, -3, 2), {2, 3, 2},
                 [](const Shape& i) { return i[0] * 12 + i[1] * 4 + i[2] + 1; });
  expect_view_of(base, base.slice(2, 1, 4, 2), {2, 3, 2},
                 [](const Shape& i) { return i[0] * 12 + i[1] * 4 + 1 + 2 * i[2]; });
  expect_view_of(base, base.slice(2, 0, 4, 3), {2, 3, 2},
                 [](const Shape& i) { return i[0] * 12 + i[1] * 4 + 3 * i[2]; });
  expect_view_of(base, base.slice(0, -1, 100), {1, 3, 4}, [](const Shape& i) { return 12 + i[1] * 4 + i[2]; });
  expect_view_of(base, base.select(1, -1), {2, 4}, [](const Shape& i) { return i[0] * 12 + 8 + i[1]; });
  expect_view_of(base, base[1], {3, 4}, [](const Shape& i) { return 12 + i[0] * 4 + i[1]; });
  // A view of a view: the offsets and strides compose.
  expect_view_of(base, base.transpose(0, 2).narrow(0, 1, 2).select(2, 1), {2, 3},
                 [](const Shape& i) { return 12 + i[1] * 4 + (i[0] + 1); });
  EXPECT_EQ(base.slice(1, 2, 1).numel(), 0);  // an empty slice, as in PyTorch
}

TEST(TensorView, SqueezeUnsqueezeShareStorage) {
  Tensor base = counting({2, 1, 3});
  expect_view_of(base, base.squeeze(), {2, 3}, [](const Shape& i) { return i[0] * 3 + i[1]; });
  expect_view_of(base, base.squeeze(1), {2, 3}, [](const Shape& i) { return i[0] * 3 + i[1]; });
  EXPECT_EQ(base.squeeze(0).shape(), (Shape{2, 1, 3}));  // not size 1: unchanged
  expect_view_of(base, base.unsqueeze(0), {1, 2, 1, 3}, [](const Shape& i) { return i[1] * 3 + i[3]; });
  expect_view_of(base, base.unsqueeze(-1), {2, 1, 3, 1}, [](const Shape& i) { return i[0] * 3 + i[2]; });
  // unsqueeze of a transposed tensor keeps it a valid strided view.
  Tensor m = counting({3, 4});
  expect_view_of(m, m.t().unsqueeze(1), {4, 1, 3}, [](const Shape& i) { return i[2] * 4 + i[0]; });
}

TEST(TensorView, ExpandReadsTheBaseWithStrideZero) {
  Tensor base = counting({3, 1});
  Tensor e = base.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.storage(), base.storage());
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  std::vector<float> want;
  for_each_index({2, 3, 4}, [&](const Shape& i) { want.push_back(float(i[1] + 1)); });
  EXPECT_EQ(to_vector<float>(e), want);
  base.select(0, 1).fill_(50.0f);  // seen through every expanded copy
  EXPECT_EQ(to_vector<float>(e.select(1, 1)), std::vector<float>(8, 50.0f));
  EXPECT_EQ(base.expand({-1, 5}).shape(), (Shape{3, 5}));
  EXPECT_EQ(counting({}).expand({2, 2}).shape(), (Shape{2, 2}));
}

TEST(TensorView, DetachSharesStorageWithoutHistory) {
  Tensor x = counting({2, 3}).detach().set_requires_grad();
  Tensor y = x * 2.0f;
  Tensor d = y.detach();
  EXPECT_EQ(d.storage(), y.storage());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_TRUE(d.is_leaf());
  d.fill_(7.0f);
  EXPECT_EQ(to_vector<float>(y), std::vector<float>(6, 7.0f));
  EXPECT_NE(y.grad_fn(), nullptr);  // y keeps its own history
}

TEST(TensorView, ReshapeCopiesOnlyWhenStridesForbidAView) {
  Tensor base = counting({3, 4});
  Tensor t = base.t();  // [4, 3], strides [1, 4]
  Tensor r = t.reshape({12});
  EXPECT_NE(r.storage(), base.storage());
  std::vector<float> want;
  for_each_index({4, 3}, [&](const Shape& i) { want.push_back(float(i[1] * 4 + i[0] + 1)); });
  EXPECT_EQ(to_vector<float>(r), want);
  r.fill_(0.0f);  // a copy: the base is untouched
  EXPECT_EQ(to_vector<float>(base)[0], 1.0f);
  // Splitting a dim of a transposed tensor needs no copy.
  EXPECT_EQ(t.reshape({2, 2, 3}).storage(), base.storage());
  EXPECT_NE(t.flatten().storage(), base.storage());
  // A narrowed (non-contiguous) tensor whose rows stay dense views fine.
  Tensor n = counting({4, 6}).narrow(1, 0, 3);
  EXPECT_EQ(n.reshape({4, 3, 1}).storage(), n.storage());
  EXPECT_NE(n.reshape({12}).storage(), n.storage());
  // contiguous() is the identity on a contiguous tensor, a copy otherwise.
  EXPECT_TRUE(base.contiguous().is_same(base));
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), base.storage());
  EXPECT_EQ(to_vector<float>(c), want);
}

TEST(TensorView, ViewOfIncompatibleLayoutNamesShapesAndSuggestsReshape) {
  Tensor t = counting({3, 4}).t();
  EXPECT_TRUE(throws_with([&] { t.view({12}); }, {"view", "[12]", "[4, 3]", "[1, 4]", "reshape"}));
  EXPECT_TRUE(throws_with([&] { counting({2, 3, 4}).view({5, 5}); }, {"view", "[5, 5]", "[2, 3, 4]", "24"}));
  EXPECT_TRUE(throws_with([&] { counting({2, 3}).view({-1, -1}); }, {"view", "-1", "[-1, -1]"}));
  EXPECT_TRUE(throws_with([&] { counting({2, 3}).view({4, -1}); }, {"view", "[4, -1]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { counting({2, 3}).reshape({7}); }, {"reshape", "[7]", "[2, 3]"}));
}

TEST(TensorView, OutOfRangeDimsAndIndicesNameTheShape) {
  Tensor x = counting({2, 3, 4});
  EXPECT_TRUE(throws_with([&] { x.narrow(1, 2, 2); }, {"narrow", "[2, 3, 4]", "size 3"}));
  EXPECT_TRUE(throws_with([&] { x.narrow(1, -4, 1); }, {"narrow", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.narrow(3, 0, 1); }, {"narrow", "dim 3", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.select(0, 2); }, {"select", "index 2", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.select(2, -5); }, {"select", "index -5", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.transpose(0, 3); }, {"transpose", "dim 3", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.permute({0, 1}); }, {"permute", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.permute({0, 1, 1}); }, {"permute", "repeats", "[0, 1, 1]"}));
  EXPECT_TRUE(throws_with([&] { x.squeeze(-4); }, {"squeeze", "dim -4", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.unsqueeze(4); }, {"unsqueeze", "dim 4"}));
  EXPECT_TRUE(throws_with([&] { x.size(3); }, {"dim 3", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.t(); }, {"t:", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([&] { x.flatten(2, 1); }, {"flatten", "start_dim 2", "end_dim 1"}));
  EXPECT_TRUE(throws_with([&] { x.unflatten(1, {2, 2}); }, {"unflatten", "[2, 2]"}));
  EXPECT_TRUE(throws_with([&] { x.slice(1, 0, 3, 0); }, {"slice", "step"}));
  EXPECT_TRUE(throws_with([&] { counting({}).narrow(0, 0, 1); }, {"narrow", "0-dim"}));
}

TEST(TensorView, ExpandErrorsNameBothShapes) {
  Tensor x = counting({3, 2});
  EXPECT_TRUE(throws_with([&] { x.expand({3, 4}); }, {"expand", "[3, 4]", "[3, 2]", "2"}));
  EXPECT_TRUE(throws_with([&] { x.expand({2}); }, {"expand", "[3, 2]"}));
  EXPECT_TRUE(throws_with([&] { x.expand({-1, 3, 2}); }, {"expand", "-1", "[-1, 3, 2]"}));
  EXPECT_TRUE(throws_with([&] { x.expand({-2, 3, 2}); }, {"expand", "-2", "[-2, 3, 2]"}));
  EXPECT_TRUE(throws_with([&] { counting({3, 1}).expand({3, -2}); }, {"expand", "-2", "[3, -2]"}));
}

TEST(TensorView, AsStridedChecksTheStorageBounds) {
  Tensor x = counting({2, 3});
  Tensor w = x.as_strided({2, 2}, {1, 2}, 1);  // elements 1,3 / 2,4 of the flat storage
  EXPECT_EQ(to_vector<float>(w), (std::vector<float>{2, 4, 3, 5}));
  EXPECT_TRUE(throws_with([&] { x.as_strided({2, 3}, {3, 1}, 1); }, {"as_strided", "[2, 3]", "24 bytes"}));
  EXPECT_TRUE(throws_with([&] { x.as_strided({2}, {1}, -1); }, {"as_strided", "offset -1", "[2]"}));
  EXPECT_TRUE(throws_with([&] { x.as_strided({2}, {1, 1}, 0); }, {"as_strided", "[2]", "[1, 1]"}));
  Tensor g = x.detach().set_requires_grad();
  EXPECT_TRUE(throws_with([&] { g.as_strided({2}, {1}, 0); }, {"as_strided", "differentiable", "view"}));
}

// ---------------- gradients of the view ops ----------------

using testing::gradcheck;
using testing::random_leaf;

TEST(TensorViewGrad, EveryViewOpPassesGradcheck) {
  Tensor x = random_leaf({2, 3, 4}, 11);
  auto check = [&](const char* name, const std::function<Tensor(const Tensor&)>& f) {
    EXPECT_TRUE(gradcheck([&](const TensorList& in) { return f(in[0]); }, {x})) << name;
  };
  check("view", [](const Tensor& t) { return t.view({4, 6}); });
  check("reshape", [](const Tensor& t) { return t.transpose(0, 1).reshape({-1}); });
  check("transpose", [](const Tensor& t) { return t.transpose(0, 2); });
  check("permute", [](const Tensor& t) { return t.permute({1, 2, 0}); });
  check("narrow", [](const Tensor& t) { return t.narrow(2, 1, 2); });
  check("slice", [](const Tensor& t) { return t.slice(2, 0, 4, 3); });
  check("select", [](const Tensor& t) { return t.select(1, -1); });
  check("squeeze", [](const Tensor& t) { return t.narrow(1, 0, 1).squeeze(); });
  check("unsqueeze", [](const Tensor& t) { return t.unsqueeze(1) * t.unsqueeze(0).sum(); });
  check("flatten", [](const Tensor& t) { return t.flatten(0, 1); });
  check("unflatten", [](const Tensor& t) { return t.unflatten(2, {2, 2}); });
  check("clone", [](const Tensor& t) { return t.clone() * t; });
  check("contiguous", [](const Tensor& t) { return t.permute({2, 0, 1}).contiguous(); });
  // A slice used twice: both slices' gradients land in the same base.
  check("overlapping slices", [](const Tensor& t) { return t.narrow(2, 0, 3) * t.narrow(2, 1, 3); });
  Tensor small = random_leaf({3, 1}, 12);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].expand({2, 3, 4}); }, {small}));
}

TEST(TensorViewGrad, ViewsOfNonContiguousInputs) {
  Tensor base = random_leaf({4, 3}, 13);
  Tensor t = base.t();  // a non-leaf, non-contiguous view: gradcheck perturbs through it
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].reshape({2, 6}) * 3.0; }, {t}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].select(0, 1).unsqueeze(0).expand({2, 4}); }, {t}));
}

TEST(TensorViewGrad, SecondOrderThroughSliceAndSelect) {
  // d/dx sum(narrow(x)^3) = 3 narrow(x)^2 inside the window and 0 outside;
  // its derivative (create_graph) is 6 x inside the window.
  Tensor x = from_vector<double>({1, 2, 3, 4, 5}, {5}).set_requires_grad();
  Tensor y = x.narrow(0, 1, 3).pow(3).sum();
  Tensor g = autograd::grad({y}, {x}, {}, false, true)[0];
  EXPECT_EQ(to_vector<double>(g), (std::vector<double>{0, 12, 27, 48, 0}));
  Tensor gg = autograd::grad({g.select(0, 2)}, {x})[0];
  EXPECT_EQ(to_vector<double>(gg), (std::vector<double>{0, 0, 18, 0, 0}));
}

}  // namespace
}  // namespace ember
