// Memory formats on the CPU: channels-last strides and the tests of a layout
// (is_contiguous, suggest_memory_format), the copies that keep or set one
// (contiguous, to, clone, the *_like factories), the elementwise ops keeping
// a channels-last input's layout and walking it flat, and convolution,
// batch norm, pooling and dropout on channels-last tensors: the values and
// gradients of NCHW, channels-last outputs, gradients by finite differences.
// Module::to(ChannelsLast) with an optimizer step is in
// tests/nn/channels_last_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/core/ops/elementwise_args.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

// The largest |a - b| over the elements (logical order, any layouts).
double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> x = to_vector<double>(a.to(DType::Float64)), y = to_vector<double>(b.to(DType::Float64));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).set_requires_grad();
}

TEST(MemoryFormat, ChannelsLastStridesAndTests) {
  Tensor x = empty({2, 3, 4, 5}, DType::Float32, kCPU, kCL);
  EXPECT_EQ(x.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_FALSE(x.is_contiguous());
  EXPECT_TRUE(x.is_contiguous(kCL));
  EXPECT_TRUE(x.is_non_overlapping_and_dense());
  EXPECT_EQ(x.suggest_memory_format(), kCL);

  Tensor c = randn({2, 3, 4, 5});
  EXPECT_EQ(c.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_FALSE(c.is_contiguous(kCL));
  Tensor cl = c.contiguous(kCL);
  EXPECT_EQ(cl.strides(), x.strides());
  EXPECT_EQ(to_vector<float>(cl), to_vector<float>(c));
  EXPECT_TRUE(cl.contiguous(kCL).is_same(cl));
  Tensor back = cl.contiguous();
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(to_vector<float>(back), to_vector<float>(c));
  // A permute of an NHWC tensor is a channels-last view.
  Tensor nhwc = randn({2, 4, 5, 3});
  EXPECT_EQ(nhwc.permute({0, 3, 1, 2}).suggest_memory_format(), kCL);
  // Not dense: a slice along W.
  EXPECT_FALSE(cl.narrow(3, 1, 3).is_non_overlapping_and_dense());
  EXPECT_FALSE(c.expand({2, 2, 3, 4, 5}).is_non_overlapping_and_dense());
}

TEST(MemoryFormat, AnEmptyTensorIsChannelsLastOnlyWithItsStrides) {
  // Contiguous whatever its strides, as in PyTorch; channels-last only when
  // made so, and contiguous(ChannelsLast) of it is then itself.
  Tensor made_contiguous = empty({0, 3, 4, 4});
  EXPECT_TRUE(made_contiguous.is_contiguous());
  EXPECT_FALSE(made_contiguous.is_contiguous(kCL));
  Tensor made_cl = empty({0, 3, 4, 4}, DType::Float32, kCPU, kCL);
  EXPECT_TRUE(made_cl.is_contiguous(kCL));
  EXPECT_TRUE(made_cl.contiguous(kCL).is_same(made_cl));
  EXPECT_TRUE(empty({2, 0, 4, 4}, DType::Float32, kCPU, kCL).is_contiguous(kCL));
  EXPECT_TRUE(made_contiguous.contiguous(kCL).is_contiguous(kCL));
}

TEST(MemoryFormat, OneChannelTiesAreBrokenByTheExactStrides) {
  // (N, 1, H, W) lies the same in both formats; its strides say which it is.
  Tensor one = randn({2, 1, 4, 5});
  EXPECT_TRUE(one.is_contiguous(kCL));
  EXPECT_EQ(one.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_TRUE(one.contiguous(kCL).is_same(one));
  Tensor tagged = one.to(kCL);
  EXPECT_EQ(tagged.strides(), (Shape{20, 1, 5, 1}));
  EXPECT_EQ(tagged.suggest_memory_format(), kCL);
  EXPECT_EQ(to_vector<float>(tagged), to_vector<float>(one));
  EXPECT_TRUE(tagged.to(kCL).is_same(tagged));
  EXPECT_EQ(tagged.to(MemoryFormat::Contiguous).strides(), (Shape{20, 20, 5, 1}));
}

TEST(MemoryFormat, ErrorsNameTheShapeAndFormat) {
  EXPECT_TRUE(throws_with(
      [] {
        empty({2, 3, 4}, DType::Float32, kCPU, kCL);
      },
      {"empty", "channels_last", "4-D", "[2, 3, 4]"}));
  EXPECT_TRUE(throws_with([] { randn({2, 3}).contiguous(kCL); }, {"contiguous", "channels_last", "[2, 3]"}));
  EXPECT_TRUE(throws_with([] { randn({2, 3}).is_contiguous(MemoryFormat::Preserve); }, {"preserve"}));
  EXPECT_TRUE(throws_with(
      [] {
        empty_strided({2, 3}, {1, 1}, DType::Float32, kCPU);
      },
      {"empty_strided", "[1, 1]", "[2, 3]", "dense"}));
}

TEST(MemoryFormat, CopiesAndLikeFactoriesKeepTheLayout) {
  Tensor x = randn({2, 3, 4, 5}).contiguous(kCL);
  for (const Tensor& t : {x.clone(), x.to(DType::Float64), x.to(DType::Float16), empty_like(x), zeros_like(x),
                          ones_like(x), full_like(x, 2.5), rand_like(x), randn_like(x)}) {
    EXPECT_EQ(t.strides(), x.strides());
  }
  EXPECT_EQ(to_vector<float>(x.clone()), to_vector<float>(x));
  EXPECT_EQ(to_vector<double>(x.to(DType::Float64)), to_vector<double>(x.contiguous().to(DType::Float64)));
  std::vector<float> ones = to_vector<float>(ones_like(x));
  EXPECT_TRUE(std::all_of(ones.begin(), ones.end(), [](float v) { return v == 1.0f; }));
  // Any dense order is kept, as PyTorch's preserve_format does.
  Tensor t = randn({3, 4}).t();
  EXPECT_EQ(t.clone().strides(), t.strides());
  EXPECT_EQ(to_vector<float>(t.clone()), to_vector<float>(t));
  // A layout that is not dense gets its suggested format's strides.
  EXPECT_TRUE(x.narrow(3, 1, 3).clone().is_contiguous(kCL));
  EXPECT_TRUE(randn({2, 3, 4, 5}).narrow(3, 1, 3).clone().is_contiguous());
  // The copies are differentiable.
  Tensor l = leaf({2, 3, 2, 2}, 1);
  (l.to(kCL) * 3.0).sum().backward();
  EXPECT_EQ(to_vector<double>(l.grad()), std::vector<double>(24, 3.0));
}

TEST(MemoryFormat, ElementwiseOpsKeepChannelsLastAndWalkItFlat) {
  Tensor c = randn({2, 3, 4, 5});
  Tensor x = c.contiguous(kCL);
  Tensor bias = randn({1, 3, 1, 1});
  for (const Tensor& y : {relu(x), x * 2.0, x + bias, bias + x, x + x, where(gt(x, 0), x, bias)}) {
    EXPECT_EQ(y.suggest_memory_format(), kCL);
  }
  EXPECT_EQ(to_vector<float>(relu(x)), to_vector<float>(relu(c)));
  EXPECT_EQ(to_vector<float>(x + bias), to_vector<float>(c + bias));
  EXPECT_EQ(to_vector<float>(c + x), to_vector<float>(c + c));
  // The first input of the output's shape decides: contiguous first, contiguous output.
  EXPECT_TRUE((c + x).is_contiguous());
  EXPECT_TRUE(gt(x, 0.0).is_contiguous(kCL));
  // A broadcast operand of the output's shape does not decide the layout
  // (sum's backward hands on an expanded gradient, as here).
  EXPECT_TRUE((bias.expand(x.shape()) + x).is_contiguous(kCL));
  // A slice of a channels-last tensor (some channels, or a crop) is not one
  // dense block, and still gives a channels-last output.
  for (const auto& [slice, twin] :
       {std::pair{x.narrow(1, 1, 2), c.narrow(1, 1, 2)}, std::pair{x.narrow(3, 1, 3), c.narrow(3, 1, 3)}}) {
    ASSERT_FALSE(slice.is_non_overlapping_and_dense());
    EXPECT_TRUE(relu(slice).is_contiguous(kCL));
    EXPECT_TRUE((slice * 2.0).is_contiguous(kCL));
    EXPECT_EQ(to_vector<float>(relu(slice)), to_vector<float>(relu(twin)));
  }
  // Dims in the output's memory order merge into one flat dim.
  Tensor y = empty_like(x);
  ElementwiseArgs args = make_elementwise_args("test", y, {&x, &x});
  EXPECT_EQ(args.ndim, 1);
  EXPECT_TRUE(args.contiguous);
  // An in-place op on a channels-last tensor, with a contiguous operand.
  Tensor z = x.clone();
  z.add_(c);
  EXPECT_EQ(z.strides(), x.strides());
  EXPECT_EQ(to_vector<float>(z), to_vector<float>(c * 2.0));
}

struct ConvCase {
  Shape x, w;
  Int2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> all = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, false},
      {{3, 1, 6, 5}, {5, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},  // one input channel
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 6, true},   // depthwise
      {{2, 5, 4, 3}, {7, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // pointwise
  };
  return all;
}

TEST(MemoryFormat, ConvolutionInChannelsLastMatchesNchw) {
  for (size_t k = 0; k < conv_cases().size(); ++k) {
    const ConvCase& c = conv_cases()[k];
    Tensor x = leaf(c.x, 10 + k), w = leaf(c.w, 20 + k), b = c.bias ? leaf({c.w[0]}, 30 + k) : Tensor();
    auto run = [&](bool x_cl, bool w_cl) {
      Tensor xi = x_cl ? x.to(kCL) : x, wi = w_cl ? w.to(kCL) : w;
      Tensor y = conv2d(xi, wi, b, c.stride, c.padding, c.dilation, c.groups);
      EXPECT_EQ(y.suggest_memory_format(), x_cl || w_cl ? kCL : MemoryFormat::Contiguous) << "case " << k;
      Generator g(40 + k);
      TensorList grads = autograd::grad({y}, b.defined() ? TensorList{x, w, b} : TensorList{x, w},
                                        {randn(y.shape(), DType::Float64, kCPU, &g)});
      grads.insert(grads.begin(), y.detach());
      return grads;
    };
    TensorList ref = run(false, false);
    for (auto [x_cl, w_cl] : {std::pair{true, true}, {true, false}, {false, true}}) {
      TensorList got = run(x_cl, w_cl);
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_LT(max_diff(got[i], ref[i]), 1e-12) << "case " << k << " output " << i << " x_cl " << x_cl;
      }
    }
  }
}

TEST(MemoryFormat, ConvolutionGradientsInChannelsLastByFiniteDifferences) {
  const ConvCase& c = conv_cases()[1];
  Tensor x = leaf(c.x, 1), w = leaf(c.w, 2), b = leaf({c.w[0]}, 3);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) {
        return conv2d(in[0].to(kCL), in[1].to(kCL), in[2], c.stride, c.padding, c.dilation, c.groups);
      },
      {x, w, b}));
}

