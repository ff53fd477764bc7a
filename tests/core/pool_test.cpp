// max_pool2d, avg_pool2d and adaptive_avg_pool2d on the CPU: hand-computed
// values (ceil_mode, padding, count_include_pad, non-divisible adaptive
// bins), naive loops for many parameter sets, argmax routing on ties and
// NaN, gradients by finite differences (first and second order,
// non-contiguous inputs), an input's gradient from gradients in any layout,
// and every error message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// 1..n*n as a (1, 1, n, n) double image.
Tensor counting_image(int64_t n) { return arange(1, n * n + 1, 1, DType::Float64).view({1, 1, n, n}); }

void expect_values(const Tensor& y, const Shape& shape, const std::vector<double>& expected) {
  ASSERT_EQ(y.shape(), shape);
  std::vector<double> got = to_vector<double>(y);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12) << "element " << i;
}

// ---------------- hand-computed values ----------------

TEST(MaxPool2d, HandComputedPaddingCeilModeDilation) {
  Tensor x = counting_image(4);  // rows 1-4, 5-8, 9-12, 13-16
  expect_values(max_pool2d(x, {2, 2}), {1, 1, 2, 2}, {6, 8, 14, 16});
  // k 3, s 2, pad 1: windows rows {-1..1}, {1..3}.
  expect_values(max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), {1, 1, 2, 2}, {6, 8, 14, 16});
  // ceil_mode on a 5x5: k 2 s 2 gives 3 outputs, the last window one pixel wide.
  expect_values(max_pool2d(counting_image(5), {2, 2}, {2, 2}, {0, 0}, {1, 1}, true), {1, 1, 3, 3},
                {7, 9, 10, 17, 19, 20, 22, 24, 25});
  // Ceil mode keeps a last window that starts inside the input (at 2 * 2 - 1 = 3 < 4)...
  EXPECT_EQ(max_pool2d(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true).shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(zeros({1, 1, 5, 5}), {1, 1}, {2, 2}, {0, 0}, {1, 1}, true).shape(), (Shape{1, 1, 3, 3}));
  // ...but drops one that would start in the right padding: 5 + 2 - 2 - 1 + 2 = 6, / 3 + 1 = 3
  // windows, the third starting at 2 * 3 - 1 = 5 >= 5.
  EXPECT_EQ(max_pool2d(zeros({1, 1, 5, 5}), {3, 3}, {3, 3}, {1, 1}, {1, 1}, true).shape(), (Shape{1, 1, 2, 2}));
  // Floor mode drops the partial window.
  EXPECT_EQ(max_pool2d(counting_image(5), {2, 2}, {2, 2}, {0, 0}, {1, 1}, false).shape(), (Shape{1, 1, 2, 2}));
  // Dilation 2, k 2: taps rows {0, 2}, {1, 3}.
  expect_values(max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {2, 2}), {1, 1, 2, 2}, {11, 12, 15, 16});
}

TEST(AvgPool2d, HandComputedCountIncludePadAndCeilMode) {
  Tensor x = counting_image(3);  // 1..9
  // Ceil mode: the last window is clipped at the input's edge and divided by its clipped size.
  expect_values(avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, true), {1, 1, 2, 2}, {3, 4.5, 7.5, 9});
  // k 3 s 2 pad 1: each window holds 4 input pixels; count_include_pad divides by 9.
  expect_values(avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}), {1, 1, 2, 2}, {12.0 / 9, 16.0 / 9, 24.0 / 9, 28.0 / 9});
  expect_values(avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, false), {1, 1, 2, 2}, {3, 4, 6, 7});
  // Padding and ceil mode on 3x3, k 2, s 2, pad 1: windows start at -1 and 1 (a third, at 3, would
  // start in the padding). Window (0, 0) holds one pixel and the padding: divisor 4 with the pad.
  expect_values(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, true), {1, 1, 2, 2}, {1.0 / 4, 5.0 / 4, 11.0 / 4, 28.0 / 4});
  expect_values(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, true, false), {1, 1, 2, 2}, {1, 2.5, 5.5, 7});
}

