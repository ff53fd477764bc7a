// conv2d on the CPU: values against a naive direct convolution in double
// (strides, padding, dilation, groups, depthwise, 1x1, odd sizes), the
// 16-bit dtypes, gradients by finite differences (first and second order,
// non-contiguous inputs), an empty batch, and every error message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

struct Case {
  Shape x, w;
  Int2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// The textbook definition: every output element summed tap by tap.
Tensor naive_conv(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Case& c) {
  std::vector<double> x = to_vector<double>(xt), w = to_vector<double>(wt);
  std::vector<double> b = bt.defined() ? to_vector<double>(bt) : std::vector<double>();
  int64_t n = c.x[0], cin = c.x[1], h = c.x[2], wd = c.x[3], cout = c.w[0], kh = c.w[2], kw = c.w[3];
  int64_t cin_g = cin / c.groups, cout_g = cout / c.groups;
  int64_t oh = (h + 2 * c.padding[0] - c.dilation[0] * (kh - 1) - 1) / c.stride[0] + 1;
  int64_t ow = (wd + 2 * c.padding[1] - c.dilation[1] * (kw - 1) - 1) / c.stride[1] + 1;
  std::vector<double> y(size_t(n * cout * oh * ow));
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = b.empty() ? 0.0 : b[size_t(o)];
          int64_t g = o / cout_g;
          for (int64_t i = 0; i < cin_g; ++i)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                int64_t iy = yy * c.stride[0] - c.padding[0] + p * c.dilation[0];
                int64_t ix = xx * c.stride[1] - c.padding[1] + q * c.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += w[size_t(((o * cin_g + i) * kh + p) * kw + q)] *
                       x[size_t(((bi * cin + g * cin_g + i) * h + iy) * wd + ix)];
              }
          y[size_t(((bi * cout + o) * oh + yy) * ow + xx)] = acc;
        }
  return from_vector<double>(y, {n, cout, oh, ow});
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // plain
      {{1, 2, 9, 11}, {3, 2, 3, 2}, {2, 3}, {1, 0}, {1, 1}, 1, true},  // strides, asymmetric kernel
      {{2, 2, 8, 7}, {2, 2, 3, 3}, {1, 1}, {2, 1}, {2, 3}, 1, false},  // dilation + padding
      {{1, 6, 5, 5}, {4, 3, 3, 1}, {1, 2}, {1, 1}, {1, 1}, 2, true},   // groups
      {{2, 4, 6, 5}, {4, 1, 3, 3}, {2, 1}, {1, 1}, {1, 1}, 4, true},   // depthwise
      {{2, 3, 5, 5}, {6, 1, 2, 2}, {1, 1}, {0, 1}, {2, 1}, 3, false},  // depthwise multiplier 2, dilated
      {{3, 5, 4, 3}, {2, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1 (no im2col)
      {{1, 3, 1, 1}, {2, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},   // 1x1 image, all padding around
      {{1, 1, 13, 1}, {1, 1, 5, 1}, {3, 1}, {2, 0}, {1, 1}, 1, true},  // odd sizes, one column
      // Unit strides and an output as wide as the input: im2col copies each
      // tap as one run of the plane and zeroes the padding columns after.
      {{2, 3, 6, 5}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},  // "same" 3x3
      {{1, 2, 7, 6}, {3, 2, 3, 5}, {1, 1}, {0, 4}, {1, 2}, 1, true},   // same width, dilated, taps off the edge
  };
  return all;
}

TEST(Conv2d, MatchesNaiveConvolutionInDouble) {
  for (size_t k = 0; k < cases().size(); ++k) {
    const Case& c = cases()[k];
    Generator g(k + 1);
    Tensor x = randn(c.x, DType::Float64, kCPU, &g), w = randn(c.w, DType::Float64, kCPU, &g);
    Tensor b = c.bias ? randn({c.w[0]}, DType::Float64, kCPU, &g) : Tensor();
    Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    Tensor ref = naive_conv(x, w, b, c);
    ASSERT_EQ(y.shape(), ref.shape()) << "case " << k;
    EXPECT_TRUE(allclose(y, ref, 1e-12, 1e-12)) << "case " << k;
  }
}

TEST(Conv2d, NonContiguousInputsAndLowerPrecision) {
  const Case& c = cases()[3];
  Generator g(5);
  // The input as a permuted view, the weight as a narrowed one.
  Tensor x = randn({c.x[0], c.x[2], c.x[3], c.x[1]}, DType::Float64, kCPU, &g).permute({0, 3, 1, 2});
  Tensor w = randn({c.w[0] + 2, c.w[1], c.w[2], c.w[3]}, DType::Float64, kCPU, &g).narrow(0, 1, c.w[0]);
  Tensor b = randn({c.w[0]}, DType::Float64, kCPU, &g);
  Tensor ref = naive_conv(x, w, b, c);
  EXPECT_TRUE(allclose(conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), ref, 1e-12, 1e-12));
  for (auto [dt, tol] :
       {std::pair{DType::Float32, 1e-5}, std::pair{DType::Float16, 1e-2}, std::pair{DType::BFloat16, 5e-2}}) {
    Tensor y = conv2d(x.to(dt), w.to(dt), b.to(dt), c.stride, c.padding, c.dilation, c.groups);
    EXPECT_EQ(y.dtype(), dt);
    // The inputs themselves rounded to dt: the reference sees the same values.
    Tensor r = naive_conv(x.to(dt), w.to(dt), b.to(dt), c);
    EXPECT_TRUE(allclose(y.to(DType::Float64), r, tol, tol)) << dtype_name(dt);
  }
}