TEST(MemoryFormat, ConvolutionWeightGradientOfAChannelsLastWeightIsChannelsLast) {
  Tensor w = leaf({4, 3, 3, 3}, 4).detach().to(kCL).set_requires_grad();
  Tensor y = conv2d(leaf({2, 3, 6, 6}, 5).detach(), w, {}, {1, 1}, {1, 1});
  y.sum().backward();
  EXPECT_EQ(w.grad().strides(), w.strides());
}

TEST(MemoryFormat, BatchNormInChannelsLastMatchesNchw) {
  for (bool training : {true, false}) {
    Tensor x = leaf({3, 4, 5, 6}, 1), w = leaf({4}, 2), b = leaf({4}, 3);
    auto run = [&](bool cl, Tensor& rm, Tensor& rv) {
      Tensor y = batch_norm(cl ? x.to(kCL) : x, rm, rv, w, b, training, 0.1, 1e-5);
      EXPECT_EQ(y.suggest_memory_format(), cl ? kCL : MemoryFormat::Contiguous);
      Generator g(9);
      TensorList grads = autograd::grad({y}, {x, w, b}, {randn(y.shape(), DType::Float64, kCPU, &g)});
      grads.insert(grads.begin(), y.detach());
      return grads;
    };
    Tensor rm0 = full({4}, 0.5, DType::Float64), rv0 = full({4}, 2.0, DType::Float64);
    Tensor rm1 = rm0.clone(), rv1 = rv0.clone();
    TensorList ref = run(false, rm0, rv0), got = run(true, rm1, rv1);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(max_diff(got[i], ref[i]), 1e-12) << "output " << i;
    EXPECT_LT(max_diff(rm1, rm0), 1e-14);
    EXPECT_LT(max_diff(rv1, rv0), 1e-14);
  }
}