TEST(AdaptiveAvgPool2d, NonDivisibleBins) {
  // 5 -> 3 bins: [0, 2), [1, 4), [3, 5).
  Tensor x = arange(1, 6, 1, DType::Float64).view({1, 1, 1, 5});
  expect_values(adaptive_avg_pool2d(x, {1, 3}), {1, 1, 1, 3}, {1.5, 3, 4.5});
  // 3 -> 5 bins (upsampling): [0,1) [0,2) [1,2) [1,3) [2,3).
  Tensor x3 = arange(1, 4, 1, DType::Float64).view({1, 1, 3, 1});
  expect_values(adaptive_avg_pool2d(x3, {5, 1}), {1, 1, 5, 1}, {1, 1.5, 2, 2.5, 3});
  expect_values(adaptive_avg_pool2d(counting_image(4), {1, 1}), {1, 1, 1, 1}, {8.5});
}

// ---------------- naive loops over many parameter sets ----------------

struct Window {
  Int2 kernel, stride, padding, dilation;
  bool ceil_mode;
};

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  double span = double(in + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t out = int64_t(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Max pooling by PyTorch's rule, tap by tap in row-major order: a later tap
// wins when greater or NaN, so a window gives its last NaN, else its first
// maximum. Returns the values and the argmax of every output.
std::pair<std::vector<double>, std::vector<int64_t>> scan_max(const std::vector<double>& x, int64_t planes, int64_t h,
                                                              int64_t w, const Window& win, int64_t oh, int64_t ow) {
  std::vector<double> y;
  std::vector<int64_t> idx;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t i = 0; i < win.kernel[0]; ++i)
          for (int64_t j = 0; j < win.kernel[1]; ++j) {
            int64_t iy = oy * win.stride[0] - win.padding[0] + i * win.dilation[0];
            int64_t ix = ox * win.stride[1] - win.padding[1] + j * win.dilation[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            double v = x[size_t((pl * h + iy) * w + ix)];
            if (at < 0 || v > best || std::isnan(v)) best = v, at = iy * w + ix;
          }
        y.push_back(best);
        idx.push_back(at);
      }
  return {y, idx};
}

// Max pooling of t over win: the output shape into ys, then scan_max.
std::pair<std::vector<double>, std::vector<int64_t>> naive_max(const Tensor& t, const Window& win, Shape& ys) {
  int64_t h = t.size(2), w = t.size(3);
  int64_t oh = pooled(h, win.kernel[0], win.stride[0], win.padding[0], win.dilation[0], win.ceil_mode);
  int64_t ow = pooled(w, win.kernel[1], win.stride[1], win.padding[1], win.dilation[1], win.ceil_mode);
  ys = {t.size(0), t.size(1), oh, ow};
  return scan_max(to_vector<double>(t), t.size(0) * t.size(1), h, w, win, oh, ow);
}

const std::vector<Window>& windows() {
  static const std::vector<Window> all = {
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
      {{3, 2}, {1, 2}, {1, 0}, {1, 1}, true},  {{3, 3}, {2, 3}, {1, 1}, {2, 1}, true},
      {{2, 3}, {3, 2}, {1, 1}, {1, 2}, false}, {{4, 4}, {3, 3}, {2, 2}, {1, 1}, true},
      {{1, 1}, {2, 2}, {0, 0}, {1, 1}, true},
  };
  return all;
}

TEST(MaxPool2d, MatchesNaiveMaxAndRoutesGradientToArgmax) {
  for (size_t k = 0; k < windows().size(); ++k) {
    const Window& win = windows()[k];
    Tensor x = testing::random_leaf({2, 3, 9, 7}, k);
    Shape ys;
    auto [ref, idx] = naive_max(x.detach(), win, ys);
    Tensor y = max_pool2d(x, win.kernel, win.stride, win.padding, win.dilation, win.ceil_mode);
    ASSERT_EQ(y.shape(), ys) << "window " << k;
    EXPECT_EQ(to_vector<double>(y), ref) << "window " << k;
    // The gradient of sum(y * v) is v scattered onto the argmax positions.
    Generator g(k);
    Tensor v = randn(ys, DType::Float64, kCPU, &g);
    (y * v).sum().backward();
    std::vector<double> expected(size_t(x.numel()), 0.0), vv = to_vector<double>(v);
    int64_t plane = x.size(2) * x.size(3), per = ys[2] * ys[3];
    for (size_t o = 0; o < idx.size(); ++o) expected[size_t(int64_t(o) / per * plane + idx[o])] += vv[o];
    std::vector<double> got = to_vector<double>(x.grad());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-12) << "window " << k << " at " << i;
  }
}

