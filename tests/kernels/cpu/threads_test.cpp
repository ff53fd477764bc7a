// The CPU kernels on several threads: each op's results (and gradients) at
// 2 and 3 threads against 1 thread, and run to run at a fixed count.
// Elementwise ops, GEMM and every kernel that splits its outputs must match
// 1 thread exactly; reductions that split one long reduction may round
// differently (a tight tolerance) but must repeat bit for bit at a count.
// Sizes are above the kernels' grains, so the pool really runs. The
// convolution's weight gradient, summed over uneven chunks of images, is
// also checked against its definition in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/ember.h"

namespace ember {
namespace {

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved_); }

 private:
  int saved_;
};

using Results = std::vector<std::vector<double>>;

Results run_at(int threads, const std::function<std::vector<Tensor>()>& op) {
  ThreadCount count(threads);
  Results out;
  for (const Tensor& t : op()) out.push_back(to_vector<double>(t.to(DType::Float64)));
  return out;
}

// rtol and atol 0: every value equal to 1 thread's; else within
// atol + rtol * (the largest magnitude of that result).
void expect_same_across_threads(const std::function<std::vector<Tensor>()>& op, double rtol = 0, double atol = 0) {
  const Results one = run_at(1, op);
  for (int threads : {2, 3}) {
    const Results r = run_at(threads, op);
    EXPECT_EQ(run_at(threads, op), r) << "not bit-identical run to run at " << threads << " threads";
    ASSERT_EQ(r.size(), one.size());
    for (size_t k = 0; k < r.size(); ++k) {
      ASSERT_EQ(r[k].size(), one[k].size());
      double scale = 0;
      for (double v : one[k]) scale = std::max(scale, std::abs(v));
      for (size_t i = 0; i < r[k].size(); ++i) {
        if (rtol == 0 && atol == 0) {
          ASSERT_EQ(r[k][i], one[k][i]) << "result " << k << " element " << i << " at " << threads << " threads";
        } else {
          ASSERT_NEAR(r[k][i], one[k][i], atol + rtol * scale)
              << "result " << k << " element " << i << " at " << threads << " threads";
        }
      }
    }
  }
}

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::Float32) {
  Generator gen(seed);
  return randn(shape, dtype, kCPU, &gen);
}

TEST(CpuThreads, ElementwiseContiguousStridedBroadcastAndRandom) {
  const Tensor a = random({300, 257}, 1), b = random({257}, 2), c = random({257, 300}, 3);
  expect_same_across_threads([&] {
    Generator gen(7);
    return std::vector<Tensor>{(a * b + 1.5).exp(),   // contiguous and broadcast
                               a + c.t(),             // strided
                               a.to(DType::Float16),  // cast
                               where(a > 0, a, b),    // where and compare
                               rand({300, 257}, DType::Float32, kCPU, &gen),
                               randn({7, 300, 33}, DType::Float32, kCPU, &gen).transpose(0, 2).contiguous()};
  });
}

TEST(CpuThreads, ReductionsOverOutputsMatchExactly) {
  const Tensor x = random({64, 1000}, 4), y = random({40, 3000}, 5, DType::Float64);
  expect_same_across_threads([&] {
    return std::vector<Tensor>{sum(x, {1}),  mean(x, {0}),      var(y, {1}), amax(x, {1}),
                               argmax(x, 1), logsumexp(x, {1}), sum(y, {0})};
  });
}

TEST(CpuThreads, LongReductionsRepeatAtACountAndStayClose) {
  // One thread sums 2^18 floats in order, with an error near n * eps * |x|
  // on the worst partial sum; a split sum is closer to the exact one.
  const Tensor x = random({1 << 18}, 6), y = random({100000, 3}, 7), h = random({70000}, 8).to(DType::BFloat16);
  expect_same_across_threads(
      [&] { return std::vector<Tensor>{sum(x), mean(x), var(x), sum(y, {0}), var(y, {0}, 0), mean(h)}; }, 1e-5, 0.05);
  // Max, Min and their indices merge exactly.
  expect_same_across_threads([&] {
    return std::vector<Tensor>{amax(x), argmax(x), amax(y, {0}), argmax(y.t().contiguous(), 1)};
  });
}