TEST(MemoryFormat, BatchNormGradientsInChannelsLastByFiniteDifferences) {
  Tensor x = leaf({2, 3, 3, 4}, 1), w = leaf({3}, 2), b = leaf({3}, 3);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return batch_norm(in[0].to(kCL), {}, {}, in[1], in[2], true, 0.1, 1e-5); },
      {x, w, b}));
}

TEST(MemoryFormat, PoolingInChannelsLastMatchesNchw) {
  Tensor x = leaf({2, 3, 9, 8}, 1);
  const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) {
        return max_pool2d(t, {2, 2});
      },
      [](const Tensor& t) {
        return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
      },
      [](const Tensor& t) {
        return max_pool2d(t, {3, 2}, {1, 2}, {1, 0}, {2, 1}, false);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, true, false);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {2, 2});
      },
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {4, 3});
      },
  };
  for (size_t k = 0; k < pools.size(); ++k) {
    auto run = [&](bool cl) {
      Tensor y = pools[k](cl ? x.to(kCL) : x);
      EXPECT_EQ(y.suggest_memory_format(), cl ? kCL : MemoryFormat::Contiguous) << "pool " << k;
      Generator g(7);
      TensorList grads = autograd::grad({y}, {x}, {randn(y.shape(), DType::Float64, kCPU, &g)});
      return TensorList{y.detach(), grads[0]};
    };
    TensorList ref = run(false), got = run(true);
    EXPECT_EQ(max_diff(got[0], ref[0]), 0.0) << "pool " << k;
    EXPECT_EQ(max_diff(got[1], ref[1]), 0.0) << "pool " << k;
    EXPECT_TRUE(
        testing::gradcheck([&](const TensorList& in) { return pools[k](in[0].to(kCL)); }, {leaf({1, 2, 7, 6}, 3 + k)}))
        << "pool " << k;
  }
}