TEST(MaxPool2d, TiesGoToTheFirstMaxAndNaNPropagates) {
  Tensor x = full({1, 1, 2, 4}, 3.0, DType::Float64).set_requires_grad();
  max_pool2d(x, {2, 2}).sum().backward();
  expect_values(x.grad(), {1, 1, 2, 4}, {1, 0, 1, 0, 0, 0, 0, 0});

  std::vector<double> v = {1, NAN, 2, 5, 0, 3, -INFINITY, -INFINITY};
  Tensor xn = from_vector<double>(v, {1, 1, 2, 4}).set_requires_grad();
  Tensor y = max_pool2d(xn, {2, 2});
  std::vector<double> yv = to_vector<double>(y);
  EXPECT_TRUE(std::isnan(yv[0]));
  EXPECT_EQ(yv[1], 5.0);
  y.sum().backward();
  expect_values(xn.grad(), {1, 1, 2, 4}, {0, 1, 0, 1, 0, 0, 0, 0});

  // A window of -inf only: the gradient goes to its first element.
  Tensor xi = full({1, 1, 2, 2}, -INFINITY, DType::Float64).set_requires_grad();
  max_pool2d(xi, {2, 2}).sum().backward();
  expect_values(xi.grad(), {1, 1, 2, 2}, {1, 0, 0, 0});
}

// Windows two columns wide at stride 2 take their own path on the CPU:
// column pairs in vectors of 8 floats or 4 doubles with AVX, half that
// without; a row shorter than a vector spills into slack, a last vector
// overlaps the one before; one run over the plane when its width is even,
// else row by row. Planes 28, 14, 20, 6, 17, 15 and 21 wide give outputs
// 14, 7, 10, 3, 8, 7 and 10 wide; a 2x6 plane has fewer pairs than a
// vector; a window dilated past a 2-row plane has no row inside it. Values
// from {0, 1, 2, 3} with NaN and -inf make ties everywhere. Every dtype's
// values and argmaxes (through the gradient) must be the scan's, and
// channels-last inputs (the other paths) must agree.
TEST(MaxPool2d, ColumnPairsMatchTheScanOnTiesAndNaN) {
  const std::vector<Window> pair_windows = {
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{3, 2}, {1, 2}, {1, 0}, {1, 1}, false},
      {{2, 2}, {3, 2}, {0, 0}, {2, 1}, false}, {{3, 2}, {2, 2}, {1, 0}, {1, 1}, true},
      {{1, 2}, {1, 2}, {0, 0}, {1, 1}, false}, {{2, 2}, {1, 2}, {1, 0}, {3, 1}, false},
  };
  const std::vector<std::pair<int64_t, int64_t>> sides = {{28, 28}, {14, 14}, {6, 20}, {5, 6},
                                                          {9, 17},  {9, 15},  {3, 21}, {2, 6}};
  Generator g(31);
  for (auto [h, w] : sides) {
    const int64_t planes = 3;
    std::vector<double> x = to_vector<double>(randint(0, 4, {planes * h * w}, DType::Float64, kCPU, &g));
    for (size_t i = 0; i < x.size(); i += 13) x[i] = NAN;
    for (size_t i = 5; i < x.size(); i += 11) x[i] = -INFINITY;
    for (const Window& win : pair_windows) {
      const int64_t oh = pooled(h, win.kernel[0], win.stride[0], win.padding[0], win.dilation[0], win.ceil_mode);
      const int64_t ow = pooled(w, win.kernel[1], win.stride[1], win.padding[1], win.dilation[1], win.ceil_mode);
      if (oh < 1 || ow < 1) continue;  // a window taller than the plane: an error (ErrorsNameOpShapesAndParameters)
      auto [ref, idx] = scan_max(x, planes, h, w, win, oh, ow);
      for (DType dt : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
        for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
          const std::string what = std::to_string(h) + "x" + std::to_string(w) + " window " +
                                   std::to_string(win.kernel[0]) + "x" + std::to_string(win.kernel[1]) + " stride " +
                                   std::to_string(win.stride[0]) + " " + dtype_name(dt) +
                                   (format == MemoryFormat::ChannelsLast ? " channels-last" : "");
          Tensor xt = from_vector<double>(x, {1, planes, h, w}).to(dt).contiguous(format).set_requires_grad();
          Tensor y = max_pool2d(xt, win.kernel, win.stride, win.padding, win.dilation, win.ceil_mode);
          ASSERT_EQ(y.shape(), (Shape{1, planes, oh, ow})) << what;
          std::vector<double> got = to_vector<double>(y.to(DType::Float64));
          for (size_t o = 0; o < ref.size(); ++o) {
            if (std::isnan(ref[o])) ASSERT_TRUE(std::isnan(got[o])) << what << " output " << o;
            else ASSERT_EQ(got[o], ref[o]) << what << " output " << o;
          }
          // Output o's gradient o % 64 + 1 (sums of up to three exact in
          // bfloat16) lands on its argmax alone.
          std::vector<double> gv(ref.size()), expected(x.size(), 0.0);
          for (size_t o = 0; o < gv.size(); ++o) gv[o] = double(o % 64 + 1);
          y.backward(from_vector<double>(gv, y.shape()).to(dt));
          for (size_t o = 0; o < idx.size(); ++o) {
            if (idx[o] >= 0) expected[size_t(int64_t(o) / (oh * ow) * h * w + idx[o])] += gv[o];
          }
          Tensor grad = xt.grad().to(DType::Float64) - from_vector<double>(expected, xt.shape());
          ASSERT_EQ(abs(grad).max().item<double>(), 0.0) << what;
        }
      }
    }
  }
}