TEST(CpuThreads, MatmulLinearAndTheirGradients) {
  const Tensor a = random({96, 200}, 9), b = random({200, 72}, 10), w = random({48, 200}, 11), bias = random({48}, 12),
               batched = random({3, 40, 64}, 13), wide = random({20, 500}, 14), odd = random({131, 77}, 15),
               odd2 = random({77, 203}, 16);
  expect_same_across_threads([&] {
    Tensor x = a.detach().set_requires_grad(), wt = w.detach().set_requires_grad(),
           bt = bias.detach().set_requires_grad();
    Tensor y = linear(x, wt, bt);
    y.backward(ones_like(y));
    return std::vector<Tensor>{matmul(a, b),
                               matmul(b.t(), a.t()),
                               matmul(batched, batched.transpose(1, 2)),
                               matmul(wide.t(), wide),
                               matmul(odd, odd2),
                               matmul(random({70000, 5}, 17), random({5, 1}, 18)),
                               matmul(odd2.t(), odd.t()),
                               y,
                               x.grad(),
                               wt.grad(),
                               bt.grad()};
  });
}

// A product cut into rectangles of rows and columns of C, one per thread
// (64 x 3136 x 128, the CNN's first Linear, is two 32 x 128 halves at 2
// threads; a 32 x 256 C is 2 x 2 blocks at 4): at 1 to 4 threads each
// element within k * 2^-24 * (|A| |B|) of the float64 product (the float32
// rounding bound), the same as 1 thread's and the same run to run. Plain,
// transposed, batched and tiny shapes.
TEST(CpuThreads, GemmBlocksOfRowsAndColumnsMatchFloat64) {
  struct Case {
    Tensor a, b;  // a @ b
  };
  const Tensor x = random({64, 3136}, 40), w = random({128, 3136}, 41), wide = random({32, 1000}, 42),
               tall = random({1000, 256}, 43);
  const std::vector<Case> cases = {
      {x, w.t()},                                               // linear's forward, op(B) transposed
      {random({64, 128}, 44), w},                               // its input gradient
      {wide, tall},                                             // 2 x 2 blocks at 4 threads
      {tall.t(), wide.t()},                                     // both operands transposed
      {random({2, 96, 1500}, 45), random({2, 1500, 100}, 46)},  // batched (2 < 3 threads)
      {random({7, 1000}, 47), random({1000, 5}, 48)},
      {random({9, 2600}, 51), random({2600, 11}, 52)},                                       // a small C over a long k
      {random({2, 1300, 7}, 53).transpose(1, 2), random({2, 3, 1300}, 54).transpose(1, 2)},  // batched, transposed
      {random({1, 1}, 49), random({1, 1}, 50)},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Tensor& a = cases[i].a;
    const Tensor& b = cases[i].b;
    std::vector<double> reference, bound;
    {
      ThreadCount one(1);
      const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
      reference = to_vector<double>(matmul(a64, b64));
      bound = to_vector<double>(matmul(a64.abs(), b64.abs()));
    }
    const double k = double(a.shape().back()), u = std::ldexp(1.0, -24);
    std::vector<double> at_one;
    for (int threads : {1, 2, 3, 4}) {
      ThreadCount count(threads);
      const std::vector<double> first = to_vector<double>(matmul(a, b).to(DType::Float64));
      EXPECT_EQ(to_vector<double>(matmul(a, b).to(DType::Float64)), first)
          << "case " << i << " not bit-identical run to run at " << threads << " threads";
      if (threads == 1) at_one = first;
      EXPECT_EQ(first, at_one) << "case " << i << " at " << threads << " threads differs from 1 thread";
      ASSERT_EQ(first.size(), reference.size());
      for (size_t e = 0; e < first.size(); ++e) {
        ASSERT_NEAR(first[e], reference[e], k * u * bound[e] + 1e-30)
            << "case " << i << " element " << e << " at " << threads << " threads";
      }
    }
  }
}

TEST(CpuThreads, DropoutAdamAndSgdSteps) {
  const Tensor x = random({300, 257}, 20), w0 = random({400, 300}, 21);
  expect_same_across_threads([&] {
    Generator gen(3);
    Tensor w = w0.clone().set_requires_grad(), u = w0.clone().set_requires_grad();
    optim::Adam adam({w});
    optim::SGD sgd({u}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      adam.zero_grad();
      sgd.zero_grad();
      sum(square(w)).backward();
      sum(square(u)).backward();
      adam.step();
      sgd.step();
    }
    return std::vector<Tensor>{dropout(x, 0.3, true, &gen), w.detach(), u.detach()};
  });
}