TEST(Conv2d, GradcheckStridesPaddingDilationGroups) {
  for (size_t k : {1, 2, 3, 4, 6, 9, 10}) {
    Case c = cases()[k];
    c.x[0] = 1;  // keep finite differences cheap
    Tensor x = testing::random_leaf(c.x, 10 + k), w = testing::random_leaf(c.w, 20 + k);
    Tensor b = c.bias ? testing::random_leaf({c.w[0]}, 30 + k) : Tensor();
    EXPECT_TRUE(testing::gradcheck(
        [&](const TensorList& in) { return conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups); },
        {x, w, b}))
        << "case " << k;
  }
}

TEST(Conv2d, GradcheckNonContiguousAndPartialRequiresGrad) {
  // A transposed input (H and W swapped) and a permuted weight.
  Tensor x = testing::random_leaf({1, 2, 5, 4}, 1).detach().transpose(2, 3).set_requires_grad();
  Tensor w = testing::random_leaf({2, 3, 3, 2}, 2).detach().permute({1, 0, 2, 3}).set_requires_grad();
  Tensor b = testing::random_leaf({3}, 3);
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2});
      },
      {x, w, b}));
  // Only the bias, only the weight, only the input.
  Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous();
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return conv2d(xc, wc, in[0], {1, 1}, {1, 0}); }, {b}));
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return conv2d(xc, in[0], {}, {1, 2}); }, {w}));
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return conv2d(in[0], wc, b.detach()); }, {x}));
  // A broadcast input: one image expanded to a batch of 3.
  Tensor one = testing::random_leaf({1, 2, 4, 5}, 4);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        return conv2d(in[0].expand({3, 2, 4, 5}), in[1], {}, {1, 1}, {1, 1});
      },
      {one, w}));
}

TEST(Conv2d, SecondOrderGradients) {
  Tensor x = testing::random_leaf({1, 4, 5, 4}, 4), w = testing::random_leaf({2, 2, 3, 2}, 5),
         b = testing::random_leaf({2}, 6);
  auto conv = [](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
    return conv2d(xi, wi, bi, {2, 1}, {1, 1}, {1, 1}, 2);
  };
  // A gradient penalty: |d(sum(y * v)) / dx|^2 + |d/dw|^2, differentiated again.
  Generator g(7);
  Tensor v = randn({1, 2, 3, 5}, DType::Float64, kCPU, &g);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        Tensor y = conv(in[0], in[1], in[2]);
        TensorList d = autograd::grad({(y * y * v).sum()}, {in[0], in[1], in[2]}, {}, true, true);
        return cat({square(d[0]).flatten(), square(d[1]).flatten(), d[2]});
      },
      {x, w, b}));
}

TEST(Conv2d, EmptyBatch) {
  Tensor x = zeros({0, 3, 5, 5}, DType::Float64).set_requires_grad();
  Tensor w = testing::random_leaf({2, 3, 3, 3}), b = testing::random_leaf({2}, 2);
  Tensor y = conv2d(x, w, b, {2, 2}, {1, 1});
  EXPECT_EQ(y.shape(), (Shape{0, 2, 3, 3}));
  y.sum().backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_TRUE(equal(w.grad(), zeros_like(w)));
  EXPECT_TRUE(equal(b.grad(), zeros_like(b)));
}

TEST(Conv2d, ErrorsNameOpShapesAndParameters) {
  Tensor x = zeros({2, 4, 5, 5}), w = zeros({6, 2, 3, 3});
  EXPECT_TRUE(throws_with([&] { conv2d(zeros({4, 5, 5}), w); }, {"conv2d", "4-D input", "[4, 5, 5]"}));
  EXPECT_TRUE(throws_with([&] { conv2d(x, zeros({6, 2, 3})); }, {"conv2d", "4-D weight", "[6, 2, 3]"}));
  EXPECT_TRUE(throws_with([&] { conv2d(x, w); },
                          {"conv2d", "[2, 4, 5, 5]", "4 channels", "[6, 2, 3, 3]", "groups=1", "expects 2"}));
  EXPECT_TRUE(throws_with(
      [&] {
        conv2d(x, zeros({5, 2, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2);
      },
      {"conv2d", "[5, 2, 3, 3]", "groups=2 does not divide"}));
  EXPECT_TRUE(throws_with(
      [&] {
        conv2d(x, zeros({6, 4, 4, 3}), {}, {1, 1}, {0, 0}, {2, 1});
      },
      {"conv2d", "[6, 4, 4, 3]", "spans 7 rows", "dilation (2, 1)", "padded input (5)", "[2, 4, 5, 5]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        conv2d(x, zeros({6, 4, 3, 3}), zeros({5}));
      },
      {"conv2d", "bias must have shape [6]", "[5]"}));
  EXPECT_TRUE(throws_with([&] { conv2d(x, zeros({6, 4, 3, 3}), {}, {0, 1}); }, {"conv2d", "stride (0, 1)"}));
  EXPECT_TRUE(throws_with(
      [&] {
        conv2d(x, zeros({6, 4, 3, 3}, DType::Float64));
      },
      {"conv2d", "float32", "float64", "weight [6, 4, 3, 3]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        conv2d(x.to(DType::Int64), zeros({6, 4, 3, 3}, DType::Int64));
      },
      {"conv2d", "floating", "int64"}));
}

}  // namespace
}  // namespace ember