TEST(AvgPool2d, MatchesNaiveAverage) {
  for (size_t k = 0; k < windows().size(); ++k) {
    Window win = windows()[k];
    for (bool include_pad : {true, false}) {
      Tensor x = testing::random_leaf({2, 2, 8, 7}, k).detach();
      Tensor y = avg_pool2d(x, win.kernel, win.stride, win.padding, win.ceil_mode, include_pad);
      std::vector<double> xv = to_vector<double>(x), yv = to_vector<double>(y);
      int64_t oh = pooled(8, win.kernel[0], win.stride[0], win.padding[0], 1, win.ceil_mode);
      int64_t ow = pooled(7, win.kernel[1], win.stride[1], win.padding[1], 1, win.ceil_mode);
      ASSERT_EQ(y.shape(), (Shape{2, 2, oh, ow}));
      for (int64_t pl = 0; pl < 4; ++pl)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            // Count the window's cells inside the padded input and inside the input.
            double total = 0;
            int64_t padded = 0, inside = 0;
            for (int64_t i = 0; i < win.kernel[0]; ++i)
              for (int64_t j = 0; j < win.kernel[1]; ++j) {
                int64_t iy = oy * win.stride[0] - win.padding[0] + i, ix = ox * win.stride[1] - win.padding[1] + j;
                if (iy >= 8 + win.padding[0] || ix >= 7 + win.padding[1]) continue;
                ++padded;
                if (iy < 0 || ix < 0 || iy >= 8 || ix >= 7) continue;
                ++inside;
                total += xv[size_t((pl * 8 + iy) * 7 + ix)];
              }
            double expect = total / double(include_pad ? padded : inside);
            ASSERT_NEAR(yv[size_t((pl * oh + oy) * ow + ox)], expect, 1e-12) << "window " << k;
          }
    }
  }
}

TEST(AdaptiveAvgPool2d, MatchesNaiveBins) {
  Tensor x = testing::random_leaf({2, 3, 7, 10}, 3).detach();
  std::vector<double> xv = to_vector<double>(x);
  for (Int2 out : {Int2{3, 4}, Int2{7, 10}, Int2{1, 1}, Int2{5, 3}, Int2{9, 13}}) {
    Tensor y = adaptive_avg_pool2d(x, out);
    ASSERT_EQ(y.shape(), (Shape{2, 3, out[0], out[1]}));
    std::vector<double> yv = to_vector<double>(y);
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t oy = 0; oy < out[0]; ++oy)
        for (int64_t ox = 0; ox < out[1]; ++ox) {
          int64_t y0 = int64_t(std::floor(double(oy) * 7 / double(out[0])));
          int64_t y1 = int64_t(std::ceil(double(oy + 1) * 7 / double(out[0])));
          int64_t x0 = int64_t(std::floor(double(ox) * 10 / double(out[1])));
          int64_t x1 = int64_t(std::ceil(double(ox + 1) * 10 / double(out[1])));
          double total = 0;
          for (int64_t i = y0; i < y1; ++i)
            for (int64_t j = x0; j < x1; ++j) total += xv[size_t((pl * 7 + i) * 10 + j)];
          ASSERT_NEAR(yv[size_t((pl * out[0] + oy) * out[1] + ox)], total / double((y1 - y0) * (x1 - x0)), 1e-12);
        }
  }
}