// One fused step over several tensors runs them as one range cut into
// chunks that cross tensor boundaries (an empty tensor and tiny ones
// among them): each tensor's update must be the one an optimizer of that
// tensor alone makes, at 1 and 3 threads, also when one tensor's step count
// lags (it had no gradient at the second step).
TEST(CpuThreads, FusedStepsOverManyTensorsMatchOneOptimizerPerTensor) {
  const std::vector<Tensor> init = {random({400, 300}, 60), zeros({0}), random({7}, 61), random({1000, 33}, 62),
                                    random({5}, 63)};
  auto train = [&](bool one_optimizer, int kind) {
    std::vector<Tensor> params;
    for (const Tensor& t : init) params.push_back(t.clone().set_requires_grad());
    std::vector<std::unique_ptr<optim::Optimizer>> opts;
    auto make = [&](TensorList ps) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.weight_decay = 0.01, .amsgrad = true});
      if (kind == 1) return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01});
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    };
    if (one_optimizer) opts.push_back(make(params));
    else
      for (const Tensor& p : params) opts.push_back(make({p}));
    for (int step = 0; step < 3; ++step) {
      for (auto& o : opts) o->zero_grad();
      Tensor loss = zeros({});
      for (size_t i = 0; i < params.size(); ++i) {
        if (step == 1 && i == 2) continue;  // no gradient: its state does not advance
        loss = loss + sum(square(params[i])) * double(i + 1);
      }
      loss.backward();
      for (auto& o : opts) o->step();
    }
    std::vector<Tensor> out;
    for (const Tensor& p : params) out.push_back(p.detach());
    return out;
  };
  for (int kind = 0; kind < 3; ++kind) {
    for (int threads : {1, 3}) {
      ThreadCount count(threads);
      const std::vector<Tensor> fused = train(true, kind), apart = train(false, kind);
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_EQ(to_vector<double>(fused[i].to(DType::Float64)), to_vector<double>(apart[i].to(DType::Float64)))
            << "optimizer " << kind << ", tensor " << i << ", " << threads << " threads";
      }
    }
  }
}

// clip_grad_norm_ scales every gradient in one region too, cut across
// tensor boundaries: each gradient is its old value times max_norm /
// (total + 1e-6), and the same at 1 and 3 threads.
TEST(CpuThreads, ClipGradNormScalesEveryTensorAcrossChunks) {
  const std::vector<Tensor> grads = {random({400, 300}, 70), zeros({0}), random({7}, 71), random({1000, 33}, 72)};
  expect_same_across_threads([&] {
    std::vector<Tensor> params;
    for (const Tensor& g : grads) {
      params.push_back(zeros_like(g).set_requires_grad());
      params.back().set_grad(g.clone());
    }
    const double total = optim::clip_grad_norm_(params, 1.0).item<float>();
    const double coef = 1.0 / (total + 1e-6);
    std::vector<Tensor> out;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<double> before = to_vector<double>(grads[i].to(DType::Float64));
      const std::vector<double> after = to_vector<double>(params[i].grad().to(DType::Float64));
      for (size_t e = 0; e < after.size(); ++e) {
        EXPECT_NEAR(after[e], before[e] * coef, 1e-6 * std::abs(before[e] * coef))
            << "tensor " << i << " element " << e;
      }
      out.push_back(params[i].grad());
    }
    return out;
  });
}

TEST(CpuThreads, ConvBatchNormPoolSoftmaxLayerNormCrossEntropy) {
  const Tensor img = random({8, 3, 28, 28}, 15), kernel = random({16, 3, 3, 3}, 16), kb = random({16}, 17);
  const Tensor logits = random({512, 100}, 18);
  Tensor target = argmax(random({512, 100}, 19), 1);
  expect_same_across_threads(
      [&] {
        Tensor x = img.detach().set_requires_grad(), w = kernel.detach().set_requires_grad(),
               wb = kb.detach().set_requires_grad();
        Tensor y = conv2d(x, w, wb, 1, 1);
        Tensor rm = zeros({16}), rv = ones({16});
        Tensor bn = batch_norm(y, rm, rv, Tensor(), Tensor(), true);
        Tensor pooled = max_pool2d(relu(bn), 2);
        Tensor l = logits.detach().set_requires_grad();
        Tensor loss = cross_entropy_loss(l, target, -100, 0.0, Reduction::Mean) + mean(square(pooled));
        loss.backward();
        return std::vector<Tensor>{y,
                                   bn,
                                   rm,
                                   rv,
                                   pooled,
                                   x.grad(),
                                   w.grad(),
                                   wb.grad(),
                                   l.grad(),
                                   softmax(logits, 1),
                                   log_softmax(logits, 0),
                                   layer_norm(logits, {100})};
      },
      1e-5);
}