TEST(MemoryFormat, PoolingBackwardTakesAnNchwGradientOfAChannelsLastOutput) {
  // Flatten copies a channels-last tensor into NCHW, so the gradient that
  // reaches the pool's backward is NCHW.
  Tensor x = leaf({2, 3, 6, 6}, 2);
  Tensor y = max_pool2d(x.to(kCL), {2, 2}).flatten(1);
  Tensor y_ref = max_pool2d(x, {2, 2}).flatten(1);
  Generator g(3);
  Tensor gy = randn(y.shape(), DType::Float64, kCPU, &g);
  EXPECT_EQ(max_diff(autograd::grad({y}, {x}, {gy})[0], autograd::grad({y_ref}, {x}, {gy})[0]), 0.0);
}

TEST(MemoryFormat, DropoutMasksAChannelsLastGradientAsItsForward) {
  Tensor x = leaf({2, 3, 4, 5}, 1).detach().to(kCL).set_requires_grad();
  Tensor y = dropout(x, 0.5, true);
  EXPECT_EQ(y.suggest_memory_format(), kCL);
  Generator g(2);
  Tensor gy = randn(y.shape(), DType::Float64, kCPU, &g);  // contiguous, unlike y
  Tensor gx = autograd::grad({y}, {x}, {gy})[0];
  std::vector<double> yv = to_vector<double>(y), xv = to_vector<double>(x), gyv = to_vector<double>(gy),
                      gxv = to_vector<double>(gx);
  for (size_t i = 0; i < yv.size(); ++i) {
    const bool kept = yv[i] != 0.0;
    EXPECT_DOUBLE_EQ(yv[i], kept ? xv[i] * 2.0 : 0.0) << i;
    EXPECT_DOUBLE_EQ(gxv[i], kept ? gyv[i] * 2.0 : 0.0) << i;
  }
}

TEST(MemoryFormat, AccumulatedGradientsAreLaidOutAsTheirLeaf) {
  Tensor w = leaf({2, 3, 4, 4}, 1).detach().to(kCL).set_requires_grad();
  // The gradient arrives contiguous (through contiguous()'s copy).
  (w.contiguous() * 2.0).sum().backward();
  EXPECT_EQ(w.grad().strides(), w.strides());
  (w.contiguous() * 2.0).sum().backward();  // accumulated in place
  EXPECT_EQ(w.grad().strides(), w.strides());
  EXPECT_EQ(to_vector<double>(w.grad()), std::vector<double>(96, 4.0));
  // Under create_graph the first gradient is a copy with history, laid out
  // as the leaf too: d/dv of sum(v^2) is 2v, whose gradient in turn is 2.
  Tensor v = leaf({2, 3, 4, 4}, 2).detach().to(kCL).set_requires_grad();
  Tensor vc = v.contiguous();
  (vc * vc).sum().backward(Tensor(), false, /*create_graph=*/true);
  EXPECT_EQ(v.grad().strides(), v.strides());
  EXPECT_EQ(to_vector<double>(v.grad()), to_vector<double>(v * 2.0));
  // Any dense layout of the leaf, not only the formats' (a transposed one).
  Tensor t = leaf({4, 3}, 3).t().detach().set_requires_grad();
  (t * t).sum().backward(Tensor(), false, /*create_graph=*/true);
  EXPECT_EQ(t.grad().strides(), t.strides());
  Tensor first = v.grad();
  v.set_grad(Tensor());
  first.sum().backward();
  EXPECT_EQ(to_vector<double>(v.grad()), std::vector<double>(96, 2.0));
}

}  // namespace
}  // namespace ember
