// nn::Conv2d, MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: values against
// naive loops, gradients, initialization, printing, option errors.
// These call ember::conv2d / max_pool2d / avg_pool2d / adaptive_avg_pool2d.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

// x (N, C, H, W) as a flat vector with its sizes.
struct Image {
  std::vector<double> v;
  int64_t N, C, H, W;
  double at(int64_t n, int64_t c, int64_t h, int64_t w) const { return v[((n * C + c) * H + h) * W + w]; }
  bool inside(int64_t h, int64_t w) const { return h >= 0 && h < H && w >= 0 && w < W; }
};

Image image(const Tensor& x) { return {to_vector<double>(x), x.size(0), x.size(1), x.size(2), x.size(3)}; }

std::vector<double> naive_conv(const Image& x, const nn::Conv2d& m) {
  std::vector<double> w = to_vector<double>(m.weight);
  std::vector<double> b = m.bias.defined() ? to_vector<double>(m.bias) : std::vector<double>(m.out_channels, 0.0);
  const int64_t kh = m.kernel_size.h, kw = m.kernel_size.w, cin_g = m.in_channels / m.groups,
                cout_g = m.out_channels / m.groups;
  const int64_t OH = (x.H + 2 * m.padding.h - m.dilation.h * (kh - 1) - 1) / m.stride.h + 1;
  const int64_t OW = (x.W + 2 * m.padding.w - m.dilation.w * (kw - 1) - 1) / m.stride.w + 1;
  std::vector<double> out;
  for (int64_t n = 0; n < x.N; ++n)
    for (int64_t co = 0; co < m.out_channels; ++co)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = b[co];
          int64_t g = co / cout_g;
          for (int64_t ci = 0; ci < cin_g; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t h = oh * m.stride.h - m.padding.h + i * m.dilation.h;
                int64_t ww = ow * m.stride.w - m.padding.w + j * m.dilation.w;
                if (x.inside(h, ww)) s += x.at(n, g * cin_g + ci, h, ww) * w[((co * cin_g + ci) * kh + i) * kw + j];
              }
          out.push_back(s);
        }
  return out;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-10) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(NnConv2d, MatchesNaiveConvolution) {
  Generator g(1);
  auto grouped = std::make_shared<nn::Conv2d>(4, 6, 3, 2, 1, 1, 2);
  grouped->to(DType::Float64);
  Tensor x = randn({2, 4, 7, 6}, DType::Float64, kCPU, &g);
  Tensor y = (*grouped)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 4, 3}));
  expect_close(to_vector<double>(y), naive_conv(image(x), *grouped));

  auto dilated = std::make_shared<nn::Conv2d>(3, 2, nn::Size2{2, 3}, 1, nn::Size2{1, 0}, 2, 1, false);
  dilated->to(DType::Float64);
  Tensor x2 = randn({1, 5, 6, 3}, DType::Float64, kCPU, &g).permute({0, 3, 1, 2});  // non-contiguous (1, 3, 5, 6)
  expect_close(to_vector<double>((*dilated)(x2)), naive_conv(image(x2.contiguous()), *dilated));
}

TEST(NnConv2d, GradcheckInputWeightAndBias) {
  auto conv = std::make_shared<nn::Conv2d>(2, 4, 2, 2, 1, 1, 2);
  conv->to(DType::Float64);
  Tensor x = testing::random_leaf({1, 2, 3, 4}, 1);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*conv)(in[0]); }, {x, conv->weight, conv->bias}));
  Tensor xt = testing::random_leaf({1, 2, 4, 3}, 2);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*conv)(in[0].transpose(2, 3)); }, {xt}));
}

TEST(NnConv2d, InitBoundsPrintingAndErrors) {
  manual_seed(5);
  nn::Conv2d conv(16, 32, 3);
  const double bound = 1.0 / std::sqrt(16.0 * 9.0);
  double hi = 0;
  for (float w : to_vector<float>(conv.weight)) {
    EXPECT_LE(std::fabs(w), bound);
    hi = std::max(hi, double(std::fabs(w)));
  }
  EXPECT_GT(hi, 0.99 * bound);
  for (float b : to_vector<float>(conv.bias)) EXPECT_LE(std::fabs(b), bound);
  EXPECT_EQ(conv.weight.shape(), (Shape{32, 16, 3, 3}));
  EXPECT_EQ(nn::Conv2d(4, 6, 3, 2, 1, 1, 2).str(),
            "Conv2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2)");
  EXPECT_EQ(nn::Conv2d(3, 2, nn::Size2{2, 3}, 1, nn::Size2{1, 0}, 2, 1, false).str(),
            "Conv2d(3, 2, kernel_size=(2, 3), stride=(1, 1), padding=(1, 0), dilation=(2, 2), bias=false)");
  try {
    nn::Conv2d bad(3, 4, 3, 1, 0, 1, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("in_channels (3) and out_channels (4) must be positive multiples of groups (2)"));
  }
}

