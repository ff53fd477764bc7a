// repeat and tile (ember/core/ops/repeat.cpp): PyTorch's shapes and values (new
// leading dims, tile's left padding, zero counts, 0-dim inputs), every
// dtype, non-contiguous inputs, results that never alias the input, the
// float64 gradient (a sum over the copies), and the errors.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::throws_with;

// out[i0, i1, ...] = x[i0 % s0, i1 % s1, ...] over the trailing dims of out.
std::vector<double> reference(const Tensor& x, const Shape& out_shape) {
  std::vector<double> xv = to_vector<double>(x.contiguous()), out;
  const int64_t lead = int64_t(out_shape.size()) - x.dim();
  int64_t n = 1;
  for (int64_t s : out_shape) n *= s;
  for (int64_t k = 0; k < n; ++k) {
    int64_t rest = k, src = 0, scale = 1;
    for (int64_t d = int64_t(out_shape.size()) - 1; d >= lead; --d) {
      const int64_t size = x.size(d - lead), i = rest % out_shape[size_t(d)];
      rest /= out_shape[size_t(d)];
      src += (i % size) * scale;
      scale *= size;
    }
    out.push_back(xv[size_t(src)]);
  }
  return out;
}

TEST(Repeat, MatchesPyTorch) {
  Tensor x = arange(6, DType::Float32).reshape({2, 3});
  EXPECT_EQ(x.repeat({2, 1, 2}).shape(), (Shape{2, 2, 6}));
  EXPECT_EQ(x.repeat({0, 2}).shape(), (Shape{0, 6}));
  EXPECT_EQ(tile(x, {2}).shape(), (Shape{2, 6}));
  EXPECT_EQ(tile(x, {2, 1, 1}).shape(), (Shape{2, 2, 3}));
  // x.t().repeat(2, 2)
  EXPECT_EQ(to_vector<float>(x.t().repeat({2, 2})),
            (std::vector<float>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5, 0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  Tensor s = full({}, 3.0);
  EXPECT_EQ(s.repeat({}).shape(), Shape{});
  EXPECT_EQ(to_vector<float>(s.repeat({2})), (std::vector<float>{3, 3}));
  EXPECT_EQ(tile(s, {}).shape(), Shape{});
}

TEST(Repeat, EveryDtypeAndLayout) {
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                          DType::Int32,   DType::Int64,   DType::Bool};
  Tensor base = arange(3 * 4 * 5, DType::Int64).reshape({3, 4, 5});
  for (DType dt : dtypes) {
    Tensor b = dt == DType::Bool ? gt(base, 29) : base.to(dt);
    const std::pair<Tensor, const char*> inputs[] = {{b, "contiguous"},
                                                     {b.permute({2, 0, 1}), "permuted"},
                                                     {b.narrow(2, 1, 3).narrow(0, 1, 2), "narrowed"},
                                                     {b.select(1, 2).unsqueeze(1).expand({3, 4, 5}), "expanded"}};
    for (const auto& [x, layout] : inputs) {
      for (const Shape& r : {Shape{1, 1, 1}, Shape{2, 1, 3}, Shape{2, 1, 1, 2}, Shape{1, 0, 2}, Shape{3, 1, 2, 1, 1}}) {
        Tensor y = x.repeat(r);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_TRUE(y.is_contiguous());
        Shape want_shape = r;
        const int64_t lead = int64_t(r.size()) - x.dim();
        for (int64_t d = lead; d < int64_t(r.size()); ++d) want_shape[size_t(d)] *= x.size(d - lead);
        ASSERT_EQ(y.shape(), want_shape) << layout << " " << shape_str(r);
        EXPECT_EQ(to_vector<double>(y), reference(x, want_shape))
            << dtype_name(dt) << " " << layout << " repeats " << shape_str(r);
      }
    }
  }
}

TEST(Repeat, TilePadsWithOnesOnTheLeft) {
  Tensor x = arange(24, DType::Float64).reshape({2, 3, 4});
  EXPECT_TRUE(equal(tile(x, {2}), x.repeat({1, 1, 2})));
  EXPECT_TRUE(equal(x.tile({2, 3}), x.repeat({1, 2, 3})));
  EXPECT_TRUE(equal(tile(x, {2, 1, 1, 2}), x.repeat({2, 1, 1, 2})));
  EXPECT_TRUE(equal(tile(x, {}), x));
}

TEST(Repeat, TheResultNeverAliasesTheInput) {
  Tensor x = arange(6, DType::Float32);
  for (Tensor y : {x.repeat({1}), tile(x, {}), repeat(x, {1})}) {
    EXPECT_NE(y.data_ptr(), x.data_ptr());
    y.fill_(-1);
    EXPECT_EQ(to_vector<float>(x)[0], 0);
  }
}

TEST(Repeat, GradientSumsOverTheCopies) {
  Tensor x = testing::random_leaf({2, 3}, 9);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].repeat({2, 3}); }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].t().repeat({3, 1, 2}); }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return tile(in[0], {2}); }, {x}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].repeat({0, 2}).sum() + in[0].sum(); }, {x}));
  Tensor s = full({}, 1.5, DType::Float64).set_requires_grad();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].repeat({}); }, {s}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].repeat({4}); }, {s}));
  Tensor y = x.repeat({2, 2});
  EXPECT_EQ(y.grad_fn()->name(), "RepeatBackward");
  y.sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), std::vector<double>(6, 4.0));
  // A second derivative flows through the composed backward.
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor g = autograd::grad({(in[0].repeat({2, 1}) * in[0].repeat({2, 1})).sum()}, {in[0]}, {}, false, true)[0];
        return g;
      },
      {x}));
}

TEST(Repeat, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_TRUE(throws_with([&] { x.repeat({2}); }, {"repeat", "can not be smaller than", "[2]", "[2, 3] float32"}));
  EXPECT_TRUE(throws_with([&] { x.repeat({-1, 2}); }, {"repeat", ">= 0", "[-1, 2]", "[2, 3] float32"}));
  EXPECT_TRUE(throws_with([&] { tile(x, {-1, 2}); }, {"tile", ">= 0", "[-1, 2]"}));
}

}  // namespace
}  // namespace ember
