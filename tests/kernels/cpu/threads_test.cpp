// The CPU kernels on several threads: each op's results (and gradients) at
// 2 and 3 threads against 1 thread, and run to run at a fixed count.
// Elementwise ops, GEMM and every kernel that splits its outputs must match
// 1 thread exactly; reductions that split one long reduction may round
// differently (a tight tolerance) but must repeat bit for bit at a count.
// Sizes are above the kernels' grains, so the pool really runs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

}  // namespace
}  // namespace ember