// A convolution's weight gradient by its definition, summed in double:
// dw[o, i, p, q] = sum over b, y, x of gy[b, o, y, x] * x[b, g * c_in/groups + i,
// y * stride - padding + p, x * stride - padding + q] (no dilation).
std::vector<double> naive_weight_gradient(const Tensor& xt, const Tensor& gyt, const Shape& w_shape, int64_t stride,
                                          int64_t padding, int64_t groups) {
  const std::vector<double> x = to_vector<double>(xt.to(DType::Float64)),
                            gy = to_vector<double>(gyt.to(DType::Float64));
  const int64_t n = xt.size(0), c_in = xt.size(1), h = xt.size(2), width = xt.size(3);
  const int64_t c_out = w_shape[0], cin_g = w_shape[1], kh = w_shape[2], kw = w_shape[3];
  const int64_t oh = gyt.size(2), ow = gyt.size(3), cout_g = c_out / groups;
  std::vector<double> dw(size_t(c_out * cin_g * kh * kw), 0.0);
  for (int64_t o = 0; o < c_out; ++o)
    for (int64_t i = 0; i < cin_g; ++i)
      for (int64_t p = 0; p < kh; ++p)
        for (int64_t q = 0; q < kw; ++q) {
          double acc = 0;
          const int64_t c = o / cout_g * cin_g + i;
          for (int64_t b = 0; b < n; ++b)
            for (int64_t y = 0; y < oh; ++y)
              for (int64_t xx = 0; xx < ow; ++xx) {
                const int64_t iy = y * stride - padding + p, ix = xx * stride - padding + q;
                if (iy < 0 || iy >= h || ix < 0 || ix >= width) continue;
                acc += gy[size_t(((b * c_out + o) * oh + y) * ow + xx)] *
                       x[size_t(((b * c_in + c) * h + iy) * width + ix)];
              }
          dw[size_t(((o * cin_g + i) * kh + p) * kw + q)] = acc;
        }
  return dw;
}

// The weight gradient sums over the images in chunks, one per thread, each
// into a partial added in chunk order: with 7 images the chunks are uneven
// (4 + 3 at 2 threads, 3 + 2 + 2 at 3). Bit for bit the same run to run at
// a count, and the float64 sum within float32 rounding at every count.
TEST(CpuThreads, ConvWeightGradientRepeatsAtACountAndMatchesFloat64) {
  struct Config {
    Shape x, w;
    int64_t stride, padding, groups;
  };
  const std::vector<Config> configs = {
      {{7, 8, 15, 15}, {16, 8, 3, 3}, 1, 1, 1},  // "same" 3x3, as the CNN's
      {{7, 8, 21, 21}, {16, 4, 3, 3}, 2, 1, 2},  // strided, two groups
  };
  for (const Config& c : configs) {
    const Tensor x = random(c.x, 30), w0 = random(c.w, 31);
    const Shape y_shape = conv2d(x, w0, {}, c.stride, c.padding, 1, c.groups).shape();
    const Tensor gy = random(y_shape, 32);
    const std::vector<double> reference = naive_weight_gradient(x, gy, c.w, c.stride, c.padding, c.groups);
    double scale = 0;
    for (double v : reference) scale = std::max(scale, std::abs(v));
    auto weight_gradient = [&] {
      Tensor w = w0.detach().set_requires_grad();
      conv2d(x, w, {}, c.stride, c.padding, 1, c.groups).backward(gy);
      return to_vector<double>(w.grad().to(DType::Float64));
    };
    for (int threads : {1, 2, 3}) {
      ThreadCount count(threads);
      const std::vector<double> first = weight_gradient();
      EXPECT_EQ(weight_gradient(), first) << "not bit-identical run to run at " << threads << " threads";
      ASSERT_EQ(first.size(), reference.size());
      for (size_t i = 0; i < first.size(); ++i) {
        ASSERT_NEAR(first[i], reference[i], 1e-5 * scale) << "element " << i << " at " << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace ember