TEST(Pool2d, LowerPrecisionAgreesWithDouble) {
  Tensor x = testing::random_leaf({2, 3, 9, 8}, 9).detach();
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    double tol = dt == DType::Float32 ? 1e-6 : dt == DType::Float16 ? 2e-3 : 1.6e-2;
    Tensor xd = x.to(dt).to(DType::Float64);  // the same rounded inputs
    EXPECT_TRUE(allclose(max_pool2d(x.to(dt), {3, 3}, {2, 2}, {1, 1}).to(DType::Float64),
                         max_pool2d(xd, {3, 3}, {2, 2}, {1, 1}), 0, 0));
    EXPECT_TRUE(allclose(avg_pool2d(x.to(dt), {3, 2}, {2, 1}, {1, 1}, true).to(DType::Float64),
                         avg_pool2d(xd, {3, 2}, {2, 1}, {1, 1}, true), tol, tol));
    EXPECT_TRUE(
        allclose(adaptive_avg_pool2d(x.to(dt), {4, 3}).to(DType::Float64), adaptive_avg_pool2d(xd, {4, 3}), tol, tol));
  }
}

// ---------------- gradients ----------------

TEST(Pool2d, GradcheckAllOps) {
  Tensor x = testing::random_leaf({1, 2, 7, 6}, 4);
  // A transposed view: (1, 2, 6, 7).
  Tensor xt = testing::random_leaf({1, 2, 7, 6}, 5).detach().transpose(2, 3).set_requires_grad();
  for (const Tensor& in : {x, xt}) {
    for (size_t k = 0; k < windows().size(); ++k) {
      if (in.is_same(xt) && k % 3 != 1) continue;  // the transposed view on a few windows only
      const Window& win = windows()[k];
      EXPECT_TRUE(testing::gradcheck(
          [&](const TensorList& t) {
            return max_pool2d(t[0], win.kernel, win.stride, win.padding, win.dilation, win.ceil_mode);
          },
          {in}));
      for (bool include_pad : {true, false}) {
        EXPECT_TRUE(testing::gradcheck(
            [&](const TensorList& t) {
              return avg_pool2d(t[0], win.kernel, win.stride, win.padding, win.ceil_mode, include_pad);
            },
            {in}));
      }
    }
    for (Int2 out : {Int2{4, 5}, Int2{3, 3}, Int2{9, 2}}) {
      EXPECT_TRUE(testing::gradcheck([&](const TensorList& t) { return adaptive_avg_pool2d(t[0], out); }, {in}));
    }
  }
  // A broadcast input: one column expanded across the width.
  Tensor col = testing::random_leaf({1, 2, 7, 1}, 7);
  auto wide = [](const Tensor& t) { return t.expand({1, 2, 7, 6}); };
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& t) {
        return max_pool2d(wide(t[0]), {2, 3}, {2, 2}, {1, 1});
      },
      {col}));
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& t) {
        return avg_pool2d(wide(t[0]), {3, 2}, {2, 1}, {1, 1}, true, false);
      },
      {col}));
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& t) { return adaptive_avg_pool2d(wide(t[0]), {3, 4}); }, {col}));
}