// PyTorch's pooled size; with ceil_mode the last window must start inside
// the input or its left padding.
int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

TEST(NnPooling, MaxPoolMatchesNaiveLoop) {
  Generator g(2);
  Tensor x = randn({2, 3, 7, 8}, DType::Float64, kCPU, &g);
  Image im = image(x);
  struct Case {
    nn::Size2 k, s, p, d;
    bool ceil;
  };
  for (const Case& c : {Case{2, 2, 0, 1, false}, Case{3, 2, 1, 1, false}, Case{{3, 2}, {2, 1}, {1, 0}, {1, 2}, false},
                        Case{2, 2, 0, 1, true}, Case{3, 2, 1, 1, true}}) {
    nn::MaxPool2d pool(c.k, c.s, c.p, c.d, c.ceil);
    Tensor y = pool(x);
    int64_t OH = pooled(7, c.k.h, c.s.h, c.p.h, c.d.h, c.ceil), OW = pooled(8, c.k.w, c.s.w, c.p.w, c.d.w, c.ceil);
    ASSERT_EQ(y.shape(), (Shape{2, 3, OH, OW})) << pool.str();
    std::vector<double> expect;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double m = -std::numeric_limits<double>::infinity();
            for (int64_t i = 0; i < c.k.h; ++i)
              for (int64_t j = 0; j < c.k.w; ++j) {
                int64_t h = oh * c.s.h - c.p.h + i * c.d.h, w = ow * c.s.w - c.p.w + j * c.d.w;
                if (im.inside(h, w)) m = std::max(m, im.at(n, ch, h, w));
              }
            expect.push_back(m);
          }
    expect_close(to_vector<double>(y), expect, 0.0);
  }
  nn::MaxPool2d pool(3, 2, 1);
  Tensor leaf = testing::random_leaf({1, 2, 5, 4}, 3);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return pool(in[0]); }, {leaf}));
  EXPECT_EQ(pool.str(),
            "MaxPool2d(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), ceil_mode=false)");
  EXPECT_EQ(nn::MaxPool2d(2).stride, nn::Size2(2));
}

TEST(NnPooling, AvgPoolMatchesNaiveLoopWithAndWithoutPadCounting) {
  Generator g(4);
  Tensor x = randn({1, 2, 6, 5}, DType::Float64, kCPU, &g);
  Image im = image(x);
  for (bool count_pad : {true, false}) {
    nn::AvgPool2d pool(3, 2, 1, false, count_pad);
    Tensor y = pool(x);
    const int64_t OH = pooled(6, 3, 2, 1, 1, false), OW = pooled(5, 3, 2, 1, 1, false);
    ASSERT_EQ(y.shape(), (Shape{1, 2, OH, OW}));
    std::vector<double> expect;
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          int64_t valid = 0;
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              int64_t h = oh * 2 - 1 + i, w = ow * 2 - 1 + j;
              if (im.inside(h, w)) {
                s += im.at(0, ch, h, w);
                ++valid;
              }
            }
          expect.push_back(s / double(count_pad ? 9 : valid));
        }
    expect_close(to_vector<double>(y), expect);
  }
  nn::AvgPool2d pool(2);
  Tensor leaf = testing::random_leaf({1, 2, 4, 4}, 5);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return pool(in[0].transpose(2, 3)); }, {leaf}));
  EXPECT_EQ(pool.str(),
            "AvgPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=false, count_include_pad=true)");
  try {
    nn::AvgPool2d bad(2, 2, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("padding (2, 2) must be non-negative and at most half the kernel size (2, 2)"));
  }
}

TEST(NnPooling, AdaptiveAvgPoolAveragesItsWindows) {
  Generator g(6);
  Tensor x = randn({2, 3, 5, 7}, DType::Float64, kCPU, &g);
  Image im = image(x);
  nn::AdaptiveAvgPool2d pool(nn::Size2{2, 3});
  Tensor y = pool(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 2, 3}));
  std::vector<double> expect;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          int64_t h0 = i * 5 / 2, h1 = ((i + 1) * 5 + 1) / 2, w0 = j * 7 / 3, w1 = ((j + 1) * 7 + 2) / 3;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += im.at(n, ch, h, w);
          expect.push_back(s / double((h1 - h0) * (w1 - w0)));
        }
  expect_close(to_vector<double>(y), expect);
  nn::AdaptiveAvgPool2d global(1);
  EXPECT_TRUE(allclose(global(x), x.mean({2, 3}, true), 1e-12, 1e-12));
  Tensor leaf = testing::random_leaf({1, 1, 5, 4}, 7);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return pool(in[0]); }, {leaf}));
  EXPECT_EQ(pool.str(), "AdaptiveAvgPool2d(output_size=(2, 3))");
}

}  // namespace
}  // namespace ember