// An input's gradient from a gradient in any layout: NCHW (as one comes
// back to a channels-last pool through a flatten, read without a copy),
// channels-last (as one comes back to an NCHW pool from a convolution with
// a channels-last weight), and neither (copied first) all give the NCHW
// pooling's gradient, bit for bit, laid out as the input.
TEST(Pool2d, InputTakesItsGradientInAnyLayout) {
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) {
        return max_pool2d(t, {2, 2});
      },
      [](const Tensor& t) {
        return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 2}, {2, 1}, {1, 1}, true, false);
      },
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {4, 3});
      },
  };
  Tensor x = testing::random_leaf({2, 5, 9, 8}, 21).detach();
  for (size_t k = 0; k < pools.size(); ++k) {
    Tensor xn = x.clone().set_requires_grad();
    Tensor yn = pools[k](xn);
    Tensor gy = randn(yn.shape(), DType::Float64);
    yn.backward(gy);
    const Tensor expected = xn.grad();
    const std::vector<std::pair<const char*, Tensor>> layouts = {
        {"nchw", gy},
        {"channels-last", gy.contiguous(cl)},
        {"transposed", gy.transpose(2, 3).contiguous().transpose(2, 3)},
    };
    for (MemoryFormat format : {MemoryFormat::Contiguous, cl}) {
      for (const auto& [name, g] : layouts) {
        Tensor xc = x.detach().contiguous(format).set_requires_grad();
        Tensor y = pools[k](xc);
        ASSERT_TRUE(y.is_contiguous(format));
        y.backward(g);
        const std::string what = std::string("pool ") + std::to_string(k) +
                                 (format == cl ? ", channels-last input" : ", NCHW input") + ", gradient " + name;
        EXPECT_TRUE(xc.grad().is_contiguous(format)) << what;
        EXPECT_TRUE(allclose(xc.grad(), expected, 0, 0)) << what;
      }
    }
  }
}

TEST(Pool2d, SecondOrderGradients) {
  Tensor x = testing::random_leaf({1, 2, 6, 5}, 6);
  Generator g(8);
  std::vector<std::function<Tensor(const Tensor&)>> ops = {
      [](const Tensor& t) {
        return max_pool2d(t, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, true, false);
      },
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {4, 3});
      },
  };
  for (size_t k = 0; k < ops.size(); ++k) {
    // d/dx of |d(sum(f(x)^2 * v))/dx|^2: the pool's backward differentiated again.
    Tensor v = randn(ops[k](x).shape(), DType::Float64, kCPU, &g);
    EXPECT_TRUE(testing::gradcheck(
        [&](const TensorList& t) {
          Tensor y = ops[k](t[0]);
          Tensor d = autograd::grad({(y * y * v).sum()}, {t[0]}, {}, true, true)[0];
          return square(d);
        },
        {x}))
        << "op " << k;
  }
}

// ---------------- errors ----------------

TEST(Pool2d, ErrorsNameOpShapesAndParameters) {
  Tensor x = zeros({2, 3, 5, 5});
  EXPECT_TRUE(throws_with([&] { max_pool2d(zeros({3, 5, 5}), {2, 2}); }, {"max_pool2d", "4-D input", "[3, 5, 5]"}));
  EXPECT_TRUE(throws_with([&] { avg_pool2d(zeros({5, 5}), {2, 2}); }, {"avg_pool2d", "4-D input", "[5, 5]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        adaptive_avg_pool2d(zeros({3, 5}), {2, 2});
      },
      {"adaptive_avg_pool2d", "4-D input", "[3, 5]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        max_pool2d(x, {6, 2});
      },
      {"max_pool2d", "[2, 3, 5, 5]", "kernel_size (6, 2)", "output of size 0 x 2", "too small"}));
  EXPECT_TRUE(throws_with(
      [&] {
        avg_pool2d(x, {2, 2}, {1, 1}, {2, 0});
      },
      {"avg_pool2d", "padding (2, 0)", "kernel_size (2, 2)", "half the kernel size"}));
  EXPECT_TRUE(throws_with([&] { max_pool2d(x, {3, 3}, {0, 1}); }, {"max_pool2d", "stride (0, 1)", "positive"}));
  EXPECT_TRUE(throws_with([&] { max_pool2d(x, {2, 2}, {}, {0, 0}, {0, 1}); }, {"max_pool2d", "dilation (0, 1)"}));
  EXPECT_TRUE(throws_with(
      [&] {
        max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {5, 1});
      },
      {"max_pool2d", "dilation (5, 1)", "output of size 0 x 4"}));
  EXPECT_TRUE(throws_with(
      [&] {
        adaptive_avg_pool2d(x, {0, 2});
      },
      {"adaptive_avg_pool2d", "output_size must be positive", "(0, 2)", "[2, 3, 5, 5]"}));
  EXPECT_TRUE(throws_with([&] { avg_pool2d(x.to(DType::Int32), {2, 2}); }, {"avg_pool2d", "floating", "int32"}));
}

}  // namespace
}  // namespace ember
